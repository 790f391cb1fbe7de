//! `/etc/profile.d/deeplearning.sh`: the `DEEPLEARNING_*` environment,
//! `EFS_MOUNT`, `DEEPLEARNING_SCRATCH` while the node's scratch volume is
//! mounted ([`scratch`], given by the runner with the node's other
//! variables) and this node's NCCL/EFA environment ([`crate::fabric`]), for
//! every login shell and for `trainer launch`, which reads this file on every
//! host and gives these variables to every rank.
//!
//! Values are shell-quoted, so a cluster name or mount point with spaces or
//! quotes cannot break (or inject into) every user's login.

use node_contract::NodeConfig;
use node_contract::message::Manifest;

use super::nodes::Node;
use super::{hostfile, workers};
use crate::fabric::Variable;

/// The file, as on the node.
pub const PATH: &str = "/etc/profile.d/deeplearning.sh";

/// The whole file, for the node with `gpus` GPUs and the NCCL/EFA environment `fabric`.
pub fn content(manifest: &Manifest, nodes: &[Node<'_>], gpus: u32, config: &NodeConfig, fabric: &[Variable]) -> String {
    let vars: [(&str, String); 7] = [
        ("DEEPLEARNING_CLUSTER", manifest.cluster.clone()),
        ("DEEPLEARNING_GENERATION", manifest.generation.to_string()),
        ("DEEPLEARNING_WORKERS_PATH", workers::PATH.to_owned()),
        ("DEEPLEARNING_WORKERS_COUNT", nodes.len().to_string()),
        ("DEEPLEARNING_WORKER_GPU_COUNT", gpus.to_string()),
        ("DEEPLEARNING_HOSTFILE", hostfile::PATH.to_owned()),
        ("EFS_MOUNT", config.efs.mount.clone()),
    ];
    let mut out =
        String::from("# Written by the deeplearning agent from the cluster manifest; replaced on every change.\n");
    for (name, value) in vars.iter().chain(fabric) {
        out.push_str(&format!("export {name}={}\n", quote(value)));
    }
    out
}

/// The scratch volume's line (`DEEPLEARNING_SCRATCH=<mount>`), for a node
/// whose volume is mounted ([`crate::scratch::environment`]).
pub fn scratch(mount: &str) -> Variable {
    (node_contract::data::SCRATCH_ENV, mount.to_owned())
}

/// `value` as one shell word: bare when it holds only characters no shell
/// treats specially, else in single quotes (a `'` inside becomes `'\''`).
pub fn quote(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:,+@%=".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quoting() {
        let cases = [
            ("/efs", "/efs"),
            ("demo-1", "demo-1"),
            ("", "''"),
            ("my cluster", "'my cluster'"),
            ("it's", r"'it'\''s'"),
            ("$(reboot)", "'$(reboot)'"),
            ("a\nb", "'a\nb'"),
            ("`x`;y", "'`x`;y'"),
        ];
        for (value, expected) in cases {
            assert_eq!(quote(value), expected, "{value:?}");
        }
        // The quoted form means the original to a real shell.
        for value in ["it's", "$(reboot)", "a b\tc", "x'y'z", "\"q\"", "=ens5"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(value)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), value);
        }
    }
}
