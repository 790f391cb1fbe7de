//! The network gate's schedule (docs/ARCHITECTURE.md, "The network
//! gate"): after formation and after every join, when the node config has
//! a [`node_contract::NetworkCheck`], every node of the new generation
//! measures its link to its ring neighbour and reports it to the master
//! ([`node_contract::message::LinkReport`]); the master compares each
//! node's bandwidth with the expected one and warns about, replaces, or
//! fails formation on a slow node.
//!
//! Why per node, and not one all-reduce number: a ring all-reduce runs at
//! the speed of its slowest link, so one figure for the ring says that
//! something is slow but not what. Here every node sends to the next node
//! of the manifest's ring (by index, wrapping) for [`PROBE_MILLIS`], and
//! the receiver confirms the bytes it read: one figure per node for its
//! egress (traffic shaping and most slow NICs act on what a node sends).
//! A node whose receiving side is slow makes its predecessor look slow;
//! the master names the link (sender and receiver) so a reader can tell.
//!
//! Not all at once: a receiver that is sending too queues its TCP
//! acknowledgements behind its own data, so a node with a slow egress
//! made its predecessor look slow as well (measured here: 0.35 of the
//! expected for the fast predecessor of a node shaped to a quarter). So
//! the ring's positions alternate between two phases ([`phase`]; an odd
//! ring's last node has a third of its own), and a node never sends while
//! it receives. The phases start at fixed offsets from the generation's
//! publication id, which is the master's clock (unix ms) when it published
//! it ([`send_at_ms`]): every node agrees on the schedule without another
//! message. A formation check takes [`SETTLE_MILLIS`] plus two or three
//! [`SLOT_MILLIS`].
//!
//! Three parts, this one pure and shared: the schedule here (the ring,
//! the phases, which generations are checked), which the master and every
//! node follow; the sockets, on the nodes only (the listener and the
//! sender, in the runner's probe); and the master's pure decision (the
//! verdict, in `cluster::master::verdict`), so that the master's state
//! machine imports no module that opens sockets. The probe is plain TCP in
//! tokio, the same transport `trainer bench` and `trainer train` use on CPU
//! nodes. NCCL between GPUs (over EFA where the profile enables it) is not
//! measured here: the agent has no CUDA, and NCCL needs every rank's GPU
//! and one communicator; `trainer launch -- trainer bench --device cuda`
//! measures it once the cluster formed (docs/ARCHITECTURE.md, "The network
//! gate", says what running it from the gate would take).

use node_contract::message::{Manifest, ManifestNode};

pub use node_contract::PROBE_PORT;

/// How long a node sends to its neighbour.
pub const PROBE_MILLIS: u64 = 2_000;

/// From a generation's publication until the first phase sends: every node
/// receives and applies it in that time (nodes long-poll the queue).
pub const SETTLE_MILLIS: u64 = 3_000;

/// One phase: the probe and the receivers' confirmations.
pub const SLOT_MILLIS: u64 = PROBE_MILLIS + 1_500;

/// Parallel TCP streams of one probe: a single flow is capped well below
/// a large instance's bandwidth (5 Gbit/s between instances outside a
/// cluster placement group, 10 inside:
/// <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html>).
pub const PROBE_STREAMS: usize = 8;

/// The most one probe can show: [`PROBE_STREAMS`] flows of 5 Gbit/s. An
/// expected figure above it is compared as this (a TCP probe cannot tell
/// a 100 Gbit/s link from a 40 Gbit/s one).
pub const PROBE_CEILING_GBPS: f64 = PROBE_STREAMS as f64 * 5.0;

/// The bytes one probe sends at most (all streams together): the time
/// bounds it first on any link up to 40 Gbit/s.
pub const PROBE_MAX_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// The ring neighbour `me` sends to: the next node of the manifest by
/// index, the first after the last; `None` when `me` is not in it or is
/// alone.
pub fn ring_peer<'a>(manifest: &'a Manifest, me: &str) -> Option<&'a ManifestNode> {
    let (nodes, at) = ring(manifest, me)?;
    (nodes.len() >= 2).then(|| nodes[(at + 1) % nodes.len()])
}

/// The manifest's nodes by index, and `me`'s position among them.
fn ring<'a>(manifest: &'a Manifest, me: &str) -> Option<(Vec<&'a ManifestNode>, usize)> {
    let mut nodes: Vec<&ManifestNode> = manifest.nodes.iter().collect();
    nodes.sort_by_key(|n| n.index);
    let at = nodes.iter().position(|n| n.instance_id == me)?;
    Some((nodes, at))
}

