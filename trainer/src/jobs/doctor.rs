//! `trainer doctor`: checks, on every host in parallel, what a job needs,
//! prints a table and exits 1 naming the fix when anything is wrong.
//!
//! Each host runs `trainer doctor-local` (hidden) over ssh, which reports
//! `key=value` lines: the generation of the manifest its agent applied
//! (`/var/lib/deeplearning/state.json`), its GPUs as the NVIDIA driver lists
//! them (`/proc/driver/nvidia/gpus`; 0 without a driver), whether it can
//! write to its `EFS_MOUNT` (it writes a probe file named after itself),
//! whether `--device cuda` can load NCCL and the CUDA libraries there (on a
//! host with GPUs), and its clock. The master then checks:
//! - SSH: the host answered (batch mode, strict host keys, as `launch`);
//! - generation: the same as the master's agent applied;
//! - NCCL: on a host with GPUs, the driver, cuBLAS, NVRTC and NCCL load
//!   (`-` on a host without GPUs);
//! - EFS: the host's probe file is visible in the master's `EFS_MOUNT`
//!   (written on one host, read on another: the mount is really shared);
//! - clock: the host's time, taken during the ssh call, is within
//!   `--max-skew-ms` of the master's times at the start and end of the call.
//!
//! Below the table, each host's NCCL/EFA environment from its agent's
//! profile (`NCCL_SOCKET_IFNAME`, `FI_PROVIDER`, `FI_EFA_USE_DEVICE_RDMA`:
//! what `trainer launch` gives every rank there), for reading, not checked;
//! then the network gate's last verdict, when the master's agent left one
//! (`node_contract::NETWORK_CHECK_PATH`): every node's measured fraction,
//! and each slow node as a problem while the membership is the one that
//! was measured (a later generation, such as the one that removed a
//! replaced node, makes it history).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::exit::{EXIT_FAILED, EXIT_OK};
use crate::jobs::ssh::{self, SshArgs};
use crate::jobs::{hosts, profile};

/// Where the NVIDIA driver lists GPUs, one directory each.
pub(crate) const NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";

pub(crate) use crate::train::device::gpu_libraries;

/// GPUs the NVIDIA driver lists under `root` (0 without a driver).
pub(crate) fn gpu_count(root: &Path) -> usize {
    std::fs::read_dir(node_contract::files::under(root, NVIDIA_GPUS)).map(|d| d.count()).unwrap_or(0)
}

/// [`gpu_libraries`] on a host with `gpus` GPUs; `None` without GPUs (nothing to check).
pub(crate) fn nccl_check(gpus: usize) -> Option<std::result::Result<(), String>> {
    (gpus > 0).then(gpu_libraries)
}

/// Arguments of `trainer doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Hosts, as for `trainer launch`.
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Check only this host's install, with no SSH and no cluster: the agent
    /// runs, its systemd unit is installed, an ssh client is there. For image
    /// builds; exit 1 when the image would not work.
    #[arg(long)]
    pub local: bool,
    /// Largest clock difference to the master that passes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub max_skew_ms: u64,
    /// Run the GPU checks on every host with GPUs now, at this level
    /// (`quick`: about two seconds of burn a GPU; `thorough`: DCGM's level
    /// 3, about 30 minutes), instead of showing each agent's boot gate.
    /// Not while a job trains: the burns take the GPUs.
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, default_missing_value = "quick", value_parser = ["quick", "thorough"])]
    pub gpus: Option<String>,
    /// Filesystem root the agent's files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
    /// SSH options.
    #[command(flatten)]
    pub ssh: SshArgs,
}

/// Arguments of `trainer doctor-local`.
#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// Names this run's probe directory on EFS.
    #[arg(long)]
    pub probe: String,
    /// This host's name in the master's host list (names the probe file).
    #[arg(long)]
    pub host: String,
    /// Filesystem root the agent's files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
    /// Run the GPU checks now at this level (`trainer doctor --gpus`).
    #[arg(long, value_name = "LEVEL", value_parser = ["quick", "thorough"])]
    pub gpus: Option<String>,
}

