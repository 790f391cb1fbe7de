//! The blueprint argument `build`, `validate`, `image`, `deploy` and `diff`
//! share: a file or standard input, read with a bound, and `--region`.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::exit::ExitCode;
use crate::region::Region;

/// The blueprint and region arguments `build` and `validate` share.
#[derive(Debug, clap::Args)]
pub struct Input {
    /// The blueprint file (YAML); `-` reads standard input.
    #[arg(value_name = "BLUEPRINT")]
    pub blueprint: PathBuf,

    /// Build for this region only (us-east-1, us-east-2, us-west-2, eu-west-1,
    /// ap-southeast-2). Without it, the blueprint's `region` is used; a
    /// blueprint without one gives a template that works in all five.
    /// `synth deploy` takes a list, most wanted first (us-east-1,us-west-2):
    /// a create that meets no capacity goes on to the next.
    #[arg(long, short = 'r', value_name = "REGION", value_delimiter = ',')]
    pub region: Vec<Region>,
}

/// The largest blueprint read: real ones are a few KB; a stream that goes on
/// past this (`synth validate - < /dev/zero`) is stopped here, not read into
/// memory until it runs out.
pub const MAX_BLUEPRINT_BYTES: u64 = 1024 * 1024;

impl Input {
    /// The name used in messages.
    pub(super) fn display_path(&self) -> String {
        if self.is_stdin() { "<stdin>".to_owned() } else { self.blueprint.display().to_string() }
    }

    /// The one region of `--region`; a list is refused (only `synth
    /// deploy` takes one, [`Input::regions`]).
    pub(super) fn region(&self) -> Result<Option<Region>, String> {
        match self.region.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            more => Err(format!(
                "error: --region {}: this command takes one region; only `synth deploy` takes a list to fail over",
                more.iter().map(|r| r.code()).collect::<Vec<_>>().join(",")
            )),
        }
    }

    /// The regions of `--region`, in order, each once.
    pub(super) fn regions(&self) -> Result<Vec<Region>, String> {
        let mut out: Vec<Region> = Vec::new();
        for r in &self.region {
            if out.contains(r) {
                return Err(format!("error: --region names {r} twice; name each region once, most wanted first"));
            }
            out.push(*r);
        }
        Ok(out)
    }

    fn is_stdin(&self) -> bool {
        self.blueprint == Path::new("-")
    }

    /// The blueprint's text, at most [`MAX_BLUEPRINT_BYTES`] of UTF-8.
    pub(super) fn read(&self) -> Result<String, ReadError> {
        let path = self.display_path();
        let mut bytes = Vec::new();
        let result = if self.is_stdin() {
            std::io::stdin().lock().take(MAX_BLUEPRINT_BYTES + 1).read_to_end(&mut bytes)
        } else {
            std::fs::File::open(&self.blueprint).and_then(|f| f.take(MAX_BLUEPRINT_BYTES + 1).read_to_end(&mut bytes))
        };
        result.map_err(|e| ReadError {
            message: format!("error: cannot read the blueprint {path}: {e}"),
            code: ExitCode::Error,
        })?;
        // What was read is not a blueprint: the blueprint's problem (exit 1,
        // as a tab or a syntax error is), said with where.
        if bytes.len() as u64 > MAX_BLUEPRINT_BYTES {
            return Err(ReadError {
                message: format!(
                    "error: {path}: the blueprint is larger than {} KiB (reading stopped there); a blueprint is a few \
                     KB of YAML",
                    MAX_BLUEPRINT_BYTES / 1024
                ),
                code: ExitCode::Invalid,
            });
        }
        tracing::debug!(path = %path, bytes = bytes.len(), "read the blueprint");
        String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let before = String::from_utf8_lossy(&bytes[..at]);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            ReadError {
                message: format!(
                    "error: {path}:{line}:{column}: the blueprint is not UTF-8 text (byte {at}, 0x{:02x}, is not); \
                     save it as UTF-8 (a blueprint is text, not a binary file)",
                    bytes[at]
                ),
                code: ExitCode::Invalid,
            }
        })
    }

    /// The blueprint file's identity, so that `-o` can refuse to overwrite it.
    pub(super) fn metadata(&self) -> Option<std::fs::Metadata> {
        if self.is_stdin() {
            use std::os::fd::AsFd;
            let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
            std::fs::File::from(fd).metadata().ok()
        } else {
            std::fs::metadata(&self.blueprint).ok()
        }
    }
}

/// Why the blueprint could not be read: the message, and the exit code
/// (2 when the file could not be read, 1 when what was read is no
/// blueprint: too large, not text).
#[derive(Debug)]
pub(super) struct ReadError {
    pub message: String,
    pub code: ExitCode,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
