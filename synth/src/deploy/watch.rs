//! The watcher: stack events in, the story of the operation out.
//!
//! Pure: [`Watcher::feed`] takes events as `DescribeStackEvents` returns them
//! (newest first, pages overlapping, the same event seen many times), keeps
//! each once, and returns [`Note`]s: a phase finished (with its elapsed
//! time), a resource failed, the stack settled. [`Watcher::live_status`] is
//! what is in progress now. The polling edge ([`super::monitor`]) decides
//! when to call, with [`Backoff`].

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::phase::Phase;
use super::port::{Event, GroupState};

/// What the stack is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A new stack.
    Create,
    /// A change set executed on an existing stack.
    Update,
    /// Deleting the stack.
    Delete,
}

impl Operation {
    /// The stack status this operation ends in when it succeeds.
    pub(crate) fn success(self) -> &'static str {
        match self {
            Operation::Create => "CREATE_COMPLETE",
            Operation::Update => "UPDATE_COMPLETE",
            Operation::Delete => "DELETE_COMPLETE",
        }
    }
}

/// A resource the operation is expected to touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Planned {
    /// Its type.
    pub resource_type: String,
    /// It may not be touched at all (a condition that could not be decided).
    pub optional: bool,
}

/// Something worth a line of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// Every planned resource of a phase is done.
    PhaseDone {
        /// The phase.
        phase: Phase,
        /// From its first resource starting to its last finishing.
        elapsed_ms: i64,
        /// How many resources it had.
        resources: usize,
    },
    /// A resource failed (cancellations, which only follow another failure, are not noted).
    ResourceFailed(Event),
    /// The stack reached a status that ends the operation.
    Settled {
        /// The final stack status.
        status: String,
        /// Its reason.
        reason: Option<String>,
    },
}

/// The state of one resource, from its newest event.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    phase: Phase,
    status: String,
    first_ms: i64,
    last_ms: i64,
}

/// Reads an operation's events into its story.
#[derive(Clone, Debug)]
pub(crate) struct Watcher {
    op: Operation,
    plan: BTreeMap<String, Planned>,
    seen_ids: HashSet<String>,
    /// This operation's events, oldest first.
    events: Vec<Event>,
    resources: BTreeMap<String, Seen>,
    done: BTreeMap<Phase, i64>,
    group: Option<GroupState>,
    settled: Option<(String, Option<String>)>,
    start_ms: Option<i64>,
    formation_limit: Option<FormationLimit>,
}

/// How long the formation wait condition waits, from the template: its
/// `Timeout` and, within it, the master's formation time (its
/// `CreationPolicy`); the rest is for the stack and the master's boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FormationLimit {
    /// The wait condition's timeout.
    pub timeout_ms: i64,
    /// The formation time (`timeouts.formation_minutes`), when known.
    pub formation_ms: Option<i64>,
}

/// The formation wait condition's limits in `template`, if it has one.
pub(crate) fn formation_limit(template: &serde_json::Value) -> Option<FormationLimit> {
    let resources = template.get("Resources")?;
    let timeout = resources.get("FormationWaitCondition")?.get("Properties")?.get("Timeout")?;
    let seconds: i64 = match timeout {
        serde_json::Value::String(s) => s.parse().ok()?,
        other => other.as_i64()?,
    };
    // `PT5M`: ISO 8601 minutes, as the stack writes it.
    let formation_ms = resources
        .get(crate::stack::MASTER_ID)
        .and_then(|m| m.get("CreationPolicy")?.get("ResourceSignal")?.get("Timeout")?.as_str())
        .and_then(|t| t.strip_prefix("PT")?.strip_suffix('M')?.parse::<i64>().ok())
        .map(|m| m * 60_000);
    Some(FormationLimit { timeout_ms: seconds * 1000, formation_ms })
}

/// Whether a stack status ends an operation.
pub(crate) fn is_settled(status: &str) -> bool {
    !status.ends_with("_IN_PROGRESS") && !status.is_empty()
}

/// Whether a resource's status means it is done with this operation.
fn is_done(status: &str) -> bool {
    status.ends_with("_COMPLETE") || status == "DELETE_SKIPPED"
}

/// A cancellation: only ever the consequence of another resource's failure.
pub(crate) fn is_cancellation(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| {
        let r = r.to_ascii_lowercase();
        r.contains("resource creation cancelled") || r.contains("resource update cancelled")
    })
}

