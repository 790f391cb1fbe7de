//! `trainer supervise` (the remote half of `trainer launch`, one per rank)
//! and interruption notices, with real processes and real signals: a
//! PyTorch-style script that traps SIGTERM runs under the supervisor; the
//! agent's notice file appears under the supervisor's root (as the agent
//! writes it when EC2 gives the host a Spot instance action); the script
//! gets SIGTERM within about a second, finds the deadline through
//! `DEEPLEARNING_INTERRUPTION_FILE`, saves a "checkpoint" and exits; a
//! script that ignores SIGTERM is killed only shortly before the deadline;
//! a rank started while the notice is there has the deadline in its
//! environment, and its SIGTERM 10 s later. And `trainer train` started
//! as `trainer launch` starts it ignores SIGTERM only while there is a
//! notice, and a rank (not rank 0) whose host gets a notice leaves at its
//! next step while rank 0 runs the rest of the epoch without a redo.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use node_contract::interruption::{NOTICE_FILE_VERSION, NoticeFile, format_utc, from_instance_action};
use trainer::train::checkpoint::load;

/// What the script does: print where the notice file is, then wait; on
/// SIGTERM read the deadline from that file, print it, save a checkpoint.
const SCRIPT: &str = r#"
import json, os, signal, sys, time
path = os.environ["DEEPLEARNING_INTERRUPTION_FILE"]
print("start", path, os.environ.get("DEEPLEARNING_INTERRUPTION_DEADLINE", "-"),
      os.environ.get("DEEPLEARNING_INTERRUPTION_SECONDS_LEFT", "-"), flush=True)
def on_term(signum, frame):
    notice = json.load(open(os.environ["DEEPLEARNING_INTERRUPTION_FILE"]))["interruption"]
    left = notice.get("deadline_unix", int(time.time())) - int(time.time())
    print("sigterm", notice["time"], left, flush=True)
    if sys.argv[1] == "ignore":
        return
    with open(sys.argv[2], "w") as f:
        f.write("step 42\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.1)
"#;

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_owned()
}

/// Writes a Spot instance action's notice file under `root` as the agent does.
fn give_notice(root: &Path, deadline: u64) {
    let body = format!(r#"{{"action": "terminate", "time": "{}"}}"#, format_utc(deadline));
    write_notice(root, from_instance_action("i-1", &body).unwrap());
}

/// Writes the notice file of `interruption` under `root` as the agent does (atomically).
fn write_notice(root: &Path, interruption: node_contract::interruption::Interruption) {
    let file = NoticeFile {
        version: NOTICE_FILE_VERSION,
        interruption,
        boot_id: boot_id(),
        noticed_unix_ms: unix_now() * 1000,
    };
    let dir = root.join("var/lib/deeplearning");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("interruption.json.tmp"), file.to_text()).unwrap();
    std::fs::rename(dir.join("interruption.json.tmp"), dir.join("interruption.json")).unwrap();
}

/// `trainer supervise` running the script (stdin kept open: the launcher's
/// ssh session), and its stdout lines.
fn supervise(root: &Path, mode: &str, checkpoint: &Path) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["supervise", "--job", "notice", "--rank", "0", "--local-rank", "0", "--world-size", "1"])
        .args(["--local-world-size", "1", "--group-rank", "0", "--master-addr", "127.0.0.1"])
        .args(["--master-port", "29500", "--host", "localhost", "--root"])
        .arg(root)
        .args(["--", "python3", "-c", SCRIPT, mode])
        .arg(checkpoint)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stdout_lines(&mut child);
    (child, rx)
}

/// The child's stdout lines, as they come, on a channel.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

fn next_line(rx: &mpsc::Receiver<String>, within: Duration) -> String {
    rx.recv_timeout(within).unwrap_or_else(|e| panic!("no line within {within:?}: {e}"))
}

