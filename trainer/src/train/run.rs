//! The training loop of `trainer train`: epochs of SGD steps over this
//! rank's slices of the global batches, evaluation on the test split, one
//! summary line per epoch on stdout and a live line on stderr.
//!
//! Inputs: the parsed [`Args`], the dataset in `--data`, and the environment
//! `trainer launch` sets (`RANK`, `WORLD_SIZE`; `MASTER_ADDR` and
//! `MASTER_PORT` are for the rendezvous). Writes only stdout and stderr.
//!
//! [`train_epoch`] is one epoch as a function of the engine, the data, the
//! rank's place in the group and the epoch number, returning a `Result`.
//! Which epoch runs next, in which group and from which state is decided by
//! [`super::epochs::run`], the loop shared with the elastic scenario tests;
//! this module gives it a [`Rank`]: the device, one epoch of training, and
//! what rank 0 does after each (evaluate, print, events, checkpoint).

use std::time::Instant;

use super::args::Args;
use super::checkpoint::{CheckpointError, DatasetShape, Hyper, InEpoch, Meta, Store as CheckpointStore};
use super::collective::Group;
use super::data::{self, DataError, Dataset, Split};
use super::device::{Device, DeviceError, nccl_id_maker};
use super::elastic::{self, ElasticConfig, Launch};
use super::engine::{Batch, Engine, EngineError, StepStats, TrainState};
use super::epochs::{self, EpochsError, Outcome, Rank, Resume, Shard, Start, Trained};
use super::events::{self, EventWriter, EventsError};
use super::interruption::NoticeWatch;
use super::model::{Arch, Model};
use super::optim::Sgd;
use super::progress::{Progress, Snapshot};
use super::rendezvous::{HostConfig, RendezvousError, Roster};
use super::ring::Ring;
use super::straggler::{self, Stragglers};
use crate::exit::{EXIT_FAILED, EXIT_USAGE};

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
    /// The requested device cannot be used (the message names the flag).
    #[error("{0}")]
    Device(String),
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
    /// Joining the job's group failed, or the master's process went away.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// The checkpoint directory is unusable before training starts (a file,
    /// read-only): the flag is the user's to fix.
    #[error(transparent)]
    CheckpointDir(CheckpointError),
    /// A checkpoint could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// TensorBoard events could not be written.
    #[error(transparent)]
    Events(#[from] EventsError),
    /// The compute threads could not be started (the device's
    /// [`DeviceError::Pool`]: this room names no backend).
    #[error(transparent)]
    Pool(DeviceError),
    /// The epoch line could not be written to stdout (after that epoch's
    /// checkpoint was saved).
    #[error("{0}")]
    Output(#[source] cli_output::Closed),
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
            // Ended like a Unix tool killed by SIGPIPE: the run did not finish.
            TrainError::Output(cli_output::Closed::ReaderGone) => crate::exit::EXIT_STDOUT_CLOSED,
            TrainError::Step { .. } | TrainError::Rendezvous(_) | TrainError::Checkpoint(_) | TrainError::Events(_) => {
                EXIT_FAILED
            }
            _ => EXIT_USAGE,
        }
    }
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

/// What one epoch did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochReport {
    /// The epoch (0-based).
    pub epoch: u64,
    /// Loss and accuracy sums over every rank's samples.
    pub train: StepStats,
    /// Global samples (all ranks) per second of wall time.
    pub samples_per_sec: f64,
}

/// One epoch over `data`: the epoch's permutation of `(seed, epoch,
/// generation)` cut into global batches, of which this rank computes its
/// [`data::shard`]. Every rank runs the same number of steps (a rank whose
/// slice of the last batch is empty still joins its all-reduce). The live
/// line shows this rank's running loss and accuracy; the report, the sums
/// over all ranks (one more all-reduce at the end of the epoch).
pub fn train_epoch(
    engine: &mut dyn Engine,
    data: &Dataset,
    shard: Shard,
    epoch: u64,
    plan: &EpochPlan,
    progress: &mut Progress,
) -> Result<EpochReport, EngineError> {
    let mut from = Resume::default();
    loop {
        // Nobody here raises the leaving flag; should a peer, the epoch goes on.
        match train_epoch_from(engine, data, shard, epoch, plan, progress, from, &mut || false, &mut |_, _| {})? {
            Trained::Epoch(report) => return Ok(report),
            Trained::Stopped(at) => from = at,
        }
    }
}

