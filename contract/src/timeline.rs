//! The formation timeline's summary, as the master's success signal
//! carries it in its data under `timeline` (written by the agent, read by
//! `synth deploy` and `synth status`): per phase, in [`PHASES`] order, a
//! [`PhaseSummary`]. The agent's `cluster::timeline` keeps the per-node
//! times it is made from.

use serde::{Deserialize, Serialize};

/// The phases, in the order a node goes through them (the keys of the
/// summary; a table shows them with spaces for underscores).
pub const PHASES: [&str; 5] = ["launched", "booted", "agent_started", "registered", "applied"];

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
