//! `trainer launch` and `trainer kill` across hosts with a real sshd each
//! (network namespaces, their own host keys, and the known hosts, cluster
//! key and authorized keys written by the agent's own code: see
//! `e2e::sshd`). They need root, `ip`, openssh-server and openssh-client
//! (scripts/test installs them), and the trainer binary (built by `cargo
//! test --workspace`).
//!
//! "No process remains" is checked in /proc: every process of a job has
//! `TRAINER_JOB=<job>` in its environment or `--job <job>` on its command
//! line (launcher, ssh clients, supervisors).

use e2e::sshd::{SshCluster, job_processes, trainer_bin};
use e2e::{Error, Result, TestResult};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn fail(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Unexpected { what: what.into(), detail: detail.to_string() }
}

/// `trainer launch --job JOB ARGS -- sh -c SCRIPT` on the master.
fn launch(cluster: &SshCluster, job: &str, args: &[&str], script: &str) -> Result<Command> {
    let mut command = cluster.master_command(trainer_bin()?);
    command.args(["launch", "--job", job]).args(args).args(["--", "sh", "-c", script]);
    Ok(command)
}

fn run(mut command: Command) -> Result<Output> {
    command.stdin(Stdio::null()).output().map_err(Error::io("running trainer", "trainer"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn log_path(cluster: &SshCluster, job: &str, rank: u32) -> PathBuf {
    cluster.efs().join(format!("trainer/{job}/logs/rank-{rank}.log"))
}

/// Waits until no process of `job` is left anywhere, or fails listing them.
fn assert_nothing_left(job: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let left = job_processes(job);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(&format!("processes of job {job} after {within:?}"), format!("{left:#?}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every rank's log holds `text`.
fn wait_for_logs(cluster: &SshCluster, job: &str, ranks: u32, text: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let all = || (0..ranks).all(|r| std::fs::read_to_string(log_path(cluster, job, r)).is_ok_and(|l| l.contains(text)));
    while !all() {
        if Instant::now() > deadline {
            return Err(Error::Timeout { what: format!("{text:?} in every rank log of {job}"), seconds: 20 });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn wait_exit(child: &mut Child, within: Duration) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().map_err(Error::io("waiting for trainer", "trainer"))? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(Error::Timeout { what: "the launcher to exit".into(), seconds: within.as_secs() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status();
}

#[test]
fn every_rank_gets_the_torchrun_environment_prefixed_lines_and_a_log() -> TestResult {
    // GPUs per host: `auto` starts 2 + 1 (no GPU: 1 slot) + 1 ranks.
    let cluster = SshCluster::start(&[2, 0, 1])?;
    let job = "env-test";
    let script = r#"echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT GPUS=$DEEPLEARNING_WORKER_GPU_COUNT COUNT=$DEEPLEARNING_WORKERS_COUNT EFS=$EFS_MOUNT"; printf 'a partial'; sleep 0.3; echo ' line'; echo "err of $RANK" >&2; printf 'no newline at the end'"#;
    let out = run(launch(&cluster, job, &["--nproc-per-node", "auto", "--port", "29555"], script)?)?;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    if !out.status.success() {
        return Err(fail("launch exit", format!("{}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status)).into());
    }
    let efs = cluster.efs();
    let mut ranks = BTreeSet::new();
    let gpus = [("deeplearning-worker1", 2), ("deeplearning-worker2", 0), ("deeplearning-worker3", 1)];
    for line in stdout.lines().filter(|l| l.contains("RANK=")) {
        let (prefix, env) = line.split_once("] ").ok_or_else(|| fail("a prefixed line", line))?;
        let (host, rank) = prefix.trim_start_matches('[').split_once('/').ok_or_else(|| fail("prefix", line))?;
        let field = |name: &str| {
            env.split_whitespace().find_map(|w| w.strip_prefix(&format!("{name}="))).unwrap_or_default().to_owned()
        };
        assert_eq!(field("RANK"), rank, "{line}");
        assert!(ranks.insert(rank.parse::<u32>().map_err(|_| fail("rank", line))?), "rank {rank} twice: {stdout}");
        assert_eq!(field("WORLD_SIZE"), "4", "{line}");
        assert_eq!(field("MASTER_ADDR"), "deeplearning-worker1", "{line}");
        assert_eq!(field("MASTER_PORT"), "29555", "{line}");
        assert_eq!(field("COUNT"), "3", "{line}");
        assert_eq!(field("EFS"), efs.to_string_lossy(), "{line}");
        let (index, gpu) = gpus.iter().enumerate().find(|(_, (h, _))| *h == host).map(|(i, (_, g))| (i, *g)).unwrap();
        assert_eq!(field("GROUP_RANK"), index.to_string(), "{line}");
        assert_eq!(field("GPUS"), gpu.to_string(), "the host's own profile: {line}");
        assert_eq!(field("LOCAL_WORLD_SIZE"), if index == 0 { "2" } else { "1" }, "{line}");
    }
    assert_eq!(ranks, (0..4).collect(), "{stdout}");
    for (rank, host) in [(0, "deeplearning-worker1"), (1, "deeplearning-worker1"), (2, "deeplearning-worker2")] {
        // Partial lines are never split or interleaved; a last line without
        // its newline is kept too.
        assert!(stdout.contains(&format!("[{host}/{rank}] a partial line\n")), "{stdout}");
        assert!(stdout.contains(&format!("[{host}/{rank}] no newline at the end\n")), "{stdout}");
        assert!(stderr.contains(&format!("[{host}/{rank}] err of {rank}\n")), "{stderr}");
    }
    for rank in 0..4u32 {
        let log = std::fs::read_to_string(log_path(&cluster, job, rank)).map_err(Error::io("log", "rank log"))?;
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 4, "{log}");
        assert!(lines.iter().any(|l| l.starts_with(&format!("RANK={rank} "))), "{log}");
        for expected in ["a partial line", &format!("err of {rank}"), "no newline at the end"] {
            assert!(lines.contains(&expected), "{expected:?} in rank {rank}'s log:\n{log}");
        }
    }
    assert!(stderr.contains("trainer: job env-test: all 4 ranks exited 0"), "{stderr}");
    assert_nothing_left(job, Duration::from_secs(1))?;
    Ok(())
}

#[test]
fn a_failing_rank_stops_every_rank_on_every_host_within_5_s() -> TestResult {
    let cluster = SshCluster::start(&[1, 1, 1])?;
    let job = "fail-test";
    // Rank 0 ignores SIGTERM (its supervisor has to SIGKILL); rank 1 leaves
    // a background process; rank 2 fails once everyone is up.
    let script = r#"echo up; case $RANK in
        0) trap '' TERM; sleep 300 & wait;;
        1) sleep 300 & sleep 300;;
        2) sleep 2; echo "rank 2 gives up" >&2; exit 3;;
    esac"#;
    let start = Instant::now();
    let out = run(launch(&cluster, job, &["--nproc-per-node", "1"], script)?)?;
    let elapsed = start.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(
            "rank 2 on deeplearning-worker3 failed first: exited with code 3; its last stderr: rank 2 gives up"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("stopped 2 other rank(s)"), "{stderr}");
    // ~2 s of work, SSH set-up, then at most 5 s to stop everyone.
    assert!(elapsed < Duration::from_secs(2 + 2 + 5), "took {elapsed:?}");
    assert_nothing_left(job, Duration::from_millis(300))?;
    Ok(())
}

#[test]
fn sigint_of_the_launcher_leaves_nothing_on_any_host() -> TestResult {
    let cluster = SshCluster::start(&[1, 1])?;
    let job = "sigint-test";
    let mut child = launch(&cluster, job, &["--nproc-per-node", "2"], "echo ready; sleep 300 & sleep 300")?
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("starting trainer", "trainer"))?;
    wait_for_logs(&cluster, job, 4, "ready")?;
    assert!(job_processes(job).len() > 8, "the job runs: {:#?}", job_processes(job));
    let start = Instant::now();
    signal(child.id(), "INT");
    let status = wait_exit(&mut child, Duration::from_secs(5))?;
    let elapsed = start.elapsed();
    let mut stderr = String::new();
    use std::io::Read;
    let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut stderr));
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted (SIGINT)"), "{stderr}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_nothing_left(job, Duration::from_millis(300))?;
    Ok(())
}

#[test]
fn a_closed_or_full_stdout_stops_every_rank_and_leaves_nothing() -> TestResult {
    let cluster = SshCluster::start(&[1, 1])?;
    // The reader of `trainer launch ... | head` has gone: every write fails
    // with EPIPE. /dev/full: every write fails with ENOSPC.
    let (reader, closed) = std::io::pipe().map_err(Error::io("making a pipe", "pipe"))?;
    drop(reader);
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").map_err(Error::io("opening", "/dev/full"))?;
    let cases: [(&str, Stdio, i32, &str); 2] = [
        ("closed-stdout", closed.into(), 141, "standard output was closed by its reader"),
        ("full-stdout", full.into(), 2, "cannot write the ranks' output to standard output: No space left on device"),
    ];
    for (job, stdout, code, says) in cases {
        let mut child = launch(&cluster, job, &["--nproc-per-node", "1"], "while :; do echo tick; sleep 0.1; done")?
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::io("starting trainer", "trainer"))?;
        let status = wait_exit(&mut child, Duration::from_secs(20))?;
        let mut stderr = String::new();
        use std::io::Read;
        let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut stderr));
        assert_eq!(status.code(), Some(code), "{job}: {stderr}");
        assert!(stderr.contains(says), "{job}: {stderr}");
        assert!(!stderr.contains("panicked"), "{job}: {stderr}");
        assert_nothing_left(job, Duration::from_secs(5))?;
    }
    Ok(())
}

#[test]
fn trainer_kill_stops_a_running_job_and_cleans_up_after_a_sigkilled_launcher() -> TestResult {
    let cluster = SshCluster::start(&[1, 1])?;
    let trainer = trainer_bin()?;
    let kill = |job: &str| -> Result<Output> {
        let mut command = cluster.master_command(&trainer);
        command.args(["kill", "--job", job]);
        run(command)
    };

    // A running job: `trainer kill` stops its ranks on both hosts, and the
    // launcher, seeing them end, exits with a failure. The launcher is frozen
    // (SIGSTOP) meanwhile: else it would stop rank 1 itself as soon as
    // `kill` stops rank 0, and this would not show that `kill` reaches every host.
    let job = "kill-test";
    let mut launcher = launch(&cluster, job, &["--nproc-per-node", "1"], "echo ready; sleep 300")?
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("starting trainer", "trainer"))?;
    wait_for_logs(&cluster, job, 2, "ready")?;
    signal(launcher.id(), "STOP");
    let out = kill(job)?;
    signal(launcher.id(), "CONT");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for (host, rank) in [("deeplearning-worker1", 0), ("deeplearning-worker2", 1)] {
        assert!(
            stdout.contains(&format!("[{host}] job {job} rank {rank}: stopped supervisor")),
            "{host} reports rank {rank}: {stdout}"
        );
    }
    let status = wait_exit(&mut launcher, Duration::from_secs(5))?;
    assert!(!status.success());
    assert_nothing_left(job, Duration::from_secs(1))?;

    // SIGKILL of the launcher, then `trainer kill`: nothing remains.
    let job = "sigkill-test";
    let mut launcher = launch(&cluster, job, &["--nproc-per-node", "2"], "echo ready; sleep 300 & sleep 300")?
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("starting trainer", "trainer"))?;
    wait_for_logs(&cluster, job, 4, "ready")?;
    launcher.kill().map_err(Error::io("killing trainer", "trainer"))?;
    let _ = launcher.wait();
    let out = kill(job)?;
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).lines().count() >= 2, "one line per host at least: {}", text(&out.stdout));
    assert_nothing_left(job, Duration::from_secs(5))?;
    // Nothing is left to stop, and kill says so.
    let out = kill(job)?;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("[deeplearning-worker2] no process of job sigkill-test here"), "{stdout}");
    Ok(())
}