impl Watcher {
    /// A watcher for `op` on resources `plan` (logical id -> what is expected).
    pub(crate) fn new(op: Operation, plan: BTreeMap<String, Planned>) -> Watcher {
        Watcher {
            op,
            plan,
            seen_ids: HashSet::new(),
            events: Vec::new(),
            resources: BTreeMap::new(),
            done: BTreeMap::new(),
            group: None,
            settled: None,
            start_ms: None,
            formation_limit: None,
        }
    }

    /// The formation wait condition's limits, for the time left on the
    /// live line.
    pub(crate) fn set_formation_limit(&mut self, limit: Option<FormationLimit>) {
        self.formation_limit = limit;
    }

    /// Whether an event was already fed (the polling edge stops paging there).
    pub(crate) fn has_seen(&self, id: &str) -> bool {
        self.seen_ids.contains(id)
    }

    /// Feeds a batch of events in any order; returns the notes they make, in time order.
    pub(crate) fn feed(&mut self, batch: Vec<Event>) -> Vec<Note> {
        let mut fresh: Vec<Event> = batch.into_iter().filter(|e| self.seen_ids.insert(e.id.clone())).collect();
        // Oldest first; events of the same millisecond keep the API's order reversed (it lists newest first).
        fresh.reverse();
        fresh.sort_by_key(|e| e.at_ms());
        let mut notes = Vec::new();
        for event in fresh {
            self.start_ms.get_or_insert(event.at_ms());
            if event.is_stack() {
                if is_settled(&event.status) && self.settled.is_none() {
                    self.settled = Some((event.status.clone(), event.reason.clone()));
                    notes.push(Note::Settled { status: event.status.clone(), reason: event.reason.clone() });
                }
            } else if event.status != "SIGNAL_RECEIVED" {
                let phase = Phase::of(&event.logical_id, &event.resource_type);
                let entry = self.resources.entry(event.logical_id.clone()).or_insert(Seen {
                    phase,
                    status: String::new(),
                    first_ms: event.at_ms(),
                    last_ms: event.at_ms(),
                });
                entry.status = event.status.clone();
                entry.last_ms = event.at_ms();
                if event.status.ends_with("_FAILED") && !is_cancellation(event.reason.as_deref()) {
                    notes.push(Note::ResourceFailed(event.clone()));
                }
                if !self.failing() {
                    notes.extend(self.finished_phases());
                }
            }
            self.events.push(event);
        }
        notes
    }

    /// Phases that just finished.
    fn finished_phases(&mut self) -> Vec<Note> {
        let mut notes = Vec::new();
        for phase in Phase::ALL {
            if self.done.contains_key(&phase) {
                continue;
            }
            let planned: Vec<(&String, &Planned)> =
                self.plan.iter().filter(|(id, p)| Phase::of(id, &p.resource_type) == phase).collect();
            if planned.is_empty() {
                continue;
            }
            let complete = planned.iter().all(|(id, p)| match self.resources.get(*id) {
                Some(s) => is_done(&s.status),
                None => p.optional,
            });
            let touched: Vec<&Seen> = planned.iter().filter_map(|(id, _)| self.resources.get(*id)).collect();
            if complete && !touched.is_empty() {
                let first = touched.iter().map(|s| s.first_ms).min().unwrap_or(0);
                let last = touched.iter().map(|s| s.last_ms).max().unwrap_or(0);
                self.done.insert(phase, last);
                notes.push(Note::PhaseDone { phase, elapsed_ms: last - first, resources: touched.len() });
            }
        }
        notes
    }

    /// Whether a resource failed or the stack is rolling back: phases stop being reported.
    fn failing(&self) -> bool {
        self.resources.values().any(|s| s.status.ends_with("_FAILED"))
            || self.events.iter().any(|e| e.is_stack() && e.status.contains("ROLLBACK"))
    }

    /// The worker group's state, for the formation line.
    pub(crate) fn set_group(&mut self, group: GroupState) {
        self.group = Some(group);
    }

    /// Whether the formation phase is under way (the master is up and the
    /// cluster is forming): when the worker group is worth asking about.
    pub(crate) fn forming(&self) -> bool {
        self.op == Operation::Create
            && self.done.contains_key(&Phase::Master)
            && !self.done.contains_key(&Phase::Formation)
            && self.settled.is_none()
    }

    /// The stack's final status and reason, once settled.
    pub(crate) fn settled(&self) -> Option<(&str, Option<&str>)> {
        self.settled.as_ref().map(|(s, r)| (s.as_str(), r.as_deref()))
    }

