//! [`WorkerGroup`] on the workers' Auto Scaling group.
//!
//! Lifecycle actions: <https://docs.aws.amazon.com/autoscaling/ec2/userguide/completing-lifecycle-hooks.html>;
//! launch failures are read from the group's scaling activities
//! (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-verify-scaling-activity.html>),
//! whose status messages carry the reason (for example "We currently do not
//! have sufficient p5.48xlarge capacity in the Availability Zone you requested").

use aws_sdk_autoscaling::types::{Activity, AutoScalingGroup, ScalingActivityStatusCode, Tag};

use super::error::SdkResult;
use crate::ports::{GroupSize, LifecycleResult, PortError, WorkerGroup};

/// How many recent scaling activities [`WorkerGroup::launch_failures`] reads (one page, the API's maximum).
const ACTIVITIES_READ: i32 = 100;

/// The workers' Auto Scaling group, by name.
#[derive(Clone, Debug)]
pub struct AsgWorkerGroup {
    /// The Auto Scaling client.
    pub client: aws_sdk_autoscaling::Client,
    /// The group's name.
    pub name: String,
}

impl AsgWorkerGroup {
    /// The group called `name`.
    pub fn new(client: aws_sdk_autoscaling::Client, name: impl Into<String>) -> Self {
        Self { client, name: name.into() }
    }
}

impl AsgWorkerGroup {
    /// `DescribeAutoScalingGroups` of this group.
    async fn describe(&self) -> Result<AutoScalingGroup, PortError> {
        let output = self
            .client
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(&self.name)
            .send()
            .await
            .or_port_error(|| format!("Auto Scaling DescribeAutoScalingGroups on group {}", self.name))?;
        output.auto_scaling_groups().first().cloned().ok_or_else(|| {
            PortError::Permanent(format!("Auto Scaling DescribeAutoScalingGroups: no group named {}", self.name))
        })
    }
}

impl WorkerGroup for AsgWorkerGroup {
    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn size(&self) -> Result<GroupSize, PortError> {
        let group = self.describe().await?;
        group_size(&group).map_err(|e| PortError::Permanent(format!("the worker group {}: {e}", self.name)))
    }

    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn set_desired_capacity(&self, capacity: u32) -> Result<(), PortError> {
        self.client
            .set_desired_capacity()
            .auto_scaling_group_name(&self.name)
            .desired_capacity(i32::try_from(capacity).unwrap_or(i32::MAX))
            // Lowering capacity to what launched must not wait out a cooldown.
            .honor_cooldown(false)
            .send()
            .await
            .or_port_error(|| format!("Auto Scaling SetDesiredCapacity on group {}", self.name))?;
        Ok(())
    }

    #[tracing::instrument(skip(self, token), fields(group = %self.name))]
    async fn complete_lifecycle_action(
        &self,
        hook: &str,
        token: &str,
        instance_id: &str,
        result: LifecycleResult,
    ) -> Result<(), PortError> {
        let result = match result {
            LifecycleResult::Continue => "CONTINUE",
        };
        self.client
            .complete_lifecycle_action()
            .auto_scaling_group_name(&self.name)
            .lifecycle_hook_name(hook)
            .lifecycle_action_token(token)
            .instance_id(instance_id)
            .lifecycle_action_result(result)
            .send()
            .await
            .or_port_error(|| {
                format!("Auto Scaling CompleteLifecycleAction ({hook}, {instance_id}) on group {}", self.name)
            })?;
        Ok(())
    }

    /// <https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_TerminateInstanceInAutoScalingGroup.html>:
    /// with `ShouldDecrementDesiredCapacity` false the group launches a replacement.
    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn terminate_instance(&self, instance_id: &str) -> Result<(), PortError> {
        self.client
            .terminate_instance_in_auto_scaling_group()
            .instance_id(instance_id)
            .should_decrement_desired_capacity(false)
            .send()
            .await
            .or_port_error(|| format!("Auto Scaling TerminateInstanceInAutoScalingGroup ({instance_id})"))?;
        Ok(())
    }

    /// <https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_SetInstanceHealth.html>:
    /// `Unhealthy`, without respecting the health check grace period (the
    /// node's own gate found the fault), so the group replaces it at once.
    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn set_unhealthy(&self, instance_id: &str) -> Result<(), PortError> {
        self.client
            .set_instance_health()
            .instance_id(instance_id)
            .health_status("Unhealthy")
            .should_respect_grace_period(false)
            .send()
            .await
            .or_port_error(|| format!("Auto Scaling SetInstanceHealth ({instance_id}, Unhealthy)"))?;
        Ok(())
    }

    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn launch_failures(&self) -> Result<Vec<String>, PortError> {
        let output = self
            .client
            .describe_scaling_activities()
            .auto_scaling_group_name(&self.name)
            .max_records(ACTIVITIES_READ)
            .send()
            .await
            .or_port_error(|| format!("Auto Scaling DescribeScalingActivities on group {}", self.name))?;
        Ok(failure_messages(output.activities()))
    }

    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn instances(&self) -> Result<Vec<String>, PortError> {
        let group = self.describe().await?;
        Ok(group.instances().iter().filter_map(|i| i.instance_id().map(str::to_string)).collect())
    }

