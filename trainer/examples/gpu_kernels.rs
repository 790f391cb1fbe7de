//! The kernel-by-kernel checks of the GPU engine against the CPU model
//! (`trainer::train::cuda::kernel_check`) on one GPU; `scripts/gpu-check.sh`
//! runs it.
//!
//! ```text
//! gpu_kernels [ORDINAL]   GPU ORDINAL (default 0)
//! ```
//!
//! One `PASS` or `FAIL` line per check on stdout. Exit 0 when every check
//! passed, 1 when one failed or a CUDA call failed, 2 when there is no GPU
//! here (`SKIP`, with the reason: nothing was checked).

use std::process::ExitCode;

use trainer::train::cuda::{CudaError, kernel_check};

fn main() -> ExitCode {
    let ordinal = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 0,
        Some(Ok(ordinal)) => ordinal,
        Some(Err(_)) => {
            eprintln!("usage: gpu_kernels [ORDINAL]");
            return ExitCode::from(2);
        }
    };
    let (mut passed, mut failed) = (0, 0);
    let result = kernel_check::run(ordinal, &mut |o| {
        println!("{} {}: {}", if o.passed { "PASS" } else { "FAIL" }, o.check, o.detail);
        if o.passed { passed += 1 } else { failed += 1 }
    });
    match result {
        Err(e @ (CudaError::Missing { .. } | CudaError::NoDevice { .. })) => {
            println!("SKIP gpu kernel checks: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            println!("FAIL gpu kernel checks stopped: {e}");
            failed += 1;
        }
        Ok(()) => {}
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
