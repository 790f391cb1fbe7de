//! The node contract: what `synth` writes into every node's user data and
//! what `agent` reads at boot (docs/ARCHITECTURE.md, "The node contract").
//!
//! The types are versioned: every document carries a `version`, and a reader
//! rejects a version it does not know with an error that says what to do,
//! instead of guessing. This crate has no AWS SDK dependency, so `synth` can
//! use it without pulling the SDK in.
//!
//! The user data is a short shell script ([`user_data_script`]) that writes
//! the node config to [`NODE_CONFIG_PATH`] and starts the agent baked into the
//! image; [`config_from_user_data`] gets the config back out of that script
//! (the agent can read it from instance metadata before the file exists).
//!
//! The messages nodes exchange over SQS are in [`message`], and how a
//! manifest of any size travels in messages of bounded size is in
//! [`parts`] (with the failure cases, and the limits on the way to 4,000
//! nodes); the state file each agent leaves for restarts and for `trainer`
//! is in [`state`]; interruption notices (Spot instance actions, rebalance
//! recommendations, a worker's Capacity Block ending) and the file that
//! tells `trainer` about one are in [`interruption`]; the idle guard's settings, busy test and the line it
//! leaves on the worker group for `synth status`, in [`idle`]. Where each node's log lines live in CloudWatch Logs is
//! in [`logs`]; a straggler `trainer train` named (the record, the message
//! and the worker group's tag), in [`straggler`]; the formation timeline's summary the success signal
//! carries, in [`timeline`]; the one clock every loop reads the time from
//! (unix milliseconds, as every time here), in [`clock`]. The files the
//! agent leaves on every node for `trainer` (paths under a root, the workers
//! file, the hostfile, the profile and its quoting, the prepare-data
//! marker), each with its writer and its reader, are in [`files`].

pub mod clock;
pub mod data;
pub mod files;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod formation;
pub mod gpu;
pub mod idle;
pub mod interruption;
pub mod logs;
pub mod message;
pub mod parts;
pub mod state;
pub mod straggler;
pub mod timeline;

use serde::{Deserialize, Deserializer, Serialize};

/// The node config version this crate writes and reads; a config of any
/// other version is refused with what to do (nodes and template must come
/// from matching releases).
///
/// - 1: the first; it carried the workers requested and the minimum.
/// - 2: drops `requested_workers` and `min_workers`: the master reads them
///   from its worker group at boot ([`MIN_WORKERS_TAG`]), so a stack update
///   that changes them does not change the master's user data (and does not
///   replace it). Adds [`NodeConfig::efa`].
/// - 3: adds [`NodeConfig::logs`], the log group the agent ships its lines
///   to, and [`NodeConfig::network_check`], the network gate. New fields,
///   so a version bump: a version-2 agent refuses a version-3 config with
///   the message below instead of "unknown field". Within version 3 both
///   are optional: an agent given no group ships nothing and forms as
///   before, and without a network check none runs.
/// - 4: adds [`NodeConfig::idle`], the idle guard (blueprint `idle`): a new
///   field, so a version bump, for the same reason: a version-3 agent
///   refuses a version-4 config by its version, rather than running a
///   cluster the user asked to stop when idle without ever stopping it.
/// - 5: adds [`NodeConfig::capacity_block`], the EC2 Capacity Block a
///   worker runs in (blueprint `workers.capacity: [capacity_block: ...]`):
///   a new field, so a version bump: a version-4 agent refuses a version-5
///   config by its version, rather than staying in the cluster until EC2
///   reclaims the block's instances under a running job.
/// - 6: adds [`NodeConfig::scratch`], [`NodeConfig::data`] and
///   [`NodeConfig::fsx`] ([`data`]): new fields, so a version bump: a
///   version-5 agent refuses a version-6 config by its version, rather
///   than forming a cluster whose nodes lack the data the user asked for.
/// - 7: adds [`NodeConfig::gpu_check`], the GPU gate ([`gpu`]): a new
///   field, so a version bump: a version-6 agent refuses a version-7 config
///   by its version, rather than letting a node with a failing GPU join.
pub const NODE_CONFIG_VERSION: u32 = 7;

