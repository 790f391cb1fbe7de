//! The loops that tie the agent together, and the boot steps before them.
//!
//! Every node runs the node loop ([`node_loop`]): register until it appears
//! in a manifest, long-poll the worker queue for manifests (visibility 0: a
//! manifest stays visible to every node until the master retires it), apply
//! the newest one to disk, and report `applied`. The master also runs the
//! master loop ([`master_loop`]): long-poll its queue, feed each message to
//! [`crate::cluster::MasterState`], carry out the effects it asks for
//! ([`effects`]: publish, retire, signal, resize, complete lifecycle
//! actions, host log), and persist the state after every step
//! ([`state_file`]) so a restarted agent resumes where it was.
//!
//! Every node also runs the interruption watcher ([`interruption_loop`],
//! [`crate::interruption`]): every 5 s it asks IMDS for a Spot instance
//! action or a rebalance recommendation (and a worker in a Capacity Block
//! checks the clock against the block's end), and on a new notice it writes
//! the notice file for `trainer`, stops the node loop from registering
//! again, and sends `notice` to the master, which removes the node at once.
//!
//! Every node also runs the straggler reporter ([`straggler_loop`]): it
//! sends the master each straggler `trainer train`'s rank 0 named on it.
//!
//! With an idle guard in the node config, every node also runs its probe
//! loop ([`activity_loop`]): a worker reports what keeps it busy to the
//! master, the master hands its own readings to its loop.
//!
//! Before the loops, [`run`] takes the [`boot`] steps: log shipping, the EFS
//! mount, the scratch volume, the data sets ([`data_sets`]), the GPU gate
//! ([`gpu_gate`], whose watch then runs beside the loops), the notice of this boot; a worker's prepare-data script runs at
//! the top of its node loop. The loops read the time from the one
//! [`Clock`] they are given (the system clock in [`run`]).
//!
//! The loops are generic over the ports ([`crate::ports`]); `simulation`
//! (a test) runs the master's effects through [`effects`] over in-memory
//! ports, with a whole cluster of nodes around it.
//!
//! AWS errors never end the agent: transient ones are retried with backoff
//! ([`retry`]), permanent ones are logged with what failed, and the loop
//! goes on. Nor do local files that cannot be written (a read-only or full
//! file system): the error names the file, the manifest is tried again, and
//! nothing is acknowledged until it is written.

mod activity_loop;
mod boot;
mod data_progress;
mod data_sets;
mod effects;
mod gpu_gate;
mod interruption_loop;
mod master_loop;
mod node_loop;
mod probe;
mod retry;
#[cfg(test)]
mod simulation;
mod state_file;
mod straggler_loop;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use node_contract::clock::Clock;
use node_contract::message::Register;
use node_contract::{NodeConfig, Role};
use tracing::{error, info};

use crate::aws::{AsgWorkerGroup, CfnSignals, SqsQueue};
use crate::files;
use crate::netgate;
pub(crate) use state_file::master_state_path;

/// The master's ports besides its queues.
pub(crate) struct Ports<'a, G, S, P> {
    /// The workers' Auto Scaling group.
    pub group: &'a G,
    /// CloudFormation's signals.
    pub signals: &'a S,
    /// The master's own power (the idle guard's `stop`).
    pub power: &'a P,
}

/// How `agent run` was asked to run.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Every file is written under this directory (`/` in production).
    pub root: PathBuf,
    /// The node config file; default: the one the user data wrote under `root`.
    pub config: Option<PathBuf>,
    /// Mount EFS (off in containers and tests, where only the fstab line is written).
    pub mount: bool,
    /// The idle guard's minute in milliseconds (60,000; shorter in tests).
    pub idle_minute_ms: u64,
    /// The command that powers the master off (the idle guard's `stop`).
    pub power_off: Vec<String>,
    /// Read the GPUs from this fixture instead of the driver (tests only).
    pub gpu_fixture: Option<PathBuf>,
}

/// Loads the config: the file when it exists, else the instance's user data.
pub(crate) async fn load_config(opts: &Options, imds: &aws_config::imds::Client) -> anyhow::Result<NodeConfig> {
    let path = opts.config.clone().unwrap_or_else(|| crate::config::path_under(&opts.root));
    if path.exists() || opts.config.is_some() {
        return Ok(crate::config::from_file(&path)?);
    }
    info!(path = %path.display(), "no node config file yet; reading it from the user data");
    let script = crate::identity::user_data(imds).await?;
    Ok(crate::config::from_user_data(&script)?)
}

