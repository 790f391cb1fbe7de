//! `synth status` and `synth outputs`: one stack's state, its formation
//! and its outputs; every synth stack of the region; a stack's outputs as
//! text or JSON. All of it on standard output.

use super::console::{Console, fail};
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

/// The stack called `name`; says so when there is none (exit 2).
pub async fn find<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str) -> Result<Stack, ExitCode> {
    match cloud.stack(name).await {
        Ok(Some(stack)) => Ok(stack),
        Ok(None) => Err(fail(console, format!("no stack {name} in {}", cloud.region()))),
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
        console.noteln(&format!("No cluster stacks in {}.", cloud.region()));
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
    let formation = match cloud.resources(name).await {
        Ok(resources) => resources
            .into_iter()
            .find(|r| r.resource_type == "AWS::CloudFormation::WaitCondition")
            .map(|r| format!("{}{}", r.status, r.reason.map(|x| format!(": {x}")).unwrap_or_default()))
            .unwrap_or_else(|| "not started".to_owned()),
        Err(e) => format!("unknown ({e})"),
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
}
