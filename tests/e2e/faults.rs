//! The fault matrix: what the agents meet on real AWS and real disks, one
//! cluster per test.
//!
//! - bad messages in both queues (duplicated, reordered and stale
//!   manifests, malformed bodies, an oversized one) during and after
//!   formation: one generation-1 manifest, no node ever goes back a
//!   generation, every agent keeps running and says what it dropped;
//! - an agent SIGKILLed mid-formation and restarted (the master, and
//!   separately a worker): the cluster forms with the indices given before
//!   the kill, and the master resumes its persisted state;
//! - the master's agent SIGKILLed after it sent a generation, its state
//!   file put back to the one from before (what a crash between sending and
//!   saving leaves): restarted, it numbers its next generation above the
//!   one it sent, and every node converges on the same files;
//! - the local AWS unreachable for 20 s during formation: the agents retry
//!   and the cluster forms once it is back;
//! - a read-only `/opt/deeplearning`, and a full `/etc`, on a worker: its
//!   agent logs an error naming the file, keeps its old `/etc/hosts` byte for
//!   byte, keeps running (a restart would meet the same disk), and applies
//!   the manifest once the disk is usable again.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::scenario::{Mount, applied, applied_indices, edit_node_config, managed_block, plain, read, send, wait_until};
use e2e::{AgentProcess, Cluster, Node, TestResult};

fn generation_1_everywhere(cluster: &Cluster, nodes: usize) -> impl FnMut() -> bool + '_ {
    move || cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == nodes))
}

fn formation_signals(cluster: &Cluster, stack: &str) -> Vec<serde_json::Value> {
    let signals = cluster.aws().signals(stack).unwrap_or_default();
    signals.into_iter().filter(|s| s["LogicalResourceId"] == "FormationWaitCondition").collect()
}

/// Waits for the master's formation signal, then checks that it is the only
/// one and says SUCCESS. The master signals after it sees every node's
/// `applied`, so the nodes' files can be in place a moment (or, after an
/// outage, a retry delay) before the signal reaches CloudFormation.
fn one_successful_formation_signal(cluster: &Cluster, stack: &str, agents: &[&AgentProcess]) -> e2e::Result<()> {
    wait_until("the formation signal", Duration::from_secs(30), agents, || {
        !formation_signals(cluster, stack).is_empty()
    })?;
    // A second signal would come right after the first: give it the time to.
    std::thread::sleep(Duration::from_millis(500));
    let formation = formation_signals(cluster, stack);
    assert_eq!(formation.len(), 1, "{formation:#?}");
    assert_eq!(formation[0]["Status"], "SUCCESS");
    Ok(())
}

