//! `synth ssh`: a shell on the master (or, through it, a worker) with the
//! stack's own SSH command (through Session Manager when the master is
//! private).

use std::os::unix::process::CommandExt;

use cli_output::errln;

use super::cloud::{self, StackArgs};
use super::terminal::Terminal;
use crate::deploy::console::fail;
use crate::deploy::status::find;
use crate::exit::ExitCode;

/// Arguments of `synth ssh`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth ssh resnet-training
  synth ssh resnet-training --worker 3     # deeplearning-worker3, through the master

Runs the stack's SshCommand output (ssh with your key pair, or through
Session Manager when the master is private: that needs the AWS CLI and its
Session Manager plugin). The exit code is ssh's.")]
pub struct SshArgs {
    #[command(flatten)]
    stack: StackArgs,

    /// Go on to worker N (`deeplearning-workerN`; 1 is the master), with the
    /// master's cluster key and known hosts.
    #[arg(long, value_name = "N")]
    worker: Option<u32>,
}

/// The command to run: the stack's SSH command, with a hop to a worker.
pub fn command_line(ssh_command: &str, worker: Option<u32>) -> Result<String, String> {
    let Some(rest) = ssh_command.strip_prefix("ssh ") else {
        return Err(format!("the stack's SshCommand output is not an ssh command: {ssh_command}"));
    };
    Ok(match worker {
        None => ssh_command.to_owned(),
        // -t before the destination: the remote ssh needs a terminal.
        Some(n) => format!("ssh -t {rest} ssh deeplearning-worker{n}"),
    })
}

/// The stack's SSH command output.
async fn ssh_output(args: &SshArgs) -> Result<String, ExitCode> {
    let cloud = cloud::connect(args.stack.aws.region, args.stack.aws.profile.as_deref()).await?;
    let name = &args.stack.stack;
    let stack = find(&Terminal, &cloud, name).await?;
    match stack.outputs.iter().find(|o| o.key == "SshCommand") {
        Some(o) => Ok(o.value.clone()),
        None => Err(fail(
            &Terminal,
            format!("stack {name} has no SshCommand output yet (status {}): see `synth status {name}`", stack.status),
        )),
    }
}

/// Runs `synth ssh`: replaces this process with ssh.
pub(super) fn run(args: &SshArgs) -> ExitCode {
    let ssh = match cloud::run_async(ssh_output(args)).and_then(|r| r) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if ssh.starts_with("none") {
        return fail(&Terminal, ssh);
    }
    let line = match command_line(&ssh, args.worker) {
        Ok(l) => l,
        Err(e) => return fail(&Terminal, e),
    };
    errln!("{line}");
    // The output is the stack's own command, written for a shell (the
    // ProxyCommand of a private master is quoted for one).
    let e = std::process::Command::new("sh").arg("-c").arg(&line).exec();
    errln!("error: cannot run ssh: {e}");
    ExitCode::Error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_reached_through_the_master() {
        assert_eq!(command_line("ssh -i k.pem ubuntu@1.2.3.4", None).unwrap(), "ssh -i k.pem ubuntu@1.2.3.4");
        assert_eq!(
            command_line("ssh -i k.pem ubuntu@1.2.3.4", Some(3)).unwrap(),
            "ssh -t -i k.pem ubuntu@1.2.3.4 ssh deeplearning-worker3"
        );
        assert!(command_line("none: private", None).is_err());
    }
}
