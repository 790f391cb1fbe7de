//! The messages nodes exchange over SQS (docs/ARCHITECTURE.md, "Messages (JSON on SQS)"), and the
//! Auto Scaling lifecycle notifications that arrive in the master's queue.
//!
//! Our own messages are JSON objects with a `version` and a `kind`:
//! - `register` (every node -> master queue): who I am. Re-sent until the
//!   node sees itself in a manifest.
//! - `manifest_part` (master -> worker queue): the cluster, with a
//!   generation that only grows, sent as one or more parts that each fit a
//!   message ([`crate::parts`]: why, and how they are put back together).
//!   Nodes apply the highest complete generation they have seen.
//! - `applied` (node -> master queue): "I applied generation g"; the master
//!   deletes a generation's parts from the worker queue once every node in
//!   it applied it (SQS has no broadcast: the parts stay visible until then).
//! - `leave` (node -> master queue): "remove me" (a clean shutdown).
//! - `notice` (node -> master queue): EC2 gave this node an interruption
//!   notice, or its Capacity Block is about to end
//!   ([`crate::interruption`]); the master removes it at once.
//! - `boot_failure` (node -> master queue): a boot step this node's agent
//!   runs (the prepare-data script) failed, with the last lines of its
//!   output; a failed formation's reason quotes it.
//! - `link_report` (node -> master queue): what this node's bandwidth probe
//!   measured to its ring neighbour for a generation (the network gate,
//!   `agent/src/netgate.rs`).
//! - `activity` (worker -> master queue): what keeps this node busy (job
//!   ranks, SSH sessions, GPU utilisation), for the idle guard
//!   ([`crate::idle`]); sent only when the cluster has one.
//! - `straggler` (node -> master queue): a rank `trainer train`'s rank 0
//!   named as a straggler on this node ([`crate::straggler`]).
//!
//! Version 2 replaced version 1's single `manifest` message with
//! `manifest_part`s. Version 3 added `notice` and changed nothing else, so
//! every kind but `notice` is still written as version 2 and a version-2
//! agent reads it as before; a `notice` is written as version 3
//! ([`Message::version`]), so an agent of the version-2 release refuses it
//! by its version, with what to do ([`Unusable::UnsupportedVersion`]),
//! rather than as a malformed body. This build reads versions 2 to 13 and
//! refuses any other before it looks at the rest, so agents of different
//! releases in one cluster say so instead of misreading each other; a kind
//! it does not know within those versions is refused by name
//! ([`Unusable::UnknownKind`]). Version 4 added `boot_failure` the same
//! way: it is written as version 4, everything else as before. Version 5
//! added `link_report` the same way; versions 6 and 7 added fields to
//! `register`. Version 8 sends a `manifest_part`'s nodes deflated
//! (`nodes_deflated`, [`crate::parts`]): written as version 8, so an agent
//! of an earlier release refuses it by its version; this build still reads
//! a part with plain `nodes`. Version 9 added `activity` the same way
//! (written as version 9, the only kind that is). Version 10 added a
//! notice kind, `capacity_block_end`: a `notice` of that kind is written as
//! version 10 ([`CAPACITY_BLOCK_NOTICE_VERSION`]), so a version-9 agent,
//! which would find the kind unknown and drop the body as malformed,
//! refuses it by its version; every other `notice` is still version 3.
//! Version 11 added `data` to `register` (what the node's data fetch took,
//! [`crate::data::DataReady`]): such a `register` is written as version 11
//! ([`REGISTER_DATA_VERSION`]), so a version-10 master refuses it by its
//! version rather than as malformed.
//! Version 12 added `gpu_report` (a node's GPU gate verdict,
//! [`crate::gpu::GpuReport`]) and the notice kind `gpu_fault`: both are
//! written as version 12 ([`GPU_VERSION`]), for the same reason.
//! Version 13 added `straggler` ([`crate::straggler::Straggler`]), written
//! as version 13 ([`STRAGGLER_VERSION`]), the only kind that is.
//!
//! Queues are standard queues: at-least-once, unordered. Duplicates,
//! reordering, stale generations and malformed bodies are expected;
//! [`parse_master_queue`] and [`parse_worker_queue`] classify every body
//! without panicking, so the agent can log and drop what it cannot use.
//!
//! Lifecycle notification format:
//! <https://docs.aws.amazon.com/autoscaling/ec2/userguide/prepare-for-lifecycle-notifications.html#notification-message-example>

use serde::{Deserialize, Serialize};

pub use crate::idle::Activity;
pub use crate::interruption::Interruption;
pub use crate::parts::ManifestPart;

/// The message version this crate writes every kind but `notice` with (the
/// oldest it reads).
pub const MESSAGE_VERSION: u32 = 2;

/// The version `notice` is written with (the first that has it).
pub const NOTICE_VERSION: u32 = 3;

/// The version `boot_failure` is written with (the first that has it).
pub const BOOT_FAILURE_VERSION: u32 = 4;

/// The version `link_report` is written with (the first that has it).
pub const LINK_REPORT_VERSION: u32 = 5;

/// The version a `register` that carries the node's boot and agent start
/// times ([`Register::booted_unix_ms`]) is written with: an older master,
/// whose `register` has no such fields, refuses it by its version and says
/// why, instead of dropping it as malformed.
pub const REGISTER_TIMES_VERSION: u32 = 6;

/// The version a `register` that carries the instance's launch time
/// ([`Register::launched_unix_ms`]) is written with, for the same reason.
pub const REGISTER_LAUNCHED_VERSION: u32 = 7;

/// The version a `manifest_part` is written with since its nodes travel
/// deflated ([`crate::parts`], "On the wire"): an agent of an earlier
/// release refuses it by its version instead of as malformed. This build
/// still reads a version-2 part with plain `nodes`.
pub const MANIFEST_DEFLATED_VERSION: u32 = 8;

