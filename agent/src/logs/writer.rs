//! The agent's own log lines into the spool: a second `tracing` output
//! beside stderr (which the journal keeps), plain text, the same filter.
//!
//! Logging starts before the agent knows its root or whether it has a log
//! group, so the writer holds the first lines in memory (at most
//! [`EARLY_LINES`]) until [`attach`] gives it the spool, or [`discard`] says
//! there is none. Writing never waits on the network: one append to a local
//! file per event.

use std::io::{self, Write};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::spool::Spool;

/// Lines kept in memory before the spool is attached; later ones are not
/// kept (they are still on stderr).
pub const EARLY_LINES: usize = 1_000;

static SPOOL: OnceLock<Option<Arc<Spool>>> = OnceLock::new();
/// When the first warning or error was logged, in unix milliseconds; 0
/// before any (see [`warned_at_ms`]).
static WARNED_AT_MS: AtomicI64 = AtomicI64::new(0);

/// When the agent logged its first warning or error, in unix milliseconds:
/// the shipper sends its lines soon after rather than holding them for the
/// worker's index ([`super::hold_first_lines`]).
pub fn warned_at_ms() -> Option<i64> {
    Some(WARNED_AT_MS.load(Ordering::Relaxed)).filter(|&t| t > 0)
}
static EARLY: Mutex<Vec<(i64, String)>> = Mutex::new(Vec::new());

/// Starts `tracing` on stderr (`cli_output`'s layer) and into the spool:
/// the filter from the environment variable `env`, else `default`; colours
/// on stderr when `ansi`.
pub fn init_logging(env: &str, default: &str, ansi: bool) {
    use tracing_subscriber::fmt;
    use tracing_subscriber::prelude::*;
    // No time in the line: each event carries its own timestamp (when it
    // was written), which CloudWatch and `synth logs` show.
    let spool = fmt::layer().with_writer(SpoolWriter).with_ansi(false).without_time().log_internal_errors(false);
    tracing_subscriber::registry()
        .with(cli_output::stderr_layer(env, default, ansi))
        .with(spool.with_filter(cli_output::env_filter(env, default)))
        .init();
}

/// From now on the agent's lines go to `spool`, the early ones first.
pub fn attach(spool: Arc<Spool>) {
    let early = std::mem::take(&mut *EARLY.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for (ts, line) in early {
        let _ = spool.append(ts, &line);
    }
    let _ = SPOOL.set(Some(spool));
}

/// The agent ships nothing: forget the early lines and keep no more.
pub fn discard() {
    let _ = SPOOL.set(None);
    EARLY.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
}

/// Makes one [`EventWriter`] per event.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpoolWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SpoolWriter {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter(Vec::new())
    }
}

/// Collects one formatted event and appends it when dropped. Errors are
/// not reported: reporting them would log, and logging writes here.
#[derive(Debug)]
pub struct EventWriter(Vec<u8>);

impl Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // The level comes padded to five characters (" INFO"); the line
        // starts at the level.
        let text = String::from_utf8_lossy(&self.0);
        let text = text.trim_start();
        // A global sink, set up before any loop takes a clock: it stamps
        // lines with the system clock, as CloudWatch Logs stamps events.
        let ts = node_contract::clock::system() as i64;
        if text.starts_with("WARN") || text.starts_with("ERROR") {
            let _ = WARNED_AT_MS.compare_exchange(0, ts.max(1), Ordering::Relaxed, Ordering::Relaxed);
        }
        match SPOOL.get() {
            Some(Some(spool)) => {
                let _ = spool.append(ts, text);
            }
            Some(None) => {}
            None => {
                let mut early = EARLY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if early.len() < EARLY_LINES {
                    early.push((ts, text.to_owned()));
                }
            }
        }
    }
}
