//! A simulated node: a network namespace of a [`Network`], a root directory
//! (what `agent --root` writes under), and its own metadata server, plus
//! the agent run inside the namespace as on an instance.
//!
//! The root directory holds what the agent reads from a real instance:
//! `etc/passwd` and `etc/group` with `ubuntu`, `home/ubuntu`, `etc/hosts`,
//! `etc/resolv.conf`, `etc/ssh/ssh_host_ed25519_key{,.pub}` (ssh-keygen) and
//! `proc/sys/kernel/random/boot_id`, and `proc/stat` with the node's boot
//! time (`btime`: when its root was made). It lives under `/var/lib/dl-e2e`
//! (root-owned, 0755) rather than `/tmp`, because sshd's `StrictModes`
//! refuses keys below a world-writable directory.
//!
//! Commands run as `ip netns exec NS unshare --mount --uts sh -c ...`: in
//! a mount namespace of their own, `ROOT/etc/hosts` and `ROOT/etc/resolv.conf`
//! are bind-mounted over `/etc/hosts` and `/etc/resolv.conf` (the system
//! resolver is unreachable in a namespace and every lookup would wait ~10 s),
//! and the hostname is the node's (`ip-10-213-K-N`). The bind mount is of the
//! file as it is at spawn time: a later rename onto `ROOT/etc/hosts`
//! replaces the directory entry, not the mounted file.

use crate::imds::{Identity, Imds, Role};
use crate::moto::{ACCOUNT, LocalAws, REGION};
use crate::netns::{Network, kill_all, run};
use crate::{Error, Result};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Where node roots are made (root-owned, 0755).
const NODES_DIR: &str = "/var/lib/dl-e2e";

/// What a node is, for [`Node::create`].
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// The instance id its metadata reports (moto's, so the SDK calls agree).
    pub instance_id: String,
    /// Its instance type.
    pub instance_type: String,
    /// Its user data (the script with the node config), if any.
    pub user_data: Option<String>,
    /// The instance profile the template gives it (name or ARN). With one,
    /// the node's metadata serves that role's credentials and its processes
    /// get no keys: they call as the role, as on EC2. Without one (a node
    /// the harness makes without a stack), they call as the harness's
    /// administrator.
    pub instance_profile: Option<String>,
}

/// How long a node's role credentials live (EC2 gives about six hours; an
/// hour is more than any test runs, and [`Node::set_credentials_lifetime`]
/// makes them rotate under a test).
pub const CREDENTIALS_SECONDS: u32 = 3600;

/// A node; its agents are killed and its root removed on drop (the
/// namespace itself belongs to the [`Network`]).
pub struct Node {
    index: usize,
    namespace: String,
    ip: Ipv4Addr,
    hostname: String,
    aws_env: Vec<(String, String)>,
    aws_endpoint: String,
    instance_profile: Option<String>,
    imds: Imds,
    root: tempfile::TempDir,
}

