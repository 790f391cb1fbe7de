//! The terminal the lifecycle flows talk to, as a small trait
//! ([`Console`]): data to standard output, the story and errors to standard
//! error, the progress display, the confirmation prompt and Ctrl-C.
//!
//! The command line implements it with `cli-output` (a reader that went
//! away or a full disk is answered as `synth build` answers it), the real
//! terminal and the real Ctrl-C; unit tests implement it in memory
//! (`super::fake`), with an answer or an interruption injected where the
//! flow asks.

use std::fmt::Display as Show;
use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;

use cli_output::Closed;
use indicatif::{ProgressBar, ProgressStyle};

use super::time::{now_ms, stamp};
use crate::exit::ExitCode;

/// An answer at a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Go ahead.
    Yes,
    /// Anything else, or end of input.
    No,
}

/// Where a flow writes, and whom it asks.
pub trait Console {
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

/// Progress on stderr: a live line on a terminal, plain timestamped lines otherwise.
pub struct Display {
    bar: Option<ProgressBar>,
    plain: Writer,
}

impl Default for Display {
    fn default() -> Self {
        Display::new()
    }
}

impl Display {
    /// A live line when stderr is a terminal.
    pub fn new() -> Display {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Display { bar, plain: Box::new(cli_output::eprint) }
    }

    /// Plain timestamped lines only, each given to `write` (a test's buffer).
    pub fn plain(write: impl Fn(&str) + Send + Sync + 'static) -> Display {
        Display { bar: None, plain: Box::new(write) }
    }

    /// One line of the story: a right-aligned verb, as cargo prints them.
    pub fn line(&self, verb: &str, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("{verb:>12} {text}")),
            None => (self.plain)(&format!("{} {verb:>12} {text}\n", stamp(now_ms()))),
        }
    }

    /// What is in progress (terminal only).
    pub fn live(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(text.to_owned());
        }
    }

    /// Removes the live line.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Asks `question` (`yes` answers it). Where nobody can answer, says to
/// pass --yes (exit 2).
pub async fn confirm<K: Console>(console: &K, question: &str, yes: bool) -> Result<Answer, ExitCode> {
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
pub fn empty<K: Console>(console: &K, what: &str) -> ExitCode {
    console.noteln(what);
    ExitCode::Success
}

/// Prints `error: <e>` for something named that is not there (a stack, a
/// stack's logs, a node) and returns exit code 3.
pub fn not_found<K: Console>(console: &K, e: impl Show) -> ExitCode {
    console.noteln(&format!("error: {e}"));
    ExitCode::NotFound
}

/// Prints `error: <e>` and returns exit code 2 (an AWS error, a usage error).
pub fn fail<K: Console>(console: &K, e: impl Show) -> ExitCode {
    console.noteln(&format!("error: {e}"));
    ExitCode::Error
}