fn wait(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The supervisor ended as a stopped command does (128 + SIGTERM) once the
/// script saved its checkpoint; its stderr.
fn stopped_after_saving(child: &mut Child, checkpoint: &Path) -> String {
    let status = wait(child, Duration::from_secs(10)).expect("the supervisor ends once the script exits");
    assert_eq!(status.code(), Some(143), "128 + SIGTERM: stopped, not finished");
    assert_eq!(std::fs::read_to_string(checkpoint).unwrap(), "step 42\n");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    stderr
}

#[test]
fn a_notice_sends_sigterm_and_the_script_finds_the_deadline() {
    let root = tempfile::tempdir().unwrap();
    let checkpoint = root.path().join("checkpoint");
    let (mut child, lines) = supervise(root.path(), "save", &checkpoint);
    let start = next_line(&lines, Duration::from_secs(20));
    let file = root.path().join("var/lib/deeplearning/interruption.json");
    assert_eq!(start, format!("start {} - -", file.display()));
    // Nothing happens without a notice.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none());
    assert!(lines.try_recv().is_err());

    let deadline = unix_now() + 120;
    let noticed = Instant::now();
    give_notice(root.path(), deadline);
    let line = next_line(&lines, Duration::from_secs(5));
    assert!(noticed.elapsed() < Duration::from_secs(3), "SIGTERM came {:?} after the notice", noticed.elapsed());
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[..2], ["sigterm", format_utc(deadline).as_str()], "{line}");
    let left: u64 = fields[2].parse().unwrap();
    assert!((110..=120).contains(&left), "{line}");
    let stderr = stopped_after_saving(&mut child, &checkpoint);
    assert!(
        stderr.contains("this host was given an interruption notice (spot-instance-action terminate at"),
        "{stderr}"
    );
}

/// The agent's GPU watch raises a notice of its own (kind `gpu_fault`, no
/// deadline, the fault in `detail`): the rank is stopped as on EC2's
/// notices, and the supervisor's line names the fault.
#[test]
fn a_gpu_fault_notice_stops_the_rank_and_names_the_fault() {
    let root = tempfile::tempdir().unwrap();
    let checkpoint = root.path().join("checkpoint");
    let (mut child, lines) = supervise(root.path(), "save", &checkpoint);
    next_line(&lines, Duration::from_secs(20));
    write_notice(
        root.path(),
        node_contract::interruption::Interruption {
            instance_id: "i-1".into(),
            notice: node_contract::interruption::NoticeKind::GpuFault,
            action: None,
            time: format_utc(unix_now()),
            deadline_unix: None,
            detail: Some("xid on GPU 3: XID 79 (GPU has fallen off the bus)".into()),
        },
    );
    let line = next_line(&lines, Duration::from_secs(5));
    assert!(line.starts_with("sigterm "), "{line}");
    let stderr = stopped_after_saving(&mut child, &checkpoint);
    assert!(
        stderr.contains("this host was given an interruption notice (gpu-fault at")
            && stderr.contains(": xid on GPU 3: XID 79 (GPU has fallen off the bus))"),
        "{stderr}"
    );
}

#[test]
fn a_script_that_ignores_sigterm_is_killed_just_before_the_deadline() {
    let root = tempfile::tempdir().unwrap();
    let checkpoint = root.path().join("checkpoint");
    let (mut child, lines) = supervise(root.path(), "ignore", &checkpoint);
    next_line(&lines, Duration::from_secs(20));
    // 9 s ahead: SIGKILL 5 s before it, so about 4 s after SIGTERM.
    let deadline = unix_now() + 9;
    let noticed = Instant::now();
    give_notice(root.path(), deadline);
    let line = next_line(&lines, Duration::from_secs(5));
    assert!(line.starts_with("sigterm "), "{line}");
    let status = wait(&mut child, Duration::from_secs(15)).expect("killed before the deadline");
    let took = noticed.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(8), "killed {took:?} after the notice");
    assert!(unix_now() <= deadline, "killed after the deadline");
    assert_eq!(status.code(), Some(143));
    assert!(!checkpoint.exists());
}

