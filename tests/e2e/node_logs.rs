//! Node logs that outlive the stack: every agent ships its lines to its own
//! stream in the stack's log group in moto's CloudWatch Logs.
//!
//! - A master and three workers form while CloudWatch Logs is cut off for
//!   the first 20 s (a proxy in front of it, `AWS_ENDPOINT_URL_CLOUDWATCH_LOGS`):
//!   the cluster forms as fast as without logs, and once the proxy lets
//!   calls through every line each agent wrote (its stderr, the same lines)
//!   is in its node's streams, none lost and none twice.
//! - A worker whose prepare-data script fails before it registers: its
//!   stream, `worker-<instance id>`, holds the script's output.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::proxy::CuttableProxy;
use e2e::scenario::applied;
use e2e::{Cluster, TestResult};
use node_contract::logs::parse_stream_name;

fn formed(root: &Path, nodes: usize) -> bool {
    applied(root).is_some_and(|(_, ids)| ids.len() == nodes)
}

async fn wait_for<T>(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A stderr line without its first word (the timestamp: the shipped line
/// has none, its event carries the time), and without the padding before
/// the level.
fn body(line: &str) -> &str {
    line.split_once(' ').map_or(line, |(_, rest)| rest).trim_start()
}

/// How often each line occurs (`key` makes it comparable).
fn counts<'a>(lines: impl Iterator<Item = &'a str>, key: fn(&str) -> &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in lines {
        *out.entry(key(line).to_owned()).or_default() += 1;
    }
    out
}

/// The agent's stderr, whole lines only.
fn stderr_lines(log: &str) -> Vec<&str> {
    let complete = log.rfind('\n').map_or("", |end| &log[..end]);
    complete.lines().collect()
}

/// The agent's own lines in the streams of `instance_id` (not the followed
/// files' `[boot]` and `[prepare-data]` lines).
fn shipped<'a>(streams: &'a BTreeMap<String, Vec<String>>, instance_id: &str) -> Vec<&'a str> {
    streams
        .iter()
        .filter(|(name, _)| parse_stream_name(name).is_some_and(|(_, id)| id == instance_id))
        .flat_map(|(_, lines)| lines.iter().map(String::as_str))
        .filter(|l| !l.starts_with('['))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_node_ships_its_lines_and_a_cut_neither_delays_formation_nor_loses_them() -> TestResult {
    const CUT: Duration = Duration::from_secs(20);
    let stack = "logs";
    let mut cluster = Cluster::start("blueprints/minimal.yaml", stack, 3).await?;
    let group = cluster.aws().log_group_of(stack).await?;
    // The stack made the group, with the blueprint's default retention.
    let described = cluster.aws().logs().describe_log_groups().log_group_name_prefix(&group).send().await;
    let groups = described.map_err(|e| e2e::Error::aws("DescribeLogGroups", &e))?;
    assert_eq!(groups.log_groups().iter().filter_map(|g| g.log_group_name()).collect::<Vec<_>>(), [group.as_str()]);
    assert_eq!(groups.log_groups()[0].retention_in_days(), Some(14));

    let moto = SocketAddr::new(cluster.aws().ip(), cluster.aws().port());
    let proxy = CuttableProxy::start(SocketAddr::new(cluster.network().host_ip().into(), 0), moto)?;
    cluster.set_env("AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", &proxy.endpoint());
    proxy.cut();
    let started = Instant::now();
    let agents = cluster.spawn_agents()?;
    let nodes = cluster.nodes();
    wait_for("every node to apply a 4-node manifest", Duration::from_secs(90), async || {
        nodes.iter().all(|n| formed(n.root(), 4)).then_some(())
    })
    .await;
    let formed_in = started.elapsed();
    // Nothing reached CloudWatch Logs yet, and formation did not wait for it.
    assert!(formed_in < CUT, "formed in {formed_in:?}, not before CloudWatch Logs came back");
    let before = cluster.aws().log_streams(&group).await?.unwrap_or_default();
    assert!(before.values().all(Vec::is_empty), "lines arrived through a cut proxy: {before:?}");
    tokio::time::sleep(CUT.saturating_sub(started.elapsed())).await;
    let written_during_cut: Vec<usize> = agents.iter().map(|a| stderr_lines(&a.log()).len()).collect();
    proxy.restore();
    let restored = Instant::now();

    // None lost: every line written so far arrives.
    let wanted: Vec<BTreeMap<String, usize>> =
        agents.iter().map(|a| counts(stderr_lines(&a.log()).into_iter(), body)).collect();
    let aws = cluster.aws();
    let streams = wait_for("every agent's lines in its streams", Duration::from_secs(60), async || {
        let streams = aws.log_streams(&group).await.ok()??;
        let all_in = nodes.iter().zip(&wanted).all(|(node, wanted)| {
            let got = counts(shipped(&streams, &node.instance_id()).into_iter(), str::trim_start);
            wanted.iter().all(|(line, n)| got.get(line).copied().unwrap_or(0) >= *n)
        });
        all_in.then_some(streams)
    })
    .await;
    let caught_up_in = restored.elapsed();
    // None twice: no line more often in the streams than the agent wrote it
    // (its stderr read after the streams).
    for (node, agent) in nodes.iter().zip(&agents) {
        let written = counts(stderr_lines(&agent.log()).into_iter(), body);
        let got = counts(shipped(&streams, &node.instance_id()).into_iter(), str::trim_start);
        for (line, n) in &got {
            let w = written.get(line).copied().unwrap_or(0);
            assert!(*n <= w, "{}: {line:?} shipped {n} times, written {w}", node.instance_id());
        }
    }

    // The streams are named after each node's label and instance id: the
    // master's, and each worker's under its index (after its first lines
    // went to `worker-<id>`, before it had one).
    let master = cluster.master().instance_id();
    assert!(streams.get(&format!("master-{master}")).is_some_and(|l| l.iter().any(|l| l.contains("agent starting"))));
    for worker in cluster.workers() {
        let id = worker.instance_id();
        let indexed: Vec<&String> = streams.keys().filter(|s| s.starts_with("worker") && s.ends_with(&id)).collect();
        assert!(
            indexed.iter().any(|s| parse_stream_name(s).is_some_and(|(l, _)| l.len() > "worker".len())),
            "{indexed:?}"
        );
        let lines = shipped(&streams, &id);
        assert!(lines.iter().any(|l| l.contains("agent starting")), "{id}: {lines:#?}");
    }
    let total: usize = nodes.iter().map(|n| shipped(&streams, &n.instance_id()).len()).sum();
    eprintln!(
        "formed in {formed_in:?} with CloudWatch Logs cut off; {written_during_cut:?} lines per agent written during the \
         {CUT:?} cut; all {total} lines in the streams {caught_up_in:?} after it ended; streams: {:?}",
        streams.keys().collect::<Vec<_>>()
    );
    drop(agents);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_prepare_data_scripts_output_is_in_the_workers_stream() -> TestResult {
    let stack = "logs-prepare";
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 1).await?;
    let efs = e2e::scenario::SharedEfs::new()?;
    efs.prepare_data_script_for(
        cluster.workers(),
        "#!/bin/sh\necho \"fetching shards for $DEEPLEARNING_NODE_IP\"\necho 'shard 7: checksum mismatch' >&2\nexit 1\n",
    )?;
    // The worker alone: it fails before it registers, so it never gets an index.
    let worker = &cluster.workers()[0];
    let agent = worker.spawn_agent(&[])?;
    let stream = format!("worker-{}", worker.instance_id());
    let group = cluster.aws().log_group_of(stack).await?;
    let aws = cluster.aws();
    let lines = wait_for("the script's output in the worker's stream", Duration::from_secs(60), async || {
        let streams = aws.log_streams(&group).await.ok()??;
        let lines = streams.get(&stream)?.clone();
        lines.iter().any(|l| l == "[prepare-data] shard 7: checksum mismatch").then_some(lines)
    })
    .await;
    let fetching = format!("[prepare-data] fetching shards for {}", worker.ip());
    assert!(lines.contains(&fetching), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("running the prepare-data script")), "{lines:#?}");
    drop(agent);
    Ok(())
}