impl Node {
    /// Makes node `index` of `network`: its root directory and its metadata
    /// server (on the bridge address, a port of its own).
    pub fn create(network: &Network, index: usize, aws: &LocalAws, spec: NodeSpec) -> Result<Node> {
        let ip = network.node_ip(index);
        let identity = Identity {
            instance_id: spec.instance_id,
            local_ipv4: ip,
            instance_type: spec.instance_type,
            availability_zone: format!("{REGION}a"),
            region: REGION.into(),
            image_id: "ami-0e2e0e2e0e2e0e2e0".into(),
            account_id: ACCOUNT.into(),
            user_data: spec.user_data,
        };
        let hostname = identity.local_hostname().split('.').next().unwrap_or_default().to_string();
        let imds = Imds::start(SocketAddr::new(network.host_ip().into(), 0), identity)?;
        let mut aws_env = aws.env();
        if let Some(profile) = &spec.instance_profile {
            imds.set_role(Role {
                aws_endpoint: aws.endpoint(),
                instance_profile: profile.clone(),
                lifetime_seconds: CREDENTIALS_SECONDS,
            });
            // No keys: the SDK's default chain finds none in the
            // environment or in AWS files (a node has none), and takes the
            // role's from the metadata.
            aws_env.retain(|(k, _)| k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY");
            aws_env.push(("AWS_CONFIG_FILE".into(), "/dev/null".into()));
            aws_env.push(("AWS_SHARED_CREDENTIALS_FILE".into(), "/dev/null".into()));
        }
        std::fs::create_dir_all(NODES_DIR).map_err(Error::io("creating the node directory", NODES_DIR))?;
        std::fs::set_permissions(NODES_DIR, std::fs::Permissions::from_mode(0o755))
            .map_err(Error::io("chmod 0755", NODES_DIR))?;
        let root = tempfile::Builder::new()
            .prefix(&format!("{}-", network.namespace(index)))
            .tempdir_in(NODES_DIR)
            .map_err(Error::io("creating the node root", NODES_DIR))?;
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(Error::io("chmod 0755", root.path()))?;
        populate_root(root.path(), ip, &hostname)?;
        Ok(Node {
            index,
            namespace: network.namespace(index).to_string(),
            ip,
            hostname,
            aws_env,
            aws_endpoint: aws.endpoint(),
            instance_profile: spec.instance_profile.clone(),
            imds,
            root,
        })
    }

    /// Its index in the network.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Its address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Its hostname (`ip-10-213-K-N`).
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// Its root directory (`agent --root`).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Its metadata server.
    pub fn imds(&self) -> &Imds {
        &self.imds
    }

    /// The instance id its metadata reports.
    pub fn instance_id(&self) -> String {
        self.imds.identity().instance_id
    }

    /// Makes its role credentials live `seconds` (60 to 43200) from the
    /// next ones on, so that they rotate under a running agent. No-op for
    /// a node without an instance profile.
    pub fn set_credentials_lifetime(&self, seconds: u32) {
        if let Some(profile) = &self.instance_profile {
            self.imds.set_role(Role {
                aws_endpoint: self.aws_endpoint.clone(),
                instance_profile: profile.clone(),
                lifetime_seconds: seconds,
            });
        }
    }

    /// Its instance profile, if the template gave it one.
    pub fn instance_profile(&self) -> Option<&str> {
        self.instance_profile.as_deref()
    }

    /// The environment a process on this node gets: the local AWS and
    /// metadata endpoints, the region, and the administrator's keys only
    /// when the node has no instance profile (else the role's credentials
    /// come from its metadata).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = self.aws_env.clone();
        env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT".into(), self.imds.endpoint()));
        env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE".into(), "IPv4".into()));
        env
    }

    /// Adds `key=value` to [`Node::env`] for the processes started from now
    /// on (another endpoint for one service, say).
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.aws_env.retain(|(k, _)| k != key);
        self.aws_env.push((key.to_owned(), value.to_owned()));
    }

    /// A command that runs `program` on this node: in its namespace, with its
    /// own /etc/hosts, /etc/resolv.conf and hostname, and [`Node::env`].
    /// Inherited `AWS_*` variables are removed first.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace, "unshare", "--mount", "--uts", "sh", "-c"])
            .arg(
                "mount --bind \"$0/etc/hosts\" /etc/hosts && mount --bind \"$0/etc/resolv.conf\" /etc/resolv.conf \
                 && hostname \"$1\" && shift && exec \"$@\"",
            )
            .arg(self.root.path())
            .arg(&self.hostname)
            .arg(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("AWS_") {
                command.env_remove(key);
            }
        }
        command.envs(self.env());
        command
    }

    /// Starts `agent run --root ROOT --no-mount ARGS` on this node, its
    /// stdout and stderr in `ROOT/agent-<n>.log`. The agent's log filter
    /// (`AGENT_LOG`, which the agent reads; `RUST_LOG` is not) is passed on,
    /// the agent's own debug lines when unset.
    pub fn spawn_agent(&self, args: &[&str]) -> Result<AgentProcess> {
        self.spawn_agent_binary(&agent_bin()?, args)
    }

    /// [`Node::spawn_agent`] with another binary (a build of another
    /// profile, or a stand-in that records how it was started).
    pub fn spawn_agent_binary(&self, agent: &Path, args: &[&str]) -> Result<AgentProcess> {
        let mut command = self.command(agent);
        command.arg("run").arg("--root").arg(self.root.path()).arg("--no-mount").args(args);
        command.env("AGENT_LOG", std::env::var("AGENT_LOG").unwrap_or_else(|_| "info,agent=debug".into()));
        command.env("RUST_BACKTRACE", "1");
        self.spawn_logged(command, "agent")
    }

    /// Starts `command` with its output in `ROOT/<name>-<n>.log`.
    pub fn spawn_logged(&self, mut command: Command, name: &str) -> Result<AgentProcess> {
        let log = (0..)
            .map(|n| self.root.path().join(format!("{name}-{n}.log")))
            .find(|p| !p.exists())
            .expect("a free log name");
        let out = std::fs::File::create(&log).map_err(Error::io("creating a log", &log))?;
        let err = out.try_clone().map_err(Error::io("creating a log", &log))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(Error::io("starting a process on a node", &log))?;
        Ok(AgentProcess { child, log, namespace: self.namespace.clone() })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        kill_all(&self.namespace);
    }
}

