//! On the master only: the default user's SSH client setup for reaching the
//! nodes. The cluster's private key as `~/.ssh/id_ed25519_deeplearning`
//! (0600) with its `.pub`, and a managed block in `~/.ssh/config` that
//! gives that key to every name a node answers to: the aliases (a
//! pattern), and every node's private IP and host names (full and short),
//! so a host file with IPs or host names works as one with aliases does:
//!
//! ```text
//! Host deeplearning-*
//!   IdentityFile ~/.ssh/id_ed25519_deeplearning
//!   StrictHostKeyChecking yes
//! Host 10.0.0.5 ip-10-0-0-5.ec2.internal ip-10-0-0-5 10.0.0.6 ip-10-0-0-6.ec2.internal ip-10-0-0-6
//!   IdentityFile ~/.ssh/id_ed25519_deeplearning
//!   StrictHostKeyChecking yes
//! ```
//!
//! The IPs and host names are listed exactly, not as patterns (`10.0.*`,
//! `ip-*`), so the key is offered to the cluster's nodes only. At most
//! [`NODES_PER_HOST_LINE`] nodes share a `Host` line, keeping lines short
//! for any ssh that limits their length. Host keys are verified against
//! the known hosts the agent writes under the same names, never skipped
//! (`StrictHostKeyChecking yes`, not `no`).

use std::path::PathBuf;

use super::error::FilesError;
use super::nodes::Node;
use super::paths::home_path;

/// Nodes whose names share one `Host` line (each adds at most about 85
/// characters: an IP and a full and a short host name).
pub(crate) const NODES_PER_HOST_LINE: usize = 8;

/// The private key, relative to the user's home.
pub(crate) const IDENTITY_IN_HOME: &str = ".ssh/id_ed25519_deeplearning";
/// The client config, relative to the user's home.
pub(crate) const CONFIG_IN_HOME: &str = ".ssh/config";

/// `~user/.ssh/id_ed25519_deeplearning`.
pub(crate) fn identity_path(user: &str) -> PathBuf {
    home_path(user, IDENTITY_IN_HOME)
}

/// `~user/.ssh/id_ed25519_deeplearning.pub`.
pub(crate) fn public_path(user: &str) -> PathBuf {
    home_path(user, &format!("{IDENTITY_IN_HOME}.pub"))
}

/// `~user/.ssh/config`.
pub(crate) fn config_path(user: &str) -> PathBuf {
    home_path(user, CONFIG_IN_HOME)
}

/// The private key file and its public key line, from the OpenSSH private key.
pub(crate) fn identity(private_openssh: &str) -> Result<(String, String), FilesError> {
    let key = ssh_key::PrivateKey::from_openssh(private_openssh)
        .map_err(|e| FilesError::BadClusterKey { reason: format!("the cluster private key does not parse: {e}") })?;
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| FilesError::BadClusterKey { reason: format!("cannot encode the cluster public key: {e}") })?;
    let mut private = private_openssh.trim_end().to_owned();
    private.push('\n');
    Ok((private, format!("{public}\n")))
}

/// The body of our block in `~/.ssh/config`: the aliases' pattern, then
/// every node's IP and host names, each `Host` line with the cluster key
/// and strict host key checking.
pub(crate) fn config_body(nodes: &[Node<'_>]) -> String {
    let options = format!("  IdentityFile ~/{IDENTITY_IN_HOME}\n  StrictHostKeyChecking yes\n");
    let mut out = format!("Host deeplearning-*\n{options}");
    for chunk in nodes.chunks(NODES_PER_HOST_LINE) {
        out.push_str("Host");
        for n in chunk {
            for name in std::iter::once(n.node.private_ip.as_str()).chain(n.host_names()) {
                out.push(' ');
                out.push_str(name);
            }
        }
        out.push('\n');
        out.push_str(&options);
    }
    out
}

#[cfg(test)]
mod tests {
    use node_contract::message::{Manifest, ManifestNode, worker_alias};

    use super::*;
    use crate::files::nodes;

    fn manifest(n: u32, hostname: impl Fn(u32) -> String) -> Manifest {
        Manifest {
            cluster: "c".into(),
            generation: 1,
            master: "i-1".into(),
            nodes: (1..=n)
                .map(|i| ManifestNode {
                    index: i,
                    alias: worker_alias(i),
                    instance_id: format!("i-{i}"),
                    private_ip: format!("10.0.{}.{}", i / 250, 4 + i % 250),
                    hostname: hostname(i),
                    gpus: 0,
                    ssh_host_key: String::new(),
                })
                .collect(),
            cluster_public_key: String::new(),
        }
    }

    /// The `Host` patterns of `config` whose stanza gives the cluster key
    /// with strict host key checking.
    fn covered(config: &str) -> Vec<String> {
        let lines: Vec<&str> = config.lines().collect();
        let mut names = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if let Some(patterns) = line.strip_prefix("Host ") {
                assert_eq!(lines[i + 1], "  IdentityFile ~/.ssh/id_ed25519_deeplearning", "{config}");
                assert_eq!(lines[i + 2], "  StrictHostKeyChecking yes", "{config}");
                names.extend(patterns.split(' ').map(String::from));
            }
        }
        names
    }

    #[test]
    fn every_alias_ip_and_host_name_gets_the_cluster_key() {
        let m = manifest(3, |i| format!("ip-10-0-0-{}.ec2.internal", 4 + i));
        let names = covered(&config_body(&nodes(&m).unwrap()));
        assert_eq!(
            names,
            [
                "deeplearning-*",
                "10.0.0.5",
                "ip-10-0-0-5.ec2.internal",
                "ip-10-0-0-5",
                "10.0.0.6",
                "ip-10-0-0-6.ec2.internal",
                "ip-10-0-0-6",
                "10.0.0.7",
                "ip-10-0-0-7.ec2.internal",
                "ip-10-0-0-7",
            ]
        );
    }

    #[test]
    fn odd_host_names_add_no_wrong_names() {
        // No host name; one that is an IP; one without a domain; two nodes
        // whose names share a first label (neither gets the short name).
        let m = manifest(5, |i| match i {
            1 => String::new(),
            2 => "10.0.0.6".into(),
            3 => "node3".into(),
            _ => format!("gpu.zone{i}.internal"),
        });
        let names = covered(&config_body(&nodes(&m).unwrap()));
        assert_eq!(
            names,
            [
                "deeplearning-*",
                "10.0.0.5",
                "10.0.0.6",
                "10.0.0.7",
                "node3",
                "10.0.0.8",
                "gpu.zone4.internal",
                "10.0.0.9",
                "gpu.zone5.internal"
            ]
        );
    }

    #[test]
    fn a_thousand_nodes_keep_lines_short() {
        let m = manifest(1000, |i| format!("ip-10-0-{}-{}.ap-southeast-2.compute.internal", i / 250, 4 + i % 250));
        let config = config_body(&nodes(&m).unwrap());
        let names = covered(&config);
        assert_eq!(names.len(), 1 + 3 * 1000);
        for n in &m.nodes {
            assert!(names.contains(&n.private_ip), "{} missing", n.private_ip);
            assert!(names.contains(&n.hostname), "{} missing", n.hostname);
        }
        let longest = config.lines().map(str::len).max().unwrap();
        assert!(longest < 1024, "a line of {longest} characters");
    }
}
