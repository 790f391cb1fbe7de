//! `/etc/profile.d/deeplearning.sh` as the agent writes it: `export
//! NAME=VALUE` lines, values bare or in single quotes (`'\''` for a quote).
//! A non-interactive `ssh host cmd` does not source profile.d, so the
//! supervisor reads the file itself and hands `DEEPLEARNING_*`, `EFS_MOUNT`
//! and the node's NCCL/EFA environment (`NCCL_*`, `FI_*`: the agent's
//! `fabric` module says which and why) to the command.

use std::path::Path;

use crate::error::{Error, Result};

/// The file, as on a node.
pub const PATH: &str = "/etc/profile.d/deeplearning.sh";

/// The variables the command gets from the profile.
pub fn wanted(name: &str) -> bool {
    name.starts_with("DEEPLEARNING_") || name == "EFS_MOUNT" || fabric(name)
}

/// The NCCL/EFA environment among the profile's variables (what `trainer
/// doctor` shows per host).
pub fn fabric(name: &str) -> bool {
    name.starts_with("NCCL_") || name.starts_with("FI_")
}

/// The `export`ed variables of `text`, in file order. Lines that are not
/// `export NAME=VALUE` are skipped.
pub fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|rest| rest.split_once('='))
        .filter(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(name, value)| (name.to_owned(), unquote(value)))
        .collect()
}

/// Undoes the agent's quoting (`profile::quote` in the agent crate).
fn unquote(value: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '\\' if !quoted => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// The profile under `root`; empty when there is none (a host the agent has
/// not set up yet: the command still gets the torchrun variables).
pub fn read(root: &Path) -> Result<Vec<(String, String)>> {
    let path = node_contract::files::under(root, PATH);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(Error::Read { path, source }),
    }
}

/// `EFS_MOUNT` from the profile under `root` (`None` without one).
pub fn efs_mount(root: &Path) -> Option<String> {
    read(root).ok()?.into_iter().find(|(name, _)| name == "EFS_MOUNT").map(|(_, value)| value)
}

/// `EFS_MOUNT` from the environment (a login shell has sourced the
/// profile), else from the profile under `root`.
pub fn efs_mount_here(root: &Path) -> Option<String> {
    std::env::var("EFS_MOUNT").ok().filter(|v| !v.is_empty()).or_else(|| efs_mount(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_agent_writes() {
        let text = "# Written by the deeplearning agent\nexport DEEPLEARNING_CLUSTER='my cluster'\n\
                    export DEEPLEARNING_WORKERS_COUNT=3\nexport EFS_MOUNT='/mnt/it'\\''s'\nexport ='x'\nPATH=/bin\n";
        assert_eq!(
            parse(text),
            [
                ("DEEPLEARNING_CLUSTER".to_owned(), "my cluster".to_owned()),
                ("DEEPLEARNING_WORKERS_COUNT".to_owned(), "3".to_owned()),
                ("EFS_MOUNT".to_owned(), "/mnt/it's".to_owned()),
            ]
        );
        assert!(wanted("EFS_MOUNT") && wanted("DEEPLEARNING_X") && !wanted("PATH"));
        assert!(wanted("NCCL_SOCKET_IFNAME") && wanted("FI_PROVIDER") && !fabric("EFS_MOUNT"));
        assert_eq!(parse("export NCCL_SOCKET_IFNAME==ens5\n"), [("NCCL_SOCKET_IFNAME".to_owned(), "=ens5".to_owned())]);
    }
}
