//! The members of the cluster as the master keeps them: each with its
//! registration, its index, and the newest generation it acknowledged; and
//! what a manifest and the host log say about them.
//!
//! Index rules (docs/ARCHITECTURE.md, "Membership rules"): the master is 1; any other node takes
//! the lowest free index from 2 up when it is admitted and keeps it for as
//! long as it is a member, so ranks never shuffle when someone joins or leaves.

use std::collections::{BTreeMap, BTreeSet};

use node_contract::message::{Manifest, ManifestNode, Register, worker_alias};
use serde::{Deserialize, Serialize};

/// The master's index.
pub const MASTER_INDEX: u32 = 1;

/// One member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// 1 for the master, 2 and up for the others.
    pub index: u32,
    /// The registration it was admitted (or last re-registered) with.
    pub registration: Register,
    /// The newest generation it acknowledged since its last (re)boot.
    pub applied: Option<u64>,
    /// Boot ids it registered from before the current one (the newest
    /// [`PREVIOUS_BOOTS_KEPT`]), so a delayed registration from an earlier
    /// boot is not taken for a reboot.
    #[serde(default)]
    pub previous_boots: Vec<String>,
}

/// How many earlier boot ids a member remembers.
pub const PREVIOUS_BOOTS_KEPT: usize = 8;

impl Member {
    /// Whether it acknowledged `generation` or a newer one.
    pub fn has_applied(&self, generation: u64) -> bool {
        self.applied.is_some_and(|a| a >= generation)
    }

    /// Takes the registration of a new boot; returns whether the manifest
    /// entry changed (address, host name, host key or GPUs).
    pub fn rebooted(&mut self, registration: Register) -> bool {
        let before = self.manifest_node();
        let old = std::mem::replace(&mut self.registration, registration);
        self.previous_boots.push(old.boot_id);
        if self.previous_boots.len() > PREVIOUS_BOOTS_KEPT {
            self.previous_boots.remove(0);
        }
        self.applied = None;
        self.manifest_node() != before
    }

    /// How it appears in a manifest.
    pub fn manifest_node(&self) -> ManifestNode {
        let r = &self.registration;
        ManifestNode {
            index: self.index,
            alias: worker_alias(self.index),
            instance_id: r.instance_id.clone(),
            private_ip: r.private_ip.clone(),
            hostname: r.hostname.clone(),
            gpus: r.gpus,
            ssh_host_key: r.ssh_host_key.clone(),
        }
    }
}

/// The members, by instance id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    members: BTreeMap<String, Member>,
}

impl Membership {
    /// The member with this instance id.
    pub fn get(&self, instance_id: &str) -> Option<&Member> {
        self.members.get(instance_id)
    }

    /// The member with this instance id, to update.
    pub fn get_mut(&mut self, instance_id: &str) -> Option<&mut Member> {
        self.members.get_mut(instance_id)
    }

    /// Members other than the master.
    pub fn workers(&self) -> u32 {
        let workers = self.members.values().filter(|m| m.index != MASTER_INDEX).count();
        u32::try_from(workers).unwrap_or(u32::MAX)
    }

    /// The lowest index from 2 up that no member holds.
    pub fn lowest_free_index(&self) -> u32 {
        let taken: BTreeSet<u32> = self.members.values().map(|m| m.index).collect();
        (MASTER_INDEX + 1..).find(|i| !taken.contains(i)).unwrap_or(u32::MAX)
    }

    /// Adds the master with index 1.
    pub fn insert_master(&mut self, registration: Register) {
        let member = Member { index: MASTER_INDEX, registration, applied: None, previous_boots: Vec::new() };
        self.members.insert(member.registration.instance_id.clone(), member);
    }

    /// Admits a node with the lowest free index and returns the index. A
    /// node that is already a member keeps its index.
    pub fn admit(&mut self, registration: Register) -> u32 {
        if let Some(m) = self.members.get(&registration.instance_id) {
            return m.index;
        }
        let index = self.lowest_free_index();
        self.members.insert(
            registration.instance_id.clone(),
            Member { index, registration, applied: None, previous_boots: Vec::new() },
        );
        index
    }

    /// Removes a member.
    pub fn remove(&mut self, instance_id: &str) -> Option<Member> {
        self.members.remove(instance_id)
    }

    /// Every member, by index (the master first).
    pub fn by_index(&self) -> Vec<&Member> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.index);
        members
    }

    /// The manifest's node list: the master first, then by index.
    pub fn manifest_nodes(&self) -> Vec<ManifestNode> {
        self.by_index().into_iter().map(Member::manifest_node).collect()
    }
}

