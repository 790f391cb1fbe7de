//! The on-disk buffer of lines not yet acknowledged by CloudWatch Logs.
//!
//! One file of records, `spool.<generation>.log`, one line each:
//! `<milliseconds since the epoch> <text>`; and `acked`: `<generation>
//! <offset>`, the first byte CloudWatch Logs has not acknowledged. Lines are
//! appended as they are written; the shipper reads from the offset and moves
//! it past a batch once the batch is accepted, so a restarted agent sends
//! again exactly what was not acknowledged (a batch accepted just before a
//! crash, whose offset was not yet stored, is the one case sent twice).
//!
//! Bounded: when the unacknowledged bytes pass the cap (CloudWatch Logs
//! unreachable for long), the oldest lines are dropped down to three
//! quarters of the cap, and one line in their place says how many. Once
//! 1 MiB is acknowledged, the rest is copied into the next generation's
//! file, which becomes current by rewriting `acked` (one rename: a crash
//! leaves either the old pair or the new one).

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::batch::{Batch, MAX_EVENT_BYTES};

/// The default cap on unacknowledged bytes.
pub(crate) const DEFAULT_CAP: u64 = 16 * 1024 * 1024;
/// Acknowledged bytes that make the spool start a new file.
const COMPACT_AT: u64 = 1024 * 1024;
/// The most bytes read for one batch: a full batch, with room for the
/// records' timestamps.
const READ_CHUNK: u64 = 2 * 1024 * 1024;
// A chunk holds at least one whole record of the longest event.
const _: () = assert!(READ_CHUNK >= 2 * MAX_EVENT_BYTES as u64);

/// The spool in one directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    cap: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    generation: u64,
    file: File,
    len: u64,
    acked: u64,
}

fn file_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("spool.{generation}.log"))
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).read(true).append(true).open(path)
}

