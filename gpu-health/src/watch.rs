//! The watch while a node runs: what is new since the node started
//! watching. A fault is a fatal XID that was not in the kernel log before,
//! a GPU's uncorrectable ECC count that rose, a GPU the driver no longer
//! lists, or NVML failing [`NVML_FAILURES`] polls in a row. What was there
//! at the baseline (an XID from before the agent started, the boot gate
//! already judged it) is not a fault.
//!
//! The caller polls (the agent every few seconds); each poll reads the
//! port once and returns at most one fault, the rest on the next polls.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::Gpus;
use crate::facts::DeviceFacts;
use crate::xid;

/// How many polls in a row NVML may fail before that is a fault itself (a
/// single failed query is not worth a node).
pub(crate) const NVML_FAILURES: u32 = 3;

/// A fatal fault found while watching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The GPU, where the fault names one.
    pub gpu: Option<u32>,
    /// One line: "XID 79 on GPU 3: GPU has fallen off the bus".
    pub detail: String,
}

#[derive(Clone, Debug)]
struct Known {
    index: u32,
    pci_bus_id: String,
    ecc: Option<u64>,
}

/// The watch's state: what the node's GPUs looked like at the baseline and
/// at the last poll.
#[derive(Debug)]
pub struct Watch {
    /// By UUID; `None` until the driver has answered once.
    gpus: Option<BTreeMap<String, Known>>,
    /// Every XID line seen, with how often (a line can repeat verbatim);
    /// `None` until the kernel log has been read once.
    xid_lines: Option<HashMap<String, usize>>,
    nvml_failures: u32,
    pending: VecDeque<Fault>,
}

impl Watch {
    /// Takes the baseline: the GPUs, their ECC counts and the XIDs already
    /// in the log. A part the port cannot read now is taken at the first
    /// poll that reads it.
    pub fn new(gpus: &dyn Gpus) -> Watch {
        let mut w = Watch { gpus: None, xid_lines: None, nvml_failures: 0, pending: VecDeque::new() };
        if let Ok(devices) = gpus.devices() {
            w.gpus = Some(known(&devices));
        }
        if let Ok(lines) = gpus.kernel_log() {
            w.xid_lines = Some(xid_lines(&lines));
        }
        w
    }

    /// A new fatal fault since the baseline or the last poll; `None` when
    /// nothing new.
    pub fn poll(&mut self, gpus: &dyn Gpus) -> Option<Fault> {
        if let Some(f) = self.pending.pop_front() {
            return Some(f);
        }
        self.poll_log(gpus);
        self.poll_devices(gpus);
        self.pending.pop_front()
    }

    fn poll_log(&mut self, gpus: &dyn Gpus) {
        let Ok(lines) = gpus.kernel_log() else {
            return;
        };
        let now = xid_lines(&lines);
        let Some(seen) = self.xid_lines.as_mut() else {
            self.xid_lines = Some(now);
            return;
        };
        // In log order, so faults come out in the order they happened.
        let mut counted: HashMap<&str, usize> = HashMap::new();
        for line in &lines {
            let Some(x) = xid::parse(line) else { continue };
            let n = counted.entry(line.as_str()).or_default();
            *n += 1;
            if *n <= seen.get(line.as_str()).copied().unwrap_or(0) || !xid::is_fatal(x.code) {
                continue;
            }
            let key = xid::pci_key(&x.pci);
            let gpu = self.gpus.as_ref().and_then(|g| {
                g.values().find(|k| key.is_some() && xid::pci_key(&k.pci_bus_id) == key).map(|k| k.index)
            });
            let words = xid::meaning(x.code).map(str::to_string).unwrap_or_else(|| x.text.clone());
            let detail = match gpu {
                Some(i) => format!("XID {} on GPU {i}: {words}", x.code),
                None => format!("XID {} at PCI {}: {words}", x.code, x.pci),
            };
            self.pending.push_back(Fault { gpu, detail });
        }
        for (line, n) in now {
            let was = seen.entry(line).or_default();
            *was = (*was).max(n);
        }
    }

    fn poll_devices(&mut self, gpus: &dyn Gpus) {
        let devices = match gpus.devices() {
            Ok(d) => d,
            Err(e) => {
                self.nvml_failures += 1;
                if self.nvml_failures == NVML_FAILURES {
                    self.pending.push_back(Fault {
                        gpu: None,
                        detail: format!("NVML failed {NVML_FAILURES} polls in a row: {e}"),
                    });
                }
                return;
            }
        };
        self.nvml_failures = 0;
        let now = known(&devices);
        let Some(before) = self.gpus.as_mut() else {
            self.gpus = Some(now);
            return;
        };
        for (uuid, k) in before.iter() {
            match now.get(uuid) {
                None => self.pending.push_back(Fault {
                    gpu: Some(k.index),
                    detail: format!("GPU {} ({uuid}, PCI {}) is no longer listed by the driver", k.index, k.pci_bus_id),
                }),
                Some(n) => {
                    if let (Some(was), Some(is)) = (k.ecc, n.ecc)
                        && is > was
                    {
                        self.pending.push_back(Fault {
                            gpu: Some(n.index),
                            detail: format!("GPU {}: uncorrectable ECC errors rose from {was} to {is}", n.index),
                        });
                    }
                }
            }
        }
        // The GPUs now are the next poll's baseline: a GPU reported gone is not reported again.
        *before = now;
    }
}

