//! The network gate (docs/ARCHITECTURE.md, "The network gate"): after
//! formation and after every join, when the node config has a
//! [`NetworkCheck`], every node of the new generation measures its link to
//! its ring neighbour and reports it to the master ([`LinkReport`]); the
//! master compares each node's bandwidth with the expected one and warns
//! about, replaces, or fails formation on a slow node.
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
//! Three parts: the probe's listener ([`serve`], on [`PROBE_PORT`], every
//! node while the gate is on), the sender ([`measure`]), and the master's
//! pure decision ([`judge`], [`Verdict`]), which the master's state machine
//! ([`crate::cluster::master`]) calls. The probe is plain TCP in tokio, the
//! same transport `trainer bench` and `trainer train` use on CPU nodes.
//! NCCL between GPUs (over EFA where the profile enables it) is not
//! measured here: the agent has no CUDA, and NCCL needs every rank's GPU
//! and one communicator; `trainer launch -- trainer bench --device cuda`
//! measures it once the cluster formed (docs/ARCHITECTURE.md, "The network
//! gate", says what running it from the gate would take).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use node_contract::NetworkCheck;
use node_contract::message::{LinkReport, Manifest, ManifestNode};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

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

/// How long the listener keeps one connection (a sender that never stops
/// is cut off).
const SERVE_MAX: Duration = Duration::from_secs(30);

/// Connections the listener serves at once (a node has one predecessor;
/// the rest is a margin for a ring that just changed).
const SERVE_CONNECTIONS: usize = 4 * PROBE_STREAMS;

/// How long the sender tries to reach its neighbour's listener.
const CONNECT_FOR: Duration = Duration::from_secs(10);

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

/// Serves probes on `port` until the task is dropped: reads each
/// connection to its end (at most [`SERVE_MAX`]) and answers with the
/// bytes read (8 bytes, big-endian).
pub async fn serve(port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", port)).await?;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(SERVE_CONNECTIONS));
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!("the bandwidth probe listener cannot accept: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%from, "a bandwidth probe refused: {SERVE_CONNECTIONS} connections are being served");
            continue;
        };
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = tokio::time::timeout(SERVE_MAX, drain(stream)).await.unwrap_or_else(|_| {
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the sender did not stop in time"))
            }) {
                debug!(%from, "a bandwidth probe ended early: {e}");
            }
        });
    }
}

/// Reads `stream` to its end, then writes how many bytes it read.
async fn drain(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total: u64 = 0;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    stream.write_all(&total.to_be_bytes()).await?;
    stream.shutdown().await
}

/// Sends to `peer_ip`'s listener on `port` over [`PROBE_STREAMS`]
/// connections for `millis` (at most [`PROBE_MAX_BYTES`] together) and
/// waits for every receiver's count: the bytes the receivers confirmed,
/// and the milliseconds from the first byte to the last confirmation.
pub async fn measure(peer_ip: &str, port: u16, millis: u64) -> Result<(u64, u64), String> {
    measure_within(peer_ip, port, millis, CONNECT_FOR).await
}

/// [`measure`], trying to connect for `connect_for`.
async fn measure_within(peer_ip: &str, port: u16, millis: u64, connect_for: Duration) -> Result<(u64, u64), String> {
    let mut streams = Vec::with_capacity(PROBE_STREAMS);
    for _ in 0..PROBE_STREAMS {
        streams.push(connect(peer_ip, port, connect_for).await?);
    }
    let started = Instant::now();
    let stop = started + Duration::from_millis(millis);
    let per_stream = PROBE_MAX_BYTES / PROBE_STREAMS as u64;
    let sends = streams.into_iter().map(|s| send(s, stop, per_stream));
    let mut total = 0;
    for result in futures_util::future::join_all(sends).await {
        total += result.map_err(|e| format!("probing {peer_ip}:{port}: {e}"))?;
    }
    let elapsed = started.elapsed().as_millis().max(1) as u64;
    Ok((total, elapsed))
}

