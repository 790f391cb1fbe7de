//! On the master only: the default user's SSH client setup for reaching the
//! nodes. The cluster's private key as `~/.ssh/id_ed25519_deeplearning`
//! (0600) with its `.pub`, and a managed block in `~/.ssh/config`:
//!
//! ```text
//! Host deeplearning-*
//!   IdentityFile ~/.ssh/id_ed25519_deeplearning
//!   StrictHostKeyChecking yes
//! ```
//!
//! Host keys are verified against the known hosts the agent writes, never
//! skipped (`StrictHostKeyChecking yes`, not `no`).

use std::path::PathBuf;

use super::{FilesError, home_path};

/// The private key, relative to the user's home.
pub const IDENTITY_IN_HOME: &str = ".ssh/id_ed25519_deeplearning";
/// The client config, relative to the user's home.
pub const CONFIG_IN_HOME: &str = ".ssh/config";

/// `~user/.ssh/id_ed25519_deeplearning`.
pub fn identity_path(user: &str) -> PathBuf {
    home_path(user, IDENTITY_IN_HOME)
}

/// `~user/.ssh/id_ed25519_deeplearning.pub`.
pub fn public_path(user: &str) -> PathBuf {
    home_path(user, &format!("{IDENTITY_IN_HOME}.pub"))
}

/// `~user/.ssh/config`.
pub fn config_path(user: &str) -> PathBuf {
    home_path(user, CONFIG_IN_HOME)
}

/// The private key file and its public key line, from the OpenSSH private key.
pub fn identity(private_openssh: &str) -> Result<(String, String), FilesError> {
    let key = ssh_key::PrivateKey::from_openssh(private_openssh)
        .map_err(|e| FilesError::BadClusterKey { reason: format!("the cluster private key does not parse: {e}") })?;
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| FilesError::BadClusterKey { reason: format!("cannot encode the cluster public key: {e}") })?;
    let mut private = private_openssh.trim_end().to_owned();
    private.push('\n');
    Ok((private, format!("{public}\n")))
}

/// The body of our block in `~/.ssh/config`.
pub fn config_body() -> String {
    format!("Host deeplearning-*\n  IdentityFile ~/{IDENTITY_IN_HOME}\n  StrictHostKeyChecking yes\n")
}
