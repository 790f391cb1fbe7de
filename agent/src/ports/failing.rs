//! A port that fails on purpose (mountpoint-s3's `failure_client`):
//! [`Failing`] wraps any implementation of a port trait and fails chosen
//! calls of a chosen operation with a chosen [`PortError`], so a test can
//! ask what the code above the port does when, say, the second send is
//! throttled or a signal is refused for good. The calls it lets through go
//! to the wrapped port, whose record the test then reads.
//!
//! The object store has its own wrapper with key-based rules
//! (`crate::data::failing::FailingStore`), as its errors are not
//! [`PortError`]s.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    Formation, GroupSize, LifecycleResult, LogEvent, LogStreams, PortError, Power, PutOutcome, Queue, Received,
    StackSignals, WorkerGroup,
};

/// A port operation, one for each trait method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Op {
    /// [`Queue::send`].
    Send,
    /// [`Queue::receive`].
    Receive,
    /// [`Queue::delete`].
    Delete,
    /// [`Queue::delete_batch`].
    DeleteBatch,
    /// [`Queue::show_batch`].
    ShowBatch,
    /// [`WorkerGroup::size`].
    Size,
    /// [`WorkerGroup::set_desired_capacity`].
    SetDesiredCapacity,
    /// [`WorkerGroup::complete_lifecycle_action`].
    CompleteLifecycle,
    /// [`WorkerGroup::terminate_instance`].
    Terminate,
    /// [`WorkerGroup::set_unhealthy`].
    SetUnhealthy,
    /// [`WorkerGroup::launch_failures`].
    LaunchFailures,
    /// [`WorkerGroup::instances`].
    Instances,
    /// [`WorkerGroup::set_tag`].
    SetTag,
    /// [`StackSignals::master_up`].
    MasterUp,
    /// [`StackSignals::formation`].
    Formation,
    /// [`Power::power_off`].
    PowerOff,
    /// [`LogStreams::create_stream`].
    CreateStream,
    /// [`LogStreams::put`].
    Put,
}

/// Which calls of an operation a rule fails, counted from 1 per operation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum When {
    /// The Nth call only.
    Nth(u64),
    /// The Nth call and every one after it (a service gone for good).
    From(u64),
    /// Each call with a chance of 1 in N, drawn from the wrapper's seeded
    /// PRNG (the simulation's failed sends).
    OneIn(usize),
}

#[derive(Debug)]
struct Rule {
    op: Op,
    when: When,
    error: PortError,
}

struct Record {
    rules: Vec<Rule>,
    calls: BTreeMap<Op, u64>,
    failed: BTreeMap<Op, u64>,
    /// The state of [`When::OneIn`]'s PRNG.
    rng: SplitMix64,
}

/// `inner`, with the failures its rules ask for. Clones share the rules
/// and the counts (as clones of the real ports share their client).
#[derive(Clone)]
pub(crate) struct Failing<P> {
    inner: P,
    record: Arc<Mutex<Record>>,
}

impl<P> Failing<P> {
    /// `inner` with no failure yet.
    pub(crate) fn new(inner: P) -> Failing<P> {
        let record = Record { rules: Vec::new(), calls: BTreeMap::new(), failed: BTreeMap::new(), rng: SplitMix64(0) };
        Failing { inner, record: Arc::new(Mutex::new(record)) }
    }

    /// Also fails the calls of `op` that `when` picks, with `error`.
    pub(crate) fn fail(self, op: Op, when: When, error: PortError) -> Failing<P> {
        self.record.lock().unwrap().rules.push(Rule { op, when, error });
        self
    }

    /// Seeds the PRNG of [`When::OneIn`].
    pub(crate) fn seeded(self, seed: u64) -> Failing<P> {
        self.record.lock().unwrap().rng = SplitMix64(seed);
        self
    }

    /// The wrapped port.
    pub(crate) fn inner(&self) -> &P {
        &self.inner
    }

    /// The calls of `op` so far, failed ones included.
    pub(crate) fn calls(&self, op: Op) -> u64 {
        self.record.lock().unwrap().calls.get(&op).copied().unwrap_or(0)
    }

    /// The calls of `op` failed so far.
    pub(crate) fn failed(&self, op: Op) -> u64 {
        self.record.lock().unwrap().failed.get(&op).copied().unwrap_or(0)
    }

    /// Counts a call of `op`; its error when a rule fails it. Every
    /// [`When::OneIn`] rule of the operation draws, so the draws follow
    /// the calls whatever the other rules say.
    fn check(&self, op: Op) -> Result<(), PortError> {
        let mut record = self.record.lock().unwrap();
        let record = &mut *record;
        let n = {
            let calls = record.calls.entry(op).or_default();
            *calls += 1;
            *calls
        };
        let mut error = None;
        for rule in record.rules.iter().filter(|r| r.op == op) {
            let fails = match rule.when {
                When::Nth(k) => n == k,
                When::From(k) => n >= k,
                When::OneIn(k) => k > 0 && record.rng.below(k) == 0,
            };
            if fails && error.is_none() {
                error = Some(rule.error.clone());
            }
        }
        match error {
            Some(e) => {
                *record.failed.entry(op).or_default() += 1;
                Err(e)
            }
            None => Ok(()),
        }
    }
}

