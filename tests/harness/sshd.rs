//! Several SSH hosts on one machine, for `trainer`: one network namespace
//! per host ([`Network`]), each with its own root directory holding the
//! files the agent's own code ([`agent::files::apply_manifest`])
//! writes for a manifest of these hosts, and a real sshd listening on the
//! host's address (docs/TESTING.md, "Real sshd on every host").
//!
//! Host `i` is `deeplearning-worker<i+1>` (host 0 is the master) at
//! [`Network::node_ip`]`(i)`. Its root, under `/var/lib/dl-e2e` (root-owned,
//! 0755: sshd's `StrictModes` refuses keys below a world-writable `/tmp`),
//! holds `etc/ssh/ssh_host_ed25519_key` (ssh-keygen), `etc/passwd` with
//! `root` as the cluster's default user, and what the agent writes:
//! `etc/hosts`, `etc/ssh/ssh_known_hosts`, `opt/deeplearning/{workers,hostfile}`,
//! `etc/profile.d/deeplearning.sh`, `root/.ssh/authorized_keys`, and on the
//! master the cluster key and ssh config, and the agent's state file
//! (`var/lib/deeplearning/state.json`, generation 1). `EFS_MOUNT` is one directory
//! shared by all hosts, as EFS is.
//!
//! Each sshd runs as `ip netns exec NS /usr/sbin/sshd -D -f CONFIG -E LOG`
//! with its own `ListenAddress`, `HostKey`, `PidFile`, `AuthorizedKeysFile`,
//! `UsePAM no`, `UseDNS no`, and `SetEnv TRAINER_ROOT=<root>` so the
//! `trainer` it runs reads that host's files. Commands "on" a host
//! ([`SshCluster::command`]) run in its namespace with its `etc/hosts` (a copy kept in place at `run/hosts.mounted`) bind
//! mounted over `/etc/hosts`, so the aliases resolve as on a node. In
//! sshd's mount namespace root's shell start-up files (`~/.bashrc`,
//! `~/.profile`, ...) are `/dev/null`: a remote command's shell prints
//! nothing of the test machine's own set-up.
//!
//! Drop stops the sshds; the [`Network`] then kills whatever is left in the
//! namespaces and removes them.

use crate::netns::{Network, run};
use crate::{Error, Result};
use node_contract::message::{Manifest, ManifestNode, worker_alias};
use node_contract::{Efs, Elastic, NODE_CONFIG_VERSION, NodeConfig, Queues, Role};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where host roots are made (root-owned, 0755).
const HOSTS_DIR: &str = "/var/lib/dl-e2e";
/// The sshd binary (openssh-server).
pub const SSHD: &str = "/usr/sbin/sshd";

/// One host of an [`SshCluster`].
pub struct SshHost {
    /// `deeplearning-worker<i+1>`.
    pub alias: String,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its namespace.
    pub namespace: String,
    /// Its root directory.
    pub root: PathBuf,
    sshd: Option<Child>,
}

/// Hosts with sshd, the agent's files, and a shared EFS directory.
pub struct SshCluster {
    /// The hosts, master first.
    pub hosts: Vec<SshHost>,
    /// Every host's manifest entry (host `i` at `i`), members or not.
    nodes: Vec<ManifestNode>,
    /// The manifest applied last.
    manifest: Manifest,
    /// The cluster key's private half (the master's).
    private_key: String,
    // Dropped after the hosts (field order): it kills what is left in the namespaces.
    network: Network,
    dir: tempfile::TempDir,
}

/// The instance id of host `i` in the test manifest.
fn instance_id(i: usize) -> String {
    format!("i-0e2e{i:012}")
}

impl SshCluster {
    /// Makes `gpus.len()` hosts (host `i` reports `gpus[i]` GPUs), all
    /// members of generation 1, and starts their sshds.
    pub fn start(gpus: &[u32]) -> Result<SshCluster> {
        Self::start_with_members(gpus, &(0..gpus.len()).collect::<Vec<_>>())
    }