/// The rest of an epoch from `from.step` (0: all of it), as
/// [`train_epoch`], with this rank's leaving flag from `leaving` raised in
/// every step's all-reduce. When any rank raised it and steps remain, every
/// rank stops after that same step: the sums so far are added over the
/// ranks (one all-reduce, in which the leaver still takes part) and
/// returned as [`Trained::Stopped`], where the group (or the one re-formed
/// without the leaver) goes on. After a stop the remaining global batches
/// are the same ones (the permutation of the generation the epoch began
/// with, `shard.generation`), re-sharded over the new world: no sample is
/// skipped or repeated. Rank 0 carries `from.train`, the sums of the steps
/// run before, into the epoch's report. After every step that brought every
/// rank's compute time ([`Stepped::timed_steps`](super::engine::Stepped::timed_steps)),
/// `timed` is given them, by rank, and how many steps they stand for (rank
/// 0 watches for a straggler).
#[allow(clippy::too_many_arguments)]
pub fn train_epoch_from(
    engine: &mut dyn Engine,
    data: &Dataset,
    shard: Shard,
    epoch: u64,
    plan: &EpochPlan,
    progress: &mut Progress,
    from: Resume,
    leaving: &mut dyn FnMut() -> bool,
    timed: &mut dyn FnMut(&[f32], u64),
) -> Result<Trained<EpochReport>, EngineError> {
    let start = Instant::now();
    let order = data::permutation(data.len(), plan.seed, epoch, shard.generation);
    let steps = order.len().div_ceil(plan.batch_size);
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    let mut total = if shard.rank == 0 { from.train } else { StepStats::default() };
    let mut global_samples = 0usize;
    let first = usize::try_from(from.step).unwrap_or(usize::MAX);
    for (step, global) in order.chunks(plan.batch_size).enumerate().skip(first) {
        let mine = &global[data::shard(global.len(), shard.rank, shard.world)];
        data.gather(mine, &mut images, &mut labels);
        let done = engine.step(&Batch { images: &images, labels: &labels }, global.len(), plan.lr, leaving())?;
        if done.timed_steps > 0 {
            timed(engine.step_seconds(), done.timed_steps);
        }
        total += done.stats;
        global_samples += global.len();
        progress.update(&Snapshot {
            epoch: (epoch + 1, plan.epochs),
            step: (step + 1, steps),
            loss: total.mean_loss(),
            accuracy: accuracy(&total),
            samples_per_sec: global_samples as f64 / start.elapsed().as_secs_f64(),
        });
        if done.leaving > 0 && step + 1 < steps {
            let train = engine.sum_over_ranks(total)?;
            progress.clear();
            return Ok(Trained::Stopped(Resume { step: step as u64 + 1, train }));
        }
    }
    let train = engine.sum_over_ranks(total)?;
    progress.clear();
    Ok(Trained::Epoch(EpochReport {
        epoch,
        train,
        samples_per_sec: global_samples as f64 / start.elapsed().as_secs_f64(),
    }))
}

/// Loss and accuracy of the engine's current parameters on all of `data`.
pub fn evaluate(engine: &mut dyn Engine, data: &Dataset) -> Result<StepStats, EngineError> {
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    let mut total = StepStats::default();
    let indices: Vec<usize> = (0..data.len()).collect();
    for chunk in indices.chunks(EVAL_CHUNK) {
        data.gather(chunk, &mut images, &mut labels);
        total += engine.evaluate(&Batch { images: &images, labels: &labels })?;
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
        report.train.mean_loss(),
        100.0 * accuracy(&report.train),
        test,
        report.samples_per_sec
    )
}

/// The figures of one [`epoch_line`] that a comparison of runs needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochFigures {
    /// The epoch's mean training loss.
    pub loss: f64,
    /// Test accuracy in percent, when the run had a test split.
    pub test_accuracy: Option<f64>,
    /// Samples per second over the epoch.
    pub samples_per_sec: f64,
}