fn now_ms() -> i64 {
    node_contract::clock::system() as i64
}

/// The generation in the agent's state file under `root`.
fn generation(root: &Path) -> std::result::Result<u64, String> {
    match crate::agent_state::read(root) {
        Ok(Some(state)) => Ok(state.generation),
        Ok(None) => Err(format!(
            "{}: no such file (the agent has not applied a manifest)",
            node_contract::files::under(root, node_contract::state::STATE_PATH).display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The network gate's last verdict under `root` (the master's): lines to
/// print, and a problem per slow node when the verdict is of `generation`
/// (the master's current one). No file: nothing (the gate is off, or has
/// not decided yet).
fn network_check(root: &Path, generation: Option<u64>) -> (String, Vec<String>) {
    let path = node_contract::files::under(root, node_contract::NETWORK_CHECK_PATH);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (String::new(), Vec::new()),
        Err(e) => return (format!("Network check: cannot read {}: {e}\n", path.display()), Vec::new()),
    };
    let v = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v["version"] == 1 => v,
        _ => return (format!("Network check: {} is not a verdict this trainer reads\n", path.display()), Vec::new()),
    };
    let checked = v["verdict"]["generation"].as_u64();
    let current = checked.is_some() && checked == generation;
    let mut out = format!(
        "Network check of generation {} (action {}){}:\n  {}\n",
        checked.map_or("?".into(), |g| g.to_string()),
        v["action"].as_str().unwrap_or("?"),
        if current { "" } else { ", an earlier membership" },
        v["summary"].as_str().unwrap_or("")
    );
    let mut problems = Vec::new();
    for link in v["verdict"]["links"].as_array().into_iter().flatten().filter(|l| l["slow"] == true) {
        let (alias, ip) = (link["node"]["alias"].as_str().unwrap_or("?"), link["node"]["ip"].as_str().unwrap_or("?"));
        let text = format!(
            "{alias} ({ip}): the network check measured {:.2} Gbit/s, {:.2} of the reference: check its instance \
             type, its placement and its network interface",
            link["gbps"].as_f64().unwrap_or_default(),
            link["fraction"].as_f64().unwrap_or_default()
        );
        if current {
            problems.push(text);
        } else {
            out += &format!("  (then) {text}\n");
        }
    }
    (out, problems)
}

fn probe_dir(efs: &str, probe: &str) -> PathBuf {
    Path::new(efs).join("trainer").join(".doctor").join(probe)
}

/// Reports this host's facts as `key=value` lines.
pub(crate) fn run_local(args: &LocalArgs) -> Result<u8> {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    match generation(&args.root) {
        Ok(g) => line(format!("generation={g}")),
        Err(e) => line(format!("generation_error={e}")),
    }
    let gpus = gpu_count(&args.root);
    line(format!("gpus={gpus}"));
    match nccl_check(gpus) {
        Some(Ok(())) => line("nccl=ok".to_owned()),
        Some(Err(e)) => line(format!("nccl_error={e}")),
        None => {}
    }
    match profile::efs_mount(&args.root) {
        None => line(format!(
            "efs_error=no EFS_MOUNT in {}",
            node_contract::files::under(&args.root, profile::PATH).display()
        )),
        Some(efs) => {
            let dir = probe_dir(&efs, &args.probe);
            let write = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join(&args.host), &args.host));
            match write {
                Ok(()) => line(format!("efs={efs}")),
                Err(e) => line(format!("efs_error=cannot write to {}: {e}", dir.display())),
            }
        }
    }
    if let Ok(vars) = profile::read(&args.root) {
        for (name, value) in vars.into_iter().filter(|(name, _)| profile::fabric(name)) {
            line(format!("fabric={name}={value}"));
        }
    }
    let level = args.gpus.as_deref().and_then(node_contract::gpu::GpuLevel::from_name);
    if let Some(report) = super::doctor_gpu::local_line(&args.root, &args.host, gpus, level) {
        line(report);
    }
    line(format!("time_ms={}", now_ms()));
    Ok(cli_output::print_report(&out, EXIT_OK)?)
}