    /// Whether the operation ended as it should.
    pub(crate) fn succeeded(&self) -> bool {
        self.settled().is_some_and(|(s, _)| s == self.op.success())
    }

    /// This operation's events, oldest first.
    pub(crate) fn events(&self) -> &[Event] {
        &self.events
    }

    /// What is in progress, in one line: each phase under way with its
    /// count, and the formation's worker count (with its clock: the
    /// display draws the clock itself, ticking, around `live_status`).
    #[cfg(test)]
    pub(crate) fn live_line(&self, now_ms: i64) -> String {
        let elapsed = self.start_ms.map(|s| now_ms - s).unwrap_or(0);
        format!("{} {}", clock(elapsed), self.live_status(now_ms))
    }

    /// When the operation began (its first event), once known.
    pub(crate) fn started_ms(&self) -> Option<i64> {
        self.start_ms
    }

    /// The live line without its clock (which the display draws, ticking);
    /// `now_ms` gives the formation's time left.
    pub(crate) fn live_status(&self, now_ms: i64) -> String {
        let mut parts = Vec::new();
        for phase in Phase::ALL {
            if self.done.contains_key(&phase) {
                continue;
            }
            let planned: Vec<&String> =
                self.plan.iter().filter(|(id, p)| Phase::of(id, &p.resource_type) == phase).map(|(id, _)| id).collect();
            let started = planned.iter().filter(|id| self.resources.contains_key(**id)).count();
            if started == 0 {
                continue;
            }
            let finished =
                planned.iter().filter(|id| self.resources.get(**id).is_some_and(|s| is_done(&s.status))).count();
            if phase == Phase::Formation {
                let workers = match &self.group {
                    Some(g) => forming_line(g),
                    None => "formation: waiting for the master's report".to_owned(),
                };
                let began = planned.iter().filter_map(|id| self.resources.get(*id)).map(|s| s.first_ms).min();
                parts.push(match (self.formation_limit, began) {
                    (Some(limit), Some(began)) => {
                        // What the wait is made of, while the line fits a
                        // 100-column terminal with its spinner and clock.
                        let full = format!("{workers}, {}", time_left(limit, now_ms - began, true));
                        if full.chars().count() <= 88 {
                            full
                        } else {
                            format!("{workers}, {}", time_left(limit, now_ms - began, false))
                        }
                    }
                    _ => workers,
                });
            } else {
                parts.push(format!("{} {finished}/{}", phase.label(), planned.len()));
            }
        }
        if parts.is_empty() { "waiting for CloudFormation".to_owned() } else { parts.join(" · ") }
    }
}

/// The formation's count: the workers registered with the master against
/// those requested, from the master's tag (with those running and those
/// whose boot failed); before the master wrote it, the group's running
/// instances.
fn forming_line(g: &GroupState) -> String {
    match g.forming {
        Some(m) => {
            let failed = if m.failed > 0 { format!(", {} failed to boot", m.failed) } else { String::new() };
            format!("formation: {} of {} registered ({} running{failed})", m.registered, m.requested, g.in_service)
        }
        None => format!("formation: {} of {} workers running", g.in_service, g.desired),
    }
}

/// The formation's time left after `elapsed` in the wait condition, with
/// what its timeout is made of: the formation time plus the stack's and
/// the master's boot (a 5-minute formation waits 25 minutes).
fn time_left(limit: FormationLimit, elapsed: i64, what_it_is: bool) -> String {
    let total = minutes(limit.timeout_ms);
    let parts = match limit.formation_ms {
        Some(f) if what_it_is => format!(" ({} formation + {} boot)", minutes(f), minutes(limit.timeout_ms - f)),
        _ => String::new(),
    };
    let left = limit.timeout_ms - elapsed;
    if left > 0 {
        format!("{} left of {total}{parts}", clock(left))
    } else {
        format!("past the wait condition's {total}{parts}")
    }
}

/// `25m`, `1m 30s`: a whole number of minutes without its seconds.
fn minutes(ms: i64) -> String {
    if ms % 60_000 == 0 { format!("{}m", ms / 60_000) } else { clock(ms) }
}

/// `1m 05s`, `42s`.
pub(crate) fn clock(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s >= 60 { format!("{}m {:02}s", s / 60, s % 60) } else { format!("{s}s") }
}

/// How long to wait between polls: short while things happen, longer while
/// nothing does. Starts at [`Backoff::MIN`], grows by half after each poll
/// that brought nothing new, up to [`Backoff::MAX`]; new events bring it back.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    current: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { current: Backoff::MIN }
    }
}

