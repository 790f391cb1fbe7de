//! The `agent` command line (clap derive): `run` (the daemon, what the
//! systemd unit starts), `status`, `render` and `leave`.
//!
//! Exit codes, the three binaries' convention ([`cli_output::exit`]): 0
//! success; 1 the checked thing failed, an error marked [`Refused`] (the GPU
//! check failed; the manifest, node config or state file a command checks
//! was refused; this node has applied no manifest); 2 a usage or internal
//! error (an argument that does not parse, a file that cannot be read or
//! written, an AWS error, `agent run` ending with an error) or output that
//! could not be written. A closed pipe is not an error: the command ends
//! quietly. The reason is printed in every case.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use node_contract::message::{self, Leave, Message};

use crate::ports::Queue;
use crate::{files, runner};

/// Node bootstrap daemon for deep learning clusters built by `synth`.
///
/// On every node, `agent run` (started by the deeplearning-agent systemd
/// unit) registers the node with the master over SQS and applies the cluster
/// manifest: /etc/hosts, the workers file and hostfile, the DEEPLEARNING_*
/// environment, SSH known hosts and keys, and the EFS mount. On the master it
/// also forms the cluster and signals CloudFormation.
#[derive(Debug, Parser)]
#[command(name = "agent", version, about, long_about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent (the daemon); stops on SIGTERM or Ctrl-C.
    Run(RunArgs),
    /// Print the generation this node applied and the nodes in it; on the
    /// master, also the formation timeline (when each node booted, started
    /// its agent, registered and applied, as far as the master knows).
    Status(RootArgs),
    /// Print the files a manifest would produce on a node, without writing anything.
    Render(RenderArgs),
    /// Ask the master to remove this node from the cluster.
    Leave(LeaveArgs),
    /// Check this node's GPUs now, as the GPU gate does before a node joins
    /// (the driver's counters and links, the kernel log's XIDs, GEMM and
    /// memory burns, an all-reduce, EFA, DCGM), and print one row per check
    /// with its value and what was expected; exit 1 when one fails. Not
    /// while a job trains: the burns take the GPUs.
    GpuCheck(GpuCheckArgs),
}

/// Arguments of `agent gpu-check`.
#[derive(Debug, Args)]
pub struct GpuCheckArgs {
    #[command(flatten)]
    root: RootArgs,
    /// `quick` (burns of about 2 s a GPU, `dcgmi diag -r 1`) or `thorough`
    /// (60 s burns, `dcgmi diag -r 3`).
    #[arg(long, default_value = "quick", value_parser = ["quick", "thorough"])]
    level: String,
    /// What this node's type promises, as the node config's
    /// `gpu_check.expect` entry in JSON, for example
    /// '{"gpus":8,"model":"H100","bf16_tflops":989,"memory_gbps":3350}';
    /// default: what the boot gate used (/var/lib/deeplearning/gpu-check.json),
    /// else nothing (every figure measured, not judged).
    #[arg(long, value_name = "JSON")]
    expect: Option<String>,
    /// The time budget in seconds; default: the level's (60, 2400).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: Option<u64>,
    /// Print only what the idle guard reads (the busiest GPU's utilisation
    /// through NVML, as every 10 s on a node with the guard on), and exit.
    #[arg(long)]
    idle_reading: bool,
    /// Test-only: read the GPUs from this fixture instead of the driver.
    #[arg(long, hide = true, value_name = "FILE", env = "DEEPLEARNING_TEST_GPU_FIXTURE")]
    gpu_fixture: Option<PathBuf>,
}

/// Where the node's files live.
#[derive(Debug, Args)]
pub struct RootArgs {
    /// Write and read every file under this directory instead of `/` (containers, tests).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

/// Arguments of `agent run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    root: RootArgs,
    /// The node config; default: /etc/deeplearning/node.json under the root,
    /// or the instance's user data when that file does not exist yet.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Do not mount EFS; only write its fstab line and mount point.
    #[arg(long)]
    no_mount: bool,
    /// Test-only knob: the length of the idle guard's minute, in
    /// milliseconds (default 60000). The end-to-end tests shorten it so
    /// that a blueprint's 5 minutes pass in seconds; a blueprint cannot set
    /// it (it is not in the node config), only whoever starts the agent.
    #[arg(long, hide = true, value_name = "MS", env = "DEEPLEARNING_TEST_IDLE_MINUTE_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_minute_ms: u64,
    /// The command the idle guard's `stop` powers the master off with
    /// (default `systemctl poweroff`); the end-to-end tests give one that
    /// leaves a mark instead.
    #[arg(long, hide = true, value_name = "COMMAND", num_args = 1.., allow_hyphen_values = true)]
    power_off_command: Option<Vec<String>>,
    /// Test-only knob: read the node's GPUs from this JSON fixture
    /// (`gpu_health::Fixture`, read again at every look) instead of the
    /// NVIDIA driver, so the end-to-end tests can give a node GPUs, and a
    /// fault mid-run. Not in the node config: a blueprint cannot set it.
    #[arg(long, hide = true, value_name = "FILE", env = "DEEPLEARNING_TEST_GPU_FIXTURE")]
    gpu_fixture: Option<PathBuf>,
}

