//! `/etc/hosts`: every node under its alias, so `ssh deeplearning-worker3`
//! and `MASTER_ADDR=deeplearning-master` resolve without DNS.
//!
//! Our lines live in a managed block; the image's own lines (localhost,
//! the instance's name) stay as they are. One line per node, master first:
//! `<ip> <alias> [deeplearning-master] [<hostname> [<short hostname>]]`
//! (the short name is the host name's first label, see [`Node::host_names`]).

use node_contract::message::MASTER_ALIAS;

use super::nodes::Node;

/// The file, as on the node.
pub(crate) const PATH: &str = "/etc/hosts";

/// The body of our block.
pub(crate) fn body(nodes: &[Node<'_>]) -> String {
    let mut out = String::new();
    for n in nodes {
        out.push_str(&n.node.private_ip);
        out.push(' ');
        out.push_str(&n.node.alias);
        if n.is_master {
            out.push(' ');
            out.push_str(MASTER_ALIAS);
        }
        for h in n.host_names() {
            out.push(' ');
            out.push_str(h);
        }
        out.push('\n');
    }
    out
}
