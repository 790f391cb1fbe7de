//! The capacity check against the local AWS, with IAM enforced: `synth
//! capacity` and `synth deploy`'s check before it creates anything, run as
//! a deploying user whose only permissions are what `synth policy` prints
//! (moto evaluates each of the check's reads: EC2
//! `DescribeInstanceTypeOfferings`, `DescribeInstanceTypes`,
//! `DescribeCapacityReservations` and Service Quotas `GetServiceQuota`).
//! The quotas and reservations are set up through the launcher (patches
//! (v) and (w) of tests/moto/README.md).
//!
//! Needs `cargo build -p synth` (or `SYNTH_BIN`) and moto in `.venv`.

use std::net::Ipv4Addr;
use std::process::Command;

use e2e::moto::LocalAws;
use e2e::synth_cli::{bin as synth_bin, command_as as synth_as};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The P family's On-Demand vCPU quota.
const P_ON_DEMAND: &str = "L-417A185B";

/// Runs a command; (exit code, stdout, stderr).
fn run(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().expect("synth runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The policy documents `synth policy --part <part>` prints for us-east-1.
fn policy(part: &str) -> serde_json::Value {
    let out = Command::new(synth_bin())
        .args(["policy", "--part", part, "--region", "us-east-1"])
        .output()
        .expect("synth policy runs");
    assert!(out.status.success(), "synth policy: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("synth policy prints JSON")
}

/// A user with exactly `synth policy --part calls`.
fn deployer(aws: &LocalAws, name: &str) -> Result<(String, String), Box<dyn std::error::Error>> {
    Ok(aws.user_with_policies(name, &[policy("calls")])?)
}

/// Whether the stack exists in moto (asked as the administrator).
fn stack_exists(aws: &LocalAws, name: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(async { aws.cloudformation().describe_stacks().stack_name(name).send().await.is_ok() })
}

/// How many calls of `action` user `user` made.
fn calls(aws: &LocalAws, user: &str, action: &str) -> usize {
    let calls = aws.calls().expect("the launcher lists its calls");
    calls.iter().filter(|c| c["principal"] == format!("user/{user}") && c["action"] == action).count()
}

/// reserved-gpus.yaml (p3.2xlarge master, p4d.24xlarge then p3.16xlarge
/// workers, count 4, max 8, its reservation then On-Demand) with its
/// reservation there: 2 p4d.24xlarge free.
fn reservation_of_the_example(aws: &LocalAws) -> Result<(), Box<dyn std::error::Error>> {
    aws.add_capacity_reservation(&serde_json::json!({
        "CapacityReservationId": "cr-0123456789abcdef0",
        "InstanceType": "p4d.24xlarge",
        "AvailabilityZone": "us-east-1a",
        "TotalInstanceCount": 2,
    }))?;
    Ok(())
}

/// `synth capacity` on a GPU blueprint: P's quota at 0 blocks (exit 1,
/// the table names the quota), a quota big enough fits (exit 0); every read
/// allowed by `synth policy --part calls`.
#[test]
fn capacity_blocks_on_a_p_quota_of_0_and_fits_once_it_is_raised() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    reservation_of_the_example(&aws)?;
    let key = deployer(&aws, "capacity-checker")?;
    let check = || synth_as(&aws, &key, &["capacity", "blueprints/reserved-gpus.yaml", "--region", "us-east-1"]);

    aws.set_ec2_quota(P_ON_DEMAND, 0.0)?;
    let (code, out, err) = run(check());
    assert_eq!(code, 1, "{out}\n{err}");
    let row = out.lines().find(|l| l.starts_with(P_ON_DEMAND)).unwrap_or_else(|| panic!("no quota row:\n{out}"));
    // The master (8) and the 2 workers beyond the reservation's 2 (96 each).
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(row.contains("Running On-Demand P instances") && row.ends_with("blocked"), "{row}");
    assert_eq!(cells[cells.len() - 4..], ["0", "200", "584", "blocked"], "{row}");
    assert!(out.contains("--quota-code L-417A185B --desired-value 584 --region us-east-1"), "{out}");
    assert!(out.lines().last().is_some_and(|l| l.starts_with("verdict: blocked in us-east-1")), "{out}");
    assert!(out.contains("cr-0123456789abcdef0  reservation  p4d.24xlarge  us-east-1a  active  2 of 2"), "{out}");

    aws.set_ec2_quota(P_ON_DEMAND, 1024.0)?;
    let (code, out, err) = run(check());
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out.lines().last(), Some("verdict: the cluster fits in us-east-1"), "{out}");
    let mut json = check();
    json.arg("--json");
    let (code, out, err) = run(json);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(report["fits"], true, "{out}");
    assert_eq!(report["regions"][0]["quotas"][0]["code"], P_ON_DEMAND, "{out}");
    assert_eq!(report["regions"][0]["types"][2]["zones"].as_array().map(Vec::len), Some(5), "{out}");
    assert!(aws.refused().is_empty(), "the policy allowed every read: {:?}", aws.refused());
    for action in
        ["DescribeInstanceTypeOfferings", "DescribeInstanceTypes", "DescribeCapacityReservations", "GetServiceQuota"]
    {
        assert!(calls(&aws, "capacity-checker", action) > 0, "no {action} call");
    }
    Ok(())
}

/// `synth deploy` with P's quota at 0 is refused before anything exists:
/// no staging bucket, no stack; the error names the quota, its value, what
/// is needed and how to raise it. A user whose policy lacks the Service
/// Quotas read is warned in one line and the deploy goes on.
#[test]
fn deploy_with_a_p_quota_of_0_is_refused_before_any_stack_exists() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    e2e::stack::ensure_image_parameter(&aws)?;
    reservation_of_the_example(&aws)?;
    aws.set_ec2_quota(P_ON_DEMAND, 0.0)?;
    let key = deployer(&aws, "gpu-deployer")?;
    let args =
        ["deploy", "blueprints/reserved-gpus.yaml", "--region", "us-east-1", "-p", "ImageId=/e2e/ami-id", "--yes"];
    let (code, out, err) = run(synth_as(&aws, &key, &args));
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 2, "{err}");
    assert!(
        errors[0].starts_with(
            "error: quota Running On-Demand P instances (L-417A185B) is 0 vCPUs in us-east-1, but the cluster needs \
             200 at 4 workers (584 at 8)"
        ),
        "{err}"
    );
    assert!(
        errors[0].contains(
            "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-417A185B \
             --desired-value 584 --region us-east-1"
        ),
        "{err}"
    );
    assert!(errors[1].starts_with("error: refused before anything was created: us-east-1: blocked"), "{err}");
    assert!(!stack_exists(&aws, "reserved-training"), "no stack was created");
    for action in ["CreateStack", "CreateChangeSet", "CreateBucket", "PutObject"] {
        assert_eq!(calls(&aws, "gpu-deployer", action), 0, "{action} was called:\n{err}");
    }
    assert!(aws.refused().is_empty(), "{:?}", aws.refused());

    // Without servicequotas:GetServiceQuota: one warning, and the deploy
    // goes on (minimal.yaml: its agent package staged, its stack created).
    let mut calls_policy = policy("calls");
    for statement in calls_policy["Statement"].as_array_mut().into_iter().flatten() {
        if let Some(actions) = statement["Action"].as_array_mut() {
            actions.retain(|a| a != "servicequotas:GetServiceQuota");
        }
    }
    let narrow = aws.user_with_policies("no-quota-reader", &[calls_policy, policy("resources")])?;
    let dir = tempfile::tempdir()?;
    let package = dir.path().join("deeplearning-agent_0.1.0-1_amd64.deb");
    std::fs::write(&package, e2e::synth_cli::placeholder_deb())?;
    let mut deploy = synth_as(&aws, &narrow, &["deploy", "blueprints/minimal.yaml", "--region", "us-east-1"]);
    deploy.args(["-p", "ImageId=/e2e/ami-id", "--yes", "--agent-package"]).arg(&package);
    let (code, _, err) = run(deploy);
    let warnings: Vec<&str> =
        err.lines().filter(|l| l.starts_with("warning: the capacity check did not run")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("servicequotas:GetServiceQuota"), "{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stack_exists(&aws, "minimal"), "the deploy went on: {err}");
    Ok(())
}

