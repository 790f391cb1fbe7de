//! The rendezvous host: the TCP service rank 0 runs ([`host`]), one thread
//! accepting, one per control connection reading [`Report`]s, and one
//! deciding: it forms groups, tells members to continue, leave or regroup,
//! and drops the silent and the closed. The elastic rules (who joins or
//! leaves, and when) are its decision functions.
//!
//! Inputs: a listening socket, a [`Roster`] (read at every decision) and a
//! [`HostConfig`]. No files of its own.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::RendezvousError;
use super::protocol::{Decision, Hello, ReceiveError, Report, receive, send};
use super::roster::Roster;
use crate::train::collective::Member;
use node_contract::files::prepare_data;
use node_contract::state::State;
use tracing::{info, warn};

/// Timing and options of the host.
#[derive(Clone)]
pub struct HostConfig {
    /// Processes expected at the first formation (`WORLD_SIZE`).
    pub expected: usize,
    /// How long the first formation waits for all `expected` processes;
    /// then it forms with those present.
    pub join_timeout: Duration,
    /// After the first report of a round, how long the other members have
    /// to report before they are treated as gone (a silent host). Rank 0 is
    /// always waited for: it reports after its evaluation and checkpoint.
    pub report_timeout: Duration,
    /// Makes a fresh NCCL unique id for every group (GPU path).
    pub nccl_id: Option<Arc<dyn Fn() -> Vec<u8> + Send + Sync>>,
}

impl HostConfig {
    /// Production timing for a job of `expected` processes: a silent host is
    /// dropped within the ring's I/O timeout (10 s, [`crate::train::elastic::ElasticConfig::new`])
    /// plus 15 s, inside the 30 s the survivors have to re-form.
    pub fn new(expected: usize) -> Self {
        Self {
            expected,
            join_timeout: Duration::from_secs(300),
            report_timeout: Duration::from_secs(15),
            nccl_id: None,
        }
    }
}

impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("expected", &self.expected)
            .field("join_timeout", &self.join_timeout)
            .field("report_timeout", &self.report_timeout)
            .field("nccl_id", &self.nccl_id.is_some())
            .finish()
    }
}

type ConnId = u64;

enum Event {
    Hello(ConnId, Hello, TcpStream),
    Report(ConnId, Report),
    Closed(ConnId, String),
}

/// How a member of the current round last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reported {
    Boundary(u64),
    /// Stopped after (epoch, step) for a leave.
    Stopped(u64, u64),
    Failed(u64),
}

struct Conn {
    hello: Hello,
    writer: TcpStream,
}

/// The rendezvous host's state: connected processes and the current group.
struct Host {
    roster: Roster,
    config: HostConfig,
    conns: BTreeMap<ConnId, Conn>,
    round: u64,
    generation: u64,
    /// Members of the current round, by rank.
    members: Vec<ConnId>,
    reports: BTreeMap<ConnId, Reported>,
    /// When the first report of the current round arrived.
    first_report: Option<Instant>,
    /// A member left since the last decision (closed or silent).
    lost: bool,
    started: Instant,
    /// Joiners already told to wait (logged once).
    waiting: BTreeMap<ConnId, String>,
}

/// Starts the rendezvous host on `listener` (in background threads for the
/// life of the process; the process exiting is how members learn rank 0 died).
pub fn host(listener: TcpListener, roster: Roster, config: HostConfig) -> Result<SocketAddr, RendezvousError> {
    let addr = listener.local_addr().map_err(RendezvousError::Serve)?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rendezvous-accept".into())
        .spawn(move || accept_loop(listener, tx))
        .map_err(RendezvousError::Serve)?;
    let mut host = Host {
        roster,
        config,
        conns: BTreeMap::new(),
        round: 0,
        generation: 0,
        members: Vec::new(),
        reports: BTreeMap::new(),
        first_report: None,
        lost: false,
        started: Instant::now(),
        waiting: BTreeMap::new(),
    };
    std::thread::Builder::new()
        .name("rendezvous".into())
        .spawn(move || host.run(rx))
        .map_err(RendezvousError::Serve)?;
    info!(%addr, "rendezvous listening");
    Ok(addr)
}

