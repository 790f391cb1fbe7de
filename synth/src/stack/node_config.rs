//! The node config each launch template's user data writes (the node
//! contract, `node-contract` crate), as an `Fn::Sub` template.
//!
//! The config is built as the contract's own type, with `${...}`
//! placeholders where CloudFormation fills values in at deploy time (queue
//! URLs, the stack id, the group name), serialized, and wrapped in the
//! contract's user data script. With `image.agent_package_url`, the script
//! installs the package first. With EFA, the config says so and lists the
//! instance types whose EFA does RDMA. With FSx for Lustre, the config names
//! the file system (id, DNS name, Lustre mount name) through `Fn::Sub`
//! variables and the mount point.
//!
//! No parameter a user changes to resize the cluster (worker count, type,
//! minimum, maximum) is in any config: a changed user data is a new launch
//! template version, and a new version of the master's replaces the master
//! instance. The master reads the sizes from its worker group instead
//! (`node_contract::MIN_WORKERS_TAG`).

use std::collections::BTreeMap;

use cfn::Expr;
use node_contract::data::{DataSet, FsxLustre, Scratch};
use node_contract::interruption::CapacityBlock;
use node_contract::{Efa, Efs, Elastic, Logs, NODE_CONFIG_VERSION, NodeConfig, PackageSource, Queues, Role, Signals};

use super::context::{Ctx, sub_literal};

/// Logical ids and expressions the config refers to.
pub(super) struct Refs {
    pub master_queue: Expr,
    pub worker_queue: Expr,
    pub worker_group: Option<Expr>,
    pub efs_id: Expr,
    /// The FSx for Lustre file system: its id, DNS name and mount name.
    pub lustre: Option<(Expr, Expr, Expr)>,
    /// (master instance logical id, formation handle) on the master.
    pub signals: Option<(String, Expr)>,
    /// The nodes' log group (its `Ref`: the name).
    pub log_group: Expr,
}

/// The user data: `Fn::Base64` of `Fn::Sub` of the contract's script.
pub(super) fn user_data(ctx: &Ctx, role: Role, refs: Refs) -> Expr {
    let spec = ctx.spec;
    let mut vars: BTreeMap<String, Expr> = BTreeMap::new();
    let mut var = |name: &str, value: Expr| {
        vars.insert(name.to_owned(), value);
        format!("${{{name}}}")
    };
    let config = NodeConfig {
        version: NODE_CONFIG_VERSION,
        cluster: sub_literal(&spec.name),
        stack_id: "${AWS::StackId}".into(),
        stack_name: "${AWS::StackName}".into(),
        region: "${AWS::Region}".into(),
        role,
        queues: Queues {
            master: var("MasterQueueUrl", refs.master_queue),
            workers: var("WorkerQueueUrl", refs.worker_queue),
        },
        worker_group: refs.worker_group.map(|g| var("WorkerGroupName", g)),
        efs: Efs { file_system_id: var("FileSystemId", refs.efs_id), mount: sub_literal(&spec.efs.mount) },
        default_user: sub_literal(&spec.image.user),
        formation_timeout_seconds: spec.formation_minutes * 60,
        elastic: Elastic { prepare_data_script: spec.prepare_data_script.as_deref().map(sub_literal) },
        signals: refs.signals.map(|(resource, handle)| Signals {
            master_resource: resource,
            formation_handle_url: var("FormationHandleUrl", handle),
        }),
        logs: Some(Logs { group: var("LogGroupName", refs.log_group) }),
        // The whole list, not the blueprint's type alone: the stack's
        // instance type parameters may be changed at deploy time.
        efa: spec
            .efa
            .then(|| Efa { rdma_instance_types: crate::catalog::efa_rdma_types().map(String::from).collect() }),
        network_check: spec.network_check.clone(),
        gpu_check: spec.gpu_check.clone(),
        // On workers too: a worker reports its activity only when the
        // cluster has an idle guard.
        idle: spec.idle.clone(),
        // Workers only: the master is an On-Demand instance outside the block.
        capacity_block: match role {
            Role::Worker => {
                spec.workers.capacity_block().map(|b| CapacityBlock { id: sub_literal(&b.id), end_unix: b.end_unix })
            }
            Role::Master => None,
        },
        scratch: spec.scratch.as_ref().map(|mount| Scratch { mount: sub_literal(mount) }),
        // Every node has every data set: the master alone fetches those
        // bound for EFS, and the workers wait for them to be complete there
        // before they register (only the master's role may read them).
        data: spec
            .data
            .iter()
            .map(|set| DataSet {
                bucket: set.source.bucket.clone(),
                prefix: sub_literal(&set.source.prefix),
                dir: sub_literal(&set.dir(spec.scratch.as_deref(), &spec.efs.mount)),
                fetcher: set.fetcher(),
            })
            .collect(),
        fsx: refs.lustre.map(|(id, dns, mount_name)| FsxLustre {
            file_system_id: var("FsxFileSystemId", id),
            dns_name: var("FsxDnsName", dns),
            mount_name: var("FsxMountName", mount_name),
            mount: spec.fsx.as_ref().map(|f| sub_literal(&f.mount)).unwrap_or_default(),
        }),
    };
    // Serializing a struct of strings and numbers to JSON cannot fail.
    let json = serde_json::to_string(&config).unwrap_or_default();
    let package = spec.image.agent_package.as_ref().map(|p| PackageSource {
        url: &p.url,
        sha256: &p.sha256,
        format: spec.image.package_format,
        region: "${AWS::Region}",
    });
    let script = node_contract::user_data_script(&json, package.as_ref());
    Expr::base64(Expr::SubWith(script, vars))
}

