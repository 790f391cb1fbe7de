//! All-reduce bandwidth benchmark (not a test): 4 hosts in network
//! namespaces on one bridge, every link limited to 1 Gbit/s in both
//! directions with `tc ... tbf rate 1gbit burst 256kb latency 50ms` (egress
//! of the host's `eth0`, and egress of its bridge-side veth, which is the
//! host's ingress). `trainer launch -- trainer bench` runs one rank per host
//! over real sshd (e2e::sshd), exactly as on a cluster; the table it prints
//! is shown with each size's bus bandwidth against the link rate and
//! against a reference measured in the same run on the same shaped links:
//! one plain TCP stream between two of the hosts (this binary re-executed
//! in the namespaces as sender and receiver).
//!
//! Run: `cargo build --release -p trainer && cargo bench -p e2e --bench allreduce`
//! (root, `ip`, `tc`, openssh-server; trainer binary: `TRAINER_BIN`, else
//! `<target>/release/trainer`). Options: `ALLREDUCE_MAX_BYTES` (default
//! 256 MiB), `ALLREDUCE_ITERS` (default 10: with 3, each size below 32 MiB
//! was timed over well under a second and one slow round moved it by 0.05).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::netns::run;
use e2e::sshd::{SshCluster, trainer_bin};

/// The shaped link rate, bits per second.
const LINK_BITS: f64 = 1e9;
const TBF: [&str; 8] = ["root", "tbf", "rate", "1gbit", "burst", "256kb", "latency", "50ms"];

fn shape(cluster: &SshCluster) {
    let net = cluster.network();
    let tbf = &TBF[..];
    for i in 0..net.len() {
        let veth = format!("dl{}v{i}", net.number());
        let mut host_side = vec!["qdisc", "replace", "dev", veth.as_str()];
        host_side.extend_from_slice(tbf);
        run("tc", &host_side).expect("tc on the bridge side");
        let mut node_side = vec!["netns", "exec", net.namespace(i), "tc", "qdisc", "replace", "dev", "eth0"];
        node_side.extend_from_slice(tbf);
        run("ip", &node_side).expect("tc in the namespace");
    }
}

/// The reference: one TCP stream of `bytes` from host 1 to host 2; bytes per second.
fn reference_stream(cluster: &SshCluster, bytes: u64) -> f64 {
    let net = cluster.network();
    let exe = std::env::current_exe().unwrap();
    let addr = format!("{}:5201", net.node_ip(2));
    let mut recv = net
        .command(2, &exe)
        .env("ALLREDUCE_STREAM", format!("recv {addr}"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("receiver");
    std::thread::sleep(Duration::from_millis(300));
    let sent = net.command(1, &exe).env("ALLREDUCE_STREAM", format!("send {addr} {bytes}")).status().unwrap();
    assert!(sent.success(), "the reference sender failed");
    let mut out = String::new();
    recv.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(recv.wait().unwrap().success());
    out.trim().parse().unwrap_or_else(|_| panic!("receiver printed {out:?}"))
}

/// The re-executed halves of the reference stream.
fn stream(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    match parts.as_slice() {
        ["recv", addr] => {
            let (mut s, _) = TcpListener::bind(addr).unwrap().accept().unwrap();
            let mut buf = vec![0u8; 1 << 20];
            let (mut total, mut first) = (0u64, None);
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                first.get_or_insert_with(Instant::now);
                total += n as u64;
            }
            let secs = first.map_or(1.0, |t| t.elapsed().as_secs_f64());
            println!("{}", total as f64 / secs);
        }
        ["send", addr, bytes] => {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            let buf = vec![7u8; 1 << 20];
            let mut left: u64 = bytes.parse().unwrap();
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                s.write_all(&buf[..n]).unwrap();
                left -= n as u64;
            }
        }
        _ => panic!("ALLREDUCE_STREAM={spec:?}"),
    }
}

fn main() {
    if let Ok(spec) = std::env::var("ALLREDUCE_STREAM") {
        stream(&spec);
        return;
    }
    let max_bytes: usize = std::env::var("ALLREDUCE_MAX_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(256 << 20);
    let iters: u32 = std::env::var("ALLREDUCE_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let trainer = trainer_bin().expect("trainer binary");
    let cluster = SshCluster::start(&[0, 0, 0, 0]).expect("4 hosts with sshd");
    shape(&cluster);
    let net = cluster.network();
    println!("4 hosts, every link shaped: tc tbf rate 1gbit burst 256kb latency 50ms (both directions)");

    let reference = reference_stream(&cluster, 256 << 20);

    let master_ip = net.node_ip(0).to_string();
    let out = cluster
        .master_command(&trainer)
        .args(["launch", "--job", "allreduce-bench", "--nproc-per-node", "1", "--"])
        .arg(&trainer)
        .args(["bench", "--master-addr", &master_ip, "--iters", &iters.to_string()])
        .args(["--max-bytes", &max_bytes.to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("trainer launch");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "trainer launch failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    // `[host/rank] ` prefixes: keep rank 0's table rows.
    let rows: Vec<(u64, f64)> = stdout
        .lines()
        .filter_map(|l| l.split_once("] ").map(|(_, rest)| rest))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5).then(|| Some((f[0].parse().ok()?, f[2].parse().ok()?))).flatten()
        })
        .collect();
    assert!(!rows.is_empty(), "no table in: {stdout}");
    let link = LINK_BITS / 8.0;
    println!(
        "reference: one TCP stream host 1 -> host 2: {:.1} MB/s = {:.3} of the link rate",
        reference / 1e6,
        reference / link
    );
    println!();
    println!("{:>12} {:>12} {:>14} {:>12} {:>14}", "size(B)", "time(us)", "busbw(MB/s)", "busbw/link", "busbw/stream");
    // busbw = algbw * 2(n-1)/n, from the measured time (the table rounds bandwidths).
    let busbw = |bytes: u64, us: f64| bytes as f64 / (us * 1e-6) * 2.0 * 3.0 / 4.0;
    for &(bytes, us) in &rows {
        let busbw = busbw(bytes, us);
        println!("{bytes:>12} {us:>12.0} {:>14.1} {:>12.3} {:>14.3}", busbw / 1e6, busbw / link, busbw / reference);
    }
    let best = rows.iter().map(|&(b, us)| busbw(b, us)).fold(0.0f64, f64::max);
    println!();
    println!(
        "largest bus bandwidth: {:.3} of the 1 Gbit/s link (target >= 0.9), {:.3} of one TCP stream",
        best / link,
        best / reference
    );
}
