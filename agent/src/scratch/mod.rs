//! The scratch volume on local NVMe (node config `scratch`,
//! docs/ARCHITECTURE.md, "Scratch on local NVMe"): every node whose
//! instance type has NVMe instance store gets one striped volume mounted at
//! `scratch.mount` (default `/scratch`) and exported as
//! `DEEPLEARNING_SCRATCH` in the profile; a node without instance store
//! gets none and says so.
//!
//! [`prepare`] is the boot step, taken at every start of the agent (the
//! instance store is blank again after a stop and start, and the agent
//! assembles it again):
//! [`discovery`] reads the node's block devices and mounts under the
//! agent's root, [`plan`] decides (pure: reuse the image's own mount of the
//! instance store, keep what is mounted already, mount an existing array,
//! stripe the free drives, or nothing), and [`executor`] carries it out
//! with the programs behind [`commands`]. Only drives whose NVMe model says
//! "instance store" are ever formatted, never an EBS volume, and never a
//! mounted device or one holding a file system that is not ours.
//!
//! [`environment`] is the profile's `DEEPLEARNING_SCRATCH` line, given only
//! while the volume is really mounted.

pub(crate) mod commands;
pub mod discovery;
pub(crate) mod executor;
pub(crate) mod plan;

use std::path::{Path, PathBuf};

use node_contract::NodeConfig;
use node_contract::data::Scratch;

pub use commands::{CommandFailed, Commands, System};
pub use discovery::{Found, discover};
pub use plan::Plan;

use crate::fabric::Variable;
use node_contract::files::under;

/// What the node has after [`prepare`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The volume is mounted at the scratch mount point.
    Mounted {
        /// What it is and how it got there, for the log.
        how: String,
    },
    /// The node has no instance store: no scratch volume.
    Absent {
        /// Why, for the log.
        why: String,
    },
}

/// The scratch volume could not be made; every variant says what to look at.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    /// A file or directory of `/sys` or `/proc` could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// What.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The mount point could not be made or given to the user.
    #[error("cannot prepare the mount point {path}: {source}")]
    Write {
        /// What.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A program failed; the error carries its stderr.
    #[error(transparent)]
    Command(#[from] CommandFailed),
    /// The mount point or the drives are used by something not ours.
    #[error("{why}")]
    Blocked {
        /// What is in the way.
        why: String,
    },
    /// A device over the instance store holds a file system that is not ours: it is not formatted.
    #[error(
        "{device} holds a {fstype} file system labelled {label:?} that the agent did not make; it is not formatted"
    )]
    Foreign {
        /// The device.
        device: String,
        /// Its file system.
        fstype: String,
        /// Its label.
        label: String,
    },
    /// Reading the default user failed.
    #[error(transparent)]
    Files(Box<crate::files::FilesError>),
}

/// Makes the scratch volume of `scratch` under `root`: discover, plan,
/// execute. Idempotent: a second run finds the volume mounted and does
/// nothing. `default_user` gets the mount point.
pub fn prepare(
    root: &Path,
    scratch: &Scratch,
    default_user: &str,
    commands: &impl Commands,
) -> Result<(Outcome, Plan), ScratchError> {
    let target = under(root, &scratch.mount);
    let found = discover(root)?;
    let plan = plan::plan(&found, &target);
    let outcome = executor::execute(root, &target, default_user, &plan, commands)?;
    Ok((outcome, plan))
}

/// The profile's `DEEPLEARNING_SCRATCH` line: `Some` when the config asks
/// for scratch and the volume is mounted at its mount point now.
pub fn environment(root: &Path, config: &NodeConfig) -> Option<Variable> {
    let scratch = config.scratch.as_ref()?;
    let found = discover(root).ok()?;
    matches!(plan::plan(&found, &under(root, &scratch.mount)), Plan::AlreadyMounted { .. })
        .then(|| crate::files::profile::scratch(&scratch.mount))
}

#[cfg(test)]
mod tests;
