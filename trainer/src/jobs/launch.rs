//! `trainer launch -- CMD...`: runs CMD on every host of the cluster, one
//! process per rank, and stops them all together.
//!
//! Every rank is one `ssh HOST trainer supervise ... -- CMD` (see
//! [`crate::jobs::ssh`] for the options and [`crate::jobs::supervise`] for the remote
//! side). The launcher keeps each ssh's stdin open: closing it is how it
//! stops a rank, and if the launcher dies (even by SIGKILL) the kernel closes
//! it too, so the remote supervisors stop their groups either way. ssh
//! clients run in process groups of their own (a terminal's Ctrl-C reaches
//! only the launcher, which then stops everyone in order) and get SIGTERM
//! when the launcher dies (`PR_SET_PDEATHSIG`).
//!
//! Output: every line of every rank is printed whole, prefixed
//! `[host/rank] ` (stdout to stdout, stderr to stderr), and written
//! unprefixed to `$EFS_MOUNT/trainer/<job>/logs/rank-<r>.log`. On a terminal
//! a status line (running, exited, failed) is kept at the bottom of stderr.
//!
//! The first rank to fail (non-zero exit, or its ssh connection failing or
//! dropping) stops all others; so do SIGINT and SIGTERM. Stopping closes
//! every ssh's stdin, and SIGKILLs the ssh clients still there after
//! [`KILL_AFTER`]. The exit code is the first failing rank's (255 for an SSH
//! failure, 130/143 for SIGINT/SIGTERM), and a line says which rank failed
//! first and why. When failed ranks wrote error files (PyTorch's `@record`,
//! see [`error_file`]), the earliest one's exception and traceback follow,
//! as the root cause, with its host and rank.
//!
//! A job whose ranks all went silent for `--stall-after` is reported on
//! stderr (never stopped), naming the host whose GPUs stay busy while every
//! other host's idle ([`crate::jobs::stall`]; each host's GPU reading comes
//! from its supervisors' stderr).
//!
//! Every rank gets torchrun's environment ([`torchrun`]): the launcher
//! decides what torchrun takes from its own environment (`OMP_NUM_THREADS`,
//! `TORCH_NCCL_ASYNC_ERROR_HANDLING`) and passes it down with `--env`; each
//! rank's `TORCHELASTIC_ERROR_FILE` is `rank-<r>.error.json` in the job's
//! log directory.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::ChildStdin;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::agent_state;
use crate::error::{Error, Result};
use crate::exit::EXIT_USAGE;
use crate::jobs::hosts::{self, Nproc, Rank};
use crate::jobs::ssh::{self, SshArgs};
use crate::jobs::stall::{Reading, Stall};
use crate::jobs::supervise::{STARTED_LINE, parse_gpu_line};
use crate::jobs::{error_file, process, torchrun};

/// How long stopped ranks get to end by themselves (their supervisors give
/// CMD 1.5 s between SIGTERM and SIGKILL) before their ssh clients are killed.
pub(crate) const KILL_AFTER: Duration = Duration::from_secs(3);

/// Arguments of `trainer launch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Hosts to run on, one per line, optionally `host slots=N`; default:
    /// `$DEEPLEARNING_WORKERS_PATH` when set to a file other than
    /// /opt/deeplearning/workers, else the cluster's nodes as the agent
    /// applied them (/var/lib/deeplearning/state.json).
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Processes per host: a number, or `auto` for the host's GPU count
    /// (its hostfile slots), 1 without GPUs.
    #[arg(long, value_name = "N|auto", default_value = "auto")]
    pub nproc_per_node: Nproc,
    /// Job name: names the log directory and what `trainer kill --job` stops;
    /// default: `job-<UTC date>-<time>`.
    #[arg(long, value_parser = parse_job)]
    pub job: Option<String>,
    /// Rendezvous port on the first host (`MASTER_PORT`), 1 to 65535.
    #[arg(long, default_value_t = 29500, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Elastic job (for `trainer train`): nodes that join the cluster later
    /// (the agent's next membership generation) get ranks too, and ranks on
    /// hosts other than the first may leave, fail or lose their connection
    /// without stopping the job. The job ends when rank 0 (on the first host,
    /// the master) ends, with its exit code. In an elastic job RANK and
    /// WORLD_SIZE number launch slots; `trainer train` takes its training
    /// rank from its own rendezvous.
    #[arg(long)]
    pub elastic: bool,
    /// Report the job as stalled when no rank printed a line (stdout or
    /// stderr) for this many seconds; 0: never. Each rank's supervisor
    /// reports its node's busiest GPU utilisation, so the report says
    /// which node holds the others up: NCCL's classic hang is one rank
    /// stuck or slow while every other rank waits in a collective with its
    /// GPU idle, so a host whose GPUs stay busy (>= 5 %) while every other
    /// host's are idle is named. With no GPU busy anywhere the hang is
    /// outside the GPUs; hosts without GPUs get the silence reported
    /// alone. Said once on stderr, and again only after output resumed and
    /// stopped again. It never stops the job: `trainer kill` or Ctrl-C
    /// does, after a look at the named node (py-spy dump, nvidia-smi).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub stall_after: u64,
    /// Filesystem root the agent's files are under.
    #[arg(long, env = "TRAINER_ROOT", default_value = "/")]
    pub root: PathBuf,
    /// SSH options.
    #[command(flatten)]
    pub ssh: SshArgs,
    /// The command to run on every rank, and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A job name goes into paths and `ps`: letters, digits, `-`, `_`, `.`.
