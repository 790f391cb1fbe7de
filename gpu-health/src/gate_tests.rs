//! The gate on fixtures of real nodes: healthy ones pass, each fault fails
//! with its numbers, the budget holds.

use std::time::{Duration, Instant};

use node_contract::gpu::{CheckResult, GpuExpect, GpuLevel, GpuReport, Verdict};

use crate::facts::{DcgmOutcome, DcgmResult, RemapFacts, throttle};
use crate::fixture::{Fixture, FixtureGpus, LoadFacts};

const MINUTE: Duration = Duration::from_secs(60);

fn run_with(f: &Fixture, expect: Option<&GpuExpect>, level: GpuLevel, budget: Duration) -> GpuReport {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpus.json");
    f.write(&path).unwrap();
    super::gate(&FixtureGpus::new(&path), "i-0abc", "10.0.1.5", "p5.48xlarge", expect, level, budget)
}

fn run(f: &Fixture, model: &str) -> GpuReport {
    run_with(f, Some(&Fixture::expect(model, f.devices.len() as u32)), GpuLevel::Quick, MINUTE)
}

fn row<'a>(r: &'a GpuReport, check: &str, gpu: Option<u32>) -> &'a CheckResult {
    r.checks
        .iter()
        .find(|c| c.check == check && c.gpu == gpu)
        .unwrap_or_else(|| panic!("no {check} row for {gpu:?}: {r:#?}"))
}

/// The only failures are `want` (check, GPU), and the report fails.
fn fails_only(r: &GpuReport, want: &[(&str, Option<u32>)]) {
    let failed: Vec<(&str, Option<u32>)> = r.failures().map(|c| (c.check.as_str(), c.gpu)).collect();
    assert_eq!(failed, want, "{}", r.failure_line());
    assert!(!r.passed());
}

fn order(r: &GpuReport) -> Vec<&str> {
    let mut names: Vec<&str> = r.checks.iter().map(|c| c.check.as_str()).collect();
    names.dedup();
    names
}

#[test]
fn healthy_nodes_of_each_model_pass_every_check_in_order() {
    for model in ["H100", "H200", "A100"] {
        let r = run(&Fixture::healthy(model, 8), model);
        assert!(r.passed(), "{model}: {}", r.failure_line());
        assert!(!r.timed_out);
        assert_eq!(
            order(&r),
            [
                "driver",
                "count",
                "model",
                "ecc",
                "remap",
                "throttle",
                "pcie",
                "nvlink",
                "xid",
                "gemm",
                "memory",
                "allreduce",
                "efa",
                "dcgm"
            ]
        );
        // 3 node checks, 8 GPUs × 8 per-GPU checks, all-reduce, EFA, DCGM.
        assert_eq!(r.checks.len(), 3 + 8 * 8 + 3, "{model}");
        assert_eq!(row(&r, "count", None).value, "8 GPUs");
        assert_eq!(row(&r, "dcgm", None).verdict, Verdict::Info);
        assert_eq!(
            (r.instance_id.as_str(), r.private_ip.as_str(), r.instance_type.as_str()),
            ("i-0abc", "10.0.1.5", "p5.48xlarge")
        );
    }
    let r = run(&Fixture::healthy("H200", 8), "H200");
    let gemm = row(&r, "gemm", Some(0));
    assert_eq!(
        (gemm.value.as_str(), gemm.expected.as_str()),
        ("781 TFLOP/s", "at least 495 TFLOP/s (half of the H200's 989)")
    );
    let memory = row(&r, "memory", Some(7));
    assert_eq!(
        (memory.value.as_str(), memory.expected.as_str()),
        ("4148 GB/s", "at least 2400 GB/s (half of the H200's 4800)")
    );
    assert_eq!(row(&r, "model", None).value, "NVIDIA H200 ×8");
    assert_eq!(row(&r, "nvlink", Some(3)).value, "18 of 18 active");
    assert_eq!(row(&r, "efa", None).value, "32 EFA devices");
    assert_eq!(row(&r, "allreduce", None).value, "472 GB/s bus bandwidth");
    // At rest: idle is no fault, and the link's generation waits for load (none here: the burns answer at once).
    assert_eq!(row(&r, "throttle", Some(2)).value, "idle (before the burns)");
    assert_eq!(row(&r, "pcie", Some(2)).value, "gen1 x16 at idle; generation not judged at idle");
}

