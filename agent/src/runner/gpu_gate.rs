//! The GPU gate before the node registers, and the GPU watch beside the
//! loops (docs/ARCHITECTURE.md, "The GPU gate"). The checks themselves are
//! the `gpu-health` crate's; this is when they run and what follows.
//!
//! - **Gate**: with `gpu_check` in the node config, on a node with GPUs (the
//!   driver counts some, or its instance type promises some), before it
//!   registers: every check within the budget, each logged with its value,
//!   its expected value and how long it took; the report is left at
//!   [`GPU_CHECK_PATH`] for `trainer doctor` and sent to the master
//!   (`gpu_report`), passed or failed. A worker that failed under `replace`
//!   or `fail` does not register: it waits for its group to replace it (the
//!   master marks it unhealthy). Under `warn` it registers. The master
//!   always goes on (it is a member from the start; its own failed report
//!   fails the formation under `replace` and `fail`).
//! - **Watch**: every [`WATCH_EVERY`], what is new since the gate: a fatal
//!   XID, a new uncorrectable ECC error, a GPU gone, NVML failing. A fault
//!   is an interruption notice of kind `gpu_fault`: the notice file for
//!   `trainer` (its ranks leave at the next step), the node loop stops
//!   registering, and the master removes the node at once (and, under
//!   `replace`, marks it unhealthy), as on a Spot notice.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use node_contract::NodeConfig;
use node_contract::clock::Clock;
use node_contract::gpu::{GPU_CHECK_PATH, GPU_REPORT_FILE_VERSION, GpuAction, GpuReportFile};
use node_contract::interruption::{Interruption, NoticeKind, format_utc};
use node_contract::message::Message;
use tracing::{error, info, warn};

use super::retry::retry;
use crate::files;
use crate::identity::Identity;
use crate::ports::Queue;

/// How often the watch looks at the GPUs.
pub(super) const WATCH_EVERY: Duration = Duration::from_secs(5);

/// How long a node waits before it sends a report that could not be sent again.
const RESEND_AFTER: Duration = Duration::from_secs(10);

/// The NVIDIA kernel module's directory: there once the driver is loaded.
const DRIVER_PROC: &str = "/proc/driver/nvidia";

/// The NVIDIA driver's control device.
const DRIVER_DEVICE: &str = "/dev/nvidiactl";

/// The image has an NVIDIA driver that loaded (under `root`: `/` on a node):
/// then a GPU gate that cannot reach it is a fault of this instance.
fn driver_installed(root: &Path) -> bool {
    [DRIVER_PROC, DRIVER_DEVICE].iter().any(|p| node_contract::files::under(root, p).exists())
}

/// The GPUs as the agent reads them.
pub(super) type SharedGpus = Arc<dyn gpu_health::Gpus>;

/// The driver's GPUs, or the fixture's (tests).
pub(super) fn gpus(fixture: Option<&Path>) -> SharedGpus {
    Arc::from(gpu_health::open(fixture))
}

/// What the gate decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// No gate: off, or a node without GPUs.
    Off,
    /// The node passed.
    Passed,
    /// The node failed; `joins`: it registers all the same (`warn`, or the master).
    Failed { joins: bool },
}

impl Gate {
    /// The node goes on to register.
    pub(super) fn joins(self) -> bool {
        !matches!(self, Gate::Failed { joins: false })
    }

    /// The watch follows the GPUs afterwards.
    pub(super) fn watches(self) -> bool {
        self != Gate::Off
    }
}

