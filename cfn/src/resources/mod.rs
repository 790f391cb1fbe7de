//! Serde structs for the resource types this project's templates use.
//!
//! Field names follow the CloudFormation resource reference
//! (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-template-resource-type-ref.html>);
//! only the properties the project sets are modelled. Empty lists and `None`
//! are left out of the JSON.

pub mod autoscaling;
pub mod cloudformation;
pub mod ec2;
pub mod efs;
pub mod fsx;
pub mod iam;
pub mod imagebuilder;
pub mod logs;
pub mod sqs;

/// A string property: a literal or an intrinsic.
pub type Str = crate::Value<String>;

/// Declares the [`crate::Resource`] facts of a properties struct.
macro_rules! resource {
    ($t:ty, $name:literal, [$($attr:literal),* $(,)?]) => {
        impl $crate::Resource for $t {
            const TYPE: &'static str = $name;
            const ATTRIBUTES: &'static [&'static str] = &[$($attr),*];
        }
    };
}
pub(crate) use resource;
