//! The idle guard against the local AWS, with IAM enforced, on one cluster
//! (a master and one worker) whose minute is shortened to 2 s by the agent's
//! test-only knob (`DEEPLEARNING_TEST_IDLE_MINUTE_MS`, not settable from a
//! blueprint): the blueprint's 5 idle minutes pass in 10 s.
//!
//! In turn: a job rank running on the worker (`trainer supervise -- sleep`,
//! the half of `trainer launch` that runs on each host, started as ssh
//! would start it: the agents' harness has no sshd) keeps the cluster up
//! for twice the idle time; then an open connection to the master's SSH
//! port does; then a busy GPU on the worker does (its agent reads its GPUs
//! through the GPU gate's port from a fixture, `agent run --gpu-fixture`,
//! re-read at every probe, where a GPU's utilisation is set to 87 %, then
//! back to 0 %); once all end, the master sets the worker group's desired
//! capacity to 0, says why in its log, leaves the `deeplearning:idle` tag
//! on the group, and `synth status` prints "idle since ..., workers scaled
//! to 0 at ...". Then `synth resume`, run as a user with only the policy
//! `synth policy --part calls` prints, puts the capacity back; the harness
//! turns the instance Auto Scaling launched into a node in a spare
//! namespace, its agent joins, and resume ends once the master's log
//! publishes a generation with it; the tag no longer says the guard acted.
//! The scaled-in worker goes without a lifecycle message (the local AWS
//! runs no hook): the master's reads of the group after the action drop it.
//!
//! After the guard's `stop` on a formed cluster (the guard scales the group
//! to 0, reads it until it is empty and runs its power-off command, which
//! kills the agent in this test; the test then stops the worker's agent
//! and the master's instance in the local AWS, as EC2's stop would),
//! `synth resume` starts the master first (EC2
//! `StartInstances`, authorized against the instance's ARN: launcher patch
//! (t1); the statement's tag condition is not evaluated by moto); the
//! master's agent comes back from its saved state, finds the old worker no
//! longer in the group (no lifecycle message said so) and drops it, and the
//! cluster forms again with the new worker alone.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::scenario::{applied, desired_capacity, logs, plain, wait_until};
use e2e::{Cluster, Error, TestResult};

/// The idle guard's minute in this test, ms.
const MINUTE_MS: u64 = 2_000;
/// The blueprint's `after_minutes`, as this test's time.
const IDLE: Duration = Duration::from_millis(5 * MINUTE_MS);

/// A process that is killed (and reaped) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(mut command: Command, what: &'static str) -> Result<Killed, Error> {
    let child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io(what, "ip"))?;
    Ok(Killed(child))
}