    /// <https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateOrUpdateTags.html>
    #[tracing::instrument(skip(self), fields(group = %self.name))]
    async fn set_tag(&self, key: &str, value: &str) -> Result<(), PortError> {
        let tag = Tag::builder()
            .resource_id(&self.name)
            .resource_type("auto-scaling-group")
            .key(key)
            .value(value)
            .propagate_at_launch(false)
            .build();
        self.client
            .create_or_update_tags()
            .tags(tag)
            .send()
            .await
            .or_port_error(|| format!("Auto Scaling CreateOrUpdateTags ({key}) on group {}", self.name))?;
        Ok(())
    }
}

/// The workers requested (desired capacity) and the minimum (the
/// [`node_contract::MIN_WORKERS_TAG`] tag) of a described group.
pub fn group_size(group: &AutoScalingGroup) -> Result<GroupSize, String> {
    let requested = group.desired_capacity().ok_or("it has no desired capacity")?;
    let requested = u32::try_from(requested).map_err(|_| format!("its desired capacity is {requested}"))?;
    let tag = node_contract::MIN_WORKERS_TAG;
    let value = group
        .tags()
        .iter()
        .find(|t| t.key() == Some(tag))
        .and_then(|t| t.value())
        .ok_or_else(|| format!("it has no tag {tag} (was it made by a synth template of this version?)"))?;
    let min = value.trim().parse().map_err(|_| format!("its tag {tag} is {value:?}, not a whole number"))?;
    Ok(GroupSize { requested, min })
}