/// The generations a node's agent logged as applied, in order.
fn applied_generations(agent: &AgentProcess) -> Vec<u64> {
    plain(&agent.log())
        .lines()
        .filter(|l| l.contains("applied the manifest"))
        .filter_map(|l| l.split("generation=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The message bodies of `manifest`'s parts.
fn part_bodies(manifest: &node_contract::message::Manifest) -> Vec<String> {
    node_contract::parts::bodies(manifest, 1).expect("a small manifest splits")
}

fn still_running(agents: &mut [AgentProcess]) {
    for a in agents.iter_mut() {
        let status = a.try_wait().expect("checking an agent");
        assert!(status.is_none(), "an agent exited ({status:?}):\n{}", a.log());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_messages_in_both_queues_change_nothing() -> TestResult {
    let stack = "faults-messages";
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 3).await?;
    let master_queue = cluster.stack().resource("MasterQueue")?.to_string();
    let worker_queue = cluster.stack().resource("WorkerQueue")?.to_string();
    let worker = cluster.workers()[0].instance_id();
    let v = node_contract::message::MESSAGE_VERSION;
    let register = serde_json::json!({
        "version": v, "kind": "register", "instance_id": worker, "private_ip": "10.213.250.99",
        "hostname": "ip-10-213-250-99", "role": "worker", "gpus": 0, "instance_type": "g4dn.xlarge",
        "availability_zone": "us-east-1a", "ssh_host_key": "ssh-ed25519 AAAA x", "boot_id": "b",
    });
    let oversized = serde_json::json!({"version": v, "kind": "applied", "instance_id": "x".repeat(300 * 1024),
        "generation": 1});
    let junk = [
        "this is not JSON".to_string(),
        "[1, 2, 3]".to_string(),
        serde_json::json!({"version": v, "kind": "no-such-kind"}).to_string(),
        serde_json::json!({"version": 99, "kind": "register", "instance_id": worker}).to_string(),
        serde_json::json!({"version": 99, "kind": "manifest", "generation": 7}).to_string(),
        oversized.to_string(),
    ];
    // During formation: junk in both queues, a register in the worker queue
    // (wrong queue), and a manifest of another cluster there.
    for body in &junk {
        send(cluster.aws(), &master_queue, body).await?;
        send(cluster.aws(), &worker_queue, body).await?;
    }
    send(cluster.aws(), &worker_queue, &register.to_string()).await?;
    // A version-1 agent's whole manifest: refused by its version, with a
    // warning. Sent before the agents start, so that every worker's first
    // receive finds it (later, a retirement may delete it first).
    let old = serde_json::json!({"version": 1, "kind": "manifest", "cluster": "faults", "generation": 7});
    send(cluster.aws(), &worker_queue, &old.to_string()).await?;
    let mut agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until(
        "generation 1 with 4 nodes everywhere",
        Duration::from_secs(30),
        &refs,
        generation_1_everywhere(&cluster, 4),
    )?;
    let manifest = e2e::scenario::state(cluster.master().root()).unwrap()["manifest"].clone();
    let manifest: node_contract::message::Manifest = serde_json::from_value(manifest).unwrap();
    let mut foreign = manifest.clone();
    foreign.cluster = "another-cluster".into();
    foreign.generation = 5;
    send(cluster.aws(), &worker_queue, &part_bodies(&foreign)[0]).await?;

    // After formation: a worker leaves (generation 2), then generation 1
    // comes again (duplicated and reordered: stale), with more junk and
    // stale or unknown acknowledgements.
    let leaving = cluster.workers()[2].instance_id();
    agents[3].terminate();
    let leave = serde_json::json!({"version": v, "kind": "leave", "instance_id": leaving, "reason": "fault test"});
    send(cluster.aws(), &master_queue, &leave.to_string()).await?;
    let remaining: Vec<&Node> = cluster.nodes()[..3].iter().collect();
    let refs: Vec<_> = agents.iter().collect();
    wait_until("generation 2 without the leaver", Duration::from_secs(30), &refs, || {
        remaining.iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 2 && !m.contains(&leaving)))
    })?;
    let stale = part_bodies(&manifest).remove(0);
    for _ in 0..3 {
        send(cluster.aws(), &worker_queue, &stale).await?;
    }
    for body in &junk {
        send(cluster.aws(), &master_queue, body).await?;
        send(cluster.aws(), &worker_queue, body).await?;
    }
    for generation in [0, 1, 1, 99] {
        let ack = serde_json::json!({"version": v, "kind": "applied", "instance_id": worker, "generation": generation});
        send(cluster.aws(), &master_queue, &ack.to_string()).await?;
    }
    send(cluster.aws(), &master_queue, &leave.to_string()).await?;
    // Watch for a while: nobody goes back to generation 1.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        for n in &remaining {
            let (g, _) = applied(n.root()).unwrap();
            assert_eq!(g, 2, "{} went back to generation {g}", n.ip());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    still_running(&mut agents[..3]);
    for a in &agents[..3] {
        assert_eq!(applied_generations(a), [1, 2], "{}", a.log());
    }
    let master_log = plain(&agents[0].log());
    for expected in [
        "dropped a master queue message: malformed",
        "message version 99 is not supported",
        "over the 262144-byte limit",
        "ignored `applied` of generation 99",
        "ignored `leave` from",
    ] {
        assert!(master_log.contains(expected), "the master's log lacks {expected:?}:\n{master_log}");
    }
    // The two remaining workers share the worker queue, and the master
    // retires manifests of applied generations from it (runner::effects): the
    // stale copies may be deleted before any worker receives them, so
    // "manifest ignored" is not required here (seen missing under load); that
    // they change nothing is what the generation watch above asserts.
    let worker_log = format!("{}\n{}", plain(&agents[1].log()), plain(&agents[2].log()));
    for expected in
        ["ignored a worker queue message", "a manifest part of another cluster", "message version 1 is not supported"]
    {
        assert!(worker_log.contains(expected), "the workers' logs lack {expected:?}:\n{worker_log}");
    }
    let formation = formation_signals(&cluster, stack);
    assert_eq!(formation.len(), 1, "{formation:#?}");
    assert_eq!(formation[0]["Status"], "SUCCESS");
    Ok(())
}

/// Kills the agent of node `victim` (0: the master) with SIGKILL once the
/// master admitted `before_kill` workers, restarts it, then starts the rest.
async fn kill_mid_formation(stack: &str, victim: usize) -> e2e::Result<()> {
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 3).await?;
    let mut agents: Vec<AgentProcess> = Vec::new();
    agents.push(cluster.master().spawn_agent(&[])?);
    agents.push(cluster.workers()[0].spawn_agent(&[])?);
    agents.push(cluster.workers()[1].spawn_agent(&[])?);
    agents[0].wait_for_log("2 of 3 workers", Duration::from_secs(30))?;
    let joined: Vec<String> =
        plain(&agents[0].log()).lines().filter(|l| l.contains(" joined as ")).map(String::from).collect();
    let master_state = cluster.master().root().join("var/lib/deeplearning/master.json");
    // Indices are promised once they are on disk (the master persists its
    // state after each step and only then deletes the messages): kill
    // after that, when both admissions are in master.json.
    let admitted = [cluster.workers()[0].instance_id(), cluster.workers()[1].instance_id()];
    wait_until("both admissions in the master's state on disk", Duration::from_secs(10), &[&agents[0]], || {
        let state = read(cluster.master().root(), "/var/lib/deeplearning/master.json");
        admitted.iter().all(|id| state.contains(id.as_str()))
    })?;
    agents[victim].kill();
    let restarted = cluster.nodes()[victim].spawn_agent(&[])?;
    agents[victim] = restarted;
    if victim == 0 {
        agents[0].wait_for_log("resuming formation state from", Duration::from_secs(20))?;
        assert!(agents[0].log().contains(&master_state.display().to_string()), "{}", agents[0].log());
    }
    agents.push(cluster.workers()[2].spawn_agent(&[])?);
    let refs: Vec<_> = agents.iter().collect();
    wait_until(
        "generation 1 with 4 nodes everywhere",
        Duration::from_secs(40),
        &refs,
        generation_1_everywhere(&cluster, 4),
    )?;
    // The indices given before the kill held: worker 1 and 2 are
    // deeplearning-worker2 and 3 in the order they joined.
    let indices = applied_indices(cluster.master().root());
    for line in &joined {
        let id = line.split(" joined as ").next().and_then(|s| s.split_whitespace().rev().nth(1)).unwrap_or_default();
        let alias = line.split(" joined as ").nth(1).and_then(|s| s.split(':').next()).unwrap_or_default();
        let index: u64 = alias.trim_start_matches("deeplearning-worker").parse().unwrap_or(0);
        assert!(indices.contains(&(index, id.to_string())), "{id} was {alias} before the kill: {indices:?}\n{line}");
    }
    assert_eq!(joined.len(), 2, "{joined:?}");
    for n in cluster.nodes() {
        assert_eq!(applied_indices(n.root()), indices, "{} disagrees", n.ip());
    }
    one_successful_formation_signal(&cluster, stack, &refs)?;
    still_running(&mut agents);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_master_killed_mid_formation_resumes() -> TestResult {
    Ok(kill_mid_formation("faults-kill-master", 0).await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_formation_keeps_its_index() -> TestResult {
    Ok(kill_mid_formation("faults-kill-worker", 2).await?)
}

/// A crash between sending a generation and saving the state that holds it
/// (runner::master_loop saves after a turn's effects), made on purpose: the
/// master's state file from generation 1 is put back after generation 2 went
/// out, and the agent is SIGKILLed and restarted. The sent-generation record
/// makes the restarted master publish its members as generation 3 at once
/// (it cannot know what 2 listed), and the `leave` that made generation 2,
/// delivered again as SQS would after a crash, makes generation 4: every
/// remaining node ends on it, with the same manifest.
#[tokio::test(flavor = "multi_thread")]
async fn a_master_restarted_from_a_state_older_than_its_last_generation_numbers_above_it() -> TestResult {
    let cluster = Cluster::start("blueprints/minimal.yaml", "faults-unsaved", 2).await?;
    let mut agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until(
        "generation 1 with 3 nodes everywhere",
        Duration::from_secs(30),
        &refs,
        generation_1_everywhere(&cluster, 3),
    )?;
    agents[0].wait_for_log("every node applied generation 1", Duration::from_secs(30))?;
    let state_path = cluster.master().root().join("var/lib/deeplearning/master.json");
    // The retirement is saved with the turn that made it.
    wait_until("generation 1 retired in the master's state", Duration::from_secs(10), &refs, || {
        read(cluster.master().root(), "/var/lib/deeplearning/master.json").contains("\"ack_deadline_ms\":null")
    })?;
    let saved = read(cluster.master().root(), "/var/lib/deeplearning/master.json");
    assert!(saved.contains("\"generation\":1"), "{saved}");

    let leaving = cluster.workers()[1].instance_id();
    let leave = node_contract::message::Message::Leave(node_contract::message::Leave {
        instance_id: leaving.clone(),
        reason: "faults test".into(),
    })
    .to_body();
    let master_queue = cluster.stack().resource("MasterQueue")?.to_string();
    agents[2].terminate();
    send(cluster.aws(), &master_queue, &leave).await?;
    let remaining = [cluster.master(), &cluster.workers()[0]];
    wait_until("generation 2 without the leaver", Duration::from_secs(30), &refs, || {
        remaining.iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 2 && m.len() == 2))
    })?;
    let sent = read(cluster.master().root(), "/var/lib/deeplearning/master-sent-generation");
    assert_eq!(sent.trim(), "2", "the record of the generations sent");

    agents[0].kill();
    std::fs::write(&state_path, &saved).map_err(e2e::Error::io("putting the older master state back", &state_path))?;
    agents[0] = cluster.master().spawn_agent(&[])?;
    let refs: Vec<_> = agents.iter().collect();
    // Its state still lists the leaver: generation 3 has all three.
    wait_until("generation 3 on the remaining nodes", Duration::from_secs(30), &refs, || {
        remaining.iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 3 && m.len() == 3))
    })?;
    let log = plain(&agents[0].log());
    assert!(log.contains("generation 2 may have been sent before a restart"), "{log}");
    send(cluster.aws(), &master_queue, &leave).await?;
    wait_until("generation 4 without the leaver", Duration::from_secs(30), &refs, || {
        remaining
            .iter()
            .all(|n| applied(n.root()).is_some_and(|(g, m)| g == 4 && m.len() == 2 && !m.contains(&leaving)))
    })?;
    assert_eq!(applied_indices(cluster.master().root()), applied_indices(cluster.workers()[0].root()));
    for file in ["/etc/hosts", "/etc/ssh/ssh_known_hosts"] {
        assert_eq!(
            managed_block(&read(cluster.master().root(), file)),
            managed_block(&read(cluster.workers()[0].root(), file)),
            "the master and the worker disagree on {file}"
        );
    }
    for file in ["/opt/deeplearning/workers", "/opt/deeplearning/hostfile"] {
        assert_eq!(read(cluster.master().root(), file), read(cluster.workers()[0].root(), file), "{file}");
    }
    // The restarted agent's own log: generation 2 was never published again.
    let log = plain(&agents[0].log());
    assert!(!log.contains("publishing generation 2:"), "the restarted master published generation 2 again:\n{log}");
    still_running(&mut agents[..2]);
    Ok(())
}