pub(crate) fn parse_job(s: &str) -> std::result::Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 100
        && !s.starts_with('.')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok { Ok(s.to_owned()) } else { Err(format!("{s:?}: use 1-100 letters, digits, '-', '_' or '.'")) }
}

/// `job-YYYYMMDD-HHMMSS` in UTC (from the contract's RFC 3339 time,
/// `YYYY-MM-DDThh:mm:ssZ`).
fn default_job() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let utc = node_contract::interruption::format_utc(secs);
    let digits = |s: &str| s.chars().filter(char::is_ascii_digit).collect::<String>();
    let (date, time) = utc.split_once('T').unwrap_or((&utc, ""));
    format!("job-{}-{}", digits(date), digits(time))
}

/// Where the per-rank logs go: `$EFS_MOUNT/trainer/<job>/logs`, `EFS_MOUNT`
/// from the environment or the agent's profile; `./trainer/<job>/logs`
/// without one.
fn log_dir(root: &Path, job: &str) -> Result<PathBuf> {
    let efs = crate::jobs::profile::efs_mount_here(root);
    if efs.is_none() {
        cli_output::errln!("trainer: no EFS_MOUNT (environment or agent profile): logs go under the current directory");
    }
    // The job directory's layout (logs beside checkpoints and TensorBoard files) is jobdir's.
    let dir = crate::jobdir::path_from(efs.as_deref(), Some(job), "logs");
    std::fs::create_dir_all(&dir).map_err(|source| Error::Write { path: dir.clone(), source })?;
    // Absolute: the ranks' error file paths in it are used on every host.
    std::path::absolute(&dir).map_err(|source| Error::Write { path: dir, source })
}

enum Event {
    Line {
        rank: usize,
        stderr: bool,
        line: Vec<u8>,
    },
    /// The rank's supervisor is up (its first stderr line, [`STARTED_LINE`]).
    Up {
        rank: usize,
    },
    /// The rank's supervisor read its node's busiest GPU
    /// ([`crate::jobs::supervise::GPU_LINE`]); `None`: no GPU reading there.
    Gpu {
        rank: usize,
        percent: Option<u32>,
    },
    Exit {
        rank: usize,
        status: std::io::Result<ExitStatus>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not started yet: waiting for a slot among the connections being set up.
    Waiting,
    /// Its ssh runs; its supervisor has not said it is up.
    Connecting,
    Running,
    Exited,
    Failed,
    Stopped,
    /// An elastic job's rank that ended (or lost its connection) while the job goes on.
    Left,
}

struct RankProcess {
    spec: Rank,
    /// The node's instance id (elastic jobs: a new instance under a reused alias gets new ranks).
    instance: Option<String>,
    /// Its ssh client (0 until it is started).
    pid: i32,
    stdin: Option<ChildStdin>,
    state: State,
    /// When its ssh was started.
    spawned: Option<Instant>,
    stderr_tail: VecDeque<String>,
    /// Opened when the rank starts.
    log: Option<std::fs::File>,
    log_path: PathBuf,
    /// Whether writing the log failed (said once).
    log_failed: bool,
}

impl RankProcess {
    fn waiting(spec: Rank, instance: Option<String>, logs: &Path) -> RankProcess {
        let log_path = logs.join(format!("rank-{}.log", spec.rank));
        RankProcess {
            spec,
            instance,
            pid: 0,
            stdin: None,
            state: State::Waiting,
            spawned: None,
            stderr_tail: VecDeque::new(),
            log: None,
            log_path,
            log_failed: false,
        }
    }

