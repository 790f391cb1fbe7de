//! The CPU collective: a ring all-reduce (reduce-scatter, then all-gather)
//! and a ring broadcast over plain TCP between the ranks of one group.
//!
//! Inputs: a [`Group`] (every rank's data-plane address, from the
//! rendezvous), the rendezvous round the group was formed in, and this
//! rank's data-plane [`TcpListener`], bound once for the life of the process
//! and reused by every group. Each rank opens one connection to the next
//! rank and accepts one from the previous rank; both ends first exchange a
//! small handshake (magic, protocol version, generation, round, rank, world
//! size), so that a connection left over from an earlier group (a slow or
//! stale peer) is refused instead of mixing two groups' data.
//!
//! Every socket has read and write timeouts: a host that dies without closing
//! its sockets (power loss, SIGSTOP) is reported as
//! [`CollectiveError::Timeout`] naming the peer, a closed one as
//! [`CollectiveError::Peer`]. The elastic layer treats both as a leave.
//!
//! The buffer is cut into `world_size` segments (sizes differing by at most
//! one element; empty when the buffer is shorter than the group). In each
//! ring step a rank sends one segment to the next rank on a scoped thread
//! while it receives another from the previous rank in chunks and adds each
//! chunk as soon as it has arrived, so summing overlaps the transfer and a
//! large buffer moves at close to link speed. Each segment is summed once, on
//! its way round the ring, in an order fixed by the group, and then copied to
//! every rank: all ranks end bit-identical.
//!
//! Wire format: little-endian `f32` (every platform this runs on).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::collective::{Collective, CollectiveError, Group};

/// First bytes of every ring handshake.
const MAGIC: [u8; 8] = *b"DLRING\r\n";
/// The ring protocol this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Handshake length: magic, version (u32), generation (u64), round (u64), rank (u32), world size (u32).
const HELLO_LEN: usize = 8 + 4 + 8 + 8 + 4 + 4;

#[cfg(target_endian = "big")]
compile_error!("the ring sends f32 in native byte order and assumes little-endian hosts");

/// Timing of the ring's sockets.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// How long connecting to the next rank and accepting the previous one may take.
    pub connect_timeout: Duration,
    /// Read/write timeout of every socket: a peer silent this long is gone.
    pub io_timeout: Duration,
    /// Elements per received chunk (summed while the next chunk is in flight).
    pub chunk_elems: usize,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self { connect_timeout: Duration::from_secs(30), io_timeout: Duration::from_secs(20), chunk_elems: 64 * 1024 }
    }
}

/// A connected ring: this rank's connections to the next and previous ranks.
#[derive(Debug)]
pub struct Ring {
    rank: usize,
    world_size: usize,
    peers: Vec<SocketAddr>,
    io_timeout: Duration,
    chunk_elems: usize,
    /// To `rank + 1` (absent in a group of one).
    next: Option<TcpStream>,
    /// From `rank - 1`.
    prev: Option<TcpStream>,
    /// Receive buffer, reused across operations.
    scratch: Vec<f32>,
}

/// The handshake both ends of a ring connection send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hello {
    version: u32,
    generation: u64,
    round: u64,
    rank: u32,
    world_size: u32,
}

