//! `storage.fsx_lustre`: an FSx for Lustre file system every node mounts,
//! checked and turned into an [`FsxSpec`].
//!
//! The rules are FSx's, said at build time instead of as a failed stack:
//! - `SCRATCH_2` and `PERSISTENT_2` take 1,200 GiB, 2,400 GiB, or a
//!   multiple of 2,400 GiB
//!   (<https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html>,
//!   `StorageCapacity`).
//! - `PERSISTENT_2` has a throughput per TiB of 125, 250, 500 or 1000 MB/s
//!   (`PerUnitStorageThroughput`); scratch file systems have none.
//! - The S3 link is a bucket and a prefix (`ImportPath` of a scratch file
//!   system, a data repository association's `DataRepositoryPath` of a
//!   persistent one).

use super::super::model::{FsxDeployment as Written, FsxLustre};
use super::storage::mount_problem;
use super::{At, Checker, ticked};
use crate::spec::{FsxDeployment, FsxSpec, S3Prefix};

/// The smallest size, and the step above 2,400 GiB.
const SMALL_GIB: [u32; 2] = [1200, 2400];
const STEP_GIB: u32 = 2400;

/// `PERSISTENT_2`'s throughput tiers, MB/s per TiB.
pub(super) const THROUGHPUT_PER_TIB: [u32; 4] = [125, 250, 500, 1000];

/// The default throughput tier (the cheapest).
const DEFAULT_THROUGHPUT_PER_TIB: u32 = 125;

/// The file system, or `None` when the blueprint has none. `efs_mount` is
/// the EFS mount point, which the FSx mount may not share or nest in.
pub(super) fn fsx(c: &mut Checker<'_>, fsx: FsxLustre, efs_mount: &str) -> FsxSpec {
    let deployment = match fsx.deployment.unwrap_or(Written::Scratch2) {
        Written::Scratch2 => FsxDeployment::Scratch2,
        Written::Persistent2 => FsxDeployment::Persistent2,
    };
    let capacity_gib = fsx.capacity_gib.unwrap_or(SMALL_GIB[0]);
    if !(SMALL_GIB.contains(&capacity_gib) || (capacity_gib > 0 && capacity_gib.is_multiple_of(STEP_GIB))) {
        let below = (capacity_gib / STEP_GIB) * STEP_GIB;
        let above = below + STEP_GIB;
        let near = if capacity_gib < SMALL_GIB[1] { "1200 or 2400".to_owned() } else { format!("{below} or {above}") };
        c.error(
            "storage.fsx_lustre.capacity_gib",
            At::Value,
            format!("{capacity_gib} GiB is not a size FSx for Lustre makes: 1200, 2400, or a multiple of 2400"),
            format!("the nearest sizes are {near} GiB"),
        );
    }
    let throughput_per_tib = match (deployment, fsx.throughput_per_tib) {
        (FsxDeployment::Scratch2, None) => None,
        (FsxDeployment::Scratch2, Some(_)) => {
            c.error(
                "storage.fsx_lustre.throughput_per_tib",
                At::Key,
                "is given for a `scratch_2` file system, whose throughput follows its size (200 MB/s per TiB)",
                "leave `throughput_per_tib` out, or set `deployment: persistent_2`",
            );
            None
        }
        (FsxDeployment::Persistent2, written) => {
            let tier = written.unwrap_or(DEFAULT_THROUGHPUT_PER_TIB);
            if !THROUGHPUT_PER_TIB.contains(&tier) {
                c.error(
                    "storage.fsx_lustre.throughput_per_tib",
                    At::Value,
                    format!("{tier} MB/s per TiB is not a `persistent_2` throughput tier"),
                    format!(
                        "write one of {} (default {DEFAULT_THROUGHPUT_PER_TIB})",
                        THROUGHPUT_PER_TIB.map(|t| t.to_string()).join(", ")
                    ),
                );
            }
            Some(tier)
        }
    };
    let import = fsx.import.and_then(|url| match parse_s3_prefix(&url) {
        Ok(prefix) => Some(prefix),
        Err(problem) => {
            c.error(
                "storage.fsx_lustre.import",
                At::Value,
                format!("{} {problem}", ticked(&url)),
                "write the S3 prefix to link as `s3://bucket/` or `s3://bucket/prefix/`, for example `s3://my-datasets/imagenet/`",
            );
            None
        }
    });
    let mount = fsx.mount.unwrap_or_else(|| node_contract::data::DEFAULT_FSX_MOUNT.to_owned());
    if let Some(problem) = mount_problem(&mount) {
        c.error(
            "storage.fsx_lustre.mount",
            At::Value,
            format!("{} {problem}", ticked(&mount)),
            "use an absolute path of its own, such as `/fsx` or `/mnt/fsx`",
        );
    } else if let Some(problem) = clash(&mount, efs_mount) {
        c.error(
            "storage.fsx_lustre.mount",
            At::Value,
            format!("{} {problem} EFS's mount `{efs_mount}`", ticked(&mount)),
            "give each file system a directory of its own, such as `/fsx` beside `/efs`",
        );
    }
    FsxSpec { deployment, capacity_gib, import, mount, throughput_per_tib }
}

