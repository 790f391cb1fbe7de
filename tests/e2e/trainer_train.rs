//! `trainer train` across hosts: real sshd per network namespace, real
//! `trainer launch`, real TCP between the ranks, real MNIST digits
//! (scripts/mnist-fixture; `DL_MNIST_DIR`, set by scripts/test). Membership
//! generations are published with the agent's own file code
//! ([`SshCluster::publish`]: state file, workers file, known hosts, host log),
//! as the agents do after a join or a leave; the SQS side of joins and leaves
//! is covered by the agent's own end-to-end tests.

use e2e::sshd::{SshCluster, job_processes, trainer_bin};
use e2e::{Error, Result, TestResult};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EPOCHS: u32 = 12;

fn fail(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Unexpected { what: what.into(), detail: detail.to_string() }
}

/// `trainer launch --job JOB LAUNCH_ARGS -- trainer train ...` on the master.
fn launch(cluster: &SshCluster, job: &str, launch_args: &[&str]) -> Result<Child> {
    let trainer = trainer_bin()?;
    let data = e2e::mnist_dir()?;
    let mut command: Command = cluster.master_command(&trainer);
    command.args(["launch", "--job", job, "--nproc-per-node", "1"]).args(launch_args).arg("--").arg(&trainer);
    command.args(["train", "--model", "lenet", "--data"]).arg(&data);
    command.args([
        "--epochs",
        &EPOCHS.to_string(),
        "--batch-size",
        "32",
        "--lr",
        "0.02",
        "--threads",
        "1",
        "--seed",
        "3",
    ]);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("starting trainer launch", &trainer))
}

fn rank0_log(cluster: &SshCluster, job: &str) -> String {
    std::fs::read_to_string(cluster.efs().join(format!("trainer/{job}/logs/rank-0.log"))).unwrap_or_default()
}

