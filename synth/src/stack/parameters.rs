//! The console form: parameters that default to the blueprint's values, their
//! groups and labels, the conditions derived from them, and a rule that
//! refuses a region the template was not built for.
//!
//! The form stays short: instance types, worker counts, key pair, SSH range,
//! an existing EFS id and the image. Everything else is fixed by the blueprint.

use std::collections::BTreeMap;

use cfn::{ConditionHandle, Expr, ParamHandle, Parameter, ParameterType, Pseudo, Rule, Template};
use serde_json::json;

use super::context::Ctx;
use crate::region::Region;
use crate::spec::ImageSource;

/// The parameter with the number of workers the stack asks for (`synth
/// resume` sets the worker group back to it).
pub(crate) const WORKER_COUNT_PARAMETER: &str = "WorkerCount";

/// The handles later builders use.
pub(super) struct Inputs {
    pub master_type: ParamHandle,
    pub worker_type: ParamHandle,
    pub worker_count: ParamHandle,
    pub min_workers: ParamHandle,
    pub max_workers: ParamHandle,
    pub key_name: ParamHandle,
    pub ssh_cidr: ParamHandle,
    pub efs_id: ParamHandle,
    /// The Capacity Block's zone, where every node goes (only with a block).
    pub block_zone: Option<ParamHandle>,
    /// The AMI id: a parameter or a mapping lookup.
    pub image_id: Expr,
    pub has_key: ConditionHandle,
    pub has_ssh: ConditionHandle,
    pub create_fs: ConditionHandle,
}

/// The blueprint field a parameter stands for (its default is that
/// field's value), for the parameters `-p` may set that the blueprint's
/// rules cover; `None` for the image and a Capacity Block's zone, which
/// CloudFormation checks.
pub(crate) fn blueprint_field(parameter: &str) -> Option<&'static str> {
    Some(match parameter {
        "MasterInstanceType" => "master.instance_type",
        "WorkerInstanceType" => "workers.instance_type",
        WORKER_COUNT_PARAMETER => "workers.count",
        "MinWorkers" => "workers.min",
        "MaxWorkers" => "workers.max",
        "KeyName" => "access.ssh.key_name",
        "SshCidr" => "access.ssh.cidr",
        "EfsFileSystemId" => "storage.efs.file_system_id",
        _ => return None,
    })
}

const INSTANCE_TYPE_PATTERN: &str = "^[a-z][a-z0-9-]*\\.[a-z0-9-]+$";
const MAX_WORKERS: i64 = 1000;

fn instance_type(label: &str, what: &str, default: &str) -> Parameter {
    Parameter::new(
        ParameterType::String,
        label,
        format!("EC2 instance type of {what}; synth checked that {default} is offered in the template's regions."),
    )
    .default(default)
    .constrained(INSTANCE_TYPE_PATTERN, "an EC2 instance type such as p3.2xlarge")
}

fn count(label: &str, description: &str, default: u32) -> Parameter {
    let mut p = Parameter::new(ParameterType::Number, label, description).default(default);
    p.min_value = Some(0);
    p.max_value = Some(MAX_WORKERS);
    p.constraint_description = Some(format!("a whole number from 0 to {MAX_WORKERS}"));
    p
}

