//! One node's downloads: objects in parallel, a large object as parallel
//! ranged GETs written at their offsets (`pwrite`) into a temporary file,
//! memory bounded by the parts in flight (at most
//! [`Tuning::parts_in_flight`] × [`Tuning::part_size`] bytes are held), each
//! file verified (its size always; S3's full-object checksum when it has
//! one) and renamed to its final name only once complete and on disk
//! (fsync), so a file with its final name is complete by construction and
//! a restarted agent skips it ([`Engine::is_complete`]).
//!
//! Every object goes through [`Engine::ensure`], single-flight per file: the
//! node's own fetch and a peer asking this node for the same object (a
//! pull-through, [`super::server`]) share one download. The bytes come from
//! S3 or from a peer ([`super::wire::request`]); a peer that fails is
//! counted and the object read from S3 instead.
//!
//! The bound is on bytes, not GETs: a GET takes permits for the bytes it
//! will hold, in units of at most 64 KiB, so a small object holds what it
//! is (110 KB: 2 units) and many small objects are fetched at once, while
//! at most [`Tuning::parts_in_flight`] full parts are.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};
use tracing::debug;

use super::checksum::{self, Parts};
use super::error::FetchError;
use super::key;
use super::progress::Progress;
use super::roster::PeerView;
use super::store::{Checksum, Got, Integrity, ObjectStore, StoreErrorKind};
use super::wire;

/// How hard a node fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Objects larger than this are fetched in parts of this size.
    pub part_size: u64,
    /// Full parts whose bytes may be held at once: the memory bound is
    /// this times [`Tuning::part_size`] (smaller GETs hold what they are,
    /// so more of them run at once).
    pub parts_in_flight: usize,
    /// Objects fetched at once.
    pub objects_in_flight: usize,
    /// Tries of one S3 GET that fails transiently (the SDK retries
    /// within each).
    pub attempts: u32,
    /// How long a peer may take to accept a connection before it is
    /// taken for dead: 3 s, past the kernel's first SYN retransmission
    /// (1 s), so a dropped SYN (a listen backlog overflowing on a busy
    /// home) is not a dead peer.
    pub peer_connect_timeout: Duration,
}

impl Default for Tuning {
    /// 8 MiB parts, 16 in flight (128 MiB), 128 objects at once.
    fn default() -> Tuning {
        Tuning {
            part_size: 8 << 20,
            parts_in_flight: 16,
            objects_in_flight: 128,
            attempts: 3,
            peer_connect_timeout: Duration::from_secs(3),
        }
    }
}

/// One object to fetch and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The bucket.
    pub bucket: String,
    /// The whole key.
    pub key: String,
    /// Its listed size.
    pub size: u64,
    /// Its listed ETag.
    pub etag: String,
    /// The file it is written to.
    pub path: PathBuf,
}

impl Target {
    /// `s3://bucket/key`.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }
}

/// A complete file, and what it was verified against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    /// S3's checksum of it (none for a file found complete on disk).
    pub integrity: Integrity,
}

/// Where one download reads from.
#[derive(Clone, Copy, Debug)]
enum Source {
    S3,
    Peer(SocketAddr),
}

/// A download that failed: from S3 it is the object's error; from a
/// peer, the reason to read it from S3 instead.
enum Failed {
    Fetch(FetchError),
    Peer(String),
}

impl From<FetchError> for Failed {
    fn from(e: FetchError) -> Failed {
        Failed::Fetch(e)
    }
}

/// A node's downloads, shared by its own fetch and its data server.
pub struct Engine<S> {
    store: S,
    tuning: Tuning,
    parts: Arc<Semaphore>,
    progress: Arc<Progress>,
    flights: Mutex<HashMap<PathBuf, Arc<OnceCell<Done>>>>,
    /// Parts whose bytes are held now, and the most ever (the memory bound's test).
    held: Arc<AtomicU64>,
    max_held: AtomicU64,
    held_bytes: Arc<AtomicU64>,
    max_held_bytes: AtomicU64,
    /// The peers, told when one fails (fetching together).
    view: std::sync::OnceLock<Arc<PeerView>>,
}

