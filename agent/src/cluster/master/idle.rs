//! The idle guard's decision (docs/ARCHITECTURE.md, "The idle guard"): a
//! pure state machine the master holds in its state, fed each node's
//! [`Activity`] (the workers' `activity` messages, the master's own probe)
//! and the time, and answering with [`Effect`]s: the [`IdleMark`] for the
//! worker group's tag, the log line, the capacity to set, the power-off.
//!
//! The cluster is busy while any node's latest reading says busy and is
//! younger than [`IdleWatch::stale_ms`] (a worker resends a busy reading
//! every report period, so one that stops, or whose agent died, stops
//! counting after two and a half of them). Once nothing is busy the clock
//! runs from that moment; any busy reading stops it, and the next idle
//! stretch starts from zero. After `after_ms` of idling the action runs
//! once per stretch.
//!
//! After the action the master reads the worker group until it is empty
//! (every [`GROUP_CHECK_MS`], for at most [`GROUP_EMPTY_WAIT_MS`]): each
//! read also drops members the group no longer has, whose lifecycle
//! message never came (`MasterState::on_group_instances`). `stop` powers
//! the master off only then: the terminating workers' lifecycle actions
//! are completed by this master (`super::departures`), and a master already
//! off would leave each of them running until the hook's heartbeat timeout,
//! 300 s of every GPU worker.

use std::collections::BTreeMap;

use node_contract::idle::{Activity, IdleAction, IdleMark};
use serde::{Deserialize, Serialize};

use crate::cluster::effect::Effect;

/// How long the guard waits, after scaling the workers to 0, for the worker
/// group to empty (and `stop` before the master powers off anyway): the
/// lifecycle hook's heartbeat timeout (300 s, synth's
/// `TERMINATE_HEARTBEAT_SECONDS`), after which Auto Scaling terminates the
/// workers by itself, and a minute more.
pub(crate) const GROUP_EMPTY_WAIT_MS: u64 = 360_000;
/// How often the worker group is read while the guard waits for it to empty.
pub(crate) const GROUP_CHECK_MS: u64 = 5_000;

/// The idle guard's timing: the blueprint's minutes as milliseconds, and
/// how often a busy worker reports (a minute; both shorter in tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleSettings {
    /// The cluster's stack, named in the line that says how to bring the
    /// workers back (`synth resume <stack>`).
    pub stack: String,
    /// How long the cluster must be idle before the action.
    pub after_ms: u64,
    /// What to do then.
    pub action: IdleAction,
    /// How often a busy node reports.
    pub report_ms: u64,
}

/// Busy or idle since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Stretch {
    /// Some node is busy (or nothing was decided yet).
    Busy,
    /// No node has been busy since then (unix ms).
    IdleSince(u64),
}

/// The idle guard's state, kept in the master's state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdleWatch {
    /// The cluster's stack (absent from a state saved before it was kept).
    #[serde(default)]
    stack: String,
    after_ms: u64,
    action: IdleAction,
    /// A busy reading older than this no longer counts.
    stale_ms: u64,
    /// Each node's latest reading and when the master got it.
    readings: BTreeMap<String, (Activity, u64)>,
    stretch: Stretch,
    /// When the action ran in this idle stretch.
    acted_ms: Option<u64>,
    /// The guard acted and waits for the worker group to empty (`stop`:
    /// before the power-off). Older state files have none.
    #[serde(default)]
    emptying: Option<GroupWait>,
}

/// Waiting for the worker group to empty after the action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct GroupWait {
    /// When the wait ends whatever the group holds.
    due_ms: u64,
    /// When the group is read next.
    next_check_ms: u64,
}

impl IdleWatch {
    /// A guard that has decided nothing yet: the clock starts at the first
    /// tick once the cluster formed.
    pub(crate) fn new(settings: IdleSettings) -> IdleWatch {
        let mut watch = IdleWatch {
            stack: String::new(),
            after_ms: 0,
            action: settings.action,
            stale_ms: 0,
            readings: BTreeMap::new(),
            stretch: Stretch::Busy,
            acted_ms: None,
            emptying: None,
        };
        watch.configure(settings);
        watch
    }

