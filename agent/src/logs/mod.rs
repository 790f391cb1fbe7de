//! Node logs that outlive the stack: every agent ships its own log lines,
//! its node's boot output and the prepare-data script's output to its own
//! stream in the stack's CloudWatch Logs group (`node_contract::logs`;
//! docs/ARCHITECTURE.md, "Node logs").
//!
//! - [`writer`]: the agent's `tracing` output goes to stderr and, one record
//!   per line, into the [`spool`], a bounded file of lines not yet
//!   acknowledged, under `/var/lib/deeplearning/logs-spool`.
//! - [`source`]: the files the shipper follows into the spool (the user
//!   data's output, the prepare-data script's log), each with a stored
//!   offset.
//! - The [`Shipper`] runs as its own task: every second it follows the
//!   files, enforces the spool's cap, and sends the unacknowledged lines in
//!   [`batch`]es within PutLogEvents' limits; a batch is acknowledged in the
//!   spool only once CloudWatch Logs accepted it. While CloudWatch Logs is
//!   unreachable the lines wait in the spool (the oldest dropped past the
//!   cap, with a line that counts them) and go out when it answers again.
//!   Nothing in formation waits for it, and a node that cannot ship still
//!   forms.
//!
//! The stream is `<label>-<instance id>`: `master`; a worker ships to
//! `worker<N>-<id>` once the manifest it applied gives it an index, after a
//! pause that spreads a cluster's new streams over time
//! ([`first_upload_spread`]). Until then it holds its lines
//! ([`hold_first_lines`]): most workers form within
//! seconds, and then one stream and one upload carry everything they logged
//! up to their first manifest (two CloudWatch Logs calls, where shipping at
//! once cost a stream `worker-<id>`, a second stream once the index came,
//! and an upload a second in between: about five calls a worker, 5,000 in
//! a minute at 1,000 nodes, far above CloudWatch Logs' per-account rate for
//! `CreateLogStream`). A worker that logged a warning or an error
//! ([`WARNING_GRACE`] ago and still no index), or has waited
//! [`FIRST_LINES_HOLD`], ships to `worker-<id>` at once, so a worker
//! that fails before it joins still has its lines shipped (`synth logs`
//! merges a node's streams by instance id).

pub(crate) mod batch;
pub(crate) mod source;
pub(crate) mod spool;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use node_contract::Role;
use node_contract::clock::Clock;
use node_contract::logs::{node_label, stream_name};
use tracing::{info, warn};

use crate::ports::{LogStreams, PortError};
pub use source::Source;
pub use spool::Spool;

/// The spool's directory under the agent's root.
pub fn spool_dir(root: &Path) -> PathBuf {
    root.join("var/lib/deeplearning/logs-spool")
}

/// cloud-init's copy of the user data's output under the agent's root.
pub fn boot_log(root: &Path) -> PathBuf {
    root.join("var/log/cloud-init-output.log")
}

/// How often the shipper looks for new lines.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// The longest wait between attempts while CloudWatch Logs fails.
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// How long a worker without an index holds its lines at most
/// ([`hold_first_lines`]).
pub const FIRST_LINES_HOLD: Duration = Duration::from_secs(60);

/// How long after its first warning or error a worker without an index
/// still holds its lines: a warning while it applies its first manifest is
/// followed by the index within milliseconds, and then its lines need only
/// the one stream.
pub const WARNING_GRACE: Duration = Duration::from_secs(2);

/// Whether the shipper holds a node's lines a while longer before its first
/// upload: a worker that has no index yet (`indexed`: the manifest it
/// applied lists it), logged no warning or error more than
/// [`WARNING_GRACE`] ago (`since_warning`: how long ago its first was), and
/// has been shipping for less than [`FIRST_LINES_HOLD`] (`since_start`).
/// The master ships at once, and so does every node once it has uploaded
/// anything.
pub fn hold_first_lines(role: Role, indexed: bool, since_warning: Option<Duration>, since_start: Duration) -> bool {
    role == Role::Worker
        && !indexed
        && since_warning.is_none_or(|d| d < WARNING_GRACE)
        && since_start < FIRST_LINES_HOLD
}

