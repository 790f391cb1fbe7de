//! The fake side of the port: a node's whole GPU state in one JSON file
//! ([`Fixture`]), served by [`FixtureGpus`], which reads the file again at
//! every call, so a test (or an end-to-end run) can change a node's GPUs
//! while the agent watches them: write a fixture with an XID 79 line and
//! the watch reports it.
//!
//! [`Fixture::healthy`] builds a healthy node of a known type, with figures
//! from real devices: names, PCI addresses and NVLink counts as NVML gives
//! them on p4d (A100), p5 (H100) and p5e (H200) instances, and burn results
//! close to what cuBLAS, a device-to-device copy and nccl-tests measure on
//! them (see [`Fixture::healthy`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use node_contract::gpu::GpuExpect;
use serde::{Deserialize, Serialize};

use crate::Gpus;
use crate::facts::{DcgmOutcome, DeviceFacts, RemapFacts, throttle};

/// A node's GPU state for the fake port. The JSON form is this struct's
/// serde form (see the crate documentation for an example).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// When set, `devices()` fails with this text (no driver, NVML broken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_error: Option<String>,
    /// What NVML lists.
    pub devices: Vec<DeviceFacts>,
    /// The kernel log since boot, one line each.
    #[serde(default)]
    pub kernel_log: Vec<String>,
    /// The GEMM burn's result, TFLOP/s, by GPU index (a GPU without one fails its burn).
    #[serde(default)]
    pub gemm_tflops: Vec<f64>,
    /// The memory burn's result, GB/s, by GPU index.
    #[serde(default)]
    pub memory_gbps: Vec<f64>,
    /// The all-reduce's bus bandwidth, GB/s (`None`: the all-reduce fails).
    #[serde(default)]
    pub allreduce_busbw_gbps: Option<f64>,
    /// EFA devices under /sys/class/infiniband.
    #[serde(default)]
    pub efa_devices: u32,
    /// `dcgmi diag`'s outcome; `None`: DCGM is not installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcgm: Option<Result<DcgmOutcome, String>>,
    /// The burns take the time they are given (sleeping), as real ones do;
    /// otherwise they answer at once.
    #[serde(default)]
    pub burns_take_their_time: bool,
    /// What changes on a GPU while a burn runs on the node (by GPU index):
    /// the link's generation and the clock event reasons.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub under_load: BTreeMap<u32, LoadFacts>,
}

/// A GPU's readings while it works.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadFacts {
    /// The PCIe generation under load.
    #[serde(default)]
    pub pcie_gen_current: Option<u32>,
    /// The clock event reasons under load.
    #[serde(default)]
    pub throttle_reasons: Option<u64>,
}

