//! The GPU gate and watch end to end (docs/ARCHITECTURE.md, "The GPU
//! gate"): a master and two workers, each in its own network namespace,
//! each agent reading its GPUs from a fixture (`agent run --gpu-fixture`,
//! a healthy H100 node's figures from `gpu_health::Fixture::healthy`)
//! instead of a driver; the blueprint is minimal.yaml, whose GPU type
//! turns the gate on (`quick`, `replace`), so the template's node config
//! and the master's role (`autoscaling:SetInstanceHealth` on its worker
//! group; IAM enforced) are what a user gets.
//!
//! - At boot: a worker whose kernel log has XID 79 fails the gate, never
//!   registers, and the master marks it unhealthy; the local AWS's Auto
//!   Scaling (launcher patch (ac), self-tested here) terminates it and
//!   launches another, which passes and joins; the formation signal says
//!   "gpu check: 3 of 4 nodes passed; replaced: ..." with the check.
//! - While it runs: a worker's fixture gains XID 79; its watch raises a
//!   `gpu_fault` notice (the notice file `trainer` reads), the master
//!   removes it at once and marks it unhealthy, and its group replaces it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::scenario::{edit_node_config, logs, plain, read, wait_until};
use e2e::{Cluster, TestResult};
use gpu_health::Fixture;
use node_contract::gpu::{GPU_CHECK_PATH, GpuReportFile};

const XID_79: &str =
    "[  812.339201] NVRM: Xid (PCI:0000:53:00): 79, pid=4120, name=python, GPU has fallen off the bus.";

/// A healthy one-H100 node's fixture in `dir`, with `xid` in its kernel log when given.
fn fixture(dir: &Path, name: &str, xid: bool) -> e2e::Result<PathBuf> {
    let mut f = Fixture::healthy("H100", 1);
    if xid {
        f.kernel_log.push(XID_79.into());
    }
    let path = dir.join(format!("{name}.json"));
    f.write(&path).map_err(e2e::Error::io("writing a GPU fixture", &path))?;
    Ok(path)
}

/// The template's gate, with what the harness's instance type promises
/// set to the fixture's node (the catalogue's g4dn.xlarge is one T4).
fn expect_the_fixtures_gpus(cluster: &Cluster) -> e2e::Result<()> {
    cluster.nodes().iter().try_for_each(expect_on)
}

fn expect_on(node: &e2e::Node) -> e2e::Result<()> {
    let expect = serde_json::to_value(Fixture::expect("H100", 1)).expect("JSON");
    edit_node_config(node, |c| {
        assert_eq!(c["gpu_check"]["action"], "replace", "minimal.yaml's default: {c}");
        c["gpu_check"]["expect"] = serde_json::json!({ e2e::cluster::INSTANCE_TYPE: expect });
    })
}

fn formation(cluster: &Cluster, stack: &str) -> Option<(String, String)> {
    let signals = cluster.aws().signals(stack).ok()?;
    let s = signals.iter().find(|s| s["LogicalResourceId"] == "FormationWaitCondition")?;
    Some((s["Status"].as_str()?.to_owned(), s["Reason"].as_str()?.to_owned()))
}

