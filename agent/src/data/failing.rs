//! An [`ObjectStore`] that fails chosen calls of another one, for fault
//! tests (mountpoint-s3's `failure_client`): every call whose operation
//! and key match a rule fails with the rule's error, and a GET budget
//! makes every GET after the first N fail (an agent killed mid-fetch, as
//! seen from what it wrote).

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::store::{Got, Head, ObjectInfo, ObjectStore, StoreError, StoreErrorKind};

/// Which call a rule fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `list`.
    List,
    /// `head`.
    Head,
    /// `get`.
    Get,
}

#[derive(Debug)]
struct Rule {
    op: Op,
    key_contains: String,
    error: StoreError,
}

/// `inner`, with failures.
#[derive(Debug)]
pub(crate) struct FailingStore<S> {
    inner: S,
    rules: Mutex<Vec<Rule>>,
    gets_left: AtomicU64,
}

impl<S: ObjectStore> FailingStore<S> {
    /// `inner` with no failure yet.
    pub(crate) fn new(inner: S) -> FailingStore<S> {
        FailingStore { inner, rules: Mutex::new(Vec::new()), gets_left: AtomicU64::new(u64::MAX) }
    }

    /// Fails every `op` on a key containing `key_contains` (the bucket's
    /// prefix for `list`) with `error`.
    pub(crate) fn fail(self, op: Op, key_contains: &str, error: StoreError) -> FailingStore<S> {
        self.rules.lock().unwrap().push(Rule { op, key_contains: key_contains.to_owned(), error });
        self
    }

    /// Fails every `op` on such a key with `AccessDenied`.
    pub(crate) fn deny(self, op: Op, key_contains: &str) -> FailingStore<S> {
        self.fail(op, key_contains, StoreError::new(StoreErrorKind::Denied, "AccessDenied", "Access Denied"))
    }

    /// Lets `n` GETs through, then fails every other one (as if the
    /// agent had been killed there: nothing more is written).
    pub(crate) fn gets_then_fail(self, n: u64) -> FailingStore<S> {
        self.gets_left.store(n, Ordering::SeqCst);
        self
    }

    fn check(&self, op: Op, key: &str) -> Result<(), StoreError> {
        let rules = self.rules.lock().unwrap();
        match rules.iter().find(|r| r.op == op && key.contains(&r.key_contains)) {
            Some(r) => Err(r.error.clone()),
            None => Ok(()),
        }
    }
}

impl<S: ObjectStore> ObjectStore for FailingStore<S> {
    async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, StoreError> {
        self.check(Op::List, prefix)?;
        self.inner.list(bucket, prefix).await
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Head, StoreError> {
        self.check(Op::Head, key)?;
        self.inner.head(bucket, key).await
    }

    async fn get(&self, bucket: &str, key: &str, range: Option<Range<u64>>) -> Result<Got, StoreError> {
        self.check(Op::Get, key)?;
        let left = self.gets_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if left.is_err() {
            return Err(StoreError::new(StoreErrorKind::Other, "Killed", "the test stopped this fetch here"));
        }
        self.inner.get(bucket, key, range).await
    }
}
