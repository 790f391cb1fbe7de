//! The formation decision and its signal: formed as soon as the requested
//! workers are in; at the deadline, formed with at least the minimum (the
//! worker group lowered to what joined) or failed with a reason that names
//! the nodes whose boot failed, the instances that never registered and the
//! group's launch failures, cut to what a signal may carry
//! ([`SIGNAL_BYTES`]).

use node_contract::message::{BootFailure, shorten_bytes};

use super::verdict::HeldSignal;
use super::{MasterState, Phase, SIGNAL_BYTES, shorten};
use crate::cluster::effect::Effect;
use crate::ports::Formation;

/// How many launch failure messages the failure reason quotes.
const LAUNCH_FAILURES_QUOTED: usize = 3;

/// Launch failure messages are cut to this many characters in the reason.
const LAUNCH_FAILURE_CHARS: usize = 300;

/// How many nodes' boot failures the master keeps (one report each, the
/// newest); reports from further nodes are logged only.
pub(super) const BOOT_FAILURES_KEPT: usize = 64;

/// How many failed nodes the failure reason quotes the last lines of (the
/// others are named only).
const FAILED_NODES_QUOTED: usize = 3;

/// The most bytes of a failed node's last lines the reason quotes (from
/// the end), so that several nodes and the launch failures fit the signal.
const QUOTED_LINES_BYTES: usize = 600;

/// How many never-registered instances the reason names.
const UNREGISTERED_NAMED: usize = 10;

impl MasterState {
    /// The answer to [`Effect::FetchLaunchFailures`]: the status messages of
    /// the worker group's failed launches, newest first, and the instance
    /// ids in the group (`None` when they could not be read): the reason
    /// names those that never registered. (The time is not needed today;
    /// every input carries it so the runner's calls look alike.)
    pub fn on_launch_failures(
        &mut self,
        failures: Vec<String>,
        group_instances: Option<Vec<String>>,
        _now_ms: u64,
    ) -> Vec<Effect> {
        let mut fx = Vec::new();
        if !matches!(self.phase, Phase::AwaitingLaunchFailures { .. }) {
            fx.push(Effect::Log(format!(
                "{} launch failure(s) arrived while none were asked for; ignored",
                failures.len()
            )));
            return fx;
        }
        let mut quoted: Vec<String> = Vec::new();
        for f in failures {
            let f = shorten(f.trim(), LAUNCH_FAILURE_CHARS);
            if !f.is_empty() && !quoted.contains(&f) {
                quoted.push(f);
            }
            if quoted.len() == LAUNCH_FAILURES_QUOTED {
                break;
            }
        }
        let why = if quoted.is_empty() {
            "No launch failures were reported; check the workers' console output (EC2 console: the instance, \
             Actions, Monitor and troubleshoot, Get system log)"
                .to_string()
        } else {
            format!("Launch failures: {}", quoted.join("; "))
        };
        let why = format!("{}{why}", self.unregistered_text(group_instances.as_deref()));
        self.fail(why, &mut fx);
        fx
    }

    /// A node's boot step failed: logged with its last line, and kept (the
    /// newest per node) for a failed formation's reason until it is admitted.
    pub(super) fn on_boot_failure(&mut self, f: BootFailure, fx: &mut Vec<Effect>) {
        let id = f.instance_id.clone();
        let last = f.last_lines.last().map_or_else(|| "no output".to_string(), |l| format!("last line: {l}"));
        fx.push(Effect::Log(format!(
            "{} ({}) reports a failed boot step: {} ({last})",
            shorten(&id, 64),
            shorten(&f.private_ip, 64),
            f.what
        )));
        if self.members.get(&id).is_none() && !self.keep_boot_failure(f) {
            fx.push(Effect::Log(format!(
                "not keeping the boot failure of {}: {BOOT_FAILURES_KEPT} nodes' failures are kept already",
                shorten(&id, 64)
            )));
        }
    }

