//! Unit tests of the master's state machine.

use std::collections::BTreeSet;

use node_contract::Role;
use node_contract::message::{Applied, Leave, LifecycleAction, Manifest, MasterInbound};

use super::formation::BOOT_FAILURES_KEPT;
use super::*;
use crate::cluster::testkit::{SplitMix64, T0, actions, config, formations, logs, master_reg, published, worker_reg};
use crate::cluster::timing::*;

const MINUTE: u64 = 60_000;

fn master(requested: u32, min: u32, prepare_data: bool) -> (MasterState, Vec<Effect>) {
    let size = GroupSize { requested, min };
    let mut s = MasterState::new(&config(30, prepare_data), size, master_reg(), "ssh-ed25519 AAAA key".into(), T0);
    let fx = s.start(T0, 0);
    (s, fx)
}

fn send(s: &mut MasterState, msg: MasterInbound, now: u64) -> Vec<Effect> {
    s.on_inbound(msg, now, &|_| true)
}

fn register(n: u32) -> MasterInbound {
    MasterInbound::Register(worker_reg(n))
}

fn applied(id: &str, generation: u64) -> MasterInbound {
    MasterInbound::Applied(Applied { instance_id: id.into(), generation })
}

fn leave(id: &str) -> MasterInbound {
    MasterInbound::Leave(Leave { instance_id: id.into(), reason: "shutdown".into() })
}

fn lifecycle(id: &str, transition: &str) -> MasterInbound {
    MasterInbound::Lifecycle(LifecycleAction {
        lifecycle_transition: transition.into(),
        lifecycle_hook_name: "worker-terminating".into(),
        auto_scaling_group_name: "demo-workers".into(),
        ec2_instance_id: id.into(),
        lifecycle_action_token: format!("token-{id}"),
    })
}

fn terminating(id: &str) -> MasterInbound {
    lifecycle(id, "autoscaling:EC2_INSTANCE_TERMINATING")
}

fn completion(id: &str) -> Effect {
    Effect::CompleteLifecycle {
        hook: "worker-terminating".into(),
        token: format!("token-{id}"),
        instance_id: id.into(),
    }
}

/// `(index, instance id)` of every node.
fn roster(m: &Manifest) -> Vec<(u32, String)> {
    m.nodes.iter().map(|n| (n.index, n.instance_id.clone())).collect()
}

fn ids(list: &[(u32, &str)]) -> Vec<(u32, String)> {
    list.iter().map(|(i, id)| (*i, (*id).to_string())).collect()
}

/// Every node of the current manifest acknowledges it.
fn ack_all(s: &mut MasterState, now: u64) -> Vec<Effect> {
    let m = s.manifest().unwrap().clone();
    m.nodes.iter().flat_map(|n| send(s, applied(&n.instance_id, m.generation), now)).collect()
}

/// A formed cluster of the master and workers `1..=n`, every node having
/// applied generation 1 (retired).
fn formed(n: u32, prepare_data: bool) -> MasterState {
    let (mut s, _) = master(n, 0, prepare_data);
    for w in 1..=n {
        send(&mut s, register(w), T0 + 1_000);
    }
    assert!(s.formed());
    ack_all(&mut s, T0 + 2_000);
    s
}

fn retirements(fx: &[Effect]) -> Vec<u64> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::RetireManifests { through_generation } => Some(*through_generation),
            _ => None,
        })
        .collect()
}

