//! The system `ssh` client, as `launch` and `kill` use it: batch mode (no
//! password prompts), a connect timeout, and strict host key checking
//! against the known hosts the agent wrote (`/etc/ssh/ssh_known_hosts`);
//! nothing here ever turns host key checking off.
//!
//! The identity, known hosts file, port and user are options (or
//! `TRAINER_SSH_*` variables) so the same binary runs against test sshds;
//! by default ssh's own configuration applies, which on the master is the
//! agent's block giving the cluster key to every node's alias, IP and host
//! names.

use std::path::PathBuf;

/// SSH options shared by the subcommands that reach other hosts.
#[derive(Clone, Debug, clap::Args)]
pub struct SshArgs {
    /// Private key to log in with (`ssh -i`); default: ssh's configuration
    /// (the agent's `~/.ssh/config` names the cluster key).
    #[arg(long, env = "TRAINER_SSH_IDENTITY", value_name = "FILE", help_heading = "SSH")]
    pub ssh_identity: Option<PathBuf>,
    /// Known hosts file (`UserKnownHostsFile`); default: ssh's, which reads
    /// the agent's /etc/ssh/ssh_known_hosts.
    #[arg(long, env = "TRAINER_SSH_KNOWN_HOSTS", value_name = "FILE", help_heading = "SSH")]
    pub ssh_known_hosts: Option<PathBuf>,
    /// Port of the hosts' sshd.
    #[arg(long, env = "TRAINER_SSH_PORT", help_heading = "SSH")]
    pub ssh_port: Option<u16>,
    /// User to log in as; default: ssh's (the current user).
    #[arg(long, env = "TRAINER_SSH_USER", help_heading = "SSH")]
    pub ssh_user: Option<String>,
    /// Seconds to wait for a host's sshd to answer (`ConnectTimeout`).
    #[arg(long, env = "TRAINER_SSH_CONNECT_TIMEOUT", default_value_t = 10, help_heading = "SSH")]
    pub connect_timeout: u32,
    /// At most this many ssh connections are being set up at once. Each
    /// handshake costs the master CPU, and an sshd drops unauthenticated
    /// connections beyond its MaxStartups (10 by default): hundreds at once
    /// fail at random. A rank's connection counts until its supervisor is up.
    #[arg(long, env = "TRAINER_SSH_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024), help_heading = "SSH")]
    pub ssh_concurrency: u32,
    /// The trainer executable on the other hosts; default: this executable's
    /// path (every node runs the same image).
    #[arg(long, env = "TRAINER_REMOTE_TRAINER", value_name = "PATH", help_heading = "SSH")]
    pub remote_trainer: Option<PathBuf>,
    /// Key exchange: `fast` puts mlkem768x25519-sha256 (OpenSSH 9.9 and
    /// later) or else curve25519-sha256 ahead of ssh's own order; `default`
    /// keeps ssh's. OpenSSH 9.0 to 9.8 default to sntrup761x25519, whose key
    /// generation costs the client about 65 ms of CPU a connection (7 ms
    /// with curve25519): 17 s of the master's CPU to reach 256 hosts.
    #[arg(long, env = "TRAINER_SSH_KEX", value_enum, default_value_t = SshKex::Fast, help_heading = "SSH")]
    pub ssh_kex: SshKex,
}

/// Which key exchange `launch`, `kill` and `doctor` ask ssh to prefer.
///
/// On OpenSSH 9.0 to 9.8 (Debian 12, Ubuntu 22.04 and 24.04, Amazon Linux
/// 2023) the default is sntrup761x25519-sha512, a post-quantum hybrid whose
/// key generation is slow: `ssh HOST true` costs the client about 65 ms of
/// CPU, against 7 ms with curve25519-sha256 (measured on this project's
/// 2-core test machine, 40 logins each; tests/benches/launch.rs prints the
/// client's CPU a host). A launch on 256 hosts then spends 17 s of the
/// master's CPU on key exchanges before any rank runs. `Fast` prefers
/// mlkem768x25519-sha256, the post-quantum hybrid of OpenSSH 9.9 and
/// later, which is as cheap as curve25519, and otherwise curve25519-sha256
/// (classical elliptic-curve Diffie-Hellman, what SSH used before 2022):
/// the cluster's connections stay inside its VPC, between its own nodes,
/// with host keys checked. `Default` leaves the choice to ssh's
/// configuration, for a site that requires a post-quantum exchange on
/// older OpenSSH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SshKex {
    /// mlkem768x25519-sha256 when this ssh has it, else curve25519-sha256,
    /// then ssh's own order.
    Fast,
    /// ssh's own order.
    Default,
}

