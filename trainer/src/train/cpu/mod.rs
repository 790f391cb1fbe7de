//! The CPU [`Engine`]: the [`model`](super::model) layers on host memory, a
//! rayon pool of `--threads` threads for the GEMMs and im2col, gradients
//! summed over ranks by a [`Collective`] over `[f32]`, and [`Sgd`] updates.
//!
//! Inputs: the model, initial parameters ([`init`]), the optimiser's
//! settings and a collective (swapped with [`CpuEngine::set_collective`]
//! when the elastic layer re-forms the group). No files or sockets of its own.
//!
//! Rooms: [`net`], the models' forward and backward passes and the loss on
//! host memory; [`kernels`], the layers' kernels they chain (GEMM, im2col,
//! pooling). Only this engine runs them (the GPU's kernel checks compare
//! against them); [`device`](super::device) chooses between this engine
//! and the GPU's.

use super::collective::Collective;
use super::engine::{Batch, Engine, EngineError, Slots, StepStats, Stepped, TrainState};
use super::model::Model;
use super::optim::Sgd;
use net::{Workspace, softmax_cross_entropy};

pub(crate) mod kernels;
pub mod net;

/// Building the engine failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {threads} compute threads: {source}")]
pub struct PoolError {
    threads: usize,
    source: rayon::ThreadPoolBuildError,
}

/// One rank's model, parameters, momentum and collective, on the CPU.
pub struct CpuEngine {
    model: Model,
    sgd: Sgd,
    state: TrainState,
    collective: Box<dyn Collective<[f32]> + Send>,
    pool: rayon::ThreadPool,
    ws: Workspace,
    /// The gradients, then the [`Slots`] of the collective's group.
    grads: Vec<f32>,
    d_logits: Vec<f32>,
    /// Every rank's compute seconds of the last step ([`Engine::step_seconds`]).
    seconds: Vec<f32>,
}

impl std::fmt::Debug for CpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuEngine").field("model", &self.model).field("sgd", &self.sgd).finish_non_exhaustive()
    }
}

impl CpuEngine {
    /// An engine for `model` starting from `params`, computing on `threads`
    /// threads (0: one per core).
    pub fn new(
        model: Model,
        params: Vec<f32>,
        sgd: Sgd,
        threads: usize,
        collective: Box<dyn Collective<[f32]> + Send>,
    ) -> Result<Self, PoolError> {
        assert_eq!(params.len(), model.num_params(), "initial parameters do not fit the model");
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("compute-{i}"))
            .build()
            .map_err(|source| PoolError { threads, source })?;
        let n = params.len();
        Ok(Self {
            model,
            sgd,
            state: TrainState { params, momentum: vec![0.0; n], epoch: 0, step: 0 },
            pool,
            ws: Workspace::default(),
            // After the gradients: the leaving flag and the ranks' times.
            grads: vec![0.0; n + Slots { rank: collective.rank(), world: collective.world_size() }.count()],
            collective,
            d_logits: Vec::new(),
            seconds: Vec::new(),
        })
    }

    /// Replaces the collective (the elastic layer's new group), and the
    /// slots after the gradients with the new group's.
    pub fn set_collective(&mut self, collective: Box<dyn Collective<[f32]> + Send>) {
        self.collective = collective;
        self.grads.resize(self.state.params.len() + self.slots().count(), 0.0);
        self.seconds.clear();
    }

    fn slots(&self) -> Slots {
        Slots { rank: self.collective.rank(), world: self.collective.world_size() }
    }

    fn samples(&self, batch: &Batch<'_>) -> usize {
        let n = batch.labels.len();
        assert_eq!(batch.images.len(), n * self.model.input_len(), "batch images do not fit the model's input");
        n
    }
}

impl Engine for CpuEngine {
    fn step(&mut self, batch: &Batch<'_>, global_batch: usize, lr: f32, leaving: bool) -> Result<Stepped, EngineError> {
        let n = self.samples(batch);
        let params = self.state.params.len();
        let slots = self.slots();
        let Self { model, state, ws, grads, d_logits, pool, .. } = self;
        let (grads, extra) = grads.split_at_mut(params);
        // This rank's own work only: the wait in the all-reduce below is
        // what the other ranks spend while the slowest one computes.
        let began = std::time::Instant::now();
        let stats = pool.install(|| {
            if n == 0 {
                // A rank with no samples in this batch still takes part in the all-reduce.
                grads.fill(0.0);
                return StepStats::default();
            }
            let logits = model.forward(&state.params, batch.images, n, ws);
            let stats = softmax_cross_entropy(logits, batch.labels, d_logits);
            model.backward(&state.params, ws, d_logits, grads, false);
            stats
        });
        // A rank without samples computed nothing: no time to compare.
        slots.write(extra, leaving, (n > 0).then(|| began.elapsed().as_secs_f32()));
        self.collective.all_reduce_sum(&mut self.grads)?;
        let (grads, extra) = self.grads.split_at(params);
        let (leaving, seconds) = Slots::read(extra);
        self.seconds.clear();
        self.seconds.extend_from_slice(seconds);
        let scale = 1.0 / global_batch.max(1) as f32;
        self.sgd.update(lr, &mut self.state.params, &mut self.state.momentum, grads, scale);
        self.state.step += 1;
        Ok(Stepped { stats, leaving, timed_steps: 1 })
    }

