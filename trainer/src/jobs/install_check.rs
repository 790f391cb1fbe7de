//! `trainer doctor --local`: checks this host's install, with no SSH and no
//! cluster, so an image build (EC2 Image Builder's test phase, or whoever
//! bakes an AMI by hand) can tell a complete image from a broken one.
//!
//! Inputs, all under the filesystem root (`--root`, `/` on a node): the
//! `agent` binary (beside this `trainer`, else `/usr/bin/agent`), the agent's
//! systemd unit in the unit directories, the `ssh` client on `PATH` (what
//! `trainer launch` runs), `/proc/driver/nvidia/gpus`, and the agent's state
//! and profile files. It writes nothing.
//!
//! What fails the check (exit 1) is what would break every cluster booted
//! from the image: an agent that does not run, no unit to start it, no ssh
//! client. What is only reported: GPUs (an image is often built on a CPU
//! instance) and the agent's state (an image has no cluster yet).

use std::path::{Path, PathBuf};
use std::process::Command;

use node_contract::AGENT_UNIT;
use node_contract::state::STATE_PATH;

use crate::exit::{EXIT_FAILED, EXIT_OK};
use crate::jobs::doctor::{gpu_count, nccl_check};
use node_contract::files::under;

/// Where systemd looks for units, most specific first; Debian packages put
/// theirs in `/lib/systemd/system` (`/usr/lib/...` after the usr merge).
const UNIT_DIRS: [&str; 3] = ["/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"];

/// One line of the report.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Check {
    /// What was checked.
    pub name: &'static str,
    /// `Ok(detail)` or `Err(what is wrong and what to do)`.
    pub outcome: Result<String, String>,
    /// Whether a failure fails the image.
    pub required: bool,
}

/// The agent binary: beside the running `trainer` (both come in one
/// package), else `/usr/bin/agent` under `root`.
fn agent_binary(root: &Path) -> PathBuf {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join("agent")));
    match beside {
        Some(path) if root == Path::new("/") && path.is_file() => path,
        _ => under(root, "/usr/bin/agent"),
    }
}

/// `agent --version` runs and names itself.
fn agent_runs(agent: &Path) -> Result<String, String> {
    let output = Command::new(agent).arg("--version").output().map_err(|e| {
        format!("cannot run {}: {e}; install the deeplearning-agent package (see the README)", agent.display())
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() && stdout.starts_with("agent ") {
        Ok(stdout)
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "{} --version failed ({}): {}; reinstall the deeplearning-agent package",
            agent.display(),
            output.status,
            stderr.lines().last().unwrap_or("no output")
        ))
    }
}

/// The agent's unit file is installed where systemd finds it.
fn unit_installed(root: &Path) -> Result<String, String> {
    UNIT_DIRS
        .iter()
        .map(|dir| under(root, format!("{dir}/{AGENT_UNIT}")))
        .find(|path| path.is_file())
        .map(|path| path.display().to_string())
        .ok_or_else(|| {
            format!(
                "no {AGENT_UNIT} in {}: install the deeplearning-agent package, which ships it",
                UNIT_DIRS.join(", ")
            )
        })
}

/// An `ssh` client on `PATH`: `trainer launch` and `trainer doctor` run it.
fn ssh_client() -> Result<String, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("ssh"))
        .find(|candidate| candidate.is_file())
        .map(|found| found.display().to_string())
        .ok_or_else(|| "no `ssh` on PATH: install openssh-client (trainer launch runs ssh)".to_owned())
}

/// Every check, in report order.
pub(crate) fn checks(root: &Path) -> Vec<Check> {
    let gpus = gpu_count(root);
    let state = under(root, STATE_PATH);
    vec![
        Check { name: "agent", outcome: agent_runs(&agent_binary(root)), required: true },
        Check { name: "agent unit", outcome: unit_installed(root), required: true },
        Check { name: "ssh client", outcome: ssh_client(), required: true },
        Check { name: "gpus", outcome: Ok(format!("{gpus} (from the NVIDIA driver; 0 without one)")), required: false },
        Check {
            name: "nccl",
            outcome: match nccl_check(gpus) {
                None => Ok("not checked: no GPUs".to_owned()),
                Some(loads) => loads.map(|()| "NCCL and the CUDA libraries load".to_owned()),
            },
            required: false,
        },
        Check {
            name: "cluster",
            outcome: Ok(if state.is_file() {
                format!("the agent has joined a cluster ({})", state.display())
            } else {
                "none yet (normal on an image build; the agent starts when a stack boots the image)".to_owned()
            }),
            required: false,
        },
    ]
}

/// Prints the report; 1 when a required check failed.
pub(crate) fn run(root: &Path) -> Result<u8, cli_output::Closed> {
    let checks = checks(root);
    let mut failed = false;
    let mut out = String::new();
    for check in &checks {
        let (status, detail) = match &check.outcome {
            Ok(detail) => ("ok", detail.as_str()),
            Err(problem) if check.required => {
                failed = true;
                ("FAILED", problem.as_str())
            }
            Err(problem) => ("warning", problem.as_str()),
        };
        out += &format!("{:<12} {:<8} {detail}\n", check.name, status);
    }
    cli_output::print_report(&out, if failed { EXIT_FAILED } else { EXIT_OK })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_root_fails_on_the_agent_and_its_unit_only() {
        let root = tempfile::tempdir().unwrap();
        let checks = checks(root.path());
        let failed: Vec<&str> = checks.iter().filter(|c| c.required && c.outcome.is_err()).map(|c| c.name).collect();
        // The ssh client comes from the host's PATH, which the test does not control.
        assert!(failed.starts_with(&["agent", "agent unit"]), "{failed:?}");
        assert!(checks.iter().filter(|c| !c.required).all(|c| c.outcome.is_ok()));
        assert_eq!(run(root.path()).unwrap(), EXIT_FAILED);
    }

    /// This project's machines have no CUDA libraries: a host whose driver
    /// lists a GPU gets a warning naming the first missing one.
    #[test]
    fn gpus_without_their_libraries_are_a_warning_that_names_the_library() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("proc/driver/nvidia/gpus/0000:00:1e.0")).unwrap();
        let checks = checks(root.path());
        let gpus = checks.iter().find(|c| c.name == "gpus").unwrap();
        assert!(gpus.outcome.as_ref().unwrap().starts_with("1 "), "{:?}", gpus.outcome);
        let nccl = checks.iter().find(|c| c.name == "nccl").unwrap();
        assert!(!nccl.required);
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return; // a GPU machine: the libraries may well be there
        }
        let problem = nccl.outcome.as_ref().unwrap_err();
        assert!(problem.contains("(libcuda.so.1)") || problem.contains("without the `cuda` feature"), "{problem}");
    }

    #[test]
    fn the_unit_is_found_in_any_unit_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("usr/lib/systemd/system");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(AGENT_UNIT), "[Unit]\n").unwrap();
        assert!(unit_installed(root.path()).unwrap().ends_with(AGENT_UNIT));
    }

    #[test]
    fn an_agent_that_is_not_the_agent_fails() {
        let root = tempfile::tempdir().unwrap();
        let fake = root.path().join("agent");
        std::fs::write(&fake, "#!/bin/sh\necho something else\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(agent_runs(&fake).unwrap_err().contains("--version failed"));
        assert!(agent_runs(&root.path().join("missing")).unwrap_err().contains("install the deeplearning-agent"));
    }
}
