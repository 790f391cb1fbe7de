//! The GPUs' facts through NVML (`libnvidia-ml.so.1`, loaded at run time by
//! nvml-wrapper's -sys crate), the library `nvidia-smi` reads.
//!
//! A query NVML does not support on a GPU (row remapping before Ampere,
//! retired pages from Ampere on, NVLink on a PCIe card) is `None` in the
//! facts; a GPU NVML cannot open (`GpuLost` once it fell off the bus) is
//! left out of the list and logged, so the count and the watch see it gone.

use std::sync::{Arc, Mutex};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_SUCCESS;

use crate::facts::{DeviceFacts, RemapFacts};

/// NVML, opened at the first call that needs it (and tried again at the
/// next call while it cannot be: a driver loaded later is found).
#[derive(Default)]
pub(super) struct NvmlHandle {
    nvml: Mutex<Option<Arc<Nvml>>>,
}

impl std::fmt::Debug for NvmlHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlHandle").finish_non_exhaustive()
    }
}

impl NvmlHandle {
    fn get(&self) -> Result<Arc<Nvml>, String> {
        let mut held = self.nvml.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.as_ref() {
            return Ok(n.clone());
        }
        // nvml-wrapper loads the library with libloading and returns an
        // error when it is missing; the unwind guard is the last line, as in
        // the agent's `gpu` module.
        let nvml = match std::panic::catch_unwind(Nvml::init) {
            Ok(Ok(n)) => Arc::new(n),
            Ok(Err(NvmlError::LibloadingError(e))) => {
                return Err(format!("no NVIDIA driver: NVML (libnvidia-ml.so.1) could not be loaded: {e}"));
            }
            Ok(Err(NvmlError::DriverNotLoaded)) => {
                return Err("no NVIDIA driver: NVML says the driver is not loaded".into());
            }
            Ok(Err(e)) => return Err(format!("the NVIDIA driver's NVML failed to start: {e}")),
            Err(_) => return Err("no NVIDIA driver: loading NVML panicked".into()),
        };
        *held = Some(nvml.clone());
        Ok(nvml)
    }

    /// `run` on NVML, opened if need be; a panic in it is an error.
    fn query<T>(&self, run: impl FnOnce(&Nvml) -> Result<T, String>) -> Result<T, String> {
        let nvml = self.get()?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&nvml)))
            .unwrap_or_else(|_| Err("NVML: a query panicked".to_string()))
    }

    /// Every GPU NVML can open.
    pub(super) fn devices(&self) -> Result<Vec<DeviceFacts>, String> {
        self.query(list)
    }

    /// Each GPU's utilisation (NVML's last sample period), one query a GPU;
    /// a GPU that does not answer is left out.
    pub(super) fn utilisation(&self) -> Result<Vec<u32>, String> {
        self.query(|nvml| {
            let count = nvml.device_count().map_err(|e| format!("NVML could not count the GPUs: {e}"))?;
            Ok((0..count)
                .filter_map(|i| nvml.device_by_index(i).ok()?.utilization_rates().ok().map(|u| u.gpu))
                .collect())
        })
    }

    /// The PCI address (domain, bus, device) of NVML's GPU `index`, to find
    /// the same GPU among CUDA's devices (CUDA orders them fastest first
    /// unless CUDA_DEVICE_ORDER says otherwise; NVML by PCI address).
    pub(super) fn pci_key(&self, index: u32) -> Result<(u32, u32, u32), String> {
        let nvml = self.get()?;
        let device = nvml.device_by_index(index).map_err(|e| format!("NVML: GPU {index}: {e}"))?;
        let pci = device.pci_info().map_err(|e| format!("NVML: GPU {index}'s PCI address: {e}"))?;
        Ok((pci.domain, pci.bus, pci.device))
    }
}

fn list(nvml: &Nvml) -> Result<Vec<DeviceFacts>, String> {
    let count = nvml.device_count().map_err(|e| format!("NVML could not count the GPUs: {e}"))?;
    let mut devices = Vec::with_capacity(count as usize);
    for index in 0..count {
        match facts(nvml, index) {
            Ok(d) => devices.push(d),
            Err(e) => tracing::warn!(gpu = index, error = %e, "NVML cannot open a GPU it counts; leaving it out"),
        }
    }
    Ok(devices)
}

fn facts(nvml: &Nvml, index: u32) -> Result<DeviceFacts, NvmlError> {
    let d = nvml.device_by_index(index)?;
    let name = d.name()?;
    let uuid = d.uuid()?;
    let pci_bus_id = d.pci_info()?.bus_id;
    let remapped_rows = if nvml.lib().nvmlDeviceGetRemappedRows.is_ok() {
        let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
        // SAFETY: the symbol is present (checked above, so the -sys crate's
        // wrapper does not panic on it); the handle is a live device of this
        // NVML; the four pointers are to locals that outlive the call.
        let ret =
            unsafe { nvml.lib().nvmlDeviceGetRemappedRows(d.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
        (ret == nvmlReturn_enum_NVML_SUCCESS).then_some(RemapFacts {
            correctable: corr,
            uncorrectable: unc,
            pending: pending != 0,
            failed: failed != 0,
        })
    } else {
        None
    };
    // NVML_NVLINK_MAX_LINKS of this NVML's header (18 on Hopper); a link the
    // GPU does not have answers an error and is not listed.
    let links: Vec<bool> = (0..nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS)
        .filter_map(|l| d.link_wrapper_for(l).is_active().ok())
        .collect();
    Ok(DeviceFacts {
        index,
        name,
        uuid,
        pci_bus_id,
        ecc_volatile_uncorrected: d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
        ecc_volatile_corrected: d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile).ok(),
        retired_pages_pending: d.are_pages_pending_retired().ok(),
        remapped_rows,
        throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
        pcie_gen_current: d.current_pcie_link_gen().ok(),
        pcie_gen_max: d.max_pcie_link_gen().ok(),
        pcie_width_current: d.current_pcie_link_width().ok(),
        pcie_width_max: d.max_pcie_link_width().ok(),
        nvlink_active: if links.is_empty() { None } else { Some(links) },
        utilisation_percent: d.utilization_rates().ok().map(|u| u.gpu),
    })
}
