//! `trainer`: two products in one binary, each with its own home.
//!
//! - [`jobs`], cluster job control: `trainer launch -- CMD...` runs any
//!   command on every host with the torchrun environment and leaves nothing
//!   behind (`launch`, the remote `supervise`, `kill`, `doctor`, and the
//!   hosts, ssh, process and profile pieces they share).
//! - [`train`], the native data-parallel trainer: `trainer train` (MLP and
//!   LeNet on MNIST or CIFAR-10, a TCP ring on CPUs, NCCL on GPUs) and
//!   `trainer bench` (all-reduce bandwidth over the same collectives) and
//!   `trainer compare` (whether two finished runs agree, read through the
//!   trainer's own checkpoint reader).
//!
//! What both read, at the top, in leaf modules: [`agent_state`] (the
//! agent's state file), [`jobdir`] (a job's directory on EFS and the
//! variable naming the job) and [`exit`] (the exit codes). Node paths are
//! under the filesystem root through `node_contract::files::under`, the
//! agent's own helper.
//! Arrows run one way: `jobs` may use `train` (doctor asks the CUDA probe
//! whether the GPU libraries load), `train` never uses `jobs`.
//!
//! Inputs are the files the agent writes (docs/ARCHITECTURE.md, "The node
//! contract", "trainer"), read through the node contract's readers
//! (`node_contract::files`, `node_contract::state`) under a filesystem root
//! (`--root`, `/` in production): the cluster's membership from one
//! channel, the agent's state file (the generation and its manifest; the
//! workers file and hostfile only when a user names one with `--hosts`),
//! and this node's environment from `/etc/profile.d/deeplearning.sh`, the
//! known hosts from `/etc/ssh/ssh_known_hosts`.

// The module maps in these docs link to every room, public or not: the
// crate's readers are its developers (`cargo doc --document-private-items`),
// and a room made private to narrow the surface keeps its place on the map.
#![allow(rustdoc::private_intra_doc_links)]

mod agent_state;
mod error;
mod exit;
mod jobdir;
mod jobs;
pub mod train;

use clap::{Parser, Subcommand};

use jobs::{doctor, install_check, kill, launch, supervise};
use train::bench;

pub use error::Error;
use exit::{EXIT_OK, EXIT_USAGE};

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
    /// Measure all-reduce bandwidth between the ranks (run it under `trainer launch`; `--device cuda`: NCCL between GPUs).
    Bench(bench::Args),
    /// Check every host: SSH, agent generation, GPUs, NCCL, shared EFS, clocks (`--local`: this host's install only).
    Doctor(doctor::Args),
    /// Train an MLP or LeNet on MNIST or CIFAR-10, data-parallel over the ranks
    /// `trainer launch` starts.
    Train(train::args::Args),
    /// Compare two finished `trainer train` runs (last epoch's loss and test accuracy, final
    /// checkpoint's weights); exit 1 when they differ or cannot be compared.
    Compare(train::compare::Args),
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

/// Runs a parsed command line, prints what failed (an error and its
/// causes, one per line), and returns the process exit code.
pub fn main(cli: Cli) -> u8 {
    match run(cli) {
        Ok(code) => code,
        // A command that prints and whose reader went away ends quietly.
        Err(e) => match e.chain().find_map(|c| c.downcast_ref::<cli_output::Closed>()) {
            Some(cli_output::Closed::ReaderGone) => EXIT_OK,
            _ => {
                cli_output::errln!("trainer: error: {}", cli_output::report(e.as_ref()));
                EXIT_USAGE
            }
        },
    }
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
        Command::Doctor(args) if args.local => install_check::run(&args.root)?,
        Command::Doctor(args) => runtime.block_on(doctor::run(args))?,
        Command::DoctorLocal(args) => doctor::run_local(&args)?,
        Command::Compare(args) => train::compare::run(&args)?,
        Command::Train(args) => train::run::run(&args).unwrap_or_else(|e| {
            if !matches!(e, train::run::TrainError::Output(cli_output::Closed::ReaderGone)) {
                cli_output::errln!("trainer train: error: {}", cli_output::report(&e));
            }
            e.exit_code()
        }),
    };
    // Reader threads blocked on stdin must not keep the process alive.
    runtime.shutdown_background();
    Ok(code)
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
