//! The GPU health gate and watch (blueprint `formation.gpu_check`;
//! docs/ARCHITECTURE.md, "The GPU gate").
//!
//! Every node with NVIDIA GPUs checks them before it registers (a node that
//! fails never appears in a hostfile) and follows them while it runs. The
//! settings and what the node's instance type promises travel in the node
//! config ([`GpuCheck`]); the node's verdict travels to the master in a
//! [`GpuReport`] (message `gpu_report`, version
//! [`crate::message::GPU_VERSION`]) and is left on the node at
//! [`GPU_CHECK_PATH`] for `trainer doctor`; a fault found while the node
//! runs is an interruption notice of kind
//! [`crate::interruption::NoticeKind::GpuFault`], so the node leaves the
//! way a Spot notice makes it leave.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::NetworkAction as GpuAction;

/// Where every node leaves its last GPU report (JSON, a [`GpuReportFile`]),
/// for `trainer doctor` and for reading by hand.
pub const GPU_CHECK_PATH: &str = "/var/lib/deeplearning/gpu-check.json";

/// The version of [`GpuReportFile`] this crate writes.
pub const GPU_REPORT_FILE_VERSION: u32 = 1;

/// The longest time budget of the boot gate, seconds.
pub const GPU_CHECK_MAX_SECONDS: u32 = 3600;

/// The default time budget of the boot gate at level `quick`, seconds.
pub const GPU_CHECK_QUICK_SECONDS: u32 = 60;

/// The default time budget of the boot gate at level `thorough`, seconds
/// (DCGM's level 3 diagnostic takes about 30 minutes on an 8-GPU node).
pub const GPU_CHECK_THOROUGH_SECONDS: u32 = 2400;

/// How deep the boot gate looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuLevel {
    /// The driver's counters, link states and kernel log, a short GEMM and
    /// memory burn per GPU, an all-reduce across the node's GPUs, and
    /// `dcgmi diag -r 1` where DCGM is installed.
    Quick,
    /// As quick, with longer burns and `dcgmi diag -r 3`.
    Thorough,
}

impl GpuLevel {
    /// The names a blueprint may use, in order.
    pub const NAMES: [&'static str; 2] = ["quick", "thorough"];

    /// The level a blueprint's name stands for.
    pub fn from_name(name: &str) -> Option<GpuLevel> {
        [GpuLevel::Quick, GpuLevel::Thorough].into_iter().find(|l| l.name() == name)
    }

    /// The blueprint's name of it.
    pub fn name(self) -> &'static str {
        match self {
            GpuLevel::Quick => "quick",
            GpuLevel::Thorough => "thorough",
        }
    }

    /// The default time budget, seconds.
    pub fn default_timeout_seconds(self) -> u32 {
        match self {
            GpuLevel::Quick => GPU_CHECK_QUICK_SECONDS,
            GpuLevel::Thorough => GPU_CHECK_THOROUGH_SECONDS,
        }
    }
}

/// What an instance type promises, from synth's catalogue; every figure is
/// optional (`None`: not known, and that check reports its value without a
/// verdict).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuExpect {
    /// GPUs on the instance.
    pub gpus: u32,
    /// A word of the GPU model's name as NVML gives it ("A100", "H100",
    /// "H200", "B200", "L4", "A10G", "T4").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// EFA devices (`/sys/class/infiniband/*`); `None` where the type has
    /// no EFA or the count is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa_devices: Option<u32>,
    /// The GPU model's dense BF16 tensor throughput, TFLOP/s, as NVIDIA
    /// gives it (the burn must reach a fraction of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_tflops: Option<f64>,
    /// The GPU model's memory bandwidth, GB/s, as NVIDIA gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gbps: Option<f64>,
    /// The all-reduce bus bandwidth across the node's GPUs, GB/s, that a
    /// healthy node of this type reaches (NVLink); `None` on types without
    /// NVLink between their GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_busbw_gbps: Option<f64>,
}

// The numbers are checked finite when a config is read, so equality is an equivalence.
impl Eq for GpuExpect {}

/// The GPU gate's settings (node config version 7, blueprint
/// `formation.gpu_check`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuCheck {
    /// How deep the boot gate looks.
    pub level: GpuLevel,
    /// What happens to a node that fails: `warn` (it joins, named in the
    /// logs), `replace` (it does not join; the master marks it unhealthy in
    /// its Auto Scaling group, which replaces it), `fail` (the formation
    /// fails with the reason; after formation, as `replace`).
    pub action: GpuAction,
    /// The boot gate's time budget, seconds (1 to [`GPU_CHECK_MAX_SECONDS`]).
    pub timeout_seconds: u32,
    /// What each instance type the stack may launch promises, by instance
    /// type; a node whose type is not here checks without expectations.
    #[serde(default)]
    pub expect: BTreeMap<String, GpuExpect>,
}

