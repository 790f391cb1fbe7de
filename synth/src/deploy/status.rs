//! `synth status` and `synth outputs`: one stack's state, its formation,
//! its idle guard (from the worker group's tag the master writes,
//! `node_contract::idle::IDLE_TAG`), its Capacity Block's window (from the
//! template's `Metadata.synth.capacity_block`, `GetTemplate`) and its outputs; every synth stack of
//! the region; a stack's outputs as text or JSON. All of it on standard
//! output.

use super::console::{Console, empty, fail, not_found};
use super::formation;
use super::port::{Cloud, Output, Stack};
use super::time::{now_ms, stamp};
use super::watch::clock;
use crate::exit::{ExitCode, printed};
use node_contract::idle::{IdleAction, IdleMark};
use node_contract::interruption::{format_utc, parse_utc};

/// The description every synth template starts with.
const SYNTH_MARK: &str = "Built by synth";

/// Outputs as `Key  value` lines, the keys aligned.
pub(crate) fn outputs_text(outputs: &[Output]) -> String {
    let width = outputs.iter().map(|o| o.key.len()).max().unwrap_or(0);
    outputs.iter().map(|o| format!("{:width$}  {}\n", o.key, o.value, width = width)).collect()
}

/// Why ssh to the stack's master cannot work, each in a few words: no key
/// pair (ssh has nothing to log in with, also through Session Manager), or
/// a public master with no SSH range (no address may reach port 22). What
/// `synth ssh` refuses with, and what [`shown_outputs`] says instead of an
/// `SshCommand` that would not work.
pub(crate) fn ssh_obstacles(stack: &Stack) -> Vec<&'static str> {
    let parameter = |key: &str| stack.parameters.get(key).map(|v| v.trim()).unwrap_or("");
    let ssh = stack.outputs.iter().find(|o| o.key == "SshCommand").map_or("", |o| o.value.as_str());
    let through_ssm = ssh.contains("ProxyCommand");
    let mut why = Vec::new();
    if parameter("KeyName").is_empty() {
        why.push("its KeyName parameter is empty (no key pair: ssh has no key to log in with)");
    }
    if !through_ssm && parameter("SshCidr").is_empty() {
        why.push("its SshCidr parameter is empty (no SSH ingress: no address may reach port 22)");
    }
    why
}

/// The stack's outputs as synth shows them: an `SshCommand` that cannot
/// work (issue 35: shown for a stack with no key pair and no SSH range,
/// then refused by `synth ssh`) says why instead, as the template's own
/// "none: ..." does for a private master without Session Manager.
pub(crate) fn shown_outputs(stack: &Stack) -> Vec<Output> {
    let why = ssh_obstacles(stack);
    let mut outputs = stack.outputs.clone();
    if !why.is_empty() {
        for o in outputs.iter_mut().filter(|o| o.key == "SshCommand" && !o.value.starts_with("none:")) {
            let instead = if stack.outputs.iter().any(|o| o.key == "SessionManagerCommand") {
                "; use SessionManagerCommand"
            } else {
                ""
            };
            o.value = format!("none: {}{instead}", why.join(", and "));
        }
    }
    outputs
}

/// Outputs as one JSON object, output name to value.
pub(crate) fn outputs_json(outputs: &[Output]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        outputs.iter().map(|o| (o.key.clone(), o.value.clone().into())).collect();
    format!("{}\n", serde_json::Value::Object(map))
}

/// The stack called `name`; says so when there is none (exit 3).
pub(crate) async fn find<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str) -> Result<Stack, ExitCode> {
    match cloud.stack(name).await {
        Ok(Some(stack)) => Ok(stack),
        Ok(None) => Err(missing(console, cloud, name).await),
        Err(e) => Err(fail(console, e)),
    }
}

/// Says that there is no stack `name` (exit 3): with a "did you mean" when
/// a cluster stack's name is close, and where the list is. The list is a
/// help: when it cannot be read, the message goes without it.
pub(crate) async fn missing<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str) -> ExitCode {
    let region = cloud.region();
    let stacks = cloud.stacks().await.unwrap_or_default();
    let ours = stacks.iter().filter(|s| s.description.as_deref().is_some_and(|d| d.contains(SYNTH_MARK)));
    let close = crate::blueprint::did_you_mean(name, ours.map(|s| s.name.as_str()));
    let list = format!("`synth status --region {region}` lists the cluster stacks there");
    match close {
        Some(close) => not_found(console, format!("no stack {name} in {region}; did you mean {close}? ({list})")),
        None => not_found(console, format!("no stack {name} in {region}; {list}")),
    }
}

