//! Nodes that leave: a `leave`, an interruption notice, a terminating
//! lifecycle action, or an instance the worker group no longer has (read
//! when the master starts, and after the idle guard's action). Each removes
//! the member at once and publishes the
//! generation without it; a lifecycle action is completed once every
//! remaining node applied that generation. Departures are remembered, so
//! that a delayed copy of a departed node's `register` does not bring it
//! back.

use std::collections::BTreeMap;

use node_contract::message::{Interruption, Leave, LifecycleAction, worker_alias};

use super::{Departure, MasterState, PendingCompletion, Phase, complete};
use crate::cluster::effect::Effect;
use crate::cluster::timing::ACK_TIMEOUT_MS;

/// Departures are remembered this long (the longest SQS message retention,
/// 14 days): a copy of a departed node's `register` cannot be older.
const DEPARTURE_MEMORY_MS: u64 = 14 * 24 * 60 * 60 * 1000;

impl MasterState {
    pub(super) fn on_leave(&mut self, l: Leave, now_ms: u64, fx: &mut Vec<Effect>) {
        if l.instance_id == self.master_id {
            fx.push(Effect::Log(format!("ignored `leave` from the master itself ({}): it never leaves", l.reason)));
            return;
        }
        if self.members.get(&l.instance_id).is_none() {
            fx.push(Effect::Log(format!("ignored `leave` from {}: not a member ({})", l.instance_id, l.reason)));
            return;
        }
        let why = format!("left ({})", l.reason);
        self.remove(&l.instance_id, &why, None, None, now_ms, fx);
    }

    /// EC2 gave a member an interruption notice: it leaves at once, as if
    /// the master had decided it, and the host log says why. A lifecycle
    /// action for it (now or later) is completed once every remaining node
    /// applied the generation without it.
    pub(super) fn on_notice(&mut self, n: Interruption, now_ms: u64, fx: &mut Vec<Effect>) {
        let id = n.instance_id.clone();
        let what = n.describe();
        if id == self.master_id {
            fx.push(Effect::Log(format!(
                "the master {id} was given an interruption notice ({what}); the master never leaves the cluster, \
                 which ends when its instance goes"
            )));
            return;
        }
        if self.members.get(&id).is_none() {
            let known = match self.departed.get_mut(&id) {
                Some(d) => {
                    d.interrupted = true;
                    "it already left"
                }
                None => "not a member",
            };
            fx.push(Effect::Log(format!("interruption notice from {id} ({what}) ignored: {known}")));
            return;
        }
        let gpu_fault = n.notice == node_contract::interruption::NoticeKind::GpuFault;
        let why = if gpu_fault {
            format!("found a fatal GPU fault ({what}) and leaves the cluster")
        } else {
            format!("was given an interruption notice ({what}) and leaves the cluster")
        };
        let note = format!("notice {what}");
        self.remove(&id, &why, None, Some(note), now_ms, fx);
        if let Some(d) = self.departed.get_mut(&id) {
            d.interrupted = true;
        }
        // The GPU watch's fault: with `replace` (or `fail`, which acts as
        // `replace` once formed) its group replaces the node.
        if gpu_fault && self.gpu_action.is_some_and(|a| a != node_contract::gpu::GpuAction::Warn) {
            fx.push(Effect::Log(format!("marking {id} unhealthy so its group replaces it (its GPU fault)")));
            fx.push(Effect::MarkUnhealthy(id));
        }
    }

    pub(super) fn on_lifecycle(&mut self, a: LifecycleAction, now_ms: u64, fx: &mut Vec<Effect>) {
        let id = a.ec2_instance_id.clone();
        if !a.is_terminating() {
            fx.push(Effect::Log(format!(
                "lifecycle notification {} for {id}: nothing to do (a node registers itself when its agent starts)",
                a.lifecycle_transition
            )));
            return;
        }
        if self.completions.iter().any(|c| c.instance_id == id) {
            fx.push(Effect::Log(format!("duplicate termination notice for {id} ignored: already being removed")));
            return;
        }
        if self.departed.get(&id).is_some_and(|d| d.terminated) {
            fx.push(Effect::Log(format!("duplicate termination notice for {id} ignored: already let go")));
            return;
        }
        if id == self.master_id {
            fx.push(Effect::Log(format!(
                "Auto Scaling is terminating the master {id}; the master never removes itself"
            )));
            fx.push(complete(a.lifecycle_hook_name, a.lifecycle_action_token, id));
            return;
        }
        let lifecycle = (a.lifecycle_hook_name, a.lifecycle_action_token);
        if self.members.get(&id).is_some() && matches!(self.phase, Phase::Forming | Phase::Formed) {
            self.remove(&id, "is terminating", Some(lifecycle), None, now_ms, fx);
            return;
        }
        // It left already (a `leave`, an interruption notice): its lifecycle
        // action waits for the generation without it, if that is still
        // being applied.
        let removed_in = self.departed.get(&id).and_then(|d| d.removed_in);
        if let Some(generation) = removed_in
            .filter(|g| self.phase == Phase::Formed && *g <= self.generation() && !self.unacknowledged(*g).is_empty())
        {
            if let Some(d) = self.departed.get_mut(&id) {
                d.terminated = true;
            }
            self.completions.push(PendingCompletion {
                hook: lifecycle.0,
                token: lifecycle.1,
                instance_id: id.clone(),
                generation,
                deadline_ms: now_ms + ACK_TIMEOUT_MS,
            });
            fx.push(Effect::Log(format!(
                "{id} is terminating; it left in generation {generation} and may terminate once every node applied \
                 it (at most {} s)",
                ACK_TIMEOUT_MS / 1000
            )));
            return;
        }
        // Not a member (or formation failed): nothing to wait for.
        self.timeline.remove(&id);
        if let Some(m) = self.members.remove(&id) {
            self.remember_departure(&id, m.registration.boot_id, now_ms, true);
        } else {
            let boot_id = self.departed.get(&id).map(|d| d.boot_id.clone()).unwrap_or_default();
            self.remember_departure(&id, boot_id, now_ms, true);
        }
        let why = if matches!(self.phase, Phase::Forming | Phase::Formed) {
            "it is not a member"
        } else {
            "formation failed"
        };
        fx.push(Effect::Log(format!("{id} is terminating; {why}, so it may go at once")));
        fx.push(complete(lifecycle.0, lifecycle.1, id));
    }

