//! Unit tests of the master's side of the network gate: when a check
//! opens, what it holds, how it decides and what each action does.

use node_contract::message::{Leave, LinkReport, MasterInbound};
use node_contract::{NetworkAction, NetworkCheck};

use super::*;
use crate::cluster::testkit::{T0, config, formations, logs, master_reg, published, worker_reg};

fn gated(requested: u32, action: NetworkAction, expected: Option<f64>) -> MasterState {
    let mut c = config(30, false);
    c.network_check = Some(NetworkCheck { min_fraction: 0.5, action, timeout_seconds: 30, expected_gbps: expected });
    let size = GroupSize { requested, min: 0 };
    let mut s = MasterState::new(&c, size, master_reg(), "ssh-ed25519 AAAA key".into(), T0);
    s.start(T0, 0);
    s
}

fn send(s: &mut MasterState, msg: MasterInbound, now: u64) -> Vec<Effect> {
    s.on_inbound(msg, now, &|_| true)
}

/// A report of `gbps` measured over 1 s from `id` to `peer`.
fn report(id: &str, peer: &str, generation: u64, gbps: f64) -> MasterInbound {
    MasterInbound::LinkReport(LinkReport {
        instance_id: id.into(),
        generation,
        peer: peer.into(),
        bytes: (gbps * 125_000_000.0) as u64,
        millis: 1_000,
        error: None,
    })
}

/// Forms master + 3 workers; returns the effects of the last registration.
fn form(s: &mut MasterState) -> Vec<Effect> {
    let mut fx = Vec::new();
    for w in 1..=3 {
        fx = send(s, MasterInbound::Register(worker_reg(w)), T0 + 1_000);
    }
    fx
}

/// The ring of generation 1: master -> w1 -> w2 -> w3 -> master; w2
/// (deeplearning-worker3, 10.0.0.2) sends at `slow` Gbit/s, the rest at 0.4.
fn report_all(s: &mut MasterState, slow: f64, now: u64) -> Vec<Effect> {
    let mut fx = Vec::new();
    for (id, peer, g) in
        [("i-master", "i-w1", 0.4), ("i-w1", "i-w2", 0.39), ("i-w2", "i-w3", slow), ("i-w3", "i-master", 0.41)]
    {
        fx.extend(send(s, report(id, peer, 1, g), now));
    }
    fx
}

fn terminations(fx: &[Effect]) -> Vec<&str> {
    fx.iter().filter_map(|e| if let Effect::TerminateWorker(id) = e { Some(id.as_str()) } else { None }).collect()
}

#[test]
fn warn_holds_the_formation_signal_until_every_node_reported_then_names_the_slow_one() {
    let mut s = gated(3, NetworkAction::Warn, Some(0.4));
    let fx = form(&mut s);
    assert!(s.formed());
    assert_eq!(published(&fx).len(), 1, "generation 1 goes out: the probe needs the ring");
    assert!(formations(&fx).is_empty(), "the signal waits for the check: {}", logs(&fx));
    assert_eq!(s.next_deadline(), Some(T0 + 1_000 + 30_000), "the check's time limit comes first");
    let fx = report_all(&mut s, 0.1, T0 + 4_000);
    let f = formations(&fx);
    assert_eq!(f.len(), 1, "{}", logs(&fx));
    assert!(f[0].success);
    assert!(f[0].reason.starts_with("3 of 3 workers joined"), "{}", f[0].reason);
    assert!(
        f[0].reason.contains("deeplearning-worker3 (i-w2, 10.0.0.2) sent 0.10 Gbit/s to deeplearning-worker4, 0.25"),
        "{}",
        f[0].reason
    );
    assert!(f[0].reason.contains("deeplearning-worker1 1.00, deeplearning-worker2 0.97, deeplearning-worker3 0.25"));
    assert!(!f[0].reason.contains("limit"), "every node reported: {}", f[0].reason);
    assert!(fx.contains(&Effect::AppendHostLog(format!("1 SLOW 10.0.0.2 {} 0.25", (T0 + 4_000) * 1_000_000))));
    let written: Vec<&String> =
        fx.iter().filter_map(|e| if let Effect::WriteNetworkCheck(j) = e { Some(j) } else { None }).collect();
    assert_eq!(written.len(), 1);
    let v: serde_json::Value = serde_json::from_str(written[0]).unwrap();
    assert_eq!(v["action"], "warn");
    assert_eq!(v["verdict"]["links"][2]["slow"], true);
    assert_eq!(v["verdict"]["links"][1]["slow"], false);
    assert!(terminations(&fx).is_empty());
    // A second copy of a report changes nothing: the check is over.
    let again = send(&mut s, report("i-w2", "i-w3", 1, 0.1), T0 + 5_000);
    assert!(formations(&again).is_empty() && logs(&again).contains("no network check is open"));
}