/// A process started on a node; killed on drop.
pub struct AgentProcess {
    child: Child,
    log: PathBuf,
    namespace: String,
}

impl AgentProcess {
    /// Its pid (the agent's own: every wrapper execs).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status if it has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().map_err(Error::io("waiting for a node process", &self.log))
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `timeout` for its log to contain `text`.
    pub fn wait_for_log(&self, text: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(text) {
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{text:?} in {} (log so far:\n{})", self.log.display(), self.log()),
                    seconds: timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Sends SIGTERM (a clean stop).
    pub fn terminate(&self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).output();
    }

    /// SIGKILLs it and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The namespace it runs in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The agent binary: `AGENT_BIN`, else `agent` in the target directory the
/// running test was built in (`<target>/debug/deps/<test>` -> `<target>/debug/agent`).
pub fn agent_bin() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("AGENT_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(Error::io("locating the test executable", "/proc/self/exe"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Error::Setup("test executable has no target directory".into()))?;
    let agent = profile_dir.join("agent");
    if !agent.exists() {
        return Err(Error::Setup(format!(
            "{} does not exist: build it with `cargo build -p agent` (same CARGO_TARGET_DIR), or set AGENT_BIN",
            agent.display()
        )));
    }
    Ok(agent)
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("creating a directory", dir))?;
    }
    std::fs::write(path, text).map_err(Error::io("writing a node file", path))
}

/// Writes the files a node's root starts with.
fn populate_root(root: &Path, ip: Ipv4Addr, hostname: &str) -> Result<()> {
    write(
        &root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n",
    )?;
    write(&root.join("etc/group"), "root:x:0:\nubuntu:x:1000:\n")?;
    write(&root.join("etc/hosts"), &format!("127.0.0.1 localhost\n{ip} {hostname}.ec2.internal {hostname}\n"))?;
    write(&root.join("etc/resolv.conf"), "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")?;
    let home = root.join("home/ubuntu");
    std::fs::create_dir_all(&home).map_err(Error::io("creating a directory", &home))?;
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map_err(Error::io("reading a random uuid", "/proc/sys/kernel/random/uuid"))?;
    write(&root.join("proc/sys/kernel/random/boot_id"), &boot_id)?;
    // The node "boots" now: the agent's formation timeline reads `btime`.
    let btime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    write(&root.join("proc/stat"), &format!("cpu  0 0 0 0 0 0 0 0 0 0\nbtime {btime}\nprocesses 1\n"))?;
    let ssh = root.join("etc/ssh");
    std::fs::create_dir_all(&ssh).map_err(Error::io("creating a directory", &ssh))?;
    let key = ssh.join("ssh_host_ed25519_key");
    let key_arg = key.to_string_lossy();
    let comment = format!("root@{hostname}");
    run("ssh-keygen", &["-q", "-t", "ed25519", "-N", "", "-C", &comment, "-f", &key_arg])
        .map_err(|e| Error::Setup(format!("generating the node's host key (is openssh-client installed?): {e}")))?;
    Ok(())
}
