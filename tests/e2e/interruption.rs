//! Interruption notices (docs/ARCHITECTURE.md, "Membership rules"): a
//! cluster of a master and 3 workers forms; then one worker's instance
//! metadata (the per-node IMDSv2 stand-in) starts serving a Spot
//! `instance-action` two minutes ahead, or a rebalance recommendation. Its
//! agent's watcher sees it within a poll, writes the notice file for
//! `trainer` and tells the master; the master publishes generation 2
//! without it, every other node applies it well before the deadline, and
//! the host log names the reason. The noticed node's agent keeps running
//! and does not ask back in. A lifecycle action for the instance that
//! follows (Auto Scaling terminating the interrupted instance) is completed
//! once, after every remaining node applied generation 2.
//!
//! With the Spot instance action, every node also runs a `trainer train`
//! rank (as `trainer launch` starts it: the torchrun variables, the node's
//! root) when the notice comes: the noticed node's rank sees the notice
//! file the agent wrote and leaves at its next step (exit 0, long before
//! the deadline); the other ranks run the rest of the same epoch without
//! it, no epoch redone. The timings (notice served, notice file, rank gone,
//! survivors' next step) are printed (`--nocapture`).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::scenario::{applied, logs, plain, removal_reason, send_as_auto_scaling, termination_notification, wait_until};
use e2e::{Cluster, Error, Report, TestResult};
use node_contract::interruption::{NoticeFile, NoticeKind, SpotAction, format_utc};

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// Forms a cluster of 3 workers, gives worker 2 (`deeplearning-worker3`) a
/// notice with `give` (with a `trainer train` rank on every node when
/// `train`: the noticed one leaves at its next step), and checks everything
/// up to generation 2. Returns the cluster, its agents and the noticed
/// node's instance id.
async fn noticed(
    stack: &str,
    give: impl FnOnce(&e2e::imds::Imds),
    kind: NoticeKind,
    deadline: Option<u64>,
    train: bool,
) -> Result<(Cluster, Vec<e2e::AgentProcess>, String), Report> {
    let cluster = Cluster::start("blueprints/minimal.yaml", stack, 3).await?;
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("generation 1 with 4 nodes everywhere", Duration::from_secs(30), &refs, || {
        cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 4))
    })?;
    let leaving = &cluster.workers()[1];
    let leaving_id = leaving.instance_id();
    // Every agent polls its metadata for notices (and none has one).
    wait_until("every agent polling for notices", Duration::from_secs(15), &refs, || {
        cluster.nodes().iter().all(|n| n.imds().notice_polls() >= 2)
    })?;

    let mut ranks = Vec::new();
    if train {
        ranks = cluster.start_training(&e2e::mnist_dir()?)?;
        let mut waited = 0;
        while !ranks[0].log().contains("epoch 1/100000 ") {
            waited += 1;
            if waited > 1200 || ranks.iter_mut().any(|r| r.try_wait().is_ok_and(|s| s.is_some())) {
                let all: Vec<String> = ranks.iter().map(|r| r.log()).collect();
                return Err(
                    Error::Unexpected { what: "rank 0's first epoch".into(), detail: all.join("\n----\n") }.into()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    let noticed_at = Instant::now();
    give(leaving.imds());
    if train {
        // Worker 2's rank (rank 2): gone within a step of the notice file.
        let file = leaving.root().join("var/lib/deeplearning/interruption.json");
        let (mut file_at, mut gone_at) = (None, None);
        while gone_at.is_none() {
            if file_at.is_none() && file.exists() {
                file_at = Some(noticed_at.elapsed());
            }
            if let Some(status) = ranks[2].try_wait()? {
                gone_at = Some((noticed_at.elapsed(), status));
            } else if noticed_at.elapsed() > Duration::from_secs(40) {
                return Err(
                    Error::Unexpected { what: "the noticed rank to leave".into(), detail: ranks[2].log() }.into()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (gone, status) = gone_at.unwrap_or_default();
        let file_at = file_at.unwrap_or(gone);
        let leaver = ranks[2].log();
        assert_eq!(status.code(), Some(0), "{leaver}");
        assert!(leaver.contains("this node left the job (its host was given an interruption notice)"), "{leaver}");
        if let Some(deadline) = deadline {
            assert!(unix_now() < deadline, "the rank left after the deadline");
        }
        assert!(!Path::new(&format!("/proc/{}", ranks[2].pid())).exists(), "the noticed rank is still running");
        let mut survivors = None;
        while survivors.is_none() {
            let log = ranks[0].log();
            if let Some(line) = log.lines().find(|l| l.contains("rank(s); continuing epoch ")) {
                survivors = Some((noticed_at.elapsed(), line.to_owned()));
            } else if noticed_at.elapsed() > Duration::from_secs(60) {
                return Err(Error::Unexpected { what: "the survivors' next step".into(), detail: log }.into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (next, line) = survivors.unwrap_or_default();
        assert!(line.contains(": 3 rank(s); continuing epoch "), "{line}");
        eprintln!(
            "notice served -> notice file {:.2} s -> the noticed rank exited 0 {:.2} s -> survivors' next step {:.2} s \
             (rank 0: \"{}\"){}",
            file_at.as_secs_f64(),
            gone.as_secs_f64(),
            next.as_secs_f64(),
            line.trim(),
            deadline.map(|d| format!("; {} s left to the deadline", d.saturating_sub(unix_now()))).unwrap_or_default()
        );
    }
    let remaining: Vec<_> = cluster.nodes().iter().filter(|n| n.instance_id() != leaving_id).collect();
    let took = wait_until("generation 2 without the noticed worker", Duration::from_secs(40), &refs, || {
        remaining
            .iter()
            .all(|n| applied(n.root()).is_some_and(|(g, m)| g == 2 && m.len() == 3 && !m.contains(&leaving_id)))
    })?;
    eprintln!("the other nodes dropped the noticed worker {:.1} s after the notice", took.as_secs_f64());
    if let Some(deadline) = deadline {
        // The deadline is two minutes out; a 5 s poll plus one generation
        // must leave almost all of it.
        assert!(unix_now() + 60 < deadline, "generation 2 came within a minute of the deadline {deadline}");
        assert!(noticed_at.elapsed() < Duration::from_secs(30), "took {:?}", noticed_at.elapsed());
    }

    // The notice file, for trainer, on the noticed node only.
    let text = std::fs::read_to_string(leaving.root().join("var/lib/deeplearning/interruption.json"))
        .expect("the notice file on the noticed node");
    let file = NoticeFile::parse(&text).expect("a valid notice file");
    assert_eq!(file.interruption.instance_id, leaving_id);
    assert_eq!(file.interruption.notice, kind);
    assert_eq!(file.interruption.deadline_unix, deadline);
    for n in &remaining {
        assert!(!n.root().join("var/lib/deeplearning/interruption.json").exists(), "{}", n.ip());
    }

    // The host log says why it left.
    let why = format!("notice {}", file.interruption.describe());
    assert_eq!(removal_reason(cluster.master().root(), &leaving.ip().to_string()), why);
    let master_log = plain(&agents[0].log());
    assert!(master_log.contains("was given an interruption notice"), "{master_log}");

    // The noticed agent keeps running, and does not ask back in: three
    // register retry periods later nothing changed.
    std::thread::sleep(Duration::from_secs(16));
    let mut agents = agents;
    for a in agents.iter_mut() {
        assert!(a.try_wait()?.is_none(), "an agent exited:\n{}", a.log());
    }
    for n in cluster.nodes() {
        let (g, _) = applied(n.root()).unwrap_or_default();
        assert_eq!(g, if n.instance_id() == leaving_id { 1 } else { 2 }, "{}", n.ip());
    }
    let leaving_log = plain(&agents[2].log());
    assert!(leaving_log.contains("EC2 gave this node an interruption notice"), "{leaving_log}");
    assert!(leaving_log.contains("told the master about the interruption notice"), "{leaving_log}");
    if train {
        // The survivors trained on all along, with no epoch redone.
        for (i, r) in ranks.iter_mut().enumerate().filter(|(i, _)| *i != 2) {
            assert!(r.try_wait()?.is_none(), "rank {i} ended:\n{}", r.log());
        }
        let log = ranks[0].log();
        assert!(!log.contains("redoing"), "{log}");
        assert!(log.contains("a rank is leaving after step "), "{log}");
    }
    Ok((cluster, agents, leaving_id))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spot_instance_action_removes_the_worker_before_its_deadline() -> TestResult {
    let deadline = unix_now() + 120;
    let time = format_utc(deadline);
    let (cluster, agents, leaving_id) = noticed(
        "notice-action",
        |imds| imds.set_instance_action(Some((SpotAction::Terminate.as_str(), &time))),
        NoticeKind::InstanceAction,
        Some(deadline),
        true,
    )
    .await?;

    // Auto Scaling then terminates the interrupted instance through the
    // lifecycle hook: completed once, with CONTINUE, after generation 2 is
    // everywhere.
    let group = cluster.stack().worker_group()?.to_string();
    let token = "5b0e8c4e-8a7e-4c55-9a57-1f1d1e2c3b4a";
    let notification = termination_notification(&group, &leaving_id, token);
    send_as_auto_scaling(cluster.aws(), cluster.stack(), &notification).await?;
    send_as_auto_scaling(cluster.aws(), cluster.stack(), &notification).await?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("the lifecycle action to be completed", Duration::from_secs(20), &refs, || {
        cluster.aws().lifecycle_completions().is_ok_and(|c| !c.is_empty())
    })?;
    std::thread::sleep(Duration::from_secs(2));
    let completions = cluster.aws().lifecycle_completions()?;
    assert_eq!(completions.len(), 1, "{completions:#?}\n{}", logs(&refs));
    assert_eq!(completions[0]["InstanceId"], leaving_id.as_str());
    assert_eq!(completions[0]["LifecycleActionToken"], token);
    assert_eq!(completions[0]["LifecycleActionResult"], "CONTINUE");
    // Still generation 2: the termination made no other generation.
    for n in cluster.nodes().iter().filter(|n| n.instance_id() != leaving_id) {
        assert_eq!(applied(n.root()).map(|(g, _)| g), Some(2), "{}", n.ip());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebalance_recommendation_removes_the_worker() -> TestResult {
    let time = format_utc(unix_now());
    noticed(
        "notice-rebalance",
        |imds| imds.set_rebalance_recommendation(Some(&time)),
        NoticeKind::RebalanceRecommendation,
        None,
        false,
    )
    .await?;
    Ok(())
}