/// The host log lines for going from `previous` to `next`: a node that is
/// new, or whose address changed, is ADDED; one that is gone, or whose
/// address changed, is REMOVED. Removals come first, then additions, each by
/// index. `<generation> ADDED|REMOVED <ip> <unix-nanos>`, and after a
/// REMOVED line the node's note from `notes` (by instance id) when there is
/// one: why it left (`notice spot-instance-action terminate at <time>`), so
/// a reader that splits on spaces still finds the first four fields.
pub fn host_log_lines(
    previous: Option<&Manifest>,
    next: &Manifest,
    now_ms: u64,
    notes: &BTreeMap<String, String>,
) -> Vec<String> {
    let nanos = u128::from(now_ms) * 1_000_000;
    let before: &[ManifestNode] = previous.map(|m| m.nodes.as_slice()).unwrap_or_default();
    let ip_of =
        |nodes: &[ManifestNode], id: &str| nodes.iter().find(|n| n.instance_id == id).map(|n| n.private_ip.clone());
    let mut lines = Vec::new();
    for old in before {
        if ip_of(&next.nodes, &old.instance_id).as_deref() != Some(old.private_ip.as_str()) {
            let note = notes.get(&old.instance_id).map(|n| format!(" {n}")).unwrap_or_default();
            lines.push(format!("{} REMOVED {} {nanos}{note}", next.generation, old.private_ip));
        }
    }
    for new in &next.nodes {
        if ip_of(before, &new.instance_id).as_deref() != Some(new.private_ip.as_str()) {
            lines.push(format!("{} ADDED {} {nanos}", next.generation, new.private_ip));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testkit::{master_reg, worker_reg};

    fn manifest(generation: u64, m: &Membership) -> Manifest {
        Manifest {
            cluster: "demo".into(),
            generation,
            master: "i-master".into(),
            nodes: m.manifest_nodes(),
            cluster_public_key: "ssh-ed25519 AAAA cluster".into(),
        }
    }

    #[test]
    fn indices_are_the_lowest_free_and_stable() {
        let mut m = Membership::default();
        m.insert_master(master_reg());
        assert_eq!(m.admit(worker_reg(1)), 2);
        assert_eq!(m.admit(worker_reg(2)), 3);
        assert_eq!(m.admit(worker_reg(3)), 4);
        // Admitting again keeps the index.
        assert_eq!(m.admit(worker_reg(2)), 3);
        m.remove("i-w2");
        assert_eq!(m.lowest_free_index(), 3);
        assert_eq!(m.admit(worker_reg(4)), 3);
        assert_eq!(m.get("i-w3").unwrap().index, 4);
        assert_eq!(m.admit(worker_reg(5)), 5);
        assert_eq!(m.workers(), 4);
    }

    #[test]
    fn manifest_nodes_are_master_first_then_by_index() {
        let mut m = Membership::default();
        m.admit(worker_reg(7));
        m.insert_master(master_reg());
        m.admit(worker_reg(3));
        let nodes = m.manifest_nodes();
        let listed: Vec<(u32, &str, &str)> =
            nodes.iter().map(|n| (n.index, n.alias.as_str(), n.instance_id.as_str())).collect();
        assert_eq!(
            listed,
            vec![
                (1, "deeplearning-worker1", "i-master"),
                (2, "deeplearning-worker2", "i-w7"),
                (3, "deeplearning-worker3", "i-w3"),
            ]
        );
        assert_eq!(nodes[1].private_ip, "10.0.0.7");
        assert_eq!(nodes[1].gpus, 8);
    }

    #[test]
    fn host_log_lines_describe_the_difference() {
        let mut m = Membership::default();
        m.insert_master(master_reg());
        m.admit(worker_reg(1));
        let first = manifest(1, &m);
        assert_eq!(
            host_log_lines(None, &first, 1_700_000_000_123, &BTreeMap::new()),
            vec!["1 ADDED 10.0.0.100 1700000000123000000", "1 ADDED 10.0.0.1 1700000000123000000"]
        );
        m.remove("i-w1");
        m.admit(worker_reg(2));
        let mut moved = worker_reg(9);
        moved.instance_id = "i-master".into();
        m.get_mut("i-master").unwrap().registration = moved;
        let second = manifest(2, &m);
        assert_eq!(
            host_log_lines(Some(&first), &second, 5, &BTreeMap::new()),
            vec![
                "2 REMOVED 10.0.0.100 5000000",
                "2 REMOVED 10.0.0.1 5000000",
                "2 ADDED 10.0.0.9 5000000",
                "2 ADDED 10.0.0.2 5000000"
            ]
        );
        assert!(host_log_lines(Some(&second), &second, 5, &BTreeMap::new()).is_empty());
        let notes = BTreeMap::from([("i-w2".to_string(), "notice spot-instance-action terminate at T".to_string())]);
        m.remove("i-w2");
        let third = manifest(3, &m);
        assert_eq!(
            host_log_lines(Some(&second), &third, 5, &notes),
            vec!["3 REMOVED 10.0.0.2 5000000 notice spot-instance-action terminate at T"]
        );
    }
}
