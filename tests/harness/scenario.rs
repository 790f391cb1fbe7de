//! What the scenario and fault tests share: reading what an agent wrote
//! under a node's root, waiting for a condition, editing the node config a
//! node's metadata serves, an EFS directory shared by every node, and
//! mounts that are undone on drop (also when the test panics).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::node::{AgentProcess, Node};
use crate::{Error, Result};

/// Where shared directories are made (root-owned, 0755, like node roots).
const SHARED_DIR: &str = "/var/lib/dl-e2e";

/// The text of `path` (absolute, as on the node) under `root`, or "".
pub fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(node_contract::files::under(root, path)).unwrap_or_default()
}

/// The lines between the `# BEGIN deeplearning-cluster` and `# END ...` markers.
pub fn managed_block(text: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("# BEGIN deeplearning-cluster") {
            inside = true;
        } else if line.starts_with("# END deeplearning-cluster") {
            inside = false;
        } else if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The node's state file (`/var/lib/deeplearning/state.json`), if written.
pub fn state(root: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&read(root, "/var/lib/deeplearning/state.json")).ok()
}

/// The generation the node applied and its manifest's instance ids.
pub fn applied(root: &Path) -> Option<(u64, Vec<String>)> {
    let s = state(root)?;
    let ids = s["manifest"]["nodes"].as_array()?.iter().filter_map(|n| n["instance_id"].as_str()).map(String::from);
    Some((s["generation"].as_u64()?, ids.collect()))
}

/// The manifest's nodes as `(index, instance id)`, from the node's state file.
pub fn applied_indices(root: &Path) -> Vec<(u64, String)> {
    let Some(s) = state(root) else { return Vec::new() };
    s["manifest"]["nodes"]
        .as_array()
        .map(|nodes| {
            nodes.iter().filter_map(|n| Some((n["index"].as_u64()?, n["instance_id"].as_str()?.to_string()))).collect()
        })
        .unwrap_or_default()
}

