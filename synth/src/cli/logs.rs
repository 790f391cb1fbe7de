//! `synth logs`: the nodes' lines from CloudWatch Logs, merged in time
//! order, each prefixed by its node; `--follow` keeps printing new ones.
//!
//! The group is found from the stack's name alone (see
//! [`crate::deploy::logs`]), so this works for a stack that formed, one that
//! failed and rolled back, and one that was deleted.

use super::ExitCode;
use super::cloud::{self, AwsArgs};
use crate::deploy::logs::{
    LineFormat, LogsError, MAX_STREAMS_LISTED, ReadError, Seen, parse_since, read_new, select_streams,
};
use crate::deploy::monitor::now_ms;
use crate::deploy::port::{Cloud, LogQuery};
use crate::deploy::watch::Backoff;

/// Arguments of `synth logs`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Lines are `<time>  <node> | <line>`, the time in UTC (the trailing Z), to the millisecond.

Examples:
  synth logs resnet-training                   # every node's lines, merged, oldest first
  synth logs resnet-training --node worker3    # one node (also: master, 3, i-0abc123def4567890)
  synth logs resnet-training --since 10m       # the last ten minutes (also 90s, 2h, 1d)
  synth logs resnet-training --since 2026-11-25T20:00:00Z
  synth logs resnet-training -f                # then new lines; Ctrl-C stops (exit 130)
  synth logs resnet-training | grep worker3    # every line carries its node

The stack may be running, rolled back or deleted: its nodes' log group,
/deeplearning-cluster/<STACK>/<the stack id's UUID>, outlives it. When
stacks of that name were created more than once, the newest one's lines.

Exit codes: 0 printed, 1 no logs for that stack or node, 2 usage or AWS error, 130 Ctrl-C.")]
pub struct LogsArgs {
    /// The stack's name (running, rolled back or deleted).
    #[arg(value_name = "STACK")]
    stack: String,

    /// Only this node: `master`, `worker3` (or just `3`), or an instance id.
    /// Without it, every node.
    #[arg(long, short = 'n', value_name = "NODE", conflicts_with = "all")]
    node: Option<String>,

    /// Every node (the default; says so in scripts).
    #[arg(long)]
    all: bool,

    /// Keep printing new lines as the nodes write them, until Ctrl-C.
    #[arg(long, short = 'f')]
    follow: bool,

    /// Only lines from this far back (`90s`, `10m`, `2h`, `1d`) or since
    /// this RFC 3339 time (`2026-11-25T20:00:00Z`). Default: from the start.
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,

    #[command(flatten)]
    aws: AwsArgs,
}

/// Runs `synth logs`.
pub(super) fn run(args: &LogsArgs) -> ExitCode {
    let since = match args.since.as_deref().map(|s| parse_since(s, now_ms())).transpose() {
        Ok(s) => s,
        Err(e) => return cloud::cloud_error(e),
    };
    cloud::block_on(async {
        let work = async {
            let cloud = match cloud::connect(args.aws.region, args.aws.profile.as_deref()).await {
                Ok(c) => c,
                Err(code) => return code,
            };
            print_logs(&cloud, args, since).await
        };
        // Ctrl-C at any point (finding credentials and a long first read
        // included) ends it at once; nothing on the cloud side changes.
        tokio::select! {
            code = work => code,
            _ = tokio::signal::ctrl_c() => ExitCode::Interrupted,
        }
    })
}

async fn print_logs<C: Cloud>(cloud: &C, args: &LogsArgs, since: Option<i64>) -> ExitCode {
    // Every stack of this name left a group (a stack created again after a
    // rollback or a delete gets a new one): the newest is this stack's.
    let prefix = node_contract::logs::log_group_prefix(&args.stack);
    let groups = match cloud.log_groups(&prefix).await {
        Ok(groups) => groups,
        Err(e) => return failed(e.into()),
    };
    let Some(newest) = groups.iter().max_by(|a, b| (a.created_ms, &a.name).cmp(&(b.created_ms, &b.name))) else {
        return failed(LogsError::NoGroup { stack: args.stack.clone(), region: cloud.region().to_owned(), prefix });
    };
    let mut query = LogQuery { group: newest.name.clone(), streams: Vec::new(), start_ms: since };
    if groups.len() > 1 {
        eprintln!(
            "note: {} earlier stack(s) named {} left logs too; these lines are from the newest, {} \
             (the others: `aws logs tail GROUP`, with GROUP from `aws logs describe-log-groups \
             --log-group-name-prefix {prefix}`)",
            groups.len() - 1,
            args.stack,
            query.group
        );
    }
    let mut format = match narrow(cloud, args.node.as_deref(), &mut query).await {
        Ok(all) => LineFormat::for_streams(&all),
        Err(e) => return failed(e),
    };
    let mut seen = Seen::default();
    let mut backoff = Backoff::default();
    let mut out = std::io::stdout().lock();
    loop {
        let printed = match read_new(cloud, &query, &mut seen, &mut format, &mut out).await {
            Ok(n) => n,
            Err(ReadError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => return ExitCode::Success,
            Err(ReadError::Write(e)) => return cloud::cloud_error(e),
            Err(ReadError::Cloud(e)) => return failed(e.into()),
        };
        if !args.follow {
            return ExitCode::Success;
        }
        tokio::time::sleep(backoff.next(printed > 0)).await;
        // A node's stream changes name when the master numbers it
        // (`worker-<id>`, then `worker3-<id>`): look again each round.
        if args.node.is_some()
            && let Err(e) = narrow(cloud, args.node.as_deref(), &mut query).await
        {
            return failed(e);
        }
        query.start_ms = seen.resume_ms(since);
    }
}

/// Lists the query's group's streams and narrows the query to `node`'s;
/// returns every stream (for the label column's width).
async fn narrow<C: Cloud>(cloud: &C, node: Option<&str>, query: &mut LogQuery) -> Result<Vec<String>, LogsError> {
    let all = cloud.log_streams(&query.group, MAX_STREAMS_LISTED).await?;
    if let Some(node) = node {
        query.streams = select_streams(&all, node, &query.group)?;
    }
    Ok(all)
}

/// Prints why and returns the exit code: 1 when there is nothing to read,
/// 2 for an AWS error.
fn failed(e: LogsError) -> ExitCode {
    match e {
        LogsError::Cloud(_) => cloud::cloud_error(e),
        _ => {
            eprintln!("error: {e}");
            ExitCode::Invalid
        }
    }
}
