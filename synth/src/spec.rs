//! The cluster a blueprint describes, after validation: every default filled
//! in, every choice resolved. This is what the template compiler
//! ([`crate::stack`]) consumes; it never sees raw YAML.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use crate::region::Region;

/// A validated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSpec {
    /// `[a-z][a-z0-9-]*`, at most 32 characters.
    pub name: String,
    /// The region the template is for; `None` builds one template for all five.
    pub region: Option<Region>,
    /// The machine image.
    pub image: ImageSpec,
    /// The master instance.
    pub master: MasterSpec,
    /// The worker group.
    pub workers: WorkerSpec,
    /// Root volume size of every node, GiB.
    pub root_volume_gb: u32,
    /// The shared file system.
    pub efs: EfsSpec,
    /// The local NVMe scratch volume's mount point; `None`: none.
    pub scratch: Option<String>,
    /// The data sets every node has before it joins.
    pub data: Vec<DataSpec>,
    /// An FSx for Lustre file system every node mounts; `None`: none.
    pub fsx: Option<FsxSpec>,
    /// Network layout.
    pub network: NetworkSpec,
    /// A cluster placement group (all nodes in one AZ).
    pub placement_group: bool,
    /// Elastic Fabric Adapter on every node (resolved from `auto|on|off`).
    pub efa: bool,
    /// How users get in.
    pub access: AccessSpec,
    /// Run on a node that joins after formation, before it registers.
    pub prepare_data_script: Option<String>,
    /// How long the master waits for workers before deciding formation.
    pub formation_minutes: u32,
    /// The network gate; `None`: off.
    pub network_check: Option<node_contract::NetworkCheck>,
    /// The GPU gate; `None`: off.
    pub gpu_check: Option<node_contract::gpu::GpuCheck>,
    /// Days the nodes' log group keeps lines: one of [`LOG_RETENTION_DAYS`].
    pub log_retention_days: u32,
    /// The idle guard; `None`: off.
    pub idle: Option<node_contract::idle::Idle>,
    /// Tags for every resource that takes tags.
    pub tags: BTreeMap<String, String>,
    /// The blueprint as it was written, as JSON: kept in the template's
    /// `Metadata.synth.blueprint`, so that `synth diff` and `deploy`'s
    /// preview name the blueprint's fields that change, old → new.
    /// `None` for a spec not read from a file (the tests').
    pub blueprint: Option<serde_json::Value>,
}

impl ClusterSpec {
    /// Every node in one Availability Zone: a cluster placement group, EFA
    /// (its OS-bypass traffic does not leave its subnet), or a Capacity
    /// Block (its instances are in its zone).
    pub fn single_zone(&self) -> bool {
        single_zone(self.placement_group, self.efa, &self.workers)
    }

    /// One line on where the workers come from and where they launch, for
    /// `synth validate` (the zones: Auto Scaling launches where there is
    /// capacity only when it has more than one).
    pub fn workers_summary(&self) -> String {
        let w = &self.workers;
        let types = match w.fallback_types.as_slice() {
            [] => w.instance_type.clone(),
            rest => format!("{} (then {})", w.instance_type, rest.join(", ")),
        };
        let source = match &w.capacity {
            WorkerCapacity::OnDemand => "On-Demand".to_owned(),
            WorkerCapacity::Spot => "Spot".to_owned(),
            WorkerCapacity::Reserved { ids, groups, then_on_demand } => {
                let mut targets: Vec<&str> = ids.iter().map(String::as_str).collect();
                targets.extend(groups.iter().map(String::as_str));
                let targets = targets.join(", ");
                if *then_on_demand {
                    format!("reservations first ({targets}), then On-Demand")
                } else {
                    format!("reservations only ({targets})")
                }
            }
            WorkerCapacity::CapacityBlock(b) => {
                use node_contract::interruption::format_utc;
                let start = b.start_unix.map_or_else(|| "now".to_owned(), format_utc);
                format!(
                    "Capacity Block {} ({start} to {}, scaled to 0 at {})",
                    b.id,
                    format_utc(b.end_unix),
                    format_utc(b.scale_in_unix())
                )
            }
        };
        let zones = match (&self.network, self.single_zone()) {
            (_, true) => {
                let why = match () {
                    _ if w.capacity_block().is_some() => "the block's",
                    _ if self.placement_group => "the cluster placement group's",
                    _ => "EFA's",
                };
                format!("one Availability Zone ({why})")
            }
            (NetworkSpec::New { .. }, false) => {
                "two Availability Zones (Auto Scaling launches where there is capacity)".to_owned()
            }
            (NetworkSpec::Existing { private_subnet_ids, .. }, false) => {
                format!("the {} private subnets listed", private_subnet_ids.len())
            }
        };
        format!("workers: {} x {types}, {source}, in {zones}", w.count)
    }

