//! `synth resume`: brings back a cluster the idle guard scaled down (and
//! starts its master when the guard stopped it). The flow is
//! `crate::deploy::resume`.

use std::time::Duration;

use super::cloud::{self, StackArgs};
use super::terminal::Terminal;
use crate::exit::ExitCode;

/// Arguments of `synth resume`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth resume resnet-training       # after `synth status` says the workers
                                     # were scaled to 0 (blueprint `idle`)

It starts the master if the idle guard stopped it, sets the worker group's
desired capacity back to the stack's WorkerCount, clears the guard's mark,
and waits until the workers are in service and the master has admitted
them. A cluster that is not scaled down is left as it is (exit 0). Ctrl-C
stops watching, not the resume (exit 130).")]
pub struct ResumeArgs {
    #[command(flatten)]
    stack: StackArgs,

    /// How long to wait for the workers to be back, in minutes.
    #[arg(long, value_name = "MINUTES", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1440))]
    timeout: u64,
}

/// Runs `synth resume`.
pub(super) fn run(args: &ResumeArgs) -> ExitCode {
    let name = &args.stack.stack;
    let limit = Duration::from_secs(args.timeout * 60);
    cloud::with_cloud(&args.stack.aws, |cloud| async move {
        crate::deploy::resume::resume(&Terminal, &cloud, name, limit).await
    })
}
