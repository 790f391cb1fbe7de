//! Elastic membership end to end with real processes on 127.0.0.1, through
//! the real epoch loop of `trainer train` ([`trainer::train::epochs::run`]
//! and [`trainer::train::run::train_epoch`]) with a toy engine whose
//! per-sample gradients are small integers, so the final parameters are
//! exactly the same whatever the membership, and any lost, doubled or
//! mis-sharded step, or a redo from the wrong state, shows up as a
//! different vector.
//!
//! This file is its own worker: run with `TOY_WORKER=<json>` it is one rank
//! (rank 0 also hosts the rendezvous); without it, it runs the scenarios,
//! each with its own agent state files under a temp root:
//! joins and leaves at boundaries (a joiner waits for its prepare-data
//! marker), SIGKILL of a peer mid-epoch (the survivors redo the epoch), a
//! silent peer (SIGSTOP: found by the timeouts), the death of rank 0
//! (every other rank fails with a clear message), and a rank whose host was
//! given an interruption notice mid-epoch (it leaves at the next step; the
//! survivors run the rest of the epoch with no step run twice), and a rank
//! whose steps compute three times as long as the others' (rank 0 names it,
//! once, by its node's alias and instance id).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use trainer::train::checkpoint::InEpoch;
use trainer::train::collective::{Collective, Group, Single};
use trainer::train::data::Dataset;
use trainer::train::elastic::{ElasticConfig, Membership};
use trainer::train::engine::{Batch, Engine, EngineError, Slots, StepStats, Stepped, TrainState};
use trainer::train::epochs::{self, Outcome, Rank, Resume, Shard, Start, Trained};
use trainer::train::progress::Progress;
use trainer::train::rendezvous::{self, HostConfig, Roster};
use trainer::train::ring::{Ring, RingConfig};
use trainer::train::run::{EpochPlan, EpochReport, train_epoch_from};
use trainer::train::straggler::{self, Stragglers};

const PARAMS: usize = 3001;
const EPOCHS: u64 = 7;
const STEPS: u64 = 6;
const GLOBAL_BATCH: u64 = 10;
/// The toy dataset: `STEPS` global batches; each sample's label is its id.
const SAMPLES: u64 = STEPS * GLOBAL_BATCH;

/// One toy rank's settings (passed as JSON in `TOY_WORKER`).
#[derive(Serialize, Deserialize, Clone)]
struct WorkerConfig {
    /// This node's filesystem root (its agent state file).
    root: PathBuf,
    /// Set on the master: host the rendezvous at `rendezvous`.
    host: bool,
    rendezvous: std::net::SocketAddr,
    expected: usize,
    /// Where the prepare-data markers are.
    efs: PathBuf,
    /// Where to write the final state.
    out: PathBuf,
    step_ms: u64,
    /// This rank leaves once this file exists (its host's notice).
    #[serde(default)]
    notice: Option<PathBuf>,
}

/// The gradient of one sample: small integers, exact in f32.
fn sample_grad(id: u64, k: usize) -> f32 {
    ((id.wrapping_mul(2_654_435_761) >> 7).wrapping_add(k as u64 * 7) % 5) as f32
}

/// The learning rate of `epoch`: a different integer per epoch, so a redo
/// that starts from another epoch's state, or runs under another epoch's
/// number, changes the result.
fn toy_lr(epoch: u64) -> f32 {
    (epoch + 1) as f32
}

/// What every run must end with: every sample of every epoch summed once,
/// times that epoch's rate (parameters); summed once (momentum); and the
/// step count. Written as one vector, as the worker writes its state.
fn expected() -> Vec<f32> {
    let (mut w, mut m) = (vec![0f32; PARAMS], vec![0f32; PARAMS]);
    for epoch in 0..EPOCHS {
        for id in 0..SAMPLES {
            for k in 0..PARAMS {
                w[k] += toy_lr(epoch) * sample_grad(id, k);
                m[k] += sample_grad(id, k);
            }
        }
    }
    w.extend(m);
    w.push((EPOCHS * STEPS) as f32);
    w
}

