//! The terminal the lifecycle flows talk to, as a small trait
//! ([`Console`]): data to standard output, the story and errors to standard
//! error, the progress display, the confirmation prompt and Ctrl-C.
//!
//! On a terminal, progress is drawn by one renderer (indicatif): one live
//! status line per process, a clock on it that counts each second from the
//! operation's start, story lines printed whole above it (the live line
//! alone is cut to the terminal's width), and every other write to stderr passed above it too
//! ([`above_the_line`]), so no spinner frame is left behind.
//!
//! The command line implements it with `cli-output` (a reader that went
//! away or a full disk is answered as `synth build` answers it), the real
//! terminal and the real Ctrl-C; unit tests implement it in memory
//! (`super::fake`), with an answer or an interruption injected where the
//! flow asks.

use std::fmt::Display as Show;
use std::future::Future;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cli_output::Closed;
use indicatif::{ProgressBar, ProgressState, ProgressStyle};

use super::time::{now_ms, stamp};
use crate::exit::ExitCode;

/// An answer at a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Go ahead.
    Yes,
    /// Anything else, or end of input.
    No,
}

/// Where a flow writes, and whom it asks.
pub(crate) trait Console {
    /// Writes data (outputs, a preview, events, lines) to standard output.
    fn print(&self, text: &str) -> Result<(), Closed>;
    /// Writes to standard error; never fails (a failure is remembered for
    /// the exit code, see `cli_output::eprint`).
    fn note(&self, text: &str);
    /// A progress display on standard error.
    fn display(&self) -> Display;
    /// Whether anybody can answer a question (standard input is a terminal).
    fn can_ask(&self) -> bool;
    /// Asks `question` (only called when [`Console::can_ask`]) and waits
    /// for the answer.
    fn ask(&self, question: &str) -> impl Future<Output = Answer>;
    /// Resolves when the user interrupts (Ctrl-C).
    fn interrupted(&self) -> impl Future<Output = ()>;

    /// [`Console::note`] with a newline.
    fn noteln(&self, text: &str) {
        self.note(&format!("{text}\n"));
    }
}

/// Where a [`Display`] writes its plain lines.
type Writer = Box<dyn Fn(&str) + Send + Sync>;

/// The one live status line of this process, when one is drawn: every
/// [`Display`] on a terminal draws through it (a second display while one
/// is drawn is the same line, not a second spinner fighting it), and
/// everything else written to stderr goes above it ([`above_the_line`]).
static LIVE: Mutex<Option<Live>> = Mutex::new(None);

/// The live line and when the operation it shows began.
#[derive(Clone)]
struct Live {
    bar: ProgressBar,
    /// The clock's origin: set by [`Display::live_since`].
    origin: Arc<Mutex<Option<Instant>>>,
}

/// Writes `text` to stderr above the live line, when one is drawn (the
/// line is cleared, the text written, the line drawn again below it), so
/// no frame of the spinner is left among the lines.
pub(crate) fn above_the_line(text: &str) {
    let live = LIVE.lock().ok().and_then(|l| l.clone());
    match live {
        Some(live) => live.bar.suspend(|| cli_output::eprint(text)),
        None => cli_output::eprint(text),
    }
}

/// Removes the live line, if one is still drawn: a command that ends on an
/// error before its flow finished the display would leave the spinner's
/// last frame on the screen. The command line calls it as each command ends.
pub(crate) fn clear_live_line() {
    let live = LIVE.lock().ok().and_then(|mut l| l.take());
    if let Some(live) = live {
        live.bar.finish_and_clear();
    }
}

/// `text` cut to the terminal's width (`…` at the end): the live line,
/// drawn again in place, must stay on one row.
pub(crate) fn fit(text: &str, width: usize) -> String {
    console::truncate_str(text, width, "…").into_owned()
}

/// The spinner's frames, the last the finished state (named so a test of
/// the screen can tell a spinner frame from text).
pub(crate) const SPINNER_FRAMES: &str = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ";

/// Progress on stderr: a live line on a terminal, plain timestamped lines otherwise.
pub(crate) struct Display {
    live: Option<Live>,
    plain: Writer,
}

impl Default for Display {
    fn default() -> Self {
        Display::new()
    }
}

impl Display {
    /// How often the live line is drawn again: the spinner turns and the
    /// clock shows each new second within this.
    const TICK: Duration = Duration::from_millis(120);