/// The version `activity` is written with (the first that has it).
pub const ACTIVITY_VERSION: u32 = 9;

/// The version a `notice` of kind `capacity_block_end` is written with (the
/// first that has the kind): a version-9 reader refuses it by its version
/// instead of misreading it.
pub const CAPACITY_BLOCK_NOTICE_VERSION: u32 = 10;

/// The version a `register` that carries its data fetch
/// ([`Register::data`]) is written with, for the same reason as
/// [`REGISTER_TIMES_VERSION`].
pub const REGISTER_DATA_VERSION: u32 = 11;

/// The version `gpu_report`, and a `notice` of kind `gpu_fault`, are
/// written with (the first that has them).
pub const GPU_VERSION: u32 = 12;

/// The version `straggler` is written with (the first that has it).
pub const STRAGGLER_VERSION: u32 = 13;

/// The newest message version this crate reads.
pub const NEWEST_MESSAGE_VERSION: u32 = 13;

/// The kinds this crate knows, for the error about one it does not.
const KINDS: &[&str] = &[
    "register",
    "manifest_part",
    "applied",
    "leave",
    "notice",
    "boot_failure",
    "link_report",
    "activity",
    "gpu_report",
    "straggler",
];

/// The most bytes of a [`LinkReport`]'s `error`.
pub const LINK_REPORT_ERROR_BYTES: usize = 256;

/// The most output lines a [`BootFailure`] carries.
pub const BOOT_FAILURE_LINES: usize = 20;

/// The most bytes of output a [`BootFailure`] carries (its lines together):
/// the formation signal that quotes it has 4,096 bytes in all
/// (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html>,
/// "cfn-signal wait condition data").
pub const BOOT_FAILURE_BYTES: usize = 1024;

/// The most bytes of a [`BootFailure`]'s `what`.
pub const BOOT_FAILURE_WHAT_BYTES: usize = 256;

/// The largest body this project sends or reads. SQS accepts up to 1 MiB
/// (since August 2025; a queue's `MaximumMessageSize` can be lower, and was
/// 256 KiB by default before), so 256 KiB fits every queue; a manifest of
/// any size is split into parts of at most this ([`crate::parts`]).
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html>
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The master's alias in addition to its worker alias.
pub const MASTER_ALIAS: &str = "deeplearning-master";

/// The alias of the node with index `index` (the master is 1).
pub fn worker_alias(index: u32) -> String {
    format!("deeplearning-worker{index}")
}

/// A node introduces itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    /// `i-...`
    pub instance_id: String,
    /// Private IPv4 address.
    pub private_ip: String,
    /// The instance's own host name (EC2 private DNS name).
    pub hostname: String,
    /// Master or worker.
    pub role: crate::Role,
    /// GPUs the CUDA driver sees (0 without a driver).
    pub gpus: u32,
    /// For example `p3.16xlarge`.
    pub instance_type: String,
    /// For example `us-east-1a`.
    pub availability_zone: String,
    /// The node's SSH host public key, one OpenSSH line (`ssh-ed25519 AAAA...`).
    pub ssh_host_key: String,
    /// `/proc/sys/kernel/random/boot_id`: tells a reboot from a duplicate.
    pub boot_id: String,
    /// When EC2 launched the instance (or last started it): `pendingTime`
    /// of its instance identity document, unix milliseconds (whole
    /// seconds); the formation timeline's `launched` (version
    /// [`REGISTER_LAUNCHED_VERSION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_unix_ms: Option<u64>,
    /// When the node's kernel booted (`btime` in `/proc/stat`), unix
    /// milliseconds by the node's clock: the formation timeline's `booted`
    /// (version [`REGISTER_TIMES_VERSION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booted_unix_ms: Option<u64>,
    /// When the node's agent started, unix milliseconds by its clock: the
    /// timeline's `agent started`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_started_unix_ms: Option<u64>,
    /// What the node's data fetch took (the formation timeline's `data
    /// ready`); absent without data sets (version
    /// [`REGISTER_DATA_VERSION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<crate::data::DataReady>,
}

/// One node in a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestNode {
    /// 1 for the master; a node keeps its index for as long as it lives.
    pub index: u32,
    /// `deeplearning-worker<index>`.
    pub alias: String,
    /// `i-...`
    pub instance_id: String,
    /// Private IPv4 address.
    pub private_ip: String,
    /// The instance's own host name.
    pub hostname: String,
    /// GPUs (the hostfile's slots; at least 1 slot is written for 0).
    pub gpus: u32,
    /// SSH host public key, for everyone's known hosts.
    pub ssh_host_key: String,
}

/// The cluster as the master sees it. Not a message itself: it travels as
/// [`ManifestPart`]s, and is what a node's state file keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The cluster name.
    pub cluster: String,
    /// Grows by one with every change; nodes ignore anything not newer than what they applied.
    pub generation: u64,
    /// The master's instance id.
    pub master: String,
    /// Every node, master first, then by index.
    pub nodes: Vec<ManifestNode>,
    /// The cluster's SSH public key, for every node's authorized keys.
    pub cluster_public_key: String,
}

impl Manifest {
    /// The node with this instance id.
    pub fn node(&self, instance_id: &str) -> Option<&ManifestNode> {
        self.nodes.iter().find(|n| n.instance_id == instance_id)
    }
}

/// A node reports a generation applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Applied {
    /// `i-...`
    pub instance_id: String,
    /// The generation now on disk.
    pub generation: u64,
}

/// A node asks to be removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leave {
    /// `i-...`
    pub instance_id: String,
    /// Why, for the log.
    pub reason: String,
}

/// A boot step a node's agent runs failed (message version 4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootFailure {
    /// `i-...`
    pub instance_id: String,
    /// Private IPv4 address.
    pub private_ip: String,
    /// What failed, for example "the prepare-data script /efs/prepare.sh exited with status 1".
    pub what: String,
    /// The last lines of its output, oldest first: at most
    /// [`BOOT_FAILURE_LINES`], [`BOOT_FAILURE_BYTES`] together.
    pub last_lines: Vec<String>,
}

