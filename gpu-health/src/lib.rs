//! GPU health checks (issue 33: "a bad GPU never holds a run hostage").
//!
//! - [`gate()`]: the boot gate every node with NVIDIA GPUs runs before it
//!   joins (and `trainer doctor` runs on demand): the driver's counters,
//!   link states and kernel log, burns (GEMM, memory, all-reduce), EFA and
//!   DCGM, each a [`CheckResult`](node_contract::gpu::CheckResult) with its
//!   measured and expected value, within a time budget; the verdict is a
//!   [`GpuReport`](node_contract::gpu::GpuReport).
//! - [`Watch`]: what is new while the node trains: a fatal XID, an
//!   uncorrectable ECC error, a GPU gone ([`Fault`]).
//! - [`table()`]: `trainer doctor`'s table of reports.
//! - [`xid`]: the kernel log's XID lines, their meanings, which are fatal.
//!
//! # The port
//!
//! Everything above reads the GPUs through [`Gpus`]: [`real()`] (NVML and
//! CUDA, loaded at run time, with the crate's `cuda` feature; the kernel
//! log, `/sys/class/infiniband` and `dcgmi` in any build) and
//! [`FixtureGpus`] (a JSON [`Fixture`] read at every call). Without the
//! `cuda` feature, or on a machine without a driver, the real side's
//! `devices()` is an error that names the driver, never a panic.
//!
//! # The fixture's JSON
//!
//! [`Fixture`]'s serde form; [`Fixture::healthy`] makes a full one and
//! [`Fixture::write`] writes it. A node of one H100 that lost its bus:
//!
//! ```
//! let json = r#"{
//!   "devices": [
//!     { "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5e1c0000-1a2b-3c4d-5e6f-708192a3b4c5",
//!       "pci_bus_id": "00000000:53:00.0", "ecc_volatile_uncorrected": 0, "ecc_volatile_corrected": 0,
//!       "retired_pages_pending": null,
//!       "remapped_rows": { "correctable": 0, "uncorrectable": 0, "pending": false, "failed": false },
//!       "throttle_reasons": 1, "pcie_gen_current": 1, "pcie_gen_max": 5,
//!       "pcie_width_current": 16, "pcie_width_max": 16, "nvlink_active": null }
//!   ],
//!   "kernel_log": ["[  812.339201] NVRM: Xid (PCI:0000:53:00): 79, pid=4120, name=python, GPU has fallen off the bus."],
//!   "gemm_tflops": [718.4],
//!   "memory_gbps": [2987.0],
//!   "allreduce_busbw_gbps": null,
//!   "efa_devices": 1,
//!   "dcgm": { "Ok": { "level": 1, "results": [ { "test": "memory", "gpu": 0, "status": "Pass", "detail": "" } ] } },
//!   "burns_take_their_time": false,
//!   "under_load": { "0": { "pcie_gen_current": 5, "throttle_reasons": 4 } }
//! }"#;
//! let fixture: gpu_health::Fixture = serde_json::from_str(json).unwrap();
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("gpus.json");
//! fixture.write(&path).unwrap();
//! let gpus = gpu_health::FixtureGpus::new(&path);
//! let report = gpu_health::gate(&gpus, "i-0abc", "10.0.1.5", "p5.4xlarge", None,
//!     node_contract::gpu::GpuLevel::Quick, std::time::Duration::from_secs(60));
//! assert_eq!(report.failure_line(), "xid on GPU 0: XID 79 (GPU has fallen off the bus), expected no fatal XID since boot");
//! ```
//!
//! Every field but `devices` may be left out. `dcgm` absent: DCGM is not
//! installed; `{"Err": "..."}`: it failed to run. `driver_error` (a text)
//! makes `devices()` fail with it, as a node without a driver. A burn
//! without a result for its GPU (or `allreduce_busbw_gbps` null) fails.
//! `burns_take_their_time` makes burns sleep as long as asked, and
//! `under_load` is what a GPU reports while a burn runs.
//!
//! # What is proven without a GPU, and what is not
//!
//! Proven by the unit tests (no GPU on the build machines or in CI): every
//! check's verdict on figures of real devices (healthy A100, H100 and H200
//! nodes pass; each fault fails with its numbers), the order and the
//! budget (burns that take their time end the gate `timed_out` within the
//! budget), the readings under load, XID parsing on real log lines of
//! several drivers, the watch, the fixture, the table, `/dev/kmsg`
//! records, EFA devices in a stand-in sysfs, `dcgmi` run and killed at its
//! timeout (a stand-in script) and both of DCGM's JSON layouts, and that
//! the real side without a driver answers with errors that name it, not
//! panics (with and without the `cuda` feature). With the `cuda` feature
//! and cuBLAS and NCCL installed (NVIDIA's wheels, as
//! `scripts/gpu-toolchain` installs them, on `LD_LIBRARY_PATH`), every
//! cuBLAS and NCCL function the burns call resolves in the libraries as
//! cudarc loads them.
//!
//! Not proven here: the real side's figures on a GPU. NVML's answers on a
//! real device, the burns' kernels and their TFLOP/s and GB/s, the NCCL
//! all-reduce, and `dcgmi` itself need an NVIDIA driver and GPUs; the
//! fixture's figures are what those devices are published or reported to
//! give, not measurements made by this crate.

