//! A cluster's whole life from a terminal: `synth deploy`, `diff`, `status`,
//! `events`, `outputs`, `ssh`, `delete`.
//!
//! A pure core reads recorded AWS answers and returns text and decisions:
//! [`phase`] (which resources a user thinks of as network, storage, ...),
//! [`watch`] (stack events in, the story of an operation out, and the
//! polling backoff), [`cause`] (the root cause of a failure first, then the
//! consequences), [`template`] and [`change`] (what an update changes and
//! replaces, from the change set and from the two templates with the
//! resource schemas' create-only properties, [`create_only`]), [`staging`]
//! (the staging bucket: its name, the keys, upload once), [`formation`]
//! (the phase table from the master's formation signal), [`logs`] (which
//! streams `synth logs --node` means, its lines, reading each once).
//!
//! One port does every AWS call ([`port::Cloud`]); [`sdk`] implements it with
//! the AWS SDK. [`monitor`] is the edge that polls through the port, feeds
//! the watcher and shows progress (a live line on a terminal, timestamped
//! plain lines otherwise).

pub mod cause;
pub mod change;
pub mod create_only;
#[cfg(test)]
pub(crate) mod fake;
pub mod formation;
pub mod logs;
pub mod monitor;
pub mod phase;
pub mod port;
pub mod sdk;
pub mod staging;
pub mod template;
pub mod watch;
