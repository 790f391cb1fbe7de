//! The blueprint as the user writes it: serde structs that mirror the YAML
//! one to one, before any default is filled in or any rule is checked.
//!
//! Nearly every field is optional here, even where the cluster needs a value,
//! so that [`super::validate`] can fill the default and explain a bad value in
//! the user's terms instead of serde's. Only the four fields with no sensible
//! default (`name`, `master.instance_type`, `workers.instance_type`,
//! `workers.count`) are required at this stage.
//!
//! The same structs derive [`schemars::JsonSchema`], so their doc comments are
//! the descriptions an editor shows; keep them written for users.
//!
//! `#[schemars(deny_unknown_fields)]` gives the JSON Schema
//! `additionalProperties: false`. serde itself must accept unknown fields, so
//! that `serde_ignored` (in [`super::deserialize`]) sees and reports every
//! one of them, not only the first.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

/// A cluster blueprint: one master instance, an Auto Scaling group of
/// workers, a shared EFS file system, and the network around them.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[schemars(title = "Cluster blueprint")]
#[schemars(transform = required_blueprint_fields)]
pub(super) struct Blueprint {
    /// The cluster's name: lower-case letters, digits and `-`, starting with a
    /// letter, at most 32 characters. It prefixes resource names and tags.
    #[serde(default, deserialize_with = "present_text")]
    #[schemars(with = "String")]
    #[schemars(regex(pattern = r"^[a-z][a-z0-9-]*$"), length(min = 1, max = 32))]
    pub name: Option<String>,
    /// The AWS region the template is for. Omit it to build one template that
    /// works in all five supported regions.
    #[schemars(extend("enum" = ["us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-southeast-2", null]))]
    pub region: Option<String>,
    /// The machine image every node boots. Default: the AWS Deep Learning Base
    /// AMI (Ubuntu 22.04) through its public SSM parameter.
    pub image: Option<Image>,
    /// The master instance (always `deeplearning-worker1`).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Master")]
    pub master: Option<Master>,
    /// The worker Auto Scaling group.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Workers")]
    pub workers: Option<Workers>,
    /// Disks and the shared file system.
    pub storage: Option<Storage>,
    /// The VPC, subnets, placement group and Elastic Fabric Adapter.
    pub network: Option<Network>,
    /// How users reach the cluster.
    pub access: Option<Access>,
    /// Settings for nodes that join after the cluster has formed.
    pub elastic: Option<Elastic>,
    /// How long cluster formation may take.
    pub timeouts: Option<Timeouts>,
    /// Checks the master runs when the cluster forms and when nodes join.
    pub formation: Option<Formation>,
    /// The CloudWatch Logs group every node ships its agent and boot output
    /// to (kept after the stack is deleted).
    pub logs: Option<Logs>,
    /// Training data every node has before it joins the cluster: each entry
    /// copies everything under an S3 prefix to a directory, as `aws s3
    /// sync` would. Nodes fetch together, so S3 is read about once however
    /// many nodes there are; a node joins only once its data is complete.
    /// At most 20 entries.
    pub data: Option<Vec<DataSource>>,
    /// The idle guard (off without it): once no node has run a
    /// `trainer launch` job, held an SSH session or used a GPU (5 % or
    /// more) for `after_minutes`, the master scales the workers to 0, or
    /// also stops itself (powered off: its instance stops; EFS and the stack stay).
    pub idle: Option<Idle>,
    /// Tags put on every resource that takes tags. At most 40; keys may not
    /// start with `aws:`. A value may be written as a number or a boolean
    /// (`version: 1.10`); it is used as the text written.
    #[schemars(with = "Option<BTreeMap<String, ScalarText>>")]
    pub tags: Option<BTreeMap<String, String>>,
}

