//! The effect executor: carries out, with the ports, what the master's
//! state machine asks for ([`Effect`]): signal CloudFormation, publish a
//! manifest (recorded first, [`SentMark`]), retire old manifests, resize
//! the worker group, complete lifecycle actions, terminate a slow worker,
//! write the network check's verdict, append to the host log, and for the
//! idle guard tag the worker group and power the master off. Calls
//! that fail transiently are retried; what still fails is logged, and the
//! answers the state needs (a failed publish, the launch failures) are fed
//! back to it as further effects.

use std::path::Path;
use std::time::Duration;

use node_contract::NodeConfig;
use node_contract::clock::Clock;
use node_contract::message;
use tracing::{debug, error, info, warn};

use super::Ports;
use super::retry::retry;
use super::state_file::SentMark;
use crate::cluster::{Effect, MasterState};
use crate::files;
use crate::ports::{MAX_BATCH, PortError, Power, Queue, Received, StackSignals, WorkerGroup};

/// Carries out `effects` in order, and those they lead to, for the master
/// `master_id` under `root`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn execute<Q: Queue, G: WorkerGroup, S: StackSignals, P: Power>(
    root: &Path,
    master_id: &str,
    config: &NodeConfig,
    state: &mut MasterState,
    sent: &mut SentMark,
    effects: Vec<Effect>,
    worker_queue: &Q,
    ports: &Ports<'_, G, S, P>,
    clock: Clock,
) -> anyhow::Result<()> {
    let (group, signals) = (ports.group, ports.signals);
    let mut queue: std::collections::VecDeque<Effect> = effects.into();
    while let Some(effect) = queue.pop_front() {
        match effect {
            Effect::SignalMasterUp => {
                let id = master_id;
                if let Err(e) = retry("signal the master's creation policy", || signals.master_up(id)).await {
                    warn!("cannot signal the master's creation policy: {e}");
                }
            }
            Effect::SignalFormation(outcome) => {
                info!(success = outcome.success, "formation: {}", outcome.reason);
                if let Err(e) = retry("signal formation", || signals.formation(&outcome)).await {
                    warn!("cannot signal formation: {e}");
                }
            }
            Effect::PublishManifest { manifest, publication } => {
                let generation = manifest.generation;
                // Write-ahead: a generation is on record before any part of
                // it can reach a node. Unrecorded, it is not sent now, but
                // again later, like a generation whose send failed.
                if let Err(e) = sent.record(generation) {
                    error!("cannot record generation {generation} before sending it, so it is not sent yet: {e}");
                    queue.extend(state.on_publish_failed(generation, clock()));
                    continue;
                }
                match publish(worker_queue, &manifest, publication).await {
                    Ok(parts) => info!(generation, nodes = manifest.nodes.len(), parts, "published the manifest"),
                    Err(PublishError::Split(e)) => error!("cannot publish manifest generation {generation}: {e}"),
                    Err(PublishError::Send(e)) => {
                        warn!("cannot publish manifest generation {generation}: {e}");
                        queue.extend(state.on_publish_failed(generation, clock()));
                    }
                }
            }
            Effect::RetireManifests { through_generation } => retire(worker_queue, through_generation).await,
            Effect::SetDesiredCapacity(n) => {
                if let Err(e) = retry("set the desired capacity", || group.set_desired_capacity(n)).await {
                    warn!("cannot set the worker group's desired capacity to {n}: {e}");
                }
            }
            Effect::FetchLaunchFailures => {
                let failures = match retry("read scaling activities", || group.launch_failures()).await {
                    Ok(f) => f,
                    Err(e) => vec![format!("the launch failures could not be read: {e}")],
                };
                let instances = match retry("read the worker group's instances", || group.instances()).await {
                    Ok(ids) => Some(ids),
                    Err(e) => {
                        warn!("cannot read the worker group's instances (the reason will not name them): {e}");
                        None
                    }
                };
                queue.extend(state.on_launch_failures(failures, instances, clock()));
            }
            Effect::CheckMembers => match retry("read the worker group's instances", || group.instances()).await {
                Ok(instances) => queue.extend(state.on_group_instances(&instances, clock())),
                Err(e) => warn!(
                    "cannot read the worker group's instances (gone members stay until their lifecycle message \
                     comes; the idle guard reads again at its next check): {e}"
                ),
            },
            Effect::CompleteLifecycle { hook, token, instance_id } => {
                let done = retry("complete the lifecycle action", || {
                    group.complete_lifecycle_action(
                        &hook,
                        &token,
                        &instance_id,
                        crate::ports::LifecycleResult::Continue,
                    )
                })
                .await;
                if let Err(e) = done {
                    warn!(instance_id, "cannot complete the lifecycle action (it times out by itself): {e}");
                }
            }
            Effect::TerminateWorker(instance_id) => {
                match retry("terminate a slow worker", || group.terminate_instance(&instance_id)).await {
                    Ok(()) => info!(instance_id, "terminated a slow worker; its group launches another"),
                    Err(e) => warn!(instance_id, "cannot terminate the slow worker: {e}"),
                }
            }
            Effect::MarkUnhealthy(instance_id) => {
                match retry("mark a worker unhealthy", || group.set_unhealthy(&instance_id)).await {
                    Ok(()) => {
                        info!(instance_id, "marked a worker whose GPUs failed unhealthy; its group launches another")
                    }
                    Err(e) => warn!(instance_id, "cannot mark the worker unhealthy: {e}"),
                }
            }
            Effect::WriteNetworkCheck(json) => {
                let path = files::network_check_path(root);
                if let Err(e) = files::atomic::write_if_changed(&path, &json, 0o644) {
                    warn!("cannot write the network check's verdict to {}: {e}", path.display());
                }
            }
            Effect::AppendHostLog(line) => {
                // A generation's lines come together (one a node at
                // formation): one write and one sync for all of them.
                let mut lines = vec![line];
                while let Some(Effect::AppendHostLog(_)) = queue.front() {
                    if let Some(Effect::AppendHostLog(next)) = queue.pop_front() {
                        lines.push(next);
                    }
                }
                if let Err(e) = files::host_log::append_all(root, &config.efs.mount, &lines) {
                    warn!("cannot append to the host log: {e}");
                }
            }
            Effect::MarkIdle(mark) => {
                let (tag, value) = (node_contract::idle::IDLE_TAG, mark.to_tag());
                if let Err(e) = retry("tag the worker group", || group.set_tag(tag, &value)).await {
                    warn!("cannot write the idle guard's state ({value}) to the worker group's tag {tag}: {e}");
                }
                mark_scaled_down(root, &config.stack_name, mark);
            }
            Effect::MarkStragglers(mark) => {
                let (tag, value) = (node_contract::straggler::STRAGGLER_TAG, mark.to_tag());
                if let Err(e) = retry("tag the worker group", || group.set_tag(tag, &value)).await {
                    warn!("cannot write the stragglers ({value}) to the worker group's tag {tag}: {e}");
                }
            }
            Effect::PowerOff => {
                info!("idle guard: powering the master off");
                if let Err(e) = ports.power.power_off().await {
                    error!("idle guard: cannot power the master off: {e}");
                }
            }
            Effect::Log(line) => info!("{line}"),
        }
    }
    Ok(())
}

