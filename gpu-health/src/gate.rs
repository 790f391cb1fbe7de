//! The boot gate: every check in order, cheap first, within a time budget.
//!
//! Order: `driver`, `count`, `model`, then per GPU `ecc`, `remap`,
//! `throttle`, `pcie`, `nvlink`, `xid`, then the burns (`gemm` on every GPU
//! at once, `memory` on every GPU at once, `allreduce` across them), `efa`,
//! `dcgm`. Before a step starts the gate checks its budget: a burn starts
//! only when its setup allowance ([`BURN_SETUP`]) and at least
//! [`MIN_BURN_MS`] of burning fit in what is left, and is shortened to fit;
//! DCGM gets what is left as its timeout. A step that cannot start, or a
//! step that ends past the budget, ends the gate with `timed_out` (the
//! checks that did not run are not listed).
//!
//! `throttle` and `pcie` are judged twice: from the reading at rest, and
//! from a reading the gate takes three quarters through the GEMM burn, while the
//! GPUs work: a thermal or power-brake slowdown often shows only under
//! load, and the PCIe generation can only be judged then (see
//! [`checks::pcie`]). The rows stay in their place in the order; a fault
//! under load turns them into failures, with the reading under load as
//! their value.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use node_contract::gpu::{CheckResult, GpuExpect, GpuLevel, GpuReport, Verdict};

use crate::Gpus;
use crate::checks::{self, Row};
use crate::facts::{DeviceFacts, throttle};

/// What a burn may spend beyond its measured time, setting up (CUDA
/// contexts, cuBLAS handles, NCCL communicators, allocations) and warming
/// up, on a node of 8 GPUs.
pub(crate) const BURN_SETUP: Duration = Duration::from_secs(3);

/// The shortest burn worth running, milliseconds: shorter, clocks and
/// caches are still warming and the figure says little.
pub(crate) const MIN_BURN_MS: u64 = 500;

/// How long each burn runs at a level, milliseconds: (GEMM, memory, all-reduce).
/// Quick: a 60 s budget on an 8-GPU node leaves room for setup and DCGM's
/// level 1 (tens of seconds). Thorough: a minute of GEMM heats the GPUs
/// to a steady temperature, where a weak cooler shows.
pub(crate) fn burn_ms(level: GpuLevel) -> (u64, u64, u64) {
    match level {
        GpuLevel::Quick => (2_000, 1_000, 1_000),
        GpuLevel::Thorough => (60_000, 20_000, 20_000),
    }
}

/// The DCGM diagnostic level run at a gate level.
pub(crate) fn dcgm_level(level: GpuLevel) -> u8 {
    match level {
        GpuLevel::Quick => 1,
        GpuLevel::Thorough => 3,
    }
}

