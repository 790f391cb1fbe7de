//! The `synth` command line: argument types (clap derive, one struct per
//! subcommand) and what each subcommand does.
//!
//! Data goes to stdout (a template, a schema, a region list); diagnostics and
//! logs go to stderr. Exit codes are named constants ([`ExitCode`]), as in
//! cfn-guard and ripgrep.

mod build;
mod cloud;
mod delete;
mod deploy;
mod diff;
mod events;
mod image;
mod logs;
mod output;
mod outputs;
mod regions;
mod schema;
mod ssh;
mod stage;
mod status;
mod validate;

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::region::Region;

/// How `synth` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything worked.
    Success = 0,
    /// The blueprint has problems (they were printed), the stack failed, or
    /// there is nothing to read (`synth logs` of a stack without logs).
    Invalid = 1,
    /// A usage error or an internal error (a file that cannot be read or
    /// written, a bug), or an AWS error (no credentials, access denied).
    Error = 2,
    /// Ctrl-C stopped watching a stack (the stack goes on).
    Interrupted = 130,
}

/// Compile a cluster blueprint (YAML) into one AWS CloudFormation template,
/// and deploy it.
///
/// Write a short blueprint (see blueprints/ for examples), then deploy it from
/// the terminal, or build the template and upload it in the console:
///
///   synth deploy blueprints/gpu-cluster.yaml --region us-east-1
///   synth status resnet-training; synth ssh resnet-training; synth delete resnet-training
///   synth logs resnet-training --node worker3    # when formation fails: the nodes' own lines
///
///   synth validate blueprints/gpu-cluster.yaml
///   synth build blueprints/gpu-cluster.yaml --region us-east-1 > stack.json
///
/// Exit codes: 0 success, 1 the blueprint has problems (or the stack failed,
/// or an update was refused, or there are no logs), 2 usage, internal, credentials or AWS error,
/// 130 interrupted.
#[derive(Debug, Parser)]
#[command(name = "synth", version, about, long_about, verbatim_doc_comment)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the CloudFormation template (JSON on stdout, or -o FILE).
    Build(build::BuildArgs),
    /// Build the EC2 Image Builder template that bakes the agent into the
    /// blueprint's base image, for all five regions (JSON on stdout, or -o FILE).
    #[command(mut_arg("region", |a| a.help(IMAGE_REGION_HELP)))]
    Image(image::ImageArgs),
    /// Check a blueprint and report every problem at once, on stderr; print
    /// nothing on stdout (the exit code says whether it builds).
    Validate(validate::ValidateArgs),
    /// Print the JSON Schema of blueprints, for editors (YAML language servers).
    Schema(schema::SchemaArgs),
    /// List the regions templates can be built for.
    Regions(regions::RegionsArgs),
    /// Create or update the cluster's stack, with live progress; an update is
    /// previewed and refused when it would destroy data.
    Deploy(deploy::DeployArgs),
    /// Preview what `deploy` would change (a change set, deleted afterwards).
    Diff(diff::DiffArgs),
    /// A stack's state, formation and outputs; or every cluster stack in the region.
    Status(status::StatusArgs),
    /// A stack's events, oldest first (--follow for new ones).
    Events(events::EventsArgs),
    /// The nodes' own lines (boot, agent), merged in time order, each
    /// prefixed by its node; also for a rolled-back or deleted stack.
    Logs(logs::LogsArgs),
    /// A stack's outputs (--json for scripts).
    Outputs(outputs::OutputsArgs),
    /// SSH to the master (or a worker through it) with the stack's own command.
    Ssh(ssh::SshArgs),
    /// Delete a stack and watch it go.
    Delete(delete::DeleteArgs),
    /// Put the agent package into the staging bucket and print the
    /// blueprint lines that install it at boot (for the console route).
    Stage(stage::StageArgs),
}

