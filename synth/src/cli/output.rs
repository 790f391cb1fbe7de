//! Where a template goes: standard output, or `-o FILE`, written atomically
//! (a temporary file in the same directory, fsync, rename, fsync of the
//! directory), so a failed run never leaves a partial template behind.
//!
//! `-o` writes only to a regular file or to a path that does not exist yet.
//! It is checked before the blueprint is read, and refused with the reason
//! when it is:
//! - a **symbolic link**: synth does not follow it. A rename would replace
//!   the link itself with a regular file (run as root, `-o /dev/stdout`
//!   replaced the system's `/dev/stdout` link), and writing through it would
//!   let whoever planted the link choose which file is replaced. The message
//!   names the link's target, to pass instead.
//! - a **directory**, a **FIFO**, a **socket** or a **device**: none of them
//!   can hold a template, and renaming over a device node would replace it.
//! - **the blueprint itself** (the same file, by device and inode, so a hard
//!   link or `-` reading it on stdin counts too): the template would
//!   overwrite the only copy of its source.
//!
//! An existing file keeps its permission bits (and its owner, where the
//! process may set it: when run as root); a new file gets `0666` less the
//! umask, as a shell redirection would give it.

use std::fs::{self, Metadata, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why `-o FILE` is not written.
#[derive(Debug, thiserror::Error)]
pub(super) enum OutputError {
    /// The path is a symbolic link.
    #[error(
        "{path} is a symbolic link (to {target}); synth does not write through links: pass the file itself, or leave out -o to print the template on standard output"
    )]
    Symlink {
        /// The `-o` path.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
    /// The path is a directory.
    #[error("{path} is a directory; name a file in it, for example `-o {}`", path.join("stack.json").display())]
    Directory {
        /// The `-o` path.
        path: PathBuf,
    },
    /// The path is a FIFO, socket or device.
    #[error(
        "{path} is a {kind}, not a regular file; -o writes only to a regular file or a new path (leave out -o to print the template on standard output)"
    )]
    Special {
        /// The `-o` path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The path is the blueprint being built.
    #[error("{path} is the blueprint itself; the template would overwrite it: name another file")]
    Input {
        /// The `-o` path.
        path: PathBuf,
    },
    /// The path could not be inspected.
    #[error("cannot check {path}: {source}")]
    Inspect {
        /// The `-o` path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// A checked `-o` path: where to write, and what the file there was like.
#[derive(Debug)]
pub(super) struct Destination {
    path: PathBuf,
    existing: Option<Metadata>,
}

impl Destination {
    /// Checks `path` against the rules above; `input` is the blueprint's
    /// metadata (`None` when it cannot be known).
    pub(super) fn check(path: &Path, input: Option<&Metadata>) -> Result<Destination, OutputError> {
        let existing = match fs::symlink_metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(source) => return Err(OutputError::Inspect { path: path.to_owned(), source }),
        };
        if let Some(meta) = &existing {
            let kind = meta.file_type();
            let owned = || path.to_owned();
            if kind.is_symlink() {
                let target = fs::read_link(path).unwrap_or_else(|_| PathBuf::from("?"));
                return Err(OutputError::Symlink { path: owned(), target });
            }
            if kind.is_dir() {
                return Err(OutputError::Directory { path: owned() });
            }
            let special = if kind.is_fifo() {
                Some("FIFO (named pipe)")
            } else if kind.is_socket() {
                Some("socket")
            } else if kind.is_char_device() {
                Some("character device")
            } else if kind.is_block_device() {
                Some("block device")
            } else {
                None
            };
            if let Some(kind) = special {
                return Err(OutputError::Special { path: owned(), kind });
            }
            if input.is_some_and(|i| i.dev() == meta.dev() && i.ino() == meta.ino()) {
                return Err(OutputError::Input { path: owned() });
            }
        }
        Ok(Destination { path: path.to_owned(), existing })
    }

    /// The path, for messages.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `text` atomically: a temporary file beside the target, synced,
    /// with the old file's mode (and owner), renamed over it.
    pub(super) fn write(&self, text: &str) -> io::Result<()> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // The kernel applies the umask to 0666 for a new file, as `>` does.
        let mut file = tempfile::Builder::new()
            .prefix(".synth-")
            .suffix(".tmp")
            .permissions(Permissions::from_mode(0o666))
            .tempfile_in(dir)?;
        if let Some(old) = &self.existing {
            // Owner first: chown clears set-id bits, which the mode then restores.
            if old.uid() != file.as_file().metadata()?.uid() || old.gid() != file.as_file().metadata()?.gid() {
                match std::os::unix::fs::fchown(file.as_file(), Some(old.uid()), Some(old.gid())) {
                    // Only root may give a file away; others keep the file as theirs.
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
                    other => other?,
                }
            }
            file.as_file().set_permissions(Permissions::from_mode(old.mode() & 0o7777))?;
        }
        file.write_all(text.as_bytes())?;
        file.as_file().sync_all()?;
        file.persist(&self.path).map_err(|e| e.error)?;
        // The rename is durable once the directory entry is on disk too.
        fs::File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_regular_file_or_a_new_path() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::os::unix::fs::symlink("elsewhere.json", d.join("link")).unwrap();
        let e = Destination::check(&d.join("link"), None).unwrap_err();
        assert!(e.to_string().contains("symbolic link (to elsewhere.json)"), "{e}");
        let e = Destination::check(d, None).unwrap_err();
        assert!(matches!(e, OutputError::Directory { .. }), "{e}");
        assert!(Destination::check(&d.join("new.json"), None).is_ok());
    }

    #[test]
    fn refuses_the_input_by_inode() {
        let dir = tempfile::tempdir().unwrap();
        let bp = dir.path().join("bp.yaml");
        fs::write(&bp, "name: x\n").unwrap();
        fs::hard_link(&bp, dir.path().join("same.yaml")).unwrap();
        let meta = fs::metadata(&bp).unwrap();
        for p in [bp.clone(), dir.path().join("same.yaml")] {
            let e = Destination::check(&p, Some(&meta)).unwrap_err();
            assert!(matches!(e, OutputError::Input { .. }), "{e}");
        }
    }

    #[test]
    fn keeps_the_mode_of_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.json");
        fs::write(&out, "old").unwrap();
        fs::set_permissions(&out, Permissions::from_mode(0o640)).unwrap();
        Destination::check(&out, None).unwrap().write("new\n").unwrap();
        let meta = fs::metadata(&out).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o640);
        assert_eq!(fs::read_to_string(&out).unwrap(), "new\n");
    }
}