#[test]
fn a_single_gpu_node_has_no_all_reduce_and_no_nvlink() {
    let r = run(&Fixture::healthy("H100", 1), "H100");
    assert!(r.passed(), "{}", r.failure_line());
    assert!(r.checks.iter().all(|c| c.check != "allreduce"));
    assert_eq!(row(&r, "nvlink", Some(0)).verdict, Verdict::Info);
}

#[test]
fn xid_79_fails_naming_the_gpu_and_its_meaning() {
    let mut f = Fixture::healthy("H100", 8);
    // GPU 3 of a p5 is at bus 0x86.
    f.kernel_log.push(
        "[ 4821.093317] NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus.".into(),
    );
    f.kernel_log.push("[ 4821.100452] NVRM: Xid (PCI:0000:53:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address".into());
    let r = run(&f, "H100");
    fails_only(&r, &[("xid", Some(3))]);
    assert_eq!(row(&r, "xid", Some(3)).value, "XID 79 (GPU has fallen off the bus)");
    assert_eq!(r.failure_line(), "xid on GPU 3: XID 79 (GPU has fallen off the bus), expected no fatal XID since boot");
    // An application's XID is named but is no fault.
    assert_eq!(row(&r, "xid", Some(0)).value, "XID 13 (graphics engine exception), not fatal");
    assert_eq!(row(&r, "xid", Some(0)).verdict, Verdict::Pass);
}

#[test]
fn a_gpu_gone_from_the_bus_fails_the_count_and_its_xid_is_a_node_row() {
    let mut f = Fixture::healthy("H100", 8);
    f.devices.remove(3);
    f.gemm_tflops.remove(3);
    f.memory_gbps.remove(3);
    for (i, d) in f.devices.iter_mut().enumerate() {
        d.index = i as u32;
    }
    f.kernel_log.push(
        "[ 4821.093317] NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus.".into(),
    );
    f.kernel_log.push(
        "[ 4821.093320] NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus.".into(),
    );
    let r = run_with(&f, Some(&Fixture::expect("H100", 8)), GpuLevel::Quick, MINUTE);
    fails_only(&r, &[("count", None), ("xid", None)]);
    assert_eq!((row(&r, "count", None).value.as_str(), row(&r, "count", None).expected.as_str()), ("7 GPUs", "8 GPUs"));
    assert_eq!(
        row(&r, "xid", None).value,
        "XID 79 (GPU has fallen off the bus) ×2 at PCI 0000:86:00, a GPU NVML does not list"
    );
}

#[test]
fn an_uncorrectable_ecc_error_fails_with_its_count() {
    let mut f = Fixture::healthy("H200", 8);
    f.devices[1].ecc_volatile_uncorrected = Some(2);
    f.devices[1].ecc_volatile_corrected = Some(17);
    let r = run(&f, "H200");
    fails_only(&r, &[("ecc", Some(1))]);
    assert_eq!(
        r.failure_line(),
        "ecc on GPU 1: 2 uncorrectable errors since the driver loaded (17 corrected), expected 0 uncorrectable"
    );
}

#[test]
fn a_pending_or_failed_row_remap_fails_and_so_do_pending_page_retirements_before_ampere() {
    let mut f = Fixture::healthy("A100", 8);
    f.devices[5].remapped_rows = Some(RemapFacts { correctable: 0, uncorrectable: 1, pending: true, failed: false });
    f.devices[6].remapped_rows = Some(RemapFacts { correctable: 3, uncorrectable: 0, pending: false, failed: false });
    f.devices[7].remapped_rows = Some(RemapFacts { correctable: 0, uncorrectable: 8, pending: false, failed: true });
    let r = run(&f, "A100");
    fails_only(&r, &[("remap", Some(5)), ("remap", Some(7))]);
    assert_eq!(row(&r, "remap", Some(5)).value, "1 row remapped (1 uncorrectable), a remap pending a GPU reset");
    assert_eq!(row(&r, "remap", Some(6)).value, "3 rows remapped (0 uncorrectable)");
    assert_eq!(row(&r, "remap", Some(7)).value, "8 rows remapped (8 uncorrectable), a remap failed (no spare row)");

    // A V100 (p3): no row remapper; page retirement instead.
    let mut f = Fixture::healthy("A100", 2);
    for d in &mut f.devices {
        d.name = "Tesla V100-SXM2-16GB".into();
        d.remapped_rows = None;
        d.retired_pages_pending = Some(false);
    }
    f.devices[1].retired_pages_pending = Some(true);
    let r = run_with(&f, None, GpuLevel::Quick, MINUTE);
    fails_only(&r, &[("remap", Some(1))]);
    assert_eq!(row(&r, "remap", Some(1)).value, "pages pending retirement (needs a driver reload)");
}

