//! `trainer train` on one rank reaches the accuracy the issue asks for on
//! 1,000 held-out real MNIST digits, trained on the fixture's 4,000.

mod common;

use trainer::train::collective::Single;
use trainer::train::cpu::CpuEngine;
use trainer::train::epochs::Shard;
use trainer::train::model::{Arch, Model};
use trainer::train::optim::Sgd;
use trainer::train::progress::Progress;
use trainer::train::run::{EpochPlan, accuracy, epoch_line, evaluate, train_epoch};

/// Trains `arch` for `epochs` with the CLI's defaults otherwise and returns
/// the final test accuracy, printing every epoch's line. The last two epochs
/// use a tenth of `lr` (a step decay): at a constant rate the test accuracy
/// of the last epoch wobbles by a point or so from epoch to epoch, and the
/// decay lands it reliably.
fn train_and_test(arch: Arch, epochs: u64, lr: f32) -> f64 {
    let (train, test) = common::mnist();
    let model = Model::new(arch, (1, 28, 28));
    let params = model.init(0);
    let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
    let mut engine = CpuEngine::new(model, params, sgd, 2, Box::new(Single)).unwrap();
    let mut plan = EpochPlan { batch_size: 64, lr, seed: 0, epochs };
    let shard = Shard { rank: 0, world: 1, generation: 0 };
    let mut progress = Progress::stderr(false);
    let mut last = 0.0;
    for epoch in 0..epochs {
        if epoch + 2 == epochs {
            plan.lr = lr / 10.0;
        }
        let report = train_epoch(&mut engine, &train, shard, epoch, &plan, &mut progress).unwrap();
        let stats = evaluate(&mut engine, &test).unwrap();
        assert_eq!(stats.samples, 1000);
        println!("{arch:?} {}", epoch_line(&report, epochs, Some(&stats)));
        last = accuracy(&stats);
    }
    last
}

#[test]
fn mlp_reaches_90_percent() {
    let acc = train_and_test(Arch::Mlp, 6, 0.05);
    println!("MLP test accuracy {:.2}% (needs >= 90%)", 100.0 * acc);
    assert!(acc >= 0.90, "MLP test accuracy {:.2}% < 90%", 100.0 * acc);
}

#[test]
fn lenet_reaches_95_percent() {
    let acc = train_and_test(Arch::Lenet, 7, 0.05);
    println!("LeNet test accuracy {:.2}% (needs >= 95%)", 100.0 * acc);
    assert!(acc >= 0.95, "LeNet test accuracy {:.2}% < 95%", 100.0 * acc);
}
