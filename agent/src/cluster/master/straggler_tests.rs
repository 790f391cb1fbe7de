//! Unit tests of the master's side of a straggler: the log line with the
//! node's GPU facts, the tag for `synth status`, and a finding sent twice.

use node_contract::gpu::{CheckResult, GpuAction, GpuCheck, GpuLevel, GpuReport, Verdict};
use node_contract::message::MasterInbound;
use node_contract::straggler::{Straggler, StragglerMark};

use super::*;
use crate::cluster::testkit::{T0, config, logs, master_reg, worker_reg};

fn master(gate: Option<GpuAction>) -> MasterState {
    let mut c = config(30, false);
    c.gpu_check =
        gate.map(|action| GpuCheck { level: GpuLevel::Quick, action, timeout_seconds: 60, expect: Default::default() });
    let mut s =
        MasterState::new(&c, GroupSize { requested: 2, min: 1 }, master_reg(), "ssh-ed25519 AAAA key".into(), T0);
    s.start(T0, 0);
    s
}

fn straggler(n: u32, at: u64) -> Straggler {
    Straggler {
        alias: format!("deeplearning-worker{n}"),
        instance_id: format!("i-w{n}"),
        rank: n * 8 + 5,
        local_rank: 5,
        percent_slower: 38,
        steps: 200,
        named_unix_ms: at,
        after_checkpoint: false,
    }
}

/// `id` reported its GPU check: throttled GPU 5 (failed) or all passed.
fn gpu_report(id: &str, throttled: bool) -> MasterInbound {
    MasterInbound::GpuReport(GpuReport {
        instance_id: id.into(),
        private_ip: "10.0.0.7".into(),
        instance_type: "p5.48xlarge".into(),
        checks: vec![CheckResult {
            check: "throttle".into(),
            gpu: Some(5),
            value: if throttled { "HW slowdown" } else { "none" }.into(),
            expected: "no HW slowdown, HW thermal, HW power brake or SW thermal".into(),
            verdict: if throttled { Verdict::Fail } else { Verdict::Pass },
            millis: 1,
        }],
        timed_out: false,
        millis: 4_000,
    })
}

fn marks(fx: &[Effect]) -> Vec<&StragglerMark> {
    fx.iter().filter_map(|e| if let Effect::MarkStragglers(m) = e { Some(m) } else { None }).collect()
}

#[test]
fn a_straggler_is_logged_with_its_nodes_gpu_facts_and_tagged() {
    // Each case: the GPU gate, what worker 7 reported, what the line says about its GPUs.
    let cases: [(Option<GpuAction>, Option<bool>, &str); 4] = [
        (
            Some(GpuAction::Warn),
            Some(true),
            "its GPU check at boot failed: i-w7 (10.0.0.7): throttle on GPU 5: HW slowdown, expected no HW slowdown",
        ),
        (Some(GpuAction::Warn), Some(false), "its GPU check at boot passed"),
        (Some(GpuAction::Warn), None, "no GPU check report from it"),
        (None, None, "no GPU check (the GPU gate is off)"),
    ];
    for (gate, report, facts) in cases {
        let mut s = master(gate);
        if let Some(throttled) = report {
            s.on_inbound(gpu_report("i-w7", throttled), T0 + 1, &|_| true);
        }
        let fx = s.on_inbound(MasterInbound::Straggler(straggler(7, 50)), T0 + 2, &|_| true);
        let log = logs(&fx);
        assert!(
            log.contains(
                "straggler: deeplearning-worker7 (i-w7, local rank 5): steps 38 % slower than the median of the \
                 other ranks for 200 steps; "
            ),
            "{log}"
        );
        assert!(log.contains(facts), "{gate:?} {report:?}: {log}");
        assert_eq!(marks(&fx), [&StragglerMark { stragglers: vec![straggler(7, 50)] }]);
        // No action on it: naming only.
        assert!(!fx.iter().any(|e| matches!(e, Effect::MarkUnhealthy(_))), "{fx:?}");
    }
}

fn unhealthy(fx: &[Effect]) -> Vec<&str> {
    fx.iter().filter_map(|e| if let Effect::MarkUnhealthy(id) = e { Some(id.as_str()) } else { None }).collect()
}

