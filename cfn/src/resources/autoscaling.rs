//! `AWS::AutoScaling::AutoScalingGroup` and its lifecycle hooks.

use serde::Serialize;

use super::ec2::LaunchTemplateSpecification;
use super::{Str, resource};

/// `AWS::AutoScaling::AutoScalingGroup`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AutoScalingGroup {
    /// Smallest size (a string in CloudFormation).
    pub min_size: Str,
    /// Largest size.
    pub max_size: Str,
    /// Size wanted now.
    pub desired_capacity: Str,
    /// The launch template (on-demand groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplateSpecification>,
    /// Spot and on-demand mix (spot groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mixed_instances_policy: Option<MixedInstancesPolicy>,
    /// Subnets to launch into.
    #[serde(rename = "VPCZoneIdentifier")]
    pub vpc_zone_identifier: Vec<Str>,
    /// A cluster placement group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<Str>,
    /// Hooks that tell someone about launches and terminations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lifecycle_hook_specification_list: Vec<LifecycleHookSpecification>,
    /// `EC2` or `ELB`.
    pub health_check_type: Str,
    /// Tags, copied to instances when `propagate_at_launch`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<AsgTag>,
}
resource!(AutoScalingGroup, "AWS::AutoScaling::AutoScalingGroup", []);

/// A group tag.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AsgTag {
    /// Key.
    pub key: String,
    /// Value.
    pub value: Str,
    /// Copied onto launched instances.
    pub propagate_at_launch: bool,
}

/// `MixedInstancesPolicy`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MixedInstancesPolicy {
    /// How much is spot.
    pub instances_distribution: InstancesDistribution,
    /// The launch template.
    pub launch_template: MixedLaunchTemplate,
}

/// `InstancesDistribution`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstancesDistribution {
    /// On-demand instances before any spot.
    pub on_demand_base_capacity: u32,
    /// Percent on-demand above the base.
    pub on_demand_percentage_above_base_capacity: u32,
    /// For example `price-capacity-optimized`.
    pub spot_allocation_strategy: Str,
}

/// `LaunchTemplate` of a mixed instances policy.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MixedLaunchTemplate {
    /// The template.
    pub launch_template_specification: LaunchTemplateSpecification,
}

/// `LifecycleHookSpecification`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LifecycleHookSpecification {
    /// Its name.
    pub lifecycle_hook_name: Str,
    /// `autoscaling:EC2_INSTANCE_LAUNCHING` or `autoscaling:EC2_INSTANCE_TERMINATING`.
    pub lifecycle_transition: Str,
    /// Where notifications go (an SQS queue ARN).
    #[serde(rename = "NotificationTargetARN")]
    pub notification_target_arn: Str,
    /// The role Auto Scaling assumes to publish there.
    #[serde(rename = "RoleARN")]
    pub role_arn: Str,
    /// Seconds before the default result applies.
    pub heartbeat_timeout: u32,
    /// `CONTINUE` or `ABANDON`.
    pub default_result: Str,
}