pub(super) fn add(t: &mut Template, ctx: &Ctx) -> Inputs {
    let spec = ctx.spec;
    let master_type = t.parameter(
        "MasterInstanceType",
        instance_type("Master instance type", "the master (also worker 1)", &spec.master.instance_type),
    );
    let worker_type = t.parameter(
        "WorkerInstanceType",
        instance_type("Worker instance type", "the workers", &spec.workers.instance_type),
    );
    let worker_count = t.parameter(
        WORKER_COUNT_PARAMETER,
        count("Workers requested", "How many workers to launch (the master is not counted).", spec.workers.count),
    );
    let min_workers = t.parameter(
        "MinWorkers",
        count(
            "Fewest workers to form with",
            "Form the cluster with fewer workers than requested if at least this many boot in time; below it, the stack fails with the reason.",
            spec.workers.min,
        ),
    );
    let max_workers = t.parameter(
        "MaxWorkers",
        count(
            "Most workers (elastic ceiling)",
            "The worker group's maximum size; raise its desired capacity up to this while training runs.",
            spec.workers.max,
        ),
    );

    let key = Parameter::new(
        ParameterType::String,
        "EC2 key pair (optional)",
        "Name of an EC2 key pair for SSH to the nodes. Leave empty to use Session Manager only.",
    )
    .default(spec.access.key_name.clone().unwrap_or_default())
    .constrained(
        crate::spec::KEY_NAME_PATTERN,
        "a key pair name of 1 to 255 printable ASCII characters without ' and without a space at either end, or empty",
    );
    let key_name = t.parameter("KeyName", key);

    let ssh = Parameter::new(
        ParameterType::String,
        "SSH source range (optional)",
        "IPv4 range allowed to SSH to the nodes, for example 203.0.113.7/32. Leave empty for no SSH from outside the cluster.",
    )
    .default(spec.access.ssh_cidr.map(|c| c.to_string()).unwrap_or_default())
    .constrained(
        "^$|^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])/([1-9]|[12][0-9]|3[0-2])$",
        "an IPv4 CIDR range such as 203.0.113.0/24 (not 0.0.0.0/0), or empty",
    );
    let ssh_cidr = t.parameter("SshCidr", ssh);

    let efs = Parameter::new(
        ParameterType::String,
        "Existing EFS file system (optional)",
        "Id of an existing EFS file system to share between nodes. Leave empty to create a new, encrypted one.",
    )
    .default(spec.efs.file_system_id.clone().unwrap_or_default())
    .constrained("^$|^fs-([0-9a-f]{8}|[0-9a-f]{17})$", "fs- followed by 8 or 17 hexadecimal digits, or empty");
    let efs_id = t.parameter("EfsFileSystemId", efs);

    let image = image(t, ctx);

    // The block's zone, as a parameter rather than written into the subnets:
    // the console shows it, and zone names are the account's own.
    // An existing VPC's subnets are the user's (validation said which one must be there).
    let new_vpc = matches!(spec.network, crate::spec::NetworkSpec::New { .. });
    let block_zone = spec.workers.capacity_block().filter(|_| new_vpc).map(|block| {
        let p = Parameter::new(
            ParameterType::Aws("AWS::EC2::AvailabilityZone::Name"),
            "Capacity Block's zone",
            format!(
                "The Availability Zone of Capacity Block {}; every node launches there (subnets, master and workers).",
                block.id
            ),
        )
        .default(block.zone.as_str());
        t.parameter("CapacityBlockZone", p)
    });

    let has_key = t.condition("HasKeyName", Expr::negate(Expr::equals(key_name.r#ref(), "")));
    let has_ssh = t.condition("HasSshCidr", Expr::negate(Expr::equals(ssh_cidr.r#ref(), "")));
    let create_fs = t.condition("CreateFileSystem", Expr::equals(efs_id.r#ref(), ""));

    let mut instance_group = vec![&master_type, &worker_type];
    if let Some(p) = &image.param {
        instance_group.push(p);
    }
    t.parameter_group("Instances", &instance_group);
    t.parameter_group("Cluster size", &[&worker_count, &min_workers, &max_workers]);
    t.parameter_group("Access", &[&key_name, &ssh_cidr]);
    t.parameter_group("Storage", &[&efs_id]);
    if let Some(zone) = &block_zone {
        t.parameter_group("Capacity Block", &[zone]);
    }

    region_rule(t, ctx);

    Inputs {
        master_type,
        worker_type,
        worker_count,
        min_workers,
        max_workers,
        key_name,
        ssh_cidr,
        efs_id,
        block_zone,
        image_id: image.id,
        has_key,
        has_ssh,
        create_fs,
    }
}

struct Image {
    id: Expr,
    param: Option<ParamHandle>,
}

/// The AMI: an SSM parameter (resolved at deploy time, so it never rots),
/// a per-region id as a parameter (a pinned region), or a mapping (an AMI map
/// in a template for all five regions).
fn image(t: &mut Template, ctx: &Ctx) -> Image {
    let spec = ctx.spec;
    // With a package in the blueprint, the user data installs the agent at boot.
    let agent = if spec.image.agent_package.is_some() {
        "Nodes install the deeplearning agent package at boot, so the image need not have it."
    } else {
        "The image must have the deeplearning agent baked in."
    };
    match (&spec.image.source, spec.region) {
        (ImageSource::SsmParameter(path), _) => {
            let p = Parameter::new(
                ParameterType::SsmValue("AWS::EC2::Image::Id"),
                "Machine image (SSM parameter)",
                format!("SSM parameter that holds the AMI id every node boots. {agent}"),
            )
            .default(path.as_str());
            let param = t.parameter("ImageId", p);
            Image { id: param.r#ref(), param: Some(param) }
        }
        (ImageSource::AmiMap(amis), Some(region)) => {
            let ami = amis.get(&region).cloned().unwrap_or_default();
            let p = Parameter::new(
                ParameterType::Aws("AWS::EC2::Image::Id"),
                "Machine image (AMI id)",
                format!("AMI id every node boots in {region}. {agent}"),
            )
            .default(ami);
            let param = t.parameter("ImageId", p);
            Image { id: param.r#ref(), param: Some(param) }
        }
        (ImageSource::AmiMap(amis), None) => {
            let map: BTreeMap<String, BTreeMap<String, String>> = amis
                .iter()
                .map(|(r, ami)| (r.code().to_owned(), BTreeMap::from([("Ami".to_owned(), ami.clone())])))
                .collect();
            let name = t.mapping("RegionImages", map);
            Image { id: Expr::FindInMap(name, Box::new(Pseudo::Region.r#ref()), Box::new("Ami".into())), param: None }
        }
    }
}

/// Refuses, before anything is created, a region the template was not
/// checked for (instance type offerings and AMI ids differ per region).
fn region_rule(t: &mut Template, ctx: &Ctx) {
    let regions: Vec<Region> = match ctx.spec.region {
        Some(r) => vec![r],
        None => Region::ALL.to_vec(),
    };
    let checks: Vec<Expr> = regions.iter().map(|r| Expr::equals(Pseudo::Region.r#ref(), r.code())).collect();
    let assert =
        if checks.len() == 1 { checks.into_iter().next().unwrap_or(Expr::Bool(false)) } else { Expr::Or(checks) };
    let codes: Vec<&str> = regions.iter().map(|r| r.code()).collect();
    let message = match ctx.spec.region {
        Some(r) => format!(
            "This template was built for {r} only (its instance types and image were checked there). \
             Build one for this region with: synth build BLUEPRINT --region <this region>"
        ),
        None => format!("This template supports the regions {}; this is not one of them.", codes.join(", ")),
    };
    t.rule("SupportedRegion", Rule { assertions: vec![(assert, message)] });
    let mut synth = json!({ "regions": codes });
    // What `synth status` says of the block's window, read back from the stack's template.
    if let Some(block) = ctx.spec.workers.capacity_block() {
        use node_contract::interruption::format_utc;
        synth["capacity_block"] = json!({
            "id": block.id,
            "zone": block.zone,
            "start": block.start_unix.map(format_utc),
            "end": format_utc(block.end_unix),
            "scale_in": format_utc(block.scale_in_unix()),
        });
    }
    // The blueprint as written, which `synth diff` compares field by field
    // with the next one (deploy/change.rs).
    if let Some(blueprint) = &ctx.spec.blueprint {
        synth["blueprint"] = blueprint.clone();
    }
    t.metadata("synth", synth);
}