    /// Takes new settings (the agent's start: the node config or the test
    /// knob may differ from the saved state's) and starts again: the clock
    /// starts at the next tick. A master started again (by `synth resume`)
    /// gives the cluster the whole time again.
    pub(crate) fn restart(&mut self, settings: IdleSettings) {
        self.configure(settings);
        self.readings.clear();
        self.stretch = Stretch::Busy;
        self.acted_ms = None;
        self.emptying = None;
    }

    fn configure(&mut self, settings: IdleSettings) {
        self.stack = settings.stack;
        self.after_ms = settings.after_ms;
        self.action = settings.action;
        self.stale_ms = settings.report_ms.saturating_mul(5) / 2;
    }

    /// A node's reading (a worker's message, or the master's own probe).
    pub(crate) fn on_activity(&mut self, activity: Activity, now_ms: u64, fx: &mut Vec<Effect>) {
        self.readings.insert(activity.instance_id.clone(), (activity, now_ms));
        self.evaluate(now_ms, fx);
    }

    /// A worker joined the formed cluster. After the action (the workers
    /// were scaled down and someone brought them back: `synth resume`, or
    /// the desired capacity raised) a new idle stretch starts now, with the
    /// whole time: the guard does not scale the group straight back down,
    /// and the mark no longer says the workers are gone.
    pub(crate) fn on_join(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        if self.acted_ms.is_none() {
            return;
        }
        fx.push(Effect::Log(
            "idle guard: a worker joined after the workers were scaled down (resumed); the idle clock starts again"
                .into(),
        ));
        self.stretch = Stretch::Busy;
        self.acted_ms = None;
        self.emptying = None;
        self.evaluate(now_ms, fx);
    }

    /// A node left the cluster: its readings no longer count.
    pub(crate) fn forget(&mut self, instance_id: &str) {
        self.readings.remove(instance_id);
    }

    /// Time passed: readings go stale, the action comes due, the wait for
    /// an empty group reads it again or ends (`stop`: powering off anyway).
    pub(crate) fn on_tick(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        self.evaluate(now_ms, fx);
        let Some(wait) = &mut self.emptying else { return };
        if now_ms >= wait.due_ms {
            let power_off = self.powers_off();
            self.emptying = None;
            let then = if power_off {
                "powering the master off anyway (Auto Scaling ends their lifecycle actions by itself)"
            } else {
                "no longer watching it (Auto Scaling ends their lifecycle actions by itself)"
            };
            fx.push(Effect::Log(format!(
                "idle guard: the worker group still has instances {} s after the workers were scaled to 0; {then}",
                GROUP_EMPTY_WAIT_MS / 1000
            )));
            if power_off {
                fx.push(Effect::PowerOff);
            }
        } else if now_ms >= wait.next_check_ms {
            wait.next_check_ms = now_ms.saturating_add(GROUP_CHECK_MS);
            fx.push(Effect::CheckMembers);
        }
    }

    /// The worker group holds `instances` instances (in any lifecycle
    /// state): once it holds none the wait ends (`stop`: the power goes).
    pub(crate) fn on_group(&mut self, instances: usize, fx: &mut Vec<Effect>) {
        if self.emptying.is_none() || instances > 0 {
            return;
        }
        self.emptying = None;
        if self.powers_off() {
            fx.push(Effect::Log("idle guard: the worker group is empty; powering the master off".into()));
            fx.push(Effect::PowerOff);
        } else {
            fx.push(Effect::Log("idle guard: the worker group is empty".into()));
        }
    }

