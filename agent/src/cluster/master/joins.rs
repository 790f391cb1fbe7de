//! Registrations: a new node admitted with the lowest free index (at
//! formation at once; after it once its prepare-data marker exists, batched
//! with the joins of the next [`BATCH_WINDOW_MS`]), the same boot
//! registering again (a re-send of the current generation when it needs
//! one), and a member's reboot.

use node_contract::Role;
use node_contract::message::{Register, worker_alias};
use node_contract::parts::check_register;

use super::{MasterState, Phase, shorten};
use crate::cluster::effect::Effect;
use crate::cluster::timing::{BATCH_WINDOW_MS, REJOIN_AFTER_LEAVE_MS, REPUBLISH_INTERVAL_MS};

impl MasterState {
    /// A node registered: ignored when it cannot be listed, claims the
    /// wrong role, comes after a failed formation, is a delayed copy or
    /// left for good; else admitted (after formation, once its prepare-data
    /// script finished), or handled as a duplicate or a reboot when it is a
    /// member already.
    pub(super) fn on_register(
        &mut self,
        r: Register,
        now_ms: u64,
        prepared: &dyn Fn(&str) -> bool,
        fx: &mut Vec<Effect>,
    ) {
        let id = r.instance_id.clone();
        if let Err(why) = check_register(&r) {
            // Its entry could not be put in a manifest part (see node_contract::parts).
            fx.push(Effect::Log(format!("ignored a registration from {}: {why}", shorten(&id, 64))));
            return;
        }
        if (r.role == Role::Master) != (id == self.master_id) {
            fx.push(Effect::Log(format!(
                "ignored a registration from {id} ({}) with role {:?}: the master is {}",
                r.private_ip, r.role, self.master_id
            )));
            return;
        }
        match self.phase {
            Phase::AwaitingLaunchFailures { .. } | Phase::Failed => {
                fx.push(Effect::Log(format!(
                    "ignored a registration from {id} ({}): formation failed at the deadline",
                    r.private_ip
                )));
                return;
            }
            Phase::Forming | Phase::Formed => {}
        }
        if let Some(member) = self.members.get(&id) {
            if member.previous_boots.contains(&r.boot_id) {
                fx.push(Effect::Log(format!(
                    "ignored a registration from {id}: it is from an earlier boot (a delayed copy)"
                )));
            } else if member.registration.boot_id == r.boot_id {
                self.on_duplicate_register(&id, now_ms, fx);
            } else {
                self.on_reboot(r, now_ms, fx);
            }
            return;
        }
        if let Some(d) = self.departed.get(&id) {
            if d.terminated {
                fx.push(Effect::Log(format!("ignored a registration from {id}: Auto Scaling terminated it")));
                return;
            }
            if d.interrupted && d.boot_id == r.boot_id {
                fx.push(Effect::Log(format!(
                    "ignored a registration from {id}: it left on an interruption notice in this boot"
                )));
                return;
            }
            if d.boot_id == r.boot_id && now_ms < d.at_ms + REJOIN_AFTER_LEAVE_MS {
                fx.push(Effect::Log(format!(
                    "ignored a registration from {id}: it left {} s ago from the same boot, so this is taken as a \
                     delayed copy (if it wants back, its next registration is admitted)",
                    (now_ms - d.at_ms) / 1000
                )));
                return;
            }
        }
        if self.phase == Phase::Formed
            && let Some(mount) = &self.prepare_data_gate
            && !prepared(&r.private_ip)
        {
            fx.push(Effect::Log(format!(
                "{id} ({}) registered, not admitted yet: waiting for {} \
                 (its prepare-data script has not finished)",
                r.private_ip,
                node_contract::files::prepare_data::marker(mount, &r.private_ip)
            )));
            return;
        }
        self.departed.remove(&id);
        self.boot_failures.remove(&id);
        let ip = r.private_ip.clone();
        let index = self.members.admit(r);
        if let Some(m) = self.members.get(&id) {
            self.timeline.registered(&m.registration, worker_alias(index), now_ms);
        }
        match self.phase {
            Phase::Forming => {
                fx.push(Effect::Log(format!(
                    "{id} ({ip}) joined as {}: {} of {} workers",
                    worker_alias(index),
                    self.members.workers(),
                    self.requested_workers
                )));
                if self.members.workers() >= self.requested_workers {
                    self.form_complete(now_ms, fx);
                }
            }
            _ => {
                fx.push(Effect::Log(format!(
                    "{id} ({ip}) admitted as {}; published with the next generation",
                    worker_alias(index)
                )));
                self.open_batch(now_ms);
                // Workers back after the idle guard scaled them down: the
                // guard starts a new stretch rather than acting at once.
                if let Some(idle) = &mut self.idle {
                    idle.on_join(now_ms, fx);
                }
            }
        }
    }

    /// The same boot registered again: it has not seen itself in a manifest.
    fn on_duplicate_register(&mut self, id: &str, now_ms: u64, fx: &mut Vec<Effect>) {
        let generation = self.generation();
        let listed = self.manifest.as_ref().is_some_and(|m| m.node(id).is_some());
        let applied = self.members.get(id).is_some_and(|m| m.has_applied(generation));
        if self.phase != Phase::Formed || !listed || applied {
            fx.push(Effect::Log(format!("duplicate registration from {id} ignored")));
            return;
        }
        if self.retired_through < generation && self.resend_due_ms.is_none() {
            // Its parts are in the worker queue, visible to every receive, so
            // the node has them coming (a slow service, a node that is
            // behind). Sending another copy would not reach it sooner and
            // would add the whole generation again to every node's receives.
            fx.push(Effect::Log(format!(
                "{id} registered again without having applied generation {generation}; its parts are still in the \
                 worker queue"
            )));
            return;
        }
        if self.last_republish_ms.is_some_and(|t| now_ms >= t && now_ms - t < REPUBLISH_INTERVAL_MS) {
            fx.push(Effect::Log(format!(
                "{id} registered again without having applied generation {generation}; it was re-published less \
                 than {} s ago",
                REPUBLISH_INTERVAL_MS / 1000
            )));
            return;
        }
        self.republish(now_ms, format!("{id} registered again without having applied it"), fx);
    }

    /// A member registered from a new boot: take its new address and keys.
    fn on_reboot(&mut self, r: Register, now_ms: u64, fx: &mut Vec<Effect>) {
        let id = r.instance_id.clone();
        let Some(member) = self.members.get_mut(&id) else { return };
        // Its files may be gone with the old boot: it has to acknowledge again.
        let changed = member.rebooted(r);
        let alias = worker_alias(member.index);
        self.timeline.registered(&member.registration, alias.clone(), now_ms);
        fx.push(Effect::Log(format!("{id} ({alias}) rebooted")));
        if self.phase != Phase::Formed {
            return;
        }
        let listed = self.manifest.as_ref().is_some_and(|m| m.node(&id).is_some());
        if changed {
            self.open_batch(now_ms);
        } else if listed {
            self.republish(now_ms, format!("{alias} rebooted"), fx);
        }
    }

    fn open_batch(&mut self, now_ms: u64) {
        if self.batch_deadline_ms.is_none() {
            self.batch_deadline_ms = Some(now_ms + BATCH_WINDOW_MS);
        }
    }
}