/// The phase (0, 1 or 2) in which `me` sends: ring positions alternate
/// between 0 and 1, so the node a sender sends to is not sending then; in
/// a ring of odd length the last position has phase 2 (its neighbour, the
/// first, sends in phase 0). `None` when `me` is not in the manifest.
pub fn phase(manifest: &Manifest, me: &str) -> Option<u64> {
    let (nodes, at) = ring(manifest, me)?;
    let n = nodes.len();
    Some(if n % 2 == 1 && at == n - 1 && n > 1 { 2 } else { at as u64 % 2 })
}

/// When (unix ms) a node in `phase` sends for the generation published at
/// `publication_ms` (the master's clock): [`SETTLE_MILLIS`] after it, plus
/// one [`SLOT_MILLIS`] per phase before. A node that comes late sends at
/// once; a publication id more than two minutes off this node's clock (a
/// clock that jumped) is not trusted, and the phases count from now.
pub fn send_at_ms(publication_ms: u64, phase: u64, now_ms: u64) -> u64 {
    let offset = phase * SLOT_MILLIS;
    if publication_ms.abs_diff(now_ms) > 120_000 {
        return now_ms + offset;
    }
    (publication_ms + SETTLE_MILLIS + offset).max(now_ms)
}

/// Whether generation `next` is one the gate checks, seen from the
/// generation before it (`previous`; `None` before formation): it has at
/// least two nodes and one of them was not in `previous`. The master
/// and every node apply the same rule.
pub fn checks(previous: Option<&Manifest>, next: &Manifest) -> bool {
    next.nodes.len() >= 2 && next.nodes.iter().any(|n| previous.is_none_or(|p| p.node(&n.instance_id).is_none()))
}

#[cfg(test)]
mod tests {
    use node_contract::message::worker_alias;

    use super::*;

    fn manifest(ids: &[u32]) -> Manifest {
        Manifest {
            cluster: "c".into(),
            generation: 1,
            master: "i-1".into(),
            nodes: ids
                .iter()
                .map(|&i| ManifestNode {
                    index: i,
                    alias: worker_alias(i),
                    instance_id: format!("i-{i}"),
                    private_ip: format!("10.0.0.{i}"),
                    hostname: format!("h{i}"),
                    gpus: 0,
                    ssh_host_key: String::new(),
                })
                .collect(),
            cluster_public_key: String::new(),
        }
    }

    #[test]
    fn the_ring_wraps_and_one_node_has_no_neighbour() {
        let m = manifest(&[1, 4, 2]);
        assert_eq!(ring_peer(&m, "i-1").unwrap().instance_id, "i-2");
        assert_eq!(ring_peer(&m, "i-2").unwrap().instance_id, "i-4");
        assert_eq!(ring_peer(&m, "i-4").unwrap().instance_id, "i-1");
        assert!(ring_peer(&m, "i-9").is_none());
        assert!(ring_peer(&manifest(&[1]), "i-1").is_none());
    }

    #[test]
    fn a_receiver_never_sends_in_its_senders_phase() {
        for n in 2..=9u32 {
            let ids: Vec<u32> = (1..=n).collect();
            let m = manifest(&ids);
            for node in &m.nodes {
                let peer = ring_peer(&m, &node.instance_id).unwrap();
                let (mine, theirs) = (phase(&m, &node.instance_id).unwrap(), phase(&m, &peer.instance_id).unwrap());
                assert_ne!(mine, theirs, "ring of {n}: {} and {}", node.alias, peer.alias);
                assert!(mine <= 2);
            }
        }
        assert_eq!(phase(&manifest(&[1, 2, 3]), "i-3"), Some(2));
        assert_eq!(phase(&manifest(&[1, 2]), "i-9"), None);
    }

    #[test]
    fn the_schedule_counts_from_the_publication_unless_it_is_late_or_untrusted() {
        let t = 1_767_225_600_000;
        assert_eq!(send_at_ms(t, 0, t + 500), t + SETTLE_MILLIS);
        assert_eq!(send_at_ms(t, 2, t + 500), t + SETTLE_MILLIS + 2 * SLOT_MILLIS);
        assert_eq!(send_at_ms(t, 0, t + 10_000), t + 10_000, "late: at once");
        assert_eq!(send_at_ms(t, 1, t + 600_000), t + 600_000 + SLOT_MILLIS, "a clock far off");
    }

    #[test]
    fn a_generation_is_checked_when_it_adds_a_node_to_two_or_more() {
        assert!(checks(None, &manifest(&[1, 2])));
        assert!(!checks(None, &manifest(&[1])));
        assert!(checks(Some(&manifest(&[1, 2])), &manifest(&[1, 2, 3])));
        assert!(!checks(Some(&manifest(&[1, 2, 3])), &manifest(&[1, 2])));
        assert!(!checks(Some(&manifest(&[1, 2])), &manifest(&[1, 2])));
    }
}
