//! IAM: one role for the master, one for the workers, one that lets Auto
//! Scaling put lifecycle notifications into the master's queue.
//!
//! Every write is scoped to this stack's queues, its worker group, its own
//! signals and its nodes' log group (and that group's streams); `*` appears only for Auto Scaling describe calls, which support no
//! resource-level permissions
//! (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/control-access-using-iam.html>).
//! Roles have no fixed names, so two stacks never collide.

use cfn::resources::{autoscaling, iam};
use cfn::{Expr, Handle, Pseudo, Template};
use serde_json::{Value as Json, json};

use super::context::{Ctx, arn};
use super::logs::LogGroup;
use super::queues::Queues;

/// The managed policy Session Manager needs on an instance (`arn` takes it).
pub(crate) const SSM_CORE: &str = "iam::aws:policy/AmazonSSMManagedInstanceCore";

/// A role trust policy: `service` may assume the role.
pub(crate) fn trust(service: &str) -> Json {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": service},
            "Action": "sts:AssumeRole"
        }]
    })
}

/// An IAM policy document of `statements`.
pub(crate) fn document(statements: Vec<Json>) -> Json {
    json!({"Version": "2012-10-17", "Statement": statements})
}

fn managed(ctx: &Ctx) -> Vec<cfn::Value<String>> {
    if ctx.spec.access.session_manager { vec![arn(SSM_CORE).into()] } else { Vec::new() }
}

/// Read access to exactly the agent package object, when nodes install it
/// from an `s3://` URL at boot.
fn agent_package(ctx: &Ctx) -> Option<iam::Policy> {
    let (bucket, key) = ctx.spec.image.agent_package.as_ref()?.s3_object()?;
    Some(iam::Policy {
        policy_name: "agent-package".into(),
        policy_document: document(vec![json!({
            "Sid": "InstallAgentAtBoot",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": arn(&format!("s3:::{bucket}/{}", super::context::sub_literal(key)))
        })]),
    })
}

/// Each node creates its own stream in the stack's log group and writes to
/// it. The group's `Arn` attribute ends in `:*`, which covers the group's
/// streams (`...:log-group:<name>:log-stream:<stream>`) and nothing else.
fn ship_logs(logs: &LogGroup) -> Json {
    json!({
        "Sid": "ShipNodeLogs",
        "Effect": "Allow",
        "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Resource": logs.group.attr("Arn")
    })
}

/// Read access to exactly the data sets' prefixes the role's nodes fetch
/// (`data:`): `s3:GetObject` on the objects under them, and `s3:ListBucket`
/// on each bucket only for listings under them (the `s3:prefix`
/// condition), so a node cannot read, nor list, another prefix of the same
/// bucket. The workers' role has the sets every node fetches; the master's
/// also those bound for EFS, which it alone fetches.
/// <https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html#condition-key-bucket-ops-2>
fn read_data(ctx: &Ctx, master: bool) -> Option<iam::Policy> {
    use std::collections::BTreeMap;
    let sets: Vec<_> =
        ctx.spec.data.iter().filter(|set| master || set.fetcher() == node_contract::data::Fetcher::EveryNode).collect();
    if sets.is_empty() {
        return None;
    }
    let literal = super::context::sub_literal;
    let objects: Vec<Expr> =
        sets.iter().map(|set| arn(&format!("s3:::{}/{}*", set.source.bucket, literal(&set.source.prefix)))).collect();
    let mut prefixes: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for set in &sets {
        prefixes.entry(&set.source.bucket).or_default().push(format!("{}*", set.source.prefix));
    }
    let mut statements = vec![json!({
        "Sid": "ReadData",
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": objects
    })];
    for (i, (bucket, prefixes)) in prefixes.into_iter().enumerate() {
        let mut statement = json!({
            "Sid": format!("ListData{}", i + 1),
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": arn(&format!("s3:::{bucket}"))
        });
        // A whole bucket (`s3://bucket/`) needs no condition.
        if !prefixes.iter().any(|p| p == "*") {
            statement["Condition"] = json!({"StringLike": {"s3:prefix": prefixes}});
        }
        statements.push(statement);
    }
    Some(iam::Policy { policy_name: "read-data".into(), policy_document: document(statements) })
}