impl BootFailure {
    /// A failure report with the last lines of `output` (lossy UTF-8), cut
    /// to the bounds: lines from the end until [`BOOT_FAILURE_LINES`] or
    /// [`BOOT_FAILURE_BYTES`]; a single line longer than that keeps its end,
    /// after "…".
    pub fn new(instance_id: &str, private_ip: &str, what: &str, output: &[u8]) -> BootFailure {
        let text = String::from_utf8_lossy(output);
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        BootFailure {
            instance_id: instance_id.to_string(),
            private_ip: private_ip.to_string(),
            what: what.to_string(),
            last_lines: lines,
        }
        .bounded()
    }

    /// The same report within the bounds (a reader applies them again: the
    /// body came from another node).
    pub fn bounded(mut self) -> BootFailure {
        self.what = shorten_bytes(&self.what, BOOT_FAILURE_WHAT_BYTES);
        let mut kept: Vec<String> = Vec::new();
        let mut bytes = 0;
        for line in self.last_lines.iter().rev().map(|l| l.trim_end()).filter(|l| !l.is_empty()) {
            if kept.len() == BOOT_FAILURE_LINES {
                break;
            }
            let room = BOOT_FAILURE_BYTES - bytes;
            if line.len() <= room {
                bytes += line.len();
                kept.push(line.to_string());
            } else {
                if kept.is_empty() {
                    kept.push(keep_end_bytes(line, room));
                }
                break;
            }
        }
        kept.reverse();
        self.last_lines = kept;
        self
    }
}

/// What a node's bandwidth probe measured for one generation (message
/// version 5): it sent to `peer`, the next node of the manifest's ring,
/// for a bounded time, and the peer confirmed the bytes it read. The
/// master turns it into the sender's egress bandwidth (see
/// `agent/src/netgate.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkReport {
    /// The sender, `i-...`.
    pub instance_id: String,
    /// The manifest generation whose ring was measured.
    pub generation: u64,
    /// The receiver, `i-...`.
    pub peer: String,
    /// Bytes the peer confirmed it read.
    pub bytes: u64,
    /// Milliseconds from the first byte sent to the peer's confirmation.
    pub millis: u64,
    /// Why nothing could be measured (the peer unreachable, the probe cut
    /// short); `bytes` and `millis` are then 0. At most
    /// [`LINK_REPORT_ERROR_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LinkReport {
    /// The measured bandwidth in Gbit/s (10^9 bits a second); `None` when
    /// nothing was measured.
    pub fn gbps(&self) -> Option<f64> {
        (self.error.is_none() && self.millis > 0).then(|| self.bytes as f64 * 8.0 / (self.millis as f64 * 1e6))
    }

    /// The same report within the bounds (the body came from another node).
    pub fn bounded(mut self) -> LinkReport {
        self.error = self.error.map(|e| shorten_bytes(&e, LINK_REPORT_ERROR_BYTES));
        self
    }
}

/// At most `max` bytes of `s` (`max` >= 3), ending in "…" when cut, never
/// splitting a character.
pub fn shorten_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The last bytes of `s`, at most `max` with the leading "…", never
/// splitting a character.
fn keep_end_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// One of our messages. On the wire: `{"version": 2, "kind": "...", ...fields}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Message {
    /// See [`Register`].
    Register(Register),
    /// See [`ManifestPart`].
    ManifestPart(ManifestPart),
    /// See [`Applied`].
    Applied(Applied),
    /// See [`Leave`].
    Leave(Leave),
    /// See [`Interruption`] (message version 3; 10 for a Capacity Block's end).
    Notice(Interruption),
    /// See [`BootFailure`] (message version 4).
    BootFailure(BootFailure),
    /// See [`LinkReport`] (message version 5).
    LinkReport(LinkReport),
    /// See [`Activity`] (message version 9).
    Activity(Activity),
    /// A node's GPU gate verdict, passed or failed, sent before it
    /// registers ([`crate::gpu::GpuReport`], message version 12).
    GpuReport(crate::gpu::GpuReport),
    /// A rank `trainer train` named as a straggler
    /// ([`crate::straggler::Straggler`], message version 13).
    Straggler(crate::straggler::Straggler),
}

#[derive(Serialize)]
struct Envelope<'a> {
    version: u32,
    #[serde(flatten)]
    body: &'a Message,
}

impl Message {
    /// The version this message is written with: the first version that has
    /// its kind, so that an older reader refuses a kind it cannot know by
    /// its version, and reads the others as before.
    pub fn version(&self) -> u32 {
        match self {
            Message::Notice(n) if n.notice == crate::interruption::NoticeKind::CapacityBlockEnd => {
                CAPACITY_BLOCK_NOTICE_VERSION
            }
            Message::Notice(n) if n.notice == crate::interruption::NoticeKind::GpuFault => GPU_VERSION,
            Message::Notice(_) => NOTICE_VERSION,
            Message::GpuReport(_) => GPU_VERSION,
            Message::Straggler(_) => STRAGGLER_VERSION,
            Message::BootFailure(_) => BOOT_FAILURE_VERSION,
            Message::LinkReport(_) => LINK_REPORT_VERSION,
            Message::Activity(_) => ACTIVITY_VERSION,
            Message::ManifestPart(_) => MANIFEST_DEFLATED_VERSION,
            Message::Register(r) if r.data.is_some() => REGISTER_DATA_VERSION,
            Message::Register(r) if r.launched_unix_ms.is_some() => REGISTER_LAUNCHED_VERSION,
            Message::Register(r) if r.booted_unix_ms.is_some() || r.agent_started_unix_ms.is_some() => {
                REGISTER_TIMES_VERSION
            }
            _ => MESSAGE_VERSION,
        }
    }

