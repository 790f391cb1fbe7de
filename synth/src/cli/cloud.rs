//! What the commands that talk to AWS share: the region and profile
//! options, connecting (credentials checked first, with what to do when
//! there are none), the async runtime, the confirmation prompt, and how
//! outputs and failures are printed.

use std::io::{BufRead, IsTerminal, Write};

use super::ExitCode;
use crate::deploy::cause::diagnose;
use crate::deploy::monitor::{Display, Ending};
use crate::deploy::port::{Cloud, Output};
use crate::deploy::sdk::{Connection, SdkCloud};
use crate::deploy::watch::{Watcher, clock};
use crate::region::Region;

/// `--region` and `--profile`.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// The AWS region (us-east-1, us-east-2, us-west-2, eu-west-1,
    /// ap-southeast-2). Default: AWS_REGION or your profile's region.
    #[arg(long, short = 'r', value_name = "REGION", help_heading = "AWS")]
    pub region: Option<Region>,

    /// The AWS profile to use (default: AWS_PROFILE, else the default profile).
    #[arg(long, value_name = "NAME", help_heading = "AWS")]
    pub profile: Option<String>,
}

/// A stack in a region.
#[derive(Debug, Clone, clap::Args)]
pub struct StackArgs {
    /// The stack's name (`synth deploy` names it after the blueprint's `name`).
    #[arg(value_name = "STACK")]
    pub stack: String,

    #[command(flatten)]
    pub aws: AwsArgs,
}

/// Runs `work` on a runtime made for one command.
pub(super) fn block_on<F: std::future::Future<Output = ExitCode>>(work: F) -> ExitCode {
    run_async(work).unwrap_or_else(|code| code)
}

/// Runs `work` on a runtime made for one command, returning its value.
pub(super) fn run_async<T, F: std::future::Future<Output = T>>(work: F) -> Result<T, ExitCode> {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => Ok(rt.block_on(work)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            Err(ExitCode::Error)
        }
    }
}

/// Connects with the standard chain; prints what to do and returns the exit
/// code when there is no region or no credentials.
pub(super) async fn connect(region: Option<Region>, profile: Option<&str>) -> Result<SdkCloud, ExitCode> {
    let connection = Connection { region: region.map(|r| r.code().to_owned()), profile: profile.map(str::to_owned) };
    SdkCloud::connect(&connection).await.map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::Error
    })
}

/// Prints a cloud error and returns exit code 2.
pub(super) fn cloud_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::Error
}

/// Connects and finds the stack `args` names; prints why not (exit 2).
pub(super) async fn connect_to_stack(args: &StackArgs) -> Result<(SdkCloud, crate::deploy::port::Stack), ExitCode> {
    let cloud = connect(args.aws.region, args.aws.profile.as_deref()).await?;
    match cloud.stack(&args.stack).await {
        Ok(Some(stack)) => Ok((cloud, stack)),
        Ok(None) => Err(cloud_error(format!("no stack {} in {}", args.stack, cloud.region()))),
        Err(e) => Err(cloud_error(e)),
    }
}

/// `--region R` when the region was not in the user's command, so that a
/// printed command works as it is.
pub(super) fn region_flag<C: Cloud>(cloud: &C) -> String {
    format!("--region {}", cloud.region())
}

/// An answer at a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// Go ahead.
    Yes,
    /// Anything else, or end of input.
    No,
}

/// Asks `question` on the terminal (`yes` answers it). Off a terminal
/// without `yes`, says to pass --yes (exit 2). The read runs on its own
/// thread, so a caller can race it against Ctrl-C (see
/// `deploy::unless_interrupted`); an abandoned read does not keep the
/// process alive.
pub(super) async fn ask(question: &str, yes: bool) -> Result<Answer, ExitCode> {
    if yes {
        return Ok(Answer::Yes);
    }
    if !std::io::stdin().is_terminal() {
        eprintln!("error: {question} Standard input is not a terminal, so nobody can answer: pass --yes to go ahead.");
        return Err(ExitCode::Error);
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut answer = String::new();
        let read = std::io::stdin().lock().read_line(&mut answer).map(|_| answer);
        let _ = tx.send(read);
    });
    Ok(match rx.await {
        Ok(Ok(answer)) if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") => Answer::Yes,
        _ => Answer::No,
    })
}

/// Prints outputs on stdout, `Key  value`, aligned.
pub(super) fn print_outputs(outputs: &[Output]) {
    let width = outputs.iter().map(|o| o.key.len()).max().unwrap_or(0);
    let mut out = std::io::stdout().lock();
    for o in outputs {
        let _ = writeln!(out, "{:width$}  {}", o.key, o.value, width = width);
    }
}

/// What to tell the user after watching: on Ctrl-C, that the stack goes on
/// (exit 130); on failure, the diagnosis (exit 1); on success, `Ok(())`.
pub(super) fn report_ending(
    ending: Ending,
    watcher: &Watcher,
    display: &Display,
    stack: &str,
    flag: &str,
    kept: bool,
    started_ms: i64,
) -> Result<(), ExitCode> {
    display.finish();
    match ending {
        Ending::Interrupted => {
            eprintln!(
                "Stopped watching; the stack goes on, nothing was cancelled. Follow it with \
                 `synth events {stack} {flag} --follow`, or see `synth status {stack} {flag}`."
            );
            Err(ExitCode::Interrupted)
        }
        Ending::Settled if watcher.succeeded() => Ok(()),
        Ending::Settled => {
            let (status, _) = watcher.settled().unwrap_or(("UNKNOWN", None));
            let text = diagnose(watcher.events()).render(status, kept, &format!("synth delete {stack} {flag}"));
            eprint!("{text}");
            eprintln!(
                "{:>12} {stack} {status} after {} (all events: synth events {stack} {flag})",
                "Failed",
                clock(crate::deploy::monitor::now_ms() - started_ms)
            );
            Err(ExitCode::Invalid)
        }
    }
}
