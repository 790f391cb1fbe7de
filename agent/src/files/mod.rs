//! What a manifest means on disk: the files every node ends with
//! (docs/ARCHITECTURE.md, "Files every node ends with"), written atomically and idempotently under a root
//! directory (`/` in production, a temp dir in tests; every path is
//! `node_contract::files::under(root, <path>)`).
//!
//! | File | Module | Why |
//! |------|--------|-----|
//! | `/etc/hosts` (managed block) | [`hosts`] | aliases `deeplearning-workerN` and `deeplearning-master` resolve on every node |
//! | `/etc/ssh/ssh_known_hosts` (managed block) | [`known_hosts`] | SSH between nodes verifies host keys; host key checking stays on |
//! | `/etc/fstab` (managed block) | [`efs`], [`fsx`] | EFS (and FSx for Lustre) are mounted again after a reboot |
//! | `/opt/deeplearning/workers` | `node_contract::files::workers` | one alias per line, master first (`$DEEPLEARNING_WORKERS_PATH`, MXNet `launch.py -H`) |
//! | `/opt/deeplearning/hostfile` | `node_contract::files::hostfile` | `alias slots=N` for mpirun, Horovod, DeepSpeed |
//! | `/etc/profile.d/deeplearning.sh` | [`profile`] (format and quoting: `node_contract::files::profile`) | `DEEPLEARNING_*`, `EFS_MOUNT` and the NCCL/EFA environment ([`crate::fabric`]) in every login shell |
//! | `~user/.ssh/authorized_keys` (managed block) | [`authorized_keys`] | the master reaches every node with the cluster key |
//! | `~user/.ssh/id_ed25519_deeplearning{,.pub}`, `~user/.ssh/config` (managed block), master only | [`ssh_client`] | the master's side of that: the key, and `ssh` to any node's alias, IP or host name uses it with strict host key checking |
//! | `/var/lib/deeplearning/cluster_key`, master only | [`cluster_key`] | the cluster key, created once and kept across restarts |
//! | `/var/lib/deeplearning/state.json` | [`state`] | the applied generation, for restarts and for `trainer` |
//! | `/var/lib/deeplearning/interruption.json` | [`notice`] | the interruption notice EC2 gave this node, for `trainer` |
//! | `$EFS_MOUNT/deeplearning/hosts.log` | [`host_log`] | one line per membership change, shared by all nodes (and `<generation> SLOW <ip> <unix-nanos> <fraction>` per node the network gate found slow) |
//! | `/var/lib/deeplearning/network-check.json`, master only | [`network_check_path`] | the network gate's last verdict, for `trainer doctor` |
//!
//! The first eight rows come from [`plan()`]: a pure, deterministic function
//! of the manifest, this node's instance id and its config. [`render`] shows
//! what the files would hold (merging our blocks into the current content of
//! shared files), and [`apply()`] writes what changed ([`atomic`]: temp file,
//! fsync, rename, in place only when the target is a mount point). The cluster
//! key, the state file, the host log and the EFS mount are written by the
//! runner through their own modules.
//!
//! The default user's files are planned as `~user/...` paths because [`plan()`]
//! sees no file system: [`render`] and [`apply()`] resolve the home directory
//! from `<root>/etc/passwd` (else `/home/<user>`, see [`passwd`]). Files with
//! an owner are chowned to the user's uid and gid from that passwd, and so is
//! their directory (`~/.ssh`, mode 0700); a user missing from passwd gets
//! root-owned files and a warning.
//!
//! Values from the manifest arrive over SQS, so they are checked before they
//! go into a file: IPs parse as IPs, aliases and host names are host names,
//! SSH keys parse as OpenSSH public keys. A bad value is an error that names
//! the node, and nothing is written.
//!
//! Here: [`plan()`] and [`apply_manifest`]. The steps have rooms of their
//! own: [`nodes`] (the checked node list), [`plan`] (what a plan holds),
//! [`apply`] (render and write), [`paths`] (where under the root),
//! [`error`] (what failed).

pub(crate) mod apply;
pub(crate) mod atomic;
pub(crate) mod authorized_keys;
pub(crate) mod cluster_key;
pub(crate) mod efs;
pub(crate) mod error;
pub(crate) mod fsx;
pub mod host_log;
pub(crate) mod hosts;
pub(crate) mod known_hosts;
pub(crate) mod managed_block;
pub(crate) mod nodes;
pub(crate) mod notice;
pub(crate) mod passwd;
pub(crate) mod paths;
pub(crate) mod plan;
pub(crate) mod profile;
pub(crate) mod ssh_client;
pub mod state;

use std::path::{Path, PathBuf};

use node_contract::NodeConfig;
use node_contract::files::{hostfile, workers};
use node_contract::message::Manifest;

pub use apply::{apply, render};
pub use error::FilesError;
pub use nodes::{Node, nodes};
pub use paths::network_check_path;
pub use plan::{Content, Plan, PlannedFile};

use crate::fabric::Variable;

/// The planned `/etc/fstab` block: EFS's line, and FSx for Lustre's when
/// the config has one. One managed block holds both, so that writing it
/// for one (a boot's mount step, every manifest's plan) never drops the
/// other.
pub fn fstab_file(config: &NodeConfig) -> PlannedFile {
    let mut block = format!("{}\n", efs::fstab_line(config));
    if let Some(line) = fsx::fstab_line(config) {
        block.push_str(&line);
        block.push('\n');
    }
    if let Some(scratch) = &config.scratch {
        block.push_str(&efs::scratch_fstab_line(&scratch.mount));
        block.push('\n');
    }
    PlannedFile { path: PathBuf::from(efs::FSTAB_PATH), content: Content::Block(block), mode: 0o644, owner: None }
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
        fstab_file(config),
        root_file(workers::PATH, Content::Whole(workers::content(nodes.iter().map(|n| n.node.alias.as_str())))),
        root_file(
            hostfile::PATH,
            Content::Whole(hostfile::content(nodes.iter().map(|n| (n.node.alias.as_str(), n.node.gpus)))),
        ),
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

#[cfg(test)]
pub(crate) mod tests {
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use node_contract::Role;
    use node_contract::files::under;
    use node_contract::message::{ManifestNode, worker_alias};

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