    /// The JSON body.
    pub fn to_body(&self) -> String {
        // Plain structs of strings and numbers always serialize.
        serde_json::to_string(&Envelope { version: self.version(), body: self }).unwrap_or_default()
    }
}

/// An Auto Scaling lifecycle action notification.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LifecycleAction {
    /// For example `autoscaling:EC2_INSTANCE_TERMINATING`.
    pub lifecycle_transition: String,
    /// The hook's name.
    pub lifecycle_hook_name: String,
    /// The group.
    pub auto_scaling_group_name: String,
    /// The instance.
    #[serde(rename = "EC2InstanceId")]
    pub ec2_instance_id: String,
    /// Passed back to `CompleteLifecycleAction`.
    pub lifecycle_action_token: String,
}

impl LifecycleAction {
    /// Whether the instance is leaving (scale-in, termination, Spot reclaim).
    pub fn is_terminating(&self) -> bool {
        self.lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING"
    }
}

/// Why a body was not used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// Over [`MAX_BODY_BYTES`].
    #[error("the body is {0} bytes, over the {MAX_BODY_BYTES}-byte limit")]
    Oversized(usize),
    /// Not JSON or not a known shape.
    #[error("malformed: {0}")]
    Malformed(String),
    /// A version this build does not read.
    #[error(
        "message version {0} is not supported (this agent reads versions {MESSAGE_VERSION} to \
         {NEWEST_MESSAGE_VERSION}); every node of a cluster must run the same agent release: update the older one"
    )]
    UnsupportedVersion(u64),
    /// A version this build reads, but a kind it does not know.
    #[error(
        "unknown message kind {0:?} (this agent knows {known}); every node of a cluster must run the same agent \
         release: update the older one",
        known = KINDS.join(", ")
    )]
    UnknownKind(String),
    /// One of ours, but it does not belong in this queue.
    #[error("a `{0}` message does not belong in this queue")]
    WrongQueue(&'static str),
}

/// What arrives in the master's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterInbound {
    /// A node introduces itself.
    Register(Register),
    /// A node applied a generation.
    Applied(Applied),
    /// A node leaves.
    Leave(Leave),
    /// A node was given an interruption notice.
    Notice(Interruption),
    /// A node's boot step failed.
    BootFailure(BootFailure),
    /// A node's bandwidth probe measured its link.
    LinkReport(LinkReport),
    /// A node says what keeps it busy (the idle guard).
    Activity(Activity),
    /// A node's GPU gate verdict (bounded).
    GpuReport(crate::gpu::GpuReport),
    /// A straggler `trainer train` named (bounded).
    Straggler(crate::straggler::Straggler),
    /// Auto Scaling: an instance is launching or terminating.
    Lifecycle(LifecycleAction),
    /// Auto Scaling's test notification, sent when a hook is created.
    LifecycleTest,
}

fn parse(body: &str) -> Result<Result<Message, serde_json::Value>, Unusable> {
    if body.len() > MAX_BODY_BYTES {
        return Err(Unusable::Oversized(body.len()));
    }
    let value: serde_json::Value = serde_json::from_str(body).map_err(|e| Unusable::Malformed(e.to_string()))?;
    let serde_json::Value::Object(mut object) = value else {
        return Err(Unusable::Malformed("not a JSON object".into()));
    };
    if !object.contains_key("kind") {
        // Not ours: maybe an Auto Scaling notification.
        return Ok(Err(serde_json::Value::Object(object)));
    }
    match object.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if (u64::from(MESSAGE_VERSION)..=u64::from(NEWEST_MESSAGE_VERSION)).contains(&v) => {}
        Some(v) => return Err(Unusable::UnsupportedVersion(v)),
        None => return Err(Unusable::Malformed("no `version`".into())),
    }
    match object.get("kind").and_then(serde_json::Value::as_str) {
        Some(kind) if KINDS.contains(&kind) => {}
        Some(kind) => return Err(Unusable::UnknownKind(kind.chars().take(64).collect())),
        None => return Err(Unusable::Malformed("`kind` is not a string".into())),
    }
    // Taken, not copied: a 1,000-node manifest part is 259 KB of JSON.
    object.remove("version");
    let message =
        serde_json::from_value(serde_json::Value::Object(object)).map_err(|e| Unusable::Malformed(e.to_string()))?;
    Ok(Ok(message))
}

/// Classifies a body read from the master's queue.
pub fn parse_master_queue(body: &str) -> Result<MasterInbound, Unusable> {
    match parse(body)? {
        Ok(Message::Register(m)) => Ok(MasterInbound::Register(m)),
        Ok(Message::Applied(m)) => Ok(MasterInbound::Applied(m)),
        Ok(Message::Leave(m)) => Ok(MasterInbound::Leave(m)),
        Ok(Message::Notice(m)) => Ok(MasterInbound::Notice(m)),
        Ok(Message::BootFailure(m)) => Ok(MasterInbound::BootFailure(m.bounded())),
        Ok(Message::LinkReport(m)) => Ok(MasterInbound::LinkReport(m.bounded())),
        Ok(Message::Activity(m)) => Ok(MasterInbound::Activity(m)),
        Ok(Message::GpuReport(m)) => Ok(MasterInbound::GpuReport(m.bounded())),
        Ok(Message::Straggler(m)) => Ok(MasterInbound::Straggler(m.bounded())),
        Ok(Message::ManifestPart(_)) => Err(Unusable::WrongQueue("manifest_part")),
        Err(value) => {
            if value.get("Event").and_then(serde_json::Value::as_str) == Some("autoscaling:TEST_NOTIFICATION") {
                return Ok(MasterInbound::LifecycleTest);
            }
            serde_json::from_value::<LifecycleAction>(value).map(MasterInbound::Lifecycle).map_err(|e| {
                Unusable::Malformed(format!("neither a message of ours nor a lifecycle notification: {e}"))
            })
        }
    }
}