/// Leaves `node_contract::idle::SCALED_DOWN_PATH` on the master while the
/// guard has acted (for `trainer launch`), and removes it otherwise (a new
/// idle stretch, a busy cluster, workers joining after a resume).
fn mark_scaled_down(root: &Path, stack: &str, mark: node_contract::idle::IdleMark) {
    use node_contract::idle::{IdleMark, SCALED_DOWN_PATH, ScaledDown};
    let path = node_contract::files::under(root, SCALED_DOWN_PATH);
    let written = match mark {
        IdleMark::Idle { acted_ms: Some(_), .. } => {
            let text = ScaledDown { stack: stack.to_owned(), mark }.to_text();
            files::atomic::write_if_changed(&path, &text, 0o644).map(drop).map_err(|e| e.to_string())
        }
        _ => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        },
    };
    if let Err(e) = written {
        warn!("cannot update {}: {e}", path.display());
    }
}

/// Why a manifest was not published.
#[derive(Debug, thiserror::Error)]
enum PublishError {
    /// It cannot be cut into parts (a bug: registrations are bounded).
    #[error(transparent)]
    Split(#[from] node_contract::parts::SplitError),
    /// A part could not be sent, even after retries.
    #[error("{0}")]
    Send(PortError),
}

/// Sends `manifest` to the worker queue as its parts; returns how many.
async fn publish<Q: Queue>(
    worker_queue: &Q,
    manifest: &message::Manifest,
    publication: u64,
) -> Result<usize, PublishError> {
    let bodies = node_contract::parts::bodies(manifest, publication)?;
    let count = bodies.len();
    for (number, body) in bodies.iter().enumerate() {
        retry("publish the manifest", || worker_queue.send(body))
            .await
            .map_err(|e| PublishError::Send(PortError::Transient(format!("part {} of {count}: {e}", number + 1))))?;
    }
    Ok(count)
}

/// How long a retirement hides what it received before deleting it.
const RETIRE_HIDE: Duration = Duration::from_secs(30);

/// The most receives one retirement makes (10 messages each): enough for
/// a manifest of 30,000 nodes republished many times over, and a bound
/// on the calls whatever the queue holds.
const RETIRE_ROUNDS: usize = 100;

/// Deletes manifest parts up to a generation from the worker queue (and
/// anything there that is not a manifest part: it does not belong there).
///
/// It receives with a visibility timeout, not 0: SQS deletes a message only
/// with its most recent receipt handle, and while the parts are visible
/// every node's receive makes a new one, so a handle from a visibility-0
/// receive is stale at once and the delete succeeds without deleting
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>).
/// Hidden, a part's handle stays the newest until the delete. It receives
/// until a receive returns nothing (every old part deleted, every newer
/// one still hidden), at most [`RETIRE_ROUNDS`] times; a newer generation's
/// parts found on the way (only after a master restart: the master retires
/// before it publishes) are made visible again together at the end, so
/// that no receive returns them twice and a queue of newer parts cannot
/// end the retirement before the old ones are gone.
async fn retire<Q: Queue>(worker_queue: &Q, through: u64) {
    let mut newer: Vec<String> = Vec::new();
    for _ in 0..RETIRE_ROUNDS {
        let received = match worker_queue.receive(10, Duration::ZERO, Some(RETIRE_HIDE)).await {
            Ok(r) => r,
            Err(e) => {
                debug!("cannot read the worker queue to retire manifests: {e}");
                break;
            }
        };
        if received.is_empty() {
            break;
        }
        let (old, keep): (Vec<&Received>, Vec<&Received>) =
            received.iter().partition(|r| match message::parse_worker_queue(&r.body) {
                Ok(part) => part.generation <= through,
                Err(_) => true,
            });
        newer.extend(keep.iter().map(|r| r.receipt.clone()));
        let old: Vec<&str> = old.iter().map(|r| r.receipt.as_str()).collect();
        if let Err(e) = worker_queue.delete_batch(&old).await {
            debug!("cannot retire manifests: {e}");
            break;
        }
    }
    for batch in newer.chunks(MAX_BATCH) {
        let batch: Vec<&str> = batch.iter().map(String::as_str).collect();
        if let Err(e) = worker_queue.show_batch(&batch).await {
            warn!(
                "cannot make {} newer manifest part(s) visible again (they will be in {RETIRE_HIDE:?}): {e}",
                batch.len()
            );
        }
    }
}

