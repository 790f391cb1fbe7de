//! The nodes' log group in CloudWatch Logs (docs/ARCHITECTURE.md, "Node
//! logs"): every agent ships its own log and its node's boot output to its
//! own stream there, named by the node contract (`node_contract::logs`).
//!
//! The group is named after the stack ([`node_contract::logs::log_group_name`]
//! of `${AWS::StackName}`), so `synth logs` finds it from the stack name alone,
//! and it is retained when the stack is deleted, rolled back or the group
//! replaced: the lines that explain a failed formation must outlive it.

use cfn::resources::logs;
use cfn::{Attributes, Expr, Handle, Template};
use node_contract::logs::log_group_name;

use super::{Ctx, checkov_skip, sub_literal};

/// The group; its `Ref` is its name, its `Arn` attribute covers its streams.
pub(super) struct LogGroup {
    pub group: Handle<logs::LogGroup>,
}

pub(super) fn add(t: &mut Template, ctx: &Ctx) -> LogGroup {
    // "/deeplearning-cluster/${AWS::StackName}": the contract's name with the
    // stack name left for CloudFormation to fill in.
    let name = format!("{}${{AWS::StackName}}", sub_literal(&log_group_name("")));
    let group = t.add_with(
        "NodeLogGroup",
        logs::LogGroup {
            log_group_name: Expr::sub(name).into(),
            retention_in_days: ctx.spec.log_retention_days,
            tags: ctx.tags("logs"),
        },
        Attributes {
            // Evidence of a failed formation survives the rollback that
            // follows it, and a deleted stack's lines can still be read.
            deletion_policy: Some("Retain"),
            metadata: Some(checkov_skip(&[(
                "CKV_AWS_158",
                "Encrypted at rest by CloudWatch Logs with service-managed keys; a customer KMS key would need a key \
                 policy for the regional logs service and would be scheduled for deletion with the stack, leaving \
                 the retained group unreadable",
            )])),
            ..Attributes::default()
        },
    );
    LogGroup { group }
}
