//! The manifest's nodes as the files see them ([`nodes`]): master first,
//! then by index, each with the short host name it may also answer to, and
//! every value checked before it goes into a file (IPs parse as IPs,
//! aliases and host names are host names, nothing is given to two nodes).

use std::collections::BTreeMap;
use std::net::IpAddr;

use node_contract::message::{MASTER_ALIAS, Manifest, ManifestNode};

use super::error::FilesError;

/// A manifest node as the files see it.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    /// The node.
    pub node: &'a ManifestNode,
    /// Whether it is the master (which also answers to `deeplearning-master`).
    pub is_master: bool,
    /// Its host name's first label, when no other node of the manifest has
    /// that first label or that name (two nodes never share a name in
    /// `/etc/hosts` or the known hosts).
    pub short_name: Option<&'a str>,
}

impl<'a> Node<'a> {
    /// The names this node answers to besides its alias (and
    /// `deeplearning-master`) and its IP: the host name the metadata gave
    /// (`ip-10-0-1-5.ec2.internal`), then its short name, each only when it
    /// adds a name.
    pub fn host_names(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = Vec::new();
        for name in [Some(self.node.hostname.as_str()), self.short_name].into_iter().flatten() {
            let taken = name == self.node.alias || name == MASTER_ALIAS || name == self.node.private_ip;
            if !name.is_empty() && !taken && !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }
}

/// The first label of a node's host name (`ip-10-0-1-5` of
/// `ip-10-0-1-5.ec2.internal`: what `hostname` prints on Ubuntu images and
/// what users copy into host files); none for a one-label name or an IP.
fn first_label(hostname: &str) -> Option<&str> {
    if hostname.parse::<IpAddr>().is_ok() {
        return None;
    }
    hostname.split_once('.').map(|(short, _)| short).filter(|s| !s.is_empty())
}

/// The manifest's nodes, master first, then by index, each checked.
pub fn nodes(manifest: &Manifest) -> Result<Vec<Node<'_>>, FilesError> {
    if manifest.node(&manifest.master).is_none() {
        return Err(FilesError::MasterNotInManifest {
            master: manifest.master.clone(),
            generation: manifest.generation,
        });
    }
    // A short name is given only when it names one node and nothing else.
    let mut shorts: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &manifest.nodes {
        if let Some(short) = first_label(&n.hostname) {
            *shorts.entry(short).or_default() += 1;
        }
    }
    let names: std::collections::BTreeSet<&str> =
        manifest.nodes.iter().flat_map(|n| [n.alias.as_str(), n.hostname.as_str(), n.private_ip.as_str()]).collect();
    // The order of the workers file, the hostfile and `trainer`'s ranks.
    let nodes: Vec<Node<'_>> = node_contract::files::workers::in_order(manifest)
        .into_iter()
        .map(|n| Node {
            node: n,
            is_master: n.instance_id == manifest.master,
            short_name: first_label(&n.hostname).filter(|s| shorts[s] == 1 && !names.contains(s)),
        })
        .collect();
    for n in &nodes {
        check_node(n.node)?;
    }
    unique(manifest)?;
    Ok(nodes)
}

/// Refuses a manifest in which two nodes share an index, alias, address,
/// host name or instance id. One pass with a set per field: a manifest of
/// a thousand nodes is checked in microseconds.
fn unique(manifest: &Manifest) -> Result<(), FilesError> {
    use std::borrow::Cow;
    type Field = (&'static str, for<'a> fn(&'a ManifestNode) -> Cow<'a, str>);
    let fields: [Field; 5] = [
        ("index", |n| Cow::Owned(n.index.to_string())),
        ("alias", |n| Cow::Borrowed(&n.alias)),
        ("private_ip", |n| Cow::Borrowed(&n.private_ip)),
        ("hostname", |n| Cow::Borrowed(&n.hostname)),
        ("instance_id", |n| Cow::Borrowed(&n.instance_id)),
    ];
    for (field, value_of) in fields {
        let mut seen: std::collections::HashMap<Cow<'_, str>, &str> =
            std::collections::HashMap::with_capacity(manifest.nodes.len());
        for n in &manifest.nodes {
            let value = value_of(n);
            // A node without a host name has nothing to clash.
            if value.is_empty() {
                continue;
            }
            if let Some(first) = seen.get(&value) {
                return Err(FilesError::Duplicate {
                    generation: manifest.generation,
                    field,
                    value: value.into_owned(),
                    first: (*first).to_owned(),
                    second: n.instance_id.clone(),
                });
            }
            seen.insert(value, &n.instance_id);
        }
    }
    Ok(())
}

fn check_node(n: &ManifestNode) -> Result<(), FilesError> {
    let bad = |field: &'static str, value: &str, reason: &'static str| FilesError::BadNode {
        node: n.instance_id.clone(),
        field,
        value: value.to_owned(),
        reason,
    };
    if n.private_ip.parse::<IpAddr>().is_err() {
        return Err(bad("private_ip", &n.private_ip, "not an IP address"));
    }
    if !is_host_name(&n.alias) {
        return Err(bad("alias", &n.alias, "not a host name"));
    }
    if !n.hostname.is_empty() && !is_host_name(&n.hostname) {
        return Err(bad("hostname", &n.hostname, "not a host name"));
    }
    Ok(())
}

/// Letters, digits, `-`, `.` and `_` (seen in some private DNS setups), not
/// starting with `-` or `.`: anything else could break or inject into
/// `/etc/hosts` and known hosts lines.
fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && !s.starts_with(['-', '.'])
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}