/// CloudWatch Logs throttles `CreateLogStream` above 50 calls a second per
/// account and Region (its API reference, CreateLogStream).
pub const CREATE_STREAM_PER_SECOND: u64 = 50;
/// The longest [`first_upload_spread`].
pub const MAX_SPREAD: Duration = Duration::from_secs(30);

/// How long a worker that just got its index (from a manifest of `nodes`
/// nodes) waits before its first upload: a share, fixed by its instance id,
/// of `nodes / 50` seconds (at most [`MAX_SPREAD`]). A cluster forms at
/// once, and without it every worker would create its stream in the same
/// second: 1,000 at once where CloudWatch Logs takes
/// [`CREATE_STREAM_PER_SECOND`] a second; spread, they come at about that
/// rate (64 nodes within 1.3 s, 1,000 within 20 s).
pub fn first_upload_spread(instance_id: &str, nodes: usize) -> Duration {
    use std::hash::{Hash, Hasher};
    let window_ms = (nodes as u64 * 1000 / CREATE_STREAM_PER_SECOND).min(MAX_SPREAD.as_millis() as u64);
    if window_ms == 0 {
        return Duration::ZERO;
    }
    let mut hasher = std::hash::DefaultHasher::new();
    instance_id.hash(&mut hasher);
    Duration::from_millis(hasher.finish() % window_ms)
}

/// Where a node's lines go now, from the manifest it applied last (its
/// state file, read once each time it changes).
#[derive(Clone, Debug)]
struct Placement {
    /// `<label>-<instance id>`: `master`, `worker<N>` with the worker's
    /// index, or `worker` before it has one.
    stream: String,
    /// Whether a worker's stream carries its index (always for the master).
    indexed: bool,
    /// How many nodes that manifest lists (0 before any).
    nodes: usize,
}

impl Placement {
    fn read(root: &Path, role: Role, instance_id: &str) -> Placement {
        let state = crate::files::state::read(root).ok().flatten().filter(|s| s.instance_id == instance_id);
        let nodes = state.as_ref().map_or(0, |s| s.manifest.nodes.len());
        let index = match role {
            Role::Master => None,
            Role::Worker => state.and_then(|s| s.manifest.node(instance_id).map(|n| n.index)),
        };
        let stream = stream_name(&node_label(role == Role::Master, index), instance_id);
        Placement { stream, indexed: role == Role::Master || index.is_some(), nodes }
    }
}

/// Ships one node's lines to its stream.
#[derive(Debug)]
pub struct Shipper<L> {
    streams: L,
    spool: Arc<Spool>,
    sources: Vec<Source>,
    root: PathBuf,
    role: Role,
    instance_id: String,
    /// The stream created last (a new label needs a new stream).
    created: Option<String>,
    /// Where the lines go, for the state file's modification time it was
    /// worked out from: the state is read again only when it changed (a
    /// worker's index can change when it leaves and joins again).
    current: Option<(Option<std::time::SystemTime>, Placement)>,
    /// Failing since this many attempts (for one warning per outage).
    failing: u32,
    /// Where the time of the copied lines and of the first warning comes from.
    clock: Clock,
}

impl<L: LogStreams> Shipper<L> {
    /// A shipper for the node `instance_id` of `role`, whose agent runs
    /// under `root`, following the boot output and `prepare_log`, reading
    /// the time from `clock`.
    pub fn new(
        streams: L,
        spool: Arc<Spool>,
        root: &Path,
        role: Role,
        instance_id: &str,
        prepare_log: PathBuf,
        clock: Clock,
    ) -> Self {
        let dir = spool_dir(root);
        let sources = vec![Source::new("boot", boot_log(root), &dir), Source::new("prepare-data", prepare_log, &dir)];
        Shipper {
            streams,
            spool,
            sources,
            root: root.to_owned(),
            role,
            instance_id: instance_id.to_owned(),
            created: None,
            current: None,
            failing: 0,
            clock,
        }
    }

    /// The stream the node writes now.
    pub fn stream(&mut self) -> String {
        self.placement().stream.clone()
    }