    /// Lines on the nodes' scratch volume and data sets, for `synth
    /// validate` (none when there is neither).
    pub fn data_summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(mount) = &self.scratch {
            use crate::catalog::{InstanceStore, instance_store};
            let mut types = vec![self.master.instance_type.as_str(), self.workers.instance_type.as_str()];
            types.extend(self.workers.fallback_types.iter().map(String::as_str));
            types.dedup();
            let drives: Vec<String> = types
                .iter()
                .map(|t| match instance_store(t) {
                    InstanceStore::Nvme { drives, gb_each } => format!("{t}: {drives} x {gb_each} GB"),
                    InstanceStore::None => format!("{t}: none"),
                    InstanceStore::Unknown => format!("{t}: not known to synth"),
                })
                .collect();
            lines.push(format!(
                "scratch: each node's instance-store NVMe drives, striped into one volume at {mount} ({})",
                drives.join("; ")
            ));
        }
        for set in &self.data {
            let dir = set.dir(self.scratch.as_deref(), &self.efs.mount);
            let how = match set.fetcher() {
                node_contract::data::Fetcher::EveryNode => {
                    "on every node before it joins (fetched together: S3 is read about once)"
                }
                node_contract::data::Fetcher::Master => "once, by the master, before the cluster forms",
            };
            lines.push(format!("data: {} -> {dir}, {how}", set.url()));
        }
        lines
    }
}

impl ClusterSpec {
    /// One line on the GPU gate, for `synth validate`: "gpu check: quick,
    /// replace, 60 s; p5.48xlarge: 8 x H100, 32 EFA devices".
    pub fn gpu_summary(&self) -> Option<String> {
        let check = self.gpu_check.as_ref()?;
        let types: Vec<String> = check
            .expect
            .iter()
            .map(|(name, e)| {
                let model = e.model.as_deref().map_or_else(|| "GPUs".to_owned(), str::to_owned);
                let efa = e.efa_devices.map_or_else(String::new, |n| format!(", {n} EFA devices"));
                format!("{name}: {} x {model}{efa}", e.gpus)
            })
            .collect();
        let types = if types.is_empty() { "no instance type with known GPUs".to_owned() } else { types.join("; ") };
        Some(format!(
            "gpu check: {}, {}, {} s before a node joins; {types}",
            check.level.name(),
            check.action.name(),
            check.timeout_seconds
        ))
    }

    /// One line on the FSx for Lustre file system and where it lives, for
    /// `synth validate`: a Lustre file system is in one subnet, so one
    /// Availability Zone; with nodes in two zones, those of the other reach
    /// it across zones (slower, and charged per GB each way).
    pub fn fsx_summary(&self) -> Option<String> {
        let fsx = self.fsx.as_ref()?;
        let link = fsx.import.as_ref().map_or_else(String::new, |s| format!(", linked to {}", s.url()));
        let zone = if self.single_zone() {
            "in the nodes' one Availability Zone".to_owned()
        } else {
            match &self.network {
                NetworkSpec::New { .. } => "in one Availability Zone (the first private subnet's); nodes in the other zone reach it across zones",
                NetworkSpec::Existing { .. } => "in one Availability Zone (the first private subnet's); nodes in other subnets' zones reach it across zones",
            }
            .to_owned()
        };
        Some(format!(
            "fsx: {} GiB FSx for Lustre {}{link}, mounted at {}, {zone}",
            fsx.capacity_gib,
            fsx.deployment.aws_name(),
            fsx.mount
        ))
    }
}

