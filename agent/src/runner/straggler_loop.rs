//! The straggler reporter, beside the node loop on every node: every
//! [`EVERY`] it reads the record rank 0 of `trainer train` leaves on its
//! node (`node_contract::straggler::STRAGGLER_PATH`; rank 0 runs on the
//! master) and sends each finding it has not sent yet to the master's queue
//! as a `straggler` message. Costs nothing while no file is there; a send
//! that fails is tried again at the next read. After an agent restart the
//! file's findings are sent again; the master recognises them.

use std::path::Path;
use std::time::Duration;

use node_contract::message::Message;
use node_contract::straggler::{STRAGGLER_PATH, StragglerFile};
use tracing::{info, warn};

use crate::ports::Queue;

/// How often the record is read.
pub(super) const EVERY: Duration = Duration::from_secs(5);

/// Reads the record under `root` and sends every finding named after
/// `*sent_through` (unix ms), oldest first, moving `*sent_through` to a
/// finding's time once every finding named at that time is sent (rank 0
/// names several at once with one time); stops at the first send that
/// fails (the next read tries again, and sends again the findings of that
/// time already sent: the master recognises them).
pub(super) async fn send_new(root: &Path, queue: &impl Queue, sent_through: &mut u64) {
    let path = node_contract::files::under(root, STRAGGLER_PATH);
    let Ok(text) = std::fs::read_to_string(&path) else { return };
    let file = match StragglerFile::from_json(&text) {
        Ok(f) => f,
        Err(e) => {
            warn!("{}: {e}", path.display());
            return;
        }
    };
    let new: Vec<_> = file.newer_than(*sent_through).collect();
    for (i, s) in new.iter().enumerate() {
        match queue.send(&Message::Straggler((*s).clone()).to_body()).await {
            Ok(()) => {
                info!("straggler named by trainer train: {}; told the master", s.line());
                if new.get(i + 1).is_none_or(|next| next.named_unix_ms != s.named_unix_ms) {
                    *sent_through = s.named_unix_ms;
                }
            }
            Err(e) => {
                warn!("cannot send a straggler to the master (trying again): {e}");
                return;
            }
        }
    }
}

/// Never returns (it ends with the agent).
pub(super) async fn report_loop(root: &Path, master_queue: &impl Queue) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent_through = 0;
    loop {
        ticks.tick().await;
        send_new(root, master_queue, &mut sent_through).await;
    }
}

#[cfg(test)]
mod tests {
    use node_contract::message::{MasterInbound, parse_master_queue};
    use node_contract::straggler::Straggler;

    use super::*;

    fn finding(at: u64) -> Straggler {
        Straggler {
            alias: "deeplearning-worker3".into(),
            instance_id: "i-3".into(),
            rank: 2,
            local_rank: 0,
            percent_slower: 40,
            steps: 200,
            named_unix_ms: at,
            after_checkpoint: false,
        }
    }

    /// What the trainer's writer leaves is sent once, finding by finding.
    #[tokio::test]
    async fn each_new_finding_is_sent_once() {
        let root = tempfile::tempdir().unwrap();
        let queue = crate::ports::memory::MemoryQueue::default();
        let mut through = 0;
        send_new(root.path(), &queue, &mut through).await;
        assert!(queue.sent().is_empty(), "no file: nothing sent");
        let path = node_contract::files::under(root.path(), STRAGGLER_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = StragglerFile::default().with(finding(10)).with(finding(20));
        std::fs::write(&path, file.to_json()).unwrap();
        send_new(root.path(), &queue, &mut through).await;
        send_new(root.path(), &queue, &mut through).await;
        std::fs::write(&path, file.with(finding(30)).to_json()).unwrap();
        send_new(root.path(), &queue, &mut through).await;
        let sent: Vec<u64> = queue
            .sent()
            .iter()
            .map(|body| match parse_master_queue(body).unwrap() {
                MasterInbound::Straggler(s) => s.named_unix_ms,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sent, [10, 20, 30]);
        // A damaged file is logged, not a crash, and sends nothing.
        std::fs::write(&path, "{").unwrap();
        send_new(root.path(), &queue, &mut through).await;
        assert_eq!(queue.sent().len(), 3);
    }

    /// Findings named at one time (rank 0 names several at once): a send
    /// that fails after the first of them loses none; the next read sends
    /// again from the first of that time.
    #[tokio::test]
    async fn a_failed_send_loses_no_finding_named_at_the_same_time() {
        use crate::ports::PortError;
        use crate::ports::failing::{Failing, Op, When};

        let root = tempfile::tempdir().unwrap();
        let queue = Failing::new(crate::ports::memory::MemoryQueue::default()).fail(
            Op::Send,
            When::Nth(3),
            PortError::Transient("throttled".into()),
        );
        let path = node_contract::files::under(root.path(), STRAGGLER_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = StragglerFile::default()
            .with(finding(10))
            .with(Straggler { rank: 5, ..finding(20) })
            .with(Straggler { rank: 6, ..finding(20) });
        std::fs::write(&path, file.to_json()).unwrap();
        let mut through = 0;
        send_new(root.path(), &queue, &mut through).await;
        send_new(root.path(), &queue, &mut through).await;
        send_new(root.path(), &queue, &mut through).await;
        let sent: Vec<(u64, u32)> = queue
            .inner()
            .sent()
            .iter()
            .map(|body| match parse_master_queue(body).unwrap() {
                MasterInbound::Straggler(s) => (s.named_unix_ms, s.rank),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sent, [(10, 2), (20, 5), (20, 5), (20, 6)]);
        assert_eq!(through, 20);
    }
}
