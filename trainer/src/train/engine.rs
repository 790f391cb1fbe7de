//! What the training loop drives, on whichever device: one optimisation
//! step on this rank's part of a global batch (forward, backward, gradient
//! all-reduce, SGD update), evaluation, and the training state that
//! checkpoints save and that a re-formed group takes from a survivor.
//!
//! The CPU engine is the [`model`](super::model) layers plus a
//! [`Collective`](super::collective::Collective) over host memory; the GPU
//! engine (`cuda` feature) keeps the same parameter layout on the device and
//! sums gradients with NCCL. Parameters and momentum are one flat `f32`
//! vector each, in the layout [`model`](super::model) defines, so
//! checkpoints and state transfers are device-independent.

use super::collective::CollectiveError;
pub use super::stats::StepStats;

/// A batch of samples in host memory: `len` images of `sample_len` floats
/// each (already normalised), and their labels.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// `len * sample_len` floats, sample after sample.
    pub images: &'a [f32],
    /// `len` labels, `0..classes`.
    pub labels: &'a [u8],
}

/// What one step did: this rank's sums over its samples, how many ranks
/// raised the leaving flag with the step's gradients, and whether every
/// rank's compute time for the step came with them.
///
/// The flag travels as one more `f32` at the end of the gradient buffer
/// that the step all-reduces anyway (no extra round trip), so every rank
/// learns the same count after the same step: the point where a rank whose
/// host was given an interruption notice leaves ([`super::epochs`]). After
/// the flag come `world_size` slots of compute seconds ([`Slots`]): each
/// rank writes its own and zero in the others, so the sum is an all-gather
/// (adding zeros is exact) and every rank learns every rank's time of the
/// same step ([`Engine::step_seconds`], read by [`super::straggler`]).
///
/// An engine whose sums live on a device may report them only after some
/// steps, the same steps on every rank of a group: in between, `stats` and
/// `leaving` are zero, a raised flag stays raised until it is counted, and
/// [`Engine::sum_over_ranks`] adds what was not reported. The CPU reports
/// after every step; the GPU after every 16th (`cuda`, one wait for the
/// device per 16 steps).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Stepped {
    /// This rank's loss and accuracy sums for the step (or for the steps
    /// since the engine last reported them).
    pub stats: StepStats,
    /// Ranks that raised the leaving flag (summed over the group; since the
    /// engine last reported it).
    pub leaving: u32,
    /// This step brought every rank's compute time ([`Engine::step_seconds`]
    /// holds them), standing for this many steps: 1 on the CPU, which
    /// times every step; 16 (`cuda`'s `READ_EVERY`) on the GPU, whose
    /// times are each rank's mean over the steps between two reads; 0:
    /// nothing new.
    pub timed_steps: u64,
}

/// The slots the gradient all-reduce carries after the gradients, for a
/// group of `world` ranks: the leaving flag, then one compute time per rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// This rank, `0..world`.
    pub rank: usize,
    /// The ranks in the group.
    pub world: usize,
}

impl Slots {
    /// How many `f32`s follow the gradients: the flag and `world` times.
    pub fn count(&self) -> usize {
        1 + self.world
    }

    /// Writes this rank's part into `slots` (the [`Slots::count`] floats after
    /// the gradients): its leaving flag, its compute `seconds` in its own
    /// slot, and zero in every other rank's, so the all-reduced sum holds
    /// each rank's time exactly. `None`: this rank computed nothing this
    /// step (no samples in its slice), written as zero, which the reader
    /// ([`super::straggler`]) takes as "not a step to judge".
    pub fn write(&self, slots: &mut [f32], leaving: bool, seconds: Option<f32>) {
        slots.fill(0.0);
        if let Some(flag) = slots.first_mut() {
            *flag = leaving_flag(leaving);
        }
        if let (Some(mine), Some(seconds)) = (slots.get_mut(1 + self.rank), seconds) {
            // A clock that went backwards or a zero time is still a time:
            // the smallest positive one, since zero means "none".
            *mine = if seconds.is_finite() && seconds > 0.0 { seconds } else { f32::MIN_POSITIVE };
        }
    }

    /// The all-reduced `slots`: the count of leaving ranks, and every
    /// rank's compute seconds, by rank.
    pub fn read(slots: &[f32]) -> (u32, &[f32]) {
        match slots.split_first() {
            Some((flag, times)) => (leaving_count(*flag), times),
            None => (0, &[]),
        }
    }
}

