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
    // A root without the agent's workers file says what to do.
    let out = trainer(&["kill", "--root", dir.path().to_str().unwrap()]);
    assert!(stderr(&out).contains("opt/deeplearning/workers"), "{}", stderr(&out));
}
