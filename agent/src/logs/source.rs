//! Files the shipper follows into the spool: the user data's output
//! (cloud-init's `/var/log/cloud-init-output.log`) and the prepare-data
//! script's log.
//!
//! Each is read from where the last read stopped, whole lines only, and
//! copied into the spool with its name in front (`[boot] ...`). The offset
//! is stored in `<spool>/sources/<name>` with the file's device and inode:
//! a file replaced (a new inode) or cut shorter is read again from its start.
//! A partial line waits for its newline, unless it fills a whole read.

use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::spool::{Spool, write_atomic};

/// The most bytes copied from one file in one round.
const READ_CHUNK: u64 = 1024 * 1024;

/// One followed file.
#[derive(Debug)]
pub struct Source {
    /// Shown in front of each of its lines.
    pub name: &'static str,
    path: PathBuf,
    state: PathBuf,
    at: Position,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Position {
    dev: u64,
    ino: u64,
    offset: u64,
}

impl Source {
    /// Follows `path`, keeping its position under `spool_dir`.
    pub fn new(name: &'static str, path: PathBuf, spool_dir: &Path) -> Source {
        let state = spool_dir.join("sources").join(name);
        let at = std::fs::read_to_string(&state)
            .ok()
            .and_then(|t| {
                let mut parts = t.split_whitespace().map(str::parse::<u64>);
                Some(Position { dev: parts.next()?.ok()?, ino: parts.next()?.ok()?, offset: parts.next()?.ok()? })
            })
            .unwrap_or_default();
        Source { name, path, state, at }
    }

    /// Copies the file's new whole lines into `spool`, stamped
    /// `timestamp_ms`; returns how many bytes it copied.
    pub fn collect(&mut self, spool: &Spool, timestamp_ms: i64) -> io::Result<u64> {
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let mut at = self.at;
        if (at.dev, at.ino) != (meta.dev(), meta.ino()) || meta.len() < at.offset {
            at = Position { dev: meta.dev(), ino: meta.ino(), offset: 0 };
        }
        let want = (meta.len() - at.offset).min(READ_CHUNK);
        if want == 0 {
            return Ok(0);
        }
        let mut buf = vec![0; want as usize];
        file.read_exact_at(&mut buf, at.offset)?;
        let take = match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if want == READ_CHUNK => buf.len(),
            None => return Ok(0),
        };
        let text = String::from_utf8_lossy(&buf[..take]);
        let prefixed: String = text.lines().map(|line| format!("[{}] {line}\n", self.name)).collect();
        spool.append(timestamp_ms, &prefixed)?;
        at.offset += take as u64;
        write_atomic(&self.state, &format!("{} {} {}\n", at.dev, at.ino, at.offset))?;
        self.at = at;
        Ok(take as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::spool::DEFAULT_CAP;

    fn messages(spool: &Spool) -> Vec<String> {
        let batch = spool.next_batch().unwrap();
        spool.ack(batch.consumed).unwrap();
        batch.events.into_iter().map(|e| e.message).collect()
    }

    #[test]
    fn follows_a_file_across_restarts_and_replacements() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("spool"), DEFAULT_CAP).unwrap();
        let log = dir.path().join("boot.log");
        let mut source = Source::new("boot", log.clone(), &dir.path().join("spool"));
        assert_eq!(source.collect(&spool, 1).unwrap(), 0, "no file yet");
        std::fs::write(&log, "one\ntwo\npart").unwrap();
        source.collect(&spool, 1).unwrap();
        assert_eq!(messages(&spool), ["[boot] one", "[boot] two"]);
        std::fs::write(&log, "one\ntwo\npartial\nthree\n").unwrap();
        // A new follower (a restarted agent) goes on where the last stopped.
        let mut source = Source::new("boot", log.clone(), &dir.path().join("spool"));
        source.collect(&spool, 2).unwrap();
        assert_eq!(messages(&spool), ["[boot] partial", "[boot] three"]);
        // Replaced by a new file (another run of the script): from its start.
        std::fs::remove_file(&log).unwrap();
        std::fs::write(&log, "again\n").unwrap();
        source.collect(&spool, 3).unwrap();
        assert_eq!(messages(&spool), ["[boot] again"]);
        assert_eq!(source.collect(&spool, 4).unwrap(), 0);
        assert!(messages(&spool).is_empty());
    }
}
