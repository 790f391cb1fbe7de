//! Naming the straggler: a rank whose compute time per step stays above
//! the median of the other ranks' by a margin, step after step.
//!
//! Inputs: every rank's compute seconds of each step (forward and backward,
//! not the wait in the all-reduce), which ride in the gradient all-reduce
//! ([`super::engine::Slots`]), so rank 0 sees them after every step at no
//! cost; and the group's members (who each rank is, from the rendezvous).
//! Output: a [`Finding`] the step a rank has been slow for `--straggler-steps`
//! steps in a row, once; that rank is named again only after a step in which
//! it was not slow (it recovered) and another run of slow steps (a relapse).
//! Rank 0's caller prints the finding and [`record`]s it in the node's
//! [`STRAGGLER_PATH`], which the node's agent sends to the master
//! (`node_contract::straggler`); nothing else here touches a file.
//!
//! Why the median of the *others*: a straggler holds every rank back in the
//! all-reduce, but only its own compute is slow; the median of the others
//! is what a healthy rank takes, and one slow rank cannot move it.
//!
//! Groups of fewer than [`MIN_RANKS`] are not judged. With one rank there is
//! nobody to compare with; with two, "slower than the median of the
//! others" is "slower than the other", and which of the two is off (one
//! slow, or the other unusually fast) cannot be told from two numbers.
//! Rank 0 says so once when such a group forms.

use std::path::{Path, PathBuf};

use node_contract::straggler::{self, STRAGGLER_PATH, Straggler, StragglerFile};

use super::collective::{Group, Member};

/// The fewest ranks whose times are judged (see the module docs).
pub const MIN_RANKS: usize = 3;

/// `--straggler-margin-percent`'s default.
pub const DEFAULT_MARGIN_PERCENT: u32 = 25;

/// `--straggler-steps`' default: long enough that a slow data read or a
/// checkpoint on one node is not named, short enough (minutes at most) to
/// name a throttled GPU long before the run ends.
pub const DEFAULT_STEPS: u64 = 200;

/// When a rank is a straggler (`trainer train`'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
// Flattened into `trainer train`: no group of its own (its name, `Args`, would clash).
#[group(skip)]
pub struct Args {
    /// A rank is slow in a step when its own compute time (forward and
    /// backward, not the wait for the others in the gradient all-reduce)
    /// exceeds the median of the other ranks' by more than this percentage.
    /// A GPU in HW slowdown or a node with a busy neighbour runs 30 % to
    /// several times slower; run-to-run noise on a healthy node is a few
    /// percent.
    #[arg(long, default_value_t = DEFAULT_MARGIN_PERCENT, value_name = "PERCENT", help_heading = "Stragglers",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub straggler_margin_percent: u32,
    /// Rank 0 names a rank (its node's alias and instance id) once it has
    /// been slow for this many steps in a row, in its log, its output and the
    /// record the master's agent reports (`synth status` shows it); named
    /// again only after it recovered and relapsed. 0 turns naming off. Groups
    /// of fewer than 3 ranks are never judged (two times do not tell which
    /// one is off). On GPUs each rank's time is its mean over 16 steps, so a
    /// straggler is named up to 16 steps later than on the CPU.
    #[arg(long, default_value_t = DEFAULT_STEPS, value_name = "STEPS", help_heading = "Stragglers")]
    pub straggler_steps: u64,
}

impl Default for Args {
    fn default() -> Self {
        Self { straggler_margin_percent: DEFAULT_MARGIN_PERCENT, straggler_steps: DEFAULT_STEPS }
    }
}

/// A rank named as a straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finding {
    /// The rank in its group.
    pub rank: usize,
    /// How much slower, over the run of slow steps: its summed compute
    /// time against the summed medians of the others, in percent.
    pub percent_slower: f64,
    /// The slow steps in a row (the setting, at the step it is named).
    pub steps: u64,
}

/// One rank's run of slow steps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Run {
    /// Slow steps in a row.
    slow: u64,
    /// Its compute seconds over them, and the medians of the others'.
    own: f64,
    median: f64,
    /// Named for this run (cleared by a step that is not slow).
    named: bool,
}

/// The pure detector: fed every rank's times step by step.
#[derive(Debug, Clone, PartialEq)]
pub struct Detector {
    margin: f64,
    steps: u64,
    runs: Vec<Run>,
    sorted: Vec<(f32, usize)>,
}

impl Detector {
    /// A detector with `args`' margin and step count.
    pub fn new(args: Args) -> Self {
        Self {
            margin: 1.0 + f64::from(args.straggler_margin_percent) / 100.0,
            steps: args.straggler_steps,
            runs: Vec::new(),
            sorted: Vec::new(),
        }
    }