/// Runs the gate when the config has one and the node has GPUs; reports to the master.
pub(super) async fn before_registering<Q: Queue>(
    root: &Path,
    config: &NodeConfig,
    me: &Identity,
    gpus: &SharedGpus,
    fixture: bool,
    master_queue: &Q,
    clock: Clock,
) -> Gate {
    let Some(check) = &config.gpu_check else { return Gate::Off };
    let expect = check.expect.get(&me.instance_type).cloned();
    if me.gpus == 0 && !fixture && expect.as_ref().is_none_or(|e| e.gpus == 0) {
        info!(
            "the GPU gate has nothing to check: no GPUs on this node, and its type {} promises none",
            me.instance_type
        );
        return Gate::Off;
    }
    if me.gpus == 0 && !fixture && !driver_installed(root) {
        // A GPU type booted from an image without the driver (a stock
        // Ubuntu image, say): nothing on it can use the GPUs, and that is
        // the image's choice, not a fault of this instance, which another
        // instance of the same image would not cure.
        warn!(
            "{} promises GPUs, but this image has no NVIDIA driver (no {} and no {}): the GPU gate is skipped, and \
             nothing here can use the GPUs; use an image with the driver (the Deep Learning AMI) to train on them",
            me.instance_type, DRIVER_PROC, DRIVER_DEVICE
        );
        return Gate::Off;
    }
    info!(
        level = check.level.name(),
        budget_s = check.timeout_seconds,
        "checking this node's GPUs before it joins ({})",
        expect.as_ref().map_or_else(
            || format!("{} is not in the catalogue: measured, not judged", me.instance_type),
            |e| format!("{} promises {} GPUs", me.instance_type, e.gpus)
        )
    );
    let (g, id, ip, ty, level) =
        (gpus.clone(), me.instance_id.clone(), me.private_ip.clone(), me.instance_type.clone(), check.level);
    let budget = Duration::from_secs(u64::from(check.timeout_seconds));
    let expect_for_gate = expect.clone();
    let report = match tokio::task::spawn_blocking(move || {
        gpu_health::gate(&*g, &id, &ip, &ty, expect_for_gate.as_ref(), level, budget)
    })
    .await
    {
        Ok(report) => report,
        Err(e) => {
            // A panic inside the checks: the node cannot say its GPUs are
            // healthy, so it is treated as failed, with the reason.
            error!("the GPU gate stopped: {e}");
            node_contract::gpu::GpuReport {
                instance_id: me.instance_id.clone(),
                private_ip: me.private_ip.clone(),
                instance_type: me.instance_type.clone(),
                checks: vec![node_contract::gpu::CheckResult {
                    check: "gate".into(),
                    gpu: None,
                    value: format!("the checks stopped: {e}"),
                    expected: "every check runs".into(),
                    verdict: node_contract::gpu::Verdict::Fail,
                    millis: 0,
                }],
                timed_out: false,
                millis: 0,
            }
        }
    };
    for c in &report.checks {
        let line = format!("gpu check {}: {} ({} ms)", c.verdict.name(), c.describe(), c.millis);
        if c.verdict == node_contract::gpu::Verdict::Fail { warn!("{line}") } else { info!("{line}") }
    }
    let passed = report.passed();
    let file = GpuReportFile {
        version: GPU_REPORT_FILE_VERSION,
        decided_unix_ms: i64::try_from(clock()).unwrap_or(i64::MAX),
        level: check.level,
        action: check.action,
        expect,
        report: report.clone(),
    };
    let path = node_contract::files::under(root, GPU_CHECK_PATH);
    let json = serde_json::to_string_pretty(&file).unwrap_or_default();
    if let Err(e) = tokio::task::block_in_place(|| files::atomic::write_if_changed(&path, &json, 0o644)) {
        warn!("cannot write the GPU check's report to {}: {e}", path.display());
    }
    let body = Message::GpuReport(report.clone()).to_body();
    // The master must hear of a failed node (it replaces it); a passed
    // node's report is counted, and worth a few tries too.
    loop {
        match retry("report the GPU check", || master_queue.send(&body)).await {
            Ok(()) => break,
            Err(e) if passed => {
                warn!("cannot tell the master that this node's GPUs passed (it joins all the same): {e}");
                break;
            }
            Err(e) => {
                warn!("cannot tell the master that this node's GPUs failed, trying again: {e}");
                tokio::time::sleep(RESEND_AFTER).await;
            }
        }
    }
    let seconds = report.millis as f64 / 1000.0;
    if passed {
        info!("gpu check passed: {} checks in {seconds:.1} s", report.checks.len());
        return Gate::Passed;
    }
    let joins = check.action == GpuAction::Warn || config.role == node_contract::Role::Master;
    let next = match (joins, config.role) {
        (true, node_contract::Role::Master) if check.action != GpuAction::Warn => {
            "the master goes on; its formation fails with the reason"
        }
        (true, _) => "it joins all the same (action warn)",
        (false, _) => "it does not join; the master marks it unhealthy and its group launches another",
    };
    error!("gpu check FAILED in {seconds:.1} s: {}; {next}", report.failure_line());
    Gate::Failed { joins }
}

