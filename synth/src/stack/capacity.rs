//! Where the workers' capacity comes from, in the template: the worker
//! group's launch template or mixed instances policy (several instance
//! types, Spot), its Capacity Reservation preference and targets, and a
//! Capacity Block's window as scheduled actions. The block's market type is
//! in the worker launch template ([`super::compute`]); what a blueprint may
//! ask for was checked in `crate::blueprint` (its `capacity` checks).
//!
//! <https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-mixed-instances-groups.html>,
//! <https://docs.aws.amazon.com/autoscaling/ec2/userguide/use-capacity-reservations.html>,
//! <https://docs.aws.amazon.com/autoscaling/ec2/userguide/launch-template-capacity-blocks.html>

use cfn::resources::{autoscaling, ec2};
use cfn::{Expr, Handle, Template};

use super::parameters::Inputs;
use crate::spec::{CapacityBlock, WorkerCapacity, WorkerSpec};

/// The group's launch template, or its mixed instances policy: Spot, or
/// several instance types (On-Demand in the blueprint's order).
pub(super) fn launch_and_mix(
    workers: &WorkerSpec,
    inputs: &Inputs,
    lt: ec2::LaunchTemplateSpecification,
) -> (Option<ec2::LaunchTemplateSpecification>, Option<autoscaling::MixedInstancesPolicy>) {
    // The first type is the console's parameter, so the form still changes it.
    let overrides: Vec<autoscaling::LaunchTemplateOverrides> = if workers.fallback_types.is_empty() {
        Vec::new()
    } else {
        std::iter::once(inputs.worker_type.r#ref())
            .chain(workers.fallback_types.iter().map(|t| Expr::from(t.as_str())))
            .map(|t| autoscaling::LaunchTemplateOverrides { instance_type: t.into() })
            .collect()
    };
    let distribution = if workers.spot() {
        autoscaling::InstancesDistribution {
            on_demand_allocation_strategy: None,
            on_demand_base_capacity: 0,
            on_demand_percentage_above_base_capacity: 0,
            // Fewer interruptions than lowest-price, at a price close to it:
            // https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html
            spot_allocation_strategy: Some("price-capacity-optimized".into()),
        }
    } else if !overrides.is_empty() {
        autoscaling::InstancesDistribution {
            // The first type Auto Scaling has capacity for, in the
            // blueprint's order (reservations first, when there are some).
            on_demand_allocation_strategy: Some("prioritized".into()),
            on_demand_base_capacity: 0,
            on_demand_percentage_above_base_capacity: 100,
            spot_allocation_strategy: None,
        }
    } else {
        return (Some(lt), None);
    };
    let mixed = autoscaling::MixedInstancesPolicy {
        instances_distribution: distribution,
        launch_template: autoscaling::MixedLaunchTemplate { launch_template_specification: lt, overrides },
    };
    (None, Some(mixed))
}

/// The group's Capacity Reservation preference and targets (On-Demand
/// Capacity Reservations; a Capacity Block goes through its launch template).
pub(super) fn reservations(capacity: &WorkerCapacity) -> Option<autoscaling::CapacityReservationSpecification> {
    let WorkerCapacity::Reserved { ids, groups, then_on_demand } = capacity else { return None };
    Some(autoscaling::CapacityReservationSpecification {
        capacity_reservation_preference: if *then_on_demand {
            "capacity-reservations-first"
        } else {
            "capacity-reservations-only"
        }
        .into(),
        capacity_reservation_target: Some(autoscaling::CapacityReservationTarget {
            capacity_reservation_ids: ids.iter().map(|id| id.as_str().into()).collect(),
            capacity_reservation_resource_group_arns: groups.iter().map(|arn| arn.as_str().into()).collect(),
        }),
    })
}

/// A Capacity Block's window: the group goes to the requested count at the
/// block's start (when it starts after the build) and to 0 forty minutes
/// before its end, ten minutes before EC2 reclaims the instances, so the
/// terminating lifecycle hook lets every worker leave cleanly.
pub(super) fn block_window(
    t: &mut Template,
    block: &CapacityBlock,
    group: &Handle<autoscaling::AutoScalingGroup>,
    inputs: &Inputs,
) {
    if let Some(start) = block.start_unix {
        t.add(
            "CapacityBlockStart",
            autoscaling::ScheduledAction {
                auto_scaling_group_name: group.r#ref().into(),
                desired_capacity: Some(inputs.worker_count.r#ref().into()),
                start_time: node_contract::interruption::format_utc(start).into(),
            },
        );
    }
    t.add(
        "CapacityBlockEnd",
        autoscaling::ScheduledAction {
            auto_scaling_group_name: group.r#ref().into(),
            desired_capacity: Some("0".into()),
            start_time: node_contract::interruption::format_utc(block.scale_in_unix()).into(),
        },
    );
}
