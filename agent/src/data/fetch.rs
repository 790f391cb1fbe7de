//! A node's data sets, fetched before it registers ([`DataFetch`]).
//!
//! - [`Fetcher::EveryNode`]: every node fetches into its own disk, and the
//!   nodes fetch together: each announces itself on EFS and serves what it
//!   has on its data port ([`super::server`]); each object's home
//!   ([`super::roster`]) reads it from S3 and the others get it from the
//!   home, or from S3 when the home fails. The server keeps serving as
//!   long as the [`DataFetch`] lives (the agent's life), so nodes that
//!   join later fetch from the cluster.
//! - [`Fetcher::Master`]: only the master fetches (into a directory on
//!   EFS), then writes `$EFS/deeplearning/data/<set>.complete`; every other
//!   node waits for that marker.
//!
//! While it fetches, the node logs its progress every
//! [`Plan::log_every`] and leaves it on EFS for the master
//! ([`super::progress`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node_contract::Role;
use node_contract::data::{DataReady, DataSet, Fetcher};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::engine::{Engine, Target, Tuning};
use super::error::FetchError;
use super::key;
use super::progress::{NodeProgress, PROGRESS_VERSION, Progress, write_progress};
use super::roster::{self, Announcement, PeerView};
use super::server::{self, Served};
use super::store::{ObjectStore, StoreErrorKind};

/// What a node fetches, and how.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The node config's data sets.
    pub sets: Vec<DataSet>,
    /// The agent's root: each set's `dir` is under it.
    pub root: PathBuf,
    /// `$EFS_MOUNT/deeplearning/data` under the root: peers, progress, markers.
    pub efs_data_dir: PathBuf,
    /// This node's private IP (its peer and progress file names).
    pub ip: String,
    /// Its boot id.
    pub boot_id: String,
    /// Where its data server listens (`<ip>:DATA_PORT`).
    pub bind: SocketAddr,
    /// Master or worker (who fetches a [`Fetcher::Master`] set).
    pub role: Role,
    /// How hard it fetches.
    pub tuning: Tuning,
    /// How long a node waits after announcing itself before it fetches,
    /// so the peers starting with it are in its first view.
    pub settle: Duration,
    /// How often it reads the peers again.
    pub refresh: Duration,
    /// How often it logs its progress and writes its progress file.
    pub log_every: Duration,
}

impl Plan {
    /// The plan for a node: `efs_mount` is the node config's EFS mount,
    /// `ip` the node's address; the tuning and intervals are the
    /// production ones (settle 3 s, refresh 3 s, a line every 10 s).
    pub fn for_node(root: &Path, efs_mount: &str, sets: Vec<DataSet>, ip: &str, boot_id: &str, role: Role) -> Plan {
        let bind_ip = ip.parse().unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
        Plan {
            sets,
            root: root.to_owned(),
            efs_data_dir: node_contract::files::under(root, efs_mount).join(node_contract::data::DATA_DIR_ON_EFS),
            ip: ip.to_owned(),
            boot_id: boot_id.to_owned(),
            bind: SocketAddr::new(bind_ip, node_contract::data::DATA_PORT),
            role,
            tuning: Tuning::default(),
            settle: Duration::from_secs(3),
            refresh: Duration::from_secs(3),
            log_every: Duration::from_secs(10),
        }
    }

    fn dir(&self, set: &DataSet) -> PathBuf {
        node_contract::files::under(&self.root, &set.dir)
    }

    fn together(&self) -> bool {
        self.sets.iter().any(|s| s.fetcher == Fetcher::EveryNode)
    }
}

/// The master's completion marker of a [`Fetcher::Master`] set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    /// `s3://bucket/prefix`.
    pub url: String,
    /// The directory.
    pub dir: String,
    /// Objects.
    pub objects: u64,
    /// Bytes.
    pub bytes: u64,
}