/// Launches a job whose ranks sleep, expecting an SSH failure on `host`.
fn expect_ssh_failure(cluster: &SshCluster, job: &str, host: &str, says: &str) -> Result<()> {
    let start = Instant::now();
    let out = run(launch(cluster, job, &["--nproc-per-node", "1", "--connect-timeout", "3"], "sleep 300")?)?;
    let elapsed = start.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{stderr}");
    let rank = host.trim_start_matches("deeplearning-worker").parse::<u32>().unwrap_or(1) - 1;
    assert!(stderr.contains(&format!("rank {rank} on {host} failed first: {says}")), "{stderr}");
    assert!(elapsed < Duration::from_secs(3 + 5), "within the connect timeout and the stop: {elapsed:?}");
    assert_nothing_left(job, Duration::from_millis(300))
}

#[test]
fn an_unreachable_host_or_an_unknown_host_key_is_named_and_nothing_keeps_running() -> TestResult {
    let mut cluster = SshCluster::start(&[1, 1, 1])?;
    cluster.stop_sshd(2);
    expect_ssh_failure(&cluster, "unreachable-test", "deeplearning-worker3", "deeplearning-worker3 is unreachable")?;
    // A host that does not answer at all (its link is down): the connect timeout.
    let ns = cluster.hosts[2].namespace.clone();
    e2e::netns::run("ip", &["-n", &ns, "link", "set", "eth0", "down"])?;
    expect_ssh_failure(&cluster, "timeout-test", "deeplearning-worker3", "deeplearning-worker3 is unreachable")?;
    e2e::netns::run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
    cluster.start_sshd(2)?;
    cluster.replace_host_key(1)?;
    expect_ssh_failure(
        &cluster,
        "hostkey-test",
        "deeplearning-worker2",
        "the host key of deeplearning-worker2 is not",
    )?;
    Ok(())
}