    /// Whether this node's stream is named with its index already (the
    /// master's always is).
    pub fn indexed(&mut self) -> bool {
        self.placement().indexed
    }

    /// Now, in unix milliseconds, as CloudWatch Logs stamps events.
    fn now_ms(&self) -> i64 {
        (self.clock)() as i64
    }

    fn placement(&mut self) -> &Placement {
        let changed = std::fs::metadata(node_contract::files::under(&self.root, crate::files::state::PATH))
            .and_then(|m| m.modified())
            .ok();
        if self.current.as_ref().is_some_and(|(at, _)| *at != changed) {
            self.current = None;
        }
        &self.current.get_or_insert_with(|| (changed, Placement::read(&self.root, self.role, &self.instance_id))).1
    }

    /// One round: follows the files, enforces the cap, and sends every
    /// unacknowledged line; returns how many lines CloudWatch Logs accepted.
    pub async fn round(&mut self) -> Result<usize, PortError> {
        let now = self.now_ms();
        for source in &mut self.sources {
            if let Err(e) = source.collect(&self.spool, now) {
                warn!(source = source.name, "cannot copy new lines into the log spool: {e}");
            }
        }
        match self.spool.enforce_cap(now) {
            Ok(0) => {}
            Ok(dropped) => warn!(dropped, "the log spool is full: dropped the oldest lines"),
            Err(e) => warn!("cannot enforce the log spool's cap: {e}"),
        }
        let stream = self.stream();
        let mut sent = 0;
        loop {
            let batch =
                self.spool.next_batch().map_err(|e| PortError::Permanent(format!("reading the log spool: {e}")))?;
            if batch.is_empty() {
                return Ok(sent);
            }
            if self.created.as_deref() != Some(stream.as_str()) {
                self.streams.create_stream(&stream).await?;
                self.created = Some(stream.clone());
            }
            match self.streams.put(&stream, &batch.events).await {
                Ok(outcome) => {
                    if outcome.rejected > 0 {
                        warn!(
                            rejected = outcome.rejected,
                            stream, "CloudWatch Logs refused lines (too old or too new)"
                        );
                    }
                    self.spool
                        .ack(batch.consumed)
                        .map_err(|e| PortError::Permanent(format!("storing the log spool's offset: {e}")))?;
                    sent += batch.events.len();
                }
                Err(e) => {
                    // The stream may be gone (deleted by hand): create it again next time.
                    self.created = None;
                    return Err(e);
                }
            }
        }
    }

    /// Ships forever: a round every [`INTERVAL`] (after [`hold_first_lines`]
    /// lets the first one go), backing off up to [`MAX_BACKOFF`] while
    /// rounds fail. One warning when shipping starts failing, one line when
    /// it works again.
    pub async fn run(mut self) {
        let started = std::time::Instant::now();
        let mut holding = true;
        let mut delay = INTERVAL;
        loop {
            if holding {
                let indexed = self.indexed();
                let since_warning = writer::warned_at_ms()
                    .map(|at| Duration::from_millis(u64::try_from(self.now_ms().saturating_sub(at)).unwrap_or(0)));
                holding = hold_first_lines(self.role, indexed, since_warning, started.elapsed());
                if holding {
                    tokio::time::sleep(INTERVAL).await;
                    continue;
                }
                if indexed && self.role == Role::Worker {
                    let nodes = self.placement().nodes;
                    tokio::time::sleep(first_upload_spread(&self.instance_id, nodes)).await;
                }
            }
            match self.round().await {
                Ok(sent) => {
                    if self.failing > 0 {
                        info!(attempts = self.failing, sent, "shipping logs to CloudWatch Logs again");
                    }
                    self.failing = 0;
                    delay = INTERVAL;
                }
                Err(e) => {
                    if self.failing == 0 {
                        warn!(
                            unsent_bytes = self.spool.unsent(),
                            "cannot ship logs to CloudWatch Logs; keeping them in the spool and retrying: {e}"
                        );
                    }
                    self.failing += 1;
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
            }
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests;
