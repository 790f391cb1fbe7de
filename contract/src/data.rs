//! Training data on the nodes (node config version 6): the local NVMe
//! scratch volume ([`Scratch`]), the data sets fetched from S3 before a
//! node registers ([`DataSet`]), the FSx for Lustre file system every node
//! mounts ([`FsxLustre`]), and what a node tells the master about its
//! fetch ([`DataReady`], in its `register`, message version 11).
//!
//! synth writes them from the blueprint's `storage.scratch`, `data:` and
//! `storage.fsx_lustre`; the agent reads them at boot
//! (docs/ARCHITECTURE.md, "Training data").

use serde::{Deserialize, Serialize};

/// The environment variable that holds the scratch mount on a node that
/// has one (in `/etc/profile.d/deeplearning.sh`).
pub const SCRATCH_ENV: &str = "DEEPLEARNING_SCRATCH";

/// The default scratch mount (blueprint `storage.scratch`).
pub const DEFAULT_SCRATCH_MOUNT: &str = "/scratch";

/// The default FSx for Lustre mount.
pub const DEFAULT_FSX_MOUNT: &str = "/fsx";

/// The TCP port a node serves its fetched objects to its peers on while
/// data sets are fetched together (the cluster's security group allows
/// all traffic between its nodes).
pub const DATA_PORT: u16 = 7462;

/// Where on EFS (under its mount) the nodes that fetch data together
/// announce themselves and leave their progress.
pub const DATA_DIR_ON_EFS: &str = "deeplearning/data";

/// The tag on the worker Auto Scaling group where the master leaves the
/// nodes' data fetch progress for `synth status` ([`DataMark`]; not
/// propagated to instances).
pub const DATA_TAG: &str = "deeplearning:data";

/// The master's last line on the nodes' data fetches, with when it wrote
/// it: the value of [`DATA_TAG`], `at=<unix ms> <line>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataMark {
    /// When the master wrote it, unix milliseconds.
    pub at_ms: u64,
    /// What it says, e.g. "412.0 of 1280.0 GB on 16 nodes, 2.10 GB/s, 7 min left".
    pub line: String,
}

impl DataMark {
    /// The tag value, cut to [`crate::MAX_TAG_CHARS`] characters.
    pub fn to_tag(&self) -> String {
        format!("at={} {}", self.at_ms, self.line).chars().take(crate::MAX_TAG_CHARS).collect()
    }

    /// Reads a tag value; `None` for anything else (a tag edited by hand).
    pub fn from_tag(value: &str) -> Option<DataMark> {
        let (at, line) = value.trim().strip_prefix("at=")?.split_once(' ')?;
        Some(DataMark { at_ms: at.parse().ok()?, line: line.chars().filter(|c| !c.is_control()).collect() })
    }
}

/// The local NVMe scratch volume (blueprint `storage.scratch`): the
/// agent assembles the instance-store drives into one striped volume and
/// mounts it here, or reuses the image's striped mount. A node whose
/// instance type has no instance store gets none and says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scratch {
    /// Absolute mount point, exported as [`SCRATCH_ENV`].
    pub mount: String,
}

/// Which nodes fetch a data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fetcher {
    /// Every node, into its own disk (scratch or a local path). The nodes
    /// fetch together: each object is read from S3 by one node and passed
    /// to the others over the cluster network.
    EveryNode,
    /// The master only, once for the cluster (a data set that goes to EFS).
    Master,
}

/// One data set (blueprint `data: [{from, to}]`): every object under
/// `s3://bucket/prefix` is written to `dir` under its key less the prefix,
/// as `aws s3 sync` would.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSet {
    /// The bucket.
    pub bucket: String,
    /// The key prefix: empty, or ending in `/`.
    pub prefix: String,
    /// The absolute directory the objects go to on the node.
    pub dir: String,
    /// Who fetches it.
    pub fetcher: Fetcher,
}

impl DataSet {
    /// `s3://bucket/prefix`, for messages.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

/// An FSx for Lustre file system every node mounts (blueprint
/// `storage.fsx_lustre`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsxLustre {
    /// `fs-...`
    pub file_system_id: String,
    /// The file system's DNS name (`Fn::GetAtt [fs, DNSName]`).
    pub dns_name: String,
    /// Its Lustre mount name (`Fn::GetAtt [fs, LustreMountName]`).
    pub mount_name: String,
    /// Absolute mount point on the node.
    pub mount: String,
}

/// What a node's data fetch took, in its `register` (message version 11):
/// the formation timeline's "data ready" phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataReady {
    /// When the node's data was complete, unix milliseconds by its clock.
    pub ready_unix_ms: u64,
    /// Bytes of data on the node (fetched now or found complete).
    pub bytes: u64,
    /// Bytes this node read from S3 itself.
    pub bytes_from_s3: u64,
    /// Milliseconds the fetch took.
    pub millis: u64,
}

/// A directory the agent writes under: absolute, no `..`, no control
/// characters.
pub(crate) fn is_plain_absolute(path: &str) -> bool {
    path.starts_with('/') && !path.split('/').any(|part| part == "..") && !path.chars().any(char::is_control)
}

/// An S3 bucket name as S3 allows it for new buckets (3 to 63 lower-case
/// letters, digits, `.` and `-`, starting and ending with a letter or
/// digit).
pub fn is_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_and_paths() {
        assert!(is_bucket_name("my-data.bucket1"));
        for bad in ["ab", "My-Data", "-x-data", "data-", &"a".repeat(64)] {
            assert!(!is_bucket_name(bad), "{bad}");
        }
        assert!(is_plain_absolute("/scratch/imagenet"));
        for bad in ["scratch", "/a/../b", "/a\n"] {
            assert!(!is_plain_absolute(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_data_mark_reads_back_and_fits_a_tag() {
        let mark = DataMark { at_ms: 1_700_000_000_000, line: "412.0 of 1280.0 GB on 16 nodes".into() };
        assert_eq!(DataMark::from_tag(&mark.to_tag()), Some(mark));
        let long = DataMark { at_ms: 1, line: "x".repeat(400) };
        assert_eq!(long.to_tag().chars().count(), crate::MAX_TAG_CHARS);
        for bad in ["", "412 GB", "at=soon 412 GB", "at=12"] {
            assert_eq!(DataMark::from_tag(bad), None, "{bad}");
        }
    }

    #[test]
    fn fetchers_are_snake_case() {
        assert_eq!(serde_json::to_value(Fetcher::EveryNode).unwrap(), "every_node");
        let set = DataSet { bucket: "b".into(), prefix: "p/".into(), dir: "/scratch".into(), fetcher: Fetcher::Master };
        assert_eq!(set.url(), "s3://b/p/");
    }
}
