//! The data fetch benchmark's own side (not a test; `scripts/bench-data`
//! drives it against a local S3 server beside s5cmd and the AWS CLI).
//!
//! `data_fetch node ENDPOINT BUCKET PREFIX ROOT EFS_DATA_DIR IP TOGETHER`:
//! one node's fetch ([`agent::data::DataFetch`] on the SDK port) of
//! `s3://BUCKET/PREFIX` into `ROOT/data`, alone (`TOGETHER` 0) or with the
//! peers announced under `EFS_DATA_DIR` (1); prints one JSON line.
//!
//! `data_fetch cluster N ENDPOINT BUCKET PREFIX OUT`: N such nodes as
//! processes on 127.0.0.20 and up (together when N > 1), roots
//! `OUT/node<i>`, announcements under `OUT/efs`; prints one JSON line:
//! the wall time until the last node's data was complete, and the bytes
//! the nodes read from S3 together.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent::data::{DataFetch, Plan};
use node_contract::data::{DataSet, Fetcher};

fn main() {
    // `cargo bench` adds `--bench`; the rest are ours.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    match args.first().map(String::as_str) {
        Some("node") if args.len() == 8 => node(&args[1..]),
        Some("cluster") if args.len() == 6 => cluster(&args[1..]),
        _ => {
            eprintln!("usage: data_fetch node ENDPOINT BUCKET PREFIX ROOT EFS_DATA_DIR IP TOGETHER");
            eprintln!("       data_fetch cluster N ENDPOINT BUCKET PREFIX OUT");
            eprintln!("(run by scripts/bench-data)");
            std::process::exit(2);
        }
    }
}

fn node(a: &[String]) {
    let (endpoint, bucket, prefix, root, efs, ip, together) = (&a[0], &a[1], &a[2], &a[3], &a[4], &a[5], a[6] == "1");
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let config = agent::aws::config_loader("us-east-1")
            .endpoint_url(endpoint)
            .credentials_provider(aws_sdk_s3::config::Credentials::new("testing", "testing", None, None, "bench"))
            .load()
            .await;
        let store = agent::aws::S3Objects::new(agent::aws::S3Objects::client(&config));
        let fetcher = if together { Fetcher::EveryNode } else { Fetcher::Master };
        let set = DataSet { bucket: bucket.clone(), prefix: prefix.clone(), dir: "/data".into(), fetcher };
        let mut plan =
            Plan::for_node(root.as_ref(), "/efs", vec![set], ip, &format!("boot-{ip}"), node_contract::Role::Master);
        plan.efs_data_dir = efs.into();
        plan.bind = format!("{ip}:0").parse().unwrap();
        plan.settle = Duration::from_millis(500);
        plan.refresh = Duration::from_millis(500);
        let fetch = DataFetch::start(store, plan).await.unwrap_or_else(|e| panic!("{e}"));
        let ready = fetch.run().await.unwrap_or_else(|e| panic!("{e}"));
        let s = fetch.progress().snapshot();
        println!(
            "{}",
            serde_json::json!({
                "ip": ip, "millis": ready.millis, "bytes": ready.bytes, "bytes_from_s3": ready.bytes_from_s3,
                "bytes_from_peers": s.bytes_from_peers, "s3_gets": s.s3_gets, "peer_fallbacks": s.peer_fallbacks,
                "max_parts_held": fetch.engine().max_parts_held(), "max_bytes_held": fetch.engine().max_bytes_held(),
            })
        );
        // Fetching together, a node serves its peers until they are done:
        // the driver ends it.
        if together {
            std::future::pending::<()>().await;
        }
    });
}

fn cluster(a: &[String]) {
    let n: usize = a[0].parse().expect("N");
    let (endpoint, bucket, prefix, out) = (&a[1], &a[2], &a[3], &a[4]);
    let exe = std::env::current_exe().unwrap();
    let efs = format!("{out}/efs");
    std::fs::create_dir_all(&efs).unwrap();
    let started = Instant::now();
    let mut children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "node",
                    endpoint,
                    bucket,
                    prefix,
                    &format!("{out}/node{i}"),
                    &efs,
                    &format!("127.0.0.{}", 20 + i),
                ])
                .arg(if n > 1 { "1" } else { "0" })
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut lines = Vec::new();
    for c in &mut children {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "a node ended without its data");
        lines.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
    }
    let wall = started.elapsed();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let sum = |k: &str| lines.iter().map(|l| l[k].as_u64().unwrap_or(0)).sum::<u64>();
    println!(
        "{}",
        serde_json::json!({
            "nodes": n, "wall_ms": wall.as_millis() as u64, "bytes_per_node": lines[0]["bytes"],
            "bytes_from_s3": sum("bytes_from_s3"), "bytes_from_peers": sum("bytes_from_peers"),
            "s3_gets": sum("s3_gets"), "peer_fallbacks": sum("peer_fallbacks"),
            "slowest_node_ms": lines.iter().map(|l| l["millis"].as_u64().unwrap_or(0)).max(),
            "max_parts_held": lines.iter().map(|l| l["max_parts_held"].as_u64().unwrap_or(0)).max(),
            "max_bytes_held": lines.iter().map(|l| l["max_bytes_held"].as_u64().unwrap_or(0)).max(),
        })
    );
}
