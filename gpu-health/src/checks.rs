//! Each check's verdict from what the port reported: pure functions of the
//! facts and the expectation, so every verdict is tested with figures from
//! real devices and no GPU. The gate ([`crate::gate()`]) runs them in order
//! and times them.

use node_contract::gpu::{GpuExpect, Verdict};

use crate::facts::{DcgmOutcome, DeviceFacts, throttle};
use crate::xid::{self, Xid};

/// The fraction of NVIDIA's figure a burn must reach: GEMM throughput,
/// memory bandwidth and the all-reduce's bus bandwidth alike.
///
/// Healthy devices reach well above it: cuBLAS's BF16 GEMM 70 to 80 % of
/// the datasheet's dense figure on H100 and H200 (power-capped at 700 W),
/// about 85 % on A100; a device-to-device copy 85 to 90 % of the memory
/// bandwidth; nccl-tests about the catalogue's all-reduce figure. The
/// faults it is there for fall far below it: a GPU held in HW slowdown
/// runs at half its clocks or less, and an all-reduce that lost NVLink
/// falls back to PCIe at a tenth of the speed. A higher bar would start to
/// fail healthy GPUs on a 2-second burn (clocks still rising, another
/// tenant's power draw on a shared power shelf); anything between 50 % and
/// healthy is left to the `throttle` check, which names the cause.
pub(crate) const MIN_FRACTION: f64 = 0.5;

/// One row before the gate times it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// The check's name.
    pub check: &'static str,
    /// The GPU, `None` for the node.
    pub gpu: Option<u32>,
    /// What was measured.
    pub value: String,
    /// What was expected.
    pub expected: String,
    /// The outcome.
    pub verdict: Verdict,
}

impl Row {
    fn new(
        check: &'static str,
        gpu: Option<u32>,
        value: impl Into<String>,
        expected: impl Into<String>,
        verdict: Verdict,
    ) -> Row {
        Row { check, gpu, value: value.into(), expected: expected.into(), verdict }
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("{n} {one}") } else { format!("{n} {many}") }
}

/// `driver`: NVML answered (or why not).
pub(crate) fn driver(listed: &Result<Vec<DeviceFacts>, String>) -> Row {
    match listed {
        Ok(d) => Row::new(
            "driver",
            None,
            format!("NVML lists {}", plural(d.len() as u64, "GPU", "GPUs")),
            "NVML answers",
            Verdict::Pass,
        ),
        Err(e) => Row::new("driver", None, e.clone(), "NVML answers", Verdict::Fail),
    }
}

/// `count`: the GPUs NVML lists against the instance type's.
pub(crate) fn count(found: usize, expect: Option<&GpuExpect>) -> Row {
    let value = plural(found as u64, "GPU", "GPUs");
    match expect {
        Some(e) => {
            let verdict = if found == e.gpus as usize { Verdict::Pass } else { Verdict::Fail };
            Row::new("count", None, value, plural(u64::from(e.gpus), "GPU", "GPUs"), verdict)
        }
        None => Row::new("count", None, value, "", Verdict::Info),
    }
}

/// `model`: every GPU's name contains the expected model's word.
pub(crate) fn model(devices: &[DeviceFacts], expect: Option<&GpuExpect>) -> Row {
    let mut names: Vec<(String, u32)> = Vec::new();
    for d in devices {
        match names.iter_mut().find(|(n, _)| *n == d.name) {
            Some((_, count)) => *count += 1,
            None => names.push((d.name.clone(), 1)),
        }
    }
    let value = if names.is_empty() {
        "no GPU".to_string()
    } else {
        names.iter().map(|(n, c)| format!("{n} ×{c}")).collect::<Vec<_>>().join(", ")
    };
    match expect.and_then(|e| e.model.as_deref()) {
        Some(word) => {
            let ok = !devices.is_empty() && devices.iter().all(|d| has_word(&d.name, word));
            Row::new(
                "model",
                None,
                value,
                format!("{word} on every GPU"),
                if ok { Verdict::Pass } else { Verdict::Fail },
            )
        }
        None => Row::new("model", None, value, "", Verdict::Info),
    }
}

/// Whether NVML's name holds the model's word as a word of its own
/// ("NVIDIA A100-SXM4-40GB" holds "A100"; "NVIDIA L40S" does not hold "L4",
/// which a plain substring test would take).
pub(crate) fn has_word(name: &str, word: &str) -> bool {
    name.split(|c: char| c.is_whitespace() || c == '-').any(|w| w.eq_ignore_ascii_case(word))
}

