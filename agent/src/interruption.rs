//! The interruption watcher: polls the instance metadata service (IMDSv2)
//! for a Spot instance action and a rebalance recommendation, keeps the
//! time of a worker's Capacity Block ([`seen`]), and says when there is a
//! new notice to act on (the runner sends `notice` to the master and writes
//! the notice file, [`crate::files::notice`]).
//!
//! Paths (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html>,
//! <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html>):
//! [`INSTANCE_ACTION_PATH`] and [`REBALANCE_PATH`], each 404 until EC2 has
//! something to say. AWS suggests polling every 5 seconds; a Spot
//! instance action comes two minutes before the action, so a 5-second poll
//! leaves the cluster most of that time. Polling costs two local HTTP
//! requests (one once there is an instance action) and runs beside the
//! node's loop, so it never holds up registration or formation. An IMDS
//! that fails or answers nonsense is logged, once while it lasts, and
//! polled again: it is never fatal.

use std::time::Duration;

use node_contract::interruption::{self, CapacityBlock, Interruption};

use crate::identity::{self, IdentityError};

/// How often IMDS is asked.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// The Spot instance action (404 when there is none).
pub(crate) const INSTANCE_ACTION_PATH: &str = "/latest/meta-data/spot/instance-action";

/// The rebalance recommendation (404 when there is none).
pub(crate) const REBALANCE_PATH: &str = "/latest/meta-data/events/recommendations/rebalance";

/// Why a poll found out nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PollError {
    /// IMDS did not answer, or answered an error other than 404.
    #[error(transparent)]
    Imds(#[from] IdentityError),
    /// IMDS answered something that is not a notice.
    #[error("IMDS answered {path} with something that is not a notice ({source}): {body:?}")]
    Notice {
        /// The path asked for.
        path: &'static str,
        /// What was wrong.
        source: interruption::NoticeError,
        /// The body, cut to 200 characters.
        body: String,
    },
}

/// Asks IMDS once: the instance action when there is one (it outranks a
/// rebalance recommendation), else the rebalance recommendation, else `None`.
pub(crate) async fn poll(
    imds: &aws_config::imds::Client,
    instance_id: &str,
) -> Result<Option<Interruption>, PollError> {
    if let Some(body) = get_optional(imds, INSTANCE_ACTION_PATH).await? {
        return interruption::from_instance_action(instance_id, &body).map(Some).map_err(|source| PollError::Notice {
            path: INSTANCE_ACTION_PATH,
            source,
            body: cut(&body),
        });
    }
    if let Some(body) = get_optional(imds, REBALANCE_PATH).await? {
        return interruption::from_rebalance(instance_id, &body).map(Some).map_err(|source| PollError::Notice {
            path: REBALANCE_PATH,
            source,
            body: cut(&body),
        });
    }
    Ok(None)
}

