//! The shipper against an in-memory CloudWatch Logs that can be made
//! unreachable ([`crate::ports::memory::MemoryLogs`]), or fail chosen
//! calls ([`crate::ports::failing`]).

use std::sync::Arc;

use node_contract::clock;
use node_contract::state::State;

use super::*;
use crate::ports::memory::MemoryLogs;

fn write_state(root: &Path, instance_id: &str, index: u32) {
    let manifest = node_contract::fixtures::manifest(2, "i-0000000000000000a", &[(index, instance_id)]);
    let state = State {
        version: node_contract::state::STATE_VERSION,
        instance_id: instance_id.into(),
        generation: 2,
        manifest,
    };
    crate::files::state::write(root, &state).unwrap();
}

const WORKER: &str = "i-0123456789abcdef0";

fn shipper<L: LogStreams + Clone>(root: &Path, logs: &L) -> (Arc<Spool>, Shipper<L>) {
    let spool = Arc::new(Spool::open(&spool_dir(root), spool::DEFAULT_CAP).unwrap());
    let prepare = root.join("var/log/deeplearning/prepare-data.log");
    (spool.clone(), Shipper::new(logs.clone(), spool, root, Role::Worker, WORKER, prepare, clock::system))
}

#[tokio::test]
async fn a_worker_ships_under_worker_until_it_has_an_index() {
    let root = tempfile::tempdir().unwrap();
    let logs = MemoryLogs::default();
    let (spool, mut shipper) = shipper(root.path(), &logs);
    std::fs::create_dir_all(root.path().join("var/log/deeplearning")).unwrap();
    std::fs::write(boot_log(root.path()), "user data: starting the agent\n").unwrap();
    std::fs::write(root.path().join("var/log/deeplearning/prepare-data.log"), "copying the data set\nout of space\n")
        .unwrap();
    spool.append(10, "agent starting").unwrap();
    assert_eq!(shipper.round().await, Ok(4));
    let before = format!("worker-{WORKER}");
    assert_eq!(
        logs.messages(&before),
        [
            "agent starting",
            "[boot] user data: starting the agent",
            "[prepare-data] copying the data set",
            "[prepare-data] out of space"
        ]
    );
    write_state(root.path(), WORKER, 3);
    spool.append(20, "applied generation 2").unwrap();
    assert_eq!(shipper.round().await, Ok(1));
    assert_eq!(logs.messages(&format!("worker3-{WORKER}")), ["applied generation 2"]);
    assert_eq!(logs.messages(&before).len(), 4, "nothing sent twice");
    assert_eq!(shipper.round().await, Ok(0));
}

#[tokio::test]
async fn lines_written_while_unreachable_arrive_once_when_it_answers() {
    let root = tempfile::tempdir().unwrap();
    let logs = MemoryLogs::default();
    let (spool, mut shipper) = shipper(root.path(), &logs);
    spool.append(1, "line 0").unwrap();
    assert_eq!(shipper.round().await, Ok(1));
    logs.down(true);
    for i in 1..=500 {
        spool.append(i, &format!("line {i}")).unwrap();
        if i % 100 == 0 {
            assert!(matches!(shipper.round().await, Err(PortError::Transient(_))));
        }
    }
    assert!(spool.unsent() > 0);
    // A restart while unreachable loses nothing either.
    drop(shipper);
    drop(spool);
    let (spool, mut shipper) = self::shipper(root.path(), &logs);
    logs.down(false);
    assert_eq!(shipper.round().await, Ok(500));
    assert_eq!(spool.unsent(), 0);
    let expected: Vec<String> = (0..=500).map(|i| format!("line {i}")).collect();
    assert_eq!(logs.messages(&format!("worker-{WORKER}")), expected);
}

/// Fault injection: the first put of a round is throttled; the round
/// reports it, and the next round sends the lines, once.
#[tokio::test]
async fn a_throttled_put_is_sent_again_at_the_next_round_and_arrives_once() {
    use crate::ports::failing::{Failing, Op, When};
    let root = tempfile::tempdir().unwrap();
    let logs =
        Failing::new(MemoryLogs::default()).fail(Op::Put, When::Nth(1), PortError::Transient("Throttling".into()));
    let (spool, mut shipper) = shipper(root.path(), &logs);
    spool.append(1, "line 1").unwrap();
    spool.append(2, "line 2").unwrap();
    assert!(matches!(shipper.round().await, Err(PortError::Transient(_))));
    assert_eq!(shipper.round().await, Ok(2));
    assert_eq!(logs.inner().messages(&format!("worker-{WORKER}")), ["line 1", "line 2"]);
    assert_eq!((logs.calls(Op::Put), logs.failed(Op::Put)), (2, 1));
    assert_eq!(spool.unsent(), 0);
}

#[tokio::test]
async fn a_master_ships_as_master() {
    let root = tempfile::tempdir().unwrap();
    let logs = MemoryLogs::default();
    let spool = Arc::new(Spool::open(&spool_dir(root.path()), spool::DEFAULT_CAP).unwrap());
    let mut shipper = Shipper::new(
        logs.clone(),
        spool.clone(),
        root.path(),
        Role::Master,
        "i-0000000000000000a",
        root.path().join("none"),
        clock::system,
    );
    spool.append(1, "forming").unwrap();
    assert_eq!(shipper.round().await, Ok(1));
    assert_eq!(logs.messages("master-i-0000000000000000a"), ["forming"]);
}

#[test]
fn a_worker_holds_its_first_lines_until_it_has_an_index_or_warned_2_s_ago_or_a_minute() {
    let early = Duration::from_secs(5);
    assert!(hold_first_lines(Role::Worker, false, None, early));
    assert!(!hold_first_lines(Role::Worker, true, None, early));
    // A warning while it applies its first manifest: the index follows at once.
    assert!(hold_first_lines(Role::Worker, false, Some(Duration::from_millis(10)), early));
    assert!(!hold_first_lines(Role::Worker, false, Some(WARNING_GRACE), early));
    assert!(!hold_first_lines(Role::Worker, false, None, FIRST_LINES_HOLD));
    assert!(!hold_first_lines(Role::Master, false, None, early));
}

#[test]
fn first_uploads_spread_at_about_the_create_stream_rate() {
    assert_eq!(first_upload_spread("i-0123", 0), Duration::ZERO);
    for nodes in [64usize, 256, 1000, 4000] {
        let window = Duration::from_millis(nodes as u64 * 1000 / CREATE_STREAM_PER_SECOND).min(MAX_SPREAD);
        let spreads: Vec<Duration> = (0..nodes).map(|i| first_upload_spread(&format!("i-{i:017x}"), nodes)).collect();
        assert!(spreads.iter().all(|d| *d < window), "{nodes}");
        // The same node waits the same; the cluster's streams come at about the rate.
        assert_eq!(spreads[7], first_upload_spread(&format!("i-{:017x}", 7), nodes));
        let seconds = window.as_secs().max(1) as usize;
        let mut per_second = vec![0usize; seconds + 1];
        for d in &spreads {
            per_second[d.as_secs() as usize] += 1;
        }
        let busiest = per_second.into_iter().max().unwrap();
        assert!(busiest <= 2 * nodes.div_ceil(seconds), "{nodes} nodes: {busiest} in one second");
    }
}
