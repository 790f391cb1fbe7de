//! The master's state machine: forms the cluster, then keeps membership
//! current as nodes join and leave (docs/ARCHITECTURE.md, "Membership rules").
//!
//! Inputs are the messages of the master's queue ([`MasterInbound`]), the
//! passing of time ([`MasterState::on_tick`]) and the answer to a launch
//! failure query; outputs are [`Effect`]s. The phases:
//!
//! - **forming**: registrations are admitted (no prepare-data check) and
//!   nothing is published, until the requested workers are in (success) or
//!   the deadline comes (success with fewer, or a launch failure query);
//! - **awaiting launch failures**: below the minimum at the deadline, waiting
//!   for [`MasterState::on_launch_failures`] to write the failure reason;
//! - **formed**: joins (batched), reboots, leaves, interruption notices and
//!   terminations each lead to a new generation;
//! - **failed**: formation failed; messages are only logged (lifecycle
//!   actions are still completed so Auto Scaling is never held up).
//!
//! The state and its public calls are here; the handling of each concern is
//! in a submodule of its own, each an `impl MasterState` block:
//! [`joins`] (registrations, reboots, the join batch), [`departures`]
//! (leave, interruption notices, lifecycle actions, removal),
//! [`formation`] (the decision at the requested count or the deadline, boot
//! and launch failures, the formation signal), [`gate`] (the network
//! check), [`gpu`] (the GPU gate's verdicts), [`stragglers`] (the ranks
//! `trainer train` named slow) and [`publishing`] (generations, re-sends, acknowledgements,
//! retirement). The idle guard's decision is a state machine of its own
//! ([`idle`]) that the master holds and feeds once the cluster formed.

mod departures;
mod formation;
mod gate;
mod gpu;
pub(crate) mod idle;
mod joins;
mod publishing;
mod stragglers;
pub(crate) mod verdict;

use std::collections::BTreeMap;

use node_contract::message::{BootFailure, Manifest, MasterInbound, Register, worker_alias};
use node_contract::{NetworkCheck, NodeConfig};
use serde::{Deserialize, Serialize};

use super::effect::Effect;
use super::membership::Membership;
use super::timeline::Timeline;
use super::timing::{ACK_TIMEOUT_MS, LAUNCH_FAILURES_TIMEOUT_MS};
use crate::ports::GroupSize;
use idle::{IdleSettings, IdleWatch};
use verdict::Gate;

/// The most bytes a formation signal may carry (its JSON body: status,
/// unique id, reason and data together): "cfn-signal wait condition data",
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html>.
pub(crate) const SIGNAL_BYTES: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Phase {
    Forming,
    AwaitingLaunchFailures { since_ms: u64 },
    Formed,
    Failed,
}

/// A terminating lifecycle action waiting for the remaining nodes to apply
/// the generation without the instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PendingCompletion {
    hook: String,
    token: String,
    instance_id: String,
    generation: u64,
    deadline_ms: u64,
}

/// A node that is no longer a member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Departure {
    /// The boot it left from (empty when it was never a member).
    boot_id: String,
    at_ms: u64,
    /// Terminated by Auto Scaling (its lifecycle action completed or
    /// pending): it never comes back.
    terminated: bool,
    /// It left on an interruption notice: it does not come back from the
    /// same boot (a stopped Spot instance started again is a new boot).
    #[serde(default)]
    interrupted: bool,
    /// The first generation published without it, while it is still to be
    /// acknowledged: a lifecycle action that arrives after the node left
    /// waits for it, as one that removes the node does.
    #[serde(default)]
    removed_in: Option<u64>,
}

