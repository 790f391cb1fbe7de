//! `synth diff`: what `synth deploy` would change, from a change set that is
//! deleted afterwards; nothing is executed and nothing is uploaded.

use super::cloud;
use super::deploy::{DeployTarget, prepared};
use super::input::Input;
use super::terminal::Terminal;
use crate::deploy::console::Console;
use crate::deploy::update;
use crate::exit::ExitCode;

/// Arguments of `synth diff`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:
  synth diff blueprints/gpu-cluster.yaml --region us-east-1

Prints, on stdout, every resource the update would add (+), change in place
(~), replace (!), maybe replace (?) or delete (-), with the properties that
change and, inside them, old → new, named by the blueprint field where synth
knows it (`master.instance_type: p3.2xlarge → p3.8xlarge`); `(create-only)`
marks a property whose change replaces the resource.
Replacements that lose data (the master instance, the EFS file system, the
VPC under it) are listed last: only
`synth deploy --allow-replacement` applies them.

Exit codes: 0 the preview was printed, 1 the blueprint has problems, 2 usage,
credentials or AWS error.")]
pub struct DiffArgs {
    #[command(flatten)]
    input: Input,

    #[command(flatten)]
    target: DeployTarget,
}

/// Runs `synth diff` (the flow is `crate::deploy::update::diff`).
pub(super) fn run(args: &DiffArgs) -> ExitCode {
    cloud::block_on(async {
        let display = Terminal.display();
        let (cloud, p) = match prepared(&args.input, &args.target, false, &display).await {
            Ok(ready) => ready,
            Err(code) => return code,
        };
        display.finish();
        match update::diff(&Terminal, &cloud, &p).await {
            Ok(code) | Err(code) => code,
        }
    })
}