#[test]
fn a_dropped_ssh_connection_stops_every_rank_and_its_own_remote_side() -> TestResult {
    let cluster = SshCluster::start(&[1, 1])?;
    let job = "drop-test";
    let mut launcher = launch(&cluster, job, &["--nproc-per-node", "1"], "echo ready; sleep 300 & sleep 300")?
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("starting trainer", "trainer"))?;
    wait_for_logs(&cluster, job, 2, "ready")?;
    // The connection to rank 1's host drops: its ssh client dies.
    let ssh: Vec<u32> = job_processes(job)
        .into_iter()
        .filter(|(_, words)| words.starts_with("ssh ") && words.contains("--rank 1 "))
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(ssh.len(), 1, "one ssh client for rank 1: {:#?}", job_processes(job));
    let start = Instant::now();
    signal(ssh[0], "KILL");
    let status = wait_exit(&mut launcher, Duration::from_secs(5))?;
    let mut stderr = String::new();
    use std::io::Read;
    let _ = launcher.stderr.take().map(|mut s| s.read_to_string(&mut stderr));
    assert_eq!(status.code(), Some(128 + 9), "the ssh client's own code: {stderr}");
    assert!(
        stderr.contains("rank 1 on deeplearning-worker2 failed first: its ssh client was killed by signal 9"),
        "{stderr}"
    );
    // Rank 1's supervisor lost its parent too: it stops its command, as rank 0's does.
    assert_nothing_left(job, Duration::from_secs(5).saturating_sub(start.elapsed()))?;
    Ok(())
}

