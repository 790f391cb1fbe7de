//! The shared EFS file system: mounted at `EFS_MOUNT`, with a line in
//! `/etc/fstab` (in our managed block) so a reboot mounts it again.
//!
//! Mount options are AWS's recommended NFS settings
//! (<https://docs.aws.amazon.com/efs/latest/ug/mounting-fs-nfs-mount-settings.html>):
//! NFS 4.1, 1 MiB reads and writes, hard mounts with a 60 s timeout and two
//! retransmissions, `noresvport` so a reconnect after a network event gets a
//! new source port; `_netdev` waits for the network at boot and `nofail`
//! lets the instance boot (and report) even when EFS is unreachable.
//!
//! The DNS name `<fs-id>.efs.<region>.amazonaws.com` resolves to the mount
//! target in the instance's own Availability Zone.
//!
//! The fstab block holds every shared file system's line (EFS's, and FSx
//! for Lustre's from [`super::fsx`] when the config has one;
//! [`super::fstab_file`]), and [`mount_one`] is how either is mounted: the
//! mount point, the fstab block, then `mount` unless something is mounted
//! there already.
//!
//! The same block holds the scratch volume's line when the node config
//! asks for one ([`scratch_fstab_line`]; the volume itself is
//! [`crate::scratch`]'s): by its label, with `nofail` and a short device
//! timeout, so a reboot that keeps the instance store mounts it at once and
//! one after a stop and start (blank drives) boots without it.

use std::path::{Path, PathBuf};
use std::process::Command;

use node_contract::NodeConfig;

use super::apply::apply;
use super::atomic;
use super::error::FilesError;
use super::plan::Plan;
use node_contract::files::under;

/// The file, as on the node.
pub(crate) const FSTAB_PATH: &str = "/etc/fstab";

/// AWS's recommended NFS options, plus `_netdev,nofail` for boot.
pub(crate) const OPTIONS: &str =
    "nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,_netdev,nofail";

/// `fs-12345678.efs.us-east-1.amazonaws.com:/`
pub(crate) fn source(config: &NodeConfig) -> String {
    format!("{}.efs.{}.amazonaws.com:/", config.efs.file_system_id, config.region)
}

/// The file system label of the scratch volume the agent makes (at most 12
/// characters, XFS's limit).
pub(crate) const SCRATCH_LABEL: &str = "dlscratch";

/// The fstab line of the scratch volume at `mount` (no newline).
pub(crate) fn scratch_fstab_line(mount: &str) -> String {
    format!("LABEL={SCRATCH_LABEL} {} auto defaults,noatime,nofail,x-systemd.device-timeout=10s 0 2", escape(mount))
}

/// The fstab line for the config's file system (no newline).
pub(crate) fn fstab_line(config: &NodeConfig) -> String {
    format!("{} {} nfs4 {OPTIONS} 0 0", source(config), escape(&config.efs.mount))
}

/// One file system to mount: what it is called in messages, `mount`'s
/// arguments, and what to check when it fails.
pub(super) struct MountSpec<'a> {
    /// `EFS`, `FSx for Lustre`.
    pub what: &'static str,
    /// `-t` of `mount`.
    pub fs_type: &'static str,
    /// `-o` of `mount`.
    pub options: &'a str,
    /// The device: `host:/path`, `dns@tcp:/name`.
    pub source: String,
    /// The absolute mount point on the node.
    pub mount: &'a str,
    /// What to check when `mount` fails.
    pub hint: &'static str,
}

/// Ensures the mount point and the fstab line, then mounts the file system
/// unless `/proc/self/mountinfo` shows something mounted there already.
/// With `enabled == false` (no EFS in this environment, as in the local
/// tests) only the directory and the fstab line are ensured.
pub(crate) fn mount(root: &Path, config: &NodeConfig, enabled: bool) -> Result<(), FilesError> {
    let spec = MountSpec {
        what: "EFS",
        fs_type: "nfs4",
        options: OPTIONS,
        source: source(config),
        mount: &config.efs.mount,
        hint: "check that the file system has a mount target in this instance's Availability Zone and that its \
               security group allows NFS (TCP 2049) from the cluster",
    };
    mount_one(root, config, &spec, enabled, |_| Ok(()))
}