/// Arguments of `agent render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    #[command(flatten)]
    root: RootArgs,
    /// A manifest as JSON: a node's state file, its `manifest`, or a
    /// `manifest_part` message body of a one-part manifest.
    #[arg(long, value_name = "FILE")]
    manifest: PathBuf,
    /// The instance id of the node to render for; default: this node's, from its state file.
    #[arg(long = "self", value_name = "INSTANCE_ID")]
    me: Option<String>,
    /// The node config; default: /etc/deeplearning/node.json under the root.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The node's instance type, for the profile's EFA RDMA setting; without
    /// it the profile is rendered as for a type without RDMA. The NCCL socket
    /// interface is looked up on the machine this runs on.
    #[arg(long, value_name = "TYPE")]
    instance_type: Option<String>,
}

/// Arguments of `agent leave`.
#[derive(Debug, Args)]
pub struct LeaveArgs {
    #[command(flatten)]
    root: RootArgs,
    /// Why, for the master's log (at most 1024 characters).
    #[arg(long, default_value = "asked to leave", value_parser = reason)]
    reason: String,
}

/// What the command checked was found wanting: exit 1 ([`cli_output::exit::FAILED`]).
/// Any other error of a command is exit 2 ([`cli_output::exit::ERROR`]).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Refused(#[from] anyhow::Error);

impl Refused {
    /// `e` marked as a refusal, for `?`.
    fn of(e: impl Into<anyhow::Error>) -> anyhow::Error {
        Refused(e.into()).into()
    }
}

/// A file error of the agent's `files` module: refused (exit 1) when the
/// file was read and found wanting (a manifest the agent's checks refuse, a
/// state file of another version), else the machine's (exit 2: a file
/// that cannot be read or written, a mount that failed).
fn files_error(e: files::FilesError) -> anyhow::Error {
    use files::FilesError as F;
    match e {
        F::Read { .. }
        | F::Write { .. }
        | F::CreateDir { .. }
        | F::Chown { .. }
        | F::CannotMount { .. }
        | F::Mount { .. } => e.into(),
        _ => Refused::of(e),
    }
}

/// A node config that could not be read is the machine's error (exit 2);
/// one that was read and refused (not JSON of the contract, larger than a
/// config ever is, not UTF-8 text) is exit 1, as synth treats a blueprint.
fn config_error(e: crate::config::ConfigError) -> anyhow::Error {
    match &e {
        crate::config::ConfigError::Read { source, .. } if !is_refused_read(source) => e.into(),
        _ => Refused::of(e),
    }
}

/// Whether a failed [`crate::config::read_bounded`] read the file and
/// refused it (too large, not UTF-8 text) rather than not reading it.
fn is_refused_read(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::FileTooLarge | std::io::ErrorKind::InvalidData)
}

/// Runs a parsed command line on a new async runtime, prints what failed
/// (an error and its causes, one per line), and returns the exit code.
pub fn main(cli: Cli) -> u8 {
    // Two worker threads whatever the instance: the agent waits on the
    // network and the disk, and a 96-vCPU GPU node would otherwise get 96.
    // (Multi-threaded, not current-thread: file writes use `block_in_place`.)
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            cli_output::errln!("error: cannot start the async runtime: {e}");
            return cli_output::exit::ERROR;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => cli_output::exit::SUCCESS,
        Err(e) => match e.downcast_ref::<cli_output::Closed>() {
            Some(cli_output::Closed::ReaderGone) => cli_output::exit::SUCCESS,
            Some(closed) => {
                closed.report("the output");
                cli_output::exit::ERROR
            }
            None => {
                cli_output::errln!("error: {}", cli_output::report(e.as_ref()));
                // Anywhere in the chain: a context added above a refusal keeps it one.
                if e.chain().any(|c| c.is::<Refused>()) { cli_output::exit::FAILED } else { cli_output::exit::ERROR }
            }
        },
    }
}

