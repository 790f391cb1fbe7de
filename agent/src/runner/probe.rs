//! The network gate's probe on a node (docs/ARCHITECTURE.md, "The network
//! gate"): for a generation the gate checks, the node loop spawns
//! [`probe_link`] beside itself; it waits for this node's phase of the
//! schedule ([`crate::netgate`]), measures the link to its ring neighbour
//! ([`measure`]) and reports it to the master. Every node also runs the
//! listener its predecessor measures against ([`serve`]) while the gate is
//! on. The sockets live here, with the runner, so that the master's pure
//! state machine (which judges the reports) imports none.

use std::time::{Duration, Instant};

use node_contract::clock::Clock;
use node_contract::message::{self, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use super::retry::retry;
use crate::netgate::{self, PROBE_MAX_BYTES, PROBE_STREAMS};
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
    let measured = measure(&peer.private_ip, netgate::PROBE_PORT, netgate::PROBE_MILLIS).await;
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

/// How long the listener keeps one connection (a sender that never stops
/// is cut off).
const SERVE_MAX: Duration = Duration::from_secs(30);

/// Connections the listener serves at once (a node has one predecessor;
/// the rest is a margin for a ring that just changed).
const SERVE_CONNECTIONS: usize = 4 * PROBE_STREAMS;

/// How long the sender tries to reach its neighbour's listener.
const CONNECT_FOR: Duration = Duration::from_secs(10);

/// Serves probes on `port` until the task is dropped: reads each
/// connection to its end (at most [`SERVE_MAX`]) and answers with the
/// bytes read (8 bytes, big-endian).
pub(super) async fn serve(port: u16) -> std::io::Result<()> {
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
async fn measure(peer_ip: &str, port: u16, millis: u64) -> Result<(u64, u64), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
