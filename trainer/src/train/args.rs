//! The arguments of `trainer train` (clap derive; the `///` docs are its `--help`).

use std::path::PathBuf;

use super::data::Format;
use super::model::Arch;

/// Where the model computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// Host CPUs (gemm on a rayon pool; ring all-reduce over TCP between hosts).
    Cpu,
    /// NVIDIA GPUs (cuBLAS, NCCL; needs a build with the `cuda` feature and a driver).
    Cuda,
}

/// The learning-rate schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LrSchedule {
    /// The same rate every epoch.
    Constant,
    /// Half a cosine from the rate down to 0 over the epochs: the last epochs
    /// take small steps, so the final accuracy does not swing.
    Cosine,
}

impl LrSchedule {
    /// The rate for epoch `epoch` (0-based) of `epochs`, starting from `lr`.
    pub fn rate(self, lr: f32, epoch: u64, epochs: u64) -> f32 {
        match self {
            LrSchedule::Constant => lr,
            LrSchedule::Cosine => {
                let progress = epoch as f64 / epochs.max(1) as f64;
                (f64::from(lr) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())) as f32
            }
        }
    }
}

/// Arguments of `trainer train`.
///
/// Started on every node by `trainer launch -- trainer train ...`: the rank
/// and world size come from `RANK` and `WORLD_SIZE` (absent: one rank).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The model: `mlp` (784-256-128-10 on MNIST) or `lenet` (LeNet-5).
    #[arg(long, value_enum)]
    pub model: Arch,
    /// Directory holding the dataset: MNIST idx files (train-images-idx3-ubyte[.gz], ...)
    /// or CIFAR-10 binary batches (data_batch_1.bin .. data_batch_5.bin, test_batch.bin).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// The dataset's format; detected from the files in --data when not given.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Passes over the training set.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub epochs: u64,
    /// Samples per optimisation step over ALL ranks together (the global batch); each
    /// rank computes its own contiguous slice of it, so the result does not depend on
    /// the number of ranks.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Learning rate.
    #[arg(long, default_value_t = 0.05, value_parser = positive)]
    pub lr: f32,
    /// How the learning rate changes over the epochs: `cosine` decays it from
    /// --lr to 0 along half a cosine (epoch by epoch), `constant` keeps it.
    #[arg(long, value_enum, default_value_t = LrSchedule::Cosine)]
    pub lr_schedule: LrSchedule,
    /// SGD momentum, 0 (plain SGD) up to but not including 1.
    #[arg(long, default_value_t = 0.9, value_parser = momentum)]
    pub momentum: f32,
    /// L2 weight decay added to every gradient (PyTorch's SGD convention).
    #[arg(long, default_value_t = 5e-4, value_parser = non_negative)]
    pub weight_decay: f32,
    /// Seed of the initial weights and of every epoch's shuffle: the same seed gives
    /// the same run.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute threads on this rank, 0 to 1024; 0: one per core.
    #[arg(long, default_value_t = 0, value_parser = threads)]
    pub threads: usize,
    /// Where to compute.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Evaluate on the test split every N epochs (and always after the last).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub eval_every: u64,
    /// Checkpoints.
    #[command(flatten)]
    pub checkpoints: super::checkpoint::Args,
    /// TensorBoard metrics.
    #[command(flatten)]
    pub events: super::events::Args,
    /// Naming a straggler.
    #[command(flatten)]
    pub stragglers: super::straggler::Args,
    /// Filesystem root the agent's files are under (its state file and node
    /// config tell the ranks who is in the cluster).
    #[arg(long, env = "TRAINER_ROOT", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// More compute threads than this only add switching (EC2's largest
/// instances have under 1,000 vCPUs); `--threads 100000` spent minutes
/// starting threads before failing.
const MAX_THREADS: usize = 1024;

fn threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= MAX_THREADS => Ok(n),
        Ok(n) => Err(format!("{n} is more than {MAX_THREADS} threads; use 0 for one per core")),
        Err(_) => Err(format!("{s:?} is not a thread count (0 for one per core)")),
    }
}

fn float(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() { Ok(v) } else { Err(format!("{s} is not finite")) }
}

fn positive(s: &str) -> Result<f32, String> {
    float(s).and_then(|v| if v > 0.0 { Ok(v) } else { Err(format!("{v} must be greater than 0")) })
}

fn non_negative(s: &str) -> Result<f32, String> {
    float(s).and_then(|v| if v >= 0.0 { Ok(v) } else { Err(format!("{v} must be 0 or more")) })
}

fn momentum(s: &str) -> Result<f32, String> {
    float(s).and_then(|v| if (0.0..1.0).contains(&v) { Ok(v) } else { Err(format!("{v} must be in [0, 1)")) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_starts_at_the_rate_and_decays_towards_zero() {
        assert_eq!(LrSchedule::Constant.rate(0.1, 7, 10), 0.1);
        assert_eq!(LrSchedule::Cosine.rate(0.1, 0, 10), 0.1);
        assert!((LrSchedule::Cosine.rate(0.1, 5, 10) - 0.05).abs() < 1e-6);
        let last = LrSchedule::Cosine.rate(0.1, 9, 10);
        assert!(last > 0.0 && last < 0.003, "{last}");
    }
}