/// Connects, retrying while the neighbour's listener is not up yet.
async fn connect(peer_ip: &str, port: u16, connect_for: Duration) -> Result<TcpStream, String> {
    let deadline = Instant::now() + connect_for;
    loop {
        match tokio::time::timeout(Duration::from_secs(3), TcpStream::connect((peer_ip, port))).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if Instant::now() < deadline => debug!("cannot reach {peer_ip}:{port} yet: {e}"),
            Ok(Err(e)) => return Err(format!("cannot reach the probe listener {peer_ip}:{port}: {e}")),
            Err(_) if Instant::now() < deadline => {}
            Err(_) => return Err(format!("cannot reach the probe listener {peer_ip}:{port}: timed out")),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Writes until `stop` (or `max` bytes), closes the sending side, and
/// returns the count the receiver confirms.
async fn send(mut stream: TcpStream, stop: Instant, max: u64) -> std::io::Result<u64> {
    let chunk = vec![0x5au8; 128 * 1024];
    let mut sent: u64 = 0;
    while Instant::now() < stop && sent < max {
        let left = stop.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.write(&chunk)).await {
            Ok(Ok(n)) => sent += n as u64,
            Ok(Err(e)) => return Err(e),
            Err(_) => break,
        }
    }
    stream.shutdown().await?;
    let mut count = [0u8; 8];
    tokio::time::timeout(SERVE_MAX, stream.read_exact(&mut count))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no count from the receiver"))??;
    Ok(u64::from_be_bytes(count))
}

/// A formation signal the master holds until the gate decides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldSignal {
    /// The success reason, without the gate's verdict.
    pub reason: String,
    /// The signal's data.
    pub data: String,
}

/// A network check under way on the master: the generation measured, who
/// is to report, what came, until when it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    /// The generation whose ring is measured.
    pub generation: u64,
    /// When the master decides with what it has.
    pub deadline_ms: u64,
    /// Every node of the generation, in index order.
    pub nodes: Vec<GateNode>,
    /// The reports in, by sender.
    pub reports: BTreeMap<String, LinkReport>,
    /// The formation success signal, when this check decides it.
    pub held: Option<HeldSignal>,
}

impl Gate {
    /// Whether every node reported.
    pub fn complete(&self) -> bool {
        self.nodes.iter().all(|n| self.reports.contains_key(&n.instance_id))
    }
}

/// A node the gate waits for, as the generation lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateNode {
    /// `i-...`
    pub instance_id: String,
    /// `deeplearning-workerN`.
    pub alias: String,
    /// Private IPv4 address.
    pub ip: String,
}

/// What the gate compared the nodes with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "gbps")]
pub enum Reference {
    /// The instance type's bandwidth (capped at [`PROBE_CEILING_GBPS`]).
    Expected(f64),
    /// No figure for the type: the median of the measured nodes (the upper
    /// middle for an even count, so that half the nodes being slow is
    /// seen).
    Median(f64),
    /// Nothing was measured.
    None,
}

/// One node's link, as judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgedLink {
    /// The sender.
    pub node: GateNode,
    /// The receiver's alias (its ring neighbour), when reported.
    pub peer: Option<String>,
    /// Measured Gbit/s; `None`: no report, or the probe failed.
    pub gbps: Option<f64>,
    /// `gbps` over the reference.
    pub fraction: Option<f64>,
    /// Below the minimum fraction.
    pub slow: bool,
    /// Why there is no figure.
    pub error: Option<String>,
}

/// The master's judgement of one generation's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The generation measured.
    pub generation: u64,
    /// The minimum fraction.
    pub min_fraction: f64,
    /// What the nodes were compared with.
    pub reference: Reference,
    /// Every node of the generation, in index order.
    pub links: Vec<JudgedLink>,
}

impl Verdict {
    /// The slow nodes.
    pub fn slow(&self) -> impl Iterator<Item = &JudgedLink> {
        self.links.iter().filter(|l| l.slow)
    }

    /// One line for the formation reason and the log: the slow nodes first
    /// (alias, instance id, address, Gbit/s, fraction), then every node's
    /// fraction, and what the reference was.
    pub fn summary(&self) -> String {
        let reference = match self.reference {
            Reference::Expected(g) => format!("the expected {g:.2} Gbit/s"),
            Reference::Median(g) => {
                format!("the median of the nodes, {g:.2} Gbit/s (no expected bandwidth is known for the instance type)")
            }
            Reference::None => "nothing (no node could be measured)".to_string(),
        };
        let slow: Vec<String> = self
            .slow()
            .map(|l| {
                format!(
                    "{} ({}, {}) sent {:.2} Gbit/s to {}, {:.2} of the reference",
                    l.node.alias,
                    l.node.instance_id,
                    l.node.ip,
                    l.gbps.unwrap_or_default(),
                    l.peer.as_deref().unwrap_or("its neighbour"),
                    l.fraction.unwrap_or_default()
                )
            })
            .collect();
        let head = if slow.is_empty() {
            format!("no node below {:.2} of {reference}", self.min_fraction)
        } else {
            format!("below {:.2} of {reference}: {}", self.min_fraction, slow.join("; "))
        };
        let fractions: Vec<String> = self
            .links
            .iter()
            .map(|l| match (l.fraction, &l.error) {
                (Some(f), _) => format!("{} {f:.2}", l.node.alias),
                (None, Some(e)) => format!("{} unmeasured ({e})", l.node.alias),
                (None, None) => format!("{} unmeasured", l.node.alias),
            })
            .collect();
        format!(
            "Network check of generation {}: {head}. Measured fractions: {}.",
            self.generation,
            fractions.join(", ")
        )
    }
}

