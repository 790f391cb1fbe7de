//! `synth delete`: deletes a cluster's stack and watches it to the end;
//! says what is retained and why.

use serde_json::Value as Json;

use super::ExitCode;
use super::cloud::{self, StackArgs};
use crate::deploy::monitor::{self, Display, now_ms};
use crate::deploy::port::Cloud;
use crate::deploy::watch::{Operation, Planned, Watcher, clock};

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

/// Resources a delete keeps, with why, from the template's deletion policies.
pub fn retained(template: &Json) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(resources) = template.get("Resources").and_then(Json::as_object) {
        for (id, r) in resources {
            if let Some(policy @ ("Retain" | "RetainExceptOnCreate" | "Snapshot")) =
                r.get("DeletionPolicy").and_then(Json::as_str)
            {
                out.push((id.clone(), format!("its DeletionPolicy is {policy}")));
            }
        }
    }
    out
}

/// Runs `synth delete`.
pub(super) fn run(args: &DeleteArgs) -> ExitCode {
    cloud::block_on(async {
        match delete(args).await {
            Ok(code) | Err(code) => code,
        }
    })
}

async fn delete(args: &DeleteArgs) -> Result<ExitCode, ExitCode> {
    let cloud = cloud::connect(args.stack.aws.region, args.stack.aws.profile.as_deref()).await?;
    let flag = cloud::region_flag(&cloud);
    let name = &args.stack.stack;
    let Some(stack) = cloud.stack(name).await.map_err(cloud::cloud_error)? else {
        eprintln!("error: no stack {name} in {}", cloud.region());
        return Err(ExitCode::Error);
    };
    let resources = cloud.resources(name).await.map_err(cloud::cloud_error)?;
    let template: Json =
        serde_json::from_str(&cloud.template(name).await.map_err(cloud::cloud_error)?).unwrap_or(Json::Null);
    let question = format!(
        "Delete stack {name} in {} and its {} resources (the nodes, their disks, the EFS file system it made)?",
        cloud.region(),
        resources.len()
    );
    if cloud::ask(&question, args.yes).await? != cloud::Answer::Yes {
        eprintln!("Nothing was deleted.");
        return Err(ExitCode::Invalid);
    }
    let started = now_ms();
    let boundary = monitor::newest_event(&cloud, &stack.id).await.map_err(cloud::cloud_error)?;
    cloud.delete_stack(name).await.map_err(cloud::cloud_error)?;
    let display = Display::new();
    display.line("Deleting", &format!("stack {name} ({} resources)", resources.len()));
    let plan = resources
        .iter()
        .map(|r| (r.logical_id.clone(), Planned { resource_type: r.resource_type.clone(), optional: false }))
        .collect();
    let mut watcher = Watcher::new(Operation::Delete, plan);
    let ending = monitor::watch(&cloud, &stack.id, &mut watcher, boundary.as_deref(), &display)
        .await
        .map_err(cloud::cloud_error)?;
    cloud::report_ending(ending, &watcher, &display, name, &flag, false, started)?;
    eprintln!("{:>12} stack {name} deleted in {}", "Finished", clock(now_ms() - started));
    let mut kept = retained(&template);
    for e in watcher.events() {
        if e.status == "DELETE_SKIPPED" && !kept.iter().any(|(id, _)| *id == e.logical_id) {
            kept.push((e.logical_id.clone(), e.reason.clone().unwrap_or_else(|| "CloudFormation skipped it".into())));
        }
    }
    for (id, why) in kept {
        eprintln!("{:>12} {id}: {why}; delete it yourself when you no longer need it", "Retained");
    }
    Ok(ExitCode::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retained_resources_are_named_with_their_policy() {
        let t = serde_json::json!({"Resources": {
            "Fs": {"Type": "AWS::EFS::FileSystem", "DeletionPolicy": "Retain"},
            "Vpc": {"Type": "AWS::EC2::VPC", "DeletionPolicy": "Delete"},
            "Q": {"Type": "AWS::SQS::Queue"}
        }});
        assert_eq!(retained(&t), vec![("Fs".to_owned(), "its DeletionPolicy is Retain".to_owned())]);
    }
}
