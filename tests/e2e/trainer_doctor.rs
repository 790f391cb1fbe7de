//! `trainer doctor` across hosts with a real sshd each (see `e2e::sshd`):
//! a healthy cluster passes; a broken one fails naming each broken host and
//! what to fix.

use e2e::sshd::{SshCluster, trainer_bin};
use e2e::{Error, Result, TestResult};
use std::process::{Output, Stdio};

fn doctor(cluster: &SshCluster) -> Result<Output> {
    let mut command = cluster.master_command(trainer_bin()?);
    command.args(["doctor", "--connect-timeout", "3"]).stdin(Stdio::null());
    command.output().map_err(Error::io("running trainer doctor", "trainer"))
}

#[test]
fn doctor_passes_a_healthy_cluster_and_names_what_is_broken() -> TestResult {
    let mut cluster = SshCluster::start(&[1, 1, 1])?;
    let out = doctor(&cluster)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}");
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for host in ["deeplearning-worker1", "deeplearning-worker2", "deeplearning-worker3"] {
        let row = stdout.lines().find(|l| l.starts_with(host)).unwrap_or_default();
        // SSH ok, generation 1, no GPU driver here: 0 GPUs, so no NCCL check, EFS shared.
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.get(1..6), Some(&["ok", "1", "0", "-", "shared"][..]), "{stdout}");
    }
    assert!(stdout.contains("all 3 hosts are ready"), "{stdout}");
    // Each host's NCCL/EFA environment, from the profile its agent wrote
    // (the address is on its namespace's eth0; no EFA here).
    for host in ["deeplearning-worker1", "deeplearning-worker2", "deeplearning-worker3"] {
        assert!(stdout.contains(&format!("\n  {host}: NCCL_SOCKET_IFNAME==eth0\n")), "{stdout}");
    }

    // Break three hosts four ways: worker2's agent is behind, its EFS is a
    // directory of its own and its driver lists a GPU, but this machine has
    // no CUDA libraries; worker3 is down.
    let root = cluster.hosts[1].root.clone();
    // The state file through the contract's definition (path, format), as the trainer reads it.
    let state_path = node_contract::files::under(&root, node_contract::state::STATE_PATH);
    let text = std::fs::read_to_string(&state_path).map_err(Error::io("reading", &state_path))?;
    let mut state = node_contract::state::State::parse(&text).map_err(|e| Error::Setup(e.to_string()))?;
    state.generation = 7;
    let text = serde_json::to_string_pretty(&state).map_err(|e| Error::Setup(e.to_string()))?;
    std::fs::write(&state_path, text + "\n").map_err(Error::io("writing", &state_path))?;
    let profile = root.join("etc/profile.d/deeplearning.sh");
    let text = std::fs::read_to_string(&profile).map_err(Error::io("reading", &profile))?;
    let private = root.join("private-efs");
    let text = text.replace(&*cluster.efs().to_string_lossy(), &private.to_string_lossy());
    std::fs::write(&profile, text).map_err(Error::io("writing", &profile))?;
    let gpu = root.join("proc/driver/nvidia/gpus/0000:00:1e.0");
    std::fs::create_dir_all(&gpu).map_err(Error::io("creating", &gpu))?;
    // Its agent's GPU gate found XID 79 at boot (the report file it leaves).
    let mut broken = gpu_health::Fixture::healthy("H100", 1);
    broken.kernel_log.push("NVRM: Xid (PCI:0000:53:00): 79, pid=4120, name=python, GPU has fallen off the bus.".into());
    let fixture = root.join("gpus.json");
    broken.write(&fixture).map_err(Error::io("writing", &fixture))?;
    let report = gpu_health::gate(
        &gpu_health::FixtureGpus::new(&fixture),
        "i-2",
        "10.0.0.2",
        "p5.4xlarge",
        None,
        node_contract::gpu::GpuLevel::Quick,
        std::time::Duration::from_secs(60),
    );
    let file = node_contract::gpu::GpuReportFile {
        version: node_contract::gpu::GPU_REPORT_FILE_VERSION,
        decided_unix_ms: 1,
        level: node_contract::gpu::GpuLevel::Quick,
        action: node_contract::gpu::GpuAction::Warn,
        expect: None,
        report,
    };
    let path = node_contract::files::under(&root, node_contract::gpu::GPU_CHECK_PATH);
    std::fs::create_dir_all(path.parent().expect("a parent")).map_err(Error::io("creating", &path))?;
    std::fs::write(&path, serde_json::to_string(&file).expect("JSON")).map_err(Error::io("writing", &path))?;
    cluster.stop_sshd(2);

    let out = doctor(&cluster)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for needle in [
        "- deeplearning-worker2: its agent applied manifest generation 7, the master's 1",
        "- deeplearning-worker2: a file deeplearning-worker2 wrote to its EFS_MOUNT is not in the master's",
        "- deeplearning-worker2: it has GPUs, but --device cuda: no CUDA driver (libcuda.so.1) found on this host",
        "- deeplearning-worker3: deeplearning-worker3 is unreachable over SSH",
        "- deeplearning-worker2: its GPU check failed: xid on GPU 0: XID 79 (GPU has fallen off the bus)",
        "GPU checks (each agent's boot gate):",
        "5 problem(s):",
    ] {
        assert!(stdout.contains(needle), "{needle:?} in:\n{stdout}");
    }
    let master = stdout.lines().find(|l| l.starts_with("deeplearning-worker1")).unwrap_or_default();
    assert!(!master.contains("FAIL"), "{stdout}");
    Ok(())
}
