//! Benchmark (not a test): training throughput of one rank of `trainer
//! train` (MLP and LeNet on the MNIST fixture) against the same models in
//! PyTorch (eager, on the CPU) at the same thread count and batch sizes,
//! and gemm against PyTorch's sgemm (`torch.mm`) on the shapes the models
//! use, printed side by side with ratios. PyTorch is timed two ways
//! (`torch_reference.py`): as its users write it, the data set normalised
//! once and resident (the `pytorch` column and its ratio, the reference),
//! and gathering and normalising each batch as the trainer's data path
//! does (`pipeline`). Besides samples/s (wall time), samples per CPU
//! second (user and system time of every thread of each side's process)
//! against the resident reference: what a sample costs, which the other
//! processes on a shared machine change much less than the wall time.
//!
//! Run with `scripts/bench-train` (makes the fixture, puts the pinned
//! PyTorch into .venv when missing, runs `cargo bench -p trainer --bench
//! throughput`). Inputs: `DL_MNIST_DIR` (the fixture), `BENCH_THREADS`
//! (default 2), `BENCH_BATCHES` (default `64,256,1024`), `BENCH_ROUNDS`
//! (default 3, alternating the two sides; best of each), `BENCH_PYTHON`
//! (default `.venv/bin/python` of the workspace). The PyTorch side is
//! `benches/torch_reference.py` (same data, model, optimiser and batch),
//! started with `OMP_WAIT_POLICY=PASSIVE` (see [`torch_side`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use trainer::train::collective::Single;
use trainer::train::cpu::CpuEngine;
use trainer::train::data::{self, Dataset, Split};
use trainer::train::epochs::Shard;
use trainer::train::model::{Arch, Layer, Model};
use trainer::train::optim::Sgd;
use trainer::train::progress::Progress;
use trainer::train::run::{EpochPlan, train_epoch};

const EPOCHS: u64 = 3;
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

