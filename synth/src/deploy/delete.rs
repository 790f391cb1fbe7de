//! `synth delete`: asks (or takes --yes), deletes a cluster's stack and
//! watches it to the end; says what is retained and why.

use serde_json::Value as Json;

use super::console::{Answer, Console, confirm, fail};
use super::monitor::{self, Watched, region_flag, report_ending};
use super::port::Cloud;
use super::time::now_ms;
use super::watch::{Operation, Planned, Watcher, clock};
use crate::exit::ExitCode;

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

/// Deletes the stack `name` (asking first unless `yes`) and watches it go.
pub async fn delete<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str, yes: bool) -> ExitCode {
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
    let question = format!(
        "Delete stack {name} in {} and its {} resources (the nodes, their disks, the EFS file system it made)?",
        cloud.region(),
        resources.len()
    );
    if confirm(console, &question, yes).await? != Answer::Yes {
        console.noteln("Nothing was deleted.");
        return Err(ExitCode::Invalid);
    }
    let started = now_ms();
    let boundary = monitor::newest_event(cloud, &stack.id).await.map_err(|e| fail(console, e))?;
    cloud.delete_stack(name).await.map_err(|e| fail(console, e))?;
    let display = console.display();
    display.line("Deleting", &format!("stack {name} ({} resources)", resources.len()));
    let plan = resources
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
        let physical = resources
            .iter()
            .find(|r| r.logical_id == id)
            .and_then(|r| r.physical_id.clone())
            .or_else(|| monitor::physical_id(watcher.events(), &id));
        let named = physical.map(|p| format!("{id} ({p})")).unwrap_or(id);
        console.noteln(&format!("{:>12} {named}: {why}; delete it yourself when you no longer need it", "Retained"));
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
                 delete it yourself"
            ),
            "{err}"
        );
    }
}
