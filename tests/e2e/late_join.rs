//! A worker joins after formation (docs/ARCHITECTURE.md, "Membership rules"): the
//! cluster forms with 2 workers, the worker group's desired capacity is
//! raised to 3 through the Auto Scaling API, and the instance moto launches
//! boots with a prepare-data script in its config. Its agent runs the
//! script, writes `$EFS_MOUNT/prepare_data_success_<ip>`, registers, and
//! the master publishes generation 2 with 4 nodes, which every node
//! applies; the host log on EFS gets `2 ADDED <ip> <nanos>`.
//!
//! EFS is one host directory that every node's `<root>/efs` links to, as a
//! real EFS mount gives every node the same files: the master checks the
//! marker the new node wrote.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::scenario::{SharedEfs, applied, applied_indices, wait_until};
use e2e::{Cluster, TestResult};

fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_worker_runs_prepare_data_and_joins_as_generation_two() -> TestResult {
    let mut cluster =
        Cluster::start_with_spares("blueprints/minimal.yaml", "late-join", 2, &[("MaxWorkers", "4")], 1).await?;
    let efs = SharedEfs::new()?;
    // The script lives on EFS, as blueprints usually put it; it leaves a
    // file behind per node so the test can tell it ran, and where.
    let script_path =
        efs.prepare_data_script_for(cluster.nodes(), "#!/bin/sh\nset -e\ntouch \"$0.ran-on-$DEEPLEARNING_NODE_IP\"\n")?;
    let mut agents = cluster.spawn_agents()?;
    let formed_ids: BTreeSet<String> = cluster.nodes().iter().map(|n| n.instance_id()).collect();
    {
        let refs: Vec<_> = agents.iter().collect();
        wait_until("generation 1 with 3 nodes everywhere", Duration::from_secs(30), &refs, || {
            cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 3))
        })?;
    }
    let indices_before = applied_indices(cluster.master().root());

    // Scale out: Auto Scaling launches a third worker.
    let new_ids = cluster.scale_out(3).await?;
    assert_eq!(new_ids.len(), 1, "one new instance: {new_ids:?}");
    assert!(!formed_ids.contains(&new_ids[0]), "{new_ids:?}");
    let new_id = new_ids[0].clone();
    let joined_at = unix_nanos();
    let node = cluster.add_worker(&new_id)?;
    efs.link_with_script(node, &script_path)?;
    let new_ip = node.ip().to_string();
    agents.push(node.spawn_agent(&[])?);

    let refs: Vec<_> = agents.iter().collect();
    let took = wait_until("generation 2 with 4 nodes everywhere", Duration::from_secs(40), &refs, || {
        cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 2 && m.len() == 4))
    })?;
    let newcomer = agents.last().unwrap();
    assert!(newcomer.log().contains("running the prepare-data script"), "{}", newcomer.log());
    assert!(efs.path().join(format!("prepare-data.sh.ran-on-{new_ip}")).exists(), "the script did not run on {new_ip}");
    assert!(
        efs.path().join(node_contract::files::prepare_data::marker_name(&new_ip)).exists(),
        "no prepare-data marker for {new_ip}"
    );

    // Every node: generation 2, the same 4 members; old members kept their indices.
    let indices_after = applied_indices(cluster.master().root());
    for (index, id) in &indices_before {
        assert!(indices_after.contains(&(*index, id.clone())), "{id} lost index {index}: {indices_after:?}");
    }
    assert!(indices_after.contains(&(4, new_id.clone())), "the newcomer is deeplearning-worker4: {indices_after:?}");
    for n in cluster.nodes() {
        assert_eq!(applied_indices(n.root()), indices_after, "{} disagrees", n.ip());
        let workers = e2e::scenario::read(n.root(), "/opt/deeplearning/workers");
        assert_eq!(workers.lines().count(), 4, "{workers}");
    }

    // The host log on EFS: the formation's lines, then `2 ADDED <ip> <nanos>`.
    let log = std::fs::read_to_string(efs.path().join("deeplearning/hosts.log")).expect("the host log on EFS");
    let added: Vec<&str> = log.lines().filter(|l| l.starts_with("2 ")).collect();
    assert_eq!(added.len(), 1, "one change in generation 2:\n{log}");
    let fields: Vec<&str> = added[0].split(' ').collect();
    assert_eq!(fields[..3], ["2", "ADDED", new_ip.as_str()], "{log}");
    let nanos: u128 = fields[3].parse().unwrap_or_else(|e| panic!("{log}: {e}"));
    assert!(nanos >= joined_at - 1_000_000_000 && nanos <= unix_nanos(), "{nanos} is not the join's time: {log}");
    assert_eq!(log.lines().filter(|l| l.starts_with("1 ADDED ")).count(), 3, "{log}");
    assert!(!log.contains("REMOVED"), "{log}");
    eprintln!("joined in {took:?}");
    Ok(())
}
