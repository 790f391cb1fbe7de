//! The idle guard's probe loop, beside the node loop on every node of a
//! cluster with an idle guard (docs/ARCHITECTURE.md, "The idle guard"):
//! every [`Cadence::probe`] it reads what keeps the node busy
//! ([`crate::activity`]).
//!
//! A worker sends the master an `activity` message only when its reading
//! turns busy or idle, and once a report period while it stays busy: an
//! idle worker sends nothing, so an idle cluster costs no SQS call for the
//! guard (the master counts a busy reading that is not renewed as stale).
//! The master hands its own readings to its loop through a channel instead.

use std::path::Path;
use std::time::Duration;

use node_contract::clock::Clock;
use node_contract::idle::Activity;
use node_contract::message::Message;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::gpu_gate::SharedGpus;
use crate::ports::Queue;

/// How often the probes run, and how often a busy node reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cadence {
    /// Between two probes.
    pub probe: Duration,
    /// Between two reports of a node that stays busy (a minute).
    pub report_ms: u64,
}

impl Cadence {
    /// The cadence for a minute of `minute_ms` (60,000 on a node; shorter
    /// in the end-to-end tests, through `agent run`'s hidden
    /// `--idle-minute-ms`): a probe every sixth of it (10 s), a busy
    /// report every minute.
    pub(crate) fn for_minute(minute_ms: u64) -> Cadence {
        Cadence { probe: Duration::from_millis((minute_ms / 6).max(100)), report_ms: minute_ms.max(1) }
    }
}

/// Whether a worker sends its reading now: when its busy-ness changed
/// since the last one it sent (a first idle reading is not sent: the master
/// starts from idle), and every report period while it stays busy.
pub(crate) fn due(last_sent: Option<(bool, u64)>, busy: bool, now_ms: u64, report_ms: u64) -> bool {
    match last_sent {
        None => busy,
        Some((was_busy, _)) if was_busy != busy => true,
        Some((_, at)) => busy && now_ms.saturating_sub(at) >= report_ms,
    }
}

/// A worker's loop: probes, and sends its reading to the master's queue
/// when [`due`]. Never returns; a send that fails is tried again at the
/// next probe.
pub(super) async fn report_loop<Q: Queue>(
    root: &Path,
    instance_id: &str,
    master_queue: &Q,
    gpus: SharedGpus,
    cadence: Cadence,
    clock: Clock,
) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(cadence.probe);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sent: Option<(bool, u64)> = None;
    loop {
        ticks.tick().await;
        let reading = read(root, instance_id, &gpus).await;
        let (busy, now) = (reading.busy(), clock());
        if !due(last_sent, busy, now, cadence.report_ms) {
            continue;
        }
        match master_queue.send(&Message::Activity(reading.clone()).to_body()).await {
            Ok(()) => {
                if last_sent.is_none_or(|(was, _)| was != busy) {
                    info!("idle guard: this node is {}; told the master", reading.describe());
                }
                last_sent = Some((busy, now));
            }
            Err(e) => warn!("idle guard: cannot send this node's activity to the master (trying again): {e}"),
        }
    }
}

/// The master's loop: probes, and publishes each reading to the master
/// loop. Never returns (it ends with the agent).
pub(super) async fn own_loop(
    root: &Path,
    instance_id: &str,
    gpus: SharedGpus,
    cadence: Cadence,
    readings: watch::Sender<Option<Activity>>,
) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(cadence.probe);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = String::new();
    loop {
        ticks.tick().await;
        let reading = read(root, instance_id, &gpus).await;
        let now = reading.describe();
        if now != last {
            debug!("idle guard: the master is {now}");
            last = now;
        }
        readings.send_replace(Some(reading));
    }
}

/// One reading, off the async threads (it reads files under `/proc`, and NVML).
async fn read(root: &Path, instance_id: &str, gpus: &SharedGpus) -> Activity {
    let (root, id, gpus) = (root.to_owned(), instance_id.to_owned(), gpus.clone());
    tokio::task::spawn_blocking(move || crate::activity::probe(&id, &root, Path::new("/proc"), &*gpus))
        .await
        .unwrap_or_else(|_| Activity { instance_id: instance_id.to_owned(), ..Activity::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle worker sends nothing; one that gets busy says so at once and
    /// then once a minute; its return to idle is sent at once, once.
    #[test]
    fn a_worker_reports_changes_at_once_and_busy_minutes_only() {
        const MIN: u64 = 60_000;
        let cadence = Cadence::for_minute(MIN);
        assert_eq!(cadence.probe, Duration::from_secs(10));
        // A day of probes: idle for an hour, busy for an hour, idle again.
        let mut last = None;
        let mut sent = Vec::new();
        for tick in 0..(24 * 360u64) {
            let now = tick * 10_000;
            let busy = (60 * MIN..120 * MIN).contains(&now);
            if due(last, busy, now, cadence.report_ms) {
                sent.push((now, busy));
                last = Some((busy, now));
            }
        }
        // 60 busy reports (one a minute) and one idle report.
        assert_eq!(sent.iter().filter(|(_, b)| *b).count(), 60, "{sent:?}");
        assert_eq!(sent.iter().filter(|(_, b)| !*b).collect::<Vec<_>>(), [&(120 * MIN, false)]);
        assert_eq!(sent[0], (60 * MIN, true));
    }
}
