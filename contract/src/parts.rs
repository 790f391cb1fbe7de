//! How a manifest travels: split into parts that each fit one SQS message,
//! and put back together on every node.
//!
//! # Why parts
//!
//! A manifest lists every node, about 270 bytes a node in compact JSON
//! (instance id, IP, host name, GPUs, SSH host key): 270 KB at 1,000 nodes,
//! 1.1 MB at 4,000. SQS takes a body of at most 1 MiB (raised from 256 KiB
//! in August 2025; a queue's `MaximumMessageSize` may still be set lower,
//! and queues created before the change kept 256 KiB), and this contract
//! caps every body at [`MAX_BODY_BYTES`] (256 KiB), which any standard queue
//! accepts. So the master sends each generation as `K` parts
//! ([`split`]); a part is a self-contained message: the manifest's header
//! (cluster, generation, master, cluster key) and a contiguous run of its
//! nodes, numbered `part` of `parts`. A node holds the parts it has seen
//! ([`Assembly`]) and applies the generation once it has all of them.
//!
//! # On the wire
//!
//! A part's nodes travel deflated: the JSON array of its nodes, raw
//! deflate (RFC 1951, flate2's default level), standard base64, in the
//! field `nodes_deflated` of a version-8 message
//! ([`crate::message::MANIFEST_DEFLATED_VERSION`]). A node entry's field
//! names, alias, host-name pattern and key prefix repeat from node to
//! node; what does not compress is the host key's 32 random bytes and the
//! instance id. Measured (`a_1000_and_a_4000_node_manifest_travel_in_parts_within_the_cap`,
//! ap-southeast-2 host names, ed25519 keys): 1,000 nodes are 274,116 bytes
//! of JSON and one body of 81,733 bytes (it was 2 parts, 274 KB, sent
//! plain); 4,000 nodes are 2 parts of about 163 KB (5 parts before).
//! Why it matters beyond the cap: every node receives every part, and SQS
//! bills each 64 KiB of a message as one request; the local AWS's CPU per
//! receive followed the bytes (4.6 ms for 255 KB, 2.6 ms for 109 KB, in
//! the formation benchmark's moto). A part that does not inflate, or
//! inflates past [`MAX_INFLATED_BYTES`], is malformed (a deflate bomb
//! costs at most that much); [`split`] keeps every part within both
//! bounds. A version-2 part with plain `nodes` is still read.
//!
//! Sizes: a part holds up to 256 KiB on the wire and 1 MiB of JSON, so
//! about 3,000 nodes with ed25519 host keys; 16,000 nodes are 6 parts
//! (bound by the JSON). Every part of the
//! current generation stays visible in the worker queue until the master
//! retires it, and one `ReceiveMessage` returns up to 10 messages, so up to
//! about 30,000 nodes a node gets a whole generation with the same one
//! receive. Beyond 10 parts it takes more receives; nothing else
//! changes. Each node entry is bounded ([`check_register`]: host names 253
//! bytes, host keys 8 KiB, ...), so any single node fits in a part.
//!
//! # The guarantees, and what breaks them
//!
//! - **Duplicates**: a part seen again is ignored; a complete generation is
//!   applied once ([`crate::message`]'s rules, in the agent's `NodeState`).
//! - **Reordering**: parts may arrive in any order and over several
//!   receives; parts of several generations may be in flight at once. Only
//!   complete generations are passed on, and a node never applies a
//!   generation older than the one it has.
//! - **Losses**: a part that one receive does not return stays visible and
//!   comes with a later one. A part the master could not send at all is sent
//!   again (the master re-publishes the whole generation after a failed
//!   send, and for a node that registers again without having applied it
//!   once the generation was retired without its acknowledgement; while
//!   the parts are still in the worker queue a copy would reach no one
//!   sooner and would add the whole generation to every receive).
//!   A node that never completes a generation does not acknowledge it, so
//!   the master sees it lagging and retires the generation at its ack
//!   deadline all the same, as before.
//! - **Two publications of one generation**: each publication carries its
//!   own `publication` id (the master's clock when it made the generation;
//!   a re-send of the same generation keeps it), and parts of different
//!   publications are never combined: a node assembles one or the other
//!   whole.
//! - **A master that crashes between sending and saving**: the master saves
//!   its state after carrying out a turn's effects, so a crash after it
//!   sent generation N and before the save restarts it from a state that
//!   does not hold N, and the messages of that turn come back, maybe after
//!   others or judged otherwise. Numbering another manifest N then would
//!   break "files identical": a node that applied the first N ignores the
//!   second (generations only move forward). So the agent writes each new
//!   generation number to disk (`/var/lib/deeplearning/master-sent-generation`,
//!   fsynced) before it sends any part of it, and a restarted master numbers
//!   its next generation above that record; when it had formed, it
//!   publishes its members at once as that next generation (after retiring
//!   N), as it cannot know what N listed. A node that applied N applies
//!   N + 1 like any newer generation. What this costs: a generation number
//!   skipped, one more publication after such a restart, and host-log
//!   lines already written for N may not match the members (the log is a
//!   record, not the contract). The agent's `cluster::simulation` crashes
//!   the master at random points of its turns and checks both properties
//!   (one node list a generation number; every node ends with the same
//!   files).
//! - **Malformed or inconsistent parts** (index out of range, more than
//!   [`MAX_PARTS`] parts, parts of one publication that disagree on the
//!   header or on the part count, a node count that does not add up, nodes
//!   out of index order): the whole publication is dropped with the reason
//!   ([`PartError`]), and the next delivery starts it afresh.
//! - **Memory**: a node keeps parts of at most [`MAX_PUBLICATIONS`]
//!   publications, newest generations first; [`MAX_PARTS`] bounds each,
//!   and [`MAX_INFLATED_BYTES`] each part's nodes.
//! - **Versions**: parts are messages of version 8 (kind `manifest_part`,
//!   nodes deflated); an agent that reads up to version 7 (plain `nodes`)
//!   refuses them with "message version 8 is not supported ... update the
//!   older one", and version 1 (one whole `manifest` a generation) is
//!   refused the same way: every node of a cluster runs the same agent
//!   release. This build reads version-2 parts too.