/// This process's CPU time so far (user and system, every thread), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given; zeroed is a valid rusage.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0, "getrusage");
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The best epoch's samples/s of `trainer train`'s CPU engine (the same
/// loop `trainer train` runs, progress line off) over [`EPOCHS`] epochs,
/// and the best epoch's samples per CPU second (the work a sample costs,
/// which other processes on the machine change less than the wall time).
fn rust_rate(arch: Arch, train: &Dataset, threads: usize, batch: usize) -> (f64, f64) {
    let model = Model::new(arch, (1, 28, 28));
    let params = model.init(0);
    let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
    let mut engine = CpuEngine::new(model, params, sgd, threads, Box::new(Single)).unwrap();
    let plan = EpochPlan { batch_size: batch, lr: 0.05, seed: 0, epochs: EPOCHS };
    let shard = Shard { rank: 0, world: 1, generation: 0 };
    let mut progress = Progress::stderr(false);
    (0..EPOCHS)
        .map(|e| {
            let cpu = cpu_seconds();
            let rate = train_epoch(&mut engine, train, shard, e, &plan, &mut progress).unwrap().samples_per_sec;
            (rate, train.len() as f64 / (cpu_seconds() - cpu))
        })
        .fold((0.0, 0.0), |(a, b), (x, y)| (f64::max(a, x), f64::max(b, y)))
}

/// One run of the PyTorch side (`parts`: `train`, `sgemm` or both): its `key value` lines.
fn torch_side(
    python: &Path,
    script: &Path,
    dir: &Path,
    batches: &str,
    threads: usize,
    parts: &str,
) -> Vec<(String, String)> {
    let out = Command::new(python)
        .arg(script)
        .args([dir.to_str().unwrap(), &EPOCHS.to_string(), batches, &threads.to_string(), "cpu", parts])
        .env("OMP_NUM_THREADS", threads.to_string())
        .env("MKL_NUM_THREADS", threads.to_string())
        // OpenMP's idle threads spin by default: on a machine whose cores
        // other processes also want (this benchmark's own other side, a
        // build), that made PyTorch ten times slower here. Sleeping idle
        // threads, as the trainer's rayon pool has, give it its best case.
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; run scripts/bench-train", python.display()));
    assert!(out.status.success(), "the PyTorch reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
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
    let batches_arg = std::env::var("BENCH_BATCHES").unwrap_or_else(|_| "64,256,1024".to_owned());
    let batches: Vec<usize> = batches_arg
        .split(',')
        .map(|b| b.trim().parse().unwrap_or_else(|_| panic!("BENCH_BATCHES: {b:?} is not a number")))
        .collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("BENCH_PYTHON").map_or_else(|| root.join(".venv/bin/python"), PathBuf::from);
    let script = root.join("trainer/benches/torch_reference.py");
    let train = data::load(&dir, None, Split::Train).expect("fixture");

    // The two sides take turns batch size by batch size (a few seconds
    // each), round after round, and each figure is the best of its rounds,
    // so that load from other processes on the machine (which slows
    // whichever side it lands on, by tens of percent here) distorts the
    // ratios less.
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|t| t.parse().ok()).unwrap_or(3);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let mut ours: HashMap<String, f64> = HashMap::new();
    let mut theirs: HashMap<String, String> = HashMap::new();
    let best = |map: &mut HashMap<String, f64>, key: String, v: f64| {
        let e = map.entry(key).or_insert(0.0);
        *e = e.max(v);
    };
    let mut torch_best: HashMap<String, f64> = HashMap::new();
    let mut record = |lines: Vec<(String, String)>| {
        for (k, v) in lines {
            match v.parse::<f64>() {
                Ok(x) => best(&mut torch_best, k, x),
                Err(_) => {
                    theirs.insert(k, v);
                }
            }
        }
    };
    for _ in 0..rounds {
        for &batch in &batches {
            for (name, arch) in [("mlp", Arch::Mlp), ("lenet", Arch::Lenet)] {
                let (rate, per_cpu) = rust_rate(arch, &train, threads, batch);
                best(&mut ours, format!("{name}_{batch}"), rate);
                best(&mut ours, format!("{name}_{batch}_cpu"), per_cpu);
            }
            record(torch_side(&python, &script, &dir, &batch.to_string(), threads, "train"));
        }
        for &shape in &SHAPES {
            best(&mut ours, format!("sgemm_{}x{}x{}", shape.0, shape.1, shape.2), gemm_gflops(&pool, shape));
        }
        record(torch_side(&python, &script, &dir, &batches_arg, threads, "sgemm"));
    }
    let torch = |k: &str| *torch_best.get(k).unwrap_or_else(|| panic!("no {k} from the PyTorch reference"));
    println!(
        "trainer train against PyTorch {} eager on the CPU ({threads} threads each), 1 rank, MNIST fixture \
         (4,000 digits), SGD momentum 0.9, best of {rounds} rounds x {EPOCHS} epochs",
        theirs.get("torch_version").map_or("?", |v| v)
    );
    println!("{:<34} {:>12} {:>12} {:>8} {:>12} {:>8}", "measure", "trainer", "pytorch", "ratio", "pipeline", "ratio");
    for &batch in &batches {
        for (name, arch) in [("mlp", Arch::Mlp), ("lenet", Arch::Lenet)] {
            let key = format!("{name}_{batch}");
            let (rate, other) = (ours[&key], torch(&format!("{key}_samples_per_sec")));
            let pipeline = torch(&format!("{key}_pipeline_samples_per_sec"));
            println!(
                "{:<34} {:>12.0} {:>12.0} {:>8.2} {:>12.0} {:>8.2}",
                format!("{name} batch {batch} samples/s"),
                rate,
                other,
                rate / other,
                pipeline,
                rate / pipeline
            );
            let (cpu, other_cpu) = (ours[&format!("{key}_cpu")], torch(&format!("{key}_samples_per_cpu_sec")));
            println!(
                "{:<34} {:>12.0} {:>12.0} {:>8.2}",
                format!("{name} batch {batch} samples/CPU-s"),
                cpu,
                other_cpu,
                cpu / other_cpu
            );
            let flops = step_flops(&Model::new(arch, (1, 28, 28)));
            println!(
                "{:<34} {:>12.2} {:>12.2}",
                format!("{name} batch {batch} step GFLOP/s"),
                rate * flops / 1e9,
                other * flops / 1e9
            );
        }
    }
    for &(m, k, n) in &SHAPES {
        let key = format!("sgemm_{m}x{k}x{n}");
        let (g, other) = (ours[&key], torch(&format!("{key}_gflops")));
        println!("{:<34} {:>12.1} {:>12.1} {:>8.2}", format!("sgemm {m}x{k}x{n} GFLOP/s"), g, other, g / other);
    }
}