/// The machine image. Give either `ssm_parameter` or `ami`, not both.
///
/// The image must hold the deeplearning agent: either an image you baked
/// with the `deeplearning-agent` package (by hand, or with `synth image`), or
/// a stock image plus `agent_package_url` and `agent_package_sha256`, which
/// every node installs at boot.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Image {
    /// An SSM parameter holding the AMI id, for example
    /// `/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id`.
    #[schemars(regex(pattern = r"^/"))]
    pub ssm_parameter: Option<String>,
    /// One AMI id per region, for example `{ us-east-1: ami-0123456789abcdef0 }`.
    /// Needs an entry for the pinned region, or for all five without one.
    pub ami: Option<BTreeMap<String, String>>,
    /// The image's operating system family. Decides the default login user and
    /// root device; inferred from `ssm_parameter` when its path names one.
    pub family: Option<ImageFamily>,
    /// The login user that gets the cluster's SSH key. Default: `ubuntu` or
    /// `ec2-user`, from the family.
    pub user: Option<String>,
    /// The root volume's device name. Default: `/dev/sda1` (Ubuntu) or
    /// `/dev/xvda` (Amazon Linux).
    pub root_device: Option<String>,
    /// Where every node downloads the `deeplearning-agent` package at boot,
    /// for a stock image without the agent: an `s3://bucket/key` (the nodes'
    /// role may read exactly that object) or `https://` URL of the `.deb`
    /// (Ubuntu images) or the `.tar.gz` (Amazon Linux) that
    /// `packaging/build` makes. Needs `agent_package_sha256`.
    #[schemars(regex(pattern = r"^(s3|https)://"))]
    pub agent_package_url: Option<String>,
    /// The package's SHA-256, 64 hex digits (`packaging/build` prints it); a
    /// node whose download does not match stops and says so.
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{64}$"))]
    pub agent_package_sha256: Option<String>,
}

/// An operating system family.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ImageFamily {
    /// Ubuntu: user `ubuntu`, root device `/dev/sda1`.
    Ubuntu,
    /// Amazon Linux: user `ec2-user`, root device `/dev/xvda`.
    AmazonLinux,
}

/// The master instance.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[schemars(transform = required_master_fields)]
pub(super) struct Master {
    /// The EC2 instance type, for example `p3.2xlarge`.
    #[serde(default, deserialize_with = "present_text")]
    #[schemars(with = "String")]
    pub instance_type: Option<String>,
    /// `true` (default): a public subnet and an Elastic IP. `false`: the
    /// workers' private subnet, reached through Session Manager.
    #[schemars(extend("default" = true))]
    pub public: Option<bool>,
}

/// The worker Auto Scaling group.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[schemars(transform = required_workers_fields)]
pub(super) struct Workers {
    /// The EC2 instance type, for example `p4d.24xlarge`. Give this or
    /// `instance_types`, not both.
    #[serde(default, deserialize_with = "present_text")]
    #[schemars(with = "String")]
    pub instance_type: Option<String>,
    /// Several instance types, most wanted first, for example
    /// `[p5.48xlarge, p5e.48xlarge, p4d.24xlarge]`: Auto Scaling launches the
    /// first it has capacity for (on-demand in this order; Spot where the
    /// capacity is deepest). Types of one accelerator kind; a node's hostfile
    /// slots are its own GPUs. At most 20.
    #[schemars(length(min = 1, max = 20))]
    pub instance_types: Option<Vec<String>>,
    /// How many workers to launch. May be 0 (a master-only cluster).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "u32")]
    #[schemars(range(max = 1000))]
    pub count: Option<u32>,
    /// The cluster forms once at least this many workers have joined
    /// (default 0). At most `count`.
    #[schemars(extend("default" = 0))]
    pub min: Option<u32>,
    /// The most workers the group may scale out to (default: `count`). At
    /// most 1000.
    #[schemars(range(max = 1000))]
    pub max: Option<u32>,
    /// Use Spot capacity for workers (default `false`): the same as
    /// `capacity: [spot]`.
    #[schemars(extend("default" = false))]
    pub spot: Option<bool>,
    /// Where the workers' capacity comes from, in order (default
    /// `[on_demand]`): `on_demand`, `spot`, `reservation: cr-...` or
    /// `reservation_group: <resource group ARN>` (On-Demand Capacity
    /// Reservations; `on_demand` after them lets workers run outside them
    /// when they are full), or one `capacity_block: { id, zone, start, end }`
    /// (EC2 Capacity Blocks for ML, alone: the group scales to `count` at the
    /// block's start and to 0 forty minutes before its end).
    #[schemars(length(min = 1, max = 20))]
    pub capacity: Option<Vec<CapacitySource>>,
}

