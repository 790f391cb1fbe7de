//! `trainer launch` / `kill` / `doctor` at 256 hosts (benchmark, not a
//! test): how long from `trainer launch` to every rank's command running,
//! and from stopping the job to nothing of it left anywhere, against the
//! goals (10 s and 5 s).
//!
//! Run: `cargo build -p trainer && TRAINER_BIN=<target>/debug/trainer
//! cargo bench -p e2e --bench launch` (the dev build, which the workspace
//! builds with opt-level 3 for the trainer), or `cargo build --release -p
//! trainer && cargo bench -p e2e --bench launch` (without `TRAINER_BIN` the
//! bench takes `trainer` from its own profile directory,
//! `<target>/release/trainer`). Needs root, `ip`, openssh-server,
//! `prlimit`; `LAUNCH_HOSTS` for another host count, default 256.
//!
//! # What is simulated, and how
//!
//! One network namespace (loopback only: nothing outside it is reached),
//! where all of 127/8 is local, and in it ONE real sshd listening on
//! 0.0.0.0:22 with `MaxStartups 1000`. The 256 "hosts" are 127.78.0.1 ...
//! 127.78.1.6, each with a line in the known hosts file (the one host key,
//! under every address: host key checking stays on). Every rank is a real
//! `ssh` client, a real sshd session and a real remote `trainer supervise`,
//! as on a cluster; what differs is that one sshd (and this machine's 2
//! cores) carries the sessions of all 256 hosts, where a cluster has one
//! sshd per host: the figures are an upper bound on a cluster's.
//!
//! The launcher starts with a soft open-file limit of 256 (`prlimit`): 256
//! ranks need about 1,100 descriptors, so the run also shows the launcher
//! raising its own limit; one more launcher with a hard limit one below
//! what it needs must refuse at once with the reason.
//!
//! # The measurements
//!
//! - **launch -> all up**: the launch is started at t0; every rank's command
//!   writes `date +%s.%N` to a file of its own as its first action; the time
//!   is the latest of those stamps minus t0.
//! - **stop -> nothing left**: SIGINT to the launcher at t1 (Ctrl-C); the
//!   time until no process on the machine has `TRAINER_JOB=<job>` in its
//!   environment or the job on its command line (launcher, ssh clients,
//!   supervisors, commands), polled every 20 ms.
//! - **kill -9 -> nothing left**: a second launch, its launcher SIGKILLed:
//!   the supervisors notice their ssh sessions closing.
//! - **reference**: `ssh HOST true` to every host, 32 at once (as many as
//!   the launcher sets up at once), before the launches: what the SSH
//!   sessions alone cost on this machine; launch is shown against it. Once
//!   with ssh's own key exchange and once with curve25519-sha256 first,
//!   what the launcher's `--ssh-kex fast` (its default) picks with OpenSSH
//!   9.2 (trainer's `jobs::ssh::SshKex`).
//! - **CPU a host**: the SSH client side (this benchmark's reaped children:
//!   the ssh clients, the launcher) and the server side (the sshd
//!   listener's reaped children: every session, with the supervisors and
//!   commands under it), divided by the hosts. On a cluster every host has
//!   its own sshd, so only the client side lands on the master: it is
//!   printed as the master's share of a launch.
//! - **`trainer kill`** over all hosts after that (nothing to stop: it
//!   checks every host) and **`trainer doctor`** over all hosts: their run
//!   times and exit codes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::netns::run;
use e2e::proc_cpu::ProcCpu;
use e2e::sshd::{job_processes, trainer_bin};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Goal: every rank's command running within this after the launch.
const LAUNCH_GOAL: Duration = Duration::from_secs(10);
/// Goal: nothing of the job left within this after the stop.
const STOP_GOAL: Duration = Duration::from_secs(5);
/// Longest wait for anything.
const TIMEOUT: Duration = Duration::from_secs(60);

fn main() -> std::process::ExitCode {
    match bench() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The namespace, the sshd and the files; torn down on drop.
struct Site {
    namespace: String,
    dir: tempfile::TempDir,
    sshd: Option<Child>,
    hosts: usize,
}

impl Drop for Site {
    fn drop(&mut self) {
        if let Some(mut sshd) = self.sshd.take() {
            let _ = sshd.kill();
            let _ = sshd.wait();
        }
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.namespace]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    // SAFETY: kill(2) with a pid from this benchmark's own namespace.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.namespace]).status();
    }
}

fn host_ip(i: usize) -> String {
    format!("127.78.{}.{}", i / 250, i % 250 + 1)
}

