//! The real port: the NVIDIA side (NVML facts and CUDA burns, with the
//! `cuda` feature; errors without it) and the host's side ([`Host`]: the
//! kernel log, EFA devices, `dcgmi`), which needs no GPU library.

use std::time::Duration;

use crate::host::Host;
use crate::nvidia::Nvidia;
use crate::{DcgmOutcome, DeviceFacts, Gpus};

/// This node's GPUs.
#[derive(Debug)]
pub struct Real {
    nvidia: Nvidia,
    host: Host,
}

impl Real {
    /// NVML and CUDA as they load here (nothing is loaded until asked), and
    /// the host at `/`.
    pub fn new() -> Real {
        Real { nvidia: Nvidia::new(), host: Host::system() }
    }
}

impl Default for Real {
    fn default() -> Self {
        Real::new()
    }
}

/// This node's GPUs (NVML and CUDA with the `cuda` feature). Without the
/// feature or without a driver, `devices()` is an error naming the driver.
pub fn real() -> Box<dyn Gpus> {
    Box::new(Real::new())
}

/// The GPUs a tool reads: the fixture at `fixture` when given (tests),
/// else this node's ([`real`]).
pub fn open(fixture: Option<&std::path::Path>) -> Box<dyn Gpus> {
    match fixture {
        Some(path) => Box::new(crate::FixtureGpus::new(path)),
        None => real(),
    }
}

impl Gpus for Real {
    fn devices(&self) -> Result<Vec<DeviceFacts>, String> {
        self.nvidia.devices()
    }

    fn utilisation(&self) -> Result<Vec<u32>, String> {
        self.nvidia.utilisation()
    }

    fn kernel_log(&self) -> Result<Vec<String>, String> {
        self.host.kernel_log()
    }

    fn gemm_tflops(&self, gpu: u32, for_ms: u64) -> Result<f64, String> {
        self.nvidia.gemm_tflops(gpu, for_ms)
    }

    fn memory_gbps(&self, gpu: u32, for_ms: u64) -> Result<f64, String> {
        self.nvidia.memory_gbps(gpu, for_ms)
    }

    fn allreduce_busbw_gbps(&self, for_ms: u64) -> Result<f64, String> {
        self.nvidia.allreduce_busbw_gbps(for_ms)
    }

    fn efa_devices(&self) -> Result<u32, String> {
        self.host.efa_devices()
    }

    fn dcgm(&self, level: u8, timeout: Duration) -> Option<Result<DcgmOutcome, String>> {
        self.host.dcgm(level, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this project's machines (no GPU, no driver) the real side answers
    /// with errors that name the driver, and nothing panics; on a machine
    /// with a driver and a GPU it lists at least one.
    #[test]
    fn without_a_driver_the_real_side_is_an_error_not_a_panic() {
        let gpus = real();
        let driver = std::path::Path::new("/dev/nvidia0").exists();
        match gpus.devices() {
            Ok(d) => assert!(driver && !d.is_empty(), "listed {} GPUs without /dev/nvidia0", d.len()),
            Err(e) => {
                assert!(!driver || !cfg!(feature = "cuda"), "a driver is here but: {e}");
                let said = if cfg!(feature = "cuda") {
                    "no NVIDIA driver: NVML (libnvidia-ml.so.1) could not be loaded: "
                } else {
                    "no NVIDIA driver support: gpu-health was built without its `cuda` feature"
                };
                assert!(e.starts_with(said), "{e}");
            }
        }
        if !driver {
            for r in [gpus.gemm_tflops(0, 10), gpus.memory_gbps(0, 10), gpus.allreduce_busbw_gbps(10)] {
                assert!(r.is_err(), "{r:?}");
            }
        }
        // A second call takes the same path (no cached state to trip over).
        assert_eq!(gpus.devices().is_ok(), driver && gpus.devices().is_ok());
    }
}
