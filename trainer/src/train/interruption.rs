//! `trainer train` on a host that EC2 gave an interruption notice.
//!
//! The agent writes the notice file ([`node_contract::interruption::NOTICE_PATH`])
//! and removes the node from the cluster at once. An elastic rank on it
//! (not rank 0: the master's process never leaves) watches that file
//! ([`NoticeWatch`], a `stat` per step at most every [`CHECK_EVERY`]) and,
//! once it is there, raises its leaving flag in the next step's gradient
//! all-reduce: one more `f32` in the buffer the step reduces anyway, so
//! every rank learns of it after the same step with no extra round trip.
//! Every rank stops after that step, the leaver is told to leave at once
//! and exits 0, and the survivors re-form and run the rest of the same epoch
//! over the new world, from the next step: no redo, no state moved (see
//! [`super::epochs`] for the loop, [`super::rendezvous`] for the decisions).
//! The leave costs the time of one step plus one rendezvous round trip,
//! whatever the epoch's length; a notice that comes at an epoch's last step
//! is reported at the boundary instead.
//!
//! Its supervisor (`trainer launch`) meanwhile sends the rank SIGTERM as
//! soon as the notice is there, and SIGKILL 5 s before the deadline. Dying
//! at that SIGTERM would be a rank lost mid-step, and the survivors would
//! redo the epoch. So a rank that `trainer launch` started ignores SIGTERM
//! while its host's notice file exists: it leaves at the next step, well
//! before the SIGKILL unless one step outlasts the notice (then the
//! survivors redo the epoch, as after any lost rank). Without a notice,
//! SIGTERM ends it as always.
//!
//! At the stop rank 0 writes a checkpoint of the state there (with the step
//! in the epoch: [`super::checkpoint::InEpoch`]) before the survivors
//! re-form. The notice's deadline does not gate it: the leaver is not held
//! by it (the rendezvous lets the leaver go on its own report), so the
//! checkpoint costs the survivors its write time, as at any boundary.
//!
//! Not built: a node dropped from the manifest for another reason than a
//! notice leaves at the next epoch boundary, as before (its agent does not
//! apply the generation without it, so only rank 0's host sees the change).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use node_contract::interruption::{NOTICE_PATH, NoticeFile};

/// How often [`NoticeWatch`] looks at the notice file (it is asked every step).
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(200);

/// The kernel's boot id (under `root` when there is one there, as the agent
/// reads it), to tell this boot's notice from a stale one.
pub(crate) fn boot_id(root: &Path) -> Option<String> {
    const BOOT_ID: &str = "proc/sys/kernel/random/boot_id";
    std::fs::read_to_string(root.join(BOOT_ID))
        .or_else(|_| std::fs::read_to_string(Path::new("/").join(BOOT_ID)))
        .ok()
        .map(|id| id.trim().to_owned())
}

/// This boot's notice in `path`, if there is one (a file the agent has not
/// finished, of another version, or of an earlier boot counts as none).
pub(crate) fn read_notice(path: &Path, boot: Option<&str>) -> Option<NoticeFile> {
    let notice = NoticeFile::parse(&std::fs::read_to_string(path).ok()?).ok()?;
    boot.is_none_or(|b| b == notice.boot_id).then_some(notice)
}

/// Whether this host has been given an interruption notice, as a rank asks
/// it every step: the file is looked at no more often than `every`, and once
/// this boot's notice was seen the answer stays yes (the rank is leaving).
#[derive(Debug)]
pub(crate) struct NoticeWatch {
    path: PathBuf,
    boot: Option<String>,
    every: Duration,
    last: Option<Instant>,
    notice: Option<NoticeFile>,
}

impl NoticeWatch {
    /// Watches the notice file under `root` every [`CHECK_EVERY`].
    pub(crate) fn new(root: &Path) -> Self {
        Self::every(root, CHECK_EVERY)
    }

    /// Watches the notice file under `root`, looking at most every `every`.
    pub(crate) fn every(root: &Path, every: Duration) -> Self {
        Self {
            path: node_contract::files::under(root, NOTICE_PATH),
            boot: boot_id(root),
            every,
            last: None,
            notice: None,
        }
    }

