//! `trainer supervise` (hidden): the remote half of `launch`, one per rank,
//! started by `ssh`. It runs CMD with the torchrun environment
//! ([`torchrun`], plus what the launcher passes with `--env`, and the
//! agent's profile) and its own error file in a session
//! and process group of its own, records the group in a pid file for
//! `trainer kill`, and stops the whole group when its parent goes away:
//!
//! - its stdin closes (the launcher closed it, or ssh died and sshd closed
//!   the session: the portable signal, docs/TESTING.md, "When an SSH session ends");
//! - SIGTERM, SIGHUP or SIGINT, including the `PR_SET_PDEATHSIG` SIGTERM the
//!   kernel sends when the sshd session process exits;
//! - an interruption notice for this host: the agent wrote
//!   `/var/lib/deeplearning/interruption.json`
//!   ([`node_contract::interruption::NOTICE_PATH`], looked at every second).
//!   CMD's group gets SIGTERM at once, and SIGKILL only 5 s before the
//!   deadline (60 s later for a rebalance recommendation, which has none),
//!   so a training script can save a checkpoint. A process's environment
//!   is fixed when it starts, so every rank has the file's path in
//!   `DEEPLEARNING_INTERRUPTION_FILE` and reads the deadline there
//!   (`interruption.deadline_unix`, `interruption.time`); a rank started
//!   while a notice is already there also has
//!   `DEEPLEARNING_INTERRUPTION_DEADLINE` (RFC 3339),
//!   `DEEPLEARNING_INTERRUPTION_SECONDS_LEFT` and
//!   `DEEPLEARNING_INTERRUPTION_KIND`, and gets its SIGTERM 10 s after it
//!   started (a SIGTERM before a script has set its handler, which takes
//!   seconds for one that imports PyTorch, would only kill it).
//!
//! While CMD runs it reads its node's busiest GPU every 5 s and tells the
//! launcher on stderr ([`GPU_LINE`]), for the launcher's stall report.
//!
//! It exits with CMD's code (128 + signal when CMD was killed), after killing
//! anything CMD left running in its group.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use node_contract::interruption::{
    DEADLINE_VAR, FILE_VAR, KIND_VAR, NOTICE_PATH, NoticeFile, SECONDS_LEFT_VAR, format_utc,
};

use tokio::signal::unix::{SignalKind, signal};

use crate::error::{Error, Result};
use crate::jobdir::JOB_VAR;
use crate::jobs::process;
use crate::jobs::torchrun::{self, Place};
use crate::train::interruption::{boot_id, read_notice};

/// Where supervisors keep their pid files, as on a node: `<dir>/<job>/<rank>.pid`.
/// Defined in the node contract: the agent's idle guard reads them too (a
/// live supervisor behind one makes its node busy).
pub(crate) const RUN_DIR: &str = node_contract::idle::JOBS_RUN_DIR;

/// The line a supervisor writes to its stderr before CMD starts (after
/// whatever the remote shell's start-up files print):
/// the launcher takes it (it is not printed or logged) as "the connection is
/// made and this rank's supervisor is up", which frees its slot among the
/// ssh connections being set up (`--ssh-concurrency`).
pub(crate) const STARTED_LINE: &str = "trainer supervise: up";

/// What starts the line a supervisor writes to its stderr with its node's
/// busiest GPU utilisation: `trainer supervise: gpu 87` (percent), or
/// `trainer supervise: gpu none` (no GPU, or none could be read). The
/// launcher takes it (not printed or logged) for its stall report
/// ([`crate::jobs::stall`]).
pub(crate) const GPU_LINE: &str = "trainer supervise: gpu ";

/// How often the GPUs are read.
const GPU_POLL: Duration = Duration::from_secs(5);

/// A reading that did not change is sent again this often.
const GPU_RESEND: Duration = Duration::from_secs(30);

/// The [`GPU_LINE`] of a reading.
pub(crate) fn gpu_line(percent: Option<u32>) -> String {
    match percent {
        Some(p) => format!("{GPU_LINE}{p}"),
        None => format!("{GPU_LINE}none"),
    }
}

/// A [`GPU_LINE`] read back: `Some(reading)` for one, `None` for any other line.
pub(crate) fn parse_gpu_line(line: &str) -> Option<Option<u32>> {
    match line.strip_prefix(GPU_LINE)? {
        "none" => Some(None),
        p => p.parse().ok().map(Some),
    }
}

