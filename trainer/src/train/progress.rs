//! The live progress line of `trainer train` on stderr: rewritten in place
//! (`\r`) while an epoch runs when stderr is a terminal; a plain line every
//! [`PLAIN_EVERY`] otherwise (logs stay readable).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often the live line is redrawn on a terminal.
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// How often a plain progress line is written when stderr is not a terminal.
pub const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// What the line shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Current epoch (1-based) and the total.
    pub epoch: (u64, u64),
    /// Steps done in this epoch, and its step count.
    pub step: (usize, usize),
    /// Mean loss so far this epoch (this rank's samples).
    pub loss: f64,
    /// Accuracy so far this epoch, 0..1.
    pub accuracy: f64,
    /// Global samples per second so far this epoch.
    pub samples_per_sec: f64,
}

/// The progress line's state.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    tty: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// A progress line on stderr (a live line on a terminal); `enabled`
    /// false shows nothing (ranks other than 0).
    pub fn stderr(enabled: bool) -> Self {
        Self { enabled, tty: std::io::stderr().is_terminal(), last: None, drawn: false }
    }

    /// Shows `s` if it is time to.
    pub fn update(&mut self, s: &Snapshot) {
        let every = if self.tty { REDRAW_EVERY } else { PLAIN_EVERY };
        if !self.enabled || self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let line = format!(
            "epoch {}/{} step {}/{} loss {:.4} acc {:.2}% {:.0} samples/s",
            s.epoch.0,
            s.epoch.1,
            s.step.0,
            s.step.1,
            s.loss,
            100.0 * s.accuracy,
            s.samples_per_sec
        );
        // Progress is best effort: a closed stderr must not stop training
        // (a failed one only makes the final exit code 2, see cli_output).
        cli_output::eprint(&if self.tty { format!("\r\x1b[2K{line}") } else { format!("{line}\n") });
        self.drawn = self.tty;
    }

    /// Clears the live line (before the epoch's summary is printed).
    pub fn clear(&mut self) {
        if self.drawn {
            cli_output::eprint("\r\x1b[2K");
            self.drawn = false;
            // The next epoch's line appears at once on a terminal; plain
            // lines keep their own pace across epochs.
            self.last = None;
        }
    }
}
