//! `synth resume`: brings back a cluster the idle guard scaled down
//! (docs/ARCHITECTURE.md, "The idle guard"). It starts the master when the
//! guard's `stop` stopped it, puts the worker group's desired capacity
//! back to the stack's `WorkerCount` parameter (what the blueprint asks,
//! or what the last `synth deploy -p WorkerCount=N` set; the template
//! makes it the group's desired capacity, between `MinSize` 0 and
//! `MaxWorkers`), removes the guard's `deeplearning:idle` tag, and then
//! watches until the workers are back: the master running, the group's
//! in-service count at the desired count, and the master's record of a
//! generation published with every node (the elastic join; read from the
//! stack's log group when the nodes ship their lines: the machine-readable
//! `node_contract::logs::Published` record, or an earlier agent's
//! "publishing generation" sentence), within a time limit.
//!
//! [`plan`] is the decision, from what was read; [`resume`] the flow,
//! generic over the [`Cloud`] port and the [`Console`].

use std::time::Duration;

use node_contract::idle::{IDLE_TAG, IdleMark};
use node_contract::logs::{
    log_group_name, node_label, parse_published_record, parse_publishing_line, publishing_line, stack_run, stream_name,
};

use super::console::{Console, fail};
use super::port::{Cloud, CloudError, GroupState, LogQuery, Stack};
use super::time::now_ms;
use super::watch::clock;
use crate::exit::ExitCode;

// The template's own names for the worker group, the master and the
// worker count, from where the template is built.
use crate::stack::{MASTER_ID as MASTER, WORKER_COUNT_PARAMETER as WORKER_COUNT, WORKER_GROUP_ID as WORKER_GROUP};

/// How often the watch asks AWS.
const POLL: Duration = Duration::from_secs(3);

/// What `synth resume` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// The stack's `WorkerCount`.
    pub worker_count: u32,
    /// The worker group as it is.
    pub group: GroupState,
    /// The master's EC2 state (`running`, `stopped`, ...); `None`: EC2
    /// does not know the instance.
    pub master: Option<String>,
}

/// What to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Wait for the master to finish stopping first (it is `stopping`).
    pub wait_for_stop: bool,
    /// Start the master (it is stopped, or stopping).
    pub start_master: bool,
    /// Set the desired capacity to this.
    pub desired: Option<u32>,
    /// Remove the idle guard's tag (it says the guard acted).
    pub clear_mark: bool,
}

impl Plan {
    /// Whether there is nothing to change.
    pub(crate) fn is_empty(&self) -> bool {
        !self.start_master && self.desired.is_none() && !self.clear_mark
    }
}

/// Why a stack cannot be resumed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The master is gone.
    #[error(
        "the master instance {id} is {state}: resume cannot bring it back; `synth deploy` the blueprint again to \
         replace it"
    )]
    MasterGone {
        /// Its id.
        id: String,
        /// Its state, or "not known to EC2".
        state: String,
    },
}

/// The decision: start the master unless it runs, raise the desired
/// capacity to `WorkerCount` when below it (never lower it: someone may
/// have raised it for a run), clear the guard's mark once it acted.
pub(crate) fn plan(master_id: &str, found: &Found) -> Result<Plan, Refusal> {
    let (wait_for_stop, start_master) = match found.master.as_deref() {
        Some("running" | "pending") => (false, false),
        Some("stopped") => (false, true),
        Some("stopping") => (true, true),
        other => {
            return Err(Refusal::MasterGone {
                id: master_id.to_owned(),
                state: other.unwrap_or("not known to EC2").to_owned(),
            });
        }
    };
    let desired = (found.group.desired < found.worker_count).then_some(found.worker_count);
    let clear_mark = matches!(found.group.idle, Some(IdleMark::Idle { acted_ms: Some(_), .. }));
    Ok(Plan { wait_for_stop, start_master, desired, clear_mark })
}

/// A resource's physical id, or why the stack is not a cluster.
fn physical(resources: &[super::port::Resource], logical: &str, stack: &str) -> Result<String, String> {
    resources.iter().find(|r| r.logical_id == logical).and_then(|r| r.physical_id.clone()).ok_or_else(|| {
        format!("stack {stack} has no {logical}: it is not a cluster stack synth made, or it is not complete")
    })
}

/// Resumes the stack `name`, waiting at most `limit` for the workers.
pub(crate) async fn resume<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str, limit: Duration) -> ExitCode {
    match resume_inner(console, cloud, name, limit).await {
        Ok(code) | Err(code) => code,
    }
}