    /// Like [`start`](Self::start), but only the hosts in `members` (the
    /// master, 0, among them) are in generation 1; the others run sshd and
    /// join when [`publish`](Self::publish) names them.
    pub fn start_with_members(gpus: &[u32], members: &[usize]) -> Result<SshCluster> {
        if !Path::new(SSHD).exists() {
            return Err(Error::Setup(format!(
                "{SSHD} is missing: apt-get install openssh-server openssh-client (scripts/test does)"
            )));
        }
        let network = Network::create(gpus.len())?;
        std::fs::create_dir_all(HOSTS_DIR).map_err(Error::io("creating the hosts directory", HOSTS_DIR))?;
        chmod(Path::new(HOSTS_DIR), 0o755)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("ssh{}-", network.number()))
            .tempdir_in(HOSTS_DIR)
            .map_err(Error::io("creating the cluster directory", HOSTS_DIR))?;
        chmod(dir.path(), 0o755)?;
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").map_err(Error::io("creating", "/run/sshd"))?;
        chmod(Path::new("/run/sshd"), 0o755)?;
        let efs = dir.path().join("efs");
        std::fs::create_dir_all(&efs).map_err(Error::io("creating the EFS directory", &efs))?;

        let cluster_key = dir.path().join("cluster_key");
        keygen(&cluster_key, "deeplearning-cluster")?;
        let private = read(&cluster_key)?;
        let public = read(&cluster_key.with_extension("pub"))?;