//!
//! # To 4,000 nodes
//!
//! What limits a cluster on the way to 4,000 nodes, in the order they bind
//! for a stack `synth` builds today:
//!
//! 1. **The blueprint**: `workers.max` (and the `MaxWorkers` parameter) is
//!    at most 1,000 (synth's `MAX_WORKERS`): a product limit, set where the
//!    formation benchmark has been run. Raising it is the first step past
//!    1,000.
//! 2. **EC2 capacity and quotas, before Auto Scaling**: an Auto Scaling
//!    group has no documented instance ceiling of its own; its launches
//!    are bounded by the account's On-Demand (or Spot) vCPU quota per
//!    instance family (4,000 `p4d.24xlarge` are 384,000 vCPUs) and by the
//!    capacity of the zone (one zone with a placement group or EFA)
//!    (<https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html>,
//!    <https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-quotas.html>).
//! 3. **IP addresses**: the VPC is split into four equal subnets, two of
//!    them private for the workers; AWS keeps 5 addresses of each
//!    (<https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html>).
//!    The default /16 gives /18 subnets (16,379 addresses each: 32,758 for
//!    workers in two zones, 16,379 in one); a /20 VPC gives 1,019 per
//!    subnet, a /24 only 59. Every network interface with an IP takes one:
//!    instances with several EFA interfaces of type `efa` take one address
//!    each (EFA-only interfaces take none), so a single-zone EFA cluster of
//!    `p5.48xlarge` can run out of a /18 well before 4,000 nodes.
//! 4. **The master's work per generation**: it reads one `applied` a node,
//!    10 a receive, up to 32 receives at once in proportion to the backlog
//!    (doubling while every receive comes back full), and saves its state
//!    (about 600 bytes a node) once per turn: at 4,000 nodes, with 4
//!    receives a turn, about 100 turns writing 2.4 MB each, so a formation
//!    writes O(N²) bytes (about 240 MB at 4,000, 16 MB at 1,000); reading in
//!    proportion to the backlog cuts the turns, and these bytes, by up to 8
//!    while acknowledgements queue up. This is the first
//!    limit of the protocol itself; the fix, when needed, is to keep
//!    acknowledgements out of the saved state (a restarted master can ask
//!    again) or to save them as a log. Two more costs grow with the
//!    cluster: the host log gets one line a node at formation (written
//!    with one sync for the whole generation, not one a line: on EFS each
//!    sync is a round trip), and removals are not batched as
//!    joins are ([`crate::message`]'s `leave` and a terminating lifecycle
//!    action each make a generation at once), so a scale-in of `k` nodes at
//!    once is `k` generations, each read whole by every node (item 5).
//! 5. **Bytes delivered**: every node reads every part of every
//!    generation, N × about 82 bytes (deflated, base64) × N: 82 MB a
//!    formation at 1,000 nodes, 1.3 GB at 4,000, and again for every later
//!    generation (a join at 4,000 nodes is another 1.3 GB; 4.4 GB when
//!    parts were plain JSON). SQS bills each 64 KiB of a message as
//!    one request, so a receive of a 4,000-node generation is 6 billed
//!    requests (18 plain; about 24,000 for the whole cluster, a cent or
//!    so). Sending
//!    only the changed nodes (deltas against the generation a node holds,
//!    with these parts as the full resync) would make a join O(N) instead
//!    of O(N²); not needed at these sizes.
//! 6. **SQS itself** does not bind: a standard queue takes a "nearly
//!    unlimited" number of calls per second per action, at most 120,000
//!    messages in flight (parts are received with visibility 0, so they
//!    are never in flight), and bodies up to 1 MiB where this contract
//!    sends 256 KiB
//!    (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html>).
//!    A generation of 4,000 nodes is 2 parts: one receive.
//! 7. **EFS**: one mount target per zone, and up to 25,000 NFS client
//!    connections per file system
//!    (<https://docs.aws.amazon.com/efs/latest/ug/limits.html>).
//!
//! What a worker pays does not grow with the cluster: register, one
//! receive for the parts (up to 10 parts, about 30,000 nodes), `applied`,
//! and after a pause that grows with the cluster (1 to 8 s, the agent's
//! `NodeState::applied_backoff_ms`) the receive that finds the generation
//! retired and becomes its idle long poll: 4 calls, 5 when the master
//! retires late; and one more long poll for every 20 s it waits for the
//! other nodes (20 s is the longest wait SQS allows, and a node must be
//! polling to apply a generation within a second of its publication), and
//! one more `register` after 30 s of waiting and every minute after: a
//! worker that waits `w` seconds for the formation pays `4 + floor(w / 20)`
//! calls, plus `1 + floor((w - 30) / 60)` when `w` is over 30. In the
//! formation benchmark (workers started over 10 s) that is 4 at the median
//! at 64, 256 and 1,000 nodes, and 6 for the 1,000-node workers that
//! waited longest.
//!
//! What the master pays per formation of `N` nodes: it reads two messages
//! a node (`register`, `applied`) with receives of up to 10 and deletes
//! what each receive returned with one `DeleteMessageBatch`, so at least
//! `2 × 2N / 10 = 0.4 N` calls and at most `4 N` (when messages trickle in
//! one a receive), plus a constant: the group's size, the signal, the
//! parts, the retirement, its own `register` and `applied`, and its log
//! shipper's uploads (about 20 in all). Measured (formation benchmark,
//! 2026-11-26): 57 calls at 64 nodes (0.9 a node), 158 at 256 (0.6), 516 at
//! 1,000 (0.5): the receives fill as the cluster grows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::message::{MANIFEST_DEFLATED_VERSION, MAX_BODY_BYTES, Manifest, ManifestNode, Register};

