//! The real [`Console`] of the lifecycle commands: standard output and
//! standard error through `cli-output` (a reader that went away, or a full
//! disk, is answered as for `synth build`), the progress display, the
//! prompt on the terminal, and Ctrl-C.

use std::io::{BufRead, IsTerminal};

use cli_output::Closed;

use crate::deploy::console::{Answer, Console, Display};

/// This process's terminal.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Terminal;

impl Console for Terminal {
    fn print(&self, text: &str) -> Result<(), Closed> {
        cli_output::print(text)
    }

    fn note(&self, text: &str) {
        crate::deploy::console::above_the_line(text);
    }

    fn display(&self) -> Display {
        Display::new()
    }

    fn can_ask(&self) -> bool {
        std::io::stdin().is_terminal()
    }

    /// The read runs on its own thread, so a flow can race it against
    /// Ctrl-C (`deploy::update::unless_interrupted`); an abandoned read
    /// does not keep the process alive.
    async fn ask(&self, question: &str) -> Answer {
        crate::deploy::console::above_the_line(&format!("{question} [y/N] "));
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut answer = String::new();
            let read = std::io::stdin().lock().read_line(&mut answer).map(|_| answer);
            let _ = tx.send(read);
        });
        match rx.await {
            Ok(Ok(answer)) if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") => Answer::Yes,
            _ => Answer::No,
        }
    }

    async fn interrupted(&self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
