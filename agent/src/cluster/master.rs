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

use std::collections::BTreeMap;

use node_contract::message::{
    Applied, BootFailure, Interruption, Leave, LifecycleAction, LinkReport, Manifest, MasterInbound, Register,
    shorten_bytes, worker_alias,
};
use node_contract::parts::check_register;
use node_contract::{NetworkAction, NetworkCheck, NodeConfig, Role};
use serde::{Deserialize, Serialize};

use super::membership::{Member, Membership, host_log_lines};
use super::timeline::Timeline;
use super::{
    ACK_TIMEOUT_MS, BATCH_WINDOW_MS, Effect, LAUNCH_FAILURES_TIMEOUT_MS, REJOIN_AFTER_LEAVE_MS, REPUBLISH_INTERVAL_MS,
};
use crate::netgate::{self, Gate, GateNode, HeldSignal};
use crate::ports::{Formation, GroupSize};

/// How many launch failure messages the failure reason quotes.
const LAUNCH_FAILURES_QUOTED: usize = 3;

/// Launch failure messages are cut to this many characters in the reason.
const LAUNCH_FAILURE_CHARS: usize = 300;

/// How many nodes' boot failures the master keeps (one report each, the
/// newest); reports from further nodes are logged only.
const BOOT_FAILURES_KEPT: usize = 64;

/// How many failed nodes the failure reason quotes the last lines of (the
/// others are named only).
const FAILED_NODES_QUOTED: usize = 3;

/// The most bytes of a failed node's last lines the reason quotes (from
/// the end), so that several nodes and the launch failures fit the signal.
const QUOTED_LINES_BYTES: usize = 600;

/// How many never-registered instances the reason names.
const UNREGISTERED_NAMED: usize = 10;

/// The most bytes a formation signal may carry (its JSON body: status,
/// unique id, reason and data together): "cfn-signal wait condition data",
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html>.
pub const SIGNAL_BYTES: usize = 4096;

/// Departures are remembered this long (the longest SQS message retention,
/// 14 days): a copy of a departed node's `register` cannot be older.
const DEPARTURE_MEMORY_MS: u64 = 14 * 24 * 60 * 60 * 1000;

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
    /// [`network_replacement_budget`]). Older state files have none.
    #[serde(default)]
    network_replacements: u32,
}

