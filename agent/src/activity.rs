//! What keeps this node busy, for the idle guard (docs/ARCHITECTURE.md,
//! "The idle guard"): the local probes behind a
//! [`node_contract::idle::Activity`] reading.
//!
//! - **Jobs**: every rank `trainer launch` starts has a supervisor that
//!   keeps a pid file under [`node_contract::idle::JOBS_RUN_DIR`] (under the
//!   agent's root): `<supervisor pid> <process group>`. A rank counts while
//!   its supervisor lives and is one (its command line holds `supervise`:
//!   pids are reused, and a pid file of a killed job may be left behind).
//! - **SSH**: established TCP connections to the node's SSH port (22), read
//!   from `/proc/net/tcp` and `/proc/net/tcp6`, which show the sockets of
//!   the reader's network namespace only. This counts every session, with
//!   a terminal or not (an editor's remote session, `scp`, a port forward:
//!   someone is using the node), needs neither utmp (not written for
//!   sessions without a terminal, nor in most containers) nor the name of
//!   sshd's session processes (which changed in OpenSSH 9.8), and in the
//!   end-to-end tests, where every node is a network namespace of one
//!   host, it sees only the node's own connections.
//! - **GPUs**: the busiest GPU's utilisation through the GPU gate's port
//!   ([`gpu_health::Gpus`]: NVML, loaded at run time, behind the `cuda`
//!   feature; the gate's fixture in the tests), so the guard reads the
//!   GPUs through the same code path the gate does: the percent of the
//!   last sample period in which a kernel ran. No driver, no GPU or an NVML
//!   error: no GPU signal (`None`), never a crash
//!   ([`gpu_health::busiest_percent`]).
//!
//! Every probe that cannot read its source counts nothing and says why at
//! debug level: a node that cannot be probed must not be kept up forever.

use std::path::Path;

use node_contract::idle::{Activity, JOBS_RUN_DIR};

/// The port sshd listens on, on every node.
pub(crate) const SSH_PORT: u16 = 22;

/// This node's reading now: `root` is the agent's filesystem root (the
/// trainer's pid files are under it), `proc` the `/proc` to read the
/// sockets and processes from, `gpus` the node's GPUs.
pub(crate) fn probe(instance_id: &str, root: &Path, proc: &Path, gpus: &dyn gpu_health::Gpus) -> Activity {
    Activity {
        instance_id: instance_id.to_owned(),
        job_ranks: job_ranks(root, proc),
        ssh_sessions: ssh_sessions(proc),
        gpu_percent: gpu_health::busiest_percent(gpus),
    }
}

/// Ranks whose supervisor is alive.
pub(crate) fn job_ranks(root: &Path, proc: &Path) -> u32 {
    let dir = node_contract::files::under(root, JOBS_RUN_DIR);
    let Ok(jobs) = std::fs::read_dir(&dir) else { return 0 };
    let mut ranks = 0;
    for job in jobs.flatten() {
        let Ok(files) = std::fs::read_dir(job.path()) else { continue };
        for file in files.flatten() {
            let path = file.path();
            if path.extension().is_none_or(|x| x != node_contract::idle::PID_FILE_EXTENSION) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let Some(pid) = node_contract::idle::parse_pid_file(&text).and_then(|(pid, _)| u32::try_from(pid).ok())
            else {
                continue;
            };
            if is_supervisor(proc, pid) {
                ranks += 1;
            }
        }
    }
    ranks
}