/// One source of worker capacity.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum CapacitySource {
    /// On-Demand instances.
    OnDemand,
    /// Spot instances (price-capacity-optimized over the instance types).
    Spot,
    /// An On-Demand Capacity Reservation in the region, `cr-` and 17 hex digits.
    Reservation(String),
    /// A resource group of Capacity Reservations, by ARN
    /// (`arn:aws:resource-groups:<region>:<account>:group/<name>`).
    ReservationGroup(String),
    /// An EC2 Capacity Block for ML.
    CapacityBlock(CapacityBlockSource),
}

impl CapacitySource {
    const NAMES: [&'static str; 5] = ["on_demand", "spot", "reservation", "reservation_group", "capacity_block"];
}

/// `on_demand` and `spot` are words; the others are one-key mappings
/// (`reservation: cr-...`), which serde_yaml_ng would otherwise want as
/// YAML tags (`!reservation cr-...`).
impl<'de> Deserialize<'de> for CapacitySource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = CapacitySource;

            // "enum ...": the diagnostics reword this as "expected one of ...".
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("enum CapacitySource")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CapacitySource, E> {
                match v {
                    "on_demand" => Ok(CapacitySource::OnDemand),
                    "spot" => Ok(CapacitySource::Spot),
                    _ => Err(E::unknown_variant(v, &CapacitySource::NAMES)),
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<CapacitySource, A::Error> {
                use serde::de::Error;
                let Some(key) = map.next_key::<String>()? else {
                    return Err(A::Error::invalid_length(
                        0,
                        &"one of `reservation`, `reservation_group`, `capacity_block`",
                    ));
                };
                let source = match key.as_str() {
                    "reservation" => CapacitySource::Reservation(map.next_value()?),
                    "reservation_group" => CapacitySource::ReservationGroup(map.next_value()?),
                    "capacity_block" => CapacitySource::CapacityBlock(map.next_value()?),
                    other => return Err(A::Error::unknown_variant(other, &CapacitySource::NAMES)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(A::Error::custom(format!(
                        "`{extra}` beside `{key}`: each entry of `capacity` is one source; start a new `- ` line for it"
                    )));
                }
                Ok(source)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// An EC2 Capacity Block for ML, as the EC2 console shows it.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct CapacityBlockSource {
    /// Its Capacity Reservation id, `cr-` and 17 hex digits.
    #[schemars(regex(pattern = r"^cr-[0-9a-f]{17}$"))]
    pub id: Option<String>,
    /// Its Availability Zone, for example `us-east-1a`: every worker
    /// launches there (the blueprint's `region` must be the zone's).
    pub zone: Option<String>,
    /// When it starts, RFC 3339 UTC (`2026-12-10T11:30:00Z`). Omit it for a
    /// block that is already active.
    pub start: Option<String>,
    /// When it ends, RFC 3339 UTC. EC2 terminates what still runs 30
    /// minutes before; the group scales to 0 ten minutes before that.
    pub end: Option<String>,
}

/// Disks and the shared file system.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Storage {
    /// Root volume size of every node in GiB, 8 to 16384 (default 200). Deep
    /// Learning AMIs need about 100.
    #[schemars(range(min = 8, max = 16384), extend("default" = 200))]
    pub root_volume_gb: Option<u32>,
    /// The shared EFS file system.
    pub efs: Option<Efs>,
    /// Local NVMe scratch: every node whose instance type has instance-store
    /// drives gets them as one striped volume mounted here (default
    /// `/scratch`, exported as `DEEPLEARNING_SCRATCH`); `false`: none. Its
    /// contents are lost when the instance stops.
    pub scratch: Option<ScratchSetting>,
    /// An FSx for Lustre file system every node mounts, for data sets
    /// larger than the nodes' disks: optional, none without it.
    pub fsx_lustre: Option<FsxLustre>,
}

/// An FSx for Lustre file system, made with the stack and deleted with it,
/// in the first private subnet (one Availability Zone), mounted on every
/// node. With `import`, the S3 prefix's objects appear as files and are
/// read from S3 on first access.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct FsxLustre {
    /// `scratch_2` (default: the cheapest, no replication, for data that
    /// lives in S3 anyway) or `persistent_2` (replicated within its zone,
    /// with a set throughput per TiB).
    pub deployment: Option<FsxDeployment>,
    /// Size in GiB: 1200, 2400, or a multiple of 2400 (default 1200).
    #[schemars(range(min = 1200), extend("default" = 1200))]
    pub capacity_gib: Option<u32>,
    /// An S3 prefix to link, `s3://bucket/` or `s3://bucket/prefix/`: its
    /// objects are listed into the file system when it is made and loaded
    /// from S3 on first read. Omit it for an empty file system.
    #[schemars(regex(pattern = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/([^/]+/)*)?$"))]
    pub import: Option<String>,
    /// Where every node mounts it (default `/fsx`).
    #[schemars(extend("default" = "/fsx"))]
    pub mount: Option<String>,
    /// `persistent_2` only: throughput in MB/s per TiB of storage, one of
    /// 125 (default), 250, 500 or 1000.
    #[schemars(extend("enum" = [125, 250, 500, 1000]))]
    pub throughput_per_tib: Option<u32>,
}

/// An FSx for Lustre deployment type.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
pub(super) enum FsxDeployment {
    /// `SCRATCH_2`: temporary storage, not replicated.
    #[serde(rename = "scratch_2")]
    Scratch2,
    /// `PERSISTENT_2`: replicated within its Availability Zone.
    #[serde(rename = "persistent_2")]
    Persistent2,
}

/// Where the scratch volume goes, or `false`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ScratchSetting {
    /// Mounted here.
    Mount(String),
    /// `true`: at the default mount point.
    On,
    /// `false`: no scratch volume.
    Off,
}

impl<'de> Deserialize<'de> for ScratchSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ScratchSetting;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an absolute path or `false`")
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<ScratchSetting, E> {
                Ok(if on { ScratchSetting::On } else { ScratchSetting::Off })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScratchSetting, E> {
                Ok(ScratchSetting::Mount(v.to_owned()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl JsonSchema for ScratchSetting {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ScratchSetting".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Where the local NVMe scratch volume is mounted (default `/scratch`), or `false` for none.",
            "oneOf": [
                { "type": "string", "pattern": "^/" },
                { "type": "boolean" }
            ],
            "default": "/scratch"
        })
    }
}

/// One data set: everything under `from` copied into `to` on the nodes.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[schemars(transform = required_data_fields)]
pub(super) struct DataSource {
    /// The S3 prefix, `s3://bucket/prefix/` (or `s3://bucket/` for the
    /// whole bucket).
    #[serde(default, deserialize_with = "present_text")]
    #[schemars(with = "String", regex(pattern = r"^s3://"))]
    pub from: Option<String>,
    /// Where it goes: `scratch` (each node's NVMe scratch volume), `efs`
    /// (the shared file system: fetched once, by the master), either
    /// followed by a directory (`scratch/imagenet`), or an absolute path on
    /// each node's root volume.
    #[serde(default, deserialize_with = "present_text")]
    #[schemars(with = "String")]
    pub to: Option<String>,
}

/// The shared EFS file system.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Efs {
    /// Where every node mounts it (default `/efs`).
    #[schemars(extend("default" = "/efs"))]
    pub mount: Option<String>,
    /// An existing file system (`fs-` and 8 or 17 hex digits). Omit it to
    /// create a new, encrypted one.
    #[schemars(regex(pattern = r"^fs-([0-9a-f]{8}|[0-9a-f]{17})$"))]
    pub file_system_id: Option<String>,
}

/// The network. Give either `vpc_cidr` (a new VPC) or `existing`, not both.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Network {
    /// The new VPC's private range, /16 to /24 (default `10.0.0.0/16`).
    #[schemars(extend("default" = "10.0.0.0/16"))]
    pub vpc_cidr: Option<String>,
    /// An existing VPC and subnets instead of a new VPC.
    pub existing: Option<ExistingNetwork>,
    /// Put every node in one cluster placement group, in one Availability
    /// Zone (default `false`).
    #[schemars(extend("default" = false))]
    pub placement_group: Option<bool>,
    /// Elastic Fabric Adapter: `auto` (default; on when both instance types
    /// support it and the master is private), `on` (or `true`), or `off`
    /// (or `false`).
    pub efa: Option<EfaMode>,
}