/// The master's state. Persisted by the runner after every call, so an
/// agent restarted mid-formation resumes with the same deadline and members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterState {
    cluster: String,
    master_id: String,
    cluster_public_key: String,
    requested_workers: u32,
    min_workers: u32,
    formation_timeout_seconds: u32,
    /// `Some(efs mount)` when a prepare-data script gates late joins.
    prepare_data_gate: Option<String>,
    formation_deadline_ms: u64,
    phase: Phase,
    members: Membership,
    /// The current manifest (its generation is the current generation).
    manifest: Option<Manifest>,
    /// The current manifest's publication id (its parts carry it; a re-send
    /// keeps it). Older state files have none: 0.
    #[serde(default)]
    publication: u64,
    /// When to send the current manifest again because sending it failed;
    /// `None` when nothing failed.
    #[serde(default)]
    resend_due_ms: Option<u64>,
    /// Manifests up to this generation were retired.
    retired_through: u64,
    /// The newest generation that may have gone out to the worker queue,
    /// whether or not this state holds it: the runner records each new
    /// generation on disk before it sends it, and hands the record to
    /// [`MasterState::start`]. A new generation is numbered above it, so a
    /// generation sent just before a crash (by a state that was never
    /// saved) is never numbered again with other nodes. Older state files
    /// have none: 0.
    #[serde(default)]
    sent_through: u64,
    /// When the current manifest is retired even without every ack; `None`
    /// once it is retired.
    ack_deadline_ms: Option<u64>,
    /// When the pending admissions are published; `None` when there are none.
    batch_deadline_ms: Option<u64>,
    /// When the current manifest was last sent (first or again).
    last_republish_ms: Option<u64>,
    completions: Vec<PendingCompletion>,
    departed: BTreeMap<String, Departure>,
    /// Boot failures reported by nodes not (yet) admitted, by instance id,
    /// the newest of each; a failed formation's reason quotes them. Older
    /// state files have none.
    #[serde(default)]
    boot_failures: BTreeMap<String, BootFailure>,
    /// When each member reached each phase (one entry per member; see
    /// [`crate::cluster::timeline`]). Older state files have none.
    #[serde(default)]
    timeline: Timeline,
    /// The network gate's settings (node config `network_check`); `None`: off.
    #[serde(default)]
    network_check: Option<NetworkCheck>,
    /// The network check under way, if any.
    #[serde(default)]
    gate: Option<Gate>,
    /// Workers the network gate's `replace` has terminated so far (see
    /// [`NETWORK_REPLACEMENTS_AT_LEAST`]). Older state files have none.
    #[serde(default)]
    network_replacements: u32,
    /// The idle guard, when the node config has one ([`MasterState::start_idle`]).
    /// Older state files have none.
    #[serde(default)]
    idle: Option<IdleWatch>,
    /// The GPU gate's action (node config `gpu_check`); `None`: off. Older
    /// state files have none.
    #[serde(default)]
    gpu_action: Option<node_contract::gpu::GpuAction>,
    /// The GPU gate's verdicts so far.
    #[serde(default)]
    gpu: gpu::GpuTally,
    /// The newest stragglers `trainer train` named, newest first (at most
    /// [`stragglers::KEPT`]). Older state files have none.
    #[serde(default)]
    stragglers: Vec<node_contract::straggler::Straggler>,
    /// Stragglers' nodes marked unhealthy so far (see
    /// [`stragglers::REPLACEMENTS_AT_LEAST`]). Older state files have none.
    #[serde(default)]
    straggler_replacements: u32,
}

/// The most nodes the master replaces for one cause over its life, for a
/// cluster of `nodes` nodes: a tenth of them, at least `at_least`.
pub(crate) fn replacement_budget(nodes: usize, at_least: u32) -> u32 {
    u32::try_from(nodes / 10).unwrap_or(u32::MAX).max(at_least)
}

/// The floor of the network gate's [`replacement_budget`]: the most
/// workers its `replace` terminates over the master's life is a tenth of
/// the check's nodes, at least 3. A replacement that is slow again is
/// replaced again until then; past it, slow nodes are only named: a cluster
/// that keeps getting slow instances points at its placement or subnet,
/// not at instances.
pub(crate) const NETWORK_REPLACEMENTS_AT_LEAST: u32 = 3;