/// [`mount`] for any of the config's file systems: the mount point, the
/// fstab block, and `mount -t <fs_type> -o <options> <source> <mount>`
/// unless something is mounted there already. `ready` runs just before
/// `mount` (a check that the node can mount this kind at all).
pub(super) fn mount_one(
    root: &Path,
    config: &NodeConfig,
    spec: &MountSpec,
    enabled: bool,
    ready: impl FnOnce(&MountSpec) -> Result<(), String>,
) -> Result<(), FilesError> {
    let what = spec.what;
    let target = under(root, spec.mount);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|source| FilesError::Read { path: PathBuf::from("/proc/self/mountinfo"), source })?;
    // Checked before touching the directory: a stat of a hung hard NFS mount blocks.
    let mounted = is_mounted(&mountinfo, &target);
    if !mounted {
        atomic::create_dirs(&target)?;
    }
    apply(&Plan { files: vec![super::fstab_file(config)] }, root)?;
    if mounted {
        tracing::debug!(target = %target.display(), "{what} is already mounted");
        return Ok(());
    }
    if !enabled {
        tracing::info!(target = %target.display(), "{what} mounting is disabled; mount point and fstab line are in place");
        return Ok(());
    }
    ready(spec).map_err(|reason| FilesError::CannotMount { what, target: target.clone(), reason })?;
    let source = &spec.source;
    tracing::info!(%source, target = %target.display(), "mounting {what}");
    let out = Command::new("mount")
        .args(["-t", spec.fs_type, "-o", spec.options])
        .arg(source)
        .arg(&target)
        .output()
        .map_err(|e| FilesError::Mount { what, target: target.clone(), reason: format!("cannot run mount: {e}") })?;
    if !out.status.success() {
        return Err(FilesError::Mount {
            what,
            target,
            reason: format!(
                "mount {source} exited with {}: {}; {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                spec.hint
            ),
        });
    }
    Ok(())
}

/// Whether `mountinfo` (the text of `/proc/self/mountinfo`) lists a mount at `target`.
pub(crate) fn is_mounted(mountinfo: &str, target: &Path) -> bool {
    let target = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_owned());
    mountinfo.lines().filter_map(|l| l.split(' ').nth(4)).any(|mount_point| Path::new(&unescape(mount_point)) == target)
}

/// fstab and mountinfo write space, tab, newline and backslash as octal escapes.
pub(super) fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

/// A field of `/proc/self/mountinfo` or `/etc/fstab` with its octal
/// escapes (`\040` for a space) undone: the reverse of [`escape`].
pub(crate) fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if bytes[i] == b'\\'
            && let Some(d) = digits
            && let Ok(v) = u8::try_from(d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0')))
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::tests::config;

    #[test]
    fn the_fstab_line_uses_the_recommended_options() {
        assert_eq!(
            fstab_line(&config()),
            "fs-12345678.efs.us-east-1.amazonaws.com:/ /efs nfs4 \
             nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,_netdev,nofail 0 0"
        );
        let mut c = config();
        c.efs.mount = "/mnt/my efs".into();
        assert!(fstab_line(&c).contains(" /mnt/my\\040efs nfs4 "));
    }

    #[test]
    fn the_scratch_line_is_in_the_block_only_when_asked_for() {
        let crate::files::Content::Block(without) = crate::files::fstab_file(&config()).content else {
            panic!("a block")
        };
        assert!(!without.contains("LABEL="), "{without}");
        let mut c = config();
        c.scratch = Some(node_contract::data::Scratch { mount: "/scratch".into() });
        let crate::files::Content::Block(with) = crate::files::fstab_file(&c).content else { panic!("a block") };
        assert_eq!(
            with.lines().nth(1),
            Some("LABEL=dlscratch /scratch auto defaults,noatime,nofail,x-systemd.device-timeout=10s 0 2")
        );
    }

    #[test]
    fn mountinfo_is_read_with_escapes() {
        let info = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n\
                    99 22 0:50 / /mnt/my\\040efs rw,relatime shared:40 - nfs4 fs-1.efs.us-east-1.amazonaws.com:/ rw\n";
        assert!(is_mounted(info, Path::new("/mnt/my efs")));
        assert!(!is_mounted(info, Path::new("/mnt/my")));
        assert!(is_mounted(info, Path::new("/")));
        assert_eq!(unescape("a\\134b\\040"), "a\\b ");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
    }

    #[test]
    fn disabled_mount_ensures_the_directory_and_fstab_only_and_is_idempotent() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/fstab"), "LABEL=root / ext4 defaults 0 1\n").unwrap();
        mount(root.path(), &config(), false).unwrap();
        assert!(root.path().join("efs").is_dir());
        let fstab = std::fs::read_to_string(root.path().join("etc/fstab")).unwrap();
        assert!(fstab.starts_with("LABEL=root / ext4 defaults 0 1\n# BEGIN deeplearning-cluster"), "{fstab}");
        assert!(fstab.contains(&fstab_line(&config())));
        mount(root.path(), &config(), false).unwrap();
        assert_eq!(std::fs::read_to_string(root.path().join("etc/fstab")).unwrap(), fstab);
    }

    #[test]
    fn an_existing_mount_is_not_mounted_again() {
        // A tmpfs stands in for EFS: `mount` must notice it and not run the NFS mount.
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("efs");
        std::fs::create_dir(&target).unwrap();
        let Some(()) = crate::files::atomic::tests::try_mount(&["-t", "tmpfs", "tmpfs", target.to_str().unwrap()])
        else {
            return;
        };
        let _mounted = crate::files::atomic::tests::Mounted(target.clone());
        mount(root.path(), &config(), true).unwrap();
        assert!(root.path().join("etc/fstab").exists());
    }
}
