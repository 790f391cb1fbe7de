//! Test fixtures shared by the cluster modules' unit tests.

use node_contract::message::{Manifest, Register};
use node_contract::{Elastic, NodeConfig, Role};

use super::Effect;
use crate::ports::Formation;
pub(crate) use crate::ports::failing::SplitMix64;

/// A unix time in milliseconds to start the clocks at (2026-01-01).
pub(crate) const T0: u64 = 1_767_225_600_000;

/// The master's registration (`i-master`, 10.0.0.100).
pub(crate) fn master_reg() -> Register {
    Register {
        instance_id: "i-master".into(),
        private_ip: "10.0.0.100".into(),
        hostname: "ip-10-0-0-100.ec2.internal".into(),
        role: Role::Master,
        gpus: 0,
        instance_type: "c5.large".into(),
        availability_zone: "us-east-1a".into(),
        ssh_host_key: "ssh-ed25519 AAAAmaster root@master".into(),
        boot_id: "boot-master".into(),
        launched_unix_ms: None,
        booted_unix_ms: None,
        agent_started_unix_ms: None,
        data: None,
    }
}

/// Worker `n`: `i-w<n>`, 10.0.0.<n>, boot `boot-<n>`, 8 GPUs.
pub(crate) fn worker_reg(n: u32) -> Register {
    Register {
        instance_id: format!("i-w{n}"),
        private_ip: format!("10.0.0.{n}"),
        hostname: format!("ip-10-0-0-{n}.ec2.internal"),
        role: Role::Worker,
        gpus: 8,
        instance_type: "p3.16xlarge".into(),
        availability_zone: "us-east-1b".into(),
        ssh_host_key: format!("ssh-ed25519 AAAAw{n} root@w{n}"),
        boot_id: format!("boot-{n}"),
        launched_unix_ms: None,
        booted_unix_ms: None,
        agent_started_unix_ms: None,
        data: None,
    }
}

/// A master's node config: the contract's fixture with a formation of
/// `timeout_minutes` and, with `prepare_data`, a prepare-data script.
pub(crate) fn config(timeout_minutes: u32, prepare_data: bool) -> NodeConfig {
    NodeConfig {
        formation_timeout_seconds: timeout_minutes * 60,
        elastic: Elastic { prepare_data_script: prepare_data.then(|| "/efs/prepare.sh".into()) },
        ..node_contract::fixtures::node_config()
    }
}

/// The manifests among the effects.
pub(crate) fn published(effects: &[Effect]) -> Vec<&Manifest> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishManifest { manifest, .. } => Some(manifest),
            _ => None,
        })
        .collect()
}

/// The formation signals among the effects.
pub(crate) fn formations(effects: &[Effect]) -> Vec<&Formation> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::SignalFormation(f) => Some(f),
            _ => None,
        })
        .collect()
}

/// The log lines among the effects, joined.
pub(crate) fn logs(effects: &[Effect]) -> String {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Log(l) => Some(l.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The effects other than log lines.
pub(crate) fn actions(effects: &[Effect]) -> Vec<&Effect> {
    effects.iter().filter(|e| !matches!(e, Effect::Log(_))).collect()
}
