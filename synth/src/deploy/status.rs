//! `synth status` and `synth outputs`: one stack's state, its formation
//! and its outputs; every synth stack of the region; a stack's outputs as
//! text or JSON. All of it on standard output.

use super::console::{Console, empty, fail, not_found};
use super::formation;
use super::port::{Cloud, Output, Stack};
use super::time::stamp;
use crate::exit::{ExitCode, printed};

/// The description every synth template starts with.
const SYNTH_MARK: &str = "Built by synth";

/// Outputs as `Key  value` lines, the keys aligned.
pub fn outputs_text(outputs: &[Output]) -> String {
    let width = outputs.iter().map(|o| o.key.len()).max().unwrap_or(0);
    outputs.iter().map(|o| format!("{:width$}  {}\n", o.key, o.value, width = width)).collect()
}

/// Outputs as one JSON object, output name to value.
pub fn outputs_json(outputs: &[Output]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        outputs.iter().map(|o| (o.key.clone(), o.value.clone().into())).collect();
    format!("{}\n", serde_json::Value::Object(map))
}

/// The stack called `name`; says so when there is none (exit 3).
pub async fn find<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str) -> Result<Stack, ExitCode> {
    match cloud.stack(name).await {
        Ok(Some(stack)) => Ok(stack),
        Ok(None) => Err(not_found(console, format!("no stack {name} in {}", cloud.region()))),
        Err(e) => Err(fail(console, e)),
    }
}

/// Every stack synth made in the region: name, status, when it last changed.
pub async fn list<K: Console, C: Cloud>(console: &K, cloud: &C) -> ExitCode {
    let stacks = match cloud.stacks().await {
        Ok(s) => s,
        Err(e) => return fail(console, e),
    };
    let ours: Vec<_> =
        stacks.iter().filter(|s| s.description.as_deref().is_some_and(|d| d.contains(SYNTH_MARK))).collect();
    if ours.is_empty() {
        return empty(console, &format!("no cluster stacks in {}", cloud.region()));
    }
    let width = ours.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let text: String = ours
        .iter()
        .map(|s| {
            let when = s.changed_ms.map(stamp).unwrap_or_default();
            format!("{:width$}  {:28}  {when}\n", s.name, s.status, width = width)
        })
        .collect();
    printed(console.print(&text), "the stacks", ExitCode::Success)
}

/// One stack: its status, its formation (with the phase table when the
/// master reported one), its outputs.
pub async fn show<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str) -> ExitCode {
    let stack = match find(console, cloud, name).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut text = format!("stack      {}\n", stack.name);
    text.push_str(&format!(
        "status     {}{}\n",
        stack.status,
        stack.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
    ));
    // Formed only on the master's signal with its data: the wait
    // condition's status alone is not evidence (the local AWS completes one
    // nobody signalled).
    let formation = match (formation::signal(&stack.outputs), cloud.resources(name).await) {
        (Some(s), _) => format!(
            "formed: {} nodes, {} of {} workers joined (the master's signal)",
            s.nodes, s.joined_workers, s.requested_workers
        ),
        (None, Ok(resources)) => resources
            .into_iter()
            .find(|r| r.resource_type == "AWS::CloudFormation::WaitCondition")
            .map(|r| match r.reason {
                Some(x) => format!("{}: {x}", r.status),
                None if r.status == "CREATE_COMPLETE" => {
                    format!("{} (without the master's data: not confirmed)", r.status)
                }
                None => r.status,
            })
            .unwrap_or_else(|| "not started".to_owned()),
        (None, Err(e)) => format!("unknown ({e})"),
    };
    text.push_str(&format!("formation  {formation}\n"));
    if let Some(summary) = formation::timeline(&stack.outputs) {
        text.push_str(&formation::table(&summary));
    }
    text.push_str(&outputs_text(&stack.outputs));
    printed(console.print(&text), "the status", ExitCode::Success)
}

/// A stack's outputs, as text or (`json`) one JSON object.
pub async fn outputs<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str, json: bool) -> ExitCode {
    let stack = match find(console, cloud, name).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let text = if json { outputs_json(&stack.outputs) } else { outputs_text(&stack.outputs) };
    printed(console.print(&text), "the outputs", ExitCode::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::FORMATION_DATA_OUTPUT as FORMATION_DATA;

    #[test]
    fn outputs_are_aligned_text_or_one_json_object() {
        let outputs = [
            Output { key: "MasterAddress".into(), value: "10.0.0.5".into(), description: None },
            Output { key: "SshCommand".into(), value: "ssh ubuntu@10.0.0.5".into(), description: None },
        ];
        assert_eq!(outputs_text(&outputs), "MasterAddress  10.0.0.5\nSshCommand     ssh ubuntu@10.0.0.5\n");
        assert_eq!(outputs_json(&outputs), "{\"MasterAddress\":\"10.0.0.5\",\"SshCommand\":\"ssh ubuntu@10.0.0.5\"}\n");
        assert_eq!(outputs_text(&[]), "");
    }

    /// The rule for empty answers and missing stacks: no cluster stacks in
    /// the region is exit 0 and one line on stderr; a stack that is not
    /// there is exit 3, for `status` and `outputs` alike.
    #[tokio::test]
    async fn no_stacks_is_an_empty_answer_and_a_missing_stack_is_not_found() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let (cloud, console) = (FakeCloud::default(), FakeConsole::default());
        assert_eq!(list(&console, &cloud).await, ExitCode::Success);
        assert_eq!((console.stdout().as_str(), console.stderr().as_str()), ("", "no cluster stacks in us-east-1\n"));
        for json in [false, true] {
            let console = FakeConsole::default();
            assert_eq!(outputs(&console, &cloud, "gone", json).await, ExitCode::NotFound);
            assert_eq!(console.stderr(), "error: no stack gone in us-east-1\n");
        }
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "gone").await, ExitCode::NotFound);
        assert_eq!((console.stdout().as_str(), console.stderr().as_str()), ("", "error: no stack gone in us-east-1\n"));
    }

    /// `status` says formed only from the master's signal: a completed wait
    /// condition without its data is said to be not confirmed.
    #[tokio::test]
    async fn status_claims_formation_only_from_the_signal() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        use crate::deploy::port::Resource;
        let cloud = FakeCloud::default();
        let wait = Resource {
            logical_id: "FormationWait".into(),
            resource_type: "AWS::CloudFormation::WaitCondition".into(),
            status: "CREATE_COMPLETE".into(),
            ..Resource::default()
        };
        cloud.resources.lock().unwrap().insert("demo".into(), vec![wait]);
        let data = |value: &str| Output { key: FORMATION_DATA.into(), value: value.into(), description: None };
        let signalled = r#"{"i-0aa": "{\"nodes\": 3, \"joined_workers\": 2, \"requested_workers\": 2}"}"#;
        for (value, says) in [
            ("{}", "formation  CREATE_COMPLETE (without the master's data: not confirmed)\n"),
            (signalled, "formation  formed: 3 nodes, 2 of 2 workers joined (the master's signal)\n"),
        ] {
            let stack = Stack {
                name: "demo".into(),
                id: "demo-id".into(),
                status: "CREATE_COMPLETE".into(),
                outputs: vec![data(value)],
                ..Stack::default()
            };
            cloud.stacks.lock().unwrap().insert("demo".into(), stack);
            let console = FakeConsole::default();
            assert_eq!(show(&console, &cloud, "demo").await, ExitCode::Success);
            assert!(console.stdout().contains(says), "{}", console.stdout());
        }
    }
}