fn role_and_profile(
    t: &mut Template,
    ctx: &Ctx,
    who: &str,
    description: String,
    mut policies: Vec<iam::Policy>,
) -> Expr {
    policies.extend(agent_package(ctx));
    policies.extend(read_data(ctx, who == "Master"));
    let role = t.add(
        &format!("{who}Role"),
        iam::Role {
            description: description.into(),
            assume_role_policy_document: trust("ec2.amazonaws.com"),
            managed_policy_arns: managed(ctx),
            policies,
            tags: ctx.tags(&format!("{}-role", who.to_lowercase())),
        },
    );
    let profile = t.add(&format!("{who}InstanceProfile"), iam::InstanceProfile { roles: vec![role.r#ref().into()] });
    profile.attr("Arn")
}

/// The workers' instance profile ARN: send registrations, read manifests.
pub(super) fn workers(t: &mut Template, ctx: &Ctx, queues: &Queues, logs: &LogGroup) -> Expr {
    let policy = iam::Policy {
        policy_name: "cluster-queues".into(),
        policy_document: document(vec![
            json!({
                "Sid": "Register",
                "Effect": "Allow",
                "Action": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
                "Resource": queues.master.attr("Arn")
            }),
            json!({
                "Sid": "ReadManifests",
                "Effect": "Allow",
                "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"],
                "Resource": queues.workers.attr("Arn")
            }),
            ship_logs(logs),
        ]),
    };
    role_and_profile(
        t,
        ctx,
        "Worker",
        format!("Workers of cluster {}: register with the master and read its manifests", ctx.spec.name),
        vec![policy],
    )
}

/// The master's instance profile ARN: both queues, its worker group, its signals.
pub(super) fn master(
    t: &mut Template,
    ctx: &Ctx,
    queues: &Queues,
    logs: &LogGroup,
    group: &Handle<autoscaling::AutoScalingGroup>,
) -> Expr {
    let group_arn = Expr::SubWith(
        "arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:autoScalingGroupName/${Group}"
            .into(),
        [("Group".to_owned(), group.r#ref())].into(),
    );
    // The network gate's `replace` terminates a slow worker in its group
    // (keeping the desired capacity, so Auto Scaling launches another): only
    // a stack that asks for it gets the right to.
    let mut group_actions = vec![
        "autoscaling:SetDesiredCapacity",
        "autoscaling:CompleteLifecycleAction",
        "autoscaling:RecordLifecycleActionHeartbeat",
    ];
    if ctx.spec.network_check.as_ref().is_some_and(|check| check.action == node_contract::NetworkAction::Replace) {
        group_actions.push("autoscaling:TerminateInstanceInAutoScalingGroup");
    }
    // The GPU gate's `replace` (and `fail` once the cluster formed) marks a
    // worker whose GPUs failed unhealthy, so Auto Scaling replaces it.
    if ctx.spec.gpu_check.as_ref().is_some_and(|check| check.action != node_contract::gpu::GpuAction::Warn) {
        group_actions.push("autoscaling:SetInstanceHealth");
    }
    // The master leaves what synth shows in tags on the worker group: the
    // formation's count while the cluster forms, which `synth deploy`'s
    // live line reads (`node_contract::formation::FORMATION_TAG`), and the
    // stragglers `trainer train` names (`node_contract::straggler::STRAGGLER_TAG`),
    // on every cluster; the idle guard's state (`node_contract::idle::IDLE_TAG`)
    // and the nodes' data fetch progress (`node_contract::data::DATA_TAG`),
    // which `synth status` reads.
    group_actions.push("autoscaling:CreateOrUpdateTags");
    let policy = iam::Policy {
        policy_name: "cluster-formation".into(),
        policy_document: document(vec![
            json!({
                "Sid": "ClusterQueues",
                "Effect": "Allow",
                "Action": ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"],
                "Resource": [queues.master.attr("Arn"), queues.workers.attr("Arn")]
            }),
            json!({
                "Sid": "WorkerGroup",
                "Effect": "Allow",
                "Action": group_actions,
                "Resource": group_arn
            }),
            json!({
                "Sid": "DescribeWorkerGroup",
                "Effect": "Allow",
                "Action": ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities", "autoscaling:DescribeLifecycleHooks"],
                "Resource": "*"
            }),
            json!({
                "Sid": "SignalFormation",
                "Effect": "Allow",
                "Action": "cloudformation:SignalResource",
                "Resource": Pseudo::StackId.r#ref()
            }),
            ship_logs(logs),
        ]),
    };
    role_and_profile(
        t,
        ctx,
        "Master",
        format!("Master of cluster {}: form the cluster, manage its worker group, signal the stack", ctx.spec.name),
        vec![policy],
    )
}

/// The role Auto Scaling assumes to send lifecycle notifications to the master's queue.
pub(super) fn lifecycle_hook(t: &mut Template, ctx: &Ctx, queues: &Queues) -> Expr {
    let role = t.add(
        "LifecycleHookRole",
        iam::Role {
            description: format!(
                "Lets Auto Scaling tell the master of cluster {} about terminating workers",
                ctx.spec.name
            )
            .into(),
            assume_role_policy_document: trust("autoscaling.amazonaws.com"),
            managed_policy_arns: Vec::new(),
            policies: vec![iam::Policy {
                policy_name: "notify-master".into(),
                policy_document: document(vec![json!({
                    "Effect": "Allow",
                    "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"],
                    "Resource": queues.master.attr("Arn")
                })]),
            }],
            tags: ctx.tags("lifecycle-role"),
        },
    );
    role.attr("Arn")
}

#[cfg(test)]
mod tests {
    use serde_json::Value as Json;

    use crate::stack::{compile, tests::variants};

    /// The master may tag its worker group (the formation's count, the
    /// stragglers `trainer train` names, the idle guard's state, the data
    /// progress), and only that group.
    #[test]
    fn the_master_may_tag_its_own_group_only() {
        for (name, spec) in variants() {
            let template: Json = serde_json::from_str(&compile(&spec).render().unwrap().json).unwrap();
            let statements =
                template["Resources"]["MasterRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{name}: no master policy"))
                    .clone();
            let tagging: Vec<&Json> = statements
                .iter()
                .filter(|s| {
                    s["Action"].as_array().is_some_and(|a| a.iter().any(|x| x == "autoscaling:CreateOrUpdateTags"))
                })
                .collect();
            assert_eq!(tagging.len(), 1, "{name}");
            for s in tagging {
                assert_eq!(s["Sid"], "WorkerGroup", "{name}");
                assert!(s["Resource"].to_string().contains("autoScalingGroupName/${Group}"), "{name}: {s}");
            }
        }
    }
}
