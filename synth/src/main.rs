//! `synth`: parses arguments, starts logging (stderr, `SYNTH_LOG` filter,
//! synth's own warnings by default),
//! runs the command and maps the result to an exit code. All logic is in the
//! library; `cli_output` makes every write to stdout and stderr fallible.

use std::io::IsTerminal;

/// What is logged without `SYNTH_LOG`.
const DEFAULT_LOG: &str = "synth=warn";

fn main() -> std::process::ExitCode {
    // synth's own warnings only by default: the AWS SDK's (a credentials
    // provider's multi-line `WARN ... ProviderError` dump) would come before
    // synth's one clean message saying the same; `SYNTH_LOG=debug` has them.
    cli_output::init_logging("SYNTH_LOG", DEFAULT_LOG, std::io::stderr().is_terminal());
    let code = match synth::cli::parse() {
        Ok(cli) => synth::cli::run(cli) as u8,
        Err(code) => code,
    };
    cli_output::exit::status(code)
}