fn link(node: &Node, state: &str) {
    let out = std::process::Command::new("ip")
        .args(["-n", node.namespace(), "link", "set", "eth0", state])
        .output()
        .expect("running ip");
    assert!(out.status.success(), "ip link set eth0 {state} in {}: {out:?}", node.namespace());
}

/// Cuts `node` off the local AWS: its link goes down, and its open
/// connections to moto are aborted (`ss -K`), as a connection reset or a
/// timeout ends them on a real network, so requests in flight fail too
/// instead of being rescued by TCP retransmission when the link returns.
fn cut_off(node: &Node, aws: &e2e::LocalAws) {
    link(node, "down");
    let (ip, port) = (aws.ip().to_string(), aws.port().to_string());
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", node.namespace(), "ss", "-K", "dst", &ip, "dport", "=", &port])
        .output()
        .expect("running ss");
    assert!(out.status.success(), "ss -K in {}: {out:?}", node.namespace());
}

/// Brings every node's link back up on drop, also when the test fails.
struct Outage<'a>(Vec<&'a Node>);

impl Drop for Outage<'_> {
    fn drop(&mut self) {
        for node in &self.0 {
            let _ =
                std::process::Command::new("ip").args(["-n", node.namespace(), "link", "set", "eth0", "up"]).output();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_forms_after_aws_was_unreachable_for_20_seconds() -> TestResult {
    let stack = "faults-outage";
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 3).await?;
    let mut agents: Vec<AgentProcess> = Vec::new();
    agents.push(cluster.master().spawn_agent(&[])?);
    agents.push(cluster.workers()[0].spawn_agent(&[])?);
    agents.push(cluster.workers()[1].spawn_agent(&[])?);
    agents[0].wait_for_log("2 of 3 workers", Duration::from_secs(30))?;
    // The master loses its network first, so the last registration cannot
    // complete the formation before everyone is cut off. The last worker
    // still needs its metadata (on the same bridge) to start.
    let mut outage = Outage(vec![cluster.master()]);
    cut_off(cluster.master(), cluster.aws());
    agents.push(cluster.workers()[2].spawn_agent(&[])?);
    agents[3].wait_for_log("registered", Duration::from_secs(20))?;
    for w in cluster.workers() {
        cut_off(w, cluster.aws());
        outage.0.push(w);
    }
    let cut = Instant::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(applied(cluster.master().root()).is_none(), "formed while AWS was unreachable");
    drop(outage);
    let back = Instant::now();
    let outage_lasted = back - cut;
    let refs: Vec<_> = agents.iter().collect();
    let took = wait_until(
        "generation 1 with 4 nodes after the outage",
        Duration::from_secs(45),
        &refs,
        generation_1_everywhere(&cluster, 4),
    )?;
    // The agents met the outage and retried.
    let master_log = plain(&agents[0].log());
    assert!(master_log.contains("cannot read the master queue"), "{master_log}");
    for a in &agents[1..] {
        let log = plain(&a.log());
        assert!(log.contains("cannot read manifests"), "{log}");
    }
    one_successful_formation_signal(&cluster, stack, &refs)?;
    still_running(&mut agents);
    eprintln!("outage {outage_lasted:?}; formed {took:?} after it ended");
    Ok(())
}

/// Starts a 2-worker cluster whose second worker's disk is broken by
/// `break_disk` (called before its agent starts; returns the mount to undo
/// and the file the error must name), checks the agent's error and old
/// `/etc/hosts`, then repairs the disk with `repair` and checks it catches up.
async fn broken_disk(
    stack: &str,
    break_disk: impl FnOnce(&Path) -> e2e::Result<(Mount, &'static str)>,
    repair: impl FnOnce(&Path, &Mount, u32) -> e2e::Result<()>,
) -> e2e::Result<()> {
    // Whatever the victim writes, the others do not wait on it.
    let cluster = Cluster::start_with("blueprints/minimal.yaml", stack, 2, &[("MinWorkers", "1")]).await?;
    let victim = &cluster.workers()[1];
    edit_node_config(cluster.master(), |c| c["formation_timeout_seconds"] = 5.into())?;
    let hosts_before = std::fs::read(victim.root().join("etc/hosts")).expect("the victim's /etc/hosts");
    let (mount, named) = break_disk(victim.root())?;
    let mut agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    let healthy = &cluster.nodes()[..2];
    wait_until("the healthy nodes to apply generation 1", Duration::from_secs(30), &refs, || {
        healthy.iter().all(|n| applied(n.root()).is_some_and(|(g, _)| g == 1))
    })?;
    wait_until("the victim to log the error", Duration::from_secs(20), &refs, || {
        plain(&agents[2].log()).lines().any(|l| l.contains("ERROR") && l.contains(named))
    })?;
    // Give it time to try again (and, if it were wrong, to write the hosts file).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(std::fs::read(victim.root().join("etc/hosts")).expect("/etc/hosts"), hosts_before, "/etc/hosts changed");
    assert!(applied(victim.root()).is_none(), "the victim claims a generation it could not write");
    still_running(&mut agents);

    repair(victim.root(), &mount, agents[2].pid())?;
    let refs: Vec<_> = agents.iter().collect();
    // Generation 1 when it registered in time; a later one when the broken
    // disk kept it from registering before the deadline.
    wait_until("the victim to apply a manifest once its disk is usable", Duration::from_secs(40), &refs, || {
        applied(victim.root()).is_some_and(|(_, m)| m.contains(&victim.instance_id()))
    })?;
    let hosts = read(victim.root(), "/etc/hosts");
    assert!(hosts.contains("deeplearning-master"), "{hosts}");
    drop(mount);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_opt_deeplearning_is_reported_and_retried() -> TestResult {
    Ok(broken_disk(
        "faults-readonly",
        |root| Ok((Mount::tmpfs(&root.join("opt/deeplearning"), "ro,size=1m")?, "opt/deeplearning/workers")),
        // The agent has its own mount namespace (a copy of the host's, made
        // when it started): remount there.
        |_, mount, pid| {
            let pid = pid.to_string();
            let target = mount.target().to_string_lossy().into_owned();
            e2e::netns::run("nsenter", &["-t", &pid, "-m", "mount", "-o", "remount,rw", &target]).map(|_| ())
        },
    )
    .await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_etc_is_reported_and_retried() -> TestResult {
    Ok(broken_disk(
        "faults-full",
        |root| {
            // A small tmpfs as /etc with the image's files in it, then filled up.
            let etc = root.join("etc");
            let saved = tempfile::tempdir().expect("a temp dir");
            e2e::netns::run("cp", &["-a", &format!("{}/.", etc.display()), &saved.path().to_string_lossy()])?;
            let mount = Mount::tmpfs(&etc, "size=64k")?;
            e2e::netns::run("cp", &["-a", &format!("{}/.", saved.path().display()), &etc.to_string_lossy()])?;
            let filler = format!("of={}", etc.join("filler").display());
            // dd stops with ENOSPC (exit 1) once the file system is full.
            let _ = std::process::Command::new("dd").args(["if=/dev/zero", &filler, "bs=1k"]).output();
            let probe = std::fs::write(etc.join("probe"), "x");
            assert!(probe.is_err(), "the tmpfs is not full");
            Ok((mount, "etc/fstab"))
        },
        |root, _, _| std::fs::remove_file(root.join("etc/filler")).map_err(e2e::Error::io("removing the filler", root)),
    )
    .await?)
}
