//! The boot steps a node takes before and beside its loops: shipping its
//! lines to CloudWatch Logs ([`start_shipping`]), mounting EFS
//! ([`mount_efs`]) and FSx for Lustre ([`mount_fsx`]), making the scratch
//! volume on the instance store ([`prepare_scratch`]), running a worker's
//! prepare-data script
//! ([`prepare_data`], with its log and its marker on EFS), and taking back
//! an interruption notice this boot was already given ([`restore_notice`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use node_contract::clock::Clock;
use node_contract::message::BootFailure;
use node_contract::{NodeConfig, Role};
use tracing::{debug, error, info, warn};

use crate::files;
use crate::identity::Identity;
use crate::interruption::Watcher;

/// Starts shipping this node's lines to its CloudWatch Logs stream
/// ([`crate::logs`]) as a task of its own that nothing waits for. Without a
/// log group in the config, or without a spool on disk, nothing is shipped
/// and the node forms all the same.
pub(super) fn start_shipping(
    root: &Path,
    config: &NodeConfig,
    me: &Identity,
    clients: &crate::aws::Clients,
    clock: Clock,
) {
    use crate::logs::{Shipper, Spool, spool, writer};
    let Some(logs) = &config.logs else {
        writer::discard();
        info!("the node config names no log group; this node's lines stay in its journal");
        return;
    };
    let dir = crate::logs::spool_dir(root);
    let spool = match Spool::open(&dir, spool::DEFAULT_CAP) {
        Ok(s) => std::sync::Arc::new(s),
        Err(e) => {
            writer::discard();
            warn!(dir = %dir.display(), "cannot open the log spool; this node's lines are not shipped: {e}");
            return;
        }
    };
    writer::attach(spool.clone());
    let streams = crate::aws::CloudWatchLogs::new(clients.logs.clone(), logs.group.clone());
    let mut shipper = Shipper::new(streams, spool, root, config.role, &me.instance_id, prepare_log(root), clock);
    let stream = shipper.stream();
    if !shipper.indexed() {
        info!(
            group = %logs.group,
            stream = %node_contract::logs::stream_name("worker<index>", &me.instance_id),
            "shipping this node's lines to CloudWatch Logs once the manifest gives it its index (to {stream} if it \
             warns first or has none within a minute)"
        );
    } else {
        info!(group = %logs.group, stream = %stream, "shipping this node's lines to CloudWatch Logs");
    }
    tokio::spawn(shipper.run());
}

/// Mounts EFS, retrying: the stack creates the mount targets in parallel
/// with the instances, so the first attempts may find none yet.
/// `mount`: mount it (off in containers and tests, where only the fstab
/// line is written).
pub(super) async fn mount_efs(root: &Path, config: &NodeConfig, mount: bool) -> anyhow::Result<()> {
    with_retries("EFS", || files::efs::mount(root, config, mount)).await
}

/// Mounts the FSx for Lustre file system when the config has one, after
/// EFS, with the same retries (the file system is AVAILABLE before the
/// launch templates exist, but its DNS name may take a moment to resolve).
/// An image without the Lustre client fails at once, saying what to use.
pub(super) async fn mount_fsx(root: &Path, config: &NodeConfig, mount: bool) -> anyhow::Result<()> {
    with_retries("FSx for Lustre", || files::fsx::mount(root, config, mount)).await
}