/// A Capacity Block in another zone than the blueprint's is refused by
/// `synth capacity` and by `synth deploy`, naming both zones.
#[test]
fn a_capacity_block_in_another_zone_is_refused_naming_both_zones() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    e2e::stack::ensure_image_parameter(&aws)?;
    // capacity-block.yaml: cr-0123456789abcdef0, p5.48xlarge, us-east-1a, its window.
    aws.add_capacity_reservation(&serde_json::json!({
        "CapacityReservationId": "cr-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1b",
        "TotalInstanceCount": 8,
        "State": "scheduled",
        "StartDate": "2030-06-10T11:30:00.000Z",
        "EndDate": "2030-06-17T11:30:00.000Z",
        "CapacityBlock": true,
    }))?;
    let key = deployer(&aws, "block-deployer")?;
    let says = "Capacity Block cr-0123456789abcdef0 is in us-east-1b, but the blueprint puts it in us-east-1a";
    let (code, out, err) = run(synth_as(&aws, &key, &["capacity", "blueprints/capacity-block.yaml"]));
    assert_eq!(code, 1, "{out}\n{err}");
    let blockers: Vec<&str> = out.lines().filter(|l| l.starts_with("blocker:")).collect();
    assert_eq!(blockers.len(), 1, "{out}");
    assert!(blockers[0].starts_with(&format!("blocker: {says}")), "{out}");
    // No quota is checked for the block's workers: the master's alone.
    assert!(out.contains("L-1216C47A") && !out.contains("L-417A185B"), "{out}");

    let args = ["deploy", "blueprints/capacity-block.yaml", "-p", "ImageId=/e2e/ami-id", "--yes"];
    let (code, _, err) = run(synth_as(&aws, &key, &args));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("error: {says}")), "{err}");
    assert!(!stack_exists(&aws, "block-training"), "no stack was created");
    assert!(aws.refused().is_empty(), "{:?}", aws.refused());
    Ok(())
}

