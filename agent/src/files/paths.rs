//! Where the files are: every node path under the agent's root
//! ([`under`]), a file in a user's home before its home is known
//! ([`home_path`]), and the network gate's verdict file.

use std::path::{Path, PathBuf};

/// The network gate's verdict file under `root` (the master writes it).
pub fn network_check_path(root: &Path) -> PathBuf {
    under(root, node_contract::NETWORK_CHECK_PATH)
}

/// `root.join(path)` for an absolute node path.
pub fn under(root: &Path, path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// `~user/<in_home>`: a file in a user's home, resolved when rendered.
pub(crate) fn home_path(user: &str, in_home: &str) -> PathBuf {
    PathBuf::from(format!("~{user}/{in_home}"))
}