/// An existing VPC and its subnets.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct ExistingNetwork {
    /// The VPC (`vpc-` and 8 or 17 hex digits).
    #[serde(deserialize_with = "text")]
    #[schemars(with = "String")]
    #[schemars(regex(pattern = r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})$"))]
    pub vpc_id: String,
    /// A public subnet for the master. Required when `master.public` is true.
    #[schemars(regex(pattern = r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$"))]
    pub public_subnet_id: Option<String>,
    /// Private subnets for the workers (and a private master); at least one.
    ///
    /// Optional here only so that leaving it out gets a clearer message than
    /// serde's "missing field".
    #[schemars(length(min = 1))]
    pub private_subnet_ids: Option<Vec<String>>,
}

/// Whether nodes get an Elastic Fabric Adapter.
///
/// `true` and `false` mean `on` and `off`: YAML 1.1 tools (PyYAML, many
/// editors' schema checks) read a bare `on` or `off` as a boolean, and the
/// blueprint must mean the same to them as to synth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum EfaMode {
    /// On when both instance types support EFA and the master is private.
    #[default]
    Auto,
    /// Always on; an error when an instance type cannot have it.
    On,
    /// Never.
    Off,
}

impl EfaMode {
    const NAMES: [&'static str; 3] = ["auto", "on", "off"];
}

impl<'de> Deserialize<'de> for EfaMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = EfaMode;

