//! `/opt/deeplearning/workers`: one alias per line, master first, in index
//! order. `$DEEPLEARNING_WORKERS_PATH` points here; the format is what
//! MXNet's `launch.py -H` reads, so the file has no comments.

use super::nodes::Node;

/// The file, as on the node.
pub const PATH: &str = "/opt/deeplearning/workers";

/// The whole file.
pub fn content(nodes: &[Node<'_>]) -> String {
    nodes.iter().map(|n| format!("{}\n", n.node.alias)).collect()
}
