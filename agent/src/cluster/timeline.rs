//! The formation timeline: when each node reached each phase, as the master
//! knows it (docs/ARCHITECTURE.md, "Membership rules").
//!
//! What the master knows without new messages or AWS calls:
//!
//! - **launched**: when EC2 launched the instance (or last started it),
//!   `pendingTime` of the instance identity document the node reads from
//!   IMDS, whole seconds, from its `register` (message version 7);
//! - **booted** and **agent started**: the kernel's boot time (`btime` in
//!   `proc/stat` under the agent's root) and when the agent started, its
//!   own as it notes them, a worker's from its `register` (message version
//!   6; no extra call), by the worker's clock (EC2 instances keep theirs in
//!   step with the Amazon Time Sync Service, within a millisecond or so);
//! - **data ready**: when the node's data sets were complete on it, by its
//!   clock, from its `register` (message version 11), with what the fetch
//!   took (bytes, bytes read from S3, milliseconds);
//! - **registered**: when the master read the node's admitted `register`
//!   (the master's own: when its state was made);
//! - **applied**: when the master read the node's first `applied` after it
//!   was admitted.
//!
//! One entry per member: a node that leaves is dropped, a rebooted one
//! starts again from its new registration.

use std::collections::BTreeMap;

use node_contract::message::Register;
use serde::{Deserialize, Serialize};

use node_contract::data::DataReady;
pub use node_contract::timeline::{DataSummary, PHASES, PhaseSummary};

/// One node's times (unix milliseconds); `None`: not known to the master.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTimes {
    /// The node's alias when it was admitted (`deeplearning-workerN`).
    pub alias: String,
    /// Absent from a master state written before version 7.
    #[serde(default)]
    pub launched_ms: Option<u64>,
    /// When the node's kernel booted.
    pub booted_ms: Option<u64>,
    /// When its agent started.
    pub agent_started_ms: Option<u64>,
    /// Absent from a master state written before data sets.
    #[serde(default)]
    pub data_ready_ms: Option<u64>,
    /// What the node's data fetch took.
    #[serde(default)]
    pub data: Option<DataReady>,
    /// When the master admitted it.
    pub registered_ms: Option<u64>,
    /// When the master first heard it applied a manifest.
    pub applied_ms: Option<u64>,
}

impl NodeTimes {
    /// The phases' times in [`PHASES`] order.
    pub fn phases(&self) -> [Option<u64>; 6] {
        [
            self.launched_ms,
            self.booted_ms,
            self.agent_started_ms,
            self.data_ready_ms,
            self.registered_ms,
            self.applied_ms,
        ]
    }
}

/// Every member's [`NodeTimes`], by instance id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    nodes: BTreeMap<String, NodeTimes>,
}

impl Timeline {
    /// A member was admitted (or registered from a new boot): its entry
    /// starts again with `registered_ms`, and the launch, boot and agent
    /// start its registration reports (the master's own too: it registers
    /// itself).
    pub fn registered(&mut self, r: &Register, alias: String, registered_ms: u64) {
        let times = NodeTimes {
            alias,
            launched_ms: r.launched_unix_ms,
            booted_ms: r.booted_unix_ms,
            agent_started_ms: r.agent_started_unix_ms,
            data_ready_ms: r.data.as_ref().map(|d| d.ready_unix_ms),
            data: r.data.clone(),
            registered_ms: Some(registered_ms),
            applied_ms: None,
        };
        self.nodes.insert(r.instance_id.clone(), times);
    }

    /// A member's `applied`: only its first one after it registered counts.
    pub fn applied(&mut self, instance_id: &str, applied_ms: u64) {
        if let Some(n) = self.nodes.get_mut(instance_id)
            && n.applied_ms.is_none()
        {
            n.applied_ms = Some(applied_ms);
        }
    }

    /// A member left: its entry goes.
    pub fn remove(&mut self, instance_id: &str) {
        self.nodes.remove(instance_id);
    }

    /// The entries, by instance id.
    pub fn nodes(&self) -> &BTreeMap<String, NodeTimes> {
        &self.nodes
    }

    /// The earliest time held (every summary counts from it).
    pub fn origin_ms(&self) -> Option<u64> {
        self.nodes.values().flat_map(|n| n.phases()).flatten().min()
    }

