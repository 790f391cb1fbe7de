//! `synth regions`: the supported regions.

use super::{ExitCode, output};
use crate::region::Region;

/// Arguments of `synth regions`.
#[derive(Debug, clap::Args)]
pub struct RegionsArgs {}

/// Runs `synth regions`.
pub(super) fn run(_args: &RegionsArgs) -> ExitCode {
    let text: String = Region::ALL.iter().map(|r| format!("{:<16}{}\n", r.code(), r.long_name())).collect();
    match output::write(None, &text) {
        Ok(()) => ExitCode::Success,
        Err(e) if output::is_broken_pipe(&e) => ExitCode::Success,
        Err(e) => {
            eprintln!("error: cannot write the region list: {e}");
            ExitCode::Error
        }
    }
}