fn known(devices: &[DeviceFacts]) -> BTreeMap<String, Known> {
    devices
        .iter()
        .map(|d| {
            (
                d.uuid.clone(),
                Known { index: d.index, pci_bus_id: d.pci_bus_id.clone(), ecc: d.ecc_volatile_uncorrected },
            )
        })
        .collect()
}

fn xid_lines(lines: &[String]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for l in lines.iter().filter(|l| xid::parse(l).is_some()) {
        *seen.entry(l.clone()).or_default() += 1;
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{Fixture, FixtureGpus};

    const XID_79_GPU_3: &str =
        "[ 4821.093317] NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus.";

    fn node() -> (tempfile::TempDir, FixtureGpus, Fixture) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpus.json");
        let f = Fixture::healthy("H100", 8);
        f.write(&path).unwrap();
        (dir, FixtureGpus::new(path), f)
    }

    #[test]
    fn nothing_new_is_no_fault() {
        let (_dir, gpus, _) = node();
        let mut w = Watch::new(&gpus);
        assert_eq!(w.poll(&gpus), None);
        assert_eq!(w.poll(&gpus), None);
    }

    #[test]
    fn a_new_fatal_xid_is_a_fault_naming_the_gpu_once() {
        let (_dir, gpus, mut f) = node();
        let mut w = Watch::new(&gpus);
        // An application's XID is no fault.
        f.kernel_log.push("[ 4800.000001] NVRM: Xid (PCI:0000:53:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address".into());
        f.write(gpus.path()).unwrap();
        assert_eq!(w.poll(&gpus), None);
        f.kernel_log.push(XID_79_GPU_3.into());
        f.write(gpus.path()).unwrap();
        assert_eq!(
            w.poll(&gpus),
            Some(Fault { gpu: Some(3), detail: "XID 79 on GPU 3: GPU has fallen off the bus".into() })
        );
        assert_eq!(w.poll(&gpus), None);
        // The same message again (a second record) is new.
        f.kernel_log.push(XID_79_GPU_3.into());
        f.write(gpus.path()).unwrap();
        assert_eq!(w.poll(&gpus).map(|f| f.gpu), Some(Some(3)));
    }

    #[test]
    fn xids_from_before_the_baseline_are_ignored() {
        let (_dir, gpus, mut f) = node();
        f.kernel_log.push(XID_79_GPU_3.into());
        f.kernel_log.push("[ 4900.5] NVRM: Xid (PCI:0000:97:00): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No".into());
        f.write(gpus.path()).unwrap();
        let mut w = Watch::new(&gpus);
        assert_eq!(w.poll(&gpus), None);
        // The ring buffer dropping old records makes nothing new either.
        f.kernel_log.retain(|l| !l.contains("Xid"));
        f.write(gpus.path()).unwrap();
        assert_eq!(w.poll(&gpus), None);
    }

    #[test]
    fn a_rising_uncorrectable_ecc_count_is_a_fault() {
        let (_dir, gpus, mut f) = node();
        f.devices[6].ecc_volatile_uncorrected = Some(1);
        f.write(gpus.path()).unwrap();
        let mut w = Watch::new(&gpus);
        assert_eq!(w.poll(&gpus), None);
        f.devices[6].ecc_volatile_uncorrected = Some(3);
        f.write(gpus.path()).unwrap();
        assert_eq!(
            w.poll(&gpus),
            Some(Fault { gpu: Some(6), detail: "GPU 6: uncorrectable ECC errors rose from 1 to 3".into() })
        );
        assert_eq!(w.poll(&gpus), None);
    }

    #[test]
    fn a_gpu_that_disappears_is_a_fault_and_several_faults_come_one_per_poll() {
        let (_dir, gpus, mut f) = node();
        let mut w = Watch::new(&gpus);
        let gone = f.devices.remove(3);
        f.kernel_log.push(XID_79_GPU_3.into());
        f.write(gpus.path()).unwrap();
        assert_eq!(w.poll(&gpus).unwrap().detail, "XID 79 on GPU 3: GPU has fallen off the bus");
        assert_eq!(
            w.poll(&gpus),
            Some(Fault {
                gpu: Some(3),
                detail: format!("GPU 3 ({}, PCI 00000000:86:00.0) is no longer listed by the driver", gone.uuid)
            })
        );
        assert_eq!(w.poll(&gpus), None);
    }

    #[test]
    fn nvml_failing_three_polls_in_a_row_is_a_fault_and_a_late_baseline_is_taken() {
        let (_dir, gpus, mut f) = node();
        let mut w = Watch::new(&gpus);
        f.driver_error = Some("NVML: GPU is lost".into());
        f.write(gpus.path()).unwrap();
        assert_eq!(w.poll(&gpus), None);
        assert_eq!(w.poll(&gpus), None);
        assert_eq!(
            w.poll(&gpus),
            Some(Fault { gpu: None, detail: "NVML failed 3 polls in a row: NVML: GPU is lost".into() })
        );

        // A watch started before the file existed takes its baseline at the first poll that reads it.
        let dir = tempfile::tempdir().unwrap();
        let late = FixtureGpus::new(dir.path().join("later.json"));
        let mut w = Watch::new(&late);
        let mut f = Fixture::healthy("H100", 8);
        f.kernel_log.push(XID_79_GPU_3.into());
        f.write(late.path()).unwrap();
        assert_eq!(w.poll(&late), None);
        f.devices[0].ecc_volatile_uncorrected = Some(1);
        f.write(late.path()).unwrap();
        assert_eq!(w.poll(&late).unwrap().detail, "GPU 0: uncorrectable ECC errors rose from 0 to 1");
    }
}