async fn resume_inner<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    name: &str,
    limit: Duration,
) -> Result<ExitCode, ExitCode> {
    let started = now_ms();
    let Some(stack) = cloud.stack(name).await.map_err(|e| fail(console, e))? else {
        return Err(super::status::missing(console, cloud, name).await);
    };
    let resources = cloud.resources(name).await.map_err(|e| fail(console, e))?;
    let group_name = physical(&resources, WORKER_GROUP, name).map_err(|e| fail(console, e))?;
    let master_id = physical(&resources, MASTER, name).map_err(|e| fail(console, e))?;
    let worker_count = stack.parameters.get(WORKER_COUNT).and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| {
        fail(console, format!("stack {name} has no {WORKER_COUNT} parameter: it is not a cluster stack synth made"))
    })?;
    let group = cloud
        .group(&group_name)
        .await
        .map_err(|e| fail(console, e))?
        .ok_or_else(|| fail(console, format!("the worker group {group_name} of stack {name} is not there")))?;
    let master = cloud.instance_state(&master_id).await.map_err(|e| fail(console, e))?;
    let found = Found { worker_count, group, master };
    let plan = plan(&master_id, &found).map_err(|e| fail(console, e))?;
    if plan.is_empty() {
        console.noteln(&format!(
            "stack {name} is not scaled down: {} of {worker_count} workers desired ({} in service), the master is \
             {}; nothing to change",
            found.group.desired,
            found.group.in_service,
            found.master.as_deref().unwrap_or("running")
        ));
        return Ok(ExitCode::Success);
    }
    let display = console.display();
    let deadline = tokio::time::Instant::now() + limit;
    let interrupted = console.interrupted();
    tokio::pin!(interrupted);
    let watch = async {
        if plan.start_master {
            if plan.wait_for_stop {
                display.line("Waiting", &format!("for the master {master_id} to finish stopping"));
                wait_for(cloud, &display, started, &master_id, "stopped", deadline).await?;
            }
            cloud.start_instance(&master_id).await.map_err(Stop::Cloud)?;
            display.line("Starting", &format!("the master {master_id}"));
        }
        let target = plan.desired.unwrap_or(found.group.desired);
        if let Some(n) = plan.desired {
            cloud.set_desired_capacity(&group_name, n).await.map_err(Stop::Cloud)?;
            display.line("Scaling", &format!("the worker group {group_name} to {n} (was {})", found.group.desired));
        }
        if plan.clear_mark {
            cloud.delete_group_tag(&group_name, IDLE_TAG).await.map_err(Stop::Cloud)?;
            display.line("Cleared", &format!("the idle guard's mark on {group_name}"));
        }
        if plan.start_master {
            wait_for(cloud, &display, started, &master_id, "running", deadline).await?;
            display.line("Started", &format!("the master {master_id} in {}", clock(now_ms() - started)));
        }
        wait_for_workers(cloud, &display, started, &group_name, target, deadline).await?;
        display.line("Back", &format!("{target} of {target} workers in service in {}", clock(now_ms() - started)));
        let formed = wait_for_formation(cloud, &display, started, (&stack, &master_id), target, deadline).await?;
        Ok::<_, Stop>(formed)
    };
    let result = tokio::select! {
        r = watch => r,
        () = &mut interrupted => Err(Stop::Interrupted),
    };
    display.finish();
    match result {
        Ok(Some(line)) => {
            console.noteln(&format!(
                "{:>12} stack {name} resumed in {}: {line}",
                "Finished",
                clock(now_ms() - started)
            ));
            Ok(ExitCode::Success)
        }
        Ok(None) => {
            console.noteln(&format!(
                "{:>12} stack {name} resumed in {}: the workers are in service (the nodes ship no log lines, so \
                 their join is not shown: `synth status {name}`)",
                "Finished",
                clock(now_ms() - started)
            ));
            Ok(ExitCode::Success)
        }
        Err(Stop::Cloud(e)) => Err(fail(console, e)),
        Err(Stop::TimedOut(what)) => {
            console.noteln(&format!(
                "error: stack {name} is not back after {}: {what}. What was asked is kept (Auto Scaling goes on \
                 launching); `synth status {name}` and `synth logs {name}` show where it stands",
                clock(i64::try_from(limit.as_millis()).unwrap_or(i64::MAX))
            ));
            Err(ExitCode::Invalid)
        }
        Err(Stop::Interrupted) => {
            console.noteln(&format!(
                "Stopped watching; the resume goes on in AWS (`synth status {name}` shows it). What was asked is kept."
            ));
            Err(ExitCode::Interrupted)
        }
    }
}

