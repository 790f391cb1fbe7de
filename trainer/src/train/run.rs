//! The training loop of `trainer train`: epochs of SGD steps over this
//! rank's slices of the global batches, evaluation on the test split, one
//! summary line per epoch on stdout and a live line on stderr.
//!
//! Inputs: the parsed [`Args`], the dataset in `--data`, and the environment
//! `trainer launch` sets (`RANK`, `WORLD_SIZE`; `MASTER_ADDR` and
//! `MASTER_PORT` are for the rendezvous). Writes only stdout and stderr.
//!
//! [`train_epoch`] is one epoch as a function of the engine, the data, the
//! rank's place in the group and the epoch number, returning a `Result`:
//! the elastic layer calls it again for the same epoch after a collective
//! failure, with the re-formed group, once the engine holds a survivor's state.

use std::io::Write;
use std::time::Instant;

use super::args::{Args, Device};
use super::collective::Single;
use super::cpu::{self, CpuEngine, PoolError};
use super::data::{self, DataError, Dataset, Split};
use super::engine::{Batch, Engine, EngineError, StepStats};
use super::model::{Arch, Model};
use super::optim::Sgd;
use super::progress::{Progress, Snapshot};
use crate::{EXIT_FAILED, EXIT_USAGE};

/// Test samples evaluated per forward pass (bounds the im2col memory).
const EVAL_CHUNK: usize = 500;

/// `trainer train` failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The dataset could not be read.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The environment `trainer launch` sets does not make sense.
    #[error("{var}={value:?}: {reason}")]
    Environment {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The requested device cannot be used.
    #[error("--device {device}: {reason}")]
    Device {
        /// The device asked for.
        device: &'static str,
        /// Why not.
        reason: String,
    },
    /// The images are too small for the model.
    #[error("{path}: {height}x{width} images are too small for LeNet (it needs at least 12x12); use --model mlp")]
    TooSmall {
        /// The dataset directory.
        path: std::path::PathBuf,
        /// Image height.
        height: usize,
        /// Image width.
        width: usize,
    },
    /// The compute threads could not be started.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A training step failed (a peer left or died, or the device failed).
    #[error("epoch {epoch}: {source}")]
    Step {
        /// The epoch (1-based).
        epoch: u64,
        /// Why.
        source: EngineError,
    },
}

impl TrainError {
    /// The process exit code for this failure: usage and data problems are
    /// the user's to fix (2), a failed step is the run failing (1).
    pub fn exit_code(&self) -> u8 {
        match self {
            TrainError::Step { .. } => EXIT_FAILED,
            _ => EXIT_USAGE,
        }
    }
}

/// This rank's place in the group of one membership generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This rank, `0..world`.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
    /// The membership generation (an input of the shuffle).
    pub generation: u64,
}

/// The schedule of one epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochPlan {
    /// The global batch size.
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f32,
    /// Shuffle seed.
    pub seed: u64,
    /// Total epochs (for the progress line).
    pub epochs: u64,
}

/// What one epoch did on this rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochReport {
    /// The epoch (0-based).
    pub epoch: u64,
    /// Loss and accuracy sums over this rank's samples.
    pub train: StepStats,
    /// Global samples (all ranks) per second of wall time.
    pub samples_per_sec: f64,
}

/// One epoch over `data`: the epoch's permutation of `(seed, epoch,
/// generation)` cut into global batches, of which this rank computes its
/// [`data::shard`]. Every rank runs the same number of steps (a rank whose
/// slice of the last batch is empty still joins its all-reduce).
pub fn train_epoch(
    engine: &mut dyn Engine,
    data: &Dataset,
    shard: Shard,
    epoch: u64,
    plan: &EpochPlan,
    progress: &mut Progress,
) -> Result<EpochReport, EngineError> {
    let start = Instant::now();
    let order = data::permutation(data.len(), plan.seed, epoch, shard.generation);
    let steps = order.len().div_ceil(plan.batch_size);
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    let mut total = StepStats::default();
    let mut global_samples = 0usize;
    for (step, global) in order.chunks(plan.batch_size).enumerate() {
        let mine = &global[data::shard(global.len(), shard.rank, shard.world)];
        data.gather(mine, &mut images, &mut labels);
        let stats = engine.step(&Batch { images: &images, labels: &labels }, global.len(), plan.lr)?;
        total.loss_sum += stats.loss_sum;
        total.correct += stats.correct;
        total.samples += stats.samples;
        global_samples += global.len();
        progress.update(&Snapshot {
            epoch: (epoch + 1, plan.epochs),
            step: (step + 1, steps),
            loss: total.loss_sum / total.samples.max(1) as f64,
            accuracy: total.correct as f64 / total.samples.max(1) as f64,
            samples_per_sec: global_samples as f64 / start.elapsed().as_secs_f64(),
        });
    }
    progress.clear();
    Ok(EpochReport { epoch, train: total, samples_per_sec: global_samples as f64 / start.elapsed().as_secs_f64() })
}

