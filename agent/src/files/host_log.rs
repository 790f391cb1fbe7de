//! `$EFS_MOUNT/deeplearning/hosts.log`: one line per membership change, for
//! people and for training scripts that watch the cluster, for example
//! `7 ADDED 10.0.0.12 1763790000123456789` (docs/ARCHITECTURE.md, "Membership rules").
//!
//! Lines are appended with one `write(2)` each. On NFS, `O_APPEND` is not
//! atomic between clients, so only the master appends (the runner's job).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{FilesError, atomic, under};

/// The log under `root` for the file system mounted at `efs_mount`.
pub fn path(root: &Path, efs_mount: &str) -> PathBuf {
    under(root, efs_mount).join("deeplearning/hosts.log")
}

/// Appends `line` (a trailing newline is added; line breaks inside become spaces).
pub fn append(root: &Path, efs_mount: &str, line: &str) -> Result<(), FilesError> {
    let path = path(root, efs_mount);
    if let Some(dir) = path.parent() {
        atomic::create_dirs(dir)?;
    }
    let mut record = line.trim_end().replace(['\n', '\r'], " ");
    record.push('\n');
    let write_err = |source| FilesError::Write { path: path.clone(), source };
    let mut file = OpenOptions::new().create(true).append(true).open(&path).map_err(write_err)?;
    file.write_all(record.as_bytes()).map_err(write_err)?;
    file.sync_data().map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_lines_creating_directories() {
        let root = tempfile::tempdir().unwrap();
        append(root.path(), "/efs", "7 ADDED 10.0.0.12 1763790000123456789").unwrap();
        append(root.path(), "/efs", "8 REMOVED 10.0.0.12 1763790000999999999\n").unwrap();
        append(root.path(), "/efs", "9 ADDED\n10.0.0.13 1").unwrap();
        let text = std::fs::read_to_string(root.path().join("efs/deeplearning/hosts.log")).unwrap();
        assert_eq!(
            text,
            "7 ADDED 10.0.0.12 1763790000123456789\n8 REMOVED 10.0.0.12 1763790000999999999\n9 ADDED 10.0.0.13 1\n"
        );
    }
}
