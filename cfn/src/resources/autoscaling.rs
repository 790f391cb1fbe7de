//! `AWS::AutoScaling::AutoScalingGroup`, its lifecycle hooks, and scheduled actions.

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
    /// Capacity Reservations to launch into, first or only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_specification: Option<CapacityReservationSpecification>,
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
    /// `prioritized` (the overrides' order) or `lowest-price`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_demand_allocation_strategy: Option<Str>,
    /// On-demand instances before any spot.
    pub on_demand_base_capacity: u32,
    /// Percent on-demand above the base.
    pub on_demand_percentage_above_base_capacity: u32,
    /// For example `price-capacity-optimized` (Spot groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot_allocation_strategy: Option<Str>,
}

/// `LaunchTemplate` of a mixed instances policy.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MixedLaunchTemplate {
    /// The template.
    pub launch_template_specification: LaunchTemplateSpecification,
    /// The instance types, in priority order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<LaunchTemplateOverrides>,
}

/// `LaunchTemplateOverrides`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LaunchTemplateOverrides {
    /// An instance type instead of the launch template's.
    pub instance_type: Str,
}

/// `CapacityReservationSpecification` of a group.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CapacityReservationSpecification {
    /// `capacity-reservations-only`, `capacity-reservations-first`, `none` or `default`.
    pub capacity_reservation_preference: Str,
    /// The reservations and resource groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_target: Option<CapacityReservationTarget>,
}

/// `CapacityReservationTarget` of a group.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CapacityReservationTarget {
    /// Reservation ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_ids: Vec<Str>,
    /// Resource groups of reservations, by ARN.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_resource_group_arns: Vec<Str>,
}

/// `AWS::AutoScaling::ScheduledAction`: sizes a group at a time.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScheduledAction {
    /// The group.
    pub auto_scaling_group_name: Str,
    /// The desired capacity from then on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_capacity: Option<Str>,
    /// When, `YYYY-MM-DDThh:mm:ssZ` (UTC).
    pub start_time: Str,
}
resource!(ScheduledAction, "AWS::AutoScaling::ScheduledAction", []);

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