mod checks;
mod facts;
mod fixture;
mod gate;
mod host;
mod real;
mod table;
mod watch;
mod xid;

#[cfg(feature = "cuda")]
mod nvidia;
#[cfg(not(feature = "cuda"))]
#[path = "no_nvidia.rs"]
mod nvidia;

use std::time::Duration;

pub use facts::{DcgmOutcome, DcgmResult, DeviceFacts, RemapFacts, busiest_percent};
pub use fixture::{Fixture, FixtureGpus, LoadFacts};
pub use gate::{gate, last_report, rerun};
pub use real::{Real, open, real};
pub use table::table;
pub use watch::{Fault, Watch};

/// A node's GPUs, as the checks read them. Implementations: [`Real`]
/// (NVML, CUDA, the host's files and `dcgmi`) and [`FixtureGpus`].
pub trait Gpus: Send + Sync {
    /// Facts of every GPU the driver lists; Err(text) when the driver is not loaded or NVML fails.
    fn devices(&self) -> Result<Vec<DeviceFacts>, String>;
    /// Each GPU's utilisation, percent, and only that: what the idle guard
    /// and `trainer launch`'s stall report read every few seconds, where
    /// every fact of [`Gpus::devices`] (ECC, rows, links: dozens of NVML
    /// queries a GPU) would be wasted. By default read from `devices`.
    fn utilisation(&self) -> Result<Vec<u32>, String> {
        Ok(self.devices()?.iter().filter_map(|d| d.utilisation_percent).collect())
    }
    /// Kernel log lines since boot (the "NVRM: Xid (PCI:0000:10:1c): 79, pid=..., GPU has fallen off the bus." lines among them).
    fn kernel_log(&self) -> Result<Vec<String>, String>;
    /// A GEMM burn on one GPU for about `for_ms` ms: achieved dense BF16 TFLOP/s.
    fn gemm_tflops(&self, gpu: u32, for_ms: u64) -> Result<f64, String>;
    /// Device memory bandwidth on one GPU (device-to-device copy), GB/s.
    fn memory_gbps(&self, gpu: u32, for_ms: u64) -> Result<f64, String>;
    /// All-reduce across all the node's GPUs (NCCL, one process, one comm per GPU): bus bandwidth GB/s as nccl-tests computes it.
    fn allreduce_busbw_gbps(&self, for_ms: u64) -> Result<f64, String>;
    /// EFA devices on the node (/sys/class/infiniband entries whose driver/name is efa).
    fn efa_devices(&self) -> Result<u32, String>;
    /// `dcgmi diag -r <level>` when DCGM is installed: None when not installed.
    fn dcgm(&self, level: u8, timeout: Duration) -> Option<Result<DcgmOutcome, String>>;
}
