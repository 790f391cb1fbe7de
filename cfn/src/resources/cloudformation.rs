//! `AWS::CloudFormation::WaitCondition` and its handle.

use serde::Serialize;

use super::{Str, resource};

/// `AWS::CloudFormation::WaitConditionHandle`: a presigned URL a node PUTs its signal to.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WaitConditionHandle {}
resource!(WaitConditionHandle, "AWS::CloudFormation::WaitConditionHandle", []);

/// `AWS::CloudFormation::WaitCondition`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct WaitCondition {
    /// The handle (`Ref` of a [`WaitConditionHandle`]).
    pub handle: Str,
    /// Seconds to wait, as a string.
    pub timeout: Str,
    /// Success signals needed.
    pub count: u32,
}
resource!(WaitCondition, "AWS::CloudFormation::WaitCondition", ["Data"]);
