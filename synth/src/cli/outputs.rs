//! `synth outputs`: a stack's outputs on stdout, as text or JSON.

use super::cloud::{self, StackArgs};
use super::terminal::Terminal;
use crate::exit::ExitCode;

/// Arguments of `synth outputs`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth outputs resnet-training
  synth outputs resnet-training --json | jq -r .MasterAddress")]
pub struct OutputsArgs {
    #[command(flatten)]
    stack: StackArgs,

    /// One JSON object, output name to value.
    #[arg(long)]
    json: bool,
}

/// Runs `synth outputs` (the flow is `crate::deploy::status::outputs`).
pub(super) fn run(args: &OutputsArgs) -> ExitCode {
    let name = &args.stack.stack;
    cloud::with_cloud(&args.stack.aws, |cloud| async move {
        crate::deploy::status::outputs(&Terminal, &cloud, name, args.json).await
    })
}