/// Under `replace` a worker named just after a checkpoint is replaced; one
/// named without a checkpoint, the master, or a node that is not a member
/// is only named; `warn` never replaces.
#[test]
fn replace_marks_a_straggler_unhealthy_only_after_a_checkpoint() {
    // Each case: the gate's action, the node (worker 1 or the master), after a checkpoint, replaced.
    let cases = [
        (GpuAction::Replace, "i-w1", true, true),
        (GpuAction::Replace, "i-w1", false, false),
        (GpuAction::Replace, "i-master", true, false),
        (GpuAction::Replace, "i-w9", true, false),
        (GpuAction::Warn, "i-w1", true, false),
        (GpuAction::Fail, "i-w1", true, true),
    ];
    for (action, id, after_checkpoint, replaced) in cases {
        let mut s = master(Some(action));
        s.on_inbound(MasterInbound::Register(worker_reg(1)), T0 + 1, &|_| true);
        s.on_inbound(MasterInbound::Register(worker_reg(2)), T0 + 2, &|_| true);
        assert!(s.formed());
        let finding = Straggler { instance_id: id.into(), after_checkpoint, ..straggler(1, 7) };
        let fx = s.on_inbound(MasterInbound::Straggler(finding), T0 + 3, &|_| true);
        let want: &[&str] = if replaced { &[id] } else { &[] };
        assert_eq!(unhealthy(&fx), want, "{action:?} {id} {after_checkpoint}: {}", logs(&fx));
        assert_eq!(marks(&fx).len(), 1, "named in every case");
    }
}

/// A judgement, not a fault: at most a tenth of the nodes (at least one)
/// are replaced for being slow over the master's life; past that the
/// stragglers are only named, saying why.
#[test]
fn straggler_replacements_stop_at_the_budget() {
    assert_eq!(
        (
            replacement_budget(3, stragglers::REPLACEMENTS_AT_LEAST),
            replacement_budget(64, stragglers::REPLACEMENTS_AT_LEAST)
        ),
        (1, 6)
    );
    let mut s = master(Some(GpuAction::Replace));
    s.on_inbound(MasterInbound::Register(worker_reg(1)), T0 + 1, &|_| true);
    s.on_inbound(MasterInbound::Register(worker_reg(2)), T0 + 2, &|_| true);
    let named =
        |n: u32, at: u64| Straggler { instance_id: format!("i-w{n}"), after_checkpoint: true, ..straggler(n, at) };
    let fx = s.on_inbound(MasterInbound::Straggler(named(1, 7)), T0 + 3, &|_| true);
    assert_eq!(unhealthy(&fx), ["i-w1"], "{}", logs(&fx));
    let fx = s.on_inbound(MasterInbound::Straggler(named(2, 8)), T0 + 4, &|_| true);
    assert!(unhealthy(&fx).is_empty(), "{}", logs(&fx));
    assert!(logs(&fx).contains("1 straggler replacement(s) made already, the most for 3 nodes"), "{}", logs(&fx));
    assert_eq!(marks(&fx).len(), 1, "still named");
}

#[test]
fn the_newest_are_kept_and_a_repeat_is_not_counted() {
    let mut s = master(None);
    for n in 0..12u32 {
        s.on_inbound(MasterInbound::Straggler(straggler(n, u64::from(n))), T0 + 1, &|_| true);
    }
    // The agent sends its file again after a restart: nothing new.
    let fx = s.on_inbound(MasterInbound::Straggler(straggler(11, 11)), T0 + 2, &|_| true);
    assert!(marks(&fx).is_empty(), "{fx:?}");
    assert!(logs(&fx).contains("already counted"), "{}", logs(&fx));
    // The same node named again later (recovered and relapsed) is new.
    let fx = s.on_inbound(MasterInbound::Straggler(straggler(11, 99)), T0 + 3, &|_| true);
    let mark = marks(&fx)[0];
    assert_eq!(mark.stragglers.len(), stragglers::KEPT);
    assert_eq!(mark.stragglers[0], straggler(11, 99));
    assert_eq!(mark.stragglers[1], straggler(11, 11));
    assert_eq!(mark.stragglers.last(), Some(&straggler(5, 5)));
    // It survives a restart of the agent (the state file).
    let saved: MasterState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(saved, s);
}