/// A GPU model's figures: NVIDIA's published ones (the expectation) and the
/// fixture's burn results, per-GPU values chosen within the ranges public
/// reports give for healthy devices (not read off a device: no GPU was lent
/// when this was written; record real ones here when one is).
struct Model {
    nvml_name: &'static str,
    word: &'static str,
    /// Dense BF16 tensor TFLOP/s, NVIDIA's datasheet (SXM).
    bf16_spec: f64,
    /// Memory bandwidth, GB/s, NVIDIA's datasheet.
    memory_spec: f64,
    /// nccl-tests all_reduce_perf bus bandwidth on 8 GPUs, large messages.
    busbw_expect: f64,
    /// A large BF16 GEMM through cuBLAS on healthy GPUs (chosen, see above).
    gemm_measured: [f64; 8],
    /// A device-to-device copy, counting bytes read and written.
    memory_measured: [f64; 8],
    busbw_measured: f64,
    pcie_gen: u32,
    nvlinks: usize,
    /// NVML bus ids of the instance type's 8 GPUs.
    bus_ids: [&'static str; 8],
    /// EFA devices on the 8-GPU instance type.
    efa_on_8: u32,
}

// The H100 and H200 (GH100) share their datasheet's dense BF16 figure (989.4
// TFLOP/s, SXM) and NVLink 4 (18 links, 900 GB/s); memory is 3.35 TB/s
// (HBM3, 80 GB) and 4.8 TB/s (HBM3e, 141 GB). cuBLAS reaches about 700 to
// 790 TFLOP/s on large BF16 GEMMs (power-capped at 700 W); nccl-tests'
// all-reduce on p5 reaches 450 to 480 GB/s bus bandwidth with NVLink
// SHARP. p5.48xlarge's GPUs sit at buses 53, 64, 75, 86, 97, a8, b9, ca
// (p5e's alike). A100 SXM4 40 GB (p4d.24xlarge): 312 TFLOP/s, 1555 GB/s,
// NVLink 3 (12 links), PCIe gen4, GPUs at 10:1c, 10:1d, 20:1c, ... (the
// address of the XID 63 line in stas00/ml-engineering's debug guide, a p4d).
const H100: Model = Model {
    nvml_name: "NVIDIA H100 80GB HBM3",
    word: "H100",
    bf16_spec: 989.0,
    memory_spec: 3350.0,
    busbw_expect: 450.0,
    gemm_measured: [718.4, 724.9, 709.3, 731.0, 712.6, 726.2, 715.8, 721.5],
    memory_measured: [2987.0, 3012.4, 2979.8, 3001.6, 2994.1, 3008.9, 2983.3, 2999.7],
    busbw_measured: 468.2,
    pcie_gen: 5,
    nvlinks: 18,
    bus_ids: P5_BUSES,
    efa_on_8: 32,
};

const H200: Model = Model {
    nvml_name: "NVIDIA H200",
    word: "H200",
    bf16_spec: 989.0,
    memory_spec: 4800.0,
    busbw_expect: 450.0,
    gemm_measured: [781.2, 774.6, 788.9, 769.3, 785.0, 778.8, 772.1, 790.4],
    memory_measured: [4128.5, 4151.0, 4117.2, 4139.9, 4144.6, 4122.3, 4135.7, 4148.1],
    busbw_measured: 471.6,
    pcie_gen: 5,
    nvlinks: 18,
    bus_ids: P5_BUSES,
    efa_on_8: 32,
};

const A100: Model = Model {
    nvml_name: "NVIDIA A100-SXM4-40GB",
    word: "A100",
    bf16_spec: 312.0,
    memory_spec: 1555.0,
    busbw_expect: 230.0,
    gemm_measured: [262.8, 259.1, 265.4, 260.7, 263.9, 258.6, 261.2, 264.0],
    memory_measured: [1312.4, 1308.9, 1318.2, 1305.6, 1314.0, 1310.1, 1316.7, 1309.3],
    busbw_measured: 233.5,
    pcie_gen: 4,
    nvlinks: 12,
    bus_ids: [
        "00000000:10:1C.0",
        "00000000:10:1D.0",
        "00000000:20:1C.0",
        "00000000:20:1D.0",
        "00000000:90:1C.0",
        "00000000:90:1D.0",
        "00000000:A0:1C.0",
        "00000000:A0:1D.0",
    ],
    efa_on_8: 4,
};

const P5_BUSES: [&str; 8] = [
    "00000000:53:00.0",
    "00000000:64:00.0",
    "00000000:75:00.0",
    "00000000:86:00.0",
    "00000000:97:00.0",
    "00000000:A8:00.0",
    "00000000:B9:00.0",
    "00000000:CA:00.0",
];

fn model(word: &str) -> &'static Model {
    match word {
        "H100" => &H100,
        "H200" => &H200,
        "A100" => &A100,
        other => panic!("Fixture: no figures for the GPU model {other:?} (known: H100, H200, A100)"),
    }
}

impl Fixture {
    /// A healthy node with `gpus` GPUs of `model` ("H100", "H200" or
    /// "A100"; at most 8), idle: each GPU as NVML shows it at rest (clock
    /// reason "idle", the PCIe link at gen 1, as a resting GPU lowers it),
    /// and under load at its full generation with the power cap as the
    /// only clock reason. Burn results as healthy devices measure them; EFA
    /// devices as the 8-GPU instance type has them (p5 and p5e: 32; p4d:
    /// 4), scaled down for fewer GPUs.
    ///
    /// # Panics
    /// On another model or more than 8 GPUs (a test's mistake).
    pub fn healthy(model_word: &str, gpus: u32) -> Fixture {
        let m = model(model_word);
        assert!(gpus <= 8, "Fixture::healthy: at most 8 GPUs, {gpus} asked for");
        let devices = (0..gpus)
            .map(|i| DeviceFacts {
                index: i,
                name: m.nvml_name.to_string(),
                uuid: format!(
                    "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    0x5e1c_0000 + i,
                    0x1a2b,
                    0x3c4d,
                    0x5e6f,
                    0x7081_92a3_b4c5u64 + u64::from(i)
                ),
                pci_bus_id: m.bus_ids[i as usize].to_string(),
                ecc_volatile_uncorrected: Some(0),
                ecc_volatile_corrected: Some(0),
                // Ampere and later retire no pages (NVML: not supported); they remap rows.
                retired_pages_pending: None,
                remapped_rows: Some(RemapFacts::default()),
                throttle_reasons: Some(throttle::GPU_IDLE),
                pcie_gen_current: Some(1),
                pcie_gen_max: Some(m.pcie_gen),
                pcie_width_current: Some(16),
                pcie_width_max: Some(16),
                nvlink_active: if gpus > 1 { Some(vec![true; m.nvlinks]) } else { None },
                utilisation_percent: Some(0),
            })
            .collect();
        let under_load = (0..gpus)
            .map(|i| {
                (i, LoadFacts { pcie_gen_current: Some(m.pcie_gen), throttle_reasons: Some(throttle::SW_POWER_CAP) })
            })
            .collect();
        Fixture {
            driver_error: None,
            devices,
            kernel_log: vec![
                "[    0.000000] Linux version 6.8.0-1021-aws (buildd@lcy02-amd64-047) (x86_64-linux-gnu-gcc-12) #23~22.04.1-Ubuntu SMP".into(),
                "[    5.102394] nvidia: loading out-of-tree module taints kernel.".into(),
                "[    5.301122] nvidia-nvlink: Nvlink Core is being initialized, major device number 236".into(),
                "[    5.480339] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024".into(),
                "[    6.102811] nvidia-uvm: Loaded the UVM driver, major device number 234.".into(),
            ],
            gemm_tflops: m.gemm_measured[..gpus as usize].to_vec(),
            memory_gbps: m.memory_measured[..gpus as usize].to_vec(),
            allreduce_busbw_gbps: (gpus > 1).then_some(m.busbw_measured),
            efa_devices: m.efa_on_8 * gpus / 8,
            dcgm: None,
            burns_take_their_time: false,
            under_load,
        }
    }

