//! `synth logs`' core: which streams of a stack's log group a `--node`
//! means, what `--since` means, how a node's line is printed, and reading
//! every page of what is new exactly once.
//!
//! The names come from the contract (`node_contract::logs`): the group is
//! `/deeplearning-cluster/<stack>/<run>` (the newest run of that stack
//! name is read) and each node writes the stream
//! `<label>-<instance id>`. Nothing here asks CloudFormation, so the logs of
//! a rolled-back or deleted stack read the same as a running one's.
//!
//! Reading goes through the port ([`Cloud::log_events`], CloudWatch Logs'
//! `FilterLogEvents`, whose answers interleave the streams in time order),
//! one page at a time: memory is one page plus the ids of the last
//! [`Seen::LOOKBACK_MS`] of lines, whatever the group holds.

use std::collections::{HashSet, VecDeque};

use aws_sdk_cloudwatchlogs::primitives::{DateTime, DateTimeFormat};
use cli_output::Closed;
use node_contract::logs::parse_stream_name;

use super::console::{Console, empty, fail, not_found};
use super::port::{Cloud, CloudError, LogEvent, LogQuery};
use super::time::stamp;
use super::watch::Backoff;
use crate::exit::{ExitCode, printed};

/// The most streams one `FilterLogEvents` call may name (AWS's limit).
pub(crate) const MAX_STREAMS_PER_QUERY: usize = 100;

/// The most stream names read to resolve `--node` and to size the label
/// column (ten pages of `DescribeLogStreams`).
pub(crate) const MAX_STREAMS_LISTED: usize = 500;

/// Why `synth logs` cannot read what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LogsError {
    /// No log group of a stack of that name exists.
    #[error(
        "no logs for stack {stack} in region {region}: no log group starts with {prefix} \
         (was the stack created by an older synth, or in another region?)"
    )]
    NoGroup {
        /// The stack's name.
        stack: String,
        /// The region looked in.
        region: String,
        /// What its groups' names start with.
        prefix: String,
    },
    /// No log group of the stack with the id `--stack-id` names.
    #[error("no logs for stack {stack} with id {run} in region {region}; {}", runs_of(.runs))]
    NoRun {
        /// The stack's name.
        stack: String,
        /// The UUID asked for.
        run: String,
        /// The region looked in.
        region: String,
        /// The runs that have logs, newest first, with when each was made.
        runs: Vec<(String, i64)>,
    },
    /// No stream of the group is the node `--node` names.
    #[error("no logs from node {node} in {group}: {}", known_nodes(.known))]
    NoSuchNode {
        /// What `--node` said.
        node: String,
        /// The group.
        group: String,
        /// The labels of the nodes that have logs there.
        known: Vec<String>,
    },
    /// `--node` matches more streams than one call may read.
    #[error(
        "node {node} has {count} streams in {group}, more than the {MAX_STREAMS_PER_QUERY} one read may name; \
         pass its instance id"
    )]
    TooManyStreams {
        /// What `--node` said.
        node: String,
        /// The group.
        group: String,
        /// How many streams matched.
        count: usize,
    },
    /// An AWS call failed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

fn known_nodes(known: &[String]) -> String {
    if known.is_empty() {
        "no node has written any".to_owned()
    } else {
        format!(
            "the nodes with logs are {} (--node takes a label, a worker's number or an instance id)",
            known.join(", ")
        )
    }
}

/// `--since`: a duration back from `now_ms` (`90s`, `10m`, `2h`, `1d`) or an
/// RFC 3339 time (`2026-11-25T20:00:00Z`, `2026-11-25T21:00:00+01:00`);
/// unix milliseconds.
pub(crate) fn parse_since(text: &str, now_ms: i64) -> Result<i64, String> {
    let help = || {
        format!(
            "--since {text:?}: give a duration back from now (90s, 10m, 2h, 1d) or an RFC 3339 time (2026-11-25T20:00:00Z)"
        )
    };
    let text = text.trim();
    if let Some(unit) = text.chars().last().filter(|c| c.is_ascii_alphabetic())
        && let digits = &text[..text.len() - 1]
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        let unit_ms: i64 = match unit {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return Err(help()),
        };
        let back = digits.parse::<i64>().ok().and_then(|n| n.checked_mul(unit_ms)).ok_or_else(help)?;
        return Ok(now_ms.saturating_sub(back));
    }
    // aws-smithy-types' RFC 3339 parser (the `time` crate underneath).
    DateTime::from_str(text, DateTimeFormat::DateTimeWithOffset).ok().and_then(|t| t.to_millis().ok()).ok_or_else(help)
}

