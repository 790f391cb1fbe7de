//! The network gate (docs/ARCHITECTURE.md, "The network gate"): a master
//! and three workers, each in its own network namespace, with every node's
//! egress shaped by `tc tbf` — three at 400 Mbit/s, one worker at 100 (a
//! quarter) — and `network_check` in every node config (0.4 Gbit/s
//! expected, at least 0.5 of it). Every shaped node is shaped, not only
//! the slow one, so that the comparison does not depend on how fast this
//! machine's two cores move bytes through a bridge.
//!
//! - `warn`: formation succeeds; the reason, the master's verdict file
//!   (what `trainer doctor` shows) and the host log name that worker, and
//!   only it, with its measured fraction.
//! - `replace`: that worker is terminated in the local AWS (moto launches
//!   another in its place: desired capacity stays 3).
//! - `fail`: formation fails with the reason naming it.
//!
//! And the probes do not hold up the nodes' loops: a generation published
//! while they wait for their phase is applied at once.

use std::time::Duration;

use e2e::scenario::{
    applied, edit_node_config, logs, plain, read, send_as_auto_scaling, termination_notification, wait_until,
};
use e2e::{Cluster, TestResult};
use node_contract::NETWORK_CHECK_PATH;

/// The fast nodes' and the slow node's egress, Mbit/s.
const FAST_MBIT: u32 = 400;
const SLOW_MBIT: u32 = 100;

/// The slow worker: the second of three.
const SLOW_WORKER: usize = 1;

/// Shapes node `i`'s egress (`eth0` in its namespace).
fn shape(cluster: &Cluster, i: usize, mbit: u32) -> e2e::Result<()> {
    let rate = format!("{mbit}mbit");
    let ns = cluster.network().namespace(i);
    let tbf =
        ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", &rate, "burst", "256kb", "latency", "50ms"];
    e2e::netns::run("ip", &[&["netns", "exec", ns][..], &tbf[..]].concat())?;
    Ok(())
}

/// What a run leaves: the formation signal's status and reason, the
/// verdict file, the host log, the slow worker's instance id and IP, the
/// master's log.
struct Outcome {
    status: String,
    reason: String,
    verdict: serde_json::Value,
    host_log: String,
    slow_id: String,
    slow_ip: String,
    cluster: Cluster,
    master_log: String,
}

async fn run_gate(stack: &str, action: &str) -> e2e::Result<Outcome> {
    // The gate is in the blueprint, as a user sets it: the template's node
    // config and the master's role follow from it (with `replace`, the
    // right to terminate in the worker group; IAM is enforced). The test
    // then shortens the timeout and sets the expected bandwidth to the
    // shaped links'.
    let minimal = std::fs::read_to_string(e2e::repo_root().join("blueprints/minimal.yaml"))
        .map_err(e2e::Error::io("reading", "blueprints/minimal.yaml"))?;
    let dir = tempfile::tempdir().map_err(e2e::Error::io("a temp dir", "/tmp"))?;
    let blueprint = dir.path().join(format!("{stack}.yaml"));
    let text = format!("{minimal}formation:\n  network_check: {{ min_fraction: 0.5, action: {action} }}\n");
    std::fs::write(&blueprint, text).map_err(e2e::Error::io("writing", &blueprint))?;
    let cluster = Cluster::start(&blueprint.to_string_lossy(), stack, 3).await?;
    for node in cluster.nodes() {
        edit_node_config(node, |c| {
            c["network_check"] = serde_json::json!({
                "min_fraction": 0.5,
                "action": action,
                "timeout_seconds": 30,
                "expected_gbps": f64::from(FAST_MBIT) / 1000.0,
            })
        })?;
    }
    let slow = &cluster.workers()[SLOW_WORKER];
    for node in cluster.nodes() {
        let mbit = if node.index() == slow.index() { SLOW_MBIT } else { FAST_MBIT };
        shape(&cluster, node.index(), mbit)?;
    }
    let (slow_id, slow_ip) = (slow.instance_id(), slow.ip().to_string());
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("the formation signal", Duration::from_secs(45), &refs, || {
        cluster.aws().signals(stack).is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    })?;
    let signals = cluster.aws().signals(stack)?;
    let formation: Vec<_> = signals.iter().filter(|s| s["LogicalResourceId"] == "FormationWaitCondition").collect();
    assert_eq!(formation.len(), 1, "{signals:#?}");
    let status = formation[0]["Status"].as_str().unwrap_or_default().to_string();
    let reason = formation[0]["Reason"].as_str().unwrap_or_default().to_string();
    let master = cluster.master().root().to_path_buf();
    let verdict: serde_json::Value = serde_json::from_str(&read(&master, NETWORK_CHECK_PATH))
        .unwrap_or_else(|e| panic!("no verdict file: {e}\n{}", logs(&refs)));
    let host_log = read(&master, "/efs/deeplearning/hosts.log");
    let master_log = e2e::scenario::plain(&agents[0].log());
    eprintln!("network gate ({action}): {} {reason}", status);
    Ok(Outcome { status, reason, verdict, host_log, slow_id, slow_ip, cluster, master_log })
}