/// Every stack synth made in the region: name, status, when it last changed.
pub(crate) async fn list<K: Console, C: Cloud>(console: &K, cloud: &C) -> ExitCode {
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
pub(crate) async fn show<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str) -> ExitCode {
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
    let resources = cloud.resources(name).await;
    // Formed only on the master's signal with its data: the wait
    // condition's status alone is not evidence (the local AWS completes one
    // nobody signalled).
    let formation = match (formation::signal(&stack.outputs), &resources) {
        (Some(s), _) => format!(
            "formed: {} nodes, {} of {} workers joined (the master's signal)",
            s.nodes, s.joined_workers, s.requested_workers
        ),
        (None, Ok(resources)) => resources
            .iter()
            .find(|r| r.resource_type == "AWS::CloudFormation::WaitCondition")
            .map(|r| match &r.reason {
                Some(x) => format!("{}: {x}", r.status),
                None if r.status == "CREATE_COMPLETE" => {
                    format!("{} (without the master's data: not confirmed)", r.status)
                }
                None => r.status.clone(),
            })
            .unwrap_or_else(|| "not started".to_owned()),
        (None, Err(e)) => format!("unknown ({e})"),
    };
    text.push_str(&format!("formation  {formation}\n"));
    if let Some(gpu) = formation::gpu(&stack.outputs) {
        text.push_str(&format!("gpus       {}\n", gpu.line()));
    }
    let group =
        resources.ok().and_then(|r| r.into_iter().find(|r| r.logical_id == crate::stack::WORKER_GROUP_ID)?.physical_id);
    if let Some(group) = group
        && let Ok(Some(state)) = cloud.group(&group).await
    {
        if let Some(mark) = &state.data {
            text.push_str(&format!("data       {}\n", data_line(mark, now_ms())));
        }
        if let Some(mark) = state.idle {
            text.push_str(&format!("idle       {}\n", idle_line(&mark, now_ms(), &stack.name)));
        }
        if let Some(mark) = state.stragglers.as_ref().filter(|m| !m.stragglers.is_empty()) {
            text.push_str(&format!("stragglers {}\n", stragglers_line(mark)));
        }
    }
    // A template that cannot be read (or is not synth's JSON) has no block
    // to show; the rest of the status stands.
    if let Ok(template) = cloud.template(name).await {
        match block_window(&template) {
            Ok(Some(window)) => {
                let now = u64::try_from(now_ms() / 1000).unwrap_or(0);
                text.push_str(&format!("block      {}\n", block_line(&window, now)));
            }
            Ok(None) => {}
            Err(e) => text.push_str(&format!("block      {e}\n")),
        }
    }
    if let Some(summary) = formation::timeline(&stack.outputs) {
        text.push_str(&formation::table(&summary, formation::data(&stack.outputs).as_ref()));
    }
    text.push_str(&outputs_text(&shown_outputs(&stack)));
    printed(console.print(&text), "the status", ExitCode::Success)
}

/// The master's line on the nodes' data fetches, and how long ago it
/// wrote it.
pub(crate) fn data_line(mark: &node_contract::data::DataMark, now_ms: i64) -> String {
    let ago = u64::try_from(now_ms).unwrap_or(0).saturating_sub(mark.at_ms) / 1000;
    format!("{} ({} ago, the master's last count)", mark.line, span(ago))
}

/// The stragglers `trainer train` named, newest first, as the master's tag
/// holds them: "deeplearning-worker7 (i-0abc, local rank 5): steps 38 %
/// slower than the median of the other ranks for 200 steps; ...".
pub(crate) fn stragglers_line(mark: &node_contract::straggler::StragglerMark) -> String {
    let lines: Vec<String> = mark.stragglers.iter().map(node_contract::straggler::Straggler::line).collect();
    format!("{} (newest first; the master's log has each with its GPU facts)", lines.join("; "))
}