/// The key exchanges [`SshKex::Fast`] prefers, best first.
pub(crate) const FAST_KEX: [&str; 3] = ["mlkem768x25519-sha256", "curve25519-sha256", "curve25519-sha256@libssh.org"];

/// The `KexAlgorithms` value for [`SshKex::Fast`] with this machine's ssh:
/// the [`FAST_KEX`] it supports (`ssh -Q kex`), placed ahead of its
/// default order (`^`, OpenSSH 8.3 and later), checked by letting ssh
/// parse it (`ssh -G`, which connects nowhere). `None` when this ssh takes
/// none of it: then ssh's own order is used. Worked out once per process.
pub(crate) fn fast_kex() -> Option<&'static str> {
    static KEX: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    KEX.get_or_init(|| {
        let supported = std::process::Command::new("ssh").args(["-Q", "kex"]).output().ok()?;
        let supported = String::from_utf8_lossy(&supported.stdout);
        let names: Vec<&str> = FAST_KEX.into_iter().filter(|k| supported.lines().any(|l| l.trim() == *k)).collect();
        if names.is_empty() {
            return None;
        }
        let value = format!("^{}", names.join(","));
        let parsed = std::process::Command::new("ssh")
            .args(["-G", "-o", &format!("KexAlgorithms={value}"), "kex-check.invalid"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        parsed.success().then_some(value)
    })
    .as_deref()
}

impl SshArgs {
    /// The remote trainer's path.
    pub fn remote_trainer(&self) -> crate::error::Result<String> {
        match &self.remote_trainer {
            Some(p) => Ok(p.to_string_lossy().into_owned()),
            None => std::env::current_exe()
                .map(|p| p.to_string_lossy().into_owned())
                .map_err(crate::error::Error::CurrentExe),
        }
    }

    /// The permits that bound the ssh clients `kill` and `doctor` run at
    /// once (`--ssh-concurrency`), after making sure the open-file limit
    /// allows that many (`what` names the command in the error).
    pub fn permits(&self, what: &str) -> crate::error::Result<std::sync::Arc<tokio::sync::Semaphore>> {
        use crate::jobs::open_files::{BASE, PER_PROBE, ensure};
        ensure(BASE + PER_PROBE * u64::from(self.ssh_concurrency), what)?;
        Ok(std::sync::Arc::new(tokio::sync::Semaphore::new(self.ssh_concurrency as usize)))
    }

    /// The arguments of `ssh` that run `remote` (already one shell command
    /// line, see [`quote`]) on `host`.
    pub fn args(&self, host: &str, remote: &str) -> Vec<String> {
        let mut args: Vec<String> = [
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            // A host that vanishes without a FIN is noticed in ~15 s, not at TCP's hours.
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "LogLevel=ERROR",
        ]
        .map(String::from)
        .into();
        args.extend(["-o".into(), format!("ConnectTimeout={}", self.connect_timeout)]);
        if self.ssh_kex == SshKex::Fast
            && let Some(kex) = fast_kex()
        {
            args.extend(["-o".into(), format!("KexAlgorithms={kex}")]);
        }
        if let Some(file) = &self.ssh_known_hosts {
            args.extend(["-o".into(), format!("UserKnownHostsFile={}", file.display())]);
        }
        if let Some(key) = &self.ssh_identity {
            args.extend(["-o".into(), "IdentitiesOnly=yes".into(), "-i".into(), key.display().to_string()]);
        }
        if let Some(port) = self.ssh_port {
            args.extend(["-p".into(), port.to_string()]);
        }
        if let Some(user) = &self.ssh_user {
            args.extend(["-l".into(), user.clone()]);
        }
        args.extend(["--".into(), host.to_owned(), remote.to_owned()]);
        args
    }
}

/// `words` as one POSIX shell command line (what ssh hands the remote shell).
pub(crate) fn quote(words: &[String]) -> String {
    words.iter().map(|w| quote_word(w)).collect::<Vec<_>>().join(" ")
}

fn quote_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:,+@%=".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `ssh` exits 255 on its own errors. What its last stderr line means, for
/// the launcher's final note.
pub(crate) fn explain_failure(host: &str, stderr_tail: &str) -> String {
    let tail = stderr_tail.trim();
    let hint = if tail.contains("Host key verification failed") || tail.contains("REMOTE HOST IDENTIFICATION") {
        format!(
            "the host key of {host} is not the one in the known hosts (the agent's /etc/ssh/ssh_known_hosts): \
             check the agent on the master applied the latest manifest; never turn StrictHostKeyChecking off"
        )
    } else if tail.contains("Connection refused")
        || tail.contains("timed out")
        || tail.contains("No route to host")
        || tail.contains("Could not resolve")
        || tail.contains("Network is unreachable")
    {
        format!("{host} is unreachable over SSH: is it running, and is it in the cluster's security group?")
    } else if tail.contains("Permission denied") {
        format!("{host} refused the login: is the cluster key in the user's authorized_keys there?")
    } else if tail.is_empty() {
        format!("the SSH connection to {host} failed")
    } else {
        format!("the SSH connection to {host} failed or dropped")
    };
    if tail.is_empty() { hint } else { format!("{hint} (ssh: {tail})") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips_through_a_shell() {
        let words: Vec<String> =
            ["printf", "%s|", "plain", "it's", "$(reboot)", "a b", "", "\"q\""].map(String::from).into();
        let out = std::process::Command::new("sh").arg("-c").arg(quote(&words)).output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "plain|it's|$(reboot)|a b||\"q\"|");
    }

    #[test]
    fn host_key_checking_stays_on() {
        let args = SshArgs {
            ssh_identity: Some("/k".into()),
            ssh_known_hosts: Some("/kh".into()),
            ssh_port: Some(2222),
            ssh_user: None,
            connect_timeout: 3,
            ssh_concurrency: 32,
            remote_trainer: None,
            ssh_kex: SshKex::Default,
        };
        let line = args.args("h1", "true").join(" ");
        assert!(line.contains("StrictHostKeyChecking=yes") && line.contains("BatchMode=yes"), "{line}");
        assert!(line.contains("ConnectTimeout=3 -o UserKnownHostsFile=/kh"), "{line}");
        assert!(line.ends_with("-i /k -p 2222 -- h1 true"), "{line}");
        assert!(!line.contains("KexAlgorithms"), "{line}");
    }

    /// This machine's ssh (OpenSSH 9.2 in CI) takes curve25519-sha256 first.
    #[test]
    fn the_fast_key_exchange_goes_first_and_ssh_accepts_it() {
        let kex = fast_kex().expect("this ssh supports curve25519-sha256 and '^'");
        assert!(kex.starts_with('^') && kex.contains("curve25519-sha256"), "{kex}");
        let out = std::process::Command::new("ssh")
            .args(["-G", "-o", &format!("KexAlgorithms={kex}"), "h1"])
            .output()
            .unwrap();
        let config = String::from_utf8_lossy(&out.stdout);
        let chosen = config.lines().find_map(|l| l.strip_prefix("kexalgorithms ")).unwrap_or_default();
        // Ahead of ssh's own default, which stays after them.
        assert!(chosen.starts_with(&kex[1..]), "{chosen}");
        assert!(chosen.len() > kex.len(), "{chosen}");
        let args = SshArgs {
            ssh_identity: None,
            ssh_known_hosts: None,
            ssh_port: None,
            ssh_user: None,
            connect_timeout: 3,
            ssh_concurrency: 32,
            remote_trainer: None,
            ssh_kex: SshKex::Fast,
        };
        assert!(args.args("h1", "true").contains(&format!("KexAlgorithms={kex}")));
    }

    #[test]
    fn failures_are_explained_naming_the_host() {
        let e = explain_failure("w3", "Host key verification failed.\n");
        assert!(e.starts_with("the host key of w3 is not the one"), "{e}");
        let e = explain_failure("w3", "ssh: connect to host w3 port 22: Connection refused");
        assert!(e.starts_with("w3 is unreachable over SSH"), "{e}");
        assert_eq!(explain_failure("w3", ""), "the SSH connection to w3 failed");
    }
}