    /// What the instance type of [`Fixture::healthy`]'s node promises, as
    /// synth's catalogue would give it.
    pub fn expect(model_word: &str, gpus: u32) -> GpuExpect {
        let m = model(model_word);
        GpuExpect {
            gpus,
            model: Some(m.word.to_string()),
            efa_devices: Some(m.efa_on_8 * gpus / 8),
            bf16_tflops: Some(m.bf16_spec),
            memory_gbps: Some(m.memory_spec),
            nvlink_busbw_gbps: (gpus > 1).then_some(m.busbw_expect),
        }
    }

    /// The fixture as the JSON [`FixtureGpus`] reads.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a fixture always serialises")
    }

    /// Writes the fixture to `path` (a temporary file renamed into place,
    /// so a reader never sees half of it).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.to_json())?;
        std::fs::rename(&tmp, path)
    }
}

/// The fake [`Gpus`]: serves the [`Fixture`] in a JSON file, read again at
/// every call. A missing or garbled file is an error of that call.
/// `FixtureGpus { path }` and [`FixtureGpus::new`] make the same thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixtureGpus {
    /// The fixture file (it need not exist yet).
    pub path: PathBuf,
}

/// Burns running now, by fixture file (their GPUs report
/// [`Fixture::under_load`]); kept beside the fake so that it stays a plain
/// path, and keyed by the path so that fakes of two files do not mix.
fn burning() -> &'static Mutex<HashMap<PathBuf, usize>> {
    static BURNING: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    BURNING.get_or_init(Mutex::default)
}

impl FixtureGpus {
    /// Serves the fixture at `path` (it need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> FixtureGpus {
        FixtureGpus { path: path.into() }
    }

    fn burns_running(&self) -> usize {
        burning().lock().unwrap_or_else(|p| p.into_inner()).get(&self.path).copied().unwrap_or(0)
    }

    fn count_burn(&self, delta: isize) {
        let mut all = burning().lock().unwrap_or_else(|p| p.into_inner());
        let n = all.entry(self.path.clone()).or_default();
        *n = n.saturating_add_signed(delta);
    }

    /// The fixture file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<Fixture, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("reading the GPU fixture {}: {e}", self.path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("the GPU fixture {} is not valid: {e}", self.path.display()))
    }

    /// Runs a fake burn: as long as asked when the fixture says so, with
    /// the node counted as under load meanwhile.
    fn burn<T>(&self, for_ms: u64, result: impl FnOnce(&Fixture) -> Result<T, String>) -> Result<T, String> {
        let fixture = self.read()?;
        let value = result(&fixture)?;
        if fixture.burns_take_their_time {
            self.count_burn(1);
            std::thread::sleep(Duration::from_millis(for_ms));
            self.count_burn(-1);
        }
        Ok(value)
    }
}

fn per_gpu(values: &[f64], gpu: u32, what: &str) -> Result<f64, String> {
    values.get(gpu as usize).copied().ok_or_else(|| format!("{what} on GPU {gpu}: the fixture has no result for it"))
}