/// The idle guard's state as `synth status` prints it for `stack`: busy;
/// idle since when and the time left before the action; or when the action
/// ran, and the command that undoes it (`synth resume`).
pub(crate) fn idle_line(mark: &IdleMark, now_ms: i64, stack: &str) -> String {
    let IdleMark::Idle { since_ms, until_ms, action, acted_ms } = *mark else {
        return "in use (the idle clock is stopped)".to_owned();
    };
    let at = |ms: u64| stamp(i64::try_from(ms).unwrap_or(i64::MAX));
    match (action, acted_ms) {
        (IdleAction::ScaleWorkers, Some(done)) => {
            format!(
                "idle since {}, workers scaled to 0 at {}; `synth resume {stack}` brings them back",
                at(since_ms),
                at(done)
            )
        }
        (IdleAction::Stop, Some(done)) => format!(
            "idle since {}, workers scaled to 0 and the master stopped at {}; `synth resume {stack}` starts the \
             master and brings the workers back",
            at(since_ms),
            at(done)
        ),
        (action, None) => {
            let left = i64::try_from(until_ms).unwrap_or(i64::MAX).saturating_sub(now_ms);
            let what = match action {
                IdleAction::ScaleWorkers => "the workers are scaled to 0",
                IdleAction::Stop => "the workers are scaled to 0 and the master stops",
            };
            format!(
                "idle since {}; {what} in {} (at {}) unless a node gets busy",
                at(since_ms),
                clock(left),
                at(until_ms)
            )
        }
    }
}

/// A Capacity Block's window, as the template's
/// `Metadata.synth.capacity_block` holds it (`synth/src/stack/parameters.rs`),
/// unix seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlockWindow {
    /// `cr-...`
    pub id: String,
    /// Its start; `None`: it had started when the template was built.
    pub start_unix: Option<u64>,
    /// Its end.
    pub end_unix: u64,
    /// When the template's scheduled action scales the workers to 0.
    pub scale_in_unix: u64,
}

/// The Capacity Block in a template's text: `None` when the template has
/// none (or is not JSON, so not synth's); an error naming the field when
/// the metadata is there but unreadable.
pub(crate) fn block_window(template: &str) -> Result<Option<BlockWindow>, String> {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(template) else { return Ok(None) };
    let Some(block) = json.pointer("/Metadata/synth/capacity_block") else { return Ok(None) };
    let unreadable = |field: &str| format!("the template's Metadata.synth.capacity_block.{field} is not readable");
    let time =
        |field: &str| block.get(field).and_then(|v| v.as_str()).and_then(parse_utc).ok_or_else(|| unreadable(field));
    let id = block.get("id").and_then(|v| v.as_str()).ok_or_else(|| unreadable("id"))?.to_owned();
    let start_unix = match block.get("start") {
        None | Some(serde_json::Value::Null) => None,
        Some(_) => Some(time("start")?),
    };
    Ok(Some(BlockWindow { id, start_unix, end_unix: time("end")?, scale_in_unix: time("scale_in")? }))
}

/// `2026-12-17 10:50 UTC`.
fn minute_utc(unix: u64) -> String {
    let t = format_utc(unix);
    format!("{} {} UTC", &t[..10], &t[11..16])
}

