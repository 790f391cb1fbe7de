//! Interruption notices: EC2 says an instance is about to go (a Spot
//! `instance-action`, two minutes ahead) or may go soon (a rebalance
//! recommendation), and the cluster lets it go cleanly instead of losing a
//! training step when it vanishes.
//!
//! The agent on the instance reads them from the instance metadata service
//! (IMDSv2), then
//! - sends a `notice` message ([`crate::message::Message::Notice`], carrying
//!   an [`Interruption`]) to the master, which publishes a generation
//!   without the node at once, as for a removal it decided itself;
//! - writes [`NOTICE_PATH`] ([`NoticeFile`]) on the node, which `trainer`
//!   reads to stop that host's ranks before the deadline.
//!
//! What IMDS serves
//! (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html>,
//! <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html>):
//! `latest/meta-data/spot/instance-action` is 404 until there is an action,
//! then `{"action": "terminate"|"stop"|"hibernate", "time": "<RFC 3339 UTC>"}`
//! with the time of the action; `latest/meta-data/events/recommendations/rebalance`
//! is 404 until there is a recommendation, then `{"noticeTime": "<RFC 3339 UTC>"}`.
//! A rebalance recommendation has no deadline.
//!
//! A worker in an EC2 Capacity Block for ML ([`CapacityBlock`], node config
//! `capacity_block`) needs no IMDS to know its end: the block is a time
//! window, and EC2 reclaims its instances [`RECLAIM_BEFORE_END_SECONDS`]
//! before its end
//! (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html>).
//! The template scales the worker group to 0 forty minutes before the end
//! (synth's `CapacityBlock::SCALE_IN_BEFORE_END_SECONDS`); each worker gives
//! itself a notice ([`NoticeKind::CapacityBlockEnd`], [`capacity_block_end`])
//! [`LEAVE_BEFORE_END_SECONDS`] before the end, five minutes before that
//! scale-in, with the reclaim as its deadline, and leaves as on a Spot
//! instance action. A `notice` of that kind is written as message version
//! 10 ([`crate::message::CAPACITY_BLOCK_NOTICE_VERSION`]): an agent of the
//! previous release would not know the kind, so it refuses the message by
//! its version instead.

use serde::{Deserialize, Serialize};

/// The notice file, as on a node: present only while the node has a notice.
pub const NOTICE_PATH: &str = "/var/lib/deeplearning/interruption.json";

/// The notice file format this build writes and reads.
pub const NOTICE_FILE_VERSION: u32 = 1;

/// Every rank `trainer launch` starts has this variable: the notice file's
/// path. A process's environment is fixed when it starts, so a rank that
/// gets SIGTERM because of a notice that came later reads the deadline
/// from this file (`interruption.deadline_unix`, `interruption.time`).
pub const FILE_VAR: &str = "DEEPLEARNING_INTERRUPTION_FILE";

/// Set for a rank started while its host already had a notice: the
/// deadline, RFC 3339 UTC (an instance action's time; absent for a
/// rebalance recommendation, which has none).
pub const DEADLINE_VAR: &str = "DEEPLEARNING_INTERRUPTION_DEADLINE";

/// Beside [`DEADLINE_VAR`]: whole seconds left until the deadline when the
/// rank started (0 when it has passed).
pub const SECONDS_LEFT_VAR: &str = "DEEPLEARNING_INTERRUPTION_SECONDS_LEFT";

/// Beside [`FILE_VAR`] when a notice exists at the start:
/// `spot-instance-action`, `rebalance-recommendation` or `capacity-block-end`.
pub const KIND_VAR: &str = "DEEPLEARNING_INTERRUPTION_KIND";

/// Which notice EC2 gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// `spot/instance-action`: the instance is stopped, hibernated or
    /// terminated at the notice's time.
    InstanceAction,
    /// `events/recommendations/rebalance`: the instance is at elevated risk
    /// of interruption; no deadline.
    RebalanceRecommendation,
    /// The node's Capacity Block ends: the agent raises it itself
    /// [`LEAVE_BEFORE_END_SECONDS`] before the block's end; the deadline is
    /// when EC2 reclaims the block's instances (message version 10).
    CapacityBlockEnd,
    /// The agent's GPU watch found a fatal fault on one of the node's GPUs
    /// (a fatal XID, new uncorrectable ECC errors, a GPU gone): the node
    /// leaves at once; no deadline (message version 12,
    /// [`crate::gpu`]). The fault is in [`Interruption::detail`].
    GpuFault,
}