/// Spot workers (elastic.yaml: g5.xlarge, 4 workers, up to 16): the Spot
/// quota is checked, and the region's Spot placement score is shown; a low
/// one is a warning, not a blocker.
#[test]
fn spot_workers_get_the_spot_quota_and_the_regions_placement_score() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    aws.set_spot_placement_score("us-east-1", 2)?;
    let key = deployer(&aws, "spot-checker")?;
    let (code, out, err) = run(synth_as(&aws, &key, &["capacity", "blueprints/elastic.yaml", "--region", "us-east-1"]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("\nSpot placement score: 2 of 10 for 4 workers"), "{out}");
    assert!(
        out.contains("warning: the Spot placement score of 4 workers (g5.xlarge) in us-east-1 is 2 of 10"),
        "{out}"
    );
    let spot = out.lines().find(|l| l.starts_with("L-3819A6DF")).unwrap_or_else(|| panic!("no Spot quota row:\n{out}"));
    let cells: Vec<&str> = spot.split_whitespace().collect();
    assert!(spot.contains("All G and VT Spot Instance Requests"), "{spot}");
    // 4 workers at 4 vCPUs, 16 at max (the master is On-Demand).
    assert_eq!(cells[cells.len() - 5..], ["Spot", "4096", "16", "64", "ok"], "{spot}");
    assert_eq!(calls(&aws, "spot-checker", "GetSpotPlacementScores"), 1);
    assert!(aws.refused().is_empty(), "{:?}", aws.refused());
    Ok(())
}
