//! Compute: a launch template each for the master and the workers, the
//! worker Auto Scaling group (with a lifecycle hook into the master's queue),
//! the master instance (with an Elastic IP when public), a cluster placement
//! group when asked for, and the formation wait condition.
//!
//! - Launch templates only: launch configurations cannot be created in new
//!   accounts. IMDSv2 is required, root volumes are encrypted gp3.
//! - The master is one EC2 instance, not a group of one (docs/ARCHITECTURE.md, "The stack"):
//!   it keeps its id and addresses through EC2 automatic recovery, which is
//!   on by default for supported types
//!   (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-recover.html>).
//! - The master's creation policy waits for its agent to report that it is
//!   up; the formation wait condition waits for the master to report the
//!   cluster formed ("k of n workers") or failed, with the reason. The wait
//!   condition depends on nothing, so a failure reported early (an image
//!   without the agent) fails the stack at once.

use cfn::resources::{autoscaling, cloudformation, ec2};
use cfn::{Attributes, CreationPolicy, Expr, Handle, Template};
use node_contract::Role;

use super::capacity;
use crate::spec::CapacityBlock;

use super::context::Ctx;
use super::logs::LogGroup;
use super::node_config::{self, Refs};
use super::queues::Queues;
use super::security::Groups;
use super::storage::FileSystem;
use super::{identity, network::Network, parameters::Inputs};

/// The logical id of the master; the node config names it for `SignalResource`,
/// and `synth resume` finds the master's instance by it.
pub(crate) const MASTER_ID: &str = "MasterInstance";
/// The logical id of the worker group (`synth status` and `synth resume`
/// find the group by it).
pub(crate) const WORKER_GROUP_ID: &str = "WorkerGroup";

/// Longest wait condition CloudFormation allows (12 hours).
const MAX_WAIT_SECONDS: u32 = 43_200;
/// Time on top of the formation deadline for the network and the master's boot.
const STACK_SETUP_MINUTES: u32 = 20;
/// Seconds a terminating worker waits for the master before it goes anyway.
const TERMINATE_HEARTBEAT_SECONDS: u32 = 300;

pub(super) struct Deps<'a> {
    pub inputs: &'a Inputs,
    pub net: &'a Network,
    pub groups: &'a Groups,
    pub queues: &'a Queues,
    pub fs: &'a FileSystem,
    pub logs: &'a LogGroup,
    pub lustre: Option<&'a super::fsx::Lustre>,
}

/// What the outputs need.
pub(super) struct Cluster {
    pub master: Handle<ec2::Instance>,
    pub master_ip: Option<Handle<ec2::Eip>>,
    pub workers: Handle<autoscaling::AutoScalingGroup>,
    pub formation: Handle<cloudformation::WaitCondition>,
}

struct Node<'a> {
    instance_type: Expr,
    profile: Expr,
    subnet: Option<Expr>,
    placement: Option<&'a Expr>,
    user_data: Expr,
    what: &'a str,
    /// The Capacity Block the node launches into (`cr-...`).
    capacity_block: Option<&'a str>,
}