/// Runs the agent until SIGTERM or Ctrl-C.
pub(crate) async fn run(opts: Options) -> anyhow::Result<()> {
    let clock: Clock = node_contract::clock::system;
    // The formation timeline's "agent started".
    let started_ms = clock();
    let imds = crate::identity::imds_client();
    let config = load_config(&opts, &imds).await?;
    let gpus = crate::gpu::count();
    let me = crate::identity::discover(&imds, &opts.root, gpus).await.context("finding out who this node is")?;
    info!(instance = %me.instance_id, ip = %me.private_ip, role = ?config.role, gpus, "agent starting");
    let clients = crate::aws::clients(&config.region).await;
    boot::start_shipping(&opts.root, &config, &me, &clients, clock);
    boot::mount_efs(&opts.root, &config, opts.mount).await?;
    // The scratch volume, before any data goes on it; a failure is reported
    // by the node loop, which tries again before the node registers.
    let _ = boot::prepare_scratch(&opts.root, &config, &me);
    boot::mount_fsx(&opts.root, &config, opts.mount).await?;

    let master_queue = SqsQueue::new(clients.sqs.clone(), config.queues.master.clone());
    let worker_queue = SqsQueue::new(clients.sqs.clone(), config.queues.workers.clone());
    let cluster_key = match config.role {
        Role::Master => Some(files::cluster_key::load_or_create(&opts.root)?),
        Role::Worker => None,
    };
    let mut register = Register {
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
        data: None,
    };
    // The master counts the nodes' fetches from their files on EFS (its own
    // included) into its log and the worker group's tag, from now on.
    let _data_count = match (&config.worker_group, config.role, config.data.is_empty()) {
        (Some(group), Role::Master, false) => {
            let group = AsgWorkerGroup::new(clients.autoscaling.clone(), group.clone());
            let dir = data_progress::data_dir(&opts.root, &config.efs.mount);
            Some(tokio::spawn(
                async move { data_progress::report_loop(dir, &group, data_progress::EVERY, clock).await },
            ))
        }
        _ => None,
    };
    // The data sets, before this node registers (the master too: it admits
    // itself); the server that shares them with the peers lives as long as
    // the agent.
    let store = crate::aws::S3Objects::new(clients.s3.clone());
    let (data, _data_server) =
        data_sets::fetch_before_registering(&opts.root, &config, &me, store, &master_queue, data_sets::RETRY_AFTER)
            .await;
    register.data = data;

    // The GPU gate, last before registering: a node whose GPUs fail it is
    // never in a hostfile (a worker under `replace` or `fail` waits here
    // for its group to replace it).
    let gpus = gpu_gate::gpus(opts.gpu_fixture.as_deref());
    let gate =
        gpu_gate::before_registering(&opts.root, &config, &me, &gpus, opts.gpu_fixture.is_some(), &master_queue, clock)
            .await;

    // The network gate's listener, for the predecessor's probe; it lives
    // as long as the agent.
    let _probe_listener = config.network_check.as_ref().map(|_| {
        tokio::spawn(async {
            if let Err(e) = probe::serve(netgate::PROBE_PORT).await {
                error!("the network check's probe listener cannot listen on port {}: {e}", netgate::PROBE_PORT);
            }
        })
    });
    let (watcher, interrupted) = boot::restore_notice(&opts.root, &me);
    // A worker that boots after its Capacity Block's leaving time never
    // registers: its watcher gives the notice at its first poll.
    let block_over = config.capacity_block.as_ref().is_some_and(|b| b.notice_due(&me.instance_id, clock()).is_some());
    let interrupted = AtomicBool::new(interrupted || block_over);
    let watch = interruption_loop::interruption_loop(
        &opts.root,
        &imds,
        &me,
        &master_queue,
        &interrupted,
        watcher,
        config.capacity_block.as_ref(),
        clock,
    );
    let node = async {
        if !gate.joins() {
            // Kept alive (the interruption watcher, the log shipping) until
            // Auto Scaling terminates the instance.
            return std::future::pending().await;
        }
        node_loop::node_loop(
            &opts.root,
            &config,
            &me,
            &register,
            cluster_key.as_ref(),
            &master_queue,
            &worker_queue,
            &interrupted,
            clock,
        )
        .await
    };
    // The GPU watch, once the gate looked at the GPUs.
    let gpu_watch = async {
        if !gate.watches() {
            return std::future::pending().await;
        }
        gpu_gate::watch_loop(&opts.root, &me, gpus.clone(), &master_queue, &interrupted, clock).await
    };
    // The idle guard's probes: a worker reports to the master; the master's
    // own readings go to its loop through `own_readings`.
    let cadence = activity_loop::Cadence::for_minute(opts.idle_minute_ms);
    let (own_readings, own_activity) = tokio::sync::watch::channel(None);
    let guard = async {
        match (&config.idle, config.role) {
            (None, _) => std::future::pending().await,
            (Some(_), Role::Worker) => {
                activity_loop::report_loop(&opts.root, &me.instance_id, &master_queue, gpus.clone(), cadence, clock)
                    .await
            }
            (Some(_), Role::Master) => {
                activity_loop::own_loop(&opts.root, &me.instance_id, gpus.clone(), cadence, own_readings).await
            }
        }
    };
    // Stragglers named by `trainer train`'s rank 0 on this node (the master's, in practice).
    let stragglers = straggler_loop::report_loop(&opts.root, &master_queue);
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
            let power = crate::power::CommandPower { argv: opts.power_off.clone() };
            let idle = config.idle.as_ref().map(|i| crate::cluster::master::idle::IdleSettings {
                stack: config.stack_name.clone(),
                after_ms: u64::from(i.after_minutes).saturating_mul(opts.idle_minute_ms),
                action: i.action,
                report_ms: cadence.report_ms,
            });
            let master = master_loop::master_loop(
                &opts.root,
                &config,
                register.clone(),
                key,
                &master_queue,
                &worker_queue,
                Ports { group: &group, signals: &signals, power: &power },
                master_loop::Guard { settings: idle, own: own_activity },
                clock,
            );
            tokio::select! {
                r = node => r,
                r = master => r,
                r = watch => r,
                r = gpu_watch => r,
                r = guard => r,
                r = stragglers => r,
                r = shutdown => r,
            }
        }
        (Role::Master, ..) => {
            anyhow::bail!("this node is the master, but its node config lacks the worker group or the signals to send")
        }
        (Role::Worker, ..) => tokio::select! {
            r = node => r,
            r = watch => r,
            r = gpu_watch => r,
            r = guard => r,
            r = stragglers => r,
            r = shutdown => r,
        },
    }
}
