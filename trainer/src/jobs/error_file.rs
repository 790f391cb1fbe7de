//! A rank's error file (`TORCHELASTIC_ERROR_FILE`): what PyTorch's `@record`
//! (`torch.distributed.elastic.multiprocessing.errors`) writes when the
//! decorated function raises, and how `trainer launch` reads it to name the
//! root cause of a failed job.
//!
//! The format, from `ErrorHandler.record_exception` in
//! `torch/distributed/elastic/multiprocessing/errors/error_handler.py`:
//!
//! ```json
//! {"message": {"message": "ValueError: bad batch",
//!              "extraInfo": {"py_callstack": "Traceback (most recent call last):\n...",
//!                            "timestamp": "1718000000"}}}
//! ```
//!
//! An older or native writer may put a string in `message` with a
//! top-level `timestamp`; `ProcessFailure._get_error_data` in
//! `errors/__init__.py` reads both, and so does [`read`]. Like torch's
//! `ChildFailedError.get_first_failure`, the root cause of a job is the
//! failure with the earliest timestamp (whole seconds); the launcher breaks
//! ties by the order it saw the ranks fail.
//!
//! Files: the launcher puts rank `r`'s at `<job logs>/rank-<r>.error.json`
//! ([`path`]), beside its log, on EFS where there is one, so the master
//! reads every rank's. The supervisor removes a stale one before the rank
//! starts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The largest error file read (a traceback is kilobytes; this bounds a
/// runaway writer).
const MAX_BYTES: u64 = 1 << 20;

/// Rank `rank`'s error file in the job's log directory `logs`.
pub(crate) fn path(logs: &Path, rank: u32) -> PathBuf {
    logs.join(format!("rank-{rank}.error.json"))
}

/// What a failed rank recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// `ExceptionType: message`.
    pub message: String,
    /// The Python traceback (`traceback.format_exc()`), when there is one.
    pub traceback: Option<String>,
    /// Seconds since the epoch when it was written (0 when unknown).
    pub timestamp: u64,
}

#[derive(Deserialize)]
struct File {
    message: Message,
    #[serde(default)]
    timestamp: Option<Timestamp>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Message {
    Text(String),
    Structured {
        message: String,
        #[serde(rename = "extraInfo", default)]
        extra_info: Option<ExtraInfo>,
    },
}

#[derive(Deserialize)]
struct ExtraInfo {
    #[serde(default)]
    py_callstack: Option<String>,
    #[serde(default)]
    timestamp: Option<Timestamp>,
}

/// torch writes the timestamp as a string of digits; accept a number too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Timestamp {
    Text(String),
    Number(u64),
}

impl Timestamp {
    fn seconds(&self) -> u64 {
        match self {
            Timestamp::Text(s) => s.trim().parse().unwrap_or(0),
            Timestamp::Number(n) => *n,
        }
    }
}

/// Parses an error file's text; `None` when it is not one.
pub(crate) fn parse(text: &str) -> Option<Recorded> {
    let file: File = serde_json::from_str(text).ok()?;
    let top = file.timestamp.as_ref().map_or(0, Timestamp::seconds);
    Some(match file.message {
        Message::Text(message) => Recorded { message, traceback: None, timestamp: top },
        Message::Structured { message, extra_info } => {
            let extra = extra_info.unwrap_or(ExtraInfo { py_callstack: None, timestamp: None });
            Recorded {
                message,
                traceback: extra.py_callstack.filter(|t| !t.trim().is_empty()),
                timestamp: extra.timestamp.as_ref().map_or(top, Timestamp::seconds),
            }
        }
    })
}

/// Reads `path`; `None` when there is no file, or it is too large or not
/// an error file (a rank that died without `@record` leaves none).
pub(crate) fn read(path: &Path) -> Option<Recorded> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(MAX_BYTES).read_to_string(&mut text).ok()?;
    parse(&text)
}

/// The root cause among `failures` (in the order the launcher saw them
/// fail): the earliest recorded timestamp, the first seen on a tie.
pub(crate) fn root_cause<T>(failures: impl IntoIterator<Item = (T, Recorded)>) -> Option<(T, Recorded)> {
    failures.into_iter().enumerate().min_by_key(|(seen, (_, r))| (r.timestamp, *seen)).map(|(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte for byte what `json.dump` writes for `record_exception`'s dict
    /// (`", "` and `": "` separators, non-ASCII escaped).
    const RECORDED: &str = r#"{"message": {"message": "ValueError: rank 2 got a bad batch", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/efs/train.py\", line 9, in main\n    raise ValueError(\"rank 2 got a bad batch\")\nValueError: rank 2 got a bad batch\n", "timestamp": "1718000042"}}}"#;

    #[test]
    fn reads_what_record_writes() {
        let r = parse(RECORDED).unwrap();
        assert_eq!(r.message, "ValueError: rank 2 got a bad batch");
        assert!(r.traceback.as_deref().unwrap().starts_with("Traceback (most recent call last):\n  File"));
        assert_eq!(r.timestamp, 1_718_000_042);
    }

    #[test]
    fn reads_the_string_form_and_refuses_what_is_not_an_error_file() {
        let r = parse(r#"{"message": "Signal 9 (SIGKILL) received", "timestamp": "17"}"#).unwrap();
        assert_eq!((r.message.as_str(), r.traceback, r.timestamp), ("Signal 9 (SIGKILL) received", None, 17));
        for bad in ["", "{}", "[1]", "{\"message\": 3}", "not json"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_root_cause_is_the_earliest_then_the_first_seen() {
        let at = |t: u64| Recorded { message: format!("m{t}"), traceback: None, timestamp: t };
        let (rank, r) = root_cause([(0, at(12)), (3, at(10)), (1, at(10))]).unwrap();
        assert_eq!((rank, r.timestamp), (3, 10));
        assert!(root_cause(Vec::<(u32, Recorded)>::new()).is_none());
    }

    #[test]
    fn a_missing_or_huge_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(&dir.path().join("none.json")), None);
        let big = dir.path().join("big.json");
        std::fs::write(&big, format!("{{\"message\": \"{}\"}}", "x".repeat(MAX_BYTES as usize))).unwrap();
        assert_eq!(read(&big), None);
        let ok = path(dir.path(), 2);
        std::fs::write(&ok, RECORDED).unwrap();
        assert_eq!(read(&ok).unwrap().timestamp, 1_718_000_042);
    }
}
