//! `synth regions`: the supported regions.

use crate::exit::{ExitCode, printed};
use crate::region::Region;

/// Arguments of `synth regions`.
#[derive(Debug, clap::Args)]
pub struct RegionsArgs {}

/// Runs `synth regions`.
pub(super) fn run(_args: &RegionsArgs) -> ExitCode {
    let text: String = Region::ALL.iter().map(|r| format!("{:<16}{}\n", r.code(), r.long_name())).collect();
    printed(cli_output::print(&text), "the region list", ExitCode::Success)
}
