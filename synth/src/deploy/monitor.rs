//! The edge that watches an operation: polls the stack's events through
//! the port with [`Backoff`], feeds them to the [`Watcher`], and shows the
//! story on stderr: cargo-style lines as phases finish, plus a live line on
//! a terminal (indicatif), or timestamped plain lines when stderr is not a
//! terminal (a CI log, a pipe). Ctrl-C stops watching, never the stack.

use std::future::Future;
use std::time::Duration;

use super::cause::diagnose;
use super::console::Console;
use super::phase::Phase;
use super::port::{Cloud, CloudResult, Event};
use super::watch::{Backoff, Note, Watcher, clock};
use crate::exit::ExitCode;

/// At most this many pages of events are read per poll (100 events each);
/// a longer backlog is read on the next polls.
const MAX_PAGES: usize = 5;

/// The worker group is asked about at most this often while the cluster forms.
const GROUP_POLL: Duration = Duration::from_secs(15);

/// How watching ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The stack settled (succeeded or not: ask the watcher).
    Settled,
    /// The user pressed Ctrl-C; the stack goes on.
    Interrupted,
}

pub(crate) use super::console::Display;
pub(crate) use super::time::now_ms;

/// The events newer than what the watcher has seen and than `boundary`
/// (the newest event before the operation began), newest first.
pub(crate) async fn fetch_new<C: Cloud>(
    cloud: &C,
    stack: &str,
    watcher: &Watcher,
    boundary: Option<&str>,
) -> CloudResult<Vec<Event>> {
    let mut out = Vec::new();
    let mut page = None;
    for _ in 0..MAX_PAGES {
        let p = cloud.events(stack, page).await?;
        let mut reached = false;
        for e in p.events {
            if Some(e.id.as_str()) == boundary || watcher.has_seen(&e.id) {
                reached = true;
                break;
            }
            out.push(e);
        }
        if reached || p.next.is_none() {
            break;
        }
        page = p.next;
    }
    Ok(out)
}

/// The newest event of a stack (the boundary before an operation), if any.
pub(crate) async fn newest_event<C: Cloud>(cloud: &C, stack: &str) -> CloudResult<Option<String>> {
    Ok(cloud.events(stack, None).await?.events.into_iter().next().map(|e| e.id))
}