/// Runs `attempt` up to 30 times, 10 s apart, until it succeeds.
async fn with_retries(
    what: &str,
    mut attempt_mount: impl FnMut() -> Result<(), files::FilesError>,
) -> anyhow::Result<()> {
    const ATTEMPTS: u32 = 30;
    for attempt in 1..=ATTEMPTS {
        let result = tokio::task::block_in_place(&mut attempt_mount);
        match result {
            Ok(()) => return Ok(()),
            Err(e @ files::FilesError::CannotMount { .. }) => return Err(e).context(format!("mounting {what}")),
            // The mount point or the fstab line cannot be written: this
            // node's own disk (read-only, full), not the file system, is the problem.
            Err(e @ (files::FilesError::Write { .. } | files::FilesError::CreateDir { .. })) if attempt < ATTEMPTS => {
                error!(attempt, "cannot prepare the {what} mount on this node's disk, retrying in 10 s: {e}");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(e) if attempt < ATTEMPTS => {
                warn!(attempt, "cannot mount {what} yet, retrying in 10 s: {e}");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(e) => return Err(e).context(format!("mounting {what}")),
        }
    }
    Ok(())
}

/// Makes the scratch volume the node config asks for ([`crate::scratch`]),
/// on every node: after the EFS mount (before anything is put on it) and
/// again at the top of the node loop, before the node registers, where it
/// is a no-op once the volume is mounted. A node without instance store
/// goes without and says so; a volume that cannot be made on one that has
/// it is a [`BootFailure`] for the master, as a failed prepare-data script
/// is: the node loop reports it and tries again, and the node does not join
/// without its scratch.
pub(super) fn prepare_scratch(root: &Path, config: &NodeConfig, me: &Identity) -> Result<(), BootFailure> {
    use crate::scratch::{Outcome, Plan};
    use std::sync::atomic::{AtomicBool, Ordering};
    // "No instance store" is said once per start, not at every call.
    static SAID_ABSENT: AtomicBool = AtomicBool::new(false);
    let Some(scratch) = &config.scratch else { return Ok(()) };
    let prepared = tokio::task::block_in_place(|| {
        crate::scratch::prepare(root, scratch, &config.default_user, &crate::scratch::System)
    });
    match prepared {
        Ok((Outcome::Mounted { how }, Plan::AlreadyMounted { .. })) => {
            debug!(mount = %scratch.mount, "the scratch volume is mounted: {how}");
            Ok(())
        }
        Ok((Outcome::Mounted { how }, _)) => {
            info!(mount = %scratch.mount, "scratch volume mounted: {how}");
            Ok(())
        }
        Ok((Outcome::Absent { why }, _)) => {
            if !SAID_ABSENT.swap(true, Ordering::Relaxed) {
                info!(
                    instance_type = %me.instance_type,
                    "{why}; {} is not set", node_contract::data::SCRATCH_ENV
                );
            }
            Ok(())
        }
        Err(e) => {
            let what = format!("cannot make the scratch volume at {}", scratch.mount);
            let failure = BootFailure::new(&me.instance_id, &me.private_ip, &what, e.to_string().as_bytes());
            error!("{what}: {e}; this node will not join until it can");
            Err(failure)
        }
    }
}

/// Where a worker's prepare-data script writes its output (stdout and
/// stderr together), under the agent's root; each run starts it afresh.
fn prepare_log(root: &Path) -> PathBuf {
    root.join("var/log/deeplearning/prepare-data.log")
}

/// The prepare-data marker of the node at `ip` under `root`
/// (`node_contract::files::prepare_data`): a worker writes it when its
/// prepare-data script succeeded; the master admits it only then.
pub(super) fn prepare_marker(root: &Path, config: &NodeConfig, ip: &str) -> PathBuf {
    node_contract::files::under(root, node_contract::files::prepare_data::marker(&config.efs.mount, ip))
}

/// Runs the prepare-data script once per boot on a worker, before it
/// registers. Its output goes to [`prepare_log`]; when it fails, the last
/// lines of it are logged and returned as a [`BootFailure`] for the master.
pub(super) async fn prepare_data(config: &NodeConfig, root: &Path, me: &Identity) -> Result<(), BootFailure> {
    let Some(script) = &config.elastic.prepare_data_script else { return Ok(()) };
    if config.role == Role::Master {
        return Ok(());
    }
    let marker = prepare_marker(root, config, &me.private_ip);
    if marker.exists() {
        return Ok(());
    }
    let failure = |what: String, output: &[u8]| {
        let f = BootFailure::new(&me.instance_id, &me.private_ip, &what, output);
        warn!(
            script,
            last_lines = %f.last_lines.join("\n"),
            "{what}; this node will not join until it succeeds"
        );
        f
    };
    info!(script, "running the prepare-data script");
    let log = prepare_log(root);
    let command = || {
        let mut c = tokio::process::Command::new(script);
        c.env(node_contract::files::profile::EFS_MOUNT_VAR, &config.efs.mount)
            .env("DEEPLEARNING_NODE_IP", &me.private_ip);
        c.stdin(std::process::Stdio::null());
        c
    };
    // Into the log (stdout and stderr interleaved as written); when the log
    // cannot be opened (a read-only or full disk), the script still runs,
    // its output captured (stdout, then stderr).
    // A new file for each run (removed first, not truncated): the log
    // shipper reads a new inode from its start.
    let opened = log
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| match std::fs::remove_file(&log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .and_then(|()| std::fs::File::create(&log))
        .and_then(|file| Ok((file.try_clone()?, file)));
    let (status, output) = match opened {
        Ok((stdout, stderr)) => {
            let status = command().stdout(stdout).stderr(stderr).status().await;
            (status, read_tail(&log))
        }
        Err(e) => {
            warn!(log = %log.display(), "cannot write the prepare-data script's log; capturing its output instead: {e}");
            match command().output().await {
                Ok(out) => (Ok(out.status), [out.stdout, out.stderr].concat()),
                Err(e) => (Err(e), Vec::new()),
            }
        }
    };
    match status {
        Ok(s) if s.success() => match std::fs::write(&marker, b"") {
            Ok(()) => Ok(()),
            Err(e) => Err(failure(
                format!("the prepare-data script succeeded but its marker {} cannot be written: {e}", marker.display()),
                &output,
            )),
        },
        Ok(s) => Err(failure(format!("the prepare-data script {script} failed ({s})"), &output)),
        Err(e) => Err(failure(format!("the prepare-data script {script} could not be started: {e}"), &output)),
    }
}

/// The last bytes of a file (up to 64 KiB), or none when it cannot be read.
fn read_tail(path: &Path) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 * 1024;
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).is_ok() {
            let _ = file.take(TAIL).read_to_end(&mut bytes);
        }
    }
    bytes
}

