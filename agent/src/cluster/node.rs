//! A node's view of the cluster: which manifest to apply, when to (re-)send
//! `register`, and how long to back off while the worker queue only returns
//! manifests already seen.
//!
//! Manifests stay visible to every node until the master retires them, so a
//! node sees the same manifest many times, and old ones may arrive after new
//! ones. A node applies a manifest only when it is newer than the one it
//! applied and contains the node; it never goes back to an older generation.
//!
//! A node that was given an interruption notice ([`NodeState::interrupted`])
//! has told the master, which removes it: it stops registering, so that it
//! does not ask back in while its instance is going away.

use node_contract::message::Manifest;
use serde::{Deserialize, Serialize};

use super::timing::{
    APPLIED_BACKOFF_PER_NODE_MS, FORMING_REGISTER_RETRY_MAX_MS, FORMING_REGISTER_RETRY_MS, IDLE_BACKOFF_MAX_MS,
    IDLE_BACKOFF_MIN_MS, REGISTER_RETRY_MS,
};

/// What to do with a manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDecision {
    /// Write the files, then call [`NodeState::applied`] and send `applied`.
    Apply,
    /// Nothing to do; the reason is for a debug line.
    Ignore(&'static str),
    /// A newer manifest that does not contain this node: keep registering.
    NotMember,
}

/// One node's view. Serialize it to keep it across restarts, or build it
/// again with [`NodeState::new`] from the applied generation in the state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    instance_id: String,
    /// The newest generation written to disk.
    applied_generation: Option<u64>,
    /// Whether the newest manifest this node knows of contains it.
    member: bool,
    /// The newest generation seen that does not contain this node.
    not_member_through: Option<u64>,
    /// When `register` was last sent in this run (a restart registers at once).
    #[serde(skip)]
    last_register_ms: Option<u64>,
    /// Whether `register` was sent again in this run.
    #[serde(skip)]
    registered_again: bool,
    /// The last idle back-off handed out.
    #[serde(skip)]
    backoff_ms: u64,
    /// Given an interruption notice in this boot: never registers again.
    #[serde(default)]
    interrupted: bool,
}

impl NodeState {
    /// A node that has applied `applied_generation` (from its state file;
    /// `None` on first boot). A node only ever applies manifests that contain
    /// it, so an applied generation means it was a member then.
    pub fn new(instance_id: String, applied_generation: Option<u64>) -> NodeState {
        NodeState {
            instance_id,
            applied_generation,
            member: applied_generation.is_some(),
            not_member_through: None,
            last_register_ms: None,
            registered_again: false,
            backoff_ms: 0,
            interrupted: false,
        }
    }

    /// EC2 gave this node an interruption notice (told to the master with a
    /// `notice` message): from now on it does not register, even when a
    /// manifest without it arrives.
    pub fn interrupted(&mut self) {
        self.interrupted = true;
    }

    /// Whether this node was given an interruption notice.
    pub fn is_interrupted(&self) -> bool {
        self.interrupted
    }

    /// The newest generation written to disk.
    pub fn applied_generation(&self) -> Option<u64> {
        self.applied_generation
    }

    /// Whether this node is in the newest manifest it knows of.
    pub fn is_member(&self) -> bool {
        self.member
    }

    /// A manifest body was received: Apply it, or Ignore it (stale,
    /// duplicate, not newer), or NotMember (this node is not in it: keep
    /// registering). Only the first sight of a generation without this node
    /// is NotMember; seeing it again is Ignore, so it counts as nothing new.
    pub fn on_manifest(&mut self, m: &Manifest) -> NodeDecision {
        let generation = m.generation;
        if let Some(applied) = self.applied_generation {
            if generation == applied {
                return NodeDecision::Ignore("this generation is already applied");
            }
            if generation < applied {
                return NodeDecision::Ignore("older than the applied generation");
            }
        }
        if let Some(seen) = self.not_member_through {
            if generation == seen {
                return NodeDecision::Ignore("already seen; this node is not in it");
            }
            if generation < seen {
                return NodeDecision::Ignore("older than a manifest already seen");
            }
        }
        if m.node(&self.instance_id).is_some() {
            return NodeDecision::Apply;
        }
        self.not_member_through = Some(generation);
        if self.member {
            // Removed (for example after a reboot the master took for a
            // leave): register again at once.
            self.member = false;
            self.last_register_ms = None;
        }
        NodeDecision::NotMember
    }

