//! `synth outputs`: a stack's outputs on stdout, as text or JSON.

use super::ExitCode;
use super::cloud::{self, StackArgs};

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
        let (_, stack) = match cloud::connect_to_stack(&args.stack).await {
            Ok(found) => found,
            Err(code) => return code,
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