        let mut hosts = Vec::new();
        let mut nodes = Vec::new();
        for (i, gpus) in gpus.iter().enumerate() {
            let root = dir.path().join(format!("n{i}"));
            let ip = network.node_ip(i);
            let hostname = format!("ip-{}", ip.to_string().replace('.', "-"));
            populate(&root, ip, &hostname)?;
            nodes.push(ManifestNode {
                index: i as u32 + 1,
                alias: worker_alias(i as u32 + 1),
                instance_id: instance_id(i),
                private_ip: ip.to_string(),
                hostname: format!("{hostname}.ec2.internal"),
                gpus: *gpus,
                ssh_host_key: read(&root.join("etc/ssh/ssh_host_ed25519_key.pub"))?.trim().to_owned(),
            });
            hosts.push(SshHost {
                alias: worker_alias(i as u32 + 1),
                ip,
                namespace: network.namespace(i).to_owned(),
                root,
                sshd: None,
            });
        }
        let manifest = Manifest {
            cluster: "e2e".into(),
            generation: 0,
            master: instance_id(0),
            nodes: Vec::new(),
            cluster_public_key: public.trim().to_owned(),
        };
        let mut cluster = SshCluster { hosts, nodes, manifest, private_key: private, network, dir };
        for i in 0..cluster.hosts.len() {
            cluster.start_sshd(i)?;
        }
        cluster.publish(members)?;
        Ok(cluster)
    }

    /// Publishes the next membership generation with the hosts in `members`
    /// (indices into [`hosts`](Self::hosts)), as the agents would: every
    /// member's files and state are written by the agent's own code
    /// ([`agent::files`]), and the master appends the ADDED/REMOVED lines to
    /// the host log on EFS. Hosts that are not members keep what they had.
    /// Returns the new generation.
    pub fn publish(&mut self, members: &[usize]) -> Result<u64> {
        if !members.contains(&0) {
            return Err(Error::Setup("the master (host 0) is a member of every generation".into()));
        }
        let mut next = self.manifest.clone();
        next.generation += 1;
        next.nodes =
            self.nodes.iter().enumerate().filter(|(i, _)| members.contains(i)).map(|(_, n)| n.clone()).collect();
        let efs = self.efs();
        for &i in members {
            let config = config(if i == 0 { Role::Master } else { Role::Worker }, &efs);
            let key = (i == 0).then_some(self.private_key.as_str());
            // Every host's address is on `eth0` of its namespace (netns.rs).
            let fabric = agent::fabric::environment(config.efa.as_ref(), None, Some("eth0"));
            agent::files::apply_manifest(&self.hosts[i].root, &next, &instance_id(i), &config, key, &fabric)
                .map_err(|e| Error::Setup(format!("writing host {i}'s files: {e}")))?;
            // The node config the user data leaves on every node (trainer's
            // rendezvous reads the EFS mount and prepare-data script from it).
            let json = serde_json::to_string_pretty(&config)
                .map_err(|e| Error::Setup(format!("serialising host {i}'s node config: {e}")))?;
            write(&agent::config::path_under(&self.hosts[i].root), &json)?;
            // Commands on a host see its /etc/hosts through a bind mount of
            // this file, which must stay the same inode (the agent's atomic
            // rename would leave a running command's mount on the old one):
            // copy the new content into it in place.
            let root = &self.hosts[i].root;
            write(&root.join("run/hosts.mounted"), &read(&root.join("etc/hosts"))?)?;
        }
        let previous = (self.manifest.generation > 0).then_some(&self.manifest);
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        for line in agent::cluster::membership::host_log_lines(previous, &next, now_ms as u64, &Default::default()) {
            agent::files::host_log::append(Path::new("/"), &efs.to_string_lossy(), &line)
                .map_err(|e| Error::Setup(format!("appending to the host log: {e}")))?;
        }
        self.manifest = next;
        Ok(self.manifest.generation)
    }

    /// The host log the master keeps on EFS.
    pub fn host_log(&self) -> String {
        std::fs::read_to_string(agent::files::host_log::path(Path::new("/"), &self.efs().to_string_lossy()))
            .unwrap_or_default()
    }

    /// The network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The shared EFS directory (every host's `EFS_MOUNT`).
    pub fn efs(&self) -> PathBuf {
        self.dir.path().join("efs")
    }

    /// The master's root.
    pub fn master_root(&self) -> &Path {
        &self.hosts[0].root
    }

    /// (Re)starts host `i`'s sshd and waits until it accepts connections.
    pub fn start_sshd(&mut self, i: usize) -> Result<()> {
        self.stop_sshd(i);
        let host = &mut self.hosts[i];
        let root = host.root.clone();
        let config = root.join("etc/ssh/sshd_config");
        let text = format!(
            "ListenAddress {ip}:22\nHostKey {root}/etc/ssh/ssh_host_ed25519_key\nPidFile {root}/run/sshd.pid\n\
             AuthorizedKeysFile {root}/root/.ssh/authorized_keys\nUsePAM no\nUseDNS no\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             SetEnv TRAINER_ROOT={root}\n",
            ip = host.ip,
            root = root.display()
        );
        write(&config, &text)?;
        std::fs::create_dir_all(root.join("run")).map_err(Error::io("creating", root.join("run")))?;
        let log = root.join("sshd.log");
        // sshd, and so every command it runs for `trainer`, sees the host's
        // own /etc/hosts (the aliases resolve there as on a node), and root's
        // shell start-up files are empty there, as on a fresh node: the test
        // machine's own (a pyenv `rehash` in ~/.bashrc, say) would otherwise
        // print into every rank's output.
        let mounted = root.join("run/hosts.mounted");
        if !mounted.exists() {
            write(&mounted, &read(&root.join("etc/hosts"))?)?;
        }
        let child = Command::new("ip")
            .args(["netns", "exec", &host.namespace, "unshare", "--mount", "sh", "-c"])
            .arg(
                "mount --bind \"$0\" /etc/hosts || exit 1
                 for f in ~root/.bashrc ~root/.bash_profile ~root/.bash_login ~root/.profile; do
                     if [ -e \"$f\" ]; then mount --bind /dev/null \"$f\" || exit 1; fi
                 done
                 exec \"$@\"",
            )
            .arg(&mounted)
            .args([SSHD, "-D", "-f"])
            .arg(&config)
            .arg("-E")
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .map_err(Error::io("starting sshd", SSHD))?;
        host.sshd = Some(child);
        // Up when it listens: ask the kernel rather than connect (a probe would log noise).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listening = run("ip", &["netns", "exec", &host.namespace, "ss", "-Hltn", "sport = :22"])?;
            if listening.contains(&host.ip.to_string()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "sshd on {} (log: {})",
                        host.alias,
                        std::fs::read_to_string(&log).unwrap_or_default()
                    ),
                    seconds: 10,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes a Spot `instance-action` notice (terminate, `seconds_ahead`
    /// from now) into host `i`'s agent notice file, as the agent writes it
    /// when EC2 gives one (temp file, then rename). Returns the deadline in
    /// unix seconds.
    pub fn write_notice(&self, i: usize, instance_id: &str, seconds_ahead: u64) -> Result<u64> {
        use node_contract::interruption::{NOTICE_FILE_VERSION, NoticeFile, format_utc, from_instance_action};
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let deadline = now + seconds_ahead;
        let body = format!(r#"{{"action": "terminate", "time": "{}"}}"#, format_utc(deadline));
        let interruption = from_instance_action(instance_id, &body)
            .map_err(|e| Error::Unexpected { what: "an instance-action notice".into(), detail: e.to_string() })?;
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map_err(Error::io("reading the boot id", "/proc/sys/kernel/random/boot_id"))?;
        let notice = NoticeFile {
            version: NOTICE_FILE_VERSION,
            interruption,
            boot_id: boot_id.trim().to_owned(),
            noticed_unix_ms: now * 1000,
        };
        let dir = self.hosts[i].root.join("var/lib/deeplearning");
        std::fs::create_dir_all(&dir).map_err(Error::io("creating the agent state directory", &dir))?;
        let (tmp, path) = (dir.join("interruption.json.tmp"), dir.join("interruption.json"));
        std::fs::write(&tmp, notice.to_text()).map_err(Error::io("writing the notice", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(Error::io("renaming the notice", &path))?;
        Ok(deadline)
    }

    /// Stops host `i`'s sshd (its host becomes unreachable: connection refused).
    pub fn stop_sshd(&mut self, i: usize) {
        if let Some(mut child) = self.hosts[i].sshd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Gives host `i` a new host key and restarts its sshd: the known hosts
    /// the agent wrote no longer match it.
    pub fn replace_host_key(&mut self, i: usize) -> Result<()> {
        let key = self.hosts[i].root.join("etc/ssh/ssh_host_ed25519_key");
        let _ = std::fs::remove_file(&key);
        let _ = std::fs::remove_file(key.with_extension("pub"));
        keygen(&key, "root@replaced")?;
        self.start_sshd(i)
    }

    /// A command that runs `program` on the master as a user would: in its
    /// namespace, with its /etc/hosts (the aliases resolve), and the
    /// environment pointing `trainer` at the master's root and the cluster
    /// key and known hosts the agent wrote there.
    pub fn master_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let host = &self.hosts[0];
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &host.namespace, "unshare", "--mount", "sh", "-c"])
            .arg("mount --bind \"$0/run/hosts.mounted\" /etc/hosts && mount --bind \"$0/etc/resolv.conf\" /etc/resolv.conf && exec \"$@\"")
            .arg(&host.root)
            .arg(program);
        command
            .env_remove("DEEPLEARNING_WORKERS_PATH")
            .env_remove("EFS_MOUNT")
            .env("TRAINER_ROOT", &host.root)
            .env("TRAINER_SSH_IDENTITY", host.root.join("root/.ssh/id_ed25519_deeplearning"))
            .env("TRAINER_SSH_KNOWN_HOSTS", host.root.join("etc/ssh/ssh_known_hosts"));
        command
    }

    /// A command that runs `program` on the master as its default user
    /// logged in there would, with nothing but what the agent wrote: like
    /// [`master_command`](Self::master_command), and the master's
    /// `etc/ssh` (its known hosts) and root's home (`~/.ssh/config`, the
    /// cluster key) bind mounted over `/etc/ssh` and `/root`, without the
    /// `TRAINER_SSH_*` overrides. A plain `ssh HOST` there uses the agent's
    /// ssh client config and known hosts.
    pub fn master_login_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let host = &self.hosts[0];
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &host.namespace, "unshare", "--mount", "sh", "-c"])
            .arg(
                "mount --bind \"$0/run/hosts.mounted\" /etc/hosts && mount --bind \"$0/etc/resolv.conf\" /etc/resolv.conf \
                 && mount --bind \"$0/etc/ssh\" /etc/ssh && mount --bind \"$0/root\" /root && exec \"$@\"",
            )
            .arg(&host.root)
            .arg(program);
        command.env_remove("DEEPLEARNING_WORKERS_PATH").env_remove("EFS_MOUNT").env("HOME", "/root");
        command
    }

    /// Host `i`'s host name as its metadata gives it (`ip-10-213-1-11.ec2.internal`).
    pub fn hostname(&self, i: usize) -> &str {
        &self.nodes[i].hostname
    }
}