/// An [`Engine`] whose update is `params += lr * sum of the samples'
/// gradients` (over every rank, through its collective) and `momentum +=
/// that sum`; it prints each step with the group's size before the
/// all-reduce. Its compute is a sleep of `step_ms` (a slow node: a longer
/// one) and the gradients, timed and carried as the real engines carry
/// their times.
struct ToyEngine {
    state: TrainState,
    collective: Box<dyn Collective<[f32]> + Send>,
    step_ms: u64,
    seconds: Vec<f32>,
}

impl Engine for ToyEngine {
    fn step(
        &mut self,
        batch: &Batch<'_>,
        _global_batch: usize,
        lr: f32,
        leaving: bool,
    ) -> Result<Stepped, EngineError> {
        let (epoch, step) = (self.state.step / STEPS, self.state.step % STEPS);
        println!("step {epoch} {step} world {}", self.collective.world_size());
        let began = Instant::now();
        std::thread::sleep(Duration::from_millis(self.step_ms));
        // The gradients and, after them, the leaving flag and the ranks'
        // times (as the engines carry them).
        let slots = Slots { rank: self.collective.rank(), world: self.collective.world_size() };
        let mut g = vec![0f32; PARAMS + slots.count()];
        for &id in batch.labels {
            g[..PARAMS].iter_mut().enumerate().for_each(|(k, x)| *x += sample_grad(u64::from(id), k));
        }
        slots.write(&mut g[PARAMS..], leaving, Some(began.elapsed().as_secs_f32()));
        self.collective.all_reduce_sum(&mut g)?;
        let (leaving, seconds) = Slots::read(&g[PARAMS..]);
        self.seconds = seconds.to_vec();
        let TrainState { params, momentum, .. } = &mut self.state;
        for ((p, m), g) in params.iter_mut().zip(momentum.iter_mut()).zip(&g) {
            *p += lr * g;
            *m += g;
        }
        self.state.step += 1;
        Ok(Stepped {
            stats: StepStats { samples: batch.labels.len() as u64, ..StepStats::default() },
            leaving,
            timed_steps: 1,
        })
    }

    fn step_seconds(&self) -> &[f32] {
        &self.seconds
    }

    fn evaluate(&mut self, _batch: &Batch<'_>) -> Result<StepStats, EngineError> {
        Ok(StepStats::default())
    }

    fn sum_over_ranks(&mut self, stats: StepStats) -> Result<StepStats, EngineError> {
        let mut f = stats.to_floats();
        self.collective.all_reduce_sum(&mut f)?;
        Ok(StepStats::from_floats(f))
    }

    fn state(&self) -> Result<TrainState, EngineError> {
        Ok(self.state.clone())
    }

    fn set_state(&mut self, state: &TrainState) -> Result<(), EngineError> {
        self.state.clone_from(state);
        Ok(())
    }
}

/// The toy's side of the real epoch loop: the toy engine, the toy dataset
/// through the real `train_epoch`, and lines the scenarios wait for.
struct ToyRank {
    engine: ToyEngine,
    data: Dataset,
    progress: Progress,
    notice: Option<PathBuf>,
    /// Rank 0's watch for a straggler.
    stragglers: Option<Stragglers>,
}

impl Rank for ToyRank {
    type Report = EpochReport;
    type Error = std::convert::Infallible;

    fn engine(&mut self) -> &mut dyn Engine {
        &mut self.engine
    }

    fn join_group(&mut self, _group: &Group, ring: Ring) -> Result<(), EngineError> {
        self.engine.collective = Box::new(ring);
        Ok(())
    }