    /// After the files of `generation` were written.
    pub fn applied(&mut self, generation: u64) {
        if self.applied_generation.is_some_and(|a| a >= generation) {
            return;
        }
        self.applied_generation = Some(generation);
        if self.not_member_through.is_none_or(|seen| seen < generation) {
            self.member = true;
        }
    }

    /// Whether to (re-)send `register` now: immediately at start, then again
    /// until this node is in an applied manifest ([`Self::register_retry_ms`]
    /// apart); again at once when a newer manifest no longer contains it.
    pub fn should_register(&mut self, now_ms: u64) -> bool {
        if self.interrupted {
            return false;
        }
        let due = match self.last_register_ms {
            None => true,
            Some(_) if self.member => false,
            // A clock that went backwards must not silence a node for long.
            Some(last) => now_ms < last || now_ms - last >= self.register_retry_ms(),
        };
        if due {
            self.registered_again |= self.last_register_ms.is_some();
            self.last_register_ms = Some(now_ms);
        }
        due
    }

    /// How long after its last `register` a node that is not a member sends
    /// it again.
    ///
    /// A node that has seen no manifest yet is waiting for the formation:
    /// the master keeps every registration it read (in its saved state) and
    /// publishes nothing until it decides, so a copy only helps when one was
    /// lost, and every copy is one more message for the master to read
    /// while a thousand nodes wait. Such a node sends it again after
    /// [`FORMING_REGISTER_RETRY_MS`], then every
    /// [`FORMING_REGISTER_RETRY_MAX_MS`]: 2 registrations for a wait of up
    /// to 90 s, where a fixed 15 s gave 6 (at 1,000 waiting nodes, 17
    /// messages a second for the master instead of 67). A node that has
    /// seen a manifest without it is joining a formed cluster, where the
    /// master may be waiting for its prepare-data marker and checks it at
    /// each registration: every [`REGISTER_RETRY_MS`].
    pub fn register_retry_ms(&self) -> u64 {
        if self.applied_generation.is_some() || self.not_member_through.is_some() {
            return REGISTER_RETRY_MS;
        }
        if self.registered_again { FORMING_REGISTER_RETRY_MAX_MS } else { FORMING_REGISTER_RETRY_MS }
    }

    /// The pause after applying a generation of `nodes` nodes, before the
    /// next receive. That receive returns the same generation again until the
    /// master retired it, which it does once it has read all `nodes`
    /// acknowledgements, 10 per receive: so the pause grows with the
    /// cluster, [`APPLIED_BACKOFF_PER_NODE_MS`] a node, from
    /// [`IDLE_BACKOFF_MIN_MS`] to [`IDLE_BACKOFF_MAX_MS`] (1 s up to 125
    /// nodes, 2 s at 256, 8 s from 1,000). Further idle pauses double from
    /// there. A node in a long poll sees a new generation at once; only a
    /// generation that follows within this pause reaches this node that
    /// much later.
    pub fn applied_backoff_ms(&mut self, nodes: usize) -> u64 {
        let per_node = (nodes as u64).saturating_mul(APPLIED_BACKOFF_PER_NODE_MS);
        self.backoff_ms = per_node.clamp(IDLE_BACKOFF_MIN_MS, IDLE_BACKOFF_MAX_MS);
        self.backoff_ms
    }

    /// How long to wait before the next receive: 0 when the last receive
    /// brought something new; otherwise 1 s, doubling up to 8 s, so a node
    /// does not spin while the master has not retired a manifest yet.
    pub fn idle_backoff_ms(&mut self, got_nothing_new: bool) -> u64 {
        self.backoff_ms = if !got_nothing_new {
            0
        } else if self.backoff_ms == 0 {
            IDLE_BACKOFF_MIN_MS
        } else {
            (self.backoff_ms * 2).min(IDLE_BACKOFF_MAX_MS)
        };
        self.backoff_ms
    }
}

