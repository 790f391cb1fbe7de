//! `synth status`: one stack's state, its formation and its outputs; or
//! every synth stack of the region.

use super::ExitCode;
use super::cloud::{self, AwsArgs};
use crate::deploy::formation;
use crate::deploy::monitor::stamp;
use crate::deploy::port::Cloud;

/// Arguments of `synth status`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth status                       # every cluster stack in the region
  synth status resnet-training       # its state, its formation (with a phase table: median and
                                     # slowest node per phase), its outputs")]
pub struct StatusArgs {
    /// The stack; without it, every stack synth made in the region.
    #[arg(value_name = "STACK")]
    stack: Option<String>,

    #[command(flatten)]
    aws: AwsArgs,
}

/// The description every synth template starts with.
const SYNTH_MARK: &str = "Built by synth";

/// Runs `synth status`.
pub(super) fn run(args: &StatusArgs) -> ExitCode {
    cloud::block_on(async {
        let cloud = match cloud::connect(args.aws.region, args.aws.profile.as_deref()).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        match &args.stack {
            None => {
                let stacks = match cloud.stacks().await {
                    Ok(s) => s,
                    Err(e) => return cloud::cloud_error(e),
                };
                let ours: Vec<_> = stacks
                    .iter()
                    .filter(|s| s.description.as_deref().is_some_and(|d| d.contains(SYNTH_MARK)))
                    .collect();
                if ours.is_empty() {
                    eprintln!("No cluster stacks in {}.", cloud.region());
                }
                let width = ours.iter().map(|s| s.name.len()).max().unwrap_or(0);
                for s in ours {
                    let when = s.changed_ms.map(stamp).unwrap_or_default();
                    println!("{:width$}  {:28}  {when}", s.name, s.status, width = width);
                }
                ExitCode::Success
            }
            Some(name) => {
                let stack = match cloud.stack(name).await {
                    Ok(Some(s)) => s,
                    Ok(None) => return cloud::cloud_error(format!("no stack {name} in {}", cloud.region())),
                    Err(e) => return cloud::cloud_error(e),
                };
                println!("stack      {}", stack.name);
                println!("status     {}{}", stack.status, stack.reason.map(|r| format!(": {r}")).unwrap_or_default());
                let formation = match cloud.resources(name).await {
                    Ok(resources) => resources
                        .into_iter()
                        .find(|r| r.resource_type == "AWS::CloudFormation::WaitCondition")
                        .map(|r| format!("{}{}", r.status, r.reason.map(|x| format!(": {x}")).unwrap_or_default()))
                        .unwrap_or_else(|| "not started".to_owned()),
                    Err(e) => format!("unknown ({e})"),
                };
                println!("formation  {formation}");
                if let Some(summary) = formation::timeline(&stack.outputs) {
                    print!("{}", formation::table(&summary));
                }
                cloud::print_outputs(&stack.outputs);
                ExitCode::Success
            }
        }
    })
}