impl Backoff {
    /// The shortest wait.
    pub(crate) const MIN: Duration = Duration::from_secs(2);
    /// The longest wait.
    pub(crate) const MAX: Duration = Duration::from_secs(15);

    /// The wait before the next poll, after a poll that did (or did not) bring news.
    pub(crate) fn next(&mut self, news: bool) -> Duration {
        self.current = if news { Backoff::MIN } else { (self.current * 3 / 2).min(Backoff::MAX) };
        self.current
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An event at second `s`.
    pub(crate) fn ev(n: u32, s: i64, id: &str, ty: &str, status: &str, reason: Option<&str>) -> Event {
        Event {
            id: format!("e{n}"),
            at_ns: i128::from(s) * 1_000_000_000,
            logical_id: id.into(),
            physical_id: None,
            resource_type: ty.into(),
            status: status.into(),
            reason: reason.map(str::to_owned),
        }
    }

    fn plan(items: &[(&str, &str)]) -> BTreeMap<String, Planned> {
        items
            .iter()
            .map(|(id, ty)| (id.to_string(), Planned { resource_type: ty.to_string(), optional: false }))
            .collect()
    }

    /// Issue 35: "5m 26s formation: 2 of 2 workers running" had no
    /// deadline. The live line says the time left of the wait condition
    /// and what it is made of; past it, it says so.
    #[test]
    fn the_formation_line_says_the_time_left_and_what_the_wait_is() {
        let template = serde_json::json!({ "Resources": {
            "FormationWaitCondition": { "Type": "AWS::CloudFormation::WaitCondition",
                "Properties": { "Timeout": "1500" } },
            "MasterInstance": { "Type": "AWS::EC2::Instance",
                "CreationPolicy": { "ResourceSignal": { "Count": 1, "Timeout": "PT5M" } } }
        }});
        let limit = formation_limit(&template);
        assert_eq!(limit, Some(FormationLimit { timeout_ms: 1_500_000, formation_ms: Some(300_000) }));
        let wait = "AWS::CloudFormation::WaitCondition";
        let mut w = Watcher::new(Operation::Create, plan(&[("FormationWaitCondition", wait)]));
        w.set_formation_limit(limit);
        w.feed(vec![ev(1, 100, "FormationWaitCondition", wait, "CREATE_IN_PROGRESS", None)]);
        w.set_group(GroupState { desired: 2, in_service: 2, ..GroupState::default() });
        assert_eq!(
            w.live_status(100_000 + 326_000),
            "formation: 2 of 2 workers running, 19m 34s left of 25m (5m formation + 20m boot)"
        );
        // Once the master counts, the line says how many registered with it.
        let forming =
            |registered, failed| node_contract::formation::FormingMark { at_ms: 0, registered, requested: 8, failed };
        w.set_group(GroupState { desired: 8, in_service: 6, forming: Some(forming(5, 0)), ..GroupState::default() });
        assert_eq!(
            w.live_status(100_000 + 326_000),
            "formation: 5 of 8 registered (6 running), 19m 34s left of 25m (5m formation + 20m boot)"
        );
        w.set_group(GroupState { desired: 8, in_service: 8, forming: Some(forming(5, 2)), ..GroupState::default() });
        assert!(w.live_status(0).starts_with("formation: 5 of 8 registered (8 running, 2 failed to boot),"));
        // It fits a 100-column terminal with the spinner and the clock.
        w.set_group(GroupState { desired: 200, in_service: 100, ..GroupState::default() });
        assert!(format!("⠏ 59m 59s {}", w.live_status(100_000)).chars().count() < 100);
        let counted = Some(node_contract::formation::FormingMark { requested: 1000, ..forming(1000, 999) });
        w.set_group(GroupState { desired: 1000, in_service: 1000, forming: counted, ..GroupState::default() });
        let line = w.live_status(100_000);
        assert!(format!("⠏ 59m 59s {line}").chars().count() <= 100, "{line}");
        assert!(line.ends_with(", 25m 00s left of 25m"), "{line}");
        assert!(w.live_status(100_000 + 1_600_000).contains("past the wait condition's 25m"));
    }

    #[test]
    fn phases_finish_in_order_and_events_count_once() {
        let mut w = Watcher::new(
            Operation::Create,
            plan(&[("Vpc", "AWS::EC2::VPC"), ("Subnet", "AWS::EC2::Subnet"), ("Queue", "AWS::SQS::Queue")]),
        );
        let stack = "AWS::CloudFormation::Stack";
        let page1 = vec![
            ev(3, 12, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE", None),
            ev(2, 11, "Queue", "AWS::SQS::Queue", "CREATE_IN_PROGRESS", None),
            ev(1, 10, "Vpc", "AWS::EC2::VPC", "CREATE_IN_PROGRESS", None),
            ev(0, 10, "demo", stack, "CREATE_IN_PROGRESS", Some("User Initiated")),
        ];
        assert!(w.feed(page1.clone()).is_empty());
        assert_eq!(w.live_line(20_000), "10s network 1/2 · identity and queues 0/1");
        let mut page2 = vec![
            ev(6, 40, "Subnet", "AWS::EC2::Subnet", "CREATE_COMPLETE", None),
            ev(5, 30, "Queue", "AWS::SQS::Queue", "CREATE_COMPLETE", None),
            ev(4, 20, "Subnet", "AWS::EC2::Subnet", "CREATE_IN_PROGRESS", None),
        ];
        page2.extend(page1);
        let notes = w.feed(page2);
        assert_eq!(
            notes,
            vec![
                Note::PhaseDone { phase: Phase::Identity, elapsed_ms: 19_000, resources: 1 },
                Note::PhaseDone { phase: Phase::Network, elapsed_ms: 30_000, resources: 2 },
            ]
        );
        let notes = w.feed(vec![ev(7, 41, "demo", stack, "CREATE_COMPLETE", None)]);
        assert_eq!(notes, vec![Note::Settled { status: "CREATE_COMPLETE".into(), reason: None }]);
        assert!(w.succeeded());
        assert_eq!(w.events().len(), 8);
    }

    #[test]
    fn a_failure_is_noted_once_and_cancellations_and_rollback_are_not_phases() {
        let mut w = Watcher::new(Operation::Create, plan(&[("Vpc", "AWS::EC2::VPC"), ("Fs", "AWS::EFS::FileSystem")]));
        let notes = w.feed(vec![
            ev(5, 9, "Vpc", "AWS::EC2::VPC", "DELETE_COMPLETE", None),
            ev(
                4,
                8,
                "demo",
                "AWS::CloudFormation::Stack",
                "ROLLBACK_IN_PROGRESS",
                Some("The following resource(s) failed to create: [Fs]"),
            ),
            ev(3, 7, "Vpc", "AWS::EC2::VPC", "CREATE_FAILED", Some("Resource creation cancelled")),
            ev(2, 6, "Fs", "AWS::EFS::FileSystem", "CREATE_FAILED", Some("quota")),
            ev(1, 5, "Vpc", "AWS::EC2::VPC", "CREATE_IN_PROGRESS", None),
        ]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(matches!(&notes[0], Note::ResourceFailed(e) if e.logical_id == "Fs"));
        let notes = w.feed(vec![ev(6, 10, "demo", "AWS::CloudFormation::Stack", "ROLLBACK_COMPLETE", None)]);
        assert_eq!(notes, vec![Note::Settled { status: "ROLLBACK_COMPLETE".into(), reason: None }]);
        assert!(!w.succeeded());
    }

    #[test]
    fn optional_resources_do_not_hold_a_phase() {
        let mut plan = plan(&[("Vpc", "AWS::EC2::VPC")]);
        plan.insert(
            "Ingress".into(),
            Planned { resource_type: "AWS::EC2::SecurityGroupIngress".into(), optional: true },
        );
        let mut w = Watcher::new(Operation::Create, plan);
        let notes = w.feed(vec![
            ev(2, 3, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE", None),
            ev(1, 1, "Vpc", "AWS::EC2::VPC", "CREATE_IN_PROGRESS", None),
        ]);
        assert_eq!(notes, vec![Note::PhaseDone { phase: Phase::Network, elapsed_ms: 2000, resources: 1 }]);
    }

    #[test]
    fn backoff_grows_to_its_ceiling_and_news_resets_it() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..8).map(|_| b.next(false).as_millis() as u64).collect();
        assert_eq!(waits, [3000, 4500, 6750, 10125, 15000, 15000, 15000, 15000]);
        assert_eq!(b.next(true), Backoff::MIN);
    }

    #[test]
    fn clock_reads_like_a_stopwatch() {
        assert_eq!(clock(42_000), "42s");
        assert_eq!(clock(65_000), "1m 05s");
        assert_eq!(clock(-5), "0s");
    }
}