/// The tag on the worker Auto Scaling group that holds the fewest workers
/// the cluster forms with (a decimal number, not propagated to instances).
///
/// The master learns the cluster's size from its worker group, not from its
/// user data: the workers requested are the group's desired capacity, the
/// minimum is this tag. Both change with a stack update in place, while the
/// master's launch template, and so the master instance, stays as it is
/// (an `AWS::EC2::Instance` whose launch template version changes is
/// replaced: `LaunchTemplate` is one of its create-only properties).
pub const MIN_WORKERS_TAG: &str = "deeplearning:min-workers";

/// The most characters of a tag value Auto Scaling keeps (the data and
/// straggler marks' tags are cut to fit).
pub const MAX_TAG_CHARS: usize = 256;

/// Where the user data stores the node config on each instance.
pub const NODE_CONFIG_PATH: &str = "/etc/deeplearning/node.json";

/// The systemd unit the image ships for the agent.
pub const AGENT_UNIT: &str = "deeplearning-agent.service";

/// The heredoc delimiter around the config in the user data script.
const CONFIG_DELIMITER: &str = "DEEPLEARNING_NODE_CONFIG";

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The single master instance; always `deeplearning-worker1`.
    Master,
    /// A member of the worker Auto Scaling group.
    Worker,
}

/// The two SQS queues, by URL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queues {
    /// Registrations and lifecycle notifications go here; the master reads it.
    pub master: String,
    /// Manifests go here; the workers read it.
    pub workers: String,
}

/// The shared file system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efs {
    /// `fs-...`
    pub file_system_id: String,
    /// Absolute mount point, exported as `EFS_MOUNT`.
    pub mount: String,
}

/// Elastic training settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    /// Run on a node that joins after formation, before it registers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_data_script: Option<String>,
}

/// The Elastic Fabric Adapter every node of this role has (the launch
/// template asks for an `efa` interface: blueprint `network.efa`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efa {
    /// The instance types whose EFA does RDMA reads (synth's catalogue,
    /// from AWS's aws-ofi-nccl platform table). The agent compares its own
    /// type (from instance metadata) with this list, not the blueprint's
    /// type: the stack's instance type parameter may have been changed.
    #[serde(default)]
    pub rdma_instance_types: Vec<String>,
}

/// What the network gate does about a node whose link is slow (blueprint
/// `formation.network_check.action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkAction {
    /// Name it in the formation reason, the host log and `trainer doctor`.
    Warn,
    /// As `warn`, and terminate it (a worker) so that its group launches another.
    Replace,
    /// As `warn`, and fail the formation with the reason (a check after a
    /// join, once the cluster formed, warns).
    Fail,
}

impl NetworkAction {
    /// The names a blueprint may use, in order.
    pub const NAMES: [&'static str; 3] = ["warn", "replace", "fail"];

    /// The action a blueprint's name stands for.
    pub fn from_name(name: &str) -> Option<NetworkAction> {
        [NetworkAction::Warn, NetworkAction::Replace, NetworkAction::Fail].into_iter().find(|a| a.name() == name)
    }

    /// The blueprint's name of it.
    pub fn name(self) -> &'static str {
        match self {
            NetworkAction::Warn => "warn",
            NetworkAction::Replace => "replace",
            NetworkAction::Fail => "fail",
        }
    }
}

/// The TCP port every node's bandwidth probe listens on while the network
/// gate is on (the cluster's security group allows all traffic between
/// nodes).
pub const PROBE_PORT: u16 = 7461;

/// Where the master leaves the network gate's last verdict (JSON: `version`
/// 1, `action`, `decided_unix_ms`, `summary`, `verdict`), for `trainer doctor`.
pub const NETWORK_CHECK_PATH: &str = "/var/lib/deeplearning/network-check.json";

/// The longest time budget of a network check, seconds: the formation wait
/// condition waits 20 minutes beyond the formation deadline (synth's
/// `STACK_SETUP_MINUTES`), and a check must end well within that.
pub const NETWORK_CHECK_MAX_SECONDS: u32 = 300;

/// The network gate's settings (blueprint `formation.network_check`): after
/// formation and after every join, every node measures its link to its
/// ring neighbour and the master compares the measurements with the
/// expected bandwidth (docs/ARCHITECTURE.md, "The network gate").
///
/// An optional field of node config version 3: a config without it reads
/// as before (no check runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkCheck {
    /// A node whose measured bandwidth is below this fraction of the
    /// expected one is slow; in (0, 1].
    pub min_fraction: f64,
    /// What to do about a slow node.
    pub action: NetworkAction,
    /// How long the master waits for the nodes' measurements, seconds
    /// (1 to [`NETWORK_CHECK_MAX_SECONDS`]); the formation signal is held
    /// at most this long.
    pub timeout_seconds: u32,
    /// The instance type's network bandwidth in Gbit/s (synth's catalogue,
    /// or the blueprint's figure); `None`: unknown, and the master compares
    /// with the median of the nodes' measurements instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_gbps: Option<f64>,
}

