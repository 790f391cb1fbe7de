//! `synth events`: every event of a stack, oldest first, on standard
//! output; with `follow`, new ones as they come until the stack settles or
//! the console is interrupted (Ctrl-C).

use super::console::{Console, empty, fail};
use super::monitor::fetch_new;
use super::port::{Cloud, CloudResult, Event};
use super::status::find;
use super::time::stamp;
use super::watch::{Backoff, Operation, Watcher, is_settled};
use crate::exit::{ExitCode, printed};

/// The status column's width: `CREATE_IN_PROGRESS`, the longest common
/// status; a longer one (`UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS`)
/// takes what it needs. Padding to the longest of all pushed every line
/// past 100 columns.
const STATUS_WIDTH: usize = 18;

/// One event as a line: time, status, resource, reason.
pub(crate) fn line(e: &Event) -> String {
    let reason = e.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default();
    format!("{}  {:STATUS_WIDTH$}  {} ({}){reason}", stamp(e.at_ms()), e.status, e.logical_id, e.resource_type)
}

/// Prints the events of the stack `name`; with `follow`, goes on until it settles.
pub(crate) async fn print_events<K: Console, C: Cloud>(console: &K, cloud: &C, name: &str, follow: bool) -> ExitCode {
    let stack = match find(console, cloud, name).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    // The watcher is used here only to remember which events were printed.
    let mut seen = Watcher::new(Operation::Update, Default::default());
    let mut backoff = Backoff::default();
    let interrupted = console.interrupted();
    tokio::pin!(interrupted);
    let mut first = true;
    loop {
        let mut fresh = match fetch_new_all(cloud, &stack.id, &seen, first).await {
            Ok(f) => f,
            Err(e) => return fail(console, e),
        };
        // The service lists them newest first: oldest first as returned,
        // then by full-precision time (a stable sort keeps ties so).
        fresh.reverse();
        fresh.sort_by_key(|e| e.at_ns);
        if first && fresh.is_empty() && !follow {
            return empty(console, &format!("no events for stack {}", stack.name));
        }
        first = false;
        let text: String = fresh.iter().map(|e| line(e) + "\n").collect();
        if let Err(closed) = console.print(&text) {
            return printed(Err(closed), "the events", ExitCode::Success);
        }
        let news = !fresh.is_empty();
        seen.feed(fresh);
        if !follow {
            return ExitCode::Success;
        }
        let status = match cloud.stack(&stack.id).await {
            Ok(s) => s.map(|s| s.status).unwrap_or_default(),
            Err(e) => return fail(console, e),
        };
        if is_settled(&status) && !news {
            console.noteln(&format!("stack {} is {status}", stack.name));
            return ExitCode::Success;
        }
        tokio::select! {
            _ = &mut interrupted => return ExitCode::Interrupted,
            _ = tokio::time::sleep(backoff.next(news)) => {}
        }
    }
}