/// Whether process `pid` is a `trainer supervise` (and not a zombie).
fn is_supervisor(proc: &Path, pid: u32) -> bool {
    let base = proc.join(pid.to_string());
    let cmdline = std::fs::read(base.join("cmdline")).unwrap_or_default();
    let zombie = std::fs::read_to_string(base.join("stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true);
    !zombie && cmdline.split(|b| *b == 0).any(|w| w == b"supervise")
}

/// Established connections to [`SSH_PORT`] in this network namespace.
pub(crate) fn ssh_sessions(proc: &Path) -> u32 {
    ["net/tcp", "net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(proc.join(f)).ok())
        .map(|text| established_to(&text, SSH_PORT))
        .sum()
}

/// The lines of a `/proc/net/tcp{,6}` table whose local port is `port` and
/// whose state is ESTABLISHED (`01`): `sl local_address rem_address st ...`,
/// addresses as `HEXIP:HEXPORT`.
pub(crate) fn established_to(table: &str, port: u16) -> u32 {
    let mut n = 0;
    for line in table.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(local), Some(_), Some(state)) = (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let local_port = local.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if local_port == Some(port) && state == "01" {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a node: sshd listening (0A), one session in (01),
    // one connection out to another node's sshd (local port 41522), and
    // a TIME_WAIT (06) of a closed session.
    const TCP: &str = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21339 1 0000000000000000 100 0 0 10 0
   1: 0A00800A:0016 0A00800B:D1F2 01 00000000:00000000 02:0009D2A1 00000000     0        0 88121 2 0000000000000000 20 4 31 10 -1
   2: 0A00800A:A232 0A00800C:0016 01 00000000:00000000 02:0009D2A1 00000000  1000        0 88122 2 0000000000000000 20 4 31 10 -1
   3: 0A00800A:0016 0A00800D:C001 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
";
    const TCP6: &str = "\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0016 00000000000000000000000001000000:E3A4 01 00000000:00000000 02:000A7F2C 00000000     0        0 91003 2 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn only_established_connections_to_the_ssh_port_count() {
        assert_eq!(established_to(TCP, 22), 1);
        assert_eq!(established_to(TCP6, 22), 1);
        assert_eq!(established_to("", 22), 0);
        assert_eq!(established_to("header\ngarbage line\n 1: x:zz y 01\n", 22), 0);
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc.path().join("net")).unwrap();
        std::fs::write(proc.path().join("net/tcp"), TCP).unwrap();
        std::fs::write(proc.path().join("net/tcp6"), TCP6).unwrap();
        assert_eq!(ssh_sessions(proc.path()), 2);
        assert_eq!(ssh_sessions(Path::new("/nonexistent")), 0);
    }

    #[test]
    fn a_rank_counts_while_its_supervisor_lives() {
        let root = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let jobs = root.path().join("run/deeplearning-trainer");
        assert_eq!(job_ranks(root.path(), proc.path()), 0);
        std::fs::create_dir_all(jobs.join("j1")).unwrap();
        std::fs::create_dir_all(jobs.join("j2")).unwrap();
        let process = |pid: u32, cmdline: &[u8], state: &str| {
            let dir = proc.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cmdline"), cmdline).unwrap();
            std::fs::write(dir.join("stat"), format!("{pid} (trainer) {state} 1 {pid} {pid} 0 -1")).unwrap();
        };
        process(100, b"/usr/bin/trainer\0supervise\0--job\0j1\0", "S");
        process(101, b"/usr/bin/trainer\0supervise\0--job\0j1\0", "S");
        // A pid reused by something else, and a supervisor that is a zombie.
        process(200, b"/usr/bin/python3\0train.py\0", "R");
        process(201, b"/usr/bin/trainer\0supervise\0", "Z");
        std::fs::write(jobs.join("j1/0.pid"), "100 150\n").unwrap();
        std::fs::write(jobs.join("j1/1.pid"), "101 151\n").unwrap();
        std::fs::write(jobs.join("j1/notes.txt"), "100 150\n").unwrap();
        std::fs::write(jobs.join("j2/0.pid"), "200 250\n").unwrap();
        std::fs::write(jobs.join("j2/1.pid"), "201 251\n").unwrap();
        std::fs::write(jobs.join("j2/2.pid"), "999 999\n").unwrap();
        std::fs::write(jobs.join("j2/3.pid"), "garbage").unwrap();
        assert_eq!(job_ranks(root.path(), proc.path()), 2);
        let no_gpus = gpu_health::FixtureGpus::new(root.path().join("no-gpus.json"));
        let reading = probe("i-1", root.path(), proc.path(), &no_gpus);
        assert_eq!((reading.job_ranks, reading.ssh_sessions, reading.gpu_percent), (2, 0, None));
        assert!(reading.busy());
    }

    /// The busiest GPU's utilisation is the reading, through the gate's
    /// port (here its fixture, re-read at every probe): an idle node reads
    /// 0 %, one GPU at work makes the node busy, and a driver that does not
    /// answer is no GPU signal rather than an error.
    #[test]
    fn the_gpu_signal_is_the_busiest_gpus_utilisation() {
        let root = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let path = root.path().join("gpus.json");
        let gpus = gpu_health::FixtureGpus::new(&path);
        let mut fixture = gpu_health::Fixture::healthy("H100", 8);
        let write = |f: &gpu_health::Fixture| std::fs::write(&path, serde_json::to_string(f).unwrap()).unwrap();
        write(&fixture);
        let reading = probe("i-1", root.path(), proc.path(), &gpus);
        assert_eq!(reading.gpu_percent, Some(0));
        assert!(!reading.busy());
        fixture.devices[5].utilisation_percent = Some(87);
        fixture.devices[2].utilisation_percent = Some(40);
        write(&fixture);
        let reading = probe("i-1", root.path(), proc.path(), &gpus);
        assert_eq!(reading.gpu_percent, Some(87));
        assert!(reading.busy());
        fixture.driver_error = Some("NVML: driver not loaded".into());
        write(&fixture);
        assert_eq!(probe("i-1", root.path(), proc.path(), &gpus).gpu_percent, None);
    }

    /// This machine has no NVIDIA driver: NVML does not load, and that is
    /// no GPU signal rather than an error (on a GPU machine,
    /// `scripts/gpu-check.sh` is where it would read a figure).
    #[test]
    fn without_nvml_there_is_no_gpu_signal() {
        let gpus = gpu_health::real();
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return;
        }
        assert_eq!(gpu_health::busiest_percent(&*gpus), None);
    }
}
