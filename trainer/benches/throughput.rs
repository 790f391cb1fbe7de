//! Benchmark (not a test): training throughput of one rank of `trainer
//! train` (MLP and LeNet on the MNIST fixture) against the same models in
//! NumPy on OpenBLAS at the same thread count, and the achieved GFLOP/s of
//! the training step against OpenBLAS sgemm, printed side by side.
//!
//! Run with `scripts/bench-train` (makes the fixture, puts the pinned numpy
//! into .venv, runs `cargo bench -p trainer --bench throughput`). Inputs:
//! `DL_MNIST_DIR` (the fixture), `BENCH_THREADS` (default 2), `BENCH_ROUNDS`
//! (default 3, alternating the two sides; best of each), `BENCH_PYTHON`
//! (default `.venv/bin/python` of the workspace). The NumPy side is
//! `benches/numpy_reference.py`, started with `OPENBLAS_NUM_THREADS` set.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use trainer::train::collective::Single;
use trainer::train::cpu::{self, CpuEngine};
use trainer::train::data::{self, Split};
use trainer::train::epochs::Shard;
use trainer::train::model::{Arch, Layer, Model};
use trainer::train::optim::Sgd;
use trainer::train::progress::Progress;
use trainer::train::run::{EpochPlan, train_epoch};

const EPOCHS: u64 = 2;
const BATCH: usize = 64;
/// The matrix shapes (m x k by k x n) timed on both sides: the MLP's first
/// layer, LeNet's two convolutions as im2col GEMMs over a batch of 64, and a
/// square reference.
const SHAPES: [(usize, usize, usize); 4] = [(64, 784, 256), (50176, 25, 6), (6400, 150, 16), (1024, 1024, 1024)];

/// Multiply-adds x 2 of one sample's forward and backward matrix products
/// (no input gradient below the first layer with parameters, as the engine does).
fn step_flops(model: &Model) -> f64 {
    let mut flops = 0.0;
    let mut first = true;
    for layer in model.layers() {
        let (mnk, trained) = match *layer {
            Layer::Linear { inputs, outputs } => ((inputs * outputs) as f64, true),
            Layer::Conv(s) => {
                let (oh, ow) = (s.h + 2 * s.pad + 1 - s.k, s.w + 2 * s.pad + 1 - s.k);
                ((oh * ow * s.in_c * s.k * s.k * s.out_c) as f64, true)
            }
            _ => (0.0, false),
        };
        if trained {
            // forward, weight gradient, and input gradient except for the first layer
            flops += 2.0 * mnk * if first { 2.0 } else { 3.0 };
            first = false;
        }
    }
    flops
}

fn rust_rate(arch: Arch, dir: &std::path::Path, threads: usize) -> f64 {
    let train = data::load(dir, None, Split::Train).expect("fixture");
    let model = Model::new(arch, (1, 28, 28));
    let params = cpu::init(&model, 0);
    let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
    let mut engine = CpuEngine::new(model, params, sgd, threads, Box::new(Single)).unwrap();
    let plan = EpochPlan { batch_size: BATCH, lr: 0.05, seed: 0, epochs: EPOCHS };
    let shard = Shard { rank: 0, world: 1, generation: 0 };
    let mut progress = Progress::stderr(false);
    (0..EPOCHS)
        .map(|e| train_epoch(&mut engine, &train, shard, e, &plan, &mut progress).unwrap().samples_per_sec)
        .fold(0.0, f64::max)
}

fn gemm_gflops(pool: &rayon::ThreadPool, (m, k, n): (usize, usize, usize)) -> f64 {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let mut c = vec![0.0f32; m * n];
    let mut run = || {
        let t = Instant::now();
        // SAFETY: row-major m x k, k x n and m x n buffers of exactly those sizes.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            )
        };
        t.elapsed().as_secs_f64()
    };
    pool.install(|| {
        run();
        let (start, mut best, mut runs) = (Instant::now(), f64::INFINITY, 0);
        while start.elapsed().as_secs_f64() < 0.5 || runs < 3 {
            best = best.min(run());
            runs += 1;
        }
        2.0 * (m * k * n) as f64 / best / 1e9
    })
}