impl Drop for SshCluster {
    fn drop(&mut self) {
        for i in 0..self.hosts.len() {
            self.stop_sshd(i);
        }
    }
}

fn config(role: Role, efs: &Path) -> NodeConfig {
    NodeConfig {
        version: NODE_CONFIG_VERSION,
        cluster: "e2e".into(),
        stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/e2e/1".into(),
        stack_name: "e2e".into(),
        region: "us-east-1".into(),
        role,
        queues: Queues { master: "https://sqs/m".into(), workers: "https://sqs/w".into() },
        worker_group: None,
        efs: Efs { file_system_id: "fs-0e2e0e2e".into(), mount: efs.to_string_lossy().into_owned() },
        default_user: "root".into(),
        formation_timeout_seconds: 600,
        elastic: Elastic::default(),
        signals: None,
        efa: None,
        network_check: None,
        logs: None,
        idle: None,
        capacity_block: None,
        scratch: None,
        data: Vec::new(),
        fsx: None,
        gpu_check: None,
    }
}

/// The files a host's root starts with, before the agent's.
fn populate(root: &Path, ip: Ipv4Addr, hostname: &str) -> Result<()> {
    std::fs::create_dir_all(root).map_err(Error::io("creating a host root", root))?;
    chmod(root, 0o755)?;
    write(&root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n")?;
    write(&root.join("etc/group"), "root:x:0:\n")?;
    write(&root.join("etc/hosts"), &format!("127.0.0.1 localhost\n{ip} {hostname}.ec2.internal {hostname}\n"))?;
    write(&root.join("etc/resolv.conf"), "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")?;
    let home = root.join("root");
    std::fs::create_dir_all(&home).map_err(Error::io("creating a home", &home))?;
    chmod(&home, 0o700)?;
    keygen(&root.join("etc/ssh/ssh_host_ed25519_key"), &format!("root@{hostname}"))
}

fn keygen(path: &Path, comment: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("creating a directory", dir))?;
    }
    run("ssh-keygen", &["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", &path.to_string_lossy()])
        .map_err(|e| Error::Setup(format!("ssh-keygen (is openssh-client installed?): {e}")))?;
    Ok(())
}

