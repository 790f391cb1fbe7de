//! The cluster as this node's agent last applied it: the generation and the
//! ordered node list of `/var/lib/deeplearning/state.json` (its format is
//! part of the node contract, [`node_contract::state`]). `trainer launch
//! --elastic` follows it to start ranks on nodes that join.

use std::path::Path;

use node_contract::state::STATE_PATH;
pub(crate) use node_contract::state::State;

use crate::error::{Error, Result};

/// The state under `root`; `None` before the agent applied a manifest.
pub(crate) fn read(root: &Path) -> Result<Option<State>> {
    let path = node_contract::files::under(root, STATE_PATH);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Read { path, source }),
    };
    State::parse(&text).map(Some).map_err(|source| Error::AgentState { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_is_none_and_bad_names_the_file() {
        let root = tempfile::tempdir().unwrap();
        assert!(read(root.path()).unwrap().is_none());
        let dir = root.path().join("var/lib/deeplearning");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("state.json"), r#"{"version":9}"#).unwrap();
        let e = read(root.path()).unwrap_err().to_string();
        assert!(e.contains("state.json") && e.contains("version 9"), "{e}");
    }
}
