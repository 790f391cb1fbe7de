//! The `synth` command line: argument types (clap derive, one struct per
//! subcommand) and what each subcommand does.
//!
//! Data goes to stdout (a template, a schema, a region list); diagnostics and
//! logs go to stderr. Exit codes are named constants ([`ExitCode`]), as in
//! cfn-guard and ripgrep.

mod build;
mod capacity;
mod cloud;
mod delete;
mod deploy;
mod diff;
mod events;
mod image;
mod input;
mod logs;
mod output;
mod outputs;
mod policy;
mod regions;
mod resume;
mod schema;
mod ssh;
mod stage;
mod status;
mod terminal;
mod validate;

use clap::{Parser, Subcommand};

pub use crate::exit::ExitCode;
pub use input::{Input, MAX_BLUEPRINT_BYTES};

/// Compile a cluster blueprint (YAML) into one AWS CloudFormation template,
/// and deploy it.
///
/// Write a short blueprint (see blueprints/ for examples), then deploy it from
/// the terminal, or build the template and upload it in the console:
///
///   synth capacity blueprints/gpu-cluster.yaml --region us-east-1
///   synth deploy blueprints/gpu-cluster.yaml --region us-east-1
///   synth status resnet-training; synth ssh resnet-training
///   synth resume resnet-training    # after the idle guard scaled it down
///   synth delete resnet-training
///   # when formation fails, the nodes' own lines:
///   synth logs resnet-training --node worker3
///
///   synth validate blueprints/gpu-cluster.yaml
///   synth build blueprints/gpu-cluster.yaml --region us-east-1 > stack.json
///
/// Exit codes: 0 success (an empty answer too: "no log lines since ...", on
/// stderr), 1 the blueprint has problems (or the stack failed, an update
/// was refused, or the capacity check found a blocker), 2 usage, internal, credentials or AWS error, 3 not found
/// (no such stack, no logs of that stack, no such node), 130 interrupted.
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
    /// Check a region's vCPU quotas, the zones that offer the blueprint's
    /// instance types, and its reservations, before anything is created.
    Capacity(capacity::CapacityArgs),
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
    /// Bring back a cluster the idle guard scaled down: start its master if
    /// it was stopped, put the workers back, watch them join.
    Resume(resume::ResumeArgs),
    /// Delete a stack and watch it go.
    Delete(delete::DeleteArgs),
    /// Put the agent package into the staging bucket and print the
    /// blueprint lines that install it at boot (for the console route).
    Stage(stage::StageArgs),
    /// Print the IAM policies a user needs to run the commands above, and
    /// nothing else (JSON on stdout; --help says how to attach them).
    Policy(policy::PolicyArgs),
}

/// What `--region` means for `synth image`: the image is copied to all five
/// regions whatever it says.
const IMAGE_REGION_HELP: &str = "Check the blueprint for this region, and take its `image.ami` entry for this region as the base image's default. The image is still copied to all five regions";

/// Parses the command line as `cli_output::parse` does (errors and help
/// printed, the exit code returned), except that an unknown flag's usage
/// line is the command's own: clap counts the flag it suggests as given and
/// shows it as if required (`synth status --regoin x` said `Usage: synth
/// status --region <REGION> [STACK]`).
pub fn parse() -> Result<Cli, u8> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Err(e) = <Cli as clap::Parser>::try_parse_from(&args)
        && let Some(text) = unknown_flag_message(&e, &args)
    {
        cli_output::eprint(&text);
        return Err(cli_output::EXIT_WRITE_FAILED);
    }
    cli_output::parse::<Cli>()
}

/// For an unknown flag, clap's message with the usage line of the command
/// it was given to, as its `--help` shows it.
fn unknown_flag_message(e: &clap::Error, args: &[std::ffi::OsString]) -> Option<String> {
    use clap::CommandFactory;
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let mut root = Cli::command();
    root.build();
    let name = args.iter().skip(1).filter_map(|a| a.to_str()).find(|a| !a.starts_with('-'))?;
    let usage = root.find_subcommand_mut(name)?.render_usage().to_string();
    let text = e.render().to_string();
    let start = text.find("Usage: ")?;
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    Some(format!("{}{}{}", &text[..start], usage.trim_end(), &text[end..]))
}

/// Runs a parsed command line and returns how to exit.
pub fn run(cli: Cli) -> ExitCode {
    let code = run_command(cli);
    crate::deploy::console::clear_live_line();
    code
}

fn run_command(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Build(args) => build::run(&args),
        Command::Image(args) => image::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Regions(args) => regions::run(&args),
        Command::Capacity(args) => capacity::run(&args),
        Command::Deploy(args) => deploy::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Events(args) => events::run(&args),
        Command::Logs(args) => logs::run(&args),
        Command::Outputs(args) => outputs::run(&args),
        Command::Ssh(args) => ssh::run(&args),
        Command::Resume(args) => resume::run(&args),
        Command::Delete(args) => delete::run(&args),
        Command::Stage(args) => stage::run(&args),
        Command::Policy(args) => policy::run(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: a misspelt `--regoin` showed a usage line in which
    /// `--region` looked required.
    #[test]
    fn an_unknown_flag_shows_the_commands_own_usage() {
        let args: Vec<std::ffi::OsString> = ["synth", "status", "--regoin", "us-east-1", "x"].map(Into::into).to_vec();
        let e = <Cli as clap::Parser>::try_parse_from(&args).expect_err("unknown flag");
        let text = unknown_flag_message(&e, &args).expect("rewritten");
        assert!(text.contains("unexpected argument '--regoin'"), "{text}");
        assert!(text.contains("a similar argument exists: '--region'"), "{text}");
        assert!(text.contains("\nUsage: synth status [OPTIONS] [STACK]\n"), "{text}");
        assert!(!text.contains("--region <REGION> [STACK]"), "{text}");
    }
}
