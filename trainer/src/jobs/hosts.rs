//! Which hosts a job runs on and the ranks on each: the cluster's nodes as
//! the agent applied them (its state file, the trainer's one channel for
//! the membership), or a hosts file a user names (a workers file, one alias
//! per line, or an mpirun-style hostfile, `host slots=N`, read with the node
//! contract's reader), and the rank table built from them.
//!
//! Ranks are numbered host by host in order (the master first, then by
//! index), so the master holds rank 0 and a host keeps its ranks as long as
//! the order holds (the agent never reorders nodes).

use std::path::Path;
use std::str::FromStr;

use crate::error::{Error, Result};

use node_contract::files::hostfile::{self, parse_line};
pub(crate) use node_contract::files::hostfile::{HostEntry, MAX_SLOTS_PER_HOST};
use node_contract::files::profile::WORKERS_PATH_VAR;
use node_contract::files::workers;

/// The most ranks one job runs (256 hosts of 16 ranks each).
pub(crate) const MAX_WORLD_SIZE: u32 = 4096;

/// The largest hosts file read: a line per host, far below this even for
/// thousands of hosts.
pub(crate) const MAX_HOSTS_FILE_BYTES: u64 = 1024 * 1024;

/// Parses a workers file or hostfile (the node contract's
/// [`parse_line`], each line's error named by file and line). Blank lines
/// and `#` comments are skipped.
pub(crate) fn parse(text: &str, path: &Path) -> Result<Vec<HostEntry>> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        match parse_line(raw) {
            Ok(Some(entry)) => hosts.push(entry),
            Ok(None) => {}
            Err(reason) => {
                return Err(Error::HostsLine { path: path.to_owned(), line: i + 1, text: raw.to_owned(), reason });
            }
        }
    }
    if hosts.is_empty() {
        return Err(Error::NoHosts { path: path.to_owned() });
    }
    Ok(hosts)
}

/// Reads and parses a hosts file (at most [`MAX_HOSTS_FILE_BYTES`]).
pub(crate) fn read(path: &Path) -> Result<Vec<HostEntry>> {
    use std::io::Read;
    let read_err = |source| Error::Read { path: path.to_owned(), source };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_HOSTS_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_HOSTS_FILE_BYTES {
        return Err(read_err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is larger than {} KiB; a hosts file has a line per host", MAX_HOSTS_FILE_BYTES / 1024),
        )));
    }
    let text =
        String::from_utf8(bytes).map_err(|e| read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    parse(&text, path)
}

/// `--nproc-per-node`: a number, or `auto` (the host's GPUs, else 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nproc {
    /// This many on every host.
    Fixed(u32),
    /// The host's slots (its GPU count, from the hostfile), else 1.
    Auto,
}

impl FromStr for Nproc {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Nproc::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=MAX_SLOTS_PER_HOST).contains(&n) => Ok(Nproc::Fixed(n)),
            Ok(n) if n > MAX_SLOTS_PER_HOST => {
                Err(format!("{n} is more than {MAX_SLOTS_PER_HOST} processes on one host"))
            }
            _ => Err(format!("{s:?} is neither a number >= 1 nor `auto`")),
        }
    }
}

/// One process of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rank {
    /// Global rank, 0..world size.
    pub rank: u32,
    /// Rank on its host.
    pub local_rank: u32,
    /// Processes on its host.
    pub local_world_size: u32,
    /// Index of its host in the hosts file (torchrun's `GROUP_RANK`).
    pub group_rank: u32,
    /// Its host.
    pub host: String,
}

