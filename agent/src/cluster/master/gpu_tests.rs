//! Unit tests of the master's side of the GPU gate: what each action does
//! with a failed node, and what the formation signal says.

use node_contract::gpu::{CheckResult, GpuAction, GpuCheck, GpuLevel, GpuReport, Verdict};
use node_contract::message::MasterInbound;

use super::*;
use crate::cluster::testkit::{T0, config, formations, logs, master_reg, worker_reg};

fn gated(requested: u32, action: GpuAction) -> MasterState {
    let mut c = config(30, false);
    c.gpu_check = Some(GpuCheck { level: GpuLevel::Quick, action, timeout_seconds: 60, expect: Default::default() });
    let mut s = MasterState::new(&c, GroupSize { requested, min: 1 }, master_reg(), "ssh-ed25519 AAAA key".into(), T0);
    s.start(T0, 0);
    s
}

fn send(s: &mut MasterState, msg: MasterInbound, now: u64) -> Vec<Effect> {
    s.on_inbound(msg, now, &|_| true)
}

/// `id`'s report: passed, or XID 79 on GPU 3.
fn report(id: &str, ip: &str, passed: bool) -> MasterInbound {
    let xid = CheckResult {
        check: "xid".into(),
        gpu: Some(3),
        value: "XID 79 (GPU has fallen off the bus)".into(),
        expected: "no fatal XID since boot".into(),
        verdict: if passed { Verdict::Pass } else { Verdict::Fail },
        millis: 2,
    };
    MasterInbound::GpuReport(GpuReport {
        instance_id: id.into(),
        private_ip: ip.into(),
        instance_type: "p5.48xlarge".into(),
        checks: vec![xid],
        timed_out: false,
        millis: 41_200,
    })
}

fn unhealthy(fx: &[Effect]) -> Vec<&str> {
    fx.iter().filter_map(|e| if let Effect::MarkUnhealthy(id) = e { Some(id.as_str()) } else { None }).collect()
}

#[test]
fn replace_marks_a_failed_worker_unhealthy_and_the_signal_names_it() {
    let mut s = gated(2, GpuAction::Replace);
    send(&mut s, report("i-master", "10.0.0.100", true), T0 + 500);
    let fx = send(&mut s, report("i-w1", "10.0.0.1", false), T0 + 600);
    assert_eq!(unhealthy(&fx), ["i-w1"]);
    assert!(
        logs(&fx).contains("gpu check: i-w1 (10.0.0.1, p5.48xlarge) FAILED (41.2 s): xid on GPU 3: XID 79"),
        "{}",
        logs(&fx)
    );
    assert!(!s.failed());
    // Its replacement passes and joins; so does the other worker.
    send(&mut s, report("i-w3", "10.0.0.3", true), T0 + 700);
    send(&mut s, MasterInbound::Register(worker_reg(3)), T0 + 800);
    send(&mut s, report("i-w2", "10.0.0.2", true), T0 + 900);
    let fx = send(&mut s, MasterInbound::Register(worker_reg(2)), T0 + 1_000);
    let f = formations(&fx);
    assert_eq!(f.len(), 1, "{}", logs(&fx));
    assert!(f[0].success);
    assert!(
        f[0].reason.ends_with(
            "gpu check: 3 of 4 nodes passed; replaced: i-w1 (10.0.0.1): xid on GPU 3: XID 79 (GPU has fallen off the bus), expected no fatal XID since boot"
        ),
        "{}",
        f[0].reason
    );
    let data: serde_json::Value = serde_json::from_str(&f[0].data).unwrap();
    assert_eq!((data["gpu"]["checked"].as_u64(), data["gpu"]["passed"].as_u64()), (Some(4), Some(3)));
}

#[test]
fn fail_fails_a_formation_under_way_with_the_node_and_its_check() {
    let mut s = gated(2, GpuAction::Fail);
    let fx = send(&mut s, report("i-w1", "10.0.0.1", false), T0 + 600);
    assert!(s.failed());
    let f = formations(&fx);
    assert_eq!(f.len(), 1);
    assert!(!f[0].success);
    assert!(f[0].reason.contains("i-w1 (10.0.0.1, p5.48xlarge) failed its GPU check: xid on GPU 3"), "{}", f[0].reason);
    assert!(unhealthy(&fx).is_empty(), "a failed formation replaces nothing");
}