/// `ecc`: uncorrectable ECC errors since the driver loaded.
pub(crate) fn ecc(d: &DeviceFacts) -> Row {
    let corrected = d.ecc_volatile_corrected.map(|c| format!(" ({c} corrected)")).unwrap_or_default();
    match d.ecc_volatile_uncorrected {
        Some(0) => {
            Row::new("ecc", Some(d.index), format!("0 uncorrectable{corrected}"), "0 uncorrectable", Verdict::Pass)
        }
        Some(n) => Row::new(
            "ecc",
            Some(d.index),
            format!("{} since the driver loaded{corrected}", plural(n, "uncorrectable error", "uncorrectable errors")),
            "0 uncorrectable",
            Verdict::Fail,
        ),
        None => Row::new("ecc", Some(d.index), "not reported (ECC off or not supported)", "", Verdict::Info),
    }
}

/// `remap`: a row remap waiting for a reset or failed (Ampere and later);
/// on older GPUs, pages waiting for retirement.
pub(crate) fn remap(d: &DeviceFacts) -> Row {
    let expected = "no remap pending or failed";
    if let Some(r) = d.remapped_rows {
        let mut value = format!(
            "{} remapped ({} uncorrectable)",
            plural(u64::from(r.correctable + r.uncorrectable), "row", "rows"),
            r.uncorrectable
        );
        if r.pending {
            value.push_str(", a remap pending a GPU reset");
        }
        if r.failed {
            value.push_str(", a remap failed (no spare row)");
        }
        let verdict = if r.pending || r.failed { Verdict::Fail } else { Verdict::Pass };
        return Row::new("remap", Some(d.index), value, expected, verdict);
    }
    // No row remapper: a GPU before Ampere, which retires pages instead.
    match d.retired_pages_pending {
        Some(true) => Row::new(
            "remap",
            Some(d.index),
            "pages pending retirement (needs a driver reload)",
            "no page pending retirement",
            Verdict::Fail,
        ),
        Some(false) => {
            Row::new("remap", Some(d.index), "no page pending retirement", "no page pending retirement", Verdict::Pass)
        }
        None => Row::new("remap", Some(d.index), "not reported", "", Verdict::Info),
    }
}

/// `throttle`: clock event reasons that mean a fault. `when` says when it
/// was read ("before the burns", "during the GEMM burn").
pub(crate) fn throttle_row(d: &DeviceFacts, when: &str) -> Row {
    let expected = "no HW slowdown, HW thermal, HW power brake or SW thermal";
    match d.throttle_reasons {
        Some(mask) => {
            let faults = throttle::faults(mask);
            let verdict = if faults.is_empty() { Verdict::Pass } else { Verdict::Fail };
            Row::new("throttle", Some(d.index), format!("{} ({when})", throttle::describe(mask)), expected, verdict)
        }
        None => Row::new("throttle", Some(d.index), "not reported", "", Verdict::Info),
    }
}

/// The `pcie` check's reading of one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pcie {
    /// The row.
    pub row: Row,
    /// The generation could not be judged (the link was below its maximum
    /// while the GPU idled): a reading under load decides.
    pub needs_load: bool,
}

/// `pcie`: the link's width and generation against the most the GPU and
/// its slot support (NVML's "max" figures are the lower of the device's
/// and the slot's capability, so a gen4 slot does not fail a gen5 GPU).
///
/// A narrower link than the maximum is a fault whenever it is read: NVIDIA
/// GPUs lower the link's speed to save power, not its width, so a link at
/// x8 trained badly (a riser, a retimer, a dirty connector). A lower
/// generation is a fault only while the GPU works: at rest the GPU drops
/// to gen 1 on purpose. So at idle (clock reason "idle", or no reason
/// known) the generation waits for a reading under load
/// ([`Pcie::needs_load`]); the gate takes one during the GEMM burn.
pub(crate) fn pcie(d: &DeviceFacts, under_load: bool) -> Pcie {
    let (Some(gen_now), Some(gen_max), Some(width_now), Some(width_max)) =
        (d.pcie_gen_current, d.pcie_gen_max, d.pcie_width_current, d.pcie_width_max)
    else {
        return Pcie { row: Row::new("pcie", Some(d.index), "not reported", "", Verdict::Info), needs_load: false };
    };
    let idle = !under_load && d.throttle_reasons.is_none_or(|m| m & throttle::GPU_IDLE != 0);
    let when = if under_load {
        " under load"
    } else if idle {
        " at idle"
    } else {
        ""
    };
    let value = format!("gen{gen_now} x{width_now}{when}");
    let expected = format!("gen{gen_max} x{width_max} (the link's maximum)");
    let narrow = width_now < width_max;
    let slow = gen_now < gen_max;
    let (verdict, needs_load) = match (narrow, slow, idle) {
        (true, _, _) => (Verdict::Fail, false),
        (false, true, true) => (Verdict::Pass, true),
        (false, true, false) => (Verdict::Fail, false),
        (false, false, _) => (Verdict::Pass, false),
    };
    let value =
        if needs_load && verdict == Verdict::Pass { format!("{value}; generation not judged at idle") } else { value };
    Pcie { row: Row::new("pcie", Some(d.index), value, expected, verdict), needs_load }
}

