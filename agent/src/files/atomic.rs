//! Atomic, idempotent file writes.
//!
//! A write goes to a temporary file in the target's own directory, is
//! flushed to disk (fsync), renamed over the target, and the directory is
//! flushed too, so a crash leaves either the old file or the new one, never
//! half of each. Content that is already on disk is not written again (a
//! re-run changes nothing, not even modification times).
//!
//! The one exception is a target that is itself a mount point: Docker and
//! the project's network-namespace tests bind-mount a file onto
//! `/etc/hosts`, and `rename(2)` onto a mount point fails with `EBUSY` (or
//! `EXDEV` on some kernels). The file can still be rewritten in place, which
//! is what this module does then, with a log line: a crash in the middle of
//! that rewrite can leave a partial file, which is the price of the target
//! being a mount point, and the next run repairs it.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::error::FilesError;

/// Writes `content` to `path` with `mode`, unless it is already there.
///
/// Returns whether anything changed: `true` when the content was written or
/// only the mode had to be corrected, `false` when the file was already as
/// asked. Parent directories are created (mode 0755). On failure the old
/// file is left as it was (except in the in-place fallback, see the module docs).
pub(crate) fn write_if_changed(path: &Path, content: &str, mode: u32) -> Result<bool, FilesError> {
    match fs::read(path) {
        Ok(current) if current == content.as_bytes() => {
            let meta = fs::metadata(path).map_err(|source| FilesError::Read { path: path.to_owned(), source })?;
            if meta.permissions().mode() & 0o7777 == mode {
                return Ok(false);
            }
            fs::set_permissions(path, Permissions::from_mode(mode))
                .map_err(|source| FilesError::Write { path: path.to_owned(), source })?;
            return Ok(true);
        }
        Ok(_) => {}
        // A parent that is not a directory is reported by `create_dirs` below, naming it.
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {}
        Err(source) => return Err(FilesError::Read { path: path.to_owned(), source }),
    }
    write(path, content, mode)?;
    Ok(true)
}

/// Creates `dir` and its missing parents.
pub(crate) fn create_dirs(dir: &Path) -> Result<(), FilesError> {
    fs::create_dir_all(dir).map_err(|source| FilesError::CreateDir { path: dir.to_owned(), source })
}