    /// Started and not ended.
    fn live(&self) -> bool {
        matches!(self.state, State::Connecting | State::Running)
    }
}

/// How long a rank's connection may hold its slot without its supervisor
/// saying it is up (a remote trainer too old to say so): then the next
/// rank starts all the same.
fn slot_timeout(ssh: &SshArgs) -> Duration {
    Duration::from_secs(u64::from(ssh.connect_timeout) + 10)
}

/// What to say when the idle guard has the workers scaled down (the
/// master's `node_contract::idle::SCALED_DOWN_PATH`): the job would run on
/// the hosts left, the master alone. `None` when the file is not there.
fn scaled_down_note(root: &Path, now_ms: u64) -> Option<String> {
    let path = node_contract::files::under(root, node_contract::idle::SCALED_DOWN_PATH);
    let text = std::fs::read_to_string(path).ok()?;
    let down = node_contract::idle::ScaledDown::parse(&text)?;
    Some(format!("warning: {}; this job runs on the hosts that are left", down.advice(now_ms)))
}

/// Why the job ended early.
struct Failure {
    code: u8,
    what: String,
    /// The failed rank's place in the table; `None` for a signal to the
    /// launcher or its own stdout failing.
    rank: Option<usize>,
}

/// Runs the job; returns the exit code.
pub(crate) async fn run(args: Args) -> Result<u8> {
    if let Some(note) = scaled_down_note(&args.root, node_contract::clock::system()) {
        cli_output::errln!("trainer: {note}");
    }
    let hosts = hosts::job_hosts(args.hosts.as_deref(), &args.root)?;
    let ranks = hosts::ranks(&hosts, args.nproc_per_node, &hosts::agent_slots(&args.root))?;
    let job = args.job.clone().unwrap_or_else(default_job);
    let logs = log_dir(&args.root, &job)?;
    let trainer = args.ssh.remote_trainer()?;
    let world = ranks.len() as u32;
    let master_addr = hosts[0].name.clone();
    crate::jobs::open_files::ensure(
        crate::jobs::open_files::BASE + crate::jobs::open_files::PER_RANK * u64::from(world),
        &format!("trainer launch of {world} ranks"),
    )?;
    cli_output::errln!(
        "trainer: job {job}: {world} ranks on {} hosts, rendezvous {master_addr}:{}, logs in {}",
        hosts.len(),
        args.port,
        logs.display()
    );

    let mut sigint = signal(SignalKind::interrupt()).map_err(Error::Signal)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    // torchrun's environment decisions that depend on the launcher's own (OMP_NUM_THREADS), said once.
    let inherited = torchrun::Inherited::from_env(|name| std::env::var(name).ok());
    if let Some(note) = inherited.omp_note(ranks.iter().map(|r| r.local_world_size).max().unwrap_or(1)) {
        cli_output::errln!("trainer: {note}");
    }
    let spawner = Spawner {
        trainer,
        job: job.clone(),
        world,
        group_world: hosts.len() as u32,
        master_addr,
        inherited,
        args: &args,
        logs: logs.clone(),
        tx,
    };
    // An elastic job follows the agent's membership, keyed by instance id.
    let mut membership = if args.elastic { Some(Membership::read(&args.root)?) } else { None };
    // Every host must be known by instance id, or a new generation would
    // look like it brings that host again.
    let instances = match &membership {
        Some(m) => ranks.iter().map(|spec| m.instance_of(&spec.host).map(Some)).collect::<Result<Vec<_>>>()?,
        None => vec![None; ranks.len()],
    };
    let mut procs: Vec<RankProcess> =
        ranks.into_iter().zip(instances).map(|(spec, instance)| RankProcess::waiting(spec, instance, &logs)).collect();
    // Ranks start in order, at most --ssh-concurrency connecting at once.
    let slots = args.ssh.ssh_concurrency as usize;
    let started_at = Instant::now();
    let mut next = 0;
    let mut up = 0;
    let mut watch = tokio::time::interval(Duration::from_secs(1));
    // The stall report: the last output of any rank, and each host's last GPU reading.
    let mut stall = Stall::new(Duration::from_secs(args.stall_after), Duration::ZERO);
    let mut gpu_by_host: std::collections::HashMap<String, Option<u32>> = std::collections::HashMap::new();

    let mut out = Output { status_shown: false, tty: std::io::stderr().is_terminal(), stdout_closed: false };
    let mut failure: Option<Failure> = None;
    // Ranks that ended with a non-zero code, in the order seen: the root cause is among them.
    let mut nonzero: Vec<usize> = Vec::new();
    let mut kill_at: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let stop = |procs: &mut Vec<RankProcess>, kill_at: &mut Option<Instant>| {
        if kill_at.is_none() {
            *kill_at = Some(Instant::now() + KILL_AFTER);
        }
        for p in procs.iter_mut() {
            // Closing stdin is the supervisor's cue (an EOF down the ssh channel).
            p.stdin.take();
            if p.state == State::Waiting {
                p.state = State::Stopped;
            }
        }
    };
    loop {
        if kill_at.is_none() {
            let connecting = procs.iter().filter(|p| p.state == State::Connecting).count();
            let timeout = slot_timeout(&args.ssh);
            let stuck = procs
                .iter()
                .filter(|p| p.state == State::Connecting && p.spawned.is_some_and(|t| t.elapsed() > timeout))
                .count();
            for _ in 0..slots.saturating_sub(connecting - stuck) {
                if next >= procs.len() {
                    break;
                }
                spawner.spawn(&mut procs[next], next)?;
                next += 1;
            }
        }
        if !procs.iter().any(|p| p.live() || p.state == State::Waiting) {
            break;
        }
        tokio::select! {
            event = rx.recv() => match event {
                Some(Event::Up { rank }) => {
                    let p = &mut procs[rank];
                    if p.state == State::Connecting {
                        p.state = State::Running;
                    }
                    up += 1;
                    if up == procs.len() {
                        out.note(&format!("all {} ranks up in {:.1} s", procs.len(), started_at.elapsed().as_secs_f64()));
                    }
                }
                Some(Event::Gpu { rank, percent }) => {
                    gpu_by_host.insert(procs[rank].spec.host.clone(), percent);
                }
                Some(Event::Line { rank, stderr, line }) => {
                    stall.output(started_at.elapsed());
                    let p = &mut procs[rank];
                    if let Some(log) = p.log.as_mut()
                        && let Err(e) = log.write_all(&line)
                        && !p.log_failed
                    {
                        // Said once per rank: the job goes on, its lines still reach the terminal.
                        p.log_failed = true;
                        out.note(&format!("cannot write {}: {e}; rank {}'s lines go to the terminal only", p.log_path.display(), p.spec.rank));
                    }
                    if stderr {
                        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                        if p.stderr_tail.len() == 3 {
                            p.stderr_tail.pop_front();
                        }
                        p.stderr_tail.push_back(text);
                    }
                    if let Some(f) = out.line(&p.spec, stderr, &line) {
                        failure.get_or_insert(f);
                        stop(&mut procs, &mut kill_at);
                    }
                }
                Some(Event::Exit { rank, status }) => {
                    let stopping = kill_at.is_some();
                    let p = &mut procs[rank];
                    // A signal here killed the local ssh client, not the remote command
                    // (whose code, signals included, ssh passes on as an exit code).
                    let ssh_signal = status.as_ref().ok().and_then(std::os::unix::process::ExitStatusExt::signal);
                    let code = status.map(process::exit_code).unwrap_or(255);
                    if code != 0 {
                        nonzero.push(rank);
                    }
                    let elastic_member = args.elastic && p.spec.group_rank != 0;
                    p.state = match code {
                        0 if elastic_member && !stopping => State::Left,
                        0 => State::Exited,
                        _ if stopping => State::Stopped,
                        _ if elastic_member => State::Left,
                        _ => State::Failed,
                    };
                    if p.state == State::Left {
                        let why =
                            if code == 0 { "exited 0 (left the group)".to_owned() } else { exit_reason(p, code, ssh_signal) };
                        out.note(&format!("rank {} on {} left the elastic job: {why}; the job goes on", p.spec.rank, p.spec.host));
                    }
                    if args.elastic && p.spec.rank == 0 && code == 0 && !stopping {
                        // Rank 0 (the master's) ending well ends an elastic job; its failure does too, below.
                        stop(&mut procs, &mut kill_at);
                    }
                    let p = &mut procs[rank];
                    if p.state == State::Failed && failure.is_none() {
                        let why = exit_reason(p, code, ssh_signal);
                        failure = Some(Failure {
                            code,
                            what: format!("rank {} on {} failed first: {why}", p.spec.rank, p.spec.host),
                            rank: Some(rank),
                        });
                        stop(&mut procs, &mut kill_at);
                    }
                }
                None => break,
            },
            _ = sigint.recv() => {
                failure.get_or_insert(Failure { code: 130, what: "interrupted (SIGINT)".into(), rank: None });
                stop(&mut procs, &mut kill_at);
            }
            _ = sigterm.recv() => {
                failure.get_or_insert(Failure { code: 143, what: "terminated (SIGTERM)".into(), rank: None });
                stop(&mut procs, &mut kill_at);
            }
            _ = sleep_until(kill_at) => {
                for p in procs.iter().filter(|p| p.live()) {
                    tracing::warn!("rank {} on {}: ssh still running {KILL_AFTER:?} after the stop; killing it", p.spec.rank, p.spec.host);
                    process::signal_process(p.pid, libc::SIGKILL);
                }
                kill_at = Some(Instant::now() + Duration::from_secs(3600));
            }
            _ = watch.tick(), if membership.is_some() && kill_at.is_none() => {
                let Some(known) = membership.as_mut() else { continue };
                match known.joined(&args.root, &procs) {
                    Ok(new_hosts) => {
                        let hostfile = if new_hosts.is_empty() { Vec::new() } else { hosts::agent_slots(&args.root) };
                        for host in new_hosts {
                            let entry = hosts::HostEntry { name: host.alias.clone(), slots: None };
                            let group_rank = procs.iter().map(|p| p.spec.group_rank + 1).max().unwrap_or(0);
                            let first_rank = procs.len() as u32;
                            for mut spec in hosts::ranks(std::slice::from_ref(&entry), args.nproc_per_node, &hostfile)? {
                                spec.rank += first_rank;
                                spec.group_rank = group_rank;
                                out.note(&format!("{} ({}) joined (generation {}): starting rank {}", host.alias, host.instance_id, known.generation, spec.rank));
                                procs.push(RankProcess::waiting(spec, Some(host.instance_id.clone()), &logs));
                            }
                        }
                    }
                    Err(e) => tracing::warn!("elastic: cannot read the agent's membership: {e}"),
                }
            }
            // Also wakes the loop to give a stuck connection's slot away.
            _ = tick.tick() => {
                let now = started_at.elapsed();
                if kill_at.is_none() && stall.due(now) {
                    // The hosts of the ranks still running, in the launcher's order, once each.
                    let mut readings: Vec<Reading<'_>> = Vec::new();
                    for p in procs.iter().filter(|p| p.live()) {
                        if !readings.iter().any(|r| r.host == p.spec.host) {
                            readings.push(Reading { host: &p.spec.host, percent: gpu_by_host.get(&p.spec.host).copied().flatten() });
                        }
                    }
                    if let Some(finding) = stall.check(now, &readings) {
                        let report = stall.report(&job, &finding);
                        // At info: the line below is what a user reads (warn would print it twice).
                        tracing::info!("{report}");
                        out.clear_status();
                        cli_output::errln!("trainer launch: {report}");
                    }
                }
                if out.tty { out.status(&procs) }
            }
        }
        if out.tty {
            out.status(&procs);
        }
    }
    out.clear_status();
    let logs_note = format!("logs in {}", logs.display());
    debug_assert!(procs.iter().all(|p| p.log_path.starts_with(&logs)));
    Ok(match failure {
        None if args.elastic => {
            let count = |s: State| procs.iter().filter(|p| p.spec.rank != 0 && p.state == s).count();
            cli_output::errln!(
                "trainer: job {job}: rank 0 exited 0; of the others {} exited 0, {} were stopped, {} left along the way; \
                 {logs_note}",
                count(State::Exited),
                count(State::Stopped),
                count(State::Left)
            );
            0
        }
        None => {
            cli_output::errln!("trainer: job {job}: all {world} ranks exited 0; {logs_note}");
            0
        }
        Some(f) => {
            let stopped = procs.iter().filter(|p| p.state == State::Stopped).count();
            cli_output::errln!(
                "trainer: job {job}: {}; stopped {stopped} other rank(s) on every host; {logs_note}",
                f.what
            );
            if f.rank.is_some()
                && let Some(text) = root_cause(&procs, &nonzero)
            {
                cli_output::eprint(&text);
            }
            if f.code == 0 { EXIT_USAGE } else { f.code }
        }
    })
}

/// Starts ranks: one `ssh HOST trainer supervise ... -- CMD` each.
struct Spawner<'a> {
    trainer: String,
    job: String,
    world: u32,
    /// Hosts at the start (`GROUP_WORLD_SIZE`).
    group_world: u32,
    master_addr: String,
    /// What the ranks take from the launcher's environment, as torchrun's workers take it from torchrun's.
    inherited: torchrun::Inherited,
    args: &'a Args,
    /// The job's log directory (the ranks' error files are there too).
    logs: PathBuf,
    tx: mpsc::UnboundedSender<Event>,
}

