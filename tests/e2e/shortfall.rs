//! Fewer workers than requested, but enough: 4 workers requested (at least
//! 2), only 2 agents start. At the formation deadline (5 s here) the master
//! forms with what it has: it signals success saying "2 of 4", lowers the
//! worker group's desired capacity to 2, and every running node applies the
//! same 3-node manifest.

use std::time::{Duration, Instant};

use e2e::scenario::{applied, desired_capacity, edit_node_config, wait_until};
use e2e::{Cluster, TestResult};

const TIMEOUT_SECONDS: u64 = 5;

#[tokio::test(flavor = "multi_thread")]
async fn two_of_four_workers_form_at_the_deadline() -> TestResult {
    let cluster = Cluster::start_with("blueprints/minimal.yaml", "shortfall", 4, &[("MinWorkers", "2")]).await?;
    let group = cluster.stack().worker_group()?.to_string();
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 4);
    edit_node_config(cluster.master(), |c| c["formation_timeout_seconds"] = TIMEOUT_SECONDS.into())?;

    let started = Instant::now();
    let master = cluster.master().spawn_agent(&[])?;
    let running = [&cluster.workers()[0], &cluster.workers()[1]];
    let workers = running.iter().map(|n| n.spawn_agent(&[])).collect::<Result<Vec<_>, _>>()?;
    let agents: Vec<_> = std::iter::once(&master).chain(workers.iter()).collect();

    let nodes = [cluster.master(), running[0], running[1]];
    let ids: Vec<String> = nodes.iter().map(|n| n.instance_id()).collect();
    wait_until("every running node to apply a 3-node manifest", Duration::from_secs(40), &agents, || {
        nodes.iter().all(|n| applied(n.root()).is_some_and(|(_, members)| members.len() == 3))
    })?;
    let formed_after = started.elapsed();
    assert!(
        formed_after >= Duration::from_secs(TIMEOUT_SECONDS - 1),
        "formed after {formed_after:?}, before the {TIMEOUT_SECONDS} s deadline: it should wait for the others"
    );
    for node in nodes {
        let (generation, mut members) = applied(node.root()).unwrap();
        members.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!((generation, members), (1, expected), "{} applied another manifest", node.ip());
    }
    for idle in &cluster.workers()[2..] {
        assert!(applied(idle.root()).is_none(), "{} has no agent and applied nothing", idle.ip());
    }

    wait_until("the formation signal", Duration::from_secs(10), &agents, || {
        cluster
            .aws()
            .signals("shortfall")
            .is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    })?;
    let signals = cluster.aws().signals("shortfall")?;
    let formation: Vec<_> = signals.iter().filter(|s| s["LogicalResourceId"] == "FormationWaitCondition").collect();
    assert_eq!(formation.len(), 1, "one formation signal: {signals:#?}");
    assert_eq!(formation[0]["Status"], "SUCCESS", "{}", formation[0]);
    let reason = formation[0]["Reason"].as_str().unwrap_or_default();
    assert!(reason.contains("2 of 4"), "{reason}");
    assert!(reason.contains("lowered to 2"), "{reason}");

    // The master lowered the group's capacity to what joined.
    let mut capacity = 0;
    for _ in 0..50 {
        capacity = desired_capacity(cluster.aws(), &group).await?;
        if capacity == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(capacity, 2, "the worker group's desired capacity\n{}", e2e::scenario::logs(&agents));
    eprintln!("formed at the deadline after {formed_after:?}");
    Ok(())
}
