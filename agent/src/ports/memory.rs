//! The ports in memory, for unit tests, fault injection ([`super::failing`])
//! and the cluster simulation: a queue with SQS's receive, visibility and
//! receipt semantics as far as the runner relies on them, a worker group
//! and stack signals that record what they were asked, a power switch
//! that counts, and log streams that can be made unreachable. Each keeps its record behind a mutex, so a test holds the
//! port by reference (as the runner does) and reads the record after.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::{
    Formation, GroupSize, LifecycleResult, LogEvent, LogStreams, MAX_BATCH, PortError, Power, PutOutcome, Queue,
    Received, StackSignals, WorkerGroup,
};

/// SQS's default visibility timeout, for a receive that does not set one.
const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// One message held by a [`MemoryQueue`].
#[derive(Clone, Debug)]
struct Held {
    body: String,
    /// The receipt of its newest receive: SQS deletes a message only with
    /// that one (an older receipt's delete succeeds and deletes nothing).
    receipt: Option<String>,
    /// Hidden from receives until this time (the queue's own clock).
    hidden_until_ms: u64,
}

#[derive(Debug, Default)]
struct QueueInner {
    held: Vec<Held>,
    /// Every body ever sent, in order.
    sent: Vec<String>,
    receipts: u64,
    now_ms: u64,
}

/// An SQS standard queue in memory. Receives return the visible messages
/// in the order they were sent (real SQS samples; the simulation draws its
/// own samples from [`MemoryQueue::visible`]) and never wait. Time is the
/// queue's own, moved on by [`MemoryQueue::advance`].
#[derive(Debug, Default)]
pub(crate) struct MemoryQueue(Mutex<QueueInner>);

impl MemoryQueue {
    fn inner(&self) -> MutexGuard<'_, QueueInner> {
        self.0.lock().unwrap()
    }

    /// Every body sent, in order, whether or not it is still held.
    pub(crate) fn sent(&self) -> Vec<String> {
        self.inner().sent.clone()
    }

    /// The bodies held now, visible or not.
    pub(crate) fn bodies(&self) -> Vec<String> {
        self.inner().held.iter().map(|h| h.body.clone()).collect()
    }

    /// The bodies a receive could return now.
    pub(crate) fn visible(&self) -> Vec<String> {
        let inner = self.inner();
        inner.held.iter().filter(|h| h.hidden_until_ms <= inner.now_ms).map(|h| h.body.clone()).collect()
    }

    /// Moves the queue's clock on: hidden messages whose visibility timeout
    /// passed are visible again.
    pub(crate) fn advance(&self, by: Duration) {
        self.inner().now_ms += by.as_millis() as u64;
    }

    /// Forgets every receipt handed out so far, as a receive by someone
    /// else (a node's visibility-0 receive) does in SQS: a delete with one of
    /// them now deletes nothing.
    pub(crate) fn received_elsewhere(&self) {
        for held in &mut self.inner().held {
            held.receipt = None;
        }
    }
}

impl Queue for MemoryQueue {
    async fn send(&self, body: &str) -> Result<(), PortError> {
        let mut inner = self.inner();
        inner.sent.push(body.to_owned());
        let now = inner.now_ms;
        inner.held.push(Held { body: body.to_owned(), receipt: None, hidden_until_ms: now });
        Ok(())
    }

    async fn receive(
        &self,
        max: u8,
        _wait: Duration,
        visibility: Option<Duration>,
    ) -> Result<Vec<Received>, PortError> {
        let mut inner = self.inner();
        let now = inner.now_ms;
        let hide = visibility.unwrap_or(DEFAULT_VISIBILITY).as_millis() as u64;
        let mut received = Vec::new();
        let mut next = inner.receipts;
        for held in inner.held.iter_mut().filter(|h| h.hidden_until_ms <= now).take(usize::from(max)) {
            next += 1;
            let receipt = format!("receipt-{next}");
            held.receipt = Some(receipt.clone());
            held.hidden_until_ms = now + hide;
            received.push(Received { body: held.body.clone(), receipt });
        }
        inner.receipts = next;
        Ok(received)
    }

    async fn delete(&self, receipt: &str) -> Result<(), PortError> {
        self.inner().held.retain(|h| h.receipt.as_deref() != Some(receipt));
        Ok(())
    }

