//! The open-file limit (`RLIMIT_NOFILE`) of the commands that reach many
//! hosts at once. `trainer launch` keeps one ssh client per rank for the
//! whole job, and holds three pipes to it and the rank's log file: 256
//! hosts with 8 GPUs each are 2,048 ranks and over 8,000 descriptors,
//! against a default soft limit of 1,024. So before anything starts, the
//! soft limit is raised to what is needed (at most the hard limit, which an
//! unprivileged process may do), and when even the hard limit is too low
//! the command stops at once with what to change, instead of failing at
//! rank 250 with "Too many open files" and stopping the ranks already
//! started.

use crate::error::{Error, Result};

/// Descriptors a command needs besides its connections (stdio, the runtime,
/// the hosts and profile files, the terminal).
pub(crate) const BASE: u64 = 64;

/// Descriptors `launch` holds per rank: the ssh client's stdin, stdout and
/// stderr pipes, and the rank's log file.
pub(crate) const PER_RANK: u64 = 4;

/// Descriptors `kill` and `doctor` hold per ssh in flight: stdout and stderr pipes.
pub(crate) const PER_PROBE: u64 = 2;

/// Makes sure this process may open `needed` files: raises the soft limit
/// up to the hard limit when it is lower; an error naming `what` and the fix
/// when the hard limit is lower still. Returns the soft limit now in force.
pub(crate) fn ensure(needed: u64, what: &str) -> Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        // Nothing known: go on; the kernel will say if a descriptor is refused.
        return Ok(u64::MAX);
    }
    let (soft, hard): (u64, u64) = (limit.rlim_cur, limit.rlim_max);
    if soft >= needed {
        return Ok(soft);
    }
    if hard < needed {
        return Err(Error::OpenFiles { needed, soft, hard, what: what.to_owned() });
    }
    // Up to what is needed with room, not to the hard limit itself: some
    // hard limits are in the billions, and child processes inherit it.
    let raised = needed.saturating_mul(2).max(4096).min(hard);
    let new = libc::rlimit { rlim_cur: raised, rlim_max: limit.rlim_max };
    // SAFETY: setrlimit reads only the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
        let source = std::io::Error::last_os_error();
        return Err(Error::OpenFiles { needed, soft, hard: soft, what: format!("{what} ({source})") });
    }
    tracing::debug!(soft, raised, hard, "raised the open-file limit");
    Ok(raised)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limit is per process and only ever raised here, so the test
    /// works from whatever limits the test process has.
    #[test]
    fn raises_the_soft_limit_and_refuses_beyond_the_hard_one() {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
        let hard: u64 = limit.rlim_max;
        // Within the soft limit: nothing changes.
        assert!(ensure(16, "a test").unwrap() >= 16);
        // Within the hard limit: raised, and in force afterwards.
        let want = hard.min(limit.rlim_cur + 100);
        let now = ensure(want, "a test").unwrap();
        assert!(now >= want);
        let mut after = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut after) }, 0);
        assert!(after.rlim_cur >= want);
        // Beyond the hard limit: an error that says what to do.
        if hard < u64::MAX / 4 {
            let e = ensure(hard + 1, "256 hosts").unwrap_err().to_string();
            assert!(e.contains("256 hosts") && e.contains("ulimit -Hn") && e.contains(&hard.to_string()), "{e}");
        }
    }
}
