//! `synth events`: every event of a stack, oldest first; `--follow` keeps
//! printing new ones until the stack settles (or Ctrl-C).

use super::ExitCode;
use super::cloud::{self, StackArgs};
use crate::deploy::monitor::{fetch_new, stamp};
use crate::deploy::port::{Cloud, Event};
use crate::deploy::watch::{Backoff, Operation, Watcher, is_settled};

/// Arguments of `synth events`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth events resnet-training
  synth events resnet-training --follow      # until the stack settles; Ctrl-C stops watching only")]
pub struct EventsArgs {
    #[command(flatten)]
    stack: StackArgs,

    /// Keep printing new events until the stack is no longer in progress.
    #[arg(long, short = 'f')]
    follow: bool,
}

fn line(e: &Event) -> String {
    let reason = e.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default();
    format!("{}  {:32}  {} ({}){reason}", stamp(e.at_ms), e.status, e.logical_id, e.resource_type)
}

/// Runs `synth events`.
pub(super) fn run(args: &EventsArgs) -> ExitCode {
    cloud::block_on(async {
        let (cloud, stack) = match cloud::connect_to_stack(&args.stack).await {
            Ok(found) => found,
            Err(code) => return code,
        };
        // The watcher is used here only to remember which events were printed.
        let mut seen = Watcher::new(Operation::Update, Default::default());
        let mut backoff = Backoff::default();
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let mut first = true;
        loop {
            let mut fresh = match fetch_new_all(&cloud, &stack.id, &seen, first).await {
                Ok(f) => f,
                Err(e) => return cloud::cloud_error(e),
            };
            first = false;
            fresh.sort_by_key(|e| e.at_ms);
            for e in &fresh {
                println!("{}", line(e));
            }
            let news = !fresh.is_empty();
            seen.feed(fresh);
            if !args.follow {
                return ExitCode::Success;
            }
            let status = match cloud.stack(&stack.id).await {
                Ok(s) => s.map(|s| s.status).unwrap_or_default(),
                Err(e) => return cloud::cloud_error(e),
            };
            if is_settled(&status) && !news {
                eprintln!("stack {} is {status}", stack.name);
                return ExitCode::Success;
            }
            tokio::select! {
                _ = &mut ctrl_c => return ExitCode::Interrupted,
                _ = tokio::time::sleep(backoff.next(news)) => {}
            }
        }
    })
}

/// Every event the first time (all pages), then the new ones.
async fn fetch_new_all<C: Cloud>(
    cloud: &C,
    stack: &str,
    seen: &Watcher,
    first: bool,
) -> crate::deploy::port::CloudResult<Vec<Event>> {
    if !first {
        return fetch_new(cloud, stack, seen, None).await;
    }
    let mut all = Vec::new();
    let mut page = None;
    loop {
        let p = cloud.events(stack, page).await?;
        all.extend(p.events);
        match p.next {
            Some(next) => page = Some(next),
            None => return Ok(all),
        }
    }
}