#[cfg(test)]
mod tests {
    use node_contract::{NODE_CONFIG_VERSION, NodeConfig, Role, config_from_user_data};
    use serde_json::Value as Json;

    use crate::stack::{compile, tests::variants};

    /// Does what CloudFormation's `Fn::Sub` does, with made-up values.
    fn substitute(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').expect("closed") + start;
            let name = &rest[start + 2..end];
            out.push_str(match name {
                "AWS::Region" => "us-east-1",
                _ => "https://example.invalid/x",
            });
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// The worker leaves at the block's end less 45 minutes: five minutes
    /// before the template's scale-in (end less 40), fifteen before EC2
    /// reclaims the instances (end less 30).
    #[test]
    fn a_worker_leaves_five_minutes_before_the_groups_scale_in() {
        use node_contract::interruption::{LEAVE_BEFORE_END_SECONDS, RECLAIM_BEFORE_END_SECONDS};
        let scale_in = crate::spec::CapacityBlock::SCALE_IN_BEFORE_END_SECONDS;
        assert_eq!(LEAVE_BEFORE_END_SECONDS, scale_in + 5 * 60);
        assert!(RECLAIM_BEFORE_END_SECONDS < scale_in);
    }

    #[test]
    fn the_user_data_holds_a_config_the_agent_reads() {
        for (name, spec) in variants() {
            let template: Json = serde_json::from_str(&compile(&spec).render().unwrap().json).unwrap();
            for (lt, role) in [("MasterLaunchTemplate", Role::Master), ("WorkerLaunchTemplate", Role::Worker)] {
                let sub = &template["Resources"][lt]["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Sub"]
                    [0];
                let script = substitute(sub.as_str().expect("a Sub string"));
                let config = NodeConfig::from_json(config_from_user_data(&script).unwrap())
                    .unwrap_or_else(|e| panic!("{name} {lt}: {e}"));
                assert_eq!(config.role, role);
                assert_eq!(config.efs.mount, spec.efs.mount);
                assert_eq!(config.signals.is_some(), role == Role::Master, "{name} {lt}");
                assert_eq!(config.worker_group.is_some(), role == Role::Master, "{name} {lt}");
                assert_eq!(config.formation_timeout_seconds, spec.formation_minutes * 60);
                assert_eq!(config.efa.is_some(), spec.efa, "{name} {lt}");
                assert_eq!(config.version, NODE_CONFIG_VERSION, "{name} {lt}");
                assert!(config.logs.is_some(), "{name} {lt}");
                assert_eq!(config.idle, spec.idle, "{name} {lt}");
                let block = spec.workers.capacity_block().filter(|_| role == Role::Worker);
                assert_eq!(
                    config.capacity_block.as_ref().map(|b| (b.id.as_str(), b.end_unix)),
                    block.map(|b| (b.id.as_str(), b.end_unix)),
                    "{name} {lt}"
                );
                assert_eq!(
                    config.fsx.as_ref().map(|f| f.mount.as_str()),
                    spec.fsx.as_ref().map(|f| f.mount.as_str()),
                    "{name} {lt}"
                );
                if spec.fsx.is_some() {
                    let vars = &template["Resources"][lt]["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]
                        ["Fn::Sub"][1];
                    assert_eq!(vars["FsxDnsName"], serde_json::json!({"Fn::GetAtt": ["FsxFileSystem", "DNSName"]}));
                    assert_eq!(
                        vars["FsxMountName"],
                        serde_json::json!({"Fn::GetAtt": ["FsxFileSystem", "LustreMountName"]})
                    );
                    assert_eq!(vars["FsxFileSystemId"], serde_json::json!({"Ref": "FsxFileSystem"}));
                }
                if let Some(efa) = &config.efa {
                    assert!(efa.rdma_instance_types.iter().any(|t| t == "p4d.24xlarge"), "{name}: {efa:?}");
                }
            }
        }
    }
}
