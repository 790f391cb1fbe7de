//! What every builder of the cluster template shares: the context ([`Ctx`]:
//! the spec, and how to tag a resource), and small helpers for the text
//! that goes into the template (`Fn::Sub` literals, ARNs in any partition,
//! checkov's accepted failures). Its own module, so that the builders read
//! it from a sibling, not from the module that calls them.

use cfn::{Expr, Tag};

use crate::spec::ClusterSpec;

/// The tag every resource carries, naming the cluster.
pub(super) const CLUSTER_TAG: &str = "deeplearning:cluster";

/// What every builder needs: the spec, and how to tag things.
pub(super) struct Ctx<'a> {
    pub(super) spec: &'a ClusterSpec,
}

impl Ctx<'_> {
    /// Tags for a resource: `Name` (`<cluster>-<what>`), the cluster tag, and the blueprint's tags.
    pub(super) fn tags(&self, what: &str) -> Vec<Tag> {
        let mut tags =
            vec![Tag::new("Name", format!("{}-{what}", self.spec.name)), Tag::new(CLUSTER_TAG, self.spec.name.clone())];
        tags.extend(self.spec.tags.iter().map(|(k, v)| Tag::new(k.clone(), v.clone())));
        tags
    }
}

/// Escapes a literal for use inside `Fn::Sub` text (`${` would start a reference).
pub(super) fn sub_literal(text: &str) -> String {
    text.replace("${", "${!")
}

/// Resource metadata that tells checkov a check is accepted as failing, and why.
/// The reason travels in the template, where a reviewer sees it.
pub(crate) fn checkov_skip(checks: &[(&str, &str)]) -> serde_json::Value {
    let skips: Vec<serde_json::Value> =
        checks.iter().map(|(id, why)| serde_json::json!({"id": id, "comment": why})).collect();
    serde_json::json!({"checkov": {"skip": skips}})
}

/// `arn:${AWS::Partition}:...`: an ARN that works in every partition.
pub(crate) fn arn(rest: &str) -> Expr {
    Expr::sub(format!("arn:${{AWS::Partition}}:{rest}"))
}