/// Watches `stack` (its id: a deleted stack is found by id only) until it
/// settles or `interrupted` resolves (the user pressed Ctrl-C).
pub(crate) async fn watch<C: Cloud>(
    cloud: &C,
    stack: &str,
    watcher: &mut Watcher,
    boundary: Option<&str>,
    display: &Display,
    interrupted: impl Future<Output = ()>,
) -> CloudResult<Ending> {
    tokio::pin!(interrupted);
    let started = now_ms();
    let mut backoff = Backoff::default();
    let mut last_group_poll: Option<i64> = None;
    loop {
        let fresh = tokio::select! {
            _ = &mut interrupted => return Ok(Ending::Interrupted),
            fresh = fetch_new(cloud, stack, watcher, boundary) => fresh?,
        };
        let news = !fresh.is_empty();
        for note in watcher.feed(fresh) {
            show(display, &note);
        }
        if watcher.settled().is_some() {
            return Ok(Ending::Settled);
        }
        let now = now_ms();
        if watcher.forming() && last_group_poll.is_none_or(|t| now - t >= GROUP_POLL.as_millis() as i64) {
            last_group_poll = Some(now);
            if let Some(group) = physical_id(watcher.events(), crate::stack::WORKER_GROUP_ID) {
                // The formation line is a nicety: an error here is not worth stopping for.
                if let Ok(Some(state)) = cloud.group(&group).await {
                    watcher.set_group(state);
                }
            }
        }
        display.live_since(watcher.started_ms().unwrap_or(started), &watcher.live_status(now));
        let wait = backoff.next(news);
        tokio::select! {
            _ = &mut interrupted => return Ok(Ending::Interrupted),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The operation watched, for what is said when it ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watched<'a> {
    /// The stack's name.
    pub stack: &'a str,
    /// `--region R`, for the commands suggested.
    pub flag: &'a str,
    /// A failed create keeps what it made (no rollback).
    pub kept: bool,
    /// When the operation began (unix milliseconds).
    pub started_ms: i64,
}

/// What to tell the user after watching: on Ctrl-C, that the stack goes on
/// (exit 130); on failure, the diagnosis (exit 1); on success, `Ok(())`.
pub(crate) fn report_ending<K: Console>(
    console: &K,
    ending: Ending,
    watcher: &Watcher,
    display: &Display,
    watched: Watched<'_>,
) -> Result<(), ExitCode> {
    let Watched { stack, flag, kept, started_ms } = watched;
    display.finish();
    match ending {
        Ending::Interrupted => {
            console.noteln(&format!(
                "Stopped watching; the stack goes on, nothing was cancelled. Follow it with \
                 `synth events {stack} {flag} --follow`, or see `synth status {stack} {flag}`."
            ));
            Err(ExitCode::Interrupted)
        }
        Ending::Settled if watcher.succeeded() => Ok(()),
        Ending::Settled => {
            let (status, _) = watcher.settled().unwrap_or(("UNKNOWN", None));
            let diagnosis = diagnose(watcher.events());
            let text = diagnosis.render(status, kept, &format!("synth delete {stack} {flag}"));
            console.note(&text);
            // A node's failure (formation, the master, a worker group) has
            // the nodes' own lines too, which the events do not hold.
            let nodes = diagnosis.root.as_ref().is_some_and(|c| {
                c.from_agent
                    || [
                        "AWS::CloudFormation::WaitCondition",
                        "AWS::EC2::Instance",
                        "AWS::AutoScaling::AutoScalingGroup",
                    ]
                    .contains(&c.resource_type.as_str())
            });
            let logs = if nodes { format!("; the nodes' own lines: synth logs {stack} {flag}") } else { String::new() };
            console.noteln(&format!(
                "{:>12} {stack} {status} after {} (all events: synth events {stack} {flag}{logs})",
                "Failed",
                clock(now_ms() - started_ms)
            ));
            Err(ExitCode::Invalid)
        }
    }
}

/// `--region R`, so that a printed command works as it is whether or not
/// the region was in the user's command.
pub(crate) fn region_flag<C: Cloud>(cloud: &C) -> String {
    format!("--region {}", cloud.region())
}

/// The physical id of a resource, from the events.
pub(crate) fn physical_id(events: &[Event], logical_id: &str) -> Option<String> {
    events.iter().rev().filter(|e| e.logical_id == logical_id).find_map(|e| e.physical_id.clone())
}

fn show(display: &Display, note: &Note) {
    match note {
        // Only the master's signal says the cluster formed (see
        // `formation::signal`); here the wait condition completed.
        Note::PhaseDone { phase: Phase::Formation, elapsed_ms, .. } => display.line(
            "Ready",
            &format!("formation: the wait condition completed {} after the master was up", clock(*elapsed_ms)),
        ),
        Note::PhaseDone { phase, elapsed_ms, resources } => display.line(
            "Ready",
            &format!(
                "{}: {resources} resource{} in {}",
                phase.label(),
                if *resources == 1 { "" } else { "s" },
                clock(*elapsed_ms)
            ),
        ),
        Note::ResourceFailed(e) => display.line(
            "Failed",
            &format!("{} ({}): {}", e.logical_id, e.resource_type, e.reason.as_deref().unwrap_or("no reason given")),
        ),
        Note::Settled { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::deploy::fake::FakeCloud;
    use crate::deploy::watch::tests::ev;
    use crate::deploy::watch::{Operation, Planned};

    #[tokio::test(start_paused = true)]
    async fn polls_until_settled_with_backoff_and_reads_each_event_once() {
        let cloud = FakeCloud::default();
        let stack = "AWS::CloudFormation::Stack";
        {
            let mut script = cloud.event_script.lock().unwrap();
            script.push_back(vec![ev(1, 1, "demo", stack, "CREATE_IN_PROGRESS", Some("User Initiated"))]);
            script.push_back(vec![]);
            script.push_back(vec![]);
            script.push_back(vec![
                ev(3, 9, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE", None),
                ev(2, 5, "Vpc", "AWS::EC2::VPC", "CREATE_IN_PROGRESS", None),
            ]);
            script.push_back(vec![ev(4, 10, "demo", stack, "CREATE_COMPLETE", None)]);
        }
        let plan =
            BTreeMap::from([("Vpc".to_owned(), Planned { resource_type: "AWS::EC2::VPC".into(), optional: false })]);
        let mut watcher = Watcher::new(Operation::Create, plan);
        let display = Display::plain(|_| {});
        let ending = watch(&cloud, "demo", &mut watcher, None, &display, std::future::pending()).await.unwrap();
        assert_eq!(ending, Ending::Settled);
        assert!(watcher.succeeded());
        assert_eq!(watcher.events().len(), 4);
        assert_eq!(cloud.calls_named("events"), 5);
    }
}
