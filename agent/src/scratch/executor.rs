//! Carries out a [`Plan`] with [`Commands`]: stripe the drives with mdadm
//! (RAID 0), format the volume (XFS when `mkfs.xfs` is there, else ext4,
//! both without discarding or initialising every block up front, so a
//! volume of tens of TB is ready in seconds), mount it with `noatime` at
//! the scratch mount point, or bind the image's own mount there, and give
//! the mount point to the default user.
//!
//! The fstab line (`LABEL=` [`LABEL`], `nofail`) is in the agent's `/etc/fstab`
//! block ([`crate::files::efs`]), so a reboot that keeps the drives mounts
//! the volume before anyone logs in, and one after a stop and start (blank
//! drives, no such label) boots all the same; the agent assembles again at
//! every start.

use std::path::Path;

use tracing::warn;

use super::commands::Commands;
use super::plan::Plan;
use super::{Outcome, ScratchError};
use crate::files::efs::SCRATCH_LABEL as LABEL;
use crate::files::passwd;

/// Carries out `plan` for the scratch volume at `target` (the mount point
/// under the agent's root); `root` is where `/etc/passwd` is read for
/// `default_user`.
pub(crate) fn execute(
    root: &Path,
    target: &Path,
    default_user: &str,
    plan: &Plan,
    commands: &impl Commands,
) -> Result<Outcome, ScratchError> {
    let how = match plan {
        Plan::Nothing { why } => return Ok(Outcome::Absent { why: why.clone() }),
        Plan::Blocked { why } => return Err(ScratchError::Blocked { why: why.clone() }),
        Plan::AlreadyMounted { source } => return Ok(Outcome::Mounted { how: format!("{source}, already mounted") }),
        Plan::Reuse { from, source } => {
            create_dir(target)?;
            let from = from.to_string_lossy();
            commands.run("mount", &["--bind", &from, &target.to_string_lossy()])?;
            format!("the image's mount of the instance store, {from} ({source}), bound onto it")
        }
        Plan::MountExisting { device } => {
            let formatted = format_unless_ours(device, commands, false)?;
            mount(device, target, commands)?;
            format!("{device}, an array over the instance store{}", if formatted { ", formatted" } else { "" })
        }
        Plan::Assemble { drives, array, bytes } => {
            let refs: Vec<&str> = drives.iter().map(String::as_str).collect();
            let device = match array {
                Some(array) => {
                    let count = drives.len().to_string();
                    let mut args = vec!["--create", array, "--run", "--level=0", "--raid-devices", &count];
                    args.extend(&refs);
                    commands.run("mdadm", &args)?;
                    array.as_str()
                }
                None => refs[0],
            };
            // A single drive may hold our file system from before a reboot.
            let formatted = format_unless_ours(device, commands, array.is_some())?;
            mount(device, target, commands)?;
            format!(
                "{} ({} GB){}",
                if array.is_some() { format!("{device}, RAID 0 over {}", drives.join(" ")) } else { device.to_owned() },
                bytes / 1_000_000_000,
                if formatted { ", formatted" } else { ", its file system kept" }
            )
        }
    };
    give_to_user(root, target, default_user)?;
    Ok(Outcome::Mounted { how })
}

/// Formats `device` unless it already holds our file system (by its
/// label); `fresh`: it was just created, so it is blank. A device with
/// another file system is never formatted.
fn format_unless_ours(device: &str, commands: &impl Commands, fresh: bool) -> Result<bool, ScratchError> {
    if !fresh {
        // `blkid -p` probes the device itself (no cache); exit status 2 means nothing found.
        let probe = commands.run("blkid", &["-p", "-o", "export", device]).unwrap_or_default();
        let value = |key: &str| {
            probe.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('='))).unwrap_or("").to_owned()
        };
        let (fstype, label) = (value("TYPE"), value("LABEL"));
        if label == LABEL {
            return Ok(false);
        }
        if !fstype.is_empty() {
            return Err(ScratchError::Foreign { device: device.to_owned(), fstype, label });
        }
    }
    if commands.has("mkfs.xfs") {
        // -K: no discard of every block first (the drives come zeroed).
        commands.run("mkfs.xfs", &["-f", "-K", "-L", LABEL, device])?;
    } else {
        // Lazy inode table and journal initialisation: the kernel zeroes
        // them in the background after the mount, instead of mkfs writing
        // every group of a multi-TB volume now.
        commands.run(
            "mkfs.ext4",
            &["-F", "-q", "-m", "0", "-L", LABEL, "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", device],
        )?;
    }
    Ok(true)
}

fn mount(device: &str, target: &Path, commands: &impl Commands) -> Result<(), ScratchError> {
    create_dir(target)?;
    commands.run("mount", &["-o", "noatime", device, &target.to_string_lossy()])?;
    Ok(())
}

fn create_dir(path: &Path) -> Result<(), ScratchError> {
    std::fs::create_dir_all(path).map_err(|source| ScratchError::Write { path: path.into(), source })
}

/// The mount point belongs to the default user, who runs the jobs that
/// read and write it (mode 0755: root, the agent's data fetch, writes
/// there too). Without that user in passwd it is left open to all as
/// `/tmp` is (1777), with a warning.
fn give_to_user(root: &Path, target: &Path, user: &str) -> Result<(), ScratchError> {
    use std::os::unix::fs::PermissionsExt;
    let found = passwd::lookup(root, user).map_err(|e| ScratchError::Files(Box::new(e)))?;
    let mode = match &found {
        Some(u) => {
            std::os::unix::fs::chown(target, Some(u.uid), Some(u.gid))
                .map_err(|source| ScratchError::Write { path: target.into(), source })?;
            0o755
        }
        None => {
            warn!(user, target = %target.display(), "the default user is not in /etc/passwd; the scratch volume is open to all (1777)");
            0o1777
        }
    };
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(mode))
        .map_err(|source| ScratchError::Write { path: target.into(), source })
}