impl<S: ObjectStore> Engine<S> {
    /// An engine reading `store`.
    pub fn new(store: S, tuning: Tuning, progress: Arc<Progress>) -> Arc<Engine<S>> {
        Arc::new(Engine {
            store,
            parts: Arc::new(Semaphore::new(tuning.parts_in_flight.max(1) * units(tuning.part_size, tuning.part_size))),
            tuning,
            progress,
            flights: Mutex::new(HashMap::new()),
            held: Arc::new(AtomicU64::new(0)),
            max_held: AtomicU64::new(0),
            held_bytes: Arc::new(AtomicU64::new(0)),
            max_held_bytes: AtomicU64::new(0),
            view: std::sync::OnceLock::new(),
        })
    }

    /// Tells `view` of every peer that fails, so its homes leave it out
    /// for a while.
    pub fn set_view(&self, view: Arc<PeerView>) {
        let _ = self.view.set(view);
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The tuning.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The progress counters.
    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// The most GETs whose bytes were held at once.
    pub fn max_parts_held(&self) -> u64 {
        self.max_held.load(Ordering::SeqCst)
    }

    /// The most bytes of GETs held at once (the memory bound:
    /// [`Tuning::parts_in_flight`] × [`Tuning::part_size`]).
    pub fn max_bytes_held(&self) -> u64 {
        self.max_held_bytes.load(Ordering::SeqCst)
    }

    /// Whether `target`'s file is there with its final name and listed
    /// size: complete (it got that name only once complete).
    pub fn is_complete(target: &Target) -> bool {
        std::fs::symlink_metadata(&target.path).is_ok_and(|m| m.is_file() && m.len() == target.size)
    }

    /// Makes `target` complete on disk, once however many ask at once:
    /// found complete, or downloaded from `home` (a peer) or, with none
    /// or when the peer fails, from S3.
    pub async fn ensure(self: &Arc<Self>, target: &Target, home: Option<SocketAddr>) -> Result<Done, FetchError> {
        let cell = self.flights.lock().unwrap().entry(target.path.clone()).or_default().clone();
        cell.get_or_try_init(|| self.obtain(target, home)).await.cloned()
    }

    async fn obtain(self: &Arc<Self>, target: &Target, home: Option<SocketAddr>) -> Result<Done, FetchError> {
        if Self::is_complete(target) {
            return Ok(Done { integrity: Integrity::None });
        }
        if let Some(addr) = home {
            match self.download(target, Source::Peer(addr)).await {
                Ok(done) => return Ok(done),
                Err(Failed::Fetch(e)) => return Err(e),
                Err(Failed::Peer(why)) => {
                    Progress::add(&self.progress.peer_fallbacks, 1);
                    if let Some(view) = self.view.get() {
                        view.failed(addr);
                    }
                    debug!(object = %target.url(), peer = %addr, "reading it from S3: the peer failed: {why}");
                }
            }
        }
        match self.download(target, Source::S3).await {
            Ok(done) => Ok(done),
            Err(Failed::Fetch(e)) => Err(e),
            Err(Failed::Peer(why)) => unreachable!("an S3 download has no peer to fail: {why}"),
        }
    }

    /// One download into the temporary file, verified, renamed. The
    /// bytes it counted as done are taken back when it fails.
    async fn download(self: &Arc<Self>, target: &Target, source: Source) -> Result<Done, Failed> {
        let counted = Arc::new(AtomicU64::new(0));
        let result = self.download_counted(target, source, &counted).await;
        if result.is_err() {
            self.progress.bytes_done.fetch_sub(counted.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        result
    }

    async fn download_counted(
        self: &Arc<Self>,
        target: &Target,
        source: Source,
        counted: &Arc<AtomicU64>,
    ) -> Result<Done, Failed> {
        let url = target.url();
        let partial = key::partial_path(&target.path);
        let write_err =
            |path: &Path, source: std::io::Error| FetchError::Write { url: url.clone(), path: path.to_owned(), source };
        if let Some(dir) = target.path.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(|e| write_err(dir, e))?;
        }
        if target.size <= self.tuning.part_size {
            let (got, _held) = self.part(target, source, None).await?;
            check_size(&url, target.size, got.bytes.len() as u64, source)?;
            if let Integrity::Full(expected) = &got.integrity {
                verify(&url, expected, &checksum::compute(expected, &got.bytes), source)?;
            }
            let (path, bytes) = (target.path.clone(), got.bytes.clone());
            let p = partial.clone();
            tokio::task::spawn_blocking(move || write_whole(&p, &path, &bytes))
                .await
                .map_err(|e| write_err(&partial, std::io::Error::other(e)))?
                .map_err(|e| write_err(&partial, e))?;
            self.account(source, got.bytes.len() as u64, counted);
            return Ok(Done { integrity: got.integrity });
        }

        // A large object: its checksum first (HEAD from S3; a peer gives
        // it with every part), then the parts in parallel.
        let part = self.tuning.part_size;
        let count = target.size.div_ceil(part) as usize;
        let range = |i: usize| (i as u64 * part)..((i as u64 + 1) * part).min(target.size);
        let file = {
            let (p, size) = (partial.clone(), target.size);
            tokio::task::spawn_blocking(move || {
                let f = std::fs::OpenOptions::new().write(true).read(true).create(true).truncate(true).open(&p)?;
                f.set_len(size)?;
                Ok::<_, std::io::Error>(f)
            })
            .await
            .map_err(|e| write_err(&partial, std::io::Error::other(e)))?
            .map_err(|e| write_err(&partial, e))?
        };
        let file = Arc::new(file);
        let mut first: Option<(Got, Held)> = None;
        let integrity = match source {
            Source::S3 => {
                let head = self.head(target).await?;
                check_size(&url, target.size, head.size, source)?;
                head.integrity
            }
            Source::Peer(_) => {
                let got = self.part(target, source, Some(range(0))).await?;
                let integrity = got.0.integrity.clone();
                first = Some(got);
                integrity
            }
        };
        let sums = Arc::new(Mutex::new(integrity.full().map(|c| Parts::new(c, count))));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..count {
            let (me, target, file, sums, counted) =
                (self.clone(), target.clone(), file.clone(), sums.clone(), counted.clone());
            let ready = if i == 0 { first.take() } else { None };
            let r = range(i);
            tasks.spawn(async move {
                let (got, held) = match ready {
                    Some(g) => g,
                    None => me.part(&target, source, Some(r.clone())).await?,
                };
                let url = target.url();
                check_size(&url, r.end - r.start, got.bytes.len() as u64, source)?;
                let len = got.bytes.len() as u64;
                let file2 = file.clone();
                let sums2 = sums.clone();
                let partial = key::partial_path(&target.path);
                tokio::task::spawn_blocking(move || {
                    if let Some(parts) = sums2.lock().unwrap().as_mut() {
                        parts.add(i, &got.bytes);
                    }
                    file2.write_all_at(&got.bytes, r.start)
                })
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
                .map_err(|e| FetchError::Write { url, path: partial, source: e })?;
                drop(held);
                me.account(source, len, &counted);
                Ok::<(), Failed>(())
            });
        }
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(Failed::Fetch(write_err(&partial, std::io::Error::other(e)))),
            }
        }
        let (p, f) = (partial.clone(), file.clone());
        let sha = matches!(integrity, Integrity::Full(Checksum::Sha256(_)));
        let computed = tokio::task::spawn_blocking(move || {
            f.sync_all()?;
            if sha { checksum::sha256_file(&p).map(Some) } else { Ok(None) }
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(|e| write_err(&partial, e))?;
        if let Integrity::Full(expected) = &integrity {
            let got = match computed {
                Some(c) => Some(c),
                None => sums.lock().unwrap().as_ref().and_then(Parts::total),
            };
            if let Some(got) = got {
                verify(&url, expected, &got, source)?;
            }
        }
        std::fs::rename(&partial, &target.path).map_err(|e| write_err(&target.path, e))?;
        Ok(Done { integrity })
    }

    fn account(&self, source: Source, n: u64, counted: &AtomicU64) {
        Progress::add(&self.progress.bytes_done, n);
        counted.fetch_add(n, Ordering::Relaxed);
        match source {
            Source::S3 => Progress::add(&self.progress.bytes_from_s3, n),
            Source::Peer(_) => Progress::add(&self.progress.bytes_from_peers, n),
        }
    }

    /// One part's bytes (the whole object when `range` is none), holding
    /// a part permit for as long as the bytes are held. From S3 the
    /// permit is taken before the GET; from a peer once its reply header
    /// came (so a node waiting on a peer's pull-through holds no memory
    /// the peer's own fetch might wait for).
    async fn part(&self, target: &Target, source: Source, range: Option<Range<u64>>) -> Result<(Got, Held), Failed> {
        match source {
            Source::S3 => {
                let mut delay = Duration::from_millis(200);
                let mut attempt = 1;
                loop {
                    let want = range.as_ref().map_or(target.size, |r| r.end - r.start);
                    let permit = self.permit(want).await;
                    Progress::add(&self.progress.s3_gets, 1);
                    match self.store.get(&target.bucket, &target.key, range.clone()).await {
                        Ok(got) => return Ok((got, self.hold(permit, want))),
                        Err(e) if e.kind == StoreErrorKind::Transient && attempt < self.tuning.attempts => {
                            drop(permit);
                            debug!(object = %target.url(), attempt, "GET failed, retrying in {delay:?}: {e}");
                            tokio::time::sleep(delay).await;
                            delay *= 2;
                            attempt += 1;
                        }
                        Err(source) => return Err(Failed::Fetch(FetchError::Read { url: target.url(), source })),
                    }
                }
            }
            Source::Peer(addr) => {
                let r = range.unwrap_or(0..target.size);
                let request = wire::Request {
                    bucket: target.bucket.clone(),
                    key: target.key.clone(),
                    size: target.size,
                    etag: target.etag.clone(),
                    offset: r.start,
                    len: r.end - r.start,
                };
                let (reply, stream) =
                    wire::request(addr, &request, self.tuning.peer_connect_timeout).await.map_err(Failed::Peer)?;
                let permit = self.permit(reply.len).await;
                let bytes = wire::read_body(stream, reply.len).await.map_err(Failed::Peer)?;
                Ok((Got { bytes, integrity: reply.integrity }, self.hold(permit, reply.len)))
            }
        }
    }

    /// Permits for `bytes` (at least one unit, at most all of them).
    async fn permit(&self, bytes: u64) -> OwnedSemaphorePermit {
        let total = self.tuning.parts_in_flight.max(1) * units(self.tuning.part_size, self.tuning.part_size);
        let n = units(bytes, self.tuning.part_size).clamp(1, total) as u32;
        self.parts.clone().acquire_many_owned(n).await.expect("the part semaphore is never closed")
    }

    fn hold(&self, permit: OwnedSemaphorePermit, bytes: u64) -> Held {
        let now = self.held.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_held.fetch_max(now, Ordering::SeqCst);
        let now_bytes = self.held_bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.max_held_bytes.fetch_max(now_bytes, Ordering::SeqCst);
        Held { _permit: permit, count: self.held.clone(), bytes, held_bytes: self.held_bytes.clone() }
    }

    async fn head(&self, target: &Target) -> Result<super::store::Head, Failed> {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            match self.store.head(&target.bucket, &target.key).await {
                Ok(h) => return Ok(h),
                Err(e) if e.kind == StoreErrorKind::Transient && attempt < self.tuning.attempts => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(source) => return Err(Failed::Fetch(FetchError::Head { url: target.url(), source })),
            }
        }
    }
}

fn check_size(url: &str, expected: u64, got: u64, source: Source) -> Result<(), Failed> {
    if expected == got {
        return Ok(());
    }
    match source {
        Source::Peer(addr) => {
            Err(Failed::Peer(format!("{addr} sent {got} bytes of {url} where {expected} were expected")))
        }
        Source::S3 => Err(Failed::Fetch(FetchError::Size { url: url.to_owned(), expected, got })),
    }
}

fn verify(url: &str, expected: &Checksum, got: &Checksum, source: Source) -> Result<(), Failed> {
    if expected == got {
        return Ok(());
    }
    match source {
        Source::Peer(addr) => Err(Failed::Peer(format!(
            "{url} from {addr}: {} mismatch ({} expected, {} computed)",
            expected.algorithm(),
            expected.hex(),
            got.hex()
        ))),
        Source::S3 => Err(Failed::Fetch(FetchError::Checksum {
            url: url.to_owned(),
            algorithm: expected.algorithm(),
            expected: expected.hex(),
            got: got.hex(),
        })),
    }
}

/// A part's bytes held: its permit, and the count of parts held (which
/// the permits bound; the count is there to be observed in tests).
struct Held {
    _permit: OwnedSemaphorePermit,
    count: Arc<AtomicU64>,
    bytes: u64,
    held_bytes: Arc<AtomicU64>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
        self.held_bytes.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// The permit unit: 64 KiB, or the part size when it is smaller.
fn unit(part_size: u64) -> u64 {
    part_size.clamp(1, 64 * 1024)
}

/// The units `bytes` take.
fn units(bytes: u64, part_size: u64) -> usize {
    bytes.div_ceil(unit(part_size)) as usize
}

/// Writes a whole small file: the temporary name, fsync, rename.
fn write_whole(partial: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(partial)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(partial, path)
}
