//! The edge that watches an operation: polls the stack's events through
//! the port with [`Backoff`], feeds them to the [`Watcher`], and shows the
//! story on stderr: cargo-style lines as phases finish, plus a live line on
//! a terminal (indicatif), or timestamped plain lines when stderr is not a
//! terminal (a CI log, a pipe). Ctrl-C stops watching, never the stack.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_cloudformation::primitives::{DateTime, DateTimeFormat};
use indicatif::{ProgressBar, ProgressStyle};

use super::phase::Phase;
use super::port::{Cloud, CloudResult, Event};
use super::watch::{Backoff, Note, Watcher, clock};

/// At most this many pages of events are read per poll (100 events each);
/// a longer backlog is read on the next polls.
const MAX_PAGES: usize = 5;

/// The worker group is asked about at most this often while the cluster forms.
const GROUP_POLL: Duration = Duration::from_secs(15);

/// How watching ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The stack settled (succeeded or not: ask the watcher).
    Settled,
    /// The user pressed Ctrl-C; the stack goes on.
    Interrupted,
}

/// Progress on stderr: a live line on a terminal, plain timestamped lines otherwise.
pub struct Display {
    bar: Option<ProgressBar>,
}

impl Default for Display {
    fn default() -> Self {
        Display::new()
    }
}

impl Display {
    /// A live line when stderr is a terminal.
    pub fn new() -> Display {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Display { bar }
    }

    /// One line of the story: a right-aligned verb, as cargo prints them.
    pub fn line(&self, verb: &str, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("{verb:>12} {text}")),
            None => eprintln!("{} {verb:>12} {text}", stamp(now_ms())),
        }
    }

    /// What is in progress (terminal only).
    pub fn live(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(text.to_owned());
        }
    }

    /// Removes the live line.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `2025-01-02T03:04:05Z`.
pub fn stamp(ms: i64) -> String {
    DateTime::from_secs(ms / 1000).fmt(DateTimeFormat::DateTime).unwrap_or_else(|_| ms.to_string())
}

/// The events newer than what the watcher has seen and than `boundary`
/// (the newest event before the operation began), newest first.
pub async fn fetch_new<C: Cloud>(
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
pub async fn newest_event<C: Cloud>(cloud: &C, stack: &str) -> CloudResult<Option<String>> {
    Ok(cloud.events(stack, None).await?.events.into_iter().next().map(|e| e.id))
}

/// Watches `stack` (its id: a deleted stack is found by id only) until it
/// settles or the user presses Ctrl-C.
pub async fn watch<C: Cloud>(
    cloud: &C,
    stack: &str,
    watcher: &mut Watcher,
    boundary: Option<&str>,
    display: &Display,
) -> CloudResult<Ending> {
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut backoff = Backoff::default();
    let mut last_group_poll: Option<i64> = None;
    loop {
        let fresh = tokio::select! {
            _ = &mut ctrl_c => return Ok(Ending::Interrupted),
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
            if let Some(group) = physical_id(watcher.events(), "WorkerGroup") {
                // The formation line is a nicety: an error here is not worth stopping for.
                if let Ok(Some(state)) = cloud.group(&group).await {
                    watcher.set_group(state);
                }
            }
        }
        display.live(&watcher.live_line(now_ms()));
        let wait = backoff.next(news);
        tokio::select! {
            _ = &mut ctrl_c => return Ok(Ending::Interrupted),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The physical id of a resource, from the events.
pub fn physical_id(events: &[Event], logical_id: &str) -> Option<String> {
    events.iter().rev().filter(|e| e.logical_id == logical_id).find_map(|e| e.physical_id.clone())
}

fn show(display: &Display, note: &Note) {
    match note {
        Note::PhaseDone { phase: Phase::Formation, elapsed_ms, .. } => {
            display.line("Formed", &format!("the cluster, {} after the master was up", clock(*elapsed_ms)))
        }
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
        let display = Display { bar: None };
        let ending = watch(&cloud, "demo", &mut watcher, None, &display).await.unwrap();
        assert_eq!(ending, Ending::Settled);
        assert!(watcher.succeeded());
        assert_eq!(watcher.events().len(), 4);
        assert_eq!(cloud.calls_named("events"), 5);
    }

    #[test]
    fn stamps_are_utc_seconds() {
        assert_eq!(stamp(1_700_000_000_123), "2023-11-14T22:13:20Z");
    }
}
