//! A straggler named by `trainer train` (docs/ARCHITECTURE.md, "trainer"
//! and "The GPU gate"): the record rank 0 leaves on its node, the
//! `straggler` message the node's agent sends the master, and the line the
//! master leaves on the worker group for `synth status`.
//!
//! Rank 0 (on the master) judges every rank's compute time per step
//! against the median of the others'; a rank slower by the margin for the
//! set number of steps is named once. Rank 0 then appends the finding to
//! [`STRAGGLER_PATH`] ([`StragglerFile`], the newest [`KEPT`]); the agent
//! reads the file every few seconds and sends each finding newer than the
//! last it sent as a `straggler` message (message version 13); the master
//! logs it with the GPU facts it holds for that node and writes the newest
//! ones to the worker group's tag [`STRAGGLER_TAG`] ([`StragglerMark`]).

use serde::{Deserialize, Serialize};

/// Where rank 0 of `trainer train` leaves the stragglers it named, under
/// the node's filesystem root: in the trainer's run directory
/// ([`crate::idle::JOBS_RUN_DIR`]), where `trainer supervise` keeps its pid
/// files, so the trainer writes where it may already write (the agent's
/// `/var/lib/deeplearning` is the agent's own). Written by `trainer`, read
/// by the agent; gone at a reboot, as the findings it holds are stale then.
pub const STRAGGLER_PATH: &str = "/run/deeplearning-trainer/straggler.json";

/// The version of [`StragglerFile`].
pub const STRAGGLER_FILE_VERSION: u32 = 1;

/// The most findings the file keeps (the newest).
pub const KEPT: usize = 16;

/// The most characters of a finding's alias or instance id.
pub const MAX_NAME_CHARS: usize = 64;

/// The tag on the worker Auto Scaling group where the master leaves the
/// newest stragglers for `synth status` (not propagated to instances).
pub const STRAGGLER_TAG: &str = "deeplearning:stragglers";

/// One rank named as a straggler: the body of a `straggler` message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Straggler {
    /// The node's alias, `deeplearning-worker<index>`.
    pub alias: String,
    /// The node's instance id (empty when the rendezvous did not know it).
    pub instance_id: String,
    /// The rank in its group.
    pub rank: u32,
    /// Which of the node's processes (its GPU).
    pub local_rank: u32,
    /// How much slower than the median of the others, percent (rounded).
    pub percent_slower: u32,
    /// For how many steps in a row.
    pub steps: u64,
    /// When rank 0 named it, unix milliseconds.
    pub named_unix_ms: u64,
    /// Rank 0 recorded it just after the job saved a checkpoint: replacing
    /// the node now costs only the steps since (the master's `replace`
    /// acts only then).
    #[serde(default)]
    pub after_checkpoint: bool,
}

impl Straggler {
    /// The same finding with its names cut to [`MAX_NAME_CHARS`] and
    /// control characters dropped: what a reader keeps of one.
    pub fn bounded(mut self) -> Straggler {
        let clean = |s: &str| s.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect::<String>();
        self.alias = clean(&self.alias);
        self.instance_id = clean(&self.instance_id);
        self
    }

    /// "deeplearning-worker7 (i-0abc, local rank 5)": the node and process.
    pub fn who(&self) -> String {
        let id = if self.instance_id.is_empty() { "instance unknown" } else { &self.instance_id };
        format!("{} ({id}, local rank {})", self.alias, self.local_rank)
    }

    /// "deeplearning-worker7 (i-0abc, local rank 5): steps 38 % slower than
    /// the median of the other ranks for 200 steps".
    pub fn line(&self) -> String {
        format!("{}: {}", self.who(), slower(f64::from(self.percent_slower), self.steps))
    }
}

/// "steps 38 % slower than the median of the other ranks for 200 steps":
/// what a finding says, after whom it names (this record's
/// [`Straggler::line`], and rank 0's line in `trainer train`). `percent`
/// is shown rounded to a whole number.
pub fn slower(percent: f64, steps: u64) -> String {
    format!("steps {percent:.0} % slower than the median of the other ranks for {steps} steps")
}

