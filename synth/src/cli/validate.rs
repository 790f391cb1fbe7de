//! `synth validate`: every problem at once, on stderr; stdout stays empty,
//! and the exit code is the answer.

use cli_output::{err, errln};

use super::build::{Compiled, Doing, agent_note, compile};
use super::input::Input;
use crate::exit::ExitCode;
use crate::region::Region;

/// Arguments of `synth validate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Everything goes to stderr: the problems, the warnings, and on success one line naming the regions the template is for.\n\nExit codes: 0 the blueprint builds, 1 it has problems (all are listed), 2 usage or internal error."
)]
pub struct ValidateArgs {
    #[command(flatten)]
    input: Input,
}

/// Runs `synth validate`.
pub(super) fn run(args: &ValidateArgs) -> ExitCode {
    match compile(&args.input) {
        Compiled::Ok { json, resources, notes, region, summary, missing_agent } => {
            err!("{notes}");
            if let Some(image) = missing_agent {
                err!("{}", agent_note(&image, region, Doing::Validate));
            }
            let regions = match region {
                Some(r) => r.to_string(),
                None => format!(
                    "all five supported regions: {}",
                    Region::ALL.iter().map(|r| r.code()).collect::<Vec<_>>().join(", ")
                ),
            };
            errln!(
                "ok: {} builds a template for {regions} ({resources} resources, {} bytes)",
                args.input.display_path(),
                json.len()
            );
            for line in summary {
                errln!("    {line}");
            }
            ExitCode::Success
        }
        Compiled::Failed(code) => code,
    }
}
