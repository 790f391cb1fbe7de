//! `synth logs`: the nodes' lines from CloudWatch Logs, merged in time
//! order, each prefixed by its node; `--follow` keeps printing new ones.
//!
//! The group is found from the stack's name alone (see
//! [`crate::deploy::logs`], which is also the flow), so this works for a
//! stack that formed, one that failed and rolled back, and one that was
//! deleted.

use cli_output::errln;

use super::cloud::{self, AwsArgs};
use super::terminal::Terminal;
use crate::deploy::console::Console;
use crate::deploy::logs::{Request, parse_since, print_logs};
use crate::deploy::time::now_ms;
use crate::exit::ExitCode;

/// Arguments of `synth logs`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Lines are `<time>  <node> | <line>`, the time in UTC (the trailing Z), to the millisecond.

Examples:
  synth logs resnet-training               # every node's lines, oldest first
  synth logs resnet-training --node worker3
      # one node (also: master, 3, i-0abc123def4567890)
  synth logs resnet-training --since 10m   # the last ten minutes (90s, 2h, 1d)
  synth logs resnet-training --since 2026-11-25T20:00:00Z
  synth logs resnet-training -f            # then new lines; Ctrl-C stops (130)
  synth logs resnet-training | grep worker3    # every line carries its node

The stack may be running, rolled back or deleted: its nodes' log group,
/deeplearning-cluster/<STACK>/<the stack id's UUID>, outlives it. When
stacks of that name were created more than once, the newest one's lines;
--stack-id ID reads an earlier one's (the note lists their ids).

Exit codes: 0 printed, or no lines (said on stderr: \"no log lines since ...\"), 2 usage or
AWS error, 3 no logs of that stack (or no node of that name among those with lines), 130 Ctrl-C.")]
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

    /// An earlier stack of this name: its id (the ARN `synth status`
    /// showed, or the UUID at its end; the note on several stacks lists
    /// them). Default: the newest stack's lines.
    #[arg(long, value_name = "ID")]
    stack_id: Option<String>,

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
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::Error;
        }
    };
    cloud::block_on(async {
        // Ctrl-C while finding credentials ends it too.
        let cloud = tokio::select! {
            connected = cloud::connect(args.aws.region, args.aws.profile.as_deref()) => match connected {
                Ok(c) => c,
                Err(code) => return code,
            },
            _ = Terminal.interrupted() => return ExitCode::Interrupted,
        };
        let request = Request {
            stack: &args.stack,
            node: args.node.as_deref(),
            since,
            follow: args.follow,
            stack_id: args.stack_id.as_deref(),
        };
        print_logs(&Terminal, &cloud, &request).await
    })
}
