//! The process exit codes of every `trainer` subcommand, in one leaf
//! module that [`jobs`](crate::jobs) and [`train`](crate::train) both
//! import (neither imports the other for them, nor the crate root). They
//! are the three binaries' one convention, [`cli_output::exit`], under the
//! names the trainer's code uses.

/// Success.
pub(crate) const EXIT_OK: u8 = cli_output::exit::SUCCESS;
/// The checked thing failed (a rank failed, a host is unreachable, two
/// runs disagree).
pub(crate) const EXIT_FAILED: u8 = cli_output::exit::FAILED;
/// Usage or internal error, or output that could not be written.
pub(crate) const EXIT_USAGE: u8 = cli_output::exit::ERROR;
/// A job (`launch`, `train`) ended early because its stdout was closed by
/// the reader: 128 + SIGPIPE, what a shell shows for a tool that signal
/// ended. The commands that only print (`doctor`, `kill`, `bench`) end with 0.
pub(crate) const EXIT_STDOUT_CLOSED: u8 = cli_output::exit::STDOUT_CLOSED;
