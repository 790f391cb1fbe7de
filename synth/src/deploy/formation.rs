//! The formation phase table: what the master's success signal reported
//! (the formation wait condition's data, which the template exposes as the
//! output [`FORMATION_DATA_OUTPUT`], named where the template is built:
//! [`crate::stack`]), printed by `synth deploy` after a
//! create or update that formed, and by `synth status`.
//!
//! The master puts the formation timeline's summary in the signal's data
//! (agent `cluster::timeline`): per phase (launched, booted, agent
//! started, registered, applied), how many nodes it knows the time of, the
//! median and slowest seconds after the earliest time it holds (the first
//! launch; the first boot from an agent that does not report launches),
//! and the slowest node. `applied` comes after the signal, so it is not there; `agent
//! status` on the master has it.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::port::Output;

use node_contract::timeline::PHASES;
pub use node_contract::timeline::{DataSummary, PhaseSummary};

pub(crate) use crate::stack::FORMATION_DATA_OUTPUT;

/// Every signal's data in the stack's [`FORMATION_DATA_OUTPUT`] (a JSON
/// object of signal id to a JSON document in a string), parsed; none when
/// the output is missing or not that shape.
fn signals_data(outputs: &[Output]) -> Vec<serde_json::Value> {
    let Some(output) = outputs.iter().find(|o| o.key == FORMATION_DATA_OUTPUT) else { return Vec::new() };
    let by_signal: BTreeMap<String, serde_json::Value> = serde_json::from_str(&output.value).unwrap_or_default();
    by_signal.values().filter_map(|data| serde_json::from_str(data.as_str()?).ok()).collect()
}

/// The timeline summary in the stack's outputs, by phase; `None` when
/// there is none (a stack from an older synth, a master that has not
/// signalled, or an agent that sends no timeline).
pub fn timeline(outputs: &[Output]) -> Option<BTreeMap<String, PhaseSummary>> {
    signals_data(outputs).into_iter().find_map(|data| {
        let summary: BTreeMap<String, PhaseSummary> = BTreeMap::deserialize(data.get("timeline")?).ok()?;
        (!summary.is_empty()).then_some(summary)
    })
}

/// The GPU gate at formation, from the success signal's `gpu` (a cluster
/// with the gate on, from an agent that reports it).
pub fn gpu(outputs: &[Output]) -> Option<node_contract::gpu::GpuSummary> {
    signals_data(outputs)
        .into_iter()
        .find_map(|data| node_contract::gpu::GpuSummary::deserialize(data.get("gpu")?).ok())
}

/// What the nodes' data fetches took, from the success signal's `data`
/// (a cluster with data sets, from an agent that reports it).
pub fn data(outputs: &[Output]) -> Option<DataSummary> {
    signals_data(outputs).into_iter().find_map(|data| DataSummary::deserialize(data.get("data")?).ok())
}

/// What the master's success signal reported about the formation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal {
    /// Nodes in the cluster, the master included.
    pub nodes: u64,
    /// Workers that joined.
    pub joined_workers: u64,
    /// Workers requested.
    pub requested_workers: u64,
}

/// The master's signal in the stack's outputs, `None` when no signal with
/// the master's data is there: the local AWS completes a wait condition
/// that nobody signalled, and its `FormationData` is then `{}`, or holds
/// data without the counts the master always sends.
pub fn signal(outputs: &[Output]) -> Option<Signal> {
    signals_data(outputs).into_iter().find_map(|data| {
        let count = |key: &str| data.get(key).and_then(serde_json::Value::as_u64);
        Some(Signal {
            nodes: count("nodes")?,
            joined_workers: count("joined_workers")?,
            requested_workers: count("requested_workers")?,
        })
    })
}