/// Writes `text` to `path` by a rename, so a reader sees the old or the new
/// text ([`crate::files::atomic::write`]: its directory made when missing).
pub(super) fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    crate::files::atomic::write(path, text, 0o644).map_err(io::Error::other)
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, keeping at most `cap`
    /// unacknowledged bytes.
    pub fn open(dir: &Path, cap: u64) -> io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let (generation, acked) = std::fs::read_to_string(dir.join("acked"))
            .ok()
            .and_then(|t| {
                let (g, o) = t.trim().split_once(' ')?;
                Some((g.parse().ok()?, o.parse().ok()?))
            })
            .unwrap_or((0, 0));
        let file = open_append(&file_path(dir, generation))?;
        let len = file.metadata()?.len();
        // Files of other generations are a compaction a crash interrupted
        // (newer) or finished (older).
        for entry in std::fs::read_dir(dir)?.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("spool.") && name.ends_with(".log") && name != format!("spool.{generation}.log") {
                std::fs::remove_file(entry.path())?;
            }
        }
        let inner = Inner { generation, file, len, acked: acked.min(len) };
        Ok(Spool { dir: dir.to_owned(), cap, inner: Mutex::new(inner) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves whole records (each is one
        // write): the data is still good.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `text`, one record per line, stamped `timestamp_ms`. A line
    /// longer than an event may be is cut (at a character boundary).
    pub fn append(&self, timestamp_ms: i64, text: &str) -> io::Result<()> {
        let mut records = String::with_capacity(text.len() + 16);
        for line in text.strip_suffix('\n').unwrap_or(text).split('\n') {
            let line = super::batch::fit_message(line.strip_suffix('\r').unwrap_or(line));
            // Writing to a String cannot fail.
            let _ = writeln!(records, "{timestamp_ms} {line}");
        }
        let mut inner = self.lock();
        inner.file.write_all(records.as_bytes())?;
        inner.len += records.len() as u64;
        Ok(())
    }

    /// Bytes not yet acknowledged.
    pub fn unsent(&self) -> u64 {
        let inner = self.lock();
        inner.len - inner.acked
    }

    /// The oldest unacknowledged records, as one batch within PutLogEvents'
    /// limits (empty when everything was acknowledged).
    pub fn next_batch(&self) -> io::Result<Batch> {
        let inner = self.lock();
        let want = (inner.len - inner.acked).min(READ_CHUNK);
        let mut buf = vec![0; want as usize];
        inner.file.read_exact_at(&mut buf, inner.acked)?;
        drop(inner);
        let mut batch = Batch::default();
        let mut rest = &buf[..];
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let record = String::from_utf8_lossy(&rest[..end]);
            let (timestamp_ms, text) = match record.split_once(' ') {
                Some((ts, text)) => (ts.parse().unwrap_or(0), text),
                None => (0, &record[..]),
            };
            if !batch.push(timestamp_ms, text, end as u64 + 1) {
                break;
            }
            rest = &rest[end + 1..];
        }
        Ok(batch)
    }

    /// Records that the first `bytes` unacknowledged bytes were accepted.
    pub fn ack(&self, bytes: u64) -> io::Result<()> {
        let mut inner = self.lock();
        inner.acked = (inner.acked + bytes).min(inner.len);
        write_atomic(&self.dir.join("acked"), &format!("{} {}\n", inner.generation, inner.acked))?;
        if inner.acked >= COMPACT_AT {
            let from = inner.acked;
            self.compact(&mut inner, from, None)?;
        }
        Ok(())
    }

    /// Drops the oldest unacknowledged lines while they pass the cap,
    /// leaving one line that counts them; returns how many were dropped.
    pub fn enforce_cap(&self, timestamp_ms: i64) -> io::Result<u64> {
        let mut inner = self.lock();
        if inner.len - inner.acked <= self.cap {
            return Ok(0);
        }
        // Keep the newest three quarters of the cap, from a line's start.
        let keep_from = inner.len - self.cap / 4 * 3;
        let mut dropped = 0;
        let mut at = inner.acked;
        let mut cut = inner.len;
        let mut buf = vec![0; 64 * 1024];
        'scan: while at < inner.len {
            let n = buf.len().min((inner.len - at) as usize);
            inner.file.read_exact_at(&mut buf[..n], at)?;
            for (i, b) in buf[..n].iter().enumerate() {
                if *b == b'\n' {
                    dropped += 1;
                    if at + i as u64 + 1 >= keep_from {
                        cut = at + i as u64 + 1;
                        break 'scan;
                    }
                }
            }
            at += n as u64;
        }
        let marker = format!(
            "{timestamp_ms} deeplearning-agent: {dropped} lines dropped (CloudWatch Logs was unreachable and the \
             spool keeps at most {} bytes)\n",
            self.cap
        );
        self.compact(&mut inner, cut, Some(marker))?;
        Ok(dropped)
    }

    /// Starts the next generation's file with `marker` and the records from
    /// byte `from` on, and makes it current.
    fn compact(&self, inner: &mut Inner, from: u64, marker: Option<String>) -> io::Result<()> {
        let next = inner.generation + 1;
        let path = file_path(&self.dir, next);
        let mut file = open_append(&path)?;
        let mut len = 0;
        if let Some(marker) = marker {
            file.write_all(marker.as_bytes())?;
            len += marker.len() as u64;
        }
        let mut at = from;
        let mut buf = vec![0; 64 * 1024];
        while at < inner.len {
            let n = buf.len().min((inner.len - at) as usize);
            inner.file.read_exact_at(&mut buf[..n], at)?;
            file.write_all(&buf[..n])?;
            at += n as u64;
            len += n as u64;
        }
        file.sync_data()?;
        write_atomic(&self.dir.join("acked"), &format!("{next} 0\n"))?;
        let old = file_path(&self.dir, inner.generation);
        *inner = Inner { generation: next, file, len, acked: 0 };
        // The old file is no longer read; one left by a failed removal is
        // removed at the next start.
        let _ = std::fs::remove_file(old);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(batch: &Batch) -> Vec<&str> {
        batch.events.iter().map(|e| e.message.as_str()).collect()
    }

    #[test]
    fn lines_are_sent_once_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), DEFAULT_CAP).unwrap();
        spool.append(1, "one\ntwo\n").unwrap();
        spool.append(2, "three").unwrap();
        let batch = spool.next_batch().unwrap();
        assert_eq!(texts(&batch), ["one", "two", "three"]);
        assert_eq!(batch.events[2].timestamp_ms, 2);
        // Not acknowledged: a restart sends them again.
        drop(spool);
        let spool = Spool::open(dir.path(), DEFAULT_CAP).unwrap();
        let batch = spool.next_batch().unwrap();
        assert_eq!(texts(&batch), ["one", "two", "three"]);
        // Acknowledged: never again, also after a restart.
        spool.ack(batch.consumed).unwrap();
        spool.append(3, "four").unwrap();
        drop(spool);
        let spool = Spool::open(dir.path(), DEFAULT_CAP).unwrap();
        assert_eq!(texts(&spool.next_batch().unwrap()), ["four"]);
    }

    #[test]
    fn compaction_keeps_what_is_unacknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), DEFAULT_CAP).unwrap();
        let line = "z".repeat(1_000);
        for i in 0..1_100 {
            spool.append(i, &line).unwrap();
        }
        let mut sent = 0;
        while sent < 1_050 {
            let batch = spool.next_batch().unwrap();
            let take = batch.events.len().min(1_050 - sent);
            let bytes: u64 =
                batch.events[..take].iter().map(|e| e.message.len() as u64 + 2 + digits(e.timestamp_ms)).sum();
            spool.ack(bytes).unwrap();
            sent += take;
        }
        spool.append(5_000, "last").unwrap();
        drop(spool);
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert!(names.iter().any(|n| n == "spool.1.log"), "{names:?}");
        assert!(!names.iter().any(|n| n == "spool.0.log"), "{names:?}");
        let spool = Spool::open(dir.path(), DEFAULT_CAP).unwrap();
        let batch = spool.next_batch().unwrap();
        assert_eq!(batch.events.len(), 51);
        assert_eq!(batch.events[0].timestamp_ms, 1_050);
        assert_eq!(batch.events[50].message, "last");
    }

    fn digits(n: i64) -> u64 {
        n.to_string().len() as u64
    }

    #[test]
    fn the_cap_drops_the_oldest_lines_and_says_how_many() {
        let dir = tempfile::tempdir().unwrap();
        let cap = 100 * 1_000;
        let spool = Spool::open(dir.path(), cap).unwrap();
        // 300 records of 1,000 bytes ("<3 digits> " + 995 + "\n"; 1 and 2
        // digit stamps start at 100).
        for i in 100..400 {
            spool.append(i, &format!("{i:0>995}")).unwrap();
        }
        assert_eq!(spool.unsent(), 300 * 1_000);
        let dropped = spool.enforce_cap(999).unwrap();
        // Down to three quarters of the cap: 75 lines kept, 225 dropped.
        assert_eq!(dropped, 225);
        assert!(spool.unsent() <= cap, "{}", spool.unsent());
        let batch = spool.next_batch().unwrap();
        assert_eq!(batch.events.len(), 76);
        assert!(batch.events[0].message.contains("225 lines dropped"), "{}", batch.events[0].message);
        assert!(batch.events[1].message.ends_with("325"), "the oldest kept is line 325: {}", batch.events[1].message);
        assert!(batch.events[75].message.ends_with("399"));
        // Under the cap: nothing more is dropped.
        assert_eq!(spool.enforce_cap(1_000).unwrap(), 0);
        // The marker and the kept lines survive a restart.
        drop(spool);
        let spool = Spool::open(dir.path(), cap).unwrap();
        assert_eq!(spool.next_batch().unwrap().events.len(), 76);
    }
}
