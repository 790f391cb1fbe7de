//! `trainer kill [--job NAME]`: stops a job's processes on every host, for
//! when its launcher could not (killed with `kill -9`, its machine lost).
//!
//! Each host runs `trainer kill-local` (hidden) over ssh. It reads the pid
//! files the supervisors keep (`/run/deeplearning-trainer/<job>/<rank>.pid`:
//! the supervisor's pid and CMD's process group), checks that the processes
//! are still the job's (the supervisor's command line, `TRAINER_JOB` in the
//! group's environment: pids are reused), stops them, and says what it
//! stopped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::exit::{EXIT_FAILED, EXIT_OK};
use crate::jobdir::JOB_VAR;
use crate::jobs::hosts;
use crate::jobs::process;
use crate::jobs::ssh::{self, SshArgs};
use crate::jobs::supervise::RUN_DIR;

/// Arguments of `trainer kill`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job to stop; default: every job with processes left.
    #[arg(long, value_parser = crate::jobs::launch::parse_job)]
    pub job: Option<String>,
    /// Hosts, as for `trainer launch`.
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Filesystem root the agent's files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
    /// SSH options.
    #[command(flatten)]
    pub ssh: SshArgs,
}

/// Arguments of `trainer kill-local`.
#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// The job to stop; default: every job.
    #[arg(long, value_parser = crate::jobs::launch::parse_job)]
    pub job: Option<String>,
    /// Filesystem root the pid files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
}

/// Runs `kill-local` on every host in parallel and prints what each stopped.
pub(crate) async fn run(args: Args) -> Result<u8> {
    let hosts = hosts::job_hosts(args.hosts.as_deref(), &args.root)?;
    let mut remote = vec![args.ssh.remote_trainer()?, "kill-local".to_owned()];
    if let Some(job) = &args.job {
        remote.extend(["--job".to_owned(), job.clone()]);
    }
    let remote = format!("exec {}", ssh::quote(&remote));
    let permits = args.ssh.permits("trainer kill")?;
    let mut tasks = Vec::new();
    for host in &hosts {
        let mut command = tokio::process::Command::new("ssh");
        command.args(args.ssh.args(&host.name, &remote)).stdin(Stdio::null()).kill_on_drop(true);
        let permits = permits.clone();
        let output = async move {
            let _permit = permits.acquire_owned().await;
            command.output().await
        };
        tasks.push((host.name.clone(), tokio::spawn(output)));
    }
    let mut code = EXIT_OK;
    // Every host's answer is awaited even when stdout fails: returning early
    // would drop (and kill) the ssh clients still stopping ranks.
    let mut unwritten: Option<cli_output::Closed> = None;
    for (host, task) in tasks {
        let output = task
            .await
            .map_err(|e| Error::Spawn { program: "ssh".into(), source: std::io::Error::other(e) })?
            .map_err(|source| Error::Spawn { program: "ssh".into(), source })?;
        let relayed: String =
            String::from_utf8_lossy(&output.stdout).lines().map(|line| format!("[{host}] {line}\n")).collect();
        if unwritten.is_none() {
            unwritten = cli_output::print(&relayed).err();
        }
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let why = ssh::explain_failure(&host, stderr.lines().last().unwrap_or(""));
            cli_output::errln!("[{host}] could not check for the job's processes: {why}");
            code = EXIT_FAILED;
        }
    }
    match unwritten {
        Some(failed @ cli_output::Closed::Failed(_)) => Err(failed.into()),
        _ => Ok(code),
    }
}

/// Stops this host's ranks from their pid files; prints one line per rank.
pub(crate) fn run_local(args: &LocalArgs) -> Result<u8> {
    let base = node_contract::files::under(&args.root, RUN_DIR);
    let jobs: Vec<String> = match &args.job {
        Some(job) => vec![job.clone()],
        None => match std::fs::read_dir(&base) {
            Ok(dir) => dir.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect(),
            Err(_) => Vec::new(),
        },
    };
    let mut found = false;
    // Printed once every rank is stopped: a failed write must not leave one running.
    let mut out = String::new();
    for job in jobs {
        let dir = base.join(&job);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == node_contract::idle::PID_FILE_EXTENSION))
            .collect();
        files.sort();
        for file in files {
            found = true;
            out += &format!("{}\n", stop_rank(&job, &file));
            let _ = std::fs::remove_file(&file);
        }
        let _ = std::fs::remove_dir(&dir);
    }
    if !found {
        match &args.job {
            Some(job) => out += &format!("no process of job {job} here\n"),
            None => out += "no trainer job here\n",
        }
    }
    Ok(cli_output::print_report(&out, EXIT_OK)?)
}

/// Stops the rank of one pid file; says what it did.
fn stop_rank(job: &str, file: &Path) -> String {
    let rank = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let Some((supervisor, pgid)) = node_contract::idle::parse_pid_file(&text) else {
        return format!("job {job} rank {rank}: unreadable pid file {} removed", file.display());
    };
    let marker = format!("{JOB_VAR}={job}");
    let supervisor_alive = {
        let words = process::cmdline(supervisor);
        words.iter().any(|w| w == "supervise") && words.iter().any(|w| w == job)
    };
    let group: Vec<i32> =
        process::with_environ(&marker).into_iter().filter(|p| process::pgid(*p) == Some(pgid)).collect();
    if !supervisor_alive && group.is_empty() {
        return format!("job {job} rank {rank}: not running (stale pid file removed)");
    }
    if supervisor_alive {
        // The supervisor stops its group itself (SIGTERM, then SIGKILL).
        process::signal_process(supervisor, libc::SIGTERM);
    }
    if !group.is_empty() {
        process::stop_group(pgid, Duration::from_millis(2000));
    }
    if supervisor_alive {
        std::thread::sleep(Duration::from_millis(100));
        if process::cmdline(supervisor).iter().any(|w| w == "supervise") {
            process::signal_process(supervisor, libc::SIGKILL);
        }
    }
    format!(
        "job {job} rank {rank}: stopped {} (process group {pgid}, {} process(es))",
        if supervisor_alive { format!("supervisor {supervisor} and its command") } else { "the command".to_owned() },
        group.len()
    )
}
