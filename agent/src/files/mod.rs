//! What a manifest means on disk: the files every node ends with
//! (docs/ARCHITECTURE.md, "Files every node ends with"), written atomically and idempotently under a root
//! directory (`/` in production, a temp dir in tests; every path is
//! `root.join(<path without the leading />)`).
//!
//! | File | Module | Why |
//! |------|--------|-----|
//! | `/etc/hosts` (managed block) | [`hosts`] | aliases `deeplearning-workerN` and `deeplearning-master` resolve on every node |
//! | `/etc/ssh/ssh_known_hosts` (managed block) | [`known_hosts`] | SSH between nodes verifies host keys; host key checking stays on |
//! | `/etc/fstab` (managed block) | [`efs`] | EFS is mounted again after a reboot |
//! | `/opt/deeplearning/workers` | [`workers`] | one alias per line, master first (`$DEEPLEARNING_WORKERS_PATH`, MXNet `launch.py -H`) |
//! | `/opt/deeplearning/hostfile` | [`hostfile`] | `alias slots=N` for mpirun, Horovod, DeepSpeed |
//! | `/etc/profile.d/deeplearning.sh` | [`profile`] | `DEEPLEARNING_*`, `EFS_MOUNT` and the NCCL/EFA environment ([`crate::fabric`]) in every login shell |
//! | `~user/.ssh/authorized_keys` (managed block) | [`authorized_keys`] | the master reaches every node with the cluster key |
//! | `~user/.ssh/id_ed25519_deeplearning{,.pub}`, `~user/.ssh/config` (managed block), master only | [`ssh_client`] | the master's side of that: the key, and `ssh` to any node's alias, IP or host name uses it with strict host key checking |
//! | `/var/lib/deeplearning/cluster_key`, master only | [`cluster_key`] | the cluster key, created once and kept across restarts |
//! | `/var/lib/deeplearning/state.json` | [`state`] | the applied generation, for restarts and for `trainer` |
//! | `/var/lib/deeplearning/interruption.json` | [`notice`] | the interruption notice EC2 gave this node, for `trainer` |
//! | `$EFS_MOUNT/deeplearning/hosts.log` | [`host_log`] | one line per membership change, shared by all nodes (and `<generation> SLOW <ip> <unix-nanos> <fraction>` per node the network gate found slow) |
//! | `/var/lib/deeplearning/network-check.json`, master only | [`network_check_path`] | the network gate's last verdict, for `trainer doctor` |
//!
//! The first eight rows come from [`plan`]: a pure, deterministic function
//! of the manifest, this node's instance id and its config. [`render`] shows
//! what the files would hold (merging our blocks into the current content of
//! shared files), and [`apply`] writes what changed ([`atomic`]: temp file,
//! fsync, rename, in place only when the target is a mount point). The cluster
//! key, the state file, the host log and the EFS mount are written by the
//! runner through their own modules.
//!
//! The default user's files are planned as `~user/...` paths because [`plan`]
//! sees no file system: [`render`] and [`apply`] resolve the home directory
//! from `<root>/etc/passwd` (else `/home/<user>`, see [`passwd`]). Files with
//! an owner are chowned to the user's uid and gid from that passwd, and so is
//! their directory (`~/.ssh`, mode 0700); a user missing from passwd gets
//! root-owned files and a warning.
//!
//! Values from the manifest arrive over SQS, so they are checked before they
//! go into a file: IPs parse as IPs, aliases and host names are host names,
//! SSH keys parse as OpenSSH public keys. A bad value is an error that names
//! the node, and nothing is written.

pub mod atomic;
pub mod authorized_keys;
pub mod cluster_key;
pub mod efs;
pub mod host_log;
pub mod hostfile;
pub mod hosts;
pub mod known_hosts;
pub mod managed_block;
pub mod notice;
pub mod passwd;
pub mod profile;
pub mod ssh_client;
pub mod state;
pub mod workers;

use std::collections::BTreeMap;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use node_contract::NodeConfig;

use crate::fabric::Variable;
use node_contract::message::{MASTER_ALIAS, Manifest, ManifestNode};

/// The files for one manifest as seen by one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// In the order they are written.
    pub files: Vec<PlannedFile>,
}