    async fn delete_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        assert!(receipts.len() <= MAX_BATCH, "a batch of {} receipts (SQS takes at most {MAX_BATCH})", receipts.len());
        self.inner().held.retain(|h| !h.receipt.as_deref().is_some_and(|r| receipts.contains(&r)));
        Ok(0)
    }

    async fn show_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        assert!(receipts.len() <= MAX_BATCH, "a batch of {} receipts (SQS takes at most {MAX_BATCH})", receipts.len());
        let mut inner = self.inner();
        let now = inner.now_ms;
        let mut shown = 0;
        for held in inner.held.iter_mut().filter(|h| h.receipt.as_deref().is_some_and(|r| receipts.contains(&r))) {
            held.hidden_until_ms = now;
            shown += 1;
        }
        // SQS refuses a stale or unknown receipt's change of visibility.
        Ok(receipts.len() - shown)
    }
}

/// What a [`MemoryGroup`] holds and was asked.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// What `size` answers.
    pub(crate) size: GroupSize,
    /// Every desired capacity set, in order.
    pub(crate) desired: Vec<u32>,
    /// Every lifecycle action completed: (hook, token, instance).
    pub(crate) completed: Vec<(String, String, String)>,
    /// Every instance terminated.
    pub(crate) terminated: Vec<String>,
    /// Every instance marked unhealthy.
    pub(crate) unhealthy: Vec<String>,
    /// What `launch_failures` answers.
    pub(crate) launch_failures: Vec<String>,
    /// What `instances` answers.
    pub(crate) instances: Vec<String>,
    /// The group's tags, as last set.
    pub(crate) tags: BTreeMap<String, String>,
}

/// A worker group in memory.
#[derive(Debug)]
pub(crate) struct MemoryGroup(Mutex<Group>);

impl MemoryGroup {
    /// A group of `size` with no instances.
    pub(crate) fn new(size: GroupSize) -> MemoryGroup {
        MemoryGroup(Mutex::new(Group {
            size,
            desired: Vec::new(),
            completed: Vec::new(),
            terminated: Vec::new(),
            unhealthy: Vec::new(),
            launch_failures: Vec::new(),
            instances: Vec::new(),
            tags: BTreeMap::new(),
        }))
    }

    /// What it holds and was asked, to read or to change.
    pub(crate) fn held(&self) -> MutexGuard<'_, Group> {
        self.0.lock().unwrap()
    }
}

impl WorkerGroup for MemoryGroup {
    async fn size(&self) -> Result<GroupSize, PortError> {
        Ok(self.held().size)
    }

    async fn set_desired_capacity(&self, capacity: u32) -> Result<(), PortError> {
        let mut group = self.held();
        group.desired.push(capacity);
        group.size.requested = capacity;
        Ok(())
    }

    async fn complete_lifecycle_action(
        &self,
        hook: &str,
        token: &str,
        instance_id: &str,
        _result: LifecycleResult,
    ) -> Result<(), PortError> {
        self.held().completed.push((hook.to_owned(), token.to_owned(), instance_id.to_owned()));
        Ok(())
    }

    async fn terminate_instance(&self, instance_id: &str) -> Result<(), PortError> {
        self.held().terminated.push(instance_id.to_owned());
        Ok(())
    }

    async fn set_unhealthy(&self, instance_id: &str) -> Result<(), PortError> {
        self.held().unhealthy.push(instance_id.to_owned());
        Ok(())
    }

    async fn launch_failures(&self) -> Result<Vec<String>, PortError> {
        Ok(self.held().launch_failures.clone())
    }

    async fn instances(&self) -> Result<Vec<String>, PortError> {
        Ok(self.held().instances.clone())
    }

    async fn set_tag(&self, key: &str, value: &str) -> Result<(), PortError> {
        self.held().tags.insert(key.to_owned(), value.to_owned());
        Ok(())
    }
}

/// What [`MemorySignals`] received.
#[derive(Clone, Debug, Default)]
pub(crate) struct Signalled {
    /// Every `master_up`, by unique id.
    pub(crate) master_up: Vec<String>,
    /// Every formation signal, in order.
    pub(crate) formations: Vec<Formation>,
}

/// CloudFormation's signals in memory.
#[derive(Debug, Default)]
pub(crate) struct MemorySignals(Mutex<Signalled>);