/// Writes unconditionally: temp file, fsync, rename, fsync the directory.
pub(crate) fn write(path: &Path, content: &str, mode: u32) -> Result<(), FilesError> {
    let write_err = |source| FilesError::Write { path: path.to_owned(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    create_dirs(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A leading dot keeps the temp file out of globs such as /etc/profile.d/*.sh
    // for the moment it exists; it is removed on every error path by its Drop.
    let mut temp =
        tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir).map_err(write_err)?;
    temp.write_all(content.as_bytes()).map_err(write_err)?;
    temp.as_file().set_permissions(Permissions::from_mode(mode)).map_err(write_err)?;
    temp.as_file().sync_all().map_err(write_err)?;
    match temp.persist(path) {
        Ok(_) => {}
        Err(e) if needs_in_place(&e.error) => {
            tracing::info!(
                path = %path.display(),
                error = %e.error,
                "the file is a mount point (rename refused), rewriting it in place"
            );
            // `e.file` is dropped here, which removes the temp file.
            write_in_place(path, content, mode)?;
            return Ok(());
        }
        Err(e) => return Err(write_err(e.error)),
    }
    // The rename is durable only once the directory entry is on disk.
    File::open(dir).and_then(|d| d.sync_all()).map_err(write_err)
}

/// Whether a failed rename means the target is a mount point that must be
/// rewritten in place: `EBUSY` (a bind-mounted file) or `EXDEV` (reported
/// instead by some kernels and overlay file systems).
pub(crate) fn needs_in_place(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::ResourceBusy | io::ErrorKind::CrossesDevices)
}

/// Rewrites an existing file through its own inode: write from the start,
/// cut to length, fsync. The file stays the same inode, so a bind mount of it
/// sees the new content.
pub(crate) fn write_in_place(path: &Path, content: &str, mode: u32) -> Result<(), FilesError> {
    let write_err = |source| FilesError::Write { path: path.to_owned(), source };
    // Not `truncate(true)` at open: writing first and cutting after keeps the
    // old bytes around a little longer if the write itself fails early.
    let mut file = OpenOptions::new().write(true).open(path).map_err(write_err)?;
    file.write_all(content.as_bytes()).map_err(write_err)?;
    file.set_len(content.len() as u64).map_err(write_err)?;
    file.set_permissions(Permissions::from_mode(mode)).map_err(write_err)?;
    file.sync_all().map_err(write_err)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::process::Command;

    use super::*;

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn writes_creates_parents_and_skips_unchanged_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.txt");
        assert!(write_if_changed(&path, "one\n", 0o640).unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), "one\n");
        assert_eq!(mode_of(&path), 0o640);
        let before = fs::metadata(&path).unwrap();
        assert!(!write_if_changed(&path, "one\n", 0o640).unwrap());
        let after = fs::metadata(&path).unwrap();
        assert_eq!(
            (before.ino(), before.mtime_nsec(), before.mtime()),
            (after.ino(), after.mtime_nsec(), after.mtime())
        );
        // A different mode alone is corrected without rewriting the content.
        assert!(write_if_changed(&path, "one\n", 0o600).unwrap());
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(fs::metadata(&path).unwrap().ino(), before.ino());
        // New content replaces the file through a rename (a new inode).
        assert!(write_if_changed(&path, "two\n", 0o600).unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");
        assert_ne!(fs::metadata(&path).unwrap().ino(), before.ino());
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "no temp files left behind");
    }

    #[test]
    fn a_parent_that_is_a_file_is_an_error_naming_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("etc"), "not a directory").unwrap();
        let e = write_if_changed(&dir.path().join("etc/hosts"), "x\n", 0o644).unwrap_err();
        assert!(matches!(e, FilesError::CreateDir { .. }), "{e:?}");
        assert!(e.to_string().contains("etc"), "{e}");
    }

    #[test]
    fn the_in_place_fallback_is_chosen_for_busy_and_cross_device_renames_only() {
        assert!(needs_in_place(&io::Error::from(io::ErrorKind::ResourceBusy)));
        assert!(needs_in_place(&io::Error::from(io::ErrorKind::CrossesDevices)));
        assert!(needs_in_place(&io::Error::from_raw_os_error(16))); // EBUSY
        assert!(needs_in_place(&io::Error::from_raw_os_error(18))); // EXDEV
        assert!(!needs_in_place(&io::Error::from(io::ErrorKind::PermissionDenied)));
        assert!(!needs_in_place(&io::Error::from_raw_os_error(28))); // ENOSPC
    }

    #[test]
    fn in_place_rewrite_keeps_the_inode_and_cuts_longer_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        fs::write(&path, "a much longer old content\n").unwrap();
        let ino = fs::metadata(&path).unwrap().ino();
        write_in_place(&path, "short\n", 0o644).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "short\n");
        assert_eq!(fs::metadata(&path).unwrap().ino(), ino);
    }

    /// Runs `mount` with `args`; `None` (and a printed reason) when this
    /// machine does not let the test mount (not root, no mount namespace).
    pub(crate) fn try_mount(args: &[&str]) -> Option<()> {
        match Command::new("mount").args(args).output() {
            Ok(out) if out.status.success() => Some(()),
            Ok(out) => {
                eprintln!("skipping: mount {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
                None
            }
            Err(e) => {
                eprintln!("skipping: cannot run mount: {e}");
                None
            }
        }
    }

    /// Unmounts on drop, so a failing assertion does not leave mounts behind.
    pub(crate) struct Mounted(pub(crate) std::path::PathBuf);

    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }

    #[test]
    fn a_bind_mounted_target_is_rewritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("hosts.source");
        let target = dir.path().join("hosts");
        fs::write(&source, "127.0.0.1 localhost\n").unwrap();
        fs::write(&target, "").unwrap();
        let Some(()) = try_mount(&["--bind", source.to_str().unwrap(), target.to_str().unwrap()]) else { return };
        let _mounted = Mounted(target.clone());
        // Check the premise: a plain rename onto the mount point is refused.
        let probe = dir.path().join("probe");
        fs::write(&probe, "x").unwrap();
        let refused = fs::rename(&probe, &target).unwrap_err();
        assert!(needs_in_place(&refused), "{refused:?}");

        assert!(write_if_changed(&target, "127.0.0.1 localhost\n10.0.0.5 deeplearning-worker1\n", 0o644).unwrap());
        assert_eq!(fs::read_to_string(&target).unwrap(), "127.0.0.1 localhost\n10.0.0.5 deeplearning-worker1\n");
        // Written through the mount: the bind source sees it too.
        assert_eq!(fs::read_to_string(&source).unwrap(), "127.0.0.1 localhost\n10.0.0.5 deeplearning-worker1\n");
        assert!(!write_if_changed(&target, "127.0.0.1 localhost\n10.0.0.5 deeplearning-worker1\n", 0o644).unwrap());
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_full_or_read_only_file_system_leaves_the_old_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let Some(()) = try_mount(&["-t", "tmpfs", "-o", "size=4k", "tmpfs", mnt.to_str().unwrap()]) else { return };
        let _mounted = Mounted(mnt.clone());
        let path = mnt.join("hosts");
        assert!(write_if_changed(&path, "old\n", 0o644).unwrap());

        // Full: 64 KiB cannot fit in a 4 KiB tmpfs.
        let big = "x".repeat(64 * 1024);
        let e = write_if_changed(&path, &big, 0o644).unwrap_err();
        assert!(matches!(&e, FilesError::Write { path: p, .. } if p == &path), "{e:?}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old\n");
        assert_eq!(fs::read_dir(&mnt).unwrap().count(), 1, "the temp file is removed");

        // Read-only.
        try_mount(&["-o", "remount,ro", mnt.to_str().unwrap()]).expect("remount read-only");
        let e = write_if_changed(&path, "new\n", 0o644).unwrap_err();
        assert!(e.to_string().contains("hosts"), "{e}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old\n");
        // Unchanged content needs no write, so a read-only file system is fine then.
        assert!(!write_if_changed(&path, "old\n", 0o644).unwrap());
    }
}
