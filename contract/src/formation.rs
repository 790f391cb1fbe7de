//! The formation's progress as the master leaves it for `synth deploy`'s
//! live line while the cluster forms: how many of the requested workers
//! registered with it, and how many reported a failed boot. A tag on the
//! worker Auto Scaling group ([`FORMATION_TAG`]), which synth reads with the
//! group's instances it already reads (`DescribeAutoScalingGroups`): no
//! extra call for synth, one tag write every few seconds at most for the
//! master (docs/ARCHITECTURE.md, "Membership rules").

/// The tag on the worker group where the master leaves [`FormingMark`]
/// (not propagated to instances).
pub const FORMATION_TAG: &str = "deeplearning:formation";

/// The master's count while the cluster forms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FormingMark {
    /// When the master counted, unix milliseconds.
    pub at_ms: u64,
    /// Workers registered with the master (admitted to the formation).
    pub registered: u32,
    /// Workers the formation waits for (the group's desired capacity).
    pub requested: u32,
    /// Workers that reported a failed boot step and did not register.
    pub failed: u32,
}

impl FormingMark {
    /// The tag value: `at=<unix ms> registered=<n> of=<n> failed=<n>`.
    pub fn to_tag(&self) -> String {
        format!("at={} registered={} of={} failed={}", self.at_ms, self.registered, self.requested, self.failed)
    }

    /// Reads a tag value; `None` for anything else (a tag edited by hand).
    pub fn from_tag(value: &str) -> Option<FormingMark> {
        let mut mark = FormingMark::default();
        let mut seen = 0;
        for field in value.split_whitespace() {
            let (key, number) = field.split_once('=')?;
            match key {
                "at" => mark.at_ms = number.parse().ok()?,
                "registered" => mark.registered = number.parse().ok()?,
                "of" => mark.requested = number.parse().ok()?,
                "failed" => mark.failed = number.parse().ok()?,
                _ => continue,
            }
            seen += 1;
        }
        (seen == 4).then_some(mark)
    }

    /// Whether `self` says something `last` (the mark written before) did
    /// not: another count (the time alone is not news).
    pub fn differs(&self, last: &FormingMark) -> bool {
        (self.registered, self.requested, self.failed) != (last.registered, last.requested, last.failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_round_trips_through_its_tag_and_junk_is_none() {
        let mark = FormingMark { at_ms: 1_700_000_000_000, registered: 5, requested: 8, failed: 1 };
        assert_eq!(mark.to_tag(), "at=1700000000000 registered=5 of=8 failed=1");
        assert_eq!(FormingMark::from_tag(&mark.to_tag()), Some(mark));
        assert!(mark.to_tag().len() <= 256, "an Auto Scaling tag value");
        for junk in ["", "busy", "at=1 registered=x of=2 failed=0", "at=1 registered=1 of=2", "registered"] {
            assert_eq!(FormingMark::from_tag(junk), None, "{junk:?}");
        }
        assert!(!FormingMark { at_ms: 5, ..mark }.differs(&mark));
        assert!(FormingMark { registered: 6, ..mark }.differs(&mark));
    }
}
