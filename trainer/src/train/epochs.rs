//! The epochs of one rank: which epoch runs next, in which group, from
//! which state. This is the loop `trainer train` runs ([`super::run`]) and
//! the one the elastic scenarios (`trainer/tests/elastic.rs`) drive with a
//! toy engine, so a regroup or resume bug cannot hide in a copy.
//!
//! Inputs: a [`Rank`] (the engine, how a new group's gradients are summed,
//! one epoch of training, and what to do after it) and, when `trainer
//! launch` started the process, its [`Membership`] with the first decision.
//! Between epochs the loop checks in at the boundary; after a collective
//! failure it asks the rendezvous for the survivors' group. On a new group
//! every rank puts back the state at the start of the epoch it is told to
//! run (its own copy when it began that epoch, a redo; else its current
//! state), takes `group.source_rank`'s state by broadcast (parameters,
//! momentum and the epoch/step counters), joins the group and goes on.
//!
//! Leaving at a step: a rank whose host was given an interruption notice
//! raises its leaving flag ([`Rank::leaving`]) in the next step's gradient
//! all-reduce ([`Stepped::leaving`]); every rank sees the same count after
//! that same step, and unless it was the epoch's last step every rank stops
//! there ([`Trained::Stopped`]) and checks in mid-epoch
//! ([`Membership::at_step`]). The leaver is told to leave at once (exit 0);
//! the others get a group without it that runs the *rest* of the same
//! epoch ([`Next::Reformed`] with `step > 0`). No state moves then: the
//! all-reduce left the same state on every member, so there is no
//! broadcast and no redo; the epoch keeps its permutation (the generation
//! it began with) and its remaining global batches are re-sharded over the
//! new world. A flag raised at the epoch's last step is reported at the
//! boundary instead, where the leaver leaves the same way. Joins still wait
//! for an epoch boundary. A collective failure after a mid-epoch re-form
//! redoes the epoch from its start, as any failure does. At such a stop
//! rank 0 first writes a checkpoint of the state there ([`Rank::stopped`];
//! the leaver does not wait for it: the rendezvous lets it go on its
//! report), with the step in the epoch and the generation of the epoch's
//! permutation ([`InEpoch`]). A run resumed from it ([`Start`]) goes on at
//! that step, with the same remaining samples; rank 0's broadcast of the
//! state to a new group carries that position with the counters, and a
//! redo of an epoch that began mid-way restarts from where it began.
//! No files or sockets of its own: the membership and the ring have them.
//!
//! [`Stepped::leaving`]: super::engine::Stepped::leaving

use super::checkpoint::InEpoch;
use super::collective::Group;
use super::elastic::{Membership, Next, broadcast_state};
use super::engine::{Engine, EngineError, StepStats, TrainState};
use super::rendezvous::RendezvousError;
use super::ring::Ring;

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

impl Shard {
    /// One process on its own: rank 0 of 1, generation 0.
    pub const ALONE: Shard = Shard { rank: 0, world: 1, generation: 0 };
}

/// Where a run starts: after `epoch` epochs and, from a mid-epoch
/// checkpoint, `in_epoch.step` steps into the next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Start {
    /// Epochs completed.
    pub epoch: u64,
    /// Where in the next epoch (zero: at its start).
    pub in_epoch: InEpoch,
}

/// Where in an epoch training starts: its first step, or after the steps
/// an earlier group (or the same one, before a mid-epoch check-in) ran.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Resume {
    /// Steps of the epoch already run (0: the whole epoch is to run).
    pub step: u64,
    /// Loss and accuracy sums of those steps over every rank: rank 0
    /// carries them into the epoch's report.
    pub train: StepStats,
}

/// How one call of [`Rank::train`] ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Trained<R> {
    /// The epoch is complete.
    Epoch(R),
    /// A rank raised the leaving flag: every rank stopped after the same
    /// step, before the epoch's end; the epoch goes on from here.
    Stopped(Resume),
}

