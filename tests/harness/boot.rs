//! A node that boots as an EC2 instance does: its user data (from its
//! metadata server, i.e. the launch template moto holds) runs as root,
//! downloads the agent package with the AWS CLI, checks its SHA-256,
//! installs it, and the installed agent starts.
//!
//! The node's "image" is this machine's own filesystem, read-only: in the
//! node's mount namespace `/usr`, `/etc` and the package manager's state
//! under `/var` (`lib/dpkg`, `lib/apt`, `lib/systemd`, `cache`, `log`) are
//! overlays whose writable layer is `ROOT/layer`, and `/tmp` and `/var/tmp`
//! are fresh tmpfs, so `apt-get install` and the package's scripts change
//! nothing outside the node (a `.venv` under `/tmp` stays visible). `aws`
//! is the AWS CLI in `.venv` ([`crate::venv::aws_cli_dir`]), put first on
//! `PATH` (the Deep Learning AMI has it in the image); it reaches the local
//! AWS through the node's `AWS_ENDPOINT_URL` and testing credentials, where
//! an instance would use its role.
//!
//! The user data runs as written up to its last step, which starts the unit
//! with `systemctl enable --now` and needs a booted systemd (not PID 1
//! here). That step is replaced by what the unit does: the installed
//! `/usr/bin/agent run`, with the config file the user data wrote, `--root`
//! the node's root and `--no-mount`, as the other end-to-end tests run it.
//! The boot logs whether the package enabled the unit. The user data's
//! output is also appended to `ROOT/var/log/cloud-init-output.log`, as
//! cloud-init does on EC2.

use crate::node::{AgentProcess, Node};
use crate::{Error, Result};

/// Where the user data's final step (start the agent's unit) begins, as
/// `node_contract::user_data_script` writes it.
const START_STEP: &str = "if systemctl cat ";

/// The script that boots a node (run by bash inside the node's namespaces).
/// Arguments: the layer directory, the node's root, the AWS CLI directory.
const BOOT_SCRIPT: &str = r#"set -eu
layer=$1 root=$2 aws_dir=$3
for dir in /usr /etc /var/lib/dpkg /var/lib/apt /var/lib/systemd /var/cache /var/log; do
  name=$(printf %s "$dir" | tr / _)
  mkdir -p "$layer/$name/upper" "$layer/$name/work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$layer/$name/upper,workdir=$layer/$name/work" "$dir"
done
# A checkout under /tmp (a clone made there) would lose its .venv, and with
# it `aws`, under the fresh /tmp: keep the venv visible at its own path.
cd /
venv=$(dirname "$aws_dir")
case $venv in /tmp/* | /var/tmp/*) mkdir -p "$layer/venv" && mount --bind "$venv" "$layer/venv" ;; esac
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/tmp
case $venv in /tmp/* | /var/tmp/*) mkdir -p "$venv" && mount --bind "$layer/venv" "$venv" ;; esac
# The overlay on /etc hides the node's own hosts and resolv.conf: mount them again.
mount --bind "$root/etc/hosts" /etc/hosts
mount --bind "$root/etc/resolv.conf" /etc/resolv.conf
echo "boot: running the user data"
# cloud-init keeps the user data's output in /var/log/cloud-init-output.log,
# which the agent ships to the node's log stream: so does this boot.
mkdir -p "$root/var/log"
set -o pipefail
PATH=$aws_dir:$PATH bash "$root/boot/user-data.sh" 2>&1 | tee -a "$root/var/log/cloud-init-output.log"
set +o pipefail
unit=/etc/systemd/system/multi-user.target.wants/deeplearning-agent.service
if [ -L "$unit" ]; then echo "boot: deeplearning-agent.service enabled"; else echo "boot: deeplearning-agent.service NOT enabled"; fi
echo "boot: starting the installed $(/usr/bin/agent --version)"
exec /usr/bin/agent run --config /etc/deeplearning/node.json --root "$root" --no-mount
"#;

impl Node {
    /// Boots the node from its user data (see the module doc); the boot's
    /// and then the agent's output go to `ROOT/boot-<n>.log`. Fails before
    /// starting anything when the node has no user data or the user data
    /// has no start step.
    pub fn boot(&self) -> Result<AgentProcess> {
        let user_data = self.imds().identity().user_data.ok_or_else(|| Error::Unexpected {
            what: format!("node {}", self.instance_id()),
            detail: "no user data to boot from".into(),
        })?;
        let start = user_data.find(START_STEP).ok_or_else(|| Error::Unexpected {
            what: format!("user data of {}", self.instance_id()),
            detail: format!("no `{START_STEP}` step:\n{user_data}"),
        })?;
        let dir = self.root().join("boot");
        std::fs::create_dir_all(&dir).map_err(Error::io("creating the boot directory", &dir))?;
        let script = dir.join("user-data.sh");
        std::fs::write(&script, &user_data[..start]).map_err(Error::io("writing the user data", &script))?;
        let boot = dir.join("boot.sh");
        std::fs::write(&boot, BOOT_SCRIPT).map_err(Error::io("writing the boot script", &boot))?;
        let aws_dir = crate::venv::aws_cli_dir()?;
        let mut command = self.command("bash");
        command.arg(&boot).arg(self.root().join("layer")).arg(self.root()).arg(aws_dir);
        command.env("AGENT_LOG", std::env::var("AGENT_LOG").unwrap_or_else(|_| "info,agent=debug".into()));
        self.spawn_logged(command, "boot")
    }
}