#[cfg(test)]
mod tests {
    use node_contract::message::{Manifest, ManifestNode, worker_alias};

    use super::*;

    fn manifest(generation: u64, members: &[&str]) -> Manifest {
        let nodes = members
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let index = u32::try_from(i).unwrap() + 1;
                ManifestNode {
                    index,
                    alias: worker_alias(index),
                    instance_id: (*id).into(),
                    private_ip: format!("10.0.0.{index}"),
                    hostname: format!("h{index}"),
                    gpus: 1,
                    ssh_host_key: "ssh-ed25519 AAAA".into(),
                }
            })
            .collect();
        Manifest {
            cluster: "demo".into(),
            generation,
            master: "i-master".into(),
            nodes,
            cluster_public_key: "ssh-ed25519 AAAA cluster".into(),
        }
    }

    #[test]
    fn decisions() {
        use NodeDecision::*;
        // (applied before, manifests in order with the decision each gets).
        type Step = (u64, &'static [&'static str], NodeDecision);
        let cases: Vec<(&str, Option<u64>, Vec<Step>)> = vec![
            ("first manifest with me", None, vec![(1, &["i-master", "i-me"], Apply)]),
            ("first manifest without me", None, vec![(1, &["i-master"], NotMember)]),
            (
                "same manifest without me again is nothing new",
                None,
                vec![(1, &["i-master"], NotMember), (1, &["i-master"], Ignore("already seen; this node is not in it"))],
            ),
            (
                "duplicate of the applied",
                Some(3),
                vec![(3, &["i-master", "i-me"], Ignore("this generation is already applied"))],
            ),
            ("stale", Some(3), vec![(2, &["i-master", "i-me"], Ignore("older than the applied generation"))]),
            ("newer", Some(3), vec![(5, &["i-master", "i-me"], Apply)]),
            ("removed", Some(3), vec![(4, &["i-master"], NotMember)]),
            (
                "older manifest with me after a newer one without me",
                None,
                vec![
                    (4, &["i-master"], NotMember),
                    (3, &["i-master", "i-me"], Ignore("older than a manifest already seen")),
                ],
            ),
            (
                "admitted after being left out",
                None,
                vec![(4, &["i-master"], NotMember), (5, &["i-master", "i-me"], Apply)],
            ),
        ];
        for (name, applied, steps) in cases {
            let mut node = NodeState::new("i-me".into(), applied);
            for (generation, members, expected) in steps {
                assert_eq!(
                    node.on_manifest(&manifest(generation, members)),
                    expected,
                    "{name}: generation {generation}"
                );
            }
        }
    }

    #[test]
    fn apply_is_repeated_until_applied_is_recorded() {
        let mut node = NodeState::new("i-me".into(), None);
        let m = manifest(2, &["i-master", "i-me"]);
        assert_eq!(node.on_manifest(&m), NodeDecision::Apply);
        // The files could not be written: the next copy is applied again.
        assert_eq!(node.on_manifest(&m), NodeDecision::Apply);
        node.applied(2);
        assert_eq!(node.on_manifest(&m), NodeDecision::Ignore("this generation is already applied"));
        assert_eq!(node.applied_generation(), Some(2));
        // `applied` never goes back.
        node.applied(1);
        assert_eq!(node.applied_generation(), Some(2));
    }

    #[test]
    fn registers_at_start_then_less_and_less_often_until_formed() {
        let t0 = 1_000_000;
        let mut node = NodeState::new("i-me".into(), None);
        assert!(node.should_register(t0));
        assert!(!node.should_register(t0 + 1));
        // 30 s, then 60 s apart.
        let mut t = t0;
        for gap in [30_000, 60_000, 60_000, 60_000] {
            assert!(!node.should_register(t + gap - 1), "{gap}");
            assert!(node.should_register(t + gap), "{gap}");
            t += gap;
        }
        // A clock that jumps back does not silence it.
        assert!(node.should_register(t0 - 60_000));
        assert_eq!(node.on_manifest(&manifest(1, &["i-master", "i-me"])), NodeDecision::Apply);
        node.applied(1);
        assert!(!node.should_register(t0 + 10 * REGISTER_RETRY_MS));
        assert!(node.is_member());
    }

    #[test]
    fn a_node_joining_a_formed_cluster_registers_every_15_s() {
        let mut node = NodeState::new("i-me".into(), None);
        assert!(node.should_register(0));
        // The cluster formed without it (or before it started).
        assert_eq!(node.on_manifest(&manifest(3, &["i-master"])), NodeDecision::NotMember);
        let mut t = 0;
        for _ in 0..5 {
            assert!(!node.should_register(t + REGISTER_RETRY_MS - 1));
            t += REGISTER_RETRY_MS;
            assert!(node.should_register(t));
        }
    }

    #[test]
    fn a_restarted_member_registers_once_at_start() {
        let mut node = NodeState::new("i-me".into(), Some(4));
        assert!(node.should_register(0));
        assert!(!node.should_register(REGISTER_RETRY_MS));
        assert!(!node.should_register(100 * REGISTER_RETRY_MS));
        // A state restored with serde registers at once too.
        let mut restored: NodeState = serde_json::from_str(&serde_json::to_string(&node).unwrap()).unwrap();
        assert!(restored.should_register(200 * REGISTER_RETRY_MS));
        assert!(!restored.should_register(201 * REGISTER_RETRY_MS));
    }

    #[test]
    fn a_removed_node_registers_again_at_once() {
        let mut node = NodeState::new("i-me".into(), Some(4));
        assert!(node.should_register(0));
        assert!(!node.should_register(1_000));
        assert_eq!(node.on_manifest(&manifest(5, &["i-master"])), NodeDecision::NotMember);
        assert!(!node.is_member());
        assert!(node.should_register(1_001));
        assert!(!node.should_register(2_000));
        assert!(node.should_register(1_001 + REGISTER_RETRY_MS));
        assert_eq!(node.on_manifest(&manifest(6, &["i-master", "i-me"])), NodeDecision::Apply);
        node.applied(6);
        assert!(node.is_member());
        assert!(!node.should_register(1_001 + 5 * REGISTER_RETRY_MS));
    }

    #[test]
    fn an_interrupted_node_never_registers_again() {
        let mut node = NodeState::new("i-me".into(), Some(4));
        assert!(node.should_register(0));
        node.interrupted();
        assert!(node.is_interrupted());
        // The master removed it: a manifest without it, which would
        // otherwise make it register at once.
        assert_eq!(node.on_manifest(&manifest(5, &["i-master"])), NodeDecision::NotMember);
        assert!(!node.is_member());
        for t in [1, REGISTER_RETRY_MS, 100 * REGISTER_RETRY_MS] {
            assert!(!node.should_register(t), "at {t}");
        }
        // Before its first registration too (an agent restarted after the notice).
        let mut fresh = NodeState::new("i-me".into(), None);
        fresh.interrupted();
        assert!(!fresh.should_register(0));
    }

    #[test]
    fn the_pause_after_applying_grows_with_the_cluster() {
        let mut node = NodeState::new("i-me".into(), None);
        let pauses: Vec<u64> = [2, 64, 256, 500, 1_000, 2_000, 4_000, 100_000]
            .into_iter()
            .map(|nodes| node.applied_backoff_ms(nodes))
            .collect();
        assert_eq!(pauses, vec![1_000, 1_000, 2_048, 4_000, 8_000, 8_000, 8_000, 8_000]);
        // Nothing new after it: doubling from there, up to 8 s.
        node.applied_backoff_ms(256);
        assert_eq!(node.idle_backoff_ms(true), 4_096);
        assert_eq!(node.idle_backoff_ms(true), 8_000);
        assert_eq!(node.idle_backoff_ms(false), 0);
    }

    #[test]
    fn idle_backoff_doubles_to_8_s_and_resets() {
        let mut node = NodeState::new("i-me".into(), None);
        let got: Vec<u64> = [true, true, true, true, true, false, true, true]
            .into_iter()
            .map(|nothing_new| node.idle_backoff_ms(nothing_new))
            .collect();
        assert_eq!(got, vec![1_000, 2_000, 4_000, 8_000, 8_000, 0, 1_000, 2_000]);
    }
}
