//! How the three binaries (`synth`, `agent`, `trainer`) write to standard
//! output and standard error, so that no write can panic and no failed write
//! goes unnoticed.
//!
//! `println!` and `eprintln!` panic when the write fails: `synth validate x |
//! true` (the reader is gone: EPIPE) or `trainer doctor --local > /dev/full`
//! (ENOSPC) ended with a backtrace and exit 101. So does `tracing-subscriber`,
//! which reports its own failed writes with `eprintln!` unless told not to.
//! The rules here, the same in every binary:
//!
//! - **stdout**: [`print`] returns [`Closed::ReaderGone`] when the reader has
//!   gone away (EPIPE): the caller stops writing and ends quietly, as Unix
//!   tools do. Any other error is [`Closed::Failed`]: the caller says so on
//!   stderr and exits 2.
//! - **stderr**: [`eprint`] (and the macros [`errln!`]) never fail and never
//!   panic. A closed stderr is ignored; any other failure is remembered, and
//!   [`exit_code`] turns the process's exit code into 2 at the end, because
//!   a report the user never saw is not a success.
//! - **logs**: [`init_logging`] sends `tracing` to the same stderr writer,
//!   with tracing's own error printing off.
//! - **errors**: [`report`] prints an error and its causes, one per line,
//!   skipping a cause whose text the line above already holds (thiserror
//!   messages often embed their source: "cannot read X: No such file" would
//!   otherwise be followed by "No such file" again).
//!
//! Rust ignores SIGPIPE, so a closed pipe arrives as EPIPE on the write; the
//! binaries keep it that way instead of restoring the default signal, which
//! would also kill `trainer launch` when one of its ssh children exits early.

pub mod exit;
pub mod testkit;

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code when a write to stdout or stderr failed (other than a closed
/// pipe): the convention's [`exit::ERROR`].
pub const EXIT_WRITE_FAILED: u8 = exit::ERROR;

/// Set once a write to stderr failed for another reason than a closed pipe.
static STDERR_FAILED: AtomicBool = AtomicBool::new(false);

/// Why [`print`] stopped.
#[derive(Debug)]
pub enum Closed {
    /// The reader went away (EPIPE): stop writing, end quietly.
    ReaderGone,
    /// Any other error (a full disk, an I/O error): report it, exit 2.
    Failed(io::Error),
}

impl Closed {
    fn from(e: io::Error) -> Closed {
        if e.kind() == io::ErrorKind::BrokenPipe { Closed::ReaderGone } else { Closed::Failed(e) }
    }

    /// Says on stderr what could not be written (`what`: "the template",
    /// "the status"), unless the reader is simply gone.
    pub fn report(&self, what: &str) {
        if let Closed::Failed(e) = self {
            eprint(&format!("error: cannot write {what} to standard output: {e}\n"));
        }
    }
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Closed::ReaderGone => f.write_str("standard output was closed by its reader"),
            Closed::Failed(e) => write!(f, "cannot write to standard output: {e}"),
        }
    }
}

impl std::error::Error for Closed {}

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> Result<(), Closed> {
    write_flush(&mut io::stdout().lock(), text.as_bytes()).map_err(Closed::from)
}

/// Prints a command's report and returns its exit code `code`: a reader
/// that went away does not change the answer (`trainer doctor | head -1`
/// still says whether the check passed); any other failure is the error.
pub fn print_report(text: &str, code: u8) -> Result<u8, Closed> {
    match print(text) {
        Ok(()) | Err(Closed::ReaderGone) => Ok(code),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to stdout and flushes them (output relayed from other processes).
pub fn print_bytes(bytes: &[u8]) -> Result<(), Closed> {
    write_flush(&mut io::stdout().lock(), bytes).map_err(Closed::from)
}

/// Writes `text` to stderr; never fails. A failure other than a closed pipe
/// is remembered for [`exit_code`].
pub fn eprint(text: &str) {
    eprint_bytes(text.as_bytes());
}

/// [`eprint`] for bytes.
pub fn eprint_bytes(bytes: &[u8]) {
    if let Err(e) = write_flush(&mut io::stderr().lock(), bytes) {
        note_stderr_error(&e);
    }
}

fn write_flush(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    out.write_all(bytes)?;
    out.flush()
}

fn note_stderr_error(e: &io::Error) {
    if e.kind() != io::ErrorKind::BrokenPipe {
        STDERR_FAILED.store(true, Ordering::Relaxed);
    }
}

/// Whether a write to stderr failed (other than a closed pipe).
pub fn stderr_failed() -> bool {
    STDERR_FAILED.load(Ordering::Relaxed)
}

/// The exit code to end with: `code`, or [`EXIT_WRITE_FAILED`] when a
/// report on stderr could not be written.
pub fn exit_code(code: u8) -> u8 {
    if stderr_failed() && code != EXIT_WRITE_FAILED { EXIT_WRITE_FAILED } else { code }
}

/// `eprint!` that never panics (see [`eprint`]).
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::eprint(&format!($($arg)*)) };
}

