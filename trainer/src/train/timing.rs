//! Timed all-reduces on any collective, wherever its buffers live: what
//! `trainer bench` ([`super::bench`]) measures. The host case ([`Host`],
//! the TCP ring or the group of one) is here; the GPU's (NCCL on device
//! buffers) is in `cuda`, and [`super::device`] picks one. A room below
//! both, so the GPU code does not import the benchmark that uses it.

use std::time::Instant;

use super::collective::{Collective, CollectiveError};

/// What `trainer bench` ([`super::bench::measure`]) needs of a collective:
/// timed all-reduces of a buffer of a given size, wherever its buffers
/// live, and a sum of a few host numbers over the ranks.
pub(crate) trait Timed {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn world_size(&self) -> usize;
    /// `warmup` untimed then `iters` timed in-place all-reduces (sum) of a
    /// buffer of `floats` f32; returns this rank's mean seconds per timed one.
    fn time_all_reduce(&mut self, floats: usize, warmup: u32, iters: u32) -> Result<f64, CollectiveError>;
    /// Replaces `values` on every rank with their sum over the ranks.
    fn sum_host(&mut self, values: &mut [f32]) -> Result<(), CollectiveError>;
}

/// Host buffers summed by a host collective (the TCP ring, or the group of one).
pub(crate) struct Host<C>(pub C);

impl<C: Collective<[f32]>> Timed for Host<C> {
    fn rank(&self) -> usize {
        self.0.rank()
    }

    fn world_size(&self) -> usize {
        self.0.world_size()
    }

    fn time_all_reduce(&mut self, floats: usize, warmup: u32, iters: u32) -> Result<f64, CollectiveError> {
        let mut buf = vec![1.0f32; floats];
        mean_seconds(warmup, iters, || self.0.all_reduce_sum(&mut buf))
    }

    fn sum_host(&mut self, values: &mut [f32]) -> Result<(), CollectiveError> {
        self.0.all_reduce_sum(values)
    }
}

/// `warmup` untimed calls of `op`, then the mean seconds of `iters` (at
/// least 1) timed ones.
pub(crate) fn mean_seconds(
    warmup: u32,
    iters: u32,
    mut op: impl FnMut() -> Result<(), CollectiveError>,
) -> Result<f64, CollectiveError> {
    for _ in 0..warmup {
        op()?;
    }
    let t = Instant::now();
    for _ in 0..iters.max(1) {
        op()?;
    }
    Ok(t.elapsed().as_secs_f64() / f64::from(iters.max(1)))
}