/// Reads back a line [`epoch_line`] wrote (after any prefix, such as
/// `trainer launch`'s host and rank); `None` for any other line.
pub fn parse_epoch_line(line: &str) -> Option<EpochFigures> {
    let at = line.find("epoch ")?;
    let words: Vec<&str> = line[at..].split_whitespace().collect();
    let value = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).copied();
    let percent = |v: &str| v.strip_suffix('%').and_then(|v| v.parse::<f64>().ok());
    // `epoch N/M` must be there, so that a progress or log line is never taken for one.
    value("epoch")?.split_once('/')?;
    Some(EpochFigures {
        loss: value("loss")?.parse().ok()?,
        test_accuracy: match value("test-acc")? {
            "-" => None,
            v => Some(percent(v)?),
        },
        samples_per_sec: value("samples/s")?.parse().ok()?,
    })
}

fn env_number<T: std::str::FromStr>(var: &'static str) -> Result<Option<T>, TrainError> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(value) => value.trim().parse().map(Some).map_err(|_| TrainError::Environment {
            var,
            value,
            reason: "not a number; `trainer launch` sets it".to_owned(),
        }),
    }
}

/// The job `trainer launch` started this process in, from the torchrun
/// variables; `None` when it runs on its own (one rank, no rendezvous).
fn launch_from_env() -> Result<Option<Launch>, TrainError> {
    let Ok(master_addr) = std::env::var("MASTER_ADDR") else {
        if let Some(world) = env_number::<usize>("WORLD_SIZE")?.filter(|w| *w != 1) {
            return Err(TrainError::Environment {
                var: "WORLD_SIZE",
                value: world.to_string(),
                reason: "more than one rank needs MASTER_ADDR and MASTER_PORT (start it with `trainer launch`)".into(),
            });
        }
        return Ok(None);
    };
    let missing = |var: &'static str| TrainError::Environment {
        var,
        value: String::new(),
        reason: "missing; `trainer launch` sets it with MASTER_ADDR".to_owned(),
    };
    Ok(Some(Launch {
        rank: env_number("RANK")?.ok_or_else(|| missing("RANK"))?,
        world_size: env_number("WORLD_SIZE")?.ok_or_else(|| missing("WORLD_SIZE"))?,
        local_rank: env_number("LOCAL_RANK")?.unwrap_or(0),
        master_addr,
        master_port: env_number("MASTER_PORT")?.ok_or_else(|| missing("MASTER_PORT"))?,
    }))
}

impl From<DeviceError> for TrainError {
    fn from(e: DeviceError) -> Self {
        match e {
            e @ DeviceError::Pool(_) => TrainError::Pool(e),
            DeviceError::Unavailable(reason) => TrainError::Device(reason),
        }
    }
}

