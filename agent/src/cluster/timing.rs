//! The protocol's timings (docs/ARCHITECTURE.md, "Membership rules"): how
//! often a node registers again, how long the master batches joins and
//! waits for acknowledgements, and a node's back-off between receives. The
//! master's and a node's state machines read them; nothing here reads a
//! clock.

/// A node joining a formed cluster re-sends `register` this often until it
/// is in an applied manifest ([`super::NodeState::register_retry_ms`]).
pub const REGISTER_RETRY_MS: u64 = 15_000;

/// A node waiting for the formation sends `register` again this long after
/// its first ([`super::NodeState::register_retry_ms`]).
pub const FORMING_REGISTER_RETRY_MS: u64 = 30_000;

/// After its second, a node waiting for the formation registers this often.
pub const FORMING_REGISTER_RETRY_MAX_MS: u64 = 60_000;

/// After formation, admissions (and reboots that change a node's address or
/// keys) within this window are published together as one generation.
pub const BATCH_WINDOW_MS: u64 = 2_000;

/// How long the master waits for every node to acknowledge a generation
/// before it retires the manifest anyway (and completes a pending lifecycle
/// action anyway).
pub const ACK_TIMEOUT_MS: u64 = 60_000;

/// The current manifest is re-published for a registering member that has
/// not applied it at most this often.
pub const REPUBLISH_INTERVAL_MS: u64 = 10_000;

/// How long the master waits for the answer to [`super::Effect::FetchLaunchFailures`]
/// before it signals the formation failure without them.
pub const LAUNCH_FAILURES_TIMEOUT_MS: u64 = 60_000;

/// A `register` from the same boot of a node that left within this window is
/// taken as a delayed copy, not as a wish to rejoin. A node that really
/// wants back keeps re-sending every [`REGISTER_RETRY_MS`], so it is
/// admitted once the window has passed.
pub const REJOIN_AFTER_LEAVE_MS: u64 = 60_000;

/// The first idle back-off of a node whose receive returned nothing new.
pub const IDLE_BACKOFF_MIN_MS: u64 = 1_000;

/// The longest idle back-off.
pub const IDLE_BACKOFF_MAX_MS: u64 = 8_000;

/// The pause after applying a generation, per node in it (see
/// [`super::NodeState::applied_backoff_ms`]). Each node costs the queue service
/// about 4 calls at formation (its ack, the master's share of reading acks
/// 10 at a time, its own receives); one local AWS (moto) serves about 200
/// calls a second, so 8 ms a node; real SQS is faster, so the pause errs on
/// the long side, which costs only latency for a generation that follows
/// within it (nodes in a long poll see a new generation at once).
pub const APPLIED_BACKOFF_PER_NODE_MS: u64 = 8;
