//! `e2e`: the end-to-end test harness. It runs the project's real binaries
//! against local stand-ins of everything they meet on EC2:
//!
//! - [`moto`]: moto server (SQS, Auto Scaling, CloudFormation, EC2, ...) as
//!   the local AWS, started from `tests/moto/launcher.py` in `.venv`
//!   ([`venv`] finds it), with SDK configs pointed at it;
//! - [`stack`]: a CloudFormation stack in moto from a blueprint built with
//!   `synth` in process, its outputs, resources and launch template user data;
//! - [`netns`]: one network namespace per node behind a bridge, so every
//!   node has its own IP address;
//! - [`imds`]: a per-node IMDSv2 stand-in (identity, addresses, user data);
//! - [`node`]: a simulated node (namespace, root directory, metadata) that
//!   runs `agent run --root DIR --no-mount` inside its namespace;
//! - [`cluster`]: all of the above for a blueprint and N workers;
//! - [`boot`]: a node booting from its user data: the agent package
//!   downloaded, checked and installed in a writable layer over this
//!   machine's filesystem, then the installed agent started;
//! - [`sshd`]: hosts with a real sshd each and the agent's files, for `trainer`;
//! - [`proxy`]: a TCP proxy a test can cut, to make one service unreachable;
//! - [`synth_cli`]: the `synth` program run against the local AWS.
//!
//! Everything is undone on `Drop`, also when a test panics. The harness needs
//! root and `ip` (iproute2); [`require_root`] fails with a clear message
//! otherwise.

pub mod boot;
pub mod cluster;
pub mod error;
pub mod imds;
pub mod moto;
pub mod netns;
pub mod node;
pub mod proc_cpu;
pub mod proxy;
pub mod scenario;
pub mod sshd;
pub mod stack;
pub mod synth_cli;
pub mod venv;

pub use cluster::Cluster;
pub use error::{Error, Report, Result, TestResult};
pub use imds::{Identity, Imds};
pub use moto::LocalAws;
pub use netns::Network;
pub use node::{AgentProcess, Node};
pub use stack::ClusterStack;

use std::path::PathBuf;

/// The repository root (the parent of `tests/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The MNIST fixture (`DL_MNIST_DIR`, made once by
/// `scripts/mnist-fixture` from a wheel), for tests that train.
pub fn mnist_dir() -> Result<PathBuf> {
    match std::env::var_os("DL_MNIST_DIR") {
        Some(dir) if std::path::Path::new(&dir).join("train-images-idx3-ubyte").exists() => Ok(PathBuf::from(dir)),
        _ => Err(Error::Setup(
            "DL_MNIST_DIR does not name the MNIST fixture: run `export DL_MNIST_DIR=$(scripts/mnist-fixture)` \
             (scripts/test does)"
                .into(),
        )),
    }
}

/// Fails unless the process runs as root: namespaces, bridges and mounts need it.
pub fn require_root() -> Result<()> {
    // The second number of /proc/self/status's `Uid:` line is the effective uid.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    if euid != Some("0") {
        return Err(Error::Setup(
            "the end-to-end tests need root (network namespaces, bridges, bind mounts); run them as root, as CI does"
                .into(),
        ));
    }
    Ok(())
}