    fn train(&mut self, epoch: u64, shard: Shard, from: Resume) -> Result<Trained<EpochReport>, EngineError> {
        let plan = EpochPlan { batch_size: GLOBAL_BATCH as usize, lr: toy_lr(epoch), seed: 5, epochs: EPOCHS };
        let notice = self.notice.clone();
        let mut leaving = || notice.as_ref().is_some_and(|p| p.exists());
        let (engine, data, stragglers) = (&mut self.engine, &self.data, &mut self.stragglers);
        let mut timed = |seconds: &[f32], steps: u64| {
            for named in stragglers.as_mut().map(|s| s.observe(seconds, steps, || 0)).unwrap_or_default() {
                println!("straggler {named}");
            }
        };
        train_epoch_from(engine, data, shard, epoch, &plan, &mut self.progress, from, &mut leaving, &mut timed)
    }

    fn leaving(&mut self) -> bool {
        self.notice.as_ref().is_some_and(|p| p.exists())
    }

    fn stopped(&mut self, epoch: u64, at: InEpoch, leaving: bool) -> Result<(), Self::Error> {
        println!("stopped {epoch} {} leaving {leaving}", at.step);
        Ok(())
    }

    fn completed(&mut self, epochs: u64, report: EpochReport) -> Result<(), Self::Error> {
        assert_eq!(report.train.samples, SAMPLES, "epoch {epochs}: samples over every rank");
        println!("boundary {}", epochs - 1);
        Ok(())
    }

    fn regrouped(&mut self, group: &Group, epoch: u64, step: u64, redo: bool) {
        if let Some(note) = self.stragglers.as_mut().and_then(|s| s.regrouped(group)) {
            println!("{note}");
        }
        println!("group rank {} world {} epoch {epoch} step {step} redo {redo}", group.rank, group.world_size);
    }
}

fn worker(cfg: WorkerConfig) -> i32 {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).init();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let rdv = cfg.rendezvous;
    let roster = Roster::new(&cfg.root, Some(cfg.efs.clone()));
    if cfg.host {
        let host_cfg = HostConfig {
            expected: cfg.expected,
            join_timeout: Duration::from_secs(20),
            report_timeout: Duration::from_secs(3),
            nccl_id: None,
        };
        rendezvous::host(TcpListener::bind(rdv).unwrap(), Roster::new(&cfg.root, Some(cfg.efs.clone())), host_cfg)
            .unwrap();
    }
    let hello = roster.identity(0, listener.local_addr().unwrap()).unwrap();
    let config = ElasticConfig {
        rendezvous: rdv,
        connect_timeout: Duration::from_secs(20),
        decision_timeout: Duration::from_secs(60),
        ring: RingConfig {
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(2),
            chunk_elems: 512,
        },
    };
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("toy rank failed: {e}");
        2
    };
    let membership = match Membership::join(config, listener, hello) {
        Ok(x) => x,
        Err(e) => return fail(&e),
    };
    let zeros = vec![0f32; PARAMS];
    let mut rank = ToyRank {
        engine: ToyEngine {
            state: TrainState { params: zeros.clone(), momentum: zeros, epoch: 0, step: 0 },
            collective: Box::new(Single),
            step_ms: cfg.step_ms,
            seconds: Vec::new(),
        },
        data: Dataset::from_parts(
            (1, 1, 1),
            vec![0; SAMPLES as usize],
            (0..SAMPLES as u8).collect(),
            vec![0.0],
            vec![1.0],
        ),
        progress: Progress::stderr(false),
        notice: cfg.notice.clone().filter(|_| !cfg.host),
        // Named after 5 slow steps: the run has 42.
        stragglers: cfg
            .host
            .then(|| Stragglers::new(straggler::Args { straggler_steps: 5, ..straggler::Args::default() })),
    };
    match epochs::run(&mut rank, Some(membership), Start::default(), EPOCHS) {
        Ok(Outcome::Finished) => {}
        Ok(Outcome::Left(reason)) => {
            println!("left {reason}");
            return 0;
        }
        Err(e) => return fail(&e),
    }
    let state = &rank.engine.state;
    let mut out = state.params.clone();
    out.extend(&state.momentum);
    out.push(state.step as f32);
    let bytes: Vec<u8> = out.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(&cfg.out, bytes).unwrap();
    println!("done");
    0
}