#[test]
fn fail_fails_formation_with_the_reason_naming_the_node() {
    let mut s = gated(3, NetworkAction::Fail, Some(0.4));
    form(&mut s);
    let fx = report_all(&mut s, 0.1, T0 + 4_000);
    let f = formations(&fx);
    assert_eq!(f.len(), 1);
    assert!(!f[0].success);
    assert!(f[0].reason.contains("deeplearning-worker3 (i-w2, 10.0.0.2)"), "{}", f[0].reason);
    assert!(f[0].reason.contains("0.25") && f[0].reason.contains("action is fail"), "{}", f[0].reason);
    assert!(s.failed());
    // A fast cluster forms as usual.
    let mut s = gated(3, NetworkAction::Fail, Some(0.4));
    form(&mut s);
    let fx = report_all(&mut s, 0.35, T0 + 4_000);
    assert!(formations(&fx)[0].success && s.formed());
    assert!(formations(&fx)[0].reason.contains("no node below 0.50"), "{}", formations(&fx)[0].reason);
}

#[test]
fn replace_terminates_slow_workers_but_never_the_master() {
    let mut s = gated(3, NetworkAction::Replace, None);
    form(&mut s);
    let mut fx = send(&mut s, report("i-master", "i-w1", 1, 0.1), T0 + 4_000);
    for (id, peer, g) in [("i-w1", "i-w2", 0.4), ("i-w2", "i-w3", 0.1), ("i-w3", "i-master", 0.4)] {
        fx.extend(send(&mut s, report(id, peer, 1, g), T0 + 4_000));
    }
    assert_eq!(terminations(&fx), ["i-w2"]);
    let f = formations(&fx);
    assert!(f[0].success);
    assert!(f[0].reason.contains("median of the nodes, 0.40"), "{}", f[0].reason);
    assert!(f[0].reason.contains("deeplearning-worker1 is the master, which is not replaced"), "{}", f[0].reason);
    assert!(f[0].reason.contains("deeplearning-worker3 (i-w2) is terminated for a replacement"), "{}", f[0].reason);
}

/// Most nodes below: the reference is suspect, not the nodes, so nothing
/// is terminated; and replacements stop at the budget, then only name.
#[test]
fn replace_spares_a_slow_majority_and_stops_at_its_budget() {
    let mut s = gated(3, NetworkAction::Replace, Some(0.4));
    form(&mut s);
    let mut fx = Vec::new();
    for (id, peer) in [("i-master", "i-w1"), ("i-w1", "i-w2"), ("i-w2", "i-w3"), ("i-w3", "i-master")] {
        fx.extend(send(&mut s, report(id, peer, 1, 0.1), T0 + 4_000));
    }
    assert!(terminations(&fx).is_empty(), "{}", logs(&fx));
    let f = formations(&fx);
    assert!(f[0].reason.contains("4 of 4 nodes are below"), "{}", f[0].reason);
    assert!(f[0].reason.contains("none is replaced"), "{}", f[0].reason);

    // The slow worker is replaced, its replacement (a new worker, checked
    // when it joins) is slow too, and so on: terminated while the budget
    // lasts (3 for a 4-node cluster), then only named.
    assert_eq!(replacement_budget(4, NETWORK_REPLACEMENTS_AT_LEAST), 3);
    assert_eq!(replacement_budget(1_000, NETWORK_REPLACEMENTS_AT_LEAST), 100);
    let mut slow = "i-w2".to_string();
    let mut terminated: Vec<String> = Vec::new();
    let mut said = String::new();
    for n in 10..15u32 {
        let t = T0 + u64::from(n) * 60_000;
        if terminated.last() == Some(&slow) {
            let gone = Leave { instance_id: slow.clone(), reason: "terminated".into() };
            s.on_inbound(MasterInbound::Leave(gone), t, &|_| true);
            s.on_tick(t + 20_000);
            slow = format!("i-w{n}");
        }
        send(&mut s, MasterInbound::Register(worker_reg(n)), t + 21_000);
        s.on_tick(t + 40_000);
        let gate = s.gate.clone().expect("the join opens a check");
        let mut fx = Vec::new();
        for node in &gate.nodes {
            let gbps = if node.instance_id == slow { 0.1 } else { 0.4 };
            fx.extend(send(&mut s, report(&node.instance_id, "i-master", gate.generation, gbps), t + 41_000));
        }
        terminated.extend(terminations(&fx).into_iter().map(str::to_owned));
        said.push_str(&logs(&fx));
    }
    assert_eq!(terminated, ["i-w2", "i-w11", "i-w12"], "{said}");
    assert!(said.contains("(i-w13) is not replaced: the network check replaced 3 workers already"), "{said}");
    // The count survives a restart.
    let resumed: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(resumed.network_replacements, 3);
}

