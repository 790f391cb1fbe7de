//! What the port reports: one GPU's facts as the driver (NVML) gives them,
//! and DCGM's diagnostic outcome. Plain data, serialisable, so the JSON
//! fixture ([`crate::Fixture`]) holds exactly what the real side returns.

use serde::{Deserialize, Serialize};

/// NVML's clock event ("throttle") reason bits (`nvmlClocksEventReason*`,
/// nvml.h; the same values as nvml-wrapper's `ThrottleReasons`), so the
/// checks read a bitmask without NVML.
pub(crate) mod throttle {
    /// Nothing runs on the GPU: clocks are low on purpose.
    pub(crate) const GPU_IDLE: u64 = 0x1;
    /// Clocks held by the applications clocks setting.
    pub(crate) const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    /// The software power cap (the board's power limit): normal under a heavy load.
    pub(crate) const SW_POWER_CAP: u64 = 0x4;
    /// Hardware slowdown (temperature, power brake or power too high): clocks
    /// cut by a factor of 2 or more.
    pub(crate) const HW_SLOWDOWN: u64 = 0x8;
    /// Sync boost (clocks matched across a group of GPUs).
    pub(crate) const SYNC_BOOST: u64 = 0x10;
    /// Software thermal slowdown: the GPU or its memory above its maximum operating temperature.
    pub(crate) const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    /// Hardware thermal slowdown: the GPU too hot.
    pub(crate) const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    /// Hardware power brake: the power supply asserted the brake signal.
    pub(crate) const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    /// Display clock setting.
    pub(crate) const DISPLAY_CLOCK_SETTING: u64 = 0x100;

    /// The reasons that mean a fault (cooling, power delivery, the board),
    /// with their names. The power cap and idle are not among them: a GPU
    /// at its power limit under a GEMM, or idle, is working as designed.
    pub(crate) const FAULTS: [(u64, &str); 4] = [
        (HW_SLOWDOWN, "HW slowdown"),
        (HW_THERMAL_SLOWDOWN, "HW thermal slowdown"),
        (HW_POWER_BRAKE_SLOWDOWN, "HW power brake"),
        (SW_THERMAL_SLOWDOWN, "SW thermal slowdown"),
    ];

    /// Every reason's name, for the value column.
    pub(crate) const NAMES: [(u64, &str); 9] = [
        (GPU_IDLE, "idle"),
        (APPLICATIONS_CLOCKS_SETTING, "applications clocks"),
        (SW_POWER_CAP, "power cap"),
        (HW_SLOWDOWN, "HW slowdown"),
        (SYNC_BOOST, "sync boost"),
        (SW_THERMAL_SLOWDOWN, "SW thermal slowdown"),
        (HW_THERMAL_SLOWDOWN, "HW thermal slowdown"),
        (HW_POWER_BRAKE_SLOWDOWN, "HW power brake"),
        (DISPLAY_CLOCK_SETTING, "display clock"),
    ];

    /// The names of the set bits ("power cap, HW slowdown"); "none" when no bit is set.
    pub(crate) fn describe(mask: u64) -> String {
        let names: Vec<&str> = NAMES.iter().filter(|(bit, _)| mask & bit != 0).map(|(_, n)| *n).collect();
        let unknown = mask & !NAMES.iter().fold(0, |all, (bit, _)| all | bit);
        let mut text = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        if unknown != 0 {
            text.push_str(&format!(" (and bits {unknown:#x})"));
        }
        text
    }

    /// The fault reasons among the set bits.
    pub(crate) fn faults(mask: u64) -> Vec<&'static str> {
        FAULTS.iter().filter(|(bit, _)| mask & bit != 0).map(|(_, n)| *n).collect()
    }
}