/// Why `mount` cannot sit beside `other`, if it cannot: the same
/// directory, or one inside the other (one mount would hide the other).
fn clash(mount: &str, other: &str) -> Option<&'static str> {
    let (a, b) = (mount.trim_end_matches('/'), other.trim_end_matches('/'));
    if a == b {
        Some("is")
    } else if a.starts_with(&format!("{b}/")) {
        Some("is inside")
    } else if b.starts_with(&format!("{a}/")) {
        Some("holds")
    } else {
        None
    }
}

/// `s3://bucket`, `s3://bucket/` or `s3://bucket/prefix/`; the error says
/// what is wrong.
fn parse_s3_prefix(url: &str) -> Result<S3Prefix, String> {
    let Some(rest) = url.strip_prefix("s3://") else {
        return Err("is not an `s3://` URL".to_owned());
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if !node_contract::data::is_bucket_name(bucket) {
        return Err(format!(
            "names the bucket {}, which is not an S3 bucket name (3 to 63 lower-case letters, digits, `.` and `-`)",
            ticked(bucket)
        ));
    }
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) || prefix.contains("${") {
        return Err("has a space, a control character or `${` in its prefix".to_owned());
    }
    if prefix.starts_with('/') || prefix.contains("//") {
        return Err("has an empty part (`//`) in its prefix".to_owned());
    }
    if !prefix.is_empty() && !prefix.ends_with('/') {
        return Err(format!("ends in {}, not `/`: FSx links a prefix (a directory), not one object", ticked(prefix)));
    }
    Ok(S3Prefix { bucket: bucket.to_owned(), prefix: prefix.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_prefixes() {
        let ok = |url: &str| parse_s3_prefix(url).map(|p| (p.bucket, p.prefix)).unwrap();
        assert_eq!(ok("s3://my-data"), ("my-data".into(), String::new()));
        assert_eq!(ok("s3://my-data/"), ("my-data".into(), String::new()));
        assert_eq!(ok("s3://my-data/imagenet/train/"), ("my-data".into(), "imagenet/train/".into()));
        for (bad, why) in [
            ("https://my-data/x/", "not an `s3://`"),
            ("s3://My_Data/x/", "not an S3 bucket name"),
            ("s3://my-data/imagenet", "not `/`"),
            ("s3://my-data//x/", "empty part"),
            ("s3://my-data/a b/", "space"),
            ("s3://my-data/${x}/", "`${`"),
        ] {
            let e = parse_s3_prefix(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn mounts_that_hide_each_other_clash() {
        assert_eq!(clash("/fsx", "/efs"), None);
        assert_eq!(clash("/efs", "/efs/"), Some("is"));
        assert_eq!(clash("/efs/fsx", "/efs"), Some("is inside"));
        assert_eq!(clash("/mnt", "/mnt/efs"), Some("holds"));
        assert_eq!(clash("/efs2", "/efs"), None);
    }
}