/// The group's `deeplearning:idle` tag, if any.
async fn idle_tag(cluster: &Cluster, group: &str) -> Option<String> {
    let g = cluster.aws().auto_scaling_group(group).await.ok()?;
    g.tags().iter().find(|t| t.key() == Some(node_contract::idle::IDLE_TAG)).and_then(|t| t.value()).map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_cluster_scales_down_a_job_or_ssh_keeps_it_up_and_resume_brings_it_back() -> TestResult {
    let mut cluster = Cluster::start_with_spares("tests/fixtures/idle/scale-workers.yaml", "idle", 1, &[], 1).await?;
    cluster.set_env("DEEPLEARNING_TEST_IDLE_MINUTE_MS", &MINUTE_MS.to_string());
    let group = cluster.stack().worker_group()?.to_string();
    let (master, worker) = (cluster.master(), &cluster.workers()[0]);

    // A rank of a job on the worker, as `trainer launch` starts it over ssh
    // (stdin open: the supervisor stops its rank when its session closes).
    let mut supervise = worker.command(e2e::sshd::trainer_bin()?);
    supervise
        .args(["supervise", "--job", "idle-e2e", "--rank", "0", "--local-rank", "0", "--world-size", "1"])
        .args(["--local-world-size", "1", "--group-rank", "0", "--master-addr", "127.0.0.1"])
        .args(["--master-port", "29500", "--host", "w", "--root"])
        .arg(worker.root())
        .args(["--", "sleep", "600"]);
    let job = spawn(supervise, "starting trainer supervise on the worker")?;
    let pid_file = worker.root().join("run/deeplearning-trainer/idle-e2e/0.pid");
    let started = Instant::now();
    while !pid_file.exists() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pid_file.exists(), "the supervisor wrote its pid file");

    // The worker's GPUs: eight idle H100s (a CPU type's cluster has no GPU
    // gate; the idle guard reads whatever GPUs the driver lists).
    let gpus_path = worker.root().join("gpus.json");
    let mut gpus = gpu_health::Fixture::healthy("H100", 8);
    let write_gpus = |f: &gpu_health::Fixture| std::fs::write(&gpus_path, serde_json::to_string(f).expect("JSON"));
    write_gpus(&gpus).map_err(Error::io("writing the GPU fixture", "write"))?;
    let mut agents =
        vec![master.spawn_agent(&[])?, worker.spawn_agent(&["--gpu-fixture", &gpus_path.to_string_lossy()])?];
    let all: Vec<_> = agents.iter().collect();
    wait_until("the formation signal", Duration::from_secs(60), &all, || {
        cluster
            .aws()
            .signals("idle")
            .is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    })?;

    // The job holds the cluster for twice the idle time.
    tokio::time::sleep(2 * IDLE).await;
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 1, "a running job: {}", logs(&all));
    assert_eq!(idle_tag(&cluster, &group).await.as_deref(), Some("busy"), "{}", logs(&all));

    // The job ends; an SSH connection to the master holds it instead.
    let python = "import socket, sys, time\n\
                  if sys.argv[1] == 'serve':\n    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n    \
                  s.bind(('0.0.0.0', 22)); s.listen(); c, _ = s.accept(); time.sleep(600)\n\
                  else:\n    c = socket.create_connection((sys.argv[2], 22)); time.sleep(600)\n";
    let mut serve = master.command("python3");
    serve.args(["-c", python, "serve"]);
    let server = spawn(serve, "listening on the master's SSH port")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut connect = worker.command("python3");
    connect.args(["-c", python, "connect", &master.ip().to_string()]);
    let session = spawn(connect, "connecting to the master's SSH port")?;
    drop(job);
    tokio::time::sleep(2 * IDLE).await;
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 1, "an SSH session: {}", logs(&all));
    let master_log = agents[0].log();
    assert!(master_log.contains("1 SSH session"), "the master saw the session: {master_log}");

    // The SSH session ends; a GPU at work on the worker holds it instead.
    gpus.devices[3].utilisation_percent = Some(87);
    write_gpus(&gpus).map_err(Error::io("writing the GPU fixture", "write"))?;
    tokio::time::sleep(Duration::from_millis(MINUTE_MS)).await;
    drop(session);
    drop(server);
    tokio::time::sleep(2 * IDLE).await;
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 1, "a busy GPU: {}", logs(&all));
    let worker_log = agents[1].log();
    assert!(worker_log.contains("this node is a GPU at 87 %; told the master"), "{worker_log}");

    // Nothing left: the idle time later, the workers go.
    gpus.devices[3].utilisation_percent = Some(0);
    write_gpus(&gpus).map_err(Error::io("writing the GPU fixture", "write"))?;
    let idle_from = Instant::now();
    let mut capacity = 1;
    while idle_from.elapsed() < IDLE + Duration::from_secs(20) {
        capacity = desired_capacity(cluster.aws(), &group).await?;
        if capacity == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = idle_from.elapsed();
    assert_eq!(capacity, 0, "scaled down: {}", logs(&all));
    assert!(took >= IDLE - Duration::from_secs(1), "not before the idle time: {took:?}");
    let master_log = agents[0].log();
    let why = master_log.lines().find(|l| l.contains("idle guard: no trainer job, SSH session or busy GPU"));
    assert!(why.is_some_and(|l| l.contains("scaled to 0")), "the master says why: {master_log}");
    let tag = idle_tag(&cluster, &group).await.unwrap_or_default();
    assert!(tag.starts_with("idle since=") && tag.contains("acted="), "{tag}");
    let mark = std::fs::read_to_string(cluster.master().root().join("var/lib/deeplearning/scaled-down"));
    assert!(mark.as_deref().is_ok_and(|m| m.starts_with("stack=idle idle since=")), "the master's mark: {mark:?}");

    let status = e2e::synth_cli::command(cluster.aws(), "deployer", &["status", "idle", "--region", "us-east-1"])
        .output()
        .map_err(Error::io("running synth status", "synth"))?;
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}{}", String::from_utf8_lossy(&status.stderr));
    let line = text.lines().find(|l| l.starts_with("idle ")).unwrap_or_default();
    assert!(line.contains("idle since") && line.contains("workers scaled to 0 at"), "{text}");
    eprintln!("scaled to 0 {took:?} after the last session closed\n$ synth status idle\n{text}");
    let old_worker = cluster.workers()[0].instance_id();
    // The old worker's instance is gone: its agent stops with it.
    drop(agents.remove(1));

    // `synth resume`, as a deploying user with exactly `synth policy --part calls`.
    let policy = std::process::Command::new(e2e::synth_cli::bin())
        .args(["policy", "--part", "calls", "--stack-name-prefix", "idle", "--region", "us-east-1"])
        .output()
        .map_err(Error::io("running synth policy", "synth"))?;
    assert!(policy.status.success(), "{}", String::from_utf8_lossy(&policy.stderr));
    let calls: serde_json::Value = serde_json::from_slice(&policy.stdout).expect("synth policy prints JSON");
    let key = cluster.aws().user_with_policies("resumer", &[calls])?;
    let resume_started = Instant::now();
    let resume =
        e2e::synth_cli::command_as(cluster.aws(), &key, &["resume", "idle", "--region", "us-east-1", "--timeout", "3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::io("running synth resume", "synth"))?;
    // Auto Scaling launches an instance for the raised capacity; the
    // harness makes it a node, whose agent boots and registers.
    let mut new_id = None;
    while new_id.is_none() && resume_started.elapsed() < Duration::from_secs(60) {
        let ids = cluster.stack().worker_instance_ids(cluster.aws()).await?;
        new_id = ids.into_iter().find(|id| *id != old_worker);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let new_id = new_id.expect("Auto Scaling launched a worker for the resumed capacity");
    let launched = resume_started.elapsed();
    cluster.add_worker(&new_id)?;
    cluster.set_env("DEEPLEARNING_TEST_IDLE_MINUTE_MS", &MINUTE_MS.to_string());
    agents.push(cluster.workers().last().expect("the new worker").spawn_agent(&[])?);
    let out = resume.wait_with_output().map_err(Error::io("waiting for synth resume", "synth"))?;
    let took = resume_started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    let all: Vec<_> = agents.iter().collect();
    assert!(out.status.success(), "synth resume: {err}\n{}", logs(&all));
    assert!(err.contains("Scaling the worker group") && err.contains("to 1 (was 0)"), "{err}");
    assert!(err.contains("stack idle resumed in") && err.contains("publishing generation"), "{err}");
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 1);
    let master_log = agents[0].log();
    assert!(master_log.contains("a worker joined after the workers were scaled down"), "{master_log}");
    // After scaling down the master read the group until it was empty: the
    // old worker, gone without a lifecycle message (the local AWS runs no
    // hook), left before the new one joined; the cluster is the master and
    // the new worker.
    assert!(plain(&master_log).contains(&format!("{old_worker} (deeplearning-worker2")), "{master_log}");
    assert!(master_log.contains("idle guard: the worker group is empty"), "{master_log}");
    let formed = [cluster.stack().master_instance_id()?.to_string(), new_id.clone()];
    let (_, members) = applied(cluster.master().root()).expect("a generation applied");
    assert!(members.len() == 2 && formed.iter().all(|id| members.contains(id)), "{members:?}");
    let tag = idle_tag(&cluster, &group).await.unwrap_or_default();
    assert!(!tag.contains("acted="), "the guard starts a new stretch: {tag}");
    assert!(!cluster.master().root().join("var/lib/deeplearning/scaled-down").exists(), "the mark file is gone");
    eprintln!("$ synth resume idle  ({took:?}; instance launched after {launched:?})\n{err}");
    let story: Vec<&str> = master_log
        .lines()
        .filter(|l| ["idle guard", "publishing generation", "admitted as"].iter().any(|w| l.contains(w)))
        .collect();
    eprintln!("the master's log (idle guard, joins, generations):\n{}", story.join("\n"));
    let status = e2e::synth_cli::command(cluster.aws(), "deployer", &["status", "idle", "--region", "us-east-1"])
        .output()
        .map_err(Error::io("running synth status", "synth"))?;
    let text = String::from_utf8_lossy(&status.stdout);
    let line = text.lines().find(|l| l.starts_with("idle ")).unwrap_or_default();
    assert!(!line.contains("scaled to 0 at"), "{text}");
    eprintln!("$ synth status idle\n{text}");
    Ok(())
}

/// An EC2 instance's state in the local AWS (`DescribeInstances`).
fn instance_state(cluster: &Cluster, id: &str) -> Result<String, Error> {
    let xml = cluster
        .aws()
        .query("ec2", &[("Action", "DescribeInstances"), ("Version", "2016-11-15"), ("InstanceId.1", id)])?;
    let state = xml.split("<instanceState>").nth(1).unwrap_or_default();
    Ok(e2e::stack::xml_text(state, "name").unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_starts_a_master_the_guard_stopped_and_the_cluster_forms_again() -> TestResult {
    let mut cluster = Cluster::start_with_spares("tests/fixtures/idle/stop.yaml", "idlestop", 1, &[], 1).await?;
    cluster.set_env("DEEPLEARNING_TEST_IDLE_MINUTE_MS", &MINUTE_MS.to_string());
    let group = cluster.stack().worker_group()?.to_string();
    let master_id = cluster.stack().master_instance_id()?.to_string();
    let old_worker = cluster.workers()[0].instance_id();
    // The cluster forms, idles, and the guard's `stop` acts: the group to
    // 0 (the local AWS terminates the worker's instance and drops it from
    // the group at once; it runs no lifecycle hook), the mark, a read of
    // the group, which is empty, then the power-off command ... which kills
    // the master's agent at once, as the power going would: the turn in
    // which it dropped the old worker is never saved, so the state the
    // master starts again from still lists that worker (as after a crash,
    // or on AWS once the lifecycle message expired), and only the group can
    // tell it the worker is gone. (A master started again gives the cluster
    // the whole idle time: `IdleWatch::restart`.)
    let mut before = [
        cluster.master().spawn_agent(&["--power-off-command", "sh", "-c", "kill -KILL $PPID"])?,
        cluster.workers()[0].spawn_agent(&[])?,
    ];
    let refs: Vec<_> = before.iter().collect();
    wait_until("generation 1 with 2 nodes", Duration::from_secs(60), &refs, || {
        cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 2))
    })?;
    let deadline = Instant::now() + 6 * IDLE;
    while before[0].try_wait()?.is_none() {
        assert!(Instant::now() < deadline, "the guard never powered the master off:\n{}", before[0].log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refs: Vec<_> = before.iter().collect();
    // It powered off once the group was empty (here at once: the local AWS
    // drops scaled-in instances from the group at once).
    assert!(before[0].log().contains("the worker group is empty; powering the master off"), "{}", logs(&refs));
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 0, "{}", logs(&refs));
    // ... which, on EC2, stops the instance and everything on it.
    drop(before);
    let aws = cluster.aws();
    aws.query("ec2", &[("Action", "StopInstances"), ("Version", "2016-11-15"), ("InstanceId.1", &master_id)])?;
    assert_eq!(instance_state(&cluster, &master_id)?, "stopped");
    let tag = idle_tag(&cluster, &group).await.unwrap_or_default();
    assert!(tag.contains("acted="), "{tag}");

    let policy = std::process::Command::new(e2e::synth_cli::bin())
        .args(["policy", "--part", "calls", "--stack-name-prefix", "idlestop", "--region", "us-east-1"])
        .output()
        .map_err(Error::io("running synth policy", "synth"))?;
    let calls: serde_json::Value = serde_json::from_slice(&policy.stdout).expect("synth policy prints JSON");
    let key = aws.user_with_policies("resumer-stop", &[calls])?;
    let started = Instant::now();
    let args = ["resume", "idlestop", "--region", "us-east-1", "--timeout", "3"];
    let resume = e2e::synth_cli::command_as(aws, &key, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("running synth resume", "synth"))?;
    // The master boots when EC2 runs it: its agent starts then.
    while instance_state(&cluster, &master_id)? != "running" && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let master_running = started.elapsed();
    let mut agents = vec![cluster.master().spawn_agent(&["--power-off-command", "true"])?];
    let mut new_id = None;
    while new_id.is_none() && started.elapsed() < Duration::from_secs(60) {
        let ids = cluster.stack().worker_instance_ids(cluster.aws()).await?;
        new_id = ids.into_iter().find(|id| *id != old_worker);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let new_id = new_id.expect("Auto Scaling launched a worker for the resumed capacity");
    cluster.add_worker(&new_id)?;
    cluster.set_env("DEEPLEARNING_TEST_IDLE_MINUTE_MS", &MINUTE_MS.to_string());
    agents.push(cluster.workers().last().expect("the new worker").spawn_agent(&[])?);
    let out = resume.wait_with_output().map_err(Error::io("waiting for synth resume", "synth"))?;
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    let all: Vec<_> = agents.iter().collect();
    assert!(out.status.success(), "synth resume: {err}\n{}", logs(&all));
    let starting = err.find("Starting the master").expect(&err);
    let scaling = err.find("Scaling the worker group").expect(&err);
    assert!(starting < scaling, "the master starts first: {err}");
    assert!(err.contains("stack idlestop resumed in") && err.contains("publishing generation"), "{err}");
    assert_eq!(instance_state(&cluster, &master_id)?, "running");
    assert_eq!(desired_capacity(cluster.aws(), &group).await?, 1);
    let tag = idle_tag(&cluster, &group).await.unwrap_or_default();
    assert!(!tag.contains("acted="), "{tag}");
    // The restarted master's guard started over: it did not act again.
    assert!(!plain(&agents[0].log()).contains("powering the master off"), "{}", agents[0].log());
    // The restarted master asked the group for its members: the old worker
    // left before the new one joined, and no node lists it.
    let master_log = plain(&agents[0].log());
    assert!(master_log.contains(&format!("{old_worker} (deeplearning-worker2")), "{master_log}");
    assert!(master_log.contains("is no longer in the worker group"), "{master_log}");
    let formed = [master_id.clone(), new_id.clone()];
    for node in [cluster.master(), cluster.workers().last().expect("the new worker")] {
        let (_, members) = applied(node.root()).expect("a generation applied");
        assert!(members.len() == 2 && formed.iter().all(|id| members.contains(id)), "{members:?}");
    }
    // The master's receives (both queues, both runs): long polls, and a
    // sleep where SQS cannot wait (under a second before a deadline), not
    // a receive after receive until the deadline (this test made 252
    // before, 8 on the master queue after).
    let master_session = format!("/{master_id}");
    let calls = cluster.aws().calls()?;
    let receives = calls.iter().filter(|c| {
        c["action"] == "ReceiveMessage" && c["principal"].as_str().is_some_and(|p| p.ends_with(&master_session))
    });
    let receives = receives.count();
    assert!(receives < 60, "the master received {receives} times");
    eprintln!(
        "$ synth resume idlestop  ({took:?}; the master running after {master_running:?}; \
         the master's receives in the whole test: {receives})\n{err}"
    );
    Ok(())
}