/// What the loop drives: one rank's engine and its work per epoch.
pub trait Rank {
    /// What a completed epoch reports (passed to [`Rank::completed`]).
    type Report;
    /// What the work after an epoch can fail with.
    type Error;
    /// The engine whose state is saved, broadcast and restored.
    fn engine(&mut self) -> &mut dyn Engine;
    /// Sums gradients over `group` from now on (`ring` is the group's
    /// connected ring; a GPU engine may use NCCL instead and drop it).
    fn join_group(&mut self, group: &Group, ring: Ring) -> Result<(), EngineError>;
    /// Trains `epoch` (0-based) as `shard`, from step `from.step` on
    /// ([`super::run::train_epoch_from`]), raising [`Rank::leaving`] in
    /// every step's all-reduce. A gradient all-reduce failure must come back
    /// as [`EngineError::Collective`]: the loop re-forms the group and the
    /// epoch is redone.
    fn train(&mut self, epoch: u64, shard: Shard, from: Resume) -> Result<Trained<Self::Report>, EngineError>;
    /// Whether this rank is to leave the job: its host was given an
    /// interruption notice. Once true it stays true. Rank 0 (the master's
    /// process) never leaves: its `false` is the rendezvous's rule too.
    fn leaving(&mut self) -> bool;
    /// After `epochs` epochs are complete (1-based count), before the
    /// boundary check-in: rank 0 evaluates, prints, saves a checkpoint.
    fn completed(&mut self, epochs: u64, report: Self::Report) -> Result<(), Self::Error>;
    /// Every rank stopped `at.step` steps into epoch `epoch` (0-based)
    /// because a rank is leaving (this one, when `leaving`), before the
    /// mid-epoch check-in: rank 0 saves a checkpoint there.
    fn stopped(&mut self, epoch: u64, at: InEpoch, leaving: bool) -> Result<(), Self::Error>;
    /// A new group was formed and its state adopted; `epoch` (0-based) runs
    /// next from its step `step` (0 unless a rank left mid-epoch), as a
    /// redo of an interrupted epoch when `redo`.
    fn regrouped(&mut self, group: &Group, epoch: u64, step: u64, redo: bool);
}

/// How the loop ended well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every epoch is done.
    Finished,
    /// This node is no longer a member (the reason, from the rendezvous): exit 0.
    Left(String),
}

/// The loop failed.
#[derive(Debug, thiserror::Error)]
pub enum EpochsError<E> {
    /// The rendezvous failed or the master's process went away.
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// A step failed in a way re-forming cannot cure (the device), or a
    /// collective failed with no membership to re-form.
    #[error("epoch {epoch}: {source}")]
    Step {
        /// The epoch (1-based).
        epoch: u64,
        /// Why.
        source: EngineError,
    },
    /// [`Rank::completed`] failed.
    #[error(transparent)]
    Completed(E),
}