#[test]
fn fail_after_formation_replaces_and_warn_only_names() {
    let mut s = gated(1, GpuAction::Fail);
    send(&mut s, MasterInbound::Register(worker_reg(1)), T0 + 500);
    assert!(s.formed());
    let fx = send(&mut s, report("i-w2", "10.0.0.2", false), T0 + 600);
    assert_eq!(unhealthy(&fx), ["i-w2"], "a join after formation: as replace");

    let mut s = gated(1, GpuAction::Warn);
    let fx = send(&mut s, report("i-w1", "10.0.0.1", false), T0 + 600);
    assert!(unhealthy(&fx).is_empty() && !s.failed());
    assert!(logs(&fx).contains("it joins anyway (action warn)"), "{}", logs(&fx));
    let fx = send(&mut s, MasterInbound::Register(worker_reg(1)), T0 + 700);
    let f = formations(&fx);
    assert!(
        f[0].success && f[0].reason.contains("gpu check: 0 of 1 nodes passed; joined anyway: i-w1"),
        "{}",
        f[0].reason
    );
}

#[test]
fn a_master_that_fails_fails_the_formation_it_cannot_be_replaced() {
    let mut s = gated(2, GpuAction::Replace);
    let fx = send(&mut s, report("i-master", "10.0.0.100", false), T0 + 600);
    assert!(s.failed());
    assert!(unhealthy(&fx).is_empty(), "the master is not in the worker group");
    let f = formations(&fx);
    assert!(f[0].reason.contains("The master's GPU check failed: xid on GPU 3"), "{}", f[0].reason);
}

#[test]
fn a_node_that_reports_again_counts_once_with_its_newest_verdict() {
    let mut s = gated(1, GpuAction::Warn);
    send(&mut s, report("i-w1", "10.0.0.1", false), T0 + 100);
    send(&mut s, report("i-w1", "10.0.0.1", true), T0 + 200);
    let summary = s.gpu_summary().unwrap();
    assert_eq!((summary.checked, summary.passed, summary.failed.len()), (1, 1, 0));
    let mut off =
        MasterState::new(&config(30, false), GroupSize { requested: 1, min: 1 }, master_reg(), "k".into(), T0);
    let fx = send(&mut off, report("i-w1", "10.0.0.1", false), T0 + 100);
    assert!(logs(&fx).contains("while the GPU gate is off"));
    assert_eq!(off.gpu_summary(), None);
}

#[test]
fn a_gpu_fault_notice_removes_the_node_and_replace_marks_it_unhealthy() {
    use node_contract::interruption::{Interruption, NoticeKind};
    let notice = |id: &str| {
        MasterInbound::Notice(Interruption {
            instance_id: id.into(),
            notice: NoticeKind::GpuFault,
            action: None,
            time: "2026-12-04T21:00:00Z".into(),
            deadline_unix: None,
            detail: Some("XID 79 on GPU 3: GPU has fallen off the bus".into()),
        })
    };
    for (action, marked) in [(GpuAction::Replace, true), (GpuAction::Warn, false)] {
        let mut s = gated(2, action);
        send(&mut s, MasterInbound::Register(worker_reg(1)), T0 + 100);
        send(&mut s, MasterInbound::Register(worker_reg(2)), T0 + 200);
        assert!(s.formed());
        let fx = send(&mut s, notice("i-w2"), T0 + 5_000);
        assert!(
            logs(&fx).contains("found a fatal GPU fault (gpu-fault at 2026-12-04T21:00:00Z: XID 79 on GPU 3"),
            "{}",
            logs(&fx)
        );
        assert!(s.manifest().unwrap().nodes.iter().all(|n| n.instance_id != "i-w2"), "removed at once");
        assert_eq!(unhealthy(&fx) == ["i-w2"], marked, "{action:?}");
    }
}
