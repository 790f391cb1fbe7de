//! Why a file step failed ([`FilesError`]): every variant names the file
//! or the node, so the agent's log says what to fix.

use std::path::PathBuf;

/// A file step failed. Every variant names the file or the node.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing a file failed; the old file is intact.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Creating a directory failed.
    #[error("cannot create the directory {path}: {source}")]
    CreateDir {
        /// The directory, under the root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Changing a file's owner failed.
    #[error("cannot give {path} to {user}: {source}")]
    Chown {
        /// The file, under the root.
        path: PathBuf,
        /// The new owner.
        user: String,
        /// Why.
        source: std::io::Error,
    },
    /// This node is not in the manifest it is asked to apply.
    #[error("this node ({instance_id}) is not in manifest generation {generation}; it is not applied")]
    NotInManifest {
        /// This node.
        instance_id: String,
        /// The manifest's generation.
        generation: u64,
    },
    /// The manifest's master is not among its nodes.
    #[error("manifest generation {generation} names master {master}, which is not among its nodes")]
    MasterNotInManifest {
        /// The master's instance id.
        master: String,
        /// The manifest's generation.
        generation: u64,
    },
    /// A node's field cannot go into the files.
    #[error("node {node} has an unusable {field} {value:?}: {reason}")]
    BadNode {
        /// Instance id.
        node: String,
        /// Which field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Two nodes share what must be unique (an index, alias, address, host
    /// name or instance id): /etc/hosts would map one name to two addresses.
    #[error("manifest generation {generation} gives {field} {value:?} to two nodes, {first} and {second}")]
    Duplicate {
        /// The manifest's generation.
        generation: u64,
        /// Which field.
        field: &'static str,
        /// The shared value.
        value: String,
        /// The first node's instance id.
        first: String,
        /// The second node's instance id.
        second: String,
    },
    /// The manifest is another cluster's (a queue or file mix-up).
    #[error("manifest generation {generation} is for cluster {manifest:?}, and this node is in cluster {config:?}")]
    OtherCluster {
        /// The manifest's generation.
        generation: u64,
        /// The cluster the manifest names.
        manifest: String,
        /// The cluster of this node's config.
        config: String,
    },
    /// A node's SSH host key is not an OpenSSH public key.
    #[error("the SSH host key of {node} is unusable: {reason}")]
    BadHostKey {
        /// Alias and instance id.
        node: String,
        /// What is wrong.
        reason: String,
    },
    /// The cluster key in the manifest (or given to the master) is unusable.
    #[error("the cluster SSH key is unusable: {reason}")]
    BadClusterKey {
        /// What is wrong.
        reason: String,
    },
    /// The cluster key file could not be made or used.
    #[error(
        "the cluster key {path} {reason}; move it away to have a new one created (every node then needs the next manifest)"
    )]
    ClusterKey {
        /// The key file, under the root.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The state file is not valid JSON of the expected shape.
    #[error("the state file {path} is not valid: {source}")]
    ParseState {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// The state file has a version this build does not read.
    #[error(
        "the state file {path} has version {found:?}, and this agent reads version {supported} only; \
         remove it to have the next manifest applied from scratch"
    )]
    StateVersion {
        /// The file, under the root.
        path: PathBuf,
        /// The version in the file, if any.
        found: Option<u64>,
        /// The version this build reads.
        supported: u32,
    },
    /// The interruption notice file is not one this build can use.
    #[error("the interruption notice file {path} is not usable: {source}")]
    ParseNotice {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: node_contract::interruption::NoticeError,
    },
    /// This node cannot mount a kind of file system at all (its image lacks
    /// the client): trying again does not help.
    #[error("cannot mount {what} at {target}: {reason}")]
    CannotMount {
        /// Which file system.
        what: &'static str,
        /// The mount point, under the root.
        target: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// Mounting a shared file system (EFS, FSx for Lustre) failed.
    #[error("cannot mount {what} at {target}: {reason}")]
    Mount {
        /// Which file system: `EFS`, `FSx for Lustre`.
        what: &'static str,
        /// The mount point, under the root.
        target: PathBuf,
        /// Why, and what to check.
        reason: String,
    },
}