/// Reads this node's busiest GPU every [`GPU_POLL`] (the GPUs opened once,
/// off the async threads) and writes a [`GPU_LINE`] to stderr when the
/// reading changed, or [`GPU_RESEND`] after the last one.
async fn report_gpus(fixture: Option<PathBuf>) {
    let Ok(gpus) = tokio::task::spawn_blocking(move || gpu_health::open(fixture.as_deref())).await else { return };
    let gpus: std::sync::Arc<dyn gpu_health::Gpus> = std::sync::Arc::from(gpus);
    let mut last: Option<(Option<u32>, tokio::time::Instant)> = None;
    let mut tick = tokio::time::interval(GPU_POLL);
    loop {
        tick.tick().await;
        let reader = gpus.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || gpu_health::busiest_percent(&*reader)).await else { return };
        if last.is_some_and(|(was, at)| was == now && at.elapsed() < GPU_RESEND) {
            continue;
        }
        // One write of a whole line (under PIPE_BUF: never split by CMD's lines on the same pipe).
        let line = format!("{}\n", gpu_line(now));
        if std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes()).is_err() {
            return;
        }
        last = Some((now, tokio::time::Instant::now()));
    }
}

/// How long CMD's group gets between SIGTERM and SIGKILL when it is stopped.
const GRACE: Duration = Duration::from_millis(1500);

/// How often the notice file is looked at.
const NOTICE_POLL: Duration = Duration::from_secs(1);

/// A command stopped by an instance action is killed this long before the
/// deadline: the instance itself needs the rest.
const NOTICE_MARGIN_SECONDS: u64 = 5;

/// How long a command stopped by a rebalance recommendation (no deadline)
/// has to save its work.
const REBALANCE_GRACE: Duration = Duration::from_secs(60);

/// A command started while its host already had a notice gets SIGTERM
/// this long after it started, time to set its SIGTERM handler.
const NOTICE_STARTUP: Duration = Duration::from_secs(10);

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// Resolves once this boot's notice is in `path`; with the notice that was
/// there when the command started, [`NOTICE_STARTUP`] after the start.
async fn notice_given(path: &Path, boot: Option<&str>, at_start: Option<NoticeFile>) -> NoticeFile {
    if let Some(notice) = at_start {
        tokio::time::sleep(NOTICE_STARTUP).await;
        return notice;
    }
    let mut tick = tokio::time::interval(NOTICE_POLL);
    loop {
        tick.tick().await;
        if let Some(notice) = read_notice(path, boot) {
            return notice;
        }
    }
}

/// How long a command stopped by `notice` has between SIGTERM and SIGKILL:
/// until [`NOTICE_MARGIN_SECONDS`] before the deadline, at least [`GRACE`].
fn notice_grace(notice: &NoticeFile, now_unix: u64) -> Duration {
    match notice.seconds_left(now_unix) {
        Some(left) => Duration::from_secs(left.saturating_sub(NOTICE_MARGIN_SECONDS)).max(GRACE),
        None => REBALANCE_GRACE,
    }
}

/// The variables a rank gets about interruption notices: the file's path
/// always, and what a notice already there says.
fn notice_env(path: &Path, notice: Option<&NoticeFile>, now_unix: u64) -> Vec<(String, String)> {
    let mut env = vec![(FILE_VAR.to_owned(), path.display().to_string())];
    if let Some(n) = notice {
        env.push((KIND_VAR.to_owned(), n.interruption.notice.describe().to_owned()));
        if let (Some(deadline), Some(left)) = (n.interruption.deadline_unix, n.seconds_left(now_unix)) {
            env.push((DEADLINE_VAR.to_owned(), format_utc(deadline)));
            env.push((SECONDS_LEFT_VAR.to_owned(), left.to_string()));
        }
    }
    env
}

/// Arguments of `trainer supervise`; the launcher fills them in.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Job name.
    #[arg(long)]
    pub job: String,
    /// Global rank.
    #[arg(long)]
    pub rank: u32,
    /// Rank on this host.
    #[arg(long)]
    pub local_rank: u32,
    /// Ranks in the job.
    #[arg(long)]
    pub world_size: u32,
    /// Ranks on this host.
    #[arg(long)]
    pub local_world_size: u32,
    /// This host's index among the job's hosts.
    #[arg(long)]
    pub group_rank: u32,
    /// Hosts in the job.
    #[arg(long, default_value_t = 1)]
    pub group_world_size: u32,
    /// Where CMD's error file goes (`TORCHELASTIC_ERROR_FILE`); a stale one is removed first.
    #[arg(long)]
    pub error_file: Option<PathBuf>,
    /// A variable the launcher passes down from its own environment (`NAME=VALUE`, repeated).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Rank 0's host.
    #[arg(long)]
    pub master_addr: String,
    /// Rank 0's rendezvous port.
    #[arg(long)]
    pub master_port: u16,
    /// This host's name in the launcher's host list.
    #[arg(long)]
    pub host: String,
    /// Filesystem root the agent's files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
    /// Tests: read the GPUs from this fixture (gpu-health's JSON) instead of NVML.
    #[arg(long, hide = true, value_name = "FILE", env = "DEEPLEARNING_TEST_GPU_FIXTURE")]
    pub gpu_fixture: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(required = true, last = true)]
    pub command: Vec<String>,
}