impl MemorySignals {
    /// What it received.
    pub(crate) fn held(&self) -> MutexGuard<'_, Signalled> {
        self.0.lock().unwrap()
    }
}

impl StackSignals for MemorySignals {
    async fn master_up(&self, unique_id: &str) -> Result<(), PortError> {
        self.held().master_up.push(unique_id.to_owned());
        Ok(())
    }

    async fn formation(&self, outcome: &Formation) -> Result<(), PortError> {
        self.held().formations.push(outcome.clone());
        Ok(())
    }
}

/// A power switch that counts how often it was turned off.
#[derive(Debug, Default)]
pub(crate) struct MemoryPower(std::sync::atomic::AtomicU32);

impl MemoryPower {
    /// How often the machine was powered off.
    pub(crate) fn offs(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Power for MemoryPower {
    async fn power_off(&self) -> Result<(), PortError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// CloudWatch Logs in memory: streams of events, and a switch that makes
/// every call fail transiently (the service unreachable). Clones share
/// the streams (the shipper owns its port; the test reads a clone).
#[derive(Clone, Debug, Default)]
pub(crate) struct MemoryLogs {
    streams: Arc<Mutex<BTreeMap<String, Vec<LogEvent>>>>,
    unreachable: Arc<Mutex<bool>>,
}

impl MemoryLogs {
    /// Makes it unreachable (`true`) or reachable again.
    pub(crate) fn down(&self, down: bool) {
        *self.unreachable.lock().unwrap() = down;
    }

    /// The messages in `stream`, in order.
    pub(crate) fn messages(&self, stream: &str) -> Vec<String> {
        self.streams
            .lock()
            .unwrap()
            .get(stream)
            .map(|s| s.iter().map(|e| e.message.clone()).collect())
            .unwrap_or_default()
    }

    fn check(&self) -> Result<(), PortError> {
        if *self.unreachable.lock().unwrap() {
            return Err(PortError::Transient("connection refused".into()));
        }
        Ok(())
    }
}

impl LogStreams for MemoryLogs {
    async fn create_stream(&self, stream: &str) -> Result<(), PortError> {
        self.check()?;
        self.streams.lock().unwrap().entry(stream.to_owned()).or_default();
        Ok(())
    }

    async fn put(&self, stream: &str, events: &[LogEvent]) -> Result<PutOutcome, PortError> {
        self.check()?;
        let mut streams = self.streams.lock().unwrap();
        let Some(s) = streams.get_mut(stream) else {
            return Err(PortError::Permanent(format!("ResourceNotFoundException: no stream {stream}")));
        };
        assert!(events.windows(2).all(|w| w[0].timestamp_ms <= w[1].timestamp_ms), "not chronological");
        s.extend_from_slice(events);
        Ok(PutOutcome::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receipt semantics the retirement relies on: a message received
    /// with a visibility timeout is hidden and deleted with its receipt; one
    /// received elsewhere since keeps it (the stale delete deletes nothing);
    /// shown again, it is visible at once.
    #[tokio::test]
    async fn a_queue_hides_deletes_and_shows_by_the_newest_receipt() {
        let queue = MemoryQueue::default();
        for body in ["a", "b", "c"] {
            queue.send(body).await.unwrap();
        }
        let got = queue.receive(2, Duration::ZERO, Some(Duration::from_secs(30))).await.unwrap();
        assert_eq!(got.iter().map(|r| r.body.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(queue.visible(), ["c"]);
        assert_eq!(queue.show_batch(&[&got[1].receipt]).await, Ok(0));
        assert_eq!(queue.visible(), ["b", "c"]);
        queue.delete_batch(&[&got[0].receipt]).await.unwrap();
        assert_eq!(queue.bodies(), ["b", "c"]);
        queue.received_elsewhere();
        queue.delete(&got[1].receipt).await.unwrap();
        assert_eq!(queue.bodies(), ["b", "c"], "a stale receipt deletes nothing");
        // Visibility 0: still visible to everyone.
        assert_eq!(queue.receive(10, Duration::ZERO, Some(Duration::ZERO)).await.unwrap().len(), 2);
        let hidden = queue.receive(1, Duration::ZERO, None).await.unwrap();
        assert_eq!(queue.visible(), ["c"]);
        queue.advance(DEFAULT_VISIBILITY);
        assert_eq!(queue.visible(), ["b", "c"]);
        assert_eq!(hidden[0].body, "b");
    }
}