#[test]
fn a_rank_started_after_the_notice_has_the_deadline_in_its_environment() {
    let root = tempfile::tempdir().unwrap();
    let deadline = unix_now() + 100;
    give_notice(root.path(), deadline);
    let checkpoint = root.path().join("checkpoint");
    let (mut child, lines) = supervise(root.path(), "save", &checkpoint);
    let start = next_line(&lines, Duration::from_secs(20));
    let fields: Vec<&str> = start.split(' ').collect();
    assert_eq!(fields[2], format_utc(deadline), "{start}");
    let left: u64 = fields[3].parse().unwrap();
    assert!((90..=100).contains(&left), "{start}");
    // SIGTERM follows 10 s after the start (time to set a handler).
    let line = next_line(&lines, Duration::from_secs(20));
    assert!(line.starts_with(&format!("sigterm {} ", format_utc(deadline))), "{line}");
    assert!(wait(&mut child, Duration::from_secs(10)).is_some());
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), "step 42\n");
}

/// MNIST-shaped idx files of `train` and `test` synthetic digits under `dir`.
fn write_digits(dir: &Path, train: u32, test: u32) {
    let idx = |magic: u32, dims: &[u32], payload: &[u8]| {
        let mut v = magic.to_be_bytes().to_vec();
        dims.iter().for_each(|d| v.extend_from_slice(&d.to_be_bytes()));
        v.extend_from_slice(payload);
        v
    };
    for (split, n) in [("train", train), ("t10k", test)] {
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        let pixels: Vec<u8> =
            (0..n * 784).map(|i| if (i % 784) / 78 == (i / 784) % 10 { 200 } else { (i * 37 % 50) as u8 }).collect();
        std::fs::write(dir.join(format!("{split}-images-idx3-ubyte")), idx(0x803, &[n, 28, 28], &pixels)).unwrap();
        std::fs::write(dir.join(format!("{split}-labels-idx1-ubyte")), idx(0x801, &[n], &labels)).unwrap();
    }
}

/// The agent's node config and state file under `root`: one node (this
/// one, the master, on 127.0.0.1).
fn write_state(root: &Path) {
    write_cluster_state(root, 1, 1);
}

/// The agent's node config and state file under `root` for node `me` of a
/// cluster of `nodes` nodes, all on 127.0.0.1 (node 1 is the master).
fn write_cluster_state(root: &Path, me: u32, nodes: u32) {
    let config = serde_json::json!({"version": node_contract::NODE_CONFIG_VERSION, "cluster": "t",
        "stack_id": "arn:aws:cloudformation:us-east-1:123456789012:stack/t/1", "stack_name": "t",
        "region": "us-east-1", "role": "master", "queues": {"master": "https://sqs/m", "workers": "https://sqs/w"},
        "worker_group": "t-workers", "efs": {"file_system_id": "fs-12345678", "mount": "/efs"},
        "default_user": "ubuntu", "formation_timeout_seconds": 1800, "elastic": {},
        "signals": {"master_resource": "MasterInstance", "formation_handle_url": "https://handle"}});
    std::fs::create_dir_all(root.join("etc/deeplearning")).unwrap();
    std::fs::write(root.join("etc/deeplearning/node.json"), config.to_string()).unwrap();
    let nodes: Vec<_> = (1..=nodes)
        .map(|i| {
            serde_json::json!({"index": i, "alias": format!("deeplearning-worker{i}"), "instance_id": format!("i-{i}"),
                "private_ip": "127.0.0.1", "hostname": format!("ip-{i}"), "gpus": 0, "ssh_host_key": "k"})
        })
        .collect();
    let s = serde_json::json!({"version": 1, "instance_id": format!("i-{me}"), "generation": 1,
        "manifest": {"cluster": "t", "generation": 1, "master": "i-1", "nodes": nodes, "cluster_public_key": "k"}});
    let dir = root.join("var/lib/deeplearning");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("state.json"), s.to_string()).unwrap();
}

/// `trainer train` as `trainer launch` starts it (rank 0 of 1: it hosts
/// the rendezvous), for many epochs, and its stdout lines.
fn train_rank(root: &Path) -> (Child, mpsc::Receiver<String>) {
    let data = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    write_digits(&data, 2000, 100);
    write_state(root);
    let port = free_port();
    spawn_rank(&["--epochs", "100000"], &data, &root.join("checkpoints"), root, (0, 1), port)
}

/// A port free on every address (the rendezvous listens on 0.0.0.0) and not
/// handed to another test of this binary: they run at the same time, and the
/// kernel may hand a port it just gave one of them to the next.
fn free_port() -> u16 {
    static HANDED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed = HANDED.lock().unwrap();
    loop {
        let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
        if !handed.contains(&port) {
            handed.push(port);
            return port;
        }
    }
}

