//! A worker leaves through Auto Scaling (docs/ARCHITECTURE.md, "Membership rules"): the
//! cluster forms with 3 workers; the terminating lifecycle notification
//! AWS sends for one of them lands in the master's queue and its agent
//! stops. The master publishes generation 2 without it, every remaining
//! node applies it, the host log gets `2 REMOVED <ip> <nanos>`, and only
//! then is the lifecycle action completed (once, with CONTINUE).

use std::time::{Duration, UNIX_EPOCH};

use e2e::scenario::{
    applied, applied_indices, removal_reason, send_as_auto_scaling, termination_notification, wait_until,
};
use e2e::{Cluster, TestResult};

#[tokio::test(flavor = "multi_thread")]
async fn a_terminating_worker_is_removed_before_its_lifecycle_action_completes() -> TestResult {
    let cluster = Cluster::start("blueprints/minimal.yaml", "removal", 3).await?;
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("generation 1 with 4 nodes everywhere", Duration::from_secs(30), &refs, || {
        cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 4))
    })?;
    let indices_before = applied_indices(cluster.master().root());

    let leaving = &cluster.workers()[1];
    let leaving_id = leaving.instance_id();
    let group = cluster.stack().worker_group()?.to_string();
    let token = "c613620e-07e2-4ed2-a9e2-ef8258911ade";
    // The notification as Auto Scaling sends it to an SQS lifecycle hook target.
    let notification = termination_notification(&group, &leaving_id, token);
    send_as_auto_scaling(cluster.aws(), cluster.stack(), &notification).await?;
    // At-least-once delivery: the same notification again changes nothing.
    send_as_auto_scaling(cluster.aws(), cluster.stack(), &notification).await?;
    agents[2].terminate();

    let remaining: Vec<_> = cluster.nodes().iter().filter(|n| n.instance_id() != leaving_id).collect();
    wait_until("generation 2 without the leaving worker", Duration::from_secs(30), &refs, || {
        remaining
            .iter()
            .all(|n| applied(n.root()).is_some_and(|(g, m)| g == 2 && m.len() == 3 && !m.contains(&leaving_id)))
    })?;
    wait_until("the lifecycle action to be completed", Duration::from_secs(20), &refs, || {
        cluster.aws().lifecycle_completions().is_ok_and(|c| !c.is_empty())
    })?;
    // Time for a second completion, if the duplicate caused one.
    std::thread::sleep(Duration::from_secs(2));
    let completions = cluster.aws().lifecycle_completions()?;
    assert_eq!(completions.len(), 1, "{completions:#?}");
    let c = &completions[0];
    assert_eq!(c["InstanceId"], leaving_id.as_str());
    assert_eq!(c["LifecycleActionToken"], token);
    assert_eq!(c["LifecycleHookName"], "worker-terminating");
    assert_eq!(c["AutoScalingGroupName"], group.as_str());
    assert_eq!(c["LifecycleActionResult"], "CONTINUE");
    // It came after every remaining node wrote generation 2 (state file times).
    let completed_at = c["ReceivedAt"].as_f64().unwrap_or_default();
    for node in &remaining {
        let state = node.root().join("var/lib/deeplearning/state.json");
        let written = std::fs::metadata(&state).and_then(|m| m.modified()).expect("the state file's time");
        let written = written.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        assert!(
            written <= completed_at,
            "{} applied generation 2 at {written}, after the completion at {completed_at}",
            node.ip()
        );
    }

    // The others kept their indices; the leaver kept generation 1 (its agent stopped).
    let indices_after = applied_indices(cluster.master().root());
    let expected: Vec<_> = indices_before.into_iter().filter(|(_, id)| *id != leaving_id).collect();
    assert_eq!(indices_after, expected);
    assert_eq!(applied(leaving.root()).map(|(g, _)| g), Some(1));

    removal_reason(cluster.master().root(), &leaving.ip().to_string());
    Ok(())
}
