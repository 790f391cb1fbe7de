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
    node_contract::files::under(root, node_contract::NODE_CONFIG_PATH)
}

/// The largest node config read. EC2 user data holds at most 16 KB, and the
/// config is part of it; a bigger file is not one synth wrote.
pub const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// Reads and checks the config file at `path`.
pub fn from_file(path: &Path) -> Result<NodeConfig, ConfigError> {
    let text =
        read_bounded(path, MAX_CONFIG_BYTES).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    NodeConfig::from_json(&text).map_err(|source| ConfigError::Parse { origin: path.display().to_string(), source })
}

/// A UTF-8 file of at most `limit` bytes; a longer one (or an endless
/// stream such as a FIFO fed from /dev/zero) is an error once `limit` is
/// passed, not a read until memory runs out.
pub fn read_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is larger than {limit} bytes, more than such a file ever holds"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
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
    fn an_oversized_file_is_refused_after_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("node.json");
        std::fs::write(&big, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = from_file(&big).unwrap_err().to_string();
        assert!(e.contains("larger than 65536 bytes"), "{e}");
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