    /// Per phase with at least one time: the median and slowest seconds
    /// after [`Timeline::origin_ms`], and the slowest node. Small whatever
    /// the cluster's size (it goes into the formation signal).
    pub fn summary(&self) -> BTreeMap<&'static str, PhaseSummary> {
        let Some(origin) = self.origin_ms() else { return BTreeMap::new() };
        let mut out = BTreeMap::new();
        for (i, phase) in PHASES.iter().enumerate() {
            let mut times: Vec<(u64, &str)> = self
                .nodes
                .values()
                .filter_map(|n| n.phases()[i].map(|t| (t.saturating_sub(origin), n.alias.as_str())))
                .collect();
            if times.is_empty() {
                continue;
            }
            // Ascending by time; among equal times the first alias is the slowest.
            times.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)));
            let median = times[(times.len() - 1) / 2].0;
            let (slowest, alias) = times[times.len() - 1];
            out.insert(
                *phase,
                PhaseSummary {
                    nodes: times.len(),
                    median_s: seconds(median),
                    slowest_s: seconds(slowest),
                    slowest: alias.to_string(),
                },
            );
        }
        out
    }

    /// What the members' data fetches took; `None` when no member reported
    /// one (a cluster without data sets).
    pub fn data_summary(&self) -> Option<DataSummary> {
        let mut fetches: Vec<(&DataReady, &str)> =
            self.nodes.values().filter_map(|n| n.data.as_ref().map(|d| (d, n.alias.as_str()))).collect();
        if fetches.is_empty() {
            return None;
        }
        let mut rates: Vec<f64> = fetches.iter().map(|(d, _)| gbps(d)).collect();
        rates.sort_by(f64::total_cmp);
        // Slowest first; among equal times the first alias.
        fetches.sort_by(|a, b| b.0.millis.cmp(&a.0.millis).then(a.1.cmp(b.1)));
        let (slowest, alias) = fetches[0];
        Some(DataSummary {
            nodes: fetches.len(),
            bytes: fetches.iter().map(|(d, _)| d.bytes).max().unwrap_or(0),
            bytes_from_s3: fetches.iter().map(|(d, _)| d.bytes_from_s3).sum(),
            median_gbps: (rates[(rates.len() - 1) / 2] * 100.0).round() / 100.0,
            slowest_s: seconds(slowest.millis),
            slowest: alias.to_string(),
        })
    }

    /// The phase table `agent status` prints: one line a node, seconds after
    /// [`Timeline::origin_ms`], "-" where the master does not know.
    pub fn table(&self) -> String {
        let origin = self.origin_ms().unwrap_or(0);
        let mut text = format!(
            "formation timeline (seconds after {} ms since the epoch; - : not known to the master)\n{:<24} {:>8} {:>8} {:>14} {:>10} {:>11} {:>8}  {}\n",
            origin, "node", "launched", "booted", "agent_started", "data_ready", "registered", "applied", "data"
        );
        let mut rows: Vec<&NodeTimes> = self.nodes.values().collect();
        rows.sort_by(|a, b| a.alias.cmp(&b.alias));
        for n in rows {
            let [l, b, s, d, r, a] =
                n.phases().map(|t| t.map_or("-".to_string(), |t| format!("{:.1}", seconds(t.saturating_sub(origin)))));
            let data = n.data.as_ref().map_or("-".to_string(), |f| {
                format!("{:.2} GB in {:.1} s ({:.2} GB/s)", f.bytes as f64 / 1e9, seconds(f.millis), gbps(f))
            });
            text.push_str(&format!("{:<24} {l:>8} {b:>8} {s:>14} {d:>10} {r:>11} {a:>8}  {data}\n", n.alias));
        }
        text
    }
}

/// A fetch's throughput, GB/s (10^9 bytes a second; 0 for an instant one).
fn gbps(d: &DataReady) -> f64 {
    if d.millis == 0 { 0.0 } else { d.bytes as f64 / 1e6 / d.millis as f64 }
}

