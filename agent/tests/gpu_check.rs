//! `agent gpu-check`: the GPU gate's checks on this node, by hand, with the
//! GPUs read from a fixture (this machine has none): a healthy node passes
//! (exit 0, one row per check); a node whose type promises more than its
//! GPUs give (an expected GEMM figure above the GPU's) fails with exit 1,
//! naming the check and the numbers; without a driver the driver check
//! fails, never a panic; and the idle guard's reading is printed.

use std::process::Command;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .env_remove("DEEPLEARNING_TEST_GPU_FIXTURE")
        .env("NO_COLOR", "1")
        .output()
        .expect("agent runs")
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_healthy_node_passes_and_a_promise_above_its_gpus_fails() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("gpus.json");
    gpu_health::Fixture::healthy("H200", 8).write(&fixture).unwrap();
    let root = dir.path().to_str().unwrap();
    let f = fixture.to_str().unwrap();
    let expect = serde_json::to_string(&gpu_health::Fixture::expect("H200", 8)).unwrap();
    let out = agent(&["gpu-check", "--root", root, "--gpu-fixture", f, "--expect", &expect]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("gpu check passed in"), "{t}");
    for check in ["driver", "count", "model", "ecc", "xid", "gemm", "memory", "allreduce"] {
        assert!(t.lines().any(|l| l.split_whitespace().nth(3) == Some(check)), "no {check} row:\n{t}");
    }
    // A figure above the GPU's: the GEMM check fails with its numbers.
    let mut high = gpu_health::Fixture::expect("H200", 8);
    high.bf16_tflops = Some(5000.0);
    let high = serde_json::to_string(&high).unwrap();
    let out = agent(&["gpu-check", "--root", root, "--gpu-fixture", f, "--expect", &high]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("gpu check FAILED"), "{t}");
    assert!(t.contains("the GPU check failed: gemm on GPU 0:"), "{t}");
    // An --expect that does not parse is a usage error (2), not a failed check (1).
    let bad = agent(&["gpu-check", "--root", root, "--gpu-fixture", f, "--expect", "{\"gpus\": \"eight\"}"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("--expect is not a GpuExpect"), "{}", text(&bad));
}

#[test]
fn without_a_driver_the_driver_check_fails_and_the_idle_reading_says_none() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let out = agent(&["gpu-check", "--root", root, "--timeout", "20"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("the GPU check failed: driver"), "{t}");
    let out = agent(&["gpu-check", "--root", root, "--idle-reading"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("idle guard's GPU reading: none"), "{}", text(&out));
}
