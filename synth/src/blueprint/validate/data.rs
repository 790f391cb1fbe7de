//! Training data: `storage.scratch` (the nodes' NVMe scratch volume) and
//! `data:` (S3 prefixes every node has before it joins), checked and turned
//! into the spec's [`DataSpec`]s.
//!
//! A data set's `to` is `scratch` or `efs`, either optionally followed by a
//! directory (`scratch/imagenet`), or an absolute path. `from` is an S3
//! prefix; a prefix without its final `/` is read as the folder it names,
//! as `aws s3 sync` reads it.

use std::collections::BTreeMap;

use super::super::model::{DataSource, ScratchSetting};
use super::storage::mount_problem;
use super::{At, Checker, ticked};
use crate::catalog::{InstanceStore, InstanceType};
use crate::spec::{DataSpec, DataTarget, EfsSpec, S3Prefix};

/// The most data sets a blueprint may list (each is a line in the node
/// config, which EC2's 16 KB of user data must hold, and a statement in the
/// nodes' roles).
pub(super) const MAX_DATA_SETS: usize = 20;

/// The scratch volume's mount point, `None` with `scratch: false`.
pub(super) fn scratch(c: &mut Checker<'_>, written: Option<ScratchSetting>, efs: &EfsSpec) -> Option<String> {
    let mount = match written {
        None | Some(ScratchSetting::On) => node_contract::data::DEFAULT_SCRATCH_MOUNT.to_owned(),
        Some(ScratchSetting::Off) => return None,
        Some(ScratchSetting::Mount(m)) => m,
    };
    if let Some(problem) = mount_problem(&mount) {
        c.error(
            "storage.scratch",
            At::Value,
            format!("{} {problem}", ticked(&mount.escape_debug().to_string())),
            "use an absolute path of its own, such as `/scratch`, or `false` for no scratch volume",
        );
    } else if mount_problem(&efs.mount).is_none() && nested(&mount, &efs.mount) {
        c.error(
            "storage.scratch",
            At::Value,
            format!("{} overlaps the EFS mount {}", ticked(&mount), ticked(&efs.mount)),
            "give the scratch volume and EFS mount points of their own, such as `/scratch` and `/efs`",
        );
    }
    Some(mount)
}

/// Whether one path is the other or under it.
fn nested(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim_end_matches('/'), b.trim_end_matches('/'));
    a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
}

/// The data sets, each checked; one that is wrong is reported and left out.
pub(super) fn data_sets(
    c: &mut Checker<'_>,
    written: Option<Vec<DataSource>>,
    scratch: Option<&str>,
    efs: &EfsSpec,
) -> Vec<DataSpec> {
    let Some(written) = written else { return Vec::new() };
    if written.len() > MAX_DATA_SETS {
        c.error(
            "data",
            At::Value,
            format!("lists {} data sets; at most {MAX_DATA_SETS} are allowed", written.len()),
            "list parent prefixes instead: everything under a prefix is fetched",
        );
    }
    let mut sets = Vec::new();
    // Directory -> the entry that goes there first.
    let mut dirs: BTreeMap<String, usize> = BTreeMap::new();
    for (i, entry) in written.into_iter().enumerate() {
        let path = format!("data[{i}]");
        let from = c.required(&path, "from", entry.from);
        let to = c.required(&path, "to", entry.to);
        let from = from.and_then(|f| source(c, &format!("{path}.from"), &f));
        let to = to.and_then(|t| target(c, &format!("{path}.to"), &t, scratch, efs));
        let (Some((bucket, prefix)), Some(to)) = (from, to) else { continue };
        let set = DataSpec { source: S3Prefix { bucket, prefix }, to };
        let dir = set.dir(scratch, &efs.mount);
        if let Some(first) = dirs.get(&dir) {
            c.error(
                &format!("{path}.to"),
                At::Value,
                format!("{} is where `data[{first}]` goes too", ticked(&dir)),
                "give each data set a directory of its own, such as `scratch/imagenet` and `scratch/coco`",
            );
            continue;
        }
        dirs.insert(dir, i);
        sets.push(set);
    }
    sets
}

