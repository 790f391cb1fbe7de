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
use crate::aws::SqsQueue;
use crate::cluster::{Effect, MasterState};
use crate::files;
use crate::ports::{PortError, Power, Queue, Received, StackSignals, WorkerGroup};

/// Carries out `effects` in order, and those they lead to, for the master
/// `master_id` under `root`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn execute<G: WorkerGroup, S: StackSignals, P: Power>(
    root: &Path,
    master_id: &str,
    config: &NodeConfig,
    state: &mut MasterState,
    sent: &mut SentMark,
    effects: Vec<Effect>,
    worker_queue: &SqsQueue,
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
async fn publish(
    worker_queue: &SqsQueue,
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

/// Deletes manifest parts up to a generation from the worker queue (and
/// anything there that is not a manifest part: it does not belong there).
///
/// It receives with a visibility timeout, not 0: SQS deletes a message only
/// with its most recent receipt handle, and while the parts are visible
/// every node's receive makes a new one, so a handle from a visibility-0
/// receive is stale at once and the delete succeeds without deleting
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>).
/// Hidden, a part's handle stays the newest until the delete. A newer
/// generation's part found on the way (only after a master restart: the
/// master retires before it publishes) is made visible again at once. A few
/// rounds cover what one receive does not return.
async fn retire(worker_queue: &SqsQueue, through: u64) {
    for _ in 0..5 {
        let received = match worker_queue.receive(10, Duration::ZERO, Some(RETIRE_HIDE)).await {
            Ok(r) => r,
            Err(e) => {
                debug!("cannot read the worker queue to retire manifests: {e}");
                return;
            }
        };
        if received.is_empty() {
            return;
        }
        let (old, keep): (Vec<&Received>, Vec<&Received>) =
            received.iter().partition(|r| match message::parse_worker_queue(&r.body) {
                Ok(part) => part.generation <= through,
                Err(_) => true,
            });
        let keep: Vec<&str> = keep.iter().map(|r| r.receipt.as_str()).collect();
        if let Err(e) = worker_queue.show_batch(&keep).await {
            warn!(
                "cannot make {} newer manifest part(s) visible again (they will be in {RETIRE_HIDE:?}): {e}",
                keep.len()
            );
        }
        let old: Vec<&str> = old.iter().map(|r| r.receipt.as_str()).collect();
        if let Err(e) = worker_queue.delete_batch(&old).await {
            debug!("cannot retire manifests: {e}");
            return;
        }
    }
}
