//! `trainer`: parses arguments, starts logging (stderr; `TRAINER_LOG`
//! filter, default `warn`), runs the command and exits with its code. All
//! logic is in the library; `cli_output` makes every write fallible.

use std::io::IsTerminal;

fn main() -> std::process::ExitCode {
    // Colours only on a terminal: rank logs on EFS stay plain text.
    cli_output::init_logging("TRAINER_LOG", "warn", std::io::stderr().is_terminal());
    let code = match cli_output::parse::<trainer::Cli>() {
        Ok(cli) => trainer::main(cli),
        Err(code) => code,
    };
    cli_output::exit::status(code)
}