/// Milliseconds as seconds, to a tenth.
fn seconds(ms: u64) -> f64 {
    (ms / 100) as f64 / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registration of `id` that reports no times.
    fn reg(id: &str) -> Register {
        Register { instance_id: id.into(), ..crate::cluster::testkit::worker_reg(1) }
    }

    fn timeline(registered: &[(&str, u64)]) -> Timeline {
        let mut t = Timeline::default();
        for (i, (alias, at)) in registered.iter().enumerate() {
            t.registered(&reg(&format!("i-{i}")), alias.to_string(), *at);
        }
        t
    }

    /// `id` registered again, as before but with its boot and agent start.
    fn started(t: &mut Timeline, id: &str, booted_ms: Option<u64>, agent_started_ms: u64) {
        let before = t.nodes()[id].clone();
        let r = Register { booted_unix_ms: booted_ms, agent_started_unix_ms: Some(agent_started_ms), ..reg(id) };
        t.registered(&r, before.alias, before.registered_ms.unwrap_or_default());
    }

    #[test]
    fn the_summary_has_the_median_and_the_slowest_node_per_phase() {
        let mut t = timeline(&[("w1", 10_000), ("w2", 12_000), ("w3", 17_500), ("w4", 11_000)]);
        started(&mut t, "i-0", Some(1_000), 4_000);
        t.applied("i-0", 20_000);
        t.applied("i-2", 19_000);
        t.applied("i-2", 30_000); // only the first counts
        assert_eq!(t.origin_ms(), Some(1_000));
        let s = t.summary();
        assert_eq!(s.keys().copied().collect::<Vec<_>>(), ["agent_started", "applied", "booted", "registered"]);
        let r = &s["registered"];
        assert_eq!((r.nodes, r.median_s, r.slowest_s, r.slowest.as_str()), (4, 10.0, 16.5, "w3"));
        let a = &s["applied"];
        assert_eq!((a.nodes, a.median_s, a.slowest_s, a.slowest.as_str()), (2, 18.0, 19.0, "w1"));
        assert_eq!((s["booted"].nodes, s["booted"].slowest_s), (1, 0.0));
        assert_eq!(s["agent_started"].median_s, 3.0);
    }

    #[test]
    fn equal_times_name_the_first_alias_and_an_empty_timeline_has_no_summary() {
        let t = timeline(&[("w2", 5_000), ("w1", 5_000)]);
        assert_eq!(t.summary()["registered"].slowest, "w1");
        assert!(Timeline::default().summary().is_empty());
        assert_eq!(Timeline::default().origin_ms(), None);
    }

    #[test]
    fn one_entry_per_node_a_reregistration_starts_again_and_a_removal_drops_it() {
        let mut t = timeline(&[("w1", 1_000), ("w2", 2_000)]);
        t.applied("i-1", 3_000);
        t.registered(&reg("i-1"), "w2".into(), 9_000);
        assert_eq!(t.nodes().len(), 2);
        assert_eq!(t.nodes()["i-1"].phases(), [None, None, None, None, Some(9_000), None]);
        t.remove("i-1");
        t.applied("i-1", 10_000); // not a member: nothing comes back
        assert_eq!(t.nodes().keys().collect::<Vec<_>>(), ["i-0"]);
    }

    #[test]
    fn the_table_has_a_line_per_node_with_dashes_for_unknown_phases() {
        let mut t = timeline(&[("deeplearning-worker1", 5_000), ("deeplearning-worker2", 7_250)]);
        started(&mut t, "i-0", Some(2_000), 3_000);
        t.applied("i-1", 9_000);
        let table = t.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(lines[1].split_whitespace().nth(1), Some("launched"), "{table}");
        let row = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(row(2), ["deeplearning-worker1", "-", "0.0", "1.0", "-", "3.0", "-", "-"]);
        assert_eq!(row(3), ["deeplearning-worker2", "-", "-", "-", "-", "5.2", "7.0", "-"]);
    }

    /// The launch time a registration reports is the first phase, and the
    /// earliest time the summary counts from.
    #[test]
    fn the_launch_is_the_first_phase() {
        let mut t = timeline(&[("w1", 50_000), ("w2", 52_000)]);
        let r = Register { launched_unix_ms: Some(10_000), booted_unix_ms: Some(30_000), ..reg("i-1") };
        t.registered(&r, "w2".into(), 52_000);
        assert_eq!(t.nodes()["i-1"].phases(), [Some(10_000), Some(30_000), None, None, Some(52_000), None]);
        assert_eq!(t.origin_ms(), Some(10_000));
        let s = t.summary();
        assert_eq!((s["launched"].nodes, s["launched"].slowest_s, s["launched"].slowest.as_str()), (1, 0.0, "w2"));
        assert_eq!(s["registered"].slowest_s, 42.0);
        // A master state written before the launch was kept still reads.
        let old: NodeTimes = serde_json::from_str(
            r#"{"alias":"w1","booted_ms":1,"agent_started_ms":2,"registered_ms":3,"applied_ms":null}"#,
        )
        .unwrap();
        assert_eq!(old.phases(), [None, Some(1), Some(2), None, Some(3), None]);
    }

    /// A node's data fetch is its `data ready` phase and a column of the
    /// table; the summary has the biggest node's bytes, the bytes all read
    /// from S3, the median rate and the slowest node.
    #[test]
    fn data_fetches_are_a_phase_and_a_summary() {
        let mut t = timeline(&[("w1", 50_000), ("w2", 52_000), ("w3", 53_000)]);
        assert_eq!(t.data_summary(), None);
        let fetch =
            |ready, bytes, from_s3, millis| DataReady { ready_unix_ms: ready, bytes, bytes_from_s3: from_s3, millis };
        for (id, alias, f) in [
            ("i-0", "w1", fetch(40_000, 4_000_000_000, 1_400_000_000, 2_000)),
            ("i-1", "w2", fetch(45_000, 4_000_000_000, 1_300_000_000, 8_000)),
            ("i-2", "w3", fetch(41_000, 4_000_000_000, 1_300_000_000, 4_000)),
        ] {
            let r = Register { agent_started_unix_ms: Some(10_000), data: Some(f), ..reg(id) };
            t.registered(&r, alias.into(), 50_000);
        }
        let s = t.summary();
        assert_eq!(
            (s["data_ready"].nodes, s["data_ready"].slowest_s, s["data_ready"].slowest.as_str()),
            (3, 35.0, "w2")
        );
        let d = t.data_summary().unwrap();
        assert_eq!(
            (d.nodes, d.bytes, d.bytes_from_s3, d.median_gbps, d.slowest_s, d.slowest.as_str()),
            (3, 4_000_000_000, 4_000_000_000, 1.0, 8.0, "w2")
        );
        assert_eq!(d.line(), "4.0 GB on each of 3 nodes, S3 read 1.00x, median 1.00 GB/s, slowest w2 (8.0 s)");
        let table = t.table();
        assert!(table.contains("4.00 GB in 8.0 s (0.50 GB/s)"), "{table}");
    }
}
