//! The FSx for Lustre file system (node config `fsx`): mounted at its mount
//! point after EFS, with a line in `/etc/fstab` beside EFS's (the same
//! managed block, [`super::fstab_file`]) so a reboot mounts it again.
//!
//! The mount command and fstab options are AWS's
//! (<https://docs.aws.amazon.com/fsx/latest/LustreGuide/mount-fs-auto-mount-onreboot.html>):
//! `relatime,flock` (file locks work across nodes); in fstab also
//! `_netdev`, `x-systemd.automount` and `x-systemd.requires=network.service`,
//! so systemd mounts it on first access once the network is up instead of
//! holding the boot. The device is `<dns name>@tcp:/<mount name>`.
//!
//! Lustre is not NFS: the node needs the Lustre client (`mount.lustre` and
//! its kernel module). The Deep Learning AMIs have it; an image without it
//! gets an error that says so, before `mount` runs.

use std::path::{Path, PathBuf};

use node_contract::NodeConfig;
use node_contract::data::FsxLustre;

use super::efs::{MountSpec, escape, mount_one};
use super::error::FilesError;

/// `mount -o` for Lustre.
pub(crate) const MOUNT_OPTIONS: &str = "relatime,flock";

/// The fstab options.
pub(crate) const FSTAB_OPTIONS: &str =
    "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service";

/// Where `mount` looks for its `mount.lustre` helper.
const HELPER_DIRS: [&str; 5] = ["/sbin", "/usr/sbin", "/usr/local/sbin", "/bin", "/usr/bin"];

/// `fs-0123.fsx.us-east-1.amazonaws.com@tcp:/abcdef`
pub(crate) fn source(fsx: &FsxLustre) -> String {
    format!("{}@tcp:/{}", fsx.dns_name, fsx.mount_name)
}

/// The fstab line for the config's Lustre file system (no newline), if it has one.
pub(crate) fn fstab_line(config: &NodeConfig) -> Option<String> {
    let fsx = config.fsx.as_ref()?;
    Some(format!("{} {} lustre {FSTAB_OPTIONS} 0 0", source(fsx), escape(&fsx.mount)))
}

/// Ensures the mount point and the fstab line, then mounts the file system
/// unless something is mounted there already; nothing when the config has
/// no FSx. With `enabled == false` (tests, containers) only the directory
/// and the fstab line are ensured.
pub(crate) fn mount(root: &Path, config: &NodeConfig, enabled: bool) -> Result<(), FilesError> {
    let Some(fsx) = &config.fsx else { return Ok(()) };
    let spec = MountSpec {
        what: "FSx for Lustre",
        fs_type: "lustre",
        options: MOUNT_OPTIONS,
        source: source(fsx),
        mount: &fsx.mount,
        hint: "check that the file system is AVAILABLE and that its security group and the cluster's allow Lustre \
               (TCP 988 and 1018-1023) both ways",
    };
    let dirs: Vec<&Path> = HELPER_DIRS.iter().map(Path::new).collect();
    mount_one(root, config, &spec, enabled, |_| client_in(&dirs).map(|_| ()).ok_or_else(no_client))
}

/// The Lustre mount helper, if one of `dirs` has it.
pub(crate) fn client_in(dirs: &[&Path]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join("mount.lustre")).find(|p| p.is_file())
}

/// What to do when the image has no Lustre client.
fn no_client() -> String {
    "this image has no Lustre client (no mount.lustre in /sbin or /usr/sbin): boot the AWS Deep Learning AMI, \
     which has it, or install it in the image (Ubuntu: `apt-get install lustre-client-modules-$(uname -r)`; \
     Amazon Linux 2023: `dnf install lustre-client`; \
     https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html)"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::tests::config;

    fn with_fsx() -> NodeConfig {
        let mut c = config();
        c.fsx = Some(FsxLustre {
            file_system_id: "fs-0123456789abcdef0".into(),
            dns_name: "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com".into(),
            mount_name: "abcdefgh".into(),
            mount: "/fsx".into(),
        });
        c
    }

    #[test]
    fn the_fstab_line_is_awss_with_the_dns_and_mount_names() {
        assert_eq!(fstab_line(&config()), None);
        assert_eq!(
            fstab_line(&with_fsx()).unwrap(),
            "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh /fsx lustre \
             defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service 0 0"
        );
        let mut c = with_fsx();
        c.fsx.as_mut().unwrap().mount = "/mnt/my fsx".into();
        assert!(fstab_line(&c).unwrap().contains(" /mnt/my\\040fsx lustre "));
    }

    /// EFS's line and FSx's share the managed block, whichever writes it;
    /// a second mount changes nothing.
    #[test]
    fn disabled_mount_ensures_both_fstab_lines_and_the_directory_and_is_idempotent() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/fstab"), "LABEL=root / ext4 defaults 0 1\n").unwrap();
        let c = with_fsx();
        crate::files::efs::mount(root.path(), &c, false).unwrap();
        mount(root.path(), &c, false).unwrap();
        assert!(root.path().join("fsx").is_dir());
        let fstab = std::fs::read_to_string(root.path().join("etc/fstab")).unwrap();
        let efs = crate::files::efs::fstab_line(&c);
        let lustre = fstab_line(&c).unwrap();
        assert!(fstab.starts_with("LABEL=root / ext4 defaults 0 1\n# BEGIN deeplearning-cluster"), "{fstab}");
        assert!(fstab.contains(&format!("{efs}\n{lustre}\n")), "{fstab}");
        mount(root.path(), &c, false).unwrap();
        crate::files::efs::mount(root.path(), &c, false).unwrap();
        assert_eq!(std::fs::read_to_string(root.path().join("etc/fstab")).unwrap(), fstab);
    }

    #[test]
    fn no_fsx_in_the_config_mounts_nothing() {
        let root = tempfile::tempdir().unwrap();
        mount(root.path(), &config(), true).unwrap();
        assert!(!root.path().join("fsx").exists());
    }

    /// The mount command, and the error an image without the client gets
    /// (before `mount` runs, so this test runs no mount).
    #[test]
    fn an_image_without_the_lustre_client_is_told_what_to_use() {
        let c = with_fsx();
        assert_eq!(source(c.fsx.as_ref().unwrap()), "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh");
        let bin = tempfile::tempdir().unwrap();
        assert_eq!(client_in(&[bin.path()]), None);
        std::fs::write(bin.path().join("mount.lustre"), "").unwrap();
        assert_eq!(client_in(&[Path::new("/nonexistent"), bin.path()]), Some(bin.path().join("mount.lustre")));

        let root = tempfile::tempdir().unwrap();
        let spec = MountSpec {
            what: "FSx for Lustre",
            fs_type: "lustre",
            options: MOUNT_OPTIONS,
            source: source(c.fsx.as_ref().unwrap()),
            mount: "/fsx",
            hint: "",
        };
        let empty = tempfile::tempdir().unwrap();
        let e =
            mount_one(root.path(), &c, &spec, true, |_| client_in(&[empty.path()]).map(|_| ()).ok_or_else(no_client))
                .unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("cannot mount FSx for Lustre at "), "{text}");
        assert!(text.contains("Deep Learning AMI") && text.contains("lustre-client"), "{text}");
        // The fstab line is in place all the same: a reboot after installing the client mounts it.
        let fstab = std::fs::read_to_string(root.path().join("etc/fstab")).unwrap();
        assert!(fstab.contains(&fstab_line(&c).unwrap()));
    }
}
