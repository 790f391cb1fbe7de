//! What to do about the scratch volume, decided from what the node has
//! ([`super::discovery::Found`]) and where the volume goes: a pure function,
//! so every case is a unit test on recorded trees.
//!
//! The rules, in order (the first that applies wins):
//!
//! 1. Something is mounted at the scratch mount point already: if it is on
//!    instance store (a drive, or an array or volume over drives only) it is
//!    ours from an earlier run or boot ([`Plan::AlreadyMounted`]); anything
//!    else is left alone ([`Plan::Blocked`]).
//! 2. The image mounted the instance store elsewhere (the Deep Learning AMI
//!    stripes the drives with LVM and mounts them at `/opt/dlami/nvme` before
//!    user data runs): that mount is reused, bound onto the scratch mount
//!    point ([`Plan::Reuse`]). A mounted device is never formatted.
//! 3. An array or volume over instance store exists but is mounted nowhere
//!    (the node rebooted and nothing mounted it): it is mounted
//!    ([`Plan::MountExisting`]); only a blank one is formatted.
//! 4. Instance store drives that nothing uses (no partitions, no holder, no
//!    mount): two or more are striped into one md RAID 0 array, one is used
//!    as it is, and the result is formatted and mounted ([`Plan::Assemble`]).
//!    This is also the path after a stop and start, which gives the instance
//!    blank drives while the fstab line of the old array is still there.
//! 5. No instance store drive at all: [`Plan::Nothing`], said in the log.
//!    Drives that exist but are all in use some other way: [`Plan::Blocked`].

use std::path::{Path, PathBuf};

use super::discovery::{Device, Found};

/// What the executor is to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The node has no instance store: no scratch volume, and the log says why.
    Nothing {
        /// The sentence for the log.
        why: String,
    },
    /// The scratch mount point already holds a file system on instance
    /// store (an agent restart, or a reboot that kept the drives).
    AlreadyMounted {
        /// What is mounted there (`/dev/md0`).
        source: String,
    },
    /// The image's own mount of the instance store, bound onto the scratch mount point.
    Reuse {
        /// Where the image mounted it (`/opt/dlami/nvme`).
        from: PathBuf,
        /// What is mounted there.
        source: String,
    },
    /// An unmounted array or volume over instance store: mount it (format it only when blank).
    MountExisting {
        /// Its device node.
        device: String,
    },
    /// Free drives: stripe them (when more than one) into `array`, format and mount.
    Assemble {
        /// The drives' device nodes, in name order.
        drives: Vec<String>,
        /// The md array to create, `None` for a single drive.
        array: Option<String>,
        /// Their total size in bytes.
        bytes: u64,
    },
    /// The mount point or the drives are used by something that is not ours: nothing is touched.
    Blocked {
        /// The sentence for the log and the master.
        why: String,
    },
}

/// The plan for a scratch volume at `target` (a path on the host: the
/// mount under the agent's root).
pub(crate) fn plan(found: &Found, target: &Path) -> Plan {
    // 1. The mount point: the last mount on it is the one in effect.
    if let Some(mount) = found.mounts.iter().rev().find(|m| m.point == target) {
        return match found.by_dev(&mount.dev) {
            Some(device) if found.on_instance_store(device) => Plan::AlreadyMounted { source: mount.source.clone() },
            _ => Plan::Blocked {
                why: format!(
                    "{} already holds {} ({}), which is not on instance store; it is left as it is",
                    target.display(),
                    mount.source,
                    mount.fstype
                ),
            },
        };
    }
    // 2. The image's own mount of the instance store, the biggest if several;
    //    a mount of the whole file system rather than a bind of a part of it.
    let on_store = |dev: &str| found.by_dev(dev).filter(|d| found.on_instance_store(d));
    let reusable = found
        .mounts
        .iter()
        .filter_map(|m| on_store(&m.dev).map(|d| (m, d)))
        .filter(|(m, _)| m.fs_root == "/")
        .max_by_key(|(m, d)| (d.bytes, std::cmp::Reverse(m.point.clone())));
    if let Some((mount, _)) = reusable {
        return Plan::Reuse { from: mount.point.clone(), source: mount.source.clone() };
    }
    // 3. An array or volume over instance store that nothing mounts or holds.
    let existing = found
        .devices
        .iter()
        .filter(|d| !d.slaves.is_empty() && !d.held && !found.is_mounted(d) && found.on_instance_store(d))
        .max_by_key(|d| d.bytes);
    if let Some(device) = existing {
        return Plan::MountExisting { device: device.path() };
    }
    // 4. Free drives.
    let drives: Vec<&Device> = found.instance_store().collect();
    if drives.is_empty() {
        return Plan::Nothing {
            why: "this node has no NVMe instance store (no drive with the model \"Amazon EC2 NVMe Instance \
                  Storage\"), so it gets no scratch volume"
                .into(),
        };
    }
    let free: Vec<&Device> =
        drives.iter().copied().filter(|d| !d.held && !d.partitioned && !found.is_mounted(d)).collect();
    if free.is_empty() {
        let names: Vec<&str> = drives.iter().map(|d| d.name.as_str()).collect();
        return Plan::Blocked {
            why: format!(
                "every instance store drive ({}) is partitioned, part of an array or mounted, and none of it is \
                 mounted whole; nothing is formatted",
                names.join(", ")
            ),
        };
    }
    let array = (free.len() > 1).then(|| free_md(found));
    Plan::Assemble { drives: free.iter().map(|d| d.path()).collect(), array, bytes: free.iter().map(|d| d.bytes).sum() }
}

/// The first `/dev/mdN` this node does not have.
fn free_md(found: &Found) -> String {
    let n = (0..).find(|n| found.by_name(&format!("md{n}")).is_none()).unwrap_or(0);
    format!("/dev/md{n}")
}
