//! `agent`: the node bootstrap daemon baked into the AMI.
//!
//! Not built yet: issue "agent: every node bootstraps itself" builds it on the
//! node contract (`node-contract` crate) that `synth` already writes into each
//! launch template's user data. Until then this binary says so and fails, so
//! that nobody mistakes it for a working agent.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("agent: not implemented yet (the node contract it will read is in the node-contract crate)");
    ExitCode::from(2)
}
