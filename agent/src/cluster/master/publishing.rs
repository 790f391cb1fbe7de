//! Generations on their way to the nodes: a new generation when the
//! members change (numbered above any that may have been sent), a re-send
//! when sending failed or a node needs it, the nodes' acknowledgements, and
//! the retirement of what every node applied (or after [`ACK_TIMEOUT_MS`]).

use std::collections::BTreeMap;

use node_contract::message::{Applied, Manifest};

use super::{MasterState, Phase, complete};
use crate::cluster::effect::Effect;
use crate::cluster::membership::{Member, host_log_lines};
use crate::cluster::timing::{ACK_TIMEOUT_MS, REPUBLISH_INTERVAL_MS};

impl MasterState {
    pub(super) fn on_applied(&mut self, a: Applied, now_ms: u64, fx: &mut Vec<Effect>) {
        let current = self.generation();
        if a.generation > current {
            fx.push(Effect::Log(format!(
                "ignored `applied` of generation {} from {}: the current generation is {current}",
                a.generation, a.instance_id
            )));
            return;
        }
        let Some(member) = self.members.get_mut(&a.instance_id) else {
            fx.push(Effect::Log(format!(
                "ignored `applied` of generation {} from {}: not a member",
                a.generation, a.instance_id
            )));
            return;
        };
        if !member.has_applied(a.generation) {
            member.applied = Some(a.generation);
        }
        self.timeline.applied(&a.instance_id, now_ms);
        self.check_acknowledgements(fx);
    }

    /// Sending generation `generation` (some of its parts) failed even after
    /// the runner's retries: it is sent again [`REPUBLISH_INTERVAL_MS`] from
    /// now, unless a newer generation supersedes it first. Without this a
    /// generation lost to a long SQS outage would never reach the nodes.
    pub fn on_publish_failed(&mut self, generation: u64, now_ms: u64) -> Vec<Effect> {
        let mut fx = Vec::new();
        if self.phase != Phase::Formed || generation != self.generation() || self.retired_through >= generation {
            fx.push(Effect::Log(format!(
                "generation {generation} could not be sent; it is superseded, not sent again"
            )));
            return fx;
        }
        let due = now_ms + REPUBLISH_INTERVAL_MS;
        self.resend_due_ms = Some(self.resend_due_ms.map_or(due, |d| d.min(due)));
        fx.push(Effect::Log(format!(
            "generation {generation} could not be sent; sending it again in {} s",
            REPUBLISH_INTERVAL_MS / 1000
        )));
        fx
    }

    /// Publishes a new generation when the members differ from the current
    /// manifest. Returns whether it did.
    pub(super) fn publish(&mut self, now_ms: u64, fx: &mut Vec<Effect>) -> bool {
        self.publish_noting(now_ms, &BTreeMap::new(), fx)
    }

    /// [`Self::publish`], with why nodes left (by instance id) for the
    /// host log.
    pub(super) fn publish_noting(
        &mut self,
        now_ms: u64,
        notes: &BTreeMap<String, String>,
        fx: &mut Vec<Effect>,
    ) -> bool {
        if self.manifest.as_ref().is_some_and(|m| m.nodes == self.members.manifest_nodes()) {
            self.batch_deadline_ms = None;
            return false;
        }
        self.publish_next(now_ms, notes, fx);
        true
    }

    /// Publishes the members as a new generation, numbered above every
    /// generation that may have been sent (see `sent_through`); `notes`:
    /// why nodes left (by instance id), for the host log.
    pub(super) fn publish_next(&mut self, now_ms: u64, notes: &BTreeMap<String, String>, fx: &mut Vec<Effect>) {
        self.batch_deadline_ms = None;
        let nodes = self.members.manifest_nodes();
        let generation = self.generation().max(self.sent_through) + 1;
        self.sent_through = generation;
        let next = Manifest {
            cluster: self.cluster.clone(),
            generation,
            master: self.master_id.clone(),
            nodes,
            cluster_public_key: self.cluster_public_key.clone(),
        };
        let lines = host_log_lines(self.manifest.as_ref(), &next, now_ms, notes);
        self.open_gate(&next, now_ms, fx);
        // The older generations go first, so that the worker queue holds the
        // new one alone: a node's receive then returns all of its parts, and
        // the next retirement may hide everything it finds (see the runner).
        if generation > 1 && self.retired_through < generation - 1 {
            self.retired_through = generation - 1;
            fx.push(Effect::RetireManifests { through_generation: generation - 1 });
        }
        // A new publication id, never one used before (the clock, or one past
        // the last when the clock stands still or went back).
        self.publication = now_ms.max(self.publication + 1);
        // The sentence for people, then the record `synth resume` reads.
        fx.push(Effect::Log(node_contract::logs::publishing_line(generation, next.nodes.len())));
        fx.push(Effect::Log(node_contract::logs::published_record(generation, next.nodes.len())));
        // The host log first: a script watching it learns of a change no
        // later than any node applies it (the lines are written whether or
        // not the send then succeeds, as before).
        fx.extend(lines.into_iter().map(Effect::AppendHostLog));
        fx.push(Effect::PublishManifest { manifest: next.clone(), publication: self.publication });
        self.manifest = Some(next);
        self.resend_due_ms = None;
        self.ack_deadline_ms = Some(now_ms + ACK_TIMEOUT_MS);
        // Registrations still in flight when it went out are no reason to send it again.
        self.last_republish_ms = Some(now_ms);
    }

    /// Sends the current manifest again (same generation).
    pub(super) fn republish(&mut self, now_ms: u64, why: String, fx: &mut Vec<Effect>) {
        let Some(m) = &self.manifest else { return };
        fx.push(Effect::Log(format!("publishing generation {} again: {why}", m.generation)));
        fx.push(Effect::PublishManifest { manifest: m.clone(), publication: self.publication });
        self.last_republish_ms = Some(now_ms);
        self.resend_due_ms = None;
        self.ack_deadline_ms = Some(now_ms + ACK_TIMEOUT_MS);
    }

    /// Retires the current manifest and completes lifecycle actions whose
    /// generation every node applied.
    fn check_acknowledgements(&mut self, fx: &mut Vec<Effect>) {
        let generation = self.generation();
        if self.ack_deadline_ms.is_some() && generation > 0 && self.unacknowledged(generation).is_empty() {
            fx.push(Effect::Log(format!("every node applied generation {generation}")));
            self.retire_current(fx);
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.completions)
            .into_iter()
            .partition(|c| self.unacknowledged(c.generation).is_empty());
        self.completions = waiting;
        for c in done {
            fx.push(Effect::Log(format!(
                "{} may terminate: every node applied generation {}",
                c.instance_id, c.generation
            )));
            fx.push(complete(c.hook, c.token, c.instance_id));
        }
    }

    pub(super) fn retire_current(&mut self, fx: &mut Vec<Effect>) {
        let generation = self.generation();
        self.ack_deadline_ms = None;
        self.resend_due_ms = None;
        self.retired_through = self.retired_through.max(generation);
        fx.push(Effect::RetireManifests { through_generation: generation });
    }

    /// The nodes of the current manifest that did not acknowledge
    /// `generation` (or a newer one), as `alias (instance id)`.
    pub(super) fn unacknowledged(&self, generation: u64) -> Vec<String> {
        let Some(m) = &self.manifest else { return Vec::new() };
        m.nodes
            .iter()
            .filter(|n| !self.members.get(&n.instance_id).is_some_and(|m: &Member| m.has_applied(generation)))
            .map(|n| format!("{} ({})", n.alias, n.instance_id))
            .collect()
    }
}