// The numbers are checked finite when a config is read (`NodeConfig::check`),
// so equality is an equivalence.
impl Eq for NetworkCheck {}

/// Where the node ships its log lines ([`logs`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Logs {
    /// The CloudWatch Logs group, [`logs::log_group_name`] of the stack's
    /// name and run; the node writes its own stream there
    /// ([`logs::stream_name`]).
    pub group: String,
}

/// What the master signals to CloudFormation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signals {
    /// Logical id of the master instance, whose creation policy waits for
    /// one `SignalResource` success once the master's agent is up.
    pub master_resource: String,
    /// Presigned URL of the formation wait condition handle: the master PUTs
    /// success ("k of n workers") or failure, with the reason, to it.
    pub formation_handle_url: String,
}

/// Everything a node needs to know at boot. Written by `synth`, read by `agent`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Always [`NODE_CONFIG_VERSION`] when written by this crate.
    pub version: u32,
    /// The cluster (blueprint) name.
    pub cluster: String,
    /// The stack's id (an ARN).
    pub stack_id: String,
    /// The stack's name.
    pub stack_name: String,
    /// The region the stack runs in.
    pub region: String,
    /// Master or worker.
    pub role: Role,
    /// Queue URLs.
    pub queues: Queues,
    /// Name of the workers' Auto Scaling group; on the master only (it is
    /// the one that sets the group's capacity and completes lifecycle
    /// actions, and it reads the workers requested and the minimum from the
    /// group: see [`MIN_WORKERS_TAG`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_group: Option<String>,
    /// The shared file system.
    pub efs: Efs,
    /// The login user that gets the cluster SSH key.
    pub default_user: String,
    /// Seconds from the master's start until formation is decided.
    #[serde(deserialize_with = "number_or_decimal_string")]
    pub formation_timeout_seconds: u32,
    /// Elastic training settings.
    #[serde(default)]
    pub elastic: Elastic,
    /// What to signal; present on the master only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals: Option<Signals>,
    /// The node has an EFA; `None`: no EFA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa: Option<Efa>,
    /// The network gate; `None`: off (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_check: Option<NetworkCheck>,
    /// Where to ship the agent's log and the boot output; `None`: nowhere
    /// (the lines stay in the journal and the node's files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Logs>,
    /// The idle guard (blueprint `idle`); `None`: off (the default). On
    /// every node: a worker reports its activity only when it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<idle::Idle>,
    /// The EC2 Capacity Block the node runs in; `None`: none. Workers only
    /// (the master is an On-Demand instance outside the block): the worker
    /// leaves the cluster before the block ends, as on a Spot notice
    /// ([`interruption::CapacityBlock`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_block: Option<interruption::CapacityBlock>,
    /// The local NVMe scratch volume; `None`: none asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<data::Scratch>,
    /// The data sets this node fetches (or waits for) before it registers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<data::DataSet>,
    /// The FSx for Lustre file system every node mounts; `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsx: Option<data::FsxLustre>,
    /// The GPU gate and watch; `None`: off (CPU clusters, or switched off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_check: Option<gpu::GpuCheck>,
}

/// Numbers may arrive as decimal strings: CloudFormation substitutes a
/// `Number` parameter into the user data as text (`"${Param}"`).
fn number_or_decimal_string<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrString {
        Number(u32),
        String(String),
    }
    match NumberOrString::deserialize(d)? {
        NumberOrString::Number(n) => Ok(n),
        NumberOrString::String(s) => {
            s.trim().parse().map_err(|_| serde::de::Error::custom(format!("expected a whole number, found {s:?}")))
        }
    }
}

/// Reading a node config failed.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    /// Not JSON, or not the shape of any node config.
    #[error("the node config is not valid: {0}")]
    Malformed(#[source] serde_json::Error),
    /// A version this build does not know.
    #[error(
        "the node config has version {found}, and this agent reads version {supported} only; build the template \
         with the synth release that matches the agent in the image"
    )]
    UnsupportedVersion {
        /// The version in the document.
        found: u64,
        /// The newest version this build reads.
        supported: u32,
    },
    /// A field holds a value the agent must not use (it would be written
    /// into paths or files).
    #[error("its {field} {value:?} is {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The user data does not hold a node config.
    #[error(
        "the user data holds no node config (no `{CONFIG_DELIMITER}` heredoc); was this instance launched from a synth template?"
    )]
    NoConfigInUserData,
}

