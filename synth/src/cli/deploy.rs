//! `synth deploy`: create or update a cluster's stack from its blueprint,
//! with the agent package staged, a preview of an update (refused when it
//! would destroy data), live progress, and the root cause of a failure.
//! The arguments; the flow is `crate::deploy::prepare` and
//! `crate::deploy::apply`.

use std::path::PathBuf;

use cli_output::errln;

use super::cloud;
use super::input::Input;
use super::terminal::Terminal;
use crate::deploy::apply::Options;
use crate::deploy::console::{Console, Display};
use crate::deploy::failover::{self, Plan};
use crate::deploy::prepare::{Blueprint, Prepared, Target, prepare};
use crate::exit::ExitCode;
use crate::region::Region;

/// Arguments of `synth deploy`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth deploy blueprints/gpu-cluster.yaml --region us-east-1
  synth deploy blueprints/gpu-cluster.yaml \\
    --parameter KeyName=my-key --parameter SshCidr=198.51.100.7/32
  # in a script: no question, updates applied unless refused
  synth deploy cluster.yaml --yes
  # a failed create keeps its nodes for inspection
  synth deploy cluster.yaml --keep-on-failure

The stack goes to one region: --region, else the blueprint's `region`,
else your AWS configuration's (AWS_REGION, then the profile's region). The
first line says which: \"Creating stack NAME in us-east-1: ...\".
--region a,b,c fails over: a create that fails because AWS has no capacity
(InsufficientInstanceCapacity, no Spot capacity, the master's formation
failure saying so) is deleted and the next region is tried, each prepared
on its own (staged package, image); a summary ends it. --retry-until-up
goes through the list again every --retry-interval (default 5m). An update
of an existing stack never fails over.

Before anything is staged or created, the region's capacity is checked as
`synth capacity` checks it: a vCPU quota below what `count` workers need,
an instance type offered in no zone, or a reservation or Capacity Block
that does not match the blueprint refuses the deploy (exit 1), naming the
quota and how to raise it. When AWS refuses the check's reads, one warning
line says so and the deploy goes on. --skip-capacity-check skips it.

A new stack is created; an existing one gets a change set, shown before
anything changes. An update that would replace or delete the master
instance (its root volume), the EFS file system or the VPC its mount
targets are in is refused unless --allow-replacement.

When the image has no agent (the stock Deep Learning AMI) and the blueprint
names no agent_package_url, the package from packaging/build (or
--agent-package FILE) goes to a staging bucket in your account,
deeplearning-cluster-staging-<account>-<region>, created on first use
(private, encrypted, versioned), and every node installs it at boot.

Exit codes: 0 the stack is up to date, 1 the blueprint has problems, the
stack failed, no region had capacity, or the update was refused, 2 usage,
credentials or AWS error,
130 interrupted (Ctrl-C while an update is previewed or asked about deletes
its change set: nothing changes; once the stack is changing, Ctrl-C stops
watching, not the stack).")]
pub struct DeployArgs {
    #[command(flatten)]
    pub(super) input: Input,

    #[command(flatten)]
    pub(super) target: DeployTarget,

    /// Keep what a failed create made (no rollback), for inspection.
    #[arg(long, help_heading = "Safety")]
    keep_on_failure: bool,

    /// Apply an update even when it replaces or deletes the master, the EFS
    /// file system or the VPC under it (their data is lost).
    #[arg(long, help_heading = "Safety")]
    allow_replacement: bool,

    /// Do not ask before applying an update (needed when not on a terminal).
    #[arg(long, short = 'y', help_heading = "Safety")]
    yes: bool,

    /// Start the create or update and return (exit 0), saying how to
    /// follow it (`synth events STACK --follow`, `synth status STACK`).
    /// Without a wait nothing can fail over: only the first of --region's
    /// regions is tried.
    #[arg(long, conflicts_with = "retry_until_up")]
    no_wait: bool,

    /// Deploy without first checking the region's vCPU quotas, the zones
    /// that offer the instance types, and the reservations the blueprint
    /// names (`synth capacity` runs that check alone).
    #[arg(long, help_heading = "Safety")]
    skip_capacity_check: bool,

    /// When no region of --region had capacity, try the list again after
    /// --retry-interval, until one has (Ctrl-C stops).
    #[arg(long, help_heading = "Capacity")]
    retry_until_up: bool,

