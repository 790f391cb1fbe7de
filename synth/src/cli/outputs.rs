//! `synth outputs`: a stack's outputs on stdout, as text or JSON.

use super::ExitCode;
use super::cloud::{self, StackArgs};
use crate::deploy::port::Cloud;

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

/// Runs `synth outputs`.
pub(super) fn run(args: &OutputsArgs) -> ExitCode {
    cloud::block_on(async {
        let cloud = match cloud::connect(args.stack.aws.region, args.stack.aws.profile.as_deref()).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        let stack = match cloud.stack(&args.stack.stack).await {
            Ok(Some(s)) => s,
            Ok(None) => return cloud::cloud_error(format!("no stack {} in {}", args.stack.stack, cloud.region())),
            Err(e) => return cloud::cloud_error(e),
        };
        if args.json {
            let map: serde_json::Map<String, serde_json::Value> =
                stack.outputs.iter().map(|o| (o.key.clone(), o.value.clone().into())).collect();
            println!("{}", serde_json::Value::Object(map));
        } else {
            cloud::print_outputs(&stack.outputs);
        }
        ExitCode::Success
    })
}
