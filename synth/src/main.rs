//! `synth`: parses arguments, starts logging (stderr, `SYNTH_LOG` filter),
//! runs the command and maps the result to an exit code. All logic is in the
//! library; `cli_output` makes every write to stdout and stderr fallible.

use std::io::IsTerminal;

fn main() -> std::process::ExitCode {
    cli_output::init_logging("SYNTH_LOG", "warn", std::io::stderr().is_terminal());
    let code = match cli_output::parse::<synth::cli::Cli>() {
        Ok(cli) => synth::cli::run(cli) as u8,
        Err(code) => code,
    };
    std::process::ExitCode::from(cli_output::exit_code(code))
}
