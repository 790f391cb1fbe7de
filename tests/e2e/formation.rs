//! The cluster forms: the template synth builds is created in moto, one
//! master and three workers boot (each in its own network namespace, with
//! its own IP, root and instance metadata) from its launch templates' user
//! data, and every node ends with the same view of the cluster. The
//! master's formation timeline is in order and within the test's run.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::scenario::{managed_block as block, read};
use e2e::{Cluster, TestResult};

fn state_generation(root: &Path) -> Option<(u64, usize)> {
    let v: serde_json::Value = serde_json::from_str(&read(root, "/var/lib/deeplearning/state.json")).ok()?;
    Some((v["generation"].as_u64()?, v["manifest"]["nodes"].as_array()?.len()))
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn unix_ms() -> u64 {
    node_contract::clock::system()
}

/// The master's timeline entries (`var/lib/deeplearning/master.json`), by
/// instance id, once every node's `applied` is in.
fn applied_timeline(root: &Path) -> Option<serde_json::Map<String, serde_json::Value>> {
    let v: serde_json::Value = serde_json::from_str(&read(root, "/var/lib/deeplearning/master.json")).ok()?;
    let nodes = v["timeline"]["nodes"].as_object()?.clone();
    (nodes.len() == 4 && nodes.values().all(|n| n["applied_ms"].is_u64())).then_some(nodes)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_and_three_workers_form_one_cluster() -> TestResult {
    // Whole seconds: a node's boot time (`btime`) is in seconds.
    let test_started_ms = unix_ms() / 1000 * 1000;
    let cluster = Cluster::start("blueprints/minimal.yaml", "formation", 3).await?;
    let agents = cluster.spawn_agents()?;
    let started = Instant::now();
    let all_applied = wait_until("every node to apply a 4-node manifest", Duration::from_secs(90), || {
        cluster.nodes().iter().all(|n| state_generation(n.root()).is_some_and(|(_, count)| count == 4))
    });
    if let Err(e) = all_applied {
        let logs: Vec<String> = agents.iter().map(|a| a.log()).collect();
        panic!("{e}\n\nagent logs:\n{}", logs.join("\n-----\n"));
    }
    let formed_in = started.elapsed();

    // Every node: the same generation, hosts block, workers file, hostfile
    // and known hosts; its own GPU count in the profile.
    let views: BTreeSet<(u64, String, String, String, String)> = cluster
        .nodes()
        .iter()
        .map(|n| {
            let root = n.root();
            (
                state_generation(root).map(|(g, _)| g).unwrap_or_default(),
                block(&read(root, "/etc/hosts")),
                read(root, "/opt/deeplearning/workers"),
                read(root, "/opt/deeplearning/hostfile"),
                block(&read(root, "/etc/ssh/ssh_known_hosts")),
            )
        })
        .collect();
    assert_eq!(views.len(), 1, "the nodes disagree: {views:#?}");
    let (generation, hosts, workers, hostfile, known_hosts) = views.into_iter().next().unwrap();
    assert_eq!(generation, 1, "one manifest for the whole formation");

    let aliases: Vec<&str> = workers.lines().collect();
    assert_eq!(
        aliases,
        ["deeplearning-worker1", "deeplearning-worker2", "deeplearning-worker3", "deeplearning-worker4"]
    );
    let master_line = hosts.lines().find(|l| l.contains("deeplearning-master")).expect("the master's hosts line");
    assert!(master_line.starts_with(&format!("{} deeplearning-worker1", cluster.master().ip())), "{hosts}");
    for node in cluster.nodes() {
        assert!(hosts.contains(&node.ip().to_string()), "{} missing from {hosts}", node.ip());
        let key = read(node.root(), "/etc/ssh/ssh_host_ed25519_key.pub");
        let key_body = key.split_whitespace().nth(1).unwrap_or_default();
        assert!(known_hosts.contains(key_body), "{}'s host key missing from known hosts", node.ip());
        let profile = read(node.root(), "/etc/profile.d/deeplearning.sh");
        assert!(profile.contains("DEEPLEARNING_WORKERS_COUNT=4"), "{profile}");
        assert!(profile.contains("DEEPLEARNING_WORKER_GPU_COUNT=0"), "{profile}");
        assert!(profile.contains("EFS_MOUNT=/efs"), "{profile}");
        // The agent found the interface with the node's IP (its namespace's
        // eth0); no EFA in this blueprint, so no libfabric settings.
        assert!(profile.contains("export NCCL_SOCKET_IFNAME==eth0\n"), "{profile}");
        assert!(!profile.contains("FI_PROVIDER"), "{profile}");
        let authorized = read(node.root(), "/home/ubuntu/.ssh/authorized_keys");
        assert!(block(&authorized).starts_with("ssh-ed25519 "), "cluster key missing: {authorized}");
    }
    assert_eq!(hostfile.lines().count(), 4, "{hostfile}");
    assert!(hostfile.lines().all(|l| l.ends_with(" slots=1")), "no GPUs here: {hostfile}");
    let master_key = read(cluster.master().root(), "/home/ubuntu/.ssh/id_ed25519_deeplearning");
    assert!(master_key.contains("OPENSSH PRIVATE KEY"), "the master holds the cluster's private key");
    for worker in cluster.workers() {
        assert!(
            !worker.root().join("home/ubuntu/.ssh/id_ed25519_deeplearning").exists(),
            "only the master has the key"
        );
    }

    // The signals reached the stack: the master's creation policy, then formation.
    let signalled = wait_until("the formation signal", Duration::from_secs(10), || {
        cluster
            .aws()
            .signals("formation")
            .is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    });
    assert_eq!(signalled, Ok(()));
    let signals = cluster.aws().signals("formation")?;
    let master_up = signals.iter().find(|s| s["LogicalResourceId"] == "MasterInstance").expect("SignalResource");
    assert_eq!(master_up["Status"], "SUCCESS");
    let formation = signals.iter().find(|s| s["LogicalResourceId"] == "FormationWaitCondition").unwrap();
    assert_eq!(formation["Status"], "SUCCESS", "{formation}");
    assert!(formation["Reason"].as_str().unwrap_or_default().contains("3 of 3 workers joined"), "{formation}");
    // While it formed, the master left its count on the worker group's tag
    // (what `synth deploy`'s live line reads), under its own role: written
    // first when the master started counting, then on a new count at most
    // every 5 s; formation took less, so the tag holds an early count of 3.
    let group = cluster.stack().worker_group()?.to_string();
    let tag = cluster.aws().auto_scaling_group(&group).await?.tags().iter().find_map(|t| {
        (t.key() == Some(node_contract::formation::FORMATION_TAG)).then(|| t.value().unwrap_or_default().to_owned())
    });
    let mark = tag.as_deref().and_then(node_contract::formation::FormingMark::from_tag);
    assert!(mark.is_some_and(|m| m.requested == 3 && m.registered <= 3 && m.failed == 0), "{tag:?}");

    // The formation timeline: every node's phases in order (launched <=
    // booted <= agent started <= registered <= applied) and within the
    // test's run. The master knows its own launch, boot and start, a
    // worker's come with its registration; registered and applied are when
    // the master read them.
    let mut timeline = None;
    let all_in = wait_until("the master to read every node's `applied`", Duration::from_secs(30), || {
        timeline = applied_timeline(cluster.master().root());
        timeline.is_some()
    });
    assert_eq!(all_in, Ok(()), "{}", read(cluster.master().root(), "/var/lib/deeplearning/master.json"));
    let timeline = timeline.unwrap();
    let now_ms = unix_ms();
    let ms = |v: &serde_json::Value| v.as_u64();
    for (id, n) in &timeline {
        let phases = [
            ms(&n["launched_ms"]),
            ms(&n["booted_ms"]),
            ms(&n["agent_started_ms"]),
            ms(&n["registered_ms"]),
            ms(&n["applied_ms"]),
        ];
        assert!(phases.iter().all(Option::is_some), "the master knows every node's phases: {n}");
        let known: Vec<u64> = phases.into_iter().flatten().collect();
        assert!(known.is_sorted(), "{id}'s phases out of order: {n}");
        assert!(
            known.iter().all(|t| (test_started_ms..=now_ms).contains(t)),
            "{id}: {n} not within {test_started_ms}..={now_ms}"
        );
    }
    let aliases: BTreeSet<&str> = timeline.values().filter_map(|n| n["alias"].as_str()).collect();
    assert_eq!(aliases.len(), 4, "{timeline:?}");
    // The success signal's summary: registered known for all four, the
    // slowest named, median <= slowest <= the run so far.
    let data: serde_json::Value =
        serde_json::from_str(formation["Data"].as_str().unwrap_or_default()).expect("the signal's data is JSON");
    let registered = &data["timeline"]["registered"];
    assert_eq!(registered["nodes"], 4, "{data}");
    let (median, slowest) = (registered["median_s"].as_f64().unwrap(), registered["slowest_s"].as_f64().unwrap());
    assert!(0.0 <= median && median <= slowest, "{data}");
    assert!(slowest * 1000.0 <= (now_ms - test_started_ms) as f64, "{data}");
    assert!(aliases.contains(registered["slowest"].as_str().unwrap_or_default()), "{data}");
    assert_eq!(data["timeline"]["launched"]["nodes"], 4, "{data}");
    assert!(data["timeline"]["launched"]["slowest_s"].as_f64().is_some_and(|l| l <= slowest), "{data}");
    // `agent status` on the master prints the table.
    let agent = e2e::node::agent_bin()?;
    let status = std::process::Command::new(&agent)
        .args(["status", "--root"])
        .arg(cluster.master().root())
        .output()
        .map_err(e2e::Error::io("running agent status", &agent))?;
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{out}{}", String::from_utf8_lossy(&status.stderr));
    assert!(out.contains("formation timeline"), "{out}");
    for alias in &aliases {
        // alias, launched, booted, agent started, data ready, registered, applied, data.
        let row = out.lines().find(|l| l.starts_with(alias) && l.split_whitespace().count() == 8);
        assert!(row.is_some_and(|r| r.split_whitespace().nth(6) != Some("-")), "{alias}'s row with applied: {out}");
    }
    eprintln!("formed in {formed_in:?}\n{out}");
    drop(agents);
    Ok(())
}
