//! The loops that tie the agent together.
//!
//! Every node runs the node loop: register until it appears in a manifest,
//! long-poll the worker queue for manifests (visibility 0: a manifest stays
//! visible to every node until the master retires it), apply the newest one
//! to disk, and report `applied`. The master also runs the master loop:
//! long-poll its queue, feed each message to [`MasterState`], carry out the
//! effects it asks for (publish, retire, signal, resize, complete lifecycle
//! actions, host log), and persist the state after every step so a restarted
//! agent resumes where it was.
//!
//! Every node also runs the interruption watcher ([`crate::interruption`]):
//! every 5 s it asks IMDS for a Spot instance action or a rebalance
//! recommendation, and on a new one it writes the notice file for `trainer`,
//! stops the node loop from registering again, and sends `notice` to the
//! master, which removes the node at once.
//!
//! AWS errors never end the agent: transient ones are retried with backoff,
//! permanent ones are logged with what failed, and the loop goes on. Nor do
//! local files that cannot be written (a read-only or full file system):
//! the error names the file, the manifest is tried again, and nothing is
//! acknowledged until it is written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use futures_util::future::join_all;
use node_contract::message::{self, Applied, BootFailure, Message, Register};
use node_contract::parts::Assembly;
use node_contract::{NodeConfig, Role};
use tracing::{debug, error, info, warn};

use crate::aws::{AsgWorkerGroup, CfnSignals, SqsQueue};
use crate::cluster::{Effect, MasterState, NodeDecision, NodeState};
use crate::files;
use crate::identity::Identity;
use crate::interruption::{self, FailureLog, Watcher};
use crate::netgate;
use crate::ports::{Formation, GroupSize, PortError, Queue, Received, StackSignals, WorkerGroup};

/// How `agent run` was asked to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Every file is written under this directory (`/` in production).
    pub root: PathBuf,
    /// The node config file; default: the one the user data wrote under `root`.
    pub config: Option<PathBuf>,
    /// Mount EFS (off in containers and tests, where only the fstab line is written).
    pub mount: bool,
}

/// Long-poll wait: the most SQS allows.
const LONG_POLL: Duration = Duration::from_secs(20);
/// Attempts for an effect that fails transiently, with doubling delays from 500 ms.
const EFFECT_ATTEMPTS: u32 = 6;

/// Now, in unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Where the master keeps its state ([`MasterState`]) under `root`.
pub(crate) fn master_state_path(root: &Path) -> PathBuf {
    root.join("var/lib/deeplearning/master.json")
}

fn sent_mark_path(root: &Path) -> PathBuf {
    root.join("var/lib/deeplearning/master-sent-generation")
}

/// `$EFS_MOUNT/prepare_data_success_<ip>` under `root`: a worker writes it
/// when its prepare-data script succeeded; the master admits it only then.
fn prepare_marker(root: &Path, config: &NodeConfig, ip: &str) -> PathBuf {
    root.join(config.efs.mount.trim_start_matches('/')).join(format!("prepare_data_success_{ip}"))
}

/// The master's state file, written only when the state changed: most loop
/// turns (an idle long poll) change nothing, and need no read or fsync.
/// What was written last is kept as its length and hash, not its text (at
/// 1,000 nodes the state is about a megabyte); a state that differs from it
/// is written without reading the file back first. The first save compares
/// with the file (a restarted master whose state did not change writes
/// nothing).
struct StateFile {
    path: PathBuf,
    last: Option<(usize, u64)>,
}

impl StateFile {
    fn save(&mut self, state: &MasterState) -> anyhow::Result<()> {
        use std::hash::{Hash, Hasher};
        let text = serde_json::to_string(state)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let now = Some((text.len(), hasher.finish()));
        if now == self.last {
            return Ok(());
        }
        if self.last.is_none() {
            files::atomic::write_if_changed(&self.path, &text, 0o600)?;
        } else {
            files::atomic::write(&self.path, &text, 0o600)?;
        }
        self.last = now;
        Ok(())
    }
}

/// The newest manifest generation the master may have sent, on disk: written
/// (atomically, fsynced) before the first part of a new generation goes to
/// the worker queue. The master's state is saved only after a turn's
/// effects, so a crash in between leaves a state that does not know the
/// generation it sent; this record keeps a restarted master from numbering
/// another manifest the same ([`MasterState::start`]).
struct SentMark {
    path: PathBuf,
    through: u64,
}

impl SentMark {
    /// The record under `root`; 0 when there is none. One that cannot be
    /// read is logged and taken as 0, as an unreadable master state is.
    fn load(root: &Path) -> SentMark {
        let path = sent_mark_path(root);
        let through = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().unwrap_or_else(|e| {
                warn!("ignoring unreadable sent-generation record {}: {e}", path.display());
                0
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                warn!("ignoring unreadable sent-generation record {}: {e}", path.display());
                0
            }
        };
        SentMark { path, through }
    }