/// An FSx for Lustre file system (blueprint `storage.fsx_lustre`).
#[derive(Clone, Debug, PartialEq)]
pub struct FsxSpec {
    /// How it is deployed.
    pub deployment: FsxDeployment,
    /// GiB: 1200, 2400 or a multiple of 2400.
    pub capacity_gib: u32,
    /// The S3 prefix linked to it.
    pub import: Option<S3Prefix>,
    /// Absolute mount point on every node.
    pub mount: String,
    /// MB/s per TiB, persistent deployments only.
    pub throughput_per_tib: Option<u32>,
}

/// FSx for Lustre's deployment types that synth offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsxDeployment {
    /// `SCRATCH_2`: links S3 with `ImportPath`.
    Scratch2,
    /// `PERSISTENT_2`: links S3 with a data repository association.
    Persistent2,
}

impl FsxDeployment {
    /// The `DeploymentType` value.
    pub fn aws_name(self) -> &'static str {
        match self {
            FsxDeployment::Scratch2 => "SCRATCH_2",
            FsxDeployment::Persistent2 => "PERSISTENT_2",
        }
    }
}

/// An S3 bucket and a key prefix (empty, or ending in `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Prefix {
    /// The bucket.
    pub bucket: String,
    /// The prefix: empty or ending in `/`.
    pub prefix: String,
}

impl S3Prefix {
    /// `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

/// [`ClusterSpec::single_zone`] from its parts, for validation, which
/// checks the subnets before the spec exists.
pub(crate) fn single_zone(placement_group: bool, efa: bool, workers: &WorkerSpec) -> bool {
    placement_group || efa || workers.capacity_block().is_some()
}

/// Where a data set goes on the nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataTarget {
    /// Each node's scratch volume, in this directory under it (`""`: its top).
    Scratch(String),
    /// EFS, in this directory under its mount: fetched once, by the master.
    Efs(String),
    /// An absolute path on each node's root volume.
    Path(String),
}

/// One data set: everything under `s3://bucket/prefix` into its target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSpec {
    /// The bucket and the key prefix (empty or ending in `/`).
    pub source: S3Prefix,
    /// Where it goes.
    pub to: DataTarget,
}

impl DataSpec {
    /// The absolute directory on the node, given the scratch and EFS
    /// mounts (a scratch target is only valid with a scratch mount).
    pub fn dir(&self, scratch: Option<&str>, efs: &str) -> String {
        let under = |mount: &str, sub: &str| {
            if sub.is_empty() { mount.to_owned() } else { format!("{}/{sub}", mount.trim_end_matches('/')) }
        };
        match &self.to {
            DataTarget::Scratch(sub) => under(scratch.unwrap_or(node_contract::data::DEFAULT_SCRATCH_MOUNT), sub),
            DataTarget::Efs(sub) => under(efs, sub),
            DataTarget::Path(path) => path.clone(),
        }
    }

    /// Who fetches it: the master alone for EFS, every node otherwise.
    pub fn fetcher(&self) -> node_contract::data::Fetcher {
        match self.to {
            DataTarget::Efs(_) => node_contract::data::Fetcher::Master,
            _ => node_contract::data::Fetcher::EveryNode,
        }
    }

    /// `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        self.source.url()
    }
}

/// The retention periods CloudWatch Logs accepts, in days
/// (`AWS::Logs::LogGroup` `RetentionInDays`).
pub(crate) const LOG_RETENTION_DAYS: [u32; 22] =
    [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653];

/// The nodes' log group's retention when the blueprint does not say.
pub(crate) const DEFAULT_LOG_RETENTION_DAYS: u32 = 14;

/// Where the AMI comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageSource {
    /// A public or private SSM parameter holding the AMI id (kept current by its owner).
    SsmParameter(String),
    /// One AMI id per region; has an entry for every region the template is for.
    AmiMap(BTreeMap<Region, String>),
}

/// The machine image and how to log into it.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageSpec {
    /// Where the AMI id comes from.
    pub source: ImageSource,
    /// The login user (gets the cluster SSH key).
    pub user: String,
    /// The root volume's device name (`/dev/sda1` on Ubuntu, `/dev/xvda` on Amazon Linux).
    pub root_device: String,
    /// How the agent package installs on this image's OS family.
    pub package_format: node_contract::PackageFormat,
    /// Installed by every node at boot, for an image without the agent.
    pub agent_package: Option<AgentPackage>,
}

