//! For the binaries' tests: the hostile places a command's output can go
//! (a pipe whose reader is gone, a full disk) and a run that must end
//! within a bound. Used by each binary's `tests/hostile.rs`.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A pipe whose read end is already closed: every write to it fails with
/// EPIPE (the reader of `cmd | head` has gone).
pub fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer.into()
}

/// `/dev/full`: every write fails with ENOSPC, as on a full disk. The
/// system's own device node is opened for writing only; nothing replaces it.
pub fn full_disk() -> Stdio {
    std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full").into()
}

/// Runs `command` as the caller set up its streams (piped ones are
/// collected) and fails the test when it has not ended within `bound`: a
/// hostile input must not keep a binary busy for ever.
pub fn run_within(command: &mut Command, bound: Duration) -> Output {
    let what = format!("{command:?}");
    let child = command.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    // Collected on a thread, so a chatty child never blocks on a full pipe.
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(bound) {
        Ok(output) => output.unwrap_or_else(|e| panic!("{what}: {e}")),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what} still ran after {bound:?}");
        }
    }
}

/// What every hostile case checks: no panic, no backtrace, no exit 101.
pub fn assert_no_panic(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("stack backtrace") && output.status.code() != Some(101),
        "{what} panicked: {stderr}"
    );
}