/// The phase table: one line per phase the summary has, in phase order
/// (phases this synth does not know follow, by name), and the data line
/// when the nodes fetched data.
pub fn table(summary: &BTreeMap<String, PhaseSummary>, data: Option<&DataSummary>) -> String {
    let known = PHASES.iter().map(|key| (*key, key.replace('_', " ")));
    let unknown = summary.keys().filter(|k| !PHASES.contains(&k.as_str())).map(|k| (k.as_str(), k.clone()));
    let rows: Vec<(String, &PhaseSummary)> =
        known.chain(unknown).filter_map(|(key, name)| summary.get(key).map(|s| (name, s))).collect();
    let mut text = format!(
        "Formation (seconds after the first launch or boot the master knows of):\n  {:<14} {:>5} {:>9} {:>9}  {}\n",
        "phase", "nodes", "median", "slowest", "slowest node"
    );
    for (name, s) in rows {
        text.push_str(&format!(
            "  {name:<14} {:>5} {:>8.1}s {:>8.1}s  {}\n",
            s.nodes,
            s.median_s,
            s.slowest_s,
            s.slowest.chars().filter(|c| !c.is_control()).collect::<String>()
        ));
    }
    if let Some(data) = data {
        text.push_str(&format!("  data: {}\n", data.line()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The output as AWS gives it for the data of
    /// agent's `the_success_signal_carries_the_timeline_summary` (recorded).
    const RECORDED: &str = r#"{"i-0123456789abcdef0":"{\"generation\":1,\"joined_workers\":3,\"min_workers\":1,\"nodes\":4,\"requested_workers\":3,\"timeline\":{\"agent_started\":{\"median_s\":50.0,\"nodes\":1,\"slowest\":\"deeplearning-worker1\",\"slowest_s\":50.0},\"booted\":{\"median_s\":0.0,\"nodes\":1,\"slowest\":\"deeplearning-worker1\",\"slowest_s\":0.0},\"registered\":{\"median_s\":61.0,\"nodes\":4,\"slowest\":\"deeplearning-worker4\",\"slowest_s\":69.0}}}"}"#;

    fn outputs(value: &str) -> Vec<Output> {
        vec![
            Output { key: "MasterAddress".into(), value: "10.0.0.5".into(), description: None },
            Output { key: FORMATION_DATA_OUTPUT.into(), value: value.into(), description: None },
        ]
    }

    #[test]
    fn the_recorded_summary_prints_as_a_phase_table() {
        let summary = timeline(&outputs(RECORDED)).expect("a timeline");
        assert_eq!(summary["registered"].slowest, "deeplearning-worker4");
        assert_eq!(
            table(&summary, None),
            "Formation (seconds after the first launch or boot the master knows of):
  phase          nodes    median   slowest  slowest node
  booted             1      0.0s      0.0s  deeplearning-worker1
  agent started      1     50.0s     50.0s  deeplearning-worker1
  registered         4     61.0s     69.0s  deeplearning-worker4
"
        );
    }

    /// The data of the same agent test once nodes report their launch
    /// (message version 7; recorded): `launched` is the first row.
    #[test]
    fn the_launch_is_the_first_row() {
        let data = r#"{"generation":1,"joined_workers":3,"min_workers":1,"nodes":4,"requested_workers":3,"timeline":{"agent_started":{"median_s":80.0,"nodes":1,"slowest":"deeplearning-worker1","slowest_s":80.0},"booted":{"median_s":30.0,"nodes":1,"slowest":"deeplearning-worker1","slowest_s":30.0},"launched":{"median_s":0.0,"nodes":1,"slowest":"deeplearning-worker1","slowest_s":0.0},"registered":{"median_s":91.0,"nodes":4,"slowest":"deeplearning-worker4","slowest_s":99.0}}}"#;
        let output = serde_json::json!({ "i-0123456789abcdef0": data }).to_string();
        let summary = timeline(&outputs(&output)).expect("a timeline");
        let text = table(&summary, None);
        let phases: Vec<&str> =
            text.lines().skip(2).filter_map(|l| l.split("  ").map(str::trim).find(|c| !c.is_empty())).collect();
        assert_eq!(phases, ["launched", "booted", "agent started", "registered"], "{text}");
        assert!(text.contains("  launched           1      0.0s      0.0s  deeplearning-worker1\n"), "{text}");
    }

    /// The data line follows the phases when the signal has the nodes'
    /// fetches, and the data ready phase sits between agent started and
    /// registered.
    #[test]
    fn the_data_fetches_print_after_the_phases() {
        let data = r#"{"generation":1,"joined_workers":1,"nodes":2,"requested_workers":1,"timeline":{"data_ready":{"median_s":40.0,"nodes":2,"slowest":"deeplearning-worker2","slowest_s":45.0},"registered":{"median_s":50.0,"nodes":2,"slowest":"deeplearning-worker2","slowest_s":52.0},"agent_started":{"median_s":10.0,"nodes":2,"slowest":"deeplearning-worker2","slowest_s":11.0}},"data":{"nodes":2,"bytes":4000000000,"bytes_from_s3":4100000000,"median_gbps":0.5,"slowest_s":8.0,"slowest":"deeplearning-worker2"}}"#;
        let output = outputs(&serde_json::json!({ "i-0123456789abcdef0": data }).to_string());
        let summary = timeline(&output).expect("a timeline");
        let fetched = super::data(&output).expect("the fetches");
        let text = table(&summary, Some(&fetched));
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert!(
            rows[0].trim_start().starts_with("agent started") && rows[1].trim_start().starts_with("data ready"),
            "{text}"
        );
        assert_eq!(
            rows[3],
            "  data: 4.0 GB on each of 2 nodes, S3 read 1.02x, median 0.50 GB/s, slowest deeplearning-worker2 (8.0 s)"
        );
        assert_eq!(super::data(&outputs(RECORDED)), None);
    }

    #[test]
    fn the_gpu_gate_is_read_from_the_signal() {
        let data = r#"{"generation":1,"joined_workers":2,"nodes":3,"requested_workers":2,"gpu":{"checked":4,"passed":3,"failed":["i-1 (10.0.1.7): xid on GPU 3: XID 79"],"action":"replace"}}"#;
        let output = outputs(&format!(r#"{{"i-0123456789abcdef0":{}}}"#, serde_json::to_string(data).unwrap()));
        let gpu = gpu(&output).expect("a gpu summary");
        assert_eq!(gpu.line(), "gpu check: 3 of 4 nodes passed; replaced: i-1 (10.0.1.7): xid on GPU 3: XID 79");
        assert_eq!(super::gpu(&outputs(RECORDED)), None, "a signal without the gate");
    }

    #[test]
    fn the_formation_is_claimed_only_from_the_masters_signal() {
        let claimed = Signal { nodes: 4, joined_workers: 3, requested_workers: 3 };
        assert_eq!(signal(&outputs(RECORDED)), Some(claimed));
        // What the local AWS leaves when nobody signalled, or a signal
        // without the master's data.
        for value in ["{}", "", r#"{"i-1":"{}"}"#, r#"{"i-1":"{\"nodes\":3}"}"#, r#"{"i-1":7}"#] {
            assert_eq!(signal(&outputs(value)), None, "{value}");
        }
        assert_eq!(signal(&outputs(RECORDED)[..1]), None, "no FormationData output");
    }

    #[test]
    fn no_table_without_a_timeline() {
        assert_eq!(timeline(&outputs(RECORDED)[..1]), None, "no FormationData output (an older stack)");
        for value in
            ["", "{}", "not json", r#"{"i-1":"{\"nodes\":3}"}"#, r#"{"i-1":"{\"timeline\":{}}"}"#, r#"{"i-1":7}"#]
        {
            assert_eq!(timeline(&outputs(value)), None, "{value}");
        }
    }
}