/// `s3://bucket/prefix/` as (bucket, prefix ending in `/` or empty).
fn source(c: &mut Checker<'_>, path: &str, from: &str) -> Option<(String, String)> {
    let help = "write an S3 prefix such as `s3://my-bucket/imagenet/train/`, or `s3://my-bucket/` for the whole bucket";
    let Some(rest) = from.strip_prefix("s3://") else {
        c.error(path, At::Value, format!("{} is not an S3 URL", ticked(&from.escape_debug().to_string())), help);
        return None;
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if !node_contract::data::is_bucket_name(bucket) {
        c.error(
            path,
            At::Value,
            format!("{} is not an S3 bucket name", ticked(&bucket.escape_debug().to_string())),
            "a bucket name is 3 to 63 lower-case letters, digits, `.` and `-`, starting and ending with a letter or digit",
        );
        return None;
    }
    let problem = if prefix.starts_with('/') || prefix.contains("//") {
        Some("has an empty path segment (`//`)")
    } else if prefix.split('/').any(|part| part == ".." || part == ".") {
        Some("has a `.` or `..` segment, which no directory on the nodes can hold")
    } else if prefix.chars().any(char::is_control) {
        Some("contains a control character")
    } else if prefix.contains("${") || prefix.contains(['*', '?']) {
        Some("contains `${`, `*` or `?`: it is a prefix, not a pattern")
    } else {
        None
    };
    if let Some(problem) = problem {
        c.error(path, At::Value, format!("{} {problem}", ticked(&from.escape_debug().to_string())), help);
        return None;
    }
    let prefix = if prefix.is_empty() || prefix.ends_with('/') { prefix.to_owned() } else { format!("{prefix}/") };
    Some((bucket.to_owned(), prefix))
}

/// `scratch[/dir]`, `efs[/dir]` or an absolute path.
fn target(c: &mut Checker<'_>, path: &str, to: &str, scratch: Option<&str>, efs: &EfsSpec) -> Option<DataTarget> {
    let help = "write `scratch` (each node's NVMe scratch volume), `efs` (fetched once, onto the shared file system), \
                either with a directory (`scratch/imagenet`), or an absolute path such as `/data/imagenet`";
    let shown = ticked(&to.escape_debug().to_string());
    let (head, sub) = to.split_once('/').unwrap_or((to, ""));
    let sub = sub.trim_end_matches('/');
    let bad_sub = |sub: &str| {
        sub.split('/').any(|part| part.is_empty() || part == "." || part == "..")
            || sub.chars().any(|ch| ch.is_control() || ch.is_whitespace())
            || sub.contains("${")
    };
    match head {
        "scratch" | "efs" if !sub.is_empty() && bad_sub(sub) => {
            c.error(path, At::Value, format!("{shown} is not a plain directory under `{head}`"), help);
            None
        }
        "scratch" => {
            if scratch.is_none() {
                c.error(
                    path,
                    At::Value,
                    "goes to the scratch volume, but `storage.scratch` is `false`",
                    "remove `scratch: false`, or send the data to `efs` or an absolute path",
                );
                return None;
            }
            Some(DataTarget::Scratch(sub.to_owned()))
        }
        "efs" => Some(DataTarget::Efs(sub.to_owned())),
        "" => {
            let dir = to.trim_end_matches('/');
            if let Some(problem) = mount_problem(dir) {
                c.error(path, At::Value, format!("{shown} {problem}"), help);
                return None;
            }
            if nested(dir, &efs.mount) {
                c.error(
                    path,
                    At::Value,
                    format!("{shown} is on the EFS mount {}", ticked(&efs.mount)),
                    "write `efs/<dir>` instead: the master fetches it once for the whole cluster",
                );
                return None;
            }
            if let Some(mount) = scratch
                && nested(dir, mount)
            {
                c.error(
                    path,
                    At::Value,
                    format!("{shown} is on the scratch volume {}", ticked(mount)),
                    "write `scratch/<dir>` instead",
                );
                return None;
            }
            Some(DataTarget::Path(dir.to_owned()))
        }
        _ => {
            c.error(path, At::Value, format!("{shown} is neither `scratch`, `efs` nor an absolute path"), help);
            None
        }
    }
}

/// Data bound for the scratch volume needs instance-store drives on every
/// node that fetches it (every node): a type the catalogue knows has none
/// is an error (the data would land on the root volume, under the mount
/// point, and fill it), a type it does not know a warning.
pub(super) fn scratch_types(
    c: &mut Checker<'_>,
    sets: &[DataSpec],
    master: Option<(&str, &InstanceType)>,
    workers: &[(&str, &InstanceType)],
) {
    let Some(i) = sets.iter().position(|s| matches!(s.to, DataTarget::Scratch(_))) else { return };
    let path = format!("data[{i}].to");
    let nodes = master.into_iter().chain(workers.iter().copied());
    let (mut without, mut unknown) = (Vec::new(), Vec::new());
    for (at, t) in nodes {
        let name = format!("`{}` ({})", t.name, at.trim_end_matches(".instance_type"));
        match t.instance_store {
            InstanceStore::None => without.push(name),
            InstanceStore::Unknown => unknown.push(name),
            InstanceStore::Nvme { .. } => {}
        }
    }
    if !without.is_empty() {
        c.error(
            &path,
            At::Value,
            format!(
                "goes to the scratch volume, but {} {} no instance-store drives",
                without.join(", "),
                if without.len() == 1 { "has" } else { "have" }
            ),
            "send it to `efs` or to an absolute path on the root volume (with `storage.root_volume_gb` big enough), \
             or use types with NVMe instance store (p4d, p5, g5, g6, trn1, and the CPU types with a `d`: c6id, m6id, ...)",
        );
    } else if !unknown.is_empty() {
        c.warning(
            &path,
            At::Value,
            format!("goes to the scratch volume, and synth does not know whether {} has instance-store drives", unknown.join(", ")),
            "a node without them keeps the data on its root volume under the scratch mount point; check the type's page in the EC2 documentation",
        );
    }
}