/// Fault injection: the executor over in-memory ports ([`crate::ports::memory`])
/// that fail chosen calls ([`crate::ports::failing`]), asserted on what the
/// ports end up holding. A transient failure costs the first retry's
/// delay (500 ms of real time).
#[cfg(test)]
mod tests {
    use node_contract::message::Manifest;

    use super::*;
    use crate::cluster::testkit::{T0, config, master_reg};
    use crate::ports::failing::{Failing, Op, When};
    use crate::ports::memory::{MemoryGroup, MemoryPower, MemoryQueue, MemorySignals};
    use crate::ports::{Formation, GroupSize};

    fn throttled() -> PortError {
        PortError::Transient("Throttling: Rate exceeded".into())
    }

    fn denied() -> PortError {
        PortError::Permanent("AccessDenied: not authorized".into())
    }

    fn manifest(generation: u64) -> Manifest {
        node_contract::fixtures::manifest(generation, "i-master", &[(2, "i-w1")])
    }

    /// Carries `effects` out for a master that has not formed, under
    /// `root`; returns the sent-generation record.
    async fn run<Q: Queue, G: WorkerGroup, S: StackSignals, P: Power>(
        root: &Path,
        queue: &Q,
        ports: Ports<'_, G, S, P>,
        effects: Vec<Effect>,
    ) -> SentMark {
        let config = config(30, false);
        let size = GroupSize { requested: 1, min: 1 };
        let mut state = MasterState::new(&config, size, master_reg(), "ssh-ed25519 AAAA".into(), T0);
        let mut sent = SentMark::load(root);
        execute(root, "i-master", &config, &mut state, &mut sent, effects, queue, &ports, || T0).await.unwrap();
        sent
    }

