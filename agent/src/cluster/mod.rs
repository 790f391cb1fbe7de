//! Cluster membership: who is in the cluster, with which index, and which
//! manifest every node should have applied. Pure logic: no I/O, no clock
//! reads, no randomness. Time comes in as `now_ms` (unix milliseconds), and
//! everything the outside world should do comes back as [`Effect`]s that the
//! runner carries out with the ports in [`crate::ports`].
//!
//! # The protocol (docs/ARCHITECTURE.md, "Messages (JSON on SQS)" and "Membership rules")
//!
//! Two SQS standard queues: at-least-once delivery, no ordering. Duplicates,
//! reordering and stale generations are normal, so every step below is
//! idempotent and every message carries what it needs to be judged alone.
//!
//! 1. **Register.** Every node, the master included, sends `register` to the
//!    master's queue at start and then again until it has applied a manifest
//!    that contains it ([`NodeState::should_register`]): while it waits for
//!    the formation after [`FORMING_REGISTER_RETRY_MS`], then every
//!    [`FORMING_REGISTER_RETRY_MAX_MS`]; once it has seen a manifest
//!    without it, every [`REGISTER_RETRY_MS`].
//!    The `boot_id` tells a duplicate (same boot) from a reboot (new boot).
//! 2. **Formation.** The master admits every registration that arrives before
//!    formation and gives it the lowest free index (the master is always 1).
//!    It publishes nothing until the formation is decided, so that a worker
//!    spends only a handful of AWS calls on joining: as soon as the requested
//!    number of workers (the worker group's desired capacity, read once when
//!    it starts forming) registered it publishes generation 1 and signals
//!    success; at the formation deadline (the master's start plus
//!    `formation_timeout_seconds`, persisted, so a restart does not extend
//!    it) it forms with what it has when that is at least the minimum (the
//!    group's `node_contract::MIN_WORKERS_TAG` tag)
//!    (lowering the worker group's desired capacity to match), and otherwise
//!    signals failure with the group's launch failures as the reason.
//! 3. **Manifests.** SQS has no broadcast, so the master sends each
//!    generation ONCE to the worker queue, as the parts
//!    [`node_contract::parts::split`] makes (one part up to about 3,000
//!    nodes; every body at most 256 KiB), and every node receives them with
//!    visibility timeout 0 (they stay visible to everyone). A node puts the
//!    parts together ([`node_contract::parts::Assembly`]), applies a
//!    complete manifest when it is newer than what it applied and contains
//!    the node ([`NodeState::on_manifest`]), then sends `applied
//!    {instance_id, generation}` to the master's queue. A generation whose
//!    parts could not all be sent is sent again
//!    ([`MasterState::on_publish_failed`]).
//! 4. **Retirement.** Once every node of the current manifest acknowledged it
//!    (or [`ACK_TIMEOUT_MS`] passed) the master deletes its parts from the
//!    worker queue ([`Effect::RetireManifests`]); older generations are
//!    retired just before a newer one is published. Idle nodes' long polls
//!    then block instead of returning the same parts again and again; right
//!    after applying, a node pauses before it looks again for as long as
//!    the master takes to read the acknowledgements
//!    ([`NodeState::applied_backoff_ms`]), and while the parts keep coming
//!    back [`NodeState::idle_backoff_ms`] keeps it from spinning. The master
//!    is a member like any other: the runner applies the master's own files
//!    and feeds its `applied` in, whether it reads the manifest back from the
//!    worker queue or applies the one it just published.
//!
//!    **Calls.** A worker spends 4 AWS calls from start to idle (register,
//!    the receive that brings the parts, `applied`, and after the pause the
//!    receive that finds them retired and becomes its idle long poll), 5
//!    when the master retires later than the pause, at any size up to 10
//!    parts (about 30,000 nodes; `node_contract::parts`, "Sizes"). The master handles two messages a node at
//!    formation (register, applied; one more register after a wait of 30 s
//!    for the formation, another at 90 s, then one a minute), with one receive and one batch delete for every
//!    1 to 10 of them: between 0.4 and 4 calls a node (0.4 when messages
//!    queue up, as acknowledgements do; more when registrations trickle in
//!    one at a time), plus per generation one send a part, a retirement
//!    (1 receive and 1 delete per 10 parts, and a last empty receive) and
//!    the formation signals. Measured by `tests/benches/formation.rs`.
//! 5. **Elastic changes.** After formation a new instance is admitted once
//!    its prepare-data marker (`$EFS_MOUNT/prepare_data_success_<ip>`) exists,
//!    when a prepare-data script is configured; admissions within
//!    [`BATCH_WINDOW_MS`] share one new generation. A `leave`, or an Auto
//!    Scaling terminating lifecycle action, removes a member at once with a
//!    new generation; the lifecycle action is completed only when every
//!    remaining node applied that generation (or after [`ACK_TIMEOUT_MS`]),
//!    so the trainer has dropped the node before the instance goes away.
//!    Every change is appended to the host log on EFS as
//!    `<generation> ADDED|REMOVED <ip> <unix-nanos>`.
//! 6. **Interruption notices.** A node that EC2 gave a Spot instance action
//!    or a rebalance recommendation sends `notice` and stops registering
//!    ([`NodeState::interrupted`]); the master removes it at once as for a
//!    `leave`, ends its host log line with why (`notice <what>`), does not
//!    admit it again from that boot, and completes a terminating lifecycle
//!    action for it, whenever that comes, only once every remaining node
//!    applied the generation without it (or after [`ACK_TIMEOUT_MS`]).
//!
//! Indices are stable: a member keeps its index (and so its alias
//! `deeplearning-worker<index>` and its rank) for as long as it is a member;
//! a joining node takes the lowest index no member holds.
//!
//! # Persistence
//!
//! [`MasterState`] and [`NodeState`] are serde types. The runner should call
//! a method, carry out the effects, persist the state, and only then delete
//! the message that caused them: a crash in between then repeats a step
//! (every effect tolerates that) instead of losing one. The one effect that
//! must not be repeated differently is a generation number: a state that
//! was not saved may have sent generation N, and its older self would
//! number another manifest N. So the runner records each new generation on
//! disk before it sends it (write-ahead) and passes the record to
//! [`MasterState::start`], which numbers the next generation above it.
//!
//! Modules: [`membership`] (members, indices, manifest building and the host
//! log), [`master`] (the master's state machine), [`node`] (a node's view),
//! [`timeline`] (when each member reached each phase), [`timing`] (the
//! protocol's timings) and [`effect`] (what the runner is asked to do).

pub(crate) mod effect;
pub(crate) mod master;
pub mod membership;
pub(crate) mod node;
pub mod timeline;
pub(crate) mod timing;

pub use effect::Effect;
pub use master::MasterState;
pub use node::{NodeDecision, NodeState};
pub use timing::*;

#[cfg(test)]
pub(crate) mod testkit;