/// What [`STRAGGLER_PATH`] holds: the newest findings, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StragglerFile {
    /// [`STRAGGLER_FILE_VERSION`].
    pub version: u32,
    /// At most [`KEPT`], oldest first.
    pub stragglers: Vec<Straggler>,
}

/// The file could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StragglerFileError {
    /// Not JSON of this shape.
    #[error("not a straggler record: {0}")]
    Malformed(String),
    /// Another version.
    #[error(
        "straggler record version {0} is not supported (this build reads {STRAGGLER_FILE_VERSION}); the agent and \
         trainer on a node must come from the same release"
    )]
    UnsupportedVersion(u32),
}

impl StragglerFile {
    /// The file with `finding` added, the oldest dropped past [`KEPT`].
    pub fn with(mut self, finding: Straggler) -> StragglerFile {
        self.version = STRAGGLER_FILE_VERSION;
        self.stragglers.push(finding.bounded());
        let extra = self.stragglers.len().saturating_sub(KEPT);
        self.stragglers.drain(..extra);
        self
    }

    /// The file's text.
    pub fn to_json(&self) -> String {
        // Strings and numbers always serialize.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Reads the file's text; every finding bounded, at most [`KEPT`].
    pub fn from_json(text: &str) -> Result<StragglerFile, StragglerFileError> {
        let file: StragglerFile =
            serde_json::from_str(text).map_err(|e| StragglerFileError::Malformed(e.to_string()))?;
        if file.version != STRAGGLER_FILE_VERSION {
            return Err(StragglerFileError::UnsupportedVersion(file.version));
        }
        let skip = file.stragglers.len().saturating_sub(KEPT);
        Ok(StragglerFile {
            version: file.version,
            stragglers: file.stragglers.into_iter().skip(skip).map(Straggler::bounded).collect(),
        })
    }

    /// The findings named after `after_ms` (unix ms), oldest first: what
    /// the agent has not sent yet.
    pub fn newer_than(&self, after_ms: u64) -> impl Iterator<Item = &Straggler> {
        self.stragglers.iter().filter(move |s| s.named_unix_ms > after_ms)
    }
}

/// The master's newest stragglers, as the worker group's tag holds them:
/// newest first, each `alias/instance/percent/steps`, separated by spaces,
/// as many as fit [`crate::MAX_TAG_CHARS`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StragglerMark {
    /// Newest first.
    pub stragglers: Vec<Straggler>,
}

impl StragglerMark {
    /// The tag value: whole entries only, newest first, within the limit.
    pub fn to_tag(&self) -> String {
        let mut out = String::new();
        let mut chars = 0;
        for s in &self.stragglers {
            let id = if s.instance_id.is_empty() { "-" } else { &s.instance_id };
            let entry = format!("{}/{id}/{}/{}/{}", s.alias, s.local_rank, s.percent_slower, s.steps);
            let sep = usize::from(!out.is_empty());
            let entry_chars = entry.chars().count();
            if chars + sep + entry_chars > crate::MAX_TAG_CHARS {
                break;
            }
            chars += sep + entry_chars;
            if sep == 1 {
                out.push(' ');
            }
            out.push_str(&entry);
        }
        out
    }

