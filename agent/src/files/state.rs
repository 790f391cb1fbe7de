//! `/var/lib/deeplearning/state.json`: the manifest this node applied last,
//! with its generation. The agent reads it after a restart (so it does not
//! apply an older generation than it already has), and `trainer` reads it to
//! learn the cluster without a login shell.
//!
//! Versioned like the rest of the node contract: a state file with a version
//! this build does not know is an error, not a guess.

use std::path::Path;

use node_contract::message::Manifest;
use serde::{Deserialize, Serialize};

use super::{FilesError, atomic, under};

/// The file, as on the node.
pub const PATH: &str = "/var/lib/deeplearning/state.json";

/// The state format this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// What this node applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Always [`STATE_VERSION`] when written by this build.
    pub version: u32,
    /// This node's instance id (a state file copied from another node's image is not ours).
    pub instance_id: String,
    /// The generation on disk.
    pub generation: u64,
    /// The manifest of that generation.
    pub manifest: Manifest,
}

/// The state under `root`; `None` before the first manifest was applied.
pub fn read(root: &Path) -> Result<Option<State>, FilesError> {
    let path = under(root, PATH);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FilesError::Read { path, source }),
    };
    #[derive(Deserialize)]
    struct Probe {
        version: Option<u64>,
    }
    let probe: Probe =
        serde_json::from_str(&text).map_err(|source| FilesError::ParseState { path: path.clone(), source })?;
    match probe.version {
        Some(v) if v == u64::from(STATE_VERSION) => {}
        found => return Err(FilesError::StateVersion { path, found, supported: STATE_VERSION }),
    }
    serde_json::from_str(&text).map(Some).map_err(|source| FilesError::ParseState { path, source })
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