/// One check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within what was expected.
    Pass,
    /// A fault: the node fails the gate.
    Fail,
    /// Worth reading, not a fault (no expected figure, a tool that is not installed).
    Info,
}

impl Verdict {
    /// How a table names it.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "ok",
            Verdict::Fail => "FAIL",
            Verdict::Info => "-",
        }
    }
}

/// One check on one GPU (or on the node).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckResult {
    /// The check's name: `count`, `model`, `driver`, `ecc`, `remap`,
    /// `throttle`, `pcie`, `nvlink`, `xid`, `gemm`, `memory`, `allreduce`,
    /// `efa`, `dcgm`.
    pub check: String,
    /// The GPU's index, `None` for a check of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// What was measured, in words with units ("812 TFLOP/s", "gen4 x16",
    /// "XID 79: GPU has fallen off the bus").
    pub value: String,
    /// What was expected, in words ("at least 495 TFLOP/s (half of the
    /// H200's 989)"); empty where nothing is expected.
    pub expected: String,
    /// The outcome.
    pub verdict: Verdict,
    /// How long the check took, milliseconds.
    pub millis: u64,
}

impl CheckResult {
    /// One line for logs and formation reasons: "XID 79 on GPU 3 (GPU has
    /// fallen off the bus)" style: `<check> on GPU <i>: <value>, expected <expected>`.
    pub fn describe(&self) -> String {
        let place = match self.gpu {
            Some(i) => format!("{} on GPU {i}", self.check),
            None => self.check.clone(),
        };
        if self.expected.is_empty() {
            format!("{place}: {}", self.value)
        } else {
            format!("{place}: {}, expected {}", self.value, self.expected)
        }
    }
}

/// A node's GPU gate verdict (message `gpu_report`, node to master, and the
/// body of [`GpuReportFile`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuReport {
    /// `i-...`
    pub instance_id: String,
    /// Private IPv4 address.
    pub private_ip: String,
    /// The node's instance type.
    pub instance_type: String,
    /// Every check, in the order they ran.
    pub checks: Vec<CheckResult>,
    /// The gate ran out of its time budget before every check ran (the
    /// checks that did not run are not listed; a node past its budget fails).
    #[serde(default)]
    pub timed_out: bool,
    /// How long the whole gate took, milliseconds.
    pub millis: u64,
}

/// The most checks a report carries (8 GPUs × 14 checks, with room): a
/// report from another node is cut to this before it is read.
pub const MAX_CHECKS: usize = 256;

impl GpuReport {
    /// The node passed: no check failed and the gate finished in time.
    pub fn passed(&self) -> bool {
        !self.timed_out && self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }

    /// The failed checks.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.checks.iter().filter(|c| c.verdict == Verdict::Fail)
    }

    /// The failures in one line ("xid on GPU 3: XID 79 (GPU has fallen off
    /// the bus); ecc on GPU 1: 2 volatile uncorrectable errors, expected
    /// 0"), at most three named and how many more; "passed" when none.
    pub fn failure_line(&self) -> String {
        let failures: Vec<String> = self.failures().map(CheckResult::describe).collect();
        let mut line = match failures.len() {
            0 => "passed".to_string(),
            n if n <= 3 => failures.join("; "),
            n => format!("{}; and {} more", failures[..3].join("; "), n - 3),
        };
        if self.timed_out {
            line = if self.failures().next().is_none() {
                format!("did not finish within its time budget ({} ms)", self.millis)
            } else {
                format!("{line}; and did not finish within its time budget")
            };
        }
        line
    }

    /// The same report within [`MAX_CHECKS`] (a reader applies it: the body came from another node).
    pub fn bounded(mut self) -> GpuReport {
        self.checks.truncate(MAX_CHECKS);
        for c in &mut self.checks {
            cut(&mut c.value);
            cut(&mut c.expected);
            cut(&mut c.check);
        }
        self
    }
}

fn cut(s: &mut String) {
    const MAX: usize = 200;
    if s.len() > MAX {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

/// The file at [`GPU_CHECK_PATH`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuReportFile {
    /// [`GPU_REPORT_FILE_VERSION`].
    pub version: u32,
    /// When the gate decided, unix milliseconds.
    pub decided_unix_ms: i64,
    /// The gate's settings, as the node config gave them.
    pub level: GpuLevel,
    /// The action.
    pub action: GpuAction,
    /// What the node's type promises, when the config knew the type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<GpuExpect>,
    /// The report.
    pub report: GpuReport,
}

/// The GPU gate's outcome at formation, as the success signal carries it
/// under `gpu` (and `synth status` prints it): a few numbers and at most
/// [`GPU_SUMMARY_NAMED`] failed nodes named, whatever the cluster's size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSummary {
    /// Nodes that reported a verdict.
    pub checked: u32,
    /// Of those, nodes that passed.
    pub passed: u32,
    /// Failed nodes, "i-... (10.0.1.7): xid on GPU 3: XID 79 (GPU has
    /// fallen off the bus)", at most [`GPU_SUMMARY_NAMED`].
    #[serde(default)]
    pub failed: Vec<String>,
    /// The action taken on failed nodes (`warn`, `replace`, `fail`).
    pub action: GpuAction,
}