    /// A live line when stderr is a terminal: the one already drawn, if any.
    pub(crate) fn new() -> Display {
        if !std::io::stderr().is_terminal() {
            return Display { live: None, plain: Box::new(cli_output::eprint) };
        }
        let mut slot = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        let live = slot.get_or_insert_with(|| {
            let origin: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
            let clock = Arc::clone(&origin);
            // The clock is drawn at every tick from the operation's start,
            // so it counts each second, however seldom AWS is polled.
            // `{msg}`, cut by [`Display::live_since`], not `{wide_msg}`,
            // which pads the line to the last column (see [`Display::line`]).
            let style = ProgressStyle::with_template("{spinner} {clock}{msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .tick_chars(SPINNER_FRAMES)
                .with_key("clock", move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                    if let Some(origin) = *clock.lock().unwrap_or_else(|e| e.into_inner()) {
                        let ms = i64::try_from(origin.elapsed().as_millis()).unwrap_or(i64::MAX);
                        let _ = write!(w, "{} ", super::watch::clock(ms));
                    }
                });
            let bar = ProgressBar::new_spinner();
            bar.set_style(style);
            bar.enable_steady_tick(Self::TICK);
            Live { bar, origin }
        });
        Display { live: Some(live.clone()), plain: Box::new(cli_output::eprint) }
    }

    /// Plain timestamped lines only, each given to `write` (a test's buffer).
    #[cfg(test)]
    pub(crate) fn plain(write: impl Fn(&str) + Send + Sync + 'static) -> Display {
        Display { live: None, plain: Box::new(write) }
    }

    /// One line of the story: a right-aligned verb, as cargo prints them;
    /// whole, also on a terminal: it goes to the scrollback, where a line
    /// cut at the width (an S3 URL) would be lost (issue 35). indicatif
    /// counts a wrapped line's rows when it draws the live line again under
    /// it; only the live line is cut ([`Display::live`]).
    pub(crate) fn line(&self, verb: &str, text: &str) {
        match &self.live {
            Some(live) => live.bar.println(format!("{verb:>12} {text}")),
            None => (self.plain)(&format!("{} {verb:>12} {text}\n", stamp(now_ms()))),
        }
    }

    /// What is in progress (terminal only).
    pub(crate) fn live(&self, text: &str) {
        if let Some(live) = &self.live {
            live.bar.set_message(fit(text, Self::width().saturating_sub(2 + 1)));
        }
    }

    /// The terminal's width in columns (at least 20).
    fn width() -> usize {
        usize::from(console::Term::stderr().size().1.max(20))
    }

    /// What is in progress, after a clock that counts from `start_ms`
    /// (unix milliseconds) each second (terminal only).
    pub(crate) fn live_since(&self, start_ms: i64, text: &str) {
        if let Some(live) = &self.live {
            let back = Duration::from_millis(u64::try_from(now_ms().saturating_sub(start_ms)).unwrap_or(0));
            let origin = Instant::now().checked_sub(back).unwrap_or_else(Instant::now);
            *live.origin.lock().unwrap_or_else(|e| e.into_inner()) = Some(origin);
            // The spinner, the clock (`59m 59s `) and a spare last column.
            live.bar.set_message(fit(text, Self::width().saturating_sub(2 + 8 + 1)));
        }
    }

    /// Removes the live line (every display of it: there is one).
    pub(crate) fn finish(&self) {
        if let Some(live) = &self.live {
            live.bar.finish_and_clear();
            let mut slot = LIVE.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref().is_some_and(|l| l.bar.is_finished()) {
                *slot = None;
            }
        }
    }
}

/// Asks `question` (`yes` answers it). Where nobody can answer, says to
/// pass --yes (exit 2).
pub(crate) async fn confirm<K: Console>(console: &K, question: &str, yes: bool) -> Result<Answer, ExitCode> {
    if yes {
        return Ok(Answer::Yes);
    }
    if !console.can_ask() {
        console.noteln(&format!(
            "error: {question} Standard input is not a terminal, so nobody can answer: pass --yes to go ahead."
        ));
        return Err(ExitCode::Error);
    }
    Ok(console.ask(question).await)
}

/// The one rule for an empty answer (`synth logs`, `events`, `status`): a
/// query of something that exists that found nothing says so in one line
/// on stderr (`what`: "no log lines since 2026-11-25T20:00:00Z") and is a
/// success (exit 0), so a script tells it from a stack that is not there
/// ([`not_found`], exit 3) by the code and a person by the line.
pub(crate) fn empty<K: Console>(console: &K, what: &str) -> ExitCode {
    console.noteln(what);
    ExitCode::Success
}

/// Prints `error: <e>` for something named that is not there (a stack, a
/// stack's logs, a node) and returns exit code 3.
pub(crate) fn not_found<K: Console>(console: &K, e: impl Show) -> ExitCode {
    console.noteln(&format!("error: {e}"));
    ExitCode::NotFound
}

/// Prints `error: <e>` and returns exit code 2 (an AWS error, a usage error).
pub(crate) fn fail<K: Console>(console: &K, e: impl Show) -> ExitCode {
    console.noteln(&format!("error: {e}"));
    ExitCode::Error
}