/// The most parts one generation may have: 64 parts of 256 KiB (16 MiB)
/// hold far more than the largest cluster Auto Scaling can give one group.
pub const MAX_PARTS: u32 = 64;

/// How many publications a node keeps parts of at once.
pub const MAX_PUBLICATIONS: usize = 4;

/// The longest host name a register may carry (DNS: 253 characters).
pub const MAX_HOSTNAME_BYTES: usize = 253;

/// The longest SSH host key line a register may carry. An RSA 16384-bit
/// key is under 3 KiB in OpenSSH format; ed25519, the agent's first choice,
/// is 80 bytes.
pub const MAX_HOST_KEY_BYTES: usize = 8 * 1024;

/// The longest instance id, IP, instance type, Availability Zone or boot id.
pub const MAX_SHORT_FIELD_BYTES: usize = 64;

/// One part of a manifest; on the wire (message version
/// [`crate::message::MANIFEST_DEFLATED_VERSION`]) `{"version": 8, "kind":
/// "manifest_part", ...header, "nodes_deflated": "<base64>"}`, its nodes as
/// a JSON array, raw deflate, standard base64 (see the module docs, "On the
/// wire"). A version-2 part with a plain `nodes` array is read too.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "PartWire")]
pub struct ManifestPart {
    /// The cluster name.
    pub cluster: String,
    /// The generation this is a part of.
    pub generation: u64,
    /// Which publication of that generation (see the module docs).
    pub publication: u64,
    /// 0-based.
    pub part: u32,
    /// How many parts the publication has (1..=[`MAX_PARTS`]).
    pub parts: u32,
    /// Nodes in the whole manifest.
    pub node_count: u32,
    /// The master's instance id.
    pub master: String,
    /// The cluster's SSH public key.
    pub cluster_public_key: String,
    /// This part's run of the manifest's nodes, in manifest order.
    pub nodes: Vec<ManifestNode>,
}

/// A part as it travels: the header, and the nodes either deflated
/// (written) or plain (version 2, read only).
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct PartWire {
    cluster: String,
    generation: u64,
    publication: u64,
    part: u32,
    parts: u32,
    node_count: u32,
    master: String,
    cluster_public_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nodes: Option<Vec<ManifestNode>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nodes_deflated: Option<String>,
}

impl TryFrom<PartWire> for ManifestPart {
    type Error = String;

    fn try_from(w: PartWire) -> Result<Self, String> {
        let nodes = match (w.nodes, w.nodes_deflated) {
            (Some(nodes), None) => nodes,
            (None, Some(z)) => inflate_nodes(&z)?,
            (Some(_), Some(_)) => return Err("a manifest part has both `nodes` and `nodes_deflated`".into()),
            (None, None) => return Err("a manifest part has neither `nodes` nor `nodes_deflated`".into()),
        };
        Ok(ManifestPart {
            cluster: w.cluster,
            generation: w.generation,
            publication: w.publication,
            part: w.part,
            parts: w.parts,
            node_count: w.node_count,
            master: w.master,
            cluster_public_key: w.cluster_public_key,
            nodes,
        })
    }
}

impl Serialize for ManifestPart {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.wire(deflate_nodes(&self.nodes)).serialize(s)
    }
}

impl ManifestPart {
    /// This part's header on the wire with `nodes_deflated` as its nodes.
    fn wire(&self, nodes_deflated: String) -> PartWire {
        PartWire {
            cluster: self.cluster.clone(),
            generation: self.generation,
            publication: self.publication,
            part: self.part,
            parts: self.parts,
            node_count: self.node_count,
            master: self.master.clone(),
            cluster_public_key: self.cluster_public_key.clone(),
            nodes: None,
            nodes_deflated: Some(nodes_deflated),
        }
    }
}

/// The most bytes a part's nodes may take as JSON, before deflating and
/// after inflating: four times a body. [`split`] keeps every part within
/// it, and a part that inflates to more is refused (a deflate bomb costs a
/// node at most this much, [`MAX_PARTS`] × [`MAX_PUBLICATIONS`] times).
pub const MAX_INFLATED_BYTES: usize = 4 * MAX_BODY_BYTES;

/// `nodes` as a JSON array, deflated, base64.
fn deflate_nodes(nodes: &[ManifestNode]) -> String {
    deflate(&serde_json::to_vec(nodes).unwrap_or_default())
}

