//! NVIDIA XID events: the NVIDIA driver's (NVRM's) error reports in the
//! kernel log, their meanings, and which of them mean the GPU cannot be
//! trusted with a run.
//!
//! The line's form has changed over the drivers; all of these are real:
//!
//! ```text
//! NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
//! NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
//! NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
//! NVRM: Xid (PCI:0000:10:1c): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No
//! NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff
//! ```
//!
//! with whatever the log reader puts in front (`[  269.517039] `, a
//! journal's `kernel: `). NVSwitch errors (`SXid`) are not GPU XIDs and
//! are not parsed.
//!
//! Meanings and the immediate actions behind [`is_fatal`] follow NVIDIA's
//! XID catalog (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>)
//! and the A100 memory error management guide
//! (<https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/>).

/// One XID line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Xid {
    /// The XID number.
    pub code: u32,
    /// The GPU's PCI address as the line gives it ("0000:3b:00").
    pub pci: String,
    /// The driver's words after the number, without `pid=` and `name=`
    /// ("GPU has fallen off the bus").
    pub text: String,
}

/// Parses one kernel log line; `None` when it is not an NVRM XID line.
pub(crate) fn parse(line: &str) -> Option<Xid> {
    const MARK: &str = "NVRM: Xid (";
    let start = line.find(MARK)? + MARK.len();
    let rest = &line[start..];
    let close = rest.find(')')?;
    let inside = rest[..close].trim();
    let pci = inside.strip_prefix("PCI:").unwrap_or(inside).trim().to_string();
    let after = rest[close + 1..].trim_start().strip_prefix(':')?.trim_start();
    let digits_end = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
    let code: u32 = after[..digits_end].parse().ok()?;
    let mut tail = after[digits_end..].trim_start();
    tail = tail.strip_prefix(',').unwrap_or(tail).trim_start();
    // Newer drivers put `pid=...,` and `name=...,` before the message.
    for field in ["pid=", "name="] {
        if tail.starts_with(field) {
            tail = match tail.find(", ") {
                Some(comma) => &tail[comma + 2..],
                None => "",
            };
        }
    }
    let text = tail.trim().trim_end_matches('.').to_string();
    Some(Xid { code, pci, text })
}

/// NVIDIA's description of an XID, for the codes a data-centre GPU
/// (Ampere, Hopper, Blackwell) reports; `None` for the others.
pub(crate) fn meaning(code: u32) -> Option<&'static str> {
    Some(match code {
        8 => "GPU stopped processing",
        11 => "invalid or corrupted push buffer stream",
        13 => "graphics engine exception",
        31 => "GPU memory page fault",
        32 => "invalid or corrupted push buffer stream",
        38 => "driver firmware error",
        43 => "GPU stopped processing",
        45 => "preemptive cleanup, due to previous errors",
        48 => "double bit ECC error (DBE)",
        56 => "display engine error",
        57 => "error programming video memory interface",
        58 => "unstable video memory interface detected",
        61 => "internal micro-controller breakpoint/warning",
        62 => "internal micro-controller halt",
        63 => "row remapping (or page retirement) recording event",
        64 => "row remapping (or page retirement) failure",
        68 => "NVDEC0 exception",
        69 => "graphics engine class error",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        109 => "context switch timeout error",
        119 => "GSP RPC timeout",
        120 => "GSP error",
        121 => "C2C link corrected error",
        140 => "unrecovered ECC error",
        143 => "GPU initialization failure",
        154 => "GPU recovery action changed",
        _ => return None,
    })
}

/// The XIDs after which this GPU cannot be trusted with a run: the node
/// leaves (or does not join), and its GPU needs a reset, a reboot or
/// service. The others are either an application's own error (13, 31, 43,
/// 45, 68, 69, 109: NVIDIA's action is to restart or fix the application)
/// or information (63: a row was marked for remapping, which the next
/// reset applies, and which the gate's `remap` check reads from NVML;
/// 92: corrected single-bit errors, data intact; 61, 121, 154: warnings).
///
/// 94 (contained ECC error) is fatal here although NVIDIA's immediate
/// action is only to restart the application: the error killed the rank
/// that touched the memory, the GPU's memory has produced an uncorrectable
/// error, and the gate already fails any volatile uncorrectable ECC count.
/// A node replaced costs minutes; a second ECC error in the restarted run
/// costs its progress since the last checkpoint.
pub(crate) fn is_fatal(code: u32) -> bool {
    matches!(code, 48 | 62 | 64 | 74 | 79 | 94 | 95 | 119 | 120 | 140 | 143)
}