/// Runs the gate on this node's GPUs. Never panics on what the port
/// reports; a port's error is a failed (or, where it is not the GPUs'
/// fault, an informational) check.
pub fn gate(
    gpus: &dyn Gpus,
    instance_id: &str,
    private_ip: &str,
    instance_type: &str,
    expect: Option<&GpuExpect>,
    level: GpuLevel,
    budget: Duration,
) -> GpuReport {
    let mut run = Run { start: Instant::now(), budget, checks: Vec::new(), timed_out: false };
    run.checks_in_order(gpus, expect, level);
    GpuReport {
        instance_id: instance_id.to_string(),
        private_ip: private_ip.to_string(),
        instance_type: instance_type.to_string(),
        checks: run.checks,
        timed_out: run.timed_out,
        millis: millis(run.start.elapsed()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

struct Run {
    start: Instant,
    budget: Duration,
    checks: Vec<CheckResult>,
    timed_out: bool,
}

/// Where the rows judged again under load sit in `checks`, by GPU.
#[derive(Default)]
struct LoadRows {
    throttle: BTreeMap<u32, usize>,
    pcie: BTreeMap<u32, usize>,
}

impl Run {
    fn left(&self) -> Duration {
        self.budget.saturating_sub(self.start.elapsed())
    }

    /// Whether a step may start; marks the run timed out when not.
    fn may_start(&mut self, needs: Duration) -> bool {
        if self.timed_out || self.left() <= needs {
            self.timed_out = true;
            return false;
        }
        true
    }

    /// The burn's length that fits, or `None` (and timed out) when none does.
    fn burn_fits(&mut self, nominal_ms: u64) -> Option<u64> {
        let room = millis(self.left().saturating_sub(BURN_SETUP));
        let ms = nominal_ms.min(room);
        if self.timed_out || ms < MIN_BURN_MS {
            self.timed_out = true;
            return None;
        }
        Some(ms)
    }

    /// Records rows that took `took` together (their millis split evenly).
    fn push(&mut self, rows: Vec<Row>, took: Duration) -> Vec<usize> {
        let each = if rows.is_empty() { 0 } else { millis(took) / rows.len() as u64 };
        let mut at = Vec::with_capacity(rows.len());
        for r in rows {
            at.push(self.checks.len());
            self.checks.push(CheckResult {
                check: r.check.to_string(),
                gpu: r.gpu,
                value: r.value,
                expected: r.expected,
                verdict: r.verdict,
                millis: each,
            });
        }
        // A step that ran past the budget ends the gate after it.
        if self.start.elapsed() > self.budget {
            self.timed_out = true;
        }
        at
    }

    fn checks_in_order(&mut self, gpus: &dyn Gpus, expect: Option<&GpuExpect>, level: GpuLevel) {
        let t = Instant::now();
        let listed = gpus.devices();
        self.push(vec![checks::driver(&listed)], t.elapsed());
        let devices = listed.unwrap_or_default();
        self.push(vec![checks::count(devices.len(), expect), checks::model(&devices, expect)], Duration::ZERO);

        let mut load_rows = LoadRows::default();
        let mut pcie_waits = Vec::new();
        if !devices.is_empty() {
            for one in [checks::ecc as fn(&DeviceFacts) -> Row, checks::remap] {
                if !self.may_start(Duration::ZERO) {
                    return;
                }
                let t = Instant::now();
                self.push(devices.iter().map(one).collect(), t.elapsed());
            }
            if !self.may_start(Duration::ZERO) {
                return;
            }
            let at = self
                .push(devices.iter().map(|d| checks::throttle_row(d, "before the burns")).collect(), Duration::ZERO);
            load_rows.throttle = devices.iter().map(|d| d.index).zip(at).collect();
            if !self.may_start(Duration::ZERO) {
                return;
            }
            let readings: Vec<checks::Pcie> = devices.iter().map(|d| checks::pcie(d, false)).collect();
            pcie_waits = devices.iter().zip(&readings).filter(|(_, p)| p.needs_load).map(|(d, _)| d.index).collect();
            let at = self.push(readings.into_iter().map(|p| p.row).collect(), Duration::ZERO);
            load_rows.pcie = devices.iter().map(|d| d.index).zip(at).collect();
            if !self.may_start(Duration::ZERO) {
                return;
            }
            self.push(devices.iter().map(checks::nvlink).collect(), Duration::ZERO);
        }
        if !self.may_start(Duration::ZERO) {
            return;
        }
        let t = Instant::now();
        let log = gpus.kernel_log();
        self.push(checks::xids(&devices, &log), t.elapsed());

        if !devices.is_empty() {
            let (gemm_ms, memory_ms, allreduce_ms) = burn_ms(level);
            let model_of = expect.and_then(|e| e.model.as_deref()).map(|m| format!("the {m}'s ")).unwrap_or_default();

            let Some(ms) = self.burn_fits(gemm_ms) else { return };
            let t = Instant::now();
            let (results, loaded) = burn_all(gpus, &devices, ms, |g, ms| gpus.gemm_tflops(g, ms), true);
            let rows = results
                .iter()
                .map(|(g, r)| {
                    checks::burn("gemm", Some(*g), r, "TFLOP/s", expect.and_then(|e| e.bf16_tflops), &model_of)
                })
                .collect();
            self.push(rows, t.elapsed());
            self.judge_under_load(loaded.as_deref(), &load_rows, &pcie_waits);

            let Some(ms) = self.burn_fits(memory_ms) else { return };
            let t = Instant::now();
            let (results, _) = burn_all(gpus, &devices, ms, |g, ms| gpus.memory_gbps(g, ms), false);
            let rows = results
                .iter()
                .map(|(g, r)| {
                    checks::burn("memory", Some(*g), r, "GB/s", expect.and_then(|e| e.memory_gbps), &model_of)
                })
                .collect();
            self.push(rows, t.elapsed());

            if devices.len() >= 2 {
                let Some(ms) = self.burn_fits(allreduce_ms) else { return };
                let t = Instant::now();
                let r = gpus.allreduce_busbw_gbps(ms);
                let spec = expect.and_then(|e| e.nvlink_busbw_gbps);
                self.push(
                    vec![checks::burn("allreduce", None, &r, "GB/s bus bandwidth", spec, "this instance type's ")],
                    t.elapsed(),
                );
            }
        }

        if !self.may_start(Duration::ZERO) {
            return;
        }
        let t = Instant::now();
        let efa = gpus.efa_devices();
        self.push(vec![checks::efa(&efa, expect)], t.elapsed());

        if !devices.is_empty() {
            if !self.may_start(Duration::ZERO) {
                return;
            }
            let t = Instant::now();
            let dcgm_level = dcgm_level(level);
            let outcome = gpus.dcgm(dcgm_level, self.left());
            self.push(checks::dcgm(dcgm_level, outcome.as_ref()), t.elapsed());
        }
    }

    /// Judges `throttle` and `pcie` again from the reading under load:
    /// a fault there turns the row into a failure; a generation that waited
    /// for load is judged now.
    fn judge_under_load(&mut self, loaded: Option<&[DeviceFacts]>, rows: &LoadRows, pcie_waits: &[u32]) {
        let Some(loaded) = loaded else {
            return;
        };
        for d in loaded {
            // A GPU whose burn had not started yet (its context still being
            // made) still rests: its reading says nothing about load.
            if d.throttle_reasons.is_some_and(|m| m & throttle::GPU_IDLE != 0) {
                continue;
            }
            if let Some(&at) = rows.throttle.get(&d.index) {
                let under = checks::throttle_row(d, "during the GEMM burn");
                if under.verdict == Verdict::Fail && self.checks[at].verdict != Verdict::Fail {
                    self.checks[at].value = under.value;
                    self.checks[at].verdict = Verdict::Fail;
                }
            }
            if let Some(&at) = rows.pcie.get(&d.index) {
                let under = checks::pcie(d, true).row;
                let waited = pcie_waits.contains(&d.index);
                if (waited || under.verdict == Verdict::Fail)
                    && self.checks[at].verdict != Verdict::Fail
                    && under.verdict != Verdict::Info
                {
                    self.checks[at].value = under.value;
                    self.checks[at].expected = under.expected;
                    self.checks[at].verdict = under.verdict;
                }
            }
        }
    }
}

/// Runs `burn` on every GPU at once; with `sample`, reads the devices
/// three quarters through, while the burns run (`None` when every burn ended
/// before then, or the read failed).
#[allow(clippy::type_complexity)]
fn burn_all(
    gpus: &dyn Gpus,
    devices: &[DeviceFacts],
    ms: u64,
    burn: impl Fn(u32, u64) -> Result<f64, String> + Sync,
    sample: bool,
) -> (Vec<(u32, Result<f64, String>)>, Option<Vec<DeviceFacts>>) {
    let (tx, rx) = mpsc::channel();
    let mut results: BTreeMap<u32, Result<f64, String>> = BTreeMap::new();
    let mut loaded = None;
    std::thread::scope(|s| {
        for d in devices {
            let tx = tx.clone();
            let burn = &burn;
            let gpu = d.index;
            s.spawn(move || {
                // A panic in a port's burn is that GPU's failure, not the gate's.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| burn(gpu, ms)))
                    .unwrap_or_else(|_| Err("the burn panicked".to_string()));
                let _ = tx.send((gpu, r));
            });
        }
        drop(tx);
        // Three quarters in: past a real burn's setup (contexts, handles,
        // allocations: under a second each, on all GPUs at once), before its end.
        let while_busy = Instant::now() + Duration::from_millis(ms * 3 / 4);
        if sample {
            while results.len() < devices.len() {
                let wait = while_busy.saturating_duration_since(Instant::now());
                if wait.is_zero() {
                    loaded = gpus.devices().ok();
                    break;
                }
                match rx.recv_timeout(wait) {
                    Ok((g, r)) => {
                        results.insert(g, r);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        for (g, r) in rx.iter() {
            results.insert(g, r);
        }
    });
    (results.into_iter().collect(), loaded)
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;

/// The report a node's boot gate left at `path` (the node's
/// [`GPU_CHECK_PATH`](node_contract::gpu::GPU_CHECK_PATH)), if there is one
/// this build reads.
pub fn last_report(path: &std::path::Path) -> Option<node_contract::gpu::GpuReportFile> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The gate run again on a node by hand (`agent gpu-check`, `trainer
/// doctor --gpus`): the node's instance, address and type as its boot gate
/// recorded them in `last` (empty, and "unknown", without one), against
/// `expect`, else what the boot gate expected.
pub fn rerun(
    gpus: &dyn Gpus,
    last: Option<&node_contract::gpu::GpuReportFile>,
    expect: Option<GpuExpect>,
    level: GpuLevel,
    budget: Duration,
) -> GpuReport {
    let expect = expect.or_else(|| last.and_then(|l| l.expect.clone()));
    let (id, ip, ty) = last.map_or(("", "", "unknown"), |l| {
        (l.report.instance_id.as_str(), l.report.private_ip.as_str(), l.report.instance_type.as_str())
    });
    gate(gpus, id, ip, ty, expect.as_ref(), level, budget)
}