/// A span as `5 d 3 h`, `3 h 20 min`, `20 min` or `under a minute` (rounded down).
fn span(seconds: u64) -> String {
    let (days, hours, minutes) = (seconds / 86_400, seconds % 86_400 / 3_600, seconds % 3_600 / 60);
    match (days, hours, minutes) {
        (0, 0, 0) => "under a minute".to_owned(),
        (0, 0, m) => format!("{m} min"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

/// The block's window as `synth status` prints it at `now_unix`: "capacity
/// block cr-...: 2026-12-10 11:30 UTC to 2026-12-17 11:30 UTC, 5 d 3 h
/// left; the workers scale to 0 at 2026-12-17 10:50 UTC", with "starts in
/// ..." before its start and "ended" once the workers were scaled to 0.
pub(crate) fn block_line(w: &BlockWindow, now_unix: u64) -> String {
    let window = match w.start_unix {
        Some(start) => format!("{} to {}", minute_utc(start), minute_utc(w.end_unix)),
        None => format!("until {}", minute_utc(w.end_unix)),
    };
    let scale_in = minute_utc(w.scale_in_unix);
    match w.start_unix {
        _ if now_unix >= w.scale_in_unix => {
            format!("capacity block {}: {window}, ended; the workers were scaled to 0 at {scale_in}", w.id)
        }
        Some(start) if now_unix < start => format!(
            "capacity block {}: {window}, starts in {}; the workers scale to 0 at {scale_in}",
            w.id,
            span(start - now_unix)
        ),
        _ => format!(
            "capacity block {}: {window}, {} left; the workers scale to 0 at {scale_in}",
            w.id,
            span(w.end_unix.saturating_sub(now_unix))
        ),
    }
}

/// A stack's outputs, as text or (`json`) one JSON object.
pub(crate) async fn outputs<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str, json: bool) -> ExitCode {
    let stack = match find(console, cloud, name).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let outputs = shown_outputs(&stack);
    let text = if json { outputs_json(&outputs) } else { outputs_text(&outputs) };
    printed(console.print(&text), "the outputs", ExitCode::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::FORMATION_DATA_OUTPUT as FORMATION_DATA;

    /// Issue 35: `synth outputs` showed an `SshCommand` for a stack with no
    /// key pair and no SSH range, which `synth ssh` then refused.
    #[tokio::test]
    async fn outputs_say_why_there_is_no_ssh_command_when_ssh_cannot_work() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let outputs = vec![
            Output { key: "SshCommand".into(), value: "ssh ubuntu@203.0.113.9".into(), description: None },
            Output { key: "SessionManagerCommand".into(), value: "aws ssm start-session".into(), description: None },
        ];
        let stack = |key: &str, cidr: &str| Stack {
            name: "demo".into(),
            outputs: outputs.clone(),
            parameters: [("KeyName".into(), key.into()), ("SshCidr".into(), cidr.into())].into(),
            ..Stack::default()
        };
        let cloud = FakeCloud::default();
        cloud.stacks.lock().unwrap().insert("demo".into(), stack("", ""));
        for json in [false, true] {
            let console = FakeConsole::default();
            assert_eq!(super::outputs(&console, &cloud, "demo", json).await, ExitCode::Success);
            let out = console.stdout();
            assert!(!out.contains("ssh ubuntu@"), "{out}");
            assert!(out.contains("none: its KeyName parameter is empty"), "{out}");
            assert!(out.contains("use SessionManagerCommand"), "{out}");
        }
        let ready = shown_outputs(&stack("my-key", "198.51.100.7/32"));
        assert_eq!(ready[0].value, "ssh ubuntu@203.0.113.9");
    }

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

    #[test]
    fn the_data_line_says_how_long_ago_the_master_counted() {
        let mark = node_contract::data::DataMark { at_ms: 1_000_000, line: "4.0 of 12.0 GB on 3 nodes".into() };
        assert_eq!(
            data_line(&mark, 1_030_000),
            "4.0 of 12.0 GB on 3 nodes (under a minute ago, the master's last count)"
        );
        assert_eq!(
            data_line(&mark, 1_000_000 + 7 * 60_000),
            "4.0 of 12.0 GB on 3 nodes (7 min ago, the master's last count)"
        );
    }

    /// The master's tag, read back as `synth status` prints it.
    #[test]
    fn the_stragglers_line_names_each_node_from_the_masters_tag() {
        let mark = node_contract::straggler::StragglerMark::from_tag(
            "deeplearning-worker7/i-0abc/5/38/200 deeplearning-worker3/-/0/112/50",
        )
        .unwrap();
        assert_eq!(
            stragglers_line(&mark),
            "deeplearning-worker7 (i-0abc, local rank 5): steps 38 % slower than the median of the other ranks for \
             200 steps; deeplearning-worker3 (instance unknown, local rank 0): steps 112 % slower than the median of \
             the other ranks for 50 steps (newest first; the master's log has each with its GPU facts)"
        );
    }

    #[test]
    fn the_idle_line_says_since_when_and_what_is_left_or_done() {
        let since = 1_700_000_000_000u64;
        let idle = |action, acted_ms| IdleMark::Idle { since_ms: since, until_ms: since + 600_000, action, acted_ms };
        assert_eq!(idle_line(&IdleMark::Busy, 0, "demo"), "in use (the idle clock is stopped)");
        assert_eq!(
            idle_line(&idle(IdleAction::ScaleWorkers, None), since as i64 + 250_000, "demo"),
            "idle since 2023-11-14T22:13:20Z; the workers are scaled to 0 in 5m 50s (at 2023-11-14T22:23:20Z) \
             unless a node gets busy"
        );
        assert_eq!(
            idle_line(&idle(IdleAction::ScaleWorkers, Some(since + 601_000)), 0, "demo"),
            "idle since 2023-11-14T22:13:20Z, workers scaled to 0 at 2023-11-14T22:23:21Z; `synth resume demo` brings \
             them back"
        );
        let stopped = idle_line(&idle(IdleAction::Stop, Some(since + 600_000)), 0, "demo");
        assert!(stopped.contains("workers scaled to 0 and the master stopped at 2023-11-14T22:23:20Z"), "{stopped}");
        assert!(stopped.ends_with("`synth resume demo` starts the master and brings the workers back"), "{stopped}");
        // Past due but not acted yet (the master is about to): no negative time.
        assert!(
            idle_line(&idle(IdleAction::Stop, None), since as i64 + 700_000, "demo").contains("master stops in 0s")
        );
    }

    #[test]
    fn the_block_line_says_when_it_starts_how_long_is_left_or_that_it_ended() {
        let at = |t: &str| parse_utc(t).unwrap();
        let w = BlockWindow {
            id: "cr-0123456789abcdef0".into(),
            start_unix: Some(at("2026-12-10T11:30:00Z")),
            end_unix: at("2026-12-17T11:30:00Z"),
            scale_in_unix: at("2026-12-17T10:50:00Z"),
        };
        assert_eq!(
            block_line(&w, at("2026-12-12T08:29:59Z")),
            "capacity block cr-0123456789abcdef0: 2026-12-10 11:30 UTC to 2026-12-17 11:30 UTC, 5 d 3 h left; the \
             workers scale to 0 at 2026-12-17 10:50 UTC"
        );
        assert_eq!(
            block_line(&w, at("2026-12-08T07:00:00Z")),
            "capacity block cr-0123456789abcdef0: 2026-12-10 11:30 UTC to 2026-12-17 11:30 UTC, starts in 2 d 4 h; \
             the workers scale to 0 at 2026-12-17 10:50 UTC"
        );
        assert!(block_line(&w, at("2026-12-10T11:30:00Z")).contains(", 7 d 0 h left;"));
        assert!(block_line(&w, at("2026-12-17T10:00:00Z")).contains(", 1 h 30 min left;"));
        assert!(block_line(&w, at("2026-12-17T10:49:30Z")).contains(", 40 min left;"));
        assert!(block_line(&w, at("2026-12-10T11:29:30Z")).contains("starts in under a minute"));
        for after in ["2026-12-17T10:50:00Z", "2026-12-17T11:30:00Z", "2027-01-01T00:00:00Z"] {
            assert_eq!(
                block_line(&w, at(after)),
                "capacity block cr-0123456789abcdef0: 2026-12-10 11:30 UTC to 2026-12-17 11:30 UTC, ended; the \
                 workers were scaled to 0 at 2026-12-17 10:50 UTC"
            );
        }
        let started = BlockWindow { start_unix: None, ..w };
        assert!(
            block_line(&started, at("2026-12-17T09:00:00Z"))
                .starts_with("capacity block cr-0123456789abcdef0: until 2026-12-17 11:30 UTC, 2 h 30 min left;")
        );
    }

    #[test]
    fn the_block_is_read_from_the_templates_metadata() {
        let template = |block: serde_json::Value| {
            serde_json::json!({"Metadata": {"synth": {"regions": ["us-east-1"], "capacity_block": block}}}).to_string()
        };
        let full = template(serde_json::json!({"id": "cr-1", "zone": "us-east-1a", "start": "2026-12-10T11:30:00Z",
            "end": "2026-12-17T11:30:00Z", "scale_in": "2026-12-17T10:50:00Z"}));
        let w = block_window(&full).unwrap().unwrap();
        assert_eq!(w.id, "cr-1");
        assert_eq!((w.start_unix, w.end_unix), (parse_utc("2026-12-10T11:30:00Z"), 1_797_507_000));
        let started = template(serde_json::json!({"id": "cr-1", "start": null, "end": "2026-12-17T11:30:00Z",
            "scale_in": "2026-12-17T10:50:00Z"}));
        assert_eq!(block_window(&started).unwrap().unwrap().start_unix, None);
        for plain in ["{}", r#"{"Metadata": {"synth": {"regions": []}}}"#, "Resources:\n  X: y\n", ""] {
            assert_eq!(block_window(plain), Ok(None), "{plain}");
        }
        let bad = template(serde_json::json!({"id": "cr-1", "end": "next week", "scale_in": "2026-12-17T10:50:00Z"}));
        assert_eq!(block_window(&bad).unwrap_err(), "the template's Metadata.synth.capacity_block.end is not readable");
        assert!(block_window(&template(serde_json::json!({"end": 1}))).unwrap_err().ends_with(".id is not readable"));
    }

    /// `status` prints the block's line from the stack's template, and
    /// nothing about a block for a stack without one.
    #[tokio::test]
    async fn status_shows_the_blocks_window_from_the_template() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let cloud = FakeCloud::default();
        let stack = Stack { name: "demo".into(), status: "CREATE_COMPLETE".into(), ..Stack::default() };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "demo").await, ExitCode::Success);
        assert!(!console.stdout().contains("block"), "{}", console.stdout());
        let template = serde_json::json!({"Metadata": {"synth": {"capacity_block": {"id": "cr-0123456789abcdef0",
            "start": "2020-01-01T00:00:00Z", "end": "2020-01-08T00:00:00Z", "scale_in": "2020-01-07T23:20:00Z"}}}});
        cloud.templates.lock().unwrap().insert("demo".into(), template.to_string());
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "demo").await, ExitCode::Success);
        assert!(
            console.stdout().contains(
                "block      capacity block cr-0123456789abcdef0: 2020-01-01 00:00 UTC to 2020-01-08 00:00 UTC, ended; \
                 the workers were scaled to 0 at 2020-01-07 23:20 UTC\n"
            ),
            "{}",
            console.stdout()
        );
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
            assert_eq!(
                console.stderr(),
                "error: no stack gone in us-east-1; `synth status --region us-east-1` lists the cluster stacks there\n"
            );
        }
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "gone").await, ExitCode::NotFound);
        assert_eq!(
            (console.stdout().as_str(), console.stderr().as_str()),
            (
                "",
                "error: no stack gone in us-east-1; `synth status --region us-east-1` lists the cluster stacks there\n"
            )
        );
    }

    /// Issue 35: `synth status minimall` said only that there is no such
    /// stack. A close cluster stack's name is suggested (not another
    /// program's stack), and the message says where the list is.
    #[tokio::test]
    async fn a_misspelt_stack_name_gets_a_did_you_mean() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let cloud = FakeCloud::default();
        for (name, description) in [("minimal", "Built by synth 0.1.0"), ("minimax", "someone else's")] {
            let stack = Stack { name: name.into(), description: Some(description.into()), ..Stack::default() };
            cloud.stacks.lock().unwrap().insert(name.into(), stack);
        }
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "minimall").await, ExitCode::NotFound);
        assert_eq!(
            console.stderr(),
            "error: no stack minimall in us-east-1; did you mean minimal? (`synth status --region us-east-1` lists \
             the cluster stacks there)\n"
        );
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "minimaxx").await, ExitCode::NotFound);
        assert!(!console.stderr().contains("did you mean minimax"), "{}", console.stderr());
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

    /// Fault injection: `synth status NAME` and the list when
    /// CloudFormation cannot be reached: exit 2 naming the call, not
    /// "not found" (3) nor "no stacks" (0); nothing on stdout.
    #[tokio::test]
    async fn an_unreachable_service_is_an_error_not_a_missing_stack() {
        use crate::deploy::failing::{Failing, Fault, Op};
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let cloud = Failing::new(FakeCloud::default()).fail(Op::Stack, 1, Fault::Unavailable).fail(
            Op::Stacks,
            1,
            Fault::Unavailable,
        );
        let console = FakeConsole::default();
        assert_eq!(show(&console, &cloud, "demo").await, ExitCode::Error);
        assert_eq!(
            console.stderr(),
            "error: CloudFormation DescribeStacks on stack demo: dispatch failure: connection reset by peer. \
             Check the network and the region, then try again\n"
        );
        let console = FakeConsole::default();
        assert_eq!(list(&console, &cloud).await, ExitCode::Error);
        assert!(console.stderr().starts_with("error: CloudFormation DescribeStacks: "), "{}", console.stderr());
        assert_eq!(console.stdout(), "");
    }
}