/// `trainer train`: loads the data, builds the engine, joins the job's
/// group (when `trainer launch` started it) and trains; returns the exit code.
pub fn run(args: &Args) -> Result<u8, TrainError> {
    let launch = launch_from_env()?;
    if launch.is_some() {
        super::interruption::ignore_sigterm_while_noticed(&args.root);
    }
    // Rank 0 is the master's process (it never leaves): it evaluates,
    // prints, writes checkpoints and TensorBoard events.
    let leader = launch.as_ref().is_none_or(|l| l.rank == 0);
    // Where rank 0 will write must work before hours of data loading and training.
    let store = args.checkpoints.store();
    let saves = args.checkpoints.checkpoint_dir.is_some() || launch.is_some();
    if leader && saves {
        store.check_writable().map_err(TrainError::CheckpointDir)?;
    }
    let format = match args.format {
        Some(f) => f,
        None => data::detect(&args.data)?,
    };
    let train = data::load(&args.data, Some(format), Split::Train)?;
    let test = if leader { Some(data::load(&args.data, Some(format), Split::Test)?) } else { None };
    // LeNet's second convolution and pooling need 12 x 12 pixels or more.
    if args.model == Arch::Lenet && train.height.min(train.width) < 12 {
        return Err(TrainError::TooSmall { path: args.data.clone(), height: train.height, width: train.width });
    }
    let shape = (train.channels, train.height, train.width);
    let model = Model::new(args.model, shape);
    tracing::info!(train = train.len(), test = test.as_ref().map(Dataset::len), ?format, "dataset loaded");

    // The starting state: a checkpoint (rank 0 reads it; the others get it
    // by the first broadcast), else the seeded initialisation.
    let meta = Meta {
        model: format!("{:?}", args.model).to_lowercase(),
        dataset: DatasetShape {
            format: format!("{format:?}").to_lowercase(),
            channels: train.channels as u32,
            height: train.height as u32,
            width: train.width as u32,
            classes: 10,
        },
        hyper: Hyper {
            lr: args.lr,
            momentum: args.momentum,
            weight_decay: args.weight_decay,
            batch_size: u64::from(args.batch_size),
            seed: args.seed,
        },
    };
    // What every engine starts from, made on the host (`Model::init`).
    let params = model.init(args.seed);
    let mut state = TrainState { momentum: vec![0.0; params.len()], params, epoch: 0, step: 0 };
    // Where in its epoch the starting state is (a checkpoint written when a rank left mid-epoch).
    let mut in_epoch = InEpoch::default();
    if leader && args.checkpoints.resume {
        match store.resume(&meta)? {
            Some(c) if c.in_epoch.step > 0 => {
                cli_output::errln!(
                    "trainer train: resuming at step {} of epoch {} from {}",
                    c.in_epoch.step + 1,
                    c.state.epoch + 1,
                    store.dir().display()
                );
                (state, in_epoch) = (c.state, c.in_epoch);
            }
            Some(c) => {
                cli_output::errln!(
                    "trainer train: resuming after epoch {} from {}",
                    c.state.epoch,
                    store.dir().display()
                );
                state = c.state;
            }
            None => cli_output::errln!("trainer train: no checkpoint in {}; starting afresh", store.dir().display()),
        }
    }
    let sgd = Sgd { momentum: args.momentum, weight_decay: args.weight_decay };
    let ordinal = launch.as_ref().map_or(0, |l| l.local_rank as usize);
    let mut device = Device::new(args.device, model, sgd, args.threads, ordinal)?;
    device.engine().set_state(&state).map_err(|source| TrainError::Step { epoch: state.epoch + 1, source })?;
    // TensorBoard events go to EFS on a cluster, or where --tb-dir says; a
    // run outside a cluster without --tb-dir writes none (no stray directory
    // in the current one).
    let tb_wanted = args.events.tb_dir.is_some()
        || std::env::var_os(node_contract::files::profile::EFS_MOUNT_VAR).is_some_and(|v| !v.is_empty());
    let events = if leader && tb_wanted { Some(EventWriter::create(&args.events.dir())?) } else { None };

    let plan = EpochPlan { batch_size: args.batch_size as usize, lr: args.lr, seed: args.seed, epochs: args.epochs };
    // The group, when launched: rank 0 hosts the rendezvous; every rank waits
    // for its first group, then checks in at every epoch boundary.
    let membership = match &launch {
        Some(launch) => {
            let roster = Roster::from_node_config(&args.root)?;
            let host = HostConfig { nccl_id: nccl_id_maker(args.device), ..HostConfig::new(launch.world_size) };
            Some(elastic::connect(launch, &roster, (state.epoch, state.step), host, ElasticConfig::new)?)
        }
        None => None,
    };
    let mut rank = TrainRank {
        args,
        device,
        train: &train,
        test: test.as_ref(),
        plan,
        progress: Progress::stderr(leader),
        leader,
        events,
        store: &store,
        meta: &meta,
        checkpoint: saves,
        // Rank 0 never leaves; a rank on its own has nobody to tell.
        notice: launch.as_ref().filter(|l| l.rank != 0).map(|_| NoticeWatch::new(&args.root)),
        stragglers: leader.then(|| Stragglers::new(args.stragglers)),
    };
    match epochs::run(&mut rank, membership, Start { epoch: state.epoch, in_epoch }, args.epochs) {
        Ok(Outcome::Finished) => Ok(crate::exit::EXIT_OK),
        Ok(Outcome::Left(reason)) => {
            cli_output::errln!("trainer train: this node left the job ({reason}); exiting");
            Ok(crate::exit::EXIT_OK)
        }
        Err(EpochsError::Rendezvous(e)) => Err(e.into()),
        Err(EpochsError::Step { epoch, source }) => Err(TrainError::Step { epoch, source }),
        Err(EpochsError::Completed(e)) => Err(e),
    }
}

