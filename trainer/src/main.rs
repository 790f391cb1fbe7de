//! `trainer`: launches training across the cluster and trains natively.
//!
//! Not built yet: see the "trainer launch" and "trainer train" issues. Until
//! then this binary says so and fails.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("trainer: not implemented yet");
    ExitCode::from(2)
}
