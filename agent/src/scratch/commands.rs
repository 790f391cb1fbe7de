//! The programs the scratch volume is made with (`mdadm`, `mkfs.ext4` or
//! `mkfs.xfs`, `blkid`, `mount`), behind a small trait: [`System`] runs
//! them, the unit tests' recording fake answers from a script and keeps the
//! command lines, and the end-to-end test runs the real ones on loop devices.

use std::process::{Command, Stdio};

/// A program failed (or could not be started): the command line and its stderr.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` failed: {reason}")]
pub struct CommandFailed {
    /// The command line.
    pub command: String,
    /// Its exit status and stderr, or why it could not start.
    pub reason: String,
}

/// Runs programs.
pub trait Commands {
    /// Runs `program args`; its stdout, or why it failed with its stderr.
    fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandFailed>;
    /// Whether `program` can be run (it is on the `PATH`).
    fn has(&self, program: &str) -> bool;
}

/// The command line, for logs and errors.
pub(crate) fn line(program: &str, args: &[&str]) -> String {
    std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ")
}

/// The real programs, found on the `PATH` (with `/sbin` and `/usr/sbin`
/// added: a unit started with a short `PATH` still finds `mdadm`).
#[derive(Clone, Copy, Debug, Default)]
pub struct System;

impl System {
    fn path() -> String {
        let path = std::env::var("PATH").unwrap_or_default();
        format!("{path}:/usr/local/sbin:/usr/sbin:/sbin")
    }
}

impl Commands for System {
    fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandFailed> {
        let failed = |reason: String| CommandFailed { command: line(program, args), reason };
        let out = Command::new(program)
            .args(args)
            .env("PATH", Self::path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(format!("cannot run it: {e}")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(failed(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim())))
        }
    }

    fn has(&self, program: &str) -> bool {
        use std::os::unix::fs::PermissionsExt;
        Self::path().split(':').filter(|d| !d.is_empty()).any(|dir| {
            std::fs::metadata(std::path::Path::new(dir).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    }
}

/// A fake for unit tests: records every command line and answers from a
/// script of (command line prefix, answer); a command no entry matches
/// succeeds with no output.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Recording {
    /// The programs [`Commands::has`] says are there.
    pub programs: Vec<&'static str>,
    /// (prefix of the command line, stdout or failure).
    pub answers: Vec<(&'static str, Result<&'static str, &'static str>)>,
    /// The command lines run so far.
    pub ran: std::cell::RefCell<Vec<String>>,
}

#[cfg(test)]
impl Commands for Recording {
    fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandFailed> {
        let command = line(program, args);
        self.ran.borrow_mut().push(command.clone());
        match self.answers.iter().find(|(prefix, _)| command.starts_with(prefix)) {
            Some((_, Ok(out))) => Ok((*out).to_owned()),
            Some((_, Err(reason))) => Err(CommandFailed { command, reason: (*reason).to_owned() }),
            None => Ok(String::new()),
        }
    }

    fn has(&self, program: &str) -> bool {
        self.programs.contains(&program)
    }
}
