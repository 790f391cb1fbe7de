//! `synth events`: every event of a stack, oldest first; `--follow` keeps
//! printing new ones until the stack settles (or Ctrl-C). The flow is
//! `crate::deploy::events`.

use super::cloud::{self, StackArgs};
use super::terminal::Terminal;
use crate::exit::ExitCode;

/// Arguments of `synth events`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth events resnet-training
  synth events resnet-training --follow   # until the stack settles;
                                          # Ctrl-C stops watching only")]
pub struct EventsArgs {
    #[command(flatten)]
    stack: StackArgs,

    /// Keep printing new events until the stack is no longer in progress.
    #[arg(long, short = 'f')]
    follow: bool,
}

/// Runs `synth events`.
pub(super) fn run(args: &EventsArgs) -> ExitCode {
    let name = &args.stack.stack;
    cloud::with_cloud(&args.stack.aws, |cloud| async move {
        crate::deploy::events::print_events(&Terminal, &cloud, name, args.follow).await
    })
}
