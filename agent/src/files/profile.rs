//! `/etc/profile.d/deeplearning.sh` as this node has it: which variables,
//! from the manifest, the node config and the node itself. The file's path,
//! its format and the quoting of its values are the node contract's
//! (`node_contract::files::profile`, where `trainer`'s reader is too): the
//! `DEEPLEARNING_*` environment, `EFS_MOUNT`, `DEEPLEARNING_SCRATCH` while
//! the node's scratch volume is mounted ([`scratch`], given by the runner
//! with the node's other variables) and this node's NCCL/EFA environment
//! ([`crate::fabric`]), for every login shell and for `trainer launch`,
//! which reads this file on every host and gives these variables to every
//! rank.

use node_contract::NodeConfig;
use node_contract::files::profile::{
    CLUSTER_VAR, EFS_MOUNT_VAR, GENERATION_VAR, HOSTFILE_VAR, WORKER_GPU_COUNT_VAR, WORKERS_COUNT_VAR, WORKERS_PATH_VAR,
};
use node_contract::files::{hostfile, profile, workers};
use node_contract::message::Manifest;

use super::nodes::Node;
use crate::fabric::Variable;

/// The file, as on the node.
pub(crate) const PATH: &str = profile::PATH;

/// The whole file, for the node with `gpus` GPUs and the NCCL/EFA environment `fabric`.
pub(crate) fn content(
    manifest: &Manifest,
    nodes: &[Node<'_>],
    gpus: u32,
    config: &NodeConfig,
    fabric: &[Variable],
) -> String {
    let vars: [(&str, String); 7] = [
        (CLUSTER_VAR, manifest.cluster.clone()),
        (GENERATION_VAR, manifest.generation.to_string()),
        (WORKERS_PATH_VAR, workers::PATH.to_owned()),
        (WORKERS_COUNT_VAR, nodes.len().to_string()),
        (WORKER_GPU_COUNT_VAR, gpus.to_string()),
        (HOSTFILE_VAR, hostfile::PATH.to_owned()),
        (EFS_MOUNT_VAR, config.efs.mount.clone()),
    ];
    profile::content(vars.iter().chain(fabric).map(|(name, value)| (*name, value.as_str())))
}

/// The scratch volume's line (`DEEPLEARNING_SCRATCH=<mount>`), for a node
/// whose volume is mounted ([`crate::scratch::environment`]).
pub(crate) fn scratch(mount: &str) -> Variable {
    (node_contract::data::SCRATCH_ENV, mount.to_owned())
}
