//! `trainer doctor`'s GPU part (docs/ARCHITECTURE.md, "The GPU gate"):
//! each host's GPU checks in one table (host, GPU, check, value, expected,
//! verdict), from the `gpu-health` crate the agent's boot gate runs too.
//!
//! Without `--gpus` the table shows each host's boot gate as its agent left
//! it ([`GPU_CHECK_PATH`]); with `--gpus` every host with GPUs runs the
//! checks now (burns of about two seconds a GPU at `quick`: not while a
//! job trains there), against what its boot gate expected (the node
//! config's `gpu_check.expect` entry for its type, which the agent records
//! in its report).

use std::path::Path;
use std::time::Duration;

use node_contract::gpu::{GPU_CHECK_PATH, GpuLevel, GpuReport};

/// The `key=value` line a host reports its GPU report on.
pub(crate) const KEY: &str = "gpu_report";

/// This host's line: the checks run now (`run_now`, on a host with GPUs,
/// against what its boot gate expected) or the boot gate's report; `None`
/// when there is nothing to show.
pub(crate) fn local_line(root: &Path, host: &str, gpus: usize, run_now: Option<GpuLevel>) -> Option<String> {
    let boot = gpu_health::last_report(&node_contract::files::under(root, GPU_CHECK_PATH));
    let mut report = match run_now {
        Some(level) if gpus > 0 => {
            let budget = Duration::from_secs(u64::from(level.default_timeout_seconds()));
            gpu_health::rerun(&*gpu_health::real(), boot.as_ref(), None, level, budget)
        }
        _ => boot?.report,
    };
    if report.private_ip.is_empty() {
        report.private_ip = host.to_owned();
    }
    Some(format!("{KEY}={}", serde_json::to_string(&report).ok()?))
}

/// The hosts' reports as one table, and a problem per failed host.
pub(crate) fn table(reports: &[(String, GpuReport)], ran_now: bool) -> (String, Vec<String>) {
    if reports.is_empty() {
        return (String::new(), Vec::new());
    }
    let source = if ran_now { "run now" } else { "each agent's boot gate" };
    let mut out = format!("GPU checks ({source}):\n");
    out += &gpu_health::table(reports);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    let problems = reports
        .iter()
        .filter(|(_, r)| !r.passed())
        .map(|(host, r)| format!("{host}: its GPU check failed: {}", r.failure_line()))
        .collect();
    (out, problems)
}

/// The report on a host's `gpu_report=` line.
pub(crate) fn parse(stdout: &str) -> Option<GpuReport> {
    let line = stdout.lines().find_map(|l| l.strip_prefix(&format!("{KEY}=")))?;
    serde_json::from_str::<GpuReport>(line).ok().map(GpuReport::bounded)
}

#[cfg(test)]
mod tests {
    use node_contract::gpu::{CheckResult, GpuAction, GpuReportFile, Verdict};

    use super::*;

    fn report(passed: bool) -> GpuReport {
        GpuReport {
            instance_id: "i-1".into(),
            private_ip: "10.0.1.5".into(),
            instance_type: "p5.48xlarge".into(),
            checks: vec![CheckResult {
                check: "xid".into(),
                gpu: Some(3),
                value: "XID 79 (GPU has fallen off the bus)".into(),
                expected: "no fatal XID since boot".into(),
                verdict: if passed { Verdict::Pass } else { Verdict::Fail },
                millis: 1,
            }],
            timed_out: false,
            millis: 40_000,
        }
    }

    /// A host's boot report travels on its line and fails the doctor when it failed.
    #[test]
    fn the_boot_report_is_shown_and_a_failure_is_a_problem() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(local_line(root.path(), "h", 8, None), None, "no report: nothing to show");
        let file = GpuReportFile {
            version: 1,
            decided_unix_ms: 1,
            level: GpuLevel::Quick,
            action: GpuAction::Replace,
            expect: None,
            report: report(false),
        };
        let path = node_contract::files::under(root.path(), GPU_CHECK_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        let line = local_line(root.path(), "h", 8, None).unwrap();
        let back = parse(&format!("gpus=8\n{line}\ntime_ms=5\n")).unwrap();
        assert_eq!(back, report(false));
        let (text, problems) = table(&[("deeplearning-worker2".into(), back)], false);
        assert!(text.starts_with("GPU checks (each agent's boot gate):"), "{text}");
        assert!(text.contains("deeplearning-worker2") && text.contains("FAIL"), "{text}");
        assert_eq!(
            problems,
            [
                "deeplearning-worker2: its GPU check failed: xid on GPU 3: XID 79 (GPU has fallen off the bus), expected no fatal XID since boot"
            ]
        );
        let (_, none) = table(&[("h".into(), report(true))], true);
        assert!(none.is_empty());
    }

    /// Run now on a host without a driver: the driver check fails, never a panic.
    #[test]
    fn run_now_without_a_driver_fails_the_driver_check() {
        let root = tempfile::tempdir().unwrap();
        let line = local_line(root.path(), "h", 1, Some(GpuLevel::Quick)).unwrap();
        let report = parse(&line).unwrap();
        assert!(!report.passed());
        assert!(report.failures().any(|c| c.check == "driver"), "{report:#?}");
        assert_eq!(local_line(root.path(), "h", 0, Some(GpuLevel::Quick)), None, "no GPUs, no boot report");
    }
}
