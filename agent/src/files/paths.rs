//! Where the files are: a file in a user's home before its home is known
//! ([`home_path`]), and the network gate's verdict file. Every node path is
//! under the agent's root through `node_contract::files::under`, the one
//! definition the trainer reads through too.

use std::path::{Path, PathBuf};

use node_contract::files::under;

/// The network gate's verdict file under `root` (the master writes it).
pub fn network_check_path(root: &Path) -> PathBuf {
    under(root, node_contract::NETWORK_CHECK_PATH)
}

/// `~user/<in_home>`: a file in a user's home, resolved when rendered.
pub(crate) fn home_path(user: &str, in_home: &str) -> PathBuf {
    PathBuf::from(format!("~{user}/{in_home}"))
}
