//! How far a node's fetch is: shared counters the fetcher adds to and
//! anyone can read ([`Progress`]), the node's log line ("data: 412 of
//! 1,280 MB, 2.1 GB/s, 7 s left, 38% from peers", [`Progress::line`]), the
//! file it leaves on EFS for the master ([`NodeProgress`], written
//! atomically to `$EFS/deeplearning/data/progress/<ip>.json`), and the
//! cluster's line summed from those files ([`summary_line`]: "data: 412 of
//! 1,280 GB on 16 nodes, 2.1 GB/s, 7 min left").

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Counters of one node's fetch, shared between its tasks.
#[derive(Debug, Default)]
pub struct Progress {
    /// Objects of every data set, once listed.
    pub objects_total: AtomicU64,
    /// Objects complete (fetched or found).
    pub objects_done: AtomicU64,
    /// Bytes of every data set, once listed.
    pub bytes_total: AtomicU64,
    /// Bytes complete (fetched or found).
    pub bytes_done: AtomicU64,
    /// Bytes found complete on disk (an earlier run's).
    pub bytes_found: AtomicU64,
    /// Bytes this node read from S3 (its own objects, and those it
    /// fetched for a peer: pull-through).
    pub bytes_from_s3: AtomicU64,
    /// Bytes this node read from its peers.
    pub bytes_from_peers: AtomicU64,
    /// Bytes this node served to its peers.
    pub bytes_served: AtomicU64,
    /// S3 `GetObject` calls.
    pub s3_gets: AtomicU64,
    /// Objects a peer could not give, read from S3 instead.
    pub peer_fallbacks: AtomicU64,
}

/// One reading of [`Progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// See [`Progress::objects_total`].
    pub objects_total: u64,
    /// See [`Progress::objects_done`].
    pub objects_done: u64,
    /// See [`Progress::bytes_total`].
    pub bytes_total: u64,
    /// See [`Progress::bytes_done`].
    pub bytes_done: u64,
    /// See [`Progress::bytes_found`].
    pub bytes_found: u64,
    /// See [`Progress::bytes_from_s3`].
    pub bytes_from_s3: u64,
    /// See [`Progress::bytes_from_peers`].
    pub bytes_from_peers: u64,
    /// See [`Progress::bytes_served`].
    pub bytes_served: u64,
    /// See [`Progress::s3_gets`].
    pub s3_gets: u64,
    /// See [`Progress::peer_fallbacks`].
    pub peer_fallbacks: u64,
}

impl Progress {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            objects_total: r(&self.objects_total),
            objects_done: r(&self.objects_done),
            bytes_total: r(&self.bytes_total),
            bytes_done: r(&self.bytes_done),
            bytes_found: r(&self.bytes_found),
            bytes_from_s3: r(&self.bytes_from_s3),
            bytes_from_peers: r(&self.bytes_from_peers),
            bytes_served: r(&self.bytes_served),
            s3_gets: r(&self.s3_gets),
            peer_fallbacks: r(&self.peer_fallbacks),
        }
    }
}

impl Snapshot {
    /// The node's line: "data: 412 of 1,280 MB, 2.1 GB/s, 7 s left, 38%
    /// from peers", at `bytes_per_second` (measured by the caller over
    /// its last interval).
    pub fn line(&self, bytes_per_second: f64) -> String {
        let fetched = self.bytes_from_s3 + self.bytes_from_peers;
        let peers = (self.bytes_from_peers * 100).checked_div(fetched).unwrap_or(0);
        let mut line = format!(
            "data: {}, {}, {}, {peers}% from peers, {} of {} objects",
            of(self.bytes_done, self.bytes_total),
            rate(bytes_per_second),
            left(self.bytes_total.saturating_sub(self.bytes_done), bytes_per_second),
            thousands(self.objects_done),
            thousands(self.objects_total),
        );
        if self.peer_fallbacks > 0 {
            line.push_str(&format!(", {} read from S3 after a peer failed", thousands(self.peer_fallbacks)));
        }
        line
    }
}

/// What a node leaves on EFS about its fetch, for the master's summary
/// (`$EFS/deeplearning/data/progress/<ip>.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeProgress {
    /// 1.
    pub version: u32,
    /// The node's private IP.
    pub ip: String,
    /// Bytes of its data sets.
    pub bytes_total: u64,
    /// Bytes complete.
    pub bytes_done: u64,
    /// Bytes it read from S3.
    pub bytes_from_s3: u64,
    /// Bytes it read from its peers.
    pub bytes_from_peers: u64,
    /// Its rate over its last interval.
    pub bytes_per_second: f64,
    /// Whether its data is complete.
    pub done: bool,
    /// When it wrote this, unix ms.
    pub updated_unix_ms: u64,
}

