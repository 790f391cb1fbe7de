//! The network gate's probe on a node (docs/ARCHITECTURE.md, "The network
//! gate"): for a generation the gate checks, the node loop spawns
//! [`probe_link`] beside itself; it waits for this node's phase of the
//! schedule, measures the link to its ring neighbour ([`crate::netgate`])
//! and reports it to the master.

use std::time::Duration;

use node_contract::clock::Clock;
use node_contract::message::{self, Message};
use tracing::{debug, info, warn};

use super::retry::retry;
use crate::netgate;
use crate::ports::Queue;

/// The network gate's probe task, stopped when dropped: when a newer
/// check replaces it, and when the node loop ends (SIGTERM, an
/// interruption), rather than left running detached.
pub(super) struct ProbeTask(tokio::task::JoinHandle<()>);

impl ProbeTask {
    /// Starts [`probe_link`] for `link` as a task of its own.
    pub(super) fn spawn<Q: Queue + 'static>(link: Link, publication: u64, master_queue: Q, clock: Clock) -> ProbeTask {
        ProbeTask(tokio::spawn(probe_link(link, publication, master_queue, clock)))
    }

    /// Whether it is still waiting for its phase or measuring.
    pub(super) fn is_running(&self) -> bool {
        !self.0.is_finished()
    }
}

impl Drop for ProbeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a probe measures: this node's link to its ring neighbour in one
/// generation, and its phase of the schedule.
pub(super) struct Link {
    pub(super) me: String,
    pub(super) generation: u64,
    pub(super) peer: message::ManifestNode,
    pub(super) phase: u64,
}

/// The network gate's probe: in this node's phase of the schedule
/// ([`netgate::send_at_ms`], from the generation's `publication`), sends
/// to its ring neighbour for [`netgate::PROBE_MILLIS`] and reports what it
/// measured (or why it could not) to the master. Spawned beside the node
/// loop, so a newer generation is applied while it waits.
async fn probe_link<Q: Queue>(link: Link, publication: u64, master_queue: Q, clock: Clock) {
    let Link { me, generation, peer, phase } = link;
    let now = clock();
    let wait = netgate::send_at_ms(publication, phase, now).saturating_sub(now);
    debug!(generation, phase, wait_ms = wait, "the network check's probe waits for its phase");
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let measured = netgate::measure(&peer.private_ip, netgate::PROBE_PORT, netgate::PROBE_MILLIS).await;
    let (bytes, millis, error) = match measured {
        Ok((bytes, millis)) => (bytes, millis, None),
        Err(e) => {
            warn!("the network check's probe to {} ({}) failed: {e}", peer.alias, peer.private_ip);
            (0, 0, Some(e))
        }
    };
    let report =
        message::LinkReport { instance_id: me, generation, peer: peer.instance_id.clone(), bytes, millis, error };
    if let Some(gbps) = report.gbps() {
        info!(generation, peer = %peer.alias, bytes, millis, "measured {gbps:.3} Gbit/s");
    }
    let body = Message::LinkReport(report).to_body();
    if let Err(e) = retry("report the measured link", || master_queue.send(&body)).await {
        warn!("cannot report the measured link to the master: {e}");
    }
}
