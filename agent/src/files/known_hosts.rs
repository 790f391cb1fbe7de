//! `/etc/ssh/ssh_known_hosts`: every node's SSH host key under its alias,
//! host names (full and short) and IP, so SSH between nodes verifies every host key and host
//! key checking stays on (`StrictHostKeyChecking yes`).
//!
//! One line per node in our managed block:
//! `<alias>[,deeplearning-master][,<hostname>[,<short hostname>]],<ip> <key-type> <base64>`.
//! Host keys arrive in registrations over SQS, so each is parsed as an
//! OpenSSH public key before it is trusted; the comment is dropped.

use node_contract::message::MASTER_ALIAS;

use super::error::FilesError;
use super::nodes::Node;

/// The file, as on the node (OpenSSH's global known hosts file).
pub(crate) const PATH: &str = "/etc/ssh/ssh_known_hosts";

/// The body of our block.
pub(crate) fn body(nodes: &[Node<'_>]) -> Result<String, FilesError> {
    let mut out = String::new();
    for n in nodes {
        let key = public_key(&n.node.ssh_host_key).map_err(|reason| FilesError::BadHostKey {
            node: format!("{} ({})", n.node.alias, n.node.instance_id),
            reason,
        })?;
        let mut names = vec![n.node.alias.as_str()];
        if n.is_master {
            names.push(MASTER_ALIAS);
        }
        names.extend(n.host_names());
        names.push(&n.node.private_ip);
        out.push_str(&format!("{} {key}\n", names.join(",")));
    }
    Ok(out)
}

/// The `<type> <base64>` part of an OpenSSH public key line, once it parses.
pub(crate) fn public_key(line: &str) -> Result<String, String> {
    let line = line.trim();
    if line.is_empty() {
        return Err("the key is empty".into());
    }
    if line.contains(['\n', '\r']) {
        return Err("the key spans several lines".into());
    }
    ssh_key::PublicKey::from_openssh(line).map_err(|e| format!("not an OpenSSH public key ({e}): {line:.60}"))?;
    let mut fields = line.split_whitespace();
    match (fields.next(), fields.next()) {
        (Some(kind), Some(base64)) => Ok(format!("{kind} {base64}")),
        _ => Err(format!("not an OpenSSH public key: {line:.60}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_comments_dropped() {
        let key = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]));
        let line = key.public_key().to_openssh().unwrap();
        let with_comment = format!("{line} root@ip-10-0-0-5\n");
        assert_eq!(public_key(&with_comment).unwrap(), line);
        for bad in
            ["", "ssh-ed25519", "ssh-ed25519 AAAA", "ssh-ed25519 not-base64!", "hello world", "ssh-ed25519 AAAA\nx"]
        {
            assert!(public_key(bad).is_err(), "{bad:?}");
        }
    }
}
