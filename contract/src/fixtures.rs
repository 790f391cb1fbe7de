//! Fixtures for the tests of the crates that read the contract: one node
//! config that every test starts from (and changes what it is about), so a
//! new field of [`NodeConfig`] is filled in one place. Compiled for this
//! crate's own tests, and for others with the `fixtures` feature, which
//! they enable in their `[dev-dependencies]` only.

use crate::message::{Manifest, ManifestNode};
use crate::{Efs, Elastic, NODE_CONFIG_VERSION, NodeConfig, Queues, Role, Signals};

/// The master's node config of a cluster `demo` in us-east-1: a 30-minute
/// formation, no prepare-data script, no EFA, network check, log group, idle guard or
/// Capacity Block.
pub fn node_config() -> NodeConfig {
    NodeConfig {
        version: NODE_CONFIG_VERSION,
        cluster: "demo".into(),
        stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/1".into(),
        stack_name: "demo".into(),
        region: "us-east-1".into(),
        role: Role::Master,
        queues: Queues { master: "https://sqs/m".into(), workers: "https://sqs/w".into() },
        worker_group: Some("demo-workers".into()),
        efs: Efs { file_system_id: "fs-12345678".into(), mount: "/efs".into() },
        default_user: "ubuntu".into(),
        formation_timeout_seconds: 1800,
        elastic: Elastic::default(),
        signals: Some(Signals {
            master_resource: "MasterInstance".into(),
            formation_handle_url: "https://handle".into(),
        }),
        efa: None,
        network_check: None,
        logs: None,
        idle: None,
        capacity_block: None,
        scratch: None,
        data: Vec::new(),
        fsx: None,
        gpu_check: None,
    }
}

/// A CPU node of cluster `demo` at `index`, its address and hostname made
/// from the index (10.0.0.`index`).
pub fn manifest_node(index: u32, instance_id: &str) -> ManifestNode {
    ManifestNode {
        index,
        alias: format!("deeplearning-worker{index}"),
        instance_id: instance_id.into(),
        private_ip: format!("10.0.0.{index}"),
        hostname: format!("ip-10-0-0-{index}"),
        gpus: 0,
        ssh_host_key: "ssh-ed25519 AAAA".into(),
    }
}

/// Generation `generation` of cluster `demo`: the master `master` at index
/// 1, then `workers` (index, instance id), each a [`manifest_node`].
pub fn manifest(generation: u64, master: &str, workers: &[(u32, &str)]) -> Manifest {
    let mut nodes = vec![manifest_node(1, master)];
    nodes.extend(workers.iter().map(|&(index, id)| manifest_node(index, id)));
    Manifest {
        cluster: "demo".into(),
        generation,
        master: master.into(),
        nodes,
        cluster_public_key: "ssh-ed25519 AAAA".into(),
    }
}