            // "enum ...": the diagnostics reword this as "expected one of `auto`, `on`, `off`".
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("enum EfaMode")
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<EfaMode, E> {
                Ok(if on { EfaMode::On } else { EfaMode::Off })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<EfaMode, E> {
                match v {
                    "auto" => Ok(EfaMode::Auto),
                    "on" => Ok(EfaMode::On),
                    "off" => Ok(EfaMode::Off),
                    _ => Err(E::unknown_variant(v, &EfaMode::NAMES)),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl JsonSchema for EfaMode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EfaMode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Whether nodes get an Elastic Fabric Adapter.",
            "oneOf": [
                { "const": "auto", "description": "On when both instance types support EFA and the master is private." },
                { "const": "on", "description": "Always on; an error when an instance type cannot have it." },
                { "const": "off", "description": "Never." },
                { "type": "boolean", "description": "`true` is `on`, `false` is `off` (YAML 1.1 tools read a bare `on` or `off` as a boolean)." }
            ]
        })
    }
}

/// A value written as text, a number or a boolean, and kept as the text
/// written (serde_yaml_ng gives a string field any scalar's text). Only its
/// JSON Schema is used.
pub(super) struct ScalarText;

impl JsonSchema for ScalarText {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ScalarText".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": ["string", "number", "boolean"] })
    }
}

/// How users reach the cluster.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Access {
    /// SSH from outside the VPC.
    pub ssh: Option<Ssh>,
    /// Let AWS Systems Manager Session Manager open shells on the nodes
    /// (default `true`).
    #[schemars(extend("default" = true))]
    pub session_manager: Option<bool>,
}

/// SSH from outside the VPC.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Ssh {
    /// An EC2 key pair name in the region.
    #[schemars(length(min = 1, max = 255))]
    pub key_name: Option<String>,
    /// The IPv4 range SSH may come from, for example `203.0.113.7/32`.
    /// Without it, no SSH ingress is opened.
    pub cidr: Option<String>,
}

/// Settings for nodes that join after the cluster has formed.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Elastic {
    /// An absolute path (usually on EFS) run on a joining node before it
    /// registers.
    pub prepare_data_script: Option<String>,
}