impl MasterState {
    /// `me`: the master's own registration (it is index 1 at once);
    /// `cluster_public_key`: OpenSSH line; `size`: the workers requested and
    /// the minimum, as the worker group holds them.
    pub fn new(
        config: &NodeConfig,
        size: GroupSize,
        me: Register,
        cluster_public_key: String,
        now_ms: u64,
    ) -> MasterState {
        let timeout_ms = u64::from(config.formation_timeout_seconds) * 1_000;
        let master_id = me.instance_id.clone();
        let mut timeline = Timeline::default();
        timeline.registered(&me, worker_alias(1), now_ms);
        let mut members = Membership::default();
        members.insert_master(me);
        MasterState {
            cluster: config.cluster.clone(),
            master_id,
            cluster_public_key,
            requested_workers: size.requested,
            min_workers: size.min,
            formation_timeout_seconds: config.formation_timeout_seconds,
            prepare_data_gate: config.elastic.prepare_data_script.as_ref().map(|_| config.efs.mount.clone()),
            formation_deadline_ms: now_ms.saturating_add(timeout_ms),
            phase: Phase::Forming,
            members,
            manifest: None,
            publication: 0,
            resend_due_ms: None,
            retired_through: 0,
            sent_through: 0,
            ack_deadline_ms: None,
            batch_deadline_ms: None,
            last_republish_ms: None,
            completions: Vec::new(),
            departed: BTreeMap::new(),
            boot_failures: BTreeMap::new(),
            timeline,
            network_check: config.network_check.clone(),
            gate: None,
            network_replacements: 0,
            idle: None,
            gpu_action: config.gpu_check.as_ref().map(|c| c.action),
            gpu: gpu::GpuTally::default(),
            stragglers: Vec::new(),
            straggler_replacements: 0,
        }
    }

    /// Turns the idle guard on with `settings` (from the node config and
    /// the agent's options), or off with `None`; called once at start,
    /// before [`MasterState::start`]. A guard kept in a saved state starts
    /// its clock again: the agent restarted, or the master was stopped by
    /// the guard and started again.
    pub fn start_idle(&mut self, settings: Option<IdleSettings>) {
        match (settings, &mut self.idle) {
            (None, _) => self.idle = None,
            (Some(s), Some(watch)) => watch.restart(s),
            (Some(s), None) => self.idle = Some(IdleWatch::new(s)),
        }
    }

    /// The formation timeline (`agent status` prints it on the master).
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Effects to carry out at start: `SignalMasterUp` while formation is
    /// undecided (again after a restart: the first signal may have been lost
    /// with the crash, and a second one is only refused), a fresh query for
    /// launch failures when one was outstanding, the current manifest again
    /// when not every node acknowledged it, and whatever time has made due.
    ///
    /// `sent_through` is the newest generation the runner recorded as
    /// (possibly) sent, 0 when it has no record. When it is newer than this
    /// state's generation, the agent crashed after sending a generation and
    /// before saving the state that holds it: nodes may have applied that
    /// generation, and this state cannot know which nodes it listed. The
    /// next generation is numbered above it, and a formed master publishes
    /// its members at once as that next generation, so every node converges
    /// on them (a node ignores a generation it has already applied).
    pub fn start(&mut self, now_ms: u64, sent_through: u64) -> Vec<Effect> {
        let mut fx = Vec::new();
        let unsaved = sent_through > self.generation().max(self.sent_through);
        self.sent_through = self.sent_through.max(sent_through);
        if unsaved {
            fx.push(Effect::Log(format!(
                "generation {sent_through} may have been sent before a restart, by a state that was not saved; \
                 the next generation is {}",
                sent_through + 1
            )));
        }
        match self.phase {
            Phase::Forming => fx.push(Effect::SignalMasterUp),
            Phase::AwaitingLaunchFailures { .. } => {
                fx.push(Effect::SignalMasterUp);
                fx.push(Effect::FetchLaunchFailures);
                self.phase = Phase::AwaitingLaunchFailures { since_ms: now_ms };
            }
            Phase::Formed if unsaved => self.publish_next(now_ms, &BTreeMap::new(), &mut fx),
            Phase::Formed => {
                if let (Some(m), Some(_)) = (&self.manifest, self.ack_deadline_ms) {
                    fx.push(Effect::Log(format!(
                        "publishing generation {} again after a restart: not every node acknowledged it",
                        m.generation
                    )));
                    fx.push(Effect::PublishManifest { manifest: m.clone(), publication: self.publication });
                    self.ack_deadline_ms = Some(now_ms + ACK_TIMEOUT_MS);
                    self.last_republish_ms = Some(now_ms);
                    self.resend_due_ms = None;
                }
            }
            Phase::Failed => fx.push(Effect::Log("formation failed earlier; this master only logs now".into())),
        }
        // Workers terminated while this agent was not running (the idle
        // guard's `stop` powered the master off; the agent restarted) may
        // never say so: their lifecycle hook's message expires from the
        // master queue after a day. The group knows.
        if self.phase != Phase::Failed && self.members.workers() > 0 {
            fx.push(Effect::CheckMembers);
        }
        self.advance(now_ms, &mut fx);
        fx
    }