    /// Whether it judges at all (`--straggler-steps 0` turns it off).
    pub fn enabled(&self) -> bool {
        self.steps > 0
    }

    /// Forgets every run (a new group: its ranks are other processes).
    pub fn reset(&mut self) {
        self.runs.clear();
    }

    /// Every rank's compute seconds per step over the last `steps` steps
    /// (1 on the CPU; the GPU reads its times every 16 steps), by rank;
    /// returns the ranks named now. A rank is slow for all of those steps
    /// or none. A step whose world differs from the last one's starts over. A
    /// step in which a rank has no time (zero: it had no samples; or not a
    /// finite positive number, from a broken peer) is not judged and leaves
    /// every run as it was.
    pub fn observe(&mut self, seconds: &[f32], steps: u64) -> Vec<Finding> {
        let world = seconds.len();
        if !self.enabled() || world < MIN_RANKS {
            self.runs.clear();
            return Vec::new();
        }
        if self.runs.len() != world {
            self.runs = vec![Run::default(); world];
        }
        if !seconds.iter().all(|s| s.is_finite() && *s > 0.0) {
            return Vec::new();
        }
        self.sorted.clear();
        self.sorted.extend(seconds.iter().copied().zip(0..));
        self.sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut found = Vec::new();
        for (place, &(own, rank)) in self.sorted.iter().enumerate() {
            let median = median_without(&self.sorted, place);
            let run = &mut self.runs[rank];
            if f64::from(own) > median * self.margin {
                run.slow += steps;
                run.own += f64::from(own) * steps as f64;
                run.median += median * steps as f64;
                if run.slow >= self.steps && !run.named {
                    run.named = true;
                    let percent_slower = 100.0 * (run.own / run.median - 1.0);
                    found.push(Finding { rank, percent_slower, steps: run.slow });
                }
            } else {
                *run = Run::default();
            }
        }
        found.sort_by_key(|f| f.rank);
        found
    }
}

/// The median of `sorted`'s times without the one at `place`, in O(1): the
/// others stay sorted, each index past `place` shifted by one.
fn median_without(sorted: &[(f32, usize)], place: usize) -> f64 {
    let others = sorted.len() - 1;
    let at = |i: usize| f64::from(sorted[if i < place { i } else { i + 1 }].0);
    if others % 2 == 1 { at(others / 2) } else { (at(others / 2 - 1) + at(others / 2)) / 2.0 }
}

/// Rank 0's watch over its group: the detector, who each rank is, and the
/// findings not yet recorded for the master.
#[derive(Debug, Clone, PartialEq)]
pub struct Stragglers {
    detector: Detector,
    members: Vec<Member>,
    /// Named since the last [`Stragglers::take_unrecorded`]: rank 0 records
    /// them once the next checkpoint is saved, so that replacing the node
    /// (the GPU gate's `replace`) costs only the steps after it.
    unrecorded: Vec<Straggler>,
}

/// A straggler and its node, as rank 0 names it ([`describe`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// What the detector found.
    pub finding: Finding,
    /// The rank's node, when the rendezvous said.
    pub member: Option<Member>,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.finding, self.member.as_ref()))
    }
}

impl Stragglers {
    /// A watch with `args`' settings, before any group.
    pub fn new(args: Args) -> Self {
        Self { detector: Detector::new(args), members: Vec::new(), unrecorded: Vec::new() }
    }

    /// A new group formed: every run starts over, with its members' names.
    /// Returns a note for the run's output when the group is too small to
    /// be judged while naming is on (once per such group).
    pub fn regrouped(&mut self, group: &Group) -> Option<String> {
        self.detector.reset();
        self.members.clone_from(&group.members);
        (self.detector.enabled() && (2..MIN_RANKS).contains(&group.world_size)).then(|| {
            format!(
                "straggler naming is off for this group of {} ranks: it needs {MIN_RANKS} or more to tell a slow rank from the median",
                group.world_size
            )
        })
    }

    /// Every rank's time per step over the last `steps` steps, by rank: the
    /// ranks named now (each also kept for [`Stragglers::take_unrecorded`],
    /// stamped with `now_ms()`, which is read only when a rank is named).
    pub fn observe(&mut self, seconds: &[f32], steps: u64, now_ms: impl FnOnce() -> u64) -> Vec<Named> {
        let named: Vec<Named> = self
            .detector
            .observe(seconds, steps)
            .into_iter()
            .map(|finding| Named { finding, member: self.members.get(finding.rank).cloned() })
            .collect();
        if !named.is_empty() {
            let now_ms = now_ms();
            self.unrecorded.extend(named.iter().filter_map(|n| n.to_contract(now_ms)));
        }
        named
    }