/// One file of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFile {
    /// Absolute as on the node (`/etc/hosts`), or `~user/...` for a file in a
    /// user's home, resolved against `<root>/etc/passwd` when rendered.
    pub path: PathBuf,
    /// What goes in it.
    pub content: Content,
    /// Permission bits, for example `0o644`.
    pub mode: u32,
    /// The owning user's name; `None` for root.
    pub owner: Option<String>,
}

/// What a planned file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// The whole file is ours.
    Whole(String),
    /// The body of our managed block inside a shared file (see [`managed_block`]).
    Block(String),
}

/// A file step failed. Every variant names the file or the node.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing a file failed; the old file is intact.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Creating a directory failed.
    #[error("cannot create the directory {path}: {source}")]
    CreateDir {
        /// The directory, under the root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Changing a file's owner failed.
    #[error("cannot give {path} to {user}: {source}")]
    Chown {
        /// The file, under the root.
        path: PathBuf,
        /// The new owner.
        user: String,
        /// Why.
        source: std::io::Error,
    },
    /// This node is not in the manifest it is asked to apply.
    #[error("this node ({instance_id}) is not in manifest generation {generation}; it is not applied")]
    NotInManifest {
        /// This node.
        instance_id: String,
        /// The manifest's generation.
        generation: u64,
    },
    /// The manifest's master is not among its nodes.
    #[error("manifest generation {generation} names master {master}, which is not among its nodes")]
    MasterNotInManifest {
        /// The master's instance id.
        master: String,
        /// The manifest's generation.
        generation: u64,
    },
    /// A node's field cannot go into the files.
    #[error("node {node} has an unusable {field} {value:?}: {reason}")]
    BadNode {
        /// Instance id.
        node: String,
        /// Which field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Two nodes share what must be unique (an index, alias, address, host
    /// name or instance id): /etc/hosts would map one name to two addresses.
    #[error("manifest generation {generation} gives {field} {value:?} to two nodes, {first} and {second}")]
    Duplicate {
        /// The manifest's generation.
        generation: u64,
        /// Which field.
        field: &'static str,
        /// The shared value.
        value: String,
        /// The first node's instance id.
        first: String,
        /// The second node's instance id.
        second: String,
    },
    /// The manifest is another cluster's (a queue or file mix-up).
    #[error("manifest generation {generation} is for cluster {manifest:?}, and this node is in cluster {config:?}")]
    OtherCluster {
        /// The manifest's generation.
        generation: u64,
        /// The cluster the manifest names.
        manifest: String,
        /// The cluster of this node's config.
        config: String,
    },
    /// A node's SSH host key is not an OpenSSH public key.
    #[error("the SSH host key of {node} is unusable: {reason}")]
    BadHostKey {
        /// Alias and instance id.
        node: String,
        /// What is wrong.
        reason: String,
    },
    /// The cluster key in the manifest (or given to the master) is unusable.
    #[error("the cluster SSH key is unusable: {reason}")]
    BadClusterKey {
        /// What is wrong.
        reason: String,
    },
    /// The cluster key file could not be made or used.
    #[error(
        "the cluster key {path} {reason}; move it away to have a new one created (every node then needs the next manifest)"
    )]
    ClusterKey {
        /// The key file, under the root.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The state file is not valid JSON of the expected shape.
    #[error("the state file {path} is not valid: {source}")]
    ParseState {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// The state file has a version this build does not read.
    #[error(
        "the state file {path} has version {found:?}, and this agent reads version {supported} only; \
         remove it to have the next manifest applied from scratch"
    )]
    StateVersion {
        /// The file, under the root.
        path: PathBuf,
        /// The version in the file, if any.
        found: Option<u64>,
        /// The version this build reads.
        supported: u32,
    },
    /// The interruption notice file is not one this build can use.
    #[error("the interruption notice file {path} is not usable: {source}")]
    ParseNotice {
        /// The file, under the root.
        path: PathBuf,
        /// Why.
        source: node_contract::interruption::NoticeError,
    },
    /// Mounting EFS failed.
    #[error("cannot mount EFS at {target}: {reason}")]
    Mount {
        /// The mount point, under the root.
        target: PathBuf,
        /// Why, and what to check.
        reason: String,
    },
}

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
    let mut nodes: Vec<Node<'_>> = manifest
        .nodes
        .iter()
        .map(|n| Node {
            node: n,
            is_master: n.instance_id == manifest.master,
            short_name: first_label(&n.hostname).filter(|s| shorts[s] == 1 && !names.contains(s)),
        })
        .collect();
    nodes.sort_by(|a, b| {
        (!a.is_master, a.node.index, &a.node.instance_id).cmp(&(!b.is_master, b.node.index, &b.node.instance_id))
    });
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