/// The verdict names the slow worker, and only it, at about a quarter;
/// every other node at about 1.
fn assert_only_the_slow_worker_is_named(o: &Outcome) {
    let links = o.verdict["verdict"]["links"].as_array().expect("links");
    assert_eq!(links.len(), 4, "{:#}", o.verdict);
    for link in links {
        let ip = link["node"]["ip"].as_str().unwrap_or_default();
        let fraction = link["fraction"].as_f64().unwrap_or_else(|| panic!("unmeasured: {link}"));
        let slow = link["slow"].as_bool().unwrap_or_default();
        if ip == o.slow_ip {
            assert!(slow, "{link}");
            assert!((0.15..0.35).contains(&fraction), "the slow worker measured {fraction}: {link}");
        } else {
            assert!(!slow, "{link}");
            assert!(fraction > 0.75, "a fast node measured {fraction}: {link}");
            assert!(!o.reason.contains(&format!("{ip})")), "{ip} named in: {}", o.reason);
        }
    }
    assert!(o.reason.contains(&format!("{}, {})", o.slow_id, o.slow_ip)), "{}", o.reason);
    assert!(o.reason.contains("Measured fractions:"), "{}", o.reason);
    let slow_lines: Vec<&str> = o.host_log.lines().filter(|l| l.contains(" SLOW ")).collect();
    assert_eq!(slow_lines.len(), 1, "{}", o.host_log);
    assert!(slow_lines[0].starts_with(&format!("1 SLOW {} ", o.slow_ip)), "{}", o.host_log);
}

#[tokio::test(flavor = "multi_thread")]
async fn warn_names_the_slow_node_and_only_it() -> TestResult {
    let o = run_gate("gate-warn", "warn").await?;
    assert_eq!(o.status, "SUCCESS", "{}", o.reason);
    assert!(o.reason.starts_with("3 of 3 workers joined"), "{}", o.reason);
    assert_only_the_slow_worker_is_named(&o);
    assert_eq!(o.verdict["action"], "warn");
    assert!(o.cluster.stack().worker_instance_ids(o.cluster.aws()).await?.contains(&o.slow_id));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn replace_terminates_the_slow_node_in_its_group() -> TestResult {
    let o = run_gate("gate-replace", "replace").await?;
    assert_eq!(o.status, "SUCCESS", "{}", o.reason);
    assert_only_the_slow_worker_is_named(&o);
    assert!(o.reason.contains("is terminated for a replacement"), "{}", o.reason);
    let group = o.cluster.stack().worker_group()?.to_string();
    let aws = o.cluster.aws();
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids = o.cluster.stack().worker_instance_ids(aws).await?;
        if !ids.contains(&o.slow_id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!ids.contains(&o.slow_id), "{} is still in the group: {ids:?}\n{}", o.slow_id, o.master_log);
    assert!(o.master_log.contains("terminated a slow worker"), "{}", o.master_log);
    // The desired capacity was not lowered: the group launched another.
    assert_eq!(e2e::scenario::desired_capacity(aws, &group).await?, 3);
    assert_eq!(ids.len(), 3, "{ids:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn fail_fails_formation_with_the_reason() -> TestResult {
    let o = run_gate("gate-fail", "fail").await?;
    assert_eq!(o.status, "FAILURE", "{}", o.reason);
    assert_only_the_slow_worker_is_named(&o);
    assert!(o.reason.contains("action is fail"), "{}", o.reason);
    assert!(o.master_log.contains("formation failed"), "{}", o.master_log);
    Ok(())
}

/// The probe runs beside the node loop: a generation the master publishes
/// while the nodes still probe generation 1's links (each waits for its
/// phase, up to [`agent::netgate::SETTLE_MILLIS`] plus two slots, then
/// sends for [`agent::netgate::PROBE_MILLIS`]) is applied at once, and the
/// generation 1 probes still finish and report.
#[tokio::test(flavor = "multi_thread")]
async fn a_generation_published_while_the_nodes_probe_is_applied_at_once() -> TestResult {
    let stack = "gate-poll";
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 3).await?;
    for node in cluster.nodes() {
        edit_node_config(node, |c| {
            c["network_check"] = serde_json::json!({
                "min_fraction": 0.01,
                "action": "warn",
                "timeout_seconds": 30,
                "expected_gbps": f64::from(FAST_MBIT) / 1000.0,
            })
        })?;
    }
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("generation 1 with 4 nodes everywhere", Duration::from_secs(45), &refs, || {
        cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 4))
    })?;
    // Worker 3 is terminated through its lifecycle hook: generation 2 at once.
    let leaving = &cluster.workers()[2];
    let leaving_id = leaving.instance_id();
    let group = cluster.stack().worker_group()?.to_string();
    let notification = termination_notification(&group, &leaving_id, "0a6d1d8e-2c55-4f61-9d51-3a8f3c0e7b11");
    send_as_auto_scaling(cluster.aws(), cluster.stack(), &notification).await?;
    agents[3].terminate();
    let remaining: Vec<_> = cluster.nodes().iter().filter(|n| n.instance_id() != leaving_id).collect();
    let took = wait_until("generation 2 everywhere else", Duration::from_secs(30), &refs, || {
        remaining.iter().all(|n| applied(n.root()).is_some_and(|(g, _)| g == 2))
    })?;
    // Some generation 1 probe was still to come when generation 2 was applied
    // (a probe reports what it measured, or that it failed: worker 2's peer is gone).
    let measured = |i: usize| {
        let log = plain(&agents[i].log());
        log.contains("measured ") || log.contains("the network check's probe to ")
    };
    let pending: Vec<usize> = (0..3).filter(|&i| !measured(i)).collect();
    eprintln!(
        "generation 2 applied by every remaining node {:.2} s after the termination was sent; generation 1 probes \
         still to report then on nodes {pending:?}",
        took.as_secs_f64()
    );
    assert!(!pending.is_empty(), "every probe was done before generation 2: the test proves nothing");
    assert!(took < Duration::from_secs(3), "generation 2 waited for the probes: {took:?}\n{}", logs(&refs));
    wait_until("the pending probes to report", Duration::from_secs(20), &refs, || {
        pending.iter().all(|&i| measured(i))
    })?;
    Ok(())
}
