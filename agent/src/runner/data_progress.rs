//! The master's count of the nodes' data fetches (docs/ARCHITECTURE.md,
//! "Training data"): every 15 s it sums the progress files the nodes
//! leave on EFS ([`crate::data::read_progress`],
//! [`crate::data::summary_line`]) into one line, logs it when it changed,
//! and leaves it on the worker group's tag
//! [`node_contract::data::DATA_TAG`], where `synth status` reads it. It
//! runs beside everything else on the master, from before the master's own
//! fetch, for as long as the agent runs (workers that join later fetch
//! too); a tag it cannot write is logged and tried again at the next
//! count.

use std::path::{Path, PathBuf};
use std::time::Duration;

use node_contract::clock::Clock;
use node_contract::data::{DATA_DIR_ON_EFS, DataMark};
use tracing::{info, warn};

use super::retry::retry;
use crate::ports::WorkerGroup;

/// How often the master counts.
pub(super) const EVERY: Duration = Duration::from_secs(15);

/// A node whose file is older than this is not fetching any more (its
/// rate is left out and it is named).
const STALE_MS: u64 = 60_000;

/// The directory on EFS (under the agent's root) the nodes report in.
pub(super) fn data_dir(root: &Path, efs_mount: &str) -> PathBuf {
    node_contract::files::under(root, efs_mount).join(DATA_DIR_ON_EFS)
}

/// Counts, logs and tags every `every` until the agent stops.
pub(super) async fn report_loop<G: WorkerGroup>(dir: PathBuf, group: &G, every: Duration, clock: Clock) {
    let mut last = String::new();
    loop {
        if let Some(line) = count(&dir, &mut last, clock()) {
            info!("{line}");
            let mark = DataMark { at_ms: clock(), line: line.trim_start_matches("data: ").to_owned() };
            let (tag, value) = (node_contract::data::DATA_TAG, mark.to_tag());
            if let Err(e) = retry("tag the worker group with the data count", || group.set_tag(tag, &value)).await {
                warn!("cannot write the data count to the worker group's tag {tag}: {e}");
                // Written again at the next count.
                last.clear();
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// The line for the nodes' files in `dir` at `now_ms` when it differs
/// from `last` (which it becomes); `None` when nothing changed or no node
/// reported yet.
fn count(dir: &Path, last: &mut String, now_ms: u64) -> Option<String> {
    let nodes = crate::data::read_progress(dir);
    if nodes.is_empty() {
        return None;
    }
    let line = crate::data::summary_line(&nodes, now_ms, STALE_MS);
    (line != *last).then(|| {
        last.clone_from(&line);
        line
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::NodeProgress;
    use crate::ports::GroupSize;
    use crate::ports::failing::{Failing, Op};
    use crate::ports::memory::MemoryGroup;

    fn progress(ip: &str, done: u64, total: u64, now: u64) -> NodeProgress {
        NodeProgress {
            version: crate::data::progress::PROGRESS_VERSION,
            ip: ip.into(),
            bytes_total: total,
            bytes_done: done,
            bytes_from_s3: done / 2,
            bytes_from_peers: done / 2,
            bytes_per_second: 1e8,
            done: done == total,
            updated_unix_ms: now,
        }
    }

    /// Nothing until a node reports; then a line, only when it changes.
    #[test]
    fn the_count_is_a_line_when_it_changed() {
        let root = tempfile::tempdir().unwrap();
        let dir = data_dir(root.path(), "/efs");
        let mut last = String::new();
        assert_eq!(count(&dir, &mut last, 1_000), None);
        for ip in ["10.0.0.1", "10.0.0.2"] {
            crate::data::progress::write_progress(&dir, &progress(ip, 2_000_000_000, 8_000_000_000, 1_000)).unwrap();
        }
        let line = count(&dir, &mut last, 1_000).expect("a line");
        assert!(line.contains("on 2 nodes"), "{line}");
        assert_eq!(count(&dir, &mut last, 1_000), None, "unchanged");
        crate::data::progress::write_progress(&dir, &progress("10.0.0.2", 8_000_000_000, 8_000_000_000, 2_000))
            .unwrap();
        assert!(count(&dir, &mut last, 2_000).is_some_and(|l| l.contains("1 done")), "{last}");
    }

    /// The loop tags the group with the line, as `synth status` reads it.
    #[tokio::test]
    async fn the_loop_tags_the_worker_group() {
        let root = tempfile::tempdir().unwrap();
        let dir = data_dir(root.path(), "/efs");
        crate::data::progress::write_progress(&dir, &progress("10.0.0.1", 1_000_000_000, 4_000_000_000, 5_000))
            .unwrap();
        let group = Failing::new(MemoryGroup::new(GroupSize { requested: 1, min: 1 }));
        let looping = report_loop(dir, &group, Duration::from_millis(10), || 5_000);
        assert!(tokio::time::timeout(Duration::from_millis(100), looping).await.is_err(), "the loop goes on");
        let others = [
            Op::Size,
            Op::SetDesiredCapacity,
            Op::CompleteLifecycle,
            Op::Terminate,
            Op::SetUnhealthy,
            Op::LaunchFailures,
            Op::Instances,
        ];
        assert!(others.iter().all(|&op| group.calls(op) == 0), "only tags are written");
        let written: Vec<(String, String)> = group.inner().held().tags.clone().into_iter().collect();
        assert_eq!(group.calls(Op::SetTag), 1, "one tag for an unchanged count: {written:?}");
        assert_eq!(written.len(), 1, "{written:?}");
        let (key, value) = &written[0];
        assert_eq!(key, node_contract::data::DATA_TAG);
        let mark = DataMark::from_tag(value).expect("a data mark");
        assert_eq!(mark.at_ms, 5_000);
        assert!(mark.line.contains("on 1 nodes") || mark.line.contains("on 1 node"), "{}", mark.line);
    }
}