    /// The findings named since the last call, for the master's record;
    /// `after_checkpoint` when the job has just saved one.
    pub fn take_unrecorded(&mut self, after_checkpoint: bool) -> Vec<Straggler> {
        self.unrecorded.drain(..).map(|s| Straggler { after_checkpoint, ..s }).collect()
    }
}

impl Named {
    /// The finding as the node contract carries it to the master, named at
    /// `now_ms` (`after_checkpoint` false: the caller sets it when it
    /// records the finding right after a checkpoint); `None` without the
    /// rank's node (nothing to name there).
    pub fn to_contract(&self, now_ms: u64) -> Option<Straggler> {
        let m = self.member.as_ref()?;
        let percent = self.finding.percent_slower.round();
        Some(Straggler {
            alias: m.alias.clone(),
            instance_id: m.instance_id.clone(),
            rank: u32::try_from(self.finding.rank).unwrap_or(u32::MAX),
            local_rank: m.local_rank,
            // Finite and above the margin; saturating casts keep any other value in range.
            percent_slower: percent as u32,
            steps: self.finding.steps,
            named_unix_ms: now_ms,
            after_checkpoint: false,
        })
    }
}

/// The record could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot record the straggler in {}: {source}", path.display())]
pub struct RecordError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Adds `findings`, in order, to the record under the filesystem `root`
/// ([`STRAGGLER_PATH`]: the newest findings, written once through a
/// temporary file and a rename), for the node's agent to send to the
/// master; returns the file. No findings: nothing is read or written. A
/// record that cannot be read (another release's, or damaged) is started
/// afresh: its findings were sent or are of no use.
pub fn record(root: &Path, findings: impl IntoIterator<Item = Straggler>) -> Result<PathBuf, RecordError> {
    let path = node_contract::files::under(root, STRAGGLER_PATH);
    let mut findings = findings.into_iter().peekable();
    if findings.peek().is_none() {
        return Ok(path);
    }
    let failed = |source| RecordError { path: path.clone(), source };
    let read =
        std::fs::read_to_string(&path).ok().and_then(|text| StragglerFile::from_json(&text).ok()).unwrap_or_default();
    let file = findings.fold(read, StragglerFile::with);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let temp = path.with_extension("json.tmp");
    std::fs::write(&temp, file.to_json()).and_then(|()| std::fs::rename(&temp, &path)).map_err(failed)?;
    Ok(path)
}