    /// Keeps `f` (the newest per node) for a failed formation's reason,
    /// unless [`BOOT_FAILURES_KEPT`] other nodes' are kept already: then
    /// `false`.
    pub(super) fn keep_boot_failure(&mut self, f: BootFailure) -> bool {
        if self.boot_failures.len() >= BOOT_FAILURES_KEPT && !self.boot_failures.contains_key(&f.instance_id) {
            return false;
        }
        self.boot_failures.insert(f.instance_id.clone(), f);
        true
    }

    /// "i-1 (10.0.0.7) failed: what; last lines: "a | b". " for the failed
    /// nodes that are not members, then "N of the worker group's instances
    /// never registered: i-2, i-3. " (those in `group` that are neither
    /// members nor reported a failure).
    fn unregistered_text(&self, group: Option<&[String]>) -> String {
        let mut text = String::new();
        let failed: Vec<&BootFailure> =
            self.boot_failures.values().filter(|f| self.members.get(&f.instance_id).is_none()).collect();
        for (i, f) in failed.iter().enumerate() {
            text.push_str(&format!("{} ({}) failed: {}", f.instance_id, f.private_ip, f.what));
            if i < FAILED_NODES_QUOTED && !f.last_lines.is_empty() {
                let mut quoted: Vec<&str> = Vec::new();
                let mut bytes = 0;
                for line in f.last_lines.iter().rev() {
                    if bytes + line.len() + 3 > QUOTED_LINES_BYTES && !quoted.is_empty() {
                        break;
                    }
                    bytes += line.len() + 3;
                    quoted.push(line);
                }
                quoted.reverse();
                let lines = shorten_bytes(&quoted.join(" | "), QUOTED_LINES_BYTES);
                text.push_str(&format!("; its last lines: \"{lines}\""));
            }
            text.push_str(". ");
        }
        if let Some(group) = group {
            let never: Vec<&String> = group
                .iter()
                .filter(|id| {
                    **id != self.master_id && self.members.get(id).is_none() && !self.boot_failures.contains_key(*id)
                })
                .collect();
            if !never.is_empty() {
                let mut named: Vec<&str> = never.iter().take(UNREGISTERED_NAMED).map(|s| s.as_str()).collect();
                let more = never.len() - named.len();
                let rest = if more > 0 { format!(" and {more} more") } else { String::new() };
                named.sort_unstable();
                text.push_str(&format!(
                    "{} of the worker group's instances never registered: {}{rest}. ",
                    never.len(),
                    named.join(", ")
                ));
            }
        }
        text
    }

    /// The requested workers are in.
    pub(super) fn form_complete(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        let n = self.requested_workers;
        let joined = self.members.workers();
        self.phase = Phase::Formed;
        self.publish(now_ms, fx);
        let nodes = joined + 1;
        let reason = if n == 0 {
            "0 of 0 workers joined (none were requested): the cluster is the master alone".to_string()
        } else {
            format!("{joined} of {n} workers joined; the cluster has {nodes} nodes, the master included")
        };
        let data = self.formation_data(joined, None);
        self.signal_formed(reason, data, fx);
    }

    /// The formation deadline came with fewer workers than requested.
    pub(super) fn decide_at_deadline(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        let (k, n, min) = (self.members.workers(), self.requested_workers, self.min_workers);
        if k < min {
            fx.push(Effect::Log(format!(
                "formation deadline: {k} of {n} workers joined, at least {min} needed; reading the worker group's \
                 launch failures for the reason"
            )));
            self.phase = Phase::AwaitingLaunchFailures { since_ms: now_ms };
            fx.push(Effect::FetchLaunchFailures);
            return;
        }
        fx.push(Effect::SetDesiredCapacity(k));
        self.phase = Phase::Formed;
        self.publish(now_ms, fx);
        let reason = format!(
            "{k} of {n} workers joined by the {} deadline (at least {min} needed); the worker group's \
             desired capacity was lowered to {k}",
            self.deadline_text()
        );
        let data = self.formation_data(k, Some(k));
        self.signal_formed(reason, data, fx);
    }

