//! The TCP ring all-reduce between threads over real 127.0.0.1 sockets:
//! sums for awkward lengths, bit-identical results, broadcast, stale
//! handshakes refused, a closed peer and a silent peer reported.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use trainer::train::collective::{Collective, CollectiveError, Group};
use trainer::train::ring::{Ring, RingConfig};

fn listeners(n: usize) -> Vec<TcpListener> {
    (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect()
}

fn group(ls: &[TcpListener], rank: usize, generation: u64) -> Group {
    Group {
        generation,
        rank,
        world_size: ls.len(),
        peers: ls.iter().map(|l| l.local_addr().unwrap()).collect(),
        nccl_id: None,
        source_rank: 0,
        members: Vec::new(),
    }
}

fn fast() -> RingConfig {
    RingConfig { connect_timeout: Duration::from_secs(5), io_timeout: Duration::from_secs(2), chunk_elems: 1000 }
}

/// Runs `f(ring, rank)` on `n` connected ranks, one thread each; returns each rank's result.
fn on_ring<T: Send>(n: usize, f: impl Fn(&mut Ring, usize) -> T + Sync) -> Vec<T> {
    on_listeners(&listeners(n), 1, f)
}

/// As [`on_ring`], on given listeners and for rendezvous round `round`.
fn on_listeners<T: Send>(ls: &[TcpListener], round: u64, f: impl Fn(&mut Ring, usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..ls.len())
            .map(|r| {
                let f = &f;
                s.spawn(move || {
                    let mut ring = Ring::connect(&group(ls, r, 1), round, &ls[r], &fast()).unwrap();
                    f(&mut ring, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn all_reduce_sums_any_length_and_every_rank_ends_identical() {
    for n in [1usize, 2, 3, 4] {
        for len in [0usize, 1, 2, 3, 5, 999, 10_007] {
            let out = on_ring(n, |ring, r| {
                // Values that do not sum exactly in f32, so order matters.
                let mut buf: Vec<f32> = (0..len).map(|i| (i as f32 * 0.1 + r as f32).sin() * 1e3 + 1e-3).collect();
                ring.all_reduce_sum(&mut buf).unwrap();
                buf
            });
            for (i, got) in out[0].iter().enumerate() {
                let want: f64 = (0..n).map(|r| f64::from((i as f32 * 0.1 + r as f32).sin() * 1e3 + 1e-3)).sum();
                assert!((f64::from(*got) - want).abs() < 1e-2, "n {n} len {len} i {i}: {got} vs {want}");
            }
            assert_eq!(out[0].len(), len);
            for o in &out[1..] {
                let same = o.iter().zip(&out[0]).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "n {n} len {len}: ranks differ");
            }
        }
    }
}

#[test]
fn broadcast_copies_the_roots_buffer() {
    let out = on_ring(3, |ring, r| {
        let mut buf: Vec<f32> = (0..2500).map(|i| (i * (r + 1)) as f32).collect();
        ring.broadcast(&mut buf, 1).unwrap();
        let err = ring.broadcast(&mut buf, 3).unwrap_err();
        (buf, err.to_string())
    });
    let want: Vec<f32> = (0..2500).map(|i| (i * 2) as f32).collect();
    for (buf, err) in out {
        assert_eq!(buf, want);
        assert!(err.contains("no rank 3"), "{err}");
    }
}

#[test]
fn a_stale_peer_is_refused_and_the_group_still_forms() {
    let ls = listeners(2);
    // A leftover from round 1 knocks on rank 1's door before the round 2 group connects.
    let mut stale = TcpStream::connect(ls[1].local_addr().unwrap()).unwrap();
    let mut hello = Vec::from(*b"DLRING\r\n");
    hello.extend(1u32.to_le_bytes());
    hello.extend(1u64.to_le_bytes());
    hello.extend(1u64.to_le_bytes()); // round 1
    hello.extend(0u32.to_le_bytes());
    hello.extend(2u32.to_le_bytes());
    stale.write_all(&hello).unwrap();
    let sums = on_listeners(&ls, 2, |ring, r| {
        let mut v = vec![r as f32 + 1.0; 3];
        ring.all_reduce_sum(&mut v).unwrap();
        v
    });
    assert_eq!(sums, vec![vec![3.0; 3], vec![3.0; 3]]);
    // The stale connection was closed without a reply.
    let mut b = [0u8; 1];
    stale.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(std::io::Read::read(&mut stale, &mut b).unwrap(), 0);
}

#[test]
fn a_closed_peer_is_a_peer_error_and_a_silent_one_times_out() {
    let errs = on_ring(3, |ring, r| {
        let mut v = vec![1.0f32; 100_000];
        ring.all_reduce_sum(&mut v).unwrap();
        match r {
            // Rank 2 closes its sockets: a process that died.
            2 => {
                ring.close();
                None
            }
            // Rank 1 stays connected but never speaks again: a silent host.
            1 => {
                std::thread::sleep(Duration::from_secs(6));
                None
            }
            _ => {
                let t = Instant::now();
                let e = ring.all_reduce_sum(&mut v).unwrap_err();
                Some((e, t.elapsed()))
            }
        }
    });
    let (e, took) = errs.into_iter().flatten().next().unwrap();
    // Rank 0 reads from rank 2 (closed) and writes to rank 1 (silent): whichever
    // it meets first, the error names that peer and its kind.
    match &e {
        CollectiveError::Peer { peer: 2, .. } => {}
        CollectiveError::Timeout { peer: 1, seconds: 2, .. } => assert!(took >= Duration::from_secs(2)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // A silent previous rank alone: the reader times out naming it.
    let e = on_ring(2, |ring, r| {
        if r == 1 {
            std::thread::sleep(Duration::from_secs(4));
            return None;
        }
        Some(ring.all_reduce_sum(&mut [1.0f32; 4]).unwrap_err())
    });
    let e = e.into_iter().flatten().next().unwrap();
    assert!(matches!(e, CollectiveError::Timeout { peer: 1, seconds: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("sent nothing for 2 s"), "{e}");
}
