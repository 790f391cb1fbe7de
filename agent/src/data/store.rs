//! The port to S3 the fetcher reads through ([`ObjectStore`]): list the
//! objects under a prefix, HEAD one for its checksum, GET a byte range.
//! Implemented on the AWS SDK by [`crate::aws::S3Objects`], in memory by
//! `super::memory::MemoryStore` (tests only), and with chosen failures by
//! `super::failing::FailingStore` (mountpoint-s3's `ObjectClient`,
//! `mock_client` and `failure_client`).
//!
//! IAM: `list` is `ListObjectsV2` with the prefix (`s3:ListBucket`, which
//! a policy can hold to the prefix with an `s3:prefix` condition); `head`
//! and `get` are `HeadObject` and `GetObject` (both `s3:GetObject` on the
//! object). Nothing else: no `HeadBucket`, no `GetBucketLocation`, no
//! `GetObjectAttributes`.

use std::future::Future;
use std::ops::Range;

/// A full-object checksum S3 keeps for an object, decoded from its
/// base64 (big-endian bytes).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checksum {
    /// CRC-32 (ISO-HDLC), `x-amz-checksum-crc32`.
    Crc32(u32),
    /// CRC-32C (Castagnoli), `x-amz-checksum-crc32c`.
    Crc32c(u32),
    /// CRC-64/NVME, `x-amz-checksum-crc64nvme`.
    Crc64Nvme(u64),
    /// SHA-256, `x-amz-checksum-sha256`.
    Sha256([u8; 32]),
}

impl Checksum {
    /// The algorithm's name as S3 writes it, for messages.
    pub fn algorithm(&self) -> &'static str {
        match self {
            Checksum::Crc32(_) => "CRC32",
            Checksum::Crc32c(_) => "CRC32C",
            Checksum::Crc64Nvme(_) => "CRC64NVME",
            Checksum::Sha256(_) => "SHA256",
        }
    }

    /// The value in hex, for messages.
    pub fn hex(&self) -> String {
        match self {
            Checksum::Crc32(v) | Checksum::Crc32c(v) => format!("{v:08x}"),
            Checksum::Crc64Nvme(v) => format!("{v:016x}"),
            Checksum::Sha256(d) => d.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// What S3 says of an object's integrity.
#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Integrity {
    /// No checksum (an object uploaded without one, before S3 added them
    /// by default): its size is all that is checked.
    #[default]
    None,
    /// A checksum of the whole object: verified.
    Full(Checksum),
    /// A composite checksum of a multipart upload (a checksum of its
    /// parts' checksums, `...-N`): checking it would need the part
    /// boundaries (`GetObjectAttributes`, another IAM action), so only the
    /// size is checked, and the algorithm is named in the log.
    Composite(String),
}

impl Integrity {
    /// The full-object checksum, when there is one.
    pub fn full(&self) -> Option<&Checksum> {
        match self {
            Integrity::Full(c) => Some(c),
            _ => None,
        }
    }
}

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The whole key (prefix included).
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag (quotes included, as S3 gives it), or empty.
    pub etag: String,
}

/// An object's HEAD: its size and checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// Its size in bytes.
    pub size: u64,
    /// Its checksum, as S3 keeps it.
    pub integrity: Integrity,
}

/// The bytes of a GET.
#[derive(Clone, Debug)]
pub struct Got {
    /// The bytes (the whole object, or the range asked for).
    pub bytes: bytes::Bytes,
    /// The object's checksum when the whole object was asked for
    /// (checksum mode on); none for a range.
    pub integrity: Integrity,
}

/// What kind of failure a store call had: what the fetcher does next
/// depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// Refused: no permission (`AccessDenied`), or no credentials.
    Denied,
    /// No such bucket or key.
    NotFound,
    /// Throttled, 5xx, or no answer: worth another try.
    Transient,
    /// Anything else the service refused.
    Other,
}

/// A store call failed: its kind, the service's code (`AccessDenied`, or
/// a word for a failure without one) and message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct StoreError {
    /// What to do about it.
    pub kind: StoreErrorKind,
    /// The service's error code, or a word for a failure without one
    /// (`NoAnswer`).
    pub code: String,
    /// The rest of what is known.
    pub message: String,
}

impl StoreError {
    /// An error of `kind` with `code` and `message`.
    pub fn new(kind: StoreErrorKind, code: &str, message: impl Into<String>) -> StoreError {
        StoreError { kind, code: code.to_owned(), message: message.into() }
    }
}

/// S3, as the fetcher uses it.
pub trait ObjectStore: Send + Sync + 'static {
    /// Every object under `prefix` in `bucket` (`ListObjectsV2`, all pages),
    /// in key order.
    fn list(&self, bucket: &str, prefix: &str) -> impl Future<Output = Result<Vec<ObjectInfo>, StoreError>> + Send;
    /// An object's size and checksum (`HeadObject` with checksum mode on).
    fn head(&self, bucket: &str, key: &str) -> impl Future<Output = Result<Head, StoreError>> + Send;
    /// An object's bytes: all of them (with its checksum) or `range`
    /// (`GetObject`).
    fn get(
        &self,
        bucket: &str,
        key: &str,
        range: Option<Range<u64>>,
    ) -> impl Future<Output = Result<Got, StoreError>> + Send;
}
