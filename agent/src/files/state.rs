//! `/var/lib/deeplearning/state.json`: the manifest this node applied last,
//! with its generation. The agent reads it after a restart (so it does not
//! apply an older generation than it already has), and `trainer` reads it to
//! learn the cluster without a login shell.
//!
//! The format is part of the node contract ([`node_contract::state`]); this
//! module reads and writes the file under the agent's root.

use std::path::Path;

use node_contract::state::StateError;
pub use node_contract::state::{STATE_PATH as PATH, STATE_VERSION, State};

use super::atomic;
use super::error::FilesError;
use node_contract::files::under;

/// The state under `root`; `None` before the first manifest was applied.
pub fn read(root: &Path) -> Result<Option<State>, FilesError> {
    let path = under(root, PATH);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FilesError::Read { path, source }),
    };
    match State::parse(&text) {
        Ok(state) => Ok(Some(state)),
        Err(StateError::Version { found }) => Err(FilesError::StateVersion { path, found, supported: STATE_VERSION }),
        Err(StateError::Parse(source)) => Err(FilesError::ParseState { path, source }),
    }
}

/// Writes the state (atomically, 0644: it holds public keys and addresses only).
pub fn write(root: &Path, s: &State) -> Result<(), FilesError> {
    let path = under(root, PATH);
    let mut text =
        serde_json::to_string_pretty(s).map_err(|source| FilesError::ParseState { path: path.clone(), source })?;
    text.push('\n');
    atomic::write_if_changed(&path, &text, 0o644)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::tests::manifest;

    #[test]
    fn round_trip_and_version_checks() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()).unwrap(), None);
        let s = State { version: STATE_VERSION, instance_id: "i-master".into(), generation: 7, manifest: manifest() };
        write(root.path(), &s).unwrap();
        assert_eq!(read(root.path()).unwrap(), Some(s.clone()));

        let path = root.path().join("var/lib/deeplearning/state.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["version"] = 2.into();
        std::fs::write(&path, v.to_string()).unwrap();
        let e = read(root.path()).unwrap_err();
        assert!(matches!(e, FilesError::StateVersion { found: Some(2), supported: 1, .. }), "{e:?}");
        assert!(e.to_string().contains("state.json"), "{e}");

        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(read(root.path()).unwrap_err(), FilesError::ParseState { .. }));
    }
}
