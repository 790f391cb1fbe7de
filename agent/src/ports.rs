//! The edges of the agent: the AWS services it talks to, as small traits.
//!
//! [`crate::aws`] implements them with the AWS SDK (the same code runs
//! against AWS and, through the SDK's endpoint override, against the local
//! stand-ins in the end-to-end tests). Unit tests, the cluster simulation
//! and fault injection use the in-memory implementations (`memory`), and
//! `failing` wraps any of them to fail chosen calls (both test-only).
//! Every method reports failure as a [`PortError`] that says whether
//! retrying may help.

use std::future::Future;
use std::time::Duration;

/// A call to a service failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// The service was unreachable, throttled, or answered 5xx: retry with backoff.
    #[error("{0} (will retry)")]
    Transient(String),
    /// The request itself was refused (no permission, no such queue, bad input): retrying will not help.
    #[error("{0}")]
    Permanent(String),
}

/// A message received from a queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The message body.
    pub body: String,
    /// The handle that deletes it (valid for this receive only).
    pub receipt: String,
}

/// The most receipts one batch call ([`Queue::delete_batch`],
/// [`Queue::show_batch`]) takes: SQS's limit on a batch's entries.
pub const MAX_BATCH: usize = 10;

/// One SQS queue.
pub trait Queue: Send + Sync {
    /// Sends one message.
    fn send(&self, body: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Receives up to `max` (1..=10) messages, waiting up to `wait` (long polling, at most
    /// 20 s) for the first. `visibility` overrides the queue's visibility timeout; `Some(0)`
    /// leaves the messages visible to every other receiver (how manifests are broadcast).
    fn receive(
        &self,
        max: u8,
        wait: Duration,
        visibility: Option<Duration>,
    ) -> impl Future<Output = Result<Vec<Received>, PortError>> + Send;
    /// Deletes a received message.
    fn delete(&self, receipt: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Deletes up to [`MAX_BATCH`] received messages in one call; returns how many
    /// could not be deleted (each is logged). An empty slice makes no call.
    fn delete_batch(&self, receipts: &[&str]) -> impl Future<Output = Result<usize, PortError>> + Send;
    /// Makes up to [`MAX_BATCH`] received messages visible to every receiver again at
    /// once (visibility timeout 0); returns how many could not be. An empty
    /// slice makes no call.
    fn show_batch(&self, receipts: &[&str]) -> impl Future<Output = Result<usize, PortError>> + Send;
}

/// The result a lifecycle action is completed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifecycleResult {
    /// Let the instance go on (terminate).
    Continue,
}

/// The cluster's size as the worker group holds it (see
/// [`node_contract::MIN_WORKERS_TAG`]): what the master forms the cluster with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSize {
    /// Workers requested: the group's desired capacity.
    pub requested: u32,
    /// Form with at least this many: the group's minimum-workers tag.
    pub min: u32,
}

/// The workers' Auto Scaling group.
pub trait WorkerGroup: Send + Sync {
    /// The workers requested and the minimum to form with, read when the
    /// master starts forming (not from its user data, so that resizing
    /// the stack does not replace the master).
    fn size(&self) -> impl Future<Output = Result<GroupSize, PortError>> + Send;
    /// Sets the desired capacity (used to lower it to what launched).
    fn set_desired_capacity(&self, capacity: u32) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Completes a lifecycle action once the cluster has let the instance go.
    fn complete_lifecycle_action(
        &self,
        hook: &str,
        token: &str,
        instance_id: &str,
        result: LifecycleResult,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Terminates a worker without lowering the desired capacity, so the
    /// group launches another in its place (the network gate's `replace`).
    fn terminate_instance(&self, instance_id: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Marks a worker unhealthy, so the group terminates it and launches
    /// another (the GPU gate's `replace`).
    fn set_unhealthy(&self, instance_id: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Why launches failed: the status messages of the group's failed and
    /// cancelled scaling activities, newest first (for example
    /// "InsufficientInstanceCapacity ... in us-east-1a").
    fn launch_failures(&self) -> impl Future<Output = Result<Vec<String>, PortError>> + Send;
    /// The instance ids in the group, in any lifecycle state (a failed
    /// formation's reason names those that never registered).
    fn instances(&self) -> impl Future<Output = Result<Vec<String>, PortError>> + Send;
    /// Sets a tag on the group, not propagated to its instances (the idle
    /// guard's state for `synth status`: `node_contract::idle::IDLE_TAG`).
    fn set_tag(&self, key: &str, value: &str) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// The master's own instance, for the idle guard's `stop`.
pub trait Power: Send + Sync {
    /// Powers this machine off. On EC2 an instance whose
    /// `InstanceInitiatedShutdownBehavior` is `stop` (the default, and the
    /// template's master) stops, keeping its EBS volumes; no EC2 call is made.
    fn power_off(&self) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// The outcome of formation, as the formation wait condition receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Formation {
    /// Formed (possibly with fewer workers than requested) or not.
    pub success: bool,
    /// Shown in the stack's events, for example "3 of 4 workers joined".
    pub reason: String,
    /// Distinguishes signals; the master's instance id.
    pub unique_id: String,
    /// Readable as the wait condition's `Data` attribute.
    pub data: String,
}

/// The signals the master sends CloudFormation.
pub trait StackSignals: Send + Sync {
    /// The master's own creation policy: its agent is up (`SignalResource` SUCCESS).
    fn master_up(&self, unique_id: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// The formation wait condition: success or failure, with the reason.
    fn formation(&self, outcome: &Formation) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// One line for CloudWatch Logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEvent {
    /// When the line was written, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The line, without its newline.
    pub message: String,
}

/// What CloudWatch Logs did with a batch it accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PutOutcome {
    /// Events it refused (too old, too new, or past the group's retention);
    /// sending them again would be refused again.
    pub rejected: usize,
}

/// The node's log streams in the stack's log group (`node_contract::logs`).
pub trait LogStreams: Send + Sync {
    /// Creates `stream` in the group; one that exists already is no error.
    fn create_stream(&self, stream: &str) -> impl Future<Output = Result<(), PortError>> + Send;
    /// Puts one batch, in chronological order and within the service's
    /// limits (see `crate::logs::batch`), into `stream`.
    fn put(&self, stream: &str, events: &[LogEvent]) -> impl Future<Output = Result<PutOutcome, PortError>> + Send;
}

#[cfg(test)]
pub(crate) mod failing;
#[cfg(test)]
pub(crate) mod memory;
