//! Too few workers: 3 requested, at least 2 needed, 1 boots. At the
//! formation deadline (5 s here) the master signals FAILURE with the reason
//! (1 of 3, at least 2) and the worker group's launch failures: none
//! reported, or the failed scaling activity Auto Scaling recorded, quoted.

use std::time::{Duration, Instant};

use e2e::moto::REGION;
use e2e::scenario::{applied, edit_node_config, wait_until};
use e2e::{Cluster, TestResult};

const TIMEOUT_SECONDS: u64 = 5;

/// Starts the master and one worker of 3 (at least 2) and returns the
/// formation signal's status and reason, and when it came.
async fn form_with_one_worker(stack: &str, launch_failure: Option<&str>) -> e2e::Result<(String, String, Duration)> {
    let cluster = Cluster::start_with("blueprints/minimal.yaml", stack, 3, &[("MinWorkers", "2")]).await?;
    if let Some(message) = launch_failure {
        cluster.aws().add_failed_scaling_activity(cluster.stack().worker_group()?, message)?;
    }
    edit_node_config(cluster.master(), |c| c["formation_timeout_seconds"] = TIMEOUT_SECONDS.into())?;
    let started = Instant::now();
    let master = cluster.master().spawn_agent(&[])?;
    let worker = cluster.workers()[0].spawn_agent(&[])?;
    let agents = [&master, &worker];
    wait_until("the formation signal", Duration::from_secs(40), &agents, || {
        cluster.aws().signals(stack).is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    })?;
    let signalled_after = started.elapsed();
    // A failed formation publishes no manifest.
    std::thread::sleep(Duration::from_millis(500));
    for node in cluster.nodes() {
        assert!(applied(node.root()).is_none(), "{} applied a manifest of a failed formation", node.ip());
    }
    assert!(master.log().contains("formation failed"), "{}", master.log());
    let signals = cluster.aws().signals(stack)?;
    let formation: Vec<_> = signals.iter().filter(|s| s["LogicalResourceId"] == "FormationWaitCondition").collect();
    assert_eq!(formation.len(), 1, "{signals:#?}");
    let status = formation[0]["Status"].as_str().unwrap_or_default().to_string();
    let reason = formation[0]["Reason"].as_str().unwrap_or_default().to_string();
    Ok((status, reason, signalled_after))
}