impl NoticeKind {
    /// How the host log and the logs name it.
    pub fn describe(self) -> &'static str {
        match self {
            NoticeKind::InstanceAction => "spot-instance-action",
            NoticeKind::RebalanceRecommendation => "rebalance-recommendation",
            NoticeKind::CapacityBlockEnd => "capacity-block-end",
            NoticeKind::GpuFault => "gpu-fault",
        }
    }
}

/// A Spot instance action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpotAction {
    /// The instance is terminated.
    Terminate,
    /// The instance is stopped (it may be started again later, a new boot).
    Stop,
    /// The instance is hibernated.
    Hibernate,
}

impl SpotAction {
    /// `terminate`, `stop` or `hibernate`.
    pub fn as_str(self) -> &'static str {
        match self {
            SpotAction::Terminate => "terminate",
            SpotAction::Stop => "stop",
            SpotAction::Hibernate => "hibernate",
        }
    }
}

/// A notice, as a node reports it to the master (the `notice` message).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interruption {
    /// `i-...`
    pub instance_id: String,
    /// Which notice.
    pub notice: NoticeKind,
    /// The Spot action (instance-action only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<SpotAction>,
    /// The time IMDS gave, RFC 3339 as it gave it: when the action happens
    /// (instance-action) or when the recommendation was made (rebalance);
    /// for a Capacity Block's end, when EC2 reclaims its instances
    /// (`YYYY-MM-DDThh:mm:ssZ`).
    pub time: String,
    /// When the instance goes, in unix seconds: the instance-action's time,
    /// or the block's reclaim; `None` for a rebalance recommendation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_unix: Option<u64>,
    /// What happened, in words, for a notice the agent raised itself: the
    /// GPU fault ("XID 79 on GPU 3: GPU has fallen off the bus").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Interruption {
    /// One line for logs and the host log:
    /// `spot-instance-action terminate at 2026-11-25T20:00:00Z` or
    /// `rebalance-recommendation at 2026-11-25T19:58:00Z`.
    pub fn describe(&self) -> String {
        let line = match self.action {
            Some(a) => format!("{} {} at {}", self.notice.describe(), a.as_str(), self.time),
            None => format!("{} at {}", self.notice.describe(), self.time),
        };
        match &self.detail {
            Some(d) => format!("{line}: {d}"),
            None => line,
        }
    }
}

/// [`NOTICE_PATH`]: the notice this node was given, for `trainer`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoticeFile {
    /// Always [`NOTICE_FILE_VERSION`] when written by this build.
    pub version: u32,
    /// The notice.
    pub interruption: Interruption,
    /// The kernel boot id it was given in: a file left from an earlier boot
    /// (a stopped Spot instance started again) is stale, not a notice.
    pub boot_id: String,
    /// When the agent saw it, unix milliseconds.
    pub noticed_unix_ms: u64,
}

/// The notice file or an IMDS notice could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NoticeError {
    /// Not JSON, or not the expected shape.
    #[error("not a valid interruption notice: {0}")]
    Parse(#[from] serde_json::Error),
    /// A version this build does not know.
    #[error(
        "interruption notice file version {} is not supported (this build reads version {NOTICE_FILE_VERSION}); \
         update the agent and trainer together",
        found.map_or_else(|| "(missing)".to_owned(), |v| v.to_string())
    )]
    Version {
        /// The version in the file, if any.
        found: Option<u64>,
    },
    /// A time that is not RFC 3339 UTC.
    #[error("the notice's time {0:?} is not an RFC 3339 UTC time (YYYY-MM-DDThh:mm:ssZ)")]
    Time(String),
}

impl NoticeFile {
    /// Parses the file's text, checking its version first.
    pub fn parse(text: &str) -> Result<NoticeFile, NoticeError> {
        #[derive(Deserialize)]
        struct Probe {
            version: Option<u64>,
        }
        let probe: Probe = serde_json::from_str(text)?;
        if probe.version != Some(u64::from(NOTICE_FILE_VERSION)) {
            return Err(NoticeError::Version { found: probe.version });
        }
        Ok(serde_json::from_str(text)?)
    }