/// The notice this boot was already given (the agent restarted after it):
/// the watcher does not act on it again and the node does not register.
/// A notice file of another boot or instance is stale and removed.
pub(super) fn restore_notice(root: &Path, me: &Identity) -> (Watcher, bool) {
    match files::notice::read(root) {
        Ok(Some(file)) if file.boot_id == me.boot_id && file.interruption.instance_id == me.instance_id => {
            warn!(
                notice = %file.interruption.describe(),
                "this node was given an interruption notice in this boot; it does not register again"
            );
            (Watcher::new(Some(file.interruption)), true)
        }
        Ok(None) => (Watcher::default(), false),
        stale => {
            match stale {
                Ok(_) => info!("removing the interruption notice file of an earlier boot"),
                Err(e) => warn!("removing an unusable interruption notice file: {e}"),
            }
            if let Err(e) = files::notice::remove(root) {
                warn!("cannot remove the old interruption notice file: {e}");
            }
            (Watcher::default(), false)
        }
    }
}

#[cfg(test)]
mod tests {
    use node_contract::interruption::from_instance_action;
    use node_contract::message;

    use super::*;

    fn me() -> Identity {
        Identity {
            instance_id: "i-1".into(),
            private_ip: "10.0.0.1".into(),
            hostname: "ip-10-0-0-1".into(),
            instance_type: "g5.xlarge".into(),
            availability_zone: "us-east-1a".into(),
            boot_id: "boot-now".into(),
            ssh_host_key: "ssh-ed25519 AAAA".into(),
            gpus: 0,
        }
    }

    fn file(instance_id: &str, boot_id: &str) -> files::notice::NoticeFile {
        let body = r#"{"action": "stop", "time": "2026-11-25T20:00:00Z"}"#;
        files::notice::NoticeFile {
            version: files::notice::NOTICE_FILE_VERSION,
            interruption: from_instance_action(instance_id, body).unwrap(),
            boot_id: boot_id.into(),
            noticed_unix_ms: 1,
        }
    }

    fn worker_config(root: &Path, script: &str) -> NodeConfig {
        let mut config = crate::cluster::testkit::config(1, true);
        config.role = Role::Worker;
        config.elastic.prepare_data_script = Some(root.join(script).to_string_lossy().into_owned());
        config
    }

    fn write_script(root: &Path, name: &str, body: &str) {
        let path = root.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }

    /// A failing script's output (stdout and stderr, in order) is in its log,
    /// and its last lines in the failure for the master; a script that
    /// succeeds writes the marker, and the next call does not run it again.
    #[tokio::test]
    async fn a_failing_prepare_data_script_reports_its_last_lines() {
        let root = tempfile::tempdir().unwrap();
        let lines: String = (1..=30).map(|i| format!("echo line {i}\n")).collect();
        write_script(root.path(), "fail.sh", &format!("#!/bin/sh\n{lines}echo 'oh no' >&2\nexit 3\n"));
        let config = worker_config(root.path(), "fail.sh");
        let failure = prepare_data(&config, root.path(), &me()).await.unwrap_err();
        assert_eq!((failure.instance_id.as_str(), failure.private_ip.as_str()), ("i-1", "10.0.0.1"));
        assert!(failure.what.contains("fail.sh failed (exit status: 3)"), "{}", failure.what);
        assert_eq!(failure.last_lines.len(), message::BOOT_FAILURE_LINES);
        assert_eq!(failure.last_lines.last().map(String::as_str), Some("oh no"));
        assert_eq!(failure.last_lines.first().map(String::as_str), Some("line 12"));
        let log = std::fs::read_to_string(prepare_log(root.path())).unwrap();
        assert!(log.starts_with("line 1\n") && log.ends_with("line 30\noh no\n"), "{log}");

        let missing = worker_config(root.path(), "missing.sh");
        let failure = prepare_data(&missing, root.path(), &me()).await.unwrap_err();
        assert!(failure.what.contains("could not be started"), "{}", failure.what);

        write_script(root.path(), "ok.sh", "#!/bin/sh\necho fine\n");
        std::fs::create_dir_all(root.path().join("efs")).unwrap();
        let ok = worker_config(root.path(), "ok.sh");
        assert_eq!(prepare_data(&ok, root.path(), &me()).await, Ok(()));
        assert!(prepare_marker(root.path(), &ok, "10.0.0.1").exists());
        // Once the marker is there, even a failing script is not run again.
        assert_eq!(prepare_data(&config, root.path(), &me()).await, Ok(()));
    }

    /// When the log cannot be written, the script still runs and its output
    /// is captured for the failure.
    #[tokio::test]
    async fn without_a_writable_log_the_output_is_captured() {
        let root = tempfile::tempdir().unwrap();
        // A file where the log's directory should be.
        std::fs::create_dir_all(root.path().join("var/log")).unwrap();
        std::fs::write(root.path().join("var/log/deeplearning"), "").unwrap();
        write_script(root.path(), "fail.sh", "#!/bin/sh\necho out\necho err >&2\nexit 1\n");
        let failure = prepare_data(&worker_config(root.path(), "fail.sh"), root.path(), &me()).await.unwrap_err();
        assert_eq!(failure.last_lines, vec!["out".to_string(), "err".to_string()]);
    }

    /// A restarted agent keeps this boot's notice (it does not register
    /// again, nor act twice) and removes one of an earlier boot (a stopped
    /// Spot instance started again rejoins), or one it cannot read.
    #[test]
    fn a_notice_of_this_boot_is_kept_and_a_stale_one_removed() {
        let root = tempfile::tempdir().unwrap();
        let (watcher, interrupted) = restore_notice(root.path(), &me());
        assert!(!interrupted && watcher.current().is_none());

        files::notice::write(root.path(), &file("i-1", "boot-now")).unwrap();
        let (watcher, interrupted) = restore_notice(root.path(), &me());
        assert!(interrupted);
        assert_eq!(watcher.current(), Some(&file("i-1", "boot-now").interruption));
        assert!(files::notice::read(root.path()).unwrap().is_some());

        for stale in [file("i-1", "boot-before"), file("i-other", "boot-now")] {
            files::notice::write(root.path(), &stale).unwrap();
            let (watcher, interrupted) = restore_notice(root.path(), &me());
            assert!(!interrupted && watcher.current().is_none());
            assert_eq!(files::notice::read(root.path()).unwrap(), None);
        }
        let path = root.path().join("var/lib/deeplearning/interruption.json");
        std::fs::write(&path, "not json").unwrap();
        assert!(!restore_notice(root.path(), &me()).1);
        assert!(!path.exists());
    }
}