impl Spawner<'_> {
    /// Starts rank `p`; `index` is its place in the launcher's table.
    fn spawn(&self, p: &mut RankProcess, index: usize) -> Result<()> {
        let spec = &p.spec;
        let log_path = &p.log_path;
        let log = std::fs::File::create(log_path).map_err(|source| Error::Write { path: log_path.clone(), source })?;
        let mut remote: Vec<String> = vec![self.trainer.clone(), "supervise".into()];
        for (flag, value) in [
            ("--job", self.job.clone()),
            ("--rank", spec.rank.to_string()),
            ("--local-rank", spec.local_rank.to_string()),
            ("--world-size", self.world.to_string()),
            ("--local-world-size", spec.local_world_size.to_string()),
            ("--group-rank", spec.group_rank.to_string()),
            ("--group-world-size", self.group_world.to_string()),
            ("--error-file", error_file::path(&self.logs, spec.rank).display().to_string()),
            ("--master-addr", self.master_addr.clone()),
            ("--master-port", self.args.port.to_string()),
            ("--host", spec.host.clone()),
        ] {
            remote.extend([flag.to_owned(), value]);
        }
        for (name, value) in self.inherited.for_rank(spec.local_world_size) {
            remote.extend(["--env".to_owned(), format!("{name}={value}")]);
        }
        remote.push("--".into());
        remote.extend(self.args.command.iter().cloned());
        let remote = format!("exec {}", ssh::quote(&remote));
        let mut command = tokio::process::Command::new("ssh");
        command
            .args(self.args.ssh.args(&spec.host, &remote))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: prctl and setpgid are async-signal-safe and touch no memory.
        // This runs on the thread that owns the launcher for its whole life,
        // so the parent-death signal fires only when the launcher dies.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|source| Error::Spawn { program: "ssh".into(), source })?;
        let pid = child.id().map(|p| p as i32).unwrap_or_default();
        let stdin = child.stdin.take();
        let out = child.stdout.take().map(|s| tokio::spawn(forward(index, false, s, self.tx.clone())));
        let err = child.stderr.take().map(|s| tokio::spawn(forward(index, true, s, self.tx.clone())));
        p.pid = pid;
        p.stdin = stdin;
        p.log = Some(log);
        p.state = State::Connecting;
        p.spawned = Some(Instant::now());
        let exit_tx = self.tx.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            // ssh's pipes close when it exits: the last lines arrive before its exit.
            for reader in [out, err].into_iter().flatten() {
                let _ = reader.await;
            }
            let _ = exit_tx.send(Event::Exit { rank: index, status });
        });
        Ok(())
    }
}

