//! The nodes' log group in CloudWatch Logs (docs/ARCHITECTURE.md, "Node
//! logs"): every agent ships its own log and its node's boot output to its
//! own stream there, named by the node contract (`node_contract::logs`).
//!
//! The group is named after the stack ([`node_contract::logs::log_group_name`]
//! of `${AWS::StackName}` and the stack id's last part), so `synth logs`
//! finds it from the stack name alone, a stack created again under the same
//! name gets a group of its own, and it is retained when the stack is
//! deleted, rolled back or the group replaced: the lines that explain a
//! failed formation must outlive it.

use cfn::resources::logs;
use std::collections::BTreeMap;

use cfn::{Attributes, Expr, Handle, Pseudo, Template};
use node_contract::logs::LOG_GROUP_PREFIX;

use super::context::{Ctx, checkov_skip, sub_literal};

/// The group; its `Ref` is its name, its `Arn` attribute covers its streams.
pub(super) struct LogGroup {
    pub group: Handle<logs::LogGroup>,
}

pub(super) fn add(t: &mut Template, ctx: &Ctx) -> LogGroup {
    // "/deeplearning-cluster/${AWS::StackName}/${Run}": the contract's name
    // with the stack's name and run (the stack id's last part, its UUID) left
    // for CloudFormation to fill in.
    let name = group_name_sub();
    let run = Expr::Select(2, Box::new(Expr::Split("/".into(), Box::new(Pseudo::StackId.r#ref()))));
    let group = t.add_with(
        "NodeLogGroup",
        logs::LogGroup {
            log_group_name: Expr::SubWith(name, BTreeMap::from([("Run".to_owned(), run)])).into(),
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

/// The group's name for `Fn::Sub`, with `${Run}` for the stack id's last part.
fn group_name_sub() -> String {
    format!("{}${{AWS::StackName}}/${{Run}}", sub_literal(LOG_GROUP_PREFIX))
}

#[cfg(test)]
mod tests {
    use node_contract::logs::log_group_name;

    use super::*;

    /// The name CloudFormation makes of the template's is the contract's.
    #[test]
    fn the_group_is_named_as_the_contract_says() {
        let filled = group_name_sub().replace("${AWS::StackName}", "demo").replace("${Run}", "6f1c");
        assert_eq!(filled, log_group_name("demo", "6f1c"));
    }
}