#[test]
fn an_elastic_job_starts_ranks_on_joining_hosts_survives_leaving_ones_and_ends_with_rank_0() -> TestResult {
    // Hosts 0 and 1 form generation 1; host 2 joins in generation 2.
    let mut cluster = SshCluster::start_with_members(&[1, 1, 1], &[0, 1])?;
    let job = "elastic-test";
    let stop = cluster.efs().join("stop-rank-0");
    // Rank 1 fails once up (in an elastic job that is a leave); the joiner
    // waits; rank 0 ends the job when the test says so.
    let script = format!(
        r#"echo "up $RANK"; case $RANK in
        0) while [ ! -e {stop} ]; do sleep 0.05; done; echo "rank 0 done";;
        1) sleep 1; echo "rank 1 gives up" >&2; exit 3;;
        *) sleep 300 & wait;;
    esac"#,
        stop = stop.display()
    );
    let mut child = launch(&cluster, job, &["--elastic", "--nproc-per-node", "1"], &script)?
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("starting trainer", "trainer"))?;
    wait_for_logs(&cluster, job, 2, "up ")?;
    let generation = cluster.publish(&[0, 1, 2])?;
    assert_eq!(generation, 2);
    // The joiner gets the next launch slot, 2.
    if let Err(e) = wait_for_logs(&cluster, job, 3, "up ") {
        let _ = child.kill();
        let output = child.wait_with_output().map_err(Error::io("waiting", "trainer"))?;
        return Err(fail(&e.to_string(), text(&output.stderr)).into());
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().map_err(Error::io("waiting", "trainer"))?.is_none(), "rank 1's failure ended the job");
    std::fs::write(&stop, "").map_err(Error::io("writing", &stop))?;
    let status = wait_exit(&mut child, Duration::from_secs(15))?;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .map_err(Error::io("reading", "stderr"))?;
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("rank 1 on deeplearning-worker2 left the elastic job: exited with code 3"), "{stderr}");
    assert!(
        stderr.contains("deeplearning-worker3 (i-0e2e000000000002) joined (generation 2): starting rank 2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("rank 0 exited 0; of the others 0 exited 0, 1 were stopped, 1 left along the way"),
        "{stderr}"
    );
    assert!(cluster.host_log().contains("2 ADDED "), "host log: {}", cluster.host_log());
    assert_nothing_left(job, Duration::from_secs(5))?;
    Ok(())
}

