//! The whole protocol in one process: a master and several nodes exchange
//! messages through simulated SQS standard queues that deliver in random
//! order and sometimes twice, with a seeded PRNG. Whatever the schedule,
//! every node ends on the master's current generation and the worker queue
//! ends empty (every manifest retired).

use node_contract::message::{Applied, Leave, Manifest, MasterInbound, Register};

use super::testkit::{SplitMix64, T0, config, master_reg, worker_reg};
use super::{Effect, MasterState, NodeDecision, NodeState};

struct Node {
    registration: Register,
    state: NodeState,
    starts_at: u64,
    running: bool,
    registers_sent: u32,
}

struct World {
    rng: SplitMix64,
    now: u64,
    master: MasterState,
    master_queue: Vec<MasterInbound>,
    worker_queue: Vec<Manifest>,
    nodes: Vec<Node>,
    formations: u32,
}

impl World {
    fn new(seed: u64, workers: u32, prepare_data: bool) -> World {
        let mut rng = SplitMix64(seed);
        let size = crate::ports::GroupSize { requested: workers, min: 1 };
        let mut master = MasterState::new(&config(30, prepare_data), size, master_reg(), "key".into(), T0);
        let mut nodes = vec![Node {
            registration: master_reg(),
            state: NodeState::new("i-master".into(), None),
            starts_at: T0,
            running: true,
            registers_sent: 0,
        }];
        for w in 1..=workers {
            nodes.push(Node {
                registration: worker_reg(w),
                state: NodeState::new(format!("i-w{w}"), None),
                starts_at: T0 + rng.below(90_000) as u64,
                running: true,
                registers_sent: 0,
            });
        }
        let effects = master.start(T0);
        let mut world =
            World { rng, now: T0, master, master_queue: Vec::new(), worker_queue: Vec::new(), nodes, formations: 0 };
        world.carry_out(effects);
        world
    }

    fn carry_out(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::PublishManifest(m) => self.worker_queue.push(m),
                Effect::RetireManifests { through_generation } => {
                    self.worker_queue.retain(|m| m.generation > through_generation)
                }
                Effect::SignalFormation(f) => {
                    assert!(f.success, "{}", f.reason);
                    self.formations += 1;
                }
                _ => {}
            }
        }
    }

    /// One step: every running node registers when due and reads the worker
    /// queue; the master takes a few messages, some of them twice.
    fn step(&mut self) {
        self.now += self.rng.below(1_500) as u64;
        let now = self.now;
        for i in 0..self.nodes.len() {
            if !self.nodes[i].running || now < self.nodes[i].starts_at {
                continue;
            }
            if self.nodes[i].state.should_register(now) {
                self.nodes[i].registers_sent += 1;
                self.master_queue.push(MasterInbound::Register(self.nodes[i].registration.clone()));
            }
            let mut visible = self.worker_queue.clone();
            self.rng.shuffle(&mut visible);
            visible.truncate(10);
            for m in visible {
                if self.nodes[i].state.on_manifest(&m) == NodeDecision::Apply {
                    self.nodes[i].state.applied(m.generation);
                    let instance_id = self.nodes[i].registration.instance_id.clone();
                    self.master_queue.push(MasterInbound::Applied(Applied { instance_id, generation: m.generation }));
                }
            }
        }
        for _ in 0..=self.rng.below(3) {
            if self.master_queue.is_empty() {
                break;
            }
            let i = self.rng.below(self.master_queue.len());
            let msg = if self.rng.below(5) == 0 { self.master_queue[i].clone() } else { self.master_queue.remove(i) };
            let effects = self.master.on_inbound(msg, now, &|_| true);
            self.carry_out(effects);
        }
        if self.master.next_deadline().is_some_and(|d| now >= d) {
            let effects = self.master.on_tick(now);
            self.carry_out(effects);
        }
    }

    fn run_for(&mut self, ms: u64) {
        let until = self.now + ms;
        while self.now < until {
            self.step();
        }
    }

    /// Every running node applied the current generation and nothing is left
    /// in the worker queue.
    fn assert_converged(&self, seed: u64) {
        let generation = self.master.manifest().unwrap().generation;
        for n in self.nodes.iter().filter(|n| n.running) {
            assert_eq!(n.state.applied_generation(), Some(generation), "seed {seed}: {}", n.registration.instance_id);
        }
        assert!(self.worker_queue.is_empty(), "seed {seed}: {} manifests left", self.worker_queue.len());
    }
}

#[test]
fn every_node_converges_on_the_same_manifest_and_the_queue_drains() {
    for seed in 0..60 {
        let mut world = World::new(seed, 4, false);
        world.run_for(5 * 60_000);
        assert!(world.master.formed(), "seed {seed}");
        assert_eq!(world.formations, 1, "seed {seed}");
        // Duplicates and reordering never make another generation.
        assert_eq!(world.master.generation(), 1, "seed {seed}");
        assert_eq!(world.master.manifest().unwrap().nodes.len(), 5, "seed {seed}");
        world.assert_converged(seed);
        // A worker registers at start and only again while it waits for formation.
        for n in &world.nodes[1..] {
            assert!(n.registers_sent <= 8, "seed {seed}: {} registrations", n.registers_sent);
        }

        // Worker 2 leaves, worker 5 joins: everyone still running converges,
        // and worker 3 keeps its index.
        let index_of_w3 = world.master.manifest().unwrap().node("i-w3").unwrap().index;
        let index_of_w2 = world.master.manifest().unwrap().node("i-w2").unwrap().index;
        world.nodes[2].running = false;
        world.master_queue.push(MasterInbound::Leave(Leave { instance_id: "i-w2".into(), reason: "stop".into() }));
        world.nodes.push(Node {
            registration: worker_reg(5),
            state: NodeState::new("i-w5".into(), None),
            starts_at: world.now + 5_000,
            running: true,
            registers_sent: 0,
        });
        world.run_for(5 * 60_000);
        let m = world.master.manifest().unwrap();
        let ids: Vec<&str> = m.nodes.iter().map(|n| n.instance_id.as_str()).collect();
        assert!(!ids.contains(&"i-w2") && ids.contains(&"i-w5"), "seed {seed}: {ids:?}");
        assert_eq!(m.node("i-w3").unwrap().index, index_of_w3, "seed {seed}");
        // Worker 5 takes the index worker 2 left free, unless it got in first.
        let index_of_w5 = m.node("i-w5").unwrap().index;
        assert!(index_of_w5 == index_of_w2 || index_of_w5 == 6, "seed {seed}: {index_of_w5}");
        world.assert_converged(seed);
    }
}
