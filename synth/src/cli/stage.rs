//! `synth stage`: puts the agent package into the account's staging bucket,
//! as `synth deploy` does, and prints the blueprint lines that make every
//! node install it at boot: the console route to a cluster that forms on
//! the stock image (paste them, `synth build`, upload the template).

use std::path::PathBuf;

use super::cloud::{self, AwsArgs};
use super::terminal::Terminal;
use crate::deploy::console::Console;
use crate::deploy::port::Cloud;
use crate::deploy::prepare::stage_package;
use crate::deploy::staging;
use crate::exit::ExitCode;
use crate::exit::printed;
use crate::spec::AgentPackage;

/// Arguments of `synth stage`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  packaging/build && synth stage --region us-east-1
  # Amazon Linux images:
  synth stage --region us-east-1 \\
    \"$CARGO_TARGET_DIR\"/package/deeplearning-agent-0.1.0-x86_64.tar.gz
  # Is this file an agent package? (no AWS call, nothing uploaded)
  synth stage --check ./deeplearning-agent_0.1.0-1_amd64.deb

The package goes to deeplearning-cluster-staging-<account>-<region> (made on
first use: private, encrypted, public access blocked, bucket-owner
enforced, versioned), keyed by its SHA-256, so it is uploaded once. Stdout
gets the `image:` lines to paste into the blueprint; then `synth build` it
for that region and upload the template in the CloudFormation console. The
nodes' role may read exactly that object. `synth deploy` does all of this
by itself.")]
pub struct StageArgs {
    /// The package (default: the .deb that packaging/build made; the
    /// .tar.gz for Amazon Linux images).
    #[arg(value_name = "PACKAGE")]
    package: Option<PathBuf>,

    /// Only check that PACKAGE is an agent package (what stage and deploy
    /// check before any upload: a Debian package named deeplearning-agent,
    /// or the .tar.gz with <dir>/bin/agent) and print its kind and
    /// SHA-256; no AWS call, nothing uploaded. Exit 1 when it is not one.
    #[arg(long)]
    check: bool,

    #[command(flatten)]
    aws: AwsArgs,
}

/// The blueprint lines that install `package` at boot.
fn blueprint_lines(package: &AgentPackage) -> String {
    format!("image:\n  agent_package_url: {}\n  agent_package_sha256: {}\n", package.url, package.sha256)
}

/// The file `synth stage` stages: the one named, else the .deb
/// `packaging/build` made.
fn package_file(args: &StageArgs) -> PathBuf {
    args.package
        .clone()
        .unwrap_or_else(|| staging::package_dir().join(staging::package_file_name(node_contract::PackageFormat::Deb)))
}

/// `synth stage --check`: the package's kind and SHA-256 on stdout, or why
/// it is none (exit 1).
fn check(args: &StageArgs) -> ExitCode {
    let file = package_file(args);
    if let Err(e) = std::fs::metadata(&file) {
        // Not read at all: an error (exit 2), not a verdict on the file.
        Terminal.noteln(&format!("error: cannot read the agent package {}: {e}", file.display()));
        return ExitCode::Error;
    }
    match staging::read_package(&file) {
        Ok(p) => {
            let kind = match p.format {
                node_contract::PackageFormat::Deb => "a Debian package (deeplearning-agent)",
                node_contract::PackageFormat::Tarball => "a .tar.gz with bin/agent (Amazon Linux images)",
            };
            let line = format!("{}: {kind}, sha256 {}\n", p.path.display(), p.sha256);
            printed(Terminal.print(&line), "the check", ExitCode::Success)
        }
        Err(e) => {
            Terminal.noteln(&format!("error: {e}"));
            ExitCode::Invalid
        }
    }
}

/// Runs `synth stage`.
pub(super) fn run(args: &StageArgs) -> ExitCode {
    if args.check {
        return check(args);
    }
    cloud::with_cloud(&args.aws, |cloud| async move {
        let file = package_file(args);
        let display = Terminal.display();
        let name_one = "name it: `synth stage FILE`";
        let package = match stage_package(&Terminal, &cloud, &file, None, true, &display, name_one).await {
            Ok(p) => p,
            Err(code) => return code,
        };
        display.finish();
        Terminal.noteln(&format!(
            "Add these lines to the blueprint (under its `image:` if it has one), then \
             `synth build BLUEPRINT --region {}`:",
            cloud.region()
        ));
        printed(Terminal.print(&blueprint_lines(&package)), "the blueprint lines", ExitCode::Success)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console route: every example blueprint with the lines `synth
    /// stage` prints added has no "would fail to form" warning, and its
    /// nodes install exactly that package.
    #[test]
    fn every_example_blueprint_with_the_staged_package_forms() {
        let package = AgentPackage {
            url:
                "s3://deeplearning-cluster-staging-123456789012-us-east-1/agent/ab/deeplearning-agent_0.1.0-1_amd64.deb"
                    .into(),
            sha256: "ab".repeat(32),
        };
        let lines = blueprint_lines(&package);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../blueprints");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            let before = crate::blueprint::load(&text, &name, Some(crate::region::Region::UsEast1)).unwrap();
            if before.missing_agent.is_none() {
                continue; // it names its own package (install-at-boot.yaml)
            }
            // Pasted as a user would: under an existing `image:`, else as a new block.
            let pasted = match text.lines().position(|l| l == "image:") {
                Some(i) => {
                    let mut out: Vec<&str> = text.lines().collect();
                    let inner: Vec<&str> = lines.lines().skip(1).collect();
                    out.splice(i + 1..i + 1, inner);
                    out.join("\n") + "\n"
                }
                None => format!("{text}{lines}"),
            };
            let after = crate::blueprint::load(&pasted, &name, Some(crate::region::Region::UsEast1))
                .unwrap_or_else(|e| panic!("{name}:\n{pasted}\n{e}"));
            assert_eq!(after.missing_agent, None, "{name}");
            assert_eq!(after.spec.image.agent_package.as_ref(), Some(&package), "{name}");
            checked += 1;
        }
        assert!(checked >= 7, "{checked} blueprints needed a package");
    }
}