/// A small deterministic PRNG (SplitMix64) for property-style tests and
/// [`When::OneIn`]'s draws (the cluster testkit re-exports it).
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next number.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Shuffles in place (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

impl<Q: Queue> Queue for Failing<Q> {
    async fn send(&self, body: &str) -> Result<(), PortError> {
        self.check(Op::Send)?;
        self.inner.send(body).await
    }

    async fn receive(&self, max: u8, wait: Duration, visibility: Option<Duration>) -> Result<Vec<Received>, PortError> {
        self.check(Op::Receive)?;
        self.inner.receive(max, wait, visibility).await
    }

    async fn delete(&self, receipt: &str) -> Result<(), PortError> {
        self.check(Op::Delete)?;
        self.inner.delete(receipt).await
    }

    async fn delete_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        self.check(Op::DeleteBatch)?;
        self.inner.delete_batch(receipts).await
    }

    async fn show_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        self.check(Op::ShowBatch)?;
        self.inner.show_batch(receipts).await
    }
}

impl<G: WorkerGroup> WorkerGroup for Failing<G> {
    async fn size(&self) -> Result<GroupSize, PortError> {
        self.check(Op::Size)?;
        self.inner.size().await
    }

    async fn set_desired_capacity(&self, capacity: u32) -> Result<(), PortError> {
        self.check(Op::SetDesiredCapacity)?;
        self.inner.set_desired_capacity(capacity).await
    }

    async fn complete_lifecycle_action(
        &self,
        hook: &str,
        token: &str,
        instance_id: &str,
        result: LifecycleResult,
    ) -> Result<(), PortError> {
        self.check(Op::CompleteLifecycle)?;
        self.inner.complete_lifecycle_action(hook, token, instance_id, result).await
    }

    async fn terminate_instance(&self, instance_id: &str) -> Result<(), PortError> {
        self.check(Op::Terminate)?;
        self.inner.terminate_instance(instance_id).await
    }

    async fn set_unhealthy(&self, instance_id: &str) -> Result<(), PortError> {
        self.check(Op::SetUnhealthy)?;
        self.inner.set_unhealthy(instance_id).await
    }

    async fn launch_failures(&self) -> Result<Vec<String>, PortError> {
        self.check(Op::LaunchFailures)?;
        self.inner.launch_failures().await
    }

    async fn instances(&self) -> Result<Vec<String>, PortError> {
        self.check(Op::Instances)?;
        self.inner.instances().await
    }

    async fn set_tag(&self, key: &str, value: &str) -> Result<(), PortError> {
        self.check(Op::SetTag)?;
        self.inner.set_tag(key, value).await
    }
}

impl<S: StackSignals> StackSignals for Failing<S> {
    async fn master_up(&self, unique_id: &str) -> Result<(), PortError> {
        self.check(Op::MasterUp)?;
        self.inner.master_up(unique_id).await
    }

    async fn formation(&self, outcome: &Formation) -> Result<(), PortError> {
        self.check(Op::Formation)?;
        self.inner.formation(outcome).await
    }
}

impl<P: Power> Power for Failing<P> {
    async fn power_off(&self) -> Result<(), PortError> {
        self.check(Op::PowerOff)?;
        self.inner.power_off().await
    }
}

impl<L: LogStreams> LogStreams for Failing<L> {
    async fn create_stream(&self, stream: &str) -> Result<(), PortError> {
        self.check(Op::CreateStream)?;
        self.inner.create_stream(stream).await
    }

    async fn put(&self, stream: &str, events: &[LogEvent]) -> Result<PutOutcome, PortError> {
        self.check(Op::Put)?;
        self.inner.put(stream, events).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryQueue;
    use super::*;

    #[tokio::test]
    async fn the_nth_call_and_from_the_nth_on_fail_and_the_rest_go_through() {
        let throttled = PortError::Transient("throttled".into());
        let queue = Failing::new(MemoryQueue::default()).fail(Op::Send, When::Nth(2), throttled.clone()).fail(
            Op::Send,
            When::From(4),
            PortError::Permanent("gone".into()),
        );
        let mut results = Vec::new();
        for i in 1..=5 {
            results.push(queue.send(&i.to_string()).await);
        }
        assert_eq!(results[0], Ok(()));
        assert_eq!(results[1], Err(throttled));
        assert_eq!(results[2], Ok(()));
        assert!(matches!(results[3], Err(PortError::Permanent(_))) && results[4] == results[3]);
        assert_eq!(queue.inner().sent(), ["1", "3"]);
        assert_eq!((queue.calls(Op::Send), queue.failed(Op::Send), queue.calls(Op::Receive)), (5, 3, 0));
    }
}