/// `trainer train`'s side of the epoch loop: this process's device, data and
/// what rank 0 does after each epoch.
struct TrainRank<'a> {
    args: &'a Args,
    device: Device,
    train: &'a Dataset,
    test: Option<&'a Dataset>,
    plan: EpochPlan,
    progress: Progress,
    /// Rank 0 (the master's process, which never leaves): it evaluates,
    /// prints, writes checkpoints and TensorBoard events.
    leader: bool,
    events: Option<EventWriter>,
    store: &'a CheckpointStore,
    meta: &'a Meta,
    /// Save a checkpoint after every epoch (on a cluster, or when asked).
    checkpoint: bool,
    /// This host's interruption notice, for a rank that may leave.
    notice: Option<NoticeWatch>,
    /// Rank 0's watch for a straggler in its group.
    stragglers: Option<Stragglers>,
}

impl TrainRank<'_> {
    /// Records the stragglers named since the last checkpoint, for the
    /// node's agent to send to the master; `after_checkpoint` when one was
    /// just saved. A record that cannot be written is logged: training goes on.
    fn record_stragglers(&mut self, after_checkpoint: bool) {
        let findings = self.stragglers.as_mut().map(|s| s.take_unrecorded(after_checkpoint)).unwrap_or_default();
        if let Err(e) = straggler::record(&self.args.root, findings) {
            tracing::warn!("{e}");
        }
    }
}