// ---------------------------------------------------------------- scenarios

struct Node {
    index: u32,
    root: PathBuf,
}

struct Cluster {
    dir: tempfile::TempDir,
    rendezvous: std::net::SocketAddr,
    nodes: Vec<Node>,
}

/// Each cluster's rendezvous listens on a loopback address of its own
/// (127.0.0.2, 127.0.0.3, ...): the ranks' data planes bind ephemeral ports on
/// 127.0.0.1, which could otherwise be handed the port picked here before the
/// host binds it (seen once in CI), and the scenarios run at the same time, so
/// two of them picking ports on one address could both be handed the same
/// free port, one rendezvous then taking the other's ranks (seen once in CI).
fn rendezvous_address() -> std::net::SocketAddr {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);
    let ip = std::net::Ipv4Addr::new(127, 0, 0, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

impl Cluster {
    fn new(n: u32) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("efs")).unwrap();
        let nodes = (1..=n).map(|index| Node { index, root: dir.path().join(format!("node{index}")) }).collect();
        Cluster { dir, rendezvous: rendezvous_address(), nodes }
    }

    fn efs(&self) -> PathBuf {
        self.dir.path().join("efs")
    }

    fn ip(index: u32) -> String {
        format!("10.0.0.{index}")
    }

    /// Every node's agent applies generation `generation` with `members` (indices).
    fn publish(&self, generation: u64, members: &[u32]) {
        let nodes: Vec<_> = members
            .iter()
            .map(|&i| {
                serde_json::json!({"index": i, "alias": format!("deeplearning-worker{i}"), "instance_id": format!("i-{i}"),
                "private_ip": Self::ip(i), "hostname": format!("ip-{i}"), "gpus": 0, "ssh_host_key": "ssh-ed25519 AAAA"})
            })
            .collect();
        for node in &self.nodes {
            let state = serde_json::json!({"version": 1, "instance_id": format!("i-{}", node.index), "generation": generation,
                "manifest": {"cluster": "toy", "generation": generation, "master": "i-1", "nodes": nodes, "cluster_public_key": "k"}});
            let path = node.root.join("var/lib/deeplearning");
            std::fs::create_dir_all(&path).unwrap();
            let tmp = path.join("state.json.tmp");
            std::fs::write(&tmp, state.to_string()).unwrap();
            std::fs::rename(tmp, path.join("state.json")).unwrap();
        }
    }

    fn mark_prepared(&self, index: u32) {
        std::fs::write(self.efs().join(node_contract::files::prepare_data::marker_name(&Self::ip(index))), b"")
            .unwrap();
    }

    /// The file whose existence is node `index`'s interruption notice.
    fn notice(&self, index: u32) -> PathBuf {
        self.nodes[index as usize - 1].root.join("notice")
    }

    fn out(&self, index: u32) -> PathBuf {
        self.dir.path().join(format!("final-{index}"))
    }

    fn start(&self, index: u32, expected: usize, step_ms: u64) -> Process {
        let cfg = WorkerConfig {
            root: self.nodes[index as usize - 1].root.clone(),
            host: index == 1,
            rendezvous: self.rendezvous,
            expected,
            efs: self.efs(),
            out: self.out(index),
            step_ms,
            notice: Some(self.notice(index)),
        };
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("TOY_WORKER", serde_json::to_string(&cfg).unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        for (pipe, tag) in [
            (Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>, "out"),
            (Box::new(child.stderr.take().unwrap()), "err"),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(format!("{tag} {line}"));
                }
            });
        }
        Process { index, child, lines: rx, seen: Vec::new() }
    }
}

