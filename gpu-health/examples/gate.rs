//! Runs the gate on this machine's GPUs, by hand on a GPU instance (this
//! project's CI has none): prints `trainer doctor`'s table on stdout and
//! the report as JSON on stderr; exits 0 when the node passes, 1 when it
//! fails, 2 on a usage error.
//!
//! ```text
//! cargo run --release -p gpu-health --features cuda --example gate -- \
//!     [quick|thorough] [BUDGET_SECONDS] \
//!     ['{"gpus":8,"model":"H100","efa_devices":32,"bf16_tflops":989,"memory_gbps":3350,"nvlink_busbw_gbps":450}']
//! ```
//!
//! The last argument is what the instance type promises (the node config's
//! `gpu_check.expect` entry); without it every figure is reported without
//! a verdict.

use std::process::ExitCode;
use std::time::Duration;

use node_contract::gpu::{GpuExpect, GpuLevel};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let level = match args.first().map(String::as_str) {
        None => GpuLevel::Quick,
        Some(name) => match GpuLevel::from_name(name) {
            Some(l) => l,
            None => return usage(&format!("unknown level {name:?}")),
        },
    };
    let budget = match args.get(1).map(|s| s.parse::<u64>()) {
        None => Duration::from_secs(u64::from(level.default_timeout_seconds())),
        Some(Ok(s)) => Duration::from_secs(s),
        Some(Err(e)) => return usage(&format!("the budget is whole seconds: {e}")),
    };
    let expect: Option<GpuExpect> = match args.get(2).map(|s| serde_json::from_str(s)) {
        None => None,
        Some(Ok(e)) => Some(e),
        Some(Err(e)) => return usage(&format!("the expectation is a GpuExpect in JSON: {e}")),
    };
    let gpus = gpu_health::real();
    let report = gpu_health::gate(&*gpus, "local", "127.0.0.1", "local", expect.as_ref(), level, budget);
    print!("{}", gpu_health::table(&[("local".to_string(), report.clone())]));
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    eprintln!("{} in {} ms", report.failure_line(), report.millis);
    if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("gate: {why}\nusage: gate [quick|thorough] [BUDGET_SECONDS] [EXPECT_JSON]");
    ExitCode::from(2)
}