impl Rank for TrainRank<'_> {
    type Report = EpochReport;
    type Error = TrainError;

    fn engine(&mut self) -> &mut dyn Engine {
        self.device.engine()
    }

    fn join_group(&mut self, group: &Group, ring: Ring) -> Result<(), EngineError> {
        self.device.join_group(group, ring)
    }

    fn train(&mut self, epoch: u64, shard: Shard, from: Resume) -> Result<Trained<EpochReport>, EngineError> {
        let plan = EpochPlan { lr: self.args.lr_schedule.rate(self.args.lr, epoch, self.args.epochs), ..self.plan };
        let notice = &mut self.notice;
        let mut leaving = || notice.as_mut().is_some_and(NoticeWatch::noticed);
        let stragglers = &mut self.stragglers;
        let mut timed = |seconds: &[f32], steps: u64| {
            // Each finding is also kept for the master's record, written once
            // the next checkpoint is saved ([`TrainRank::record_stragglers`]).
            // The clock is read only when a rank is named.
            let now = node_contract::clock::system;
            for named in stragglers.as_mut().map(|s| s.observe(seconds, steps, now)).unwrap_or_default() {
                tracing::warn!("straggler: {named}");
                cli_output::errln!("trainer train: straggler: {named}");
            }
        };
        let engine = self.device.engine();
        let report = train_epoch_from(
            engine,
            self.train,
            shard,
            epoch,
            &plan,
            &mut self.progress,
            from,
            &mut leaving,
            &mut timed,
        );
        if report.is_err() {
            self.progress.clear();
        }
        report
    }

    fn leaving(&mut self) -> bool {
        self.notice.as_mut().is_some_and(NoticeWatch::noticed)
    }

    fn stopped(&mut self, epoch: u64, at: InEpoch, leaving: bool) -> Result<(), TrainError> {
        if leaving {
            cli_output::errln!(
                "trainer train: this host was given an interruption notice; leaving after step {} of epoch {}",
                at.step,
                epoch + 1
            );
        }
        if !self.leader {
            return Ok(());
        }
        // The leaver is not held by this: the rendezvous lets it go on its own report.
        let saved = if self.checkpoint {
            let mut done =
                self.device.engine().state().map_err(|source| TrainError::Step { epoch: epoch + 1, source })?;
            done.epoch = epoch;
            Some(self.store.save_at(self.meta, &done, at)?)
        } else {
            None
        };
        cli_output::errln!(
            "trainer train: a rank is leaving after step {} of epoch {}{}",
            at.step,
            epoch + 1,
            saved.as_ref().map(|p| format!("; checkpoint {}", p.display())).unwrap_or_default()
        );
        self.record_stragglers(saved.is_some());
        Ok(())
    }

    fn completed(&mut self, epoch: u64, report: EpochReport) -> Result<(), TrainError> {
        if !self.leader {
            return Ok(());
        }
        let args = self.args;
        let engine = self.device.engine();
        // Only rank 0 needs the state after the epoch (its step count for
        // the events, the whole of it for the checkpoint); the epoch
        // counter lives in the loop, so the engine's copy is not updated.
        let mut done = engine.state().map_err(|source| TrainError::Step { epoch, source })?;
        done.epoch = epoch;
        let due = epoch.is_multiple_of(args.eval_every) || epoch == args.epochs;
        let test_stats = match self.test {
            Some(test) if due => Some(evaluate(engine, test).map_err(|source| TrainError::Step { epoch, source })?),
            _ => None,
        };
        // A failed write ends the run, but only after this epoch's events
        // and checkpoint are saved: `--resume` loses nothing.
        let printed = cli_output::outln!("{}", epoch_line(&report, args.epochs, test_stats.as_ref()));
        if let Some(w) = self.events.as_mut() {
            let mut scalars = vec![
                (events::tag::TRAIN_LOSS, report.train.mean_loss()),
                (events::tag::TRAIN_ACCURACY, accuracy(&report.train)),
                (events::tag::THROUGHPUT, report.samples_per_sec),
            ];
            if let Some(t) = &test_stats {
                scalars.push((events::tag::TEST_LOSS, t.mean_loss()));
                scalars.push((events::tag::TEST_ACCURACY, accuracy(t)));
            }
            w.scalars(done.step, &scalars)?;
            w.flush()?;
        }
        if self.checkpoint {
            self.store.save(self.meta, &done)?;
        }
        self.record_stragglers(self.checkpoint);
        printed.map_err(TrainError::Output)
    }

    fn regrouped(&mut self, group: &Group, epoch: u64, step: u64, redo: bool) {
        if let Some(note) = self.stragglers.as_mut().and_then(|s| s.regrouped(group)) {
            cli_output::errln!("trainer train: {note}");
        }
        if !self.leader {
            return;
        }
        if step > 0 {
            cli_output::errln!(
                "trainer train: generation {}: {} rank(s); continuing epoch {} at step {}",
                group.generation,
                group.world_size,
                epoch + 1,
                step + 1
            );
        } else {
            cli_output::errln!(
                "trainer train: generation {}: {} rank(s); {} epoch {}",
                group.generation,
                group.world_size,
                if redo { "redoing" } else { "continuing with" },
                epoch + 1
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::engine::Stepped;

    /// Records the samples (labels are sample ids) of every step and says
    /// the group raised the leaving flag at step `leave_at` of its calls.
    struct Recorder {
        seen: Vec<u8>,
        steps: usize,
        leave_at: Option<usize>,
        state: TrainState,
    }

    impl Recorder {
        fn new(leave_at: Option<usize>) -> Self {
            let state = TrainState { params: vec![], momentum: vec![], epoch: 0, step: 0 };
            Self { seen: Vec::new(), steps: 0, leave_at, state }
        }
    }

    impl Engine for Recorder {
        fn step(&mut self, batch: &Batch<'_>, _: usize, _: f32, _: bool) -> Result<Stepped, EngineError> {
            self.seen.extend_from_slice(batch.labels);
            let leaving = u32::from(self.leave_at == Some(self.steps));
            self.steps += 1;
            let stats = StepStats { samples: batch.labels.len() as u64, ..StepStats::default() };
            Ok(Stepped { stats, leaving, timed_steps: 0 })
        }
        fn step_seconds(&self) -> &[f32] {
            &[]
        }
        fn evaluate(&mut self, _: &Batch<'_>) -> Result<StepStats, EngineError> {
            Ok(StepStats::default())
        }
        fn sum_over_ranks(&mut self, stats: StepStats) -> Result<StepStats, EngineError> {
            Ok(stats)
        }
        fn state(&self) -> Result<TrainState, EngineError> {
            Ok(self.state.clone())
        }
        fn set_state(&mut self, state: &TrainState) -> Result<(), EngineError> {
            self.state.clone_from(state);
            Ok(())
        }
    }

    fn dataset(n: u8) -> Dataset {
        Dataset::from_parts((1, 1, 1), vec![0; n as usize], (0..n).collect(), vec![0.0], vec![1.0])
    }

    #[test]
    fn epoch_lines_read_back() {
        let train = StepStats { loss_sum: 25.0, correct: 90, samples: 100 };
        let report = EpochReport { epoch: 2, train, samples_per_sec: 8123.4 };
        let test = StepStats { loss_sum: 0.0, correct: 972, samples: 1000 };
        let line = format!("[host-1 rank 0] {}", epoch_line(&report, 10, Some(&test)));
        let read = parse_epoch_line(&line).unwrap();
        assert_eq!(read, EpochFigures { loss: 0.25, test_accuracy: Some(97.2), samples_per_sec: 8123.0 });
        assert_eq!(parse_epoch_line(&epoch_line(&report, 10, None)).unwrap().test_accuracy, None);
        for other in ["epoch 3/10 step 4/5 loss 0.2 acc 9% 10 samples/s", "loss 0.1", "", "epoch x loss 1"] {
            assert_eq!(parse_epoch_line(other), None, "{other}");
        }
    }

    const PLAN: EpochPlan = EpochPlan { batch_size: 10, lr: 0.1, seed: 4, epochs: 3 };

    /// [`train_epoch_from`] with [`PLAN`], no progress line and no timings;
    /// `leaving`: this rank's flag at every step.
    fn train_from(
        engine: &mut Recorder,
        data: &Dataset,
        shard: Shard,
        epoch: u64,
        from: Resume,
        leaving: bool,
    ) -> Result<Trained<EpochReport>, EngineError> {
        let mut progress = Progress::stderr(false);
        train_epoch_from(engine, data, shard, epoch, &PLAN, &mut progress, from, &mut || leaving, &mut |_, _| {})
    }

    /// A leave after the second of five steps: three ranks stop there,
    /// then two run the rest of the epoch re-sharded; every sample of the
    /// epoch is trained on exactly once, and rank 0's report counts them all.
    #[test]
    fn a_leave_stops_every_rank_after_the_same_step_and_the_rest_is_resharded() {
        let data = dataset(50);
        let mut seen = Vec::new();
        let mut stopped = Vec::new();
        for rank in 0..3 {
            let mut engine = Recorder::new(Some(1));
            let shard = Shard { rank, world: 3, generation: 7 };
            let done = train_from(&mut engine, &data, shard, 1, Resume::default(), rank == 2);
            match done.unwrap() {
                Trained::Stopped(at) => stopped.push(at),
                other => panic!("rank {rank}: {other:?}"),
            }
            assert_eq!(engine.steps, 2, "rank {rank} ran past the stop");
            seen.extend(engine.seen);
        }
        // Each rank's sums are its own here (no collective): all stopped at step 2.
        assert!(stopped.iter().all(|at| at.step == 2), "{stopped:?}");
        let carried = StepStats { samples: 20, ..StepStats::default() };
        let mut reported = 0;
        for rank in 0..2 {
            let mut engine = Recorder::new(None);
            // The epoch keeps the permutation of the generation it began with.
            let shard = Shard { rank, world: 2, generation: 7 };
            let from = Resume { step: 2, train: carried };
            let done = train_from(&mut engine, &data, shard, 1, from, false);
            match done.unwrap() {
                Trained::Epoch(report) => reported += report.train.samples,
                other => panic!("rank {rank}: {other:?}"),
            }
            assert_eq!(engine.steps, 3);
            seen.extend(engine.seen);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..50).collect::<Vec<u8>>(), "every sample of the epoch exactly once");
        // Rank 0 carried the 20 samples before the stop; the two ranks ran 30 more.
        assert_eq!(reported, 50);
    }

    /// A flag raised at the epoch's last step does not stop it: the epoch
    /// completes and the leave happens at the boundary.
    #[test]
    fn a_flag_at_the_last_step_completes_the_epoch() {
        let data = dataset(50);
        let mut progress = Progress::stderr(false);
        let mut engine = Recorder::new(Some(4));
        let done = train_from(&mut engine, &data, Shard::ALONE, 0, Resume::default(), true);
        assert!(matches!(done.unwrap(), Trained::Epoch(r) if r.train.samples == 50));
        // And `train_epoch` goes through a peer's stop without one of its own.
        let mut engine = Recorder::new(Some(0));
        let report = train_epoch(&mut engine, &data, Shard::ALONE, 0, &PLAN, &mut progress).unwrap();
        assert_eq!((report.train.samples, engine.steps), (50, 5));
    }
}
