//! "Did you mean ...?" for misspelt field names, enum values and regions.
//!
//! Jaro-Winkler similarity (from `strsim`) favours a shared prefix, which is
//! what typos in YAML keys usually keep (`instace_type`, `cont`, `regoin`).

/// How similar a candidate must be to be suggested. Below this, a suggestion
/// is more often confusing than helpful (`foo` would "mean" `ami`).
const THRESHOLD: f64 = 0.8;

/// Longer than any field name, enum value or region code: a word this long
/// is not a typo of one, and gets no suggestion (nor the work of finding one).
const MAX_WORD_CHARS: usize = 64;

/// The candidate closest to `word`, if any is close enough.
pub(crate) fn did_you_mean<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    if word.chars().nth(MAX_WORD_CHARS).is_some() {
        return None;
    }
    let word = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&word, c), c))
        .filter(|(score, _)| *score >= THRESHOLD)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// A list of names for a message: "`a`, `b`, `c`".
pub(crate) fn backticked<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names.into_iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKERS: [&str; 5] = ["instance_type", "count", "min", "max", "spot"];

    #[test]
    fn suggests_close_names() {
        assert_eq!(did_you_mean("cont", WORKERS), Some("count"));
        assert_eq!(did_you_mean("instance-type", WORKERS), Some("instance_type"));
        assert_eq!(did_you_mean("instanceType", WORKERS), Some("instance_type"));
        assert_eq!(did_you_mean("regoin", ["name", "region", "image"]), Some("region"));
    }

    #[test]
    fn stays_quiet_when_nothing_is_close() {
        assert_eq!(did_you_mean("gpus", WORKERS), None);
        assert_eq!(did_you_mean("", WORKERS), None);
        assert_eq!(did_you_mean(&format!("count{}", "x".repeat(100)), WORKERS), None);
    }

    #[test]
    fn backticks_lists() {
        assert_eq!(backticked(["a", "b"]), "`a`, `b`");
    }
}
