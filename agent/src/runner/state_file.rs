//! The master's files under the agent's root: its state ([`StateFile`],
//! `master.json`, saved after every turn so a restarted agent resumes where
//! it was) and the record of the newest generation it may have sent
//! ([`SentMark`], written before a new generation goes out).

use std::path::{Path, PathBuf};

use tracing::warn;

use crate::cluster::MasterState;
use crate::files;

/// Where the master keeps its state ([`MasterState`]) under `root`.
pub(crate) fn master_state_path(root: &Path) -> PathBuf {
    root.join("var/lib/deeplearning/master.json")
}

fn sent_mark_path(root: &Path) -> PathBuf {
    root.join("var/lib/deeplearning/master-sent-generation")
}

/// The master's state file, written only when the state changed: most loop
/// turns (an idle long poll) change nothing, and need no read or fsync.
/// What was written last is kept as its length and hash, not its text (at
/// 1,000 nodes the state is about a megabyte); a state that differs from it
/// is written without reading the file back first. The first save compares
/// with the file (a restarted master whose state did not change writes
/// nothing).
pub(super) struct StateFile {
    path: PathBuf,
    last: Option<(usize, u64)>,
}

impl StateFile {
    /// The state file at `path`, not yet saved by this agent.
    pub(super) fn new(path: PathBuf) -> StateFile {
        StateFile { path, last: None }
    }

    pub(super) fn save(&mut self, state: &MasterState) -> anyhow::Result<()> {
        use std::hash::{Hash, Hasher};
        let text = serde_json::to_string(state)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let now = Some((text.len(), hasher.finish()));
        if now == self.last {
            return Ok(());
        }
        if self.last.is_none() {
            files::atomic::write_if_changed(&self.path, &text, 0o600)?;
        } else {
            files::atomic::write(&self.path, &text, 0o600)?;
        }
        self.last = now;
        Ok(())
    }
}

/// The newest manifest generation the master may have sent, on disk: written
/// (atomically, fsynced) before the first part of a new generation goes to
/// the worker queue. The master's state is saved only after a turn's
/// effects, so a crash in between leaves a state that does not know the
/// generation it sent; this record keeps a restarted master from numbering
/// another manifest the same ([`MasterState::start`]).
pub(super) struct SentMark {
    path: PathBuf,
    pub(super) through: u64,
}

impl SentMark {
    /// The record under `root`; 0 when there is none. One that cannot be
    /// read is logged and taken as 0, as an unreadable master state is.
    pub(super) fn load(root: &Path) -> SentMark {
        let path = sent_mark_path(root);
        let through = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().unwrap_or_else(|e| {
                warn!("ignoring unreadable sent-generation record {}: {e}", path.display());
                0
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                warn!("ignoring unreadable sent-generation record {}: {e}", path.display());
                0
            }
        };
        SentMark { path, through }
    }

    /// Records that `generation` may be sent from now on (nothing to do
    /// when it is not newer than the record).
    pub(super) fn record(&mut self, generation: u64) -> Result<(), files::FilesError> {
        if generation > self.through {
            files::atomic::write_if_changed(&self.path, &format!("{generation}\n"), 0o600)?;
            self.through = generation;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sent-generation record only grows, survives a restart (a new
    /// load), and one that cannot be read counts as none.
    #[test]
    fn the_sent_generation_record_only_grows_and_survives_a_restart() {
        let root = tempfile::tempdir().unwrap();
        let mut mark = SentMark::load(root.path());
        assert_eq!(mark.through, 0);
        mark.record(3).unwrap();
        mark.record(2).unwrap();
        assert_eq!(std::fs::read_to_string(sent_mark_path(root.path())).unwrap(), "3\n");
        assert_eq!(SentMark::load(root.path()).through, 3);
        std::fs::write(sent_mark_path(root.path()), "not a number").unwrap();
        assert_eq!(SentMark::load(root.path()).through, 0);
        // A record that cannot be written is an error, and the mark stays.
        let blocked = tempfile::tempdir().unwrap();
        std::fs::write(blocked.path().join("var"), "a file where a directory belongs").unwrap();
        let mut mark = SentMark::load(blocked.path());
        assert!(mark.record(1).is_err());
        assert_eq!(mark.through, 0);
    }
}