/// The rank table. `slots` are looked up in `hostfile` (the agent's
/// `alias slots=N` file) for hosts whose own line has none. More than
/// [`MAX_WORLD_SIZE`] ranks in all is an error, found before any is made.
pub(crate) fn ranks(hosts: &[HostEntry], nproc: Nproc, hostfile: &[HostEntry]) -> Result<Vec<Rank>> {
    let per_host: Vec<u32> = hosts
        .iter()
        .map(|host| match nproc {
            Nproc::Fixed(n) => n,
            Nproc::Auto => {
                host.slots.or_else(|| hostfile.iter().find(|h| h.name == host.name).and_then(|h| h.slots)).unwrap_or(1)
            }
        })
        .collect();
    let world: u64 = per_host.iter().map(|&n| u64::from(n)).sum();
    if world > u64::from(MAX_WORLD_SIZE) {
        return Err(Error::TooManyRanks { world, hosts: hosts.len(), max: MAX_WORLD_SIZE });
    }
    let mut out = Vec::with_capacity(world as usize);
    for (group_rank, (host, &n)) in hosts.iter().zip(&per_host).enumerate() {
        for local_rank in 0..n {
            out.push(Rank {
                rank: out.len() as u32,
                local_rank,
                local_world_size: n,
                group_rank: group_rank as u32,
                host: host.name.clone(),
            });
        }
    }
    Ok(out)
}

/// The job's hosts: `--hosts FILE` when given; else
/// `$DEEPLEARNING_WORKERS_PATH` when it names a file of the user's (not the
/// agent's workers file, which every login shell's profile names); else
/// the agent's membership ([`agent_hosts`]).
pub(crate) fn job_hosts(given: Option<&Path>, root: &Path) -> Result<Vec<HostEntry>> {
    let named = std::env::var_os(WORKERS_PATH_VAR).filter(|p| !p.is_empty() && *p != *workers::PATH);
    match (given, named) {
        (Some(p), _) => read(p),
        (None, Some(p)) => read(Path::new(&p)),
        (None, None) => agent_hosts(root),
    }
}

/// The cluster's nodes as this node's agent last applied them, from its
/// state file under `root` (the trainer's one channel for the agent's
/// membership: docs/ARCHITECTURE.md, "trainer"): in the workers file's
/// order, each with its slots (its GPUs, 1 without), as the workers file
/// and the hostfile list them.
pub(crate) fn agent_hosts(root: &Path) -> Result<Vec<HostEntry>> {
    match crate::agent_state::read(root)? {
        Some(state) => Ok(members(&state.manifest)),
        None => Err(Error::NoAgentHosts { path: node_contract::files::under(root, node_contract::state::STATE_PATH) }),
    }
}

/// The agent's nodes under `root`, for `auto` slots of hosts named by
/// alias; empty without a state file.
pub(crate) fn agent_slots(root: &Path) -> Vec<HostEntry> {
    match crate::agent_state::read(root) {
        Ok(Some(state)) => members(&state.manifest),
        _ => Vec::new(),
    }
}