/// The version of [`NodeProgress`] this release writes.
pub(crate) const PROGRESS_VERSION: u32 = 1;

/// `progress/<ip>.json` under the data directory on EFS.
pub(crate) fn progress_path(efs_data_dir: &Path, ip: &str) -> PathBuf {
    efs_data_dir.join("progress").join(format!("{ip}.json"))
}

/// Writes a node's progress file atomically.
pub(crate) fn write_progress(efs_data_dir: &Path, progress: &NodeProgress) -> Result<(), crate::files::FilesError> {
    let text = serde_json::to_string(progress).unwrap_or_default();
    crate::files::atomic::write(&progress_path(efs_data_dir, &progress.ip), &text, 0o644)
}

/// Every node's progress file that reads (others are skipped), by IP.
pub fn read_progress(efs_data_dir: &Path) -> Vec<NodeProgress> {
    let Ok(entries) = std::fs::read_dir(efs_data_dir.join("progress")) else { return Vec::new() };
    let mut all: Vec<NodeProgress> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str::<NodeProgress>(&t).ok())
        .filter(|p| p.version == PROGRESS_VERSION)
        .collect();
    all.sort_by(|a, b| a.ip.cmp(&b.ip));
    all
}

/// The cluster's line from its nodes' progress: "data: 412 of 1,280 GB
/// on 16 nodes (3 done), 2.1 GB/s, 7 min left, 1.0x the data set read
/// from S3". The time left is the slowest node's (the cluster is ready
/// when its last node is). A node whose file is older than `stale_ms`
/// at `now_ms` (it stopped, or it is gone) counts for its bytes but not
/// its rate, and is named.
pub fn summary_line(nodes: &[NodeProgress], now_ms: u64, stale_ms: u64) -> String {
    if nodes.is_empty() {
        return "data: no node has reported yet".to_owned();
    }
    let total: u64 = nodes.iter().map(|n| n.bytes_total).sum();
    let done: u64 = nodes.iter().map(|n| n.bytes_done).sum();
    let from_s3: u64 = nodes.iter().map(|n| n.bytes_from_s3).sum();
    let finished = nodes.iter().filter(|n| n.done).count();
    let fresh = |n: &&NodeProgress| now_ms.saturating_sub(n.updated_unix_ms) <= stale_ms;
    let speed: f64 = nodes.iter().filter(|n| !n.done).filter(fresh).map(|n| n.bytes_per_second).sum();
    let slowest = nodes
        .iter()
        .filter(|n| !n.done)
        .map(|n| seconds_left(n.bytes_total.saturating_sub(n.bytes_done), n.bytes_per_second))
        .try_fold(0.0f64, |a, b| Some(a.max(b?)));
    let time = if finished == nodes.len() {
        "complete".to_owned()
    } else {
        match slowest {
            Some(s) if fresh_all(nodes, now_ms, stale_ms) => format!("{} left", duration(s)),
            _ => "time left unknown".to_owned(),
        }
    };
    // One data set's bytes: the largest node's total (every node fetches
    // the same sets; a node that has listed nothing yet shows 0).
    let one_copy = nodes.iter().map(|n| n.bytes_total).max().unwrap_or(0);
    let reads = if one_copy == 0 {
        String::new()
    } else {
        format!(", {:.1}x the data read from S3", from_s3 as f64 / one_copy as f64)
    };
    let stale: Vec<&str> = nodes.iter().filter(|n| !n.done && !fresh(n)).map(|n| n.ip.as_str()).collect();
    let stale =
        if stale.is_empty() { String::new() } else { format!("; no word for a while from {}", stale.join(", ")) };
    let count = if nodes.len() == 1 { "1 node".to_owned() } else { format!("{} nodes", thousands(nodes.len() as u64)) };
    format!("data: {} on {count} ({finished} done), {}, {time}{reads}{stale}", of(done, total), rate(speed))
}

fn fresh_all(nodes: &[NodeProgress], now_ms: u64, stale_ms: u64) -> bool {
    nodes.iter().filter(|n| !n.done).all(|n| now_ms.saturating_sub(n.updated_unix_ms) <= stale_ms)
}

fn seconds_left(remaining: u64, bytes_per_second: f64) -> Option<f64> {
    if remaining == 0 {
        Some(0.0)
    } else if bytes_per_second > 0.0 {
        Some(remaining as f64 / bytes_per_second)
    } else {
        None
    }
}

