//! Who fetches together, and which of them reads each object from S3.
//!
//! Every node that fetches a data set with [`Fetcher::EveryNode`]
//! announces itself in `$EFS_MOUNT/deeplearning/data/peers/<ip>`
//! ([`announce`], written atomically: its data server's address, its boot
//! id and start time, and whether its data is complete). Each object has
//! one home among the peers, by rendezvous (highest random weight)
//! hashing of the peer's address with the key ([`home`]): every node that
//! knows the same peers picks the same home, and a peer joining or
//! leaving moves only the objects it wins or held. The home reads the
//! object from S3; the others get it from the home.
//!
//! [`PeerView`] is one node's view: re-read every few seconds, so late
//! joiners share; a peer that failed is left out for a while; once some
//! peers are complete, homes are drawn from them alone (a node joining a
//! formed cluster reads nothing from S3).
//!
//! [`Fetcher::EveryNode`]: node_contract::data::Fetcher::EveryNode

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A peer that failed is left out of the homes this long.
pub(crate) const DEAD_FOR: Duration = Duration::from_secs(30);

/// A node's announcement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announcement {
    /// 1.
    pub version: u32,
    /// Its data server.
    pub addr: SocketAddr,
    /// Its boot id (a rebooted node rewrites its file).
    pub boot_id: String,
    /// When it announced itself, unix ms.
    pub started_unix_ms: u64,
    /// Whether it has every object of its data sets.
    pub complete: bool,
}

/// `peers/` under the data directory on EFS.
pub(crate) fn peers_dir(efs_data_dir: &Path) -> PathBuf {
    efs_data_dir.join("peers")
}

/// Writes this node's announcement as `peers/<ip>`, atomically.
pub(crate) fn announce(efs_data_dir: &Path, ip: &str, a: &Announcement) -> Result<(), crate::files::FilesError> {
    let text = serde_json::to_string(a).unwrap_or_default();
    crate::files::atomic::write(&peers_dir(efs_data_dir).join(ip), &text, 0o644)
}

/// Every announcement that reads (a half-written or foreign file is skipped).
pub(crate) fn read(efs_data_dir: &Path) -> Vec<Announcement> {
    let Ok(entries) = std::fs::read_dir(peers_dir(efs_data_dir)) else { return Vec::new() };
    let mut all: Vec<Announcement> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str::<Announcement>(&t).ok())
        .filter(|a| a.version == 1)
        .collect();
    all.sort_by_key(|a| a.addr);
    all.dedup_by_key(|a| a.addr);
    all
}

/// The weight of `peer` for `key`: FNV-1a of both, finished with
/// SplitMix64's mixer (the same on every node and release; no seed).
fn weight(peer: &SocketAddr, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in peer.to_string().bytes().chain([0u8]).chain(key.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The home of `key` among `candidates`: the one of highest weight.
pub(crate) fn home(key: &str, candidates: &[SocketAddr]) -> Option<SocketAddr> {
    candidates.iter().copied().max_by_key(|p| (weight(p, key), *p))
}

/// One node's view of its peers.
#[derive(Debug)]
pub struct PeerView {
    me: SocketAddr,
    efs_data_dir: PathBuf,
    known: RwLock<Vec<Announcement>>,
    dead: Mutex<HashMap<SocketAddr, Instant>>,
}

impl PeerView {
    /// The view of the node serving on `me`, reading announcements under `efs_data_dir`.
    pub fn new(me: SocketAddr, efs_data_dir: &Path) -> PeerView {
        PeerView { me, efs_data_dir: efs_data_dir.to_owned(), known: RwLock::new(Vec::new()), dead: Mutex::default() }
    }

    /// Reads the announcements again.
    pub fn refresh(&self) {
        *self.known.write().unwrap() = read(&self.efs_data_dir);
    }

    /// Leaves `addr` out of the homes for [`DEAD_FOR`].
    pub fn failed(&self, addr: SocketAddr) {
        self.dead.lock().unwrap().insert(addr, Instant::now());
    }

    /// The peers other than this node, as last read.
    pub fn peers(&self) -> Vec<Announcement> {
        self.known.read().unwrap().iter().filter(|a| a.addr != self.me).cloned().collect()
    }

    /// Where to get `key`: `None` when this node is its home (read it
    /// from S3), else the home's address.
    pub fn home_of(&self, key: &str) -> Option<SocketAddr> {
        let dead = self.dead.lock().unwrap();
        let alive = |a: &&Announcement| dead.get(&a.addr).is_none_or(|t| t.elapsed() > DEAD_FOR);
        let known = self.known.read().unwrap();
        let others: Vec<&Announcement> = known.iter().filter(|a| a.addr != self.me).filter(alive).collect();
        let complete: Vec<SocketAddr> = others.iter().filter(|a| a.complete).map(|a| a.addr).collect();
        let candidates =
            if complete.is_empty() { others.iter().map(|a| a.addr).chain([self.me]).collect() } else { complete };
        home(key, &candidates).filter(|h| *h != self.me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, i], 7462))
    }

    /// Homes spread evenly, and a peer leaving moves only the keys it held.
    #[test]
    fn rendezvous_spreads_and_moves_little() {
        let peers: Vec<SocketAddr> = (1..=8).map(addr).collect();
        let keys: Vec<String> = (0..8000).map(|i| format!("train/{i:05}.jpg")).collect();
        let mut per = HashMap::new();
        for k in &keys {
            *per.entry(home(k, &peers).unwrap()).or_insert(0) += 1;
        }
        assert_eq!(per.len(), 8);
        assert!(per.values().all(|n| (800..1200).contains(n)), "{per:?}");
        let fewer: Vec<SocketAddr> = peers.iter().copied().filter(|p| *p != addr(3)).collect();
        for k in &keys {
            let before = home(k, &peers).unwrap();
            if before != addr(3) {
                assert_eq!(home(k, &fewer), Some(before), "{k}");
            }
        }
    }

    #[test]
    fn the_view_prefers_complete_peers_and_skips_dead_ones() {
        let dir = tempfile::tempdir().unwrap();
        let a = |i: u8, complete: bool| Announcement {
            version: 1,
            addr: addr(i),
            boot_id: "b".into(),
            started_unix_ms: 0,
            complete,
        };
        for i in 1..=3 {
            announce(dir.path(), &format!("127.0.0.{i}"), &a(i, false)).unwrap();
        }
        std::fs::write(peers_dir(dir.path()).join("junk"), "{").unwrap();
        let view = PeerView::new(addr(1), dir.path());
        view.refresh();
        assert_eq!(view.peers().len(), 2);
        let keys: Vec<String> = (0..300).map(|i| i.to_string()).collect();
        let homes: Vec<Option<SocketAddr>> = keys.iter().map(|k| view.home_of(k)).collect();
        assert!(homes.contains(&None) && homes.contains(&Some(addr(2))) && homes.contains(&Some(addr(3))));
        view.failed(addr(2));
        assert!(keys.iter().all(|k| view.home_of(k) != Some(addr(2))));
        announce(dir.path(), "127.0.0.3", &a(3, true)).unwrap();
        view.refresh();
        assert!(keys.iter().all(|k| view.home_of(k) == Some(addr(3))));
    }
}