impl NodeConfig {
    /// Parses a node config, checking its version before anything else.
    pub fn from_json(text: &str) -> Result<NodeConfig, ContractError> {
        #[derive(Deserialize)]
        struct Probe {
            version: Option<u64>,
        }
        let probe: Probe = serde_json::from_str(text).map_err(ContractError::Malformed)?;
        match probe.version {
            Some(v) if v == u64::from(NODE_CONFIG_VERSION) => {}
            Some(v) => {
                return Err(ContractError::UnsupportedVersion { found: v, supported: NODE_CONFIG_VERSION });
            }
            None => {
                return Err(ContractError::Malformed(serde::de::Error::missing_field("version")));
            }
        }
        let config: NodeConfig = serde_json::from_str(text).map_err(ContractError::Malformed)?;
        config.check()?;
        Ok(config)
    }

    /// The checks on values that end up in paths: the default user names a
    /// home directory (`~user/.ssh/...`), the EFS mount a directory the
    /// agent creates and writes under.
    fn check(&self) -> Result<(), ContractError> {
        let invalid = |field, value: &str, reason| ContractError::Invalid { field, value: value.to_owned(), reason };
        if !is_login_name(&self.default_user) {
            return Err(invalid(
                "default_user",
                &self.default_user,
                "not a login name (lower-case letters, digits, `_` and `-`, starting with a letter or `_`, at most 32)",
            ));
        }
        if let Some(check) = &self.network_check {
            let number = |field, value: f64, reason| invalid(field, &value.to_string(), reason);
            if !(check.min_fraction > 0.0 && check.min_fraction <= 1.0) {
                return Err(number("network_check.min_fraction", check.min_fraction, "not a fraction in (0, 1]"));
            }
            if !(1..=NETWORK_CHECK_MAX_SECONDS).contains(&check.timeout_seconds) {
                return Err(number(
                    "network_check.timeout_seconds",
                    f64::from(check.timeout_seconds),
                    "not between 1 and 300 seconds",
                ));
            }
            if let Some(g) = check.expected_gbps
                && !(g.is_finite() && g > 0.0)
            {
                return Err(number("network_check.expected_gbps", g, "not a positive number"));
            }
        }
        if let Some(check) = &self.gpu_check {
            if !(1..=gpu::GPU_CHECK_MAX_SECONDS).contains(&check.timeout_seconds) {
                return Err(invalid(
                    "gpu_check.timeout_seconds",
                    &check.timeout_seconds.to_string(),
                    "not between 1 and 3600 seconds",
                ));
            }
            for (ty, e) in &check.expect {
                for (field, v) in [
                    ("gpu_check.expect.bf16_tflops", e.bf16_tflops),
                    ("gpu_check.expect.memory_gbps", e.memory_gbps),
                    ("gpu_check.expect.nvlink_busbw_gbps", e.nvlink_busbw_gbps),
                ] {
                    if let Some(v) = v
                        && !(v.is_finite() && v > 0.0)
                    {
                        return Err(invalid(field, &format!("{ty}: {v}"), "not a positive number"));
                    }
                }
            }
        }
        if let Some(idle) = &self.idle
            && !(idle::MIN_MINUTES..=idle::MAX_MINUTES).contains(&idle.after_minutes)
        {
            return Err(invalid("idle.after_minutes", &idle.after_minutes.to_string(), "not between 5 and 10080"));
        }
        if let Some(block) = &self.capacity_block {
            if !block.id.starts_with("cr-")
                || block.id.len() > 64
                || block.id.chars().any(|c| !c.is_ascii_alphanumeric() && c != '-')
            {
                return Err(invalid(
                    "capacity_block.id",
                    &block.id,
                    "not a Capacity Reservation id (`cr-` and hex digits)",
                ));
            }
            if self.role == Role::Master {
                return Err(invalid(
                    "capacity_block",
                    &block.id,
                    "given to the master, which is never in a Capacity Block (only workers are)",
                ));
            }
        }
        const NOT_PLAIN: &str = "not an absolute path without `..` and control characters";
        let mount = &self.efs.mount;
        if !data::is_plain_absolute(mount) {
            return Err(invalid("efs.mount", mount, NOT_PLAIN));
        }
        if let Some(scratch) = &self.scratch
            && !data::is_plain_absolute(&scratch.mount)
        {
            return Err(invalid("scratch.mount", &scratch.mount, NOT_PLAIN));
        }
        if let Some(fsx) = &self.fsx
            && !data::is_plain_absolute(&fsx.mount)
        {
            return Err(invalid("fsx.mount", &fsx.mount, NOT_PLAIN));
        }
        for set in &self.data {
            if !data::is_plain_absolute(&set.dir) {
                return Err(invalid("data.dir", &set.dir, NOT_PLAIN));
            }
            if !data::is_bucket_name(&set.bucket) {
                return Err(invalid("data.bucket", &set.bucket, "not an S3 bucket name"));
            }
            if !(set.prefix.is_empty() || set.prefix.ends_with('/')) {
                return Err(invalid("data.prefix", &set.prefix, "neither empty nor ending in `/`"));
            }
        }
        Ok(())
    }
}