#[test]
fn hardware_slowdown_fails_but_the_power_cap_and_idle_do_not() {
    let mut f = Fixture::healthy("H100", 8);
    f.devices[2].throttle_reasons = Some(throttle::SW_POWER_CAP | throttle::HW_SLOWDOWN);
    f.devices[4].throttle_reasons = Some(throttle::HW_SLOWDOWN | throttle::HW_POWER_BRAKE_SLOWDOWN);
    f.devices[5].throttle_reasons = Some(throttle::SW_THERMAL_SLOWDOWN);
    f.devices[6].throttle_reasons = Some(throttle::SW_POWER_CAP);
    f.devices[7].throttle_reasons = Some(0);
    // Not idle, so their links run at full speed (else `pcie` fails them too).
    for i in [2, 4, 5, 6, 7] {
        f.devices[i].pcie_gen_current = Some(5);
    }
    let r = run(&f, "H100");
    fails_only(&r, &[("throttle", Some(2)), ("throttle", Some(4)), ("throttle", Some(5))]);
    assert_eq!(row(&r, "throttle", Some(2)).value, "power cap, HW slowdown (before the burns)");
    assert_eq!(row(&r, "throttle", Some(4)).value, "HW slowdown, HW power brake (before the burns)");
    assert_eq!(row(&r, "throttle", Some(6)).value, "power cap (before the burns)");
    assert_eq!(row(&r, "throttle", Some(7)).value, "none (before the burns)");
}

#[test]
fn a_link_at_x8_fails_at_rest_and_a_slow_generation_fails_while_busy() {
    let mut f = Fixture::healthy("H100", 8);
    f.devices[6].pcie_width_current = Some(8);
    // Busy (no idle reason) yet at gen 4 of 5: fails without waiting for load.
    f.devices[1].throttle_reasons = Some(throttle::SW_POWER_CAP);
    f.devices[1].pcie_gen_current = Some(4);
    // A gen4 slot: NVML's maximum is the lower of GPU and slot, so gen4 is all there is.
    f.devices[2].throttle_reasons = Some(0);
    f.devices[2].pcie_gen_current = Some(4);
    f.devices[2].pcie_gen_max = Some(4);
    let r = run(&f, "H100");
    fails_only(&r, &[("pcie", Some(1)), ("pcie", Some(6))]);
    let x8 = row(&r, "pcie", Some(6));
    assert_eq!((x8.value.as_str(), x8.expected.as_str()), ("gen1 x8 at idle", "gen5 x16 (the link's maximum)"));
    assert_eq!(row(&r, "pcie", Some(1)).value, "gen4 x16");
    assert_eq!(row(&r, "pcie", Some(2)).value, "gen4 x16");
}

#[test]
fn under_load_the_generation_is_judged_and_a_thermal_slowdown_shows() {
    let mut f = Fixture::healthy("H100", 8);
    f.burns_take_their_time = true;
    f.under_load.insert(3, LoadFacts { pcie_gen_current: Some(3), throttle_reasons: Some(throttle::SW_POWER_CAP) });
    f.under_load.insert(
        5,
        LoadFacts {
            pcie_gen_current: Some(5),
            throttle_reasons: Some(throttle::HW_SLOWDOWN | throttle::HW_THERMAL_SLOWDOWN),
        },
    );
    // GPU 4's burn has not started when the gate reads: it still rests, and is not judged.
    f.under_load.insert(4, LoadFacts { pcie_gen_current: Some(1), throttle_reasons: Some(throttle::GPU_IDLE) });
    let r = run(&f, "H100");
    fails_only(&r, &[("throttle", Some(5)), ("pcie", Some(3))]);
    assert_eq!(row(&r, "pcie", Some(4)).value, "gen1 x16 at idle; generation not judged at idle");
    assert_eq!(row(&r, "pcie", Some(3)).value, "gen3 x16 under load");
    assert_eq!(row(&r, "pcie", Some(0)).value, "gen5 x16 under load");
    assert_eq!(row(&r, "pcie", Some(0)).verdict, Verdict::Pass);
    assert_eq!(row(&r, "throttle", Some(5)).value, "HW slowdown, HW thermal slowdown (during the GEMM burn)");
    // The rows keep their place in the order.
    assert_eq!(order(&r)[5..7], ["throttle", "pcie"]);
    // Quick burns: 2 s of GEMM, 1 s of memory, 1 s of all-reduce.
    assert!(r.millis >= 4_000 && r.millis < 8_000, "{} ms", r.millis);
}