    /// Signals formation success, or holds the signal until the network
    /// check of the generation just published decides (at most its time
    /// budget).
    fn signal_formed(&mut self, reason: String, data: String, fx: &mut Vec<Effect>) {
        let reason = match self.gpu_summary() {
            Some(gpu) => format!("{reason}. {}", gpu.line()),
            None => reason,
        };
        let generation = self.generation();
        if let Some(gate) = self.gate.as_mut().filter(|g| g.generation == generation && g.held.is_none()) {
            fx.push(Effect::Log(format!(
                "the formation signal waits for the network check of generation {generation} (until its time limit)"
            )));
            gate.held = Some(HeldSignal { reason, data });
            return;
        }
        self.signal(true, reason, data, fx);
    }

    pub(super) fn fail(&mut self, why: String, fx: &mut Vec<Effect>) {
        let (k, n, min) = (self.members.workers(), self.requested_workers, self.min_workers);
        self.phase = Phase::Failed;
        let reason =
            format!("{k} of {n} workers joined by the {} deadline, at least {min} needed. {why}", self.deadline_text());
        self.signal(false, reason, self.formation_data(k, None), fx);
    }

    /// "30-minute" (the blueprint's whole minutes) or "45-second".
    fn deadline_text(&self) -> String {
        let s = self.formation_timeout_seconds;
        if s.is_multiple_of(60) { format!("{}-minute", s / 60) } else { format!("{s}-second") }
    }

    /// Signals formation; a reason too long for the signal ([`SIGNAL_BYTES`]
    /// with the rest of the body) is cut at its end, marked with "…".
    pub(super) fn signal(&self, success: bool, reason: String, data: String, fx: &mut Vec<Effect>) {
        let reason = fit_reason(reason, &self.master_id, &data);
        fx.push(Effect::Log(format!("formation {}: {reason}", if success { "succeeded" } else { "failed" })));
        fx.push(Effect::SignalFormation(Formation { success, reason, unique_id: self.master_id.clone(), data }));
    }

    fn formation_data(&self, joined: u32, desired_capacity: Option<u32>) -> String {
        let mut data = serde_json::json!({
            "requested_workers": self.requested_workers,
            "min_workers": self.min_workers,
            "joined_workers": joined,
            "nodes": joined + 1,
            "generation": self.generation(),
        });
        if let Some(c) = desired_capacity {
            data["desired_capacity"] = c.into();
        }
        // Per phase: median and slowest seconds after the earliest time
        // (the master's boot, when it could be read), the slowest node
        // named. At signal time no node has applied yet (generation 1 goes
        // out with it): `agent status` on the master shows that phase.
        let summary = self.timeline.summary();
        if !summary.is_empty() {
            data["timeline"] = serde_json::to_value(&summary).unwrap_or_default();
        }
        if let Some(fetched) = self.timeline.data_summary() {
            data["data"] = serde_json::to_value(&fetched).unwrap_or_default();
        }
        if let Some(gpu) = self.gpu_summary() {
            data["gpu"] = serde_json::to_value(&gpu).unwrap_or_default();
        }
        data.to_string()
    }
}

/// `reason`, cut so that the signal's JSON body (as
/// [`crate::aws::CfnSignals`] sends it) is at most [`SIGNAL_BYTES`].
fn fit_reason(reason: String, unique_id: &str, data: &str) -> String {
    let size = |reason: &str| {
        serde_json::json!({"Status": "FAILURE", "UniqueId": unique_id, "Reason": reason, "Data": data})
            .to_string()
            .len()
    };
    let mut reason = reason;
    let mut over = size(&reason).saturating_sub(SIGNAL_BYTES);
    while over > 0 && !reason.is_empty() {
        let keep = reason.len().saturating_sub(over).max(3);
        reason = shorten_bytes(&reason, keep);
        over = size(&reason).saturating_sub(SIGNAL_BYTES);
        if keep == 3 {
            break;
        }
    }
    reason
}
