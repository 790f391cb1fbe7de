//! The `agent` command line (clap derive): `run` (the daemon, what the
//! systemd unit starts), `status`, `render` and `leave`.
//!
//! Exit codes: 0 success, 1 the command failed (the reason is printed),
//! 2 usage error.

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
    /// Print the generation this node applied and the nodes in it.
    Status(RootArgs),
    /// Print the files a manifest would produce on a node, without writing anything.
    Render(RenderArgs),
    /// Ask the master to remove this node from the cluster.
    Leave(LeaveArgs),
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
}

/// Arguments of `agent leave`.
#[derive(Debug, Args)]
pub struct LeaveArgs {
    #[command(flatten)]
    root: RootArgs,
    /// Why, for the master's log.
    #[arg(long, default_value = "asked to leave")]
    reason: String,
}

/// Runs a parsed command line; the error is what to print.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            runner::run(runner::Options { root: args.root.root, config: args.config, mount: !args.no_mount }).await
        }
        Command::Status(args) => status(&args),
        Command::Render(args) => render(&args),
        Command::Leave(args) => leave(&args).await,
    }
}

fn status(args: &RootArgs) -> anyhow::Result<()> {
    let Some(state) = files::state::read(&args.root)? else {
        anyhow::bail!("this node has not applied any manifest yet (no state file under {})", args.root.display());
    };
    println!("cluster {}  generation {}  this node {}", state.manifest.cluster, state.generation, state.instance_id);
    for n in &state.manifest.nodes {
        let me = if n.instance_id == state.instance_id { "  <- this node" } else { "" };
        println!("{:<24} {:<16} {:<20} gpus={}{me}", n.alias, n.private_ip, n.instance_id, n.gpus);
    }
    Ok(())
}

fn render(args: &RenderArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.manifest)
        .map_err(|e| anyhow::anyhow!("cannot read the manifest {}: {e}", args.manifest.display()))?;
    let manifest = read_manifest(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.manifest.display()))?;
    let config_path = args.config.clone().unwrap_or_else(|| crate::config::path_under(&args.root.root));
    let config = crate::config::from_file(&config_path)?;
    let me = match &args.me {
        Some(id) => id.clone(),
        None => files::state::read(&args.root.root)?
            .map(|s| s.instance_id)
            .ok_or_else(|| anyhow::anyhow!("no --self given and no state file to take this node's id from"))?,
    };
    let plan = files::plan(&manifest, &me, &config, None)?;
    for (path, content) in files::render(&plan, &args.root.root)? {
        println!("==> {} <==", path.display());
        print!("{content}");
        if !content.ends_with('\n') {
            println!();
        }
    }
    Ok(())
}

/// A manifest from a state file, a manifest's JSON, or a manifest message
/// (a `manifest_part` body, when the manifest fits in one part).
fn read_manifest(text: &str) -> anyhow::Result<message::Manifest> {
    if let Ok(part) = message::parse_worker_queue(text) {
        if part.parts != 1 {
            anyhow::bail!(
                "this is part {} of {} of generation {}; give the whole manifest (a node's state file holds it)",
                part.part + 1,
                part.parts,
                part.generation
            );
        }
        let whole = node_contract::parts::Assembly::new().add(part)?;
        return whole.ok_or_else(|| anyhow::anyhow!("the manifest part is incomplete"));
    }
    if let Ok(state) = serde_json::from_str::<files::state::State>(text) {
        return Ok(state.manifest);
    }
    serde_json::from_str::<message::Manifest>(text)
        .map_err(|e| anyhow::anyhow!("neither a state file, a manifest nor a manifest message: {e}"))
}

async fn leave(args: &LeaveArgs) -> anyhow::Result<()> {
    let config = crate::config::from_file(&crate::config::path_under(&args.root.root))?;
    let state = files::state::read(&args.root.root)?
        .ok_or_else(|| anyhow::anyhow!("this node has not joined a cluster (no state file)"))?;
    let clients = crate::aws::clients(&config.region).await;
    let queue = crate::aws::SqsQueue::new(clients.sqs, config.queues.master.clone());
    let body = Message::Leave(Leave { instance_id: state.instance_id.clone(), reason: args.reason.clone() }).to_body();
    queue.send(&body).await?;
    println!("asked the master to remove {} from cluster {}", state.instance_id, config.cluster);
    Ok(())
}