fn host_log(fx: &[Effect]) -> Vec<&str> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::AppendHostLog(l) => Some(l.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn forms_as_soon_as_every_requested_worker_registered() {
    let (mut s, fx) = master(3, 1, false);
    assert_eq!(actions(&fx), vec![&Effect::SignalMasterUp]);
    assert_eq!(s.next_deadline(), Some(T0 + 30 * MINUTE));
    assert!(actions(&send(&mut s, register(1), T0 + 10)).is_empty());
    assert!(actions(&send(&mut s, register(2), T0 + 20)).is_empty());
    assert!(!s.formed());
    let fx = send(&mut s, register(3), T0 + 30);
    assert!(s.formed());
    let manifests = published(&fx);
    assert_eq!(manifests.len(), 1);
    let m = manifests[0];
    assert_eq!(m.generation, 1);
    assert_eq!(m.cluster, "demo");
    assert_eq!(m.master, "i-master");
    assert_eq!(m.cluster_public_key, "ssh-ed25519 AAAA key");
    assert_eq!(roster(m), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2"), (4, "i-w3")]));
    assert_eq!(m.nodes[3].alias, "deeplearning-worker4");
    let f = formations(&fx);
    assert_eq!(f.len(), 1);
    assert!(f[0].success);
    assert_eq!(f[0].reason, "3 of 3 workers joined; the cluster has 4 nodes, the master included");
    assert_eq!(f[0].unique_id, "i-master");
    let data: serde_json::Value = serde_json::from_str(&f[0].data).unwrap();
    assert_eq!(data["joined_workers"], 3);
    assert_eq!(data["requested_workers"], 3);
    assert_eq!(data["generation"], 1);
    assert_eq!(host_log(&fx).len(), 4);
    assert!(host_log(&fx).contains(&"1 ADDED 10.0.0.3 1767225600030000000"));
    assert!(!fx.iter().any(|e| matches!(e, Effect::SetDesiredCapacity(_))));
    // Nothing further at the old deadline.
    assert_eq!(s.next_deadline(), Some(T0 + 30 + ACK_TIMEOUT_MS));
    ack_all(&mut s, T0 + 40);
    assert!(actions(&s.on_tick(T0 + 30 * MINUTE)).is_empty());
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn zero_requested_workers_form_at_once() {
    let (s, fx) = master(0, 0, false);
    assert!(s.formed());
    assert_eq!(fx.iter().filter(|e| **e == Effect::SignalMasterUp).count(), 1);
    let m = published(&fx);
    assert_eq!(m.len(), 1);
    assert_eq!(roster(m[0]), ids(&[(1, "i-master")]));
    let f = formations(&fx);
    assert!(f[0].success);
    assert!(f[0].reason.contains("0 of 0 workers joined"), "{}", f[0].reason);
    assert!(f[0].reason.contains("master alone"), "{}", f[0].reason);
}

#[test]
fn a_shortfall_at_the_deadline_forms_with_fewer_and_lowers_the_capacity() {
    let (mut s, _) = master(4, 0, false);
    send(&mut s, register(1), T0 + MINUTE);
    send(&mut s, register(2), T0 + 2 * MINUTE);
    assert!(actions(&s.on_tick(T0 + 30 * MINUTE - 1)).is_empty());
    let fx = s.on_tick(T0 + 30 * MINUTE);
    let acts = actions(&fx);
    assert_eq!(acts[0], &Effect::SetDesiredCapacity(2));
    let m = published(&fx);
    assert_eq!(m.len(), 1);
    assert_eq!(roster(m[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2")]));
    let f = formations(&fx);
    assert!(f[0].success);
    assert_eq!(
        f[0].reason,
        "2 of 4 workers joined by the 30-minute deadline (at least 0 needed); the worker group's desired capacity \
         was lowered to 2"
    );
    let data: serde_json::Value = serde_json::from_str(&f[0].data).unwrap();
    assert_eq!(data["joined_workers"], 2);
    assert_eq!(data["desired_capacity"], 2);
    assert!(s.formed());
}

#[test]
fn no_workers_at_the_deadline_with_min_zero_is_the_master_alone() {
    let (mut s, _) = master(2, 0, false);
    let fx = s.on_tick(T0 + 31 * MINUTE);
    assert_eq!(actions(&fx)[0], &Effect::SetDesiredCapacity(0));
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master")]));
    assert!(formations(&fx)[0].reason.starts_with("0 of 2 workers joined"));
}

#[test]
fn below_the_minimum_fails_with_the_launch_failures() {
    let (mut s, _) = master(4, 2, false);
    send(&mut s, register(1), T0 + MINUTE);
    let fx = s.on_tick(T0 + 30 * MINUTE);
    assert_eq!(actions(&fx), vec![&Effect::FetchLaunchFailures]);
    assert!(!s.formed() && !s.failed());
    assert_eq!(s.next_deadline(), Some(T0 + 30 * MINUTE + LAUNCH_FAILURES_TIMEOUT_MS));
    let capacity = "Launching a new EC2 instance. Status Reason: We currently do not have sufficient p3.16xlarge \
                    capacity in the Availability Zone you requested (us-east-1a)."
        .to_string();
    let failures = vec![
        capacity.clone(),
        capacity.clone(),
        "Launching a new EC2 instance. Status Reason: Your quota allows for 0 more running instance(s).".into(),
        "  ".into(),
        "Launching a new EC2 instance. Status Reason: The image id '[ami-123]' does not exist.".into(),
        "a fourth distinct message that is not quoted".into(),
    ];
    let fx = s.on_launch_failures(failures, None, T0 + 30 * MINUTE + 500);
    assert!(s.failed());
    let f = formations(&fx);
    assert_eq!(f.len(), 1);
    assert!(!f[0].success);
    let reason = &f[0].reason;
    assert!(
        reason.starts_with("1 of 4 workers joined by the 30-minute deadline, at least 2 needed. Launch failures: "),
        "{reason}"
    );
    assert_eq!(reason.matches("sufficient p3.16xlarge").count(), 1, "{reason}");
    assert!(reason.contains("quota allows"), "{reason}");
    assert!(reason.contains("ami-123"), "{reason}");
    assert!(!reason.contains("fourth"), "{reason}");
    assert!(published(&fx).is_empty());
    assert_eq!(s.next_deadline(), None);
    // After a failure: nothing new, only logs, but terminations are let go.
    assert!(actions(&send(&mut s, register(2), T0 + 31 * MINUTE)).is_empty());
    assert!(actions(&s.on_launch_failures(vec!["late".into()], None, T0 + 32 * MINUTE)).is_empty());
    assert!(actions(&s.on_tick(T0 + 90 * MINUTE)).is_empty());
    let fx = send(&mut s, terminating("i-w1"), T0 + 33 * MINUTE);
    assert_eq!(actions(&fx), vec![&completion("i-w1")]);
    assert!(s.manifest().is_none());
}

#[test]
fn failure_reasons_without_launch_failures_say_where_to_look() {
    let (mut s, _) = master(4, 2, false);
    s.on_tick(T0 + 30 * MINUTE);
    let fx = s.on_launch_failures(vec![], None, T0 + 30 * MINUTE + 1);
    let reason = &formations(&fx)[0].reason;
    assert!(reason.starts_with("0 of 4 workers joined by the 30-minute deadline, at least 2 needed. "), "{reason}");
    assert!(reason.contains("No launch failures were reported; check the workers' console output"), "{reason}");

    // No answer at all: fail anyway after the timeout.
    let (mut s, _) = master(4, 2, false);
    s.on_tick(T0 + 30 * MINUTE);
    assert!(actions(&s.on_tick(T0 + 30 * MINUTE + LAUNCH_FAILURES_TIMEOUT_MS - 1)).is_empty());
    let fx = s.on_tick(T0 + 30 * MINUTE + LAUNCH_FAILURES_TIMEOUT_MS);
    assert!(formations(&fx)[0].reason.contains("could not be read"));
    assert!(s.failed());
}

#[test]
fn long_launch_failures_are_shortened() {
    let (mut s, _) = master(1, 1, false);
    s.on_tick(T0 + 30 * MINUTE);
    let fx = s.on_launch_failures(vec!["x".repeat(5_000)], None, T0 + 30 * MINUTE);
    let reason = &formations(&fx)[0].reason;
    assert!(reason.len() < 600, "{} bytes", reason.len());
    assert!(reason.ends_with('…'));
}

#[test]
fn duplicated_and_reordered_messages_make_exactly_one_first_manifest() {
    let (mut s, _) = master(2, 0, false);
    let mut all = Vec::new();
    // An `applied` before any manifest exists.
    let fx = send(&mut s, applied("i-w1", 1), T0 + 1);
    assert!(logs(&fx).contains("current generation is 0"), "{}", logs(&fx));
    all.extend(fx);
    for (t, msg) in
        [register(1), register(1), register(1), register(2), register(2), register(2)].into_iter().enumerate()
    {
        all.extend(send(&mut s, msg, T0 + 10 + t as u64));
    }
    let manifests = published(&all);
    assert_eq!(manifests.len(), 1, "{all:#?}");
    assert_eq!(manifests[0].generation, 1);
    assert_eq!(roster(manifests[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2")]));
    assert_eq!(formations(&all).len(), 1);
}

#[test]
fn indices_are_stable_across_leave_and_join() {
    let mut s = formed(3, false);
    assert_eq!(roster(s.manifest().unwrap()), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2"), (4, "i-w3")]));
    // deeplearning-worker3 leaves.
    let t = T0 + 10 * MINUTE;
    let fx = send(&mut s, leave("i-w2"), t);
    let m = published(&fx);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].generation, 2);
    assert_eq!(roster(m[0]), ids(&[(1, "i-master"), (2, "i-w1"), (4, "i-w3")]));
    assert_eq!(host_log(&fx), vec![format!("2 REMOVED 10.0.0.2 {}", u128::from(t) * 1_000_000)]);
    assert!(!fx.iter().any(|e| matches!(e, Effect::CompleteLifecycle { .. })));
    // A new node takes index 3; worker4 keeps 4.
    send(&mut s, register(5), t + 1_000);
    let fx = s.on_tick(t + 1_000 + BATCH_WINDOW_MS);
    let m = published(&fx);
    assert_eq!(roster(m[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w5"), (4, "i-w3")]));
    assert_eq!(m[0].nodes[2].alias, "deeplearning-worker3");
    assert_eq!(m[0].nodes[3].alias, "deeplearning-worker4");
    assert_eq!(m[0].generation, 3);
}

#[test]
fn late_joins_within_the_window_share_one_generation() {
    let mut s = formed(1, false);
    let t = T0 + 5 * MINUTE;
    let fx1 = send(&mut s, register(2), t);
    let fx2 = send(&mut s, register(3), t + 1_500);
    assert!(published(&fx1).is_empty() && published(&fx2).is_empty());
    assert_eq!(s.next_deadline(), Some(t + BATCH_WINDOW_MS));
    assert!(actions(&s.on_tick(t + BATCH_WINDOW_MS - 1)).is_empty());
    let fx = s.on_tick(t + BATCH_WINDOW_MS);
    let m = published(&fx);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].generation, 2);
    assert_eq!(roster(m[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2"), (4, "i-w3")]));
    let nanos = u128::from(t + BATCH_WINDOW_MS) * 1_000_000;
    assert_eq!(host_log(&fx), vec![format!("2 ADDED 10.0.0.2 {nanos}"), format!("2 ADDED 10.0.0.3 {nanos}")]);
    // Generation 1 was retired already when everyone applied it.
    assert!(retirements(&fx).is_empty());
    // A join after the window opens a new one.
    send(&mut s, register(4), t + 10_000);
    let fx = s.on_tick(t + 10_000 + BATCH_WINDOW_MS);
    assert_eq!(published(&fx)[0].generation, 3);
    assert_eq!(retirements(&fx), vec![2]);
}

#[test]
fn late_joins_wait_for_the_prepare_data_marker() {
    let mut s = formed(1, true);
    let t = T0 + 5 * MINUTE;
    let fx = s.on_inbound(register(5), t, &|_| false);
    assert!(actions(&fx).is_empty());
    assert!(logs(&fx).contains("/efs/prepare_data_success_10.0.0.5"), "{}", logs(&fx));
    assert_eq!(s.next_deadline(), None);
    let checked = std::cell::RefCell::new(Vec::new());
    s.on_inbound(register(5), t + 15_000, &|ip| {
        checked.borrow_mut().push(ip.to_string());
        true
    });
    assert_eq!(checked.into_inner(), vec!["10.0.0.5".to_string()]);
    let fx = s.on_tick(t + 15_000 + BATCH_WINDOW_MS);
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w5")]));
}

#[test]
fn formation_registrations_skip_the_prepare_data_check() {
    let (mut s, _) = master(1, 0, true);
    let fx = s.on_inbound(register(1), T0 + 1, &|_| false);
    assert!(s.formed());
    assert_eq!(published(&fx).len(), 1);
}

#[test]
fn without_a_prepare_data_script_late_joins_are_admitted_at_once() {
    let mut s = formed(1, false);
    s.on_inbound(register(2), T0 + MINUTE, &|_| false);
    let fx = s.on_tick(T0 + MINUTE + BATCH_WINDOW_MS);
    assert_eq!(published(&fx).len(), 1);
}

#[test]
fn a_registration_after_the_deadline_is_a_late_join() {
    let (mut s, _) = master(3, 1, true);
    send(&mut s, register(1), T0 + MINUTE);
    // The deadline passed before the runner ticked; the message arrives first.
    let fx = s.on_inbound(register(2), T0 + 31 * MINUTE, &|_| false);
    assert!(s.formed());
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w1")]));
    assert!(formations(&fx)[0].reason.starts_with("1 of 3 workers joined by the 30-minute deadline"));
    assert!(logs(&fx).contains("prepare_data_success_10.0.0.2"));
}

#[test]
fn a_terminating_member_is_let_go_after_every_node_applied_its_removal() {
    let mut s = formed(2, false);
    let t = T0 + 10 * MINUTE;
    let fx = send(&mut s, terminating("i-w1"), t);
    let m = published(&fx);
    assert_eq!(m[0].generation, 2);
    assert_eq!(roster(m[0]), ids(&[(1, "i-master"), (3, "i-w2")]));
    assert_eq!(host_log(&fx), vec![format!("2 REMOVED 10.0.0.1 {}", u128::from(t) * 1_000_000)]);
    assert!(!fx.contains(&completion("i-w1")));
    assert_eq!(s.next_deadline(), Some(t + ACK_TIMEOUT_MS));
    // A duplicate notice changes nothing.
    assert!(actions(&send(&mut s, terminating("i-w1"), t + 1)).is_empty());
    // The leaving node's own ack does not count; the master's alone is not enough.
    assert!(actions(&send(&mut s, applied("i-w1", 2), t + 2)).is_empty());
    assert!(actions(&send(&mut s, applied("i-master", 2), t + 3)).is_empty());
    let fx = send(&mut s, applied("i-w2", 2), t + 4);
    assert_eq!(actions(&fx), vec![&Effect::RetireManifests { through_generation: 2 }, &completion("i-w1")]);
    assert_eq!(s.next_deadline(), None);
    // Later notices for the same instance are duplicates.
    assert!(actions(&send(&mut s, terminating("i-w1"), t + 5)).is_empty());
    // And it is never admitted again.
    send(&mut s, register(1), t + 10 * MINUTE);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn a_terminating_member_is_let_go_after_the_ack_timeout() {
    let mut s = formed(2, false);
    let t = T0 + 10 * MINUTE;
    send(&mut s, terminating("i-w1"), t);
    send(&mut s, applied("i-master", 2), t + 1);
    assert!(actions(&s.on_tick(t + ACK_TIMEOUT_MS - 1)).is_empty());
    let fx = s.on_tick(t + ACK_TIMEOUT_MS);
    assert_eq!(actions(&fx), vec![&Effect::RetireManifests { through_generation: 2 }, &completion("i-w1")]);
    assert!(logs(&fx).contains("deeplearning-worker3 (i-w2)"), "{}", logs(&fx));
    assert!(!logs(&fx).contains("i-master"), "{}", logs(&fx));
}

#[test]
fn lifecycle_notices_that_need_no_waiting() {
    let mut s = formed(1, false);
    let t = T0 + MINUTE;
    // Not a member: at once.
    assert_eq!(actions(&send(&mut s, terminating("i-stranger"), t)), vec![&completion("i-stranger")]);
    // Launching and the test notification: log only.
    let fx = send(&mut s, lifecycle("i-w9", "autoscaling:EC2_INSTANCE_LAUNCHING"), t);
    assert!(actions(&fx).is_empty() && !logs(&fx).is_empty());
    let fx = send(&mut s, MasterInbound::LifecycleTest, t);
    assert!(actions(&fx).is_empty() && logs(&fx).contains("test notification"));
    // Admitted but not yet published: it was in no manifest, so at once too.
    send(&mut s, register(2), t);
    let fx = send(&mut s, terminating("i-w2"), t + 500);
    assert!(fx.contains(&completion("i-w2")));
    assert!(published(&fx).is_empty());
    assert!(actions(&s.on_tick(t + BATCH_WINDOW_MS)).is_empty());
    // During formation: removed, and let go at once.
    let (mut s, _) = master(3, 0, false);
    send(&mut s, register(1), T0 + 1);
    let fx = send(&mut s, terminating("i-w1"), T0 + 2);
    assert_eq!(actions(&fx), vec![&completion("i-w1")]);
    send(&mut s, register(2), T0 + 3);
    let fx = s.on_tick(T0 + 30 * MINUTE);
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w2")]));
}

#[test]
fn the_master_never_removes_itself() {
    let mut s = formed(1, false);
    let before = s.clone();
    let fx = send(&mut s, leave("i-master"), T0 + MINUTE);
    assert!(actions(&fx).is_empty());
    assert!(logs(&fx).contains("never leaves"));
    assert_eq!(s, before);
    let fx = send(&mut s, terminating("i-master"), T0 + MINUTE);
    assert!(published(&fx).is_empty());
    assert_eq!(roster(s.manifest().unwrap())[0], (1, "i-master".to_string()));
}

#[test]
fn manifests_are_retired_when_acknowledged_superseded_or_timed_out() {
    let (mut s, _) = master(2, 0, false);
    send(&mut s, register(1), T0 + 1);
    send(&mut s, register(2), T0 + 2);
    assert!(retirements(&send(&mut s, applied("i-master", 1), T0 + 3)).is_empty());
    assert!(retirements(&send(&mut s, applied("i-w1", 1), T0 + 4)).is_empty());
    let fx = send(&mut s, applied("i-w2", 1), T0 + 5);
    assert_eq!(retirements(&fx), vec![1]);
    // Acknowledged again: not retired twice.
    assert!(retirements(&send(&mut s, applied("i-w2", 1), T0 + 6)).is_empty());

    // Generation 2 (a join) is only partly acknowledged when generation 3
    // (another join) supersedes it: 2 is retired at once.
    send(&mut s, register(3), T0 + MINUTE);
    s.on_tick(T0 + MINUTE + BATCH_WINDOW_MS);
    send(&mut s, applied("i-w3", 2), T0 + MINUTE + 3_000);
    send(&mut s, register(4), T0 + 2 * MINUTE);
    let fx = s.on_tick(T0 + 2 * MINUTE + BATCH_WINDOW_MS);
    assert_eq!(published(&fx)[0].generation, 3);
    assert_eq!(retirements(&fx), vec![2]);

    // Generation 3: worker w4 never acknowledges; retired at the timeout.
    let t3 = T0 + 2 * MINUTE + BATCH_WINDOW_MS;
    for id in ["i-master", "i-w1", "i-w2", "i-w3"] {
        send(&mut s, applied(id, 3), t3 + 10);
    }
    assert_eq!(s.next_deadline(), Some(t3 + ACK_TIMEOUT_MS));
    let fx = s.on_tick(t3 + ACK_TIMEOUT_MS);
    assert_eq!(retirements(&fx), vec![3]);
    assert!(logs(&fx).contains("deeplearning-worker5 (i-w4)"), "{}", logs(&fx));
    assert!(!logs(&fx).contains("i-w3"), "{}", logs(&fx));
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn applied_from_the_future_or_from_strangers_changes_nothing() {
    let mut s = formed(1, false);
    let before = s.clone();
    for msg in [applied("i-w1", 2), applied("i-w1", u64::MAX), applied("i-stranger", 1), applied("i-w1", 0)] {
        let fx = send(&mut s, msg, T0 + MINUTE);
        assert!(actions(&fx).is_empty(), "{fx:?}");
    }
    assert_eq!(s, before);
    // A stale ack does not undo a newer one.
    send(&mut s, register(2), T0 + 2 * MINUTE);
    s.on_tick(T0 + 2 * MINUTE + BATCH_WINDOW_MS);
    send(&mut s, applied("i-w1", 2), T0 + 3 * MINUTE);
    send(&mut s, applied("i-w1", 1), T0 + 3 * MINUTE);
    send(&mut s, applied("i-master", 2), T0 + 3 * MINUTE);
    let fx = send(&mut s, applied("i-w2", 2), T0 + 3 * MINUTE);
    assert_eq!(retirements(&fx), vec![2]);
}

#[test]
fn a_registering_member_without_the_manifest_gets_it_again_at_most_every_10_s() {
    let (mut s, _) = master(1, 0, false);
    send(&mut s, register(1), T0);
    // While the generation's parts are in the worker queue, a copy would
    // reach nobody sooner: nothing is sent.
    let fx = send(&mut s, register(1), T0 + 15_000);
    assert!(actions(&fx).is_empty(), "{fx:?}");
    assert!(logs(&fx).contains("still in the worker queue"), "{fx:?}");
    // Once it was retired without this node's acknowledgement, it is sent again.
    assert_eq!(retirements(&s.on_tick(T0 + ACK_TIMEOUT_MS)), vec![1]);
    let t = T0 + ACK_TIMEOUT_MS + 15_000;
    let fx = send(&mut s, register(1), t);
    let m = published(&fx);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].generation, 1);
    assert!(published(&send(&mut s, register(1), t + REPUBLISH_INTERVAL_MS - 1)).is_empty());
    assert_eq!(published(&send(&mut s, register(1), t + REPUBLISH_INTERVAL_MS)).len(), 1);
    // Once it applied, a duplicate is just a duplicate.
    send(&mut s, applied("i-w1", 1), t + REPUBLISH_INTERVAL_MS + 1);
    assert!(actions(&send(&mut s, register(1), t + 60_000)).is_empty());
    assert_eq!(s.generation(), 1);
}

#[test]
fn a_rebooted_member_keeps_its_index_and_updates_its_entry() {
    let mut s = formed(2, false);
    let t = T0 + 10 * MINUTE;
    // Rebooted with a new address and host key.
    let mut r = worker_reg(1);
    r.boot_id = "boot-1-again".into();
    r.private_ip = "10.0.0.201".into();
    r.ssh_host_key = "ssh-ed25519 AAAAnew".into();
    let fx = send(&mut s, MasterInbound::Register(r.clone()), t);
    assert!(published(&fx).is_empty());
    let fx = s.on_tick(t + BATCH_WINDOW_MS);
    let m = published(&fx)[0];
    assert_eq!(m.generation, 2);
    let node = m.node("i-w1").unwrap();
    assert_eq!(
        (node.index, node.private_ip.as_str(), node.ssh_host_key.as_str()),
        (2, "10.0.0.201", "ssh-ed25519 AAAAnew")
    );
    let nanos = u128::from(t + BATCH_WINDOW_MS) * 1_000_000;
    assert_eq!(host_log(&fx), vec![format!("2 REMOVED 10.0.0.1 {nanos}"), format!("2 ADDED 10.0.0.201 {nanos}")]);
    ack_all(&mut s, t + 3_000);
    // Rebooted again with nothing changed but the boot: the same generation again.
    r.boot_id = "boot-1-third".into();
    let fx = send(&mut s, MasterInbound::Register(r), t + 60_000);
    let m = published(&fx);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].generation, 2);
    assert!(s.on_tick(t + 60_000 + BATCH_WINDOW_MS).iter().all(|e| !matches!(e, Effect::PublishManifest { .. })));
    // It has to acknowledge again before the manifest is retired.
    assert_eq!(s.next_deadline(), Some(t + 60_000 + ACK_TIMEOUT_MS));
    assert_eq!(retirements(&send(&mut s, applied("i-w1", 2), t + 61_000)), vec![2]);
    // A delayed registration from the first boot changes nothing.
    let before = s.clone();
    let fx = send(&mut s, register(1), t + 62_000);
    assert!(actions(&fx).is_empty());
    assert!(logs(&fx).contains("earlier boot"), "{}", logs(&fx));
    assert_eq!(s, before);
}

#[test]
fn a_delayed_copy_of_a_leavers_registration_does_not_bring_it_back() {
    let mut s = formed(2, false);
    let t = T0 + 10 * MINUTE;
    send(&mut s, leave("i-w1"), t);
    assert_eq!(s.generation(), 2);
    let fx = send(&mut s, register(1), t + 20_000);
    assert!(actions(&fx).is_empty());
    assert!(logs(&fx).contains("delayed copy"), "{}", logs(&fx));
    assert!(actions(&s.on_tick(t + 30_000)).is_empty());
    // Still registering after the window: it wants back.
    send(&mut s, register(1), t + REJOIN_AFTER_LEAVE_MS + 5_000);
    let fx = s.on_tick(t + REJOIN_AFTER_LEAVE_MS + 5_000 + BATCH_WINDOW_MS);
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2")]));
    // After a reboot it is welcome at once.
    send(&mut s, leave("i-w2"), t + 5 * MINUTE);
    let mut r = worker_reg(2);
    r.boot_id = "boot-2-again".into();
    send(&mut s, MasterInbound::Register(r), t + 5 * MINUTE + 1_000);
    let fx = s.on_tick(t + 5 * MINUTE + 1_000 + BATCH_WINDOW_MS);
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2")]));
}

#[test]
fn registrations_that_lie_about_the_role_are_ignored() {
    let (mut s, _) = master(1, 0, false);
    let mut r = worker_reg(1);
    r.role = Role::Master;
    let fx = send(&mut s, MasterInbound::Register(r), T0 + 1);
    assert!(actions(&fx).is_empty());
    assert!(!s.formed());
    // The master's own registration is a duplicate of `me`.
    let fx = send(&mut s, MasterInbound::Register(master_reg()), T0 + 2);
    assert!(actions(&fx).is_empty());
    assert!(!s.formed());
}

#[test]
fn a_restart_mid_formation_resumes_with_the_same_deadline_and_members() {
    // Uninterrupted.
    let (mut a, _) = master(3, 1, false);
    send(&mut a, register(1), T0 + MINUTE);
    // At the same time as below: the timeline (in the state and the
    // signal's data) holds when each node registered.
    send(&mut a, register(2), T0 + 7 * MINUTE);
    let uninterrupted = a.on_tick(T0 + 30 * MINUTE);

    // Interrupted after the first registration.
    let (mut b, _) = master(3, 1, false);
    send(&mut b, register(1), T0 + MINUTE);
    let saved = serde_json::to_string(&b).unwrap();
    let mut b: MasterState = serde_json::from_str(&saved).unwrap();
    let fx = b.start(T0 + 5 * MINUTE, 0);
    assert_eq!(actions(&fx), vec![&Effect::SignalMasterUp, &Effect::CheckMembers]);
    // Worker 1 is still in the group: nothing changes.
    assert!(b.on_group_instances(&["i-w1".into(), "i-w2".into()], T0 + 5 * MINUTE).is_empty());
    assert_eq!(b.next_deadline(), Some(T0 + 30 * MINUTE));
    send(&mut b, register(1), T0 + 6 * MINUTE);
    send(&mut b, register(2), T0 + 7 * MINUTE);
    assert!(actions(&b.on_tick(T0 + 30 * MINUTE - 1)).is_empty());
    let resumed = b.on_tick(T0 + 30 * MINUTE);
    assert_eq!(resumed, uninterrupted);
    assert_eq!(a, b);
}

#[test]
fn a_restart_after_formation_publishes_an_unacknowledged_manifest_again() {
    let (mut s, _) = master(1, 0, false);
    send(&mut s, register(1), T0 + 1);
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    let fx = s.start(T0 + MINUTE / 2, 1);
    assert_eq!(published(&fx), vec![s.manifest().unwrap()]);
    assert_eq!(actions(&fx).len(), 2);
    assert_eq!(actions(&fx)[1], &Effect::CheckMembers);
    ack_all(&mut s, T0 + MINUTE);
    // Everything acknowledged: a restart only checks the members.
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(actions(&s.start(T0 + 2 * MINUTE, 1)), vec![&Effect::CheckMembers]);
}

/// The idle guard's `stop` powers the master off after scaling the group
/// to 0; the workers' lifecycle hooks' messages wait in the master queue,
/// which keeps them a day. A master back after that has never heard of
/// their going: the group says they are gone, and they leave together, in
/// one generation, before anyone joins.
#[test]
fn a_restarted_master_drops_members_the_group_no_longer_has() {
    let s = formed(3, false);
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    let fx = s.start(T0 + 3 * 24 * 60 * MINUTE, 1);
    assert_eq!(actions(&fx), vec![&Effect::CheckMembers]);
    // Worker 2 is still there (in any state); 1 and 3 are gone, and an
    // instance that never registered changes nothing.
    let now = T0 + 3 * 24 * 60 * MINUTE + 1_000;
    let fx = s.on_group_instances(&["i-w2".into(), "i-new".into()], now);
    let manifests = published(&fx);
    assert_eq!(manifests.len(), 1, "one generation for both: {fx:?}");
    assert_eq!(manifests[0].generation, 2);
    assert_eq!(roster(manifests[0]), ids(&[(1, "i-master"), (3, "i-w2")]));
    assert!(logs(&fx).contains("i-w1 (deeplearning-worker2"), "{}", logs(&fx));
    assert!(logs(&fx).contains("is no longer in the worker group"), "{}", logs(&fx));
    let lines = host_log(&fx).join("\n");
    assert!(lines.contains("no longer in the worker group"), "{lines}");
    // A delayed copy of a gone worker's registration does not bring it back.
    // Its lifecycle message, should it still come, is ignored: an instance
    // no longer in its group has no lifecycle action left to complete.
    assert!(published(&send(&mut s, register(1), now + 1_000)).is_empty());
    let fx = send(&mut s, terminating("i-w3"), now + 2_000);
    assert!(logs(&fx).contains("already let go") && actions(&fx).is_empty(), "{fx:?}");
    assert!(!ack_all(&mut s, now + 3_000).contains(&completion("i-w3")));
    // A second check with the same group changes nothing.
    assert!(actions(&s.on_group_instances(&["i-w2".into()], now + 4_000)).is_empty());
    // A master alone has nothing to check.
    let (alone, _) = master(0, 0, false);
    let mut alone: MasterState = serde_json::from_str(&serde_json::to_string(&alone).unwrap()).unwrap();
    assert!(!alone.start(T0 + MINUTE, 1).contains(&Effect::CheckMembers));
}

/// During formation a member that is gone leaves as it would by `leave`:
/// the formation waits for the others.
#[test]
fn a_restart_mid_formation_drops_a_registered_worker_that_is_gone() {
    let (mut s, _) = master(2, 1, false);
    send(&mut s, register(1), T0 + MINUTE);
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert!(s.start(T0 + 2 * MINUTE, 0).contains(&Effect::CheckMembers));
    let fx = s.on_group_instances(&["i-w2".into()], T0 + 2 * MINUTE);
    assert!(published(&fx).is_empty() && !s.formed(), "{fx:?}");
    // Two more registrations form it, without worker 1.
    send(&mut s, register(2), T0 + 3 * MINUTE);
    let fx = send(&mut s, register(3), T0 + 3 * MINUTE);
    assert!(s.formed());
    assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w2"), (3, "i-w3")]));
}

#[test]
fn a_restart_while_waiting_for_launch_failures_asks_again() {
    let (mut s, _) = master(2, 2, false);
    s.on_tick(T0 + 30 * MINUTE);
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    let fx = s.start(T0 + 30 * MINUTE + 5_000, 0);
    assert!(fx.contains(&Effect::FetchLaunchFailures));
    let fx = s.on_launch_failures(vec!["no capacity".into()], None, T0 + 30 * MINUTE + 6_000);
    assert!(formations(&fx)[0].reason.ends_with("Launch failures: no capacity"));
    // A failed master restarts quietly.
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert!(actions(&s.start(T0 + 40 * MINUTE, 0)).is_empty());
}

#[test]
fn a_restart_after_the_deadline_decides_at_once() {
    let (mut s, _) = master(3, 1, false);
    send(&mut s, register(1), T0 + MINUTE);
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    let fx = s.start(T0 + 45 * MINUTE, 0);
    assert_eq!(actions(&fx)[0], &Effect::SignalMasterUp);
    assert!(fx.contains(&Effect::SetDesiredCapacity(1)));
    assert!(formations(&fx)[0].reason.contains("30-minute deadline"));
}

/// Shuffles and duplicates a formation's messages: whatever the order, there
/// is one manifest, of generation 1, with the same nodes (indices
/// follow arrival order, so they are compared as a set), and one signal.
#[test]
fn formation_is_the_same_whatever_the_order_and_duplicates() {
    let expected: BTreeSet<String> = ["i-master", "i-w1", "i-w2", "i-w3", "i-w4"].map(String::from).into();
    for seed in 0..300 {
        let mut rng = SplitMix64(seed);
        let mut msgs: Vec<MasterInbound> = Vec::new();
        for w in 1..=4 {
            for _ in 0..=rng.below(3) {
                msgs.push(register(w));
            }
        }
        msgs.push(applied("i-w1", 1));
        msgs.push(applied("i-w9", 1));
        msgs.push(MasterInbound::LifecycleTest);
        msgs.push(leave("i-stranger"));
        msgs.push(MasterInbound::Register(master_reg()));
        rng.shuffle(&mut msgs);
        let (mut s, mut all) = master(4, 2, false);
        let mut now = T0;
        for msg in msgs {
            now += rng.below(5_000) as u64;
            all.extend(send(&mut s, msg, now));
            if rng.below(4) == 0 {
                all.extend(s.on_tick(now));
            }
        }
        // A node still registering 10 s after the manifest went out gets
        // the same manifest again; never another generation.
        let manifests = published(&all);
        assert!(!manifests.is_empty(), "seed {seed}");
        assert!(manifests.iter().all(|m| *m == manifests[0]), "seed {seed}");
        let m = manifests[0];
        assert_eq!(m.generation, 1, "seed {seed}");
        assert_eq!(m.nodes.iter().map(|n| n.instance_id.clone()).collect::<BTreeSet<_>>(), expected, "seed {seed}");
        assert_eq!(m.nodes.iter().map(|n| n.index).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5], "seed {seed}");
        for n in &m.nodes[1..] {
            let w: u32 = n.instance_id.trim_start_matches("i-w").parse().unwrap();
            let r = worker_reg(w);
            assert_eq!(
                (&n.private_ip, &n.hostname, n.gpus, &n.ssh_host_key),
                (&r.private_ip, &r.hostname, r.gpus, &r.ssh_host_key),
                "seed {seed}"
            );
        }
        let f = formations(&all);
        assert_eq!(f.len(), 1, "seed {seed}");
        assert_eq!(f[0].reason, "4 of 4 workers joined; the cluster has 5 nodes, the master included");
    }
}

/// After formation: joins (each duplicated), acks (some stale, some
/// duplicated) and noise, shuffled with random gaps: the final membership is
/// the same, generations grow one at a time, and everything is retired in
/// the end.
#[test]
fn elastic_changes_converge_whatever_the_order() {
    for seed in 0..300 {
        let mut rng = SplitMix64(1_000 + seed);
        let mut s = formed(2, false);
        let mut msgs: Vec<MasterInbound> = Vec::new();
        for w in 3..=6 {
            for _ in 0..=rng.below(3) {
                msgs.push(register(w));
            }
        }
        for id in ["i-master", "i-w1", "i-w2", "i-w5"] {
            msgs.push(applied(id, 1));
        }
        msgs.push(applied("i-w4", 99));
        msgs.push(terminating("i-gone"));
        msgs.push(lifecycle("i-w7", "autoscaling:EC2_INSTANCE_LAUNCHING"));
        rng.shuffle(&mut msgs);
        let mut all = Vec::new();
        let mut now = T0 + 10 * MINUTE;
        for msg in msgs {
            now += rng.below(3_000) as u64;
            all.extend(s.on_tick(now));
            all.extend(send(&mut s, msg, now));
        }
        now += BATCH_WINDOW_MS;
        all.extend(s.on_tick(now));
        all.extend(ack_all(&mut s, now));
        let generations: Vec<u64> = published(&all).iter().map(|m| m.generation).collect();
        let distinct: Vec<u64> = generations.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
        assert_eq!(distinct, (2..2 + distinct.len() as u64).collect::<Vec<_>>(), "seed {seed}");
        let m = s.manifest().unwrap();
        assert_eq!(m.nodes.len(), 7, "seed {seed}");
        assert_eq!(m.nodes.iter().map(|n| n.index).collect::<Vec<_>>(), (1..=7).collect::<Vec<_>>(), "seed {seed}");
        assert_eq!(roster(m)[..3], ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2")])[..], "seed {seed}");
        let added = host_log(&all).iter().filter(|l| l.contains(" ADDED ")).count();
        assert_eq!(added, 4, "seed {seed}");
        assert_eq!(retirements(&all).last(), Some(&m.generation), "seed {seed}");
        assert_eq!(all.iter().filter(|e| **e == completion("i-gone")).count(), 1, "seed {seed}");
        assert_eq!(s.next_deadline(), None, "seed {seed}");
    }
}

/// The publication ids of the manifests published among `fx`.
fn publications(fx: &[Effect]) -> Vec<(u64, u64)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::PublishManifest { manifest, publication } => Some((manifest.generation, *publication)),
            _ => None,
        })
        .collect()
}

/// Every generation gets a publication id of its own; a re-send, also after
/// a restart, keeps it, so its parts combine with the first sending's.
#[test]
fn a_generation_keeps_its_publication_id_and_the_next_gets_a_new_one() {
    let (mut s, _) = master(1, 0, false);
    let first = publications(&send(&mut s, register(1), T0 + 5));
    assert_eq!(first, vec![(1, T0 + 5)]);
    // Retired without the worker's acknowledgement, then asked for again.
    let t = T0 + 5 + ACK_TIMEOUT_MS;
    assert_eq!(retirements(&s.on_tick(t)), vec![1]);
    let again = publications(&send(&mut s, register(1), t + 20_000));
    assert_eq!(again, first);
    let mut s: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(publications(&s.start(t + 30_000, 1)), first);
    ack_all(&mut s, t + 31_000);
    // A clock that went back still gives the next generation a new id.
    send(&mut s, register(2), t + 40_000);
    let next = publications(&s.on_tick(t + 40_000 + BATCH_WINDOW_MS));
    assert_eq!(next, vec![(2, t + 40_000 + BATCH_WINDOW_MS)]);
    send(&mut s, register(3), t + 50_000);
    let fx = s.on_tick(t + 50_000 + BATCH_WINDOW_MS);
    assert_eq!(publications(&fx)[0].0, 3);
    let mut back = s.clone();
    back.on_inbound(register(4), T0, &|_| true);
    let fx = back.on_tick(T0 + BATCH_WINDOW_MS);
    assert_eq!(publications(&fx), vec![(4, t + 50_000 + BATCH_WINDOW_MS + 1)]);
}

/// "retire" and "publish" in the order they appear among `fx`.
fn retire_publish_order(fx: &[Effect]) -> Vec<&'static str> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::RetireManifests { .. } => Some("retire"),
            Effect::PublishManifest { .. } => Some("publish"),
            _ => None,
        })
        .collect()
}

/// The older generation is retired before the new one goes out, so the
/// worker queue never holds two generations' parts for long.
#[test]
fn older_generations_are_retired_before_the_new_one_is_published() {
    let mut s = formed(1, false);
    send(&mut s, register(2), T0 + MINUTE);
    // Generation 1 was retired when every node acknowledged it.
    assert_eq!(retire_publish_order(&s.on_tick(T0 + MINUTE + BATCH_WINDOW_MS)), ["publish"]);
    // Generation 2 is not acknowledged by all when generation 3 comes.
    send(&mut s, register(3), T0 + 2 * MINUTE);
    let fx = s.on_tick(T0 + 2 * MINUTE + BATCH_WINDOW_MS);
    assert_eq!(retire_publish_order(&fx), ["retire", "publish"]);
    assert_eq!(retirements(&fx), vec![2]);
}

/// A generation whose parts could not all be sent goes out again after
/// [`REPUBLISH_INTERVAL_MS`], until it is sent or superseded.
#[test]
fn a_generation_that_could_not_be_sent_is_sent_again() {
    let (mut s, _) = master(1, 0, false);
    send(&mut s, register(1), T0 + 5);
    let t = T0 + 1_000;
    let fx = s.on_publish_failed(1, t);
    assert!(actions(&fx).is_empty());
    assert!(logs(&fx).contains("sending it again in 10 s"), "{}", logs(&fx));
    assert_eq!(s.next_deadline(), Some(t + REPUBLISH_INTERVAL_MS));
    assert!(published(&s.on_tick(t + REPUBLISH_INTERVAL_MS - 1)).is_empty());
    let fx = s.on_tick(t + REPUBLISH_INTERVAL_MS);
    assert_eq!(publications(&fx), vec![(1, T0 + 5)]);
    // Sent this time: nothing more.
    assert!(published(&s.on_tick(t + 3 * REPUBLISH_INTERVAL_MS)).is_empty());
    // A failure of a superseded generation is not sent again.
    ack_all(&mut s, t + 40_000);
    send(&mut s, register(2), t + 50_000);
    s.on_tick(t + 50_000 + BATCH_WINDOW_MS);
    let fx = s.on_publish_failed(1, t + 60_000);
    assert!(logs(&fx).contains("superseded"), "{}", logs(&fx));
    assert_eq!(s.next_deadline(), Some(t + 50_000 + BATCH_WINDOW_MS + ACK_TIMEOUT_MS));
}

/// A registration whose entry could not fit in a manifest part (a host key
/// of 300 KB) is not admitted: the manifest stays sendable.
#[test]
fn a_registration_too_large_for_a_manifest_part_is_ignored() {
    let (mut s, _) = master(2, 0, false);
    let mut big = worker_reg(1);
    big.ssh_host_key = format!("ssh-ed25519 {}", "A".repeat(300 * 1024));
    let fx = send(&mut s, MasterInbound::Register(big), T0 + 5);
    assert!(actions(&fx).is_empty());
    assert!(logs(&fx).contains("ignored a registration from i-w1: its SSH host key is"), "{}", logs(&fx));
    send(&mut s, register(1), T0 + 6);
    send(&mut s, register(2), T0 + 7);
    assert!(s.formed());
}

/// The saved state, read back: what a restarted master starts from.
fn reloaded(saved: &str) -> MasterState {
    serde_json::from_str(saved).unwrap()
}

/// A master that crashed after it sent a generation but before it saved the
/// state that holds it (the runner saves after carrying out a turn's
/// effects) restarts from the older state, and the messages of that turn
/// come back, maybe after others. It must not send that generation number
/// again with other nodes: a node that applied the first would ignore the
/// second (generations only move forward) and keep other files for good.
#[test]
fn a_generation_sent_before_a_crash_is_never_sent_again_with_other_nodes() {
    // During formation: worker 2 completes it, generation 1 goes out, crash.
    let (mut s, _) = master(2, 1, false);
    send(&mut s, register(1), T0 + 1_000);
    let saved = serde_json::to_string(&s).unwrap();
    let first = published(&send(&mut s, register(2), T0 + 2_000))[0].clone();
    assert_eq!(roster(&first), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2")]));
    // Back from the saved state, worker 1 leaves before worker 2's
    // registration comes back, and worker 3 registers.
    let mut s = reloaded(&saved);
    // The runner recorded generation 1 before it sent it.
    let fx = s.start(T0 + 10_000, 1);
    assert!(logs(&fx).contains("generation 1 may have been sent before a restart"), "{}", logs(&fx));
    assert_eq!(actions(&fx), vec![&Effect::SignalMasterUp, &Effect::CheckMembers]);
    send(&mut s, leave("i-w1"), T0 + 11_000);
    send(&mut s, register(3), T0 + 12_000);
    let fx = send(&mut s, register(2), T0 + 13_000);
    let second = published(&fx)[0];
    assert_eq!(roster(second), ids(&[(1, "i-master"), (2, "i-w3"), (3, "i-w2")]));
    assert_eq!(second.generation, 2, "generation 1 may be on nodes already");
    assert!(s.formed());

    // After formation: a leave makes generation 2, crash. Whatever comes
    // first after the restart, generation 2 is not reused.
    let mut s = formed(3, false);
    let saved = serde_json::to_string(&s).unwrap();
    let first = published(&send(&mut s, leave("i-w1"), T0 + MINUTE))[0].clone();
    assert_eq!(first.generation, 2);
    let mut s = reloaded(&saved);
    let fx = s.start(T0 + MINUTE + 5_000, 2);
    // The restarted master cannot know what generation 2 held: it publishes
    // its own view at once under a new number, after retiring generation 2.
    assert_eq!(retire_publish_order(&fx), ["retire", "publish"]);
    assert_eq!(retirements(&fx), vec![2]);
    let resent = published(&fx)[0];
    assert_eq!(resent.generation, 3);
    assert_eq!(resent.nodes.len(), 4);
    let fx = send(&mut s, leave("i-w2"), T0 + MINUTE + 6_000);
    assert_eq!(published(&fx)[0].generation, 4);
    assert_eq!(s.generation(), 4);
}

fn notice(id: &str) -> MasterInbound {
    let body = r#"{"action": "terminate", "time": "2026-01-01T00:12:00Z"}"#;
    MasterInbound::Notice(node_contract::interruption::from_instance_action(id, body).unwrap())
}

fn rebalance_notice(id: &str) -> MasterInbound {
    let body = r#"{"noticeTime": "2026-01-01T00:09:00Z"}"#;
    MasterInbound::Notice(node_contract::interruption::from_rebalance(id, body).unwrap())
}

/// A worker's Capacity Block ending 2026-01-01T01:00:00Z: reclaimed at 00:30.
fn block_end_notice(id: &str) -> MasterInbound {
    let block = node_contract::interruption::CapacityBlock { id: "cr-1".into(), end_unix: 1_767_229_200 };
    MasterInbound::Notice(node_contract::interruption::capacity_block_end(id, &block))
}

#[test]
fn a_noticed_member_leaves_at_once_and_the_host_log_says_why() {
    for (message, why) in [
        (notice("i-w2"), "notice spot-instance-action terminate at 2026-01-01T00:12:00Z"),
        (rebalance_notice("i-w2"), "notice rebalance-recommendation at 2026-01-01T00:09:00Z"),
        (block_end_notice("i-w2"), "notice capacity-block-end at 2026-01-01T00:30:00Z"),
    ] {
        let mut s = formed(3, false);
        let t = T0 + 10 * MINUTE;
        let fx = send(&mut s, message.clone(), t);
        let m = published(&fx);
        assert_eq!(m.len(), 1, "{fx:#?}");
        assert_eq!(m[0].generation, 2);
        assert_eq!(roster(m[0]), ids(&[(1, "i-master"), (2, "i-w1"), (4, "i-w3")]));
        assert_eq!(host_log(&fx), vec![format!("2 REMOVED 10.0.0.2 {} {why}", u128::from(t) * 1_000_000)]);
        assert!(logs(&fx).contains("was given an interruption notice"), "{}", logs(&fx));
        assert!(!fx.iter().any(|e| matches!(e, Effect::CompleteLifecycle { .. })));
        // A duplicate (at-least-once delivery) changes nothing.
        let fx = send(&mut s, message, t + 1);
        assert!(actions(&fx).is_empty(), "{fx:#?}");
        assert!(logs(&fx).contains("it already left"), "{}", logs(&fx));
        // It keeps re-registering from the same boot only by mistake (its
        // agent stops): never admitted, even after the rejoin window.
        for later in [t + 2, t + REJOIN_AFTER_LEAVE_MS + 1, t + 100 * MINUTE] {
            let fx = send(&mut s, register(2), later);
            assert!(logs(&fx).contains("it left on an interruption notice in this boot"), "{}", logs(&fx));
            assert_eq!(s.next_deadline(), Some(t + ACK_TIMEOUT_MS).filter(|_| later < t + ACK_TIMEOUT_MS));
            s.on_tick(later);
        }
        assert_eq!(s.generation(), 2);
        // Started again (a stopped Spot instance): a new boot is welcome.
        let mut again = worker_reg(2);
        again.boot_id = "boot-2-again".into();
        let later = t + 101 * MINUTE;
        send(&mut s, MasterInbound::Register(again), later);
        let fx = s.on_tick(later + BATCH_WINDOW_MS);
        assert_eq!(roster(published(&fx)[0]), ids(&[(1, "i-master"), (2, "i-w1"), (3, "i-w2"), (4, "i-w3")]));
    }
}

#[test]
fn a_lifecycle_action_after_a_notice_waits_for_the_generation_without_the_node() {
    let mut s = formed(2, false);
    let t = T0 + 10 * MINUTE;
    send(&mut s, notice("i-w1"), t);
    assert_eq!(s.generation(), 2);
    // Auto Scaling's termination comes while generation 2 is being applied.
    let fx = send(&mut s, terminating("i-w1"), t + 1_000);
    assert!(actions(&fx).is_empty(), "{fx:#?}");
    assert!(logs(&fx).contains("it left in generation 2"), "{}", logs(&fx));
    assert_eq!(s.next_deadline(), Some(t + ACK_TIMEOUT_MS));
    assert!(actions(&send(&mut s, terminating("i-w1"), t + 1_001)).is_empty());
    assert!(actions(&send(&mut s, applied("i-master", 2), t + 2_000)).is_empty());
    let fx = send(&mut s, applied("i-w2", 2), t + 3_000);
    assert_eq!(actions(&fx), vec![&Effect::RetireManifests { through_generation: 2 }, &completion("i-w1")]);
    // Once it has been applied everywhere, a lifecycle action goes at once.
    let mut s = formed(2, false);
    send(&mut s, notice("i-w1"), t);
    ack_all(&mut s, t + 1_000);
    let fx = send(&mut s, terminating("i-w1"), t + 2_000);
    assert_eq!(actions(&fx), vec![&completion("i-w1")]);
    // And the ack timeout lets a pending one go too.
    let mut s = formed(2, false);
    send(&mut s, notice("i-w1"), t);
    send(&mut s, terminating("i-w1"), t + 1_000);
    let fx = s.on_tick(t + 1_000 + ACK_TIMEOUT_MS);
    assert!(fx.contains(&completion("i-w1")), "{fx:#?}");
}

#[test]
fn a_notice_after_the_lifecycle_action_or_from_the_master_or_a_stranger_changes_nothing() {
    let mut s = formed(2, false);
    let t = T0 + 10 * MINUTE;
    send(&mut s, terminating("i-w1"), t);
    let fx = send(&mut s, notice("i-w1"), t + 1);
    assert!(actions(&fx).is_empty(), "{fx:#?}");
    // The pending completion still waits for generation 2.
    let fx = ack_all(&mut s, t + 2);
    assert!(fx.contains(&completion("i-w1")), "{fx:#?}");

    let mut s = formed(2, false);
    let fx = send(&mut s, notice("i-master"), t);
    assert!(actions(&fx).is_empty(), "{fx:#?}");
    assert!(logs(&fx).contains("the master never leaves the cluster"), "{}", logs(&fx));
    let fx = send(&mut s, notice("i-w9"), t);
    assert!(actions(&fx).is_empty(), "{fx:#?}");
    assert!(logs(&fx).contains("not a member"), "{}", logs(&fx));
    assert_eq!(s.generation(), 1);
    // During formation a noticed worker is dropped before generation 1.
    let (mut s, _) = master(2, 1, false);
    send(&mut s, register(1), T0 + 1);
    send(&mut s, notice("i-w1"), T0 + 2);
    let fx = send(&mut s, register(2), T0 + 3);
    assert!(!s.formed() && published(&fx).is_empty());
    let fx = send(&mut s, register(1), T0 + 4);
    assert!(logs(&fx).contains("interruption notice"), "{}", logs(&fx));
}

#[test]
fn departures_from_before_notices_existed_still_load() {
    let mut s2 = formed(2, false);
    send(&mut s2, leave("i-w1"), T0 + MINUTE);
    let mut with_departure = serde_json::to_value(&s2).unwrap();
    let departed = with_departure["departed"]["i-w1"].as_object_mut().unwrap();
    assert_eq!(departed.remove("interrupted"), Some(serde_json::Value::Bool(false)));
    assert!(departed.remove("removed_in").is_some());
    let loaded: MasterState = serde_json::from_value(with_departure).unwrap();
    assert_eq!(loaded.generation(), 2);
}

fn boot_failure(n: u32, output: &str) -> MasterInbound {
    let what = "the prepare-data script /efs/prepare.sh exited with status 1";
    MasterInbound::BootFailure(node_contract::message::BootFailure::new(
        &format!("i-w{n}"),
        &format!("10.0.0.{n}"),
        what,
        output.as_bytes(),
    ))
}

/// A failed formation's reason names the worker whose prepare-data script
/// failed, with its last lines, and the group's instances that never
/// registered; the worker that failed before and then joined is not named.
#[test]
fn a_failed_formation_names_the_failed_and_the_unregistered_nodes() {
    let (mut s, _) = master(4, 3, true);
    send(&mut s, register(1), T0 + MINUTE);
    let fx = send(&mut s, boot_failure(2, "downloading\nerror: bucket missing\n"), T0 + 2 * MINUTE);
    assert!(logs(&fx).contains("i-w2 (10.0.0.2) reports a failed boot step"), "{fx:?}");
    // A newer report replaces the older; a node that fails, then joins, is no longer named.
    send(&mut s, boot_failure(2, "downloading\nerror: bucket still missing\n"), T0 + 3 * MINUTE);
    send(&mut s, boot_failure(3, "oops\n"), T0 + 3 * MINUTE);
    send(&mut s, register(3), T0 + 4 * MINUTE);
    assert_eq!(s.boot_failures().keys().collect::<Vec<_>>(), vec!["i-w2"]);
    s.on_tick(T0 + 30 * MINUTE);
    let group: Vec<String> = ["i-master", "i-w1", "i-w2", "i-w3", "i-w4"].iter().map(|s| s.to_string()).collect();
    let fx = s.on_launch_failures(vec![], Some(group), T0 + 30 * MINUTE + 1);
    let f = formations(&fx);
    assert!(!f[0].success);
    let reason = &f[0].reason;
    assert!(reason.starts_with("2 of 4 workers joined by the 30-minute deadline, at least 3 needed. "), "{reason}");
    assert!(
        reason.contains(
            "i-w2 (10.0.0.2) failed: the prepare-data script /efs/prepare.sh exited with status 1; its last lines: \
             \"downloading | error: bucket still missing\""
        ),
        "{reason}"
    );
    assert!(reason.contains("1 of the worker group's instances never registered: i-w4."), "{reason}");
    assert!(!reason.contains("i-w3") && !reason.contains("i-w1 ") && !reason.contains("oops"), "{reason}");
    assert!(reason.contains("No launch failures were reported"), "{reason}");
}

/// However many nodes failed, and however long their lines, the signal
/// fits its 4,096 bytes, cut with "…" and never inside a character.
#[test]
fn a_reason_with_many_failed_nodes_fits_the_signal() {
    let (mut s, _) = master(40, 40, true);
    let line = "é".repeat(300);
    let output: String = (0..20).map(|i| format!("{i} {line}\n")).collect();
    for n in 1..=40 {
        send(&mut s, boot_failure(n, &output), T0 + MINUTE);
    }
    s.on_tick(T0 + 30 * MINUTE);
    let fx = s.on_launch_failures(vec!["x".repeat(5_000)], None, T0 + 30 * MINUTE + 1);
    let f = &formations(&fx)[0];
    let body = crate::aws::cloudformation::signal_body(f);
    assert!(body.len() <= SIGNAL_BYTES, "{} bytes", body.len());
    assert!(body.len() > SIGNAL_BYTES - 64, "cut much shorter than needed: {} bytes", body.len());
    assert!(f.reason.ends_with('…'), "{}", f.reason);
    assert!(f.reason.contains("i-w1 (10.0.0.1) failed"), "{}", f.reason);
    // Quoted lines are bounded per node: the first node's last line is there.
    assert!(f.reason.contains(&format!("19 {}", "é".repeat(100))), "{}", f.reason);
}

/// Reports from too many nodes are not all kept; a member's report is logged only.
#[test]
fn boot_failures_kept_are_bounded() {
    let (mut s, _) = master(1, 1, true);
    send(&mut s, register(1), T0 + 1);
    assert!(s.formed());
    let fx = send(&mut s, boot_failure(1, "x\n"), T0 + 2);
    assert!(s.boot_failures().is_empty() && !logs(&fx).is_empty());
    for n in 2..(2 + BOOT_FAILURES_KEPT as u32 + 5) {
        send(&mut s, boot_failure(n, "x\n"), T0 + 3);
    }
    assert_eq!(s.boot_failures().len(), BOOT_FAILURES_KEPT);
}

/// The success signal's data carries the timeline's summary (median and
/// slowest per phase, the slowest node named); `applied` comes later, into
/// the state the master keeps.
#[test]
fn the_success_signal_carries_the_timeline_summary() {
    let size = GroupSize { requested: 3, min: 1 };
    let me = Register {
        launched_unix_ms: Some(T0 - 90_000),
        booted_unix_ms: Some(T0 - 60_000),
        agent_started_unix_ms: Some(T0 - 10_000),
        data: None,
        ..master_reg()
    };
    let mut s = MasterState::new(&config(30, false), size, me, "ssh-ed25519 AAAA key".into(), T0);
    s.start(T0, 0);
    send(&mut s, register(1), T0 + 1_000);
    send(&mut s, register(2), T0 + 2_000);
    let fx = send(&mut s, register(3), T0 + 9_000);
    let f = formations(&fx);
    assert!(f[0].success);
    let data: serde_json::Value = serde_json::from_str(&f[0].data).unwrap();
    let t = &data["timeline"];
    // Seconds after the master's launch (T0 - 90 s).
    assert_eq!(
        t["launched"],
        serde_json::json!({"nodes": 1, "median_s": 0.0, "slowest_s": 0.0, "slowest": "deeplearning-worker1"})
    );
    assert_eq!(t["booted"]["median_s"], 30.0);
    assert_eq!(t["agent_started"]["median_s"], 80.0);
    assert_eq!(
        t["registered"],
        serde_json::json!({"nodes": 4, "median_s": 91.0, "slowest_s": 99.0, "slowest": "deeplearning-worker4"})
    );
    eprintln!("the signal's data: {}", f[0].data);
    assert!(t.get("applied").is_none(), "nothing applied before generation 1 goes out: {t}");
    assert!(crate::aws::cloudformation::signal_body(f[0]).len() < 1_024);

    ack_all(&mut s, T0 + 12_000);
    send(&mut s, applied("i-w2", 1), T0 + 20_000); // again: the first counts
    let timeline = s.timeline();
    assert_eq!(timeline.nodes().len(), 4);
    for n in timeline.nodes().values() {
        assert_eq!(n.applied_ms, Some(T0 + 12_000), "{n:?}");
        assert!(n.registered_ms.is_some_and(|r| r <= T0 + 12_000), "{n:?}");
    }
    let master = &timeline.nodes()["i-master"];
    assert_eq!(
        master.phases(),
        [Some(T0 - 90_000), Some(T0 - 60_000), Some(T0 - 10_000), None, Some(T0), Some(T0 + 12_000)]
    );
    assert_eq!(timeline.summary()["applied"].slowest_s, 102.0);
    // A restart keeps it (it is in the saved state).
    let resumed: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(resumed.timeline(), timeline);
    // A state file from before the timeline is read with an empty one.
    let mut old: serde_json::Value = serde_json::to_value(&s).unwrap();
    old.as_object_mut().unwrap().remove("timeline");
    let old: MasterState = serde_json::from_value(old).unwrap();
    assert!(old.timeline().nodes().is_empty());
}

/// A worker's own launch, boot and agent start come with its registration.
#[test]
fn a_workers_boot_and_start_times_come_with_its_registration() {
    let size = GroupSize { requested: 1, min: 1 };
    let mut s = MasterState::new(&config(30, false), size, master_reg(), "ssh-ed25519 AAAA key".into(), T0);
    s.start(T0, 0);
    let timed = Register {
        launched_unix_ms: Some(T0 - 70_000),
        booted_unix_ms: Some(T0 - 30_000),
        agent_started_unix_ms: Some(T0 - 5_000),
        data: None,
        ..worker_reg(1)
    };
    send(&mut s, MasterInbound::Register(timed), T0 + 1_000);
    let worker = &s.timeline().nodes()["i-w1"];
    assert_eq!(worker.phases(), [Some(T0 - 70_000), Some(T0 - 30_000), Some(T0 - 5_000), None, Some(T0 + 1_000), None]);
}

/// One entry per member, however many join and leave: a node that leaves
/// or terminates is dropped, a rebooted one starts again.
#[test]
fn the_timeline_is_bounded_by_the_members() {
    let mut s = formed(3, false);
    for round in 0..50u64 {
        let at = T0 + 10_000 + round * 1_000;
        send(&mut s, leave("i-w2"), at);
        send(&mut s, lifecycle("i-w3", "autoscaling:EC2_INSTANCE_TERMINATING"), at);
        let n = 100 + round as u32;
        send(&mut s, register(n), at);
        assert!(s.timeline().nodes().len() <= 4, "{:?}", s.timeline().nodes().keys());
        send(&mut s, leave(&format!("i-w{n}")), at + 1);
    }
    let ids: Vec<&String> = s.timeline().nodes().keys().collect();
    assert_eq!(ids, ["i-master", "i-w1"]);
    // A reboot: a new registration from a new boot starts the entry again.
    let mut again = worker_reg(1);
    again.boot_id = "boot-1-again".into();
    send(&mut s, MasterInbound::Register(again), T0 + 90 * MINUTE);
    let w1 = &s.timeline().nodes()["i-w1"];
    assert_eq!((w1.registered_ms, w1.applied_ms), (Some(T0 + 90 * MINUTE), None));
}

/// The idle guard inside the master: readings before formation are
/// dropped, the clock starts at the first tick once formed, a worker's
/// busy reading holds it, a departed worker's no longer does, and the
/// action is the capacity to 0 (then, for `stop`, the power-off once the
/// worker group is empty).
#[test]
fn the_idle_guard_runs_once_formed_and_acts_on_the_worker_group() {
    use node_contract::idle::{Activity, IdleAction, IdleMark};
    let settings = idle::IdleSettings {
        stack: "training".into(),
        after_ms: 10 * MINUTE,
        action: IdleAction::Stop,
        report_ms: MINUTE,
    };
    let busy =
        |id: &str| MasterInbound::Activity(Activity { instance_id: id.into(), job_ranks: 1, ..Activity::default() });
    let (mut s, _) = master(2, 0, false);
    s.start_idle(Some(settings));
    let fx = send(&mut s, busy("i-w1"), T0 + 500);
    assert!(!fx.iter().any(|e| matches!(e, Effect::MarkIdle(_))), "{fx:?}");
    let mut fx = send(&mut s, register(1), T0 + 1_000);
    fx.extend(send(&mut s, register(2), T0 + 1_000));
    assert!(s.formed());
    fx.extend(ack_all(&mut s, T0 + 2_000));
    fx.extend(s.on_tick(T0 + 2_000));
    // The clock started once formed, not at the master's start.
    let since: Vec<u64> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::MarkIdle(IdleMark::Idle { since_ms, .. }) => Some(*since_ms),
            _ => None,
        })
        .collect();
    assert!(matches!(since[..], [t] if (T0 + 1_000..=T0 + 2_000).contains(&t)), "{fx:?}");
    let fx = send(&mut s, busy("i-w2"), T0 + 5 * MINUTE);
    assert!(fx.contains(&Effect::MarkIdle(IdleMark::Busy)), "{fx:?}");
    assert!(s.next_deadline().is_some());
    // The busy worker leaves: the cluster idles from then.
    let fx = send(&mut s, leave("i-w2"), T0 + 6 * MINUTE);
    assert!(fx.iter().any(|e| matches!(e, Effect::MarkIdle(IdleMark::Idle { .. }))), "{fx:?}");
    let fx = s.on_tick(T0 + 16 * MINUTE);
    assert!(fx.contains(&Effect::SetDesiredCapacity(0)) && fx.contains(&Effect::CheckMembers), "{fx:?}");
    assert!(!fx.contains(&Effect::PowerOff), "not before the group is empty: {fx:?}");
    // Worker 1 terminates; the master lets it go once it applied the
    // generation without it (the master alone), and the group empties.
    let fx = send(&mut s, terminating("i-w1"), T0 + 16 * MINUTE + 1_000);
    let without = published(&fx)[0].clone();
    let fx = send(&mut s, applied("i-master", without.generation), T0 + 16 * MINUTE + 2_000);
    assert!(fx.contains(&completion("i-w1")), "{fx:?}");
    let fx = s.on_group_instances(&["i-w1".into()], T0 + 16 * MINUTE + 3_000);
    assert!(!fx.contains(&Effect::PowerOff), "{fx:?}");
    let fx = s.on_group_instances(&[], T0 + 16 * MINUTE + 8_000);
    assert_eq!(fx.last(), Some(&Effect::PowerOff), "{fx:?}");
    // Off: nothing of the guard.
    let (mut s, _) = master(1, 0, false);
    s.start_idle(None);
    send(&mut s, register(1), T0 + 1_000);
    let fx = s.on_tick(T0 + 1_000 * MINUTE);
    assert!(!fx.iter().any(|e| matches!(e, Effect::MarkIdle(_) | Effect::SetDesiredCapacity(0))), "{fx:?}");
}
