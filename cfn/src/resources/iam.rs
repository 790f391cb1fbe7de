//! `AWS::IAM::*`: the node role and its instance profile.

use serde::Serialize;
use serde_json::Value as Json;

use super::{Str, resource};
use crate::Tag;

/// `AWS::IAM::Role`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Role {
    /// What the role is for.
    pub description: Str,
    /// Who may assume it.
    pub assume_role_policy_document: Json,
    /// AWS managed policies attached.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub managed_policy_arns: Vec<Str>,
    /// Inline policies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<Policy>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(Role, "AWS::IAM::Role", ["Arn", "RoleId"]);

/// An inline policy.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Policy {
    /// Its name.
    pub policy_name: Str,
    /// The document (intrinsics allowed inside).
    pub policy_document: Json,
}

/// `AWS::IAM::InstanceProfile`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceProfile {
    /// The role (one).
    pub roles: Vec<Str>,
}
resource!(InstanceProfile, "AWS::IAM::InstanceProfile", ["Arn"]);
