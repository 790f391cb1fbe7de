//! `/opt/deeplearning/hostfile`: `<alias> slots=<gpus>` per line, master
//! first, the format mpirun (Open MPI), Horovod and DeepSpeed read.
//!
//! A node without GPUs gets one slot, so CPU-only clusters still run one
//! process per node.

use super::nodes::Node;

/// The file, as on the node.
pub const PATH: &str = "/opt/deeplearning/hostfile";

/// The whole file.
pub fn content(nodes: &[Node<'_>]) -> String {
    nodes.iter().map(|n| format!("{} slots={}\n", n.node.alias, n.node.gpus.max(1))).collect()
}
