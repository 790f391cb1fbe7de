//! The node config: read from the file the user data wrote
//! ([`node_contract::NODE_CONFIG_PATH`] under `--root`), or, before that file
//! exists, from the user data itself (the caller fetches it from IMDS).

use std::path::{Path, PathBuf};

use node_contract::{ContractError, NodeConfig, config_from_user_data};

/// Reading the node config failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the node config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file or user data does not hold a usable config.
    #[error("the node config from {origin} is not usable: {source}")]
    Parse {
        /// Where it came from (a path, or "user data").
        origin: String,
        /// Why.
        source: ContractError,
    },
}

/// The config file's path under `root`.
pub fn path_under(root: &Path) -> PathBuf {
    root.join(node_contract::NODE_CONFIG_PATH.trim_start_matches('/'))
}

/// Reads and checks the config file at `path`.
pub fn from_file(path: &Path) -> Result<NodeConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    NodeConfig::from_json(&text).map_err(|source| ConfigError::Parse { origin: path.display().to_string(), source })
}

/// Reads the config out of the user data script synth writes.
pub fn from_user_data(script: &str) -> Result<NodeConfig, ConfigError> {
    let parse = |source| ConfigError::Parse { origin: "the instance's user data".into(), source };
    NodeConfig::from_json(config_from_user_data(script).map_err(parse)?).map_err(parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_names_its_path() {
        let e = from_file(Path::new("/nonexistent/node.json")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/node.json"), "{e}");
    }

    #[test]
    fn user_data_without_config_is_explained() {
        let e = from_user_data("#!/bin/bash\necho hello\n").unwrap_err();
        assert!(e.to_string().contains("user data"), "{e}");
    }

    #[test]
    fn the_path_is_under_the_root() {
        assert_eq!(path_under(Path::new("/tmp/n1")), PathBuf::from("/tmp/n1/etc/deeplearning/node.json"));
    }
}