#[test]
fn at_its_time_limit_the_check_decides_with_what_it_has() {
    let mut s = gated(3, NetworkAction::Fail, Some(0.4));
    form(&mut s);
    let mut fx = send(&mut s, report("i-master", "i-w1", 1, 0.4), T0 + 2_000);
    fx.extend(send(&mut s, report("i-w1", "i-w2", 1, 0.4), T0 + 2_000));
    fx.extend(s.on_tick(T0 + 1_000 + 29_999));
    assert!(formations(&fx).is_empty(), "not before the limit");
    assert_eq!(s.next_deadline(), Some(T0 + 31_000));
    let fx = s.on_tick(T0 + 31_000);
    let f = formations(&fx);
    assert_eq!(f.len(), 1);
    assert!(f[0].success, "unmeasured nodes are named, not failed: {}", f[0].reason);
    assert!(f[0].reason.contains("deeplearning-worker3 unmeasured (no report)"), "{}", f[0].reason);
    assert!(f[0].reason.contains("decided at the 30-second limit"), "{}", f[0].reason);
}

#[test]
fn one_node_has_nothing_to_measure_and_signals_at_once() {
    let mut c = config(30, false);
    c.network_check =
        Some(NetworkCheck { min_fraction: 0.5, action: NetworkAction::Fail, timeout_seconds: 30, expected_gbps: None });
    let mut s = MasterState::new(&c, GroupSize { requested: 0, min: 0 }, master_reg(), "k".into(), T0);
    let fx = s.start(T0, 0);
    assert!(formations(&fx).iter().any(|f| f.success), "{}", logs(&fx));
    assert!(logs(&fx).contains("one node, no link to measure"), "{}", logs(&fx));
}

#[test]
fn a_join_is_checked_and_fail_then_only_warns() {
    let mut s = gated(1, NetworkAction::Fail, Some(0.4));
    send(&mut s, MasterInbound::Register(worker_reg(1)), T0 + 1_000);
    let fx = send(&mut s, report("i-master", "i-w1", 1, 0.4), T0 + 2_000);
    assert!(formations(&fx).is_empty());
    let fx = send(&mut s, report("i-w1", "i-master", 1, 0.4), T0 + 2_000);
    assert!(formations(&fx)[0].success);
    // Worker 2 joins: generation 2, checked again; its reports of
    // generation 1 are stale.
    send(&mut s, MasterInbound::Register(worker_reg(2)), T0 + 10_000);
    let fx = s.on_tick(T0 + 12_000);
    assert_eq!(published(&fx)[0].generation, 2);
    assert!(logs(&fx).contains("network check of generation 2"), "{}", logs(&fx));
    let stale = send(&mut s, report("i-w2", "i-master", 1, 0.4), T0 + 13_000);
    assert!(logs(&stale).contains("the open check is of generation 2"), "{}", logs(&stale));
    let mut fx = send(&mut s, report("i-master", "i-w1", 2, 0.4), T0 + 14_000);
    fx.extend(send(&mut s, report("i-w1", "i-w2", 2, 0.05), T0 + 14_000));
    fx.extend(send(&mut s, report("i-w2", "i-master", 2, 0.4), T0 + 14_000));
    assert!(formations(&fx).is_empty(), "formation was signalled already");
    assert!(s.formed());
    assert!(logs(&fx).contains("only warns"), "{}", logs(&fx));
    assert!(logs(&fx).contains("deeplearning-worker2 (i-w1, 10.0.0.1) sent 0.05 Gbit/s"), "{}", logs(&fx));
}

#[test]
fn without_the_gate_nothing_changes() {
    let mut c = config(30, false);
    c.network_check = None;
    let mut s = MasterState::new(&c, GroupSize { requested: 1, min: 0 }, master_reg(), "k".into(), T0);
    s.start(T0, 0);
    let fx = send(&mut s, MasterInbound::Register(worker_reg(1)), T0 + 1_000);
    assert!(formations(&fx)[0].success);
    assert!(!logs(&fx).contains("network check"));
    let fx = send(&mut s, report("i-w1", "i-master", 1, 0.4), T0 + 2_000);
    assert!(logs(&fx).contains("no network check is open"));
}
