//! The root-cause finder: from a failed operation's events, the first thing
//! that broke and why, then the consequences.
//!
//! CloudFormation's console shows a wall of events where the first real
//! failure sits under "Resource creation cancelled" lines and the stack's own
//! "The following resource(s) failed to create" summary. The rules here:
//! the root cause is the oldest resource failure that is not a cancellation;
//! a formation wait condition's failure carries the master agent's own
//! reason, which is quoted verbatim; known timeouts get an explanation of
//! what they usually mean and what to look at.

use super::phase::Phase;
use super::port::Event;
use super::watch::is_cancellation;

/// One resource that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cause {
    /// Logical id.
    pub logical_id: String,
    /// Type.
    pub resource_type: String,
    /// `CREATE_FAILED`, ...
    pub status: String,
    /// CloudFormation's reason, or the agent's words for a formation failure.
    pub reason: String,
    /// The reason came from the master's formation signal.
    pub from_agent: bool,
}

/// What went wrong in one operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Diagnosis {
    /// The first failure that is not a consequence of another.
    pub root: Option<Cause>,
    /// Other failures that are not cancellations, oldest first.
    pub also_failed: Vec<Cause>,
    /// Resources whose operation was cancelled because of the root cause.
    pub cancelled: Vec<String>,
    /// Resources this operation created (what a rollback deletes), with their type.
    pub created: Vec<(String, String)>,
    /// The stack's own reason for its final status, when there is no resource failure.
    pub stack_reason: Option<String>,
}

/// The agent's reason inside a wait condition failure:
/// `WaitCondition received failed message: '<reason>' for uniqueId: <id>`.
pub(crate) fn wait_condition_reason(reason: &str) -> Option<&str> {
    let rest = reason.strip_prefix("WaitCondition received failed message: '")?;
    let end = rest.rfind("' for uniqueId")?;
    Some(&rest[..end])
}

/// What a well-known reason usually means, and where to look.
pub(crate) fn explain(cause: &Cause) -> Option<&'static str> {
    let r = cause.reason.as_str();
    if r.starts_with("WaitCondition timed out") {
        Some(
            "the master never reported on formation: it did not boot, could not reach SQS or CloudFormation, \
             or its agent is not running. Deploy again with --keep-on-failure and look at the master \
             (`synth ssh`, `journalctl -u deeplearning-agent`)",
        )
    } else if r.contains("Failed to receive") && r.contains("resource signal") {
        Some(
            "the master's agent did not start in time (its image may have no agent, or the user data failed). \
             Deploy again with --keep-on-failure and look at the master's console output \
             (`aws ec2 get-console-output --instance-id ...`)",
        )
    } else {
        None
    }
}

/// Diagnoses an operation from its events, oldest first.
pub(crate) fn diagnose(events: &[Event]) -> Diagnosis {
    let mut d = Diagnosis::default();
    for e in events {
        if e.is_stack() {
            if (e.status.ends_with("FAILED") || e.status.contains("ROLLBACK"))
                && let Some(r) = &e.reason
            {
                d.stack_reason.get_or_insert_with(|| r.clone());
            }
            continue;
        }
        if e.status == "CREATE_COMPLETE" && !d.created.iter().any(|(id, _)| *id == e.logical_id) {
            d.created.push((e.logical_id.clone(), e.resource_type.clone()));
        }
        if !e.status.ends_with("_FAILED") {
            continue;
        }
        let reason = e.reason.clone().unwrap_or_default();
        if is_cancellation(Some(&reason)) {
            if !d.cancelled.contains(&e.logical_id) {
                d.cancelled.push(e.logical_id.clone());
            }
            continue;
        }
        let (reason, from_agent) = match wait_condition_reason(&reason) {
            Some(agent) => (agent.to_owned(), true),
            None => (reason, false),
        };
        let cause = Cause {
            logical_id: e.logical_id.clone(),
            resource_type: e.resource_type.clone(),
            status: e.status.clone(),
            reason,
            from_agent,
        };
        // A failed delete during rollback is a consequence too, but one the user must know of.
        if d.root.is_none() {
            d.root = Some(cause);
        } else if !d.also_failed.contains(&cause) {
            d.also_failed.push(cause);
        }
    }
    // What was created and then deleted again is still what the rollback removes.
    d
}