/// The messages of failed and cancelled activities, newest first, each once.
pub fn failure_messages(activities: &[Activity]) -> Vec<String> {
    let mut failed: Vec<&Activity> = activities
        .iter()
        .filter(|a| {
            matches!(a.status_code(), Some(ScalingActivityStatusCode::Failed | ScalingActivityStatusCode::Cancelled))
        })
        .collect();
    // The API lists newest first already; sorting keeps that true whatever the order.
    // The sort is stable, so activities without a start time keep their place relative to each other.
    failed.sort_by(|a, b| b.start_time().map(|t| t.as_nanos()).cmp(&a.start_time().map(|t| t.as_nanos())));
    let mut messages: Vec<String> = Vec::new();
    for activity in failed {
        let message = activity
            .status_message()
            .filter(|m| !m.trim().is_empty())
            .or(activity.description())
            .map(str::trim)
            .filter(|m| !m.is_empty());
        if let Some(message) = message
            && !messages.iter().any(|seen| seen == message)
        {
            messages.push(message.to_owned());
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::test_server::{Reply, TestServer, form_fields, query_error, sdk_config};
    use aws_sdk_autoscaling::primitives::DateTime;

    fn group_at(endpoint: &str) -> AsgWorkerGroup {
        AsgWorkerGroup::new(aws_sdk_autoscaling::Client::new(&sdk_config(endpoint)), "workers")
    }

    // moto does not implement CompleteLifecycleAction, so the request is checked here.
    #[tokio::test]
    async fn completes_lifecycle_actions_with_continue() {
        let server = TestServer::start(|_| {
            Reply::new(200, "<CompleteLifecycleActionResponse><CompleteLifecycleActionResult/><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></CompleteLifecycleActionResponse>")
                .header("content-type", "text/xml")
        });
        let token = "bcd2f1b8-9a78-44d3-8a7a-4dd07d7cf635";
        group_at(&server.url())
            .complete_lifecycle_action("workers-terminating", token, "i-0abc", LifecycleResult::Continue)
            .await
            .unwrap();
        let fields = form_fields(&server.requests()[0].body);
        assert_eq!(fields["Action"], "CompleteLifecycleAction");
        assert_eq!(fields["AutoScalingGroupName"], "workers");
        assert_eq!(fields["LifecycleHookName"], "workers-terminating");
        assert_eq!(fields["LifecycleActionToken"], token);
        assert_eq!(fields["InstanceId"], "i-0abc");
        assert_eq!(fields["LifecycleActionResult"], "CONTINUE");
    }

    #[tokio::test]
    async fn set_desired_capacity_ignores_the_cooldown() {
        let server = TestServer::start(|_| {
            Reply::new(200, "<SetDesiredCapacityResponse><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></SetDesiredCapacityResponse>")
                .header("content-type", "text/xml")
        });
        group_at(&server.url()).set_desired_capacity(3).await.unwrap();
        let fields = form_fields(&server.requests()[0].body);
        assert_eq!(fields["Action"], "SetDesiredCapacity");
        assert_eq!(fields["DesiredCapacity"], "3");
        assert_eq!(fields["HonorCooldown"], "false");
    }

    // moto answers 500 for a group that does not exist; AWS answers ValidationError.
    #[tokio::test]
    async fn missing_group_is_permanent() {
        let server =
            TestServer::start(|_| query_error(400, "ValidationError", "AutoScalingGroup name not found - null"));
        let err = group_at(&server.url()).set_desired_capacity(1).await.unwrap_err();
        assert!(
            matches!(&err, PortError::Permanent(m) if m.contains("ValidationError") && m.contains("workers")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn throttled_is_transient() {
        let server = TestServer::start(|_| query_error(400, "Throttling", "Rate exceeded"));
        let err = group_at(&server.url()).launch_failures().await.unwrap_err();
        assert!(matches!(&err, PortError::Transient(m) if m.contains("Throttling: Rate exceeded")), "{err:?}");
    }

    fn activity(secs: i64, status: ScalingActivityStatusCode, message: Option<&str>, description: &str) -> Activity {
        Activity::builder()
            .activity_id(format!("a{secs}"))
            .auto_scaling_group_name("workers")
            .cause("test")
            .start_time(DateTime::from_secs(secs))
            .status_code(status)
            .set_status_message(message.map(str::to_owned))
            .description(description)
            .build()
    }

    #[test]
    fn keeps_failed_and_cancelled_newest_first_once_each() {
        use ScalingActivityStatusCode as S;
        let capacity = "We currently do not have sufficient p5.48xlarge capacity in us-east-1a.";
        let activities = vec![
            activity(10, S::Failed, Some(capacity), "Launching a new EC2 instance. Status Reason: ..."),
            activity(30, S::Successful, None, "Launching a new EC2 instance: i-1"),
            activity(20, S::Cancelled, Some("Cancelled by the user"), "Launching"),
            activity(40, S::Failed, Some(capacity), "Launching"),
            activity(50, S::InProgress, None, "Launching"),
            activity(5, S::Failed, None, "Launching a new EC2 instance. Status Reason: InvalidKeyPair.NotFound"),
            activity(6, S::Failed, Some("  "), "Launching failed: no subnet"),
        ];
        assert_eq!(
            failure_messages(&activities),
            vec![
                capacity.to_owned(),
                "Cancelled by the user".to_owned(),
                "Launching failed: no subnet".to_owned(),
                "Launching a new EC2 instance. Status Reason: InvalidKeyPair.NotFound".to_owned(),
            ]
        );
    }

    fn described(desired: Option<i32>, min_tag: Option<&str>) -> AutoScalingGroup {
        use aws_sdk_autoscaling::types::TagDescription;
        let mut group = AutoScalingGroup::builder().auto_scaling_group_name("workers").set_desired_capacity(desired);
        group = group.tags(TagDescription::builder().key("Name").value("demo-worker").build());
        if let Some(v) = min_tag {
            group = group.tags(TagDescription::builder().key(node_contract::MIN_WORKERS_TAG).value(v).build());
        }
        group.build()
    }

    #[test]
    fn the_size_is_the_desired_capacity_and_the_minimum_tag() {
        assert_eq!(group_size(&described(Some(4), Some("2"))), Ok(GroupSize { requested: 4, min: 2 }));
        assert_eq!(group_size(&described(Some(0), Some("0"))), Ok(GroupSize { requested: 0, min: 0 }));
        let missing = group_size(&described(Some(4), None)).unwrap_err();
        assert!(missing.contains(node_contract::MIN_WORKERS_TAG), "{missing}");
        let bad = group_size(&described(Some(4), Some("two"))).unwrap_err();
        assert!(bad.contains("\"two\""), "{bad}");
        assert!(group_size(&described(None, Some("1"))).unwrap_err().contains("desired capacity"));
        assert!(group_size(&described(Some(-1), Some("1"))).is_err());
    }

    #[test]
    fn healthy_group_has_no_failures() {
        let activities =
            vec![activity(1, ScalingActivityStatusCode::Successful, Some("ok"), "Launching a new EC2 instance")];
        assert!(failure_messages(&activities).is_empty());
        assert!(failure_messages(&[]).is_empty());
    }
}