/// `trainer train --model mlp --threads 1 ARGS` on `data` as `trainer
/// launch` starts rank `rank.0` of `rank.1` (the rendezvous on
/// 127.0.0.1:`port`), with `root` as its node's root and its stderr in
/// `root/train.log`; and its stdout lines.
fn spawn_rank(
    args: &[&str],
    data: &Path,
    checkpoints: &Path,
    root: &Path,
    (rank, world): (u32, u32),
    port: u16,
) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["train", "--model", "mlp", "--threads", "1"])
        .args(args)
        .arg("--data")
        .arg(data)
        .arg("--checkpoint-dir")
        .arg(checkpoints)
        .arg("--root")
        .arg(root)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(root.join("train.log")).unwrap())
        .spawn()
        .unwrap();
    let rx = stdout_lines(&mut child);
    (child, rx)
}

/// A launched `trainer train` rank ignores SIGTERM while its host has a
/// notice (a rank other than 0 leaves at its next step; its supervisor's
/// SIGKILL bounds it), and ends by SIGTERM without one.
#[test]
fn trainer_train_ignores_sigterm_only_while_its_host_has_a_notice() {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: kill takes plain integers.
    let term = |child: &Child| unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };

    let root = tempfile::tempdir().unwrap();
    let (mut child, lines) = train_rank(root.path());
    let log = |root: &tempfile::TempDir| std::fs::read_to_string(root.path().join("train.log")).unwrap_or_default();
    let first = lines.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}: {}", log(&root)));
    assert!(first.starts_with("epoch 1/100000 "), "{first}");
    term(&child);
    let status = wait(&mut child, Duration::from_secs(5)).expect("SIGTERM without a notice ends it");
    assert_eq!(status.signal(), Some(15), "{status:?}");

    let root = tempfile::tempdir().unwrap();
    let (mut child, lines) = train_rank(root.path());
    let first = lines.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}: {}", log(&root)));
    assert!(first.starts_with("epoch 1/100000 "), "{first}");
    give_notice(root.path(), unix_now() + 120);
    term(&child);
    std::thread::sleep(Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "SIGTERM with a notice ended it");
    while lines.try_recv().is_ok() {}
    let later = next_line(&lines, Duration::from_secs(10));
    assert!(later.starts_with("epoch "), "it trains on after the SIGTERM: {later}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Two `trainer train` ranks as `trainer launch` starts them, each under
/// its own node's root (rank 0 on the master hosts the rendezvous). Rank
/// 1's host is given a notice mid-epoch: rank 1 leaves at its next step
/// (exit 0, long before the deadline), rank 0 writes a checkpoint there and
/// runs the rest of the same epoch alone, with no epoch redone, to the end
/// of the run. Resumed from that checkpoint, alone or launched, a run ends
/// epoch 2 with exactly the elastic run's state.
#[test]
fn a_launched_rank_whose_host_has_a_notice_leaves_at_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    write_digits(&data, 2000, 100);
    let port = free_port();
    let start = |rank: u32| {
        let root = dir.path().join(format!("node{}", rank + 1));
        write_cluster_state(&root, rank + 1, 2);
        let args = ["--epochs", "3", "--batch-size", "8"];
        let (child, rx) = spawn_rank(&args, &data, &dir.path().join("checkpoints"), &root, (rank, 2), port);
        (child, rx, root)
    };
    let (mut rank0, lines0, root0) = start(0);
    let (mut rank1, _lines1, root1) = start(1);
    let log = |root: &Path| std::fs::read_to_string(root.join("train.log")).unwrap_or_default();
    let first = lines0.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}: {}", log(&root0)));
    assert!(first.starts_with("epoch 1/3 "), "{first}");
    let deadline = unix_now() + 120;
    give_notice(&root1, deadline);
    let noticed = Instant::now();
    let status = wait(&mut rank1, Duration::from_secs(30)).unwrap_or_else(|| panic!("rank 1 stayed: {}", log(&root1)));
    let left = noticed.elapsed();
    assert_eq!(status.code(), Some(0), "{}", log(&root1));
    assert!(
        log(&root1).contains("this node left the job (its host was given an interruption notice)"),
        "{}",
        log(&root1)
    );
    assert!(unix_now() < deadline);
    let status =
        wait(&mut rank0, Duration::from_secs(120)).unwrap_or_else(|| panic!("rank 0 did not end: {}", log(&root0)));
    let log0 = log(&root0);
    assert_eq!(status.code(), Some(0), "{log0}");
    let lines: Vec<String> = std::iter::once(first).chain(lines0.try_iter()).collect();
    assert_eq!(lines.len(), 3, "one line per epoch, none twice: {lines:?}");
    let resumed = log0.lines().find(|l| l.contains("rank(s); continuing epoch ")).unwrap_or_else(|| panic!("{log0}"));
    assert!(resumed.contains(": 1 rank(s); continuing epoch 2 at step "), "{log0}");
    assert!(!log0.contains("redoing"), "{log0}");
    println!("rank 1 left {left:?} after its host's notice; rank 0: {resumed}");

    // Rank 0 wrote a checkpoint where rank 1 left; a run resumed from it
    // goes on at the next step with the same samples: its state after
    // epoch 2 is bit for bit the elastic run's (one rank from there in both).
    let saved = log0.lines().find(|l| l.contains("a rank is leaving after step")).unwrap_or_else(|| panic!("{log0}"));
    let path = Path::new(saved.split("; checkpoint ").nth(1).unwrap_or_else(|| panic!("{saved}")));
    let mid = load(path).unwrap();
    assert_eq!(mid.state.epoch, 1, "{saved}");
    assert!(
        mid.in_epoch.step > 0 && saved.contains(&format!("after step {} of epoch 2", mid.in_epoch.step)),
        "{saved}"
    );
    let again = dir.path().join("resumed");
    std::fs::create_dir_all(&again).unwrap();
    std::fs::copy(path, again.join(path.file_name().unwrap())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        // The same --epochs: the learning-rate schedule depends on it.
        .args(["train", "--model", "mlp", "--epochs", "3", "--batch-size", "8", "--threads", "1", "--resume"])
        .arg("--data")
        .arg(&data)
        .arg("--checkpoint-dir")
        .arg(&again)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("resuming at step {} of epoch 2", mid.in_epoch.step + 1)), "{stderr}");
    let epochs: Vec<&str> = stdout.lines().filter_map(|l| l.split(" loss").next()).collect();
    assert_eq!(epochs, ["epoch 2/3", "epoch 3/3"], "{stdout}");
    // (Epoch 3 is shuffled by each run's own membership generation: not compared.)
    let name = "checkpoint-epoch-000002.ckpt";
    let elastic = load(&dir.path().join("checkpoints").join(name)).unwrap();
    let resumed = load(&again.join(name)).unwrap();
    assert!(resumed.state == elastic.state, "{name}: the resumed run differs from the elastic run");

    // Resumed as `trainer launch` starts rank 0: the position travels with
    // the state's broadcast to the first group; the same generation as the
    // elastic run's, so epoch 3 is the same too.
    let launched = dir.path().join("launched");
    std::fs::create_dir_all(&launched).unwrap();
    std::fs::copy(path, launched.join(path.file_name().unwrap())).unwrap();
    let port = free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["train", "--model", "mlp", "--epochs", "3", "--batch-size", "8", "--threads", "1", "--resume"])
        .arg("--data")
        .arg(&data)
        .arg("--checkpoint-dir")
        .arg(&launched)
        .arg("--root")
        .arg(&root0)
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("LOCAL_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let want = format!(": 1 rank(s); continuing epoch 2 at step {}", mid.in_epoch.step + 1);
    assert!(stderr.contains(&want), "{stderr}");
    for name in ["checkpoint-epoch-000002.ckpt", "checkpoint-epoch-000003.ckpt"] {
        let elastic = load(&dir.path().join("checkpoints").join(name)).unwrap();
        let resumed = load(&launched.join(name)).unwrap();
        assert!(resumed.state == elastic.state, "{name}: the launched resume differs from the elastic run");
    }
}
