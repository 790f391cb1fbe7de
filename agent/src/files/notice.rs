//! `/var/lib/deeplearning/interruption.json`: the interruption notice EC2
//! gave this node (a Spot instance action or a rebalance recommendation),
//! written by the agent's watcher ([`crate::interruption`]) as soon as it
//! sees one, and read by `trainer` to stop this host's ranks in time.
//!
//! The format is part of the node contract ([`node_contract::interruption`]);
//! this module reads, writes and removes the file under the agent's root.

use std::path::Path;

pub(crate) use node_contract::interruption::{NOTICE_FILE_VERSION, NOTICE_PATH as PATH, NoticeFile};

use super::atomic;
use super::error::FilesError;
use node_contract::files::under;

/// The notice under `root`; `None` when there is none.
pub(crate) fn read(root: &Path) -> Result<Option<NoticeFile>, FilesError> {
    let path = under(root, PATH);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FilesError::Read { path, source }),
    };
    NoticeFile::parse(&text).map(Some).map_err(|source| FilesError::ParseNotice { path, source })
}

/// Writes the notice (atomically, 0644: anyone's job may read it).
pub(crate) fn write(root: &Path, notice: &NoticeFile) -> Result<(), FilesError> {
    atomic::write_if_changed(&under(root, PATH), &notice.to_text(), 0o644)?;
    Ok(())
}

/// Removes the notice file; no file is fine.
pub(crate) fn remove(root: &Path) -> Result<(), FilesError> {
    let path = under(root, PATH);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(FilesError::Write { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_read_and_removed_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()).unwrap(), None);
        let interruption =
            node_contract::interruption::from_rebalance("i-1", r#"{"noticeTime":"2026-11-25T19:58:00Z"}"#).unwrap();
        let notice = NoticeFile { version: NOTICE_FILE_VERSION, interruption, boot_id: "b".into(), noticed_unix_ms: 5 };
        write(root.path(), &notice).unwrap();
        assert!(root.path().join("var/lib/deeplearning/interruption.json").is_file());
        assert_eq!(read(root.path()).unwrap(), Some(notice));
        remove(root.path()).unwrap();
        remove(root.path()).unwrap();
        assert_eq!(read(root.path()).unwrap(), None);
        std::fs::write(root.path().join("var/lib/deeplearning/interruption.json"), "{\"version\":7}").unwrap();
        let e = read(root.path()).unwrap_err();
        assert!(e.to_string().contains("version 7 is not supported"), "{e}");
    }
}