/// A manifest's nodes as hosts-file entries: alias and slots, in order.
fn members(manifest: &node_contract::message::Manifest) -> Vec<HostEntry> {
    workers::in_order(manifest)
        .into_iter()
        .map(|n| HostEntry { name: n.alias.clone(), slots: Some(hostfile::slots(n.gpus)) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<HostEntry>> {
        parse(text, Path::new("/hosts"))
    }

    #[test]
    fn workers_and_hostfile_lines() {
        let hosts =
            p("# cluster\ndeeplearning-worker1\n\ndeeplearning-worker2 slots=4  # gpus\nh3 slots=2 max_slots=8\n")
                .unwrap();
        let names: Vec<_> = hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, [("deeplearning-worker1", None), ("deeplearning-worker2", Some(4)), ("h3", Some(2))]);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let cases = [
            ("a\nb slots=0\n", "/hosts:2: slots must be >= 1"),
            ("a slots=x\n", "/hosts:1: slots must be >= 1"),
            ("a gpus=2\n", "/hosts:1: unknown word"),
            ("a slots=257\n", "/hosts:1: slots must be at most 256"),
            ("a slots=4294967295\n", "/hosts:1: slots must be at most 256"),
            ("h1\0x\n", "/hosts:1: a host is a name"),
            ("h1;reboot\n", "/hosts:1: a host is a name"),
            ("slots=2\n", "/hosts:1: the first word must be a host name"),
            ("\n# nothing\n", "/hosts lists no hosts"),
        ];
        for (text, needle) in cases {
            let e = p(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_agents_membership_in_order_with_slots() {
        use node_contract::message::{Manifest, ManifestNode, worker_alias};
        let root = tempfile::tempdir().unwrap();
        let e = agent_hosts(root.path()).unwrap_err().to_string();
        assert!(e.contains("var/lib/deeplearning/state.json") && e.contains("--hosts FILE"), "{e}");
        assert!(agent_slots(root.path()).is_empty());
        let node = |index: u32, gpus: u32| ManifestNode {
            index,
            alias: worker_alias(index),
            instance_id: format!("i-{index}"),
            private_ip: format!("10.0.0.{index}"),
            hostname: String::new(),
            gpus,
            ssh_host_key: String::new(),
        };
        let manifest = Manifest {
            cluster: "demo".into(),
            generation: 4,
            master: "i-1".into(),
            nodes: vec![node(3, 0), node(1, 8), node(2, 4)],
            cluster_public_key: String::new(),
        };
        let state = node_contract::state::State {
            version: node_contract::state::STATE_VERSION,
            instance_id: "i-1".into(),
            generation: 4,
            manifest,
        };
        let path = node_contract::files::under(root.path(), node_contract::state::STATE_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string(&state).unwrap()).unwrap();
        let hosts = agent_hosts(root.path()).unwrap();
        let read: Vec<_> = hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(
            read,
            [("deeplearning-worker1", Some(8)), ("deeplearning-worker2", Some(4)), ("deeplearning-worker3", Some(1))]
        );
        assert_eq!(agent_slots(root.path()), hosts);
    }

    #[test]
    fn rank_table() {
        let hosts = p("m\nw2 slots=3\nw3\n").unwrap();
        let hostfile = p("m slots=2\nw2 slots=8\nw3 slots=1\n").unwrap();
        let auto = ranks(&hosts, Nproc::Auto, &hostfile).unwrap();
        let table: Vec<_> = auto.iter().map(|r| (r.rank, r.host.as_str(), r.local_rank, r.local_world_size)).collect();
        assert_eq!(
            table,
            [(0, "m", 0, 2), (1, "m", 1, 2), (2, "w2", 0, 3), (3, "w2", 1, 3), (4, "w2", 2, 3), (5, "w3", 0, 1)]
        );
        assert_eq!(auto[5].group_rank, 2);
        assert_eq!(ranks(&hosts, Nproc::Auto, &[]).unwrap().len(), 5, "no hostfile: 1 per host without slots");
        let fixed = ranks(&hosts, Nproc::Fixed(2), &hostfile).unwrap();
        assert_eq!(fixed.len(), 6);
        assert_eq!((fixed[3].host.as_str(), fixed[3].local_rank, fixed[3].group_rank), ("w2", 1, 1));
        assert_eq!("auto".parse::<Nproc>(), Ok(Nproc::Auto));
        assert_eq!("4".parse::<Nproc>(), Ok(Nproc::Fixed(4)));
        assert!("0".parse::<Nproc>().is_err());
        assert!("257".parse::<Nproc>().unwrap_err().contains("more than 256"));
        assert_eq!(MAX_SLOTS_PER_HOST, 256, "the hosts-file message says 256");
        // 17 hosts of 256 ranks: over the job's limit, refused before a rank is made.
        let many: Vec<HostEntry> = (0..17).map(|i| HostEntry { name: format!("h{i}"), slots: Some(256) }).collect();
        let e = ranks(&many, Nproc::Auto, &[]).unwrap_err().to_string();
        assert!(e.contains("4352 ranks on 17 hosts"), "{e}");
    }
}
