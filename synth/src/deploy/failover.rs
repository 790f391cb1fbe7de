//! `synth deploy --region a,b,c`: a create that fails because AWS has no
//! capacity (the stack's root cause, or the formation failure reason the
//! master signalled, says so: [`capacity_shortage`]) is deleted and the
//! next region is tried; `--retry-until-up` goes through the list again
//! after a wait. Each region is prepared on its own (the staged agent
//! package and the image parameter are per region). An update of an
//! existing stack, and any other failure, ends it there.

use std::future::Future;
use std::time::Duration;

use super::apply::{self, Attempt, Options};
use super::console::{Console, Display};
use super::delete;
use super::port::Cloud;
use super::prepare::Prepared;
use super::time::now_ms;
use super::watch::clock;
use crate::exit::ExitCode;
use crate::region::Region;

/// The wait between passes over the regions with `--retry-until-up`
/// when `--retry-interval` does not say.
pub(crate) const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(300);
/// The shortest `--retry-interval`: AWS's capacity does not change faster.
pub(crate) const MIN_RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// The longest `--retry-interval`.
pub(crate) const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(3600);

/// Words AWS uses when it has no capacity for a launch, lower case: EC2's
/// error codes (`InsufficientInstanceCapacity`, a host's, a reservation's,
/// a fleet's `UnfulfillableCapacity`), its message ("We currently do not
/// have sufficient p4d.24xlarge capacity in the Availability Zone you
/// requested"), and Spot's ("There is no Spot capacity available that
/// matches your request"). A quota (`VcpuLimitExceeded`) is not among
/// them: another region does not fix an account's limits.
const SHORTAGE_WORDS: [&str; 8] = [
    "insufficientinstancecapacity",
    "insufficienthostcapacity",
    "insufficientcapacity",
    "insufficient capacity",
    "do not have sufficient",
    "no spot capacity available",
    "unfulfillablecapacity",
    "reservationcapacityexceeded",
];

/// Whether `reason` (a resource's failure, a scaling activity's message,
/// the master's formation failure reason) says AWS had no capacity.
pub(crate) fn capacity_shortage(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    SHORTAGE_WORDS.iter().any(|w| reason.contains(w))
}

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Done: this is the exit code (formed, updated, or failed for another reason).
    Stop(ExitCode),
    /// The create met no capacity: delete it and try the next region.
    DeleteAndGoOn,
    /// The create met no capacity but was kept (`--keep-on-failure`): stop.
    Kept,
}

/// The decision after `attempt`: only a create that failed for capacity goes on.
pub(crate) fn next(attempt: &Attempt, keep_on_failure: bool) -> Next {
    let shortage = attempt.cause.as_deref().is_some_and(capacity_shortage);
    if attempt.code != ExitCode::Invalid || !attempt.created || !shortage {
        Next::Stop(attempt.code)
    } else if keep_on_failure {
        Next::Kept
    } else {
        Next::DeleteAndGoOn
    }
}

/// How `synth deploy` goes through its regions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan<'a> {
    /// The regions, in order (empty: the blueprint's, else AWS's configuration's).
    pub regions: &'a [Region],
    /// Go through the list again after this wait when every region met no
    /// capacity (`--retry-until-up`).
    pub retry: Option<Duration>,
    /// How each attempt goes.
    pub options: Options<'a>,
}

/// What one attempt met, for the summary.
#[derive(Clone, Debug)]
struct Met {
    region: String,
    what: String,
}