    /// The worker group's instances (any lifecycle state), read
    /// ([`Effect::CheckMembers`]) when the agent started with members, and
    /// after the idle guard scaled the workers to 0, until the group is
    /// empty (`stop` powers off then). A worker member that is not among
    /// them was terminated and no lifecycle message said so: it went while
    /// this agent was not running and the message expired from the master
    /// queue (a day) before the master came back, or the message was lost.
    /// It leaves now, all such members in one generation, so no node's
    /// hostfile keeps a host that is gone.
    pub fn on_group_instances(&mut self, instances: &[String], now_ms: u64) -> Vec<Effect> {
        let mut fx = self.drop_gone_members(instances, now_ms);
        if let (Some(idle), Phase::Formed) = (&mut self.idle, &self.phase) {
            idle.on_group(instances.len(), &mut fx);
        }
        fx
    }

    fn drop_gone_members(&mut self, instances: &[String], now_ms: u64) -> Vec<Effect> {
        let mut fx = Vec::new();
        let gone: Vec<String> = self
            .members
            .by_index()
            .into_iter()
            .map(|m| m.registration.instance_id.clone())
            .filter(|id| *id != self.master_id && !instances.contains(id))
            .collect();
        if gone.is_empty() {
            return fx;
        }
        let why = "is no longer in the worker group (terminated, and no lifecycle message said so) \
                   and leaves the cluster";
        for id in &gone {
            self.detach(id, why, true, now_ms, &mut fx);
        }
        if self.phase == Phase::Formed {
            let notes = gone.iter().map(|id| (id.clone(), "no longer in the worker group".to_string())).collect();
            self.publish_without(&gone, &notes, now_ms, &mut fx);
            // Nodes that are gone keep nothing busy: decided now.
            if let Some(idle) = &mut self.idle {
                idle.on_tick(now_ms, &mut fx);
            }
        }
        fx
    }

    /// Removes a member, publishes the generation without it, and completes
    /// its lifecycle action once the remaining nodes applied that generation.
    /// `note`, when given, ends its host log line (why it left).
    fn remove(
        &mut self,
        id: &str,
        why: &str,
        lifecycle: Option<(String, String)>,
        note: Option<String>,
        now_ms: u64,
        fx: &mut Vec<Effect>,
    ) {
        let Some(listed) = self.detach(id, why, lifecycle.is_some(), now_ms, fx) else { return };
        if self.phase == Phase::Formed {
            let notes: BTreeMap<String, String> = note.into_iter().map(|n| (id.to_string(), n)).collect();
            self.publish_without(&[id.to_string()], &notes, now_ms, fx);
        }
        let Some((hook, token)) = lifecycle else { return };
        if listed {
            // The published generation is the first one without it.
            let generation = self.generation();
            self.completions.push(PendingCompletion {
                hook,
                token,
                instance_id: id.to_string(),
                generation,
                deadline_ms: now_ms + ACK_TIMEOUT_MS,
            });
            fx.push(Effect::Log(format!(
                "{id} may terminate once every node applied generation {generation} (at most {} s)",
                ACK_TIMEOUT_MS / 1000
            )));
        } else {
            fx.push(complete(hook, token, id.to_string()));
        }
    }

    /// Takes member `id` out of the membership, the timeline and the idle
    /// guard, remembers its departure and logs `why`; publishes nothing.
    /// Whether the current manifest lists it; `None` when it is no member.
    fn detach(&mut self, id: &str, why: &str, terminated: bool, now_ms: u64, fx: &mut Vec<Effect>) -> Option<bool> {
        let member = self.members.remove(id)?;
        self.timeline.remove(id);
        self.remember_departure(id, member.registration.boot_id.clone(), now_ms, terminated);
        let alias = worker_alias(member.index);
        fx.push(Effect::Log(format!("{id} ({alias}, {}) {why}", member.registration.private_ip)));
        Some(self.manifest.as_ref().is_some_and(|m| m.node(id).is_some()))
    }

    /// Publishes the generation without the members `left` (already
    /// detached) and records it as the one each was removed in.
    fn publish_without(
        &mut self,
        left: &[String],
        notes: &BTreeMap<String, String>,
        now_ms: u64,
        fx: &mut Vec<Effect>,
    ) {
        if !self.publish_noting(now_ms, notes, fx) {
            return;
        }
        let generation = self.manifest.as_ref().map_or(0, |m| m.generation);
        for id in left {
            if let Some(d) = self.departed.get_mut(id) {
                d.removed_in = Some(generation);
            }
        }
    }

    fn remember_departure(&mut self, id: &str, boot_id: String, now_ms: u64, terminated: bool) {
        // A node that left keeps nothing busy.
        if let Some(idle) = &mut self.idle {
            idle.forget(id);
        }
        self.departed.retain(|_, d| now_ms < d.at_ms.saturating_add(DEPARTURE_MEMORY_MS));
        self.departed.insert(
            id.to_string(),
            Departure { boot_id, at_ms: now_ms, terminated, interrupted: false, removed_in: None },
        );
    }
}