/// `eprintln!` that never panics (see [`eprint`]).
#[macro_export]
macro_rules! errln {
    () => { $crate::eprint("\n") };
    ($($arg:tt)*) => { $crate::eprint(&format!("{}\n", format_args!($($arg)*))) };
}

/// `println!` that returns [`Closed`] instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::print(&format!("{}\n", format_args!($($arg)*))) };
}

/// Parses the command line like `P::parse()`, but a `--help` or an error
/// message that cannot be written does not go unnoticed: the error is the
/// exit code to end with (0 after `--help` or `--version`, 2 for a usage
/// error or a failed write; a closed pipe after `--help` is still 0).
pub fn parse<P: clap::Parser>() -> Result<P, u8> {
    P::try_parse().map_err(|e| {
        let code = if e.use_stderr() { exit::ERROR } else { exit::SUCCESS };
        match e.print() {
            Ok(()) => code,
            Err(w) if w.kind() == io::ErrorKind::BrokenPipe => code,
            Err(_) => EXIT_WRITE_FAILED,
        }
    })
}

/// An error and its causes, one per line (`caused by: ...`), without a
/// cause whose text is already in what is printed above it.
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str("\n  caused by: ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

/// The stderr writer for `tracing`: the same rules as [`eprint`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stderr().write(buf).inspect_err(note_stderr_error)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush().inspect_err(note_stderr_error)
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Self::Writer {
        Stderr
    }
}

/// Starts `tracing` on stderr: the filter from the environment variable
/// `env` (for example `SYNTH_LOG=debug`), else `default`; colours when
/// `ansi`. tracing's own complaints about failed writes (an `eprintln!`,
/// which would panic on a broken stderr) are off: [`Stderr`] records them.
pub fn init_logging(env: &str, default: &str, ansi: bool) {
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry().with(stderr_layer(env, default, ansi)).init();
}

/// The layer [`init_logging`] starts, for a program that adds layers of its
/// own (the agent also writes its lines to its log spool).
pub fn stderr_layer<S>(env: &str, default: &str, ansi: bool) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    tracing_subscriber::fmt::layer()
        .with_writer(Stderr)
        .with_ansi(ansi)
        .log_internal_errors(false)
        .with_filter(env_filter(env, default))
}

/// The filter from the environment variable `env`, else `default`.
pub fn env_filter(env: &str, default: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_env(env).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_skips_causes_already_in_the_message() {
        #[derive(Debug)]
        struct Outer(io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot read /x: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(report(&e), "cannot read /x: entity not found");

        #[derive(Debug)]
        struct Wrapper(Outer);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the node config is not usable")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrapper(Outer(io::Error::from(io::ErrorKind::NotFound)));
        assert_eq!(report(&e), "the node config is not usable\n  caused by: cannot read /x: entity not found");
    }

    #[test]
    fn a_failed_stderr_turns_success_into_2() {
        assert_eq!(exit_code(0), 0);
        STDERR_FAILED.store(true, Ordering::Relaxed);
        assert_eq!(exit_code(0), EXIT_WRITE_FAILED);
        assert_eq!(exit_code(1), EXIT_WRITE_FAILED);
        STDERR_FAILED.store(false, Ordering::Relaxed);
    }
}
