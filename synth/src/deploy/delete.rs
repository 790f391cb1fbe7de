//! `synth delete`: asks (or takes --yes), deletes a cluster's stack and
//! watches it to the end; says what is retained and why.

use serde_json::Value as Json;

use super::console::{Answer, Console, confirm, fail};
use super::monitor::{self, Watched, region_flag, report_ending};
use std::collections::BTreeSet;

use super::port::{Cloud, Resource, Stack};
use super::template::{Pseudo, parameter_values, resolve};
use super::time::now_ms;
use super::watch::{Operation, Planned, Watcher, clock};
use crate::exit::ExitCode;

/// Resources a delete keeps, with why, from the template's deletion policies.
pub(crate) fn retained(template: &Json) -> Vec<(String, String)> {
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

/// The stack's resources that exist: not already deleted (a rolled-back
/// create lists its resources as `DELETE_COMPLETE`) or skipped, and not
/// left out by their condition with the stack's parameters (the count
/// `deploy` gave when it created them; the local AWS lists those too).
fn existing<'r>(resources: &'r [Resource], template: &Json, stack: &Stack, region: &str) -> Vec<&'r Resource> {
    let made: Option<BTreeSet<String>> = template.get("Resources").map(|_| {
        let values = parameter_values(template, &stack.parameters);
        let pseudo = Pseudo { region: region.to_owned(), stack_name: stack.name.clone(), account_id: None };
        resolve(template, &values, &pseudo).resources.into_keys().collect()
    });
    resources
        .iter()
        .filter(|r| !matches!(r.status.as_str(), "DELETE_COMPLETE" | "DELETE_SKIPPED"))
        .filter(|r| made.as_ref().is_none_or(|m| m.contains(&r.logical_id)))
        .collect()
}

/// The question before a delete: how many resources there are, and of the
/// ones a user cares about (nodes, their disks, a file system) only those
/// that are there and not retained.
fn question(name: &str, region: &str, status: &str, there: &[&Resource], kept: &[(String, String)]) -> String {
    if there.is_empty() {
        return format!("Delete stack {name} in {region} ({status}: it has no resources left)?");
    }
    let has = |t: &str| there.iter().any(|r| r.resource_type == t && !kept.iter().any(|(id, _)| *id == r.logical_id));
    let mut named = Vec::new();
    if has("AWS::EC2::Instance") || has("AWS::AutoScaling::AutoScalingGroup") {
        named.push("the nodes and their disks");
    }
    if has("AWS::EFS::FileSystem") {
        named.push("the EFS file system it made");
    }
    if has("AWS::FSx::FileSystem") {
        named.push("the FSx for Lustre file system");
    }
    let n = there.len();
    let noun = if n == 1 { "resource" } else { "resources" };
    if named.is_empty() {
        format!("Delete stack {name} in {region} and its {n} {noun}?")
    } else {
        format!("Delete stack {name} in {region} and its {n} {noun} ({})?", named.join(", "))
    }
}

/// How to delete a retained resource by hand, when there is a command for
/// its kind.
fn delete_command(resource_type: &str, physical: &str, region: &str) -> Option<String> {
    match resource_type {
        "AWS::Logs::LogGroup" => {
            Some(format!("aws logs delete-log-group --log-group-name {physical} --region {region}"))
        }
        "AWS::EFS::FileSystem" => Some(format!(
            "aws efs delete-file-system --file-system-id {physical} --region {region} (after its mount targets)"
        )),
        _ => None,
    }
}

/// Deletes the stack `name` (asking first unless `yes`) and watches it go.
pub(crate) async fn delete<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str, yes: bool) -> ExitCode {
    match delete_inner(console, cloud, name, yes).await {
        Ok(code) | Err(code) => code,
    }
}