    fn group() -> MemoryGroup {
        MemoryGroup::new(GroupSize { requested: 1, min: 1 })
    }

    fn publish(generation: u64) -> Effect {
        Effect::PublishManifest { manifest: manifest(generation), publication: 7 }
    }

    #[tokio::test]
    async fn a_throttled_manifest_send_is_retried_and_the_manifest_goes_out_once() {
        let root = tempfile::tempdir().unwrap();
        let queue = Failing::new(MemoryQueue::default()).fail(Op::Send, When::Nth(1), throttled());
        let (group, signals, power) = (group(), MemorySignals::default(), MemoryPower::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        let sent = run(root.path(), &queue, ports, vec![publish(1)]).await;
        let bodies = queue.inner().sent();
        assert_eq!(bodies.len(), 1, "one part, sent once");
        let part = message::parse_worker_queue(&bodies[0]).unwrap();
        assert_eq!((part.generation, part.publication, part.nodes.len()), (1, 7, 2));
        assert_eq!((queue.calls(Op::Send), sent.through), (2, 1));
    }

    /// A refused send is not retried: the generation stays on record (it
    /// was recorded before the send), nothing is in the queue, and the
    /// effects after it are still carried out.
    #[tokio::test]
    async fn a_refused_manifest_send_is_not_retried_and_the_effects_after_it_still_run() {
        let root = tempfile::tempdir().unwrap();
        let queue = Failing::new(MemoryQueue::default()).fail(Op::Send, When::From(1), denied());
        let (group, signals, power) = (group(), MemorySignals::default(), MemoryPower::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        let sent = run(root.path(), &queue, ports, vec![publish(1), Effect::SetDesiredCapacity(3)]).await;
        assert!(queue.inner().sent().is_empty());
        assert_eq!((queue.calls(Op::Send), sent.through), (1, 1));
        assert_eq!(group.held().desired, [3]);
        assert_eq!(SentMark::load(root.path()).through, 1, "the record survives a restart");
    }

    /// A retirement whose delete is refused deletes nothing and makes the
    /// newer generation's part visible again at once; the next retirement
    /// (once the hidden parts are visible again) deletes the old part and
    /// keeps the newer one.
    #[tokio::test]
    async fn a_retirement_that_cannot_delete_loses_no_newer_part_and_the_next_one_retires() {
        let root = tempfile::tempdir().unwrap();
        let queue = Failing::new(MemoryQueue::default()).fail(Op::DeleteBatch, When::Nth(1), throttled());
        let bodies = [1, 2].map(|g| node_contract::parts::bodies(&manifest(g), g).unwrap().remove(0));
        for body in &bodies {
            queue.inner().send(body).await.unwrap();
        }
        let (group, signals, power) = (group(), MemorySignals::default(), MemoryPower::default());
        let retire = || vec![Effect::RetireManifests { through_generation: 1 }];
        run(root.path(), &queue, Ports { group: &group, signals: &signals, power: &power }, retire()).await;
        assert_eq!(queue.failed(Op::DeleteBatch), 1);
        assert_eq!(queue.inner().bodies(), bodies, "nothing deleted");
        assert_eq!(queue.inner().visible(), [bodies[1].clone()], "the newer part is visible again at once");
        queue.inner().advance(RETIRE_HIDE);
        run(root.path(), &queue, Ports { group: &group, signals: &signals, power: &power }, retire()).await;
        assert_eq!(queue.inner().bodies(), [bodies[1].clone()]);
        assert_eq!(queue.inner().visible(), [bodies[1].clone()]);
    }

    /// One retirement deletes every old part however many there are (a
    /// master that republished often leaves more than one receive
    /// returns), and leaves a newer generation's parts, even more than a
    /// receive returns, visible.
    #[tokio::test]
    async fn one_retirement_deletes_every_old_part_and_keeps_every_newer_one() {
        let root = tempfile::tempdir().unwrap();
        let queue = MemoryQueue::default();
        let body = |g: u64| node_contract::parts::bodies(&manifest(g), g).unwrap().remove(0);
        // Newer parts first, so that the first receives return only them.
        let newer: Vec<String> = (65..=76).map(body).collect();
        for b in newer.iter().cloned().chain((1..=64).map(body)) {
            queue.send(&b).await.unwrap();
        }
        let (group, signals, power) = (group(), MemorySignals::default(), MemoryPower::default());
        let retire = vec![Effect::RetireManifests { through_generation: 64 }];
        run(root.path(), &queue, Ports { group: &group, signals: &signals, power: &power }, retire).await;
        assert_eq!(queue.bodies(), newer, "the 64 old parts deleted, the 12 newer kept");
        assert_eq!(queue.visible(), newer, "the newer parts visible again at once");
    }

    #[tokio::test]
    async fn a_throttled_group_call_is_retried_and_done_once() {
        let root = tempfile::tempdir().unwrap();
        let queue = MemoryQueue::default();
        let group = Failing::new(group()).fail(Op::SetDesiredCapacity, When::Nth(1), throttled());
        let (signals, power) = (MemorySignals::default(), MemoryPower::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        run(root.path(), &queue, ports, vec![Effect::SetDesiredCapacity(3)]).await;
        assert_eq!(group.inner().held().desired, [3]);
        assert_eq!(group.calls(Op::SetDesiredCapacity), 2);
    }

    /// A refused group call is reported, not retried, and the effects after
    /// it go on: the lifecycle action of the next effect is completed.
    #[tokio::test]
    async fn a_refused_termination_is_not_retried_and_the_next_lifecycle_action_completes() {
        let root = tempfile::tempdir().unwrap();
        let queue = MemoryQueue::default();
        let group = Failing::new(group()).fail(Op::Terminate, When::From(1), denied());
        let (signals, power) = (MemorySignals::default(), MemoryPower::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        let complete =
            Effect::CompleteLifecycle { hook: "leave".into(), token: "t-1".into(), instance_id: "i-w2".into() };
        run(root.path(), &queue, ports, vec![Effect::TerminateWorker("i-w1".into()), complete]).await;
        let held = group.inner().held();
        assert!(held.terminated.is_empty());
        assert_eq!(held.completed, [("leave".to_owned(), "t-1".to_owned(), "i-w2".to_owned())]);
        assert_eq!(group.calls(Op::Terminate), 1);
    }

    #[tokio::test]
    async fn a_throttled_formation_signal_is_retried_and_sent_once() {
        let root = tempfile::tempdir().unwrap();
        let queue = MemoryQueue::default();
        let signals = Failing::new(MemorySignals::default()).fail(Op::Formation, When::Nth(1), throttled());
        let (group, power) = (group(), MemoryPower::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        let outcome = Formation {
            success: true,
            reason: "1 of 1 workers joined".into(),
            unique_id: "i-master".into(),
            data: "{}".into(),
        };
        run(root.path(), &queue, ports, vec![Effect::SignalFormation(outcome.clone())]).await;
        assert_eq!(signals.inner().held().formations, [outcome]);
        assert_eq!(signals.calls(Op::Formation), 2);
    }

    /// A refused `master_up` (the resource was already signalled) is
    /// logged and the effects after it go on.
    #[tokio::test]
    async fn a_refused_master_up_signal_does_not_stop_the_effects_after_it() {
        let root = tempfile::tempdir().unwrap();
        let queue = MemoryQueue::default();
        let signals = Failing::new(MemorySignals::default()).fail(Op::MasterUp, When::From(1), denied());
        let (group, power) = (group(), MemoryPower::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        run(root.path(), &queue, ports, vec![Effect::SignalMasterUp, Effect::SetDesiredCapacity(2)]).await;
        assert!(signals.inner().held().master_up.is_empty());
        assert_eq!((signals.calls(Op::MasterUp), group.held().desired.clone()), (1, vec![2]));
    }

    /// The idle guard's power-off is one attempt, not retried: a failure
    /// is reported, the master stays up, and the effects after it go on.
    #[tokio::test]
    async fn a_failed_power_off_is_one_attempt_and_the_effects_after_it_still_run() {
        let root = tempfile::tempdir().unwrap();
        let queue = MemoryQueue::default();
        let power = Failing::new(MemoryPower::default()).fail(Op::PowerOff, When::Nth(1), throttled());
        let (group, signals) = (group(), MemorySignals::default());
        let ports = Ports { group: &group, signals: &signals, power: &power };
        run(root.path(), &queue, ports, vec![Effect::PowerOff, Effect::SetDesiredCapacity(0)]).await;
        assert_eq!((power.inner().offs(), power.calls(Op::PowerOff)), (0, 1));
        assert_eq!(group.held().desired, [0]);
    }
}