fn launch_template(ctx: &Ctx, d: &Deps, node: Node) -> ec2::LaunchTemplate {
    let spec = ctx.spec;
    let tag_spec = |kind: &str| ec2::TagSpecification { resource_type: kind.into(), tags: ctx.tags(node.what) };
    ec2::LaunchTemplate {
        launch_template_data: ec2::LaunchTemplateData {
            image_id: d.inputs.image_id.clone().into(),
            instance_type: node.instance_type.into(),
            key_name: Some(d.inputs.has_key.only(d.inputs.key_name.r#ref()).into()),
            iam_instance_profile: ec2::IamInstanceProfile { arn: node.profile.into() },
            network_interfaces: vec![ec2::NetworkInterface {
                device_index: 0,
                interface_type: spec.efa.then(|| "efa".into()),
                groups: vec![d.groups.cluster.clone().into()],
                subnet_id: node.subnet.map(Into::into),
                // A public master gets an Elastic IP instead, so its address
                // survives a stop and start.
                associate_public_ip_address: false,
                delete_on_termination: true,
            }],
            metadata_options: ec2::MetadataOptions {
                http_endpoint: "enabled".into(),
                http_tokens: "required".into(),
                http_put_response_hop_limit: 1,
            },
            block_device_mappings: vec![ec2::BlockDeviceMapping {
                device_name: spec.image.root_device.clone().into(),
                ebs: ec2::Ebs {
                    volume_size: spec.root_volume_gb.into(),
                    volume_type: "gp3".into(),
                    encrypted: true,
                    delete_on_termination: true,
                },
            }],
            monitoring: ec2::Monitoring { enabled: true },
            placement: node.placement.map(|g| ec2::Placement { group_name: g.clone().into() }),
            // A Capacity Block's instances launch only with this market type
            // and the block as the target:
            // https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html
            instance_market_options: node
                .capacity_block
                .map(|_| ec2::InstanceMarketOptions { market_type: "capacity-block".into() }),
            capacity_reservation_specification: node.capacity_block.map(|id| ec2::CapacityReservationSpecification {
                capacity_reservation_target: ec2::CapacityReservationTarget { capacity_reservation_id: id.into() },
            }),
            tag_specifications: vec![tag_spec("instance"), tag_spec("volume"), tag_spec("network-interface")],
            user_data: node.user_data.into(),
        },
        tag_specifications: vec![tag_spec("launch-template")],
    }
}

/// What a node config refers to; the master's also names the worker group and its signals.
fn refs(d: &Deps, worker_group: Option<Expr>, signals: Option<(String, Expr)>) -> Refs {
    Refs {
        master_queue: d.queues.master.r#ref(),
        worker_queue: d.queues.workers.r#ref(),
        worker_group,
        efs_id: d.fs.id.clone(),
        lustre: d.lustre.map(|l| (l.id.clone(), l.dns_name.clone(), l.mount_name.clone())),
        signals,
        log_group: d.logs.group.r#ref(),
    }
}

fn version(lt: &Handle<ec2::LaunchTemplate>) -> ec2::LaunchTemplateSpecification {
    ec2::LaunchTemplateSpecification {
        launch_template_id: lt.r#ref().into(),
        version: lt.attr("LatestVersionNumber").into(),
    }
}

pub(super) fn add(t: &mut Template, ctx: &Ctx, d: Deps) -> Cluster {
    let spec = ctx.spec;
    let placement = spec.placement_group.then(|| {
        t.add("ClusterPlacementGroup", ec2::PlacementGroup { strategy: "cluster".into(), tags: ctx.tags("placement") })
            .r#ref()
    });

    // Workers first: the master's config names their group.
    let worker_profile = identity::workers(t, ctx, d.queues, d.logs);
    let worker_data = node_config::user_data(ctx, Role::Worker, refs(&d, None, None));
    let worker_lt = t.add(
        "WorkerLaunchTemplate",
        launch_template(
            ctx,
            &d,
            Node {
                instance_type: d.inputs.worker_type.r#ref(),
                profile: worker_profile,
                subnet: None,
                placement: None,
                user_data: worker_data,
                what: "worker",
                capacity_block: spec.workers.capacity_block().map(|b| b.id.as_str()),
            },
        ),
    );
    let hook_role = identity::lifecycle_hook(t, ctx, d.queues);
    let (launch, mixed) = capacity::launch_and_mix(&spec.workers, d.inputs, version(&worker_lt));
    let mut worker_tags: Vec<autoscaling::AsgTag> = ctx
        .tags("worker")
        .into_iter()
        .map(|tag| autoscaling::AsgTag { key: tag.key, value: tag.value, propagate_at_launch: true })
        .collect();
    // The master reads the minimum from here (and the workers requested from
    // the desired capacity) instead of from its user data, so that resizing
    // the cluster leaves the master's launch template, and the master, as
    // they are. The instances do not need it.
    worker_tags.push(autoscaling::AsgTag {
        key: node_contract::MIN_WORKERS_TAG.into(),
        value: d.inputs.min_workers.r#ref().into(),
        propagate_at_launch: false,
    });
    worker_tags.sort_by(|a, b| a.key.cmp(&b.key));
    let mut ready = d.net.ready.clone();
    ready.extend(d.fs.mount_targets.iter().cloned());
    let workers = t.add_with(
        WORKER_GROUP_ID,
        autoscaling::AutoScalingGroup {
            // The master lowers the desired capacity to what launched when
            // the cluster forms short, so the group must be allowed below it.
            min_size: "0".into(),
            max_size: d.inputs.max_workers.r#ref().into(),
            // A Capacity Block that has not started cannot launch anything
            // yet: the group waits at 0 and a scheduled action sizes it at
            // the block's start (below).
            desired_capacity: match spec.workers.capacity_block() {
                Some(CapacityBlock { start_unix: Some(_), .. }) => "0".into(),
                _ => d.inputs.worker_count.r#ref().into(),
            },
            launch_template: launch,
            mixed_instances_policy: mixed,
            vpc_zone_identifier: d.net.worker_subnets.iter().cloned().map(Into::into).collect(),
            placement_group: placement.clone().map(Into::into),
            capacity_reservation_specification: capacity::reservations(&spec.workers.capacity),
            lifecycle_hook_specification_list: vec![autoscaling::LifecycleHookSpecification {
                lifecycle_hook_name: "worker-terminating".into(),
                lifecycle_transition: "autoscaling:EC2_INSTANCE_TERMINATING".into(),
                notification_target_arn: d.queues.master.attr("Arn").into(),
                role_arn: hook_role.into(),
                heartbeat_timeout: TERMINATE_HEARTBEAT_SECONDS,
                default_result: "CONTINUE".into(),
            }],
            health_check_type: "EC2".into(),
            tags: worker_tags,
        },
        Attributes { depends_on: ready.clone(), ..Attributes::default() },
    );

    if let Some(block) = spec.workers.capacity_block() {
        capacity::block_window(t, block, &workers, d.inputs);
    }

    let master_profile = identity::master(t, ctx, d.queues, d.logs, &workers);
    let handle = t.add("FormationHandle", cloudformation::WaitConditionHandle {});
    let master_data = node_config::user_data(
        ctx,
        Role::Master,
        refs(&d, Some(workers.r#ref()), Some((MASTER_ID.to_owned(), handle.r#ref()))),
    );
    let master_lt = t.add(
        "MasterLaunchTemplate",
        launch_template(
            ctx,
            &d,
            Node {
                instance_type: d.inputs.master_type.r#ref(),
                profile: master_profile,
                subnet: Some(d.net.master_subnet.clone()),
                placement: placement.as_ref(),
                user_data: master_data,
                what: "master",
                capacity_block: None,
            },
        ),
    );
    let master = t.add_with(
        MASTER_ID,
        ec2::Instance { launch_template: version(&master_lt), tags: ctx.tags("master") },
        Attributes {
            depends_on: ready,
            creation_policy: Some(CreationPolicy { count: 1, timeout_minutes: spec.formation_minutes }),
            ..Attributes::default()
        },
    );
    let master_ip = spec.master.public.then(|| {
        t.add_with(
            "MasterElasticIp",
            ec2::Eip { domain: "vpc".into(), instance_id: Some(master.r#ref().into()), tags: ctx.tags("master") },
            Attributes { depends_on: d.net.internet.iter().cloned().collect(), ..Attributes::default() },
        )
    });

    let timeout = ((spec.formation_minutes + STACK_SETUP_MINUTES) * 60).min(MAX_WAIT_SECONDS);
    let formation = t.add(
        "FormationWaitCondition",
        cloudformation::WaitCondition { handle: handle.r#ref().into(), timeout: timeout.to_string().into(), count: 1 },
    );

    Cluster { master, master_ip, workers, formation }
}

#[cfg(test)]
mod tests {
    use serde_json::Value as Json;

    use crate::stack::{compile, tests::variants};

    /// Resizing the cluster (worker count, type, minimum, maximum) must not
    /// change the master's launch template or instance: a new launch
    /// template version replaces the master (`LaunchTemplate` is create-only
    /// on `AWS::EC2::Instance`), and with it its root volume.
    #[test]
    fn the_master_does_not_depend_on_the_cluster_size() {
        for (name, spec) in variants() {
            let template: Json = serde_json::from_str(&compile(&spec).render().unwrap().json).unwrap();
            for logical_id in ["MasterLaunchTemplate", super::MASTER_ID] {
                let text = template["Resources"][logical_id].to_string();
                for parameter in ["WorkerCount", "MinWorkers", "MaxWorkers", "WorkerInstanceType"] {
                    assert!(!text.contains(parameter), "{name}: {logical_id} mentions {parameter}: {text}");
                }
            }
            let tags = template["Resources"]["WorkerGroup"]["Properties"]["Tags"].as_array().unwrap();
            let min = tags.iter().find(|t| t["Key"] == node_contract::MIN_WORKERS_TAG).expect("the minimum tag");
            assert_eq!(min["Value"], serde_json::json!({"Ref": "MinWorkers"}), "{name}");
            assert_eq!(min["PropagateAtLaunch"], false, "{name}");
        }
    }
}