    /// Records that `generation` may be sent from now on (nothing to do
    /// when it is not newer than the record).
    fn record(&mut self, generation: u64) -> Result<(), files::FilesError> {
        if generation > self.through {
            files::atomic::write_if_changed(&self.path, &format!("{generation}\n"), 0o600)?;
            self.through = generation;
        }
        Ok(())
    }
}

/// Loads the config: the file when it exists, else the instance's user data.
pub async fn load_config(opts: &Options, imds: &aws_config::imds::Client) -> anyhow::Result<NodeConfig> {
    let path = opts.config.clone().unwrap_or_else(|| crate::config::path_under(&opts.root));
    if path.exists() || opts.config.is_some() {
        return Ok(crate::config::from_file(&path)?);
    }
    info!(path = %path.display(), "no node config file yet; reading it from the user data");
    let script = crate::identity::user_data(imds).await?;
    Ok(crate::config::from_user_data(&script)?)
}

/// Runs the agent until SIGTERM or Ctrl-C.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    // The formation timeline's "agent started".
    let started_ms = now_ms();
    let imds = crate::identity::imds_client();
    let config = load_config(&opts, &imds).await?;
    let gpus = crate::gpu::count();
    let me = crate::identity::discover(&imds, &opts.root, gpus).await.context("finding out who this node is")?;
    info!(instance = %me.instance_id, ip = %me.private_ip, role = ?config.role, gpus, "agent starting");
    let clients = crate::aws::clients(&config.region).await;
    start_shipping(&opts, &config, &me, &clients);
    mount_efs(&opts, &config).await?;

    let master_queue = SqsQueue::new(clients.sqs.clone(), config.queues.master.clone());
    let worker_queue = SqsQueue::new(clients.sqs.clone(), config.queues.workers.clone());
    let cluster_key = match config.role {
        Role::Master => Some(files::cluster_key::load_or_create(&opts.root)?),
        Role::Worker => None,
    };
    let register = Register {
        instance_id: me.instance_id.clone(),
        private_ip: me.private_ip.clone(),
        hostname: me.hostname.clone(),
        role: config.role,
        gpus: me.gpus,
        instance_type: me.instance_type.clone(),
        availability_zone: me.availability_zone.clone(),
        ssh_host_key: me.ssh_host_key.clone(),
        boot_id: me.boot_id.clone(),
        // The formation timeline's `launched`, `booted` and `agent started`
        // (the master registers itself too).
        launched_unix_ms: crate::identity::launched_ms(&imds).await,
        booted_unix_ms: crate::identity::booted_ms(&opts.root),
        agent_started_unix_ms: Some(started_ms),
    };

    // The network gate's listener, for the predecessor's probe; it lives
    // as long as the agent.
    let _probe_listener = config.network_check.as_ref().map(|_| {
        tokio::spawn(async {
            if let Err(e) = netgate::serve(netgate::PROBE_PORT).await {
                error!("the network check's probe listener cannot listen on port {}: {e}", netgate::PROBE_PORT);
            }
        })
    });
    let (watcher, interrupted) = restore_notice(&opts.root, &me);
    let interrupted = AtomicBool::new(interrupted);
    let watch = interruption_loop(&opts.root, &imds, &me, &master_queue, &interrupted, watcher);
    let node =
        node_loop(&opts, &config, &me, &register, cluster_key.as_ref(), &master_queue, &worker_queue, &interrupted);
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
        info!("stopping on request");
        anyhow::Ok(())
    };
    match (config.role, cluster_key.as_ref(), &config.signals, &config.worker_group) {
        (Role::Master, Some(key), Some(signals), Some(group)) => {
            let group = AsgWorkerGroup::new(clients.autoscaling.clone(), group.clone());
            let signals = CfnSignals {
                client: clients.cloudformation.clone(),
                stack: config.stack_id.clone(),
                master_resource: signals.master_resource.clone(),
                handle_url: signals.formation_handle_url.clone(),
            };
            let master =
                master_loop(&opts, &config, register.clone(), key, &master_queue, &worker_queue, &group, &signals);
            tokio::select! {
                r = node => r,
                r = master => r,
                r = watch => r,
                r = shutdown => r,
            }
        }
        (Role::Master, ..) => {
            anyhow::bail!("this node is the master, but its node config lacks the worker group or the signals to send")
        }
        (Role::Worker, ..) => tokio::select! {
            r = node => r,
            r = watch => r,
            r = shutdown => r,
        },
    }
}