/// Polls `done` every 100 ms until it holds; fails after `timeout` with
/// `what` and the logs of `agents`. Returns how long it took.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    agents: &[&AgentProcess],
    mut done: impl FnMut() -> bool,
) -> Result<Duration> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > timeout {
            return Err(Error::Timeout {
                what: format!("{what}\n\nagent logs:\n{}", logs(agents)),
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(start.elapsed())
}

/// `text` without terminal colour codes (the agent's log has them).
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte (a letter).
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every agent's log, separated, for failure messages.
pub fn logs(agents: &[&AgentProcess]) -> String {
    agents
        .iter()
        .map(|a| format!("--- {} ---\n{}", a.log_path().display(), plain(&a.log())))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Rewrites the node config in the user data `node`'s metadata serves
/// (`edit` gets the JSON object), before its agent starts.
pub fn edit_node_config(node: &Node, edit: impl FnOnce(&mut serde_json::Value)) -> Result<()> {
    let script =
        node.imds().identity().user_data.ok_or_else(|| Error::Setup(format!("node {} has no user data", node.ip())))?;
    let old = node_contract::config_from_user_data(&script)
        .map_err(|e| Error::Unexpected { what: format!("user data of {}", node.ip()), detail: e.to_string() })?
        .to_string();
    let mut config: serde_json::Value = serde_json::from_str(&old)
        .map_err(|e| Error::Unexpected { what: format!("node config of {}", node.ip()), detail: e.to_string() })?;
    edit(&mut config);
    node.imds().set_user_data(Some(script.replace(&old, &config.to_string())));
    Ok(())
}

/// A directory every node sees as its EFS mount: `<root>/efs` is a
/// symlink to it on each node linked, as a real EFS mount gives every node
/// the same files. Removed on drop (the links go with the node roots).
pub struct SharedEfs {
    dir: tempfile::TempDir,
}

impl SharedEfs {
    /// A new, empty shared directory.
    pub fn new() -> Result<SharedEfs> {
        std::fs::create_dir_all(SHARED_DIR).map_err(Error::io("creating a directory", SHARED_DIR))?;
        let dir = tempfile::Builder::new()
            .prefix("efs-")
            .tempdir_in(SHARED_DIR)
            .map_err(Error::io("creating the shared EFS directory", SHARED_DIR))?;
        Ok(SharedEfs { dir })
    }

    /// The directory on the host.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes `<root>/efs` of `node` this directory (before its agent starts).
    pub fn link(&self, node: &Node) -> Result<()> {
        let link = node.root().join("efs");
        std::os::unix::fs::symlink(self.dir.path(), &link).map_err(Error::io("linking the shared EFS", &link))
    }

    /// Writes `body` as an executable `prepare-data.sh` in this directory
    /// and gives it to `nodes` ([`SharedEfs::link_with_script`]); returns
    /// the script's path.
    pub fn prepare_data_script_for(&self, nodes: &[Node], body: &str) -> Result<String> {
        let script = self.dir.path().join("prepare-data.sh");
        std::fs::write(&script, body).map_err(Error::io("writing the prepare-data script", &script))?;
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(Error::io("making the prepare-data script executable", &script))?;
        let script = script.to_string_lossy().into_owned();
        for node in nodes {
            self.link_with_script(node, &script)?;
        }
        Ok(script)
    }

    /// Links this directory as `node`'s EFS and makes `script` its
    /// `elastic.prepare_data_script` (before its agent starts).
    pub fn link_with_script(&self, node: &Node, script: &str) -> Result<()> {
        self.link(node)?;
        edit_node_config(node, |c| c["elastic"]["prepare_data_script"] = script.into())
    }
}

/// A file system mounted by a test; unmounted on drop.
pub struct Mount {
    target: PathBuf,
}

impl Mount {
    /// `mount -t tmpfs -o OPTIONS tmpfs TARGET` (TARGET is created first).
    pub fn tmpfs(target: &Path, options: &str) -> Result<Mount> {
        std::fs::create_dir_all(target).map_err(Error::io("creating a mount point", target))?;
        let target_text = target.to_string_lossy();
        crate::netns::run("mount", &["-t", "tmpfs", "-o", options, "tmpfs", &target_text])?;
        Ok(Mount { target: target.to_owned() })
    }

    /// Where it is mounted.
    pub fn target(&self) -> &Path {
        &self.target
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazy: a process that still has a file open there must not keep the mount.
        let _ = Command::new("umount").arg("-l").arg(&self.target).output();
    }
}

/// The worker group's desired capacity, as Auto Scaling reports it.
pub async fn desired_capacity(aws: &crate::LocalAws, group: &str) -> Result<i32> {
    aws.auto_scaling_group(group)
        .await?
        .desired_capacity()
        .ok_or_else(|| Error::Unexpected { what: format!("group {group}"), detail: "no desired capacity".into() })
}

/// Sends `body` to the queue at `url`.
pub async fn send(aws: &crate::LocalAws, url: &str, body: &str) -> Result<()> {
    send_with(&aws.sqs(), url, body).await
}

async fn send_with(sqs: &aws_sdk_sqs::Client, url: &str, body: &str) -> Result<()> {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .map_err(|e| Error::aws(format!("SendMessage {url}"), &e))?;
    Ok(())
}

/// Sends `body` to the master queue of `stack` as Auto Scaling sends a
/// lifecycle notification there: with the credentials of the stack's
/// `LifecycleHookRole`, assumed as `autoscaling.amazonaws.com` (the only
/// principal its trust policy names), so the role's policy is what allows it.
pub async fn send_as_auto_scaling(aws: &crate::LocalAws, stack: &crate::ClusterStack, body: &str) -> Result<()> {
    let role_arn = format!("arn:aws:iam::{}:role/{}", crate::moto::ACCOUNT, stack.resource("LifecycleHookRole")?);
    let who = crate::moto::AssumedBy::Service { service: "autoscaling.amazonaws.com", role_arn: &role_arn };
    let credentials = aws.service_credentials(&who, 900)?;
    let url = stack.resource("MasterQueue")?;
    send_with(&aws_sdk_sqs::Client::new(&aws.sdk_config_as(&credentials)), url, body).await
}

/// The notification Auto Scaling sends to the master queue (the group's
/// `worker-terminating` lifecycle hook target) when `instance_id` of
/// `group` is about to terminate, with lifecycle action token `token`.
pub fn termination_notification(group: &str, instance_id: &str, token: &str) -> String {
    serde_json::json!({
        "Origin": "AutoScalingGroup",
        "Destination": "EC2",
        "Service": "AWS Auto Scaling",
        "Time": "2025-01-01T00:00:00.000Z",
        "AccountId": "123456789012",
        "LifecycleHookName": "worker-terminating",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        "RequestId": "5ef2e6f0-4b6c-4f29-9e5e-2a2b2d8c1f11",
        "AutoScalingGroupName": group,
        "EC2InstanceId": instance_id,
        "LifecycleActionToken": token,
    })
    .to_string()
}

/// The master's host log line of generation 2, which must be the one
/// `REMOVED <ip> <unix-nanos>` line of that generation (asserted); returns
/// the words after the time (the reason, when the line has one).
pub fn removal_reason(master_root: &Path, ip: &str) -> String {
    let log = read(master_root, "/efs/deeplearning/hosts.log");
    let removed: Vec<&str> = log.lines().filter(|l| l.starts_with("2 ")).collect();
    assert_eq!(removed.len(), 1, "{log}");
    let fields: Vec<&str> = removed[0].split(' ').collect();
    assert_eq!(fields[..3], ["2", "REMOVED", ip], "{log}");
    assert!(fields[3].parse::<u128>().is_ok(), "{log}");
    fields[4..].join(" ")
}
