//! The interruption watcher, beside the node loop on every node: every
//! [`interruption::POLL_INTERVAL`] it asks IMDS for a Spot instance action
//! or a rebalance recommendation ([`crate::interruption`]), and on a worker
//! in a Capacity Block it reads the clock against the block's end; on a
//! new notice it writes the notice file for `trainer`, stops the node loop
//! from registering again, and sends `notice` to the master, which removes
//! the node at once.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use node_contract::clock::Clock;
use node_contract::interruption::{CapacityBlock, Interruption, NoticeKind, format_utc};
use node_contract::message::Message;
use tracing::{error, info, warn};

use super::retry::retry;
use crate::files;
use crate::identity::Identity;
use crate::interruption::{self, FailureLog, Watcher};
use crate::ports::Queue;

/// Polls IMDS for interruption notices every [`interruption::POLL_INTERVAL`]
/// (the first poll at once), and gives the node the notice of its Capacity
/// Block's end (`block`, from the node config) at the first poll from
/// [`CapacityBlock::leave_unix`] by `clock`; on a new notice writes the
/// notice file, tells the node loop to stop registering, and sends `notice`
/// to the master. Never returns: IMDS and SQS failures are logged, and it
/// polls again.
#[allow(clippy::too_many_arguments)]
pub(super) async fn interruption_loop<Q: Queue>(
    root: &Path,
    imds: &aws_config::imds::Client,
    me: &Identity,
    master_queue: &Q,
    interrupted: &AtomicBool,
    mut watcher: Watcher,
    block: Option<&CapacityBlock>,
    clock: Clock,
) -> anyhow::Result<()> {
    if let Some(block) = block {
        info!("{}", block.schedule_line());
    }
    let mut failures = FailureLog::default();
    let mut ticks = tokio::time::interval(interruption::POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A `notice` that could not be sent even after retries is sent again at
    // every poll until it goes out: the master must hear of it. A notice of
    // this boot found at start is sent again too (the agent may have stopped
    // between writing the file and sending it; a duplicate changes nothing).
    let mut unsent: Option<String> = watcher.current().map(|n| Message::Notice(n.clone()).to_body());
    loop {
        ticks.tick().await;
        if let Some(body) = &unsent
            && master_queue.send(body).await.is_ok()
        {
            info!("told the master about the interruption notice");
            unsent = None;
        }
        let result = interruption::poll(imds, &me.instance_id).await;
        failures.record(&result);
        let seen = interruption::seen(block, &me.instance_id, clock(), result.ok().flatten());
        let Some(notice) = watcher.observe(seen) else { continue };
        match (notice.notice, block) {
            (NoticeKind::CapacityBlockEnd, Some(block)) => warn!(
                notice = %notice.describe(),
                "capacity block {} ends at {}: this node leaves the cluster now (EC2 reclaims it at {})",
                block.id,
                format_utc(block.end_unix),
                notice.time
            ),
            _ => warn!(notice = %notice.describe(), "EC2 gave this node an interruption notice: it leaves the cluster"),
        }
        leave_on(root, me, &notice, interrupted, clock);
        let body = Message::Notice(notice).to_body();
        match retry("report the interruption notice", || master_queue.send(&body)).await {
            Ok(()) => {
                info!("told the master about the interruption notice");
                unsent = None;
            }
            Err(e) => {
                warn!("cannot tell the master about the interruption notice yet, trying again at every poll: {e}");
                unsent = Some(body);
            }
        }
    }
}

/// What every notice does on the node, whoever raised it (EC2, the
/// Capacity Block's clock, the GPU watch): the node loop stops registering,
/// and the notice file tells `trainer` (its ranks leave).
pub(super) fn leave_on(root: &Path, me: &Identity, notice: &Interruption, interrupted: &AtomicBool, clock: Clock) {
    interrupted.store(true, Ordering::SeqCst);
    let file = files::notice::NoticeFile {
        version: files::notice::NOTICE_FILE_VERSION,
        interruption: notice.clone(),
        boot_id: me.boot_id.clone(),
        noticed_unix_ms: clock(),
    };
    if let Err(e) = tokio::task::block_in_place(|| files::notice::write(root, &file)) {
        error!("cannot write the notice file (trainer will not see the notice): {e}");
    }
}
