//! `$EFS_MOUNT/deeplearning/hosts.log`: one line per membership change, for
//! people and for training scripts that watch the cluster, for example
//! `7 ADDED 10.0.0.12 1763790000123456789` (docs/ARCHITECTURE.md, "Membership rules").
//!
//! Lines are appended with one `write(2)` and one `fdatasync(2)` per call,
//! however many lines the call brings: a formation of 1,000 nodes is 1,000
//! `ADDED` lines, and a sync per line (a round trip to EFS each) would hold
//! the master off its queue while the acknowledgements pile up.
//! On NFS, `O_APPEND` is not atomic between clients, so only the master
//! appends (the runner's job).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::atomic;
use super::error::FilesError;
use node_contract::files::under;

/// The log under `root` for the file system mounted at `efs_mount`.
pub fn path(root: &Path, efs_mount: &str) -> PathBuf {
    under(root, efs_mount).join("deeplearning/hosts.log")
}

/// Appends `line` (a trailing newline is added; line breaks inside become spaces).
pub fn append(root: &Path, efs_mount: &str, line: &str) -> Result<(), FilesError> {
    append_all(root, efs_mount, &[line])
}

/// Appends `lines` in order, each as [`append`] would, with one write and
/// one sync for all of them. Nothing is written for no lines.
pub fn append_all<S: AsRef<str>>(root: &Path, efs_mount: &str, lines: &[S]) -> Result<(), FilesError> {
    if lines.is_empty() {
        return Ok(());
    }
    let path = path(root, efs_mount);
    if let Some(dir) = path.parent() {
        atomic::create_dirs(dir)?;
    }
    let mut record = String::new();
    for line in lines {
        record.push_str(&line.as_ref().trim_end().replace(['\n', '\r'], " "));
        record.push('\n');
    }
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

    #[test]
    fn appends_many_lines_at_once_in_order() {
        let root = tempfile::tempdir().unwrap();
        append(root.path(), "/efs", "1 ADDED 10.0.0.1 1").unwrap();
        append_all::<&str>(root.path(), "/efs", &[]).unwrap();
        append_all(root.path(), "/efs", &["2 ADDED 10.0.0.2 2", "2 ADDED\n10.0.0.3 2\n", "2 REMOVED 10.0.0.1 2"])
            .unwrap();
        let text = std::fs::read_to_string(root.path().join("efs/deeplearning/hosts.log")).unwrap();
        assert_eq!(text, "1 ADDED 10.0.0.1 1\n2 ADDED 10.0.0.2 2\n2 ADDED 10.0.0.3 2\n2 REMOVED 10.0.0.1 2\n");
        // No lines, no file: nothing is created for nothing.
        let empty = tempfile::tempdir().unwrap();
        append_all::<String>(empty.path(), "/efs", &[]).unwrap();
        assert!(!empty.path().join("efs").exists());
    }
}