/// An elastic job's view of the agent's membership: which instances have
/// ranks, so that a node that joins (a new instance id, even under a reused
/// alias) gets ranks once, and a rank that left is not restarted.
struct Membership {
    generation: u64,
    nodes: Vec<node_contract::message::ManifestNode>,
}

impl Membership {
    fn read(root: &Path) -> Result<Membership> {
        match agent_state::read(root)? {
            Some(state) => Ok(Membership { generation: state.generation, nodes: state.manifest.nodes }),
            None => {
                Err(Error::NoMembership { path: node_contract::files::under(root, node_contract::state::STATE_PATH) })
            }
        }
    }

    /// The instance id of the node `host` names now: its alias, private IP or hostname.
    fn instance_of(&self, host: &str) -> Result<String> {
        self.nodes
            .iter()
            .find(|n| n.alias == host || n.private_ip == host || n.hostname == host)
            .map(|n| n.instance_id.clone())
            .ok_or_else(|| Error::NotInManifest { host: host.to_owned(), generation: self.generation })
    }

    /// Nodes of the agent's current generation that have no rank yet.
    fn joined(&mut self, root: &Path, procs: &[RankProcess]) -> Result<Vec<node_contract::message::ManifestNode>> {
        let now = Membership::read(root)?;
        if now.generation == self.generation {
            return Ok(Vec::new());
        }
        *self = now;
        Ok(self
            .nodes
            .iter()
            .filter(|n| !procs.iter().any(|p| p.instance.as_deref() == Some(n.instance_id.as_str())))
            .cloned()
            .collect())
    }
}