fn accept_loop(listener: TcpListener, tx: mpsc::Sender<Event>) {
    let mut next_id: ConnId = 0;
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                warn!("rendezvous accept failed: {e}");
                continue;
            }
        };
        next_id += 1;
        let (id, tx) = (next_id, tx.clone());
        let spawned =
            std::thread::Builder::new().name(format!("rendezvous-conn-{id}")).spawn(move || serve(id, stream, tx));
        if let Err(e) = spawned {
            warn!("cannot start a rendezvous connection thread: {e}");
        }
    }
}

/// Reads one connection's lines and turns them into events.
fn serve(id: ConnId, stream: TcpStream, tx: mpsc::Sender<Event>) {
    let from = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let closed = |reason: String| Event::Closed(id, reason);
    match receive::<Report>(&mut reader, &from) {
        Ok(Some(Report::Hello(hello))) => {
            let Ok(host_writer) = writer.try_clone() else { return };
            if tx.send(Event::Hello(id, hello, host_writer)).is_err() {
                return;
            }
        }
        Ok(Some(other)) => {
            let reason = format!("the first message must be a hello, not {other:?}");
            warn!(%from, "{reason}");
            let _ = send(&mut writer, &Decision::Refused { reason });
            return;
        }
        Ok(None) => return,
        Err(ReceiveError::Malformed(e)) => {
            warn!("{e}");
            let _ = send(&mut writer, &Decision::Refused { reason: e.to_string() });
            return;
        }
        Err(ReceiveError::Io(_)) => return,
    }
    loop {
        let event = match receive::<Report>(&mut reader, &from) {
            Ok(Some(Report::Hello(_))) => closed("a second hello".into()),
            Ok(Some(report)) => Event::Report(id, report),
            Ok(None) => closed("closed its control connection".into()),
            Err(ReceiveError::Io(e)) => closed(format!("control connection failed: {e}")),
            Err(ReceiveError::Malformed(e)) => {
                let _ = send(&mut writer, &Decision::Refused { reason: e.to_string() });
                closed(e.to_string())
            }
        };
        let last = matches!(event, Event::Closed(..));
        if tx.send(event).is_err() || last {
            return;
        }
    }
}