/// One GPU as the driver lists it. `None` in a field: NVML does not
/// support the query on this GPU (for example row remapping before Ampere,
/// retired pages from Ampere on, NVLink on a PCIe card) or it failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// NVML's index (the order of `nvidia-smi`, by PCI bus id).
    pub index: u32,
    /// The model as NVML names it ("NVIDIA H100 80GB HBM3").
    pub name: String,
    /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
    pub uuid: String,
    /// NVML's bus id, "00000000:53:00.0" (domain:bus:device.function).
    pub pci_bus_id: String,
    /// Uncorrectable ECC errors since the driver loaded (volatile count).
    #[serde(default)]
    pub ecc_volatile_uncorrected: Option<u64>,
    /// Corrected ECC errors since the driver loaded (reported, not judged).
    #[serde(default)]
    pub ecc_volatile_corrected: Option<u64>,
    /// Pages waiting to be retired at the next driver load (page
    /// retirement, GPUs before Ampere).
    #[serde(default)]
    pub retired_pages_pending: Option<bool>,
    /// Row remapping (Ampere and later).
    #[serde(default)]
    pub remapped_rows: Option<RemapFacts>,
    /// NVML's clock event reasons now, a bitmask ([`throttle`]).
    #[serde(default)]
    pub throttle_reasons: Option<u64>,
    /// The PCIe link's generation now (it drops while the GPU idles).
    #[serde(default)]
    pub pcie_gen_current: Option<u32>,
    /// The highest generation the GPU and its slot both support.
    #[serde(default)]
    pub pcie_gen_max: Option<u32>,
    /// The PCIe link's width now (lanes).
    #[serde(default)]
    pub pcie_width_current: Option<u32>,
    /// The widest link the GPU and its slot both support.
    #[serde(default)]
    pub pcie_width_max: Option<u32>,
    /// Each NVLink's state (true: active); `None` where the GPU has no NVLink.
    #[serde(default)]
    pub nvlink_active: Option<Vec<bool>>,
    /// NVML's utilisation: the percent of its last sample period in which
    /// a kernel ran on the GPU. Not judged by the gate; what the idle guard
    /// reads ([`busiest_percent`]).
    #[serde(default)]
    pub utilisation_percent: Option<u32>,
}

/// The busiest GPU's utilisation, percent: the idle guard's GPU signal.
/// `None` without a driver, without GPUs, or when no GPU's utilisation
/// could be read (never an error: a node that cannot be probed counts
/// nothing).
pub fn busiest_percent(gpus: &dyn crate::Gpus) -> Option<u32> {
    match gpus.utilisation() {
        Ok(percents) => percents.into_iter().max(),
        Err(e) => {
            tracing::debug!("no GPU utilisation ({e})");
            None
        }
    }
}

/// Row remapping's counters (`nvmlDeviceGetRemappedRows`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemapFacts {
    /// Rows remapped for correctable errors.
    pub correctable: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrectable: u32,
    /// A remap waits for a GPU reset to take effect.
    pub pending: bool,
    /// A remap failed (no spare row left): the GPU needs service.
    pub failed: bool,
}

/// What `dcgmi diag -r <level> -j` found: one entry per test and GPU (or
/// per test, where DCGM gives no GPU).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcgmOutcome {
    /// The level run (1 to 4).
    pub level: u8,
    /// Every result DCGM gave.
    pub results: Vec<DcgmResult>,
}

/// One DCGM test result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcgmResult {
    /// The test's name ("Memory", "Diagnostic", "PCIe", "software").
    pub test: String,
    /// The GPU, where DCGM names one.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// DCGM's status word: "Pass", "Fail", "Warn", "Skip" (case as DCGM gives it).
    pub status: String,
    /// DCGM's warning text, where it gave one.
    #[serde(default)]
    pub detail: String,
}

impl DcgmResult {
    /// DCGM called it a failure.
    pub fn failed(&self) -> bool {
        self.status.eq_ignore_ascii_case("fail")
    }
}

impl DcgmOutcome {
    /// The failed results.
    pub fn failures(&self) -> impl Iterator<Item = &DcgmResult> {
        self.results.iter().filter(|r| r.failed())
    }
}