/// The network gate's verdict file under `root` (the master writes it).
pub fn network_check_path(root: &Path) -> PathBuf {
    under(root, node_contract::NETWORK_CHECK_PATH)
}

/// `root.join(path)` for an absolute node path.
pub fn under(root: &Path, path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// `~user/<in_home>`: a file in a user's home, resolved when rendered.
fn home_path(user: &str, in_home: &str) -> PathBuf {
    PathBuf::from(format!("~{user}/{in_home}"))
}

/// The files for `manifest` as seen by the node `me` (instance id).
/// `cluster_private_key` is `Some` on the master only; `fabric` is this
/// node's NCCL/EFA environment for the profile ([`crate::fabric`]).
pub fn plan(
    manifest: &Manifest,
    me: &str,
    config: &NodeConfig,
    cluster_private_key: Option<&str>,
    fabric: &[Variable],
) -> Result<Plan, FilesError> {
    if manifest.cluster != config.cluster {
        return Err(FilesError::OtherCluster {
            generation: manifest.generation,
            manifest: manifest.cluster.clone(),
            config: config.cluster.clone(),
        });
    }
    let nodes = nodes(manifest)?;
    let this = manifest
        .node(me)
        .ok_or_else(|| FilesError::NotInManifest { instance_id: me.to_owned(), generation: manifest.generation })?;
    let user = config.default_user.as_str();
    let root_file = |path: &str, content: Content| PlannedFile { path: path.into(), content, mode: 0o644, owner: None };
    let user_file =
        |path: PathBuf, content: Content, mode: u32| PlannedFile { path, content, mode, owner: Some(user.to_owned()) };

    let mut files = vec![
        root_file(hosts::PATH, Content::Block(hosts::body(&nodes))),
        root_file(known_hosts::PATH, Content::Block(known_hosts::body(&nodes)?)),
        efs::fstab_file(config),
        root_file(workers::PATH, Content::Whole(workers::content(&nodes))),
        root_file(hostfile::PATH, Content::Whole(hostfile::content(&nodes))),
        root_file(profile::PATH, Content::Whole(profile::content(manifest, &nodes, this.gpus, config, fabric))),
        user_file(
            authorized_keys::path(user),
            Content::Block(authorized_keys::body(&manifest.cluster_public_key)?),
            0o600,
        ),
    ];
    if let Some(private) = cluster_private_key {
        let (private, public) = ssh_client::identity(private)?;
        files.push(user_file(ssh_client::identity_path(user), Content::Whole(private), 0o600));
        files.push(user_file(ssh_client::public_path(user), Content::Whole(public), 0o644));
        files.push(user_file(ssh_client::config_path(user), Content::Block(ssh_client::config_body(&nodes)), 0o600));
    }
    Ok(Plan { files })
}

/// What each file would contain after [`apply`] (shared files merged with
/// their current content under `root`), without writing. Paths are as on
/// the node, with `~user` resolved.
pub fn render(plan: &Plan, root: &Path) -> Result<Vec<(PathBuf, String)>, FilesError> {
    let mut users = Users::new(root);
    plan.files.iter().map(|f| render_one(f, root, &mut users)).collect()
}

fn render_one(file: &PlannedFile, root: &Path, users: &mut Users) -> Result<(PathBuf, String), FilesError> {
    let path = users.resolve(&file.path)?;
    let content = match &file.content {
        Content::Whole(text) => text.clone(),
        Content::Block(body) => {
            let on_disk = under(root, &path);
            let current = match fs::read_to_string(&on_disk) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(source) => return Err(FilesError::Read { path: on_disk, source }),
            };
            managed_block::merge(&current, body)
        }
    };
    Ok((path, content))
}