fn left(remaining: u64, bytes_per_second: f64) -> String {
    match seconds_left(remaining, bytes_per_second) {
        Some(s) => format!("{} left", duration(s)),
        None => "time left unknown".to_owned(),
    }
}

/// "7 s", "7 min", "1 h 5 min".
fn duration(seconds: f64) -> String {
    let s = seconds.ceil() as u64;
    if s < 120 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", s.div_ceil(60))
    } else {
        format!("{} h {} min", s / 3600, (s % 3600).div_ceil(60))
    }
}

/// "412 of 1,280 MB": both in the unit that keeps the total under 10,000.
fn of(done: u64, total: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut unit = 0;
    let mut scale = 1u64;
    while unit + 1 < UNITS.len() && total / scale >= 10_000 {
        unit += 1;
        scale *= 1000;
    }
    format!("{} of {} {}", thousands(done / scale), thousands(total / scale), UNITS[unit])
}

/// "2.1 GB/s", "350.0 MB/s", "0 B/s".
fn rate(bytes_per_second: f64) -> String {
    let b = bytes_per_second.max(0.0);
    if b >= 1e9 {
        format!("{:.1} GB/s", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB/s", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB/s", b / 1e3)
    } else {
        format!("{b:.0} B/s")
    }
}

/// 1280 -> "1,280".
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_line() {
        let s = Snapshot {
            objects_total: 1280,
            objects_done: 412,
            bytes_total: 1_280_000_000,
            bytes_done: 412_000_000,
            bytes_from_s3: 62_000_000,
            bytes_from_peers: 38_000_000,
            ..Snapshot::default()
        };
        assert_eq!(
            s.line(124_000_000.0),
            "data: 412 of 1,280 MB, 124.0 MB/s, 7 s left, 38% from peers, 412 of 1,280 objects"
        );
        let stalled = Snapshot { peer_fallbacks: 3, ..s };
        assert!(stalled.line(0.0).contains("time left unknown, 38% from peers"), "{}", stalled.line(0.0));
        assert!(stalled.line(0.0).ends_with(", 3 read from S3 after a peer failed"));
    }

    fn node(ip: &str, done: u64, total: u64, rate: f64, updated: u64) -> NodeProgress {
        NodeProgress {
            version: PROGRESS_VERSION,
            ip: ip.into(),
            bytes_total: total,
            bytes_done: done,
            bytes_from_s3: done / 4,
            bytes_from_peers: done - done / 4,
            bytes_per_second: rate,
            done: done == total,
            updated_unix_ms: updated,
        }
    }

    #[test]
    fn the_clusters_line_sums_its_nodes() {
        let gb = 1_000_000_000u64;
        let nodes: Vec<NodeProgress> =
            (0..16).map(|i| node(&format!("10.0.0.{i}"), 25 * gb + i * gb / 2, 80 * gb, 131e6, 1_000)).collect();
        let line = summary_line(&nodes, 5_000, 30_000);
        assert_eq!(
            line,
            "data: 460 of 1,280 GB on 16 nodes (0 done), 2.1 GB/s, 7 min left, 1.4x the data read from S3"
        );
        assert_eq!(summary_line(&[], 0, 0), "data: no node has reported yet");

        // One node silent for a minute: named, no time given.
        let mut quiet: Vec<NodeProgress> =
            nodes.iter().map(|n| NodeProgress { updated_unix_ms: 60_000, ..n.clone() }).collect();
        quiet[3].updated_unix_ms = 0;
        let line = summary_line(&quiet, 61_000, 30_000);
        assert!(line.contains("time left unknown") && line.ends_with("no word for a while from 10.0.0.3"), "{line}");

        let all_done: Vec<NodeProgress> = (0..2).map(|i| node(&format!("10.0.0.{i}"), gb, gb, 0.0, 0)).collect();
        assert_eq!(
            summary_line(&all_done, 99_000, 30_000),
            "data: 2,000 of 2,000 MB on 2 nodes (2 done), 0 B/s, complete, 0.5x the data read from S3"
        );
    }

    #[test]
    fn progress_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = node("10.0.0.7", 5, 10, 1.0, 3);
        write_progress(dir.path(), &p).unwrap();
        std::fs::write(dir.path().join("progress/garbage.json"), "{").unwrap();
        assert_eq!(read_progress(dir.path()), vec![p]);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(duration(3_700.0), "1 h 2 min");
    }
}
