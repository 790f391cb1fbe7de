//! The `trainer` binary's command line: what `--help` shows, and usage
//! errors that name the file and line. (These also make `cargo test
//! --workspace` build the binary the end-to-end tests in tests/e2e run.)

use std::process::{Command, Output};

fn trainer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainer")).args(args).env_remove("DEEPLEARNING_WORKERS_PATH").output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_shows_the_user_commands_only() {
    let out = trainer(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(help.contains("launch") && help.contains("kill"), "{help}");
    assert!(!help.contains("supervise") && !help.contains("kill-local"), "the remote halves are hidden: {help}");
    let out = trainer(&["launch", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--nproc-per-node <N|auto>") && help.contains("--ssh-known-hosts"), "{help}");
    assert!(help.contains("--stall-after <SECONDS>") && help.contains("It never stops the job"), "{help}");
}

#[test]
fn bad_input_is_a_usage_error_naming_where() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "deeplearning-worker1\ndeeplearning-worker2 gpus=4\n").unwrap();
    let h = hosts.to_str().unwrap();
    let cases: [(&[&str], String); 5] = [
        (&["launch", "--hosts", "/nonexistent/hosts", "--", "true"], "cannot read /nonexistent/hosts".into()),
        (&["launch", "--hosts", h, "--", "true"], format!("{h}:2: unknown word")),
        (&["launch", "--nproc-per-node", "0", "--", "true"], "neither a number >= 1 nor `auto`".into()),
        (&["launch", "--job", "../x", "--", "true"], "use 1-100 letters".into()),
        (&["launch", "--hosts", h], "required".into()),
    ];
    for (args, needle) in cases {
        let out = trainer(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(&needle), "{args:?}: {} lacks {needle:?}", stderr(&out));
    }
    // A root without the agent's membership (its state file) says what to do.
    let out = trainer(&["kill", "--root", dir.path().to_str().unwrap()]);
    let err = stderr(&out);
    assert!(err.contains("var/lib/deeplearning/state.json") && err.contains("--hosts FILE"), "{err}");
}

/// An idx file: the magic number, the dimensions, then the bytes (big-endian, as MNIST's).
fn idx(magic: u32, dims: &[u32], bytes: &[u8]) -> Vec<u8> {
    let mut out = magic.to_be_bytes().to_vec();
    dims.iter().for_each(|d| out.extend_from_slice(&d.to_be_bytes()));
    out.extend_from_slice(bytes);
    out
}

/// `--device cuda` on a host without the NVIDIA driver (this project's
/// machines) names the missing library and what to do, exit 2, after the
/// data loaded and before any training: the device seam's message, as
/// `trainer train` prints it.
#[test]
fn the_gpu_without_a_driver_is_a_usage_error_naming_the_library() {
    if std::path::Path::new("/proc/driver/nvidia").exists() {
        return; // A GPU host: scripts/gpu-check.sh trains there.
    }
    let dir = tempfile::tempdir().unwrap();
    for split in ["train", "t10k"] {
        let images = idx(0x803, &[2, 28, 28], &[7; 2 * 28 * 28]);
        std::fs::write(dir.path().join(format!("{split}-images-idx3-ubyte")), images).unwrap();
        std::fs::write(dir.path().join(format!("{split}-labels-idx1-ubyte")), idx(0x801, &[2], &[3, 4])).unwrap();
    }
    let data = dir.path().to_str().unwrap();
    let out = trainer(&["train", "--model", "mlp", "--data", data, "--epochs", "1", "--device", "cuda"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let named = err
        .contains("--device cuda: no CUDA driver (libcuda.so.1) found on this host; install the NVIDIA driver")
        || err.contains("--device cuda: this trainer was built without the `cuda` feature");
    assert!(named && err.contains("--device cpu"), "{err}");
    assert!(out.stdout.is_empty(), "no epoch ran: {}", String::from_utf8_lossy(&out.stdout));
}
