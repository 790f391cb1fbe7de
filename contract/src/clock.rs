//! Time as an input: where the agent's loops (and any other part of the
//! project that stamps or compares unix times) read the time.
//!
//! Every time in the contract is unix milliseconds (a `register`'s boot and
//! start times, the formation timeline, the notice file), so the one clock
//! lives here beside them rather than as a free function each crate
//! copies. A loop takes a [`Clock`]; the product passes [`system`], and a
//! test passes its own (a closure that captures nothing, such as
//! `|| 1_767_225_600_000`).

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the time, in unix milliseconds. A plain function value: it
/// is `Copy` and `'static`, so a spawned task can take it like any
/// argument, and a fixed clock is a one-line closure.
pub type Clock = fn() -> u64;

/// The system clock, in unix milliseconds (0 for a clock set before 1970).
pub fn system() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_is_after_2026_and_a_test_clock_is_what_it_says() {
        let clock: Clock = system;
        assert!(clock() > 1_767_225_600_000, "{}", clock());
        let fixed: Clock = || 42;
        assert_eq!(fixed(), 42);
    }
}
