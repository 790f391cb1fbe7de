//! Process groups, signals and `/proc`: the few system calls the launcher,
//! the supervisor and `kill` share.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// Asks the kernel to send `signal` to this process when its parent dies
/// (`prctl(PR_SET_PDEATHSIG)`). Linux only; elsewhere a no-op.
pub(crate) fn die_with_parent(signal: i32) {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes an int and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0);
    }
}

/// Sends `signal` to every process of group `pgid`; false when none is left.
pub(crate) fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: kill takes plain integers.
    pgid > 1 && unsafe { libc::kill(-pgid, signal) } == 0
}

/// Sends `signal` to process `pid`; false when it does not exist.
pub(crate) fn signal_process(pid: i32, signal: i32) -> bool {
    // SAFETY: kill takes plain integers.
    pid > 1 && unsafe { libc::kill(pid, signal) } == 0
}

/// Whether group `pgid` still has a live process. Zombies do not count:
/// killed children of a killed parent wait for a reaper (in a container,
/// PID 1 may never reap them), but they run nothing.
pub(crate) fn group_alive(pgid: i32) -> bool {
    signal_group(pgid, 0) && !group_members(pgid).is_empty()
}

/// The live (not zombie) processes of group `pgid`, from `/proc`.
pub(crate) fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|(state, group)| group == pgid && state != 'Z'))
        .collect()
}

/// SIGTERM to group `pgid`, then SIGKILL to what is left after `grace`;
/// returns once the group is gone (or after another second of SIGKILLs).
pub(crate) fn stop_group(pgid: i32, grace: Duration) {
    if !signal_group(pgid, libc::SIGTERM) {
        return;
    }
    let deadline = Instant::now() + grace;
    while group_alive(pgid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while group_alive(pgid) && signal_group(pgid, libc::SIGKILL) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shell-style exit code: the code, or 128 + the signal that killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => 1,
    }
}

/// The processes in `/proc` whose environment holds `entry` (`NAME=VALUE`).
pub(crate) fn with_environ(entry: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| environ(*pid).iter().any(|e| e == entry))
        .collect()
}

/// Process `pid`'s environment entries (empty when it is gone).
pub(crate) fn environ(pid: i32) -> Vec<String> {
    split_nul(std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default())
}

/// Process `pid`'s command line words (empty when it is gone).
pub(crate) fn cmdline(pid: i32) -> Vec<String> {
    split_nul(std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
}

/// Process `pid`'s process group, from `/proc/PID/stat`.
pub(crate) fn pgid(pid: i32) -> Option<i32> {
    stat(pid).map(|(_, group)| group)
}

/// Process `pid`'s state letter and process group.
fn stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let mut after = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = after.next()?.chars().next()?;
    Some((state, after.nth(1)?.parse().ok()?))
}

fn split_nul(bytes: Vec<u8>) -> Vec<String> {
    bytes.split(|b| *b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn stop_group_kills_children_that_ignore_sigterm() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30 & sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let group = child.id() as i32;
        std::thread::sleep(Duration::from_millis(200));
        assert!(group_alive(group));
        assert_eq!(pgid(group), Some(group));
        let start = Instant::now();
        stop_group(group, Duration::from_millis(300));
        let status = child.wait().unwrap();
        assert!(!group_alive(group), "the sleeps are gone too");
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(exit_code(status), 128 + 9, "sh ignored SIGTERM and got SIGKILL");
    }
}