async fn wait_for_group<F: Fn(&[String]) -> bool>(cluster: &Cluster, what: &str, done: F) -> e2e::Result<Vec<String>> {
    let mut ids = Vec::new();
    for _ in 0..300 {
        ids = cluster.stack().worker_instance_ids(cluster.aws()).await?;
        if done(&ids) {
            return Ok(ids);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(e2e::Error::Timeout { what: format!("{what}: the group holds {ids:?}"), seconds: 30 })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_fails_the_gate_never_joins_and_its_group_replaces_it() -> TestResult {
    let stack = "gpu-boot";
    let mut cluster = Cluster::start_with_spares("blueprints/minimal.yaml", stack, 2, &[], 1).await?;
    let dir = tempfile::tempdir().map_err(e2e::Error::io("a temp dir", "/tmp"))?;
    let healthy = fixture(dir.path(), "healthy", false)?;
    let broken = fixture(dir.path(), "broken", true)?;
    expect_the_fixtures_gpus(&cluster)?;
    let bad = cluster.workers()[1].instance_id();
    let bad_ip = cluster.workers()[1].ip().to_string();
    let mut agents = Vec::new();
    for (i, node) in cluster.nodes().iter().enumerate() {
        let f = if i == 2 { &broken } else { &healthy };
        agents.push(node.spawn_agent(&["--gpu-fixture", &f.to_string_lossy()])?);
    }
    // The master marks it unhealthy; Auto Scaling terminates it and launches another.
    let ids =
        wait_for_group(&cluster, "the failed worker replaced", |ids| !ids.contains(&bad) && ids.len() == 2).await?;
    let group = cluster.stack().worker_group()?.to_string();
    assert_eq!(e2e::scenario::desired_capacity(cluster.aws(), &group).await?, 2, "the desired capacity is kept");
    let bad_log = plain(&agents[2].log());
    assert!(bad_log.contains("gpu check FAILED") && bad_log.contains("XID 79"), "{bad_log}");
    assert!(bad_log.contains("it does not join"), "{bad_log}");
    let report: GpuReportFile =
        serde_json::from_str(&read(cluster.workers()[1].root(), GPU_CHECK_PATH)).expect("the report file");
    assert!(!report.report.passed());
    assert!(report.report.failures().any(|c| c.check == "xid" && c.value.contains("79")), "{report:#?}");
    // The replacement passes and joins: the cluster forms with it.
    let known: Vec<String> = cluster.nodes().iter().map(|n| n.instance_id()).collect();
    let new_id = ids.iter().find(|id| !known.contains(id)).expect("a new instance").clone();
    let node = cluster.add_worker(&new_id)?;
    expect_on(node)?;
    agents.push(node.spawn_agent(&["--gpu-fixture", &healthy.to_string_lossy()])?);
    let refs: Vec<_> = agents.iter().collect();
    wait_until("the formation signal", Duration::from_secs(60), &refs, || formation(&cluster, stack).is_some())?;
    let (status, reason) = formation(&cluster, stack).unwrap();
    assert_eq!(status, "SUCCESS", "{reason}");
    assert!(
        reason.contains(&format!(
            "gpu check: 3 of 4 nodes passed; replaced: {bad} ({bad_ip}): xid on GPU 0: XID 79 (GPU has fallen off the bus)"
        )),
        "{reason}"
    );
    let master_log = plain(&agents[0].log());
    assert!(master_log.contains("marked a worker whose GPUs failed unhealthy"), "{master_log}");
    // The master applies generation 1 just after it signals.
    wait_until("the master's workers file with the three nodes", Duration::from_secs(30), &refs, || {
        read(cluster.master().root(), "/opt/deeplearning/workers").lines().count() == 3
    })?;
    let hostfile = read(cluster.master().root(), "/etc/hosts");
    assert!(!hostfile.contains(&bad_ip), "the failed node is in no file: {hostfile}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fault_while_running_makes_the_node_leave_and_its_group_replace_it() -> TestResult {
    let stack = "gpu-watch";
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 2).await?;
    expect_the_fixtures_gpus(&cluster)?;
    let dir = tempfile::tempdir().map_err(e2e::Error::io("a temp dir", "/tmp"))?;
    let mut paths = Vec::new();
    let mut agents = Vec::new();
    for (i, node) in cluster.nodes().iter().enumerate() {
        let path = fixture(dir.path(), &format!("node{i}"), false)?;
        agents.push(node.spawn_agent(&["--gpu-fixture", &path.to_string_lossy()])?);
        paths.push(path);
    }
    let refs: Vec<_> = agents.iter().collect();
    wait_until("the formation signal", Duration::from_secs(60), &refs, || formation(&cluster, stack).is_some())?;
    let (status, reason) = formation(&cluster, stack).unwrap();
    assert_eq!(status, "SUCCESS", "{reason}");
    // Each node's report goes before its registration, but the queue does
    // not keep order: one may be counted after the signal.
    assert!(["3 of 3", "2 of 2"].iter().any(|n| reason.contains(&format!("gpu check: {n} nodes passed"))), "{reason}");
    // Worker 2's GPU falls off the bus mid-run.
    let victim = &cluster.workers()[1];
    let victim_id = victim.instance_id();
    fixture(dir.path(), "node2", true)?;
    let notice_path = "/var/lib/deeplearning/interruption.json";
    wait_until("the GPU fault's notice file", Duration::from_secs(30), &refs, || {
        read(victim.root(), notice_path).contains("gpu_fault")
    })?;
    let notice: serde_json::Value = serde_json::from_str(&read(victim.root(), notice_path)).expect("the notice file");
    assert_eq!(notice["interruption"]["notice"], "gpu_fault");
    assert!(notice["interruption"]["detail"].as_str().is_some_and(|d| d.contains("XID 79")), "{notice}");
    // The master removes it at once and its group replaces it.
    wait_until("the master removing the faulty node", Duration::from_secs(30), &refs, || {
        plain(&agents[0].log()).contains("found a fatal GPU fault")
    })?;
    wait_for_group(&cluster, "the faulty worker replaced", |ids| !ids.contains(&victim_id) && ids.len() == 2).await?;
    let master_log = plain(&agents[0].log());
    assert!(master_log.contains("marked a worker whose GPUs failed unhealthy"), "{master_log}");
    let hosts_of = |root: &Path| read(root, "/opt/deeplearning/workers");
    wait_until("the others' files without it", Duration::from_secs(30), &refs, || {
        hosts_of(cluster.master().root()).lines().count() == 2
    })?;
    eprintln!("{}", logs(&refs[..1]));
    Ok(())
}