/// Why watching stopped early.
enum Stop {
    /// An AWS call failed.
    Cloud(CloudError),
    /// The limit passed while waiting for this.
    TimedOut(String),
    /// Ctrl-C.
    Interrupted,
}

/// Polls until the master is in `state`.
async fn wait_for<C: Cloud>(
    cloud: &C,
    display: &super::console::Display,
    started: i64,
    id: &str,
    state: &str,
    deadline: tokio::time::Instant,
) -> Result<(), Stop> {
    loop {
        let now = cloud.instance_state(id).await.map_err(Stop::Cloud)?;
        if now.as_deref() == Some(state) {
            return Ok(());
        }
        let now = now.unwrap_or_else(|| "not known to EC2".into());
        if tokio::time::Instant::now() >= deadline {
            return Err(Stop::TimedOut(format!("the master {id} is {now}, not {state}")));
        }
        display.live_since(started, &format!("the master {id} is {now}"));
        tokio::time::sleep(POLL).await;
    }
}

/// Polls until `target` workers are in service.
async fn wait_for_workers<C: Cloud>(
    cloud: &C,
    display: &super::console::Display,
    started: i64,
    group: &str,
    target: u32,
    deadline: tokio::time::Instant,
) -> Result<(), Stop> {
    let mut last = None;
    loop {
        let state = cloud.group(group).await.map_err(Stop::Cloud)?.unwrap_or_default();
        if state.in_service >= target {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Stop::TimedOut(format!("{} of {target} workers in service", state.in_service)));
        }
        if last != Some(state.in_service) {
            display.line("Launching", &format!("{} of {target} workers in service", state.in_service));
            last = Some(state.in_service);
        }
        display.live_since(started, &format!("{} of {target} workers in service", state.in_service));
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the master's log lines (its stream in the stack's log group) for
/// a generation published with every node since the resume began; the
/// line, or `None` when the stack's nodes ship no lines (no log group).
async fn wait_for_formation<C: Cloud>(
    cloud: &C,
    display: &super::console::Display,
    started: i64,
    (stack, master_id): (&Stack, &str),
    workers: u32,
    deadline: tokio::time::Instant,
) -> Result<Option<String>, Stop> {
    let Some(run) = stack_run(&stack.id) else { return Ok(None) };
    let group = log_group_name(&stack.name, run);
    let nodes = workers + 1;
    // Only the master's own stream, from the resume's start: a few lines.
    let stream = stream_name(&node_label(true, None), master_id);
    let mut query = LogQuery { group: group.clone(), streams: vec![stream], start_ms: Some(started) };
    loop {
        let mut token = None;
        let mut formed = None;
        loop {
            let page = match cloud.log_events(&query, token).await {
                Ok(page) => page,
                Err(CloudError::Invalid { message, .. }) if message.contains("ResourceNotFound") => return Ok(None),
                Err(e) => return Err(Stop::Cloud(e)),
            };
            let mut publications = page.events.iter().rev().filter_map(|e| published(&e.message));
            if let Some((generation, n)) = publications.find(|(_, n)| *n >= nodes) {
                formed = Some(publishing_line(generation, n as usize));
            }
            if let Some(last) = page.events.last() {
                // The next poll reads on from here.
                query.start_ms = Some(last.at_ms);
            }
            match page.next {
                Some(next) if formed.is_none() => token = Some(next),
                _ => break,
            }
        }
        if let Some(line) = formed {
            return Ok(Some(format!("the master {line}")));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Stop::TimedOut(format!(
                "the workers are in service but the master has not published a generation with {nodes} nodes \
                 (the join)"
            )));
        }
        display.live_since(started, &format!("waiting for the master to admit {workers} workers"));
        tokio::time::sleep(POLL).await;
    }
}

