//! `/var/lib/deeplearning/state.json`: the manifest a node's agent applied
//! last, with its generation. The agent writes it (and reads it after a
//! restart, so it never applies an older generation than it has); `trainer`
//! reads it to learn the cluster's membership without a login shell.
//!
//! Versioned like the rest of the contract: a state file with a version this
//! build does not know is an error, not a guess.

use serde::{Deserialize, Serialize};

use crate::message::Manifest;

/// The file, as on a node.
pub const STATE_PATH: &str = "/var/lib/deeplearning/state.json";

/// The state format this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// What a node applied.
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

/// A state file's text could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Not JSON, or not the state's shape.
    #[error("not a valid agent state file: {0}")]
    Parse(#[from] serde_json::Error),
    /// A version this build does not know.
    #[error(
        "agent state version {} is not supported (this build reads version {STATE_VERSION}); \
         update the agent and trainer together",
        found.map_or_else(|| "(missing)".to_owned(), |v| v.to_string())
    )]
    Version {
        /// The version in the file, if any.
        found: Option<u64>,
    },
}

impl State {
    /// Parses a state file's text, checking its version first.
    pub fn parse(text: &str) -> Result<State, StateError> {
        #[derive(Deserialize)]
        struct Probe {
            version: Option<u64>,
        }
        let probe: Probe = serde_json::from_str(text)?;
        if probe.version != Some(u64::from(STATE_VERSION)) {
            return Err(StateError::Version { found: probe.version });
        }
        Ok(serde_json::from_str(text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_checked_before_the_shape() {
        let e = State::parse(r#"{"version":2,"anything":true}"#).unwrap_err();
        assert!(matches!(e, StateError::Version { found: Some(2) }), "{e:?}");
        assert!(e.to_string().contains("version 2"), "{e}");
        assert!(matches!(State::parse("{}").unwrap_err(), StateError::Version { found: None }));
        assert!(matches!(State::parse(r#"{"version":1}"#).unwrap_err(), StateError::Parse(_)));
        assert!(matches!(State::parse("{not json").unwrap_err(), StateError::Parse(_)));
    }
}