    /// A message from the master queue. `prepared(ip)` says whether
    /// `$EFS_MOUNT/prepare_data_success_<ip>` exists.
    pub fn on_inbound(&mut self, msg: MasterInbound, now_ms: u64, prepared: &dyn Fn(&str) -> bool) -> Vec<Effect> {
        let mut fx = Vec::new();
        // Deadlines that passed come first: a registration after the
        // formation deadline is a late join, not part of the formation.
        self.advance(now_ms, &mut fx);
        match msg {
            MasterInbound::Register(r) => self.on_register(r, now_ms, prepared, &mut fx),
            MasterInbound::Applied(a) => self.on_applied(a, now_ms, &mut fx),
            MasterInbound::Leave(l) => self.on_leave(l, now_ms, &mut fx),
            MasterInbound::Notice(n) => self.on_notice(n, now_ms, &mut fx),
            MasterInbound::BootFailure(f) => self.on_boot_failure(f, &mut fx),
            MasterInbound::LinkReport(r) => self.on_link_report(r, now_ms, &mut fx),
            MasterInbound::GpuReport(r) => self.on_gpu_report(r, &mut fx),
            MasterInbound::Straggler(s) => self.on_straggler(s, &mut fx),
            MasterInbound::Activity(a) => {
                // Readings before formation are dropped: the idle clock
                // starts once the cluster formed.
                if let (Some(idle), Phase::Formed) = (&mut self.idle, &self.phase) {
                    idle.on_activity(a, now_ms, &mut fx);
                }
            }
            MasterInbound::Lifecycle(a) => self.on_lifecycle(a, now_ms, &mut fx),
            MasterInbound::LifecycleTest => {
                fx.push(Effect::Log("Auto Scaling's test notification: the lifecycle hook reaches this queue".into()))
            }
        }
        // A node that left no longer keeps the cluster busy: decided now,
        // not at the next tick.
        if let (Some(idle), Phase::Formed) = (&mut self.idle, &self.phase) {
            idle.on_tick(now_ms, &mut fx);
        }
        fx
    }

    /// Time passed: the formation deadline, ack timeouts, the join batching window.
    pub fn on_tick(&mut self, now_ms: u64) -> Vec<Effect> {
        let mut fx = Vec::new();
        self.advance(now_ms, &mut fx);
        fx
    }

    /// The boot failures the master keeps, by instance id.
    pub fn boot_failures(&self) -> &BTreeMap<String, BootFailure> {
        &self.boot_failures
    }