/// `nvlink`: every NVLink active, where the GPU has NVLink.
pub(crate) fn nvlink(d: &DeviceFacts) -> Row {
    match &d.nvlink_active {
        Some(links) if !links.is_empty() => {
            let down: Vec<String> =
                links.iter().enumerate().filter(|(_, up)| !**up).map(|(i, _)| i.to_string()).collect();
            let active = links.len() - down.len();
            let expected = format!("{} of {} active", links.len(), links.len());
            if down.is_empty() {
                Row::new(
                    "nvlink",
                    Some(d.index),
                    format!("{active} of {} active", links.len()),
                    expected,
                    Verdict::Pass,
                )
            } else {
                let which = if down.len() == 1 {
                    format!("link {} down", down[0])
                } else {
                    format!("links {} down", down.join(", "))
                };
                Row::new(
                    "nvlink",
                    Some(d.index),
                    format!("{active} of {} active ({which})", links.len()),
                    expected,
                    Verdict::Fail,
                )
            }
        }
        _ => Row::new("nvlink", Some(d.index), "no NVLink", "", Verdict::Info),
    }
}

/// `xid`: the XIDs in the kernel log since boot, one row per GPU, and one
/// node row for XIDs at an address no listed GPU has (a GPU that fell off
/// the bus may no longer be listed).
pub(crate) fn xids(devices: &[DeviceFacts], log: &Result<Vec<String>, String>) -> Vec<Row> {
    let expected = "no fatal XID since boot";
    let lines = match log {
        Ok(lines) => lines,
        Err(e) => return vec![Row::new("xid", None, format!("kernel log not readable: {e}"), "", Verdict::Info)],
    };
    let found: Vec<Xid> = lines.iter().filter_map(|l| xid::parse(l)).collect();
    let mut rows: Vec<Row> = devices
        .iter()
        .map(|d| {
            let key = xid::pci_key(&d.pci_bus_id);
            let mine: Vec<&Xid> = found.iter().filter(|x| key.is_some() && xid::pci_key(&x.pci) == key).collect();
            xid_row(Some(d.index), &mine, "", expected)
        })
        .collect();
    let listed: Vec<_> = devices.iter().filter_map(|d| xid::pci_key(&d.pci_bus_id)).collect();
    let mut strays: Vec<&str> = Vec::new();
    for x in &found {
        let key = xid::pci_key(&x.pci);
        if key.is_none_or(|k| !listed.contains(&k)) && !strays.contains(&x.pci.as_str()) {
            strays.push(&x.pci);
        }
    }
    for pci in strays {
        let there: Vec<&Xid> = found.iter().filter(|x| x.pci == pci).collect();
        rows.push(xid_row(None, &there, &format!(" at PCI {pci}, a GPU NVML does not list"), expected));
    }
    if rows.is_empty() {
        rows.push(xid_row(None, &[], "", expected));
    }
    rows
}

fn xid_row(gpu: Option<u32>, xids: &[&Xid], place: &str, expected: &str) -> Row {
    if xids.is_empty() {
        return Row::new("xid", gpu, "none since boot", expected, Verdict::Pass);
    }
    // Distinct codes in order of first appearance, fatal ones first, with their counts.
    let mut codes: Vec<(&Xid, usize)> = Vec::new();
    for x in xids {
        match codes.iter_mut().find(|(c, _)| c.code == x.code) {
            Some((_, n)) => *n += 1,
            None => codes.push((x, 1)),
        }
    }
    codes.sort_by_key(|(x, _)| !xid::is_fatal(x.code));
    let fatal = codes.iter().any(|(x, _)| xid::is_fatal(x.code));
    let words: Vec<String> = codes
        .iter()
        .map(|(x, n)| {
            let times = if *n > 1 { format!(" ×{n}") } else { String::new() };
            let not = if xid::is_fatal(x.code) { "" } else { ", not fatal" };
            format!("{}{times}{not}", xid::describe(x))
        })
        .collect();
    Row::new(
        "xid",
        gpu,
        format!("{}{place}", words.join("; ")),
        expected,
        if fatal { Verdict::Fail } else { Verdict::Pass },
    )
}