/// The generation and node count of a publication the master logged: its
/// [`Published`](node_contract::logs::Published) record, or, from an agent
/// of an earlier release that logs no record, its sentence.
fn published(message: &str) -> Option<(u64, u32)> {
    parse_published_record(message)
        .map(|r| (r.generation, r.nodes))
        .or_else(|| parse_publishing_line(message).map(|(generation, nodes, _)| (generation, nodes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::fake::{FakeCloud, FakeConsole};
    use crate::deploy::port::{LogEvent, Resource};
    use node_contract::idle::IdleAction;

    const ACTED: IdleMark =
        IdleMark::Idle { since_ms: 1, until_ms: 2, action: IdleAction::ScaleWorkers, acted_ms: Some(2) };

    fn found(desired: u32, master: &str, idle: Option<IdleMark>) -> Found {
        Found {
            worker_count: 2,
            group: GroupState { desired, in_service: desired, idle, data: None, forming: None, stragglers: None },
            master: Some(master.to_owned()),
        }
    }

    #[test]
    fn the_plan_starts_a_stopped_master_raises_the_count_and_clears_the_mark() {
        let p = plan("i-m", &found(0, "stopped", Some(ACTED))).unwrap();
        assert_eq!(p, Plan { wait_for_stop: false, start_master: true, desired: Some(2), clear_mark: true });
        let p = plan("i-m", &found(0, "running", Some(ACTED))).unwrap();
        assert_eq!(p, Plan { desired: Some(2), clear_mark: true, ..Plan::default() });
        assert!(plan("i-m", &found(0, "stopping", None)).unwrap().wait_for_stop);
        // Someone raised it already: only the mark goes.
        assert_eq!(
            plan("i-m", &found(2, "running", Some(ACTED))).unwrap(),
            Plan { clear_mark: true, ..Plan::default() }
        );
        // More than asked (raised for a run) is never lowered.
        assert!(plan("i-m", &found(5, "running", None)).unwrap().is_empty());
        // Nothing scaled down: nothing to do; an idling (not acted) mark stays.
        let idling = IdleMark::Idle { since_ms: 1, until_ms: 2, action: IdleAction::ScaleWorkers, acted_ms: None };
        assert!(plan("i-m", &found(2, "running", Some(idling))).unwrap().is_empty());
        assert!(plan("i-m", &found(2, "pending", Some(IdleMark::Busy))).unwrap().is_empty());
        for gone in ["terminated", "shutting-down"] {
            let e = plan("i-m", &found(0, gone, None)).unwrap_err();
            assert!(e.to_string().contains(&format!("the master instance i-m is {gone}")), "{e}");
        }
        let e = plan("i-m", &Found { master: None, ..found(0, "x", None) }).unwrap_err();
        assert!(e.to_string().contains("is not known to EC2"), "{e}");
    }

    /// A stack scaled down by the guard's `stop`, as the fake holds it.
    fn stopped_cluster() -> FakeCloud {
        let cloud = FakeCloud::default();
        let mut parameters = std::collections::BTreeMap::new();
        parameters.insert(WORKER_COUNT.to_owned(), "2".to_owned());
        let stack = Stack {
            name: "demo".into(),
            id: "arn:aws:cloudformation:us-east-1:1:stack/demo/run1".into(),
            status: "CREATE_COMPLETE".into(),
            parameters,
            ..Stack::default()
        };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let resource = |logical: &str, physical: &str| Resource {
            logical_id: logical.into(),
            physical_id: Some(physical.into()),
            ..Resource::default()
        };
        cloud
            .resources
            .lock()
            .unwrap()
            .insert("demo".into(), vec![resource(WORKER_GROUP, "demo-WorkerGroup-x"), resource(MASTER, "i-0master")]);
        *cloud.group.lock().unwrap() = Some(GroupState {
            desired: 0,
            in_service: 0,
            idle: Some(ACTED),
            data: None,
            forming: None,
            stragglers: None,
        });
        cloud.instances.lock().unwrap().insert("i-0master".into(), "stopped".into());
        cloud
    }

    #[tokio::test(start_paused = true)]
    async fn resume_starts_the_master_first_then_brings_the_workers_back_and_sees_them_join() {
        let cloud = stopped_cluster();
        let line = LogEvent {
            stream: "master-i-0master".into(),
            at_ms: now_ms() + 1,
            id: "1".into(),
            message: "INFO agent: publishing generation 4: 3 nodes".into(),
        };
        cloud.log_groups.lock().unwrap().insert("/deeplearning-cluster/demo/run1".into(), vec![line]);
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "demo", Duration::from_secs(600)).await, ExitCode::Success);
        let calls = cloud.calls.lock().unwrap().clone();
        let at = |name: &str| calls.iter().position(|c| c == name).unwrap_or_else(|| panic!("{name}: {calls:?}"));
        assert!(at("start_instance") < at("set_desired_capacity"), "{calls:?}");
        assert_eq!(cloud.group.lock().unwrap().clone().unwrap().desired, 2);
        assert_eq!(cloud.group.lock().unwrap().clone().unwrap().idle, None, "the mark is cleared");
        let err = console.stderr();
        assert!(err.contains("Starting the master i-0master"), "{err}");
        assert!(err.contains("Scaling the worker group demo-WorkerGroup-x to 2 (was 0)"), "{err}");
        assert!(err.contains("stack demo resumed in") && err.contains("publishing generation 4: 3 nodes"), "{err}");
    }

    /// The master's record, not its sentence, is what is read: a record of
    /// every node is the join, a record of fewer is not.
    #[tokio::test(start_paused = true)]
    async fn the_join_is_read_from_the_masters_record() {
        let event = |id: &str, message: String| LogEvent {
            stream: "master-i-0master".into(),
            at_ms: now_ms() + 1,
            id: id.into(),
            message,
        };
        let record = |generation, nodes| {
            format!("INFO agent::runner::effects: {}", node_contract::logs::published_record(generation, nodes))
        };
        let cloud = stopped_cluster();
        cloud.log_groups.lock().unwrap().insert(
            "/deeplearning-cluster/demo/run1".into(),
            vec![event("1", record(3, 2)), event("2", record(5, 3)), event("3", "INFO agent: admitted".into())],
        );
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "demo", Duration::from_secs(600)).await, ExitCode::Success);
        let err = console.stderr();
        assert!(err.contains("stack demo resumed in") && err.contains("publishing generation 5: 3 nodes"), "{err}");
        // Only a record of fewer nodes: not joined, and the watch times out.
        let cloud = stopped_cluster();
        cloud
            .log_groups
            .lock()
            .unwrap()
            .insert("/deeplearning-cluster/demo/run1".into(), vec![event("1", record(3, 2))]);
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "demo", Duration::from_secs(600)).await, ExitCode::Invalid);
        assert!(console.stderr().contains("has not published a generation with 3 nodes"), "{}", console.stderr());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_that_is_not_scaled_down_is_left_alone() {
        let cloud = stopped_cluster();
        cloud.instances.lock().unwrap().insert("i-0master".into(), "running".into());
        *cloud.group.lock().unwrap() = Some(GroupState {
            desired: 2,
            in_service: 2,
            idle: Some(IdleMark::Busy),
            data: None,
            forming: None,
            stragglers: None,
        });
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "demo", Duration::from_secs(600)).await, ExitCode::Success);
        assert_eq!(
            console.stderr(),
            "stack demo is not scaled down: 2 of 2 workers desired (2 in service), the master is running; nothing to \
             change\n"
        );
        for change in ["start_instance", "set_desired_capacity", "delete_group_tag"] {
            assert_eq!(cloud.calls_named(change), 0, "{change}");
        }
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "gone", Duration::from_secs(600)).await, ExitCode::NotFound);
        assert_eq!(
            console.stderr(),
            "error: no stack gone in us-east-1; `synth status --region us-east-1` lists the cluster stacks there\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn workers_that_do_not_come_back_in_time_are_a_clear_failure() {
        let cloud = stopped_cluster();
        cloud.instances.lock().unwrap().insert("i-0master".into(), "running".into());
        *cloud.launches.lock().unwrap() = Some(1);
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "demo", Duration::from_secs(60)).await, ExitCode::Invalid);
        let err = console.stderr();
        assert!(
            err.contains(
                "error: stack demo is not back after 1m 00s: 1 of 2 workers in service. What was asked is kept"
            ),
            "{err}"
        );
        assert_eq!(cloud.group.lock().unwrap().clone().unwrap().desired, 2, "the capacity stays raised");
    }

    /// Fault injection: the master started, then `SetDesiredCapacity`
    /// throttled: exit 2 naming the call; the workers' count is as it was
    /// and the idle guard's mark is kept (a rerun of `synth resume` does
    /// the rest); nothing is waited for.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_scale_up_stops_the_resume_and_says_which_call() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let cloud = Failing::new(stopped_cluster()).fail(Op::SetDesiredCapacity, 1, Fault::Throttled);
        let console = FakeConsole::default();
        assert_eq!(resume(&console, &cloud, "demo", Duration::from_secs(600)).await, ExitCode::Error);
        let err = console.stderr();
        assert!(
            err.contains("error: Auto Scaling SetDesiredCapacity on group demo-WorkerGroup-x: AWS throttled the call"),
            "{err}"
        );
        let fake = cloud.inner();
        assert_eq!(fake.instances.lock().unwrap()["i-0master"], "running", "the master was started first");
        let group = fake.group.lock().unwrap().clone().unwrap();
        assert_eq!((group.desired, group.idle), (0, Some(ACTED)));
        assert_eq!(fake.calls_named("delete_group_tag"), 0);
    }
}
