//! The fetch end to end on the in-memory and failing stores: resume,
//! atomic names, errors naming the key, refused keys, checksums, the
//! memory bound, and nodes fetching together on loopback addresses.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use node_contract::Role;
use node_contract::data::{DataSet, Fetcher};

use super::checksum;
use super::failing::{FailingStore, Op};
use super::fetch::{DataFetch, Plan};
use super::memory::MemoryStore;
use super::store::{Checksum, Integrity, ObjectStore};
use super::{Engine, FetchError, Tuning};

const PART: u64 = 64 * 1024;

fn tuning() -> Tuning {
    Tuning { part_size: PART, parts_in_flight: 4, objects_in_flight: 8, ..Tuning::default() }
}

fn set(fetcher: Fetcher) -> DataSet {
    DataSet { bucket: "b".into(), prefix: "in/".into(), dir: "/data".into(), fetcher }
}

fn plan(root: &Path, efs: &Path, ip: &str, fetcher: Fetcher, role: Role) -> Plan {
    Plan {
        sets: vec![set(fetcher)],
        root: root.to_owned(),
        efs_data_dir: efs.to_owned(),
        ip: ip.into(),
        boot_id: format!("boot-{ip}"),
        bind: format!("{ip}:0").parse().unwrap(),
        role,
        tuning: tuning(),
        settle: Duration::from_millis(300),
        refresh: Duration::from_millis(100),
        log_every: Duration::from_millis(200),
    }
}

/// Deterministic bytes for object `i`.
fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| ((i * 31 + j * 7) % 251) as u8).collect()
}

/// 20 small objects (10 KB) and 3 large ones (5 parts of 64 KiB less a bit).
fn objects() -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = (0..20).map(|i| (format!("in/small/{i:02}.jpg"), body(i, 10_000))).collect();
    for i in 0..3 {
        all.push((format!("in/large/{i}.bin"), body(100 + i, 5 * PART as usize - 1000)));
    }
    all
}

/// One node fetching every object together with the others per root, on
/// 127.0.0.<first>, 127.0.0.<first + 1>, ...
async fn start_together(
    store: &Arc<MemoryStore>,
    efs: &Path,
    roots: &[tempfile::TempDir],
    first: usize,
) -> Vec<Arc<DataFetch<Arc<MemoryStore>>>> {
    let mut fetches = Vec::new();
    for (i, root) in roots.iter().enumerate() {
        let ip = format!("127.0.0.{}", i + first);
        let plan = plan(root.path(), efs, &ip, Fetcher::EveryNode, Role::Worker);
        fetches.push(Arc::new(DataFetch::start(store.clone(), plan).await.unwrap()));
    }
    fetches
}

fn store_with(objects: &[(String, Vec<u8>)], latency: Duration) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::with_latency(latency));
    for (k, b) in objects {
        store.put("b", k, b.clone());
    }
    store
}

/// The GETs one object takes: one, or one per part.
fn gets_for(len: usize) -> u64 {
    if len as u64 <= PART { 1 } else { (len as u64).div_ceil(PART) }
}

fn check_files(root: &Path, objects: &[(String, Vec<u8>)]) {
    for (k, b) in objects {
        let path = root.join("data").join(k.strip_prefix("in/").unwrap());
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(got == *b, "{} differs", path.display());
    }
}