/// The (domain, bus, device) of a PCI address in either form: the kernel
/// log's "0000:3b:00" or NVML's "00000000:3B:00.0". So a line is matched to
/// the GPU NVML lists at that address.
pub(crate) fn pci_key(address: &str) -> Option<(u32, u32, u32)> {
    let address = address.trim();
    let address = address.strip_prefix("PCI:").unwrap_or(address);
    let address = address.split('.').next()?;
    let mut parts = address.split(':');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let device = u32::from_str_radix(parts.next()?, 16).ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((domain, bus, device))
}

/// "XID 79 (GPU has fallen off the bus)", with the driver's words when the
/// code is not in [`meaning`].
pub(crate) fn describe(x: &Xid) -> String {
    match meaning(x.code) {
        Some(m) => format!("XID {} ({m})", x.code),
        None if x.text.is_empty() => format!("XID {}", x.code),
        None => format!("XID {} ({})", x.code, x.text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_lines_of_every_form_parse() {
        let cases: [(&str, u32, &str, &str); 9] = [
            (
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
                79,
                "0000:3b:00",
                "GPU has fallen off the bus",
            ),
            // Reported on an RTX 5080 (open-gpu-kernel-modules issue 1151), journal form.
            (
                "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
                79,
                "0000:2b:00",
                "GPU has fallen off the bus",
            ),
            // stas00/ml-engineering's debug guide (an A100 cluster).
            (
                "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
                63,
                "0000:10:1c",
                "Row Remapper: New row marked for remapping, reset gpu to activate",
            ),
            (
                "[ 7164.110922] NVRM: Xid (PCI:0000:10:1c): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No",
                94,
                "0000:10:1c",
                "Contained: SM (0x1). RST: No, D-RST: No",
            ),
            // An old driver: no "PCI:" and no pid.
            (
                "[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff",
                3,
                "0000:01:00",
                "C 00000005 SC 00000007 M 00001ffc Data ffffffff",
            ),
            (
                "NVRM: Xid (PCI:0000:65:00): 92, pid='N/A', High single-bit ECC error rate",
                92,
                "0000:65:00",
                "High single-bit ECC error rate",
            ),
            (
                "NVRM: Xid (PCI:0000:b8:00): 119, pid=2710, name=python, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20808513 0x598).",
                119,
                "0000:b8:00",
                "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20808513 0x598)",
            ),
            (
                "NVRM: Xid (PCI:0000:ca:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
                13,
                "0000:ca:00",
                "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
            ),
            (
                "kernel: NVRM: Xid (PCI:0000:39:00): 48, pid=8812, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
                48,
                "0000:39:00",
                "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0",
            ),
        ];
        for (line, code, pci, text) in cases {
            let x = parse(line).unwrap_or_else(|| panic!("did not parse: {line}"));
            assert_eq!((x.code, x.pci.as_str(), x.text.as_str()), (code, pci, text), "{line}");
        }
    }

    #[test]
    fn other_lines_are_not_xids() {
        for line in [
            "NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
            "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 12 egress non-posted PRIV error",
            "NVRM: Xid (PCI:0000:2b:00): seventy-nine",
            "NVRM: Xid (PCI:0000:2b:00",
            "",
        ] {
            assert_eq!(parse(line), None, "{line}");
        }
    }

    #[test]
    fn fatal_codes_are_the_hardware_ones() {
        for code in [48, 64, 74, 79, 94, 95, 119, 120] {
            assert!(is_fatal(code), "{code}");
            assert!(meaning(code).is_some(), "{code}");
        }
        for code in [13, 31, 43, 45, 63, 92] {
            assert!(!is_fatal(code), "{code}");
        }
        assert_eq!(meaning(79), Some("GPU has fallen off the bus"));
        assert_eq!(meaning(64), Some("row remapping (or page retirement) failure"));
        assert_eq!(meaning(100_000), None);
    }

    #[test]
    fn pci_addresses_match_across_the_log_and_nvml() {
        assert_eq!(pci_key("0000:3b:00"), Some((0, 0x3b, 0)));
        assert_eq!(pci_key("00000000:3B:00.0"), pci_key("0000:3b:00"));
        assert_eq!(pci_key("PCI:0000:10:1c"), Some((0, 0x10, 0x1c)));
        assert_ne!(pci_key("00000000:53:00.0"), pci_key("0000:64:00"));
        assert_eq!(pci_key("garbage"), None);
        assert_eq!(pci_key("0000:zz:00"), None);
    }

    #[test]
    fn a_description_names_the_meaning_or_the_drivers_words() {
        let x = parse("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.").unwrap();
        assert_eq!(describe(&x), "XID 79 (GPU has fallen off the bus)");
        let odd = parse("NVRM: Xid (PCI:0000:3b:00): 999, something new").unwrap();
        assert_eq!(describe(&odd), "XID 999 (something new)");
    }
}
