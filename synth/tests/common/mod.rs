//! Helpers shared by synth's integration tests.

use std::time::{Duration, Instant};

/// Nanoseconds this thread has run on a CPU (Linux schedstat), if known.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// How long `work` kept this thread on a CPU: time spent waiting for a core
/// behind other processes (a shared, loaded machine) does not count. Wall
/// time where the kernel does not say.
pub(crate) fn cpu_time<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let (cpu, wall) = (thread_cpu_ns(), Instant::now());
    let out = std::hint::black_box(work());
    let took = match (cpu, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => Duration::from_nanos(b - a),
        _ => wall.elapsed(),
    };
    (out, took)
}