#[test]
fn an_nvlink_down_fails_naming_the_link() {
    let mut f = Fixture::healthy("H200", 8);
    f.devices[2].nvlink_active.as_mut().unwrap()[7] = false;
    let r = run(&f, "H200");
    fails_only(&r, &[("nvlink", Some(2))]);
    assert_eq!(r.failure_line(), "nvlink on GPU 2: 17 of 18 active (link 7 down), expected 18 of 18 active");
}

#[test]
fn seven_gpus_of_eight_fail_the_count() {
    let mut f = Fixture::healthy("H100", 7);
    f.efa_devices = 32;
    let r = run_with(&f, Some(&Fixture::expect("H100", 8)), GpuLevel::Quick, MINUTE);
    fails_only(&r, &[("count", None)]);
    assert_eq!(r.failure_line(), "count: 7 GPUs, expected 8 GPUs");
}

#[test]
fn the_wrong_model_fails() {
    let r = run_with(&Fixture::healthy("H100", 8), Some(&Fixture::expect("H200", 8)), GpuLevel::Quick, MINUTE);
    // The H100's figures reach half of the H200's too (2987 GB/s of 4800): only the model fails.
    fails_only(&r, &[("model", None)]);
    assert_eq!(r.failure_line(), "model: NVIDIA H100 80GB HBM3 ×8, expected H200 on every GPU");
}

#[test]
fn slow_burns_fail_with_their_figures() {
    let mut f = Fixture::healthy("H100", 8);
    // A GPU held at half its clocks; a GPU whose memory copy crawls; NVLink lost, the all-reduce on PCIe.
    f.gemm_tflops[4] = 312.6;
    f.memory_gbps[6] = 1100.0;
    f.allreduce_busbw_gbps = Some(38.4);
    let r = run(&f, "H100");
    fails_only(&r, &[("gemm", Some(4)), ("memory", Some(6)), ("allreduce", None)]);
    assert_eq!(
        r.failure_line(),
        "gemm on GPU 4: 313 TFLOP/s, expected at least 495 TFLOP/s (half of the H100's 989); memory on GPU 6: 1100 GB/s, expected at least 1675 GB/s (half of the H100's 3350); allreduce: 38 GB/s bus bandwidth, expected at least 225 GB/s bus bandwidth (half of this instance type's 450)"
    );
}

#[test]
fn a_burn_that_fails_is_a_failed_check_with_the_ports_words() {
    let mut f = Fixture::healthy("H100", 8);
    f.gemm_tflops.truncate(7);
    f.allreduce_busbw_gbps = None;
    let r = run(&f, "H100");
    fails_only(&r, &[("gemm", Some(7)), ("allreduce", None)]);
    assert_eq!(row(&r, "gemm", Some(7)).value, "failed: the GEMM burn on GPU 7: the fixture has no result for it");
}

#[test]
fn a_missing_efa_device_fails() {
    let mut f = Fixture::healthy("H100", 8);
    f.efa_devices = 31;
    let r = run(&f, "H100");
    fails_only(&r, &[("efa", None)]);
    assert_eq!(r.failure_line(), "efa: 31 EFA devices, expected 32 EFA devices");
}

#[test]
fn without_a_driver_the_gate_fails_at_once_and_checks_what_needs_no_gpu() {
    let mut f = Fixture::healthy("H100", 8);
    f.driver_error = Some("NVML: the NVIDIA driver is not loaded (libnvidia-ml.so.1 not found)".into());
    let r = run(&f, "H100");
    fails_only(&r, &[("driver", None), ("count", None), ("model", None)]);
    assert_eq!(order(&r), ["driver", "count", "model", "xid", "efa"]);
    assert_eq!(row(&r, "driver", None).value, "NVML: the NVIDIA driver is not loaded (libnvidia-ml.so.1 not found)");
}