/// A Linux login name as `useradd` accepts it by default: what synth allows
/// for `image.user` and the agent for `default_user` (it becomes a path).
pub fn is_login_name(user: &str) -> bool {
    user.len() <= 32
        && user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && user.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// How an agent package installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackageFormat {
    /// The `.deb`, through `apt-get install` (Ubuntu images).
    Deb,
    /// The `.tar.gz` and its `install.sh` (Amazon Linux images).
    Tarball,
}

/// An agent package the user data installs before starting the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackageSource<'a> {
    /// `s3://bucket/key` (downloaded with the AWS CLI and the instance role)
    /// or `https://...` (curl). Must hold no quote, `$`, backslash or space:
    /// it is written into the script in single quotes.
    pub url: &'a str,
    /// 64 lower-case hex digits.
    pub sha256: &'a str,
    /// How to install it.
    pub format: PackageFormat,
    /// The region for `aws s3 cp` (CloudFormation's `${AWS::Region}` in synth's templates).
    pub region: &'a str,
}

/// The user data script: store the config, then start the agent.
///
/// `config_json` goes between heredoc delimiters verbatim; it must be one
/// line of JSON (a line equal to the delimiter would end it early). With a
/// `package`, the script first downloads it, checks its SHA-256 and installs
/// it. When any of that fails, or the image has no agent unit, the master
/// reports the reason through the formation handle, so the stack fails at
/// once instead of timing out; a worker logs it and exits.
///
/// The script holds no `${`, so CloudFormation's `Fn::Sub` leaves it alone
/// apart from the placeholders inside the config.
pub fn user_data_script(config_json: &str, package: Option<&PackageSource<'_>>) -> String {
    let install = package.map(install_step).unwrap_or_default();
    format!(
        r#"#!/bin/bash
set -euo pipefail
install -d -m 0755 /etc/deeplearning
cat > {path}.tmp <<'{delim}'
{config_json}
{delim}
mv {path}.tmp {path}
fail() {{
  echo "deeplearning: $1" >&2
  url=$(sed -n 's/.*"formation_handle_url":"\([^"]*\)".*/\1/p' {path})
  if [ -n "$url" ]; then
    curl -sS -X PUT -H 'Content-Type:' --data-binary '{{"Status":"FAILURE","Reason":"'"$1"'","UniqueId":"master","Data":"boot failed"}}' "$url"
  fi
  exit 1
}}
{install}if systemctl cat {unit} >/dev/null 2>&1; then
  systemctl enable --now {unit}
else
  fail "The image has no deeplearning agent: use an image with the agent baked in, or set image.agent_package_url (see the README)"
fi
"#,
        path = NODE_CONFIG_PATH,
        delim = CONFIG_DELIMITER,
        unit = AGENT_UNIT,
    )
}

