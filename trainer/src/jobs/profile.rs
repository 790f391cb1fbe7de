//! `/etc/profile.d/deeplearning.sh`, read with the node contract's reader
//! (`node_contract::files::profile`, beside the agent's writer and its
//! quoting). A non-interactive `ssh host cmd` does not source profile.d, so the
//! supervisor reads the file itself and hands `DEEPLEARNING_*`, `EFS_MOUNT`
//! and the node's NCCL/EFA environment (`NCCL_*`, `FI_*`: the agent's
//! `fabric` module says which and why) to the command.

use std::path::Path;

use crate::error::{Error, Result};

use node_contract::files::profile::EFS_MOUNT_VAR;
pub(crate) use node_contract::files::profile::{PATH, parse};

/// The variables the command gets from the profile.
pub(crate) fn wanted(name: &str) -> bool {
    name.starts_with("DEEPLEARNING_") || name == EFS_MOUNT_VAR || fabric(name)
}

/// The NCCL/EFA environment among the profile's variables (what `trainer
/// doctor` shows per host).
pub(crate) fn fabric(name: &str) -> bool {
    name.starts_with("NCCL_") || name.starts_with("FI_")
}

/// The profile under `root`; empty when there is none (a host the agent has
/// not set up yet: the command still gets the torchrun variables).
pub(crate) fn read(root: &Path) -> Result<Vec<(String, String)>> {
    let path = node_contract::files::under(root, PATH);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(Error::Read { path, source }),
    }
}

/// `EFS_MOUNT` from the profile under `root` (`None` without one).
pub(crate) fn efs_mount(root: &Path) -> Option<String> {
    read(root).ok()?.into_iter().find(|(name, _)| name == EFS_MOUNT_VAR).map(|(_, value)| value)
}

/// `EFS_MOUNT` from the environment (a login shell has sourced the
/// profile), else from the profile under `root`.
pub(crate) fn efs_mount_here(root: &Path) -> Option<String> {
    std::env::var(EFS_MOUNT_VAR).ok().filter(|v| !v.is_empty()).or_else(|| efs_mount(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_variables_a_command_gets() {
        // The format itself is the node contract's, tested there with the agent's writer.
        assert!(wanted("EFS_MOUNT") && wanted("DEEPLEARNING_X") && !wanted("PATH"));
        assert!(wanted("NCCL_SOCKET_IFNAME") && wanted("FI_PROVIDER") && !fabric("EFS_MOUNT"));
    }
}
