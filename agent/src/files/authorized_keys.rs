//! The default user's `~/.ssh/authorized_keys`: the cluster's public key in
//! our managed block, so the master (which holds the private key) reaches
//! every node as that user without agent forwarding. Keys the user or the
//! image put there (the EC2 key pair) stay outside the block.
//!
//! Mode 0600 in a 0700 `~/.ssh`, both owned by the user, as sshd's
//! `StrictModes` requires.

use std::path::PathBuf;

use super::error::FilesError;
use super::known_hosts;
use super::paths::home_path;

/// The file, relative to the user's home.
pub(crate) const IN_HOME: &str = ".ssh/authorized_keys";

/// The file for `user`, as a `~user/...` path (resolved against passwd when applied).
pub(crate) fn path(user: &str) -> PathBuf {
    home_path(user, IN_HOME)
}

/// The body of our block.
pub(crate) fn body(cluster_public_key: &str) -> Result<String, FilesError> {
    let key = known_hosts::public_key(cluster_public_key).map_err(|reason| FilesError::BadClusterKey { reason })?;
    Ok(format!("{key} deeplearning-cluster\n"))
}