/// Every event the first time (all pages), then the new ones.
async fn fetch_new_all<C: Cloud>(cloud: &C, stack: &str, seen: &Watcher, first: bool) -> CloudResult<Vec<Event>> {
    if !first {
        return fetch_new(cloud, stack, seen, None).await;
    }
    let mut all = Vec::new();
    let mut page = None;
    loop {
        let p = cloud.events(stack, page).await?;
        all.extend(p.events);
        match p.next {
            Some(next) => page = Some(next),
            None => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Issue 35: the status column was padded to 32 characters, so an
    /// ordinary line wrapped in a 100-column terminal.
    #[test]
    fn an_ordinary_event_line_fits_100_columns() {
        let e = Event {
            at_ns: 1_764_000_000_000_000_000,
            status: "CREATE_COMPLETE".into(),
            logical_id: "MasterLaunchTemplate".into(),
            resource_type: "AWS::EC2::LaunchTemplate".into(),
            ..Event::default()
        };
        let text = line(&e);
        assert_eq!(text, "2025-11-24T16:00:00Z  CREATE_COMPLETE     MasterLaunchTemplate (AWS::EC2::LaunchTemplate)");
        assert!(text.chars().count() <= 100, "{} columns", text.chars().count());
        let long = Event { status: "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS".into(), ..e };
        assert!(line(&long).contains("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS  MasterLaunchTemplate"));
    }

    use super::*;
    use crate::deploy::fake::{FakeCloud, FakeConsole};
    use crate::deploy::port::Stack;
    use crate::deploy::watch::tests::ev;

    fn cloud() -> FakeCloud {
        let cloud = FakeCloud::default();
        let stack =
            Stack { name: "demo".into(), id: "demo-id".into(), status: "CREATE_COMPLETE".into(), ..Stack::default() };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let stack_type = "AWS::CloudFormation::Stack";
        cloud.event_script.lock().unwrap().push_back(vec![
            ev(3, 9, "demo", stack_type, "CREATE_COMPLETE", None),
            ev(2, 5, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE", None),
            ev(1, 1, "demo", stack_type, "CREATE_IN_PROGRESS", Some("User Initiated")),
        ]);
        cloud
    }

    #[tokio::test]
    async fn events_are_printed_oldest_first() {
        let (cloud, console) = (cloud(), FakeConsole::default());
        assert_eq!(print_events(&console, &cloud, "demo", false).await, ExitCode::Success);
        let out = console.stdout();
        let statuses: Vec<&str> = out.lines().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
        assert_eq!(statuses, ["CREATE_IN_PROGRESS", "CREATE_COMPLETE", "CREATE_COMPLETE"], "{out}");
        assert!(out.lines().next().unwrap().ends_with("demo (AWS::CloudFormation::Stack)  User Initiated"), "{out}");
    }

    /// A reader that went away ends it quietly (exit 0), as `synth build
    /// | head` does; a full disk is exit 2 (cli-output says why).
    #[tokio::test]
    async fn a_closed_pipe_ends_quietly_and_a_full_disk_is_an_error() {
        for (kind, code) in
            [(std::io::ErrorKind::BrokenPipe, ExitCode::Success), (std::io::ErrorKind::StorageFull, ExitCode::Error)]
        {
            let (cloud, console) = (cloud(), FakeConsole::default());
            *console.print_fails.lock().unwrap() = Some(kind);
            assert_eq!(print_events(&console, &cloud, "demo", true).await, code, "{kind:?}");
            assert_eq!(cloud.calls_named("stack"), 1, "{kind:?}: it stops at the failed write, even with --follow");
        }
    }

    #[tokio::test]
    async fn a_missing_stack_is_named() {
        let console = FakeConsole::default();
        assert_eq!(print_events(&console, &FakeCloud::default(), "gone", false).await, ExitCode::NotFound);
        assert_eq!(
            console.stderr(),
            "error: no stack gone in us-east-1; `synth status --region us-east-1` lists the cluster stacks there\n"
        );
    }

    /// The rule for an empty answer: a stack with no events (yet) is exit
    /// 0 with one line on stderr, nothing on stdout.
    #[tokio::test]
    async fn no_events_is_one_line_on_stderr_and_exit_0() {
        let cloud = FakeCloud::default();
        let stack = Stack { name: "demo".into(), id: "demo-id".into(), ..Stack::default() };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let console = FakeConsole::default();
        assert_eq!(print_events(&console, &cloud, "demo", false).await, ExitCode::Success);
        assert_eq!((console.stdout().as_str(), console.stderr().as_str()), ("", "no events for stack demo\n"));
    }

    /// Events of one second (one millisecond, even) print in the order the
    /// service's full-precision times give, oldest first; events of the
    /// very same time keep the order they were returned in, oldest first.
    #[tokio::test]
    async fn events_of_one_second_are_ordered_by_their_full_time() {
        let cloud = FakeCloud::default();
        let stack =
            Stack { name: "demo".into(), id: "demo-id".into(), status: "CREATE_COMPLETE".into(), ..Stack::default() };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let at = |n: u32, id: &str, ns: i128| Event {
            at_ns: 5_000_000_000 + ns,
            ..ev(n, 5, id, "AWS::SQS::Queue", "CREATE_COMPLETE", None)
        };
        // Newest first, as DescribeStackEvents lists them.
        cloud.event_script.lock().unwrap().push_back(vec![
            at(5, "Fifth", 900_000),
            at(4, "Fourth", 300_000),
            at(3, "Third", 300_000),
            at(2, "Second", 250_000),
            at(1, "First", 100),
        ]);
        let console = FakeConsole::default();
        assert_eq!(print_events(&console, &cloud, "demo", false).await, ExitCode::Success);
        let out = console.stdout();
        let ids: Vec<&str> = out.lines().map(|l| l.split_whitespace().nth(2).unwrap()).collect();
        assert_eq!(ids, ["First", "Second", "Third", "Fourth", "Fifth"], "{out}");
    }

    /// Fault injection: the events cannot be read: exit 2 naming the call,
    /// nothing on stdout.
    #[tokio::test]
    async fn events_that_cannot_be_read_are_an_error_naming_the_call() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let cloud = Failing::new(cloud()).fail(Op::Events, 1, Fault::Throttled);
        let console = FakeConsole::default();
        assert_eq!(print_events(&console, &cloud, "demo", false).await, ExitCode::Error);
        assert!(
            console.stderr().starts_with("error: CloudFormation DescribeStackEvents on stack demo"),
            "{}",
            console.stderr()
        );
        assert_eq!(console.stdout(), "");
    }
}