/// What the agent does with a manifest on node `me`: [`plan`] its files,
/// [`apply`] them under `root`, then record the generation in the state
/// file. Returns the paths that changed, as [`apply`] does.
pub fn apply_manifest(
    root: &Path,
    manifest: &Manifest,
    me: &str,
    config: &NodeConfig,
    cluster_private_key: Option<&str>,
    fabric: &[Variable],
) -> Result<Vec<PathBuf>, FilesError> {
    let changed = apply(&plan(manifest, me, config, cluster_private_key, fabric)?, root)?;
    let state = state::State {
        version: state::STATE_VERSION,
        instance_id: me.to_owned(),
        generation: manifest.generation,
        manifest: manifest.clone(),
    };
    state::write(root, &state)?;
    Ok(changed)
}

/// Writes what changed and returns those paths (as on the node, `~user`
/// resolved): content, mode or owner. A re-run returns an empty list and
/// touches nothing. Stops at the first error; files before it stay written
/// (each is complete on its own), the failed one keeps its old content.
pub fn apply(plan: &Plan, root: &Path) -> Result<Vec<PathBuf>, FilesError> {
    let mut users = Users::new(root);
    let mut changed = Vec::new();
    // `/etc/hosts` goes last: when another file cannot be written (a
    // read-only or full file system), the node keeps resolving the names of
    // the generation it fully applied, instead of a hosts file that is ahead
    // of its workers file and known hosts.
    // The changed files are still reported in the plan's order.
    let (hosts, others): (Vec<_>, Vec<_>) =
        plan.files.iter().enumerate().partition(|(_, f)| f.path == Path::new(hosts::PATH));
    for (position, file) in others.into_iter().chain(hosts) {
        let (path, content) = render_one(file, root, &mut users)?;
        let on_disk = under(root, &path);
        let owner = match &file.owner {
            Some(name) => users.lookup(name)?.map(|u| Owner {
                name,
                uid: u.uid,
                gid: u.gid,
                home: under(root, passwd::home(Some(u), name)),
            }),
            None => None,
        };
        let mut this_changed = false;
        if let (Some(_), Some(dir)) = (&file.owner, on_disk.parent()) {
            this_changed |= private_dir(dir, owner.as_ref())?;
        }
        this_changed |= atomic::write_if_changed(&on_disk, &content, file.mode)?;
        if let Some(owner) = &owner {
            this_changed |= chown_if_needed(&on_disk, owner)?;
        } else if let Some(name) = &file.owner {
            tracing::warn!(
                path = %path.display(),
                user = %name,
                "the user is not in etc/passwd under the root; the file stays owned by root"
            );
        }
        if this_changed {
            tracing::info!(path = %path.display(), "updated");
            changed.push((position, path));
        }
    }
    changed.sort();
    Ok(changed.into_iter().map(|(_, path)| path).collect())
}

/// Who owns a user's file, with the home directory under the root.
struct Owner<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: PathBuf,
}

/// Ensures `dir` exists, is mode 0700 and belongs to `owner` (when the user
/// is known). Missing directories inside the user's home (the home itself,
/// when the image has not created it yet) are given to the user too; those
/// outside stay root's.
fn private_dir(dir: &Path, owner: Option<&Owner<'_>>) -> Result<bool, FilesError> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor {
        if d.exists() {
            break;
        }
        missing.push(d.to_owned());
        cursor = d.parent();
    }
    let mut changed = !missing.is_empty();
    atomic::create_dirs(dir)?;
    if let Some(owner) = owner {
        for d in missing.iter().rev().filter(|d| d.starts_with(&owner.home)) {
            chown_if_needed(d, owner)?;
        }
    }
    let meta = fs::metadata(dir).map_err(|source| FilesError::Read { path: dir.to_owned(), source })?;
    if meta.permissions().mode() & 0o7777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|source| FilesError::Write { path: dir.to_owned(), source })?;
        changed = true;
    }
    if let Some(owner) = owner {
        changed |= chown_if_needed(dir, owner)?;
    }
    Ok(changed)
}

fn chown_if_needed(path: &Path, owner: &Owner<'_>) -> Result<bool, FilesError> {
    let meta = fs::metadata(path).map_err(|source| FilesError::Read { path: path.to_owned(), source })?;
    if (meta.uid(), meta.gid()) == (owner.uid, owner.gid) {
        return Ok(false);
    }
    std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid)).map_err(|source| FilesError::Chown {
        path: path.to_owned(),
        user: owner.name.to_owned(),
        source,
    })?;
    Ok(true)
}

/// Users read from `<root>/etc/passwd`, once per render or apply.
struct Users<'a> {
    root: &'a Path,
    known: BTreeMap<String, Option<passwd::User>>,
}

