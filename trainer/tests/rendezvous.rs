//! The rendezvous host over real TCP: bad input is refused with a reason
//! (never a panic, the host keeps serving), and the first formation orders
//! ranks master first, then by the agent's worker index, whatever order the
//! processes connect in.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use trainer::train::elastic::{self, ElasticConfig, Launch, Membership, Next};
use trainer::train::rendezvous::{self, HostConfig, Roster};
use trainer::train::ring::RingConfig;

fn state(root: &std::path::Path, me: u32, nodes: &[u32]) {
    let nodes: Vec<_> = nodes
        .iter()
        .map(|&i| {
            serde_json::json!({"index": i, "alias": format!("deeplearning-worker{i}"), "instance_id": format!("i-{i}"),
            "private_ip": "127.0.0.1", "hostname": format!("ip-{i}"), "gpus": 0, "ssh_host_key": "k"})
        })
        .collect();
    let s = serde_json::json!({"version": 1, "instance_id": format!("i-{me}"), "generation": 4,
        "manifest": {"cluster": "t", "generation": 4, "master": "i-1", "nodes": nodes, "cluster_public_key": "k"}});
    let dir = root.join("var/lib/deeplearning");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("state.json"), s.to_string()).unwrap();
}

fn host(root: &std::path::Path, expected: usize) -> SocketAddr {
    let config = HostConfig {
        expected,
        join_timeout: Duration::from_secs(20),
        report_timeout: Duration::from_secs(2),
        nccl_id: Some(std::sync::Arc::new(|| vec![7u8; 4])),
    };
    rendezvous::host(TcpListener::bind("127.0.0.1:0").unwrap(), Roster::new(root, None), config).unwrap()
}

fn refused(addr: SocketAddr, line: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(line).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn malformed_input_is_refused_with_a_reason_and_the_host_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    state(dir.path(), 1, &[1]);
    let addr = host(dir.path(), 1);
    for (line, want) in [
        (&b"garbage\n"[..], "malformed rendezvous message"),
        (b"{\"v\":9,\"type\":\"boundary\",\"round\":1,\"epoch\":0}\n", "protocol version Some(9)"),
        (b"{\"v\":2,\"type\":\"boundary\",\"round\":1,\"epoch\":0}\n", "the first message must be a hello"),
        (b"{\"v\":2,\"type\":\"hello\",\"alias\":3}\n", "invalid type"),
    ] {
        let answer = refused(addr, line);
        assert!(answer.contains("\"type\":\"refused\"") && answer.contains(want), "{answer}");
    }
    // Still serving: the master's process forms a group of one.
    let hello = Roster::new(dir.path(), None).identity(0, "127.0.0.1:1".parse().unwrap()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let hello = rendezvous::Hello { data_addr: listener.local_addr().unwrap(), ..hello };
    let (_m, next) = Membership::join(config(addr), listener, hello).unwrap();
    assert!(
        matches!(next, Next::Reformed { ref group, .. } if group.world_size == 1 && group.nccl_id == Some(vec![7; 4]))
    );
}

fn config(addr: SocketAddr) -> ElasticConfig {
    ElasticConfig {
        rendezvous: addr,
        connect_timeout: Duration::from_secs(5),
        decision_timeout: Duration::from_secs(20),
        ring: RingConfig {
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(2),
            chunk_elems: 256,
        },
    }
}

#[test]
fn ranks_follow_the_worker_index_not_the_connection_order() {
    let dir = tempfile::tempdir().unwrap();
    // Worker indices 1 (master), 2, 5, 9: connect in the order 9, 2, 5, 1.
    let indices = [9u32, 2, 5, 1];
    for i in indices {
        state(&dir.path().join(format!("n{i}")), i, &[1, 2, 5, 9]);
    }
    let addr = host(&dir.path().join("n1"), 4);
    let ranks = std::thread::scope(|s| {
        let hs: Vec<_> = indices
            .iter()
            .map(|&i| {
                std::thread::sleep(Duration::from_millis(50));
                let root = dir.path().join(format!("n{i}"));
                s.spawn(move || {
                    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                    let hello = Roster::new(&root, None).identity(0, listener.local_addr().unwrap()).unwrap();
                    let (_m, next) = Membership::join(config(addr), listener, hello).unwrap();
                    match next {
                        Next::Reformed { group, epoch: 0, redo: false, .. } => (i, group.rank, group.generation),
                        other => panic!("{other:?}"),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    assert_eq!(ranks, vec![(9, 3, 4), (2, 1, 4), (5, 2, 4), (1, 0, 4)]);
}

/// Rank 0 evaluates and writes the checkpoint before it reports an epoch's
/// end, so it may report long after the others: it is never taken for a
/// silent member (it runs the rendezvous; if it were gone, so would be the host).
#[test]
fn a_slow_rank_0_at_a_boundary_is_waited_for_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    for i in [1u32, 2, 3] {
        state(&dir.path().join(format!("n{i}")), i, &[1, 2, 3]);
    }
    let addr = host(&dir.path().join("n1"), 3);
    let nexts = std::thread::scope(|s| {
        let hs: Vec<_> = [1u32, 2, 3]
            .into_iter()
            .map(|i| {
                let root = dir.path().join(format!("n{i}"));
                s.spawn(move || {
                    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                    let hello = Roster::new(&root, None).identity(0, listener.local_addr().unwrap()).unwrap();
                    let (mut m, next) = Membership::join(config(addr), listener, hello).unwrap();
                    assert!(matches!(next, Next::Reformed { epoch: 0, .. }), "{next:?}");
                    if i == 1 {
                        // Longer than the host's 2 s report timeout.
                        std::thread::sleep(Duration::from_secs(3));
                    }
                    format!("{:?}", m.at_boundary(0, false))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    assert_eq!(nexts, vec!["Ok(Continue)"; 3]);
}

/// `trainer train --resume` under `trainer launch`: the process brings the
/// epoch its checkpoint completed, and the first group starts there instead
/// of at epoch 0.
#[test]
fn the_first_group_starts_at_the_epoch_a_resumed_process_holds() {
    let dir = tempfile::tempdir().unwrap();
    state(dir.path(), 1, &[1]);
    let master_port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let launch = Launch { rank: 0, world_size: 1, local_rank: 0, master_addr: "127.0.0.1".into(), master_port };
    let host = HostConfig { report_timeout: Duration::from_secs(2), ..HostConfig::new(1) };
    let (_m, next) = elastic::connect(&launch, &Roster::new(dir.path(), None), (3, 1234), host, config).unwrap();
    assert!(matches!(next, Next::Reformed { epoch: 3, redo: false, .. }), "{next:?}");
}
