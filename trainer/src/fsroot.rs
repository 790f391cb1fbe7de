//! The filesystem root every node path is read and written under (`--root`,
//! `/` in production, a temporary directory in tests): a leaf module that
//! [`jobs`](crate::jobs), [`train`](crate::train) and the agent-state
//! reader import.

use std::path::{Path, PathBuf};

/// `path` (absolute, as on a node) under the filesystem root `root`.
pub fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_land_under_the_root() {
        assert_eq!(under(Path::new("/tmp/r"), "/etc/hosts"), PathBuf::from("/tmp/r/etc/hosts"));
        assert_eq!(under(Path::new("/"), "/var/lib/x"), PathBuf::from("/var/lib/x"));
    }
}
