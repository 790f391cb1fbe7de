//! The launcher's stall detector: NCCL's classic hang, seen from outside.
//!
//! When one rank is stuck (or very slow), every other rank waits for it in
//! a collective: their GPUs go idle and nobody prints. `trainer launch`
//! keeps the time of the job's last output line (any rank, stdout or
//! stderr) and each host's busiest GPU utilisation, which every rank's
//! supervisor reports (`trainer supervise: gpu N`). When no rank printed
//! for `--stall-after` and the GPUs are idle (below [`BUSY_PERCENT`]) on
//! every host but one (or a few, never more than are idle), the job is
//! reported stalled, naming the busy hosts: they hold the others up.
//! Reported once per silence: again only after output resumed and stopped
//! again. It only reports; it never stops the job.
//!
//! Pure: the caller passes the clock (time since the job started) and the
//! readings.

use std::time::Duration;

/// A GPU at or above this utilisation (percent) is busy; below, idle.
pub(crate) const BUSY_PERCENT: u32 = 5;

/// One host's last GPU reading: its name as the launcher names it, and its
/// busiest GPU's utilisation (`None`: no GPU, or none could be read, or no
/// reading came from its supervisors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reading<'a> {
    pub host: &'a str,
    pub percent: Option<u32>,
}

/// What a stalled job's GPUs say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Finding {
    /// GPUs idle on every other host; these hosts' (name, percent) busy.
    HeldUpBy(Vec<(String, u32)>),
    /// Every host's GPUs idle: a hang outside the GPUs (a deadlock, a
    /// dead data loader, a rendezvous that never completes).
    NoGpuBusy,
    /// No host reported a GPU reading (CPU hosts).
    NoReadings,
}

/// The detector's state for one job.
#[derive(Debug)]
pub(crate) struct Stall {
    /// `--stall-after`; zero: off.
    after: Duration,
    last_output: Duration,
    reported: bool,
}

impl Stall {
    /// A job that started at `now` (its start counts as output).
    pub(crate) fn new(after: Duration, now: Duration) -> Stall {
        Stall { after, last_output: now, reported: false }
    }

    /// A rank printed a line at `now`.
    pub(crate) fn output(&mut self, now: Duration) {
        self.last_output = now;
        self.reported = false;
    }

    /// Whether the job's silence is long enough at `now` to be judged (on,
    /// not yet reported, silent for `--stall-after`): only then do the
    /// readings matter to [`Stall::check`].
    pub(crate) fn due(&self, now: Duration) -> bool {
        !self.after.is_zero() && !self.reported && now.saturating_sub(self.last_output) >= self.after
    }