/// An agent killed mid-fetch (every GET after the 9th fails) leaves only
/// complete files under their final names; the next run fetches exactly
/// what was not complete (counted in GETs) and nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_fetch_skips_complete_files_and_names_only_complete_ones() {
    let (root, efs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let objects = objects();
    let store = store_with(&objects, Duration::from_millis(1));
    let killed = FailingStore::new(store.clone()).gets_then_fail(9);
    let fetch = DataFetch::start(killed, plan(root.path(), efs.path(), "127.0.0.1", Fetcher::Master, Role::Master))
        .await
        .unwrap();
    let err = fetch.run().await.unwrap_err();
    assert!(err.to_string().contains("Killed reading it"), "{err}");
    drop(fetch);

    // Atomic: a final name only for a complete, correct file.
    let mut expected_gets = 0;
    let mut complete = 0;
    for (k, b) in &objects {
        let path = root.path().join("data").join(k.strip_prefix("in/").unwrap());
        match std::fs::read(&path) {
            Ok(got) => {
                assert!(got == *b, "{} has its final name but is not complete", path.display());
                complete += 1;
            }
            Err(_) => expected_gets += gets_for(b.len()),
        }
    }
    assert!(complete > 0 && complete < objects.len(), "{complete} complete");

    let before = store.gets();
    let fetch =
        DataFetch::start(store.clone(), plan(root.path(), efs.path(), "127.0.0.1", Fetcher::Master, Role::Master))
            .await
            .unwrap();
    let ready = fetch.run().await.unwrap();
    assert_eq!(store.gets() - before, expected_gets, "only what was not complete is fetched again");
    let total: usize = objects.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(ready.bytes, total as u64);
    check_files(root.path(), &objects);
    // No partial file is left.
    let leftovers: Vec<_> = walk(&root.path().join("data")).into_iter().filter(|p| p.contains("dl-partial")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A third run finds everything complete and reads nothing.
    let before = store.gets();
    fetch.run().await.unwrap();
    assert_eq!(store.gets(), before);
    // The master's marker says the set is complete.
    assert!(super::marker_path(efs.path(), &set(Fetcher::Master)).exists());
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

async fn fetch_err<S: ObjectStore>(store: S) -> (FetchError, tempfile::TempDir) {
    let (root, efs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fetch = DataFetch::start(store, plan(root.path(), efs.path(), "127.0.0.1", Fetcher::Master, Role::Master))
        .await
        .unwrap();
    (fetch.run().await.unwrap_err(), root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_object_is_named_with_the_step() {
    let store = store_with(&objects(), Duration::ZERO);
    let (err, _root) = fetch_err(FailingStore::new(store.clone()).deny(Op::Get, "small/07")).await;
    assert!(err.to_string().starts_with("s3://b/in/small/07.jpg: AccessDenied reading it: Access Denied"), "{err}");
    let (err, _root) = fetch_err(FailingStore::new(store.clone()).deny(Op::Head, "large/1")).await;
    assert!(
        err.to_string().starts_with("s3://b/in/large/1.bin: AccessDenied reading its checksum (HeadObject)"),
        "{err}"
    );
    let (err, _root) = fetch_err(FailingStore::new(store).deny(Op::List, "in/")).await;
    assert_eq!(err.to_string(), "s3://b/in/: AccessDenied listing it: Access Denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_would_escape_the_directory_is_refused() {
    let store = store_with(&objects(), Duration::ZERO);
    store.put("b", "in/../../etc/evil", b"x".to_vec());
    let (err, root) = fetch_err(store).await;
    assert!(matches!(err, FetchError::UnsafeKey { .. }), "{err:?}");
    assert!(err.to_string().starts_with("s3://b/in/../../etc/evil: refused"), "{err}");
    assert!(!root.path().join("etc/evil").exists());
}

/// A wrong checksum is caught on a small object (one GET) and on a large
/// one (CRCs of its parts combined); SHA-256, composite and absent
/// checksums pass on right bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_mismatch_is_detected() {
    let small = body(1, 1000);
    let large = body(2, 3 * PART as usize + 5);
    for (key, bytes) in [("in/s", &small), ("in/l", &large)] {
        let store = MemoryStore::default();
        store.put_with("b", key, bytes.clone(), Integrity::Full(Checksum::Crc32c(0x1234_5678)));
        let (err, root) = fetch_err(store).await;
        assert!(err.to_string().starts_with(&format!("s3://b/{key}: CRC32C mismatch: S3 says 12345678")), "{err}");
        assert!(!root.path().join("data").join(&key[3..]).exists());
    }
    let store = MemoryStore::default();
    store.put_with(
        "b",
        "in/sha",
        large.clone(),
        Integrity::Full(checksum::compute(&Checksum::Sha256([0; 32]), &large)),
    );
    store.put_with("b", "in/crc32", large.clone(), Integrity::Full(checksum::compute(&Checksum::Crc32(0), &large)));
    store.put_with("b", "in/composite", large.clone(), Integrity::Composite("CRC32".into()));
    store.put_with("b", "in/none", small.clone(), Integrity::None);
    let (root, efs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fetch = DataFetch::start(store, plan(root.path(), efs.path(), "127.0.0.1", Fetcher::Master, Role::Master))
        .await
        .unwrap();
    fetch.run().await.unwrap();
    assert_eq!(std::fs::read(root.path().join("data/sha")).unwrap(), large);

    let store = MemoryStore::default();
    let mut wrong = large.clone();
    wrong[PART as usize + 3] ^= 1;
    store.put_with("b", "in/sha", wrong, Integrity::Full(checksum::compute(&Checksum::Sha256([0; 32]), &large)));
    let (err, _root) = fetch_err(store).await;
    assert!(err.to_string().contains("SHA256 mismatch"), "{err}");
}

/// However many objects and parts there are, no more GETs run, nor part
/// buffers or bytes are held, than the bound (4 parts of 64 KiB; the
/// small objects here take a unit of 64 KiB each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_in_flight_never_exceed_the_bound() {
    let objects = objects();
    let store = store_with(&objects, Duration::from_millis(3));
    let (root, efs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fetch =
        DataFetch::start(store.clone(), plan(root.path(), efs.path(), "127.0.0.1", Fetcher::Master, Role::Master))
            .await
            .unwrap();
    fetch.run().await.unwrap();
    let max = store.counters.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=4).contains(&max), "{max} GETs at once, bound 4");
    let held = fetch.engine().max_parts_held();
    assert!((2..=4).contains(&held), "{held} parts held at once, bound 4");
    let bytes = fetch.engine().max_bytes_held();
    assert!(bytes <= 4 * PART, "{bytes} bytes held at once, bound {}", 4 * PART);
    check_files(root.path(), &objects);
}

/// A worker waits for the master's marker of a master-only set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_waits_for_the_masters_marker() {
    let (root, efs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = store_with(&objects(), Duration::ZERO);
    let worker =
        DataFetch::start(store.clone(), plan(root.path(), efs.path(), "127.0.0.2", Fetcher::Master, Role::Worker))
            .await
            .unwrap();
    let waiting = tokio::spawn(async move { worker.run().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    assert_eq!(store.gets(), 0, "a worker reads nothing of a master-only set");
    let master =
        DataFetch::start(store.clone(), plan(root.path(), efs.path(), "127.0.0.1", Fetcher::Master, Role::Master))
            .await
            .unwrap();
    let m = master.run().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!((w.bytes, w.bytes_from_s3), (m.bytes, 0));
}

/// Nodes on 127.0.0.x fetching together read each object from S3 about
/// once, and every node ends with every file, verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_fetching_together_read_s3_once() {
    let objects = objects();
    let store = store_with(&objects, Duration::from_millis(2));
    let efs = tempfile::tempdir().unwrap();
    let roots: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let fetches = start_together(&store, efs.path(), &roots, 2).await;
    let runs: Vec<_> = fetches
        .iter()
        .map(|f| {
            let f = f.clone();
            tokio::spawn(async move { f.run().await })
        })
        .collect();
    let mut from_s3 = 0;
    for r in runs {
        from_s3 += r.await.unwrap().unwrap().bytes_from_s3;
    }
    let one_copy: u64 = objects.iter().map(|(_, b)| b.len() as u64).sum();
    let one_copy_gets: u64 = objects.iter().map(|(_, b)| gets_for(b.len())).sum();
    assert_eq!(store.bytes_read(), from_s3);
    assert!(store.bytes_read() <= one_copy + one_copy / 10, "{} bytes read for {one_copy}", store.bytes_read());
    assert!(store.gets() <= one_copy_gets + one_copy_gets / 10, "{} GETs for {one_copy_gets}", store.gets());
    for root in &roots {
        check_files(root.path(), &objects);
    }
    let peers: u64 = fetches.iter().map(|f| f.progress().snapshot().bytes_from_peers).sum();
    assert!(peers >= 2 * one_copy, "{peers} bytes from peers");
    // The progress files sum up.
    let line = super::summary_line(&super::read_progress(efs.path()), node_contract::clock::system(), 60_000);
    assert!(line.contains("on 4 nodes (4 done)"), "{line}");
}

/// Peers that die: one that announced itself and never served, and one
/// killed mid-way through its own fetch (its run and its server stop).
/// The others fall back to S3 for their objects, count it, and complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_peers_are_skipped_and_their_objects_read_from_s3() {
    let objects = objects();
    let store = store_with(&objects, Duration::from_millis(40));
    let efs = tempfile::tempdir().unwrap();
    let roots: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut fetches = start_together(&store, efs.path(), &roots, 12).await;
    // The fourth dies before it serves anything: its server stops.
    drop(fetches.pop());
    let runs: Vec<_> = fetches
        .iter()
        .map(|f| {
            let f = f.clone();
            tokio::spawn(async move { f.run().await })
        })
        .collect();
    // The third dies mid-way: once it has written something of its own.
    while fetches[2].progress().snapshot().bytes_done == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut runs = runs.into_iter();
    let (a, b, c) = (runs.next().unwrap(), runs.next().unwrap(), runs.next().unwrap());
    assert!(!c.is_finished(), "the third finished before it could die");
    c.abort();
    let _ = c.await;
    drop(fetches.pop());
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    check_files(roots[0].path(), &objects);
    check_files(roots[1].path(), &objects);
    let fallbacks: u64 = fetches.iter().map(|f| f.progress().snapshot().peer_fallbacks).sum();
    assert!(fallbacks > 0, "no fallback counted");
}

#[test]
fn engine_knows_complete_files_by_name_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a");
    let t = super::Target { bucket: "b".into(), key: "a".into(), size: 3, etag: String::new(), path: path.clone() };
    assert!(!Engine::<MemoryStore>::is_complete(&t));
    std::fs::write(&path, b"ab").unwrap();
    assert!(!Engine::<MemoryStore>::is_complete(&t));
    std::fs::write(&path, b"abc").unwrap();
    assert!(Engine::<MemoryStore>::is_complete(&t));
}
