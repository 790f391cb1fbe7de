//! PutLogEvents' limits, and batches that respect them
//! (<https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutLogEvents.html>):
//!
//! - at most 1,048,576 bytes a batch, counted as the sum of the messages'
//!   UTF-8 bytes plus 26 bytes for each event;
//! - at most 10,000 events a batch;
//! - the events of a batch in chronological order, spanning at most 24 hours;
//! - one event at most 256 KiB with its 26 bytes (the limit before 2025, which
//!   every region accepts), and at least one character.
//!
//! Events older than 14 days or than the group's retention, or more than 2
//! hours in the future, are refused one by one (the rest of the batch is
//! kept): the service reports them, and the shipper counts them in a warning.

use crate::ports::LogEvent;

/// The most bytes a batch may hold (messages plus [`EVENT_OVERHEAD`] each).
pub(crate) const MAX_BATCH_BYTES: usize = 1_048_576;
/// The bytes CloudWatch Logs counts for each event on top of its message.
pub(crate) const EVENT_OVERHEAD: usize = 26;
/// The most events a batch may hold.
pub(crate) const MAX_BATCH_EVENTS: usize = 10_000;
/// The most bytes one event may hold, its overhead included.
pub(crate) const MAX_EVENT_BYTES: usize = 256 * 1024;
/// The longest time a batch may span, milliseconds.
pub(crate) const MAX_SPAN_MS: i64 = 24 * 60 * 60 * 1000;

/// A message as CloudWatch Logs takes it: at most [`MAX_EVENT_BYTES`] with its
/// overhead (cut at a character boundary), and never empty.
pub(crate) fn fit_message(text: &str) -> &str {
    if text.is_empty() {
        return " ";
    }
    let max = MAX_EVENT_BYTES - EVENT_OVERHEAD;
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A batch being filled, in order.
#[derive(Debug, Default)]
pub struct Batch {
    /// The events, timestamps never decreasing.
    pub events: Vec<LogEvent>,
    /// Bytes as the service counts them.
    pub bytes: usize,
    /// What the events took in the spool (the caller's count, acknowledged
    /// once the batch is accepted).
    pub consumed: u64,
}

impl Batch {
    /// Adds the next line (which took `spool_bytes` in the spool) if the
    /// batch has room for it; `false` when it is full: send it, and start
    /// the next one with this line. A timestamp earlier than the one before
    /// it (another thread's line, a clock step back) is raised to it, so the
    /// batch stays chronological.
    pub fn push(&mut self, timestamp_ms: i64, text: &str, spool_bytes: u64) -> bool {
        let message = fit_message(text);
        let size = message.len() + EVENT_OVERHEAD;
        let timestamp_ms = self.events.last().map_or(timestamp_ms, |last| timestamp_ms.max(last.timestamp_ms));
        let first = self.events.first().map_or(timestamp_ms, |e| e.timestamp_ms);
        if !self.events.is_empty()
            && (self.events.len() >= MAX_BATCH_EVENTS
                || self.bytes + size > MAX_BATCH_BYTES
                || timestamp_ms - first >= MAX_SPAN_MS)
        {
            return false;
        }
        self.events.push(LogEvent { timestamp_ms, message: message.to_owned() });
        self.bytes += size;
        self.consumed += spool_bytes;
        true
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills batches from `lines` the way the shipper does: a line that does
    /// not fit starts the next batch.
    fn batches(lines: &[(i64, String)]) -> Vec<Batch> {
        let mut out = vec![Batch::default()];
        for (ts, text) in lines {
            if !out.last_mut().unwrap().push(*ts, text, text.len() as u64 + 1) {
                out.push(Batch::default());
                assert!(
                    out.last_mut().unwrap().push(*ts, text, text.len() as u64 + 1),
                    "a line always fits an empty batch"
                );
            }
        }
        out
    }

    fn check_limits(b: &Batch) {
        let bytes: usize = b.events.iter().map(|e| e.message.len() + EVENT_OVERHEAD).sum();
        assert_eq!(bytes, b.bytes);
        assert!(bytes <= MAX_BATCH_BYTES, "{bytes}");
        assert!(b.events.len() <= MAX_BATCH_EVENTS);
        assert!(b.events.windows(2).all(|w| w[0].timestamp_ms <= w[1].timestamp_ms));
        let span = b.events.last().unwrap().timestamp_ms - b.events[0].timestamp_ms;
        assert!(span < MAX_SPAN_MS, "{span}");
        assert!(b.events.iter().all(|e| !e.message.is_empty() && e.message.len() + EVENT_OVERHEAD <= MAX_EVENT_BYTES));
    }

    #[test]
    fn the_byte_limit_counts_26_bytes_an_event() {
        // 1,000-byte lines: 1,026 counted each, so 1,022 fit (1,048,572 bytes), not 1,048.
        let lines: Vec<(i64, String)> = (0..2_000).map(|i| (i, "x".repeat(1_000))).collect();
        let out = batches(&lines);
        assert_eq!(out.iter().map(|b| b.events.len()).collect::<Vec<_>>(), [1_022, 978]);
        out.iter().for_each(check_limits);
        assert_eq!(out[0].consumed, 1_022 * 1_001);
    }

    #[test]
    fn the_event_limit_is_ten_thousand() {
        let lines: Vec<(i64, String)> = (0..25_000).map(|i| (i, "y".into())).collect();
        let out = batches(&lines);
        assert_eq!(out.iter().map(|b| b.events.len()).collect::<Vec<_>>(), [10_000, 10_000, 5_000]);
        out.iter().for_each(check_limits);
    }

    #[test]
    fn a_batch_spans_less_than_a_day_and_stays_chronological() {
        let day = MAX_SPAN_MS;
        let lines: Vec<(i64, String)> =
            [(1_000, "a"), (500, "b: a clock step back"), (day - 1, "c"), (day + 1_000, "d: a day after a")]
                .iter()
                .map(|(t, s)| (*t, (*s).to_owned()))
                .collect();
        let out = batches(&lines);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].events.iter().map(|e| e.timestamp_ms).collect::<Vec<_>>(), [1_000, 1_000, day - 1]);
        assert_eq!(out[1].events[0].message, "d: a day after a");
        out.iter().for_each(check_limits);
    }

    #[test]
    fn long_lines_are_cut_at_a_character_and_empty_ones_are_a_space() {
        let long = "é".repeat(MAX_EVENT_BYTES);
        let cut = fit_message(&long);
        assert!(cut.len() + EVENT_OVERHEAD <= MAX_EVENT_BYTES && cut.len() + EVENT_OVERHEAD > MAX_EVENT_BYTES - 2);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(fit_message(""), " ");
        let out = batches(&[(1, long.clone()), (2, long.clone()), (3, long.clone()), (4, long.clone()), (5, long)]);
        assert_eq!(out.iter().map(|b| b.events.len()).collect::<Vec<_>>(), [4, 1]);
        out.iter().for_each(check_limits);
    }
}
