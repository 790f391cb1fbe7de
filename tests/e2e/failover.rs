//! When AWS is short of an instance type: the local AWS says no as AWS
//! does (launcher patch (z), self-tested here), and `synth deploy --region
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

/// Launcher patch (z): a type with no capacity is skipped by an Auto
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

/// The status of stack `name` in `region` (`None`: there is none).
async fn stack_status_in(aws: &LocalAws, region: &'static str, name: &str) -> Option<String> {
    let config = aws_sdk_cloudformation::config::Builder::from(&aws.sdk_config())
        .region(aws_sdk_cloudformation::config::Region::from_static(region))
        .build();
    let cfn = aws_sdk_cloudformation::Client::from_conf(config);
    let out = cfn.describe_stacks().stack_name(name).send().await.ok()?;
    out.stacks().first()?.stack_status().map(|s| s.as_str().to_owned())
}

/// Waits until stack `stack` in `region` has its formation handle, and PUTs
/// the master's SUCCESS signal (with the counts synth reads) to it.
fn signal_formed(aws: &LocalAws, region: &str, stack: &str) -> e2e::Result<()> {
    let url = format!("{}/_waitcondition/123456789012/{region}/{stack}/FormationHandle", aws.endpoint());
    let data = r#"{"generation":1,"joined_workers":2,"min_workers":2,"nodes":3,"requested_workers":2}"#;
    let body = serde_json::json!({"Status": "SUCCESS", "Reason": "2 of 2 workers joined", "UniqueId": "i-master", "Data": data})
        .to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while ureq::put(&url).send(&body).is_err() {
        if std::time::Instant::now() > deadline {
            return Err(unexpected("the formation handle", format!("no stack {stack} in {region} to signal")));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(())
}

/// Issue item (b): the master's type has no capacity in the first region;
/// `synth deploy --region us-east-1,us-west-2` says so, deletes that
/// attempt and forms the cluster in the second, ending with a summary.
#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_without_capacity_in_the_first_region_forms_in_the_second() -> TestResult {
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    for region in ["us-east-1", "us-west-2"] {
        e2e::stack::ensure_image_parameter_in(&aws, region)?;
    }
    aws.insufficient_capacity("g4dn.xlarge", None, Some("us-east-1"))?;
    let dir = tempfile::tempdir().map_err(|e| unexpected("temp dir", e))?;
    let package = dir.path().join("deeplearning-agent_0.1.0-1_amd64.deb");
    std::fs::write(&package, e2e::synth_cli::placeholder_deb()).map_err(|e| unexpected("the package", e))?;
    let args = [
        "deploy",
        "blueprints/minimal.yaml",
        "--region",
        "us-east-1,us-west-2",
        "-p",
        "ImageId=/e2e/ami-id",
        "--yes",
        "--agent-package",
    ];
    let mut cmd = e2e::synth_cli::command(&aws, "deployer", &args);
    cmd.arg(&package).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| unexpected("synth deploy", e))?;
    let started = std::time::Instant::now();
    let signalled = signal_formed(&aws, "us-west-2", "minimal");
    if signalled.is_err() {
        let _ = child.kill();
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .map_err(|e| unexpected("synth deploy", e))?
        .map_err(|e| unexpected("synth deploy", e))?;
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- synth deploy --region us-east-1,us-west-2 ({:.0?}) ---\n{err}", started.elapsed());
    signalled?;
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "    Capacity us-east-1 has no capacity for this cluster: deleting the attempt, then trying us-west-2"
        ),
        "{err}"
    );
    assert!(err.contains("error: MasterInstance (AWS::EC2::Instance) create failed: We currently do not have sufficient g4dn.xlarge capacity"), "{err}");
    assert!(err.contains("Creating stack minimal in us-west-2"), "{err}");
    assert!(
        err.contains("     Summary 1. us-east-1: no capacity (We currently do not have sufficient g4dn.xlarge"),
        "{err}"
    );
    assert!(err.contains("             2. us-west-2: formed"), "{err}");
    assert_eq!(stack_status_in(&aws, "us-east-1", "minimal").await, None, "the first attempt is gone");
    assert_eq!(stack_status_in(&aws, "us-west-2", "minimal").await.as_deref(), Some("CREATE_COMPLETE"));
    Ok(())
}

/// Issue item (a): the first worker type has no capacity anywhere; Auto
/// Scaling launches the second (the prioritized override), the harness
/// boots those instances as nodes, and the cluster forms.
#[tokio::test(flavor = "multi_thread")]
async fn the_second_worker_type_launches_when_the_first_has_no_capacity_and_the_cluster_forms() -> TestResult {
    let blueprint = blueprint_file(
        "fallback-types",
        "name: fallback\nmaster:\n  instance_type: g4dn.xlarge\nworkers:\n  instance_types: [g5.xlarge, g4dn.xlarge]\n  count: 2\n",
    )?;
    let network = e2e::Network::create(3)?;
    let aws = LocalAws::start(network.host_ip().into())?;
    aws.insufficient_capacity("g5.xlarge", None, None)?;
    let stack = ClusterStack::create(&aws, &blueprint, "fallback", 2, &[]).await?;
    let workers = stack.worker_instance_ids(&aws).await?;
    assert_eq!(instance_types(&aws, &workers)?, ["g4dn.xlarge", "g4dn.xlarge"]);
    let cluster = e2e::Cluster::adopt(network, aws, stack).await?;
    let agents = cluster.spawn_agents()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let formed = |root: &std::path::Path| {
        let state = e2e::scenario::read(root, "/var/lib/deeplearning/state.json");
        serde_json::from_str::<serde_json::Value>(&state)
            .ok()
            .and_then(|v| v["manifest"]["nodes"].as_array().map(Vec::len))
            == Some(3)
    };
    while !cluster.nodes().iter().all(|n| formed(n.root())) {
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = agents.iter().map(|a| a.log()).collect();
            return Err(unexpected("every node to apply a 3-node manifest", logs.join("\n-----\n")).into());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let _ = std::fs::remove_file(&blueprint);
    Ok(())
}