/// Starts shipping this node's lines to its CloudWatch Logs stream
/// ([`crate::logs`]) as a task of its own that nothing waits for. Without a
/// log group in the config, or without a spool on disk, nothing is shipped
/// and the node forms all the same.
fn start_shipping(opts: &Options, config: &NodeConfig, me: &Identity, clients: &crate::aws::Clients) {
    use crate::logs::{Shipper, Spool, spool, writer};
    let Some(logs) = &config.logs else {
        writer::discard();
        info!("the node config names no log group; this node's lines stay in its journal");
        return;
    };
    let dir = crate::logs::spool_dir(&opts.root);
    let spool = match Spool::open(&dir, spool::DEFAULT_CAP) {
        Ok(s) => std::sync::Arc::new(s),
        Err(e) => {
            writer::discard();
            warn!(dir = %dir.display(), "cannot open the log spool; this node's lines are not shipped: {e}");
            return;
        }
    };
    writer::attach(spool.clone());
    let streams = crate::aws::CloudWatchLogs::new(clients.logs.clone(), logs.group.clone());
    let mut shipper = Shipper::new(streams, spool, &opts.root, config.role, &me.instance_id, prepare_log(&opts.root));
    let stream = shipper.stream();
    if !shipper.indexed() {
        info!(
            group = %logs.group,
            stream = %node_contract::logs::stream_name("worker<index>", &me.instance_id),
            "shipping this node's lines to CloudWatch Logs once the manifest gives it its index (to {stream} if it \
             warns first or has none within a minute)"
        );
    } else {
        info!(group = %logs.group, stream = %stream, "shipping this node's lines to CloudWatch Logs");
    }
    tokio::spawn(shipper.run());
}