impl Hello {
    fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..20].copy_from_slice(&self.generation.to_le_bytes());
        b[20..28].copy_from_slice(&self.round.to_le_bytes());
        b[28..32].copy_from_slice(&self.rank.to_le_bytes());
        b[32..36].copy_from_slice(&self.world_size.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello, String> {
        if b[..8] != MAGIC {
            return Err("not a ring connection (bad magic)".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Hello {
            version: u32_at(8),
            generation: u64_at(12),
            round: u64_at(20),
            rank: u32_at(28),
            world_size: u32_at(32),
        })
    }

    /// Why `self` (received) does not belong to the group `want` describes, if it does not.
    fn mismatch(&self, want: &Hello) -> Option<String> {
        if self.version != want.version {
            Some(format!("ring protocol {} (this build speaks {})", self.version, want.version))
        } else if (self.generation, self.round) != (want.generation, want.round) {
            Some(format!(
                "generation {} round {} (this group is generation {} round {}): a stale peer",
                self.generation, self.round, want.generation, want.round
            ))
        } else if self.rank != want.rank || self.world_size != want.world_size {
            Some(format!(
                "rank {} of {} (expected rank {} of {})",
                self.rank, self.world_size, want.rank, want.world_size
            ))
        } else {
            None
        }
    }
}

/// Segment `i` of `n` of a buffer of `len` elements: sizes differ by at most one.
pub fn segment(len: usize, n: usize, i: usize) -> Range<usize> {
    (len * i / n)..(len * (i + 1) / n)
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

impl Ring {
    /// Connects the ring of `group` (formed in rendezvous `round`): connects to
    /// the next rank, accepts the previous one on `listener` (refusing and
    /// logging connections from other groups), both within
    /// `config.connect_timeout`.
    pub fn connect(
        group: &Group,
        round: u64,
        listener: &TcpListener,
        config: &RingConfig,
    ) -> Result<Ring, CollectiveError> {
        let n = group.world_size;
        let mut ring = Ring {
            rank: group.rank,
            world_size: n,
            peers: group.peers.clone(),
            io_timeout: config.io_timeout,
            chunk_elems: config.chunk_elems.max(1),
            next: None,
            prev: None,
            scratch: Vec::new(),
        };
        if group.peers.len() != n || group.rank >= n {
            return Err(CollectiveError::Protocol {
                peer: group.rank,
                reason: format!("group of {n} with {} peer addresses and rank {}", group.peers.len(), group.rank),
            });
        }
        if n == 1 {
            return Ok(ring);
        }
        let deadline = Instant::now() + config.connect_timeout;
        let me = |rank: usize| Hello {
            version: PROTOCOL_VERSION,
            generation: group.generation,
            round,
            rank: rank as u32,
            world_size: n as u32,
        };
        let next_rank = (group.rank + 1) % n;
        let prev_rank = (group.rank + n - 1) % n;
        // Send our hello first and read the acceptor's reply only after accepting
        // our own previous rank: every rank connects before it waits, so no cycle.
        let mut next = ring.dial(next_rank, deadline)?;
        ring.write_to(&mut next, next_rank, &me(group.rank).encode())?;
        let prev = ring.accept(listener, &me(prev_rank), &me(group.rank), deadline)?;
        let mut reply = [0u8; HELLO_LEN];
        ring.read_from(&mut next, next_rank, &mut reply)?;
        let hello = Hello::decode(&reply).map_err(|reason| CollectiveError::Protocol { peer: next_rank, reason })?;
        if let Some(reason) = hello.mismatch(&me(next_rank)) {
            return Err(CollectiveError::Protocol { peer: next_rank, reason });
        }
        ring.next = Some(next);
        ring.prev = Some(prev);
        Ok(ring)
    }

    fn peer_addr(&self, peer: usize) -> String {
        self.peers.get(peer).map(ToString::to_string).unwrap_or_default()
    }

    /// The error for a failed read or write with `peer`.
    fn io_error(&self, peer: usize, source: io::Error) -> CollectiveError {
        if timed_out(&source) {
            CollectiveError::Timeout { peer, addr: self.peer_addr(peer), seconds: self.io_timeout.as_secs() }
        } else {
            CollectiveError::Peer { peer, addr: self.peer_addr(peer), source }
        }
    }

    fn configure(&self, s: &TcpStream) -> io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(self.io_timeout))?;
        s.set_write_timeout(Some(self.io_timeout))
    }

    /// Connects to `peer`, retrying until `deadline` (it may not listen yet).
    fn dial(&self, peer: usize, deadline: Instant) -> Result<TcpStream, CollectiveError> {
        let addr = self.peers[peer];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let err = match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
                Ok(s) => {
                    self.configure(&s).map_err(|e| self.io_error(peer, e))?;
                    return Ok(s);
                }
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.io_error(peer, io::Error::new(io::ErrorKind::TimedOut, err)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Accepts the previous rank's connection, refusing any other.
    fn accept(
        &self,
        listener: &TcpListener,
        want: &Hello,
        reply: &Hello,
        deadline: Instant,
    ) -> Result<TcpStream, CollectiveError> {
        let peer = want.rank as usize;
        listener.set_nonblocking(true).map_err(|e| self.io_error(peer, e))?;
        loop {
            match listener.accept() {
                Ok((mut s, from)) => {
                    let mut b = [0u8; HELLO_LEN];
                    let checked = self
                        .configure(&s)
                        .and_then(|()| s.set_read_timeout(Some(self.io_timeout.min(Duration::from_secs(5)))))
                        .and_then(|()| s.read_exact(&mut b))
                        .map_err(|e| e.to_string())
                        .and_then(|()| Hello::decode(&b))
                        .and_then(|h| h.mismatch(want).map_or(Ok(()), Err));
                    match checked {
                        Ok(()) => {
                            self.configure(&s).map_err(|e| self.io_error(peer, e))?;
                            self.write_to(&mut s, peer, &reply.encode())?;
                            return Ok(s);
                        }
                        Err(reason) => {
                            tracing::warn!(%from, generation = want.generation, round = want.round, "refused a ring connection: {reason}");
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(CollectiveError::Timeout {
                            peer,
                            addr: self.peer_addr(peer),
                            seconds: self.io_timeout.as_secs(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(self.io_error(peer, e)),
            }
        }
    }

    fn write_to(&self, s: &mut TcpStream, peer: usize, bytes: &[u8]) -> Result<(), CollectiveError> {
        s.write_all(bytes).map_err(|e| self.io_error(peer, e))
    }

    fn read_from(&self, s: &mut TcpStream, peer: usize, bytes: &mut [u8]) -> Result<(), CollectiveError> {
        s.read_exact(bytes).map_err(|e| self.io_error(peer, e))
    }

    fn next_rank(&self) -> usize {
        (self.rank + 1) % self.world_size
    }

    fn prev_rank(&self) -> usize {
        (self.rank + self.world_size - 1) % self.world_size
    }

    /// Sends `buf` around the ring from `root` (each rank forwards to the next).
    fn relay(&mut self, buf: &mut [f32], root: usize) -> Result<(), CollectiveError> {
        let (next_rank, prev_rank) = (self.next_rank(), self.prev_rank());
        let last = (root + self.world_size - 1) % self.world_size;
        let chunk = self.chunk_elems;
        let (Some(next), Some(prev)) = (self.next.as_mut(), self.prev.as_mut()) else {
            return Err(self.io_error(
                next_rank,
                io::Error::new(io::ErrorKind::NotConnected, "the ring was shut down after a failure"),
            ));
        };
        let (mut send_err, mut recv_err) = (None, None);
        for part in buf.chunks_mut(chunk) {
            if self.rank != root
                && let Err(e) = prev.read_exact(bytemuck::cast_slice_mut(part))
            {
                recv_err = Some(e);
                break;
            }
            if self.rank != last
                && let Err(e) = next.write_all(bytemuck::cast_slice(part))
            {
                send_err = Some(e);
                break;
            }
        }
        if let Some(e) = recv_err {
            return Err(self.io_error(prev_rank, e));
        }
        send_err.map_or(Ok(()), |e| Err(self.io_error(next_rank, e)))
    }
}

impl Ring {
    /// Shuts both connections down: the neighbours' next operation fails at
    /// once (a rank leaving, or after a failure) instead of timing out.
    pub fn close(&mut self) {
        for s in [self.next.take(), self.prev.take()].into_iter().flatten() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// After a failure: closes the ring so the neighbours fail at once too.
    fn abort<T>(&mut self, result: Result<T, CollectiveError>) -> Result<T, CollectiveError> {
        if result.is_err() {
            self.close();
        }
        result
    }

    /// Reduce-scatter then all-gather, as one pipeline of `2(n - 1)` steps:
    /// step `k` sends segment `r - k` and receives segment `r - k - 1` (added
    /// during the first `n - 1` steps, copied after). What step `k + 1` sends
    /// is what step `k` received, so the sender thread sends each chunk as
    /// soon as the receiver has finished it, instead of waiting for the whole
    /// step: the link never idles while the data in flight drains.
    fn reduce_scatter_all_gather(&mut self, buf: &mut [f32]) -> Result<(), CollectiveError> {
        let n = self.world_size;
        let (len, r) = (buf.len(), self.rank);
        let (next_rank, prev_rank) = (self.next_rank(), self.prev_rank());
        let chunk = self.chunk_elems;
        let steps = 2 * (n - 1);
        let seg = |k: usize| segment(len, n, (r + 2 * n - k % n) % n);
        let sends: Vec<Range<usize>> = (0..steps).map(seg).collect();
        let recvs: Vec<Range<usize>> = (0..steps).map(|k| seg(k + 1)).collect();
        // Elements received in all steps before step k.
        let before: Vec<usize> = recvs.iter().scan(0, |acc, r| Some(std::mem::replace(acc, *acc + r.len()))).collect();
        if self.scratch.len() < chunk {
            self.scratch.resize(chunk, 0.0);
        }
        let not_connected = || io::Error::new(io::ErrorKind::NotConnected, "the ring was shut down after a failure");
        let (Some(next), Some(prev)) = (self.next.as_mut(), self.prev.as_mut()) else {
            return Err(self.io_error(next_rank, not_connected()));
        };
        let prev_handle = prev.try_clone().map_err(|e| CollectiveError::Peer {
            peer: prev_rank,
            addr: self.peers[prev_rank].to_string(),
            source: e,
        })?;
        let progress = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let base = SharedBuf(buf.as_mut_ptr());
        let scratch = &mut self.scratch[..chunk];
        let (sent, received) = std::thread::scope(|scope| {
            let (progress, failed, sends, before, base) = (&progress, &failed, &sends, &before, &base);
            let sender = scope.spawn(move || -> io::Result<()> {
                for (k, range) in sends.iter().enumerate() {
                    let mut at = range.start;
                    while at < range.end {
                        let end = (at + chunk).min(range.end);
                        if k > 0 {
                            // Wait until step k - 1 received this chunk (same segment).
                            let need = before[k - 1] + (end - range.start);
                            while progress.load(Ordering::Acquire) < need {
                                if failed.load(Ordering::Acquire) {
                                    return Err(io::Error::other("the receiving side failed"));
                                }
                                std::thread::park_timeout(Duration::from_millis(20));
                            }
                        }
                        // SAFETY: elements at..end are complete (received and published
                        // with Release above, or our own input at step 0) and nobody
                        // writes them until they have gone round the ring, which needs
                        // this write to finish first.
                        let part = unsafe { std::slice::from_raw_parts(base.0.add(at), end - at) };
                        if let Err(e) = next.write_all(bytemuck::cast_slice(part)) {
                            // Unblock our receiver too: this ring is finished.
                            let _ = prev_handle.shutdown(std::net::Shutdown::Both);
                            return Err(e);
                        }
                        at = end;
                    }
                }
                Ok(())
            });
            let sender_thread = sender.thread().clone();
            let mut received = Ok(());
            'steps: for (k, range) in recvs.iter().enumerate() {
                let mut at = range.start;
                while at < range.end {
                    let end = (at + chunk).min(range.end);
                    // SAFETY: at..end is the segment being received; the sender reads
                    // it only after `progress` covers it (published below).
                    let part = unsafe { std::slice::from_raw_parts_mut(base.0.add(at), end - at) };
                    // Reduce-scatter steps add what arrives; all-gather steps
                    // receive the finished sums straight into place.
                    let read = if k < n - 1 {
                        let tmp = &mut scratch[..end - at];
                        prev.read_exact(bytemuck::cast_slice_mut(tmp)).map(|()| {
                            part.iter_mut().zip(tmp.iter()).for_each(|(a, b)| *a += *b);
                        })
                    } else {
                        prev.read_exact(bytemuck::cast_slice_mut(part))
                    };
                    if let Err(e) = read {
                        received = Err(e);
                        break 'steps;
                    }
                    progress.store(before[k] + (end - range.start), Ordering::Release);
                    sender_thread.unpark();
                    at = end;
                }
            }
            if received.is_err() {
                failed.store(true, Ordering::Release);
                sender_thread.unpark();
            }
            (sender.join().unwrap_or_else(|_| Err(io::Error::other("ring sender thread panicked"))), received)
        });
        received.map_err(|e| self.io_error(prev_rank, e))?;
        sent.map_err(|e| self.io_error(next_rank, e))
    }
}

/// The all-reduce buffer, shared by the sender thread (reading finished
/// chunks) and the receiving thread (writing new ones) under the ordering
/// `reduce_scatter_all_gather` describes.
struct SharedBuf(*mut f32);
// SAFETY: access is coordinated through the progress counter (see above).
unsafe impl Sync for SharedBuf {}
unsafe impl Send for SharedBuf {}

impl Collective<[f32]> for Ring {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CollectiveError> {
        if self.world_size == 1 {
            return Ok(());
        }
        let result = self.reduce_scatter_all_gather(buf);
        self.abort(result)
    }

    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<(), CollectiveError> {
        if root >= self.world_size {
            return Err(CollectiveError::Protocol {
                peer: root,
                reason: format!("no rank {root} in a group of {}", self.world_size),
            });
        }
        if self.world_size == 1 {
            return Ok(());
        }
        let result = self.relay(buf, root);
        self.abort(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_buffer_and_differ_by_at_most_one() {
        for len in [0usize, 1, 2, 3, 7, 10, 1001] {
            for n in 1..6 {
                let segs: Vec<_> = (0..n).map(|i| segment(len, n, i)).collect();
                assert_eq!(segs[0].start, 0);
                assert_eq!(segs[n - 1].end, len);
                for w in segs.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                let (min, max) = (segs.iter().map(|s| s.len()).min(), segs.iter().map(|s| s.len()).max());
                assert!(max.unwrap() - min.unwrap() <= 1, "len {len} n {n}: {segs:?}");
            }
        }
    }

    #[test]
    fn handshake_round_trips_and_names_a_stale_peer() {
        let h = Hello { version: PROTOCOL_VERSION, generation: 3, round: 5, rank: 1, world_size: 4 };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let stale = Hello { round: 4, ..h };
        assert!(stale.mismatch(&h).unwrap().contains("stale"));
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Hello::decode(&bad).unwrap_err().contains("magic"));
    }
}
