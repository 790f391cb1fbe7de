//! Membership across rendezvous rounds, as one rank sees it: join the job,
//! check in at every epoch boundary, and recover after a collective failure.
//!
//! The training loop calls [`Membership::join`] once, then after every epoch
//! [`Membership::at_boundary`], after a step where a rank raised its
//! leaving flag [`Membership::at_step`], and after an [`EngineError::Collective`]
//! (a peer left, died or went silent) [`Membership::recover`]. Each returns a
//! [`Next`]: go on with the same group, train in a new group (take the state
//! from `group.source_rank` by broadcast; on a redo, the state at the start
//! of the interrupted epoch), or leave (this node is no longer in the
//! agent's manifest: exit 0). The decisions themselves are made by the
//! rendezvous host on rank 0 ([`super::rendezvous`]); this module talks to it
//! over the control connection and connects each new group's [`Ring`] on
//! this process's data-plane listener, reporting a failed connection as
//! another failure so the host re-forms again.
//!
//! Rank 0 (the master's process) may not leave: when its control connection
//! drops, every rank fails with [`RendezvousError::MasterGone`].
//!
//! [`EngineError::Collective`]: super::engine::EngineError::Collective

use std::io::BufReader;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::collective::{Collective, CollectiveError, Group};
use super::rendezvous::{self, Decision, Hello, HostConfig, ReceiveError, RendezvousError, Report, Roster};
use super::ring::{Ring, RingConfig};

/// Timing of one rank's membership.
#[derive(Debug, Clone, Copy)]
pub struct ElasticConfig {
    /// The rendezvous (`MASTER_ADDR:MASTER_PORT`).
    pub rendezvous: SocketAddr,
    /// How long connecting to the rendezvous may take (rank 0 may start later).
    pub connect_timeout: Duration,
    /// How long a member waits for a decision after reporting (a joiner
    /// waits for the next boundary without limit).
    pub decision_timeout: Duration,
    /// The ring's timeouts.
    pub ring: RingConfig,
}

impl ElasticConfig {
    /// Production timing for the rendezvous at `rendezvous`.
    pub fn new(rendezvous: SocketAddr) -> Self {
        Self {
            rendezvous,
            connect_timeout: Duration::from_secs(120),
            decision_timeout: Duration::from_secs(600),
            ring: RingConfig { io_timeout: Duration::from_secs(10), ..RingConfig::default() },
        }
    }
}

/// What to do after a boundary or a failure.
#[derive(Debug)]
pub enum Next {
    /// Same group, same ring: run the next epoch.
    Continue,
    /// A new group: install `ring`, take the state from `group.source_rank`
    /// ([`broadcast_state`]), re-shard for the new world, and run `epoch`.
    ///
    /// Before the broadcast every rank puts back the state at the start of
    /// `epoch`: the copy it took when it began `epoch`, if it did (it failed
    /// during it, or finished it while another rank failed: a redo);
    /// otherwise its current state (it completed `epoch - 1`).
    ///
    /// With `step > 0` the group was formed mid-epoch after a rank left
    /// ([`Membership::at_step`]): every member already holds the state
    /// after `step` steps of `epoch`, so nothing is broadcast and the rest
    /// of the epoch runs from there.
    Reformed {
        /// The new group.
        group: Group,
        /// Its connected ring.
        ring: Ring,
        /// The epoch to run next.
        epoch: u64,
        /// The epoch is a redo: the source sends the state at its start.
        redo: bool,
        /// Steps of `epoch` the previous group already ran (0: all to run).
        step: u64,
    },
    /// This process is no longer a member: exit 0.
    Left(String),
}

/// This rank's side of the job's membership.
#[derive(Debug)]
pub struct Membership {
    config: ElasticConfig,
    listener: TcpListener,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    round: u64,
}