    /// Whole seconds from `now_unix` to the deadline (0 once it passed);
    /// `None` without a deadline.
    pub fn seconds_left(&self, now_unix: u64) -> Option<u64> {
        self.interruption.deadline_unix.map(|d| d.saturating_sub(now_unix))
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        // Plain structs of strings and numbers always serialize.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

/// The body of `latest/meta-data/spot/instance-action` as this node's notice.
pub fn from_instance_action(instance_id: &str, body: &str) -> Result<Interruption, NoticeError> {
    #[derive(Deserialize)]
    struct InstanceAction {
        action: SpotAction,
        time: String,
    }
    let a: InstanceAction = serde_json::from_str(body)?;
    let deadline = parse_utc(&a.time).ok_or_else(|| NoticeError::Time(a.time.clone()))?;
    Ok(Interruption {
        detail: None,
        instance_id: instance_id.to_owned(),
        notice: NoticeKind::InstanceAction,
        action: Some(a.action),
        time: a.time,
        deadline_unix: Some(deadline),
    })
}

/// The body of `latest/meta-data/events/recommendations/rebalance` as this node's notice.
pub fn from_rebalance(instance_id: &str, body: &str) -> Result<Interruption, NoticeError> {
    #[derive(Deserialize)]
    struct Rebalance {
        #[serde(rename = "noticeTime")]
        notice_time: String,
    }
    let r: Rebalance = serde_json::from_str(body)?;
    if parse_utc(&r.notice_time).is_none() {
        return Err(NoticeError::Time(r.notice_time));
    }
    Ok(Interruption {
        detail: None,
        instance_id: instance_id.to_owned(),
        notice: NoticeKind::RebalanceRecommendation,
        action: None,
        time: r.notice_time,
        deadline_unix: None,
    })
}

/// EC2 starts terminating a Capacity Block's instances this long before the
/// block's end
/// (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html>;
/// <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html>:
/// "Forty minutes before your Capacity Block reservation ends ... any
/// instances running in the reservation will begin to terminate in 10 minutes"):
/// the deadline of a [`NoticeKind::CapacityBlockEnd`] notice.
pub const RECLAIM_BEFORE_END_SECONDS: u64 = 30 * 60;

/// A worker in a Capacity Block gives itself its notice this long before
/// the block's end: five minutes before the template scales the worker
/// group to 0 (synth's `CapacityBlock::SCALE_IN_BEFORE_END_SECONDS`, 40
/// minutes), so the cluster lets it go before Auto Scaling terminates it,
/// and 15 minutes before EC2 would.
pub const LEAVE_BEFORE_END_SECONDS: u64 = 45 * 60;

/// The EC2 Capacity Block for ML a worker runs in (node config
/// `capacity_block`, version 5; workers only: the master is an On-Demand
/// instance outside the block).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityBlock {
    /// `cr-...`, the block's Capacity Reservation id (for the logs).
    pub id: String,
    /// The block's end, unix seconds.
    pub end_unix: u64,
}

impl CapacityBlock {
    /// When EC2 reclaims the block's instances, unix seconds: the notice's deadline.
    pub fn reclaim_unix(&self) -> u64 {
        self.end_unix.saturating_sub(RECLAIM_BEFORE_END_SECONDS)
    }

    /// When the worker leaves the cluster (gives itself the notice), unix seconds.
    pub fn leave_unix(&self) -> u64 {
        self.end_unix.saturating_sub(LEAVE_BEFORE_END_SECONDS)
    }

    /// The line the agent logs when it starts:
    /// `capacity block cr-... ends at <end>; leaving at <leave>, ...`.
    pub fn schedule_line(&self) -> String {
        format!(
            "capacity block {} ends at {}; leaving at {}, 5 minutes before the worker group scales to 0 \
             (EC2 reclaims the block's instances at {})",
            self.id,
            format_utc(self.end_unix),
            format_utc(self.leave_unix()),
            format_utc(self.reclaim_unix())
        )
    }

