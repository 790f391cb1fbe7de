//! `ssh` on the master with nothing but what the agent wrote (its ssh
//! client config, the cluster key, the known hosts and `/etc/hosts`): every
//! node is reached by its alias, its private IP, its full host name and its
//! short host name, with strict host key checking on. Real sshd per network
//! namespace (`e2e::sshd`); needs root, `ip`, openssh-server and
//! openssh-client.

use e2e::sshd::SshCluster;
use e2e::{Error, Result, TestResult};
use std::process::{Output, Stdio};

fn fail(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Unexpected { what: what.into(), detail: detail.to_string() }
}

/// `ssh [extra...] NAME 'echo $TRAINER_ROOT'` on the master (the test sshds
/// set `TRAINER_ROOT` to the host's root, which names the host that answered).
fn ssh(cluster: &SshCluster, extra: &[&str], name: &str) -> Result<Output> {
    let mut command = cluster.master_login_command("ssh");
    command
        .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"])
        .args(extra)
        .args(["--", name, "echo $TRAINER_ROOT"])
        .stdin(Stdio::null());
    command.output().map_err(Error::io("running ssh", "ssh"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

#[test]
fn the_master_reaches_every_node_by_alias_ip_and_host_name_with_host_keys_checked() -> TestResult {
    let mut cluster = SshCluster::start(&[0, 0, 0])?;
    for i in 0..cluster.hosts.len() {
        let host = &cluster.hosts[i];
        let full = cluster.hostname(i).to_owned();
        let short = full.split('.').next().unwrap_or_default().to_owned();
        let ip = host.ip.to_string();
        for name in [host.alias.as_str(), ip.as_str(), full.as_str(), short.as_str()] {
            let out = ssh(&cluster, &[], name)?;
            let answered = text(&out.stdout);
            if !out.status.success() || answered != host.root.to_string_lossy() {
                Err(fail(
                    &format!("`ssh {name}` from the master to reach host {i} ({})", host.alias),
                    format!("{:?}: stdout {answered:?}, stderr {}", out.status, text(&out.stderr)),
                ))?;
            }
        }
    }

    // What the config adds: without it, ssh does not offer the cluster key
    // to an IP (the failure users met with IPs in a host file).
    let ip = cluster.hosts[1].ip.to_string();
    let out = ssh(&cluster, &["-F", "/dev/null", "-o", "StrictHostKeyChecking=yes"], &ip)?;
    if out.status.success() || !text(&out.stderr).contains("Permission denied") {
        Err(fail("ssh without the agent's config to be refused", text(&out.stderr)))?;
    }

    // Host keys are checked under the IP and the host name: a host whose key
    // changed is refused under both.
    cluster.replace_host_key(2)?;
    let full = cluster.hostname(2).to_owned();
    for name in [cluster.hosts[2].ip.to_string(), full] {
        let out = ssh(&cluster, &[], &name)?;
        if out.status.success() || !text(&out.stderr).contains("Host key verification failed") {
            Err(fail(
                &format!("`ssh {name}` to a host whose key changed to be refused"),
                format!("{:?}: {}", out.status, text(&out.stderr)),
            ))?;
        }
    }
    Ok(())
}
