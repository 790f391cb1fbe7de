//! `AWS::Logs::LogGroup`

use serde::Serialize;

use super::{Str, resource};
use crate::Tag;

/// `AWS::Logs::LogGroup`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LogGroup {
    /// The group's name (`Ref` returns it).
    pub log_group_name: Str,
    /// Days the lines are kept: one of the values CloudWatch Logs allows.
    pub retention_in_days: u32,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(LogGroup, "AWS::Logs::LogGroup", ["Arn"]);