/// Why rank `p` ended with a non-zero `code` (`ssh_signal`: the signal that
/// killed its local ssh client, if one did), with its last stderr lines.
fn exit_reason(p: &RankProcess, code: u8, ssh_signal: Option<i32>) -> String {
    let tail = p.stderr_tail.iter().cloned().collect::<Vec<_>>().join("; ");
    let last_words = if tail.is_empty() { String::new() } else { format!("; its last stderr: {tail}") };
    if let Some(signal) = ssh_signal {
        format!("its ssh client was killed by signal {signal}: the connection to {} is gone", p.spec.host)
    } else if code == 255 {
        ssh::explain_failure(&p.spec.host, p.stderr_tail.back().map_or("", |s| s.as_str()))
    } else if code > 128 {
        format!("exited with code {code} (signal {}){last_words}", code - 128)
    } else {
        format!("exited with code {code}{last_words}")
    }
}

/// The root cause of a failed job, from the error files (`@record`) of the
/// ranks that ended non-zero (`nonzero`, in the order they did): the
/// exception and traceback of the earliest, naming its host and rank, as
/// lines for stderr. `None` when none of them wrote one (the ranks' own
/// stderr, in their logs, is then all there is).
fn root_cause(procs: &[RankProcess], nonzero: &[usize]) -> Option<String> {
    let recorded = nonzero.iter().filter_map(|&i| {
        let path = error_file::path(procs[i].log_path.parent()?, procs[i].spec.rank);
        error_file::read(&path).map(|r| ((i, path), r))
    });
    let ((i, path), r) = error_file::root_cause(recorded)?;
    let p = &procs[i];
    let mut text = format!(
        "trainer: root cause: rank {} on {} raised {} (its error file {}):\n",
        p.spec.rank,
        p.spec.host,
        r.message,
        path.display()
    );
    for line in r.traceback.as_deref().unwrap_or(&r.message).lines() {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    Some(text)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Sends every line of `stream` (a final partial line gets its newline).
/// The supervisor's [`STARTED_LINE`] on stderr is sent as [`Event::Up`]
/// instead, once: not necessarily the first line, since the remote user's
/// shell start-up files may print before the supervisor runs. Its GPU
/// lines on stderr are sent as [`Event::Gpu`], never as output.
async fn forward(rank: usize, stderr: bool, stream: impl AsyncRead + Unpin, tx: mpsc::UnboundedSender<Event>) {
    let mut reader = BufReader::new(stream);
    // Until the supervisor's line came.
    let mut first = stderr;
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if first && line.strip_suffix(b"\n") == Some(STARTED_LINE.as_bytes()) {
                    first = false;
                    if tx.send(Event::Up { rank }).is_err() {
                        return;
                    }
                    continue;
                }
                // A GPU line may follow a partial line of the rank's own on
                // the same pipe (a progress bar redrawn with `\r` writes no
                // newline for minutes): the reading is taken from the end of
                // the line, and what the rank wrote before it is printed.
                if stderr && let Some((before, percent)) = gpu_line_at_end(&line) {
                    if !before.is_empty() {
                        let mut before = before.to_vec();
                        before.push(b'\n');
                        if tx.send(Event::Line { rank, stderr, line: before }).is_err() {
                            return;
                        }
                    }
                    if tx.send(Event::Gpu { rank, percent }).is_err() {
                        return;
                    }
                    continue;
                }
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if tx.send(Event::Line { rank, stderr, line }).is_err() {
                    return;
                }
            }
        }
    }
}

