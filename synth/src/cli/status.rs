//! `synth status`: one stack's state, its formation and its outputs; or
//! every synth stack of the region. The flow is `crate::deploy::status`.

use super::cloud::{self, AwsArgs};
use super::terminal::Terminal;
use crate::deploy::status;
use crate::exit::ExitCode;

/// Arguments of `synth status`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth status                       # every cluster stack in the region
  synth status resnet-training       # its state, its formation (with a phase
                                     # table: median and slowest node per
                                     # phase), its outputs")]
pub struct StatusArgs {
    /// The stack; without it, every stack synth made in the region.
    #[arg(value_name = "STACK")]
    stack: Option<String>,

    #[command(flatten)]
    aws: AwsArgs,
}

/// Runs `synth status`.
pub(super) fn run(args: &StatusArgs) -> ExitCode {
    cloud::with_cloud(&args.aws, |cloud| async move {
        match &args.stack {
            None => status::list(&Terminal, &cloud).await,
            Some(name) => status::show(&Terminal, &cloud, name).await,
        }
    })
}