/// The agent package a node downloads, verifies and installs at boot.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentPackage {
    /// `s3://bucket/key` or `https://...`.
    pub url: String,
    /// 64 lower-case hex digits.
    pub sha256: String,
}

impl AgentPackage {
    /// `(bucket, key)` of an `s3://` URL; `None` for `https://`.
    pub fn s3_object(&self) -> Option<(&str, &str)> {
        self.url.strip_prefix("s3://")?.split_once('/')
    }
}

/// The master instance.
#[derive(Clone, Debug, PartialEq)]
pub struct MasterSpec {
    /// For example `p3.2xlarge`.
    pub instance_type: String,
    /// In a public subnet with an Elastic IP; otherwise private (Session Manager only).
    pub public: bool,
}

/// The worker Auto Scaling group.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerSpec {
    /// For example `p3.16xlarge`: the first (most wanted) type, and the
    /// console's `WorkerInstanceType` parameter.
    pub instance_type: String,
    /// The types Auto Scaling may launch when it has no capacity for
    /// `instance_type`, most wanted first (empty: one type).
    pub fallback_types: Vec<String>,
    /// Requested workers.
    pub count: u32,
    /// Form the cluster with at least this many.
    pub min: u32,
    /// Elastic ceiling.
    pub max: u32,
    /// Where the capacity comes from.
    pub capacity: WorkerCapacity,
}

impl WorkerSpec {
    /// Every type the group may launch, most wanted first.
    pub fn instance_types(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.instance_type.as_str()).chain(self.fallback_types.iter().map(String::as_str))
    }

    /// Spot workers.
    pub fn spot(&self) -> bool {
        self.capacity == WorkerCapacity::Spot
    }

    /// The Capacity Block the workers run in, if they do.
    pub fn capacity_block(&self) -> Option<&CapacityBlock> {
        match &self.capacity {
            WorkerCapacity::CapacityBlock(block) => Some(block),
            _ => None,
        }
    }
}

/// Where the workers' capacity comes from: the shapes of a blueprint's
/// `workers.capacity` that Auto Scaling can launch (validation refuses the
/// others, with the reason).
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerCapacity {
    /// On-Demand instances (the default).
    OnDemand,
    /// Spot instances, price-capacity-optimized over every type.
    Spot,
    /// On-Demand Capacity Reservations, by id and by resource group.
    Reserved {
        /// `cr-...` ids, in the blueprint's order.
        ids: Vec<String>,
        /// Capacity Reservation resource group ARNs.
        groups: Vec<String>,
        /// Launch On-Demand outside the reservations when they are full
        /// (`capacity-reservations-first`); else only into them
        /// (`capacity-reservations-only`).
        then_on_demand: bool,
    },
    /// One EC2 Capacity Block for ML.
    CapacityBlock(CapacityBlock),
}

/// An EC2 Capacity Block for ML: a reservation of one type in one zone for
/// a time window.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityBlock {
    /// `cr-` and 17 hex digits.
    pub id: String,
    /// Its Availability Zone (every worker launches there).
    pub zone: String,
    /// Its start, unix seconds; `None`: already active when the template was built.
    pub start_unix: Option<u64>,
    /// Its end, unix seconds. EC2 terminates its instances 30 minutes before.
    pub end_unix: u64,
}

impl CapacityBlock {
    /// Seconds before the block's end at which the group is scaled to 0:
    /// EC2 terminates the block's instances 30 minutes before its end
    /// (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html>),
    /// and the workers need the ten minutes before that to leave cleanly.
    pub const SCALE_IN_BEFORE_END_SECONDS: u64 = 40 * 60;

    /// When the group scales to 0, unix seconds.
    pub fn scale_in_unix(&self) -> u64 {
        self.end_unix.saturating_sub(Self::SCALE_IN_BEFORE_END_SECONDS)
    }
}

/// The shared file system.
#[derive(Clone, Debug, PartialEq)]
pub struct EfsSpec {
    /// Absolute mount point on every node.
    pub mount: String,
    /// An existing file system; `None` creates one.
    pub file_system_id: Option<String>,
}