fn parse_env(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// The pid file of `rank` of `job` under `root`.
pub(crate) fn pid_file(root: &Path, job: &str, rank: u32) -> PathBuf {
    node_contract::files::under(root, node_contract::idle::pid_file(job, rank))
}

/// Makes `path`'s directory and removes an error file a previous job of the
/// same name left there, so the launcher never reports a stale one.
fn prepare_error_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Runs CMD until it exits or the parent goes away; returns the exit code.
pub(crate) async fn run(args: Args) -> Result<u8> {
    // First, so an sshd session that dies from here on takes us along.
    process::die_with_parent(libc::SIGTERM);
    let who = format!("trainer supervise: rank {} on {}", args.rank, args.host);
    let mut env: Vec<(String, String)> = crate::jobs::profile::read(&args.root)?
        .into_iter()
        .filter(|(name, _)| crate::jobs::profile::wanted(name))
        .collect();
    let place = Place {
        rank: args.rank,
        local_rank: args.local_rank,
        world_size: args.world_size,
        local_world_size: args.local_world_size,
        group_rank: args.group_rank,
        group_world_size: args.group_world_size,
        master_addr: args.master_addr.clone(),
        master_port: args.master_port,
        run_id: args.job.clone(),
    };
    let error_file = args.error_file.as_deref().and_then(|path| match prepare_error_file(path) {
        Ok(()) => Some(path),
        Err(e) => {
            cli_output::errln!(
                "{who}: no TORCHELASTIC_ERROR_FILE for the command: cannot prepare {}: {e}",
                path.display()
            );
            None
        }
    });
    env.extend(torchrun::rank_env(&place, error_file).into_iter().map(|(k, v)| (k.to_owned(), v)));
    env.extend(args.env.iter().cloned());
    env.push((JOB_VAR.to_owned(), args.job.clone()));
    let notice_path = node_contract::files::under(&args.root, NOTICE_PATH);
    let boot = boot_id(&args.root);
    let notice_at_start = read_notice(&notice_path, boot.as_deref());
    env.extend(notice_env(&notice_path, notice_at_start.as_ref(), unix_now()));

    // Signals and stdin are watched before CMD starts, so a stop that arrives
    // while it starts is not lost.
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let mut hup = signal(SignalKind::hangup()).map_err(Error::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(Error::Signal)?;
    let (eof_tx, mut eof) = tokio::sync::oneshot::channel::<()>();
    // A plain thread: a blocking read of stdin must not hold up the runtime's shutdown.
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = eof_tx.send(());
    });

    eprintln!("{STARTED_LINE}");
    // For the launcher's stall report; ends with the process.
    // One reader per node: the node's first rank speaks for its GPUs (the
    // launcher keeps one reading a host), not every rank of an 8-GPU node.
    if args.local_rank == 0 {
        tokio::spawn(report_gpus(args.gpu_fixture.clone()));
    }
    let mut command = tokio::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).envs(env).stdin(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| if libc::setsid() == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            cli_output::errln!("{who}: cannot start {:?}: {e}", args.command[0]);
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or_default();
    let pid_path = pid_file(&args.root, &args.job, args.rank);
    let write_pid = || -> std::io::Result<()> {
        std::fs::create_dir_all(pid_path.parent().expect("a pid file has a directory"))?;
        std::fs::write(&pid_path, node_contract::idle::pid_file_text(std::process::id(), pgid))
    };
    if let Err(source) = write_pid() {
        process::stop_group(pgid, GRACE);
        return Err(Error::Write { path: pid_path, source });
    }

    let (stopped_because, grace) = tokio::select! {
        status = child.wait() => {
            let code = status.as_ref().map(|s| process::exit_code(*s)).unwrap_or(1);
            if let Ok(status) = status {
                use std::os::unix::process::ExitStatusExt;
                if let Some(signal) = status.signal() {
                    cli_output::errln!("{who}: the command was killed by signal {signal}");
                }
            }
            // Whatever CMD left running in its group goes with it.
            tokio::task::spawn_blocking(move || process::stop_group(pgid, Duration::from_millis(500))).await.ok();
            let _ = std::fs::remove_file(&pid_path);
            return Ok(code);
        }
        _ = &mut eof => ("its launcher went away (stdin closed)".to_owned(), GRACE),
        _ = term.recv() => ("SIGTERM".to_owned(), GRACE),
        _ = hup.recv() => ("SIGHUP".to_owned(), GRACE),
        _ = int.recv() => ("SIGINT".to_owned(), GRACE),
        notice = notice_given(&notice_path, boot.as_deref(), notice_at_start) => {
            let grace = notice_grace(&notice, unix_now());
            let what = notice.interruption.describe();
            cli_output::errln!(
                "{who}: this host was given an interruption notice ({what}): SIGTERM to the command, SIGKILL in {} s \
                 ({FILE_VAR} names the file with the deadline)",
                grace.as_secs()
            );
            (format!("interruption notice ({what})"), grace)
        }
    };
    tracing::info!("{who}: stopping the command: {stopped_because}");
    tokio::task::spawn_blocking(move || process::stop_group(pgid, grace)).await.ok();
    let _ = child.wait().await;
    let _ = std::fs::remove_file(&pid_path);
    Ok(128 + libc::SIGTERM as u8)
}