/// Loss and accuracy of the engine's current parameters on all of `data`.
pub fn evaluate(engine: &mut dyn Engine, data: &Dataset) -> Result<StepStats, EngineError> {
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    let mut total = StepStats::default();
    let indices: Vec<usize> = (0..data.len()).collect();
    for chunk in indices.chunks(EVAL_CHUNK) {
        data.gather(chunk, &mut images, &mut labels);
        let s = engine.evaluate(&Batch { images: &images, labels: &labels })?;
        total.loss_sum += s.loss_sum;
        total.correct += s.correct;
        total.samples += s.samples;
    }
    Ok(total)
}

/// A [`StepStats`]'s accuracy, 0..1.
pub fn accuracy(s: &StepStats) -> f64 {
    s.correct as f64 / s.samples.max(1) as f64
}

/// The epoch's line on stdout: `epoch 3/10 loss 0.1234 train-acc 96.10% test-acc 97.20% samples/s 8123`.
pub fn epoch_line(report: &EpochReport, epochs: u64, test: Option<&StepStats>) -> String {
    let test = test.map_or_else(|| "-".to_owned(), |t| format!("{:.2}%", 100.0 * accuracy(t)));
    format!(
        "epoch {}/{} loss {:.4} train-acc {:.2}% test-acc {} samples/s {:.0}",
        report.epoch + 1,
        epochs,
        report.train.loss_sum / report.train.samples.max(1) as f64,
        100.0 * accuracy(&report.train),
        test,
        report.samples_per_sec
    )
}

fn env_number(var: &'static str, default: usize) -> Result<usize, TrainError> {
    match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(value) => value.trim().parse().map_err(|_| TrainError::Environment {
            var,
            value,
            reason: "not a number; `trainer launch` sets it".to_owned(),
        }),
    }
}

/// The group from `RANK`/`WORLD_SIZE`. Until the ring collective is wired
/// in, only a world of one is accepted.
fn group_from_env() -> Result<Shard, TrainError> {
    let world = env_number("WORLD_SIZE", 1)?;
    let rank = env_number("RANK", 0)?;
    if world != 1 {
        return Err(TrainError::Environment {
            var: "WORLD_SIZE",
            value: world.to_string(),
            reason: "this build of `trainer train` runs one rank only (the TCP ring is not wired in yet)".to_owned(),
        });
    }
    if rank != 0 {
        return Err(TrainError::Environment {
            var: "RANK",
            value: rank.to_string(),
            reason: "must be 0 in a world of one".to_owned(),
        });
    }
    Ok(Shard { rank, world, generation: 0 })
}

/// `trainer train`: loads the data, builds the engine and trains; returns the exit code.
pub fn run(args: &Args) -> Result<u8, TrainError> {
    let shard = group_from_env()?;
    if args.device == Device::Cuda {
        return Err(TrainError::Device {
            device: "cuda",
            reason: "this build has no GPU engine; use --device cpu".to_owned(),
        });
    }
    if args.checkpoint_dir.is_some() {
        // The checkpoint module is wired in at integration; say so rather than pretend.
        tracing::warn!("--checkpoint-dir/--resume: checkpoints are not written by this build yet");
    }
    let format = match args.format {
        Some(f) => f,
        None => data::detect(&args.data)?,
    };
    let train = data::load(&args.data, Some(format), Split::Train)?;
    // Only rank 0 evaluates, so only it holds the test split.
    let test = if shard.rank == 0 { Some(data::load(&args.data, Some(format), Split::Test)?) } else { None };
    // LeNet's second convolution and pooling need 12 x 12 pixels or more.
    if args.model == Arch::Lenet && train.height.min(train.width) < 12 {
        return Err(TrainError::TooSmall { path: args.data.clone(), height: train.height, width: train.width });
    }
    let model = Model::new(args.model, (train.channels, train.height, train.width));
    let params = cpu::init(&model, args.seed);
    let sgd = Sgd { momentum: args.momentum, weight_decay: args.weight_decay };
    let mut engine = CpuEngine::new(model, params, sgd, args.threads, Box::new(Single))?;
    tracing::info!(train = train.len(), test = test.as_ref().map(Dataset::len), ?format, "dataset loaded");

    let plan = EpochPlan { batch_size: args.batch_size as usize, lr: args.lr, seed: args.seed, epochs: args.epochs };
    let mut progress = Progress::stderr(shard.rank == 0);
    for epoch in 0..args.epochs {
        let report = train_epoch(&mut engine, &train, shard, epoch, &plan, &mut progress)
            .map_err(|source| TrainError::Step { epoch: epoch + 1, source })?;
        engine.set_epoch(epoch + 1);
        let due = (epoch + 1) % args.eval_every == 0 || epoch + 1 == args.epochs;
        let test_stats = match &test {
            Some(test) if due => {
                Some(evaluate(&mut engine, test).map_err(|source| TrainError::Step { epoch: epoch + 1, source })?)
            }
            _ => None,
        };
        if shard.rank == 0 {
            let mut out = std::io::stdout().lock();
            // stdout closed (a pipe to `head`): nothing left to tell, keep training.
            let _ = writeln!(out, "{}", epoch_line(&report, args.epochs, test_stats.as_ref()));
            let _ = out.flush();
        }
    }
    Ok(crate::EXIT_OK)
}
