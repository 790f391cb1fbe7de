//! A Capacity Block's end (docs/ARCHITECTURE.md, "Membership rules",
//! interruption notices): a blueprint whose workers are in a Capacity Block
//! that started an hour ago and ends 45 minutes and [`LEAD`] seconds after
//! the test starts, built by synth like any other, so the workers' node
//! config carries the block from the template's user data (no test knob:
//! the time is the blueprint's). A cluster of the master and 2 workers
//! forms; at the block's end less 45 minutes each worker's agent, by its
//! own clock, gives itself a `capacity-block-end` notice with EC2's reclaim
//! (end less 30 minutes) as its deadline: it writes the notice file for
//! `trainer`, stops registering and tells the master, which removes it; the
//! host log says why. Every node runs a `trainer train` rank (as `trainer
//! launch` starts it) when the notice comes: each worker's rank sees its
//! notice file and leaves at its next step (exit 0), and rank 0 on the
//! master, which is not in the block, trains on alone. `synth status`
//! prints the block's window from the stack's template.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::scenario::{applied, plain, read, wait_until};
use e2e::{Cluster, Error, TestResult};
use node_contract::interruption::{LEAVE_BEFORE_END_SECONDS, NoticeFile, NoticeKind, format_utc};

/// Seconds from writing the blueprint to the workers' notice: time for the
/// stack to be created and the cluster to form first.
const LEAD: u64 = 25;

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_leave_their_capacity_block_before_it_ends() -> TestResult {
    let now = unix_now();
    let end = now + LEAVE_BEFORE_END_SECONDS + LEAD;
    let (leave, reclaim) = (end - LEAVE_BEFORE_END_SECONDS, end - 30 * 60);
    let blueprint = std::env::temp_dir().join(format!("capacity-block-e2e-{}.yaml", std::process::id()));
    let text = format!(
        "name: block-e2e\nregion: us-east-1\nmaster:\n  instance_type: g4dn.xlarge\nworkers:\n  \
         instance_type: g4dn.xlarge\n  count: 2\n  min: 0\n  capacity:\n    - capacity_block:\n        \
         id: cr-0123456789abcdef0\n        zone: us-east-1a\n        start: {}\n        end: {}\n",
        format_utc(now - 3600),
        format_utc(end)
    );
    std::fs::write(&blueprint, text).map_err(Error::io("writing the blueprint", &blueprint))?;
    let cluster = Cluster::start(&blueprint.display().to_string(), "capacity-block", 2).await;
    let _ = std::fs::remove_file(&blueprint);
    let cluster = cluster?;
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("generation 1 with 3 nodes everywhere", Duration::from_secs(30), &refs, || {
        cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 3))
    })?;
    let formed = unix_now();
    assert!(formed < leave, "the cluster formed at {formed}, after the notice time {leave}: raise LEAD");
    eprintln!("formed {} s before the workers' notice time", leave - formed);

    // `synth status` reads the block's window back from the stack's template.
    let minute = |t: u64| format_utc(t)[..16].replace('T', " ") + " UTC";
    let out =
        e2e::synth_cli::command(cluster.aws(), "deployer", &["status", "capacity-block", "--region", "us-east-1"])
            .output()
            .map_err(Error::io("running synth status", "synth"))?;
    let status = String::from_utf8_lossy(&out.stdout);
    let line = format!("block      capacity block cr-0123456789abcdef0: until {}, 45 min left; ", minute(end));
    assert!(status.contains(&line), "{status}{}", String::from_utf8_lossy(&out.stderr));
    let scale_in = format!("the workers scale to 0 at {}\n", minute(end - 40 * 60));
    assert!(status.contains(&scale_in), "{status}");

    let mut ranks = cluster.start_training(&e2e::mnist_dir()?)?;
    let mut waited = 0;
    while !ranks[0].log().contains("epoch 1/100000 ") {
        waited += 1;
        if waited > 1200 || ranks.iter_mut().any(|r| r.try_wait().is_ok_and(|s| s.is_some())) {
            let all: Vec<String> = ranks.iter().map(|r| r.log()).collect();
            return Err(Error::Unexpected { what: "rank 0's first epoch".into(), detail: all.join("\n----\n") }.into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, n) in cluster.workers().iter().enumerate() {
        assert!(!n.root().join("var/lib/deeplearning/interruption.json").exists(), "worker {i} noticed early");
    }
    eprintln!("every rank trains, {} s before the notice time", leave.saturating_sub(unix_now()));

    // The workers leave at the block's end less 45 minutes, within a poll
    // (5 s), and the master publishes a generation of itself alone.
    let master = cluster.master();
    let took = wait_until("a generation with the master alone", Duration::from_secs(LEAD + 40), &refs, || {
        applied(master.root()).is_some_and(|(_, m)| m == [master.instance_id()])
    })?;
    let gone = unix_now();
    assert!(gone >= leave && gone <= leave + 15, "the workers left at {gone}, the notice time is {leave}");
    eprintln!("the master alone {:.1} s after the cluster formed; {} s before the reclaim", took.as_secs_f64(), {
        reclaim.saturating_sub(gone)
    });

    // Each worker's rank left at its next step, cleanly; rank 0 trains on.
    for (i, rank) in ranks.iter_mut().enumerate().skip(1) {
        let mut status = None;
        for _ in 0..400 {
            status = rank.try_wait()?;
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = rank.log();
        assert_eq!(status.and_then(|s| s.code()), Some(0), "rank {i}:\n{log}");
        // The agent writes the notice file and tells the master at once, so
        // the rank learns it must go either from the file (its leaving flag)
        // or from the next generation without its node, whichever it reads
        // first; both are a clean leave (exit 0, the others train on).
        let noticed = log.contains("this node left the job (its host was given an interruption notice)");
        let dropped = log.contains("this node left the job (not in the manifest of generation");
        assert!(noticed || dropped, "{log}");
    }
    assert!(ranks[0].try_wait()?.is_none(), "rank 0 ended:\n{}", ranks[0].log());

    let hosts_log = read(master.root(), "/efs/deeplearning/hosts.log");
    let why = format!("notice capacity-block-end at {}", format_utc(reclaim));
    for (worker, agent) in cluster.workers().iter().zip(&agents[1..]) {
        // The notice file, for trainer: its kind and EC2's reclaim as the deadline.
        let path = worker.root().join("var/lib/deeplearning/interruption.json");
        let text = std::fs::read_to_string(&path).map_err(Error::io("reading the notice file", &path))?;
        let file = NoticeFile::parse(&text).expect("a valid notice file");
        assert_eq!(file.interruption.instance_id, worker.instance_id());
        assert_eq!(file.interruption.notice, NoticeKind::CapacityBlockEnd);
        assert_eq!(file.interruption.deadline_unix, Some(reclaim));
        assert!(file.noticed_unix_ms >= leave * 1000, "noticed at {} ms, before {leave} s", file.noticed_unix_ms);
        // The master's host log says why it left.
        let ip = worker.ip().to_string();
        let line = hosts_log.lines().find(|l| l.contains(&format!(" REMOVED {ip} "))).unwrap_or_default();
        assert!(line.ends_with(&why), "{ip}: {hosts_log}");
        // The worker's agent said when it would leave, and did.
        let log = plain(&agent.log());
        let schedule = format!(
            "capacity block cr-0123456789abcdef0 ends at {}; leaving at {}",
            format_utc(end),
            format_utc(leave)
        );
        assert!(log.contains(&schedule), "{log}");
        assert!(log.contains("this node leaves the cluster now"), "{log}");
        assert!(log.contains("told the master about the interruption notice"), "{log}");
    }
    assert!(!master.root().join("var/lib/deeplearning/interruption.json").exists());
    let master_log = plain(&agents[0].log());
    assert!(master_log.contains("was given an interruption notice (capacity-block-end at"), "{master_log}");
    assert!(!master_log.contains("capacity block cr-"), "the master is not in the block:\n{master_log}");

    // The workers' agents keep running and do not ask back in.
    std::thread::sleep(Duration::from_secs(6));
    let mut agents = agents;
    for a in agents.iter_mut() {
        assert!(a.try_wait()?.is_none(), "an agent exited:\n{}", a.log());
    }
    assert_eq!(applied(master.root()).map(|(_, m)| m), Some(vec![master.instance_id().to_owned()]));
    Ok(())
}
