//! The library's error type: which step failed, on which file or host.

use std::path::PathBuf;

/// A step of `trainer` failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The open-file limit is too low for the hosts to reach.
    #[error(
        "{what} needs about {needed} open files (ssh pipes and logs), and this process may open at most {hard} \
         (RLIMIT_NOFILE; soft limit {soft}): raise the hard limit (`ulimit -Hn` as root, LimitNOFILE= in a \
         systemd unit, nofile in /etc/security/limits.conf), or run on fewer hosts (--hosts) or ranks \
         (--nproc-per-node)"
    )]
    OpenFiles {
        /// Descriptors needed.
        needed: u64,
        /// The soft limit found.
        soft: u64,
        /// The hard limit found.
        hard: u64,
        /// The job or command, for the message.
        what: String,
    },
    /// Reading an input file (workers, hostfile, profile) failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing a log or pid file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The agent's state file exists but cannot be used.
    #[error("{path}: {source}")]
    AgentState {
        /// The file.
        path: PathBuf,
        /// Why.
        source: node_contract::state::StateError,
    },
    /// No hosts were named and the agent has applied no membership here.
    #[error(
        "no hosts: {path} does not exist (the agent has not formed a cluster on this node); run on a cluster \
         node, or name the hosts with --hosts FILE"
    )]
    NoAgentHosts {
        /// The agent's state file.
        path: PathBuf,
    },
    /// An elastic job needs the agent's membership and there is none.
    #[error(
        "--elastic follows the agent's membership, and {path} does not exist: run on a cluster node whose agent \
         has formed the cluster, or drop --elastic"
    )]
    NoMembership {
        /// The agent's state file.
        path: PathBuf,
    },
    /// `--elastic` with a host the agent's manifest does not name.
    #[error(
        "--elastic: host {host:?} is not a node of the agent's manifest (generation {generation}) by alias, \
         IP or hostname: list the nodes as the agent's workers file does, or drop --elastic"
    )]
    NotInManifest {
        /// The host as the hosts file names it.
        host: String,
        /// The manifest's generation.
        generation: u64,
    },
    /// A hosts file line does not parse.
    #[error("{path}:{line}: {reason}: {text:?} (expected `host` or `host slots=N`)")]
    HostsLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The hosts and their slots ask for more ranks than one job runs.
    #[error(
        "{world} ranks on {hosts} hosts is more than the {max} a job runs; use fewer slots or --nproc-per-node, or fewer hosts"
    )]
    TooManyRanks {
        /// The ranks asked for.
        world: u64,
        /// The hosts.
        hosts: usize,
        /// The limit.
        max: u32,
    },
    /// The hosts file lists no host.
    #[error("{path} lists no hosts; is the agent done forming the cluster? (or pass --hosts FILE)")]
    NoHosts {
        /// The file.
        path: PathBuf,
    },
    /// A process could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A signal handler could not be installed.
    #[error("cannot handle signals: {0}")]
    Signal(std::io::Error),
    /// A report could not be written to stdout (the reader went away, or
    /// the disk is full).
    #[error("{0}")]
    Output(#[from] cli_output::Closed),
    /// The launcher cannot find its own executable (the remote supervisor's default path).
    #[error("cannot find the trainer executable ({0}); pass --remote-trainer PATH")]
    CurrentExe(std::io::Error),
}

/// The library's result type.
pub(crate) type Result<T> = std::result::Result<T, Error>;