impl Diagnosis {
    /// The diagnosis as the lines a user reads, root cause first.
    /// `settled`: the stack's final status; `kept`: the create ran with
    /// rollback disabled; `delete_hint`: the command that deletes the stack.
    pub(crate) fn render(&self, settled: &str, kept: bool, delete_hint: &str) -> String {
        let mut out = String::new();
        match &self.root {
            Some(c) => {
                let what = if c.from_agent {
                    "the cluster did not form".to_owned()
                } else {
                    format!("{} ({}) {}", c.logical_id, c.resource_type, status_words(&c.status))
                };
                out.push_str(&format!("error: {what}: {}\n", c.reason));
                if c.from_agent {
                    out.push_str(&format!(
                        "  = the master's agent reported this ({} {})\n",
                        c.logical_id,
                        status_words(&c.status)
                    ));
                }
                if let Some(help) = explain(c) {
                    out.push_str(&format!("  = help: {help}\n"));
                }
            }
            None => {
                let reason = self.stack_reason.as_deref().unwrap_or("CloudFormation gave no reason");
                out.push_str(&format!("error: the stack ended {settled}: {reason}\n"));
            }
        }
        for c in &self.also_failed {
            out.push_str(&format!("  then: {} {}: {}\n", c.logical_id, status_words(&c.status), c.reason));
        }
        if !self.cancelled.is_empty() {
            out.push_str(&format!(
                "  then: {} cancelled as a consequence: {}\n",
                plural(self.cancelled.len(), "resource was", "resources were"),
                self.cancelled.join(", ")
            ));
        }
        if kept {
            out.push_str(&format!(
                "The stack stays in {settled} with what it created ({}) for inspection; nothing was rolled back.\n\
                 Delete it when done: {delete_hint}\n",
                plural(self.created.len(), "resource", "resources"),
            ));
        } else if !self.created.is_empty() {
            let verb = if settled.ends_with("_IN_PROGRESS") { "is deleting" } else { "deleted" };
            out.push_str(&format!("Rollback {verb} what this operation created: {}.\n", by_phase(&self.created)));
        }
        out
    }
}