/// A `--reason` short enough for a log line (and far below the message size limit).
fn reason(s: &str) -> Result<String, String> {
    if s.chars().count() <= 1024 { Ok(s.to_owned()) } else { Err("at most 1024 characters".to_owned()) }
}

/// Runs a parsed command line; the error is what to print.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            runner::run(runner::Options {
                root: args.root.root,
                config: args.config,
                mount: !args.no_mount,
                idle_minute_ms: args.idle_minute_ms,
                power_off: args
                    .power_off_command
                    .unwrap_or_else(|| crate::power::DEFAULT_COMMAND.iter().map(|w| (*w).to_owned()).collect()),
                gpu_fixture: args.gpu_fixture,
            })
            .await
        }
        Command::Status(args) => status(&args),
        Command::Render(args) => render(&args),
        Command::Leave(args) => leave(&args).await,
        Command::GpuCheck(args) => gpu_check(&args),
    }
}

fn gpu_check(args: &GpuCheckArgs) -> anyhow::Result<()> {
    use node_contract::gpu::{GPU_CHECK_PATH, GpuExpect, GpuLevel};
    if args.idle_reading {
        let line = match gpu_health::busiest_percent(&*gpu_health::open(args.gpu_fixture.as_deref())) {
            Some(p) => format!("idle guard's GPU reading: the busiest GPU is at {p} % (busy at 5 % or more)\n"),
            None => "idle guard's GPU reading: none (no NVML, no GPU, or none could be read)\n".to_owned(),
        };
        return Ok(cli_output::print(&line)?);
    }
    let level = GpuLevel::from_name(&args.level).unwrap_or(GpuLevel::Quick);
    let last = gpu_health::last_report(&node_contract::files::under(&args.root.root, GPU_CHECK_PATH));
    let expect: Option<GpuExpect> = match &args.expect {
        Some(json) => {
            Some(serde_json::from_str(json).map_err(|e| anyhow::anyhow!("--expect is not a GpuExpect: {e}"))?)
        }
        None => None,
    };
    let gpus = gpu_health::open(args.gpu_fixture.as_deref());
    let budget = std::time::Duration::from_secs(args.timeout.unwrap_or(u64::from(level.default_timeout_seconds())));
    let report = gpu_health::rerun(&*gpus, last.as_ref(), expect, level, budget);
    let ip = report.private_ip.clone();
    let host = if ip.is_empty() { "this node".to_owned() } else { ip.clone() };
    let mut text = gpu_health::table(&[(host, report.clone())]);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let verdict = if report.passed() { "passed" } else { "FAILED" };
    text.push_str(&format!("gpu check {verdict} in {:.1} s\n", report.millis as f64 / 1000.0));
    cli_output::print(&text)?;
    if !report.passed() {
        return Err(Refused::of(anyhow::anyhow!("the GPU check failed: {}", report.failure_line())));
    }
    Ok(())
}

fn status(args: &RootArgs) -> anyhow::Result<()> {
    let Some(state) = files::state::read(&args.root).map_err(files_error)? else {
        return Err(Refused::of(anyhow::anyhow!(
            "this node has not applied any manifest yet (no state file under {})",
            args.root.display()
        )));
    };
    let mut text = format!(
        "cluster {}  generation {}  this node {}\n",
        state.manifest.cluster, state.generation, state.instance_id
    );
    for n in &state.manifest.nodes {
        let me = if n.instance_id == state.instance_id { "  <- this node" } else { "" };
        text.push_str(&format!("{:<24} {:<16} {:<20} gpus={}{me}\n", n.alias, n.private_ip, n.instance_id, n.gpus));
    }
    text.push_str(&master_timeline(&args.root));
    Ok(cli_output::print(&text)?)
}

/// The formation timeline table when `root` holds a master's state, a line
/// saying why when that state cannot be read, and nothing on a worker.
fn master_timeline(root: &std::path::Path) -> String {
    let path = runner::master_state_path(root);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return String::new(),
        Err(e) => return format!("\nno formation timeline: cannot read {}: {e}\n", path.display()),
    };
    match serde_json::from_str::<crate::cluster::master::MasterState>(&text) {
        Ok(state) => format!("\n{}", state.timeline().table()),
        Err(e) => format!("\nno formation timeline: {} is not a master state this agent reads: {e}\n", path.display()),
    }
}