impl<'a> Users<'a> {
    fn new(root: &'a Path) -> Self {
        Users { root, known: BTreeMap::new() }
    }

    fn lookup(&mut self, name: &str) -> Result<Option<&passwd::User>, FilesError> {
        if !self.known.contains_key(name) {
            let user = passwd::lookup(self.root, name)?;
            self.known.insert(name.to_owned(), user);
        }
        Ok(self.known.get(name).and_then(Option::as_ref))
    }

    /// `~user/rest` to `<home>/rest`; other paths as they are.
    fn resolve(&mut self, path: &Path) -> Result<PathBuf, FilesError> {
        let text = path.to_string_lossy();
        let Some(rest) = text.strip_prefix('~') else { return Ok(path.to_owned()) };
        let (name, in_home) = rest.split_once('/').unwrap_or((rest, ""));
        let home = passwd::home(self.lookup(name)?, name);
        Ok(if in_home.is_empty() { home } else { home.join(in_home) })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::MetadataExt;

    use node_contract::Role;
    use node_contract::message::worker_alias;

    use super::*;

    /// A deterministic OpenSSH public key line.
    pub(crate) fn host_key(seed: u8) -> String {
        let key = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[seed; 32]));
        format!("{} root@node{seed}", key.public_key().to_openssh().unwrap())
    }

    /// A deterministic OpenSSH private key.
    pub(crate) fn cluster_private_key() -> String {
        let mut key = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[42; 32]));
        key.set_comment("deeplearning-cluster");
        key.to_openssh(ssh_key::LineEnding::LF).unwrap().to_string()
    }

    /// A worker's node config: the cluster testkit's master config without
    /// what only the master gets.
    pub(crate) fn config() -> NodeConfig {
        NodeConfig {
            role: Role::Worker,
            worker_group: None,
            signals: None,
            ..crate::cluster::testkit::config(30, false)
        }
    }

    /// A p4d.24xlarge's NCCL/EFA environment, as the runner makes it.
    pub(crate) fn fabric() -> Vec<Variable> {
        let efa = node_contract::Efa { rdma_instance_types: vec!["p4d.24xlarge".into()] };
        crate::fabric::environment(Some(&efa), Some("p4d.24xlarge"), Some("ens32"))
    }

    fn node(index: u32, gpus: u32) -> ManifestNode {
        let ip = format!("10.0.0.{}", 4 + index);
        ManifestNode {
            index,
            alias: worker_alias(index),
            instance_id: format!("i-000000000000000{index}"),
            hostname: format!("ip-{}.ec2.internal", ip.replace('.', "-")),
            private_ip: ip,
            gpus,
            ssh_host_key: host_key(index as u8),
        }
    }

    /// Three nodes, listed out of order (the plan sorts them): the master
    /// (index 1, 8 GPUs), worker 3 (no GPUs) and worker 2 (4 GPUs).
    pub(crate) fn manifest() -> Manifest {
        let private = ssh_key::PrivateKey::from_openssh(cluster_private_key()).unwrap();
        Manifest {
            cluster: "demo".into(),
            generation: 3,
            master: "i-0000000000000001".into(),
            nodes: vec![node(1, 8), node(3, 0), node(2, 4)],
            cluster_public_key: private.public_key().to_openssh().unwrap(),
        }
    }

    /// A root with a passwd and an image's /etc/hosts and fstab.
    fn image_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("etc")).unwrap();
        fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1001:Ubuntu:/home/ubuntu:/bin/bash\n",
        )
        .unwrap();
        fs::write(root.path().join("etc/hosts"), "127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n").unwrap();
        fs::write(root.path().join("etc/fstab"), "LABEL=cloudimg-rootfs / ext4 discard,errors=remount-ro 0 1\n")
            .unwrap();
        fs::create_dir_all(root.path().join("home/ubuntu/.ssh")).unwrap();
        fs::write(root.path().join("home/ubuntu/.ssh/authorized_keys"), "ssh-ed25519 AAAAexisting user@laptop\n")
            .unwrap();
        root
    }

    fn rendered(plan: &Plan, root: &Path) -> String {
        render(plan, root)
            .unwrap()
            .into_iter()
            .zip(&plan.files)
            .map(|((path, content), f)| {
                let owner = f.owner.as_deref().unwrap_or("root");
                // A test key, but a private key in a snapshot would trip secret scanners.
                let content = if content.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") {
                    assert_eq!(content, cluster_private_key());
                    "<the cluster private key>\n".to_owned()
                } else {
                    content
                };
                format!("==> {} ({:o}, {owner}) <==\n{content}", path.display(), f.mode)
            })
            .collect()
    }

    #[test]
    fn plan_from_the_masters_view() {
        let root = image_root();
        let plan = plan(&manifest(), "i-0000000000000001", &config(), Some(&cluster_private_key()), &fabric()).unwrap();
        insta::assert_snapshot!(rendered(&plan, root.path()));
    }

    #[test]
    fn plan_from_a_workers_view() {
        let root = image_root();
        let plan = plan(&manifest(), "i-0000000000000003", &config(), None, &fabric()).unwrap();
        assert!(plan.files.iter().all(|f| !f.path.to_string_lossy().contains("id_ed25519")));
        insta::assert_snapshot!(rendered(&plan, root.path()));
    }

    #[test]
    fn plan_is_deterministic_and_independent_of_node_order() {
        let m = manifest();
        let mut shuffled = m.clone();
        shuffled.nodes.reverse();
        let a = plan(&m, "i-0000000000000002", &config(), None, &fabric()).unwrap();
        let b = plan(&shuffled, "i-0000000000000002", &config(), None, &fabric()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, plan(&m, "i-0000000000000002", &config(), None, &fabric()).unwrap());
    }

    #[test]
    fn apply_writes_owns_and_then_changes_nothing() {
        let root = image_root();
        let p = plan(&manifest(), "i-0000000000000001", &config(), Some(&cluster_private_key()), &fabric()).unwrap();
        let changed = apply(&p, root.path()).unwrap();
        let expected: Vec<PathBuf> = render(&p, root.path()).unwrap().into_iter().map(|(path, _)| path).collect();
        assert_eq!(changed, expected, "every file is new or changed on the first run");
        for (path, content) in render(&p, root.path()).unwrap() {
            assert_eq!(fs::read_to_string(under(root.path(), &path)).unwrap(), content, "{}", path.display());
        }

        let ssh = root.path().join("home/ubuntu/.ssh");
        let meta = |p: &Path| fs::metadata(p).unwrap();
        assert_eq!(meta(&ssh).permissions().mode() & 0o7777, 0o700);
        assert_eq!((meta(&ssh).uid(), meta(&ssh).gid()), (1000, 1001));
        for name in ["authorized_keys", "id_ed25519_deeplearning", "config"] {
            let m = meta(&ssh.join(name));
            assert_eq!((m.uid(), m.gid(), m.permissions().mode() & 0o7777), (1000, 1001, 0o600), "{name}");
        }
        assert_eq!(meta(&ssh.join("id_ed25519_deeplearning.pub")).permissions().mode() & 0o7777, 0o644);
        let hosts = root.path().join("etc/hosts");
        assert_eq!((meta(&hosts).uid(), meta(&hosts).permissions().mode() & 0o7777), (0, 0o644));
        let keys = fs::read_to_string(ssh.join("authorized_keys")).unwrap();
        assert!(keys.starts_with("ssh-ed25519 AAAAexisting user@laptop\n"), "the user's own key stays: {keys}");

        // A re-run changes nothing, not even modification times.
        let all: Vec<PathBuf> = expected.iter().map(|p| under(root.path(), p)).chain([ssh.clone()]).collect();
        let stamps = |paths: &[PathBuf]| -> Vec<(u64, i64, i64)> {
            paths.iter().map(|p| (meta(p).ino(), meta(p).mtime(), meta(p).mtime_nsec())).collect()
        };
        let before = stamps(&all);
        assert_eq!(apply(&p, root.path()).unwrap(), Vec::<PathBuf>::new());
        assert_eq!(stamps(&all), before);

        // A new generation changes only what depends on it.
        let mut next = manifest();
        next.generation = 4;
        next.nodes.retain(|n| n.index != 3);
        let p = plan(&next, "i-0000000000000001", &config(), Some(&cluster_private_key()), &fabric()).unwrap();
        let changed = apply(&p, root.path()).unwrap();
        let changed: Vec<&str> = changed.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            changed,
            [
                "/etc/hosts",
                "/etc/ssh/ssh_known_hosts",
                "/opt/deeplearning/workers",
                "/opt/deeplearning/hostfile",
                "/etc/profile.d/deeplearning.sh",
                "/home/ubuntu/.ssh/config"
            ]
        );
        assert!(!fs::read_to_string(&hosts).unwrap().contains("deeplearning-worker3"));
        let ssh_config = fs::read_to_string(root.path().join("home/ubuntu/.ssh/config")).unwrap();
        assert!(!ssh_config.contains("10.0.0.7"), "the node that left keeps the cluster key: {ssh_config}");
    }

    #[test]
    fn a_user_missing_from_passwd_gets_default_home_and_root_owned_files() {
        let root = tempfile::tempdir().unwrap();
        let mut c = config();
        c.default_user = "ec2-user".into();
        let p = plan(&manifest(), "i-0000000000000002", &c, None, &fabric()).unwrap();
        let changed = apply(&p, root.path()).unwrap();
        assert!(changed.contains(&PathBuf::from("/home/ec2-user/.ssh/authorized_keys")), "{changed:?}");
        let m = fs::metadata(root.path().join("home/ec2-user/.ssh/authorized_keys")).unwrap();
        assert_eq!((m.uid(), m.permissions().mode() & 0o7777), (0, 0o600));
        let m = fs::metadata(root.path().join("home/ec2-user/.ssh")).unwrap();
        assert_eq!((m.uid(), m.permissions().mode() & 0o7777), (0, 0o700));
        assert_eq!(apply(&p, root.path()).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_home_that_did_not_exist_is_created_for_the_user() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("etc")).unwrap();
        fs::write(root.path().join("etc/passwd"), "ubuntu:x:1000:1001::/srv/ubuntu:/bin/bash\n").unwrap();
        let p = plan(&manifest(), "i-0000000000000002", &config(), None, &fabric()).unwrap();
        apply(&p, root.path()).unwrap();
        let home = fs::metadata(root.path().join("srv/ubuntu")).unwrap();
        assert_eq!((home.uid(), home.gid()), (1000, 1001));
        assert_eq!(fs::metadata(root.path().join("srv")).unwrap().uid(), 0, "outside the home stays root's");
    }

    #[test]
    fn unusable_manifests_are_errors_naming_the_node() {
        let c = config();
        // (case, how the manifest is spoiled, this node, what the error says)
        type Edit = fn(&mut Manifest);
        let cases: [(&str, Edit, &str, &str); 13] = [
            (
                "another cluster",
                |m| m.cluster = "other".into(),
                "i-0000000000000001",
                "is for cluster \"other\", and this node is in cluster \"demo\"",
            ),
            (
                "two nodes, one index",
                |m| m.nodes[2].index = m.nodes[1].index,
                "i-0000000000000001",
                "gives index \"3\" to two nodes, i-0000000000000003 and i-0000000000000002",
            ),
            (
                "two nodes, one alias",
                |m| m.nodes[2].alias = m.nodes[1].alias.clone(),
                "i-0000000000000001",
                "gives alias \"deeplearning-worker3\" to two nodes",
            ),
            (
                "two nodes, one address",
                |m| m.nodes[2].private_ip = m.nodes[0].private_ip.clone(),
                "i-0000000000000001",
                "gives private_ip \"10.0.0.5\" to two nodes",
            ),
            (
                "two nodes, one host name",
                |m| m.nodes[2].hostname = m.nodes[0].hostname.clone(),
                "i-0000000000000001",
                "gives hostname",
            ),
            ("me missing", |_| {}, "i-nobody", "this node (i-nobody) is not in manifest generation 3"),
            (
                "master missing",
                |m| m.master = "i-gone".into(),
                "i-0000000000000002",
                "names master i-gone, which is not among its nodes",
            ),
            (
                "bad host key",
                |m| m.nodes[2].ssh_host_key = "ssh-ed25519 garbage".into(),
                "i-0000000000000001",
                "the SSH host key of deeplearning-worker2 (i-0000000000000002) is unusable",
            ),
            (
                "empty host key",
                |m| m.nodes[1].ssh_host_key = String::new(),
                "i-0000000000000001",
                "deeplearning-worker3 (i-0000000000000003) is unusable: the key is empty",
            ),
            (
                "bad ip",
                |m| m.nodes[1].private_ip = "10.0.0.999".into(),
                "i-0000000000000001",
                "node i-0000000000000003 has an unusable private_ip \"10.0.0.999\"",
            ),
            (
                "hostname with a newline",
                |m| m.nodes[1].hostname = "x\n10.6.6.6 evil".into(),
                "i-0000000000000001",
                "node i-0000000000000003 has an unusable hostname",
            ),
            (
                "alias with a space",
                |m| m.nodes[0].alias = "a b".into(),
                "i-0000000000000001",
                "node i-0000000000000001 has an unusable alias",
            ),
            (
                "bad cluster key",
                |m| m.cluster_public_key = "nope".into(),
                "i-0000000000000001",
                "the cluster SSH key is unusable",
            ),
        ];
        for (case, edit, me, needle) in cases {
            let mut m = manifest();
            edit(&mut m);
            let e = plan(&m, me, &c, None, &fabric()).unwrap_err().to_string();
            assert!(e.contains(needle), "{case}: {e:?} lacks {needle:?}");
        }
        let e = plan(&manifest(), "i-0000000000000001", &c, Some("not a key"), &fabric()).unwrap_err();
        assert!(matches!(e, FilesError::BadClusterKey { .. }), "{e:?}");
    }

    #[test]
    fn a_failed_apply_keeps_the_old_file() {
        // /opt is a file, so /opt/deeplearning cannot be created: the error names it,
        // and /etc/hosts, written last, is untouched.
        let root = image_root();
        let hosts_before = fs::read(root.path().join("etc/hosts")).unwrap();
        fs::write(root.path().join("opt"), "in the way").unwrap();
        let p = plan(&manifest(), "i-0000000000000002", &config(), None, &fabric()).unwrap();
        let e = apply(&p, root.path()).unwrap_err();
        assert!(matches!(&e, FilesError::CreateDir { path, .. } if path.ends_with("opt/deeplearning")), "{e:?}");
        assert_eq!(fs::read(root.path().join("etc/hosts")).unwrap(), hosts_before);
        // Once the way is clear, the next apply writes everything.
        fs::remove_file(root.path().join("opt")).unwrap();
        apply(&p, root.path()).unwrap();
        let hosts = fs::read_to_string(root.path().join("etc/hosts")).unwrap();
        assert!(hosts.starts_with("127.0.0.1 localhost\n") && hosts.contains("deeplearning-worker3"), "{hosts}");
    }

    #[test]
    fn apply_through_a_bind_mounted_etc_hosts() {
        // As in a container (and the network-namespace tests): /etc/hosts is a
        // bind mount, so rename onto it fails with EBUSY and apply rewrites it in place.
        let root = image_root();
        let source = root.path().join("hosts.outside");
        fs::write(&source, "127.0.0.1 localhost\n").unwrap();
        let hosts = root.path().join("etc/hosts");
        let Some(()) = atomic::tests::try_mount(&["--bind", source.to_str().unwrap(), hosts.to_str().unwrap()]) else {
            return;
        };
        let _mounted = atomic::tests::Mounted(hosts.clone());
        let p = plan(&manifest(), "i-0000000000000002", &config(), None, &fabric()).unwrap();
        let changed = apply(&p, root.path()).unwrap();
        assert_eq!(changed[0], PathBuf::from("/etc/hosts"));
        let outside = fs::read_to_string(&source).unwrap();
        assert!(outside.starts_with("127.0.0.1 localhost\n# BEGIN deeplearning-cluster"), "{outside}");
        assert!(outside.contains("10.0.0.7 deeplearning-worker3 ip-10-0-0-7.ec2.internal ip-10-0-0-7\n"), "{outside}");
        assert_eq!(apply(&p, root.path()).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn render_merges_with_content_on_disk_without_writing() {
        let root = image_root();
        let p = plan(&manifest(), "i-0000000000000002", &config(), None, &fabric()).unwrap();
        let out = render(&p, root.path()).unwrap();
        let (path, hosts) = &out[0];
        assert_eq!(path, Path::new("/etc/hosts"));
        assert!(hosts.starts_with("127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n# BEGIN deeplearning-cluster"));
        assert_eq!(
            fs::read_to_string(root.path().join("etc/hosts")).unwrap(),
            "127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n"
        );
        assert!(!root.path().join("opt").exists());
    }
}
