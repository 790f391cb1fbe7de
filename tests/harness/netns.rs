//! Several hosts on one machine: a bridge in the root namespace and one
//! network namespace per node, each with a veth to the bridge and its own
//! address, `lo` up (docs/TESTING.md, "Namespaces, the bridge and addresses").
//!
//! Each [`Network`] claims a number `k` (1..=250) unique on the machine, so
//! tests in parallel, in this process or another checkout's, do not collide:
//! bridge `dlbr<k>` with 10.213.`k`.1/24, namespaces `dl<k>n<i>` with
//! 10.213.`k`.(10+i), host-side veths `dl<k>v<i>`. The claim is a file
//! `/run/dl-e2e/net<k>` holding the owner's pid; a claim whose owner died
//! (a test killed before its `Drop`) is cleaned up and taken over.
//!
//! `Drop` kills every process in the namespaces (`ip netns del` does not),
//! then deletes the namespaces (their veths go with them) and the bridge.

use crate::{Error, Result, require_root};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const CLAIM_DIR: &str = "/run/dl-e2e";
const MAX_NETWORKS: u8 = 250;

/// A bridge and one namespace per node; removed on drop.
#[derive(Debug)]
pub struct Network {
    k: u8,
    namespaces: Vec<String>,
    claim: PathBuf,
}

/// Runs `ip` (or another command) and fails with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program).args(args).output().map_err(Error::io("running a command", program))?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("{program} {}", args.join(" ")),
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

impl Network {
    /// Creates a bridge and `nodes` namespaces.
    pub fn create(nodes: usize) -> Result<Network> {
        require_root()?;
        if nodes > 240 {
            return Err(Error::Setup(format!("{nodes} nodes: a network holds at most 240")));
        }
        ip(&["-V"]).map_err(|e| Error::Setup(format!("the tests need `ip` (iproute2): {e}")))?;
        let (k, claim) = claim_number()?;
        let mut network = Network { k, namespaces: Vec::new(), claim };
        let bridge = network.bridge();
        let cidr = format!("{}/24", network.host_ip());
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &cidr, "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..nodes {
            let ns = format!("dl{k}n{i}");
            let veth = format!("dl{k}v{i}");
            ip(&["netns", "add", &ns])?;
            network.namespaces.push(ns.clone());
            ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            let node_cidr = format!("{}/24", network.node_ip(i));
            ip(&["-n", &ns, "addr", "add", &node_cidr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    /// This network's number (the third octet of its addresses).
    pub fn number(&self) -> u8 {
        self.k
    }

    /// The bridge's name.
    pub fn bridge(&self) -> String {
        format!("dlbr{}", self.k)
    }

    /// The bridge's address in the root namespace: local servers the nodes
    /// must reach (moto, metadata) listen here.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.k, 1)
    }

    /// Node `i`'s address.
    pub fn node_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.k, 10 + i as u8)
    }

    /// Node `i`'s namespace name.
    pub fn namespace(&self, i: usize) -> &str {
        &self.namespaces[i]
    }

    /// How many node namespaces there are.
    pub fn len(&self) -> usize {
        self.namespaces.len()
    }

    /// Whether there are no node namespaces.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// A command that runs `program args` inside node `i`'s namespace.
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", self.namespace(i)]).arg(program);
        command
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        cleanup(self.k);
        let _ = std::fs::remove_file(&self.claim);
    }
}

/// Kills every process in network `k`'s namespaces, deletes them and the bridge.
fn cleanup(k: u8) {
    let prefix = format!("dl{k}n");
    let listed = ip(&["netns", "list"]).unwrap_or_default();
    let namespaces: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.strip_prefix(&prefix).is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit())))
        .collect();
    for ns in &namespaces {
        kill_all(ns);
    }
    for ns in &namespaces {
        let _ = ip(&["netns", "del", ns]);
    }
    // A deleted namespace lives on while sockets of its own still hold it
    // (connections cut off by a test's outage retransmit for minutes), and
    // so does its veth pair: delete the host ends by name, so the next
    // network with this number can create them again.
    let veth = format!("dl{k}v");
    let links = ip(&["-o", "link", "show"]).unwrap_or_default();
    for name in links.lines().filter_map(|l| l.split(": ").nth(1)).map(|n| n.split('@').next().unwrap_or(n)) {
        if name.strip_prefix(&veth).is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())) {
            let _ = ip(&["link", "del", name]);
        }
    }
    let _ = ip(&["link", "del", &format!("dlbr{k}")]);
}

/// SIGKILLs the processes in `ns` until none is left (a dying parent may
/// leave a child for a moment).
pub fn kill_all(ns: &str) {
    for _ in 0..50 {
        let pids = ip(&["netns", "pids", ns]).unwrap_or_default();
        let pids: Vec<i32> = pids.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).output();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Claims the lowest free network number.
fn claim_number() -> Result<(u8, PathBuf)> {
    std::fs::create_dir_all(CLAIM_DIR).map_err(Error::io("creating the claim directory", CLAIM_DIR))?;
    for k in 1..=MAX_NETWORKS {
        let path = Path::new(CLAIM_DIR).join(format!("net{k}"));
        if try_claim(&path) {
            // Leftovers of an owner that died before its Drop.
            cleanup(k);
            return Ok((k, path));
        }
        let owner: Option<u32> = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok());
        let alive = owner.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            // Only the process that renames the stale claim away may take it over.
            let stale = path.with_extension(format!("stale{}", std::process::id()));
            if std::fs::rename(&path, &stale).is_ok() {
                let _ = std::fs::remove_file(&stale);
                if try_claim(&path) {
                    cleanup(k);
                    return Ok((k, path));
                }
            }
        }
    }
    Err(Error::Setup(format!("all {MAX_NETWORKS} test networks are taken (claims in {CLAIM_DIR})")))
}

/// Claims `path` atomically: the file appears with the owner's pid already
/// in it (written to a temp file, then hard-linked, which fails when the
/// claim exists). A claim created empty and written afterwards could be
/// read empty by another test thread in between and taken over as stale.
fn try_claim(path: &Path) -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!("tmp{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    if std::fs::write(&tmp, std::process::id().to_string()).is_err() {
        return false;
    }
    let claimed = std::fs::hard_link(&tmp, path).is_ok();
    let _ = std::fs::remove_file(&tmp);
    claimed
}