/// The network layout.
#[derive(Clone, Debug, PartialEq)]
pub enum NetworkSpec {
    /// A new VPC with public and private subnets.
    New {
        /// The VPC's range (/16 to /24).
        vpc_cidr: Ipv4Net,
    },
    /// An existing VPC and subnets.
    Existing {
        /// `vpc-...`
        vpc_id: String,
        /// Where a public master goes.
        public_subnet_id: Option<String>,
        /// Where workers (and a private master) go.
        private_subnet_ids: Vec<String>,
    },
}

/// A new VPC's subnets ([`NetworkSpec::New`]), as [`vpc_subnets`] splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VpcSubnets {
    /// The public subnets' ranges: zone 1's, then zone 2's.
    pub public: Vec<Ipv4Net>,
    /// The private subnets' ranges, in the same order.
    pub private: Vec<Ipv4Net>,
}

/// How long the prefix of a new VPC's subnets is when the VPC's is
/// `vpc_prefix`: the VPC is split in four equal blocks (a /16 gives /18
/// subnets, 16,379 usable addresses each).
pub(crate) fn subnet_prefix(vpc_prefix: u8) -> u8 {
    vpc_prefix + 2
}

/// The subnets of a new VPC of range `vpc`: its four equal blocks
/// ([`subnet_prefix`]), public zone 1, public zone 2, private zone 1,
/// private zone 2; one of each is used when every node must share one zone.
/// The template makes these ([`crate::stack`]) and validation checks the
/// workers fit in them: both take them from here. Empty for a range too
/// small to split (validation refuses any outside /16 to /24).
pub(crate) fn vpc_subnets(vpc: Ipv4Net) -> VpcSubnets {
    let mut public: Vec<Ipv4Net> =
        vpc.subnets(subnet_prefix(vpc.prefix_len())).map(Iterator::collect).unwrap_or_default();
    let private = public.split_off(public.len().min(2));
    VpcSubnets { public, private }
}

/// The `KeyName` parameter's pattern: empty, or what [`key_name_problem`]
/// accepts: 1 to 255 printable ASCII characters, no `'`, no space at either end.
pub(crate) const KEY_NAME_PATTERN: &str =
    "^$|^[\\x21-\\x26\\x28-\\x7E]([\\x20-\\x26\\x28-\\x7E]{0,253}[\\x21-\\x26\\x28-\\x7E])?$";

/// Why `name` cannot be the cluster's key pair, if it cannot.
///
/// EC2's rules: up to 255 ASCII characters
/// (<https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateKeyPair.html>),
/// and the console refuses a space at either end. On top of them, no control
/// character and no `'`: the stack's `SshCommand` output quotes the key file
/// as `-i '<name>.pem'` so that a name with `;`, `$` or spaces pastes
/// safely, and a `'` would end that quoting.
pub(crate) fn key_name_problem(name: &str) -> Option<String> {
    let chars = name.chars().count();
    if name.is_empty() || chars > 255 {
        Some(format!("a key pair name is 1 to 255 characters; this one has {chars}"))
    } else if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
        Some(format!("a key pair name is printable ASCII; this one has {}", c.escape_debug()))
    } else if name.starts_with(' ') || name.ends_with(' ') {
        Some("a key pair name cannot start or end with a space".to_owned())
    } else if name.contains('\'') {
        Some("a key pair name with `'` cannot be quoted in the SSH command the stack outputs".to_owned())
    } else {
        None
    }
}

/// How users get in.
#[derive(Clone, Debug, PartialEq)]
pub struct AccessSpec {
    /// EC2 key pair for SSH.
    pub key_name: Option<String>,
    /// Where SSH may come from; no SSH ingress at all without it.
    pub ssh_cidr: Option<Ipv4Net>,
    /// Attach the Session Manager policy to the node role.
    pub session_manager: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one split of a new VPC: four equal quarters, public first.
    #[test]
    fn a_vpc_is_split_in_four_quarters_public_first() {
        let split = vpc_subnets("10.0.0.0/16".parse().unwrap());
        let names = |nets: &[Ipv4Net]| nets.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names(&split.public), ["10.0.0.0/18", "10.0.64.0/18"]);
        assert_eq!(names(&split.private), ["10.0.128.0/18", "10.0.192.0/18"]);
        assert_eq!(subnet_prefix(24), 26);
        let none = vpc_subnets("10.0.0.0/31".parse().unwrap());
        assert!(none.public.is_empty() && none.private.is_empty());
    }
}
