//! `trainer supervise` (hidden): the remote half of `launch`, one per rank,
//! started by `ssh`. It runs CMD with the torchrun environment
//! ([`torchrun`], plus what the launcher passes with `--env`, and the
//! agent's profile) and its own error file in a session
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
use crate::jobs::torchrun::{self, Place};

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
pub fn pid_file(root: &Path, job: &str, rank: u32) -> PathBuf {
    crate::under(root, RUN_DIR).join(job).join(format!("{rank}.pid"))
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
pub async fn run(args: Args) -> Result<u8> {
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
            cli_output::errln!("{who}: cannot start {:?}: {e}", args.command[0]);
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
                    cli_output::errln!("{who}: the command was killed by signal {signal}");
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