/// Follows the GPUs while the node runs; on a fatal fault, the node leaves
/// as on an interruption notice. Never returns (after a fault it has
/// nothing more to do).
pub(super) async fn watch_loop<Q: Queue>(
    root: &Path,
    me: &Identity,
    gpus: SharedGpus,
    master_queue: &Q,
    interrupted: &AtomicBool,
    clock: Clock,
) -> anyhow::Result<()> {
    let g = gpus.clone();
    let mut watch = tokio::task::spawn_blocking(move || gpu_health::Watch::new(&*g)).await?;
    let mut ticks = tokio::time::interval(WATCH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let fault = loop {
        ticks.tick().await;
        let g = gpus.clone();
        let (w, fault) = tokio::task::spawn_blocking(move || {
            let fault = watch.poll(&*g);
            (watch, fault)
        })
        .await?;
        watch = w;
        if let Some(fault) = fault {
            break fault;
        }
    };
    error!("GPU fault: {}: this node leaves the cluster", fault.detail);
    let now_s = clock() / 1000;
    let notice = Interruption {
        instance_id: me.instance_id.clone(),
        notice: NoticeKind::GpuFault,
        action: None,
        time: format_utc(now_s),
        deadline_unix: None,
        detail: Some(fault.detail),
    };
    super::interruption_loop::leave_on(root, me, &notice, interrupted, clock);
    let body = Message::Notice(notice).to_body();
    loop {
        match retry("report the GPU fault", || master_queue.send(&body)).await {
            Ok(()) => {
                info!("told the master about the GPU fault");
                break;
            }
            Err(e) => {
                warn!("cannot tell the master about the GPU fault yet, trying again: {e}");
                tokio::time::sleep(RESEND_AFTER).await;
            }
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {

    use node_contract::gpu::{GpuCheck, GpuExpect, GpuLevel};
    use node_contract::message::MasterInbound;

    use super::*;

    fn me() -> Identity {
        Identity {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.5".into(),
            hostname: "h".into(),
            instance_type: "p5.48xlarge".into(),
            availability_zone: "z".into(),
            boot_id: "b".into(),
            ssh_host_key: "k".into(),
            gpus: 0,
        }
    }

    fn worker_config() -> NodeConfig {
        let mut c = crate::files::tests::config();
        c.gpu_check = Some(GpuCheck {
            level: GpuLevel::Quick,
            action: GpuAction::Replace,
            timeout_seconds: 20,
            expect: [("p5.48xlarge".to_owned(), GpuExpect { gpus: 8, ..GpuExpect::default() })].into(),
        });
        c
    }

    /// A GPU type on an image without the driver: skipped, nothing sent;
    /// with the driver there (its device node) but NVML not answering: a
    /// fault, reported, and a worker under `replace` does not join.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_driver_in_the_image_skips_a_driver_that_does_not_answer_fails() {
        let root = tempfile::tempdir().unwrap();
        let config = worker_config();
        let queue = crate::ports::memory::MemoryQueue::default();
        let gpus = gpus(None);
        let gate = before_registering(root.path(), &config, &me(), &gpus, false, &queue, || 5).await;
        assert_eq!(gate, Gate::Off);
        assert!(queue.sent().is_empty());

        let dev = root.path().join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("nvidiactl"), b"").unwrap();
        let gate = before_registering(root.path(), &config, &me(), &gpus, false, &queue, || 5).await;
        assert_eq!(gate, Gate::Failed { joins: false });
        let sent = queue.sent();
        let [body] = &sent[..] else { panic!("{sent:?}") };
        match node_contract::message::parse_master_queue(body) {
            Ok(MasterInbound::GpuReport(r)) => {
                assert!(!r.passed());
                assert!(r.failures().any(|c| c.check == "driver"), "{r:#?}");
            }
            other => panic!("{other:?}"),
        }
        let file = std::fs::read_to_string(node_contract::files::under(root.path(), GPU_CHECK_PATH)).unwrap();
        assert!(file.contains("\"action\": \"replace\""), "{file}");
        // `warn`: it joins all the same.
        let mut warn = config.clone();
        warn.gpu_check.as_mut().unwrap().action = GpuAction::Warn;
        let gate = before_registering(root.path(), &warn, &me(), &gpus, false, &queue, || 5).await;
        assert_eq!(gate, Gate::Failed { joins: true });
    }
}