/// The leaving flag as the all-reduced buffer carries it.
pub fn leaving_flag(leaving: bool) -> f32 {
    if leaving { 1.0 } else { 0.0 }
}

/// The count of leaving ranks from the all-reduced flag (a sum of ones and
/// zeros, exact in `f32` far beyond any world size).
pub fn leaving_count(sum: f32) -> u32 {
    if sum.is_finite() && sum > 0.0 { sum.round() as u32 } else { 0 }
}

/// Everything needed to continue training exactly: the parameters, the
/// optimiser's momentum, and where in the schedule training is.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainState {
    /// Parameters, in the model's flat layout.
    pub params: Vec<f32>,
    /// SGD momentum buffer, same layout.
    pub momentum: Vec<f32>,
    /// Epochs completed.
    pub epoch: u64,
    /// Optimisation steps completed since the start of training.
    pub step: u64,
}

/// A training step could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The gradient all-reduce failed (a peer left or died): the elastic
    /// layer re-forms the group and the epoch is redone.
    #[error("gradient all-reduce failed: {0}")]
    Collective(#[from] CollectiveError),
    /// The device failed (GPU path).
    #[error("{0}")]
    Device(String),
}

/// One rank's model, optimiser and gradient all-reduce.
pub trait Engine {
    /// One SGD step: this rank computes gradients on `batch` (its part of a
    /// global batch of `global_batch` samples), the gradients are summed over
    /// all ranks and divided by `global_batch`, and every rank applies the
    /// same update with learning rate `lr`. `leaving` is this rank's
    /// leaving flag, summed over the ranks in the same all-reduce as the
    /// gradients ([`Stepped::leaving`]).
    fn step(&mut self, batch: &Batch<'_>, global_batch: usize, lr: f32, leaving: bool) -> Result<Stepped, EngineError>;
    /// Loss and accuracy on `batch`, without changing anything.
    fn evaluate(&mut self, batch: &Batch<'_>) -> Result<StepStats, EngineError>;
    /// `stats`, plus the sums of steps this engine has not reported yet
    /// ([`Stepped`]), summed over all ranks through the gradients'
    /// collective (an epoch's training loss and accuracy over every rank's
    /// samples).
    fn sum_over_ranks(&mut self, stats: StepStats) -> Result<StepStats, EngineError>;
    /// Every rank's compute seconds per step (forward and backward, before
    /// the all-reduce: not the wait in it) as of the newest step whose
    /// [`Stepped::timed_steps`] was not 0, by rank (0: none measured); empty
    /// before the first.
    fn step_seconds(&self) -> &[f32];
    /// The current state, copied to host memory.
    fn state(&self) -> Result<TrainState, EngineError>;
    /// Replaces the state (resume, or a survivor's state after re-forming).
    fn set_state(&mut self, state: &TrainState) -> Result<(), EngineError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaving_flag_counts_ranks_through_a_sum() {
        let sum: f32 = [true, false, true, true].into_iter().map(leaving_flag).sum();
        assert_eq!(leaving_count(sum), 3);
        assert_eq!(leaving_count(leaving_flag(false)), 0);
        // Nothing a broken peer could send turns into a leave or a panic.
        for odd in [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, -2.0] {
            assert_eq!(leaving_count(odd), 0, "{odd}");
        }
    }

    /// Each rank writes its own slot: the sum of the ranks' slots is an
    /// all-gather, bit for bit, with the leaving count in front.
    #[test]
    fn the_time_slots_sum_to_every_ranks_time() {
        let world = 4;
        let times = [0.125f32, 0.3, 1e-3, 7.77];
        let mut sum = vec![0f32; Slots { rank: 0, world }.count()];
        for (rank, t) in times.iter().enumerate() {
            let mut mine = vec![9.0; sum.len()];
            Slots { rank, world }.write(&mut mine, rank == 1, Some(*t));
            sum.iter_mut().zip(&mine).for_each(|(s, m)| *s += m);
        }
        let (leaving, seconds) = Slots::read(&sum);
        assert_eq!(leaving, 1);
        assert_eq!(seconds, times);
        // A time that is not one is still a time (never the "none" zero).
        let mut one = vec![0f32; 2];
        Slots { rank: 0, world: 1 }.write(&mut one, false, Some(f32::NAN));
        assert_eq!(one, [0.0, f32::MIN_POSITIVE]);
        // A rank without samples writes no time.
        Slots { rank: 0, world: 1 }.write(&mut one, true, None);
        assert_eq!(one, [1.0, 0.0]);
        assert_eq!(Slots::read(&[]), (0, &[][..]));
    }
}
