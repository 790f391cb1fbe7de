//! 1, 2 and 4 ranks with the same global batch end with the same weights:
//! each rank computes its slice of every global batch, gradients are summed
//! over ranks and divided by the global batch.
//!
//! The ranks here are threads joined by [`ThreadGroupFake`], an in-process
//! stand-in for the TCP ring written for this test only; the end-to-end
//! version with real processes and the ring comes with the ring module.

mod common;

use std::sync::{Arc, Barrier, Mutex};

use trainer::train::collective::{Collective, CollectiveError};
use trainer::train::cpu::CpuEngine;
use trainer::train::data::Dataset;
use trainer::train::engine::Engine;
use trainer::train::epochs::Shard;
use trainer::train::model::{Arch, Model};
use trainer::train::optim::Sgd;
use trainer::train::progress::Progress;
use trainer::train::run::{EpochPlan, EpochReport, train_epoch};

/// Test-only collective of threads: every rank posts its buffer in its
/// slot, then each sums the slots in rank order (deterministic, like a ring's
/// fixed order), with barriers between the phases.
struct ThreadGroupFake {
    rank: usize,
    world: usize,
    slots: Arc<Mutex<Vec<Vec<f32>>>>,
    barrier: Arc<Barrier>,
}

impl ThreadGroupFake {
    fn group(world: usize) -> Vec<Self> {
        let slots = Arc::new(Mutex::new(vec![Vec::new(); world]));
        let barrier = Arc::new(Barrier::new(world));
        (0..world).map(|rank| Self { rank, world, slots: slots.clone(), barrier: barrier.clone() }).collect()
    }
}

impl Collective<[f32]> for ThreadGroupFake {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CollectiveError> {
        self.slots.lock().unwrap()[self.rank] = buf.to_vec();
        self.barrier.wait();
        {
            let slots = self.slots.lock().unwrap();
            buf.fill(0.0);
            for slot in slots.iter() {
                buf.iter_mut().zip(slot).for_each(|(b, &s)| *b += s);
            }
        }
        // Nobody may post the next step's buffer before everyone has summed this one.
        self.barrier.wait();
        Ok(())
    }

    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<(), CollectiveError> {
        if self.rank == root {
            self.slots.lock().unwrap()[root] = buf.to_vec();
        }
        self.barrier.wait();
        buf.copy_from_slice(&self.slots.lock().unwrap()[root]);
        self.barrier.wait();
        Ok(())
    }
}

/// Trains `world` ranks (threads) for `epochs` and returns every rank's
/// final parameters and last epoch report.
fn train_world(arch: Arch, train: &Dataset, world: usize, epochs: u64) -> Vec<(Vec<f32>, EpochReport)> {
    let model = Model::new(arch, (1, 28, 28));
    let init = model.init(3);
    let plan = EpochPlan { batch_size: 100, lr: 0.05, seed: 11, epochs };
    std::thread::scope(|s| {
        let handles: Vec<_> = ThreadGroupFake::group(world)
            .into_iter()
            .map(|collective| {
                let (model, init) = (model.clone(), init.clone());
                s.spawn(move || {
                    let shard = Shard { rank: collective.rank, world, generation: 0 };
                    let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
                    let mut engine = CpuEngine::new(model, init, sgd, 1, Box::new(collective)).unwrap();
                    let mut progress = Progress::stderr(false);
                    let mut last = None;
                    for epoch in 0..epochs {
                        last = Some(train_epoch(&mut engine, train, shard, epoch, &plan, &mut progress).unwrap());
                    }
                    (engine.state().unwrap().params, last.expect("at least one epoch"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn same_weights_for(arch: Arch, epochs: u64) {
    let (train, _) = common::mnist();
    let (one, one_report) = train_world(arch, &train, 1, epochs).remove(0);
    assert_eq!(one_report.train.samples, train.len() as u64);
    let init = Model::new(arch, (1, 28, 28)).init(3);
    let moved = max_abs_diff(&one, &init);
    assert!(moved > 1e-2, "training should move the weights (moved {moved})");
    for world in [2, 4] {
        let ranks = train_world(arch, &train, world, epochs);
        for (rank, (params, report)) in ranks.iter().enumerate() {
            // The epoch's report sums every rank's samples, on every rank.
            assert_eq!(report.train, ranks[0].1.train, "rank {rank}'s epoch sums");
            assert_eq!(report.train.samples, train.len() as u64, "{world} ranks: every sample counted once");
            let (loss, loss_1) = (report.train.loss_sum, one_report.train.loss_sum);
            assert!(
                (loss - loss_1).abs() <= 1e-3 * loss_1,
                "{world} ranks: epoch loss sum {loss} vs {loss_1} on 1 rank"
            );
            let diff = max_abs_diff(params, &one);
            println!(
                "{arch:?}: {world} ranks, rank {rank}: max |w - w_1rank| = {diff:.2e} (weights moved {moved:.2e})"
            );
            // Only the order of the float sums differs between world sizes.
            assert!(diff < 1e-3, "{arch:?} {world} ranks, rank {rank}: weights differ by {diff} from 1 rank");
            assert_eq!(params, &ranks[0].0, "every rank of a group holds the same weights");
        }
    }
}

#[test]
fn mlp_same_weights_on_1_2_and_4_ranks() {
    same_weights_for(Arch::Mlp, 2);
}

#[test]
fn lenet_same_weights_on_1_2_and_4_ranks() {
    same_weights_for(Arch::Lenet, 1);
}