/// Mounts EFS, retrying: the stack creates the mount targets in parallel
/// with the instances, so the first attempts may find none yet.
async fn mount_efs(opts: &Options, config: &NodeConfig) -> anyhow::Result<()> {
    const ATTEMPTS: u32 = 30;
    for attempt in 1..=ATTEMPTS {
        let result = tokio::task::block_in_place(|| files::efs::mount(&opts.root, config, opts.mount));
        match result {
            Ok(()) => return Ok(()),
            // The mount point or the fstab line cannot be written: this
            // node's own disk (read-only, full), not EFS, is the problem.
            Err(e @ (files::FilesError::Write { .. } | files::FilesError::CreateDir { .. })) if attempt < ATTEMPTS => {
                error!(attempt, "cannot prepare the EFS mount on this node's disk, retrying in 10 s: {e}");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(e) if attempt < ATTEMPTS => {
                warn!(attempt, "cannot mount EFS yet, retrying in 10 s: {e}");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(e) => return Err(e).context("mounting EFS"),
        }
    }
    Ok(())
}

/// Retries a call while it fails transiently.
async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, PortError>>,
{
    let mut delay = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(PortError::Transient(e)) if attempt < EFFECT_ATTEMPTS => {
                warn!(attempt, "{what} failed, retrying in {delay:?}: {e}");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Where a worker's prepare-data script writes its output (stdout and
/// stderr together), under the agent's root; each run starts it afresh.
fn prepare_log(root: &Path) -> PathBuf {
    root.join("var/log/deeplearning/prepare-data.log")
}

/// Runs the prepare-data script once per boot on a worker, before it
/// registers. Its output goes to [`prepare_log`]; when it fails, the last
/// lines of it are logged and returned as a [`BootFailure`] for the master.
async fn prepare_data(config: &NodeConfig, root: &Path, me: &Identity) -> Result<(), BootFailure> {
    let Some(script) = &config.elastic.prepare_data_script else { return Ok(()) };
    if config.role == Role::Master {
        return Ok(());
    }
    let marker = prepare_marker(root, config, &me.private_ip);
    if marker.exists() {
        return Ok(());
    }
    let failure = |what: String, output: &[u8]| {
        let f = BootFailure::new(&me.instance_id, &me.private_ip, &what, output);
        warn!(
            script,
            last_lines = %f.last_lines.join("\n"),
            "{what}; this node will not join until it succeeds"
        );
        f
    };
    info!(script, "running the prepare-data script");
    let log = prepare_log(root);
    let command = || {
        let mut c = tokio::process::Command::new(script);
        c.env("EFS_MOUNT", &config.efs.mount).env("DEEPLEARNING_NODE_IP", &me.private_ip);
        c.stdin(std::process::Stdio::null());
        c
    };
    // Into the log (stdout and stderr interleaved as written); when the log
    // cannot be opened (a read-only or full disk), the script still runs,
    // its output captured (stdout, then stderr).
    // A new file for each run (removed first, not truncated): the log
    // shipper reads a new inode from its start.
    let opened = log
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| match std::fs::remove_file(&log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .and_then(|()| std::fs::File::create(&log))
        .and_then(|file| Ok((file.try_clone()?, file)));
    let (status, output) = match opened {
        Ok((stdout, stderr)) => {
            let status = command().stdout(stdout).stderr(stderr).status().await;
            (status, read_tail(&log))
        }
        Err(e) => {
            warn!(log = %log.display(), "cannot write the prepare-data script's log; capturing its output instead: {e}");
            match command().output().await {
                Ok(out) => (Ok(out.status), [out.stdout, out.stderr].concat()),
                Err(e) => (Err(e), Vec::new()),
            }
        }
    };
    match status {
        Ok(s) if s.success() => match std::fs::write(&marker, b"") {
            Ok(()) => Ok(()),
            Err(e) => Err(failure(
                format!("the prepare-data script succeeded but its marker {} cannot be written: {e}", marker.display()),
                &output,
            )),
        },
        Ok(s) => Err(failure(format!("the prepare-data script {script} failed ({s})"), &output)),
        Err(e) => Err(failure(format!("the prepare-data script {script} could not be started: {e}"), &output)),
    }
}

/// The last bytes of a file (up to 64 KiB), or none when it cannot be read.
fn read_tail(path: &Path) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 * 1024;
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).is_ok() {
            let _ = file.take(TAIL).read_to_end(&mut bytes);
        }
    }
    bytes
}

/// The notice this boot was already given (the agent restarted after it):
/// the watcher does not act on it again and the node does not register.
/// A notice file of another boot or instance is stale and removed.
fn restore_notice(root: &Path, me: &Identity) -> (Watcher, bool) {
    match files::notice::read(root) {
        Ok(Some(file)) if file.boot_id == me.boot_id && file.interruption.instance_id == me.instance_id => {
            warn!(
                notice = %file.interruption.describe(),
                "this node was given an interruption notice in this boot; it does not register again"
            );
            (Watcher::new(Some(file.interruption)), true)
        }
        Ok(None) => (Watcher::default(), false),
        stale => {
            match stale {
                Ok(_) => info!("removing the interruption notice file of an earlier boot"),
                Err(e) => warn!("removing an unusable interruption notice file: {e}"),
            }
            if let Err(e) = files::notice::remove(root) {
                warn!("cannot remove the old interruption notice file: {e}");
            }
            (Watcher::default(), false)
        }
    }
}

/// Polls IMDS for interruption notices every [`interruption::POLL_INTERVAL`]
/// (the first poll at once); on a new one writes the notice file, tells the
/// node loop to stop registering, and sends `notice` to the master. Never
/// returns: IMDS and SQS failures are logged, and it polls again.
async fn interruption_loop(
    root: &Path,
    imds: &aws_config::imds::Client,
    me: &Identity,
    master_queue: &SqsQueue,
    interrupted: &AtomicBool,
    mut watcher: Watcher,
) -> anyhow::Result<()> {
    let mut failures = FailureLog::default();
    let mut ticks = tokio::time::interval(interruption::POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A `notice` that could not be sent even after retries is sent again at
    // every poll until it goes out: the master must hear of it. A notice of
    // this boot found at start is sent again too (the agent may have stopped
    // between writing the file and sending it; a duplicate changes nothing).
    let mut unsent: Option<String> = watcher.current().map(|n| Message::Notice(n.clone()).to_body());
    loop {
        ticks.tick().await;
        if let Some(body) = &unsent
            && master_queue.send(body).await.is_ok()
        {
            info!("told the master about the interruption notice");
            unsent = None;
        }
        let result = interruption::poll(imds, &me.instance_id).await;
        failures.record(&result);
        let Ok(seen) = result else { continue };
        let Some(notice) = watcher.observe(seen) else { continue };
        warn!(notice = %notice.describe(), "EC2 gave this node an interruption notice: it leaves the cluster");
        interrupted.store(true, Ordering::SeqCst);
        let file = files::notice::NoticeFile {
            version: files::notice::NOTICE_FILE_VERSION,
            interruption: notice.clone(),
            boot_id: me.boot_id.clone(),
            noticed_unix_ms: now_ms(),
        };
        if let Err(e) = tokio::task::block_in_place(|| files::notice::write(root, &file)) {
            error!("cannot write the interruption notice file (trainer will not see the notice): {e}");
        }
        let body = Message::Notice(notice).to_body();
        match retry("report the interruption notice", || master_queue.send(&body)).await {
            Ok(()) => {
                info!("told the master about the interruption notice");
                unsent = None;
            }
            Err(e) => {
                warn!("cannot tell the master about the interruption notice yet, trying again at every poll: {e}");
                unsent = Some(body);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn node_loop(
    opts: &Options,
    config: &NodeConfig,
    me: &Identity,
    register: &Register,
    cluster_key: Option<&files::cluster_key::ClusterKey>,
    master_queue: &SqsQueue,
    worker_queue: &SqsQueue,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let previous = files::state::read(&opts.root)?.filter(|s| s.instance_id == me.instance_id);
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
            match prepare_data(config, &opts.root, me).await {
                Ok(()) => prepared = true,
                Err(failure) => {
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
        if node.should_register(now_ms()) {
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
                    let written = tokio::task::block_in_place(|| apply(opts, config, me, &manifest, cluster_key));
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
                        if probe.take().is_some_and(|older| !older.0.is_finished()) {
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
                            probe = Some(ProbeTask(tokio::spawn(probe_link(link, publication, master_queue.clone()))));
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

/// The network gate's probe task, stopped when dropped: when a newer
/// check replaces it, and when the node loop ends (SIGTERM, an
/// interruption), rather than left running detached.
struct ProbeTask(tokio::task::JoinHandle<()>);

impl Drop for ProbeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a probe measures: this node's link to its ring neighbour in one
/// generation, and its phase of the schedule.
struct Link {
    me: String,
    generation: u64,
    peer: message::ManifestNode,
    phase: u64,
}

/// The network gate's probe: in this node's phase of the schedule
/// ([`netgate::send_at_ms`], from the generation's `publication`), sends
/// to its ring neighbour for [`netgate::PROBE_MILLIS`] and reports what it
/// measured (or why it could not) to the master. Spawned beside the node
/// loop, so a newer generation is applied while it waits.
async fn probe_link(link: Link, publication: u64, master_queue: SqsQueue) {
    let Link { me, generation, peer, phase } = link;
    let now = now_ms();
    let wait = netgate::send_at_ms(publication, phase, now).saturating_sub(now);
    debug!(generation, phase, wait_ms = wait, "the network check's probe waits for its phase");
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let measured = netgate::measure(&peer.private_ip, netgate::PROBE_PORT, netgate::PROBE_MILLIS).await;
    let (bytes, millis, error) = match measured {
        Ok((bytes, millis)) => (bytes, millis, None),
        Err(e) => {
            warn!("the network check's probe to {} ({}) failed: {e}", peer.alias, peer.private_ip);
            (0, 0, Some(e))
        }
    };
    let report =
        message::LinkReport { instance_id: me, generation, peer: peer.instance_id.clone(), bytes, millis, error };
    if let Some(gbps) = report.gbps() {
        info!(generation, peer = %peer.alias, bytes, millis, "measured {gbps:.3} Gbit/s");
    }
    let body = Message::LinkReport(report).to_body();
    if let Err(e) = retry("report the measured link", || master_queue.send(&body)).await {
        warn!("cannot report the measured link to the master: {e}");
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
    opts: &Options,
    config: &NodeConfig,
    me: &Identity,
    manifest: &message::Manifest,
    cluster_key: Option<&files::cluster_key::ClusterKey>,
) -> anyhow::Result<()> {
    let key = cluster_key.map(|k| k.private_openssh.as_str());
    // Looked up at every manifest (one getifaddrs call): an interface renamed
    // or moved since the start is picked up.
    let interface = crate::fabric::interface_with(&me.private_ip);
    let fabric = crate::fabric::environment(config.efa.as_ref(), Some(&me.instance_type), interface.as_deref());
    let changed = files::apply_manifest(&opts.root, manifest, &me.instance_id, config, key, &fabric)?;
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

#[allow(clippy::too_many_arguments)]
async fn master_loop<G: WorkerGroup, S: StackSignals>(
    opts: &Options,
    config: &NodeConfig,
    me: Register,
    key: &files::cluster_key::ClusterKey,
    master_queue: &SqsQueue,
    worker_queue: &SqsQueue,
    group: &G,
    signals: &S,
) -> anyhow::Result<()> {
    let master_id = me.instance_id.clone();
    let path = master_state_path(&opts.root);
    let resumed = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<MasterState>(&text) {
            Ok(s) => {
                info!("resuming formation state from {}", path.display());
                Some(s)
            }
            Err(e) => {
                warn!("ignoring unreadable master state {}: {e}", path.display());
                None
            }
        },
        Err(_) => None,
    };
    let mut state = match resumed {
        Some(s) => s,
        None => {
            let size = group_size(&master_id, group, signals).await?;
            info!(requested = size.requested, min = size.min, "the worker group's size");
            MasterState::new(config, size, me, key.public_openssh.clone(), now_ms())
        }
    };
    let mut state_file = StateFile { path, last: None };
    let mut sent = SentMark::load(&opts.root);
    let effects = state.start(now_ms(), sent.through);
    execute(opts, &master_id, config, &mut state, &mut sent, effects, worker_queue, group, signals).await?;
    state_file.save(&state)?;
    // Receives in flight per turn: 1 (a long poll), more while the queue
    // has a backlog ([`next_fan_out`]).
    let mut fan_out = 1;
    // Freed heap goes back to the system after busy turns (crate::memory).
    let mut trimmer = crate::memory::Trimmer::new(Duration::from_secs(1));
    // The previous turn's deletes, still running while this turn receives.
    let mut deleting: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let wait = state
            .next_deadline()
            .map(|d| Duration::from_millis(d.saturating_sub(now_ms())))
            .unwrap_or(LONG_POLL)
            .min(LONG_POLL);
        let started = std::time::Instant::now();
        let received = receive_turn(master_queue, fan_out, wait).await;
        fan_out = next_fan_out(fan_out, received.len());
        let read = started.elapsed();
        let mut effects = Vec::new();
        for r in &received {
            match message::parse_master_queue(&r.body) {
                Ok(inbound) => {
                    let prepared = |ip: &str| prepare_marker(&opts.root, config, ip).exists();
                    effects.extend(state.on_inbound(inbound, now_ms(), &prepared));
                }
                Err(e) => warn!("dropped a master queue message: {e}"),
            }
        }
        effects.extend(state.on_tick(now_ms()));
        execute(opts, &master_id, config, &mut state, &mut sent, effects, worker_queue, group, signals).await?;
        let handled = started.elapsed();
        state_file.save(&state)?;
        if received.is_empty() {
            trimmer.idle();
        } else {
            trimmer.after_work();
        }
        debug!(
            messages = received.len(),
            receive_ms = read.as_millis() as u64,
            handle_ms = (handled - read).as_millis() as u64,
            save_ms = (started.elapsed() - handled).as_millis() as u64,
            "master turn"
        );
        // Delete only after the effects are out and the state is on disk: a
        // crash before this point redelivers the messages instead of losing
        // them. The deletes (one batch call per receive: at most 10 each)
        // run while the next turn receives; one turn's at a time.
        if let Some(previous) = deleting.take() {
            let _ = previous.await;
        }
        if !received.is_empty() {
            let queue = master_queue.clone();
            deleting = Some(tokio::spawn(async move {
                let chunks = received.chunks(10).map(|chunk| {
                    let receipts: Vec<&str> = chunk.iter().map(|r| r.receipt.as_str()).collect();
                    let queue = &queue;
                    async move { queue.delete_batch(&receipts).await }
                });
                for result in join_all(chunks).await {
                    match result {
                        Ok(0) => {}
                        Ok(n) => debug!("{n} handled message(s) not deleted (they will come back and be ignored)"),
                        Err(e) => {
                            debug!("cannot delete the handled messages (they will come back and be ignored): {e}")
                        }
                    }
                }
            }));
        }
    }
}

/// The most receives in flight at once while the master queue has a
/// backlog (320 messages a turn). At formation the queue holds two messages
/// a node (register, applied) and one more register for every
/// [`crate::cluster::REGISTER_RETRY_MS`] a node waits to be admitted: 67 a
/// second at 1,000 nodes. Reading them 10 at a time, one receive after the
/// other, is what made the master retire a 256-node manifest seconds after
/// the last node applied it; a fixed 4 at a time (40 a turn, each turn
/// paying for a save of the master's state) drained a 1,000-node queue more
/// slowly than the waiting workers filled it with their repeated registers.
const MAX_DRAIN_RECEIVES: usize = 32;

/// The receives of the next turn, in proportion to the backlog the last
/// turn saw: twice as many when every receive came back full (the queue
/// holds at least that many more), up to [`MAX_DRAIN_RECEIVES`]; else as
/// many as the last turn's messages filled, down to one (a long poll).
/// Each receive still brings 10 messages while the backlog lasts, so the
/// calls per message do not grow; what shrinks is the number of turns, and
/// with it the saves of the master's state.
fn next_fan_out(fan_out: usize, received: usize) -> usize {
    if received >= 10 * fan_out {
        (fan_out * 2).min(MAX_DRAIN_RECEIVES)
    } else {
        received.div_ceil(10).clamp(1, MAX_DRAIN_RECEIVES)
    }
}

/// One turn's messages: one receive waiting up to `wait`, or with
/// `fan_out` > 1 that many receives at once that do not wait (the queue has
/// a backlog). A failed receive is logged; with nothing received at all the
/// turn pauses 2 s.
async fn receive_turn(queue: &SqsQueue, fan_out: usize, wait: Duration) -> Vec<Received> {
    let wait = if fan_out > 1 { Duration::ZERO } else { wait };
    let results = join_all((0..fan_out).map(|_| queue.receive(10, wait, None))).await;
    let mut received = Vec::new();
    let mut failed = false;
    for result in results {
        match result {
            Ok(r) => received.extend(r),
            Err(e) => {
                warn!("cannot read the master queue: {e}");
                failed = true;
            }
        }
    }
    if failed && received.is_empty() {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    received
}

/// The workers requested and the minimum, from the worker group (not the
/// user data: see [`node_contract::MIN_WORKERS_TAG`]). Transient failures are
/// retried for as long as they last; a permanent one (no permission, a group
/// without the tag) fails formation at once with the reason, as the stack
/// would otherwise wait out its timeout.
async fn group_size<G: WorkerGroup, S: StackSignals>(
    master_id: &str,
    group: &G,
    signals: &S,
) -> anyhow::Result<GroupSize> {
    loop {
        match retry("read the worker group's size", || group.size()).await {
            Ok(size) => return Ok(size),
            Err(PortError::Transient(e)) => {
                warn!("cannot read the worker group's size yet, retrying in 30 s: {e}");
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Err(PortError::Permanent(e)) => {
                let reason = format!("The master cannot read the cluster's size from its worker group: {e}");
                let outcome = Formation {
                    success: false,
                    reason: reason.clone(),
                    unique_id: master_id.to_owned(),
                    data: "{}".into(),
                };
                if let Err(e) = retry("signal formation", || signals.formation(&outcome)).await {
                    warn!("cannot signal formation: {e}");
                }
                anyhow::bail!("{reason}");
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn execute<G: WorkerGroup, S: StackSignals>(
    opts: &Options,
    master_id: &str,
    config: &NodeConfig,
    state: &mut MasterState,
    sent: &mut SentMark,
    effects: Vec<Effect>,
    worker_queue: &SqsQueue,
    group: &G,
    signals: &S,
) -> anyhow::Result<()> {
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
                    queue.extend(state.on_publish_failed(generation, now_ms()));
                    continue;
                }
                match publish(worker_queue, &manifest, publication).await {
                    Ok(parts) => info!(generation, nodes = manifest.nodes.len(), parts, "published the manifest"),
                    Err(PublishError::Split(e)) => error!("cannot publish manifest generation {generation}: {e}"),
                    Err(PublishError::Send(e)) => {
                        warn!("cannot publish manifest generation {generation}: {e}");
                        queue.extend(state.on_publish_failed(generation, now_ms()));
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
                queue.extend(state.on_launch_failures(failures, instances, now_ms()));
            }
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
            Effect::WriteNetworkCheck(json) => {
                let path = files::network_check_path(&opts.root);
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
                if let Err(e) = files::host_log::append_all(&opts.root, &config.efs.mount, &lines) {
                    warn!("cannot append to the host log: {e}");
                }
            }
            Effect::Log(line) => info!("{line}"),
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use node_contract::interruption::from_instance_action;

    use super::*;

    fn me() -> Identity {
        Identity {
            instance_id: "i-1".into(),
            private_ip: "10.0.0.1".into(),
            hostname: "ip-10-0-0-1".into(),
            instance_type: "g5.xlarge".into(),
            availability_zone: "us-east-1a".into(),
            boot_id: "boot-now".into(),
            ssh_host_key: "ssh-ed25519 AAAA".into(),
            gpus: 0,
        }
    }

    #[test]
    fn receives_follow_the_backlog_and_fall_back_to_one_long_poll() {
        // (receives this turn, messages they brought) -> receives next turn
        for (fan_out, received, next) in [
            (1, 0, 1),
            (1, 9, 1),
            (1, 10, 2),
            (2, 20, 4),
            (4, 40, 8),
            (16, 160, 32),
            (32, 320, MAX_DRAIN_RECEIVES),
            (32, 95, 10),
            (8, 41, 5),
            (4, 3, 1),
        ] {
            assert_eq!(next_fan_out(fan_out, received), next, "{fan_out} receives brought {received}");
        }
    }

    /// The master queue at a 1,000-node formation: 2,000 messages waiting,
    /// and 33 more arriving a turn (registrations repeated every 15 s by
    /// 1,000 waiting nodes, a turn taking half a second). Read in proportion
    /// to the backlog, the master catches up (the backlog is down to what
    /// arrives in a turn) in a dozen turns; with four receives a turn (40
    /// messages) it gains 7 messages a turn and has not caught up after 200.
    #[test]
    fn a_formation_backlog_is_caught_up_in_a_few_turns() {
        const ARRIVALS: usize = 33;
        fn turns_to_catch_up(mut fan_out: impl FnMut(usize, usize) -> usize) -> Option<usize> {
            let (mut backlog, mut receives) = (2000usize, 1usize);
            for turn in 1..=200 {
                let got = backlog.min(10 * receives);
                backlog = backlog - got + ARRIVALS;
                if backlog <= ARRIVALS {
                    return Some(turn);
                }
                receives = fan_out(receives, got);
            }
            None
        }
        let proportional = turns_to_catch_up(next_fan_out);
        assert!(proportional.is_some_and(|t| t <= 15), "{proportional:?} turns");
        let fixed = turns_to_catch_up(|_, got| if got >= 10 { 4 } else { 1 });
        assert_eq!(fixed, None);
    }

    fn file(instance_id: &str, boot_id: &str) -> files::notice::NoticeFile {
        let body = r#"{"action": "stop", "time": "2026-11-25T20:00:00Z"}"#;
        files::notice::NoticeFile {
            version: files::notice::NOTICE_FILE_VERSION,
            interruption: from_instance_action(instance_id, body).unwrap(),
            boot_id: boot_id.into(),
            noticed_unix_ms: 1,
        }
    }

    /// A restarted agent keeps this boot's notice (it does not register
    /// again, nor act twice) and removes one of an earlier boot (a stopped
    /// Spot instance started again rejoins), or one it cannot read.
    fn worker_config(root: &Path, script: &str) -> NodeConfig {
        let mut config = crate::cluster::testkit::config(1, true);
        config.role = Role::Worker;
        config.elastic.prepare_data_script = Some(root.join(script).to_string_lossy().into_owned());
        config
    }

    fn write_script(root: &Path, name: &str, body: &str) {
        let path = root.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }

    /// A failing script's output (stdout and stderr, in order) is in its log,
    /// and its last lines in the failure for the master; a script that
    /// succeeds writes the marker, and the next call does not run it again.
    #[tokio::test]
    async fn a_failing_prepare_data_script_reports_its_last_lines() {
        let root = tempfile::tempdir().unwrap();
        let lines: String = (1..=30).map(|i| format!("echo line {i}\n")).collect();
        write_script(root.path(), "fail.sh", &format!("#!/bin/sh\n{lines}echo 'oh no' >&2\nexit 3\n"));
        let config = worker_config(root.path(), "fail.sh");
        let failure = prepare_data(&config, root.path(), &me()).await.unwrap_err();
        assert_eq!((failure.instance_id.as_str(), failure.private_ip.as_str()), ("i-1", "10.0.0.1"));
        assert!(failure.what.contains("fail.sh failed (exit status: 3)"), "{}", failure.what);
        assert_eq!(failure.last_lines.len(), message::BOOT_FAILURE_LINES);
        assert_eq!(failure.last_lines.last().map(String::as_str), Some("oh no"));
        assert_eq!(failure.last_lines.first().map(String::as_str), Some("line 12"));
        let log = std::fs::read_to_string(prepare_log(root.path())).unwrap();
        assert!(log.starts_with("line 1\n") && log.ends_with("line 30\noh no\n"), "{log}");

        let missing = worker_config(root.path(), "missing.sh");
        let failure = prepare_data(&missing, root.path(), &me()).await.unwrap_err();
        assert!(failure.what.contains("could not be started"), "{}", failure.what);

        write_script(root.path(), "ok.sh", "#!/bin/sh\necho fine\n");
        std::fs::create_dir_all(root.path().join("efs")).unwrap();
        let ok = worker_config(root.path(), "ok.sh");
        assert_eq!(prepare_data(&ok, root.path(), &me()).await, Ok(()));
        assert!(prepare_marker(root.path(), &ok, "10.0.0.1").exists());
        // Once the marker is there, even a failing script is not run again.
        assert_eq!(prepare_data(&config, root.path(), &me()).await, Ok(()));
    }

    /// When the log cannot be written, the script still runs and its output
    /// is captured for the failure.
    #[tokio::test]
    async fn without_a_writable_log_the_output_is_captured() {
        let root = tempfile::tempdir().unwrap();
        // A file where the log's directory should be.
        std::fs::create_dir_all(root.path().join("var/log")).unwrap();
        std::fs::write(root.path().join("var/log/deeplearning"), "").unwrap();
        write_script(root.path(), "fail.sh", "#!/bin/sh\necho out\necho err >&2\nexit 1\n");
        let failure = prepare_data(&worker_config(root.path(), "fail.sh"), root.path(), &me()).await.unwrap_err();
        assert_eq!(failure.last_lines, vec!["out".to_string(), "err".to_string()]);
    }

    #[test]
    fn a_notice_of_this_boot_is_kept_and_a_stale_one_removed() {
        let root = tempfile::tempdir().unwrap();
        let (watcher, interrupted) = restore_notice(root.path(), &me());
        assert!(!interrupted && watcher.current().is_none());

        files::notice::write(root.path(), &file("i-1", "boot-now")).unwrap();
        let (watcher, interrupted) = restore_notice(root.path(), &me());
        assert!(interrupted);
        assert_eq!(watcher.current(), Some(&file("i-1", "boot-now").interruption));
        assert!(files::notice::read(root.path()).unwrap().is_some());

        for stale in [file("i-1", "boot-before"), file("i-other", "boot-now")] {
            files::notice::write(root.path(), &stale).unwrap();
            let (watcher, interrupted) = restore_notice(root.path(), &me());
            assert!(!interrupted && watcher.current().is_none());
            assert_eq!(files::notice::read(root.path()).unwrap(), None);
        }
        let path = root.path().join("var/lib/deeplearning/interruption.json");
        std::fs::write(&path, "not json").unwrap();
        assert!(!restore_notice(root.path(), &me()).1);
        assert!(!path.exists());
    }

    /// The sent-generation record only grows, survives a restart (a new
    /// load), and one that cannot be read counts as none.
    #[test]
    fn the_sent_generation_record_only_grows_and_survives_a_restart() {
        let root = tempfile::tempdir().unwrap();
        let mut mark = SentMark::load(root.path());
        assert_eq!(mark.through, 0);
        mark.record(3).unwrap();
        mark.record(2).unwrap();
        assert_eq!(std::fs::read_to_string(sent_mark_path(root.path())).unwrap(), "3\n");
        assert_eq!(SentMark::load(root.path()).through, 3);
        std::fs::write(sent_mark_path(root.path()), "not a number").unwrap();
        assert_eq!(SentMark::load(root.path()).through, 0);
        // A record that cannot be written is an error, and the mark stays.
        let blocked = tempfile::tempdir().unwrap();
        std::fs::write(blocked.path().join("var"), "a file where a directory belongs").unwrap();
        let mut mark = SentMark::load(blocked.path());
        assert!(mark.record(1).is_err());
        assert_eq!(mark.through, 0);
    }
}
