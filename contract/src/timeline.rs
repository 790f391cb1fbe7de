//! The formation timeline's summary, as the master's success signal
//! carries it in its data under `timeline` (written by the agent, read by
//! `synth deploy` and `synth status`): per phase, in [`PHASES`] order, a
//! [`PhaseSummary`]. The agent's `cluster::timeline` keeps the per-node
//! times it is made from.

use serde::{Deserialize, Serialize};

/// The phases, in the order a node goes through them (the keys of the
/// summary; a table shows them with spaces for underscores).
pub const PHASES: [&str; 6] = ["launched", "booted", "agent_started", "data_ready", "registered", "applied"];

/// One phase of the summary: seconds after the earliest time the master
/// holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// How many nodes have this phase's time.
    pub nodes: usize,
    /// The median (the lower of the middle two for an even count).
    pub median_s: f64,
    /// The slowest.
    pub slowest_s: f64,
    /// The slowest node's alias (the first by alias among equals).
    pub slowest: String,
}

/// What the nodes' data fetches took ([`crate::data::DataReady`] in their
/// registrations), as the success signal carries it under `data`: a few
/// numbers whatever the cluster's size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataSummary {
    /// How many nodes reported a fetch.
    pub nodes: usize,
    /// The most bytes one node holds (every node holds the same data sets
    /// bound for its own disk).
    pub bytes: u64,
    /// Bytes the nodes read from S3 together: about `bytes` when they
    /// fetched together.
    pub bytes_from_s3: u64,
    /// The median node's throughput, GB/s (10^9 bytes a second).
    pub median_gbps: f64,
    /// The slowest fetch, seconds.
    pub slowest_s: f64,
    /// The slowest node's alias.
    pub slowest: String,
}

impl DataSummary {
    /// One line: `150.0 GB on each of 5 nodes, S3 read 1.02x, median 2.10 GB/s, slowest deeplearning-worker3 (72.0 s)`.
    pub fn line(&self) -> String {
        let gb = |b: u64| b as f64 / 1e9;
        let read = if self.bytes == 0 { 0.0 } else { self.bytes_from_s3 as f64 / self.bytes as f64 };
        format!(
            "{:.1} GB on each of {} nodes, S3 read {read:.2}x, median {:.2} GB/s, slowest {} ({:.1} s)",
            gb(self.bytes),
            self.nodes,
            self.median_gbps,
            self.slowest.chars().filter(|c| !c.is_control()).collect::<String>(),
            self.slowest_s
        )
    }
}