/// How many failed nodes a [`GpuSummary`] names.
pub const GPU_SUMMARY_NAMED: usize = 5;

impl GpuSummary {
    /// One line: "gpu check: 3 of 4 nodes passed; replaced: i-... (10.0.1.7):
    /// xid on GPU 3: ..." (`warned` for `warn`, `failed` for `fail`).
    pub fn line(&self) -> String {
        let mut line = format!("gpu check: {} of {} nodes passed", self.passed, self.checked);
        if !self.failed.is_empty() {
            let verb = match self.action {
                GpuAction::Warn => "joined anyway",
                GpuAction::Replace => "replaced",
                GpuAction::Fail => "failed",
            };
            let clean: Vec<String> =
                self.failed.iter().map(|f| f.chars().filter(|c| !c.is_control()).collect()).collect();
            line.push_str(&format!("; {verb}: {}", clean.join("; ")));
            let more = (self.checked - self.passed) as usize;
            if more > self.failed.len() {
                line.push_str(&format!("; and {} more", more - self.failed.len()));
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, gpu: Option<u32>, verdict: Verdict) -> CheckResult {
        CheckResult {
            check: name.into(),
            gpu,
            value: "XID 79 (GPU has fallen off the bus)".into(),
            expected: "no fatal XID".into(),
            verdict,
            millis: 3,
        }
    }

    fn report(checks: Vec<CheckResult>) -> GpuReport {
        GpuReport {
            instance_id: "i-0abc".into(),
            private_ip: "10.0.1.5".into(),
            instance_type: "p5.48xlarge".into(),
            checks,
            timed_out: false,
            millis: 41_000,
        }
    }

    #[test]
    fn a_report_passes_only_without_failures_and_in_time() {
        let ok = report(vec![check("count", None, Verdict::Pass), check("dcgm", None, Verdict::Info)]);
        assert!(ok.passed());
        assert_eq!(ok.failure_line(), "passed");
        let bad = report(vec![check("count", None, Verdict::Pass), check("xid", Some(3), Verdict::Fail)]);
        assert!(!bad.passed());
        assert_eq!(bad.failure_line(), "xid on GPU 3: XID 79 (GPU has fallen off the bus), expected no fatal XID");
        let late = GpuReport { timed_out: true, ..ok };
        assert!(!late.passed());
        assert_eq!(late.failure_line(), "did not finish within its time budget (41000 ms)");
    }

    #[test]
    fn the_failure_line_names_three_and_counts_the_rest() {
        let r = report((0..5).map(|g| check("ecc", Some(g), Verdict::Fail)).collect());
        let line = r.failure_line();
        assert!(line.contains("ecc on GPU 2") && !line.contains("GPU 3"), "{line}");
        assert!(line.ends_with("; and 2 more"), "{line}");
    }

    #[test]
    fn a_report_round_trips_and_is_bounded() {
        let mut r = report(vec![check("xid", Some(0), Verdict::Fail); MAX_CHECKS + 5]);
        r.checks[0].value = "é".repeat(300);
        let text = serde_json::to_string(&r).unwrap();
        let back: GpuReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let b = back.bounded();
        assert_eq!(b.checks.len(), MAX_CHECKS);
        assert!(b.checks[0].value.len() <= 203 && b.checks[0].value.ends_with('…'));
    }

    #[test]
    fn the_summary_line_names_the_failed_nodes() {
        let mut s = GpuSummary { checked: 4, passed: 4, failed: vec![], action: GpuAction::Replace };
        assert_eq!(s.line(), "gpu check: 4 of 4 nodes passed");
        s.passed = 2;
        s.failed = vec!["i-1 (10.0.1.7): xid on GPU 3: XID 79\n".into()];
        assert_eq!(
            s.line(),
            "gpu check: 2 of 4 nodes passed; replaced: i-1 (10.0.1.7): xid on GPU 3: XID 79; and 1 more"
        );
        s.action = GpuAction::Warn;
        assert!(s.line().contains("; joined anyway: i-1"));
    }

    #[test]
    fn levels_and_actions_have_their_blueprint_names() {
        for name in GpuLevel::NAMES {
            assert_eq!(GpuLevel::from_name(name).unwrap().name(), name);
        }
        assert_eq!(GpuLevel::from_name("deep"), None);
        assert_eq!(serde_json::to_string(&GpuLevel::Thorough).unwrap(), "\"thorough\"");
        assert_eq!(GpuLevel::Quick.default_timeout_seconds(), 60);
    }
}