/// Judges `reports` (by sender instance id) of generation `generation`
/// against `check`: each node's Gbit/s over the reference (the expected
/// figure capped at [`PROBE_CEILING_GBPS`], or without one the median of
/// the measured nodes); a node below `check.min_fraction` (strictly) is
/// slow. A node without a report, or whose probe failed, is named as
/// unmeasured and not judged slow: which end of its link failed is not known.
pub fn judge(
    check: &NetworkCheck,
    generation: u64,
    nodes: &[GateNode],
    reports: &BTreeMap<String, LinkReport>,
) -> Verdict {
    let alias_of = |id: &str| nodes.iter().find(|n| n.instance_id == id).map(|n| n.alias.clone());
    let measured: Vec<f64> = nodes
        .iter()
        .filter_map(|n| reports.get(&n.instance_id).and_then(LinkReport::gbps))
        .filter(|g| g.is_finite())
        .collect();
    let reference = match check.expected_gbps {
        Some(g) => Reference::Expected(g.min(PROBE_CEILING_GBPS)),
        None if measured.is_empty() => Reference::None,
        None => {
            let mut sorted = measured.clone();
            sorted.sort_by(f64::total_cmp);
            Reference::Median(sorted[sorted.len() / 2])
        }
    };
    let base = match reference {
        Reference::Expected(g) | Reference::Median(g) => Some(g),
        Reference::None => None,
    };
    let links = nodes
        .iter()
        .map(|n| {
            let report = reports.get(&n.instance_id);
            let gbps = report.and_then(LinkReport::gbps).filter(|g| g.is_finite());
            let fraction = gbps.zip(base).map(|(g, b)| g / b);
            let error = match report {
                None => Some("no report".to_string()),
                Some(r) if gbps.is_none() => Some(r.error.clone().unwrap_or_else(|| "nothing measured".into())),
                Some(_) => None,
            };
            JudgedLink {
                node: n.clone(),
                peer: report.map(|r| alias_of(&r.peer).unwrap_or_else(|| r.peer.clone())),
                gbps,
                fraction,
                slow: fraction.is_some_and(|f| f < check.min_fraction),
                error,
            }
        })
        .collect();
    Verdict { generation, min_fraction: check.min_fraction, reference, links }
}

#[cfg(test)]
mod tests {
    use node_contract::NetworkAction;
    use node_contract::message::worker_alias;

    use super::*;

    fn check(expected: Option<f64>) -> NetworkCheck {
        NetworkCheck { min_fraction: 0.5, action: NetworkAction::Warn, timeout_seconds: 30, expected_gbps: expected }
    }

    fn nodes(n: u32) -> Vec<GateNode> {
        (1..=n)
            .map(|i| GateNode { instance_id: format!("i-{i}"), alias: worker_alias(i), ip: format!("10.0.0.{i}") })
            .collect()
    }

    /// Reports of `gbps` per node (`None`: a failed probe), each to the next.
    fn reports(gbps: &[Option<f64>]) -> BTreeMap<String, LinkReport> {
        let n = gbps.len();
        gbps.iter()
            .enumerate()
            .map(|(i, g)| {
                let id = format!("i-{}", i + 1);
                let report = LinkReport {
                    instance_id: id.clone(),
                    generation: 1,
                    peer: format!("i-{}", (i + 1) % n + 1),
                    // 1 s: bytes = Gbit/s * 125,000,000.
                    bytes: g.map_or(0, |g| (g * 125_000_000.0) as u64),
                    millis: if g.is_some() { 1_000 } else { 0 },
                    error: g.is_none().then(|| "connection refused".to_string()),
                };
                (id, report)
            })
            .collect()
    }