fn status_words(status: &str) -> String {
    status.to_ascii_lowercase().replace('_', " ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

/// `network (12), storage (3), master (2)`.
fn by_phase(resources: &[(String, String)]) -> String {
    let mut counts: Vec<(Phase, usize)> = Vec::new();
    for (id, ty) in resources {
        let phase = Phase::of(id, ty);
        match counts.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, n)) => *n += 1,
            None => counts.push((phase, 1)),
        }
    }
    counts.sort();
    counts.iter().map(|(p, n)| format!("{} ({n})", p.label())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::watch::tests::ev;

    const STACK: &str = "AWS::CloudFormation::Stack";

    /// A create that failed in the middle: the EFS file system hit a quota,
    /// the mount targets and the master were cancelled, the stack rolled back.
    fn cascade() -> Vec<Event> {
        vec![
            ev(0, 0, "demo", STACK, "CREATE_IN_PROGRESS", Some("User Initiated")),
            ev(1, 1, "Vpc", "AWS::EC2::VPC", "CREATE_IN_PROGRESS", None),
            ev(2, 20, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE", None),
            ev(3, 21, "MasterQueue", "AWS::SQS::Queue", "CREATE_COMPLETE", None),
            ev(4, 22, "FileSystem", "AWS::EFS::FileSystem", "CREATE_IN_PROGRESS", None),
            ev(5, 23, "MasterInstance", "AWS::EC2::Instance", "CREATE_IN_PROGRESS", None),
            ev(
                6,
                30,
                "FileSystem",
                "AWS::EFS::FileSystem",
                "CREATE_FAILED",
                Some(
                    "Resource handler returned message: \"You have reached the maximum number of file systems\" (HandlerErrorCode: ServiceLimitExceeded)",
                ),
            ),
            ev(7, 31, "MasterInstance", "AWS::EC2::Instance", "CREATE_FAILED", Some("Resource creation cancelled")),
            ev(8, 31, "MountTarget1", "AWS::EFS::MountTarget", "CREATE_FAILED", Some("Resource creation cancelled")),
            ev(
                9,
                32,
                "demo",
                STACK,
                "ROLLBACK_IN_PROGRESS",
                Some(
                    "The following resource(s) failed to create: [MasterInstance, MountTarget1, FileSystem]. Rollback requested by user.",
                ),
            ),
            ev(10, 40, "Vpc", "AWS::EC2::VPC", "DELETE_COMPLETE", None),
            ev(11, 41, "demo", STACK, "ROLLBACK_COMPLETE", None),
        ]
    }

    #[test]
    fn table_of_root_causes() {
        let formation = vec![
            ev(0, 0, "demo", STACK, "CREATE_IN_PROGRESS", Some("User Initiated")),
            ev(1, 5, "MasterInstance", "AWS::EC2::Instance", "CREATE_COMPLETE", None),
            ev(
                2,
                300,
                "FormationWaitCondition",
                "AWS::CloudFormation::WaitCondition",
                "CREATE_FAILED",
                Some(
                    "WaitCondition received failed message: '2 of 8 workers joined by the 30-minute deadline, at least 4 needed. We currently do not have sufficient p5.48xlarge capacity in us-east-1a.' for uniqueId: i-0abc",
                ),
            ),
            ev(3, 301, "MasterElasticIp", "AWS::EC2::EIP", "CREATE_FAILED", Some("Resource creation cancelled")),
            ev(
                4,
                302,
                "demo",
                STACK,
                "ROLLBACK_IN_PROGRESS",
                Some("The following resource(s) failed to create: [FormationWaitCondition, MasterElasticIp]."),
            ),
        ];
        let timeout = vec![ev(
            1,
            1,
            "FormationWaitCondition",
            "AWS::CloudFormation::WaitCondition",
            "CREATE_FAILED",
            Some("WaitCondition timed out. Received 0 conditions when expecting 1"),
        )];
        let only_cancelled =
            vec![ev(1, 1, "Vpc", "AWS::EC2::VPC", "CREATE_FAILED", Some("Resource creation cancelled"))];
        let stack_only = vec![ev(1, 1, "demo", STACK, "UPDATE_ROLLBACK_COMPLETE", Some("Parameter validation failed"))];
        // (events, root logical id, root reason contains, from the agent, cancelled)
        type Case<'a> = (Vec<Event>, Option<&'a str>, &'a str, bool, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                cascade(),
                Some("FileSystem"),
                "maximum number of file systems",
                false,
                vec!["MasterInstance", "MountTarget1"],
            ),
            (formation, Some("FormationWaitCondition"), "2 of 8 workers joined", true, vec!["MasterElasticIp"]),
            (timeout, Some("FormationWaitCondition"), "timed out", false, vec![]),
            (only_cancelled, None, "", false, vec!["Vpc"]),
            (stack_only, None, "", false, vec![]),
        ];
        for (events, id, reason, agent, cancelled) in cases {
            let d = diagnose(&events);
            assert_eq!(d.root.as_ref().map(|c| c.logical_id.as_str()), id, "{d:?}");
            if let Some(c) = &d.root {
                assert!(c.reason.contains(reason), "{c:?}");
                assert_eq!(c.from_agent, agent, "{c:?}");
            }
            assert_eq!(d.cancelled, cancelled);
        }
    }

    #[test]
    fn the_agents_words_come_first_verbatim() {
        let reason = "1 of 2 workers joined by the 5-minute deadline, at least 2 needed. InsufficientInstanceCapacity";
        let events = vec![
            ev(1, 1, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE", None),
            ev(
                2,
                2,
                "FormationWaitCondition",
                "AWS::CloudFormation::WaitCondition",
                "CREATE_FAILED",
                Some(&format!("WaitCondition received failed message: '{reason}' for uniqueId: i-1")),
            ),
        ];
        let text = diagnose(&events).render("ROLLBACK_COMPLETE", false, "synth delete demo");
        let first = text.lines().next().unwrap();
        assert_eq!(first, format!("error: the cluster did not form: {reason}"));
        assert!(text.contains("Rollback deleted what this operation created: network (1)."), "{text}");
    }

    #[test]
    fn a_cascade_names_the_cause_then_the_consequences() {
        let text = diagnose(&cascade()).render("ROLLBACK_COMPLETE", false, "synth delete demo");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("error: FileSystem (AWS::EFS::FileSystem) create failed: Resource handler returned message: \"You have reached"), "{text}");
        assert_eq!(lines[1], "  then: 2 resources were cancelled as a consequence: MasterInstance, MountTarget1");
        assert_eq!(lines[2], "Rollback deleted what this operation created: network (1), identity and queues (1).");
        let kept = diagnose(&cascade()).render("CREATE_FAILED", true, "synth delete demo --region us-east-1");
        assert!(kept.contains("nothing was rolled back"), "{kept}");
        assert!(kept.contains("synth delete demo --region us-east-1"), "{kept}");
    }
}