impl Gpus for FixtureGpus {
    fn devices(&self) -> Result<Vec<DeviceFacts>, String> {
        let fixture = self.read()?;
        if let Some(e) = fixture.driver_error {
            return Err(e);
        }
        let mut devices = fixture.devices;
        if self.burns_running() > 0 {
            for d in &mut devices {
                if let Some(load) = fixture.under_load.get(&d.index) {
                    d.pcie_gen_current = load.pcie_gen_current.or(d.pcie_gen_current);
                    d.throttle_reasons = load.throttle_reasons.or(d.throttle_reasons);
                }
                // A burn keeps every GPU of the node busy.
                d.utilisation_percent = Some(100);
            }
        }
        Ok(devices)
    }

    fn kernel_log(&self) -> Result<Vec<String>, String> {
        Ok(self.read()?.kernel_log)
    }

    fn gemm_tflops(&self, gpu: u32, for_ms: u64) -> Result<f64, String> {
        self.burn(for_ms, |f| per_gpu(&f.gemm_tflops, gpu, "the GEMM burn"))
    }

    fn memory_gbps(&self, gpu: u32, for_ms: u64) -> Result<f64, String> {
        self.burn(for_ms, |f| per_gpu(&f.memory_gbps, gpu, "the memory burn"))
    }

    fn allreduce_busbw_gbps(&self, for_ms: u64) -> Result<f64, String> {
        self.burn(for_ms, |f| {
            f.allreduce_busbw_gbps.ok_or_else(|| "the all-reduce failed (the fixture has no result)".to_string())
        })
    }

    fn efa_devices(&self) -> Result<u32, String> {
        Ok(self.read()?.efa_devices)
    }

    fn dcgm(&self, _level: u8, _timeout: Duration) -> Option<Result<DcgmOutcome, String>> {
        match self.read() {
            Ok(f) => f.dcgm,
            Err(e) => Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_is_read_again_at_every_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpus.json");
        let gpus = FixtureGpus::new(&path);
        let missing = gpus.devices().unwrap_err();
        assert!(missing.starts_with("reading the GPU fixture") && missing.contains("gpus.json"), "{missing}");

        let mut f = Fixture::healthy("H200", 8);
        f.write(&path).unwrap();
        assert_eq!(gpus.devices().unwrap().len(), 8);
        assert!(gpus.kernel_log().unwrap().iter().all(|l| crate::xid::parse(l).is_none()));

        f.kernel_log.push(
            "[ 812.339201] NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus.".into(),
        );
        f.devices.remove(3);
        f.write(&path).unwrap();
        assert_eq!(gpus.devices().unwrap().len(), 7);
        assert_eq!(gpus.kernel_log().unwrap().iter().filter_map(|l| crate::xid::parse(l)).count(), 1);

        std::fs::write(&path, "{ not json").unwrap();
        let garbled = gpus.devices().unwrap_err();
        assert!(garbled.contains("is not valid"), "{garbled}");
        assert!(gpus.gemm_tflops(0, 1).is_err() && gpus.efa_devices().is_err());
        assert!(matches!(gpus.dcgm(1, Duration::from_secs(1)), Some(Err(_))));
    }

    #[test]
    fn a_fixture_round_trips_through_json() {
        let mut f = Fixture::healthy("A100", 8);
        f.dcgm = Some(Ok(DcgmOutcome { level: 1, results: vec![] }));
        let back: Fixture = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.devices[0].pci_bus_id, "00000000:10:1C.0");
        assert_eq!(back.efa_devices, 4);
    }

    #[test]
    fn burns_answer_from_the_fixture_and_report_load_while_they_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpus.json");
        let mut f = Fixture::healthy("H100", 2);
        f.burns_take_their_time = true;
        f.write(&path).unwrap();
        let gpus = FixtureGpus { path: path.clone() };
        assert_eq!(gpus.gemm_tflops(1, 1).unwrap(), 724.9);
        assert!(gpus.gemm_tflops(2, 1).unwrap_err().contains("GPU 2"));
        assert_eq!(gpus.devices().unwrap()[0].pcie_gen_current, Some(1));
        std::thread::scope(|s| {
            s.spawn(|| gpus.memory_gbps(0, 400).unwrap());
            std::thread::sleep(Duration::from_millis(150));
            let loaded = gpus.devices().unwrap();
            assert_eq!(loaded[0].pcie_gen_current, Some(5));
            assert_eq!(loaded[0].throttle_reasons, Some(throttle::SW_POWER_CAP));
        });
        assert_eq!(gpus.devices().unwrap()[0].pcie_gen_current, Some(1));
    }
}