/// Waits until rank 0's log holds `text` after position `from`; returns the position after it.
fn wait_for(cluster: &SshCluster, job: &str, text: &str, from: usize, within: Duration) -> Result<usize> {
    let deadline = Instant::now() + within;
    loop {
        let log = rank0_log(cluster, job);
        if let Some(at) = log.get(from..).and_then(|rest| rest.find(text)) {
            return Ok(from + at + text.len());
        }
        if Instant::now() > deadline {
            return Err(fail(&format!("{text:?} in rank 0's log of {job} within {within:?}"), log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last epoch line's test accuracy, in percent.
fn final_accuracy(log: &str) -> Result<f64> {
    let last = log
        .lines()
        .rfind(|l| l.starts_with(&format!("epoch {EPOCHS}/{EPOCHS} ")))
        .ok_or_else(|| fail("the last epoch's line", log))?;
    let acc = last.split("test-acc ").nth(1).and_then(|r| r.split('%').next()).and_then(|v| v.parse().ok());
    acc.ok_or_else(|| fail("a test accuracy in the last epoch line", last))
}

fn finish(child: Child, within: Duration) -> Result<(i32, String)> {
    let deadline = Instant::now() + within;
    let mut child = child;
    while child.try_wait().map_err(Error::io("waiting", "trainer"))?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().map_err(Error::io("waiting", "trainer"))?;
            return Err(fail("the job to end", String::from_utf8_lossy(&out.stderr)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().map_err(Error::io("waiting", "trainer"))?;
    Ok((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// The pid of job `job`'s `trainer train` process with launch slot `rank`.
fn train_pid(job: &str, rank: u32) -> Option<u32> {
    job_processes(job).into_iter().map(|(pid, _)| pid).find(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let has = |bytes: &[u8], what: &str| bytes.split(|b| *b == 0).any(|w| w == what.as_bytes());
        has(&cmdline, "train") && !has(&cmdline, "supervise") && has(&environ, &format!("RANK={rank}"))
    })
}

#[test]
fn elastic_training_survives_a_join_a_leave_and_a_sigkill_and_matches_the_static_run() -> TestResult {
    // Hosts 0-2 train from the start; host 3 joins later.
    let mut cluster = SshCluster::start_with_members(&[0, 0, 0, 0], &[0, 1, 2])?;

    let (code, stderr) = finish(launch(&cluster, "static", &[])?, Duration::from_secs(300))?;
    assert_eq!(code, 0, "static run: {stderr}");
    let static_log = rank0_log(&cluster, "static");
    assert!(static_log.contains("3 rank(s)"), "{static_log}");
    let static_acc = final_accuracy(&static_log)?;
    assert!(static_acc >= 95.0, "static LeNet on 3 ranks: {static_acc}%\n{static_log}");

    let job = "elastic";
    let child = launch(&cluster, job, &["--elastic"])?;
    let minute = Duration::from_secs(60);
    // A 4th node is published during epoch 2; its rank starts (ssh, data)
    // and is admitted at the first epoch boundary after it connected.
    let mut at = wait_for(&cluster, job, "epoch 1/12 loss", 0, minute)?;
    cluster.publish(&[0, 1, 2, 3])?;
    at = wait_for(&cluster, job, "4 rank(s)", at, minute)?;
    // Host 2 leaves (scale-in) during the next epoch: 3 ranks after it.
    at = wait_for(&cluster, job, "/12 loss", at, minute)?;
    cluster.publish(&[0, 1, 3])?;
    at = wait_for(&cluster, job, "3 rank(s)", at, minute)?;
    // Host 1's trainer dies by SIGKILL in the middle of the next epoch (an
    // epoch takes about a second here).
    std::thread::sleep(Duration::from_millis(200));
    let pid =
        train_pid(job, 1).ok_or_else(|| fail("host 1's trainer process", format!("{:#?}", job_processes(job))))?;
    // SAFETY: kill(2) with a pid this test found in /proc.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let killed = Instant::now();
    let redo = wait_for(&cluster, job, "redoing epoch", at, minute)?;
    let reformed_in = killed.elapsed();
    let (code, stderr) = finish(child, Duration::from_secs(300))?;
    let log = rank0_log(&cluster, job);
    assert_eq!(code, 0, "elastic run: {stderr}\n{log}");
    assert!(log[..redo].contains("2 rank(s)"), "{log}");
    assert!(reformed_in < Duration::from_secs(30), "re-formed {reformed_in:?} after the SIGKILL");
    let acc = final_accuracy(&log)?;
    println!("{log}\nstatic {static_acc:.2}% elastic {acc:.2}%; re-formed {reformed_in:?} after the SIGKILL");
    assert!((acc - static_acc).abs() <= 1.0, "elastic {acc}% vs static {static_acc}%\n{log}");
    let hosts_log = cluster.host_log();
    assert!(hosts_log.contains("2 ADDED ") && hosts_log.contains("3 REMOVED "), "{hosts_log}");
    assert!(stderr.contains("left the elastic job"), "{stderr}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !job_processes(job).is_empty() {
        if Instant::now() > deadline {
            return Err(fail("no process of the job left", format!("{:#?}", job_processes(job))).into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Issue 14: EC2 gives host 2 a Spot instance action two minutes ahead.
/// Its agent writes the notice file and the master publishes the
/// generation without it (done here as the agents do: the notice file,
/// then `publish`). Host 2's `trainer train` rank sees the notice within a
/// step, raises its leaving flag in the next step's all-reduce and leaves
/// (exit 0) mid-epoch, long before the deadline; the supervisor's SIGTERM,
/// which the rank ignores while the notice is there, does not kill it
/// first. The survivors run the rest of the same epoch from the next step
/// (no redo), and the run ends within a point of the static run's accuracy.
#[test]
fn a_noticed_hosts_rank_leaves_at_the_next_step_without_a_redo() -> TestResult {
    let mut cluster = SshCluster::start_with_members(&[0, 0, 0], &[0, 1, 2])?;
    let (code, stderr) = finish(launch(&cluster, "static", &[])?, Duration::from_secs(300))?;
    assert_eq!(code, 0, "static run: {stderr}");
    let static_acc = final_accuracy(&rank0_log(&cluster, "static"))?;

    let job = "noticed";
    let child = launch(&cluster, job, &["--elastic"])?;
    let minute = Duration::from_secs(60);
    let at = wait_for(&cluster, job, "epoch 1/12 loss", 0, minute)?;
    // Into the next epoch (about a second each here): the notice comes mid-epoch.
    std::thread::sleep(Duration::from_millis(300));
    let leaver =
        train_pid(job, 2).ok_or_else(|| fail("host 2's trainer process", format!("{:#?}", job_processes(job))))?;
    let deadline = cluster.write_notice(2, "i-0e2e000000000002", 120)?;
    let noticed = Instant::now();
    let mut left_in = None;
    while left_in.is_none() {
        if std::path::Path::new(&format!("/proc/{leaver}")).exists() {
            if noticed.elapsed() > minute {
                return Err(fail("host 2's rank to leave", rank0_log(&cluster, job)).into());
            }
            std::thread::sleep(Duration::from_millis(5));
        } else {
            left_in = Some(noticed.elapsed());
        }
    }
    let left_in = left_in.unwrap_or_default();
    // The rank is gone before its deadline (the rest of the run may go
    // past it: the deadline is the noticed host's, and it is gone).
    let left_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    assert!(left_at < deadline, "left at {left_at}, the deadline {deadline}");
    let resumed = wait_for(&cluster, job, "rank(s); continuing epoch ", at, minute)?;
    let resumed_in = noticed.elapsed();
    cluster.publish(&[0, 1])?;
    let (code, stderr) = finish(child, Duration::from_secs(300))?;
    let log = rank0_log(&cluster, job);
    assert_eq!(code, 0, "elastic run: {stderr}\n{log}");
    assert!(!log.contains("redoing epoch"), "a survivor redid an epoch:\n{log}");
    assert!(stderr.contains("left the elastic job"), "{stderr}");
    assert!(stderr.contains("left the elastic job: exited 0 (left the group)"), "{stderr}");
    // Three ranks until that line (the line itself is the first with two).
    let starts = log[..resumed].rfind('\n').map_or(0, |n| n + 1);
    assert!(log[..starts].contains("3 rank(s)") && !log[..starts].contains("2 rank(s)"), "{log}");
    let line = log[starts..].lines().next().unwrap_or_default();
    assert!(line.contains(": 2 rank(s); continuing epoch "), "left mid-epoch: {line}\n{log}");
    let acc = final_accuracy(&log)?;
    println!(
        "static {static_acc:.2}% noticed {acc:.2}%; notice -> host 2's rank exited {left_in:?} -> \
         survivors' next step (rank 0: \"{}\") {resumed_in:?}; the rank left {}s before its deadline",
        line.trim(),
        deadline.saturating_sub(left_at)
    );
    assert!(left_in < Duration::from_secs(10), "{left_in:?}");
    assert!((acc - static_acc).abs() <= 1.0, "noticed {acc}% vs static {static_acc}%\n{log}");
    let end = Instant::now() + Duration::from_secs(5);
    while !job_processes(job).is_empty() {
        if Instant::now() > end {
            return Err(fail("no process of the job left", format!("{:#?}", job_processes(job))).into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