impl Membership {
    /// Connects to the rendezvous, introduces this process (`hello`; its
    /// `data_addr` is `listener`'s) and waits for its first group: the first
    /// formation, or the next epoch boundary for a process joining a running
    /// job. Returns the group's connected ring in `Next::Reformed` (or `Left`).
    pub fn join(
        config: ElasticConfig,
        listener: TcpListener,
        hello: Hello,
    ) -> Result<(Membership, Next), RendezvousError> {
        let deadline = Instant::now() + config.connect_timeout;
        let stream = loop {
            match TcpStream::connect_timeout(&config.rendezvous, Duration::from_secs(5)) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(RendezvousError::Connect { addr: config.rendezvous, source: e });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let gone = |e: std::io::Error| RendezvousError::MasterGone { addr: config.rendezvous, reason: e.to_string() };
        stream.set_nodelay(true).map_err(gone)?;
        let reader = BufReader::new(stream.try_clone().map_err(gone)?);
        let mut me = Membership { config, listener, writer: stream, reader, round: 0 };
        info!(alias = %hello.alias, local_rank = hello.local_rank, rendezvous = %config.rendezvous, "joining");
        me.report(&Report::Hello(hello))?;
        let next = me.decide(None)?;
        Ok((me, next))
    }

    /// The current rendezvous round.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Reports that this rank completed `epoch` (and whether it is
    /// `leaving`: its host was given an interruption notice) and returns
    /// what to do next.
    pub fn at_boundary(&mut self, epoch: u64, leaving: bool) -> Result<Next, RendezvousError> {
        self.report(&Report::Boundary { round: self.round, epoch, leaving })?;
        self.decide(Some(self.config.decision_timeout))
    }

    /// Reports that every rank stopped after `step` steps of `epoch`
    /// because a rank raised its leaving flag (this one, when `leaving`),
    /// and returns what to do next: `Left` for the leaver (at once, without
    /// waiting for the others), the group without it (the rest of `epoch`
    /// from `step`), or `Continue` (nobody left after all).
    pub fn at_step(&mut self, epoch: u64, step: u64, leaving: bool) -> Result<Next, RendezvousError> {
        info!(round = self.round, epoch, step, leaving, "a rank is leaving: mid-epoch check-in");
        self.report(&Report::Stopped { round: self.round, epoch, step, leaving })?;
        self.decide(Some(self.config.decision_timeout))
    }

    /// Reports that a collective failed during `epoch` and returns the
    /// survivors' group (a redo of `epoch`), or `Left`.
    pub fn recover(&mut self, epoch: u64, error: &CollectiveError) -> Result<Next, RendezvousError> {
        warn!(round = self.round, epoch, "collective failed: {error}; re-forming");
        self.report(&Report::Failed { round: self.round, epoch, error: error.to_string() })?;
        self.decide(Some(self.config.decision_timeout))
    }

    fn report(&mut self, report: &Report) -> Result<(), RendezvousError> {
        rendezvous::send(&mut self.writer, report)
            .map_err(|e| RendezvousError::MasterGone { addr: self.config.rendezvous, reason: e.to_string() })
    }

    /// Waits for the host's decision; a new group's ring is connected here,
    /// and a failed connection is reported so the host tries again.
    fn decide(&mut self, timeout: Option<Duration>) -> Result<Next, RendezvousError> {
        let addr = self.config.rendezvous;
        loop {
            self.reader
                .get_ref()
                .set_read_timeout(timeout)
                .map_err(|e| RendezvousError::MasterGone { addr, reason: e.to_string() })?;
            let decision = match rendezvous::receive::<Decision>(&mut self.reader, &addr.to_string()) {
                Ok(Some(d)) => d,
                Ok(None) => {
                    return Err(RendezvousError::MasterGone {
                        addr,
                        reason: "it closed the control connection".into(),
                    });
                }
                Err(ReceiveError::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    return Err(RendezvousError::Timeout { addr, seconds: timeout.unwrap_or_default().as_secs() });
                }
                Err(ReceiveError::Io(e)) => return Err(RendezvousError::MasterGone { addr, reason: e.to_string() }),
                Err(ReceiveError::Malformed(e)) => return Err(e),
            };
            match decision {
                Decision::Continue { round } => {
                    info!(round, "membership unchanged");
                    return Ok(Next::Continue);
                }
                Decision::Left { reason } => {
                    info!(round = self.round, "leaving the job: {reason}");
                    return Ok(Next::Left(reason));
                }
                Decision::Refused { reason } => return Err(RendezvousError::Refused(reason)),
                Decision::Group {
                    round,
                    generation,
                    rank,
                    peers,
                    source_rank,
                    nccl_id,
                    epoch,
                    redo,
                    step,
                    members,
                } => {
                    let group =
                        Group { generation, rank, world_size: peers.len(), peers, nccl_id, source_rank, members };
                    self.round = round;
                    info!(round, generation, rank, world_size = group.world_size, epoch, step, redo, "new group");
                    match Ring::connect(&group, round, &self.listener, &self.config.ring) {
                        Ok(ring) => return Ok(Next::Reformed { group, ring, epoch, redo, step }),
                        Err(e) => {
                            warn!(round, "cannot connect the new group's ring: {e}; re-forming");
                            self.report(&Report::Failed { round, epoch, error: e.to_string() })?;
                        }
                    }
                }
            }
        }
    }
}

/// Gives every rank `source`'s state: the parameter vector (the same length
/// everywhere: the same model) and the counters (epoch, step, and where in
/// the epoch: the same number of them everywhere).
pub fn broadcast_state(
    ring: &mut Ring,
    source: usize,
    state: &mut [f32],
    counters: &mut [u64],
) -> Result<(), CollectiveError> {
    ring.broadcast(state, source)?;
    // Counters travel as bit patterns in f32 slots, so no value is rounded.
    let mut words: Vec<f32> =
        counters.iter().flat_map(|c| [f32::from_bits(*c as u32), f32::from_bits((*c >> 32) as u32)]).collect();
    ring.broadcast(&mut words, source)?;
    for (c, pair) in counters.iter_mut().zip(words.chunks(2)) {
        *c = u64::from(pair[0].to_bits()) | (u64::from(pair[1].to_bits()) << 32);
    }
    Ok(())
}

/// Where a process started by `trainer launch` finds its job: the torchrun
/// variables the launcher sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// `RANK`: 0 is the process on the master, which hosts the rendezvous.
    pub rank: usize,
    /// `WORLD_SIZE`: the processes the first formation waits for.
    pub world_size: usize,
    /// `LOCAL_RANK`: the process's place on its node (its GPU).
    pub local_rank: u32,
    /// `MASTER_ADDR`.
    pub master_addr: String,
    /// `MASTER_PORT`: the rendezvous port.
    pub master_port: u16,
}

