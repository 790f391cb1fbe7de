//! `synth diff`: what `synth deploy` would change, from a change set that is
//! deleted afterwards; nothing is executed and nothing is uploaded.

use super::cloud;
use super::deploy::{DeployTarget, change_set, no_changes, not_updatable, prepare, preview_update, unless_interrupted};
use super::{ExitCode, Input};
use crate::deploy::monitor::Display;
use crate::deploy::port::{Cloud, StackRequest, TemplateSource};

/// Arguments of `synth diff`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:
  synth diff blueprints/gpu-cluster.yaml --region us-east-1

Prints, on stdout, every resource the update would add (+), change in place
(~), replace (!), maybe replace (?) or delete (-), with the properties that
change; `(create-only)` marks a property whose change replaces the resource.
Replacements that lose data (the master instance, the EFS file system, the
VPC under it) are listed last: `synth deploy` refuses them without
--allow-replacement.

Exit codes: 0 the preview was printed, 1 the blueprint has problems, 2 usage,
credentials or AWS error.")]
pub struct DiffArgs {
    #[command(flatten)]
    input: Input,

    #[command(flatten)]
    target: DeployTarget,
}

/// Runs `synth diff`.
pub(super) fn run(args: &DiffArgs) -> ExitCode {
    cloud::block_on(async {
        match diff(args).await {
            Ok(code) | Err(code) => code,
        }
    })
}

async fn diff(args: &DiffArgs) -> Result<ExitCode, ExitCode> {
    let display = Display::new();
    let (cloud, p) = prepare(&args.input, &args.target, false, &display).await?;
    display.finish();
    let flag = cloud::region_flag(&cloud);
    let Some(existing) = cloud.stack(&p.stack).await.map_err(cloud::cloud_error)? else {
        let count = p.template["Resources"].as_object().map_or(0, |r| r.len());
        println!(
            "Stack {} does not exist in {}: `synth deploy` would create it ({count} resources).",
            p.stack,
            cloud.region()
        );
        return Ok(ExitCode::Success);
    };
    if let Some(why) = not_updatable(&existing, &flag) {
        eprintln!("error: {why}");
        return Err(ExitCode::Error);
    }
    if p.compact.len() > crate::deploy::staging::INLINE_TEMPLATE_LIMIT {
        eprintln!(
            "error: the template is {} bytes, over the inline limit; `synth diff` uploads nothing, so run \
             `synth deploy` (it stages the template and previews the same change set before applying it)",
            p.compact.len()
        );
        return Err(ExitCode::Error);
    }
    let request = StackRequest {
        name: p.stack.clone(),
        template: TemplateSource::Body(p.compact.clone()),
        parameters: p.parameters.clone(),
        keep_on_failure: false,
    };
    let created = std::cell::RefCell::new(None);
    let set = unless_interrupted(&cloud, &created, change_set(&cloud, &request, &created)).await?;
    let deleted = cloud.delete_change_set(&set.id).await;
    if no_changes(&set) {
        println!("Stack {}: no changes.", p.stack);
        return Ok(ExitCode::Success);
    }
    if set.status == "FAILED" {
        eprintln!(
            "error: CloudFormation cannot make the change set: {}",
            set.reason.as_deref().unwrap_or("no reason given")
        );
        return Err(ExitCode::Error);
    }
    let preview = preview_update(&cloud, &existing, &p, &set).await?;
    print!("{}", preview.render(&p.stack));
    for r in preview.refusals() {
        println!("would be refused: {}", r.render());
    }
    if let Err(e) = deleted {
        eprintln!("warning: the preview's change set could not be deleted ({e}); it is never executed");
    }
    Ok(ExitCode::Success)
}
