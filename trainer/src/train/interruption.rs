//! `trainer train` on a host that EC2 gave an interruption notice.
//!
//! The agent removes a noticed node from the cluster at once, so an elastic
//! rank on it leaves the job at its next epoch boundary by itself (the
//! rendezvous reads the new manifest): cleanly, with no redo for the
//! survivors. Its supervisor (`trainer launch`) meanwhile sends it SIGTERM
//! as soon as the notice is there, and SIGKILL 5 s before the deadline;
//! dying at that SIGTERM would be a rank lost mid-epoch, and the survivors
//! would redo the epoch. So a rank that `trainer launch` started ignores
//! SIGTERM while its host's notice file
//! ([`node_contract::interruption::NOTICE_PATH`]) exists: it leaves at the
//! boundary when that comes before the SIGKILL, and is no worse off than
//! before when it does not. Without a notice, SIGTERM ends it as always.
//!
//! Leaving at the next *step* (no redo even when the epoch outlasts the
//! deadline) needs step boundaries in the rendezvous; it is not done here.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use node_contract::interruption::NOTICE_PATH;

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
pub fn ignore_sigterm_while_noticed(root: &Path) {
    let path = crate::under(root, NOTICE_PATH);
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