impl Host {
    fn run(&mut self, rx: mpsc::Receiver<Event>) {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Hello(id, hello, writer)) => {
                    info!(alias = %hello.alias, local_rank = hello.local_rank, data = %hello.data_addr, epoch = hello.epoch, step = hello.step, "process connected");
                    self.conns.insert(id, Conn { hello, writer });
                }
                Ok(Event::Report(id, report)) => self.on_report(id, report),
                Ok(Event::Closed(id, reason)) => self.on_closed(id, &reason),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if self.round == 0 {
                self.try_first_formation();
            } else {
                self.try_decide();
            }
        }
    }

    fn name(&self, id: ConnId) -> String {
        self.conns
            .get(&id)
            .map_or_else(|| format!("connection {id}"), |c| format!("{}/{}", c.hello.alias, c.hello.local_rank))
    }

    fn names(&self, ids: &[ConnId]) -> String {
        ids.iter().map(|&id| self.name(id)).collect::<Vec<_>>().join(", ")
    }

    fn tell(&mut self, id: ConnId, decision: &Decision) {
        if let Some(c) = self.conns.get_mut(&id)
            && let Err(e) = send(&mut c.writer, decision)
        {
            warn!(process = %self.name(id), "cannot send a decision: {e}");
        }
    }

    fn on_report(&mut self, id: ConnId, report: Report) {
        let (round, reported, leaving) = match &report {
            Report::Boundary { round, epoch, leaving } => (*round, Reported::Boundary(*epoch), *leaving),
            Report::Stopped { round, epoch, step, leaving } => (*round, Reported::Stopped(*epoch, *step), *leaving),
            Report::Failed { round, epoch, error } => {
                warn!(process = %self.name(id), round, epoch, "collective failed: {error}");
                (*round, Reported::Failed(*epoch), false)
            }
            Report::Hello(_) => return,
        };
        if !self.members.contains(&id) {
            let reason = format!("not a member of round {} (dropped earlier)", self.round);
            info!(process = %self.name(id), round = self.round, "told to leave: {reason}");
            self.tell(id, &Decision::Left { reason });
            return;
        }
        if round != self.round {
            let reason = format!("reported round {round}, the current round is {}", self.round);
            warn!(process = %self.name(id), "{reason}");
            self.tell(id, &Decision::Refused { reason });
            return;
        }
        self.first_report.get_or_insert_with(Instant::now);
        if leaving && self.members.first() != Some(&id) {
            // It holds nothing the others still need: let it go now, not
            // after the slowest report (rank 0's checkpoint, say).
            let reason = "its host was given an interruption notice".to_owned();
            info!(process = %self.name(id), round, ?reported, "leaves: {reason}");
            self.tell(id, &Decision::Left { reason });
            self.members.retain(|&m| m != id);
            self.reports.remove(&id);
            // Forgotten now, so the next boundary cannot take it back in
            // while its manifest entry is still there.
            self.conns.remove(&id);
            self.lost = true;
            return;
        }
        if leaving {
            warn!(process = %self.name(id), "rank 0 (the master's process) reported leaving; it never leaves");
        }
        self.reports.insert(id, reported);
    }

    fn on_closed(&mut self, id: ConnId, reason: &str) {
        let name = self.name(id);
        if let Some(pos) = self.members.iter().position(|&m| m == id) {
            warn!(process = %name, rank = pos, round = self.round, generation = self.generation, "member gone: {reason}; treated as a leave");
            self.members.remove(pos);
            self.reports.remove(&id);
            self.lost = true;
        } else {
            info!(process = %name, "process gone: {reason}");
        }
        self.conns.remove(&id);
        self.waiting.remove(&id);
    }

    /// Processes that may be in the next group, in rank order: the master's
    /// first, then by worker index and local rank.
    fn eligible(&mut self, snap: &State) -> Vec<ConnId> {
        let mut chosen: Vec<(bool, u32, u32, ConnId)> = Vec::new();
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            let Some(c) = self.conns.get(&id) else { continue };
            let h = &c.hello;
            let master = h.instance_id == snap.manifest.master;
            let why_not = if snap.manifest.node(&h.instance_id).is_none() && !master {
                Some(format!("not in the manifest of generation {}", snap.generation))
            } else if !master && !self.members.contains(&id) && !self.roster.prepared(&h.ip) {
                Some(format!("its prepare-data marker {} is not there yet", prepare_data::marker_name(&h.ip)))
            } else {
                None
            };
            match why_not {
                Some(reason) if !self.members.contains(&id) => {
                    if self.waiting.insert(id, reason.clone()).as_ref() != Some(&reason) {
                        info!(process = %self.name(id), generation = snap.generation, "waits to join: {reason}");
                    }
                }
                Some(_) => {} // A member leaving: decided by the caller.
                None => chosen.push((!master, h.index, h.local_rank, id)),
            }
        }
        chosen.sort();
        chosen.into_iter().map(|c| c.3).collect()
    }

    fn try_first_formation(&mut self) {
        let snap = match self.roster.read() {
            Ok(s) => s,
            Err(e) => {
                if self.started.elapsed() > self.config.join_timeout {
                    warn!("{e}");
                }
                return;
            }
        };
        let ready = self.eligible(&snap);
        let has_master = ready.first().is_some_and(|&id| self.conns[&id].hello.instance_id == snap.manifest.master);
        let timed_out = self.started.elapsed() >= self.config.join_timeout;
        if !has_master || (ready.len() < self.config.expected && !timed_out) {
            return;
        }
        if ready.len() < self.config.expected {
            warn!(
                expected = self.config.expected,
                present = ready.len(),
                "not every process connected within the join timeout; forming with those present"
            );
        }
        let epoch = ready.iter().map(|id| self.conns[id].hello.epoch).max().unwrap_or(0);
        self.form(snap.generation, ready, (epoch, 0), false, "first formation");
    }

    /// Announces a new group of `members` (rank order) to each of them.
    fn form(&mut self, generation: u64, members: Vec<ConnId>, (epoch, step): (u64, u64), redo: bool, why: &str) {
        self.round += 1;
        self.generation = generation;
        self.members = members;
        self.reports.clear();
        self.first_report = None;
        self.lost = false;
        let peers: Vec<SocketAddr> = self.members.iter().map(|id| self.conns[id].hello.data_addr).collect();
        let nccl_id = self.config.nccl_id.as_ref().map(|f| f());
        let members: Vec<Member> = self
            .members
            .iter()
            .map(|id| {
                let hello = &self.conns[id].hello;
                Member {
                    alias: hello.alias.clone(),
                    instance_id: hello.instance_id.clone(),
                    local_rank: hello.local_rank,
                }
            })
            .collect();
        info!(round = self.round, generation, epoch, step, redo, world_size = self.members.len(), members = %self.names(&self.members), "group formed: {why}");
        // Rank 0 last: its process hosts us, and may exit (job done) as soon as
        // it has its answer; everyone else's must be on the wire by then.
        for (rank, id) in self.members.clone().into_iter().enumerate().rev() {
            self.waiting.remove(&id);
            let decision = Decision::Group {
                round: self.round,
                generation,
                rank,
                peers: peers.clone(),
                // Rank 0 is the master's process, which never leaves and holds the
                // state of the newest completed epoch (or the start of a redone one).
                source_rank: 0,
                nccl_id: nccl_id.clone(),
                epoch,
                redo,
                step,
                members: if rank == 0 { members.clone() } else { Vec::new() },
            };
            self.tell(id, &decision);
        }
    }

    /// Decides once every member of the round has reported (or the silent
    /// ones have had `report_timeout`).
    fn try_decide(&mut self) {
        let Some(first) = self.first_report else { return };
        let master_alive =
            self.members.first().is_some_and(|id| self.conns.get(id).is_some_and(|c| c.hello.index == 1));
        if !master_alive {
            // Rank 0's own thread is gone: the process is going down; nothing to form.
            warn!(round = self.round, "rank 0 (the master's process) is no longer a member; no group can form");
            self.first_report = None;
            return;
        }
        // Rank 0 evaluates and writes the checkpoint before it reports, so it
        // may come long after the others; it runs this host, so it is never
        // silent: wait for it (the others wait up to their decision timeout).
        if !self.reports.contains_key(&self.members[0]) {
            return;
        }
        let silent: Vec<ConnId> = self.members.iter().copied().filter(|id| !self.reports.contains_key(id)).collect();
        if !silent.is_empty() {
            if first.elapsed() < self.config.report_timeout {
                return;
            }
            warn!(round = self.round, silent = %self.names(&silent), seconds = self.config.report_timeout.as_secs(), "members did not report in time: treated as gone");
            for id in silent {
                self.tell(id, &Decision::Left { reason: "did not report in time".into() });
                self.members.retain(|&m| m != id);
                self.conns.remove(&id);
            }
            self.lost = true;
        }
        let failed =
            self.reports.values().filter_map(|r| if let Reported::Failed(e) = r { Some(*e) } else { None }).min();
        if let Some(epoch) = failed {
            // A redo: survivors only; joins and manifest changes wait for a boundary.
            let survivors = self.members.clone();
            self.form(self.generation, survivors, (epoch, 0), true, "a collective failed: redoing the epoch");
            return;
        }
        let stop =
            self.reports.values().find_map(|r| if let Reported::Stopped(e, s) = r { Some((*e, *s)) } else { None });
        if let Some(at) = stop {
            self.decide_stopped(at);
            return;
        }
        let epoch =
            self.reports.values().map(|r| if let Reported::Boundary(e) = r { *e } else { 0 }).max().unwrap_or(0);
        let (generation, next) = match self.roster.read() {
            Ok(snap) => (snap.generation, self.eligible(&snap)),
            Err(e) => {
                warn!("{e}; keeping the previous membership");
                (self.generation, self.members.clone())
            }
        };
        // A member not in the manifest leaves (the master never does).
        for id in self.members.clone() {
            if !next.contains(&id) {
                info!(process = %self.name(id), generation, "leaves: not in the manifest of generation {generation}");
                self.tell(id, &Decision::Left { reason: format!("not in the manifest of generation {generation}") });
            }
        }
        if next == self.members && !self.lost {
            if generation != self.generation {
                info!(round = self.round, generation, "new generation, same members");
                self.generation = generation;
            }
            info!(round = self.round, generation = self.generation, epoch = epoch + 1, members = %self.names(&self.members), "membership unchanged: continue");
            self.continue_round();
            return;
        }
        self.form(generation, next, (epoch + 1, 0), false, "membership changed at an epoch boundary");
    }

    /// Every member goes on in the same group: the round's reports are
    /// done with, and each is told to continue (the master last).
    fn continue_round(&mut self) {
        self.reports.clear();
        self.first_report = None;
        let round = self.round;
        for id in self.members.clone().into_iter().rev() {
            self.tell(id, &Decision::Continue { round });
        }
    }

    /// A member stopped after `at` (epoch, step) for a leave: when every
    /// member did, the leavers are gone already; the others run the rest of
    /// the epoch in a group without them, or go on as they were when
    /// nobody left. Members out of the manifest leave too (the master never
    /// does); joiners wait for the boundary.
    fn decide_stopped(&mut self, at: (u64, u64)) {
        let (epoch, step) = at;
        let agree = self.reports.values().all(|r| *r == Reported::Stopped(epoch, step));
        if !agree {
            // Every member saw the same sum after the same step, so this is a
            // bug or a stale report; the safe answer is a redo from the epoch's start.
            let first = self
                .reports
                .values()
                .map(|r| match r {
                    Reported::Boundary(e) => e + 1,
                    Reported::Stopped(e, _) | Reported::Failed(e) => *e,
                })
                .min()
                .unwrap_or(epoch);
            warn!(round = self.round, reports = ?self.reports.values().collect::<Vec<_>>(), "members disagree on where they stopped");
            let survivors = self.members.clone();
            self.form(
                self.generation,
                survivors,
                (first, 0),
                true,
                "members stopped at different steps: redoing the epoch",
            );
            return;
        }
        let generation = match self.roster.read() {
            Ok(snap) => {
                for id in self.members.clone() {
                    let master = self.members.first() == Some(&id);
                    let listed =
                        self.conns.get(&id).is_some_and(|c| snap.manifest.node(&c.hello.instance_id).is_some());
                    if !master && !listed {
                        let reason = format!("not in the manifest of generation {}", snap.generation);
                        info!(process = %self.name(id), generation = snap.generation, "leaves mid-epoch: {reason}");
                        self.tell(id, &Decision::Left { reason });
                        self.members.retain(|&m| m != id);
                        self.lost = true;
                    }
                }
                snap.generation
            }
            Err(e) => {
                warn!("{e}; keeping the previous membership");
                self.generation
            }
        };
        if !self.lost {
            info!(round = self.round, epoch = epoch + 1, step, "nobody left after all: continue the epoch");
            self.continue_round();
            return;
        }
        let survivors = self.members.clone();
        self.form(generation, survivors, (epoch, step), false, "a member left mid-epoch: the rest of the epoch");
    }
}
