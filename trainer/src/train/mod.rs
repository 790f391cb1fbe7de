//! `trainer train`: built-in data-parallel training of an MLP or a LeNet-style
//! CNN on MNIST (idx) or CIFAR-10 (binary), on CPUs (a ring all-reduce over
//! TCP) or GPUs (NCCL through cudarc, cargo feature `cuda`), with elastic
//! membership, checkpoints and TensorBoard metrics.
//!
//! Module map (one concept each), bottom up: each room uses only rooms
//! listed above it (`scripts/import-map` fails on a circle):
//! - [`data`]: dataset readers, per-rank shards, deterministic shuffling;
//! - [`stats`]: loss and accuracy sums over samples;
//! - [`model`]: the models' layers, parameter layout and initialisation;
//! - [`optim`]: SGD with momentum and weight decay;
//! - [`collective`]: the collective-operations trait and its world-size-1 case;
//! - [`ring`]: the CPU ring all-reduce over TCP;
//! - [`timing`]: timed all-reduces on any collective (what `trainer bench` measures);
//! - [`engine`]: what the training loop drives (one step, evaluation, state);
//! - [`straggler`]: naming a rank whose compute stays slower than the others';
//! - [`checkpoint`]: atomic, checksummed checkpoints and resume;
//! - [`events`]: TensorBoard event files;
//! - [`progress`]: the live progress line;
//! - [`interruption`]: SIGTERM while the host has an interruption notice (leave at the boundary);
//! - [`args`]: `trainer train`'s arguments;
//! - [`cpu`]: the CPU engine, and the models' passes and kernels it runs (GEMM crate);
//! - `cuda` (feature `cuda`): the GPU engine: device buffers, cuBLAS, NVRTC kernels, NCCL;
//! - [`device`]: the device seam: the engine, collective and NCCL id for `--device`,
//!   and the only `cuda` feature gates outside `cuda`;
//! - [`rendezvous`]: ranks per membership generation, hosted by the master's rank;
//! - [`elastic`]: joins, leaves and dead peers at epoch boundaries;
//! - [`epochs`]: the epoch loop: which epoch next, in which group, from which state;
//! - [`run`]: `trainer train` (the epochs of one rank on its device);
//! - [`bench`](mod@bench): `trainer bench` (all-reduce bandwidth);
//! - [`compare`]: whether two finished runs agree (`trainer compare`).

pub(crate) mod args;
pub(crate) mod bench;
pub mod checkpoint;
pub mod collective;
pub(crate) mod compare;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub(crate) mod device;
pub mod elastic;
pub mod engine;
pub mod epochs;
pub mod events;
pub(crate) mod interruption;
pub mod model;
pub mod optim;
pub mod progress;
pub mod rendezvous;
pub mod ring;
pub mod run;
pub(crate) mod stats;
pub mod straggler;
pub(crate) mod timing;
