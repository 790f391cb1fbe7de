//! `/opt/deeplearning/workers`: one alias per line, master first, in index
//! order. `$DEEPLEARNING_WORKERS_PATH` ([`super::profile::WORKERS_PATH_VAR`])
//! points here; the format is what MXNet's `launch.py -H` reads, so the file
//! has no comments. It is read back as a hosts file without slots
//! ([`super::hostfile::parse_line`]).

use crate::message::{Manifest, ManifestNode};

/// The file, as on a node.
pub const PATH: &str = "/opt/deeplearning/workers";

/// The nodes of `manifest` in the order of the workers file and the
/// hostfile (and of `trainer launch`'s ranks): the master first, then by
/// index (then instance id, for a manifest that gives two nodes one index,
/// which the agent refuses).
pub fn in_order(manifest: &Manifest) -> Vec<&ManifestNode> {
    let mut nodes: Vec<&ManifestNode> = manifest.nodes.iter().collect();
    nodes.sort_by_key(|n| (n.instance_id != manifest.master, n.index, n.instance_id.as_str()));
    nodes
}

/// The whole file for `aliases`, in the order given (the agent gives them
/// master first, then by index).
pub fn content<'a>(aliases: impl IntoIterator<Item = &'a str>) -> String {
    aliases.into_iter().map(|alias| format!("{alias}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::super::hostfile::{HostEntry, parse_line};
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let aliases = ["deeplearning-worker1", "deeplearning-worker2", "deeplearning-worker10"];
        let text = content(aliases);
        assert_eq!(text, "deeplearning-worker1\ndeeplearning-worker2\ndeeplearning-worker10\n");
        let back: Vec<HostEntry> = text.lines().filter_map(|l| parse_line(l).unwrap()).collect();
        let names: Vec<_> = back.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, aliases.map(|a| (a, None)));
        assert_eq!(content([]), "");
    }

    #[test]
    fn the_master_comes_first_then_the_indices() {
        let node = |index: u32, id: &str| ManifestNode {
            index,
            alias: crate::message::worker_alias(index),
            instance_id: id.into(),
            private_ip: format!("10.0.0.{index}"),
            hostname: String::new(),
            gpus: 0,
            ssh_host_key: String::new(),
        };
        let manifest = Manifest {
            cluster: "demo".into(),
            generation: 2,
            master: "i-m".into(),
            nodes: vec![node(10, "i-a"), node(2, "i-b"), node(1, "i-m")],
            cluster_public_key: String::new(),
        };
        let order: Vec<u32> = in_order(&manifest).iter().map(|n| n.index).collect();
        assert_eq!(order, [1, 2, 10]);
    }
}