/// The lines that download, verify and install `package`; they call a
/// shell function `fail REASON` when a step fails (the user data defines one).
pub fn install_step(package: &PackageSource<'_>) -> String {
    let url = package.url;
    let (file, install) = match package.format {
        PackageFormat::Deb => (
            "/var/tmp/deeplearning-agent.deb",
            // The lock timeout waits out unattended-upgrades, which often holds dpkg at first boot.
            "apt-get install -y -q -o DPkg::Lock::Timeout=600 \"$pkg\"".to_owned(),
        ),
        PackageFormat::Tarball => (
            "/var/tmp/deeplearning-agent.tar.gz",
            "dir=$(mktemp -d) && tar -xzf \"$pkg\" -C \"$dir\" && \"$dir\"/*/install.sh".to_owned(),
        ),
    };
    let download = if url.starts_with("s3://") {
        format!("aws s3 cp --only-show-errors --region {} '{url}' \"$pkg\"", package.region)
    } else {
        format!("curl -fsSL --retry 5 -o \"$pkg\" '{url}'")
    };
    format!(
        r#"pkg={file}
{download} || fail "Cannot download the agent package {url}"
echo '{sha}  '"$pkg" | sha256sum -c --quiet - || fail "The agent package {url} does not match its SHA-256 (agent_package_sha256)"
{install} || fail "Installing the agent package {url} failed (see the log of this boot or build)"
"#,
        sha = package.sha256,
    )
}