#[test]
fn without_expectations_figures_are_reported_without_a_verdict() {
    let r = run_with(&Fixture::healthy("H100", 8), None, GpuLevel::Quick, MINUTE);
    assert!(r.passed(), "{}", r.failure_line());
    for check in ["count", "model", "allreduce", "efa"] {
        let c = row(&r, check, None);
        assert_eq!((c.verdict, c.expected.as_str()), (Verdict::Info, ""), "{check}");
    }
    assert_eq!(row(&r, "gemm", Some(0)).verdict, Verdict::Info);
    assert_eq!(row(&r, "gemm", Some(0)).value, "718 TFLOP/s");
}

#[test]
fn dcgm_failures_fail_per_gpu_and_a_dcgm_that_cannot_run_is_only_noted() {
    let mut f = Fixture::healthy("H100", 8);
    f.dcgm = Some(Ok(DcgmOutcome {
        level: 1,
        results: vec![
            DcgmResult { test: "software".into(), gpu: None, status: "Pass".into(), detail: String::new() },
            DcgmResult { test: "memory".into(), gpu: Some(0), status: "Pass".into(), detail: String::new() },
            DcgmResult {
                test: "memory".into(),
                gpu: Some(6),
                status: "Fail".into(),
                detail: "Found 2 uncorrectable ECC errors (DBE) on GPU 6".into(),
            },
        ],
    }));
    let r = run(&f, "H100");
    fails_only(&r, &[("dcgm", Some(6))]);
    assert_eq!(
        r.failure_line(),
        "dcgm on GPU 6: memory failed: Found 2 uncorrectable ECC errors (DBE) on GPU 6, expected dcgmi diag -r 1 passes"
    );

    f.dcgm.as_mut().unwrap().as_mut().unwrap().results.pop();
    let r = run(&f, "H100");
    assert_eq!(row(&r, "dcgm", None).value, "level 1: 2 passed");
    assert!(r.passed());

    f.dcgm =
        Some(Err("dcgmi diag -r 1: Error: unable to establish a connection to the specified host: localhost".into()));
    let r = run(&f, "H100");
    assert!(r.passed());
    assert!(row(&r, "dcgm", None).value.starts_with("did not run: dcgmi diag -r 1"));
}

#[test]
fn burns_that_take_their_time_end_the_gate_timed_out_within_its_budget() {
    let mut f = Fixture::healthy("H100", 8);
    f.burns_take_their_time = true;
    let budget = Duration::from_secs(6);
    let start = Instant::now();
    let r = run_with(&f, Some(&Fixture::expect("H100", 8)), GpuLevel::Quick, budget);
    let took = start.elapsed();
    assert!(r.timed_out);
    assert!(!r.passed());
    // 2 s of GEMM; the memory burn shortened to fit its setup allowance; no room for the all-reduce.
    assert_eq!(order(&r).last(), Some(&"memory"));
    assert!(took <= budget + Duration::from_millis(500), "{took:?}");
    assert!(r.millis <= 6_500, "{} ms", r.millis);
    assert!(r.failure_line().starts_with("did not finish within its time budget"), "{}", r.failure_line());

    // A budget without room for any burn stops after the kernel log.
    let r = run_with(&f, Some(&Fixture::expect("H100", 8)), GpuLevel::Quick, Duration::from_secs(2));
    assert!(r.timed_out);
    assert_eq!(order(&r).last(), Some(&"xid"));
    assert!(r.millis < 1_000, "{} ms", r.millis);
}

#[test]
fn levels_set_the_burns_and_dcgm() {
    assert_eq!(super::burn_ms(GpuLevel::Quick), (2_000, 1_000, 1_000));
    assert_eq!(super::dcgm_level(GpuLevel::Quick), 1);
    assert_eq!(super::dcgm_level(GpuLevel::Thorough), 3);
    // Quick's burns and setup fit its default budget with most of it left for DCGM's level 1.
    let (g, m, a) = super::burn_ms(GpuLevel::Quick);
    let burns = Duration::from_millis(g + m + a) + 3 * super::BURN_SETUP;
    assert!(burns * 3 < Duration::from_secs(u64::from(GpuLevel::Quick.default_timeout_seconds())));
}