    /// When [`IdleWatch::on_tick`] next has something to do: the action's
    /// time, the moment the last busy reading goes stale, or the next read
    /// of the group while waiting for it to empty.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        let waiting = self.emptying.map(|w| w.next_check_ms.min(w.due_ms));
        let stretch = match self.stretch {
            Stretch::IdleSince(since) if self.acted_ms.is_none() => Some(since.saturating_add(self.after_ms)),
            Stretch::IdleSince(_) => None,
            Stretch::Busy => self
                .readings
                .values()
                .filter(|(a, _)| a.busy())
                .map(|(_, at)| at.saturating_add(self.stale_ms) + 1)
                .max(),
        };
        [stretch, waiting].into_iter().flatten().min()
    }

    /// The mark `synth status` reads, as it stands.
    pub(crate) fn mark(&self) -> IdleMark {
        match self.stretch {
            Stretch::Busy => IdleMark::Busy,
            Stretch::IdleSince(since) => IdleMark::Idle {
                since_ms: since,
                until_ms: since.saturating_add(self.after_ms),
                action: self.action,
                acted_ms: self.acted_ms,
            },
        }
    }

    /// What keeps the cluster busy, by instance id; empty when idle.
    fn busy_nodes(&self, now_ms: u64) -> Vec<(&str, &Activity)> {
        self.readings
            .iter()
            .filter(|(_, (a, at))| a.busy() && now_ms.saturating_sub(*at) <= self.stale_ms)
            .map(|(id, (a, _))| (id.as_str(), a))
            .collect()
    }

    fn evaluate(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        let busy = self.busy_nodes(now_ms);
        match (self.stretch, busy.is_empty()) {
            (Stretch::Busy, false) => {}
            (Stretch::IdleSince(since), false) => {
                let what: Vec<String> = busy.iter().map(|(id, a)| format!("{id}: {}", a.describe())).collect();
                fx.push(Effect::Log(format!(
                    "idle guard: the cluster is busy again after {} s idle ({}); the idle clock stops",
                    now_ms.saturating_sub(since) / 1000,
                    what.join("; ")
                )));
                self.stretch = Stretch::Busy;
                self.acted_ms = None;
                if self.emptying.take().is_some() && self.powers_off() {
                    fx.push(Effect::Log("idle guard: the master stays on (it was waiting to power off)".into()));
                }
                fx.push(Effect::MarkIdle(self.mark()));
            }
            (Stretch::Busy, true) => {
                self.stretch = Stretch::IdleSince(now_ms);
                fx.push(Effect::Log(format!(
                    "idle guard: no node is busy; the cluster idles, and {} in {} s unless a node gets busy",
                    self.action_words(),
                    self.after_ms / 1000
                )));
                fx.push(Effect::MarkIdle(self.mark()));
            }
            (Stretch::IdleSince(since), true) => {
                if self.acted_ms.is_none() && now_ms >= since.saturating_add(self.after_ms) {
                    self.act(since, now_ms, fx);
                }
            }
        }
    }

    /// Whether the action ends with the master's power-off (`stop`).
    fn powers_off(&self) -> bool {
        self.action == IdleAction::Stop
    }

    fn action_words(&self) -> &'static str {
        match self.action {
            IdleAction::ScaleWorkers => "the workers are scaled to 0",
            IdleAction::Stop => "the workers are scaled to 0 and the master stops",
        }
    }

    fn act(&mut self, since: u64, now_ms: u64, fx: &mut Vec<Effect>) {
        self.acted_ms = Some(now_ms);
        fx.push(Effect::Log(format!(
            "idle guard: no trainer job, SSH session or busy GPU on any node for {} s (since {} unix ms): {} \
             (blueprint `idle.action: {}`); `synth resume {}` brings the workers back",
            now_ms.saturating_sub(since) / 1000,
            since,
            self.action_words(),
            self.action.name(),
            if self.stack.is_empty() { "STACK" } else { &self.stack }
        )));
        fx.push(Effect::MarkIdle(self.mark()));
        fx.push(Effect::SetDesiredCapacity(0));
        if self.powers_off() {
            fx.push(Effect::Log(format!(
                "idle guard: the master powers off once the worker group is empty (at most {} s)",
                GROUP_EMPTY_WAIT_MS / 1000
            )));
        }
        self.emptying = Some(GroupWait {
            due_ms: now_ms.saturating_add(GROUP_EMPTY_WAIT_MS),
            next_check_ms: now_ms.saturating_add(GROUP_CHECK_MS),
        });
        fx.push(Effect::CheckMembers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: u64 = 60_000;

    fn settings(action: IdleAction) -> IdleSettings {
        IdleSettings { stack: "training".into(), after_ms: 10 * MINUTE, action, report_ms: MINUTE }
    }

    fn reading(id: &str, job_ranks: u32, ssh_sessions: u32) -> Activity {
        Activity { instance_id: id.into(), job_ranks, ssh_sessions, gpu_percent: None }
    }

    fn acted(fx: &[Effect]) -> bool {
        fx.contains(&Effect::SetDesiredCapacity(0))
    }

    /// A watch whose first tick came at t = 0 (so it idles from 0).
    fn started(action: IdleAction) -> IdleWatch {
        let mut w = IdleWatch::new(settings(action));
        let mut fx = Vec::new();
        w.on_tick(0, &mut fx);
        assert!(matches!(fx[1], Effect::MarkIdle(IdleMark::Idle { since_ms: 0, until_ms: 600_000, .. })), "{fx:?}");
        w
    }

    #[test]
    fn an_idle_cluster_scales_its_workers_down_once_after_the_time() {
        let mut w = started(IdleAction::ScaleWorkers);
        assert_eq!(w.next_deadline(), Some(10 * MINUTE));
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE - 1, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        w.on_tick(10 * MINUTE, &mut fx);
        assert!(acted(&fx) && !fx.contains(&Effect::PowerOff), "{fx:?}");
        let Effect::Log(line) = &fx[0] else { panic!("{fx:?}") };
        assert!(line.contains("for 600 s") && line.contains("scaled to 0"), "{line}");
        assert!(line.contains("`synth resume training` brings the workers back"), "{line}");
        assert!(fx.contains(&Effect::MarkIdle(IdleMark::Idle {
            since_ms: 0,
            until_ms: 10 * MINUTE,
            action: IdleAction::ScaleWorkers,
            acted_ms: Some(10 * MINUTE)
        })));
        // Then it reads the group until it is empty (each read also drops
        // members the group no longer has), and nothing more: once per
        // stretch.
        assert!(fx.contains(&Effect::CheckMembers), "{fx:?}");
        assert_eq!(w.next_deadline(), Some(10 * MINUTE + GROUP_CHECK_MS));
        let mut empty = Vec::new();
        w.on_group(0, &mut empty);
        assert_eq!(empty, vec![Effect::Log("idle guard: the worker group is empty".into())]);
        let mut later = Vec::new();
        w.on_tick(20 * MINUTE, &mut later);
        assert!(later.is_empty(), "{later:?}");
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn scale_workers_stops_reading_a_group_that_does_not_empty() {
        let mut w = started(IdleAction::ScaleWorkers);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE, &mut fx);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE + GROUP_EMPTY_WAIT_MS, &mut fx);
        assert!(matches!(&fx[..], [Effect::Log(l)] if l.contains("no longer watching it")), "{fx:?}");
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn a_state_saved_without_the_stack_name_still_loads_and_names_a_placeholder() {
        let w = started(IdleAction::ScaleWorkers);
        let mut saved = serde_json::to_value(&w).unwrap();
        saved.as_object_mut().unwrap().remove("stack").expect("the stack is saved");
        let mut loaded: IdleWatch = serde_json::from_value(saved).unwrap();
        let mut fx = Vec::new();
        loaded.on_tick(10 * MINUTE, &mut fx);
        let Effect::Log(line) = &fx[0] else { panic!("{fx:?}") };
        assert!(line.contains("`synth resume STACK`"), "{line}");
    }

    /// `stop` scales the workers to 0 and then powers the master off, once
    /// the worker group is empty: the master completes the terminating
    /// workers' lifecycle actions, so they do not run on to the hook's
    /// heartbeat timeout.
    #[test]
    fn stop_powers_the_master_off_once_the_group_is_empty() {
        let mut w = started(IdleAction::Stop);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE, &mut fx);
        let capacity = fx.iter().position(|e| *e == Effect::SetDesiredCapacity(0)).unwrap();
        let check = fx.iter().position(|e| *e == Effect::CheckMembers).unwrap();
        assert!(capacity < check && !fx.contains(&Effect::PowerOff), "{fx:?}");
        // Still terminating: it waits, and reads the group again later.
        let mut fx = Vec::new();
        w.on_group(2, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        assert_eq!(w.next_deadline(), Some(10 * MINUTE + GROUP_CHECK_MS));
        w.on_tick(10 * MINUTE + GROUP_CHECK_MS - 1, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        w.on_tick(10 * MINUTE + GROUP_CHECK_MS, &mut fx);
        assert_eq!(fx, vec![Effect::CheckMembers]);
        // Empty: the power goes, once.
        let mut fx = Vec::new();
        w.on_group(0, &mut fx);
        assert_eq!(fx.last(), Some(&Effect::PowerOff), "{fx:?}");
        let mut later = Vec::new();
        w.on_group(0, &mut later);
        w.on_tick(30 * MINUTE, &mut later);
        assert!(later.is_empty() && w.next_deadline().is_none(), "{later:?}");
    }

    #[test]
    fn stop_powers_off_anyway_when_the_group_does_not_empty_in_time() {
        let mut w = started(IdleAction::Stop);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE, &mut fx);
        let mut checks = 0;
        let mut now = 10 * MINUTE;
        while let Some(next) = w.next_deadline() {
            assert!(next > now, "time moves on");
            now = next;
            let mut fx = Vec::new();
            w.on_tick(now, &mut fx);
            if fx.contains(&Effect::CheckMembers) {
                checks += 1;
                w.on_group(1, &mut fx);
            }
            if fx.contains(&Effect::PowerOff) {
                assert!(matches!(&fx[0], Effect::Log(l) if l.contains("powering the master off anyway")), "{fx:?}");
                break;
            }
        }
        assert_eq!(now, 10 * MINUTE + GROUP_EMPTY_WAIT_MS);
        assert_eq!(checks, GROUP_EMPTY_WAIT_MS / GROUP_CHECK_MS - 1);
    }

    #[test]
    fn a_busy_node_while_stop_waits_keeps_the_master_on() {
        let mut w = started(IdleAction::Stop);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE, &mut fx);
        let mut fx = Vec::new();
        w.on_activity(reading("i-master", 0, 1), 10 * MINUTE + 1_000, &mut fx);
        assert!(fx.iter().any(|e| matches!(e, Effect::Log(l) if l.contains("the master stays on"))), "{fx:?}");
        let mut fx = Vec::new();
        w.on_group(0, &mut fx);
        w.on_tick(10 * MINUTE + GROUP_EMPTY_WAIT_MS, &mut fx);
        assert!(!fx.contains(&Effect::PowerOff), "{fx:?}");
    }

    #[test]
    fn a_job_anywhere_resets_the_clock_and_idling_starts_again_when_it_ends() {
        let mut w = started(IdleAction::ScaleWorkers);
        let mut fx = Vec::new();
        w.on_activity(reading("i-w2", 1, 0), 9 * MINUTE, &mut fx);
        assert!(fx.contains(&Effect::MarkIdle(IdleMark::Busy)), "{fx:?}");
        assert!(matches!(&fx[0], Effect::Log(l) if l.contains("i-w2: 1 job rank")), "{fx:?}");
        fx.clear();
        // The job runs for an hour; its node reports every minute.
        for minute in 10..70 {
            w.on_activity(reading("i-w2", 1, 0), minute * MINUTE, &mut fx);
            w.on_tick(minute * MINUTE + 30_000, &mut fx);
        }
        assert!(fx.is_empty(), "{fx:?}");
        // It ends: the clock starts from then, the whole time again.
        w.on_activity(reading("i-w2", 0, 0), 70 * MINUTE, &mut fx);
        assert!(fx.contains(&Effect::MarkIdle(IdleMark::Idle {
            since_ms: 70 * MINUTE,
            until_ms: 80 * MINUTE,
            action: IdleAction::ScaleWorkers,
            acted_ms: None
        })));
        fx.clear();
        w.on_tick(80 * MINUTE - 1, &mut fx);
        assert!(!acted(&fx));
        w.on_tick(80 * MINUTE, &mut fx);
        assert!(acted(&fx));
    }

    #[test]
    fn an_ssh_session_on_the_master_keeps_the_cluster_up() {
        let mut w = started(IdleAction::ScaleWorkers);
        let mut fx = Vec::new();
        for minute in 0..30 {
            w.on_activity(reading("i-master", 0, 1), minute * MINUTE, &mut fx);
            w.on_tick(minute * MINUTE + 59_000, &mut fx);
        }
        assert!(!acted(&fx), "{fx:?}");
    }

    #[test]
    fn a_busy_reading_that_is_not_renewed_stops_counting() {
        let mut w = started(IdleAction::ScaleWorkers);
        let mut fx = Vec::new();
        // A worker reports a job, then its agent dies without a word.
        w.on_activity(reading("i-w3", 4, 0), MINUTE, &mut fx);
        assert_eq!(w.next_deadline(), Some(MINUTE + 150_000 + 1));
        fx.clear();
        w.on_tick(MINUTE + 150_000, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        w.on_tick(MINUTE + 150_001, &mut fx);
        assert!(matches!(fx[1], Effect::MarkIdle(IdleMark::Idle { since_ms: 210_001, .. })), "{fx:?}");
        // A worker that left is forgotten at once.
        w.on_activity(reading("i-w4", 1, 0), 5 * MINUTE, &mut fx);
        w.forget("i-w4");
        fx.clear();
        w.on_tick(5 * MINUTE + 1, &mut fx);
        assert!(matches!(fx[1], Effect::MarkIdle(IdleMark::Idle { .. })), "{fx:?}");
    }

    #[test]
    fn a_busy_gpu_keeps_a_node_busy_and_an_idle_one_does_not() {
        let mut w = started(IdleAction::ScaleWorkers);
        let mut fx = Vec::new();
        let gpu = |p| Activity { instance_id: "i-g".into(), gpu_percent: Some(p), ..Activity::default() };
        w.on_activity(gpu(4), MINUTE, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        w.on_activity(gpu(90), 2 * MINUTE, &mut fx);
        assert!(fx.contains(&Effect::MarkIdle(IdleMark::Busy)), "{fx:?}");
    }

    #[test]
    fn a_restart_gives_the_cluster_the_whole_time_again() {
        let mut w = started(IdleAction::Stop);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE, &mut fx);
        w.on_group(0, &mut fx);
        assert!(fx.contains(&Effect::PowerOff));
        // Someone started the master again an hour later.
        let mut fx = Vec::new();
        w.restart(settings(IdleAction::Stop));
        w.on_tick(70 * MINUTE, &mut fx);
        assert!(!fx.contains(&Effect::PowerOff), "{fx:?}");
        assert_eq!(w.next_deadline(), Some(80 * MINUTE));
        // A state saved, read back, carries on.
        let back: IdleWatch = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert_eq!(back, w);
    }

    #[test]
    fn workers_joining_after_the_action_start_a_new_stretch_and_do_not_scale_down_at_once() {
        let mut w = started(IdleAction::ScaleWorkers);
        let mut fx = Vec::new();
        w.on_tick(10 * MINUTE, &mut fx);
        assert!(acted(&fx));
        // A join before the action changes nothing.
        let mut early = started(IdleAction::ScaleWorkers);
        let mut none = Vec::new();
        early.on_join(MINUTE, &mut none);
        assert!(none.is_empty(), "{none:?}");
        // An hour later `synth resume` brings a worker back; it joins.
        let mut fx = Vec::new();
        w.on_join(70 * MINUTE, &mut fx);
        assert!(matches!(&fx[0], Effect::Log(l) if l.contains("resumed")), "{fx:?}");
        assert!(
            fx.contains(&Effect::MarkIdle(IdleMark::Idle {
                since_ms: 70 * MINUTE,
                until_ms: 80 * MINUTE,
                action: IdleAction::ScaleWorkers,
                acted_ms: None
            })),
            "{fx:?}"
        );
        assert!(!acted(&fx), "not scaled straight back down: {fx:?}");
        assert_eq!(w.next_deadline(), Some(80 * MINUTE));
        let mut fx = Vec::new();
        w.on_tick(80 * MINUTE - 1, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        // Idle for the whole time again: the guard acts again.
        w.on_tick(80 * MINUTE, &mut fx);
        assert!(acted(&fx), "{fx:?}");
    }
}
