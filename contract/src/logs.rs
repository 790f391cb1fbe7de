//! Where the nodes' evidence lives in CloudWatch Logs, defined once for the
//! template (`synth` names the log group), the agents (each ships to its own
//! stream) and `synth logs` (which finds the group of a stack that may be
//! rolled back or deleted by the stack's name alone).
//!
//! - The log group is [`log_group_name`]`(stack name, run)`, the run being
//!   the last part of the stack's id ([`stack_run`]): one per stack, kept
//!   when the stack is deleted or rolled back, so the names of a deleted
//!   stack's nodes and their lines can still be read. The run makes a stack
//!   created again under the same name (after a rollback, say) a group of
//!   its own: CloudFormation cannot create a group whose name exists, and
//!   the retained one still holds the earlier stack's evidence. Every run
//!   of a stack name shares [`log_group_prefix`], which is how `synth logs`
//!   finds them from the name alone (the newest first).
//! - Each node writes one stream, [`stream_name`]: the node's label
//!   (`master`, `worker3`, or `worker` before the master gave it an index)
//!   and its instance id, `worker3-i-0abc123def4567890`. [`parse_stream_name`]
//!   reads both back.
//! - The master logs [`publishing_line`] each time it publishes a
//!   generation, for people, and right after it a [`Published`] record,
//!   for programs: one line, [`PUBLISHED_MARK`] and a JSON object
//!   ([`published_record`]). `synth resume` reads the record back from the
//!   master's stream ([`parse_published_record`]) to know the workers it
//!   brought back joined; from an agent of an earlier release, which logs
//!   the sentence alone, it still reads the sentence
//!   ([`parse_publishing_line`]).

/// The prefix of every cluster's log group.
pub const LOG_GROUP_PREFIX: &str = "/deeplearning-cluster/";

/// What the log groups of every stack named `stack_name` start with
/// (the trailing `/` keeps `demo` from matching `demo2`).
pub fn log_group_prefix(stack_name: &str) -> String {
    format!("{LOG_GROUP_PREFIX}{stack_name}/")
}

/// The log group of the stack named `stack_name` whose id ends in `run`.
pub fn log_group_name(stack_name: &str, run: &str) -> String {
    format!("{}{run}", log_group_prefix(stack_name))
}

/// The run of a stack id, its last `/`-separated part (the UUID CloudFormation
/// gives each stack: `arn:aws:cloudformation:…:stack/NAME/UUID`); `None`
/// for an id without one.
pub fn stack_run(stack_id: &str) -> Option<&str> {
    let (_, run) = stack_id.rsplit_once('/')?;
    (!run.is_empty()).then_some(run)
}

/// The label of a node in stream names and merged output: `master`,
/// `worker<index>`, or `worker` while the worker has no index yet.
pub fn node_label(role_is_master: bool, worker_index: Option<u32>) -> String {
    match (role_is_master, worker_index) {
        (true, _) => "master".to_owned(),
        (false, Some(index)) => format!("worker{index}"),
        (false, None) => "worker".to_owned(),
    }
}

/// The stream a node writes: `<label>-<instance id>`.
pub fn stream_name(label: &str, instance_id: &str) -> String {
    format!("{label}-{instance_id}")
}

/// A stream name's label and instance id (`worker3-i-0abc` → `("worker3",
/// "i-0abc")`); `None` for a stream this contract did not name.
pub fn parse_stream_name(stream: &str) -> Option<(&str, &str)> {
    let at = stream.find("-i-")?;
    let (label, id) = (&stream[..at], &stream[at + 1..]);
    let label_ok = label == "master"
        || label == "worker"
        || label.strip_prefix("worker").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let id_ok = id.len() > 2 && id[2..].bytes().all(|b| b.is_ascii_hexdigit());
    (label_ok && id_ok).then_some((label, id))
}

/// What the master logs when it publishes a generation:
/// "publishing generation 3: 3 nodes" ("1 node" for the master alone).
pub fn publishing_line(generation: u64, nodes: usize) -> String {
    let plural = if nodes == 1 { "" } else { "s" };
    format!("publishing generation {generation}: {nodes} node{plural}")
}

/// What starts the line of a [`Published`] record (the JSON object follows).
pub const PUBLISHED_MARK: &str = "deeplearning-record published ";

/// The version of [`Published`] this crate writes and reads.
pub const PUBLISHED_VERSION: u32 = 1;

/// The master published a generation: the record `synth resume` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Published {
    /// Always [`PUBLISHED_VERSION`] when written by this crate.
    pub version: u32,
    /// The generation published.
    pub generation: u64,
    /// Its nodes, the master included.
    pub nodes: u32,
}