    /// This boot's notice, once it has been seen (only the tests read it
    /// back: a rank asks [`NoticeWatch::noticed`]).
    #[cfg(test)]
    pub(crate) fn notice(&self) -> Option<&NoticeFile> {
        self.notice.as_ref()
    }

    /// Whether the notice is there (or was: a leaving rank stays leaving).
    pub(crate) fn noticed(&mut self) -> bool {
        if self.notice.is_some() {
            return true;
        }
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            return false;
        }
        self.last = Some(Instant::now());
        // A stat first: the common case is no file, and it is asked every step.
        if !self.path.exists() {
            return false;
        }
        self.notice = read_notice(&self.path, self.boot.as_deref());
        if let Some(n) = &self.notice {
            tracing::warn!(
                "this host was given an interruption notice ({}): leaving the job at the next step",
                n.interruption.describe()
            );
        }
        self.notice.is_some()
    }
}

/// The notice file's path, for the signal handler.
static NOTICE: OnceLock<CString> = OnceLock::new();

/// SIGTERM: ignored while the notice file exists, else the default action
/// (the process ends by SIGTERM). Only async-signal-safe calls: `access`,
/// `signal`, `raise` (and an atomic load in `OnceLock::get`).
extern "C" fn on_sigterm(_: libc::c_int) {
    if let Some(path) = NOTICE.get() {
        // SAFETY: a NUL-terminated path that lives for the whole process.
        if unsafe { libc::access(path.as_ptr(), libc::F_OK) } == 0 {
            return;
        }
    }
    // SAFETY: plain integers; raising the default action ends the process.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::raise(libc::SIGTERM);
    }
}

/// Installs the SIGTERM handler for the notice file under `root`. Calls
/// interrupted by an ignored SIGTERM are restarted (`SA_RESTART`).
pub(crate) fn ignore_sigterm_while_noticed(root: &Path) {
    let path = node_contract::files::under(root, NOTICE_PATH);
    let Ok(path) = CString::new(path.as_os_str().as_bytes()) else { return };
    if NOTICE.set(path).is_err() {
        return;
    }
    // SAFETY: a zeroed sigaction with a handler, an empty mask and flags is
    // valid; the handler only makes async-signal-safe calls.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0 {
            tracing::warn!(
                "cannot install the SIGTERM handler: an interruption notice's SIGTERM ends this rank at once: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use node_contract::interruption::{NOTICE_FILE_VERSION, from_instance_action};

    fn write_notice(root: &Path, boot: &str) {
        let body = r#"{"action": "terminate", "time": "2030-01-01T00:00:00Z"}"#;
        let file = NoticeFile {
            version: NOTICE_FILE_VERSION,
            interruption: from_instance_action("i-1", body).unwrap(),
            boot_id: boot.to_owned(),
            noticed_unix_ms: 0,
        };
        let path = node_contract::files::under(root, NOTICE_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, file.to_text()).unwrap();
    }

    #[test]
    fn the_watch_sees_this_boots_notice_and_stays_leaving() {
        let root = tempfile::tempdir().unwrap();
        let boot = root.path().join("proc/sys/kernel/random");
        std::fs::create_dir_all(&boot).unwrap();
        std::fs::write(boot.join("boot_id"), "this-boot\n").unwrap();
        let mut watch = NoticeWatch::every(root.path(), Duration::ZERO);
        assert!(!watch.noticed());
        // A notice of an earlier boot is stale: not a reason to leave.
        write_notice(root.path(), "an-earlier-boot");
        assert!(!watch.noticed());
        write_notice(root.path(), "this-boot");
        assert!(watch.noticed());
        assert_eq!(watch.notice().unwrap().interruption.instance_id, "i-1");
        // Once leaving, always leaving (the agent may clear the file).
        std::fs::remove_file(node_contract::files::under(root.path(), NOTICE_PATH)).unwrap();
        assert!(watch.noticed());
    }

    #[test]
    fn the_watch_looks_at_the_file_at_most_every_period() {
        let root = tempfile::tempdir().unwrap();
        let mut watch = NoticeWatch::every(root.path(), Duration::from_secs(3600));
        assert!(!watch.noticed());
        write_notice(root.path(), &boot_id(root.path()).unwrap_or_default());
        assert!(!watch.noticed(), "looked again within the period");
        watch.last = None;
        assert!(watch.noticed());
    }
}
