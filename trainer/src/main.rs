//! `trainer`: parses arguments, starts logging (stderr; `TRAINER_LOG`
//! filter, default `warn`), runs the command and exits with its code. All
//! logic is in the library.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("TRAINER_LOG").unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        // Colours only on a terminal: rank logs on EFS stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = trainer::Cli::parse();
    match trainer::run(cli) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("trainer: error: {e:#}");
            std::process::ExitCode::from(trainer::EXIT_USAGE)
        }
    }
}