    /// The wait between passes of --retry-until-up: 30s to 1h (default 5m).
    #[arg(long, value_name = "DURATION", value_parser = failover::parse_interval, requires = "retry_until_up", help_heading = "Capacity")]
    retry_interval: Option<std::time::Duration>,
}

/// What `deploy` and `diff` share besides the blueprint.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct DeployTarget {
    /// The stack's name (default: the blueprint's `name`).
    #[arg(long, value_name = "NAME")]
    pub stack: Option<String>,

    /// The AWS profile to use (default: AWS_PROFILE, else the default profile).
    #[arg(long, value_name = "NAME", help_heading = "AWS")]
    pub profile: Option<String>,

    /// A stack parameter, overriding the blueprint's value (repeatable), e.g.
    /// KeyName=my-key, WorkerCount=8 with MaxWorkers=8, ImageId=/my/ssm/parameter.
    /// Checked by the blueprint's rules for the field it stands for
    /// (WorkerCount is workers.count, at most workers.max).
    #[arg(long = "parameter", short = 'p', value_name = "KEY=VALUE")]
    pub parameters: Vec<String>,

    /// The agent package nodes install at boot (default: the one
    /// packaging/build made, when the image needs one).
    #[arg(long, value_name = "FILE")]
    pub agent_package: Option<PathBuf>,

    /// Update to the image the SSM parameter names now: the master is
    /// replaced (with its root volume; also needs --allow-replacement).
    /// Without it an update keeps the image the stack was created with.
    #[arg(long, help_heading = "Safety")]
    pub update_image: bool,

    /// Run the capacity check first (deploy, unless --skip-capacity-check).
    #[arg(skip)]
    pub capacity_check: bool,
}

impl DeployTarget {
    /// The flow's view of these arguments.
    fn target(&self) -> Target {
        Target {
            stack: self.stack.clone(),
            parameters: self.parameters.clone(),
            agent_package: self.agent_package.clone(),
            update_image: self.update_image,
            capacity_check: self.capacity_check,
        }
    }
}

/// Reads the blueprint, connects, stages the agent package (uploading it
/// only when `upload`) and builds the template (`crate::deploy::prepare`);
/// errors are printed. One region: a list of them is refused.
pub(super) async fn prepared(
    input: &Input,
    target: &DeployTarget,
    upload: bool,
    display: &Display,
) -> Result<(crate::deploy::sdk::SdkCloud, Prepared), ExitCode> {
    let region = input.region().map_err(|e| {
        errln!("{e}");
        ExitCode::Error
    })?;
    let text = input.read().map_err(|e| {
        errln!("{e}");
        e.code
    })?;
    prepared_in(&text, &input.display_path(), target, region, upload, display).await
}

/// [`prepared`] of a blueprint already read, for `region`.
async fn prepared_in(
    text: &str,
    path: &str,
    target: &DeployTarget,
    region: Option<Region>,
    upload: bool,
    display: &Display,
) -> Result<(crate::deploy::sdk::SdkCloud, Prepared), ExitCode> {
    let blueprint = Blueprint { text, path, region };
    let profile = target.profile.as_deref();
    prepare(&Terminal, blueprint, &target.target(), upload, display, |region| cloud::connect(region, profile)).await
}

/// Runs `synth deploy`: in each region of --region in turn while creates
/// meet no capacity (`crate::deploy::failover`).
pub(super) fn run(args: &DeployArgs) -> ExitCode {
    cloud::block_on(async {
        let mut target = args.target.clone();
        target.capacity_check = !args.skip_capacity_check;
        let regions = match args.input.regions() {
            Ok(regions) => regions,
            Err(e) => {
                errln!("{e}");
                return ExitCode::Error;
            }
        };
        let text = match args.input.read() {
            Ok(text) => text,
            Err(e) => {
                errln!("{e}");
                return e.code;
            }
        };
        let path = args.input.display_path();
        let options = Options {
            blueprint: &path,
            keep_on_failure: args.keep_on_failure,
            allow_replacement: args.allow_replacement,
            yes: args.yes,
            no_wait: args.no_wait,
        };
        let retry = args.retry_until_up.then(|| args.retry_interval.unwrap_or(failover::DEFAULT_RETRY_INTERVAL));
        let plan = Plan { regions: &regions, retry, options };
        let (text, path, target) = (&text, &path, &target);
        failover::deploy(&Terminal, plan, |region| async move {
            let display = Terminal.display();
            let (cloud, p) = prepared_in(text, path, target, region, true, &display).await?;
            Ok((cloud, p, display))
        })
        .await
    })
}
