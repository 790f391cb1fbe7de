//! What of the GPU path can be checked on a machine without a GPU; run by
//! `scripts/gpu-toolchain` (and so by `scripts/test` in CI) with NVIDIA's
//! NVRTC, cuBLAS and NCCL wheels on `LD_LIBRARY_PATH`.
//!
//! ```text
//! gpu_toolchain ptx DIR [ARCH...]   compile the kernels with the engine's own NVRTC path
//!                                   (trainer::train::cuda::kernels::compile) for each ARCH
//!                                   (sm_90, ...; default: every architecture the DLAMI GPU
//!                                   families need) into DIR/ARCH.ptx
//! gpu_toolchain symbols             resolve `LIBRARY SYMBOL` lines from stdin (LIBRARY: driver,
//!                                   cublas, nvrtc, nccl) in each library as cudarc loads it
//! ```
//!
//! One line per architecture or symbol on stdout; exit 1 when anything
//! failed, 2 on a usage error.

use std::io::BufRead;
use std::process::ExitCode;

use trainer::train::cuda::Library;
use trainer::train::cuda::kernels::{self, ARCHITECTURES, ComputeCapability};

const USAGE: &str = "usage: gpu_toolchain ptx DIR [ARCH...] | gpu_toolchain symbols < LINES";

fn ptx(dir: &str, archs: &[String]) -> Result<bool, String> {
    let archs: Vec<ComputeCapability> = if archs.is_empty() {
        ARCHITECTURES.iter().map(|(arch, _)| *arch).collect()
    } else {
        archs.iter().map(|a| a.parse()).collect::<Result<_, _>>()?
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
    let mut ok = true;
    for arch in archs {
        match kernels::compile(Some(arch)) {
            Ok(ptx) => {
                let path = format!("{dir}/{arch}.ptx");
                std::fs::write(&path, ptx.to_src()).map_err(|e| format!("{path}: {e}"))?;
                println!("{arch}: compiled {} kernels with NVRTC into {path}", kernels::NAMES.len());
            }
            Err(e) => {
                println!("{arch}: FAILED: {e}");
                ok = false;
            }
        }
    }
    Ok(ok)
}

fn symbols() -> Result<bool, String> {
    let mut ok = true;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let Some((lib, symbol)) = line.split_once(' ') else { continue };
        let lib: Library = lib.parse()?;
        let status = match lib.resolves(symbol.trim()) {
            Ok(true) => "ok".to_owned(),
            Ok(false) => "MISSING".to_owned(),
            Err(e) => format!("FAILED: {e}"),
        };
        ok &= status == "ok";
        println!("{:<7} {:<32} {status}", lib.module(), symbol.trim());
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ptx", dir, ..] => ptx(dir, &args[2..]),
        ["symbols"] => symbols(),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("gpu_toolchain: {e}");
            ExitCode::from(2)
        }
    }
}