#[cfg(test)]
mod tests {
    use node_contract::interruption::{NOTICE_FILE_VERSION, from_instance_action, from_rebalance};

    use super::*;

    fn notice(boot: &str, action: bool) -> NoticeFile {
        let interruption = if action {
            from_instance_action("i-1", r#"{"action":"terminate","time":"2026-11-25T20:00:00Z"}"#).unwrap()
        } else {
            from_rebalance("i-1", r#"{"noticeTime":"2026-11-25T19:58:00Z"}"#).unwrap()
        };
        NoticeFile { version: NOTICE_FILE_VERSION, interruption, boot_id: boot.into(), noticed_unix_ms: 0 }
    }

    #[test]
    fn a_gpu_line_reads_back_and_no_other_line_does() {
        for reading in [Some(0), Some(97), None] {
            assert_eq!(parse_gpu_line(&gpu_line(reading)), Some(reading));
        }
        for other in [
            STARTED_LINE,
            "trainer supervise: gpu",
            "trainer supervise: gpu x",
            "gpu 5",
            "[w/0] trainer supervise: gpu 5",
        ] {
            assert_eq!(parse_gpu_line(other), None, "{other}");
        }
    }

    #[test]
    fn the_grace_runs_to_just_before_the_deadline() {
        let deadline = 1_795_636_800;
        let n = notice("b", true);
        assert_eq!(notice_grace(&n, deadline - 120), Duration::from_secs(115));
        assert_eq!(notice_grace(&n, deadline - 6), GRACE);
        assert_eq!(notice_grace(&n, deadline + 30), GRACE);
        assert_eq!(notice_grace(&notice("b", false), deadline), REBALANCE_GRACE);
    }

    #[test]
    fn a_rank_gets_the_file_and_what_a_notice_already_there_says() {
        let path = Path::new("/r/var/lib/deeplearning/interruption.json");
        assert_eq!(notice_env(path, None, 0), vec![(FILE_VAR.to_owned(), path.display().to_string())]);
        let env = notice_env(path, Some(&notice("b", true)), 1_795_636_800 - 90);
        assert_eq!(
            env[1..],
            [
                (KIND_VAR.to_owned(), "spot-instance-action".to_owned()),
                (DEADLINE_VAR.to_owned(), "2026-11-25T20:00:00Z".to_owned()),
                (SECONDS_LEFT_VAR.to_owned(), "90".to_owned()),
            ]
        );
        let env = notice_env(path, Some(&notice("b", false)), 0);
        assert_eq!(env[1..], [(KIND_VAR.to_owned(), "rebalance-recommendation".to_owned())]);
    }

    #[test]
    fn only_this_boots_notice_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("interruption.json");
        assert!(read_notice(&path, Some("b")).is_none());
        std::fs::write(&path, notice("b", true).to_text()).unwrap();
        assert_eq!(read_notice(&path, Some("b")), Some(notice("b", true)));
        assert_eq!(read_notice(&path, None), Some(notice("b", true)));
        assert!(read_notice(&path, Some("another boot")).is_none());
        std::fs::write(&path, "{\"version\": 9}").unwrap();
        assert!(read_notice(&path, Some("b")).is_none());
    }
}