/// The config JSON inside a script made by [`user_data_script`].
pub fn config_from_user_data(script: &str) -> Result<&str, ContractError> {
    let opening = format!("<<'{CONFIG_DELIMITER}'\n");
    let start = script.find(&opening).ok_or(ContractError::NoConfigInUserData)? + opening.len();
    let body = &script[start..];
    let closing = format!("\n{CONFIG_DELIMITER}\n");
    let end = body.find(&closing).ok_or(ContractError::NoConfigInUserData)?;
    Ok(&body[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    // The node config every test starts from, shared with the agent's tests.
    use crate::fixtures::node_config as sample;

    #[test]
    fn round_trips_through_the_user_data_script() {
        let json = serde_json::to_string(&sample()).unwrap();
        let script = user_data_script(&json, None);
        let back = NodeConfig::from_json(config_from_user_data(&script).unwrap()).unwrap();
        assert_eq!(back, sample());
    }

    #[test]
    fn numbers_may_be_decimal_strings() {
        let mut v = serde_json::to_value(sample()).unwrap();
        v["formation_timeout_seconds"] = "600".into();
        let c = NodeConfig::from_json(&v.to_string()).unwrap();
        assert_eq!(c.formation_timeout_seconds, 600);
        v["formation_timeout_seconds"] = "ten minutes".into();
        let e = NodeConfig::from_json(&v.to_string()).unwrap_err();
        assert!(e.to_string().contains("expected a whole number"), "{e}");
    }

    #[test]
    fn unknown_versions_are_rejected_clearly() {
        let mut v = serde_json::to_value(sample()).unwrap();
        v["version"] = 8.into();
        v["something_new"] = true.into();
        let e = NodeConfig::from_json(&v.to_string()).unwrap_err();
        assert!(matches!(e, ContractError::UnsupportedVersion { found: 8, supported: 7 }), "{e}");
        assert!(e.to_string().contains("version 8") && e.to_string().contains("reads version 7 only"), "{e}");
        // A version-6 config (no GPU gate) is refused by its version.
        v["version"] = 6.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::UnsupportedVersion { .. })));
        // A version-5 config (no data) is refused by its version.
        v["version"] = 5.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::UnsupportedVersion { .. })));
        // A version-3 config (no idle guard) is refused by its version.
        v["version"] = 3.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::UnsupportedVersion { .. })));
        v["version"] = 1.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::UnsupportedVersion { .. })));
        // A version-2 config (no log group) is refused by name, not read
        // with the group silently missing.
        v["version"] = 2.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::UnsupportedVersion { .. })));
        v["version"] = 0.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::UnsupportedVersion { .. })));
    }

    #[test]
    fn efa_travels_in_the_config_and_is_left_out_without_it() {
        let without = serde_json::to_string(&sample()).unwrap();
        assert!(!without.contains(r#""efa""#), "{without}");
        assert_eq!(NodeConfig::from_json(&without).unwrap(), sample());
        let with_efa = NodeConfig { efa: Some(Efa { rdma_instance_types: vec!["p4d.24xlarge".into()] }), ..sample() };
        let json = serde_json::to_string(&with_efa).unwrap();
        assert!(json.contains(r#""efa":{"rdma_instance_types":["p4d.24xlarge"]}"#), "{json}");
        assert_eq!(NodeConfig::from_json(&json).unwrap(), with_efa);
    }

    #[test]
    fn the_network_check_travels_and_its_numbers_are_checked() {
        let check = NetworkCheck {
            min_fraction: 0.5,
            action: NetworkAction::Replace,
            timeout_seconds: 60,
            expected_gbps: Some(12.5),
        };
        let with = NodeConfig { network_check: Some(check.clone()), ..sample() };
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(r#""network_check":{"min_fraction":0.5,"action":"replace""#), "{json}");
        assert_eq!(NodeConfig::from_json(&json).unwrap(), with);
        assert!(!serde_json::to_string(&sample()).unwrap().contains("network_check"));
        let unknown = NetworkCheck { expected_gbps: None, ..check.clone() };
        let json = serde_json::to_string(&NodeConfig { network_check: Some(unknown), ..sample() }).unwrap();
        assert!(!json.contains("expected_gbps"), "{json}");
        for (bad, field) in [
            (NetworkCheck { min_fraction: 0.0, ..check.clone() }, "min_fraction"),
            (NetworkCheck { min_fraction: 1.5, ..check.clone() }, "min_fraction"),
            (NetworkCheck { timeout_seconds: 0, ..check.clone() }, "timeout_seconds"),
            (NetworkCheck { timeout_seconds: 301, ..check.clone() }, "timeout_seconds"),
            (NetworkCheck { expected_gbps: Some(-1.0), ..check.clone() }, "expected_gbps"),
        ] {
            let json = serde_json::to_string(&NodeConfig { network_check: Some(bad), ..sample() }).unwrap();
            let e = NodeConfig::from_json(&json).unwrap_err();
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
        let mut v = serde_json::to_value(&with).unwrap();
        v["network_check"]["action"] = "reboot".into();
        let e = NodeConfig::from_json(&v.to_string()).unwrap_err();
        assert!(e.to_string().contains("warn") && e.to_string().contains("replace"), "{e}");
    }

    #[test]
    fn the_idle_guard_travels_and_its_minutes_are_checked() {
        let without = serde_json::to_string(&sample()).unwrap();
        assert!(!without.contains(r#""idle""#), "{without}");
        let with =
            NodeConfig { idle: Some(idle::Idle { after_minutes: 30, action: idle::IdleAction::Stop }), ..sample() };
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(r#""idle":{"after_minutes":30,"action":"stop"}"#), "{json}");
        assert_eq!(NodeConfig::from_json(&json).unwrap(), with);
        for minutes in [0, 4, 10_081] {
            let bad = NodeConfig {
                idle: Some(idle::Idle { after_minutes: minutes, action: idle::IdleAction::ScaleWorkers }),
                ..sample()
            };
            let e = NodeConfig::from_json(&serde_json::to_string(&bad).unwrap()).unwrap_err();
            assert!(e.to_string().contains("idle.after_minutes"), "{minutes}: {e}");
        }
        let mut v = serde_json::to_value(&with).unwrap();
        v["idle"]["action"] = "hibernate".into();
        let e = NodeConfig::from_json(&v.to_string()).unwrap_err();
        assert!(e.to_string().contains("scale_workers"), "{e}");
    }

    #[test]
    fn a_workers_capacity_block_travels_and_is_checked() {
        let without = serde_json::to_string(&sample()).unwrap();
        assert!(!without.contains("capacity_block"), "{without}");
        let block = interruption::CapacityBlock { id: "cr-0123456789abcdef0".into(), end_unix: 1_797_507_000 };
        let worker = NodeConfig { role: Role::Worker, worker_group: None, signals: None, ..sample() };
        let with = NodeConfig { capacity_block: Some(block.clone()), ..worker.clone() };
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(r#""capacity_block":{"id":"cr-0123456789abcdef0","end_unix":1797507000}"#), "{json}");
        assert_eq!(NodeConfig::from_json(&json).unwrap(), with);
        for (bad, field) in [
            (NodeConfig { capacity_block: Some(block.clone()), ..sample() }, "the master"),
            (
                NodeConfig {
                    capacity_block: Some(interruption::CapacityBlock { id: "../x".into(), end_unix: 1 }),
                    ..worker.clone()
                },
                "capacity_block.id",
            ),
        ] {
            let e = NodeConfig::from_json(&serde_json::to_string(&bad).unwrap()).unwrap_err();
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
        let mut v = serde_json::to_value(&with).unwrap();
        v["capacity_block"]["end_unix"] = "soon".into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::Malformed(_))));
        v["capacity_block"] = serde_json::json!({"id": "cr-1", "end_unix": 1, "start_unix": 0});
        assert!(NodeConfig::from_json(&v.to_string()).unwrap_err().to_string().contains("start_unix"));
    }

    #[test]
    fn the_log_group_is_optional() {
        let without = serde_json::to_string(&sample()).unwrap();
        assert!(!without.contains(r#""logs""#), "{without}");
        assert_eq!(NodeConfig::from_json(&without).unwrap().logs, None);
        let with = NodeConfig { logs: Some(Logs { group: logs::log_group_name("demo", "run-1") }), ..sample() };
        let json = serde_json::to_string(&with).unwrap();
        assert!(json.contains(r#""logs":{"group":"/deeplearning-cluster/demo/run-1"}"#), "{json}");
        assert_eq!(NodeConfig::from_json(&json).unwrap(), with);
    }

    #[test]
    fn values_that_become_paths_are_checked() {
        for (field, value) in [("default_user", "../../root"), ("default_user", "Root"), ("default_user", "")] {
            let mut c = sample();
            c.default_user = value.into();
            let e = NodeConfig::from_json(&serde_json::to_string(&c).unwrap()).unwrap_err();
            assert!(matches!(&e, ContractError::Invalid { field: f, .. } if *f == field), "{value}: {e:?}");
        }
        for mount in ["efs", "/efs/../etc", "/efs\n"] {
            let mut c = sample();
            c.efs.mount = mount.into();
            let e = NodeConfig::from_json(&serde_json::to_string(&c).unwrap()).unwrap_err();
            assert!(e.to_string().contains("efs.mount"), "{e}");
        }
        assert!(is_login_name("ubuntu") && is_login_name("ec2-user") && is_login_name("_svc"));
    }

    #[test]
    fn unknown_fields_and_missing_versions_are_malformed() {
        let mut v = serde_json::to_value(sample()).unwrap();
        v["surprise"] = 1.into();
        assert!(matches!(NodeConfig::from_json(&v.to_string()), Err(ContractError::Malformed(_))));
        v.as_object_mut().unwrap().remove("version");
        let e = NodeConfig::from_json(&v.to_string()).unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
    }

    #[test]
    fn the_package_is_verified_before_it_is_installed() {
        let json = serde_json::to_string(&sample()).unwrap();
        let sha = "ab".repeat(32);
        for (url, format, fetch, install) in [
            ("s3://bucket/agent.deb", PackageFormat::Deb, "aws s3 cp", "apt-get install"),
            ("https://example.com/a.tar.gz", PackageFormat::Tarball, "curl", "install.sh"),
        ] {
            let package = PackageSource { url, sha256: &sha, format, region: "${AWS::Region}" };
            let script = user_data_script(&json, Some(&package));
            let at = |needle: &str| script.find(needle).unwrap_or_else(|| panic!("no {needle} in {script}"));
            assert!(at(fetch) < at("sha256sum -c") && at("sha256sum -c") < at(install));
            assert!(at(install) < at("systemctl enable"));
            assert!(script.contains(&format!("echo '{sha}  '")));
            // Fn::Sub must see no placeholders but the config's and the region.
            assert_eq!(script.matches("${").count(), json.matches("${").count() + usize::from(url.starts_with("s3")));
            let back = NodeConfig::from_json(config_from_user_data(&script).unwrap()).unwrap();
            assert_eq!(back, sample());
        }
    }

    /// The script runs: with bash, a package that fails its checksum stops
    /// the boot before the agent, with the reason on stderr.
    #[test]
    fn a_package_with_the_wrong_checksum_is_not_installed() {
        let dir = std::env::temp_dir().join(format!("contract-userdata-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pkg.deb");
        std::fs::write(&file, "not the package").unwrap();
        let sha = "0".repeat(64);
        let package = PackageSource {
            url: "https://example.invalid/pkg.deb",
            sha256: &sha,
            format: PackageFormat::Deb,
            region: "x",
        };
        let step = install_step(&package)
            .replace("curl -fsSL --retry 5 -o \"$pkg\" 'https://example.invalid/pkg.deb'", "true")
            .replace("/var/tmp/deeplearning-agent.deb", &file.display().to_string());
        let script = format!("set -eu\nfail() {{ echo \"$1\" >&2; exit 1; }}\n{step}echo installed\n");
        let out = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("does not match its SHA-256"), "{stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("installed"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn user_data_without_a_config_is_reported() {
        assert!(matches!(config_from_user_data("#!/bin/sh\necho hi\n"), Err(ContractError::NoConfigInUserData)));
    }
}
