//! The harness's error type: which step of setting up a test failed, and why.

use std::path::PathBuf;

/// A harness step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The machine is not set up to run the tests (no root, no moto in `.venv`, ...).
    #[error("{0}")]
    Setup(String),
    /// A command exited with failure.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status and stderr.
        detail: String,
    },
    /// A file or socket operation failed.
    #[error("{what} ({path}): {source}")]
    Io {
        /// What the harness was doing.
        what: &'static str,
        /// The file, or the address.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A call to the local AWS (SDK or raw HTTP) failed.
    #[error("{call} failed: {detail}")]
    Aws {
        /// The operation.
        call: String,
        /// The error, with its cause chain.
        detail: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout {
        /// What did not happen.
        what: String,
        /// How long the harness waited.
        seconds: u64,
    },
    /// The local AWS answered something the harness did not expect.
    #[error("unexpected answer from {what}: {detail}")]
    Unexpected {
        /// The call or resource.
        what: String,
        /// What came back.
        detail: String,
    },
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] for `what` on `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { what, path, source }
    }

    /// An [`Error::Aws`] for `call`, with the whole cause chain of `e`
    /// (the SDK's Display alone says only "service error").
    pub fn aws(call: impl Into<String>, e: &(dyn std::error::Error + 'static)) -> Error {
        let mut detail = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            detail.push_str(": ");
            detail.push_str(&s.to_string());
            source = s.source();
        }
        Error::Aws { call: call.into(), detail }
    }
}

/// What a test returns: an [`Error`] shown by its message (libtest prints
/// a test's error with `Debug`, which would escape it).
pub struct Report(pub Error);

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Error> for Report {
    fn from(e: Error) -> Report {
        Report(e)
    }
}

/// The result type of a test using the harness.
pub type TestResult = std::result::Result<(), Report>;