/// How far `t` (the host's clock) is outside `[t0, t1]` (the master's clock
/// at the start and end of the call): 0 when inside.
fn least_skew(t0: i64, t: i64, t1: i64) -> i64 {
    if t < t0 {
        t - t0
    } else if t > t1 {
        t - t1
    } else {
        0
    }
}

/// One host's row.
struct Row {
    host: String,
    ssh: std::result::Result<(), String>,
    generation: std::result::Result<u64, String>,
    gpus: Option<u64>,
    /// `None` on a host without GPUs (nothing to check).
    nccl: Option<std::result::Result<(), String>>,
    efs: std::result::Result<(), String>,
    /// Least skew to the master, and how long the ssh call took.
    skew_ms: Option<(i64, i64)>,
    /// The NCCL/EFA environment of its profile, `NAME=VALUE`.
    fabric: Vec<String>,
    /// Its GPU report (`--gpus`, or its agent's boot gate).
    gpu: Option<node_contract::gpu::GpuReport>,
}

/// Checks every host and prints the table; 1 when anything fails.
pub(crate) async fn run(args: Args) -> Result<u8> {
    let hosts = hosts::job_hosts(args.hosts.as_deref(), &args.root)?;
    let probe = format!("{}-{}", std::process::id(), now_ms());
    let trainer = args.ssh.remote_trainer()?;
    let permits = args.ssh.permits("trainer doctor")?;
    let mut tasks = Vec::new();
    for host in &hosts {
        let mut argv = vec![
            trainer.clone(),
            "doctor-local".into(),
            "--probe".into(),
            probe.clone(),
            "--host".into(),
            host.name.clone(),
        ];
        if let Some(level) = &args.gpus {
            argv.extend(["--gpus".into(), level.clone()]);
        }
        let remote = ssh::quote(&argv);
        let mut command = tokio::process::Command::new("ssh");
        command.args(args.ssh.args(&host.name, &format!("exec {remote}"))).stdin(Stdio::null()).kill_on_drop(true);
        // The checks' own budget on top, when they run now.
        let checks = args
            .gpus
            .as_deref()
            .and_then(node_contract::gpu::GpuLevel::from_name)
            .map_or(0, |l| u64::from(l.default_timeout_seconds()));
        let timeout = Duration::from_secs(u64::from(args.ssh.connect_timeout) + 20 + checks);
        let permits = permits.clone();
        tasks.push((
            host.name.clone(),
            tokio::spawn(async move {
                let _permit = permits.acquire_owned().await;
                let t0 = now_ms();
                let out = tokio::time::timeout(timeout, command.output()).await;
                (t0, now_ms(), out)
            }),
        ));
    }
    let master_generation = generation(&args.root);
    let master_efs = profile::efs_mount_here(&args.root);
    let mut rows = Vec::new();
    for (host, task) in tasks {
        let (t0, t1, out) =
            task.await.map_err(|e| Error::Spawn { program: "ssh".into(), source: std::io::Error::other(e) })?;
        let mut row = Row {
            host: host.clone(),
            ssh: Ok(()),
            generation: Err("not checked".into()),
            gpus: None,
            nccl: None,
            efs: Err("not checked".into()),
            skew_ms: None,
            fabric: Vec::new(),
            gpu: None,
        };
        let output = match out {
            Err(_) => {
                row.ssh = Err(format!("{host} did not answer within the connect timeout and 20 s"));
                rows.push(row);
                continue;
            }
            Ok(Err(source)) => return Err(Error::Spawn { program: "ssh".into(), source }),
            Ok(Ok(output)) => output,
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            row.ssh = Err(ssh::explain_failure(&host, stderr.lines().last().unwrap_or("")));
            rows.push(row);
            continue;
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let field = |key: &str| stdout.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_owned);
        row.generation = match (field("generation"), field("generation_error")) {
            (Some(g), _) => g.parse().map_err(|_| format!("bad generation {g:?}")),
            (None, e) => Err(e.unwrap_or_else(|| "no generation reported".into())),
        };
        row.gpus = field("gpus").and_then(|g| g.parse().ok());
        row.nccl = match (field("nccl"), field("nccl_error")) {
            (Some(_), _) => Some(Ok(())),
            (None, Some(e)) => Some(Err(e)),
            (None, None) => None,
        };
        row.efs = match (field("efs"), field("efs_error")) {
            (Some(_), _) => match &master_efs {
                Some(efs) if probe_dir(efs, &probe).join(&host).exists() => Ok(()),
                Some(efs) => Err(format!(
                    "a file {host} wrote to its EFS_MOUNT is not in the master's {efs}: mount the same EFS file system \
                     at the same path on both (see /etc/fstab)"
                )),
                None => Err("the master has no EFS_MOUNT to compare with".into()),
            },
            (None, e) => Err(format!(
                "{}: check the EFS mount on {host} (`mount -t nfs4`) and its permissions",
                e.unwrap_or_else(|| "no EFS report".into())
            )),
        };
        // With clocks in step, the host's time falls between the start and the end
        // of the ssh call; how far outside that window it falls is the least skew.
        row.skew_ms = field("time_ms").and_then(|t| t.parse::<i64>().ok()).map(|t| (least_skew(t0, t, t1), t1 - t0));
        row.fabric = stdout.lines().filter_map(|l| l.strip_prefix("fabric=")).map(str::to_owned).collect();
        row.gpu = super::doctor_gpu::parse(&stdout);
        rows.push(row);
    }
    if let Some(efs) = &master_efs {
        let _ = std::fs::remove_dir_all(probe_dir(efs, &probe));
    }

    let mut problems = Vec::new();
    let mut out = String::new();
    out += &format!("{:<24} {:<6} {:<11} {:<5} {:<5} {:<8} CLOCK", "HOST", "SSH", "GENERATION", "GPUS", "NCCL", "EFS");
    out.push('\n');
    for row in &rows {
        let mut cells: [String; 6] = Default::default();
        cells[0] = if row.ssh.is_ok() { "ok".into() } else { "FAIL".into() };
        if let Err(e) = &row.ssh {
            problems.push(format!("{}: {e}", row.host));
        }
        if row.ssh.is_ok() {
            cells[1] = match (&row.generation, &master_generation) {
                (Ok(g), Ok(m)) if g == m => g.to_string(),
                (Ok(g), Ok(m)) => {
                    problems.push(format!(
                        "{}: its agent applied manifest generation {g}, the master's {m}: check the agent there \
                         (`journalctl -u deeplearning-agent`)",
                        row.host
                    ));
                    format!("{g} FAIL")
                }
                (Ok(g), Err(e)) => {
                    problems.push(format!("the master: cannot read its own agent state: {e}"));
                    format!("{g} ?")
                }
                (Err(e), _) => {
                    problems.push(format!("{}: no applied manifest ({e}): is its agent running?", row.host));
                    "FAIL".into()
                }
            };
            cells[2] = row.gpus.map_or("?".into(), |g| g.to_string());
            cells[3] = match &row.nccl {
                None => "-".into(),
                Some(Ok(())) => "ok".into(),
                Some(Err(e)) => {
                    problems.push(format!("{}: it has GPUs, but {e}", row.host));
                    "FAIL".into()
                }
            };
            cells[4] = match &row.efs {
                Ok(()) => "shared".into(),
                Err(e) => {
                    problems.push(format!("{}: {e}", row.host));
                    "FAIL".into()
                }
            };
            cells[5] = match row.skew_ms {
                Some((skew, _)) if skew.unsigned_abs() > args.max_skew_ms => {
                    problems.push(format!(
                        "{}: its clock is {skew:+} ms off the master's (more than {} ms): check time sync there \
                         (`chronyc tracking`; the Amazon Time Sync Service is 169.254.169.123)",
                        row.host, args.max_skew_ms
                    ));
                    format!("{skew:+} ms FAIL")
                }
                Some((skew, call)) => format!("{skew:+} ms (ssh call {call} ms)"),
                None => "?".into(),
            };
        }
        out += &format!(
            "{:<24} {:<6} {:<11} {:<5} {:<5} {:<8} {}\n",
            row.host, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
        );
    }
    out += &format!("NCCL/EFA environment every rank gets (from each host's {}):\n", profile::PATH);
    for row in rows.iter().filter(|r| r.ssh.is_ok()) {
        let vars = if row.fabric.is_empty() { "(none)".to_owned() } else { row.fabric.join(" ") };
        out += &format!("  {}: {vars}\n", row.host);
    }
    let (lines, slow) = network_check(&args.root, master_generation.as_ref().ok().copied());
    out += &lines;
    problems.extend(slow);
    let reports: Vec<(String, node_contract::gpu::GpuReport)> =
        rows.iter().filter_map(|r| Some((r.host.clone(), r.gpu.clone()?))).collect();
    let (lines, failed) = super::doctor_gpu::table(&reports, args.gpus.is_some());
    out += &lines;
    problems.extend(failed);
    problems.dedup();
    let code = if problems.is_empty() {
        out += &format!("all {} hosts are ready\n", rows.len());
        EXIT_OK
    } else {
        out += &format!("{} problem(s):\n", problems.len());
        for p in &problems {
            out += &format!("- {p}\n");
        }
        EXIT_FAILED
    };
    Ok(cli_output::print_report(&out, code)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_is_measured_outside_the_call_window() {
        assert_eq!(least_skew(1000, 1500, 1800), 0);
        assert_eq!(least_skew(1000, 400, 1800), -600);
        assert_eq!(least_skew(1000, 4000, 1800), 2200);
    }

    #[test]
    fn the_network_checks_slow_node_is_a_problem_while_the_membership_is_the_one_measured() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(network_check(root.path(), Some(1)), (String::new(), Vec::new()));
        std::fs::create_dir_all(root.path().join("var/lib/deeplearning")).unwrap();
        let verdict = serde_json::json!({
            "version": 1, "action": "warn", "decided_unix_ms": 1, "summary": "Network check of generation 1: …",
            "verdict": {"generation": 1, "links": [
                {"node": {"alias": "deeplearning-worker1", "ip": "10.0.0.1"}, "gbps": 0.4, "fraction": 1.0, "slow": false},
                {"node": {"alias": "deeplearning-worker2", "ip": "10.0.0.2"}, "gbps": 0.1, "fraction": 0.25, "slow": true}
            ]}
        });
        std::fs::write(root.path().join("var/lib/deeplearning/network-check.json"), verdict.to_string()).unwrap();
        let (lines, problems) = network_check(root.path(), Some(1));
        assert!(lines.contains("Network check of generation 1 (action warn):"), "{lines}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("deeplearning-worker2 (10.0.0.2): the network check measured 0.10 Gbit/s, 0.25")
        );
        let (lines, problems) = network_check(root.path(), Some(2));
        assert!(problems.is_empty());
        assert!(lines.contains("an earlier membership") && lines.contains("(then) deeplearning-worker2"), "{lines}");
        std::fs::write(root.path().join("var/lib/deeplearning/network-check.json"), "{\"version\":9}").unwrap();
        assert!(network_check(root.path(), Some(1)).0.contains("not a verdict this trainer reads"));
    }

    #[test]
    fn local_report_without_agent_or_driver() {
        let root = tempfile::tempdir().unwrap();
        assert!(generation(root.path()).unwrap_err().contains("state.json"));
        std::fs::create_dir_all(root.path().join("var/lib/deeplearning")).unwrap();
        let state = node_contract::state::State {
            version: node_contract::state::STATE_VERSION,
            instance_id: "i-1".into(),
            generation: 4,
            manifest: node_contract::message::Manifest {
                cluster: "c".into(),
                generation: 4,
                master: "i-1".into(),
                nodes: Vec::new(),
                cluster_public_key: String::new(),
            },
        };
        std::fs::write(root.path().join("var/lib/deeplearning/state.json"), serde_json::to_string(&state).unwrap())
            .unwrap();
        assert_eq!(generation(root.path()), Ok(4));
        assert_eq!(profile::efs_mount(root.path()), None);
    }
}
