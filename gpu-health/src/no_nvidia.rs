//! The NVIDIA side when the crate is built without its `cuda` feature:
//! every call is a clear error naming the missing driver support, as the
//! real side's are on a machine without a driver (candle's dummy backend).

/// NVML and CUDA, absent from this build.
#[derive(Debug, Default)]
pub(crate) struct Nvidia;

const WHY: &str = "no NVIDIA driver support: gpu-health was built without its `cuda` feature";

impl Nvidia {
    /// Nothing to load.
    pub(crate) fn new() -> Nvidia {
        Nvidia
    }

    pub(crate) fn devices(&self) -> Result<Vec<crate::DeviceFacts>, String> {
        Err(WHY.to_string())
    }

    pub(crate) fn utilisation(&self) -> Result<Vec<u32>, String> {
        Err(WHY.to_string())
    }

    pub(crate) fn gemm_tflops(&self, _gpu: u32, _for_ms: u64) -> Result<f64, String> {
        Err(WHY.to_string())
    }

    pub(crate) fn memory_gbps(&self, _gpu: u32, _for_ms: u64) -> Result<f64, String> {
        Err(WHY.to_string())
    }

    pub(crate) fn allreduce_busbw_gbps(&self, _for_ms: u64) -> Result<f64, String> {
        Err(WHY.to_string())
    }
}
