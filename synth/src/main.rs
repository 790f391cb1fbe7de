//! `synth`: parses arguments, starts logging (stderr, `SYNTH_LOG` filter),
//! runs the command and maps the result to an exit code. All logic is in the
//! library.

use clap::Parser;
use synth::cli::{Cli, run};
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("SYNTH_LOG").unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    std::process::ExitCode::from(run(cli) as u8)
}