/// The label a stream's lines are prefixed with: the node's label for a
/// stream the contract named, else the stream's own name.
pub(crate) fn label_of(stream: &str) -> &str {
    parse_stream_name(stream).map_or(stream, |(label, _)| label)
}

/// The streams of `streams` that are the node `node` names: a label
/// (`master`, `worker3`, `worker`), a worker's number (`3`), or an instance
/// id. A node can have several (a worker writes `worker-<id>` before the
/// master gives it a number; a replaced worker's number comes back with
/// another id).
pub(crate) fn select_streams(streams: &[String], node: &str, group: &str) -> Result<Vec<String>, LogsError> {
    let node = node.trim();
    let label = match node.parse::<u64>() {
        Ok(number) if node.bytes().all(|b| b.is_ascii_digit()) => format!("worker{number}"),
        _ => node.to_owned(),
    };
    let chosen: Vec<String> = streams
        .iter()
        .filter(|s| parse_stream_name(s).is_some_and(|(l, id)| l == label || id == node) || s.as_str() == node)
        .cloned()
        .collect();
    if chosen.is_empty() {
        let mut known: Vec<String> = streams.iter().map(|s| label_of(s).to_owned()).collect();
        known.sort_by(|a, b| natural(a).cmp(&natural(b)));
        known.dedup();
        return Err(LogsError::NoSuchNode { node: node.to_owned(), group: group.to_owned(), known });
    }
    if chosen.len() > MAX_STREAMS_PER_QUERY {
        return Err(LogsError::TooManyStreams { node: node.to_owned(), group: group.to_owned(), count: chosen.len() });
    }
    Ok(chosen)
}

/// Sorts `worker2` before `worker10`, `master` first.
fn natural(label: &str) -> (u8, u64, &str) {
    match label.strip_prefix("worker").and_then(|n| n.parse::<u64>().ok()) {
        _ if label == "master" => (0, 0, label),
        Some(n) => (1, n, label),
        None => (2, 0, label),
    }
}

/// Prints lines as `<time UTC>  <label> | <line>`, the label column as wide
/// as the widest label seen (at least `worker99`), so columns stay put.
#[derive(Clone, Debug)]
pub(crate) struct LineFormat {
    width: usize,
}

impl LineFormat {
    /// The narrowest label column.
    const MIN_WIDTH: usize = "worker99".len();

    /// A format wide enough for the labels of `streams`.
    pub(crate) fn for_streams(streams: &[String]) -> LineFormat {
        let widest = streams.iter().map(|s| label_of(s).len()).max().unwrap_or(0);
        LineFormat { width: widest.max(Self::MIN_WIDTH) }
    }

    /// The event's lines (a message with newlines gives one line each, all
    /// prefixed, so `grep worker3` finds them all).
    pub(crate) fn lines(&mut self, e: &LogEvent) -> Vec<String> {
        let label = label_of(&e.stream);
        self.width = self.width.max(label.len());
        let at = stamp_ms(e.at_ms);
        let message = e.message.trim_end_matches(['\n', '\r']);
        message
            .split('\n')
            .map(|line| format!("{at}  {label:>width$} | {}", line.trim_end_matches('\r'), width = self.width))
            .collect()
    }
}

/// `2026-11-25T20:00:00.250Z`: UTC, always to the millisecond, one width.
pub(crate) fn stamp_ms(ms: i64) -> String {
    let seconds = stamp(ms.div_euclid(1_000) * 1_000);
    format!("{}.{:03}Z", seconds.trim_end_matches('Z'), ms.rem_euclid(1_000))
}

/// The events already printed, for re-reading an overlap without printing
/// a line twice. Only the last [`Seen::LOOKBACK_MS`] before the newest line
/// are kept: each later read starts there ([`Seen::resume_ms`]), so a line a
/// node shipped late (its batch reached CloudWatch after a faster node's
/// newer lines) is still found, and nothing older can come back.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    ids: HashSet<String>,
    /// (time, id), oldest first, for dropping what falls out of the window;
    /// the last is the newest line printed.
    order: VecDeque<(i64, String)>,
}

impl Seen {
    /// How far back each later read starts before the newest line printed:
    /// longer than a node takes to ship a batch (the agent ships every few
    /// seconds) plus CloudWatch's ingestion delay.
    pub(crate) const LOOKBACK_MS: i64 = 60_000;