    /// This node's notice for the block's end once `now_ms` (unix
    /// milliseconds, from the agent's clock) is at or past
    /// [`CapacityBlock::leave_unix`]; `None` before. A node that starts
    /// later gets it at once.
    pub fn notice_due(&self, instance_id: &str, now_ms: u64) -> Option<Interruption> {
        (now_ms / 1000 >= self.leave_unix()).then(|| capacity_block_end(instance_id, self))
    }
}

/// The notice a worker gives itself for its Capacity Block's end: no Spot
/// action; the deadline and time are the block's reclaim.
pub fn capacity_block_end(instance_id: &str, block: &CapacityBlock) -> Interruption {
    Interruption {
        detail: None,
        instance_id: instance_id.to_owned(),
        notice: NoticeKind::CapacityBlockEnd,
        action: None,
        time: format_utc(block.reclaim_unix()),
        deadline_unix: Some(block.reclaim_unix()),
    }
}

/// Unix seconds of an RFC 3339 UTC time as IMDS writes them,
/// `YYYY-MM-DDThh:mm:ssZ`, optionally with fractional seconds (dropped) or
/// a `+00:00` offset. Anything else (another offset, a time before 1970,
/// not RFC 3339) is `None`.
pub fn parse_utc(text: &str) -> Option<u64> {
    let time = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    if !time.offset().is_utc() {
        return None;
    }
    u64::try_from(time.unix_timestamp()).ok()
}

/// `YYYY-MM-DDThh:mm:ssZ` for unix seconds (up to the year 9999).
pub fn format_utc(unix: u64) -> String {
    let time = i64::try_from(unix)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::PrimitiveDateTime::MAX.assume_utc());
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        time.year(),
        u8::from(time.month()),
        time.day(),
        time.hour(),
        time.minute(),
        time.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_round_trip_and_bad_ones_are_refused() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_utc("2026-11-25T20:00:00Z"), Some(1_795_636_800));
        assert_eq!(parse_utc("2026-11-25T20:00:00.123Z"), Some(1_795_636_800));
        assert_eq!(parse_utc("2026-11-25T20:00:00+00:00"), Some(1_795_636_800));
        // RFC 3339 lets a space stand for the T.
        assert_eq!(parse_utc("2026-11-25 20:00:00Z"), Some(1_795_636_800));
        assert_eq!(parse_utc("2024-02-29T12:00:00Z"), Some(1_709_208_000));
        for t in [0, 1_709_208_000, 1_795_636_800, 4_102_444_800, 951_782_400] {
            assert_eq!(parse_utc(&format_utc(t)), Some(t), "{}", format_utc(t));
        }
        assert_eq!(format_utc(1_795_636_800), "2026-11-25T20:00:00Z");
        assert_eq!(format_utc(u64::MAX), "9999-12-31T23:59:59Z");
        for bad in [
            "",
            "2026-11-25T20:00:00",
            "2026-11-25T20:00:00+01:00",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-11-25T24:00:00Z",
            "2026-11-25T20:00Z",
            "26-11-25T20:00:00Z",
            "1969-12-31T23:59:59Z",
            "2026-11-25T20:00:00.Z",
            "2026-11-25T20:00:00.x1Z",
            "+026-11-25T20:00:00Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn imds_bodies_become_notices() {
        let a = from_instance_action("i-1", r#"{"action": "terminate", "time": "2026-11-25T20:00:00Z"}"#).unwrap();
        assert_eq!(a.notice, NoticeKind::InstanceAction);
        assert_eq!(a.action, Some(SpotAction::Terminate));
        assert_eq!(a.deadline_unix, Some(1_795_636_800));
        assert_eq!(a.describe(), "spot-instance-action terminate at 2026-11-25T20:00:00Z");
        let s = from_instance_action("i-1", r#"{"action": "hibernate", "time": "2026-11-25T20:00:00Z"}"#).unwrap();
        assert_eq!(s.action, Some(SpotAction::Hibernate));
        let r = from_rebalance("i-1", r#"{"noticeTime": "2026-11-25T19:58:00Z"}"#).unwrap();
        assert_eq!(r.notice, NoticeKind::RebalanceRecommendation);
        assert_eq!((r.action, r.deadline_unix), (None, None));
        assert_eq!(r.describe(), "rebalance-recommendation at 2026-11-25T19:58:00Z");
        for (body, needle) in [
            (r#"{"action": "explode", "time": "2026-11-25T20:00:00Z"}"#, "unknown variant"),
            (r#"{"action": "terminate", "time": "soon"}"#, "not an RFC 3339"),
            (r#"{"action": "terminate"}"#, "missing field"),
            ("<html>", "not a valid"),
        ] {
            let e = from_instance_action("i-1", body).unwrap_err();
            assert!(e.to_string().contains(needle), "{needle:?} not in {e}");
        }
        assert!(from_rebalance("i-1", r#"{"noticeTime": "yesterday"}"#).is_err());
        assert!(from_rebalance("i-1", "{}").is_err());
    }

    /// A block ending 2026-12-17T11:30:00Z: the worker leaves at 10:45 (five
    /// minutes before the group's scale-in at 10:50), with the reclaim at
    /// 11:00 as its deadline; before 10:45 there is no notice, from then on
    /// (a node that boots later) there is one at once.
    #[test]
    fn a_capacity_block_gives_its_notice_45_minutes_before_its_end() {
        let end = parse_utc("2026-12-17T11:30:00Z").unwrap();
        let block = CapacityBlock { id: "cr-0123456789abcdef0".into(), end_unix: end };
        assert_eq!(format_utc(block.leave_unix()), "2026-12-17T10:45:00Z");
        assert_eq!(format_utc(block.reclaim_unix()), "2026-12-17T11:00:00Z");
        let at = |clock: crate::clock::Clock| block.notice_due("i-1", clock());
        assert_eq!(at(|| 0), None);
        assert_eq!(at(|| (1_797_504_300 - 1) * 1000 + 999), None);
        let notice = at(|| 1_797_504_300_000).unwrap();
        assert_eq!(format_utc(1_797_504_300), "2026-12-17T10:45:00Z");
        assert_eq!(notice.notice, NoticeKind::CapacityBlockEnd);
        assert_eq!((notice.action, notice.deadline_unix), (None, Some(block.reclaim_unix())));
        assert_eq!(notice.describe(), "capacity-block-end at 2026-12-17T11:00:00Z");
        assert_eq!(at(|| u64::MAX), Some(notice.clone()));
        assert_eq!(
            block.schedule_line(),
            "capacity block cr-0123456789abcdef0 ends at 2026-12-17T11:30:00Z; leaving at 2026-12-17T10:45:00Z, 5 \
             minutes before the worker group scales to 0 (EC2 reclaims the block's instances at 2026-12-17T11:00:00Z)"
        );
        // A block that ends within the 45 minutes (or a nonsense end) is due at once.
        let short = CapacityBlock { id: "cr-1".into(), end_unix: 60 };
        assert_eq!(short.leave_unix(), 0);
        assert!(short.notice_due("i-1", 0).is_some());
        // The kind's wire name, and the file carries it.
        assert_eq!(serde_json::to_value(NoticeKind::CapacityBlockEnd).unwrap(), "capacity_block_end");
        let file =
            NoticeFile { version: NOTICE_FILE_VERSION, interruption: notice, boot_id: "b".into(), noticed_unix_ms: 1 };
        assert_eq!(NoticeFile::parse(&file.to_text()).unwrap(), file);
        assert_eq!(file.seconds_left(block.leave_unix()), Some(15 * 60));
    }

    #[test]
    fn the_file_round_trips_and_its_version_is_checked_first() {
        let file = NoticeFile {
            version: NOTICE_FILE_VERSION,
            interruption: from_instance_action("i-1", r#"{"action":"stop","time":"2026-11-25T20:00:00Z"}"#).unwrap(),
            boot_id: "b-1".into(),
            noticed_unix_ms: 1_795_636_680_000,
        };
        assert_eq!(NoticeFile::parse(&file.to_text()).unwrap(), file);
        let e = NoticeFile::parse(r#"{"version":2,"anything":true}"#).unwrap_err();
        assert!(matches!(e, NoticeError::Version { found: Some(2) }), "{e:?}");
        assert!(e.to_string().contains("update the agent and trainer together"), "{e}");
        assert!(matches!(NoticeFile::parse("{}").unwrap_err(), NoticeError::Version { found: None }));
        assert!(matches!(NoticeFile::parse(r#"{"version":1}"#).unwrap_err(), NoticeError::Parse(_)));
    }
}