#[tokio::test(flavor = "multi_thread")]
async fn below_the_minimum_the_stack_fails_with_the_reason() -> TestResult {
    let (status, reason, after) = form_with_one_worker("failure", None).await?;
    assert_eq!(status, "FAILURE", "{reason}");
    assert!(reason.contains("1 of 3"), "{reason}");
    assert!(reason.contains("at least 2"), "{reason}");
    assert!(reason.to_lowercase().contains("no launch failures"), "moto reports no scaling activities: {reason}");
    assert!(after >= Duration::from_secs(TIMEOUT_SECONDS - 1), "signalled after {after:?}, before the deadline");
    assert!(after < Duration::from_secs(TIMEOUT_SECONDS + 15), "signalled only after {after:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_failure_reason_quotes_the_launch_failure() -> TestResult {
    let message = "InsufficientInstanceCapacity: We currently do not have sufficient g4dn.xlarge capacity in the \
                   Availability Zone you requested (us-east-1a).";
    let (status, reason, _) = form_with_one_worker("failure-capacity", Some(message)).await?;
    assert_eq!(status, "FAILURE", "{reason}");
    assert!(reason.contains("1 of 3") && reason.contains("at least 2"), "{reason}");
    assert!(
        reason.contains("InsufficientInstanceCapacity: We currently do not have sufficient g4dn.xlarge"),
        "{reason}"
    );
    assert!(!reason.to_lowercase().contains("no launch failures"), "{reason}");
    Ok(())
}

/// A worker whose prepare-data script fails (2 requested, at least 2
/// needed, the other never starts): the worker's own log says so with the
/// script's last lines, it tells the master, and the FAILURE signal's reason
/// names it (instance id and address) and quotes its last lines, and names
/// the instance that never registered.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_prepare_data_script_is_named_in_the_reason() -> TestResult {
    let stack = "failure-prepare";
    let cluster = Cluster::start_with("blueprints/minimal.yaml", stack, 2, &[("MinWorkers", "2")]).await?;
    let efs = e2e::scenario::SharedEfs::new()?;
    let script_path = efs.prepare_data_script_for(
        cluster.nodes(),
        "#!/bin/sh\necho \"fetching shards for $DEEPLEARNING_NODE_IP\"\necho 'shard 7: checksum mismatch' >&2\nexit 1\n",
    )?;
    edit_node_config(cluster.master(), |c| c["formation_timeout_seconds"] = TIMEOUT_SECONDS.into())?;
    let master = cluster.master().spawn_agent(&[])?;
    let failing = &cluster.workers()[0];
    let worker = failing.spawn_agent(&[])?;
    let agents = [&master, &worker];
    wait_until("the formation signal", Duration::from_secs(40), &agents, || {
        cluster.aws().signals(stack).is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    })?;
    let signals = cluster.aws().signals(stack)?;
    let formation: Vec<_> = signals.iter().filter(|s| s["LogicalResourceId"] == "FormationWaitCondition").collect();
    assert_eq!(formation.len(), 1, "{signals:#?}");
    assert_eq!(formation[0]["Status"], "FAILURE", "{}", formation[0]);
    let reason = formation[0]["Reason"].as_str().unwrap_or_default();
    assert!(reason.contains("0 of 2") && reason.contains("at least 2"), "{reason}");
    let named =
        format!("{} ({}) failed: the prepare-data script {script_path} failed", failing.instance_id(), failing.ip());
    assert!(reason.contains(&named), "{named:?} not in {reason}");
    assert!(reason.contains("shard 7: checksum mismatch"), "{reason}");
    assert!(reason.contains(&format!("fetching shards for {}", failing.ip())), "{reason}");
    let silent = cluster.workers()[1].instance_id();
    assert!(reason.contains(&format!("never registered: {silent}")), "{reason}");
    assert!(signals.iter().all(|s| s.to_string().len() <= 4096), "{signals:#?}");
    // The worker's own log says so, with the script's last line.
    let log = worker.log();
    assert!(log.contains("the prepare-data script") && log.contains("shard 7: checksum mismatch"), "{log}");
    assert!(master.log().contains("reports a failed boot step"), "{}", master.log());
    eprintln!("the reason: {reason}");

    // Then, from a terminal, as a user finds out why after the stack is
    // gone: the failing worker's own lines, from its log group, which
    // outlives the stack. (This moto does not hold the stack on its wait
    // condition, so there is no rollback here to wait for: deleting it is
    // the harder case, tests/e2e/deploy.rs has the rollback.)
    let synth = |args: &[&str]| -> (i32, String) {
        let out = e2e::synth_cli::command(cluster.aws(), "user", args).output().expect("synth runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
    };
    let id = failing.instance_id();
    let logs_args = ["logs", stack, "--node", id.as_str(), "--region", REGION];
    let mut logs = (0, String::new());
    wait_until("the worker's lines in synth logs", Duration::from_secs(30), &agents, || {
        logs = synth(&logs_args);
        logs.1.lines().any(|l| l.ends_with(" | [prepare-data] shard 7: checksum mismatch"))
    })?;
    drop((master, worker));
    let delete_args = ["delete", stack, "--yes", "--region", REGION];
    let (code, deleted) = synth(&delete_args);
    assert_eq!(code, 0, "{deleted}");
    let after = synth(&logs_args);
    assert_eq!(after.0, 0, "{}", after.1);
    assert!(after.1.contains(&format!("| [prepare-data] fetching shards for {}", failing.ip())), "{}", after.1);
    assert!(after.1.lines().any(|l| l.ends_with(" | [prepare-data] shard 7: checksum mismatch")), "{}", after.1);
    assert!(after.1.starts_with(&logs.1), "the lines from before the delete, in order:\n{}\n---\n{}", logs.1, after.1);
    eprintln!(
        "--- the console's reason, then the terminal after the stack is gone ---\n{reason}\n\n$ synth {}\n{deleted}\n$ synth {}\n{}",
        delete_args.join(" "),
        logs_args.join(" "),
        after.1
    );
    Ok(())
}
