//! `trainer launch`'s stall report, on this machine: a stand-in `ssh` on
//! PATH runs each rank's remote command (`trainer supervise ... -- CMD`)
//! locally, giving each host its own GPU fixture through
//! `DEEPLEARNING_TEST_GPU_FIXTURE` (as a real node's NVML would give its
//! GPUs). Two ranks print once and then sleep: the job is silent, and the
//! report names the host whose GPUs are busy, or says none is.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const SSH: &str = r#"#!/bin/sh
# ssh's options, then the host, then the remote command line.
while [ $# -gt 2 ]; do shift; done
DEEPLEARNING_TEST_GPU_FIXTURE="$STALL_FIXTURES/$1.json" exec sh -c "$2"
"#;

fn fixture(dir: &Path, host: &str, percent: u32) {
    let mut f = gpu_health::Fixture::healthy("H100", 2);
    for d in &mut f.devices {
        d.utilisation_percent = Some(0);
    }
    f.devices[1].utilisation_percent = Some(percent);
    f.write(&dir.join(format!("{host}.json"))).unwrap();
}

/// Launches two silent ranks, one per host (`busy`: host 2's GPU
/// utilisation, host 1's is 0), with `--stall-after 2`; returns the
/// launcher's stderr up to its stall report, and rank 1's log.
fn stalled_job(busy: u32) -> (Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ssh = bin.join("ssh");
    std::fs::write(&ssh, SSH).unwrap();
    std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "deeplearning-master\ndeeplearning-worker1\n").unwrap();
    fixture(dir.path(), "deeplearning-master", 0);
    fixture(dir.path(), "deeplearning-worker1", busy);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["launch", "--job", "quiet", "--hosts"])
        .arg(&hosts)
        .args(["--nproc-per-node", "1", "--stall-after", "2", "--", "sh", "-c", "echo started; exec sleep 60"])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("STALL_FIXTURES", dir.path())
        .env("TRAINER_ROOT", dir.path())
        .env("EFS_MOUNT", dir.path().join("efs"))
        .env_remove("DEEPLEARNING_WORKERS_PATH")
        .env_remove("DEEPLEARNING_TEST_GPU_FIXTURE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    while !lines.last().is_some_and(|l: &String| l.contains(" stalled: ")) {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    // The report never stops the job: it is still running.
    assert!(child.try_wait().unwrap().is_none(), "the launcher ended: {lines:#?}");
    Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{lines:#?}");
    let log = std::fs::read_to_string(dir.path().join("efs/trainer/quiet/logs/rank-1.log")).unwrap();
    (lines, log)
}

#[test]
fn a_silent_job_names_the_one_host_whose_gpus_stay_busy() {
    let (lines, log) = stalled_job(97);
    assert_eq!(
        lines.last().map(String::as_str),
        Some(
            "trainer launch: job quiet stalled: no output from any rank for 2s; GPUs idle on every host but \
             deeplearning-worker1 (GPU at 97 %): that node holds the others up"
        ),
        "{lines:#?}"
    );
    // The supervisors' GPU lines are the launcher's: neither printed nor logged.
    assert!(!lines.iter().any(|l| l.contains("trainer supervise: gpu")), "{lines:#?}");
    assert_eq!(log, "started\n");
}

#[test]
fn a_silent_job_with_every_gpu_idle_says_no_gpu_is_busy() {
    let (lines, _) = stalled_job(2);
    assert_eq!(
        lines.last().map(String::as_str),
        Some("trainer launch: job quiet stalled: no output from any rank for 2s and no GPU busy on any host"),
        "{lines:#?}"
    );
}
