//! How `synth` ends: the exit codes every command returns, as named
//! constants (cfn-guard, ripgrep), and how printing data decides one. Its own module, beside [`crate::cli`]
//! and [`crate::deploy`], because the lifecycle flows in `deploy` decide
//! them and the command line only passes them on.

/// How `synth` ends: the three binaries' convention
/// ([`cli_output::exit`]) for 0, 1, 2 and 130, and one code of synth's own
/// above them, 3 for "not found".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    /// Everything worked.
    Success = cli_output::exit::SUCCESS,
    /// The checked thing failed: the blueprint has problems (they were
    /// printed), the stack failed, an update was refused, or the capacity
    /// check found a blocker.
    Invalid = cli_output::exit::FAILED,
    /// A usage error or an internal error (a file that cannot be read or
    /// written, a bug), or an AWS error (no credentials, access denied,
    /// throttled).
    Error = cli_output::exit::ERROR,
    /// What was named is not there: no stack of that name in the region
    /// (`status`, `events`, `outputs`, `ssh`, `delete`), no log group of a
    /// stack of that name (`logs`), no node of that name among the nodes
    /// with logs (`logs --node`). A query of something that exists with an
    /// empty answer (no lines since then, no stacks in the region) is
    /// [`ExitCode::Success`], said in one line on stderr ([`crate::deploy::console::empty`]).
    NotFound = 3,
    /// Ctrl-C stopped watching a stack (the stack goes on).
    Interrupted = cli_output::exit::INTERRUPTED,
}

/// How a command that printed data on stdout ends: `code` when it was
/// written or its reader went away (`synth build x | head`, `synth events x
/// | head`: not a failure); any other write error (a full disk) is said on
/// stderr (`what`: "the template") and is exit 2.
pub(crate) fn printed(result: Result<(), cli_output::Closed>, what: &str, code: ExitCode) -> ExitCode {
    match result {
        Ok(()) | Err(cli_output::Closed::ReaderGone) => code,
        Err(closed) => {
            closed.report(what);
            ExitCode::Error
        }
    }
}