/// The most workers the network gate's `replace` terminates over the
/// master's life, for a check of `nodes` nodes: a tenth of them, at least
/// 3. A replacement that is slow again is replaced again until then; past
/// it, slow nodes are only named: a cluster that keeps getting slow
/// instances points at its placement or subnet, not at instances.
pub fn network_replacement_budget(nodes: usize) -> u32 {
    u32::try_from(nodes / 10).unwrap_or(u32::MAX).max(3)
}

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
            MasterInbound::Lifecycle(a) => self.on_lifecycle(a, now_ms, &mut fx),
            MasterInbound::LifecycleTest => {
                fx.push(Effect::Log("Auto Scaling's test notification: the lifecycle hook reaches this queue".into()))
            }
        }
        fx
    }

    /// Time passed: the formation deadline, ack timeouts, the join batching window.
    pub fn on_tick(&mut self, now_ms: u64) -> Vec<Effect> {
        let mut fx = Vec::new();
        self.advance(now_ms, &mut fx);
        fx
    }

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

    /// The boot failures the master keeps, by instance id.
    pub fn boot_failures(&self) -> &BTreeMap<String, BootFailure> {
        &self.boot_failures
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
            }
            Phase::Failed => {}
        }
    }

    /// A node's boot step failed: logged with its last line, and kept (the
    /// newest per node) for a failed formation's reason until it is admitted.
    fn on_boot_failure(&mut self, f: BootFailure, fx: &mut Vec<Effect>) {
        let id = f.instance_id.clone();
        let last = f.last_lines.last().map_or_else(|| "no output".to_string(), |l| format!("last line: {l}"));
        fx.push(Effect::Log(format!(
            "{} ({}) reports a failed boot step: {} ({last})",
            shorten(&id, 64),
            shorten(&f.private_ip, 64),
            f.what
        )));
        if self.members.get(&id).is_some() {
            return;
        }
        if self.boot_failures.len() >= BOOT_FAILURES_KEPT && !self.boot_failures.contains_key(&id) {
            fx.push(Effect::Log(format!(
                "not keeping the boot failure of {}: {BOOT_FAILURES_KEPT} nodes' failures are kept already",
                shorten(&id, 64)
            )));
            return;
        }
        self.boot_failures.insert(id, f);
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

    fn on_register(&mut self, r: Register, now_ms: u64, prepared: &dyn Fn(&str) -> bool, fx: &mut Vec<Effect>) {
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
                "{id} ({}) registered, not admitted yet: waiting for {}/prepare_data_success_{} \
                 (its prepare-data script has not finished)",
                r.private_ip,
                mount.trim_end_matches('/'),
                r.private_ip
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

    fn on_applied(&mut self, a: Applied, now_ms: u64, fx: &mut Vec<Effect>) {
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

    fn on_leave(&mut self, l: Leave, now_ms: u64, fx: &mut Vec<Effect>) {
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
    fn on_notice(&mut self, n: Interruption, now_ms: u64, fx: &mut Vec<Effect>) {
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
        let why = format!("was given an interruption notice ({what}) and leaves the cluster");
        let note = format!("notice {what}");
        self.remove(&id, &why, None, Some(note), now_ms, fx);
        if let Some(d) = self.departed.get_mut(&id) {
            d.interrupted = true;
        }
    }

    fn on_lifecycle(&mut self, a: LifecycleAction, now_ms: u64, fx: &mut Vec<Effect>) {
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
        let Some(member) = self.members.remove(id) else { return };
        self.timeline.remove(id);
        self.remember_departure(id, member.registration.boot_id.clone(), now_ms, lifecycle.is_some());
        let alias = worker_alias(member.index);
        fx.push(Effect::Log(format!("{id} ({alias}, {}) {why}", member.registration.private_ip)));
        let listed = self.manifest.as_ref().is_some_and(|m| m.node(id).is_some());
        if self.phase == Phase::Formed {
            let notes: BTreeMap<String, String> = note.into_iter().map(|n| (id.to_string(), n)).collect();
            if self.publish_noting(now_ms, &notes, fx)
                && let Some(d) = self.departed.get_mut(id)
            {
                d.removed_in = Some(self.manifest.as_ref().map_or(0, |m| m.generation));
            }
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

    fn remember_departure(&mut self, id: &str, boot_id: String, now_ms: u64, terminated: bool) {
        self.departed.retain(|_, d| now_ms < d.at_ms.saturating_add(DEPARTURE_MEMORY_MS));
        self.departed.insert(
            id.to_string(),
            Departure { boot_id, at_ms: now_ms, terminated, interrupted: false, removed_in: None },
        );
    }

    fn open_batch(&mut self, now_ms: u64) {
        if self.batch_deadline_ms.is_none() {
            self.batch_deadline_ms = Some(now_ms + BATCH_WINDOW_MS);
        }
    }

    /// The requested workers are in.
    fn form_complete(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
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
    fn decide_at_deadline(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
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

    /// Opens a network check of `next` when the gate is on and `next` adds
    /// a node to two or more (see [`netgate::checks`]). A check still open
    /// for an older generation is superseded; a formation signal it held
    /// moves to the new one, with its deadline, so formation is never held
    /// longer than one time budget.
    fn open_gate(&mut self, next: &Manifest, now_ms: u64, fx: &mut Vec<Effect>) {
        let Some(check) = &self.network_check else { return };
        // `self.manifest` is still the generation before `next`.
        if !netgate::checks(self.manifest.as_ref(), next) {
            if next.nodes.len() < 2 && self.gate.is_none() {
                fx.push(Effect::Log(format!(
                    "no network check of generation {}: one node, no link to measure",
                    next.generation
                )));
            }
            return;
        }
        let budget_ms = u64::from(check.timeout_seconds) * 1_000;
        let mut deadline_ms = now_ms + budget_ms;
        let mut held = None;
        if let Some(old) = self.gate.take() {
            fx.push(Effect::Log(format!(
                "the network check of generation {} is superseded by generation {}",
                old.generation, next.generation
            )));
            if old.held.is_some() {
                deadline_ms = old.deadline_ms;
                held = old.held;
            }
        }
        // By index: the membership lists a manifest's nodes so.
        let nodes: Vec<GateNode> = next
            .nodes
            .iter()
            .map(|n| GateNode { instance_id: n.instance_id.clone(), alias: n.alias.clone(), ip: n.private_ip.clone() })
            .collect();
        fx.push(Effect::Log(format!(
            "network check of generation {}: waiting up to {} s for {} nodes' measurements",
            next.generation,
            deadline_ms.saturating_sub(now_ms) / 1000,
            nodes.len()
        )));
        self.gate = Some(Gate { generation: next.generation, deadline_ms, nodes, reports: BTreeMap::new(), held });
    }

    /// A node's probe measured its link: kept when it belongs to the open
    /// check; the check decides once every node reported.
    fn on_link_report(&mut self, r: LinkReport, now_ms: u64, fx: &mut Vec<Effect>) {
        let Some(gate) = self.gate.as_mut() else {
            fx.push(Effect::Log(format!(
                "ignored a link report from {} for generation {}: no network check is open",
                shorten(&r.instance_id, 64),
                r.generation
            )));
            return;
        };
        if r.generation != gate.generation || !gate.nodes.iter().any(|n| n.instance_id == r.instance_id) {
            fx.push(Effect::Log(format!(
                "ignored a link report from {} for generation {}: the open check is of generation {} and its nodes",
                shorten(&r.instance_id, 64),
                r.generation,
                gate.generation
            )));
            return;
        }
        match r.gbps() {
            Some(g) => fx.push(Effect::Log(format!("{} measured {g:.3} Gbit/s to {}", r.instance_id, r.peer))),
            None => fx.push(Effect::Log(format!(
                "{} could not measure its link to {}: {}",
                r.instance_id,
                r.peer,
                r.error.as_deref().unwrap_or("nothing measured")
            ))),
        }
        gate.reports.insert(r.instance_id.clone(), r);
        if gate.complete() {
            self.decide_gate(now_ms, fx);
        }
    }

    /// The open check decides (every node reported, or its time is up):
    /// the verdict goes to the log, the state file for `trainer doctor`
    /// and, per slow node, the host log; then the action: `replace`
    /// terminates slow workers (never the master), `fail` fails a formation
    /// whose signal the check holds (after formation it warns), and a held
    /// success signal goes out with the verdict in its reason.
    fn decide_gate(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        let (Some(gate), Some(check)) = (self.gate.take(), self.network_check.as_ref()) else { return };
        let verdict = netgate::judge(check, gate.generation, &gate.nodes, &gate.reports);
        let mut summary = verdict.summary();
        if !gate.complete() {
            summary.push_str(&format!(" (decided at the {}-second limit)", check.timeout_seconds));
        }
        fx.push(Effect::Log(summary.clone()));
        let record = serde_json::json!({
            "version": 1,
            "action": check.action.name(),
            "decided_unix_ms": now_ms,
            "summary": summary,
            "verdict": verdict,
        });
        fx.push(Effect::WriteNetworkCheck(record.to_string()));
        let slow: Vec<&GateNode> = verdict.slow().map(|l| &l.node).collect();
        let nanos = u128::from(now_ms) * 1_000_000;
        for l in verdict.slow() {
            fx.push(Effect::AppendHostLog(format!(
                "{} SLOW {} {nanos} {:.2}",
                gate.generation,
                l.node.ip,
                l.fraction.unwrap_or_default()
            )));
        }
        if check.action == NetworkAction::Fail
            && !slow.is_empty()
            && let Some(held) = &gate.held
        {
            self.phase = Phase::Failed;
            let reason = format!("{summary} The blueprint's formation.network_check.action is fail.");
            self.signal(false, reason, held.data.clone(), fx);
            return;
        }
        // What the action did, each sentence after a space.
        let actions = match check.action {
            _ if slow.is_empty() => String::new(),
            NetworkAction::Warn => String::new(),
            NetworkAction::Fail => " (action fail: the cluster had formed, so this only warns)".to_string(),
            NetworkAction::Replace => self.replace_slow(&slow, gate.nodes.len(), fx),
        };
        if !actions.is_empty() {
            fx.push(Effect::Log(actions.trim_start().to_string()));
        }
        if let Some(held) = gate.held {
            self.signal(true, format!("{} {summary}{actions}", held.reason), held.data, fx);
        }
    }

    /// The network gate's `replace` for the `slow` nodes of a check of
    /// `nodes`: terminates each slow worker while the budget lasts, unless
    /// most nodes are slow. Returns what it did, each sentence after a space.
    fn replace_slow(&mut self, slow: &[&GateNode], nodes: usize, fx: &mut Vec<Effect>) -> String {
        if slow.len() * 2 > nodes {
            return format!(
                " {} of {nodes} nodes are below: that points at the expected bandwidth or the network, not at \
                 these nodes, so none is replaced.",
                slow.len()
            );
        }
        let budget = network_replacement_budget(nodes);
        let mut actions = String::new();
        for n in slow {
            if n.instance_id == self.master_id {
                actions.push_str(&format!(" {} is the master, which is not replaced.", n.alias));
            } else if self.network_replacements >= budget {
                actions.push_str(&format!(
                    " {} ({}) is not replaced: the network check replaced {} workers already, the most for this \
                     cluster (check the subnet and placement).",
                    n.alias, n.instance_id, self.network_replacements
                ));
            } else {
                self.network_replacements += 1;
                actions.push_str(&format!(" {} ({}) is terminated for a replacement.", n.alias, n.instance_id));
                fx.push(Effect::TerminateWorker(n.instance_id.clone()));
            }
        }
        actions
    }

    fn fail(&mut self, why: String, fx: &mut Vec<Effect>) {
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
    fn signal(&self, success: bool, reason: String, data: String, fx: &mut Vec<Effect>) {
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
        data.to_string()
    }

    /// Publishes a new generation when the members differ from the current
    /// manifest. Returns whether it did.
    fn publish(&mut self, now_ms: u64, fx: &mut Vec<Effect>) -> bool {
        self.publish_noting(now_ms, &BTreeMap::new(), fx)
    }

    /// [`Self::publish`], with why nodes left (by instance id) for the
    /// host log.
    fn publish_noting(&mut self, now_ms: u64, notes: &BTreeMap<String, String>, fx: &mut Vec<Effect>) -> bool {
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
    fn publish_next(&mut self, now_ms: u64, notes: &BTreeMap<String, String>, fx: &mut Vec<Effect>) {
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
        fx.push(Effect::Log(format!("publishing generation {generation}: {} nodes", next.nodes.len())));
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
    fn republish(&mut self, now_ms: u64, why: String, fx: &mut Vec<Effect>) {
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

    fn retire_current(&mut self, fx: &mut Vec<Effect>) {
        let generation = self.generation();
        self.ack_deadline_ms = None;
        self.resend_due_ms = None;
        self.retired_through = self.retired_through.max(generation);
        fx.push(Effect::RetireManifests { through_generation: generation });
    }

    /// The nodes of the current manifest that did not acknowledge
    /// `generation` (or a newer one), as `alias (instance id)`.
    fn unacknowledged(&self, generation: u64) -> Vec<String> {
        let Some(m) = &self.manifest else { return Vec::new() };
        m.nodes
            .iter()
            .filter(|n| !self.members.get(&n.instance_id).is_some_and(|m: &Member| m.has_applied(generation)))
            .map(|n| format!("{} ({})", n.alias, n.instance_id))
            .collect()
    }
}

fn complete(hook: String, token: String, instance_id: String) -> Effect {
    Effect::CompleteLifecycle { hook, token, instance_id }
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