    fn evaluate(&mut self, batch: &Batch<'_>) -> Result<StepStats, EngineError> {
        let n = self.samples(batch);
        if n == 0 {
            return Ok(StepStats::default());
        }
        let Self { model, state, ws, d_logits, pool, .. } = self;
        Ok(pool.install(|| {
            let logits = model.forward(&state.params, batch.images, n, ws);
            softmax_cross_entropy(logits, batch.labels, d_logits)
        }))
    }

    fn sum_over_ranks(&mut self, stats: StepStats) -> Result<StepStats, EngineError> {
        let mut sums = stats.to_floats();
        self.collective.all_reduce_sum(&mut sums)?;
        Ok(StepStats::from_floats(sums))
    }

    fn step_seconds(&self) -> &[f32] {
        &self.seconds
    }

    fn state(&self) -> Result<TrainState, EngineError> {
        Ok(self.state.clone())
    }

    fn set_state(&mut self, state: &TrainState) -> Result<(), EngineError> {
        let n = self.model.num_params();
        if state.params.len() != n || state.momentum.len() != n {
            return Err(EngineError::Device(format!(
                "the state has {} parameters and {} momentum values; this model has {n}",
                state.params.len(),
                state.momentum.len()
            )));
        }
        self.state = state.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    use super::*;
    use crate::train::collective::Single;
    use crate::train::model::Arch;

    /// The parameters after `steps` steps of batches of `n` random samples on `threads` threads.
    fn trained(arch: Arch, threads: usize, n: usize, steps: usize) -> Vec<f32> {
        let model = Model::new(arch, (1, 28, 28));
        let params = model.init(7);
        let len = model.input_len();
        let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
        let mut engine = CpuEngine::new(model, params, sgd, threads, Box::new(Single)).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for _ in 0..steps {
            let images: Vec<f32> =
                (0..n * len).map(|_| (rng.next_u32() >> 8) as f32 / (1 << 23) as f32 - 1.0).collect();
            let labels: Vec<u8> = (0..n).map(|_| (rng.next_u32() % 10) as u8).collect();
            engine.step(&Batch { images: &images, labels: &labels }, n, 0.05, false).unwrap();
        }
        engine.state().unwrap().params
    }

    /// Stands in for two peers of a group of three: its all-reduce adds
    /// what they would (their leaving flags and their step times, nothing to
    /// the gradients), so one engine sees its slots as the real ring sums them.
    struct TwoPeers {
        seconds: [f32; 2],
    }

    impl Collective<[f32]> for TwoPeers {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            3
        }
        fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), crate::train::collective::CollectiveError> {
            let n = buf.len();
            buf[n - 2] += self.seconds[0];
            buf[n - 1] += self.seconds[1];
            buf[n - 4] += 1.0; // one peer is leaving
            Ok(())
        }
        fn broadcast(&mut self, _: &mut [f32], _: usize) -> Result<(), crate::train::collective::CollectiveError> {
            Ok(())
        }
    }

    /// The CPU engine times its own forward and backward, puts it in its
    /// slot after the leaving flag, and reads every rank's time back; the
    /// gradients (so the update) are the same as without the slots.
    #[test]
    fn a_step_carries_every_ranks_time_after_the_leaving_flag() {
        let model = Model::new(Arch::Mlp, (1, 28, 28));
        let params = model.init(7);
        let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
        let n = 8;
        let images: Vec<f32> = (0..n * model.input_len()).map(|i| (i % 13) as f32 / 13.0).collect();
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        let batch = Batch { images: &images, labels: &labels };
        let mut alone = CpuEngine::new(model.clone(), params.clone(), sgd, 1, Box::new(Single)).unwrap();
        let first = alone.step(&batch, n, 0.05, false).unwrap();
        assert_eq!((first.timed_steps, alone.step_seconds().len()), (1, 1));
        assert!(alone.step_seconds()[0] > 0.0);
        let mut engine = CpuEngine::new(model, params, sgd, 1, Box::new(Single)).unwrap();
        engine.set_collective(Box::new(TwoPeers { seconds: [0.5, 0.25] }));
        let done = engine.step(&batch, n, 0.05, false).unwrap();
        assert_eq!((done.leaving, done.timed_steps), (1, 1));
        let seconds = engine.step_seconds();
        assert_eq!(seconds.len(), 3);
        assert!(seconds[0] > 0.0 && seconds[0] < 60.0, "{seconds:?}");
        assert_eq!(&seconds[1..], [0.5, 0.25]);
        assert!(engine.state().unwrap().params == alone.state().unwrap().params, "the slots touched the gradients");
        // A rank with no samples in a step carries no time.
        engine.step(&Batch { images: &[], labels: &[] }, n, 0.05, false).unwrap();
        assert_eq!(engine.step_seconds()[0], 0.0);
    }

    /// Every product, element-wise pass and sum is split by the shapes
    /// alone, never by the pool's size: the same bits on any thread count.
    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        for (arch, n) in [(Arch::Mlp, 300), (Arch::Lenet, 70)] {
            let one = trained(arch, 1, n, 3);
            for threads in [2, 3] {
                assert!(trained(arch, threads, n, 3) == one, "{arch:?}: {threads} threads differ from 1");
            }
        }
    }
}
