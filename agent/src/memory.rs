//! Giving freed heap back to the system after a burst of work.
//!
//! The agent idles for days between short bursts: a formation, where the
//! master reads two messages a node and saves a state that lists every
//! node, and every manifest a node applies (at 1,000 nodes a 274 KB node
//! list, parsed, checked and rendered into a few files). glibc's allocator
//! keeps what such a burst freed: chunks freed in the middle of its heaps
//! stay resident until the program calls `malloc_trim(3)`, which returns
//! their whole pages. Measured in the formation benchmark at 1,000 nodes
//! (`/proc/<pid>/smaps_rollup`): the master's private memory went from
//! 1.9 MiB at its start to 13 MiB by the end of the formation, with about
//! 3 MiB of it live; a worker's to 4.2 MiB. The rest of an agent's RSS (about
//! 15 MiB) is the pages of its binary, which every process of the same
//! binary shares.
//!
//! On other C libraries (musl) this does nothing.

use std::time::{Duration, Instant};

/// Returns the free pages of every heap to the system (`malloc_trim(0)`).
/// Costs well under a millisecond for the agent's heaps.
pub(crate) fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has
    // no preconditions and is thread-safe (it takes each arena's lock).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// [`release_free_heap`] after work, at most once per `every`: the master
/// trims after each turn that handled messages, and a formation has a turn
/// every few milliseconds; work not followed by a trim yet is trimmed when
/// the loop goes idle ([`Trimmer::idle`]), so what a burst freed does not
/// stay for the days the agent idles after it.
#[derive(Debug)]
pub(crate) struct Trimmer {
    every: Duration,
    last: Option<Instant>,
    /// Work was done since the last trim.
    pending: bool,
}

impl Trimmer {
    /// Trims at most once per `every`.
    pub(crate) fn new(every: Duration) -> Self {
        Trimmer { every, last: None, pending: false }
    }

    /// After work: trims unless it did less than `every` ago; returns
    /// whether it did.
    pub(crate) fn after_work(&mut self) -> bool {
        self.pending = true;
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            return false;
        }
        self.trim();
        true
    }

    /// When the loop has nothing to do: trims if work came after the last
    /// trim; returns whether it did.
    pub(crate) fn idle(&mut self) -> bool {
        if !self.pending {
            return false;
        }
        self.trim();
        true
    }

    fn trim(&mut self) {
        release_free_heap();
        self.last = Some(Instant::now());
        self.pending = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A freed burst is given back: private memory (`Anonymous` in
    /// `/proc/self/smaps_rollup`) after a trim is below what it was with
    /// the burst's chunks merely freed. Measured in a process of its own
    /// (this test binary run again for this test alone), so that other
    /// tests' allocations do not move the figures.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_freed_burst_is_given_back() {
        const CHILD: &str = "AGENT_TRIM_TEST_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "memory::tests::a_freed_burst_is_given_back", "--nocapture", "--test-threads", "1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        fn anonymous_kib() -> u64 {
            let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("Anonymous:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap()
        }
        // 40 MiB in 20,000 small blocks, every other one kept so that the
        // freed ones sit between live ones (the heap's top cannot shrink).
        let mut blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![(i % 251) as u8; 2048]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter().step_by(64).cloned().collect();
        blocks.clear();
        blocks.shrink_to_fit();
        let before = anonymous_kib();
        let mut trimmer = Trimmer::new(Duration::from_secs(3600));
        assert!(trimmer.after_work());
        let after = anonymous_kib();
        assert!(after + 16 * 1024 < before, "{before} KiB before the trim, {after} KiB after");
        // Rate-limited: a second call within the period does nothing, and
        // the work it stands for is trimmed once the loop is idle, once.
        assert!(!trimmer.after_work());
        assert!(trimmer.idle());
        assert!(!trimmer.idle());
        assert_eq!(kept.len(), 313);
    }
}