/// The largest file `agent render --manifest` reads: a manifest message is
/// at most [`message::MAX_BODY_BYTES`], and a state file is that manifest
/// plus a few fields.
const MAX_MANIFEST_FILE_BYTES: u64 = 2 * message::MAX_BODY_BYTES as u64;

/// The manifest in `text`: a manifest message body (with `kind`; a whole
/// manifest fits in one part up to about 3,000 nodes), an agent state file
/// (with `manifest`), or a bare manifest as a state file holds it. The error
/// is the reason that kind of document is refused (an oversized body, a
/// version this agent does not read, one part of several), not a guess at
/// another kind.
fn manifest_from(text: &str, path: &std::path::Path) -> anyhow::Result<message::Manifest> {
    let shown = path.display();
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{shown} is not JSON: {e}"))?;
    if value.get("kind").is_some() {
        let part = message::parse_worker_queue(text)
            .map_err(|e| anyhow::anyhow!("{shown} is not a usable manifest message: {e}"))?;
        if part.parts != 1 {
            anyhow::bail!(
                "{shown} is part {} of {} of generation {}; give the whole manifest (a node's state file holds it)",
                part.part + 1,
                part.parts,
                part.generation
            );
        }
        return node_contract::parts::Assembly::new()
            .add(part)
            .map_err(|e| anyhow::anyhow!("{shown} is not a usable manifest message: {e}"))?
            .ok_or_else(|| anyhow::anyhow!("{shown}: the manifest part is incomplete"));
    }
    if value.get("manifest").is_some() {
        let state = node_contract::state::State::parse(text)
            .map_err(|e| anyhow::anyhow!("{shown} is not a usable state file: {e}"))?;
        return Ok(state.manifest);
    }
    if value.get("nodes").is_some() {
        return serde_json::from_value::<message::Manifest>(value)
            .map_err(|e| anyhow::anyhow!("{shown} is not a usable manifest: {e}"));
    }
    anyhow::bail!(
        "{shown} is neither a manifest message (a JSON object with \"kind\": \"manifest_part\"), an agent state file (with a \"manifest\" field), nor a manifest (with \"nodes\")"
    )
}

fn render(args: &RenderArgs) -> anyhow::Result<()> {
    let text = crate::config::read_bounded(&args.manifest, MAX_MANIFEST_FILE_BYTES).map_err(|e| {
        let refused = is_refused_read(&e);
        let e = anyhow::anyhow!("cannot read the manifest {}: {e}", args.manifest.display());
        if refused { Refused::of(e) } else { e }
    })?;
    let manifest = manifest_from(&text, &args.manifest).map_err(Refused::of)?;
    let config_path = args.config.clone().unwrap_or_else(|| crate::config::path_under(&args.root.root));
    let config = crate::config::from_file(&config_path).map_err(config_error)?;
    let me = match &args.me {
        Some(id) => id.clone(),
        None => files::state::read(&args.root.root)
            .map_err(files_error)?
            .map(|s| s.instance_id)
            .ok_or_else(|| anyhow::anyhow!("no --self given and no state file to take this node's id from"))?,
    };
    let interface = manifest.node(&me).and_then(|n| crate::fabric::interface_with(&n.private_ip));
    let fabric = crate::fabric::environment(config.efa.as_ref(), args.instance_type.as_deref(), interface.as_deref());
    // The same checks the running agent applies before it writes anything.
    let plan = files::plan(&manifest, &me, &config, None, &fabric).map_err(files_error)?;
    let mut out = String::new();
    for (path, content) in files::render(&plan, &args.root.root).map_err(files_error)? {
        out.push_str(&format!("==> {} <==\n{content}", path.display()));
        if !content.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(cli_output::print(&out)?)
}

async fn leave(args: &LeaveArgs) -> anyhow::Result<()> {
    let config = crate::config::from_file(&crate::config::path_under(&args.root.root)).map_err(config_error)?;
    let state = files::state::read(&args.root.root)
        .map_err(files_error)?
        .ok_or_else(|| Refused::of(anyhow::anyhow!("this node has not joined a cluster (no state file)")))?;
    let clients = crate::aws::clients(&config.region).await;
    let queue = crate::aws::SqsQueue::new(clients.sqs, config.queues.master.clone());
    let body = Message::Leave(Leave { instance_id: state.instance_id.clone(), reason: args.reason.clone() }).to_body();
    queue.send(&body).await?;
    Ok(cli_output::outln!("asked the master to remove {} from cluster {}", state.instance_id, config.cluster)?)
}