/// Deploys to the first region of `plan` that has capacity. `prepare`
/// connects to a region (`None`: the standard chain's), stages the agent
/// package there and builds the template, returning the display it showed
/// progress on; errors are printed.
pub(crate) async fn deploy<K, C, F, Fut>(console: &K, plan: Plan<'_>, mut prepare: F) -> ExitCode
where
    K: Console,
    C: Cloud,
    F: FnMut(Option<Region>) -> Fut,
    Fut: Future<Output = Result<(C, Prepared, Display), ExitCode>>,
{
    let regions: Vec<Option<Region>> =
        if plan.regions.is_empty() { vec![None] } else { plan.regions.iter().copied().map(Some).collect() };
    // One region and no --retry-until-up: deploy as it always did (a
    // failed create stays for `synth delete`).
    let failing_over = regions.len() > 1 || plan.retry.is_some();
    let mut met: Vec<Met> = Vec::new();
    let mut pass = 1u32;
    let code = 'passes: loop {
        for (i, region) in regions.iter().enumerate() {
            let (cloud, p, display) = match prepare(*region).await {
                Ok(ready) => ready,
                Err(code) => break 'passes code,
            };
            let attempt = apply::attempt(console, &cloud, &p, plan.options, &display).await;
            let here = cloud.region().to_owned();
            let next =
                if failing_over { next(&attempt, plan.options.keep_on_failure) } else { Next::Stop(attempt.code) };
            match next {
                Next::Stop(code) => {
                    let what = match code {
                        ExitCode::Success if attempt.created => "formed".to_owned(),
                        ExitCode::Success => "up to date (an update: no failover)".to_owned(),
                        ExitCode::Interrupted => "interrupted".to_owned(),
                        _ => format!("failed: {}", attempt.cause.as_deref().map_or("see above", first_sentence)),
                    };
                    met.push(Met { region: here, what });
                    break 'passes code;
                }
                Next::Kept => {
                    console.noteln(&format!(
                        "{:>12} stack {} in {here} met no capacity; it is kept (--keep-on-failure), so no other \
                         region is tried",
                        "Stopped", p.stack
                    ));
                    met.push(Met { region: here, what: "no capacity, kept (--keep-on-failure)".into() });
                    break 'passes ExitCode::Invalid;
                }
                Next::DeleteAndGoOn => {
                    let then = regions.get(i + 1).map_or_else(
                        || {
                            if plan.retry.is_some() { "the list again after a wait".to_owned() } else { String::new() }
                        },
                        |r| r.map_or_else(String::new, |r| r.code().to_owned()),
                    );
                    let then = if then.is_empty() { String::new() } else { format!(", then trying {then}") };
                    console.noteln(&format!(
                        "{:>12} {here} has no capacity for this cluster: deleting the attempt{then}",
                        "Capacity"
                    ));
                    let deleted = delete::delete(console, &cloud, &p.stack, true).await;
                    let cause = attempt.cause.as_deref().map_or("no capacity", first_sentence);
                    if deleted != ExitCode::Success {
                        met.push(Met { region: here, what: format!("no capacity ({cause}); the delete failed") });
                        break 'passes deleted;
                    }
                    met.push(Met { region: here, what: format!("no capacity ({cause}), deleted") });
                }
            }
        }
        let Some(wait) = plan.retry else {
            console.noteln(&format!(
                "error: no region of {} had capacity for this cluster; --retry-until-up keeps trying",
                region_list(&regions)
            ));
            break ExitCode::Invalid;
        };
        pass += 1;
        if !wait_or_interrupted(console, wait, &region_list(&regions), pass).await {
            console.noteln("Interrupted while waiting: nothing is left running (every attempt was deleted).");
            break ExitCode::Interrupted;
        }
    };
    if met.len() > 1 {
        let mut lines = String::new();
        for (n, m) in met.iter().enumerate() {
            let label = if n == 0 { "Summary" } else { "" };
            lines.push_str(&format!("{label:>12} {}. {}: {}\n", n + 1, m.region, m.what));
        }
        console.note(&lines);
    }
    code
}

/// `us-east-1, us-west-2`, or "the configured region".
fn region_list(regions: &[Option<Region>]) -> String {
    let named: Vec<&str> = regions.iter().flatten().map(|r| r.code()).collect();
    if named.is_empty() { "the configured region".to_owned() } else { named.join(", ") }
}

/// The first sentence of a reason (AWS's capacity messages go on for three).
fn first_sentence(reason: &str) -> &str {
    match reason.find(". ") {
        Some(end) => &reason[..=end],
        None => reason,
    }
}