fn chmod(path: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(Error::io("chmod", path))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(Error::io("reading", path))
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("creating a directory", dir))?;
    }
    std::fs::write(path, text).map_err(Error::io("writing", path))
}

/// The trainer binary: `TRAINER_BIN`, else `trainer` in the target directory
/// the running test was built in (`cargo test --workspace` builds it for
/// trainer's own CLI tests).
pub fn trainer_bin() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("TRAINER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(Error::io("locating the test executable", "/proc/self/exe"))?;
    let bin = exe.parent().and_then(Path::parent).map(|d| d.join("trainer"));
    match bin {
        Some(bin) if bin.exists() => Ok(bin),
        _ => Err(Error::Setup(
            "the trainer binary is missing: `cargo build -p trainer` (same CARGO_TARGET_DIR), or set TRAINER_BIN"
                .into(),
        )),
    }
}

/// The processes on this machine whose environment holds `TRAINER_JOB=<job>`
/// (what the supervisors give every process of a job), or whose command
/// line mentions the job: what must be gone after a job is stopped.
pub fn job_processes(job: &str) -> Vec<(u32, String)> {
    let entry = format!("TRAINER_JOB={job}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
            if zombie {
                return None;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let has = |bytes: &[u8], what: &[u8]| bytes.split(|b| *b == 0).any(|w| w == what);
            let words = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // The launcher, its ssh clients and the supervisors name the job
            // on their command line; everything the command starts inherits
            // TRAINER_JOB.
            (has(&environ, entry.as_bytes()) || words.contains(&format!("--job {job} "))).then_some((pid, words))
        })
        .collect()
}