/// Raw deflate, standard base64.
pub(crate) fn deflate(json: &[u8]) -> String {
    use base64::Engine;
    use std::io::Write;
    let mut z = flate2::write::DeflateEncoder::new(Vec::with_capacity(json.len() / 2), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = z.write_all(json);
    let bytes = z.finish().unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The nodes of a `nodes_deflated` field; at most [`MAX_INFLATED_BYTES`]
/// are inflated.
fn inflate_nodes(z: &str) -> Result<Vec<ManifestNode>, String> {
    use base64::Engine;
    use std::io::Read;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(z)
        .map_err(|e| format!("`nodes_deflated` is not base64: {e}"))?;
    let mut json = Vec::new();
    flate2::read::DeflateDecoder::new(bytes.as_slice())
        .take(MAX_INFLATED_BYTES as u64 + 1)
        .read_to_end(&mut json)
        .map_err(|e| format!("`nodes_deflated` does not inflate: {e}"))?;
    if json.len() > MAX_INFLATED_BYTES {
        return Err(format!("`nodes_deflated` inflates to more than {MAX_INFLATED_BYTES} bytes"));
    }
    serde_json::from_slice(&json).map_err(|e| format!("`nodes_deflated` is not a list of nodes: {e}"))
}

/// Splitting a manifest failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// One node's entry (with the header) is over the body limit. The master
    /// refuses such registrations ([`check_register`]), so this is a bug.
    #[error("node {instance_id} needs {bytes} bytes in a manifest part, over the {limit}-byte limit of a message")]
    NodeTooLarge {
        /// The node.
        instance_id: String,
        /// Its part's size with it alone.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// More than [`MAX_PARTS`] parts would be needed.
    #[error("the manifest needs {parts} parts, more than the {MAX_PARTS} a generation may have")]
    TooManyParts {
        /// How many.
        parts: usize,
    },
}

/// A part could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartError {
    /// Its numbering is impossible.
    #[error("part {part} of {parts} of generation {generation}: {reason}")]
    Numbering {
        /// The generation.
        generation: u64,
        /// Its index.
        part: u32,
        /// Its count.
        parts: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// Parts of one publication disagree, or do not add up to a manifest;
    /// the publication's parts were dropped.
    #[error("the parts of generation {generation} (publication {publication}) do not fit together: {reason}; dropped")]
    Inconsistent {
        /// The generation.
        generation: u64,
        /// The publication.
        publication: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Whether a registration's fields fit the bounds above, so that its node
/// fits in a manifest part whatever else the manifest holds.
pub fn check_register(r: &Register) -> Result<(), String> {
    let short = [
        ("instance_id", &r.instance_id),
        ("private_ip", &r.private_ip),
        ("instance_type", &r.instance_type),
        ("availability_zone", &r.availability_zone),
        ("boot_id", &r.boot_id),
    ];
    for (field, value) in short {
        if value.len() > MAX_SHORT_FIELD_BYTES {
            return Err(format!("its {field} is {} bytes long (at most {MAX_SHORT_FIELD_BYTES})", value.len()));
        }
    }
    if r.hostname.len() > MAX_HOSTNAME_BYTES {
        return Err(format!("its hostname is {} bytes long (at most {MAX_HOSTNAME_BYTES})", r.hostname.len()));
    }
    if r.ssh_host_key.len() > MAX_HOST_KEY_BYTES {
        return Err(format!("its SSH host key is {} bytes long (at most {MAX_HOST_KEY_BYTES})", r.ssh_host_key.len()));
    }
    Ok(())
}

/// The parts of `manifest` as publication `publication`: as few parts as
/// keep every body within [`MAX_BODY_BYTES`], nodes in manifest order. A
/// manifest with no nodes is one part.
pub fn split(manifest: &Manifest, publication: u64) -> Result<Vec<ManifestPart>, SplitError> {
    split_within(manifest, publication, MAX_BODY_BYTES)
}

/// The message bodies of [`split`]'s parts, in part order, each part's
/// nodes deflated once (the same bytes as `Message::ManifestPart(part).to_body()`,
/// which deflates again): what the master sends.
pub fn bodies(manifest: &Manifest, publication: u64) -> Result<Vec<String>, SplitError> {
    let runs = runs(manifest, publication, MAX_BODY_BYTES)?;
    let parts = runs.len() as u32;
    Ok(runs
        .into_iter()
        .enumerate()
        .map(|(i, run)| wire_body(&header(manifest, publication, i as u32, parts, Vec::new()), run.deflated))
        .collect())
}

/// [`split`] with bodies of at most `max_body` bytes (at most
/// [`MAX_BODY_BYTES`]); tests use a small limit to get many parts out of a
/// small manifest.
pub fn split_within(manifest: &Manifest, publication: u64, max_body: usize) -> Result<Vec<ManifestPart>, SplitError> {
    let runs = runs(manifest, publication, max_body)?;
    let parts = runs.len() as u32;
    Ok(runs
        .into_iter()
        .enumerate()
        .map(|(i, run)| header(manifest, publication, i as u32, parts, manifest.nodes[run.range].to_vec()))
        .collect())
}

/// Part `part` of `parts` of `manifest`'s publication `publication`, with `nodes`.
fn header(manifest: &Manifest, publication: u64, part: u32, parts: u32, nodes: Vec<ManifestNode>) -> ManifestPart {
    ManifestPart {
        cluster: manifest.cluster.clone(),
        generation: manifest.generation,
        publication,
        part,
        parts,
        node_count: u32::try_from(manifest.nodes.len()).unwrap_or(u32::MAX),
        master: manifest.master.clone(),
        cluster_public_key: manifest.cluster_public_key.clone(),
        nodes,
    }
}

/// The message body of `part`'s header with `nodes_deflated` as its nodes:
/// what `Message::ManifestPart(part).to_body()` writes.
fn wire_body(part: &ManifestPart, nodes_deflated: String) -> String {
    #[derive(Serialize)]
    struct Body {
        version: u32,
        kind: &'static str,
        #[serde(flatten)]
        part: PartWire,
    }
    let body = Body { version: MANIFEST_DEFLATED_VERSION, kind: "manifest_part", part: part.wire(nodes_deflated) };
    // Strings and numbers always serialize.
    serde_json::to_string(&body).unwrap_or_default()
}

/// One part's run of a manifest's nodes, and those nodes deflated.
struct Run {
    range: std::ops::Range<usize>,
    deflated: String,
}

/// How [`split_within`] cuts `manifest`: the whole node list is one part
/// when it fits; otherwise it is cut into as many runs of equal length as
/// its deflated size says it needs (with a margin), and a run that still
/// does not fit (deflate does not divide evenly) is cut in two, until every
/// run fits. Each part's body is within `max_body` and its nodes within
/// [`MAX_INFLATED_BYTES`] as JSON.
fn runs(manifest: &Manifest, publication: u64, max_body: usize) -> Result<Vec<Run>, SplitError> {
    let max_body = max_body.min(MAX_BODY_BYTES);
    // The body of a part with no nodes, with the widest part numbers and an
    // empty `nodes_deflated`: the base64 adds its length, exactly (base64
    // needs no JSON escapes).
    let empty = wire_body(&header(manifest, publication, u32::MAX, u32::MAX, Vec::new()), String::new()).len();
    // A run deflated, its body size, and its JSON size.
    let measure = |range: std::ops::Range<usize>| {
        let json = serde_json::to_vec(&manifest.nodes[range.clone()]).unwrap_or_default();
        let deflated = deflate(&json);
        let sizes = (empty + deflated.len(), json.len());
        (Run { range, deflated }, sizes)
    };
    let fits = |(body, json): (usize, usize)| body <= max_body && json <= MAX_INFLATED_BYTES;
    let n = manifest.nodes.len();
    let (whole, sizes) = measure(0..n);
    // A manifest with no nodes is one part whatever its size (its header
    // is bounded by what a node config and a key may hold).
    if n == 0 || fits(sizes) {
        return Ok(vec![whole]);
    }
    let room = max_body.saturating_sub(empty).max(1);
    let by_body = (sizes.0 - empty) * 11 / 10 / room + 1;
    let by_json = sizes.1 * 11 / 10 / MAX_INFLATED_BYTES + 1;
    let k = by_body.max(by_json).clamp(1, n);
    if k > MAX_PARTS as usize {
        return Err(SplitError::TooManyParts { parts: k });
    }
    // Runs of equal length (the first ones one longer), each checked; one
    // that does not fit is cut in two, in place, until all do.
    let mut todo: Vec<std::ops::Range<usize>> =
        (0..k).rev().map(|i| (i * n / k)..((i + 1) * n / k)).filter(|r| !r.is_empty()).collect();
    let mut runs = Vec::new();
    while let Some(range) = todo.pop() {
        let (run, sizes) = measure(range);
        if fits(sizes) {
            runs.push(run);
        } else if run.range.len() == 1 {
            let instance_id = manifest.nodes[run.range.start].instance_id.clone();
            return Err(SplitError::NodeTooLarge { instance_id, bytes: sizes.0, limit: max_body });
        } else {
            let mid = run.range.start + run.range.len() / 2;
            todo.push(mid..run.range.end);
            todo.push(run.range.start..mid);
        }
        if runs.len() > MAX_PARTS as usize {
            return Err(SplitError::TooManyParts { parts: runs.len() + todo.len() });
        }
    }
    Ok(runs)
}

/// The parts of one publication seen so far.
#[derive(Clone, Debug)]
struct Partial {
    /// Part 0 as first seen, without its nodes: every other part must agree.
    header: ManifestPart,
    nodes: BTreeMap<u32, Vec<ManifestNode>>,
}

/// A node's collection of manifest parts: [`Assembly::add`] each part
/// received; it returns a manifest once all parts of a publication are in.
#[derive(Clone, Debug, Default)]
pub struct Assembly {
    /// By (generation, publication).
    partials: BTreeMap<(u64, u64), Partial>,
}

impl Assembly {
    /// An empty collection.
    pub fn new() -> Assembly {
        Assembly::default()
    }

    /// Adds a part. Returns the whole manifest when this part completes its
    /// publication (that publication's parts are then forgotten: seeing
    /// them again assembles it again, which the node's own rules ignore),
    /// `None` while parts are missing, and an error when the part cannot
    /// belong to any manifest (its publication's parts are dropped).
    pub fn add(&mut self, part: ManifestPart) -> Result<Option<Manifest>, PartError> {
        let numbering =
            |reason| PartError::Numbering { generation: part.generation, part: part.part, parts: part.parts, reason };
        if part.parts == 0 || part.parts > MAX_PARTS {
            return Err(numbering("a generation has 1 to 64 parts"));
        }
        if part.part >= part.parts {
            return Err(numbering("the part number is not below the part count"));
        }
        let key = (part.generation, part.publication);
        let (header, nodes) = part.into_header();
        if header.parts == 1 {
            return assemble(header, vec![nodes]).map(Some);
        }
        if !self.partials.contains_key(&key) && !self.make_room(key.0) {
            // Parts of newer generations fill the room: this one is superseded.
            return Ok(None);
        }
        let partial =
            self.partials.entry(key).or_insert_with(|| Partial { header: header.clone(), nodes: BTreeMap::new() });
        let index = header.part;
        if header.with_part(0) != partial.header.with_part(0) {
            self.partials.remove(&key);
            return Err(inconsistent(&header, "two parts disagree on the cluster, master, key or part count".into()));
        }
        if let Some(seen) = partial.nodes.get(&index) {
            if *seen != nodes {
                self.partials.remove(&key);
                return Err(inconsistent(&header, format!("part {index} came twice with different nodes")));
            }
            return Ok(None);
        }
        partial.nodes.insert(index, nodes);
        if partial.nodes.len() < header.parts as usize {
            return Ok(None);
        }
        let Some(done) = self.partials.remove(&key) else { return Ok(None) };
        assemble(done.header, done.nodes.into_values().collect()).map(Some)
    }

    /// Forgets every part of a generation up to and including `generation`
    /// (the node applied it or something newer).
    pub fn forget_through(&mut self, generation: u64) {
        self.partials.retain(|(g, _), _| *g > generation);
    }

    /// How many publications have parts held.
    pub fn pending(&self) -> usize {
        self.partials.len()
    }

    /// Makes room for a publication of `generation` while
    /// [`MAX_PUBLICATIONS`] are held, dropping the oldest generation's
    /// parts (a newer generation supersedes them). Returns false, dropping
    /// nothing, when every publication held is of a newer generation.
    fn make_room(&mut self, generation: u64) -> bool {
        while self.partials.len() >= MAX_PUBLICATIONS {
            let Some(&oldest) = self.partials.keys().next() else { break };
            if oldest.0 > generation {
                return false;
            }
            self.partials.remove(&oldest);
        }
        true
    }
}

impl ManifestPart {
    /// The part without its nodes, and its nodes.
    fn into_header(mut self) -> (ManifestPart, Vec<ManifestNode>) {
        let nodes = std::mem::take(&mut self.nodes);
        (self, nodes)
    }

    /// The same header numbered `part` (to compare the headers of two parts).
    fn with_part(&self, part: u32) -> ManifestPart {
        ManifestPart { part, ..self.clone() }
    }
}

/// The manifest of a publication's header and its runs of nodes in part order.
fn assemble(header: ManifestPart, runs: Vec<Vec<ManifestNode>>) -> Result<Manifest, PartError> {
    let nodes: Vec<ManifestNode> = runs.into_iter().flatten().collect();
    if nodes.len() != header.node_count as usize {
        return Err(inconsistent(
            &header,
            format!("{} nodes in the parts, {} announced", nodes.len(), header.node_count),
        ));
    }
    if let Some(w) = nodes.windows(2).find(|w| w[0].index == w[1].index) {
        return Err(inconsistent(
            &header,
            format!("two nodes have index {}, {} and {}", w[0].index, w[0].instance_id, w[1].instance_id),
        ));
    }
    if nodes.windows(2).any(|w| w[0].index > w[1].index) {
        return Err(inconsistent(&header, "the nodes are not in index order".into()));
    }
    Ok(Manifest {
        cluster: header.cluster,
        generation: header.generation,
        master: header.master,
        nodes,
        cluster_public_key: header.cluster_public_key,
    })
}

fn inconsistent(part: &ManifestPart, reason: String) -> PartError {
    PartError::Inconsistent { generation: part.generation, publication: part.publication, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;
    use crate::message::{Message, Unusable, parse_worker_queue, worker_alias};

    /// A small deterministic PRNG (SplitMix64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn shuffle<T>(&mut self, items: &mut [T]) {
            for i in (1..items.len()).rev() {
                items.swap(i, self.below(i + 1));
            }
        }
    }

    /// Node `i` as EC2 and the agent would describe it, with the longest
    /// host names of the five regions (ap-southeast-2's) and a real-length
    /// ed25519 host key.
    fn node(i: u32, rng: &mut Rng) -> ManifestNode {
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let key: String = (0..43).map(|_| B64[rng.below(64)] as char).collect();
        let (a, b) = (i / 250, i % 250);
        ManifestNode {
            index: i + 1,
            alias: worker_alias(i + 1),
            instance_id: format!("i-{:017x}", rng.next() >> 4),
            private_ip: format!("10.0.{a}.{b}"),
            hostname: format!("ip-10-0-{a}-{b}.ap-southeast-2.compute.internal"),
            gpus: 8,
            ssh_host_key: format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{key}"),
        }
    }

    fn manifest(nodes: u32, generation: u64, seed: u64) -> Manifest {
        let mut rng = Rng(seed);
        let nodes: Vec<ManifestNode> = (0..nodes).map(|i| node(i, &mut rng)).collect();
        Manifest {
            cluster: "resnet-training".into(),
            generation,
            master: nodes.first().map(|n| n.instance_id.clone()).unwrap_or_default(),
            nodes,
            cluster_public_key:
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv6wIRgsF/0nqQZmmUZFx3Lq8b0NE8rGL9P0L4fXoUx deeplearning-cluster"
                    .into(),
        }
    }

    /// The message-size path at 1,000 and 4,000 nodes (and past them), with
    /// no processes: the bodies the master would send are all within the
    /// cap, parse as parts, and put back together in any order, with
    /// duplicates, give the manifest back.
    #[test]
    fn a_1000_and_a_4000_node_manifest_travel_in_parts_within_the_cap() {
        for (nodes, expected_parts) in [(0, 1), (1, 1), (900, 1), (1_000, 1), (2_500, 1), (4_000, 2), (16_000, 6)] {
            let m = manifest(nodes, 7, u64::from(nodes));
            let whole = serde_json::to_string(&m).unwrap().len();
            let parts = split(&m, 42).unwrap();
            let bodies: Vec<String> = parts.iter().map(|p| Message::ManifestPart(p.clone()).to_body()).collect();
            assert_eq!(super::bodies(&m, 42).unwrap(), bodies, "{nodes} nodes: what the master sends");
            let sizes: Vec<usize> = bodies.iter().map(String::len).collect();
            eprintln!("{nodes} nodes: {whole} bytes of JSON, {} parts of {sizes:?} bytes", parts.len());
            assert_eq!(parts.len(), expected_parts, "{nodes} nodes, {whole} bytes whole: {sizes:?}");
            for b in &bodies {
                assert!(b.len() <= MAX_BODY_BYTES, "{nodes} nodes: a {}-byte body", b.len());
            }
            // As few parts as the bytes need, give or take one.
            let total: usize = sizes.iter().sum();
            assert!(parts.len() <= total / MAX_BODY_BYTES + 2, "{nodes} nodes: {sizes:?}");
            let mut rng = Rng(u64::from(nodes));
            for _ in 0..20 {
                let mut arrivals: Vec<&String> = bodies.iter().chain(bodies.iter().take(rng.below(3))).collect();
                rng.shuffle(&mut arrivals);
                let mut assembly = Assembly::new();
                let mut done = Vec::new();
                for body in arrivals {
                    let part = parse_worker_queue(body).unwrap();
                    done.extend(assembly.add(part).unwrap());
                }
                assert!(!done.is_empty(), "{nodes} nodes: never complete");
                assert!(done.iter().all(|d| *d == m), "{nodes} nodes: assembled a different manifest");
            }
        }
    }

    /// Every field at the largest size a registration may have: each node
    /// still fits in a part, and every part within the cap.
    #[test]
    fn nodes_at_the_field_limits_still_fit() {
        let long = |n: usize| "x".repeat(n);
        let big = ManifestNode {
            index: u32::MAX - 1,
            alias: worker_alias(u32::MAX - 1),
            instance_id: long(MAX_SHORT_FIELD_BYTES),
            private_ip: long(MAX_SHORT_FIELD_BYTES),
            hostname: long(MAX_HOSTNAME_BYTES),
            gpus: u32::MAX,
            ssh_host_key: long(MAX_HOST_KEY_BYTES),
        };
        // Host keys that do not compress (random base64), and ones that do.
        let mut rng = Rng(9);
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut random = |n: usize| -> String { (0..n).map(|_| B64[rng.below(64)] as char).collect() };
        let mut m = manifest(0, 1, 0);
        m.nodes = (0..200u32)
            .map(|i| ManifestNode { index: i + 1, ssh_host_key: random(MAX_HOST_KEY_BYTES), ..big.clone() })
            .collect();
        m.cluster_public_key = random(MAX_HOST_KEY_BYTES);
        let parts = split(&m, 1).unwrap();
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(Message::ManifestPart(p.clone()).to_body().len() <= MAX_BODY_BYTES);
        }
        let mut compressible = m.clone();
        compressible.nodes.iter_mut().for_each(|n| n.ssh_host_key = long(MAX_HOST_KEY_BYTES));
        let parts = split(&compressible, 1).unwrap();
        for p in &parts {
            let json = serde_json::to_vec(&p.nodes).unwrap().len();
            assert!(json <= MAX_INFLATED_BYTES, "a part of {json} bytes of JSON");
        }
        // Larger than a registration may be: refused, not sent oversized,
        // whether it is over the body (random) or the inflated bound.
        m.nodes[5].ssh_host_key = random(MAX_BODY_BYTES);
        assert!(matches!(split(&m, 1), Err(SplitError::NodeTooLarge { .. })));
        compressible.nodes[5].ssh_host_key = long(MAX_INFLATED_BYTES);
        assert!(matches!(split(&compressible, 1), Err(SplitError::NodeTooLarge { .. })));
    }

    /// A generation that would need more than [`MAX_PARTS`] parts is
    /// refused, not sent; a manifest with no nodes is one part.
    #[test]
    fn more_parts_than_a_generation_may_have_are_refused() {
        let m = manifest(1_000, 2, 3);
        assert!(matches!(split_within(&m, 1, 1_000), Err(SplitError::TooManyParts { parts }) if parts > 64));
        let none = manifest(0, 2, 3);
        assert_eq!(split_within(&none, 1, 10).unwrap().len(), 1);
    }

    #[test]
    fn registrations_over_the_field_limits_are_refused() {
        let ok = Register {
            instance_id: "i-0123456789abcdef0".into(),
            private_ip: "10.0.0.1".into(),
            hostname: "ip-10-0-0-1.ec2.internal".into(),
            role: Role::Worker,
            gpus: 8,
            instance_type: "p5.48xlarge".into(),
            availability_zone: "us-east-1a".into(),
            ssh_host_key: "ssh-ed25519 AAAA".into(),
            boot_id: "b".into(),
            launched_unix_ms: None,
            booted_unix_ms: None,
            agent_started_unix_ms: None,
            data: None,
        };
        assert_eq!(check_register(&ok), Ok(()));
        type Spoil = fn(&mut Register);
        let cases: [(&str, Spoil); 3] = [
            ("hostname", |r| r.hostname = "h".repeat(MAX_HOSTNAME_BYTES + 1)),
            ("SSH host key", |r| r.ssh_host_key = "k".repeat(MAX_HOST_KEY_BYTES + 1)),
            ("boot_id", |r| r.boot_id = "b".repeat(MAX_SHORT_FIELD_BYTES + 1)),
        ];
        for (field, spoil) in cases {
            let mut r = ok.clone();
            spoil(&mut r);
            let e = check_register(&r).unwrap_err();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    /// Two publications of one generation (a master that crashed between
    /// sending and saving): their parts arrive interleaved, and what comes
    /// out is one of them whole, never a mix.
    #[test]
    fn parts_of_two_publications_are_never_mixed() {
        let first = manifest(1_500, 4, 1);
        let mut second = manifest(1_500, 4, 2);
        second.nodes.truncate(1_400);
        for seed in 0..50 {
            let mut rng = Rng(seed);
            let mut arrivals: Vec<ManifestPart> =
                split(&first, 100).unwrap().into_iter().chain(split(&second, 200).unwrap()).collect();
            rng.shuffle(&mut arrivals);
            let mut assembly = Assembly::new();
            for part in arrivals {
                if let Some(m) = assembly.add(part).unwrap() {
                    assert!(m == first || m == second, "seed {seed}: a mix");
                }
            }
            assert_eq!(assembly.pending(), 0, "seed {seed}");
        }
    }

    #[test]
    fn impossible_or_inconsistent_parts_are_refused_with_the_reason() {
        let m = manifest(1_000, 3, 5);
        // Two parts: the second completes the publication, so a count that
        // does not add up is seen.
        let parts = split_within(&m, 9, 48 * 1024).unwrap();
        assert_eq!(parts.len(), 2);
        // `kept`: publications still held after the refusal (a part with
        // impossible numbering is refused alone; parts that disagree drop
        // their whole publication).
        let refused = |spoil: &dyn Fn(&mut ManifestPart), needle: &str, kept: usize| {
            let mut assembly = Assembly::new();
            let mut bad = parts[1].clone();
            spoil(&mut bad);
            let e = match assembly.add(parts[0].clone()).and_then(|_| assembly.add(bad)) {
                Err(e) => e,
                Ok(r) => panic!("{needle}: accepted ({})", r.is_some()),
            };
            assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
            assert_eq!(assembly.pending(), kept, "{needle}");
        };
        refused(&|p| p.parts = 0, "1 to 64 parts", 1);
        refused(&|p| p.parts = MAX_PARTS + 1, "1 to 64 parts", 1);
        refused(&|p| p.part = p.parts, "not below the part count", 1);
        refused(&|p| p.master = "i-other".into(), "disagree", 0);
        refused(&|p| p.parts += 1, "disagree", 0);
        refused(&|p| p.node_count += 1, "disagree", 0);
        refused(&|p| p.nodes.pop().map(drop).unwrap_or(()), "nodes in the parts", 0);
        refused(&|p| p.nodes.swap(0, 1), "index order", 0);
        // The same part twice with other nodes.
        let mut assembly = Assembly::new();
        assembly.add(parts[0].clone()).unwrap();
        let mut other = parts[0].clone();
        other.nodes[3].private_ip = "10.9.9.9".into();
        assert!(assembly.add(other).unwrap_err().to_string().contains("came twice with different nodes"));
        // A one-part manifest that does not add up.
        let mut single = split(&manifest(3, 1, 1), 1).unwrap().remove(0);
        single.node_count = 4;
        assert!(Assembly::new().add(single).is_err());
        // A body over the cap is refused before it is parsed.
        let body = Message::ManifestPart(parts[0].clone()).to_body() + &" ".repeat(MAX_BODY_BYTES);
        assert!(matches!(parse_worker_queue(&body), Err(Unusable::Oversized(_))));
    }

    /// A node that sees parts of many generations (it was away) holds at
    /// most a few publications, the newest.
    #[test]
    fn held_parts_are_bounded_and_superseded() {
        let mut assembly = Assembly::new();
        let split = |m: &Manifest, publication| split_within(m, publication, 64 * 1024);
        for generation in 1..=20 {
            let parts = split(&manifest(1_000, generation, generation), generation).unwrap();
            assert!(assembly.add(parts[0].clone()).unwrap().is_none());
            assert!(assembly.pending() <= MAX_PUBLICATIONS);
        }
        assert_eq!(assembly.partials.keys().map(|k| k.0).collect::<Vec<_>>(), vec![17, 18, 19, 20]);
        // An older generation's part does not push a newer one out.
        let old = split(&manifest(1_000, 3, 3), 3).unwrap();
        assert!(assembly.add(old[1].clone()).unwrap().is_none());
        assert_eq!(assembly.partials.keys().next().map(|k| k.0), Some(17));
        assembly.forget_through(19);
        assert_eq!(assembly.pending(), 1);
        // The newest completes.
        let newest = manifest(1_000, 20, 20);
        let done = assembly.add(split(&newest, 20).unwrap()[1].clone()).unwrap();
        assert_eq!(done, Some(newest));
    }
}
