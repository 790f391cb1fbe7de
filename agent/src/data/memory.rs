//! An [`ObjectStore`] in memory, for tests and the benchmark's
//! bookkeeping: objects put in with their checksum (CRC-64/NVME by
//! default, as S3 adds to new objects since 2025), and counters of what
//! was asked of it (GETs, bytes read, GETs in flight and their most).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use super::checksum;
use super::store::{Checksum, Got, Head, Integrity, ObjectInfo, ObjectStore, StoreError, StoreErrorKind};

/// What a [`MemoryStore`] was asked, so far.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// `list` calls.
    pub lists: AtomicU64,
    /// `head` calls.
    pub heads: AtomicU64,
    /// `get` calls.
    pub gets: AtomicU64,
    /// Bytes the GETs returned.
    pub bytes: AtomicU64,
    /// GETs running now.
    pub in_flight: AtomicU64,
    /// The most GETs that ran at once.
    pub max_in_flight: AtomicU64,
}

/// Objects in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    objects: Mutex<BTreeMap<(String, String), (Bytes, Integrity)>>,
    /// What was asked of it.
    pub counters: Counters,
    /// Each GET takes at least this long (so GETs overlap in tests).
    pub latency: Duration,
}

impl MemoryStore {
    /// An empty store whose GETs take `latency`.
    pub(crate) fn with_latency(latency: Duration) -> MemoryStore {
        MemoryStore { latency, ..MemoryStore::default() }
    }

    /// Puts an object with its CRC-64/NVME.
    pub(crate) fn put(&self, bucket: &str, key: &str, bytes: impl Into<Bytes>) {
        let bytes = bytes.into();
        let sum = checksum::compute(&Checksum::Crc64Nvme(0), &bytes);
        self.put_with(bucket, key, bytes, Integrity::Full(sum));
    }

    /// Puts an object with the integrity given (a wrong checksum, none,
    /// a composite one).
    pub(crate) fn put_with(&self, bucket: &str, key: &str, bytes: impl Into<Bytes>, integrity: Integrity) {
        self.objects.lock().unwrap().insert((bucket.to_owned(), key.to_owned()), (bytes.into(), integrity));
    }

    /// GETs so far.
    pub(crate) fn gets(&self) -> u64 {
        self.counters.gets.load(Ordering::SeqCst)
    }

    /// Bytes read so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.counters.bytes.load(Ordering::SeqCst)
    }

    fn object(&self, bucket: &str, key: &str) -> Result<(Bytes, Integrity), StoreError> {
        self.objects
            .lock()
            .unwrap()
            .get(&(bucket.to_owned(), key.to_owned()))
            .cloned()
            .ok_or_else(|| StoreError::new(StoreErrorKind::NotFound, "NoSuchKey", "The specified key does not exist."))
    }
}

impl ObjectStore for MemoryStore {
    async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, StoreError> {
        self.counters.lists.fetch_add(1, Ordering::SeqCst);
        let objects = self.objects.lock().unwrap();
        Ok(objects
            .iter()
            .filter(|((b, k), _)| b == bucket && k.starts_with(prefix))
            .map(|((_, key), (bytes, _))| ObjectInfo {
                key: key.clone(),
                size: bytes.len() as u64,
                etag: format!("\"{:x}\"", bytes.len()),
            })
            .collect())
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Head, StoreError> {
        self.counters.heads.fetch_add(1, Ordering::SeqCst);
        let (bytes, integrity) = self.object(bucket, key)?;
        Ok(Head { size: bytes.len() as u64, integrity })
    }

    async fn get(&self, bucket: &str, key: &str, range: Option<Range<u64>>) -> Result<Got, StoreError> {
        let c = &self.counters;
        c.gets.fetch_add(1, Ordering::SeqCst);
        let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let result = self.object(bucket, key).and_then(|(bytes, integrity)| match range {
            None => Ok(Got { bytes, integrity }),
            Some(r) if r.start <= r.end && r.end <= bytes.len() as u64 => {
                Ok(Got { bytes: bytes.slice(r.start as usize..r.end as usize), integrity: Integrity::None })
            }
            Some(_) => {
                Err(StoreError::new(StoreErrorKind::Other, "InvalidRange", "The requested range is not satisfiable"))
            }
        });
        if let Ok(got) = &result {
            c.bytes.fetch_add(got.bytes.len() as u64, Ordering::SeqCst);
        }
        c.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

/// A shared store is a store (tests keep a handle to read its counters).
impl<S: ObjectStore> ObjectStore for std::sync::Arc<S> {
    fn list(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> impl std::future::Future<Output = Result<Vec<ObjectInfo>, StoreError>> + Send {
        (**self).list(bucket, prefix)
    }
    fn head(&self, bucket: &str, key: &str) -> impl std::future::Future<Output = Result<Head, StoreError>> + Send {
        (**self).head(bucket, key)
    }
    fn get(
        &self,
        bucket: &str,
        key: &str,
        range: Option<Range<u64>>,
    ) -> impl std::future::Future<Output = Result<Got, StoreError>> + Send {
        (**self).get(bucket, key, range)
    }
}