/// Waits `wait` with the time waited on the live line; `false` on Ctrl-C.
async fn wait_or_interrupted<K: Console>(console: &K, wait: Duration, regions: &str, pass: u32) -> bool {
    let display = console.display();
    display.line(
        "Waiting",
        &format!("{} before trying {regions} again (pass {pass}; Ctrl-C stops)", clock(wait.as_millis() as i64)),
    );
    let started = now_ms();
    let deadline = tokio::time::Instant::now() + wait;
    let interrupted = console.interrupted();
    tokio::pin!(interrupted);
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            display.finish();
            return true;
        }
        display.live_since(started, &format!("waiting to try {regions} again (pass {pass})"));
        let tick = (deadline - now).min(Duration::from_secs(1));
        tokio::select! {
            _ = &mut interrupted => {
                display.finish();
                return false;
            }
            _ = tokio::time::sleep(tick) => {}
        }
    }
}

/// `--retry-interval`: `90s`, `5m`, `1h`, or seconds; 30 s to 1 h.
pub(crate) fn parse_interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{text:?} is not a duration: write e.g. 90s, 5m or 1h")),
    };
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration: write e.g. 90s, 5m or 1h"))?;
    let d = Duration::from_secs(n.saturating_mul(scale));
    if d < MIN_RETRY_INTERVAL || d > MAX_RETRY_INTERVAL {
        return Err(format!("{text} is out of range: the interval is 30s to 1h"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::deploy::fake::{FakeCloud, FakeConsole};
    use crate::deploy::port::Event;
    use crate::deploy::watch::tests::ev;

    const SHORT: &str = "We currently do not have sufficient p3.2xlarge capacity in the Availability Zone you \
        requested (us-east-1a). Our system will be working on provisioning additional capacity. You can currently \
        get p3.2xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1b. \
        (Service: AmazonEC2; Status Code: 500; Error Code: InsufficientInstanceCapacity; Request ID: 1)";

    #[test]
    fn the_classifier_knows_awss_words_for_no_capacity() {
        for yes in [
            SHORT,
            "InsufficientInstanceCapacity: Insufficient capacity.",
            "There is no Spot capacity available that matches your request. Launching EC2 instance failed.",
            "formation failed: 0 of 4 workers joined; the group's launch failures: We currently do not have \
             sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a).",
            "Could not launch On-Demand Instances. ReservationCapacityExceeded - The requested reservation does not \
             have sufficient compatible and available capacity for this request.",
            "Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill capacity due to your request \
             configuration.",
            "Insufficient capacity in the capacity block.",
        ] {
            assert!(capacity_shortage(yes), "{yes}");
        }
        for no in [
            "You have requested more vCPU capacity than your current vCPU limit of 32 allows (VcpuLimitExceeded)",
            "WaitCondition timed out. Received 0 conditions when expecting 1",
            "formation failed: 2 of 4 workers joined by the deadline; worker i-0abc: the agent package's sha256 \
             does not match",
            "Resource creation cancelled",
            "",
        ] {
            assert!(!capacity_shortage(no), "{no}");
        }
    }

    #[test]
    fn only_a_create_that_met_no_capacity_goes_on() {
        let failed = |created, cause: &str| Attempt { code: ExitCode::Invalid, created, cause: Some(cause.into()) };
        assert_eq!(next(&failed(true, SHORT), false), Next::DeleteAndGoOn);
        assert_eq!(next(&failed(true, SHORT), true), Next::Kept);
        assert_eq!(next(&failed(false, SHORT), false), Next::Stop(ExitCode::Invalid), "an update never fails over");
        assert_eq!(next(&failed(true, "WaitCondition timed out"), false), Next::Stop(ExitCode::Invalid));
        let formed = Attempt { code: ExitCode::Success, created: true, cause: None };
        assert_eq!(next(&formed, false), Next::Stop(ExitCode::Success));
        let interrupted = Attempt { code: ExitCode::Interrupted, created: true, cause: None };
        assert_eq!(next(&interrupted, false), Next::Stop(ExitCode::Interrupted));
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_interval("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_interval("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["5", "2h", "five", "5d", "", "-5m", "99999999999999999999h"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }

    const STACK: &str = "AWS::CloudFormation::Stack";

    /// A region where the create fails for `reason` and rolls back, and the
    /// delete that follows completes; or, without a reason, forms.
    fn region(name: &'static str, reason: Option<&str>) -> FakeCloud {
        let cloud = FakeCloud { region: Some(name), ..FakeCloud::default() };
        let script: Vec<Vec<Event>> = match reason {
            Some(reason) => vec![
                vec![ev(1, 1, "demo", STACK, "CREATE_IN_PROGRESS", Some("User Initiated"))],
                vec![
                    ev(4, 4, "demo", STACK, "ROLLBACK_COMPLETE", None),
                    ev(3, 3, "demo", STACK, "ROLLBACK_IN_PROGRESS", Some("The following resource(s) failed")),
                    ev(2, 2, "MasterInstance", "AWS::EC2::Instance", "CREATE_FAILED", Some(reason)),
                ],
                vec![],
                vec![ev(5, 5, "demo", STACK, "DELETE_COMPLETE", None)],
            ],
            None => vec![
                vec![ev(1, 1, "demo", STACK, "CREATE_IN_PROGRESS", Some("User Initiated"))],
                vec![ev(2, 9, "demo", STACK, "CREATE_COMPLETE", None)],
            ],
        };
        cloud.event_script.lock().unwrap().extend(script);
        cloud
    }

    fn prepared() -> Prepared {
        Prepared::new("demo", serde_json::json!({"Resources": {}}), BTreeMap::new())
    }

    async fn run(
        console: &FakeConsole,
        regions: &[Region],
        retry: Option<Duration>,
        keep: bool,
        clouds: Vec<FakeCloud>,
    ) -> (ExitCode, Vec<Option<Region>>) {
        let clouds = Mutex::new(clouds.into_iter());
        let asked = Mutex::new(Vec::new());
        let options = Options { blueprint: "bp.yaml", keep_on_failure: keep, yes: true, ..Options::default() };
        let plan = Plan { regions, retry, options };
        let code = deploy(console, plan, |r| {
            asked.lock().unwrap().push(r);
            let cloud = clouds.lock().unwrap().next();
            let display = console.display();
            async move { cloud.map(|c| (c, prepared(), display)).ok_or(ExitCode::Error) }
        })
        .await;
        (code, asked.into_inner().unwrap())
    }

    /// No capacity in the first region: its attempt is deleted, the second
    /// forms, and the summary says what each met.
    #[tokio::test(start_paused = true)]
    async fn a_create_without_capacity_is_deleted_and_the_next_region_forms() {
        let console = FakeConsole::default();
        let first = region("us-east-1", Some(SHORT));
        let (code, asked) =
            run(&console, &[Region::UsEast1, Region::UsWest2], None, false, vec![first, region("us-west-2", None)])
                .await;
        assert_eq!(code, ExitCode::Success);
        assert_eq!(asked, [Some(Region::UsEast1), Some(Region::UsWest2)], "each region prepared on its own");
        let err = console.stderr();
        assert!(
            err.contains(
                "    Capacity us-east-1 has no capacity for this cluster: deleting the attempt, then trying us-west-2\n"
            ),
            "{err}"
        );
        assert!(err.contains("stack demo deleted"), "{err}");
        assert!(
            err.contains(
                "     Summary 1. us-east-1: no capacity (We currently do not have sufficient p3.2xlarge capacity in the \
                 Availability Zone you requested (us-east-1a).), deleted\n             2. us-west-2: formed\n"
            ),
            "{err}"
        );
    }

    /// --keep-on-failure: the attempt stays and nothing else is tried.
    #[tokio::test(start_paused = true)]
    async fn a_kept_attempt_stops_there() {
        let console = FakeConsole::default();
        let first = region("us-east-1", Some(SHORT));
        let (code, asked) =
            run(&console, &[Region::UsEast1, Region::UsWest2], None, true, vec![first, region("us-west-2", None)])
                .await;
        assert_eq!(code, ExitCode::Invalid);
        assert_eq!(asked, [Some(Region::UsEast1)]);
        let err = console.stderr();
        assert!(err.contains("it is kept (--keep-on-failure), so no other region is tried"), "{err}");
        assert!(!err.contains("deleted"), "{err}");
    }

    /// Another failure is not a reason to go elsewhere.
    #[tokio::test(start_paused = true)]
    async fn another_failure_stops_at_once() {
        let console = FakeConsole::default();
        let first = region("us-east-1", Some("WaitCondition timed out. Received 0 conditions when expecting 1"));
        let (code, asked) =
            run(&console, &[Region::UsEast1, Region::UsWest2], None, false, vec![first, region("us-west-2", None)])
                .await;
        assert_eq!(code, ExitCode::Invalid);
        assert_eq!(asked, [Some(Region::UsEast1)]);
        assert!(!console.stderr().contains("Capacity"), "{}", console.stderr());
    }

    /// No region had capacity: exit 1 without --retry-until-up; with it, the
    /// list again after the wait, said on the way. One region without it
    /// is a deploy as it always was: the failed create stays.
    #[tokio::test(start_paused = true)]
    async fn every_region_short_ends_or_waits_and_tries_again() {
        let console = FakeConsole::default();
        let clouds = vec![region("us-east-1", Some(SHORT)), region("us-west-2", Some(SHORT))];
        let (code, asked) = run(&console, &[Region::UsEast1, Region::UsWest2], None, false, clouds).await;
        assert_eq!(code, ExitCode::Invalid);
        assert_eq!(asked.len(), 2);
        let err = console.stderr();
        assert!(err.contains("error: no region of us-east-1, us-west-2 had capacity for this cluster"), "{err}");
        assert_eq!(err.matches("deleted in").count(), 2, "{err}");

        let console = FakeConsole::default();
        let (code, _) = run(&console, &[Region::UsEast1], None, false, vec![region("us-east-1", Some(SHORT))]).await;
        assert_eq!(code, ExitCode::Invalid);
        let err = console.stderr();
        assert!(!err.contains(" Capacity ") && !err.contains("deleted in") && !err.contains("Summary"), "{err}");

        let console = FakeConsole::default();
        let clouds = vec![region("us-east-1", Some(SHORT)), region("us-east-1", None)];
        let started = tokio::time::Instant::now();
        let (code, asked) = run(&console, &[Region::UsEast1], Some(Duration::from_secs(300)), false, clouds).await;
        assert_eq!(code, ExitCode::Success);
        assert_eq!(asked, [Some(Region::UsEast1), Some(Region::UsEast1)]);
        assert!(started.elapsed() >= Duration::from_secs(300));
        let err = console.stderr();
        assert!(err.contains("     Waiting 5m 00s before trying us-east-1 again (pass 2; Ctrl-C stops)"), "{err}");
        assert!(err.contains("2. us-east-1: formed"), "{err}");
    }

    /// Ctrl-C while waiting ends it (exit 130), nothing left behind.
    #[tokio::test(start_paused = true)]
    async fn ctrl_c_while_waiting_stops() {
        let console = FakeConsole::default();
        let clouds = vec![region("us-east-1", Some(SHORT)), region("us-east-1", None)];
        let plan_regions = [Region::UsEast1];
        let interrupt = async {
            tokio::time::sleep(Duration::from_secs(200)).await;
            console.interrupt();
        };
        let ((code, asked), ()) =
            tokio::join!(run(&console, &plan_regions, Some(Duration::from_secs(300)), false, clouds), interrupt);
        assert_eq!(code, ExitCode::Interrupted);
        assert_eq!(asked.len(), 1);
        assert!(console.stderr().contains("Interrupted while waiting"), "{}", console.stderr());
    }
}
