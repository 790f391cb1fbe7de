//! What can go wrong fetching a data set, one variant per step, each
//! naming the object (`s3://bucket/key`) and the step:
//! "s3://b/p/x.jpg: AccessDenied reading it: ...".

use std::path::PathBuf;

use super::key::Unsafe;
use super::store::StoreError;

/// A data set could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// `ListObjectsV2` failed.
    #[error("{url}: {} listing it: {}", .source.code, .source.message)]
    List {
        /// `s3://bucket/prefix`.
        url: String,
        /// What the store said.
        source: StoreError,
    },
    /// `HeadObject` (the checksum of a large object) failed.
    #[error("{url}: {} reading its checksum (HeadObject): {}", .source.code, .source.message)]
    Head {
        /// `s3://bucket/key`.
        url: String,
        /// What the store said.
        source: StoreError,
    },
    /// `GetObject` failed.
    #[error("{url}: {} reading it: {}", .source.code, .source.message)]
    Read {
        /// `s3://bucket/key`.
        url: String,
        /// What the store said.
        source: StoreError,
    },
    /// The key would be written outside the data set's directory.
    #[error("{url}: refused: its key would not stay inside {}: {why}", .dir.display())]
    UnsafeKey {
        /// `s3://bucket/key`.
        url: String,
        /// The data set's directory.
        dir: PathBuf,
        /// Why.
        why: Unsafe,
    },
    /// The file could not be written (a full or read-only disk, a key that
    /// is both a file and a folder).
    #[error("{url}: writing {}: {source}", .path.display())]
    Write {
        /// `s3://bucket/key`.
        url: String,
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The bytes read were not as many as listed (the object changed
    /// while it was fetched, or a transfer was cut short).
    #[error("{url}: {got} bytes where the listing says {expected}; the object changed or the transfer was cut short")]
    Size {
        /// `s3://bucket/key`.
        url: String,
        /// The listed size.
        expected: u64,
        /// What arrived.
        got: u64,
    },
    /// The bytes do not match S3's checksum.
    #[error("{url}: {algorithm} mismatch: S3 says {expected}, the bytes fetched give {got}")]
    Checksum {
        /// `s3://bucket/key`.
        url: String,
        /// `CRC32`, `CRC32C`, `CRC64NVME` or `SHA256`.
        algorithm: &'static str,
        /// S3's value, hex.
        expected: String,
        /// Ours, hex.
        got: String,
    },
    /// The completion marker (a data set only the master fetches) could
    /// not be written or the peers' directory on EFS could not be used.
    #[error("{what} {}: {source}", .path.display())]
    Efs {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// This node's data server cannot listen.
    #[error("cannot serve fetched data to the other nodes on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}
