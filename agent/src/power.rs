//! [`Power`] by a command: the idle guard's `stop` powers the master off
//! with `systemctl poweroff` (the agent runs as root). On EC2 an
//! EBS-backed instance whose `InstanceInitiatedShutdownBehavior` is `stop`
//! (the default, which the template's master keeps) stops rather than
//! terminates, so no EC2 call and no EC2 permission is needed:
//! <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html>.
//! The command is configuration (`agent run --power-off-command`), so the
//! end-to-end tests see the call without powering their host off.

use crate::ports::{PortError, Power};

/// The command that powers this machine off.
pub(crate) const DEFAULT_COMMAND: &[&str] = &["systemctl", "poweroff"];

/// Powers off by running a command.
#[derive(Clone, Debug)]
pub(crate) struct CommandPower {
    /// The program and its arguments.
    pub argv: Vec<String>,
}

impl Power for CommandPower {
    async fn power_off(&self) -> Result<(), PortError> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(PortError::Permanent("no power-off command is configured".into()));
        };
        let status = tokio::process::Command::new(program)
            .args(args)
            .status()
            .await
            .map_err(|e| PortError::Permanent(format!("cannot run {program}: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(PortError::Transient(format!("{} exited with {status}", self.argv.join(" "))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_its_command_and_reports_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("off");
        let ok = CommandPower { argv: vec!["touch".into(), mark.display().to_string()] };
        ok.power_off().await.unwrap();
        assert!(mark.exists());
        let failing = CommandPower { argv: vec!["false".into()] };
        assert!(matches!(failing.power_off().await, Err(PortError::Transient(_))));
        let missing = CommandPower { argv: vec!["/nonexistent/poweroff".into()] };
        assert!(matches!(missing.power_off().await, Err(PortError::Permanent(_))));
        assert!(CommandPower { argv: Vec::new() }.power_off().await.is_err());
    }
}