/// Runs epochs `first.epoch..epochs` (0-based) on `rank`, the first of
/// them from `first.in_epoch`: alone when `membership` is `None`, else in
/// the groups the rendezvous forms, starting with the decision
/// [`Membership::join`] returned.
pub fn run<R: Rank>(
    rank: &mut R,
    membership: Option<(Membership, Next)>,
    first: Start,
    epochs: u64,
) -> Result<Outcome, EpochsError<R::Error>> {
    let step_failed = |epoch: u64| move |source| EpochsError::Step { epoch, source };
    let (mut membership, mut next) = match membership {
        Some((m, first)) => (Some(m), Some(first)),
        None => (None, None),
    };
    let mut shard = Shard::ALONE;
    // The generation of the newest group: the shuffle of every epoch it begins.
    let mut generation = shard.generation;
    let mut epoch = first.epoch;
    // Where in `epoch` training goes on (a mid-epoch check-in or checkpoint).
    let mut from = Resume { step: first.in_epoch.step, ..Resume::default() };
    if from.step > 0 {
        shard.generation = first.in_epoch.generation;
    }
    // The state where this rank last began an epoch (its start, or where a
    // resumed run began it), which epoch, and where in it.
    let mut start: Option<(u64, TrainState, InEpoch)> = None;
    loop {
        if let (Some(m), Some(decision)) = (membership.as_mut(), next.take()) {
            match decision {
                Next::Continue => {}
                Next::Left(reason) => return Ok(Outcome::Left(reason)),
                Next::Reformed { group, ring, epoch: e, step, redo: false } if step > 0 && e == epoch => {
                    // The rest of the epoch without the leaver: every member
                    // holds the same state after `step` steps, so none moves;
                    // the epoch keeps the permutation it began with.
                    rank.join_group(&group, ring).map_err(step_failed(e + 1))?;
                    shard = Shard { rank: group.rank, world: group.world_size, generation: shard.generation };
                    generation = group.generation;
                    from.step = step;
                    rank.regrouped(&group, epoch, step, false);
                }
                Next::Reformed { group, mut ring, epoch: e, step, redo } => {
                    let engine = rank.engine();
                    // A copy: the epoch's start must outlive a broadcast
                    // that fails (the redo after it puts it back again).
                    let (mut current, at) = match start.as_ref() {
                        Some((began, s, at)) if *began == e => (s.clone(), *at),
                        // Its current state: a completed epoch, or a resumed mid-epoch checkpoint.
                        _ => (
                            engine.state().map_err(step_failed(e + 1))?,
                            InEpoch { step: from.step, generation: shard.generation },
                        ),
                    };
                    let mut flat = std::mem::take(&mut current.params);
                    flat.append(&mut current.momentum);
                    let mut counters = [e, current.step, at.step, at.generation];
                    if let Err(err) = broadcast_state(&mut ring, group.source_rank, &mut flat, &mut counters) {
                        next = Some(m.recover(e, &err)?);
                        continue;
                    }
                    let [e, steps, in_step, in_generation] = counters;
                    engine.set_state(&state_from(flat, [e, steps])).map_err(step_failed(e + 1))?;
                    rank.join_group(&group, ring).map_err(step_failed(e + 1))?;
                    shard = Shard { rank: group.rank, world: group.world_size, generation: group.generation };
                    generation = group.generation;
                    epoch = e;
                    // The source's place in the epoch: its start, or where a
                    // resumed run began it (the sums of the steps before are
                    // not known; the epoch's line counts the rest).
                    from = Resume { step: in_step, ..Resume::default() };
                    if in_step > 0 {
                        shard.generation = in_generation;
                    }
                    if step > 0 {
                        // A group formed mid-epoch for a process that was not
                        // there cannot happen (joins wait for a boundary).
                        tracing::warn!(
                            epoch,
                            step,
                            "told to resume mid-epoch from a broadcast state; going on from the source's place"
                        );
                    }
                    rank.regrouped(&group, epoch, in_step, redo);
                }
            }
        }
        if epoch >= epochs {
            return Ok(Outcome::Finished);
        }
        if from.step == 0 {
            shard.generation = generation;
        }
        if membership.is_some() && start.as_ref().is_none_or(|(began, ..)| *began != epoch) {
            let at = InEpoch { step: from.step, generation: shard.generation };
            start = Some((epoch, rank.engine().state().map_err(step_failed(epoch + 1))?, at));
        }
        let report = match (rank.train(epoch, shard, from), membership.as_mut()) {
            (Ok(Trained::Epoch(report)), _) => report,
            (Ok(Trained::Stopped(at)), m) => {
                from = at;
                let leaving = rank.leaving();
                let place = InEpoch { step: at.step, generation: shard.generation };
                rank.stopped(epoch, place, leaving).map_err(EpochsError::Completed)?;
                if let Some(m) = m {
                    next = Some(m.at_step(epoch, at.step, leaving)?);
                }
                continue;
            }
            (Err(EngineError::Collective(err)), Some(m)) => {
                from = Resume::default();
                next = Some(m.recover(epoch, &err)?);
                continue;
            }
            (Err(source), _) => return Err(step_failed(epoch + 1)(source)),
        };
        from = Resume::default();
        epoch += 1;
        rank.completed(epoch, report).map_err(EpochsError::Completed)?;
        if let Some(m) = membership.as_mut() {
            let leaving = rank.leaving();
            next = Some(m.at_boundary(epoch - 1, leaving)?);
        }
    }
}

/// Splits a broadcast buffer (parameters, then momentum) back into a state.
fn state_from(flat: Vec<f32>, counters: [u64; 2]) -> TrainState {
    let half = flat.len() / 2;
    let mut params = flat;
    let momentum = params.split_off(half);
    TrainState { params, momentum, epoch: counters[0], step: counters[1] }
}