/// Issue 14: an interruption notice on one host (the agent's notice file
/// under its root, as the agent writes it when EC2 gives a Spot instance
/// action) gives that host's rank SIGTERM; the script finds the deadline
/// through `DEEPLEARNING_INTERRUPTION_FILE`; the rank ending stops the job
/// (not elastic), and nothing is left on any host.
#[test]
fn an_interruption_notice_gives_the_hosts_ranks_sigterm_with_the_deadline() -> TestResult {
    use node_contract::interruption::{NOTICE_FILE_VERSION, NoticeFile, format_utc, from_instance_action};
    let cluster = SshCluster::start(&[1, 1])?;
    let job = "notice-test";
    let script = r#"trap 'echo "sigterm $(tr -d " \n" < "$DEEPLEARNING_INTERRUPTION_FILE" | grep -o "deadline_unix\":[0-9]*")"; exit 0' TERM
        echo ready; while :; do sleep 0.1; done"#;
    let mut child = launch(&cluster, job, &["--nproc-per-node", "1"], script)?
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("starting trainer", "trainer"))?;
    wait_for_logs(&cluster, job, 2, "ready")?;

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let deadline = now + 120;
    let body = format!(r#"{{"action": "terminate", "time": "{}"}}"#, format_utc(deadline));
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map_err(Error::io("boot id", "/proc"))?;
    let notice = NoticeFile {
        version: NOTICE_FILE_VERSION,
        interruption: from_instance_action("i-0e2e000000000001", &body).map_err(|e| fail("notice", e))?,
        boot_id: boot_id.trim().to_owned(),
        noticed_unix_ms: now * 1000,
    };
    let dir = cluster.hosts[1].root.join("var/lib/deeplearning");
    std::fs::create_dir_all(&dir).map_err(Error::io("creating", &dir))?;
    std::fs::write(dir.join("interruption.json.tmp"), notice.to_text()).map_err(Error::io("writing", &dir))?;
    std::fs::rename(dir.join("interruption.json.tmp"), dir.join("interruption.json"))
        .map_err(Error::io("renaming", &dir))?;
    let start = Instant::now();
    let status = wait_exit(&mut child, Duration::from_secs(15))?;
    let elapsed = start.elapsed();
    use std::io::Read;
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut stdout));
    let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut stderr));
    assert!(
        stdout.contains(&format!("[deeplearning-worker2/1] sigterm deadline_unix\":{deadline}")),
        "{stdout}\n{stderr}"
    );
    // The other host's rank is stopped with the job (its SIGTERM comes
    // from the launcher), and there is no notice on its host.
    assert!(!stdout.contains("[deeplearning-worker1/0] sigterm deadline"), "only the noticed host: {stdout}");
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("rank 1 on deeplearning-worker2 failed first"), "{stderr}");
    assert!(
        stderr.contains("this host was given an interruption notice (spot-instance-action terminate at"),
        "{stderr}"
    );
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");
    assert_nothing_left(job, Duration::from_secs(2))?;
    Ok(())
}