/// How long cluster formation may take.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Timeouts {
    /// Minutes the master waits for workers, 5 to 720 (default 30).
    #[schemars(range(min = 5, max = 720), extend("default" = 30))]
    pub formation_minutes: Option<u32>,
}

/// Checks the master runs when the cluster forms and when nodes join.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Formation {
    /// The network gate (off without it): after formation and after every
    /// join, every node measures its link to its ring neighbour for about
    /// 2 seconds, and the master compares each node with the instance
    /// type's network bandwidth (or, when that is not known, with the
    /// median of the nodes).
    pub network_check: Option<NetworkCheck>,
    /// The GPU gate (on by default where a node has NVIDIA GPUs): before a
    /// node joins it checks its GPUs (driver counters, links, the kernel
    /// log's XID errors, a short GEMM and memory burn, an all-reduce across
    /// them, the EFA devices) against what its instance type promises, and
    /// while it runs it watches for fatal faults. `false`: off.
    pub gpu_check: Option<GpuCheckSetting>,
}

/// The GPU gate's settings, or `false`.
#[derive(Debug)]
pub(super) enum GpuCheckSetting {
    /// `true`: the defaults.
    On,
    /// `false`: no GPU gate.
    Off,
    /// The settings written.
    Settings(GpuCheck),
}

impl<'de> Deserialize<'de> for GpuCheckSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = GpuCheckSetting;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the GPU gate's settings (level, action, timeout_seconds) or `false`")
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<GpuCheckSetting, E> {
                Ok(if on { GpuCheckSetting::On } else { GpuCheckSetting::Off })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<GpuCheckSetting, A::Error> {
                GpuCheck::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(GpuCheckSetting::Settings)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl JsonSchema for GpuCheckSetting {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GpuCheckSetting".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let settings = generator.subschema_for::<GpuCheck>();
        schemars::json_schema!({
            "description": "The GPU gate's settings, or `false` for none (default: on with `level: quick`, `action: replace` where a node has NVIDIA GPUs).",
            "oneOf": [settings, { "type": "boolean" }]
        })
    }
}

/// The GPU gate's settings.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct GpuCheck {
    /// `quick` (default: the driver's counters, links and kernel log, a
    /// short burn per GPU, an all-reduce across them, `dcgmi diag -r 1`
    /// where DCGM is installed; under a minute on an 8-GPU node) or
    /// `thorough` (longer burns and `dcgmi diag -r 3`, about 30 minutes).
    #[schemars(extend("enum" = ["quick", "thorough"], "default" = "quick"))]
    pub level: Option<String>,
    /// What happens to a node that fails: `replace` (default: it does not
    /// join; the master marks it unhealthy in its Auto Scaling group, which
    /// launches another; a master that fails fails the formation), `fail`
    /// (the formation fails with the reason; after formation, as
    /// `replace`) or `warn` (it joins; the logs and `synth status` name it).
    #[schemars(extend("enum" = ["warn", "replace", "fail"], "default" = "replace"))]
    pub action: Option<String>,
    /// The gate's time budget on a node, 10 to 3600 seconds (default 60 at
    /// `quick`, 2400 at `thorough`); a node past it fails.
    #[schemars(range(min = 10, max = 3600))]
    pub timeout_seconds: Option<u32>,
}

/// The network gate's settings.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct NetworkCheck {
    /// A node that measures below this fraction of the expected bandwidth
    /// is slow: more than 0, at most 1 (default 0.5).
    #[schemars(range(min = 0.0, max = 1.0), extend("default" = 0.5))]
    pub min_fraction: Option<f64>,
    /// What to do about a slow node: `warn` (name it in the formation
    /// reason, the host log and `trainer doctor`), `replace` (also
    /// terminate it, a worker, so its group launches another) or `fail`
    /// (fail the formation with the reason; after formation it warns).
    /// Default `warn`.
    #[schemars(extend("enum" = ["warn", "replace", "fail"], "default" = "warn"))]
    pub action: Option<String>,
    /// How long the master waits for the measurements, 20 to 300 seconds
    /// (default 60); the formation signal waits at most this long.
    #[schemars(range(min = 20, max = 300), extend("default" = 60))]
    pub timeout_seconds: Option<u32>,
    /// The network bandwidth to expect, Gbit/s, when you know better than
    /// the instance catalogue (or it has no figure for the type).
    #[schemars(range(min = 0.0))]
    pub expected_gbps: Option<f64>,
}

