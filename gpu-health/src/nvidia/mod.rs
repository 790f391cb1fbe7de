//! The NVIDIA side of the real port (cargo feature `cuda`): the GPUs'
//! facts through NVML ([`nvml`]), and the burns through CUDA, cuBLAS and
//! NCCL as cudarc loads them at run time ([`burn`]).
//!
//! Nothing is loaded until a call needs it. Without a driver every call is
//! an error that names what is missing ("no NVIDIA driver: ..."); cudarc's
//! loaders panic on a missing library, so each library is probed first and
//! every entry point is under an unwind guard besides.

mod burn;
mod nvml;

use crate::facts::DeviceFacts;

/// NVML and CUDA on this node.
#[derive(Debug, Default)]
pub(crate) struct Nvidia {
    nvml: nvml::NvmlHandle,
}

impl Nvidia {
    /// Loads nothing yet.
    pub(crate) fn new() -> Nvidia {
        Nvidia::default()
    }

    pub(crate) fn devices(&self) -> Result<Vec<DeviceFacts>, String> {
        self.nvml.devices()
    }

    pub(crate) fn utilisation(&self) -> Result<Vec<u32>, String> {
        self.nvml.utilisation()
    }

    pub(crate) fn gemm_tflops(&self, gpu: u32, for_ms: u64) -> Result<f64, String> {
        guarded(|| burn::gemm_tflops(self.nvml.pci_key(gpu)?, gpu, for_ms))
    }

    pub(crate) fn memory_gbps(&self, gpu: u32, for_ms: u64) -> Result<f64, String> {
        guarded(|| burn::memory_gbps(self.nvml.pci_key(gpu)?, gpu, for_ms))
    }

    pub(crate) fn allreduce_busbw_gbps(&self, for_ms: u64) -> Result<f64, String> {
        guarded(|| {
            let count = self.devices()?.len() as u32;
            let keys = (0..count).map(|g| self.nvml.pci_key(g)).collect::<Result<Vec<_>, _>>()?;
            burn::allreduce_busbw_gbps(&keys, for_ms)
        })
    }
}

/// Runs `f`; a panic (a cudarc loader, an `expect` in a library wrapper) is an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        Err(format!("a CUDA call panicked: {}", why.unwrap_or_else(|| "no message".into())))
    })
}
