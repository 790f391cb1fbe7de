//! `synth capacity`: whether the regions can hold the cluster a blueprint
//! asks for (vCPU quotas, the zones that offer each type, the reservations
//! and Capacity Blocks it names), before anything is created. The
//! decision and the report are `crate::deploy::capacity`; this file reads
//! the blueprint, connects to each region and prints.

use std::path::PathBuf;

use cli_output::errln;

use super::cloud;
use super::input::Input;
use super::terminal::Terminal;
use crate::blueprint;
use crate::deploy::capacity::{self, Ask};
use crate::deploy::console::{Console, fail};
use crate::exit::ExitCode;
use crate::region::Region;

/// Arguments of `synth capacity`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth capacity blueprints/reserved-gpus.yaml --region us-east-1
  synth capacity cluster.yaml --region us-east-1,us-west-2
  synth capacity cluster.yaml --json | jq .fits

For every instance type the blueprint uses (master, workers, fallbacks),
per region: the Availability Zones that offer it, its vCPUs, and the
account's vCPU quota it counts against (Service Quotas), beside what the
cluster needs at `count` and at `max` workers; and the reservations and
Capacity Blocks under `workers.capacity`, as EC2 describes them. The master
counts against its family's On-Demand quota; workers against On-Demand or
Spot by their capacity; reserved workers only beyond what the reservations
have free; Capacity Block workers against none (the block is checked
instead).

`synth deploy` runs the same check for its region before it creates
anything.

Exit codes: 0 nothing blocks, 1 something blocks (a quota below what
`count` needs, a type offered in no zone, a reservation that is missing or
does not match) or the blueprint has problems, 2 usage, credentials or AWS
error (a read AWS refused names the action and `synth policy`).")]
pub struct CapacityArgs {
    /// The blueprint file (YAML); `-` reads standard input.
    #[arg(value_name = "BLUEPRINT")]
    blueprint: PathBuf,

    /// The regions to check (repeat it, or separate them with commas).
    /// Default: the blueprint's `region`, else AWS_REGION or your
    /// profile's region.
    #[arg(long, short = 'r', value_name = "REGION", value_delimiter = ',', help_heading = "AWS")]
    region: Vec<Region>,

    /// The AWS profile to use (default: AWS_PROFILE, else the default profile).
    #[arg(long, value_name = "NAME", help_heading = "AWS")]
    profile: Option<String>,

    /// One JSON document on stdout, for scripts.
    #[arg(long)]
    json: bool,
}

/// Runs `synth capacity`.
pub(super) fn run(args: &CapacityArgs) -> ExitCode {
    let input = Input { blueprint: args.blueprint.clone(), region: Vec::new() };
    let text = match input.read() {
        Ok(text) => text,
        Err(e) => {
            errln!("{e}");
            return e.code;
        }
    };
    let path = input.display_path();
    let load = |region: Option<Region>| {
        blueprint::load(&text, &path, region).map_err(|problems| {
            Terminal.note(&problems.to_string());
            ExitCode::Invalid
        })
    };
    let mut regions: Vec<Option<Region>> = Vec::new();
    for r in &args.region {
        if !regions.contains(&Some(*r)) {
            regions.push(Some(*r));
        }
    }
    if regions.is_empty() {
        regions.push(None);
    }
    cloud::block_on(async {
        let mut reports = Vec::new();
        for region in regions {
            let loaded = match load(region) {
                Ok(loaded) => loaded,
                Err(code) => return code,
            };
            let cloud = match cloud::connect(region.or(loaded.spec.region), args.profile.as_deref()).await {
                Ok(cloud) => cloud,
                Err(code) => return code,
            };
            let ask = Ask::of(&loaded.spec, None, None);
            let display = Terminal.display();
            display.live(&format!("checking {}", crate::deploy::port::Cloud::region(&cloud)));
            let found = capacity::read(&cloud, &ask).await;
            display.finish();
            match found {
                Ok(found) => reports.push(capacity::assess(&ask, &found)),
                Err(e) => return fail(&Terminal, e),
            }
        }
        capacity::print(&Terminal, &reports, args.json)
    })
}
