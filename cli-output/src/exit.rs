//! The exit codes of all three binaries (`synth`, `agent`, `trainer`), as
//! named constants (cfn-guard, ripgrep), defined once so that a script
//! reads 0, 1 and 2 the same way whichever binary it runs; the README's
//! "Exit codes" table documents them. A binary may add codes of its own
//! above these (synth's 3 for "not found"), never give one of these another
//! meaning.
//!
//! - [`SUCCESS`]: the command did what was asked.
//! - [`FAILED`]: the checked thing failed: the input the command checks was
//!   refused (a blueprint, a manifest, a node config), or the check found a
//!   problem (a stack that failed, a GPU check, a rank that failed, two
//!   runs that differ).
//! - [`ERROR`]: a usage or internal error: arguments that do not parse, a
//!   file that cannot be read or written, an AWS error, output that could
//!   not be written.
//! - [`INTERRUPTED`] and [`STDOUT_CLOSED`]: stopped early by Ctrl-C, or by
//!   the reader of stdout going away, as a shell shows a tool that signal
//!   ended (128 + the signal's number).

/// The command did what was asked.
pub const SUCCESS: u8 = 0;
/// The checked thing failed (the reason is printed).
pub const FAILED: u8 = 1;
/// A usage or internal error, or output that could not be written.
pub const ERROR: u8 = 2;
/// Stopped by Ctrl-C: 128 + SIGINT.
pub const INTERRUPTED: u8 = 128 + 2;
/// A job stopped early because the reader of its stdout went away: 128 +
/// SIGPIPE. (A command that only prints ends with [`SUCCESS`] then.)
pub const STDOUT_CLOSED: u8 = 128 + 13;

/// The process's exit status for `code`: [`ERROR`] instead when a report
/// on stderr could not be written ([`crate::exit_code`]). What every
/// `main.rs` ends with.
pub fn status(code: u8) -> std::process::ExitCode {
    std::process::ExitCode::from(crate::exit_code(code))
}