async fn delete_inner<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    name: &str,
    yes: bool,
) -> Result<ExitCode, ExitCode> {
    let flag = region_flag(cloud);
    let Some(stack) = cloud.stack(name).await.map_err(|e| fail(console, e))? else {
        return Err(super::status::missing(console, cloud, name).await);
    };
    let resources = cloud.resources(name).await.map_err(|e| fail(console, e))?;
    let template: Json =
        serde_json::from_str(&cloud.template(name).await.map_err(|e| fail(console, e))?).unwrap_or(Json::Null);
    let there = existing(&resources, &template, &stack, cloud.region());
    let question = question(name, cloud.region(), &stack.status, &there, &retained(&template));
    if confirm(console, &question, yes).await? != Answer::Yes {
        console.noteln("Nothing was deleted.");
        return Err(ExitCode::Invalid);
    }
    let started = now_ms();
    let boundary = monitor::newest_event(cloud, &stack.id).await.map_err(|e| fail(console, e))?;
    cloud.delete_stack(name).await.map_err(|e| fail(console, e))?;
    let display = console.display();
    display.line("Deleting", &format!("stack {name} ({} resources)", there.len()));
    let plan = there
        .iter()
        .map(|r| (r.logical_id.clone(), Planned { resource_type: r.resource_type.clone(), optional: false }))
        .collect();
    let mut watcher = Watcher::new(Operation::Delete, plan);
    let ending = monitor::watch(cloud, &stack.id, &mut watcher, boundary.as_deref(), &display, console.interrupted())
        .await
        .map_err(|e| fail(console, e))?;
    let watched = Watched { stack: name, flag: &flag, kept: false, started_ms: started };
    report_ending(console, ending, &watcher, &display, watched)?;
    console.noteln(&format!("{:>12} stack {name} deleted in {}", "Finished", clock(now_ms() - started)));
    let mut kept = retained(&template);
    for e in watcher.events() {
        if e.status == "DELETE_SKIPPED" && !kept.iter().any(|(id, _)| *id == e.logical_id) {
            kept.push((e.logical_id.clone(), e.reason.clone().unwrap_or_else(|| "CloudFormation skipped it".into())));
        }
    }
    for (id, why) in kept {
        // Its name, as AWS gave it (the log group's, the file system's id).
        let resource = resources.iter().find(|r| r.logical_id == id);
        let physical =
            resource.and_then(|r| r.physical_id.clone()).or_else(|| monitor::physical_id(watcher.events(), &id));
        let command = match (resource, &physical) {
            (Some(r), Some(p)) => delete_command(&r.resource_type, p, cloud.region()),
            _ => None,
        };
        let named = physical.map(|p| format!("{id} ({p})")).unwrap_or(id);
        let how = command.map_or_else(String::new, |c| format!(": `{c}`"));
        console
            .noteln(&format!("{:>12} {named}: {why}; delete it yourself when you no longer need it{how}", "Retained"));
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

    /// `delete --yes` names what it keeps by the name AWS gave it.
    #[tokio::test(start_paused = true)]
    async fn a_retained_resource_is_named() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        use crate::deploy::port::{Resource, Stack};
        use crate::deploy::watch::tests::ev;
        let cloud = FakeCloud::default();
        let stack =
            Stack { name: "demo".into(), id: "demo-id".into(), status: "CREATE_COMPLETE".into(), ..Stack::default() };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let group = Resource {
            logical_id: "NodeLogGroup".into(),
            physical_id: Some("/deeplearning-cluster/demo/run-1".into()),
            resource_type: "AWS::Logs::LogGroup".into(),
            ..Resource::default()
        };
        cloud.resources.lock().unwrap().insert("demo".into(), vec![group]);
        let template =
            r#"{"Resources": {"NodeLogGroup": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Retain"}}}"#;
        cloud.templates.lock().unwrap().insert("demo".into(), template.into());
        let stack_type = "AWS::CloudFormation::Stack";
        {
            let mut script = cloud.event_script.lock().unwrap();
            script.push_back(vec![]);
            script.push_back(vec![
                ev(3, 9, "demo", stack_type, "DELETE_COMPLETE", None),
                ev(2, 5, "NodeLogGroup", "AWS::Logs::LogGroup", "DELETE_SKIPPED", None),
                ev(1, 1, "demo", stack_type, "DELETE_IN_PROGRESS", Some("User Initiated")),
            ]);
        }
        let console = FakeConsole::default();
        assert_eq!(delete(&console, &cloud, "demo", true).await, ExitCode::Success);
        let err = console.stderr();
        assert!(
            err.contains(
                "    Retained NodeLogGroup (/deeplearning-cluster/demo/run-1): its DeletionPolicy is Retain; \
                 delete it yourself when you no longer need it: `aws logs delete-log-group --log-group-name \
                 /deeplearning-cluster/demo/run-1 --region us-east-1`"
            ),
            "{err}"
        );
    }

    /// Issue 35: delete asked about every resource the stack lists (43 where
    /// create said 42) and promised nodes, disks and EFS for a
    /// `ROLLBACK_COMPLETE` stack that had none.
    #[test]
    fn the_question_counts_and_names_only_what_is_there() {
        let r = |id: &str, t: &str, status: &str| Resource {
            logical_id: id.into(),
            resource_type: t.into(),
            status: status.into(),
            ..Resource::default()
        };
        let stack = Stack { name: "demo".into(), ..Stack::default() };
        let rolled_back =
            [r("Vpc", "AWS::EC2::VPC", "DELETE_COMPLETE"), r("Fs", "AWS::EFS::FileSystem", "DELETE_COMPLETE")];
        let there = existing(&rolled_back, &Json::Null, &stack, "us-east-1");
        assert_eq!(
            question("demo", "us-east-1", "ROLLBACK_COMPLETE", &there, &[]),
            "Delete stack demo in us-east-1 (ROLLBACK_COMPLETE: it has no resources left)?"
        );
        let formed = [
            r("Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE"),
            r("MasterInstance", "AWS::EC2::Instance", "CREATE_COMPLETE"),
            r("Fs", "AWS::EFS::FileSystem", "CREATE_COMPLETE"),
            r("Skipped", "AWS::EC2::PlacementGroup", "DELETE_SKIPPED"),
            r("Conditional", "AWS::EFS::FileSystem", "CREATE_COMPLETE"),
        ];
        // A resource whose condition is false with the stack's parameters
        // is not counted, as deploy did not count it (the local AWS lists it).
        let template = serde_json::json!({
            "Parameters": { "EfsFileSystemId": { "Type": "String", "Default": "fs-12345678" } },
            "Conditions": { "CreateFileSystem": { "Fn::Equals": [{ "Ref": "EfsFileSystemId" }, ""] } },
            "Resources": {
                "Vpc": { "Type": "AWS::EC2::VPC" },
                "MasterInstance": { "Type": "AWS::EC2::Instance" },
                "Fs": { "Type": "AWS::EFS::FileSystem" },
                "Skipped": { "Type": "AWS::EC2::PlacementGroup" },
                "Conditional": { "Type": "AWS::EFS::FileSystem", "Condition": "CreateFileSystem" }
            }
        });
        let there = existing(&formed, &template, &stack, "us-east-1");
        assert_eq!(
            question("demo", "us-east-1", "CREATE_COMPLETE", &there, &[]),
            "Delete stack demo in us-east-1 and its 3 resources (the nodes and their disks, the EFS file system it made)?"
        );
        let kept = [("Fs".to_owned(), "its DeletionPolicy is Retain".to_owned())];
        assert!(!question("demo", "us-east-1", "CREATE_COMPLETE", &there, &kept).contains("EFS"));
    }

    /// Fault injection: `DeleteStack` refused: exit 2 naming the call and
    /// the IAM action; the stack is still there and nothing is watched.
    #[tokio::test(start_paused = true)]
    async fn a_refused_delete_names_the_action_and_keeps_the_stack() {
        use crate::deploy::failing::{Failing, Fault, Op};
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let fake = FakeCloud::default();
        let stack =
            Stack { name: "demo".into(), id: "demo-id".into(), status: "CREATE_COMPLETE".into(), ..Stack::default() };
        fake.stacks.lock().unwrap().insert("demo".into(), stack);
        let cloud = Failing::new(fake).fail(Op::DeleteStack, 1, Fault::Denied);
        let console = FakeConsole::default();
        assert_eq!(delete(&console, &cloud, "demo", true).await, ExitCode::Error);
        let err = console.stderr();
        assert!(
            err.starts_with(
                "error: CloudFormation DeleteStack on stack demo: AWS refused cloudformation:DeleteStack \
                 (AccessDenied: Access Denied)"
            ),
            "{err}"
        );
        assert!(!err.contains("Deleting"), "{err}");
        assert!(cloud.inner().stacks.lock().unwrap().contains_key("demo"));
        assert_eq!(cloud.inner().calls_named("delete_stack"), 0);
        assert_eq!(cloud.inner().calls_named("events"), 1, "only the boundary, before the delete");
    }
}