/// The line rank 0 logs and prints for a finding: "rank 5 on
/// deeplearning-worker7 (i-0abc): steps 38 % slower than the median of the
/// other ranks for 200 steps". `member` is the rank's node, when the
/// rendezvous said (absent: the rank alone).
pub fn describe(finding: &Finding, member: Option<&Member>) -> String {
    let who = match member {
        Some(m) => format!("rank {} on {} ({}, local rank {})", finding.rank, m.alias, m.instance_id, m.local_rank),
        None => format!("rank {}", finding.rank),
    };
    format!("{who}: {}", straggler::slower(finding.percent_slower, finding.steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(margin: u32, steps: u64) -> Args {
        Args { straggler_margin_percent: margin, straggler_steps: steps }
    }

    /// Feeds `steps` copies of `times` and returns every finding with the
    /// step (1-based) it came at.
    fn feed(d: &mut Detector, times: &[f32], steps: u64, from: u64) -> Vec<(u64, Finding)> {
        (0..steps).flat_map(|i| d.observe(times, 1).into_iter().map(move |f| (from + i, f))).collect()
    }

    /// One table row: every rank's time per step, the margin, the steps,
    /// how many steps are fed, and the (rank, step) named.
    type Case = (&'static [f32], u32, u64, u64, &'static [(usize, u64)]);

    #[test]
    fn a_rank_slower_than_the_margin_for_the_steps_is_named_once() {
        let cases: &[Case] = &[
            // 38 % slower than the others (all 1.0) for 5 steps: named at step 5, once.
            (&[1.0, 1.0, 1.38, 1.0], 25, 5, 20, &[(2, 5)]),
            // Not past the margin: never named.
            (&[1.0, 1.0, 1.2, 1.0], 25, 5, 50, &[]),
            // Exactly at the margin is not past it.
            (&[1.0, 1.0, 1.25, 1.0], 25, 5, 50, &[]),
            // Slow, but not for enough steps.
            (&[1.0, 1.0, 2.0, 1.0], 25, 30, 29, &[]),
            // Two slow ranks of five: the others' median is still a fast one.
            (&[2.0, 1.0, 1.0, 2.0, 1.0], 25, 3, 10, &[(0, 3), (3, 3)]),
            // Three ranks: the smallest group judged.
            (&[1.0, 3.0, 1.0], 25, 2, 2, &[(1, 2)]),
            // Two ranks and one: never judged.
            (&[1.0, 3.0], 25, 2, 10, &[]),
            (&[3.0], 25, 2, 10, &[]),
            // Off.
            (&[1.0, 1.0, 9.0, 1.0], 25, 0, 10, &[]),
            // A rank with no samples this step (zero): the step is not judged.
            (&[1.0, 0.0, 9.0, 1.0], 25, 1, 10, &[]),
            (&[1.0, f32::NAN, 9.0, 1.0], 25, 1, 10, &[]),
        ];
        for (i, (times, margin, steps, fed, want)) in cases.iter().enumerate() {
            let mut d = Detector::new(args(*margin, *steps));
            let got: Vec<(usize, u64)> = feed(&mut d, times, *fed, 1).iter().map(|(s, f)| (f.rank, *s)).collect();
            assert_eq!(got, *want, "case {i}: {times:?}");
        }
    }

    #[test]
    fn the_percentage_is_over_the_whole_run() {
        let mut d = Detector::new(args(25, 2));
        assert!(d.observe(&[1.0, 1.0, 1.5, 1.0], 1).is_empty());
        let named = d.observe(&[1.0, 2.0, 1.3, 1.0], 1);
        // Rank 2: 1.5 + 1.3 against medians 1.0 + 1.0: 40 %.
        assert_eq!(named.len(), 1, "{named:?}");
        assert_eq!(named[0].rank, 2);
        assert!((named[0].percent_slower - 40.0).abs() < 1e-3, "{}", named[0].percent_slower);
        assert_eq!(named[0].steps, 2);
    }

    /// The GPU's times come every 16 steps, each a mean over them: the
    /// count is in steps, so `--straggler-steps 200` means 200 steps there too.
    #[test]
    fn times_over_several_steps_count_as_those_steps() {
        let mut d = Detector::new(args(25, 200));
        let slow = [1.0, 1.0, 1.5, 1.0];
        let at: Vec<usize> = (1..=20).filter(|_| !d.observe(&slow, 16).is_empty()).collect();
        // 13 windows of 16 steps = 208 steps: the first at or past 200.
        assert_eq!(at, [13]);
        let mut d = Detector::new(args(25, 200));
        let named = (0..13).flat_map(|_| d.observe(&slow, 16)).next().unwrap();
        assert_eq!((named.rank, named.steps), (2, 208));
        assert!((named.percent_slower - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_named_rank_is_named_again_only_after_it_recovered_and_relapsed() {
        let mut d = Detector::new(args(25, 3));
        let slow = [1.0, 2.0, 1.0, 1.0];
        let fine = [1.0, 1.0, 1.0, 1.0];
        assert_eq!(feed(&mut d, &slow, 10, 1).iter().map(|(s, _)| *s).collect::<Vec<_>>(), [3]);
        // A step that is not judged (a rank without samples) is no recovery.
        assert!(d.observe(&[1.0, 2.0, 0.0, 1.0], 1).is_empty());
        assert!(feed(&mut d, &slow, 10, 1).is_empty());
        // One good step, then slow again: named after another 3.
        assert!(d.observe(&fine, 1).is_empty());
        assert_eq!(feed(&mut d, &slow, 5, 1).iter().map(|(s, _)| *s).collect::<Vec<_>>(), [3]);
        // A slow run broken before it is long enough names nobody.
        d.observe(&fine, 1);
        feed(&mut d, &slow, 2, 1);
        d.observe(&fine, 1);
        assert!(feed(&mut d, &slow, 2, 1).is_empty());
    }

    #[test]
    fn a_new_world_or_a_reset_starts_over() {
        let mut d = Detector::new(args(25, 3));
        feed(&mut d, &[1.0, 2.0, 1.0, 1.0], 2, 1);
        // The group shrank: the runs of the old ranks are gone.
        assert!(feed(&mut d, &[1.0, 2.0, 1.0], 2, 1).is_empty());
        assert_eq!(d.observe(&[1.0, 2.0, 1.0], 1).len(), 1);
        feed(&mut d, &[1.0, 2.0, 1.0], 1, 1);
        d.reset();
        assert!(feed(&mut d, &[1.0, 2.0, 1.0], 2, 1).is_empty());
        assert_eq!(d.observe(&[1.0, 2.0, 1.0], 1).len(), 1);
    }

    #[test]
    fn the_median_of_the_others_leaves_one_out() {
        let sorted: Vec<(f32, usize)> = [1.0f32, 2.0, 3.0, 10.0].into_iter().zip(0..).collect();
        // Without 10: [1 2 3] -> 2; without 1: [2 3 10] -> 3; without 2: [1 3 10] -> 3.
        assert_eq!(median_without(&sorted, 3), 2.0);
        assert_eq!(median_without(&sorted, 0), 3.0);
        assert_eq!(median_without(&sorted, 1), 3.0);
        let five: Vec<(f32, usize)> = [1.0f32, 2.0, 3.0, 4.0, 5.0].into_iter().zip(0..).collect();
        // Without 3: [1 2 4 5] -> 3; without 5: [1 2 3 4] -> 2.5.
        assert_eq!(median_without(&five, 2), 3.0);
        assert_eq!(median_without(&five, 4), 2.5);
    }

    /// Written by rank 0's function, read by the agent's reader.
    #[test]
    fn a_finding_is_recorded_for_the_agent() {
        let root = tempfile::tempdir().unwrap();
        let m = Member { alias: "deeplearning-worker3".into(), instance_id: "i-3".into(), local_rank: 2 };
        let named = Named { finding: Finding { rank: 4, percent_slower: 37.6, steps: 200 }, member: Some(m) };
        let first = named.to_contract(1_000).unwrap();
        assert_eq!((first.rank, first.local_rank, first.percent_slower, first.steps), (4, 2, 38, 200));
        let path = record(root.path(), [first.clone()]).unwrap();
        assert_eq!(path, root.path().join("run/deeplearning-trainer/straggler.json"));
        let second = Straggler { named_unix_ms: 2_000, ..first.clone() };
        record(root.path(), [second.clone()]).unwrap();
        let read = StragglerFile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read.stragglers, [first, second.clone()]);
        // A damaged record is started afresh, not a failure.
        std::fs::write(&path, "{").unwrap();
        record(root.path(), [second.clone()]).unwrap();
        assert_eq!(StragglerFile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap().stragglers, [second]);
        // Without the rank's node there is nobody to name to the master.
        assert_eq!(Named { member: None, ..named }.to_contract(1), None);
    }

    /// A finding waits for the next checkpoint; it is handed over once.
    #[test]
    fn findings_wait_to_be_recorded_after_a_checkpoint() {
        let mut watch = Stragglers::new(args(25, 2));
        let members = (1..=3)
            .map(|i| Member { alias: format!("deeplearning-worker{i}"), instance_id: format!("i-{i}"), local_rank: 0 })
            .collect();
        let group =
            Group { generation: 1, rank: 0, world_size: 3, peers: Vec::new(), nccl_id: None, source_rank: 0, members };
        assert_eq!(watch.regrouped(&group), None);
        assert!(watch.observe(&[1.0, 1.0, 2.0], 1, || 10).is_empty());
        let named = watch.observe(&[1.0, 1.0, 2.0], 1, || 20);
        assert_eq!(named.len(), 1);
        assert_eq!(
            named[0].to_string(),
            "rank 2 on deeplearning-worker3 (i-3, local rank 0): steps 100 % slower than the median of the other ranks for 2 steps"
        );
        let taken = watch.take_unrecorded(true);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            (taken[0].instance_id.as_str(), taken[0].named_unix_ms, taken[0].after_checkpoint),
            ("i-3", 20, true)
        );
        assert!(watch.take_unrecorded(true).is_empty(), "handed over once");
        // A group of two is not judged, and says so.
        let two = Group { world_size: 2, ..group };
        assert!(watch.regrouped(&two).is_some_and(|n| n.contains("needs 3 or more")));
    }

    #[test]
    fn the_line_names_the_node() {
        let f = Finding { rank: 5, percent_slower: 38.4, steps: 200 };
        let m = Member { alias: "deeplearning-worker7".into(), instance_id: "i-0abc".into(), local_rank: 1 };
        assert_eq!(
            describe(&f, Some(&m)),
            "rank 5 on deeplearning-worker7 (i-0abc, local rank 1): steps 38 % slower than the median of the other ranks for 200 steps"
        );
        assert_eq!(describe(&f, None), "rank 5: steps 38 % slower than the median of the other ranks for 200 steps");
    }
}