    /// When [`MasterState::on_tick`] next has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        match self.phase {
            Phase::Forming => Some(self.formation_deadline_ms),
            Phase::AwaitingLaunchFailures { since_ms } => Some(since_ms + LAUNCH_FAILURES_TIMEOUT_MS),
            Phase::Formed => [
                self.batch_deadline_ms,
                self.ack_deadline_ms,
                self.resend_due_ms,
                self.gate.as_ref().map(|g| g.deadline_ms),
                self.idle.as_ref().and_then(IdleWatch::next_deadline),
            ]
            .into_iter()
            .flatten()
            .chain(self.completions.iter().map(|c| c.deadline_ms))
            .min(),
            Phase::Failed => None,
        }
    }

    /// The current manifest.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// The current generation (0 before formation).
    pub fn generation(&self) -> u64 {
        self.manifest.as_ref().map_or(0, |m| m.generation)
    }

    /// The formation's count while the cluster forms (for the worker
    /// group's [`node_contract::formation::FORMATION_TAG`], which `synth
    /// deploy` shows); `None` once it formed or failed.
    pub fn forming(&self, now_ms: u64) -> Option<node_contract::formation::FormingMark> {
        (self.phase == Phase::Forming).then(|| node_contract::formation::FormingMark {
            at_ms: now_ms,
            registered: self.members.workers(),
            requested: self.requested_workers,
            failed: self.boot_failures.len() as u32,
        })
    }

    /// Whether the cluster formed.
    pub fn formed(&self) -> bool {
        self.phase == Phase::Formed
    }

    /// Whether formation failed.
    pub fn failed(&self) -> bool {
        self.phase == Phase::Failed
    }

    /// Whatever time has made due, in order.
    fn advance(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        match self.phase {
            Phase::Forming => {
                if self.members.workers() >= self.requested_workers {
                    self.form_complete(now_ms, fx);
                } else if now_ms >= self.formation_deadline_ms {
                    self.decide_at_deadline(now_ms, fx);
                }
            }
            Phase::AwaitingLaunchFailures { since_ms } => {
                if now_ms >= since_ms + LAUNCH_FAILURES_TIMEOUT_MS {
                    let why = "the worker group's launch failures could not be read; check its activity history \
                               and the workers' console output";
                    self.fail(why.into(), fx);
                }
            }
            Phase::Formed => {
                if self.gate.as_ref().is_some_and(|g| now_ms >= g.deadline_ms) {
                    self.decide_gate(now_ms, fx);
                }
                if self.batch_deadline_ms.is_some_and(|d| now_ms >= d) {
                    self.batch_deadline_ms = None;
                    self.publish(now_ms, fx);
                }
                if self.resend_due_ms.is_some_and(|d| now_ms >= d) {
                    self.republish(now_ms, "sending it failed before".into(), fx);
                }
                if self.ack_deadline_ms.is_some_and(|d| now_ms >= d) {
                    let missing = self.unacknowledged(self.generation());
                    fx.push(Effect::Log(format!(
                        "generation {} retired after {} s without an acknowledgement from {}",
                        self.generation(),
                        ACK_TIMEOUT_MS / 1000,
                        missing.join(", ")
                    )));
                    self.retire_current(fx);
                }
                let (due, waiting): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut self.completions).into_iter().partition(|c| now_ms >= c.deadline_ms);
                self.completions = waiting;
                for c in due {
                    fx.push(Effect::Log(format!(
                        "letting {} terminate after {} s although {} did not acknowledge generation {}",
                        c.instance_id,
                        ACK_TIMEOUT_MS / 1000,
                        self.unacknowledged(c.generation).join(", "),
                        c.generation
                    )));
                    fx.push(complete(c.hook, c.token, c.instance_id));
                }
                if let Some(idle) = &mut self.idle {
                    idle.on_tick(now_ms, fx);
                }
            }
            Phase::Failed => {}
        }
    }
}

fn complete(hook: String, token: String, instance_id: String) -> Effect {
    Effect::CompleteLifecycle { hook, token, instance_id }
}

/// At most `max` characters, with an ellipsis when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod gate_tests;

#[cfg(test)]
mod gpu_tests;

#[cfg(test)]
mod straggler_tests;
