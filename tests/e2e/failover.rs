//! When AWS is short of an instance type: the local AWS says no as AWS
//! does (launcher patch (y), self-tested here), and `synth deploy --region
//! a,b` deletes the attempt that met no capacity and creates the stack in
//! the next region.

use aws_sdk_cloudformation::types::StackStatus;
use e2e::moto::REGION;
use e2e::stack::xml_text;
use e2e::{ClusterStack, Error, LocalAws, TestResult};
use std::net::Ipv4Addr;

fn unexpected(what: &str, detail: impl std::fmt::Debug) -> Error {
    Error::Unexpected { what: what.into(), detail: format!("{detail:?}") }
}

/// A blueprint whose workers are p4d.24xlarge, then p3.16xlarge when EC2
/// has no p4d (a prioritized mixed instances policy); the master is a
/// p3.2xlarge.
const TWO_TYPES: &str = "name: shortage
master:
  instance_type: p3.2xlarge
workers:
  instance_types: [p4d.24xlarge, p3.16xlarge]
  count: 2
network:
  efa: off
";

fn blueprint_file(name: &str, text: &str) -> e2e::Result<String> {
    let path = std::env::temp_dir().join(format!("failover-{}-{name}.yaml", std::process::id()));
    std::fs::write(&path, text).map_err(|e| unexpected("writing the blueprint", e))?;
    Ok(path.display().to_string())
}

/// The instance types of `ids`, from DescribeInstances.
fn instance_types(aws: &LocalAws, ids: &[String]) -> e2e::Result<Vec<String>> {
    let mut out = Vec::new();
    for id in ids {
        let xml = aws.query(
            "ec2",
            &[("Action", "DescribeInstances"), ("Version", "2016-11-15"), ("InstanceId.1", id.as_str())],
        )?;
        out.push(xml_text(&xml, "instanceType").ok_or_else(|| unexpected("DescribeInstances", &xml))?);
    }
    Ok(out)
}

async fn failed_activities(aws: &LocalAws, group: &str) -> e2e::Result<Vec<String>> {
    let activities = aws
        .autoscaling()
        .describe_scaling_activities()
        .auto_scaling_group_name(group)
        .send()
        .await
        .map_err(|e| Error::aws("DescribeScalingActivities", &e))?;
    Ok(activities
        .activities()
        .iter()
        .filter(|a| a.status_code().map(|c| c.as_str()) == Some("Failed"))
        .map(|a| a.status_message().unwrap_or_default().to_owned())
        .collect())
}

/// Launcher patch (y): a type with no capacity is skipped by an Auto
/// Scaling launch (the next override launches); with none of its types
/// the group launches nothing and records a failed activity in AWS's
/// words; a stack's instance of such a type fails the stack with EC2's
/// message and code; RunInstances is refused with
/// InsufficientInstanceCapacity; a reset forgets it all.
#[tokio::test(flavor = "multi_thread")]
async fn moto_says_no_capacity_as_aws_does() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let blueprint = blueprint_file("two-types", TWO_TYPES)?;

    // No p4d anywhere: the group launches its second type.
    aws.insufficient_capacity("p4d.24xlarge", None, None)?;
    let stack = ClusterStack::create(&aws, &blueprint, "fallback", 2, &[]).await?;
    let workers = stack.worker_instance_ids(&aws).await?;
    assert_eq!(instance_types(&aws, &workers)?, ["p3.16xlarge", "p3.16xlarge"]);
    assert_eq!(failed_activities(&aws, stack.worker_group()?).await?, Vec::<String>::new());

    // No p3.16xlarge in us-east-1a either: the group launches it in its other zone.
    aws.insufficient_capacity("p3.16xlarge", Some("us-east-1a"), Some(REGION))?;
    let stack = ClusterStack::create(&aws, &blueprint, "elsewhere", 2, &[]).await?;
    let workers = stack.worker_instance_ids(&aws).await?;
    assert_eq!(instance_types(&aws, &workers)?, ["p3.16xlarge", "p3.16xlarge"]);
    for id in &workers {
        let xml = aws.query(
            "ec2",
            &[("Action", "DescribeInstances"), ("Version", "2016-11-15"), ("InstanceId.1", id.as_str())],
        )?;
        assert_ne!(xml_text(&xml, "availabilityZone").as_deref(), Some("us-east-1a"), "{xml}");
    }

    // Neither type in any zone: nothing launches, and the group says why,
    // as Auto Scaling does.
    aws.insufficient_capacity("p3.16xlarge", None, Some(REGION))?;
    let stack = ClusterStack::create(&aws, &blueprint, "starved", 2, &[]).await?;
    assert!(stack.worker_instance_ids(&aws).await?.is_empty());
    let failed = failed_activities(&aws, stack.worker_group()?).await?;
    let first = failed.first().ok_or_else(|| unexpected("failed activities", &failed))?;
    assert!(first.starts_with("We currently do not have sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1"), "{first}");
    assert!(
        first.ends_with(
            "Our system will be working on provisioning additional capacity. Launching EC2 instance failed."
        ),
        "{first}"
    );

    // No master type in its zone: the instance fails with EC2's words
    // (and where there is some), and the stack rolls back.
    aws.insufficient_capacity("p3.2xlarge", Some("us-east-1a"), None)?;
    let failed = ClusterStack::create(&aws, &blueprint, "no-master", 2, &[]).await;
    assert!(failed.is_err(), "the stack formed without a master: {failed:?}");
    let events = aws
        .cloudformation()
        .describe_stack_events()
        .stack_name("no-master")
        .send()
        .await
        .map_err(|e| Error::aws("DescribeStackEvents", &e))?;
    let reason = events
        .stack_events()
        .iter()
        .find(|e| e.logical_resource_id() == Some("MasterInstance") && e.resource_status_reason().is_some())
        .and_then(|e| e.resource_status_reason())
        .ok_or_else(|| unexpected("MasterInstance's events", events.stack_events()))?;
    assert!(
        reason.starts_with(
            "We currently do not have sufficient p3.2xlarge capacity in the Availability Zone you requested \
             (us-east-1a). Our system will be working on provisioning additional capacity. You can currently get \
             p3.2xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1b, "
        ),
        "{reason}"
    );
    assert!(reason.contains("Error Code: InsufficientInstanceCapacity;"), "{reason}");
    let stacks = aws
        .cloudformation()
        .describe_stacks()
        .stack_name("no-master")
        .send()
        .await
        .map_err(|e| Error::aws("DescribeStacks", &e))?;
    assert_eq!(stacks.stacks().first().and_then(|s| s.stack_status()), Some(&StackStatus::RollbackComplete));

    // RunInstances of it: EC2's error code.
    let images = aws.query("ec2", &[("Action", "DescribeImages"), ("Version", "2016-11-15")])?;
    let image = xml_text(&images, "imageId").ok_or_else(|| unexpected("DescribeImages", &images))?;
    let run = [
        ("Action", "RunInstances"),
        ("Version", "2016-11-15"),
        ("ImageId", image.as_str()),
        ("InstanceType", "p3.16xlarge"),
        ("MinCount", "1"),
        ("MaxCount", "1"),
    ];
    let refused = aws.query("ec2", &run);
    let detail = format!("{refused:?}");
    assert!(detail.contains("InsufficientInstanceCapacity"), "{detail}");
    // A reset forgets the shortages.
    aws.reset()?;
    aws.query("ec2", &run)?;
    let _ = std::fs::remove_file(&blueprint);
    Ok(())
}
