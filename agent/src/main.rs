//! `agent`: parses arguments, starts logging (stderr and, for `agent run`,
//! the CloudWatch Logs spool; `AGENT_LOG` filter, default `info`), runs the command, maps the result to an exit code. All
//! logic is in the library; `cli_output` makes every write fallible.

use std::io::IsTerminal;

fn main() -> std::process::ExitCode {
    agent::logs::writer::init_logging("AGENT_LOG", "info", std::io::stderr().is_terminal());
    let code = match cli_output::parse::<agent::cli::Cli>() {
        Ok(cli) => agent::cli::main(cli),
        Err(code) => code,
    };
    cli_output::exit::status(code)
}
