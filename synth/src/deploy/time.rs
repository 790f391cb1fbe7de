//! Time as the lifecycle commands read and print it: the wall clock in
//! unix milliseconds, and UTC stamps to the second.

use aws_sdk_cloudformation::primitives::{DateTime, DateTimeFormat};

/// Unix milliseconds now (the project's one clock, `node_contract::clock`).
pub(crate) fn now_ms() -> i64 {
    node_contract::clock::system() as i64
}

/// `2025-01-02T03:04:05Z`.
pub(crate) fn stamp(ms: i64) -> String {
    DateTime::from_secs(ms / 1000).fmt(DateTimeFormat::DateTime).unwrap_or_else(|_| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_seconds() {
        assert_eq!(stamp(1_700_000_000_123), "2023-11-14T22:13:20Z");
    }
}
