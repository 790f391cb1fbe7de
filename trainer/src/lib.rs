//! `trainer`: runs a training command on every host of the cluster and
//! leaves nothing behind.
//!
//! - [`launch`]: `trainer launch -- CMD...` on the master starts one remote
//!   [`supervise`] per rank through the system `ssh` client (host key
//!   checking on, the agent's known hosts), prefixes and logs every line, and
//!   stops every rank on every host when one fails, on Ctrl-C/SIGTERM, or
//!   when a connection drops.
//! - [`supervise`]: the hidden remote half: owns CMD's process group and
//!   kills it when its parent (the ssh session) goes away.
//! - [`bench`]: `trainer bench` measures all-reduce bandwidth between the
//!   ranks of a job (nccl-tests style: algbw, busbw).
//! - [`doctor`]: `trainer doctor` checks every host is ready for a job.
//! - [`install_check`]: `trainer doctor --local` checks this host's install
//!   (agent, unit, ssh client) with no SSH and no cluster, for image builds.
//! - [`kill`]: `trainer kill` stops a job's leftovers on every host from the
//!   pid files the supervisors keep.
//!
//! Inputs are the files the agent writes (DESIGN.md section 3):
//! `/opt/deeplearning/workers`, `/opt/deeplearning/hostfile`,
//! `/etc/profile.d/deeplearning.sh`, `/etc/ssh/ssh_known_hosts`, all under a
//! filesystem root (`--root`, `/` in production).

pub mod agent_state;
pub mod bench;
pub mod doctor;
pub mod error;
pub mod hosts;
pub mod install_check;
pub mod kill;
pub mod launch;
pub mod process;
pub mod profile;
pub mod ssh;
pub mod supervise;
pub mod train;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

pub use error::Error;

/// Success.
pub const EXIT_OK: u8 = 0;
/// The checked thing failed (a rank failed, a host is unreachable).
pub const EXIT_FAILED: u8 = 1;
/// Usage or internal error.
pub const EXIT_USAGE: u8 = 2;

/// Runs training commands across the cluster.
#[derive(Debug, Parser)]
#[command(name = "trainer", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD on every host of the cluster with the torchrun environment.
    Launch(launch::Args),
    /// Stop a job's processes on every host (after a launcher died by kill -9).
    Kill(kill::Args),
    /// Measure all-reduce bandwidth between the ranks (run it under `trainer launch`).
    Bench(bench::Args),
    /// Check every host: SSH, agent generation, GPUs, NCCL, shared EFS, clocks (`--local`: this host's install only).
    Doctor(doctor::Args),
    /// Train an MLP or LeNet on MNIST or CIFAR-10, data-parallel over the ranks
    /// `trainer launch` starts.
    Train(train::args::Args),
    /// Remote half of `doctor`: reports this host's facts.
    #[command(hide = true)]
    DoctorLocal(doctor::LocalArgs),
    /// Remote half of `launch`: runs CMD in its own process group on this host.
    #[command(hide = true)]
    Supervise(supervise::Args),
    /// Remote half of `kill`: stops this host's ranks from their pid files.
    #[command(hide = true)]
    KillLocal(kill::LocalArgs),
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let code = match cli.command {
        Command::Launch(args) => runtime.block_on(launch::run(args))?,
        Command::Kill(args) => runtime.block_on(kill::run(args))?,
        Command::Supervise(args) => runtime.block_on(supervise::run(args))?,
        Command::KillLocal(args) => kill::run_local(&args)?,
        Command::Bench(args) => bench::run(&args)?,
        Command::Doctor(args) if args.local => install_check::run(&args.root),
        Command::Doctor(args) => runtime.block_on(doctor::run(args))?,
        Command::DoctorLocal(args) => doctor::run_local(&args)?,
        Command::Train(args) => train::run::run(&args).unwrap_or_else(|e| {
            eprintln!("trainer train: error: {e}");
            e.exit_code()
        }),
    };
    // Reader threads blocked on stdin must not keep the process alive.
    runtime.shutdown_background();
    Ok(code)
}

/// `path` (absolute, as on a node) under the filesystem root `root`.
pub fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definition_is_consistent() {
        // clap checks names, groups and conflicts of every subcommand here
        // instead of panicking at a user's first `--help`.
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }
}