    /// Whether `e` is new; remembers it.
    pub(crate) fn fresh(&mut self, e: &LogEvent) -> bool {
        if !self.ids.insert(e.id.clone()) {
            return false;
        }
        // Kept in time order (a late line goes in its place), so the front
        // is always the oldest and the back the newest (never dropped).
        let at = self.order.partition_point(|(t, _)| *t <= e.at_ms);
        self.order.insert(at, (e.at_ms, e.id.clone()));
        let newest = self.newest_ms().unwrap_or(e.at_ms);
        while self.order.front().is_some_and(|(t, _)| *t < newest - Self::LOOKBACK_MS) {
            if let Some((_, id)) = self.order.pop_front() {
                self.ids.remove(&id);
            }
        }
        true
    }

    /// Where the next read starts: [`Seen::LOOKBACK_MS`] before the newest
    /// line printed, never before `since`.
    pub(crate) fn resume_ms(&self, since: Option<i64>) -> Option<i64> {
        match (self.newest_ms().map(|n| n - Self::LOOKBACK_MS), since) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The newest line's time.
    fn newest_ms(&self) -> Option<i64> {
        self.order.back().map(|(t, _)| *t)
    }

    /// How many ids are kept (bounded by the lines of the lookback window).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.ids.len()
    }
}

/// Reads every page `query` selects, printing each line not [`Seen`]
/// before on the console, in time order within each page; returns how many
/// were printed. A reader that went away (`synth logs x | head`) ends it
/// with the write error.
pub(crate) async fn read_new<C: Cloud, K: Console>(
    cloud: &C,
    query: &LogQuery,
    seen: &mut Seen,
    format: &mut LineFormat,
    console: &K,
) -> Result<usize, ReadError> {
    let mut printed = 0;
    let mut page = None;
    loop {
        let mut p = cloud.log_events(query, page).await.map_err(ReadError::Cloud)?;
        // The service interleaves streams in time order; equal times keep
        // one order run after run.
        p.events
            .sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then_with(|| a.stream.cmp(&b.stream)).then_with(|| a.id.cmp(&b.id)));
        let mut text = String::new();
        for e in &p.events {
            if seen.fresh(e) {
                for line in format.lines(e) {
                    text.push_str(&line);
                    text.push('\n');
                }
                printed += 1;
            }
        }
        console.print(&text).map_err(ReadError::Write)?;
        match p.next {
            Some(next) => page = Some(next),
            None => return Ok(printed),
        }
    }
}

/// Why [`read_new`] stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// A CloudWatch Logs call failed.
    #[error(transparent)]
    Cloud(CloudError),
    /// Standard output could not be written, or its reader went away.
    #[error(transparent)]
    Write(Closed),
}

/// What `synth logs` reads.
#[derive(Clone, Debug, Default)]
pub(crate) struct Request<'a> {
    /// The stack's name (running, rolled back or deleted).
    pub stack: &'a str,
    /// `--node`: only this node's streams; `None`: every node.
    pub node: Option<&'a str>,
    /// Only lines at or after this time (unix milliseconds).
    pub since: Option<i64>,
    /// Keep printing new lines until the console is interrupted.
    pub follow: bool,
    /// `--stack-id`: the stack of that name with this id (its ARN, or the
    /// UUID at its end), for an earlier stack's lines; `None`: the newest.
    pub stack_id: Option<&'a str>,
}

/// `synth logs`: prints the lines of the newest log group of the stack
/// `request` names (with `follow`, then new ones until Ctrl-C); the exit
/// code says how it ended.
pub(crate) async fn print_logs<K: Console, C: Cloud>(console: &K, cloud: &C, request: &Request<'_>) -> ExitCode {
    // Ctrl-C at any point (a long first read included) ends it at once;
    // nothing on the cloud side changes.
    tokio::select! {
        code = print_logs_inner(console, cloud, request) => code,
        _ = console.interrupted() => ExitCode::Interrupted,
    }
}