fn main() {
    let dir =
        PathBuf::from(std::env::var_os("DL_MNIST_DIR").expect(
            "DL_MNIST_DIR is not set: run scripts/bench-train, or export DL_MNIST_DIR=$(scripts/mnist-fixture)",
        ));
    let threads: usize = std::env::var("BENCH_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(2);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("BENCH_PYTHON").map_or_else(|| root.join(".venv/bin/python"), PathBuf::from);

    // Rounds alternate the two sides, and each figure is the best of its
    // rounds, so that load from other processes on the machine (which slows
    // whichever side it lands on) distorts the ratios less.
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|t| t.parse().ok()).unwrap_or(3);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let (mut mlp, mut lenet, mut ours) = (0.0f64, 0.0f64, vec![0.0f64; SHAPES.len()]);
    let mut np: HashMap<String, String> = HashMap::new();
    for _ in 0..rounds {
        mlp = mlp.max(rust_rate(Arch::Mlp, &dir, threads));
        lenet = lenet.max(rust_rate(Arch::Lenet, &dir, threads));
        for (best, &shape) in ours.iter_mut().zip(&SHAPES) {
            *best = best.max(gemm_gflops(&pool, shape));
        }
        let out = Command::new(&python)
            .arg(root.join("trainer/benches/numpy_reference.py"))
            .args([dir.to_str().unwrap(), &EPOCHS.to_string(), &BATCH.to_string()])
            .env("OPENBLAS_NUM_THREADS", threads.to_string())
            .env("OMP_NUM_THREADS", threads.to_string())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; run scripts/bench-train", python.display()));
        assert!(out.status.success(), "numpy reference failed: {}", String::from_utf8_lossy(&out.stderr));
        for (k, v) in String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_once(' ')) {
            let better = match (np.get(k).and_then(|o| o.parse::<f64>().ok()), v.parse::<f64>()) {
                (Some(old), Ok(new)) => new > old,
                _ => true,
            };
            if better {
                np.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    let num = |k: &str| np.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("no {k} from numpy"));

    let square = num("sgemm_1024x1024x1024_gflops");
    println!(
        "trainer train throughput, 1 rank, {threads} threads, batch {BATCH}, MNIST fixture (4,000 digits), \
         best of {rounds} rounds x {EPOCHS} epochs"
    );
    println!("numpy {} (OpenBLAS, OPENBLAS_NUM_THREADS={threads})", np.get("numpy_version").map_or("?", |v| v));
    println!("{:<34} {:>12} {:>12} {:>8}", "measure", "trainer", "numpy", "ratio");
    for (name, arch, rate) in [("mlp", Arch::Mlp, mlp), ("lenet", Arch::Lenet, lenet)] {
        let theirs = num(&format!("{name}_samples_per_sec"));
        println!("{:<34} {:>12.0} {:>12.0} {:>8.2}", format!("{name} samples/s"), rate, theirs, rate / theirs);
        let flops = step_flops(&Model::new(arch, (1, 28, 28)));
        let (g_ours, g_np) = (rate * flops / 1e9, theirs * flops / 1e9);
        println!("{:<34} {:>12.2} {:>12.2} {:>8.2}", format!("{name} step GFLOP/s"), g_ours, g_np, g_ours / g_np);
        println!(
            "{:<34} {:>12.3} {:>12.3}",
            format!("{name} step / OpenBLAS sgemm 1024^3"),
            g_ours / square,
            g_np / square
        );
    }
    for (&(m, k, n), g) in SHAPES.iter().zip(&ours) {
        let theirs = num(&format!("sgemm_{m}x{k}x{n}_gflops"));
        println!("{:<34} {:>12.1} {:>12.1} {:>8.2}", format!("sgemm {m}x{k}x{n} GFLOP/s"), g, theirs, g / theirs);
    }
}
