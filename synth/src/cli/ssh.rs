//! `synth ssh`: a shell on the master (or, through it, a worker) with the
//! stack's own SSH command (through Session Manager when the master is
//! private).

use std::os::unix::process::CommandExt;

use cli_output::errln;

use super::cloud::{self, StackArgs};
use super::terminal::Terminal;
use crate::deploy::console::fail;
use crate::deploy::monitor::region_flag;
use crate::deploy::port::Stack;
use crate::deploy::status::find;
use crate::exit::ExitCode;

/// Arguments of `synth ssh`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth ssh resnet-training
  synth ssh resnet-training --worker 3   # deeplearning-worker3, via the master

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
pub(super) fn command_line(ssh_command: &str, worker: Option<u32>) -> Result<String, String> {
    let Some(rest) = ssh_command.strip_prefix("ssh ") else {
        return Err(format!("the stack's SshCommand output is not an ssh command: {ssh_command}"));
    };
    Ok(match worker {
        None => ssh_command.to_owned(),
        // -t before the destination: the remote ssh needs a terminal.
        Some(n) => format!("ssh -t {rest} ssh deeplearning-worker{n}"),
    })
}

/// Why ssh cannot reach the stack's master, and the way in that works:
/// no key pair (ssh has nothing to log in with, also through Session
/// Manager), or a public master with no SSH ingress (no address may reach
/// port 22: ssh would wait for a timeout). `None`: ssh can work.
pub(super) fn refusal(stack: &Stack, flag: &str) -> Option<String> {
    let why = crate::deploy::status::ssh_obstacles(stack);
    if why.is_empty() {
        return None;
    }
    let name = &stack.name;
    let way_in = match stack.outputs.iter().find(|o| o.key == "SessionManagerCommand") {
        Some(o) => format!(
            "Use Session Manager instead (it needs neither; the AWS CLI and its Session Manager plugin): {}",
            o.value
        ),
        None => format!(
            "Session Manager is off for this stack: turn on `access.session_manager` in the blueprint, or give \
             it both, and deploy again (`synth deploy BLUEPRINT {flag} --parameter KeyName=<your key pair> \
             --parameter SshCidr=<your address>/32`)"
        ),
    };
    Some(format!("cannot ssh to stack {name}: {}. {way_in}", why.join(", and ")))
}

/// The stack's SSH command output.
async fn ssh_output(args: &SshArgs) -> Result<String, ExitCode> {
    let cloud = cloud::connect(args.stack.aws.region, args.stack.aws.profile.as_deref()).await?;
    let name = &args.stack.stack;
    let stack = find(&Terminal, &cloud, name).await?;
    if let Some(why) = refusal(&stack, &region_flag(&cloud)) {
        return Err(fail(&Terminal, why));
    }
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

    fn stack(key: &str, cidr: &str, ssh: &str, ssm: bool) -> Stack {
        let output = |key: &str, value: &str| crate::deploy::port::Output {
            key: key.into(),
            value: value.into(),
            description: None,
        };
        let mut outputs = vec![output("SshCommand", ssh)];
        if ssm {
            outputs.push(output("SessionManagerCommand", "aws ssm start-session --target i-0aa --region us-east-1"));
        }
        Stack {
            name: "demo".into(),
            parameters: [("KeyName".into(), key.into()), ("SshCidr".into(), cidr.into())].into(),
            outputs,
            ..Stack::default()
        }
    }

    /// ssh is refused, with the reason and the way in, when it cannot work:
    /// no key pair, or a public master nobody may reach on port 22.
    #[test]
    fn ssh_is_refused_without_a_key_or_an_ingress_and_names_session_manager() {
        let flag = "--region us-east-1";
        let public = "ssh -i 'k.pem' ubuntu@1.2.3.4";
        let private = "ssh -o ProxyCommand='aws ssm start-session --target %h' ubuntu@i-0aa";
        assert_eq!(refusal(&stack("k", "198.51.100.7/32", public, false), flag), None);
        assert_eq!(refusal(&stack("k", "", private, true), flag), None, "Session Manager carries ssh");
        let both = refusal(&stack("", "", "ssh ubuntu@1.2.3.4", true), flag).unwrap();
        assert_eq!(
            both,
            "cannot ssh to stack demo: its KeyName parameter is empty (no key pair: ssh has no key to log in \
             with), and its SshCidr parameter is empty (no SSH ingress: no address may reach port 22). Use \
             Session Manager instead (it needs neither; the AWS CLI and its Session Manager plugin): aws ssm \
             start-session --target i-0aa --region us-east-1"
        );
        let no_ingress = refusal(&stack("k", " ", public, false), flag).unwrap();
        assert!(no_ingress.contains("(no SSH ingress") && !no_ingress.contains("no key pair"), "{no_ingress}");
        assert!(no_ingress.contains("turn on `access.session_manager`"), "{no_ingress}");
        assert!(no_ingress.contains("synth deploy BLUEPRINT --region us-east-1 --parameter KeyName="), "{no_ingress}");
        let no_key = refusal(&stack("", "", private, true), flag).unwrap();
        assert!(no_key.contains("no key pair") && !no_key.contains("ingress"), "{no_key}");
    }
}
