//! The files the agent leaves on every node for `trainer` (and users) to
//! read, defined once: where each one is, what it holds, and the writer's
//! and the reader's function side by side, each pair with a round-trip test
//! (docs/ARCHITECTURE.md, "Files every node ends with").
//!
//! - [`under`]: where a node path (`/opt/deeplearning/workers`) is under a
//!   filesystem root (`/` on a node, a temporary directory in tests). The
//!   agent writes and the trainer reads every path through it.
//! - [`workers`]: `/opt/deeplearning/workers`, one alias per line.
//! - [`hostfile`]: `/opt/deeplearning/hostfile`, `alias slots=N` per line,
//!   and the reader of both (and of a user's hosts file).
//! - [`profile`]: `/etc/profile.d/deeplearning.sh`, `export NAME=VALUE`
//!   lines, and the shell quoting between them.
//! - [`prepare_data`]: the marker a worker's prepare-data script leaves on
//!   EFS, which the master (admission) and `trainer train`'s rendezvous
//!   (joining a group) look for.
//!
//! The state file (the applied manifest) is [`crate::state`].

pub mod hostfile;
pub mod prepare_data;
pub mod profile;
pub mod workers;

use std::path::{Path, PathBuf};

/// `path`, a node path (absolute, as on a node), under the filesystem root
/// `root`: `under("/tmp/r", "/etc/hosts")` is `/tmp/r/etc/hosts`. A
/// relative `path` is joined as it is.
pub fn under(root: &Path, path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    // Every leading `/` goes (`Path::strip_prefix` strips the root
    // component, which `//x` has once): `root.join("/x")` would be `/x`.
    root.join(path.strip_prefix("/").unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_land_under_the_root() {
        assert_eq!(under(Path::new("/tmp/r"), "/etc/hosts"), PathBuf::from("/tmp/r/etc/hosts"));
        assert_eq!(under(Path::new("/tmp/r"), "//etc//hosts"), PathBuf::from("/tmp/r/etc/hosts"));
        assert_eq!(under(Path::new("/tmp/r"), "etc/hosts"), PathBuf::from("/tmp/r/etc/hosts"));
        assert_eq!(under(Path::new("/"), "/var/lib/x"), PathBuf::from("/var/lib/x"));
        assert_eq!(under(Path::new("/tmp/r"), "/"), PathBuf::from("/tmp/r"));
    }
}
