//! `trainer supervise` (hidden): the remote half of `launch`, one per rank,
//! started by `ssh`. It runs CMD with the torchrun environment in a session
//! and process group of its own, records the group in a pid file for
//! `trainer kill`, and stops the whole group when its parent goes away:
//!
//! - its stdin closes (the launcher closed it, or ssh died and sshd closed
//!   the session: the portable signal, TESTING.md);
//! - SIGTERM, SIGHUP or SIGINT, including the `PR_SET_PDEATHSIG` SIGTERM the
//!   kernel sends when the sshd session process exits.
//!
//! It exits with CMD's code (128 + signal when CMD was killed), after killing
//! anything CMD left running in its group.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::error::{Error, Result};
use crate::jobdir::JOB_VAR;
use crate::jobs::process;

/// Where supervisors keep their pid files, as on a node: `<dir>/<job>/<rank>.pid`.
pub const RUN_DIR: &str = "/run/deeplearning-trainer";

/// The line a supervisor writes to its stderr before CMD starts (after
/// whatever the remote shell's start-up files print):
/// the launcher takes it (it is not printed or logged) as "the connection is
/// made and this rank's supervisor is up", which frees its slot among the
/// ssh connections being set up (`--ssh-concurrency`).
pub const STARTED_LINE: &str = "trainer supervise: up";

/// How long CMD's group gets between SIGTERM and SIGKILL when it is stopped.
const GRACE: Duration = Duration::from_millis(1500);

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
    /// The command and its arguments.
    #[arg(required = true, last = true)]
    pub command: Vec<String>,
}

/// The pid file of `rank` of `job` under `root`.
pub fn pid_file(root: &Path, job: &str, rank: u32) -> PathBuf {
    crate::under(root, RUN_DIR).join(job).join(format!("{rank}.pid"))
}

/// Runs CMD until it exits or the parent goes away; returns the exit code.
pub async fn run(args: Args) -> Result<u8> {
    // First, so an sshd session that dies from here on takes us along.
    process::die_with_parent(libc::SIGTERM);
    let who = format!("trainer supervise: rank {} on {}", args.rank, args.host);
    let mut env: Vec<(String, String)> = crate::jobs::profile::read(&args.root)?
        .into_iter()
        .filter(|(name, _)| crate::jobs::profile::wanted(name))
        .collect();
    env.extend(
        [
            ("RANK", args.rank.to_string()),
            ("LOCAL_RANK", args.local_rank.to_string()),
            ("WORLD_SIZE", args.world_size.to_string()),
            ("LOCAL_WORLD_SIZE", args.local_world_size.to_string()),
            ("GROUP_RANK", args.group_rank.to_string()),
            ("ROLE_RANK", args.rank.to_string()),
            ("MASTER_ADDR", args.master_addr.clone()),
            ("MASTER_PORT", args.master_port.to_string()),
            (JOB_VAR, args.job.clone()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );

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
    let mut command = tokio::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).envs(env).stdin(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| if libc::setsid() == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("{who}: cannot start {:?}: {e}", args.command[0]);
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or_default();
    let pid_path = pid_file(&args.root, &args.job, args.rank);
    let write_pid = || -> std::io::Result<()> {
        std::fs::create_dir_all(pid_path.parent().expect("a pid file has a directory"))?;
        std::fs::write(&pid_path, format!("{} {pgid}\n", std::process::id()))
    };
    if let Err(source) = write_pid() {
        process::stop_group(pgid, GRACE);
        return Err(Error::Write { path: pid_path, source });
    }

    let stopped_because = tokio::select! {
        status = child.wait() => {
            let code = status.as_ref().map(|s| process::exit_code(*s)).unwrap_or(1);
            if let Ok(status) = status {
                use std::os::unix::process::ExitStatusExt;
                if let Some(signal) = status.signal() {
                    eprintln!("{who}: the command was killed by signal {signal}");
                }
            }
            // Whatever CMD left running in its group goes with it.
            tokio::task::spawn_blocking(move || process::stop_group(pgid, Duration::from_millis(500))).await.ok();
            let _ = std::fs::remove_file(&pid_path);
            return Ok(code);
        }
        _ = &mut eof => "its launcher went away (stdin closed)",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!("{who}: stopping the command: {stopped_because}");
    tokio::task::spawn_blocking(move || process::stop_group(pgid, GRACE)).await.ok();
    let _ = child.wait().await;
    let _ = std::fs::remove_file(&pid_path);
    Ok(128 + libc::SIGTERM as u8)
}