impl Site {
    fn new(hosts: usize) -> BenchResult<Site> {
        std::fs::create_dir_all("/var/lib/dl-e2e")?;
        let dir = tempfile::Builder::new().prefix("launch-bench-").tempdir_in("/var/lib/dl-e2e")?;
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let namespace = format!("dlbench{}", std::process::id());
        let mut site = Site { namespace, dir, sshd: None, hosts };
        run("ip", &["netns", "add", &site.namespace])?;
        run("ip", &["netns", "exec", &site.namespace, "ip", "link", "set", "lo", "up"])?;
        let d = site.dir.path().to_owned();
        for (key, comment) in [("host_key", "bench-host"), ("client_key", "bench-client")] {
            let path = d.join(key).to_string_lossy().into_owned();
            run("ssh-keygen", &["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", &path])?;
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys"))?;
        let host_key = std::fs::read_to_string(d.join("host_key.pub"))?;
        let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        let known: String = (0..hosts).map(|i| format!("{} {}\n", host_ip(i), host_key.join(" "))).collect();
        std::fs::write(d.join("known_hosts"), known)?;
        let list: String = (0..hosts).map(|i| format!("{}\n", host_ip(i))).collect();
        std::fs::write(d.join("hosts"), list)?;
        // The agent's profile on the "hosts" (one root for all): EFS_MOUNT
        // for the launcher's logs, where the ranks also leave their stamps.
        std::fs::create_dir_all(d.join("efs"))?;
        std::fs::create_dir_all(d.join("root/etc/profile.d"))?;
        std::fs::write(
            d.join("root/etc/profile.d/deeplearning.sh"),
            format!("export EFS_MOUNT='{}'\n", d.join("efs").display()),
        )?;
        let config = format!(
            "ListenAddress 0.0.0.0:22\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
             UsePAM no\nUseDNS no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             MaxStartups 1000:30:2000\nMaxSessions 100\nSetEnv TRAINER_ROOT={d}/root\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config)?;
        std::fs::create_dir_all("/run/sshd")?;
        // Root's shell start-up files are empty for sshd's sessions, as on a
        // fresh node (this machine's own, a pyenv rehash say, would run in
        // every session and print into every rank): e2e::sshd does the same.
        let sshd = Command::new("ip")
            .args(["netns", "exec", &site.namespace, "unshare", "--mount", "sh", "-c"])
            .arg(
                "for f in ~root/.bashrc ~root/.bash_profile ~root/.bash_login ~root/.profile; do
                     if [ -e \"$f\" ]; then mount --bind /dev/null \"$f\" || exit 1; fi
                 done
                 exec \"$@\"",
            )
            .args(["sh", "/usr/sbin/sshd", "-D", "-f"])
            .arg(d.join("sshd_config"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .stdin(Stdio::null())
            .spawn()?;
        site.sshd = Some(sshd);
        // Up when a login works.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = site.command("ssh")?.args(site.ssh_options()).args([&host_ip(0), "true"]).status()?.success();
            if ok {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("sshd did not answer; its log: {}", d.join("sshd.log").display()).into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(site)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `program` in the namespace.
    fn command(&self, program: &str) -> BenchResult<Command> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.namespace, program]);
        Ok(c)
    }

    fn ssh_options(&self) -> Vec<String> {
        let kh = self.path("known_hosts").display().to_string();
        let key = self.path("client_key").display().to_string();
        ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o"]
            .map(String::from)
            .into_iter()
            .chain([format!("UserKnownHostsFile={kh}"), "-i".into(), key, "-l".into(), "root".into()])
            .collect()
    }

    /// `trainer SUBCOMMAND` for all hosts, with the soft open-file limit `soft` and hard `hard`.
    fn trainer(&self, trainer: &Path, soft: u64, hard: u64, subcommand: &str) -> BenchResult<Command> {
        let mut c = self.command("prlimit")?;
        c.arg(format!("--nofile={soft}:{hard}")).arg("--").arg(trainer).arg(subcommand);
        c.arg("--hosts").arg(self.path("hosts"));
        c.arg("--root").arg(self.path("root"));
        c.arg("--ssh-identity").arg(self.path("client_key"));
        c.arg("--ssh-known-hosts").arg(self.path("known_hosts"));
        c.args(["--ssh-user", "root"]).arg("--remote-trainer").arg(trainer);
        Ok(c)
    }

    /// Starts `trainer launch` of job `job`; every rank stamps its start.
    fn launch(&self, trainer: &Path, job: &str) -> BenchResult<(Child, f64)> {
        let stamps = self.path(&format!("efs/{job}-stamps"));
        std::fs::create_dir_all(&stamps)?;
        let script = format!("date +%s.%N > {}/$RANK; exec sleep 3600", stamps.display());
        let mut c = self.trainer(trainer, 256, hard_limit(), "launch")?;
        c.args(["--nproc-per-node", "1", "--job", job, "--", "sh", "-c", &script]);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(self.path(&format!("{job}.err")))?);
        let t0 = unix_now();
        Ok((c.spawn()?, t0))
    }

    /// Seconds from `t0` to the last rank's stamp, once all are there.
    fn all_up(&self, job: &str, t0: f64) -> BenchResult<f64> {
        let stamps = self.path(&format!("efs/{job}-stamps"));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let times: Vec<f64> = std::fs::read_dir(&stamps)?
                .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok()?.trim().parse().ok())
                .collect();
            if times.len() == self.hosts {
                return Ok(times.into_iter().fold(f64::MIN, f64::max) - t0);
            }
            if Instant::now() > deadline {
                let err = std::fs::read_to_string(self.path(&format!("{job}.err"))).unwrap_or_default();
                let tail: Vec<&str> = err.lines().rev().take(20).collect();
                return Err(format!(
                    "{} of {} ranks started within {TIMEOUT:?}; the launcher's last lines:\n{}",
                    times.len(),
                    self.hosts,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// This process's hard open-file limit (the launchers get it as theirs).
fn hard_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only into the struct it is given.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    limit.rlim_max
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

/// CPU seconds (user + system) of process `pid` and of its children that
/// it reaped: an sshd listener's figure grows by every session's CPU once
/// the session ends.
fn cpu_with_reaped(pid: u32) -> f64 {
    let cpu = ProcCpu::of(pid);
    cpu.own() + cpu.reaped
}

/// CPU seconds of this process's children that it reaped (and of theirs).
fn reaped_children_cpu() -> f64 {
    // SAFETY: getrusage writes only into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The CPU the SSH client side (this benchmark's children: ssh clients, the
/// launcher) and the server side (the sshd and its sessions) spent from
/// [`CpuSplit::start`] to [`CpuSplit::end`], once the work's processes exited.
struct CpuSplit {
    sshd: u32,
    client: f64,
    server: f64,
}

impl CpuSplit {
    fn start(site: &Site) -> CpuSplit {
        let sshd = site.sshd.as_ref().map_or(0, Child::id);
        CpuSplit { sshd, client: reaped_children_cpu(), server: cpu_with_reaped(sshd) }
    }

    /// (client, server) CPU seconds since the start.
    fn end(&self) -> (f64, f64) {
        (reaped_children_cpu() - self.client, cpu_with_reaped(self.sshd) - self.server)
    }
}

/// Seconds until no process of `job` is left.
fn until_gone(job: &str) -> BenchResult<f64> {
    let start = Instant::now();
    loop {
        let left = job_processes(job);
        if left.is_empty() {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!(
                "{} processes of {job} still there after {TIMEOUT:?}: {:?}",
                left.len(),
                &left[..3.min(left.len())]
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "OK" } else { "MISSED" }
}

fn bench() -> BenchResult<()> {
    e2e::require_root()?;
    let hosts: usize = std::env::var("LAUNCH_HOSTS").ok().map(|v| v.parse()).transpose()?.unwrap_or(256);
    if !(1..=1000).contains(&hosts) {
        return Err("LAUNCH_HOSTS must be 1..=1000".into());
    }
    let trainer = trainer_bin()?;
    eprintln!("trainer binary: {}", trainer.display());
    let site = Site::new(hosts)?;
    let job = format!("bench-{}", std::process::id());

    // A hard limit too low: refused at once, with the reason.
    // (64 + 4 a rank: trainer's jobs::open_files.)
    let too_low = 64 + 4 * hosts as u64 - 1;
    let refused = site
        .trainer(&trainer, 256.min(too_low), too_low, "launch")?
        .args(["--job", &format!("{job}-low"), "--", "true"])
        .output()?;
    let reason = String::from_utf8_lossy(&refused.stderr);
    eprintln!("with a hard open-file limit of {too_low}: exit {:?}: {}", refused.status.code(), reason.trim());
    if refused.status.success() || !reason.contains("open files") {
        return Err("the launcher did not refuse a too-low open-file limit".into());
    }

    // The reference: a plain `ssh HOST true` to every host, as many at once
    // as the launcher sets up (--ssh-concurrency, 32): what the sessions
    // themselves cost here.
    let reference = |extra: &str| -> BenchResult<(f64, f64, f64)> {
        let cpu = CpuSplit::start(&site);
        let t = Instant::now();
        let status = site
            .command("sh")?
            .arg("-c")
            .arg(format!(
                "xargs -P 32 -I@ ssh {} {extra} @ true < {}",
                site.ssh_options().join(" "),
                site.path("hosts").display()
            ))
            .status()?;
        let secs = t.elapsed().as_secs_f64();
        if !status.success() {
            return Err("the reference ssh logins failed".into());
        }
        // The listener reaps a session's process just after its client exits.
        std::thread::sleep(Duration::from_millis(500));
        let (client, server) = cpu.end();
        Ok((secs, client, server))
    };
    let (reference_secs, reference_client, reference_server) = reference("")?;
    // What the launcher's `--ssh-kex fast` picks with OpenSSH 9.2 (trainer's jobs::ssh::fast_kex).
    let (fast_secs, fast_client, fast_server) = reference("-o KexAlgorithms=^curve25519-sha256")?;

    // Launch, then Ctrl-C.
    let cpu = CpuSplit::start(&site);
    let (mut launcher, t0) = site.launch(&trainer, &job)?;
    let up = site.all_up(&job, t0)?;
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on the launcher this benchmark started.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGINT) };
    let stopped = until_gone(&job)?;
    let status = launcher.wait()?;
    std::thread::sleep(Duration::from_millis(500));
    let (launch_client, launch_server) = cpu.end();
    let note = std::fs::read_to_string(site.path(&format!("{job}.err")))?;
    let up_line = note.lines().find(|l| l.contains("ranks up in")).unwrap_or("(no 'ranks up' line)").to_owned();
    let kept = std::env::temp_dir().join("launch-bench-launcher.err");
    std::fs::write(&kept, &note)?;
    eprintln!("the first launcher's stderr: {}", kept.display());

    // Launch again, then kill -9 the launcher: the supervisors stop by themselves.
    let job2 = format!("{job}-k");
    let (mut launcher, t0) = site.launch(&trainer, &job2)?;
    let up2 = site.all_up(&job2, t0)?;
    std::thread::sleep(Duration::from_secs(1));
    launcher.kill()?;
    let killed = until_gone(&job2)?;
    let _ = launcher.wait();

    // `trainer kill` and `trainer doctor` across every host.
    let t = Instant::now();
    let kill = site.trainer(&trainer, 1024, hard_limit(), "kill")?.args(["--job", &job2]).output()?;
    let kill_secs = t.elapsed().as_secs_f64();
    let kill_lines = String::from_utf8_lossy(&kill.stdout).lines().count();
    let t = Instant::now();
    let doctor = site.trainer(&trainer, 1024, hard_limit(), "doctor")?.output()?;
    let doctor_secs = t.elapsed().as_secs_f64();
    let doctor_out = String::from_utf8_lossy(&doctor.stdout);
    let ssh_ok = doctor_out.lines().filter(|l| l.starts_with("127.78.")).count();

    println!();
    println!("{hosts} hosts, 1 rank each, one sshd in one namespace, {} cores", std::thread::available_parallelism()?);
    let per = |secs: f64| secs * 1000.0 / hosts as f64;
    println!(
        "reference: ssh HOST true to every host   {reference_secs:>6.2} s   (32 at once; CPU a host: client {:.0} ms, \
         sshd {:.0} ms)",
        per(reference_client),
        per(reference_server)
    );
    println!(
        "   the same, curve25519 key exchange     {fast_secs:>6.2} s   (CPU a host: client {:.0} ms, sshd {:.0} ms)",
        per(fast_client),
        per(fast_server)
    );
    println!(
        "launch -> every rank's command running   {up:>6.2} s   (goal < {} s) {}  {:.2}x the reference",
        LAUNCH_GOAL.as_secs(),
        verdict(up < LAUNCH_GOAL.as_secs_f64()),
        up / reference_secs
    );
    println!("   again (second launch)                 {up2:>6.2} s   launcher: {up_line}");
    println!(
        "CPU a host, launch to stop               client {:.0} ms (launcher and ssh), sshd {:.0} ms (sessions, \
         supervisors, commands)",
        per(launch_client),
        per(launch_server)
    );
    println!(
        "   on a cluster (an sshd on every host) the master's share alone: {:.2} s of CPU for {hosts} hosts, \
         {:.2} s on 2 cores, {:.2} s on 8",
        launch_client,
        launch_client / 2.0,
        launch_client / 8.0
    );
    println!(
        "Ctrl-C -> nothing of the job left        {stopped:>6.2} s   (goal < {} s) {}  launcher exit {:?}",
        STOP_GOAL.as_secs(),
        verdict(stopped < STOP_GOAL.as_secs_f64()),
        status.code()
    );
    println!(
        "kill -9 launcher -> nothing left         {killed:>6.2} s   (goal < {} s) {}",
        STOP_GOAL.as_secs(),
        verdict(killed < STOP_GOAL.as_secs_f64())
    );
    println!(
        "trainer kill over every host             {kill_secs:>6.2} s   exit {:?}, {kill_lines} lines",
        kill.status.code()
    );
    println!(
        "trainer doctor over every host           {doctor_secs:>6.2} s   exit {:?}, {ssh_ok} host rows",
        doctor.status.code()
    );
    Ok(())
}