/// `<efs data dir>/<16 hex digits of the set>.complete`: one per data set
/// (its bucket, prefix and directory).
pub fn marker_path(efs_data_dir: &Path, set: &DataSet) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{}\n{}\n{}", set.bucket, set.prefix, set.dir).bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    efs_data_dir.join(format!("{h:016x}.complete"))
}

/// A node's data fetch: its engine and, when it fetches together, its
/// data server and view of its peers. Dropping it stops the server.
pub struct DataFetch<S: ObjectStore> {
    plan: Plan,
    engine: Arc<Engine<S>>,
    view: Option<Arc<PeerView>>,
    addr: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl<S: ObjectStore> Drop for DataFetch<S> {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl<S: ObjectStore> DataFetch<S> {
    /// Starts the data server and announces this node when some set is
    /// fetched together; nothing is fetched yet.
    pub async fn start(store: S, plan: Plan) -> Result<DataFetch<S>, FetchError> {
        let engine = Engine::new(store, plan.tuning, Arc::new(Progress::default()));
        let mut fetch = DataFetch { plan, engine, view: None, addr: None, tasks: Vec::new() };
        if !fetch.plan.together() {
            return Ok(fetch);
        }
        let bind = fetch.plan.bind;
        let listener =
            tokio::net::TcpListener::bind(bind).await.map_err(|source| FetchError::Listen { addr: bind, source })?;
        let addr = listener.local_addr().map_err(|source| FetchError::Listen { addr: bind, source })?;
        let served: Vec<Served> = fetch
            .plan
            .sets
            .iter()
            .filter(|s| s.fetcher == Fetcher::EveryNode)
            .map(|s| Served { set: s.clone(), dir: fetch.plan.dir(s) })
            .collect();
        fetch.tasks.push(tokio::spawn(server::serve(listener, fetch.engine.clone(), Arc::new(served))));
        let view = Arc::new(PeerView::new(addr, &fetch.plan.efs_data_dir));
        fetch.engine.set_view(view.clone());
        fetch.addr = Some(addr);
        fetch.announce(false)?;
        view.refresh();
        let (v, every) = (view.clone(), fetch.plan.refresh);
        fetch.tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let v = v.clone();
                let _ = tokio::task::spawn_blocking(move || v.refresh()).await;
            }
        }));
        fetch.view = Some(view);
        Ok(fetch)
    }

    /// Where its data server listens (fetching together), once started.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The progress counters, for log lines.
    pub fn progress(&self) -> &Arc<Progress> {
        self.engine.progress()
    }

    /// The engine (the benchmark and tests read its bounds).
    pub fn engine(&self) -> &Arc<Engine<S>> {
        &self.engine
    }

    fn announce(&self, complete: bool) -> Result<(), FetchError> {
        let Some(addr) = self.addr else { return Ok(()) };
        let a = Announcement {
            version: 1,
            addr,
            boot_id: self.plan.boot_id.clone(),
            started_unix_ms: node_contract::clock::system(),
            complete,
        };
        roster::announce(&self.plan.efs_data_dir, &self.plan.ip, &a).map_err(|e| FetchError::Efs {
            what: "announcing this node to its peers in",
            path: roster::peers_dir(&self.plan.efs_data_dir),
            source: std::io::Error::other(e.to_string()),
        })
    }

    /// Fetches every data set (or waits for the master's), logging its
    /// progress; the first failure ends it, naming the object and the
    /// step. Called again after a failure, it skips what is complete.
    pub async fn run(&self) -> Result<DataReady, FetchError> {
        let started = Instant::now();
        let p = self.progress();
        for c in [&p.objects_total, &p.objects_done, &p.bytes_total, &p.bytes_done, &p.bytes_found] {
            c.store(0, std::sync::atomic::Ordering::Relaxed);
        }
        let from_s3_before = p.snapshot().bytes_from_s3;
        if let Some(view) = &self.view {
            tokio::time::sleep(self.plan.settle).await;
            view.refresh();
            info!(peers = view.peers().len(), "fetching the data sets together with the peers announced so far");
        }
        let reporter = tokio::spawn(report(self.engine.progress().clone(), self.plan.clone()));
        let result = self.fetch_all().await;
        reporter.abort();
        let snap = p.snapshot();
        self.write_progress(&snap, 0.0, result.is_ok());
        let marker_bytes = result?;
        self.announce(true)?;
        let millis = started.elapsed().as_millis() as u64;
        let ready = DataReady {
            ready_unix_ms: node_contract::clock::system(),
            bytes: snap.bytes_total + marker_bytes,
            bytes_from_s3: snap.bytes_from_s3 - from_s3_before,
            millis,
        };
        info!(
            "data ready: {} in {:.1} s, {} from S3 by this node, {} from peers, {} found complete",
            human(ready.bytes),
            millis as f64 / 1000.0,
            human(ready.bytes_from_s3),
            human(snap.bytes_from_peers),
            human(snap.bytes_found),
        );
        Ok(ready)
    }

    /// Every set; returns the bytes of the sets the master fetched for
    /// this worker (counted from the markers).
    async fn fetch_all(&self) -> Result<u64, FetchError> {
        let mut waited_bytes = 0;
        for set in &self.plan.sets {
            match (set.fetcher, self.plan.role) {
                (Fetcher::EveryNode, _) => {
                    self.fetch_set(set, self.view.clone()).await?;
                }
                (Fetcher::Master, Role::Master) => {
                    let (objects, bytes) = self.fetch_set(set, None).await?;
                    let marker = Marker { url: set.url(), dir: set.dir.clone(), objects, bytes };
                    let path = marker_path(&self.plan.efs_data_dir, set);
                    crate::files::atomic::write(&path, &serde_json::to_string(&marker).unwrap_or_default(), 0o644)
                        .map_err(|e| FetchError::Efs {
                            what: "writing the completion marker",
                            path: path.clone(),
                            source: std::io::Error::other(e.to_string()),
                        })?;
                }
                (Fetcher::Master, Role::Worker) => waited_bytes += self.wait_for_master(set).await,
            }
        }
        Ok(waited_bytes)
    }

    async fn wait_for_master(&self, set: &DataSet) -> u64 {
        let path = marker_path(&self.plan.efs_data_dir, set);
        let started = Instant::now();
        let mut said = Instant::now();
        info!(set = %set.url(), marker = %path.display(), "waiting for the master to fetch this data set");
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(m) = serde_json::from_str::<Marker>(&text)
            {
                return m.bytes;
            }
            if said.elapsed() >= Duration::from_secs(60) {
                info!(set = %set.url(), "still waiting for the master's data after {} s", started.elapsed().as_secs());
                said = Instant::now();
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Lists one set and fetches what is not complete; returns its
    /// objects and bytes.
    async fn fetch_set(&self, set: &DataSet, view: Option<Arc<PeerView>>) -> Result<(u64, u64), FetchError> {
        let dir = self.plan.dir(set);
        let listed = list(self.engine.store(), set, self.engine.tuning().attempts).await?;
        let mut targets = Vec::new();
        for o in listed {
            if key::is_folder_marker(&o.key, o.size) {
                continue;
            }
            let url = format!("s3://{}/{}", set.bucket, o.key);
            let path = key::path_in(&dir, &set.prefix, &o.key).map_err(|why| FetchError::UnsafeKey {
                url,
                dir: dir.clone(),
                why,
            })?;
            targets.push(Target { bucket: set.bucket.clone(), key: o.key, size: o.size, etag: o.etag, path });
        }
        let p = self.progress();
        let bytes: u64 = targets.iter().map(|t| t.size).sum();
        Progress::add(&p.objects_total, targets.len() as u64);
        Progress::add(&p.bytes_total, bytes);
        let objects = targets.len() as u64;
        // Complete files first (an earlier run's): counted, not fetched.
        let todo: Vec<Target> = targets
            .into_iter()
            .filter(|t| {
                let complete = Engine::<S>::is_complete(t);
                if complete {
                    Progress::add(&p.objects_done, 1);
                    Progress::add(&p.bytes_done, t.size);
                    Progress::add(&p.bytes_found, t.size);
                }
                !complete
            })
            .collect();
        let slots = Arc::new(tokio::sync::Semaphore::new(self.engine.tuning().objects_in_flight.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        // After the first failure no new object starts, and those in
        // flight finish (what they wrote is not fetched again).
        let mut first: Option<FetchError> = None;
        for t in todo {
            let slot = slots.clone().acquire_owned().await.expect("never closed");
            while let Some(done) = tasks.try_join_next() {
                keep_first(&mut first, done);
            }
            if first.is_some() {
                break;
            }
            let (engine, view) = (self.engine.clone(), view.clone());
            tasks.spawn(async move {
                let home = view.as_ref().and_then(|v| v.home_of(&t.key));
                let result = engine.ensure(&t, home).await;
                drop(slot);
                if result.is_ok() {
                    Progress::add(&engine.progress().objects_done, 1);
                }
                result.map(|_| ())
            });
        }
        while let Some(done) = tasks.join_next().await {
            keep_first(&mut first, done);
        }
        if let Some(e) = first {
            return Err(e);
        }
        Ok((objects, bytes))
    }

    fn write_progress(&self, snap: &super::progress::Snapshot, rate: f64, done: bool) {
        if self.plan.sets.is_empty() {
            return;
        }
        let np = NodeProgress {
            version: PROGRESS_VERSION,
            ip: self.plan.ip.clone(),
            bytes_total: snap.bytes_total,
            bytes_done: snap.bytes_done,
            bytes_from_s3: snap.bytes_from_s3,
            bytes_from_peers: snap.bytes_from_peers,
            bytes_per_second: rate,
            done,
            updated_unix_ms: node_contract::clock::system(),
        };
        if let Err(e) = write_progress(&self.plan.efs_data_dir, &np) {
            warn!("cannot leave this node's data progress on EFS: {e}");
        }
    }
}

fn keep_first(first: &mut Option<FetchError>, joined: Result<Result<(), FetchError>, tokio::task::JoinError>) {
    let e = match joined {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    first.get_or_insert(e);
}

async fn list<S: ObjectStore>(
    store: &S,
    set: &DataSet,
    attempts: u32,
) -> Result<Vec<super::store::ObjectInfo>, FetchError> {
    let mut delay = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        match store.list(&set.bucket, &set.prefix).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind == StoreErrorKind::Transient && attempt < attempts => {
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(source) => return Err(FetchError::List { url: set.url(), source }),
        }
    }
}

/// Logs a line and writes the progress file every `plan.log_every` until aborted.
async fn report(progress: Arc<Progress>, plan: Plan) {
    let mut last = (Instant::now(), progress.snapshot().bytes_done);
    loop {
        tokio::time::sleep(plan.log_every).await;
        let snap = progress.snapshot();
        let secs = last.0.elapsed().as_secs_f64().max(1e-3);
        let rate = snap.bytes_done.saturating_sub(last.1) as f64 / secs;
        last = (Instant::now(), snap.bytes_done);
        info!("{}", snap.line(rate));
        let np = NodeProgress {
            version: PROGRESS_VERSION,
            ip: plan.ip.clone(),
            bytes_total: snap.bytes_total,
            bytes_done: snap.bytes_done,
            bytes_from_s3: snap.bytes_from_s3,
            bytes_from_peers: snap.bytes_from_peers,
            bytes_per_second: rate,
            done: false,
            updated_unix_ms: node_contract::clock::system(),
        };
        let dir = plan.efs_data_dir.clone();
        let _ = tokio::task::spawn_blocking(move || write_progress(&dir, &np)).await;
    }
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.2} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b => format!("{b} bytes"),
    }
}