/// A burn's row (`gemm`, `memory`, `allreduce`) against a fraction of the
/// expected figure.
pub(crate) fn burn(
    check: &'static str,
    gpu: Option<u32>,
    measured: &Result<f64, String>,
    unit: &str,
    spec: Option<f64>,
    of: &str,
) -> Row {
    let value = match measured {
        Ok(v) => format!("{v:.0} {unit}"),
        Err(e) => {
            return Row::new(
                check,
                gpu,
                format!("failed: {e}"),
                spec.map(|s| expected_burn(s, unit, of)).unwrap_or_default(),
                Verdict::Fail,
            );
        }
    };
    match (measured, spec) {
        (Ok(v), Some(s)) => {
            let verdict = if *v >= MIN_FRACTION * s { Verdict::Pass } else { Verdict::Fail };
            Row::new(check, gpu, value, expected_burn(s, unit, of), verdict)
        }
        _ => Row::new(check, gpu, value, "", Verdict::Info),
    }
}

fn expected_burn(spec: f64, unit: &str, of: &str) -> String {
    // Rounded up, so a value shown rounded below it also fails against it.
    format!("at least {:.0} {unit} (half of {of}{spec:.0})", (MIN_FRACTION * spec).ceil())
}

/// `efa`: the EFA devices against the instance type's.
pub(crate) fn efa(found: &Result<u32, String>, expect: Option<&GpuExpect>) -> Row {
    let wanted = expect.and_then(|e| e.efa_devices);
    let expected = wanted.map(|w| plural(u64::from(w), "EFA device", "EFA devices")).unwrap_or_default();
    match (found, wanted) {
        (Ok(n), Some(w)) => Row::new(
            "efa",
            None,
            plural(u64::from(*n), "EFA device", "EFA devices"),
            expected,
            if *n >= w { Verdict::Pass } else { Verdict::Fail },
        ),
        (Ok(n), None) => Row::new("efa", None, plural(u64::from(*n), "EFA device", "EFA devices"), "", Verdict::Info),
        (Err(e), Some(w)) if w > 0 => Row::new("efa", None, e.clone(), expected, Verdict::Fail),
        (Err(e), _) => Row::new("efa", None, e.clone(), expected, Verdict::Info),
    }
}

/// `dcgm`: one node row when nothing failed (or DCGM is not there), one
/// row per failed test otherwise.
pub(crate) fn dcgm(level: u8, outcome: Option<&Result<DcgmOutcome, String>>) -> Vec<Row> {
    let expected = format!("dcgmi diag -r {level} passes");
    match outcome {
        None => vec![Row::new("dcgm", None, "DCGM not installed", "", Verdict::Info)],
        // A DCGM that cannot run (no host engine, unreadable output) is not a fault of the GPUs.
        Some(Err(e)) => vec![Row::new("dcgm", None, format!("did not run: {e}"), "", Verdict::Info)],
        Some(Ok(o)) => {
            let failed: Vec<Row> = o
                .failures()
                .map(|r| {
                    let detail = if r.detail.is_empty() { String::new() } else { format!(": {}", r.detail) };
                    Row::new("dcgm", r.gpu, format!("{} failed{detail}", r.test), expected.clone(), Verdict::Fail)
                })
                .collect();
            if !failed.is_empty() {
                return failed;
            }
            let count = |s: &str| o.results.iter().filter(|r| r.status.eq_ignore_ascii_case(s)).count() as u64;
            let mut value = format!("level {}: {} passed", o.level, count("pass"));
            for (status, word) in [("warn", "warned"), ("skip", "skipped")] {
                let n = count(status);
                if n > 0 {
                    value.push_str(&format!(", {n} {word}"));
                }
            }
            vec![Row::new("dcgm", None, value, expected, Verdict::Pass)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_a_word_of_nvmls_name() {
        for (name, word) in [
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H200", "H200"),
            ("NVIDIA A100-SXM4-40GB", "A100"),
            ("NVIDIA A10G", "A10G"),
            ("NVIDIA L4", "L4"),
            ("Tesla T4", "T4"),
            ("NVIDIA B200", "b200"),
        ] {
            assert!(has_word(name, word), "{word} in {name}");
        }
        for (name, word) in [("NVIDIA L40S", "L4"), ("NVIDIA GH200 480GB", "H200"), ("NVIDIA A100-SXM4-40GB", "A10")] {
            assert!(!has_word(name, word), "{word} in {name}");
        }
    }
}
