//! The node loop, on every node: register until the node appears in a
//! manifest, long-poll the worker queue for manifest parts (visibility 0: a
//! part stays visible to every node until the master retires it), apply the
//! newest complete manifest to disk, and report `applied`. A generation the
//! network gate checks starts this node's probe beside the loop
//! ([`super::probe`]).
//!
//! A manifest that cannot be written (a read-only or full file system) is
//! tried again when it arrives again; nothing is acknowledged until it is
//! written.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use node_contract::NodeConfig;
use node_contract::clock::Clock;
use node_contract::message::{self, Applied, Message, Register};
use node_contract::parts::Assembly;
use tracing::{debug, error, info, warn};

use super::boot::{prepare_data, prepare_scratch};
use super::probe::{Link, ProbeTask};
use super::retry::{LONG_POLL, retry};
use crate::cluster::{NodeDecision, NodeState};
use crate::files;
use crate::identity::Identity;
use crate::netgate;
use crate::ports::{Queue, Received};

/// Runs the node loop under `root` until it fails (a state file that
/// cannot be read); AWS errors and unwritable files are logged and retried.
#[allow(clippy::too_many_arguments)]
pub(super) async fn node_loop<Q: Queue + Clone + 'static>(
    root: &Path,
    config: &NodeConfig,
    me: &Identity,
    register: &Register,
    cluster_key: Option<&files::cluster_key::ClusterKey>,
    master_queue: &Q,
    worker_queue: &Q,
    interrupted: &AtomicBool,
    clock: Clock,
) -> anyhow::Result<()> {
    let previous = files::state::read(root)?.filter(|s| s.instance_id == me.instance_id);
    let applied = previous.as_ref().map(|s| s.generation);
    // The manifest applied last: the network gate measures a generation
    // that adds a node to it (netgate::checks, the master's rule too).
    let mut last_applied: Option<message::Manifest> = previous.map(|s| s.manifest);
    let mut node = NodeState::new(me.instance_id.clone(), applied);
    let mut assembly = Assembly::new();
    let register_body = Message::Register(register.clone()).to_body();
    let mut prepared = false;
    // The network gate's probe in flight: it runs beside this loop, which
    // keeps reading generations while it waits for its phase and measures.
    let mut probe: Option<ProbeTask> = None;
    loop {
        if interrupted.load(Ordering::SeqCst) && !node.is_interrupted() {
            node.interrupted();
        }
        if !prepared {
            let ready = match prepare_scratch(root, config, me) {
                Ok(()) => prepare_data(config, root, me).await,
                Err(failure) => Err(failure),
            };
            match ready {
                Ok(()) => prepared = true,
                Err(failure) => {
                    // The scratch volume or the prepare-data script failed.
                    // The master quotes it if formation fails; sent at every
                    // failed attempt (the newest replaces the older).
                    let body = Message::BootFailure(failure).to_body();
                    if let Err(e) = retry("report the failed prepare-data script", || master_queue.send(&body)).await {
                        warn!("cannot tell the master that the prepare-data script failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    continue;
                }
            }
        }
        if node.should_register(clock()) {
            match retry("register", || master_queue.send(&register_body)).await {
                Ok(()) => debug!("registered"),
                Err(e) => warn!("cannot register with the master: {e}"),
            }
        }
        let received = match worker_queue.receive(10, LONG_POLL, Some(Duration::ZERO)).await {
            Ok(r) => r,
            Err(e) => {
                warn!("cannot read manifests: {e}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        let newest = assemble(&mut assembly, &received, config, node.applied_generation());
        let mut applied_nodes: Option<usize> = None;
        if let Some((manifest, publication)) = newest {
            match node.on_manifest(&manifest) {
                NodeDecision::Apply => {
                    // A manifest that cannot be written (a read-only or full
                    // file system) is retried, not fatal: it stays visible in
                    // the worker queue (or is re-published when this node
                    // registers again), so the next receive brings it back,
                    // with the idle back-off between attempts. Exiting would
                    // not help: a restart by systemd meets the same disk, and
                    // on the master it would also stop formation and its
                    // signals. The node does not acknowledge what it could
                    // not write, so the master sees it as lagging.
                    let written = tokio::task::block_in_place(|| apply(root, config, me, &manifest, cluster_key));
                    if let Err(e) = written {
                        error!(
                            generation = manifest.generation,
                            "cannot apply the manifest, retrying when it arrives again; files not yet written keep \
                             their old content: {e:#}"
                        );
                        tokio::time::sleep(Duration::from_millis(node.idle_backoff_ms(true))).await;
                        continue;
                    }
                    node.applied(manifest.generation);
                    assembly.forget_through(manifest.generation);
                    applied_nodes = Some(manifest.nodes.len());
                    let ack = Message::Applied(Applied {
                        instance_id: me.instance_id.clone(),
                        generation: manifest.generation,
                    })
                    .to_body();
                    if let Err(e) = retry("report applied", || master_queue.send(&ack)).await {
                        warn!("cannot report generation {} applied: {e}", manifest.generation);
                    }
                    if config.network_check.is_some() && netgate::checks(last_applied.as_ref(), &manifest) {
                        if probe.take().is_some_and(|older| older.is_running()) {
                            // A newer generation to check: the older schedule
                            // is void (dropping its task stopped it).
                            debug!(generation = manifest.generation, "a newer network check: the previous probe stops");
                        }
                        // The task takes only what it needs: its peer and
                        // place in the ring, not the whole manifest.
                        if let Some(peer) = netgate::ring_peer(&manifest, &me.instance_id) {
                            let link = Link {
                                me: me.instance_id.clone(),
                                generation: manifest.generation,
                                peer: peer.clone(),
                                phase: netgate::phase(&manifest, &me.instance_id).unwrap_or_default(),
                            };
                            probe = Some(ProbeTask::spawn(link, publication, master_queue.clone(), clock));
                        }
                    }
                    last_applied = Some(manifest);
                }
                NodeDecision::Ignore(why) => debug!(generation = manifest.generation, "manifest ignored: {why}"),
                NodeDecision::NotMember => debug!(generation = manifest.generation, "not in this manifest yet"),
            }
        }
        // Right after applying, the next receive would return the same
        // parts (the master retires them only once every node has acked), so
        // it would be a call spent for nothing: pause first, for as long as
        // the master takes to read that many acknowledgements
        // (NodeState::applied_backoff_ms). A newer generation is seen no
        // later than with that call, and a worker spends calls on formation
        // only for what is new.
        let pause = match applied_nodes {
            Some(nodes) => node.applied_backoff_ms(nodes),
            None if !received.is_empty() => node.idle_backoff_ms(true),
            None => node.idle_backoff_ms(false),
        };
        if pause > 0 {
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}

/// Adds the manifest parts among `received` to `assembly`; returns the
/// newest manifest they complete, with its publication id. Parts of other
/// clusters, of generations not newer than `applied`, and other bodies are
/// logged and dropped.
fn assemble(
    assembly: &mut Assembly,
    received: &[Received],
    config: &NodeConfig,
    applied: Option<u64>,
) -> Option<(message::Manifest, u64)> {
    let mut newest: Option<(message::Manifest, u64)> = None;
    for r in received {
        let part = match message::parse_worker_queue(&r.body) {
            Ok(p) if p.cluster == config.cluster => p,
            Ok(p) => {
                debug!(cluster = %p.cluster, "a manifest part of another cluster; ignored");
                continue;
            }
            // A master of another agent release: the one message an operator must see.
            Err(e @ (message::Unusable::UnsupportedVersion(_) | message::Unusable::UnknownKind(_))) => {
                warn!("ignored a worker queue message: {e}");
                continue;
            }
            Err(e) => {
                debug!("ignored a worker queue message: {e}");
                continue;
            }
        };
        if applied.is_some_and(|a| part.generation <= a) {
            continue;
        }
        let publication = part.publication;
        match assembly.add(part) {
            Ok(Some(m)) if newest.as_ref().is_none_or(|(n, _)| m.generation > n.generation) => {
                newest = Some((m, publication))
            }
            Ok(_) => {}
            Err(e) => warn!("dropped manifest parts: {e}"),
        }
    }
    newest
}

/// Writes a manifest's files (the profile with this node's NCCL/EFA
/// environment) and the state file.
fn apply(
    root: &Path,
    config: &NodeConfig,
    me: &Identity,
    manifest: &message::Manifest,
    cluster_key: Option<&files::cluster_key::ClusterKey>,
) -> anyhow::Result<()> {
    let key = cluster_key.map(|k| k.private_openssh.as_str());
    // Looked up at every manifest (one getifaddrs call): an interface renamed
    // or moved since the start is picked up.
    let interface = crate::fabric::interface_with(&me.private_ip);
    let mut fabric = crate::fabric::environment(config.efa.as_ref(), Some(&me.instance_type), interface.as_deref());
    // `DEEPLEARNING_SCRATCH` only while the volume is really mounted.
    fabric.extend(crate::scratch::environment(root, config));
    let changed = files::apply_manifest(root, manifest, &me.instance_id, config, key, &fabric)?;
    // The manifest's text, checks and rendered files are freed by now.
    crate::memory::release_free_heap();
    info!(
        generation = manifest.generation,
        nodes = manifest.nodes.len(),
        changed = changed.len(),
        "applied the manifest"
    );
    Ok(())
}