struct Process {
    index: u32,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Process {
    /// Waits for an output line containing `what`; returns it.
    fn wait_for(&mut self, what: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "node {}: no line with {what:?} within {within:?}; seen:\n{}",
                    self.index,
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Waits for the exit; returns (code, all output).
    fn finish(mut self, within: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                std::thread::sleep(Duration::from_millis(200));
                self.seen.extend(self.lines.try_iter());
                panic!("node {} did not exit within {within:?}; seen:\n{}", self.index, self.seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(100));
        self.seen.extend(self.lines.try_iter());
        (status.code(), self.seen.join("\n"))
    }
}

fn read_final(path: &Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn assert_exact(path: &Path, want: &[f32]) {
    let got = read_final(path);
    assert_eq!(got.len(), want.len());
    let diff = got.iter().zip(want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(
        diff,
        0,
        "{}: {diff} of {} values (parameters, momentum, steps) differ from the static run",
        path.display(),
        want.len()
    );
}

/// Every rank in `ranks` exits 0 with exactly the static run's parameters.
fn survivors_match_the_static_run(c: &Cluster, ranks: Vec<Process>) {
    let want = expected();
    for r in ranks {
        let i = r.index;
        let (code, out) = r.finish(Duration::from_secs(60));
        assert_eq!(code, Some(0), "node {i}: {out}");
        assert_exact(&c.out(i), &want);
    }
}

/// 3 ranks; node 4 connects early but joins only once it is in the manifest
/// and its marker exists; node 2 leaves when a generation drops it.
fn join_and_leave_at_boundaries() {
    let c = Cluster::new(4);
    c.publish(1, &[1, 2, 3]);
    c.mark_prepared(2);
    c.mark_prepared(3);
    let mut r1 = c.start(1, 3, 150);
    let r2 = c.start(2, 3, 150);
    let r3 = c.start(3, 3, 150);
    r1.wait_for("boundary 0", Duration::from_secs(30));
    // Node 4 is published and connects, but has not prepared its data yet.
    c.publish(2, &[1, 2, 3, 4]);
    let mut r4 = c.start(4, 3, 150);
    let line = r1.wait_for("step 2 0", Duration::from_secs(30));
    assert!(line.ends_with("world 3"), "node 4 joined without its marker: {line}");
    c.mark_prepared(4);
    let joined = r4.wait_for("out group rank", Duration::from_secs(30));
    assert!(joined.contains("rank 3 world 4"), "{joined}");
    r1.wait_for("world 4", Duration::from_secs(10));
    // Node 2 is dropped from the next generation: it leaves at a boundary, cleanly.
    c.publish(3, &[1, 3, 4]);
    let (code, out2) = r2.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{out2}");
    assert!(out2.contains("left not in the manifest of generation 3"), "{out2}");
    let regrouped = r4.wait_for("out group rank", Duration::from_secs(30));
    assert!(regrouped.contains("rank 2 world 3"), "{regrouped}");
    let want = expected();
    for (r, i) in [(r1, 1), (r3, 3), (r4, 4)] {
        let (code, out) = r.finish(Duration::from_secs(60));
        assert_eq!(code, Some(0), "node {i}: {out}");
        assert_exact(&c.out(i), &want);
    }
    assert!(!c.out(2).exists());
}

/// Starts `n` ranks, sends `signal` to the one at position `victim` when it
/// prints `at`, and waits for rank 0 to be told to redo the epoch. Returns
/// the cluster, the ranks left, rank 0's group line and how long re-forming took.
fn fault_mid_epoch(n: u32, victim: usize, at: &str, signal: i32) -> (Cluster, Vec<Process>, String, Duration) {
    let c = Cluster::new(n);
    c.publish(1, &(1..=n).collect::<Vec<_>>());
    (2..=n).for_each(|i| c.mark_prepared(i));
    let mut ranks: Vec<Process> = (1..=n).map(|i| c.start(i, n as usize, 40)).collect();
    ranks[victim].wait_for(at, Duration::from_secs(60));
    let hit = Instant::now();
    ranks[victim].signal(signal);
    let line = ranks[0].wait_for("redo true", Duration::from_secs(30));
    let took = hit.elapsed();
    assert!(took < Duration::from_secs(30), "re-formed after {took:?}");
    let gone = ranks.remove(victim);
    gone.signal(libc::SIGKILL);
    let _ = gone.finish(Duration::from_secs(5));
    (c, ranks, line, took)
}

/// A peer killed with SIGKILL mid-epoch: the survivors re-form and redo the epoch.
fn sigkill_mid_epoch() {
    let (c, ranks, line, took) = fault_mid_epoch(4, 2, "step 2 3", libc::SIGKILL);
    assert!(line.contains("world 3 epoch 2"), "{line}");
    survivors_match_the_static_run(&c, ranks);
    println!("sigkill: survivors re-formed {took:?} after the kill");
}

/// A peer that stops answering without closing (SIGSTOP): found by the
/// ring's and the rendezvous's timeouts, dropped; the others finish.
fn silent_peer() {
    let (c, ranks, line, took) = fault_mid_epoch(3, 1, "step 1 2", libc::SIGSTOP);
    assert!(line.contains("world 2 epoch 1"), "{line}");
    assert!(took >= Duration::from_secs(2), "re-formed after {took:?}: before any timeout could fire");
    survivors_match_the_static_run(&c, ranks);
    println!("silent peer: survivors re-formed {took:?} after SIGSTOP");
}

/// The (epoch, step) of every step line in `out`, in order.
fn steps_run(out: &str) -> Vec<(u64, u64)> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("out step ")?.split(' ');
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// A rank whose host was given an interruption notice mid-epoch leaves at
/// the next step (exit 0); the survivors re-form and run the rest of the
/// same epoch: every step of the run exactly once on each survivor (no
/// redo), and exactly the static run's state.
fn notice_mid_epoch() {
    let c = Cluster::new(4);
    c.publish(1, &[1, 2, 3, 4]);
    (2..=4).for_each(|i| c.mark_prepared(i));
    let mut ranks: Vec<Process> = (1..=4).map(|i| c.start(i, 4, 150)).collect();
    ranks[2].wait_for("step 2 1 ", Duration::from_secs(60));
    let noticed = Instant::now();
    std::fs::write(c.notice(3), b"").unwrap();
    let leaver = ranks.remove(2);
    let (code, out) = leaver.finish(Duration::from_secs(30));
    let left = noticed.elapsed();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("out left its host was given an interruption notice"), "{out}");
    let ran = steps_run(&out);
    assert!(ran.last().is_some_and(|&(e, s)| e == 2 && s + 1 < STEPS), "left at the epoch's end: {ran:?}");
    let line = ranks[0].wait_for("out group rank 0 world 3", Duration::from_secs(30));
    let step: u64 = line
        .strip_prefix("out group rank 0 world 3 epoch 2 step ")
        .and_then(|rest| rest.strip_suffix(" redo false"))
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("not the rest of epoch 2 in 3 ranks: {line}"));
    assert!((1..STEPS).contains(&step), "{line}");
    assert_eq!(ran.last(), Some(&(2, step - 1)), "the leaver ran up to the stop, no further");
    ranks[0].wait_for(&format!("out step 2 {step} world 3"), Duration::from_secs(30));
    let next = noticed.elapsed();
    let want = expected();
    let every: Vec<(u64, u64)> = (0..EPOCHS).flat_map(|e| (0..STEPS).map(move |s| (e, s))).collect();
    for r in ranks {
        let i = r.index;
        let (code, out) = r.finish(Duration::from_secs(60));
        assert_eq!(code, Some(0), "node {i}: {out}");
        assert!(!out.contains("redo true"), "node {i} redid an epoch: {out}");
        assert_eq!(steps_run(&out), every, "node {i}: every step once, in order");
        assert_exact(&c.out(i), &want);
    }
    assert!(!c.out(3).exists());
    println!(
        "notice mid-epoch: the leaver exited {left:?} after its notice, stopping after step {step} of epoch 3; \
         the survivors ran that epoch's step {} in 3 ranks {next:?} after it",
        step + 1
    );
}

/// Node 3's steps compute three times as long as the others': rank 0
/// names its rank, node and instance, once (it never recovers), and
/// nobody else; the run's result is the same as ever.
fn straggler_named() {
    let c = Cluster::new(4);
    c.publish(1, &[1, 2, 3, 4]);
    (2..=4).for_each(|i| c.mark_prepared(i));
    let ranks: Vec<Process> = (1..=4).map(|i| c.start(i, 4, if i == 3 { 150 } else { 50 })).collect();
    let mut outs = Vec::new();
    let want = expected();
    for r in ranks {
        let i = r.index;
        let (code, out) = r.finish(Duration::from_secs(120));
        assert_eq!(code, Some(0), "node {i}: {out}");
        assert_exact(&c.out(i), &want);
        outs.push(out);
    }
    let named: Vec<&str> = outs[0].lines().filter(|l| l.starts_with("out straggler ")).collect();
    assert_eq!(named.len(), 1, "named once: {named:?}");
    let line = named[0];
    assert!(
        line.starts_with("out straggler rank 2 on deeplearning-worker3 (i-3, local rank 0): steps ")
            && line.ends_with(" % slower than the median of the other ranks for 5 steps"),
        "{line}"
    );
    // The sleeps are 150 ms against 50: about 200 % slower, never under the margin.
    let percent: f64 = line.split("steps ").nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
    assert!(percent > 100.0, "{line}");
    // Only rank 0 names anyone.
    assert!(outs[1..].iter().all(|o| !o.contains("straggler")), "{outs:?}");
}

/// Process 0 (the master) dies: every other rank fails, saying why.
fn master_death() {
    let c = Cluster::new(3);
    c.publish(1, &[1, 2, 3]);
    (2..=3).for_each(|i| c.mark_prepared(i));
    let mut ranks: Vec<Process> = (1..=3).map(|i| c.start(i, 3, 40)).collect();
    ranks[0].wait_for("step 1 1", Duration::from_secs(60));
    ranks[0].signal(libc::SIGKILL);
    for r in ranks.into_iter().skip(1) {
        let i = r.index;
        let (code, out) = r.finish(Duration::from_secs(30));
        assert_eq!(code, Some(2), "node {i}: {out}");
        assert!(out.contains("the job cannot go on without the master"), "node {i}: {out}");
    }
}

fn main() {
    if let Ok(cfg) = std::env::var("TOY_WORKER") {
        std::process::exit(worker(serde_json::from_str(&cfg).unwrap()));
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let scenarios: [(&str, fn()); 6] = [
        ("join_and_leave_at_boundaries", join_and_leave_at_boundaries),
        ("sigkill_mid_epoch", sigkill_mid_epoch),
        ("silent_peer", silent_peer),
        ("master_death", master_death),
        ("notice_mid_epoch", notice_mid_epoch),
        ("straggler_named", straggler_named),
    ];
    // Run in parallel: they mostly wait on timeouts.
    let handles: Vec<_> = scenarios
        .into_iter()
        .filter(|(name, _)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .map(|(name, f)| (name, std::thread::spawn(f)))
        .collect();
    let (mut failed, total) = (0, handles.len());
    for (name, h) in handles {
        match h.join() {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("\ntest result: {verdict}. {} passed; {failed} failed; 0 ignored; 0 measured", total - failed);
    if failed > 0 {
        eprintln!("{failed} elastic scenario(s) failed");
        std::process::exit(101);
    }
}
