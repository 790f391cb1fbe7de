//! `agent`: placeholder main while the library is being written.

fn main() -> std::process::ExitCode {
    eprintln!("agent: not implemented yet");
    std::process::ExitCode::from(2)
}
