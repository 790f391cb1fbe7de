//! The boot step that fetches the node config's data sets before the node
//! registers (docs/ARCHITECTURE.md, "Training data: fetching from S3"):
//! every node, the master included, fetches (or, for a master-only set,
//! waits for the master's marker) with [`crate::data::DataFetch`]; its
//! `register` then carries [`DataReady`]. A failure (the object's key and
//! the step in `what`) goes to the master as a [`BootFailure`], as a
//! failed prepare-data script's does, and the fetch is tried again a
//! minute later, skipping what is complete. The prepare-data script, if
//! any, runs after this, at the top of the node loop.
//!
//! The returned [`DataFetch`] keeps the node's data server running: the
//! caller holds it as long as the agent runs, so nodes that join later
//! fetch from this one.

use std::path::Path;
use std::time::Duration;

use node_contract::NodeConfig;
use node_contract::data::DataReady;
use node_contract::message::{BootFailure, Message};
use tracing::warn;

use super::retry::retry;
use crate::data::{DataFetch, ObjectStore, Plan};
use crate::identity::Identity;
use crate::ports::Queue;

/// How long a node waits before it tries a failed fetch again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(60);

/// Fetches the node's data sets, retrying until they are complete. Without
/// data sets: `None` at once, nothing started.
pub(super) async fn fetch_before_registering<S: ObjectStore + Clone, Q: Queue>(
    root: &Path,
    config: &NodeConfig,
    me: &Identity,
    store: S,
    master_queue: &Q,
    retry_after: Duration,
) -> (Option<DataReady>, Option<DataFetch<S>>) {
    if config.data.is_empty() {
        return (None, None);
    }
    let plan = Plan::for_node(root, &config.efs.mount, config.data.clone(), &me.private_ip, &me.boot_id, config.role);
    // Until the data server listens (its port taken by a process still
    // going away), starting is tried again too.
    let mut fetch: Option<DataFetch<S>> = None;
    loop {
        if fetch.is_none() {
            match DataFetch::start(store.clone(), plan.clone()).await {
                Ok(f) => fetch = Some(f),
                Err(e) => {
                    report(me, master_queue, &format!("starting the data fetch: {e}")).await;
                    tokio::time::sleep(retry_after).await;
                    continue;
                }
            }
        }
        let Some(f) = &fetch else { continue };
        match f.run().await {
            Ok(ready) => return (Some(ready), fetch),
            Err(e) => {
                report(me, master_queue, &format!("fetching the data sets: {e}")).await;
                tokio::time::sleep(retry_after).await;
            }
        }
    }
}

/// Logs a failure and tells the master (the newest replaces the older).
async fn report<Q: Queue>(me: &Identity, master_queue: &Q, what: &str) {
    warn!("{what}; this node will not register until its data is complete (trying again in a minute)");
    let failure = BootFailure::new(&me.instance_id, &me.private_ip, what, b"");
    let body = Message::BootFailure(failure).to_body();
    if let Err(e) = retry("report the failed data fetch", || master_queue.send(&body)).await {
        warn!("cannot tell the master that the data fetch failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use node_contract::data::{DataSet, Fetcher};
    use node_contract::message::MasterInbound;

    use super::*;
    use crate::data::failing::{FailingStore, Op};
    use crate::data::memory::MemoryStore;

    fn me() -> Identity {
        Identity {
            instance_id: "i-1".into(),
            private_ip: "127.0.0.1".into(),
            hostname: "h".into(),
            instance_type: "t".into(),
            availability_zone: "z".into(),
            boot_id: "b".into(),
            ssh_host_key: "k".into(),
            gpus: 0,
        }
    }

    /// A master-only set the master cannot read: the master is told which
    /// object and why, and the fetch is tried again until it succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_fetch_is_reported_with_its_key_and_retried() {
        let root = tempfile::tempdir().unwrap();
        let mut config = crate::cluster::testkit::config(1, true);
        config.data =
            vec![DataSet { bucket: "b".into(), prefix: "in/".into(), dir: "/data".into(), fetcher: Fetcher::Master }];
        let store = Arc::new(MemoryStore::default());
        store.put("b", "in/ok.jpg", vec![1u8; 100]);
        store.put("b", "in/locked.jpg", vec![2u8; 100]);
        // Denied for the first two attempts' GETs of locked.jpg, then allowed.
        let denied = Arc::new(FailingStore::new(store.clone()).deny(Op::Get, "locked"));
        let queue = crate::ports::memory::MemoryQueue::default();
        let attempt = tokio::time::timeout(
            Duration::from_secs(2),
            fetch_before_registering(root.path(), &config, &me(), denied, &queue, Duration::from_millis(50)),
        )
        .await;
        assert!(attempt.is_err(), "a fetch that keeps failing does not end");
        let sent = queue.sent();
        assert!(sent.len() >= 2, "{sent:?}");
        match node_contract::message::parse_master_queue(&sent[0]) {
            Ok(MasterInbound::BootFailure(f)) => {
                assert!(f.what.contains("s3://b/in/locked.jpg: AccessDenied reading it"), "{}", f.what);
            }
            other => panic!("{other:?}"),
        }
        let (ready, fetch) =
            fetch_before_registering(root.path(), &config, &me(), store, &queue, Duration::from_millis(50)).await;
        assert_eq!(ready.map(|r| r.bytes), Some(200));
        assert!(fetch.is_some());
        config.data.clear();
        let (ready, fetch) = fetch_before_registering(
            root.path(),
            &config,
            &me(),
            Arc::new(MemoryStore::default()),
            &queue,
            Duration::ZERO,
        )
        .await;
        assert!(ready.is_none() && fetch.is_none());
    }
}
