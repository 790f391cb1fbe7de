//! `storage.efs`: the EFS file system every node mounts (made by the
//! stack, or an existing one), and the rule for any file system's mount
//! point (EFS's here, FSx's in [`super::fsx`], data sets' in [`super::data`]).

use super::{At, Checker, is_aws_id, ticked};
use crate::spec::EfsSpec;

/// Why `mount` cannot be a file system's mount point (EFS's, FSx's), if it cannot.
pub(super) fn mount_problem(mount: &str) -> Option<&'static str> {
    const SYSTEM: [&str; 6] = ["/etc", "/usr", "/proc", "/sys", "/dev", "/boot"];
    if !mount.starts_with('/') {
        Some("is not an absolute path")
    } else if mount == "/" || mount.trim_end_matches('/').is_empty() {
        Some("is the root directory; mounting there would hide the whole system")
    } else if mount.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("contains a space or control character, which /etc/fstab cannot hold")
    } else if mount.contains("${") {
        Some("contains `${`, which would be read as a CloudFormation substitution")
    } else if mount.split('/').any(|part| part == "..") {
        Some("contains `..`")
    } else if SYSTEM.iter().any(|s| mount == *s || mount.starts_with(&format!("{s}/"))) {
        Some("is a system directory (or under one); mounting there would hide files the system needs")
    } else {
        None
    }
}

impl Checker<'_> {
    pub(super) fn efs(&mut self, efs: Option<super::super::model::Efs>) -> EfsSpec {
        let (mount, id) = efs.map_or((None, None), |e| (e.mount, e.file_system_id));
        let mount = mount.unwrap_or_else(|| "/efs".to_owned());
        if let Some(problem) = mount_problem(&mount) {
            self.error(
                "storage.efs.mount",
                At::Value,
                format!("{} {problem}", ticked(&mount)),
                "use an absolute path of its own, such as `/efs` or `/mnt/efs`",
            );
        }
        if let Some(id) = &id
            && !is_aws_id(id, "fs-")
        {
            self.error(
                    "storage.efs.file_system_id",
                    At::Value,
                    format!("{} is not an EFS file system id", ticked(id)),
                    "an id is `fs-` followed by 8 or 17 lower-case hex digits, for example `fs-0123456789abcdef0`; omit the field to create a new file system",
                );
        }
        EfsSpec { mount, file_system_id: id }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points() {
        assert_eq!(mount_problem("/efs"), None);
        assert_eq!(mount_problem("/mnt/shared"), None);
        assert_eq!(mount_problem("/etcetera"), None);
        for bad in ["efs", "/", "//", "/my efs", "/efs/${x}", "/mnt/../etc", "/etc", "/usr/local/efs", "/proc/x"] {
            assert!(mount_problem(bad).is_some(), "{bad}");
        }
    }
}