    fn slow_aliases(v: &Verdict) -> Vec<&str> {
        v.slow().map(|l| l.node.alias.as_str()).collect()
    }

    #[test]
    fn the_node_below_the_fraction_of_the_expected_bandwidth_is_named_with_its_fraction() {
        let v = judge(&check(Some(0.4)), 1, &nodes(4), &reports(&[Some(0.4), Some(0.4), Some(0.1), Some(0.38)]));
        assert_eq!(v.reference, Reference::Expected(0.4));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker3"]);
        assert!((v.links[2].fraction.unwrap() - 0.25).abs() < 1e-9);
        let s = v.summary();
        assert!(
            s.contains("deeplearning-worker3 (i-3, 10.0.0.3) sent 0.10 Gbit/s to deeplearning-worker4, 0.25"),
            "{s}"
        );
        assert!(s.contains("deeplearning-worker1 1.00, deeplearning-worker2 1.00, deeplearning-worker3 0.25, deeplearning-worker4 0.95"), "{s}");
    }

    #[test]
    fn without_an_expected_figure_the_median_is_the_reference_and_the_text_says_so() {
        let v = judge(&check(None), 1, &nodes(4), &reports(&[Some(0.4), Some(0.4), Some(0.1), Some(0.4)]));
        assert_eq!(v.reference, Reference::Median(0.4));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker3"]);
        assert!(v.summary().contains("median of the nodes, 0.40 Gbit/s (no expected bandwidth"), "{}", v.summary());
        // An even count: the upper middle, so half the nodes slow is seen.
        let v = judge(&check(None), 1, &nodes(2), &reports(&[Some(0.1), Some(0.4)]));
        assert_eq!(v.reference, Reference::Median(0.4));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker1"]);
        // Every node alike: nobody is slow.
        let v = judge(&check(None), 1, &nodes(3), &reports(&[Some(0.2), Some(0.2), Some(0.2)]));
        assert_eq!(slow_aliases(&v), Vec::<&str>::new());
        assert!(v.summary().contains("no node below 0.50"), "{}", v.summary());
    }

    #[test]
    fn exactly_the_minimum_fraction_is_acceptable() {
        let v = judge(&check(Some(1.0)), 1, &nodes(3), &reports(&[Some(0.5), Some(0.4999), Some(1.0)]));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker2"]);
    }

    #[test]
    fn missing_and_failed_reports_are_named_unmeasured_not_slow() {
        let mut r = reports(&[Some(0.4), None, Some(0.4)]);
        r.remove("i-3");
        let v = judge(&check(Some(0.4)), 1, &nodes(3), &r);
        assert_eq!(slow_aliases(&v), Vec::<&str>::new());
        let s = v.summary();
        assert!(s.contains("deeplearning-worker2 unmeasured (connection refused)"), "{s}");
        assert!(s.contains("deeplearning-worker3 unmeasured (no report)"), "{s}");
        // Nothing measured and no expected figure: no reference at all.
        let v = judge(&check(None), 1, &nodes(2), &BTreeMap::new());
        assert_eq!(v.reference, Reference::None);
        assert_eq!(slow_aliases(&v), Vec::<&str>::new());
    }

    #[test]
    fn an_expected_figure_above_what_the_probe_can_show_is_capped() {
        let v = judge(&check(Some(400.0)), 1, &nodes(2), &reports(&[Some(30.0), Some(10.0)]));
        assert_eq!(v.reference, Reference::Expected(PROBE_CEILING_GBPS));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker2"]);
    }

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

    /// The probe over loopback: the receiver confirms every byte, and the
    /// time covers the whole send.
    #[tokio::test]
    async fn the_probe_measures_over_a_real_socket() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let server = tokio::spawn(serve(port));
        let (bytes, millis) = measure("127.0.0.1", port, 200).await.unwrap();
        server.abort();
        assert!(bytes > 0 && millis >= 200, "{bytes} bytes in {millis} ms");
        // Nobody listening: an error that says so, after the connect time.
        let started = Instant::now();
        let closed = measure_within("127.0.0.1", port, 100, Duration::from_millis(600)).await.unwrap_err();
        assert!(closed.contains("cannot reach the probe listener 127.0.0.1"), "{closed}");
        assert!(started.elapsed() >= Duration::from_millis(600), "{:?}", started.elapsed());
    }
}