/// What `--region` means for `synth image`: the image is copied to all five
/// regions whatever it says.
const IMAGE_REGION_HELP: &str = "Check the blueprint for this region, and take its `image.ami` entry for this region as the base image's default. The image is still copied to all five regions";

/// The blueprint and region arguments `build` and `validate` share.
#[derive(Debug, clap::Args)]
pub struct Input {
    /// The blueprint file (YAML); `-` reads standard input.
    #[arg(value_name = "BLUEPRINT")]
    pub blueprint: PathBuf,

    /// Build for this region only (us-east-1, us-east-2, us-west-2, eu-west-1,
    /// ap-southeast-2). Without it, the blueprint's `region` is used; a
    /// blueprint without one gives a template that works in all five.
    #[arg(long, short = 'r', value_name = "REGION")]
    pub region: Option<Region>,
}

/// The largest blueprint read: real ones are a few KB; a stream that goes on
/// past this (`synth validate - < /dev/zero`) is stopped here, not read into
/// memory until it runs out.
pub const MAX_BLUEPRINT_BYTES: u64 = 1024 * 1024;

impl Input {
    /// The name used in messages.
    fn display_path(&self) -> String {
        if self.is_stdin() { "<stdin>".to_owned() } else { self.blueprint.display().to_string() }
    }

    fn is_stdin(&self) -> bool {
        self.blueprint == Path::new("-")
    }

    /// The blueprint's text, at most [`MAX_BLUEPRINT_BYTES`] of UTF-8.
    fn read(&self) -> Result<String, String> {
        let fail = |why: String| format!("error: cannot read the blueprint {}: {why}", self.display_path());
        let mut bytes = Vec::new();
        let result = if self.is_stdin() {
            std::io::stdin().lock().take(MAX_BLUEPRINT_BYTES + 1).read_to_end(&mut bytes)
        } else {
            std::fs::File::open(&self.blueprint).and_then(|f| f.take(MAX_BLUEPRINT_BYTES + 1).read_to_end(&mut bytes))
        };
        result.map_err(|e| fail(e.to_string()))?;
        if bytes.len() as u64 > MAX_BLUEPRINT_BYTES {
            return Err(fail(format!(
                "it is larger than {} KiB (reading stopped there); a blueprint is a few KB of YAML",
                MAX_BLUEPRINT_BYTES / 1024
            )));
        }
        tracing::debug!(path = %self.display_path(), bytes = bytes.len(), "read the blueprint");
        String::from_utf8(bytes).map_err(|e| {
            fail(format!("it is not UTF-8 text (byte {} is not); save it as UTF-8", e.utf8_error().valid_up_to()))
        })
    }

    /// The blueprint file's identity, so that `-o` can refuse to overwrite it.
    fn metadata(&self) -> Option<std::fs::Metadata> {
        if self.is_stdin() {
            use std::os::fd::AsFd;
            let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
            std::fs::File::from(fd).metadata().ok()
        } else {
            std::fs::metadata(&self.blueprint).ok()
        }
    }
}

/// How a command that prints data on stdout ends: a reader that went away
/// (`synth build x | head`) is not a failure; any other write error is
/// reported (`what`: "the template") and is exit 2.
fn printed(result: Result<(), cli_output::Closed>, what: &str) -> ExitCode {
    match result {
        Ok(()) | Err(cli_output::Closed::ReaderGone) => ExitCode::Success,
        Err(closed) => {
            closed.report(what);
            ExitCode::Error
        }
    }
}

/// Runs a parsed command line and returns how to exit.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Build(args) => build::run(&args),
        Command::Image(args) => image::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Regions(args) => regions::run(&args),
        Command::Deploy(args) => deploy::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Events(args) => events::run(&args),
        Command::Logs(args) => logs::run(&args),
        Command::Outputs(args) => outputs::run(&args),
        Command::Ssh(args) => ssh::run(&args),
        Command::Delete(args) => delete::run(&args),
        Command::Stage(args) => stage::run(&args),
    }
}