async fn print_logs_inner<K: Console, C: Cloud>(console: &K, cloud: &C, request: &Request<'_>) -> ExitCode {
    let since = request.since;
    // Every stack of this name left a group (a stack created again after a
    // rollback or a delete gets a new one): the newest is this stack's.
    let prefix = node_contract::logs::log_group_prefix(request.stack);
    let groups = match cloud.log_groups(&prefix).await {
        Ok(groups) => groups,
        Err(e) => return failed(console, e.into()),
    };
    let mut groups = groups;
    groups.sort_by(|a, b| (b.created_ms, &b.name).cmp(&(a.created_ms, &a.name)));
    let runs: Vec<(String, i64)> =
        groups.iter().map(|g| (g.name.strip_prefix(&prefix).unwrap_or(&g.name).to_owned(), g.created_ms)).collect();
    let chosen = match request.stack_id {
        // The UUID at the end of an id, or the UUID itself.
        Some(id) => {
            let run = node_contract::logs::stack_run(id).unwrap_or(id);
            match groups.iter().find(|g| g.name.strip_prefix(&prefix) == Some(run)) {
                Some(group) => group,
                None => {
                    let (stack, region) = (request.stack.to_owned(), cloud.region().to_owned());
                    return failed(console, LogsError::NoRun { stack, run: run.to_owned(), region, runs });
                }
            }
        }
        None => match groups.first() {
            Some(newest) => newest,
            None => {
                let stack = request.stack.to_owned();
                return failed(console, LogsError::NoGroup { stack, region: cloud.region().to_owned(), prefix });
            }
        },
    };
    let mut query = LogQuery { group: chosen.name.clone(), streams: Vec::new(), start_ms: since };
    if groups.len() > 1 && request.stack_id.is_none() {
        console.noteln(&format!(
            "note: {} earlier stack(s) named {} left logs too; these lines are from the newest, {}; \
             `--stack-id ID` reads another's ({})",
            groups.len() - 1,
            request.stack,
            query.group,
            runs_of(&runs[1..])
        ));
    }
    let mut format = match narrow(cloud, request.node, &mut query).await {
        Ok(all) => LineFormat::for_streams(&all),
        Err(e) => return failed(console, e),
    };
    let mut seen = Seen::default();
    let mut backoff = Backoff::default();
    let mut first = true;
    loop {
        let printed = match read_new(cloud, &query, &mut seen, &mut format, console).await {
            Ok(n) => n,
            Err(ReadError::Write(closed)) => return printed(Err(closed), "the lines", ExitCode::Success),
            Err(ReadError::Cloud(e)) => return failed(console, e.into()),
        };
        // An empty answer is said, once, whether or not more is awaited.
        if first && printed == 0 {
            let nothing = nothing_since(request, &query.group);
            if !request.follow {
                return empty(console, &nothing);
            }
            console.noteln(&format!("{nothing}; waiting for new ones (Ctrl-C stops)"));
        }
        first = false;
        if !request.follow {
            return ExitCode::Success;
        }
        tokio::time::sleep(backoff.next(printed > 0)).await;
        // A node's stream changes name when the master numbers it
        // (`worker-<id>`, then `worker3-<id>`): look again each round.
        if request.node.is_some()
            && let Err(e) = narrow(cloud, request.node, &mut query).await
        {
            return failed(console, e);
        }
        query.start_ms = seen.resume_ms(since);
    }
}

/// Lists the query's group's streams and narrows the query to `node`'s;
/// returns every stream (for the label column's width).
///
/// A group no node has written to yet has no streams: any `--node` is then
/// an empty answer, not an unknown node (the query names the group, and
/// finds nothing), so nothing is narrowed and the read finds no lines.
async fn narrow<C: Cloud>(cloud: &C, node: Option<&str>, query: &mut LogQuery) -> Result<Vec<String>, LogsError> {
    let all = cloud.log_streams(&query.group, MAX_STREAMS_LISTED).await?;
    if let Some(node) = node
        && !all.is_empty()
    {
        query.streams = select_streams(&all, node, &query.group)?;
    }
    Ok(all)
}

/// The runs of a stack name that left logs, as `UUID (created TIME)`.
fn runs_of(runs: &[(String, i64)]) -> String {
    let listed: Vec<String> = runs.iter().map(|(run, ms)| format!("{run} (created {})", stamp(*ms))).collect();
    if listed.is_empty() { "no stack of that name left logs".to_owned() } else { format!("ids: {}", listed.join(", ")) }
}

/// The one line that says a read found nothing: which node, since when,
/// in which group. "Yet" only while waiting for more: the stack may be
/// deleted, and its group will get no more lines.
fn nothing_since(request: &Request<'_>, group: &str) -> String {
    let from = request.node.map(|n| format!(" from node {}", n.trim())).unwrap_or_default();
    let since = match request.since {
        Some(ms) => format!(" since {}", stamp(ms)),
        None if request.follow => " yet".to_owned(),
        None => String::new(),
    };
    format!("no log lines{from}{since} in {group}")
}

