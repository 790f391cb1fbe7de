//! `synth validate`: every problem at once, nothing else printed on stdout but a summary.

use super::build::{Compiled, compile};
use super::{ExitCode, Input};

/// Arguments of `synth validate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 the blueprint builds, 1 it has problems (all are listed), 2 usage or internal error."
)]
pub struct ValidateArgs {
    #[command(flatten)]
    input: Input,
}

/// Runs `synth validate`.
pub(super) fn run(args: &ValidateArgs) -> ExitCode {
    match compile(&args.input) {
        Compiled::Ok { json, resources, notes } => {
            eprint!("{notes}");
            let regions = match args.input.region {
                Some(r) => r.to_string(),
                None => "the blueprint's region, or all five supported regions".to_owned(),
            };
            println!(
                "ok: {} builds a template for {regions} ({resources} resources, {} bytes)",
                args.input.display_path(),
                json.len()
            );
            ExitCode::Success
        }
        Compiled::Failed(code) => code,
    }
}