/// A path's body, or `None` for 404.
async fn get_optional(imds: &aws_config::imds::Client, path: &'static str) -> Result<Option<String>, IdentityError> {
    match identity::get(imds, path).await {
        Ok(body) => Ok(Some(body)),
        Err(IdentityError::Status { status: 404, .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn cut(body: &str) -> String {
    body.chars().take(200).collect()
}

/// The notice this round: the Capacity Block's end once it is due by
/// `now_ms` (the agent's clock: [`CapacityBlock::notice_due`]), else what
/// IMDS said. The block's notice outranks IMDS's: it comes every round
/// once due, so a rebalance recommendation the node was also given cannot
/// hide it.
pub(crate) fn seen(
    block: Option<&CapacityBlock>,
    instance_id: &str,
    now_ms: u64,
    imds: Option<Interruption>,
) -> Option<Interruption> {
    block.and_then(|b| b.notice_due(instance_id, now_ms)).or(imds)
}

/// What the watcher has acted on. Pure: IMDS's answers go in, the notice to
/// act on comes out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Watcher {
    current: Option<Interruption>,
}

impl Watcher {
    /// A watcher that already acted on `current` (a notice file of this
    /// boot, after an agent restart).
    pub(crate) fn new(current: Option<Interruption>) -> Watcher {
        Watcher { current }
    }

    /// The notice acted on, if any.
    pub(crate) fn current(&self) -> Option<&Interruption> {
        self.current.as_ref()
    }

    /// This round's notice ([`seen`]). Returns the notice to act on when it
    /// is news: the first notice; one with a deadline (an instance action,
    /// the Capacity Block's end) after a rebalance recommendation; a notice
    /// of the same kind that changed (EC2 may update an instance action's
    /// time). The same notice again is no news, nor is a notice of another
    /// kind after one with a deadline (the first deadline stands), nor a
    /// notice that disappears (the node has left the cluster; it does not
    /// come back in this boot).
    pub(crate) fn observe(&mut self, seen: Option<Interruption>) -> Option<Interruption> {
        let seen = seen?;
        let news = match &self.current {
            None => true,
            Some(current) if *current == seen => false,
            Some(current) => current.deadline_unix.is_none() || current.notice == seen.notice,
        };
        if !news {
            return None;
        }
        self.current = Some(seen.clone());
        Some(seen)
    }
}

/// Logs poll failures without flooding the log: the first failure of a run
/// of them is a warning, the rest debug lines, and the recovery an info line.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    failing: u32,
}

impl FailureLog {
    /// The result of one poll.
    pub(crate) fn record<T>(&mut self, result: &Result<T, PollError>) {
        match result {
            Ok(_) if self.failing > 0 => {
                tracing::info!(failed_polls = self.failing, "IMDS answers the interruption watcher again");
                self.failing = 0;
            }
            Ok(_) => {}
            Err(e) if self.failing == 0 => {
                self.failing = 1;
                tracing::warn!(
                    "cannot read interruption notices from IMDS (polling again every {POLL_INTERVAL:?}): {e}"
                );
            }
            Err(e) => {
                self.failing += 1;
                tracing::debug!(failed_polls = self.failing, "cannot read interruption notices from IMDS: {e}");
            }
        }
    }

    /// Polls failed in a row (read by the tests; the log lines say it).
    #[cfg(test)]
    pub(crate) fn failing(&self) -> u32 {
        self.failing
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::aws::test_server::{Reply, Request, TestServer};

    const TOKEN: &str = "token-1";
    const TTL: &str = "x-aws-ec2-metadata-token-ttl-seconds";
    const ACTION: &str = r#"{"action": "terminate", "time": "2026-11-25T20:00:00Z"}"#;
    const REBALANCE: &str = r#"{"noticeTime": "2026-11-25T19:50:00Z"}"#;

    /// IMDSv2 serving whatever `answers` holds for the two notice paths.
    fn imds(answers: Arc<Mutex<(Reply, Reply)>>) -> TestServer {
        TestServer::start(move |r: &Request| {
            if r.method == "PUT" {
                return Reply::new(200, TOKEN).header(TTL, r.header(TTL).unwrap_or("60"));
            }
            if r.header("x-aws-ec2-metadata-token") != Some(TOKEN) {
                return Reply::new(401, "");
            }
            let answers = answers.lock().unwrap();
            match r.path.as_str() {
                INSTANCE_ACTION_PATH => answers.0.clone(),
                REBALANCE_PATH => answers.1.clone(),
                _ => Reply::new(404, "Not Found"),
            }
        })
    }

    fn rebalance() -> Interruption {
        interruption::from_rebalance("i-1", REBALANCE).unwrap()
    }

    fn action(time: &str) -> Interruption {
        interruption::from_instance_action("i-1", &format!(r#"{{"action":"terminate","time":"{time}"}}"#)).unwrap()
    }

    #[tokio::test]
    async fn polls_none_then_a_rebalance_then_an_action_and_errors_are_errors() {
        let not_found = || Reply::new(404, "Not Found");
        let answers = Arc::new(Mutex::new((not_found(), not_found())));
        let server = imds(answers.clone());
        let client = identity::imds_client_at(&server.url()).unwrap();
        assert_eq!(poll(&client, "i-1").await.unwrap(), None);
        answers.lock().unwrap().1 = Reply::new(200, REBALANCE);
        assert_eq!(poll(&client, "i-1").await.unwrap(), Some(rebalance()));
        answers.lock().unwrap().0 = Reply::new(200, ACTION);
        let got = poll(&client, "i-1").await.unwrap().unwrap();
        assert_eq!(got.notice, interruption::NoticeKind::InstanceAction);
        assert_eq!(got.deadline_unix, Some(1_795_636_800));
        answers.lock().unwrap().0 = Reply::new(200, "<html>maintenance</html>");
        let e = poll(&client, "i-1").await.unwrap_err();
        assert!(e.to_string().contains("not a notice"), "{e}");
        assert!(e.to_string().contains("maintenance"), "{e}");
        answers.lock().unwrap().0 = Reply::new(403, "");
        let e = poll(&client, "i-1").await.unwrap_err();
        assert!(matches!(e, PollError::Imds(IdentityError::Status { status: 403, .. })), "{e:?}");
    }

    #[test]
    fn only_news_is_acted_on() {
        let mut w = Watcher::default();
        assert_eq!(w.observe(None), None);
        assert_eq!(w.observe(Some(rebalance())), Some(rebalance()));
        assert_eq!(w.observe(Some(rebalance())), None);
        assert_eq!(w.observe(None), None);
        let first = action("2026-11-25T20:00:00Z");
        assert_eq!(w.observe(Some(first.clone())), Some(first.clone()));
        assert_eq!(w.observe(Some(first.clone())), None);
        // A rebalance recommendation after an instance action is no news.
        assert_eq!(w.observe(Some(rebalance())), None);
        assert_eq!(w.current(), Some(&first));
        // EC2 moved the time: news.
        let moved = action("2026-11-25T20:01:00Z");
        assert_eq!(w.observe(Some(moved.clone())), Some(moved));
        // A watcher restarted with this boot's notice does not act twice.
        let mut restarted = Watcher::new(Some(first.clone()));
        assert_eq!(restarted.observe(Some(first)), None);
    }

    /// A worker whose block ends at 11:30 polls every 5 s from 10:44:50 by a
    /// fixed clock: no notice before 10:45, the block's notice at the first
    /// poll from 10:45 (rebalance recommendation or not), and nothing more
    /// after it; a node that starts after 10:45 acts at its first poll.
    #[test]
    fn a_capacity_block_end_is_acted_on_once_at_its_time() {
        let end = interruption::parse_utc("2026-12-17T11:30:00Z").unwrap();
        let block = CapacityBlock { id: "cr-0123456789abcdef0".into(), end_unix: end };
        let leave_ms = interruption::parse_utc("2026-12-17T10:45:00Z").unwrap() * 1000;
        let mut w = Watcher::default();
        let mut acted = Vec::new();
        for tick in 0..10u64 {
            let clock: node_contract::clock::Clock =
                || interruption::parse_utc("2026-12-17T10:44:50Z").unwrap_or_default() * 1000 + 3;
            let now = clock() + tick * 5_000;
            let imds = (tick >= 1).then(rebalance);
            if let Some(n) = w.observe(seen(Some(&block), "i-1", now, imds)) {
                acted.push((now, n));
            }
        }
        let notice = interruption::capacity_block_end("i-1", &block);
        assert_eq!(acted, [(leave_ms - 10_000 + 5_003, rebalance()), (leave_ms + 3, notice.clone())]);
        assert_eq!(w.current(), Some(&notice));
        // Started after the time: at its first poll, and once.
        let late: node_contract::clock::Clock = || 1_797_506_000_000;
        let mut w = Watcher::default();
        assert_eq!(w.observe(seen(Some(&block), "i-1", late(), None)), Some(notice.clone()));
        assert_eq!(w.observe(seen(Some(&block), "i-1", late() + 5_000, Some(rebalance()))), None);
        // Restarted with this boot's notice file: nothing new.
        let mut restarted = Watcher::new(Some(notice.clone()));
        assert_eq!(restarted.observe(seen(Some(&block), "i-1", late(), None)), None);
        // Without a block, IMDS alone.
        assert_eq!(seen(None, "i-1", late(), None), None);
        // An instance action's deadline stands against a later block notice.
        let mut w = Watcher::new(Some(action("2026-12-17T10:46:00Z")));
        assert_eq!(w.observe(seen(Some(&block), "i-1", late(), None)), None);
    }

    #[test]
    fn failures_are_counted_and_reset() {
        let mut log = FailureLog::default();
        let failed: Result<(), PollError> = Err(PollError::Notice {
            path: REBALANCE_PATH,
            source: interruption::from_rebalance("i", "{}").unwrap_err(),
            body: "{}".into(),
        });
        log.record(&failed);
        log.record(&failed);
        assert_eq!(log.failing(), 2);
        log.record(&Ok::<(), PollError>(()));
        assert_eq!(log.failing(), 0);
    }
}