    /// Whether the job is to be reported stalled now, and what its GPUs
    /// say; `Some` once per silence.
    pub(crate) fn check(&mut self, now: Duration, readings: &[Reading<'_>]) -> Option<Finding> {
        if !self.due(now) {
            return None;
        }
        let known: Vec<(&str, u32)> = readings.iter().filter_map(|r| Some((r.host, r.percent?))).collect();
        let busy: Vec<(String, u32)> =
            known.iter().filter(|(_, p)| *p >= BUSY_PERCENT).map(|(h, p)| ((*h).to_owned(), *p)).collect();
        let idle = known.len() - busy.len();
        let finding = if known.is_empty() {
            Finding::NoReadings
        } else if busy.is_empty() {
            Finding::NoGpuBusy
        } else if idle >= 1 && busy.len() <= idle {
            Finding::HeldUpBy(busy)
        } else {
            // Most GPUs busy: the job computes without printing, not a stall.
            return None;
        };
        self.reported = true;
        Some(finding)
    }

    /// The report for `job`, after a silence of `--stall-after`.
    pub(crate) fn report(&self, job: &str, finding: &Finding) -> String {
        let silence = format!("no output from any rank for {}", human(self.after));
        match finding {
            Finding::HeldUpBy(busy) => {
                let hosts = busy.iter().map(|(h, p)| format!("{h} (GPU at {p} %)")).collect::<Vec<_>>().join(", ");
                let verb = if busy.len() == 1 { "that node holds" } else { "those nodes hold" };
                format!("job {job} stalled: {silence}; GPUs idle on every host but {hosts}: {verb} the others up")
            }
            Finding::NoGpuBusy => format!("job {job} stalled: {silence} and no GPU busy on any host"),
            Finding::NoReadings => format!("job {job} stalled: {silence}"),
        }
    }
}

/// "10m", "45s", "1h", "2m 30s".
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    /// Hosts and their GPU readings.
    type Hosts = &'static [(&'static str, Option<u32>)];

    fn readings(list: &[(&'static str, Option<u32>)]) -> Vec<Reading<'static>> {
        list.iter().map(|&(host, percent)| Reading { host, percent }).collect()
    }

    #[test]
    fn a_silence_is_judged_by_the_gpus_of_every_host() {
        let cases: &[(&str, u64, Hosts, Option<Finding>)] = &[
            (
                "one host busy, the rest idle",
                600,
                &[("m", Some(0)), ("w1", Some(3)), ("w3", Some(97))],
                Some(Finding::HeldUpBy(vec![("w3".into(), 97)])),
            ),
            ("too early", 599, &[("m", Some(0)), ("w3", Some(97))], None),
            (
                "exactly at the threshold",
                600,
                &[("m", Some(4)), ("w3", Some(5))],
                Some(Finding::HeldUpBy(vec![("w3".into(), 5)])),
            ),
            ("every GPU idle", 700, &[("m", Some(0)), ("w1", Some(4))], Some(Finding::NoGpuBusy)),
            ("CPU hosts", 700, &[("m", None), ("w1", None)], Some(Finding::NoReadings)),
            ("no hosts at all", 700, &[], Some(Finding::NoReadings)),
            (
                "a host without GPUs is not judged",
                700,
                &[("m", None), ("w1", Some(0)), ("w2", Some(80))],
                Some(Finding::HeldUpBy(vec![("w2".into(), 80)])),
            ),
            (
                "a few busy, as many idle",
                700,
                &[("m", Some(0)), ("w1", Some(0)), ("w2", Some(90)), ("w3", Some(60))],
                Some(Finding::HeldUpBy(vec![("w2".into(), 90), ("w3".into(), 60)])),
            ),
            ("most busy: computing quietly", 700, &[("m", Some(0)), ("w1", Some(90)), ("w2", Some(60))], None),
            ("all busy", 700, &[("m", Some(90)), ("w1", Some(90))], None),
            ("one host alone, busy", 700, &[("deeplearning-worker", Some(90))], None),
        ];
        for (what, at, list, want) in cases {
            let mut stall = Stall::new(S(600), S(0));
            assert_eq!(stall.check(S(*at), &readings(list)), *want, "{what}");
        }
    }

    #[test]
    fn a_stall_is_reported_once_and_again_only_after_output_resumed() {
        let busy = readings(&[("m", Some(0)), ("deeplearning-worker3", Some(97))]);
        let mut stall = Stall::new(S(10), S(0));
        assert_eq!(stall.check(S(5), &busy), None);
        stall.output(S(5));
        assert_eq!(stall.check(S(14), &busy), None);
        let first = stall.check(S(15), &busy);
        assert!(first.is_some());
        assert_eq!(stall.check(S(16), &busy), None);
        assert_eq!(stall.check(S(100), &busy), None);
        stall.output(S(101));
        assert_eq!(stall.check(S(110), &busy), None);
        assert_eq!(stall.check(S(111), &busy), first);
    }

    #[test]
    fn zero_turns_it_off() {
        let mut stall = Stall::new(Duration::ZERO, S(0));
        assert_eq!(stall.check(S(100_000), &readings(&[("m", Some(0)), ("w", Some(99))])), None);
    }

    #[test]
    fn most_busy_is_not_reported_and_a_later_pattern_still_is() {
        let mut stall = Stall::new(S(10), S(0));
        assert_eq!(stall.check(S(20), &readings(&[("m", Some(90)), ("w", Some(90))])), None);
        assert_eq!(
            stall.check(S(21), &readings(&[("m", Some(0)), ("w", Some(90))])),
            Some(Finding::HeldUpBy(vec![("w".into(), 90)]))
        );
    }

    #[test]
    fn the_report_names_the_busy_host_and_says_what_idle_gpus_mean() {
        let stall = Stall::new(S(600), S(0));
        let held = Finding::HeldUpBy(vec![("deeplearning-worker3".into(), 97)]);
        assert_eq!(
            stall.report("j", &held),
            "job j stalled: no output from any rank for 10m; GPUs idle on every host but deeplearning-worker3 (GPU at 97 \
             %): that node holds the others up"
        );
        let two = Finding::HeldUpBy(vec![("w2".into(), 90), ("w3".into(), 60)]);
        assert!(
            stall.report("j", &two).ends_with("but w2 (GPU at 90 %), w3 (GPU at 60 %): those nodes hold the others up")
        );
        assert_eq!(
            stall.report("j", &Finding::NoGpuBusy),
            "job j stalled: no output from any rank for 10m and no GPU busy on any host"
        );
        assert_eq!(stall.report("j", &Finding::NoReadings), "job j stalled: no output from any rank for 10m");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        for (secs, text) in [(2, "2s"), (600, "10m"), (150, "2m 30s"), (3600, "1h"), (5400, "1h 30m")] {
            assert_eq!(human(S(secs)), text);
        }
    }
}
