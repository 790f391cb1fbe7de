//! `synth delete`: deletes a cluster's stack and watches it to the end;
//! says what is retained and why. The flow is `crate::deploy::delete`.

use super::cloud::{self, StackArgs};
use super::terminal::Terminal;
use crate::exit::ExitCode;

/// Arguments of `synth delete`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth delete resnet-training             # asks first
  synth delete resnet-training --yes

Everything the stack made is deleted, the EFS file system and its files
included (an existing file system named in the blueprint is not the
stack's, and stays). Ctrl-C stops watching, not the delete (exit 130).")]
pub struct DeleteArgs {
    #[command(flatten)]
    stack: StackArgs,

    /// Do not ask (needed when not on a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
}

/// Runs `synth delete`.
pub(super) fn run(args: &DeleteArgs) -> ExitCode {
    let name = &args.stack.stack;
    cloud::with_cloud(&args.stack.aws, |cloud| async move {
        crate::deploy::delete::delete(&Terminal, &cloud, name, args.yes).await
    })
}