    /// Reads a tag value; `None` when an entry does not parse (a tag edited
    /// by hand). The time of each finding is not in the tag (0).
    pub fn from_tag(value: &str) -> Option<StragglerMark> {
        let stragglers = value
            .split_whitespace()
            .map(|entry| {
                let mut f = entry.split('/');
                let (alias, id) = (f.next()?, f.next()?);
                let s = Straggler {
                    alias: alias.to_owned(),
                    instance_id: if id == "-" { String::new() } else { id.to_owned() },
                    rank: 0,
                    local_rank: f.next()?.parse().ok()?,
                    percent_slower: f.next()?.parse().ok()?,
                    steps: f.next()?.parse().ok()?,
                    named_unix_ms: 0,
                    after_checkpoint: false,
                };
                f.next().is_none().then(|| s.bounded())
            })
            .collect::<Option<Vec<_>>>()?;
        Some(StragglerMark { stragglers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(n: u64) -> Straggler {
        Straggler {
            alias: format!("deeplearning-worker{n}"),
            instance_id: format!("i-0abc{n:03}"),
            rank: n as u32,
            local_rank: 5,
            percent_slower: 38,
            steps: 200,
            named_unix_ms: 1_000 + n,
            after_checkpoint: n.is_multiple_of(2),
        }
    }

    /// Written with the trainer's function, read with the agent's.
    #[test]
    fn the_file_round_trips_and_keeps_the_newest() {
        let mut file = StragglerFile::default();
        for n in 0..20 {
            file = file.with(finding(n));
        }
        let read = StragglerFile::from_json(&file.to_json()).unwrap();
        assert_eq!(read, file);
        assert_eq!(read.stragglers.len(), KEPT);
        assert_eq!(read.stragglers[0], finding(4));
        let unsent: Vec<u64> = read.newer_than(1_017).map(|s| s.named_unix_ms).collect();
        assert_eq!(unsent, [1_018, 1_019]);
    }

    #[test]
    fn a_bad_file_is_an_error_not_a_panic() {
        assert!(matches!(StragglerFile::from_json("{"), Err(StragglerFileError::Malformed(_))));
        assert!(matches!(
            StragglerFile::from_json(r#"{"version":2,"stragglers":[]}"#),
            Err(StragglerFileError::UnsupportedVersion(2))
        ));
        let long = Straggler { alias: "x\u{7}".repeat(100), ..finding(1) };
        let text = StragglerFile { version: 1, stragglers: vec![long] }.to_json();
        let read = StragglerFile::from_json(&text).unwrap();
        assert_eq!(read.stragglers[0].alias, "x".repeat(MAX_NAME_CHARS));
    }

    #[test]
    fn the_line_names_the_node_and_the_process() {
        assert_eq!(
            finding(7).line(),
            "deeplearning-worker7 (i-0abc007, local rank 5): steps 38 % slower than the median of the other ranks \
             for 200 steps"
        );
    }

    /// Written by the master's function, read by synth's: whole entries
    /// only, newest first, never past AWS's 256 characters.
    #[test]
    fn the_tag_round_trips_within_the_limit() {
        let mark = StragglerMark { stragglers: (0..3).map(finding).collect() };
        let tag = mark.to_tag();
        assert_eq!(tag.split(' ').next(), Some("deeplearning-worker0/i-0abc000/5/38/200"));
        let read = StragglerMark::from_tag(&tag).unwrap();
        assert!(STRAGGLER_PATH.starts_with(crate::idle::JOBS_RUN_DIR));
        let names: Vec<(String, String, u32, u64)> = read
            .stragglers
            .iter()
            .map(|s| (s.alias.clone(), s.instance_id.clone(), s.percent_slower, s.steps))
            .collect();
        assert_eq!(names[2], ("deeplearning-worker2".to_owned(), "i-0abc002".to_owned(), 38, 200));
        let many = StragglerMark { stragglers: (0..40).map(finding).collect() };
        let tag = many.to_tag();
        assert!(tag.chars().count() <= crate::MAX_TAG_CHARS, "{}", tag.len());
        assert_eq!(StragglerMark::from_tag(&tag).unwrap().stragglers.len(), tag.split(' ').count());
        assert!(StragglerMark::from_tag("worker7/i-1/x/200").is_none());
        assert!(StragglerMark::from_tag("worker7/i-1/1/2/3/4").is_none());
        assert_eq!(StragglerMark::from_tag("").unwrap(), StragglerMark::default());
    }
}
