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

/// `command` with its stdout sent to `to` (a table row in one line).
pub fn stdout_to(mut command: Command, to: Stdio) -> Command {
    command.stdout(to);
    command
}

/// `command` with its stderr sent to `to`.
pub fn stderr_to(mut command: Command, to: Stdio) -> Command {
    command.stderr(to);
    command
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

/// Runs one hostile case: it must end within `bound`, without a panic (no
/// backtrace, no exit 101), with exit code `code` and `says` in its stderr.
pub fn run_case(command: &mut Command, bound: Duration, name: &str, code: i32, says: &str) -> Output {
    let output = run_within(command, bound);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("stack backtrace") && output.status.code() != Some(101),
        "{name} panicked: {stderr}"
    );
    assert_eq!(output.status.code(), Some(code), "{name}: {stderr}");
    assert!(stderr.contains(says), "{name}: stderr lacks {says:?}: {stderr}");
    output
}
