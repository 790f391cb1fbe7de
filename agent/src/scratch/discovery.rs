//! What the node has: its block devices from `<root>/sys/block` (model,
//! size, device number, the devices an array is built on, whether anything
//! holds or partitions a drive) and its mounts from
//! `<root>/proc/self/mountinfo`. Read under the agent's `--root`, so tests
//! pass a tree of their own; on a node the root is `/`.
//!
//! An instance store drive is told from an EBS volume by its NVMe model
//! string, which Nitro sets: "Amazon EC2 NVMe Instance Storage" for the
//! instance store, "Amazon Elastic Block Store" for EBS
//! (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/nvme-ebs-volumes.html,
//! https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ssd-instance-store.html).
//! Nothing else marks a drive as ours to format.

use std::path::{Path, PathBuf};

use super::ScratchError;
use node_contract::files::under;

/// The model string of an NVMe instance store drive on Nitro.
pub const INSTANCE_STORE_MODEL: &str = "Amazon EC2 NVMe Instance Storage";

/// One block device of `/sys/block`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Its kernel name (`nvme1n1`, `md0`, `dm-0`).
    pub name: String,
    /// `major:minor`, as mountinfo names devices.
    pub dev: String,
    /// Its model (`device/model`), trimmed; empty when it has none (md, dm, loop).
    pub model: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The devices it is built on (`slaves/`): the members of an md array
    /// or an LVM volume.
    pub slaves: Vec<String>,
    /// Something holds it (`holders/`: it is a member of an array or volume).
    pub held: bool,
    /// It has partitions.
    pub partitioned: bool,
}

impl Device {
    /// An NVMe instance store drive.
    pub fn is_instance_store(&self) -> bool {
        self.model == INSTANCE_STORE_MODEL
    }

    /// The device node, `/dev/<name>`.
    pub fn path(&self) -> String {
        format!("/dev/{}", self.name)
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// `major:minor` of the mounted device.
    pub dev: String,
    /// The directory of the file system that is mounted (`/` unless it is a bind mount of a subdirectory).
    pub fs_root: String,
    /// Where, as a path on the host.
    pub point: PathBuf,
    /// File system type.
    pub fstype: String,
    /// The mount source (`/dev/md0`, `/dev/mapper/vg.01-lv_ephemeral`).
    pub source: String,
}

/// Everything the plan needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Every block device, by name.
    pub devices: Vec<Device>,
    /// Every mount.
    pub mounts: Vec<Mount>,
}

impl Found {
    /// The device with this `major:minor`.
    pub fn by_dev(&self, dev: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.dev == dev)
    }

    /// The device with this name.
    pub fn by_name(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// Whether `device` is built on instance store only: an instance store
    /// drive, or an array or volume whose members all are (followed down
    /// through layers, such as LVM over md).
    pub fn on_instance_store(&self, device: &Device) -> bool {
        self.on_instance_store_at(device, 0)
    }

    fn on_instance_store_at(&self, device: &Device, depth: u32) -> bool {
        if device.is_instance_store() {
            return true;
        }
        depth < 4
            && !device.slaves.is_empty()
            && device.slaves.iter().all(|s| self.by_name(s).is_some_and(|m| self.on_instance_store_at(m, depth + 1)))
    }

    /// The instance store drives this node has, mounted or not.
    pub fn instance_store(&self) -> impl Iterator<Item = &Device> {
        self.devices.iter().filter(|d| d.is_instance_store())
    }

    /// Whether a mount uses `device`.
    pub fn is_mounted(&self, device: &Device) -> bool {
        self.mounts.iter().any(|m| m.dev == device.dev)
    }
}

/// Reads `<root>/sys/block` and `<root>/proc/self/mountinfo`. A root
/// without them (a container without sysfs, a test's root) has no drives
/// and no mounts: nothing to assemble, which the plan says.
pub fn discover(root: &Path) -> Result<Found, ScratchError> {
    let block = under(root, "/sys/block");
    let entries = match std::fs::read_dir(&block) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Found { devices: Vec::new(), mounts: Vec::new() });
        }
        Err(source) => return Err(ScratchError::Read { path: block, source }),
    };
    let mut devices = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ScratchError::Read { path: block.clone(), source })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = block.join(&name);
        let text =
            |file: &str| std::fs::read_to_string(dir.join(file)).map(|t| t.trim().to_owned()).unwrap_or_default();
        let names = |sub: &str| -> Vec<String> {
            std::fs::read_dir(dir.join(sub))
                .map(|it| it.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default()
        };
        let mut slaves = names("slaves");
        slaves.sort();
        // Partitions are subdirectories named after the disk (`nvme0n1p1`).
        let partitioned = names("").iter().any(|n| n.starts_with(&name) && n.len() > name.len());
        devices.push(Device {
            dev: text("dev"),
            model: text("device/model"),
            // `size` counts 512-byte sectors whatever the drive's block size.
            bytes: text("size").parse::<u64>().unwrap_or(0).saturating_mul(512),
            slaves,
            held: !names("holders").is_empty(),
            partitioned,
            name,
        });
    }
    devices.sort_by_key(|d| natural_key(&d.name));
    let mountinfo = under(root, "/proc/self/mountinfo");
    let text = std::fs::read_to_string(&mountinfo).map_err(|source| ScratchError::Read { path: mountinfo, source })?;
    Ok(Found { devices, mounts: parse_mountinfo(&text) })
}

/// `nvme2n1` before `nvme10n1`: names compared with their numbers as numbers.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((std::mem::take(&mut text), digits.parse().unwrap_or(u64::MAX)));
                digits.clear();
            }
            text.push(c);
        }
    }
    key.push((text, digits.parse().unwrap_or(0)));
    key
}

/// The mounts of a mountinfo text (proc(5)): `id parent major:minor root
/// point options [optional fields] - fstype source superoptions`.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(Mount {
                dev: (*fields.get(2)?).to_owned(),
                fs_root: crate::files::efs::unescape(fields.get(3)?),
                point: PathBuf::from(crate::files::efs::unescape(fields.get(4)?)),
                fstype: (*fields.get(dash + 1)?).to_owned(),
                source: crate::files::efs::unescape(fields.get(dash + 2)?),
            })
        })
        .collect()
}