/// The line the master logs after [`publishing_line`]:
/// `deeplearning-record published {"version":1,"generation":3,"nodes":3}`.
pub fn published_record(generation: u64, nodes: usize) -> String {
    let record = Published { version: PUBLISHED_VERSION, generation, nodes: u32::try_from(nodes).unwrap_or(u32::MAX) };
    // A struct of numbers always serialises.
    format!("{PUBLISHED_MARK}{}", serde_json::to_string(&record).unwrap_or_default())
}

/// A [`published_record`] found in `text` (a log event, its level and
/// target before it); `None` for any other line, and for a record of
/// another version.
pub fn parse_published_record(text: &str) -> Option<Published> {
    let json = text[text.find(PUBLISHED_MARK)? + PUBLISHED_MARK.len()..].trim_end();
    let record: Published = serde_json::from_str(json).ok()?;
    (record.version == PUBLISHED_VERSION).then_some(record)
}

/// A [`publishing_line`] found in `text` (a log event, its time and level
/// before it): the generation, the node count and the line itself; `None`
/// for any other line ("publishing generation 3 again: …").
pub fn parse_publishing_line(text: &str) -> Option<(u64, u32, &str)> {
    const START: &str = "publishing generation ";
    let line = text[text.find(START)?..].trim_end();
    let (generation, rest) = line[START.len()..].split_once(": ")?;
    let nodes = rest.strip_suffix(" nodes").or_else(|| rest.strip_suffix(" node"))?;
    Some((generation.parse().ok()?, nodes.parse().ok()?, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let id = "arn:aws:cloudformation:us-east-1:123456789012:stack/dl-demo/7c1e5a30-cb1b-11f0-8a1e-0affd3c5a0e1";
        let run = stack_run(id).unwrap();
        assert_eq!(run, "7c1e5a30-cb1b-11f0-8a1e-0affd3c5a0e1");
        assert_eq!(log_group_name("dl-demo", run), format!("/deeplearning-cluster/dl-demo/{run}"));
        assert!(log_group_name("dl-demo", run).starts_with(&log_group_prefix("dl-demo")));
        assert!(!log_group_name("dl-demo2", run).starts_with(&log_group_prefix("dl-demo")));
        assert_eq!(stack_run("no-slash"), None);
        assert_eq!(stack_run("stack/x/"), None);
        for (master, index, label) in [(true, None, "master"), (false, Some(3), "worker3"), (false, None, "worker")] {
            assert_eq!(node_label(master, index), label);
            let stream = stream_name(label, "i-0abc123def4567890");
            assert_eq!(parse_stream_name(&stream), Some((label, "i-0abc123def4567890")));
        }
    }

    #[test]
    fn foreign_streams_are_not_nodes() {
        for stream in ["", "master", "master-i-", "workerx-i-0abc", "gpu-i-0abc", "master-i-zz", "worker3-j-0abc"] {
            assert_eq!(parse_stream_name(stream), None, "{stream}");
        }
    }
    #[test]
    fn a_published_record_reads_back_and_nothing_else_does() {
        for (generation, nodes) in [(1, 1), (3, 3), (12, 257), (u64::MAX, 4_000)] {
            let line = published_record(generation, nodes);
            let event = format!("2026-11-28T15:41:21Z  INFO agent::runner::effects: {line}\n");
            let record = Published { version: PUBLISHED_VERSION, generation, nodes: nodes as u32 };
            assert_eq!(parse_published_record(&event), Some(record));
            assert_eq!(parse_published_record(&line), Some(record));
        }
        assert_eq!(published_record(3, 2), r#"deeplearning-record published {"version":1,"generation":3,"nodes":2}"#);
        for other in [
            &publishing_line(3, 3),
            r#"deeplearning-record published {"version":2,"generation":3,"nodes":2}"#,
            r#"deeplearning-record published {"generation":3,"nodes":2}"#,
            r#"deeplearning-record published {"version":1,"generation":"3","nodes":2}"#,
            "deeplearning-record published",
            "something else",
        ] {
            assert_eq!(parse_published_record(other), None, "{other}");
        }
    }

    #[test]
    fn a_publishing_line_reads_back_and_nothing_else_does() {
        for (generation, nodes) in [(1, 1), (3, 3), (12, 257)] {
            let line = publishing_line(generation, nodes);
            let event = format!("2026-11-28T15:41:21Z  INFO agent::runner::effects: {line}\n");
            assert_eq!(parse_publishing_line(&event), Some((generation, nodes as u32, line.as_str())));
        }
        assert_eq!(publishing_line(2, 1), "publishing generation 2: 1 node");
        assert_eq!(publishing_line(3, 2), "publishing generation 3: 2 nodes");
        for other in [
            "publishing generation 3 again: sending it failed before",
            "publishing generation 3 again after a restart: not every node acknowledged it",
            "publishing generation x: 3 nodes",
            "something else",
        ] {
            assert_eq!(parse_publishing_line(other), None, "{other}");
        }
    }
}