/// Classifies a body read from the worker queue (manifest parts only).
pub fn parse_worker_queue(body: &str) -> Result<ManifestPart, Unusable> {
    match parse(body)? {
        Ok(Message::ManifestPart(m)) => Ok(m),
        Ok(Message::Register(_)) => Err(Unusable::WrongQueue("register")),
        Ok(Message::Applied(_)) => Err(Unusable::WrongQueue("applied")),
        Ok(Message::Leave(_)) => Err(Unusable::WrongQueue("leave")),
        Ok(Message::Notice(_)) => Err(Unusable::WrongQueue("notice")),
        Ok(Message::BootFailure(_)) => Err(Unusable::WrongQueue("boot_failure")),
        Ok(Message::LinkReport(_)) => Err(Unusable::WrongQueue("link_report")),
        Ok(Message::Activity(_)) => Err(Unusable::WrongQueue("activity")),
        Ok(Message::GpuReport(_)) => Err(Unusable::WrongQueue("gpu_report")),
        Ok(Message::Straggler(_)) => Err(Unusable::WrongQueue("straggler")),
        Err(_) => Err(Unusable::Malformed("not a message of ours".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    fn register() -> Register {
        Register {
            instance_id: "i-0123456789abcdef0".into(),
            private_ip: "10.0.128.10".into(),
            hostname: "ip-10-0-128-10.ec2.internal".into(),
            role: Role::Worker,
            gpus: 8,
            instance_type: "p3.16xlarge".into(),
            availability_zone: "us-east-1a".into(),
            ssh_host_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA root@node".into(),
            boot_id: "2f0c1c7e-0000-4000-8000-000000000000".into(),
            launched_unix_ms: None,
            booted_unix_ms: None,
            agent_started_unix_ms: None,
            data: None,
        }
    }

    fn manifest() -> Manifest {
        Manifest {
            cluster: "demo".into(),
            generation: 3,
            master: "i-master".into(),
            nodes: vec![ManifestNode {
                index: 1,
                alias: worker_alias(1),
                instance_id: "i-master".into(),
                private_ip: "10.0.0.5".into(),
                hostname: "ip-10-0-0-5".into(),
                gpus: 0,
                ssh_host_key: "ssh-ed25519 AAAA".into(),
            }],
            cluster_public_key: "ssh-ed25519 AAAA cluster".into(),
        }
    }

    fn notice() -> Interruption {
        crate::interruption::from_instance_action("i-1", r#"{"action": "terminate", "time": "2026-11-25T20:00:00Z"}"#)
            .unwrap()
    }

    fn boot_failure() -> BootFailure {
        BootFailure::new(
            "i-1",
            "10.0.0.7",
            "the prepare-data script exited with status 1",
            b"step 1\nstep 2: no such file\n",
        )
    }

    fn link_report() -> LinkReport {
        LinkReport {
            instance_id: "i-1".into(),
            generation: 1,
            peer: "i-2".into(),
            bytes: 50_000_000,
            millis: 1_000,
            error: None,
        }
    }

    /// `activity` came with version 9: a version-8 reader refuses it by its
    /// version ("update the older one"), not as malformed; only a worker
    /// sends it, to the master's queue.
    #[test]
    fn activity_is_version_9_and_belongs_in_the_masters_queue() {
        let activity = Activity { instance_id: "i-1".into(), job_ranks: 0, ssh_sessions: 2, gpu_percent: Some(40) };
        let body = Message::Activity(activity.clone()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(9), Some("activity")));
        assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Activity(activity));
        assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("activity"));
        assert!(Unusable::UnsupportedVersion(9).to_string().contains("update the older one"));
        let no_gpu = Activity { instance_id: "i-1".into(), ..Activity::default() };
        assert!(!Message::Activity(no_gpu).to_body().contains("gpu_percent"));
    }

    /// `straggler` came with version 13: a version-12 reader refuses it by
    /// its version; it belongs in the master's queue, bounded there.
    #[test]
    fn straggler_is_version_13_and_belongs_in_the_masters_queue() {
        let s = crate::straggler::Straggler {
            alias: "deeplearning-worker7".into(),
            instance_id: format!("i-{}", "0".repeat(100)),
            rank: 6,
            local_rank: 5,
            percent_slower: 38,
            steps: 200,
            named_unix_ms: 9,
            after_checkpoint: true,
        };
        let body = Message::Straggler(s.clone()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(13), Some("straggler")));
        assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Straggler(s.clone().bounded()));
        assert_ne!(s.clone().bounded(), s, "the instance id is cut");
        assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("straggler"));
        let v12 = body.replace("\"version\":13", "\"version\":14");
        assert_eq!(parse_master_queue(&v12).unwrap_err(), Unusable::UnsupportedVersion(14));
    }

    /// A notice of a Capacity Block's end came with version 10: a version-9
    /// reader (which reads notices of the two IMDS kinds only) refuses it
    /// by its version ("update the older one"), not as malformed; every
    /// other notice is still version 3.
    #[test]
    fn a_capacity_block_notice_is_version_10_and_other_notices_stay_version_3() {
        let block = crate::interruption::CapacityBlock { id: "cr-1".into(), end_unix: 1_797_507_000 };
        let n = crate::interruption::capacity_block_end("i-1", &block);
        let body = Message::Notice(n.clone()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(10), Some("notice")));
        assert_eq!(v["notice"], "capacity_block_end");
        assert_eq!(v["deadline_unix"], block.reclaim_unix());
        assert!(v.get("action").is_none(), "{v}");
        assert_eq!(NEWEST_MESSAGE_VERSION, STRAGGLER_VERSION);
        assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Notice(n));
        assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("notice"));
        assert!(Unusable::UnsupportedVersion(10).to_string().contains("update the older one"));
        let spot: serde_json::Value = serde_json::from_str(&Message::Notice(notice()).to_body()).unwrap();
        assert_eq!(spot["version"], 3);
    }

    /// `link_report` came with version 5: a version-4 reader refuses it by
    /// its version ("update the older one"); the measured bandwidth is
    /// bytes over time, and a failed probe has none; an oversized error is cut.
    #[test]
    fn link_report_is_version_5_and_bounded() {
        let v: serde_json::Value = serde_json::from_str(&Message::LinkReport(link_report()).to_body()).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(5), Some("link_report")));
        assert!(v.get("error").is_none(), "{v}");
        assert_eq!(link_report().gbps(), Some(0.4));
        let failed = LinkReport { error: Some("x".repeat(1000)), bytes: 0, millis: 0, ..link_report() };
        assert_eq!(failed.gbps(), None);
        let MasterInbound::LinkReport(back) = parse_master_queue(&Message::LinkReport(failed).to_body()).unwrap()
        else {
            panic!("not a link report")
        };
        assert!(back.error.as_ref().is_some_and(|e| e.len() <= LINK_REPORT_ERROR_BYTES && e.ends_with('…')));
        assert_eq!(LinkReport { millis: 0, ..link_report() }.gbps(), None);
    }

    fn gpu_report() -> crate::gpu::GpuReport {
        crate::gpu::GpuReport {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.5".into(),
            instance_type: "p5.48xlarge".into(),
            checks: vec![crate::gpu::CheckResult {
                check: "count".into(),
                gpu: None,
                value: "8 GPUs".into(),
                expected: "8".into(),
                verdict: crate::gpu::Verdict::Pass,
                millis: 4,
            }],
            timed_out: false,
            millis: 30_000,
        }
    }

    fn part() -> ManifestPart {
        crate::parts::split(&manifest(), 17).unwrap().remove(0)
    }

    #[test]
    fn messages_round_trip_with_version_and_kind() {
        for m in [
            Message::Register(register()),
            Message::ManifestPart(part()),
            Message::Applied(Applied { instance_id: "i-1".into(), generation: 4 }),
            Message::Leave(Leave { instance_id: "i-1".into(), reason: "shutdown".into() }),
            Message::Notice(notice()),
            Message::BootFailure(boot_failure()),
            Message::LinkReport(link_report()),
            Message::Activity(Activity { instance_id: "i-1".into(), job_ranks: 1, ..Activity::default() }),
            Message::GpuReport(gpu_report()),
            Message::Notice(Interruption {
                notice: crate::interruption::NoticeKind::GpuFault,
                action: None,
                deadline_unix: None,
                detail: Some("xid on GPU 3: XID 79 (GPU has fallen off the bus)".into()),
                ..notice()
            }),
            Message::Straggler(crate::straggler::Straggler {
                alias: "deeplearning-worker3".into(),
                instance_id: "i-3".into(),
                rank: 2,
                local_rank: 0,
                percent_slower: 41,
                steps: 200,
                named_unix_ms: 5,
                after_checkpoint: false,
            }),
        ] {
            let body = m.to_body();
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let version = match &m {
                Message::Notice(n) if n.notice == crate::interruption::NoticeKind::GpuFault => 12,
                Message::GpuReport(_) => 12,
                Message::Straggler(_) => 13,
                Message::Notice(_) => 3,
                Message::BootFailure(_) => 4,
                Message::LinkReport(_) => 5,
                Message::ManifestPart(_) => 8,
                Message::Activity(_) => 9,
                _ => 2,
            };
            assert_eq!(v["version"], version);
            assert!(v["kind"].is_string());
            match &m {
                Message::ManifestPart(expected) => assert_eq!(&parse_worker_queue(&body).unwrap(), expected),
                Message::Register(r) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Register(r.clone()))
                }
                Message::Applied(a) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Applied(a.clone()))
                }
                Message::Leave(l) => assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Leave(l.clone())),
                Message::Notice(n) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Notice(n.clone()));
                    assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("notice"));
                }
                Message::BootFailure(f) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::BootFailure(f.clone()));
                    assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("boot_failure"));
                }
                Message::LinkReport(r) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::LinkReport(r.clone()));
                    assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("link_report"));
                }
                Message::Activity(a) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Activity(a.clone()));
                }
                Message::GpuReport(r) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::GpuReport(r.clone()));
                    assert_eq!(parse_worker_queue(&body).unwrap_err(), Unusable::WrongQueue("gpu_report"));
                }
                Message::Straggler(s) => {
                    assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Straggler(s.clone()));
                }
            }
        }
    }

    #[test]
    fn auto_scaling_notifications_are_recognised() {
        let action = r#"{"Origin":"AutoScalingGroup","Destination":"EC2","LifecycleHookName":"worker-terminating",
            "AccountId":"123456789012","RequestId":"4a1b","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING",
            "AutoScalingGroupName":"demo-WorkerGroup-1","Service":"AWS Auto Scaling","Time":"2026-11-22T05:00:00.000Z",
            "EC2InstanceId":"i-0123456789abcdef0","LifecycleActionToken":"71514b9d-6a40-4b26-8523-05e7eexample"}"#;
        match parse_master_queue(action).unwrap() {
            MasterInbound::Lifecycle(a) => {
                assert!(a.is_terminating());
                assert_eq!(a.ec2_instance_id, "i-0123456789abcdef0");
            }
            other => panic!("{other:?}"),
        }
        let test = r#"{"AccountId":"123456789012","RequestId":"x","AutoScalingGroupARN":"arn:aws:autoscaling:...",
            "AutoScalingGroupName":"demo","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2026-11-22T05:00:00Z"}"#;
        assert_eq!(parse_master_queue(test).unwrap(), MasterInbound::LifecycleTest);
    }

    #[test]
    fn unusable_bodies_are_classified_not_panicked_on() {
        let cases: Vec<(String, &str)> = vec![
            ("not json".into(), "malformed"),
            ("[1,2]".into(), "not a JSON object"),
            (r#"{"kind":"register"}"#.into(), "no `version`"),
            (r#"{"version":14,"kind":"register"}"#.into(), "version 14"),
            (r#"{"version":2,"kind":"dance"}"#.into(), "unknown message kind \"dance\""),
            (r#"{"version":3,"kind":"dance"}"#.into(), "same agent release"),
            (r#"{"version":2,"kind":7}"#.into(), "`kind` is not a string"),
            (r#"{"version":14,"kind":"notice"}"#.into(), "versions 2 to 13"),
            (r#"{"version":9,"kind":"activity","instance_id":"i-1"}"#.into(), "malformed"),
            (r#"{"version":5,"kind":"link_report","instance_id":"i-1"}"#.into(), "malformed"),
            (r#"{"version":4,"kind":"boot_failure","instance_id":"i-1"}"#.into(), "malformed"),
            (r#"{"version":3,"kind":"notice","instance_id":"i-1"}"#.into(), "malformed"),
            (r#"{"version":2,"kind":"register","instance_id":"i-1"}"#.into(), "malformed"),
            (r#"{"hello":"world"}"#.into(), "neither a message of ours"),
            ("x".repeat(MAX_BODY_BYTES + 1), "over the"),
        ];
        for (body, needle) in cases {
            let e = parse_master_queue(&body).unwrap_err();
            assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
        }
        let part_body = Message::ManifestPart(part()).to_body();
        assert_eq!(parse_master_queue(&part_body).unwrap_err(), Unusable::WrongQueue("manifest_part"));
        let register_body = Message::Register(register()).to_body();
        assert_eq!(parse_worker_queue(&register_body).unwrap_err(), Unusable::WrongQueue("register"));
    }

    /// A version-1 agent's whole manifest (and any version-1 message) is
    /// refused by its version, with what to do, before its shape is read;
    /// and a version-1 reader sees this crate's bodies as version 2.
    #[test]
    fn the_previous_version_is_refused_clearly_both_ways() {
        let mut old = serde_json::to_value(manifest()).unwrap();
        old["version"] = 1.into();
        old["kind"] = "manifest".into();
        let e = parse_worker_queue(&old.to_string()).unwrap_err();
        assert_eq!(e, Unusable::UnsupportedVersion(1));
        assert!(e.to_string().contains("same agent release"), "{e}");
        let mut old_register = serde_json::to_value(Message::Register(register())).unwrap();
        old_register["version"] = 1.into();
        assert_eq!(parse_master_queue(&old_register.to_string()).unwrap_err(), Unusable::UnsupportedVersion(1));
        // What a version-1 reader checks first: the number.
        let v: serde_json::Value = serde_json::from_str(&Message::ManifestPart(part()).to_body()).unwrap();
        assert_eq!(v["version"], 8);
        assert_eq!(v["kind"], "manifest_part");
    }

    /// `notice` came with version 3: it is written as version 3, so a
    /// reader of the version-2 release (which refuses every version but 2
    /// before it looks at the kind) meets "message version 3 is not
    /// supported ... update the older one", not a malformed body; every
    /// other kind is still written as version 2, so old and new agents
    /// otherwise work together; and this build reads both.
    #[test]
    fn notice_is_refused_by_version_by_the_previous_release_and_the_rest_is_unchanged() {
        let body = Message::Notice(notice()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(3), Some("notice")));
        assert_eq!(v["notice"], "instance_action");
        assert_eq!(v["action"], "terminate");
        assert_eq!(v["deadline_unix"], 1_795_636_800_u64);
        for m in [Message::Register(register()), Message::Applied(Applied { instance_id: "i-1".into(), generation: 4 })]
        {
            let v: serde_json::Value = serde_json::from_str(&m.to_body()).unwrap();
            assert_eq!(v["version"], 2, "{m:?}");
        }
        // A version-2 body of any kind, a notice included, is still read.
        let mut as_two = v.clone();
        as_two["version"] = 2.into();
        assert_eq!(parse_master_queue(&as_two.to_string()).unwrap(), MasterInbound::Notice(notice()));
        // A rebalance recommendation carries no action and no deadline.
        let r = crate::interruption::from_rebalance("i-2", r#"{"noticeTime":"2026-11-25T19:58:00Z"}"#).unwrap();
        let body = Message::Notice(r.clone()).to_body();
        assert!(!body.contains("deadline_unix") && !body.contains("action"), "{body}");
        assert_eq!(parse_master_queue(&body).unwrap(), MasterInbound::Notice(r));
    }

    /// `boot_failure` came with version 4: a reader of the version-3 release
    /// refuses it by its version, and a notice is still written as version 3.
    #[test]
    fn boot_failure_is_version_4_and_notice_stays_3() {
        let v: serde_json::Value = serde_json::from_str(&Message::BootFailure(boot_failure()).to_body()).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(4), Some("boot_failure")));
        assert_eq!(v["last_lines"], serde_json::json!(["step 1", "step 2: no such file"]));
        let v: serde_json::Value = serde_json::from_str(&Message::Notice(notice()).to_body()).unwrap();
        assert_eq!(v["version"], 3);
    }

    /// A `register` with the node's times is version 6 (an older master
    /// refuses it by its version); one without them stays version 2.
    #[test]
    fn a_register_with_times_is_version_6() {
        let with = Register { booted_unix_ms: Some(1_000), agent_started_unix_ms: Some(2_000), ..register() };
        let body = Message::Register(with.clone()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["booted_unix_ms"].as_u64()), (Some(6), Some(1_000)));
        assert_eq!(parse_master_queue(&body), Ok(MasterInbound::Register(with)));
        let v: serde_json::Value = serde_json::from_str(&Message::Register(register()).to_body()).unwrap();
        assert_eq!(v["version"], 2);
        assert!(v.get("booted_unix_ms").is_none(), "{v}");
    }

    /// A `register` with the instance's launch time is version 7, and a
    /// reader of version 6 would refuse it by its version, not misparse it.
    #[test]
    fn a_register_with_the_launch_time_is_version_7() {
        let with = Register { launched_unix_ms: Some(500), booted_unix_ms: Some(1_000), ..register() };
        let body = Message::Register(with.clone()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["launched_unix_ms"].as_u64()), (Some(7), Some(500)));
        assert_eq!(parse_master_queue(&body), Ok(MasterInbound::Register(with)));
        const { assert!(REGISTER_LAUNCHED_VERSION > REGISTER_TIMES_VERSION) };
    }

    /// A `manifest_part` is version 8, its nodes deflated: a reader of
    /// version 7 refuses it by its version ("update the older one"), not as
    /// malformed; this build reads it, and still reads a version-2 part
    /// with plain `nodes`; a part with both, neither, or `nodes_deflated`
    /// that is not base64, does not inflate, inflates past the bound or is
    /// not a node list is malformed, with the reason.
    #[test]
    fn a_manifest_part_is_version_8_with_its_nodes_deflated_and_version_2_is_still_read() {
        let body = Message::ManifestPart(part()).to_body();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((v["version"].as_u64(), v["kind"].as_str()), (Some(8), Some("manifest_part")));
        assert!(v.get("nodes").is_none() && v["nodes_deflated"].is_string(), "{v}");
        assert_eq!(parse_worker_queue(&body).unwrap(), part());
        // What a version-7 reader says: refused by the number.
        let e = Unusable::UnsupportedVersion(8).to_string();
        assert!(e.contains("update the older one"), "{e}");

        let mut plain = v.clone();
        let fields = plain.as_object_mut().unwrap();
        fields.remove("nodes_deflated");
        fields.insert("nodes".into(), serde_json::to_value(&part().nodes).unwrap());
        fields.insert("version".into(), 2.into());
        assert_eq!(parse_worker_queue(&plain.to_string()).unwrap(), part());

        use base64::Engine;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let deflated = crate::parts::deflate;
        let with = |edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
            let mut w = v.clone();
            edit(w.as_object_mut().unwrap());
            w.to_string()
        };
        let bomb = deflated(&vec![b' '; crate::parts::MAX_INFLATED_BYTES + 10]);
        let cases: Vec<(String, &str)> = vec![
            (with(&|o| drop(o.insert("nodes".into(), serde_json::json!([])))), "both"),
            (with(&|o| drop(o.remove("nodes_deflated"))), "neither"),
            (with(&|o| drop(o.insert("nodes_deflated".into(), "%%%".into()))), "not base64"),
            (with(&|o| drop(o.insert("nodes_deflated".into(), b64(b"\xff\xff\xff\xff").into()))), "does not inflate"),
            (with(&|o| drop(o.insert("nodes_deflated".into(), bomb.clone().into()))), "inflates to more than"),
            (with(&|o| drop(o.insert("nodes_deflated".into(), deflated(b"{\"a\":1}").into()))), "not a list of nodes"),
        ];
        for (body, needle) in cases {
            assert!(body.len() <= MAX_BODY_BYTES, "{needle}: {} bytes", body.len());
            let e = parse_worker_queue(&body).unwrap_err();
            assert!(matches!(e, Unusable::Malformed(_)) && e.to_string().contains(needle), "{needle:?} not in {e}");
        }
    }

    /// The output is cut to the last lines and bytes, never inside a
    /// character, with "…" where a line was cut; a sender that ignores the
    /// bounds is cut by the reader.
    #[test]
    fn boot_failure_output_is_bounded() {
        let output: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        let f = BootFailure::new("i-1", "10.0.0.7", "x", output.as_bytes());
        assert_eq!(f.last_lines.len(), BOOT_FAILURE_LINES);
        assert_eq!(f.last_lines.first().map(String::as_str), Some("line 31"));
        assert_eq!(f.last_lines.last().map(String::as_str), Some("line 50"));

        let wide = "é".repeat(3_000);
        let f = BootFailure::new("i-1", "10.0.0.7", &wide, format!("{wide}\nlast").as_bytes());
        assert!(f.what.len() <= BOOT_FAILURE_WHAT_BYTES && f.what.ends_with('…'), "{}", f.what);
        let bytes: usize = f.last_lines.iter().map(String::len).sum();
        assert!(bytes <= BOOT_FAILURE_BYTES, "{bytes}");
        assert_eq!(f.last_lines.last().map(String::as_str), Some("last"));
        let f = BootFailure::new("i-1", "10.0.0.7", "x", wide.as_bytes());
        assert!(f.last_lines[0].starts_with('…') && f.last_lines[0].len() <= BOOT_FAILURE_BYTES, "{:?}", f.last_lines);
        // Invalid UTF-8 is replaced, not refused.
        let f = BootFailure::new("i-1", "10.0.0.7", "x", b"ok\n\xff\xfe bad\n");
        assert_eq!(f.last_lines, vec!["ok".to_string(), "\u{fffd}\u{fffd} bad".to_string()]);

        let mut big = boot_failure();
        big.last_lines = vec!["y".repeat(50_000); 3];
        let body = Message::BootFailure(big).to_body();
        let MasterInbound::BootFailure(read) = parse_master_queue(&body).unwrap() else { panic!() };
        assert_eq!(read.last_lines.len(), 1);
        assert!(read.last_lines[0].len() <= BOOT_FAILURE_BYTES);
        assert_eq!(shorten_bytes("aéb", 3), "…");
        assert_eq!(shorten_bytes("abcdef", 5), "ab…");
    }

    #[test]
    fn aliases() {
        assert_eq!(worker_alias(1), "deeplearning-worker1");
        assert_eq!(worker_alias(12), "deeplearning-worker12");
    }
}