/// A line that ends with the supervisor's GPU line: what comes before it
/// (empty for a line of its own) and the reading.
fn gpu_line_at_end(line: &[u8]) -> Option<(&[u8], Option<u32>)> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let marker = crate::jobs::supervise::GPU_LINE.as_bytes();
    let at = line.windows(marker.len()).rposition(|w| w == marker)?;
    let percent = parse_gpu_line(std::str::from_utf8(&line[at..]).ok()?)?;
    Some((&line[..at], percent))
}

/// The terminal side: prefixed lines, and the status line on a terminal.
///
/// Every write goes through `cli_output`, so none can panic. stdout
/// failing (the reader went away, or the disk is full) stops the job like
/// a failed rank: there is no one left to show its output to.
struct Output {
    status_shown: bool,
    tty: bool,
    /// Set once stdout failed; later lines go to the rank logs only.
    stdout_closed: bool,
}

impl Output {
    /// Prints one rank's line; a failure the first time stdout fails.
    fn line(&mut self, rank: &Rank, stderr: bool, line: &[u8]) -> Option<Failure> {
        self.clear_status();
        let mut buf = format!("[{}/{}] ", rank.host, rank.rank).into_bytes();
        buf.extend_from_slice(line);
        // One write of a whole line: lines of different ranks never interleave.
        if stderr {
            cli_output::eprint_bytes(&buf);
            return None;
        }
        if self.stdout_closed {
            return None;
        }
        let closed = cli_output::print_bytes(&buf).err()?;
        self.stdout_closed = true;
        Some(match closed {
            cli_output::Closed::ReaderGone => Failure {
                code: crate::exit::EXIT_STDOUT_CLOSED,
                what: "standard output was closed by its reader".into(),
                rank: None,
            },
            cli_output::Closed::Failed(e) => Failure {
                code: EXIT_USAGE,
                what: format!("cannot write the ranks' output to standard output: {e}"),
                rank: None,
            },
        })
    }