/// The idle guard's settings.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[schemars(transform = required_idle_fields)]
pub(super) struct Idle {
    /// Minutes the whole cluster must be idle before the action, 5 to
    /// 10080 (a week).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "u32", range(min = 5, max = 10080))]
    pub after_minutes: Option<u32>,
    /// What the master does then: `scale_workers` (default: the worker
    /// group's desired capacity goes to 0; the master, EFS and the stack
    /// stay) or `stop` (the same, then the master stops its own instance).
    #[schemars(extend("enum" = ["scale_workers", "stop"], "default" = "scale_workers"))]
    pub action: Option<String>,
}

/// The nodes' log group in CloudWatch Logs.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Logs {
    /// Days CloudWatch Logs keeps the nodes' lines (default 14): one of 1, 3,
    /// 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827,
    /// 2192, 2557, 2922, 3288 or 3653.
    #[schemars(extend("enum" = crate::spec::LOG_RETENTION_DAYS, "default" = 14))]
    pub retention_days: Option<u32>,
}

/// Lists `fields` as required in a struct's schema. The required fields are
/// `Option`s with a serde default (see [`present`]), which schemars would
/// otherwise describe as optional.
/// A required field has no default: the `"default": null` schemars gives
/// an `Option` with a serde default is dropped.
fn require(schema: &mut schemars::Schema, fields: &[&str]) {
    let object = schema.ensure_object();
    let required = object.entry("required").or_insert_with(|| serde_json::json!([]));
    if let Some(list) = required.as_array_mut() {
        for field in fields {
            if !list.iter().any(|v| v == field) {
                list.push(serde_json::json!(field));
            }
        }
    }
    no_default(schema, fields);
}

/// Drops the `"default": null` of `fields` (required ones, or one of which
/// is required).
fn no_default(schema: &mut schemars::Schema, fields: &[&str]) {
    let Some(properties) = schema.ensure_object().get_mut("properties").and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    for field in fields {
        if let Some(property) = properties.get_mut(*field).and_then(serde_json::Value::as_object_mut)
            && property.get("default").is_some_and(serde_json::Value::is_null)
        {
            property.remove("default");
        }
    }
}

fn required_blueprint_fields(schema: &mut schemars::Schema) {
    require(schema, &["name", "master", "workers"]);
}

fn required_master_fields(schema: &mut schemars::Schema) {
    require(schema, &["instance_type"]);
}

fn required_workers_fields(schema: &mut schemars::Schema) {
    require(schema, &["count"]);
    no_default(schema, &["instance_type", "instance_types"]);
    // One of the two ways to name the types, not both.
    schema.ensure_object().insert(
        "oneOf".into(),
        serde_json::json!([{ "required": ["instance_type"] }, { "required": ["instance_types"] }]),
    );
}

fn required_data_fields(schema: &mut schemars::Schema) {
    require(schema, &["from", "to"]);
}

fn required_idle_fields(schema: &mut schemars::Schema) {
    require(schema, &["after_minutes"]);
}

/// A required field that is written: its value. A required field is an
/// `Option` only so that one that is left out does not stop serde (and with
/// it every other check): `validate` reports it as missing (`#[serde(default)]`
/// gives `None` then), beside whatever else is wrong. A field written with no
/// value (`master:`) is still the type error it was.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// [`present`] for a required text field.
fn present_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    text(deserializer).map(Some)
}

/// A required text field: serde_yaml_ng reads an empty value (`name:`) as
/// `""`; this makes it the error it is ("expected a text value, found
/// nothing").
fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Option::<String>::deserialize(deserializer)?
        .ok_or_else(|| serde::de::Error::invalid_type(serde::de::Unexpected::Unit, &"a string"))
}