/// Joins the job: rank 0 first starts the rendezvous host on `MASTER_PORT`
/// (all addresses) with `host`; every process then binds its data plane on
/// its node's address from the agent's manifest (files under `root`, read
/// by `roster`) and waits for its first group. `held` is the (epochs,
/// steps) completed in the state this process starts from (a `--resume`d
/// checkpoint, else zeros): the first group starts at the furthest epoch held.
pub fn connect(
    launch: &Launch,
    roster: &Roster,
    held: (u64, u64),
    host: HostConfig,
    config: impl FnOnce(SocketAddr) -> ElasticConfig,
) -> Result<(Membership, Next), RendezvousError> {
    let master = format!("{}:{}", launch.master_addr, launch.master_port);
    let resolve = |reason: String| RendezvousError::Resolve { addr: master.clone(), reason };
    let rendezvous = master
        .to_socket_addrs()
        .map_err(|e| resolve(e.to_string()))?
        .next()
        .ok_or_else(|| resolve("no address".into()))?;
    if launch.rank == 0 {
        let bind = SocketAddr::new(IpAddr::from([0, 0, 0, 0]), launch.master_port);
        let listener = TcpListener::bind(bind).map_err(|source| RendezvousError::Bind { addr: bind, source })?;
        rendezvous::host(listener, roster.clone(), host)?;
    }
    // The data plane listens on this node's address from the manifest.
    let me = roster.identity(launch.local_rank, SocketAddr::from(([0, 0, 0, 0], 0)))?;
    let ip: IpAddr = me.ip.parse().map_err(|_| RendezvousError::ReadState {
        path: Path::new(node_contract::state::STATE_PATH).to_owned(),
        reason: format!("the manifest's address {:?} for this node is not an IP address", me.ip),
    })?;
    let bind = SocketAddr::new(ip, 0);
    let listener = TcpListener::bind(bind).map_err(|source| RendezvousError::Bind { addr: bind, source })?;
    let data_addr = listener.local_addr().map_err(|source| RendezvousError::Bind { addr: bind, source })?;
    Membership::join(config(rendezvous), listener, Hello { data_addr, epoch: held.0, step: held.1, ..me })
}