/// Prints why and returns the exit code: 3 when what was named is not
/// there (the stack's logs, the node), 2 for an AWS error.
fn failed<K: Console>(console: &K, e: LogsError) -> ExitCode {
    match e {
        LogsError::Cloud(_) | LogsError::TooManyStreams { .. } => fail(console, e),
        LogsError::NoGroup { .. } | LogsError::NoRun { .. } | LogsError::NoSuchNode { .. } => not_found(console, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::fake::{FakeCloud, FakeConsole};

    const GROUP: &str = "/deeplearning-cluster/demo";
    const T0: i64 = 1_795_636_800_000; // 2026-11-25T20:00:00Z

    fn event(stream: &str, at_ms: i64, id: &str, message: &str) -> LogEvent {
        LogEvent { stream: stream.into(), at_ms, id: id.into(), message: message.into() }
    }

    fn node_streams() -> Vec<String> {
        ["master-i-0aa", "worker-i-0bb", "worker2-i-0bb", "worker3-i-0cc", "worker10-i-0dd"].map(String::from).to_vec()
    }

    /// The nodes' and one the contract did not name.
    fn streams() -> Vec<String> {
        let mut all = node_streams();
        all.push("cloud-init".into());
        all
    }

    #[test]
    fn since_takes_durations_and_rfc3339_times() {
        assert_eq!(parse_since("10m", T0), Ok(T0 - 600_000));
        assert_eq!(parse_since("2h", T0), Ok(T0 - 7_200_000));
        assert_eq!(parse_since("1d", T0), Ok(T0 - 86_400_000));
        assert_eq!(parse_since("90s", T0), Ok(T0 - 90_000));
        assert_eq!(parse_since("2026-11-25T20:00:00Z", 0), Ok(T0));
        assert_eq!(parse_since("2026-11-25T21:00:00.5+01:00", 0), Ok(T0 + 500));
        for bad in
            ["", "m", "10", "10w", "-5m", "ten minutes", "2026-11-25", "2026-13-01T00:00:00Z", "99999999999999999999d"]
        {
            let e = parse_since(bad, T0).unwrap_err();
            assert!(e.contains("10m, 2h, 1d") && e.contains("RFC 3339"), "{bad}: {e}");
        }
    }

    #[test]
    fn node_takes_a_label_a_number_or_an_instance_id() {
        let s = streams();
        assert_eq!(select_streams(&s, "master", GROUP).unwrap(), ["master-i-0aa"]);
        assert_eq!(select_streams(&s, "worker3", GROUP).unwrap(), ["worker3-i-0cc"]);
        assert_eq!(select_streams(&s, "3", GROUP).unwrap(), ["worker3-i-0cc"]);
        assert_eq!(select_streams(&s, "10", GROUP).unwrap(), ["worker10-i-0dd"]);
        // Before and after the master numbered it: both streams.
        assert_eq!(select_streams(&s, "i-0bb", GROUP).unwrap(), ["worker-i-0bb", "worker2-i-0bb"]);
        assert_eq!(select_streams(&s, "cloud-init", GROUP).unwrap(), ["cloud-init"]);
        let e = select_streams(&s, "7", GROUP).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no logs from node 7 in /deeplearning-cluster/demo: the nodes with logs are master, worker2, worker3, \
             worker10, cloud-init, worker (--node takes a label, a worker's number or an instance id)"
        );
        assert!(
            matches!(select_streams(&[], "master", GROUP), Err(LogsError::NoSuchNode { known, .. }) if known.is_empty())
        );
    }

    #[test]
    fn lines_are_prefixed_in_one_width_with_utc_milliseconds() {
        let mut f = LineFormat::for_streams(&node_streams());
        assert_eq!(
            f.lines(&event("worker3-i-0cc", T0 + 250, "1", "joined\n")),
            ["2026-11-25T20:00:00.250Z   worker3 | joined"]
        );
        assert_eq!(
            f.lines(&event("master-i-0aa", T0 + 1_000, "2", "a\r\nb")),
            ["2026-11-25T20:00:01.000Z    master | a", "2026-11-25T20:00:01.000Z    master | b"]
        );
        assert_eq!(f.lines(&event("cloud-init", T0, "3", "x"))[0], "2026-11-25T20:00:00.000Z  cloud-init | x");
        // Wider from then on: columns move once, not line by line.
        assert_eq!(f.lines(&event("master-i-0aa", T0, "4", "y"))[0], "2026-11-25T20:00:00.000Z      master | y");
    }

    #[test]
    fn the_lookback_window_bounds_what_is_remembered() {
        let mut seen = Seen::default();
        assert_eq!(seen.resume_ms(Some(5)), Some(5));
        assert!(seen.fresh(&event("m", T0, "a", "")));
        assert!(!seen.fresh(&event("m", T0, "a", "")));
        assert!(seen.fresh(&event("m", T0 + 10_000, "b", "")));
        assert!(seen.fresh(&event("m", T0 + 5_000, "late", "")));
        assert_eq!(seen.resume_ms(None), Some(T0 + 10_000 - Seen::LOOKBACK_MS));
        assert_eq!(seen.resume_ms(Some(T0 + 9_000)), Some(T0 + 9_000));
        for i in 0..1_000 {
            seen.fresh(&event("m", T0 + 100_000 + i * 1_000, &format!("n{i}"), ""));
        }
        // Only the last minute of a 1,000-second run.
        assert_eq!(seen.kept(), 61);
    }

    fn cloud_with(events: Vec<LogEvent>, page_size: usize) -> FakeCloud {
        let cloud = FakeCloud::default();
        cloud.log_groups.lock().unwrap().insert(GROUP.into(), events);
        *cloud.log_page_size.lock().unwrap() = page_size;
        cloud
    }

    async fn read(cloud: &FakeCloud, query: &LogQuery, seen: &mut Seen) -> (usize, Vec<String>) {
        let mut format = LineFormat::for_streams(&node_streams());
        let console = FakeConsole::default();
        let n = read_new(cloud, query, seen, &mut format, &console).await.unwrap();
        (n, console.stdout().lines().map(str::to_owned).collect())
    }

    #[tokio::test]
    async fn pages_merge_in_time_order_and_a_reread_prints_only_what_is_new() {
        let cloud = cloud_with(
            vec![
                event("worker2-i-0bb", T0 + 2_000, "e3", "w2 second"),
                event("master-i-0aa", T0, "e1", "m first"),
                event("worker2-i-0bb", T0 + 1_000, "e2", "w2 first"),
                event("master-i-0aa", T0 + 3_000, "e4", "m second"),
                event("worker3-i-0cc", T0 + 3_000, "e5", "w3"),
            ],
            2,
        );
        let query = LogQuery { group: GROUP.into(), ..LogQuery::default() };
        let mut seen = Seen::default();
        let (n, lines) = read(&cloud, &query, &mut seen).await;
        assert_eq!(n, 5);
        let messages: Vec<&str> = lines.iter().map(|l| l.split(" | ").nth(1).unwrap()).collect();
        assert_eq!(messages, ["m first", "w2 first", "w2 second", "m second", "w3"]);
        assert!(lines[0].starts_with("2026-11-25T20:00:00.000Z    master | "), "{lines:?}");
        assert_eq!(cloud.calls_named("log_events"), 3, "three pages of two");

        // Node lines arrive, one late (older than the newest printed): the
        // next read, from the lookback, prints each new line once.
        cloud.log_groups.lock().unwrap().get_mut(GROUP).unwrap().extend([
            event("worker3-i-0cc", T0 + 4_000, "e6", "w3 new"),
            event("worker2-i-0bb", T0 + 2_500, "e7", "w2 late"),
        ]);
        let query = LogQuery { start_ms: seen.resume_ms(None), ..query };
        let (n, lines) = read(&cloud, &query, &mut seen).await;
        assert_eq!(n, 2, "{lines:?}");
        assert!(lines[0].ends_with("worker2 | w2 late") && lines[1].ends_with("worker3 | w3 new"), "{lines:?}");
        let (n, lines) = read(&cloud, &query, &mut seen).await;
        assert_eq!((n, lines.len()), (0, 0), "nothing twice: {lines:?}");
    }

    #[tokio::test]
    async fn streams_and_since_narrow_the_read() {
        let cloud = cloud_with(
            vec![
                event("master-i-0aa", T0, "e1", "old"),
                event("worker3-i-0cc", T0 + 1_000, "e2", "w3 old"),
                event("master-i-0aa", T0 + 60_000, "e3", "new"),
                event("worker3-i-0cc", T0 + 61_000, "e4", "w3 new"),
            ],
            100,
        );
        let query = LogQuery { group: GROUP.into(), streams: vec!["worker3-i-0cc".into()], start_ms: None };
        let (_, lines) = read(&cloud, &query, &mut Seen::default()).await;
        assert!(lines.len() == 2 && lines.iter().all(|l| l.contains("worker3 | w3")), "{lines:?}");
        let query = LogQuery { group: GROUP.into(), streams: vec![], start_ms: Some(T0 + 30_000) };
        let (_, lines) = read(&cloud, &query, &mut Seen::default()).await;
        assert!(lines.len() == 2 && lines.iter().all(|l| l.ends_with("new")), "{lines:?}");
    }

    /// `synth logs` into a closed pipe ends quietly (exit 0), onto a full
    /// disk with exit 2; a stack without logs, or a node without lines, is
    /// exit 1 with the reason.
    #[tokio::test]
    async fn print_logs_answers_write_failures_and_missing_logs() {
        let request = Request { stack: "demo", ..Request::default() };
        let cloud_with = |events: Vec<LogEvent>, _| {
            let cloud = FakeCloud::default();
            cloud.log_groups.lock().unwrap().insert("/deeplearning-cluster/demo/run-1".into(), events);
            cloud
        };
        for (kind, code) in
            [(std::io::ErrorKind::BrokenPipe, ExitCode::Success), (std::io::ErrorKind::StorageFull, ExitCode::Error)]
        {
            let cloud = cloud_with(vec![event("master-i-0aa", T0, "e1", "up")], 0);
            let console = FakeConsole::default();
            *console.print_fails.lock().unwrap() = Some(kind);
            assert_eq!(print_logs(&console, &cloud, &Request { follow: true, ..request.clone() }).await, code);
        }
        let cloud = cloud_with(vec![event("master-i-0aa", T0, "e1", "up")], 0);
        let console = FakeConsole::default();
        assert_eq!(print_logs(&console, &cloud, &request).await, ExitCode::Success);
        assert_eq!(console.stdout(), "2026-11-25T20:00:00.000Z    master | up\n");
        let console = FakeConsole::default();
        let other = Request { stack: "other", ..request.clone() };
        assert_eq!(print_logs(&console, &cloud, &other).await, ExitCode::NotFound);
        assert!(
            console.stderr().starts_with("error: no logs for stack other in region us-east-1"),
            "{}",
            console.stderr()
        );
        let console = FakeConsole::default();
        assert_eq!(print_logs(&console, &cloud, &Request { node: Some("7"), ..request }).await, ExitCode::NotFound);
        assert!(console.stderr().starts_with("error: no logs from node 7 in "), "{}", console.stderr());
    }

    /// Issue 35: only the newest stack of a name could be read. The note
    /// lists the earlier ones' ids, and `--stack-id` (an ARN or its UUID)
    /// reads one of them.
    #[tokio::test]
    async fn stack_id_reads_an_earlier_stacks_lines() {
        let cloud = FakeCloud::default();
        {
            let mut groups = cloud.log_groups.lock().unwrap();
            groups.insert("/deeplearning-cluster/demo/run-1".into(), vec![event("master-i-0aa", T0, "e1", "first")]);
            groups.insert("/deeplearning-cluster/demo/run-2".into(), vec![event("master-i-0bb", T0, "e2", "second")]);
        }
        let console = FakeConsole::default();
        assert_eq!(
            print_logs(&console, &cloud, &Request { stack: "demo", ..Request::default() }).await,
            ExitCode::Success
        );
        assert!(console.stdout().contains("second") && !console.stdout().contains("first"), "{}", console.stdout());
        assert!(
            console.stderr().contains("`--stack-id ID` reads another's (ids: run-1 (created "),
            "{}",
            console.stderr()
        );
        for id in ["arn:aws:cloudformation:us-east-1:123456789012:stack/demo/run-1", "run-1"] {
            let console = FakeConsole::default();
            let request = Request { stack: "demo", stack_id: Some(id), ..Request::default() };
            assert_eq!(print_logs(&console, &cloud, &request).await, ExitCode::Success);
            assert!(console.stdout().contains("first") && !console.stdout().contains("second"), "{}", console.stdout());
            assert_eq!(console.stderr(), "", "no note when an id is chosen");
        }
        let console = FakeConsole::default();
        let request = Request { stack: "demo", stack_id: Some("run-9"), ..Request::default() };
        assert_eq!(print_logs(&console, &cloud, &request).await, ExitCode::NotFound);
        assert!(
            console.stderr().starts_with("error: no logs for stack demo with id run-9 in region us-east-1; ids: run-2")
        );
    }

    /// The rule for an empty answer: a stack whose logs exist but hold no
    /// line since then, or a group no node has written to yet (with or
    /// without `--node`), is exit 0 with one line on stderr saying so, and
    /// nothing on stdout; with `--follow` the line says it waits.
    #[tokio::test]
    async fn an_empty_answer_is_one_line_on_stderr_and_exit_0() {
        let group = "/deeplearning-cluster/demo/run-1";
        let cloud = FakeCloud::default();
        cloud.log_groups.lock().unwrap().insert(group.into(), vec![event("master-i-0aa", T0, "e1", "up")]);
        let request = Request { stack: "demo", since: Some(T0 + 3_600_000), ..Request::default() };
        let console = FakeConsole::default();
        assert_eq!(print_logs(&console, &cloud, &request).await, ExitCode::Success);
        assert_eq!(console.stdout(), "");
        assert_eq!(console.stderr(), format!("no log lines since 2026-11-25T21:00:00Z in {group}\n"));

        let console = FakeConsole::default();
        let master = Request { node: Some("master"), ..request.clone() };
        assert_eq!(print_logs(&console, &cloud, &master).await, ExitCode::Success);
        assert_eq!(console.stderr(), format!("no log lines from node master since 2026-11-25T21:00:00Z in {group}\n"));

        // Nobody has written yet: --node master is the same empty answer as
        // no --node, not "no such node".
        let cloud = FakeCloud::default();
        cloud.log_groups.lock().unwrap().insert(group.into(), vec![]);
        for node in [None, Some("master")] {
            let console = FakeConsole::default();
            let request = Request { stack: "demo", node, ..Request::default() };
            assert_eq!(print_logs(&console, &cloud, &request).await, ExitCode::Success, "{node:?}");
            assert_eq!(console.stdout(), "", "{node:?}");
            // No "yet": the stack may be deleted (issue 35); only --follow waits.
            assert!(
                console.stderr().starts_with("no log lines")
                    && console.stderr().ends_with(" in /deeplearning-cluster/demo/run-1\n")
                    && !console.stderr().contains("yet"),
                "{node:?}: {}",
                console.stderr()
            );
            assert_eq!(console.stderr().lines().count(), 1);
        }
    }

    /// With `--follow` the empty answer is said once, then it waits until
    /// Ctrl-C (130).
    #[tokio::test(start_paused = true)]
    async fn following_an_empty_group_says_so_once_and_waits() {
        let group = "/deeplearning-cluster/demo/run-1";
        let cloud = FakeCloud::default();
        cloud.log_groups.lock().unwrap().insert(group.into(), vec![]);
        let console = FakeConsole::default();
        let request = Request { stack: "demo", follow: true, ..Request::default() };
        let ctrl_c = async {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            console.interrupt();
        };
        let (code, ()) = tokio::join!(print_logs(&console, &cloud, &request), ctrl_c);
        assert_eq!(code, ExitCode::Interrupted);
        assert!(cloud.calls_named("log_events") > 2, "it kept reading");
        assert_eq!(console.stderr(), format!("no log lines yet in {group}; waiting for new ones (Ctrl-C stops)\n"));
    }

    /// Fault injection: the second page of a read throttled: exit 2 naming
    /// the call, after the first page's lines (they were read, so they are
    /// printed; a rerun prints them again, nothing is lost).
    #[tokio::test]
    async fn a_throttled_page_ends_the_read_with_an_error_naming_the_call() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let fake = FakeCloud::default();
        let events = vec![event("master-i-0aa", T0, "e1", "up"), event("master-i-0aa", T0 + 1, "e2", "more")];
        fake.log_groups.lock().unwrap().insert("/deeplearning-cluster/demo/run-1".into(), events);
        *fake.log_page_size.lock().unwrap() = 1;
        let cloud = Failing::new(fake).fail(Op::LogEvents, 2, Fault::Throttled);
        let console = FakeConsole::default();
        let request = Request { stack: "demo", ..Request::default() };
        assert_eq!(print_logs(&console, &cloud, &request).await, ExitCode::Error);
        let err = console.stderr();
        assert!(
            err.contains("error: CloudWatch Logs FilterLogEvents in /deeplearning-cluster/demo/run-1: AWS throttled"),
            "{err}"
        );
        assert!(!console.stdout().contains("more"), "{}", console.stdout());
    }
}
