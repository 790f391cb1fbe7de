//! The `synth` command line: argument types (clap derive, one struct per
//! subcommand) and what each subcommand does.
//!
//! Data goes to stdout (a template, a schema, a region list); diagnostics and
//! logs go to stderr. Exit codes are named constants ([`ExitCode`]), as in
//! cfn-guard and ripgrep.

mod build;
mod image;
mod output;
mod regions;
mod schema;
mod validate;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::region::Region;

/// How `synth` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything worked.
    Success = 0,
    /// The blueprint has problems (they were printed).
    Invalid = 1,
    /// A usage error or an internal error (a file that cannot be read or written, a bug).
    Error = 2,
}

/// Compile a cluster blueprint (YAML) into one AWS CloudFormation template.
///
/// Write a short blueprint (see blueprints/ for examples), build the template,
/// and upload it in the CloudFormation console:
///
///   synth validate blueprints/gpu-cluster.yaml
///   synth build blueprints/gpu-cluster.yaml --region us-east-1 > stack.json
///
/// Exit codes: 0 success, 1 the blueprint has problems, 2 usage or internal error.
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
    Image(image::ImageArgs),
    /// Check a blueprint and report every problem at once; print nothing else.
    Validate(validate::ValidateArgs),
    /// Print the JSON Schema of blueprints, for editors (YAML language servers).
    Schema(schema::SchemaArgs),
    /// List the regions templates can be built for.
    Regions(regions::RegionsArgs),
}

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

impl Input {
    /// The name used in messages.
    fn display_path(&self) -> String {
        if self.blueprint == Path::new("-") { "<stdin>".to_owned() } else { self.blueprint.display().to_string() }
    }

    /// The blueprint's text.
    fn read(&self) -> Result<String, String> {
        let result = if self.blueprint == Path::new("-") {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(&self.blueprint)
        };
        result.map_err(|e| format!("error: cannot read the blueprint {}: {e}", self.display_path()))
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
    }
}