    fn status(&mut self, procs: &[RankProcess]) {
        let count = |s: State| procs.iter().filter(|p| p.state == s).count();
        cli_output::eprint(&format!(
            "\r\x1b[K[trainer] {} waiting, {} connecting, {} running, {} exited, {} failed, {} stopped, {} left",
            count(State::Waiting),
            count(State::Connecting),
            count(State::Running),
            count(State::Exited),
            count(State::Failed),
            count(State::Stopped),
            count(State::Left)
        ));
        self.status_shown = true;
    }

    /// A launcher message between the ranks' lines.
    fn note(&mut self, text: &str) {
        self.clear_status();
        cli_output::errln!("trainer: {text}");
    }

    fn clear_status(&mut self) {
        if self.status_shown {
            cli_output::eprint("\r\x1b[K");
            self.status_shown = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::supervise::gpu_line;

    #[test]
    fn an_elastic_host_is_found_by_alias_ip_or_hostname_and_an_unknown_one_is_refused() {
        let node = node_contract::message::ManifestNode {
            index: 2,
            alias: "deeplearning-worker2".into(),
            instance_id: "i-2".into(),
            private_ip: "10.0.1.7".into(),
            hostname: "ip-10-0-1-7".into(),
            gpus: 0,
            ssh_host_key: "k".into(),
        };
        let m = Membership { generation: 5, nodes: vec![node] };
        for host in ["deeplearning-worker2", "10.0.1.7", "ip-10-0-1-7"] {
            assert_eq!(m.instance_of(host).unwrap(), "i-2", "{host}");
        }
        let err = m.instance_of("10.0.1.8").unwrap_err().to_string();
        assert!(err.contains("\"10.0.1.8\" is not a node of the agent's manifest (generation 5)"), "{err}");
    }

    /// The supervisor's line is taken once, wherever it comes among the
    /// stderr lines (a remote shell's start-up files may print first), and
    /// never on stdout; its GPU lines are taken on stderr, as often as
    /// they come, a last one without its newline too, and one that follows
    /// a rank's partial line (a progress bar) on the same pipe.
    #[tokio::test]
    async fn the_supervisors_up_line_is_taken_once_wherever_it_comes() {
        let stderr = format!(
            "pyenv: cannot rehash\n{STARTED_LINE}\n{STARTED_LINE}\n{}\n 10%|#  \r 20%|## {}\nlast words\n{}",
            gpu_line(Some(97)),
            gpu_line(Some(98)),
            gpu_line(None)
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        forward(3, true, stderr.as_bytes(), tx.clone()).await;
        forward(4, false, format!("{STARTED_LINE}\n{}\n", gpu_line(Some(5))).as_bytes(), tx).await;
        let mut seen = Vec::new();
        while let Some(event) = rx.recv().await {
            seen.push(match event {
                Event::Up { rank } => format!("up {rank}"),
                Event::Gpu { rank, percent } => format!("gpu {rank} {percent:?}"),
                Event::Line { rank, stderr, line } => format!("{rank} {stderr} {}", String::from_utf8_lossy(&line)),
                Event::Exit { .. } => "exit".into(),
            });
        }
        let lines = [
            "3 true pyenv: cannot rehash\n".to_owned(),
            "up 3".to_owned(),
            format!("3 true {STARTED_LINE}\n"),
            "gpu 3 Some(97)".to_owned(),
            // A progress bar's partial line, then a GPU line on the same pipe.
            "3 true  10%|#  \r 20%|## \n".to_owned(),
            "gpu 3 Some(98)".to_owned(),
            "3 true last words\n".to_owned(),
            "gpu 3 None".to_owned(),
            format!("4 false {STARTED_LINE}\n"),
            format!("4 false {}\n", gpu_line(Some(5))),
        ];
        assert_eq!(seen, lines);
    }

    #[test]
    fn job_names() {
        assert!(parse_job("resnet-50_v2.1").is_ok());
        for bad in ["", "../x", ".hidden", "a b", "a/b"] {
            assert!(parse_job(bad).is_err(), "{bad:?}");
        }
        let job = default_job();
        assert!(job.starts_with("job-20") && job.len() == "job-20260101-000000".len(), "{job}");
        assert!(parse_job(&job).is_ok());
    }

    #[test]
    fn a_launch_while_the_workers_are_scaled_down_says_so_and_names_synth_resume() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(scaled_down_note(root.path(), 0), None);
        let path = node_contract::files::under(root.path(), node_contract::idle::SCALED_DOWN_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "stack=resnet idle since=0 until=600000 action=scale_workers acted=600000\n").unwrap();
        assert_eq!(
            scaled_down_note(root.path(), 660_000).as_deref(),
            Some(
                "warning: the idle guard scaled the workers to 0 1 min ago (idle since 11 min ago); run `synth resume \
                 resnet` where you run synth to bring them back; this job runs on the hosts that are left"
            )
        );
    }
}
