//! A cluster's whole life from a terminal: `synth deploy`, `diff`, `status`,
//! `events`, `logs`, `outputs`, `resume`, `delete`.
//!
//! A pure core reads recorded AWS answers and returns text and decisions:
//! [`phase`] (which resources a user thinks of as network, storage, ...),
//! [`watch`] (stack events in, the story of an operation out, and the
//! polling backoff), [`cause`] (the root cause of a failure first, then the
//! consequences), [`template`] and [`change`] (what an update changes and
//! replaces, from the change set and from the two templates with the
//! resource schemas' create-only properties, [`create_only`]), [`staging`]
//! (the staging bucket: its name, the keys, upload once), [`formation`]
//! (the phase table from the master's formation signal), [`image`] (the
//! AMI a stack was created with, kept on updates), [`logs`] (which
//! streams `synth logs --node` means, its lines, reading each once).
//!
//! The flows, generic over the two ports: [`prepare`] (the blueprint to a
//! template, the agent package staged), [`apply`] (create, or update
//! through [`update`]: the change set previewed, refused, confirmed or
//! deleted; `synth diff`), [`delete`], [`status`], [`events`],
//! [`logs`] and [`resume`] (a cluster the idle guard scaled down, back).
//! They decide every exit code and write only through the
//! [`console::Console`], so each decision is tested on the fakes.
//!
//! [`capacity`] is the capacity check (`synth capacity`, and `synth deploy`
//! before it creates anything): zones, vCPU quotas ([`quotas`], the codes)
//! and reservations, decided from what was read.
//!
//! [`policy`] is the IAM policy those calls need (`synth policy`).
//!
//! One port does every AWS call ([`port::Cloud`]); [`sdk`] implements it with
//! the AWS SDK. Unit tests use the in-memory `fake`, and `failing`, which
//! wraps any cloud and fails the calls a test chooses (fault injection). The other is the terminal ([`console::Console`]): the command
//! line implements it with `cli-output`, the prompt and Ctrl-C. [`monitor`]
//! is the edge that polls through the port, feeds the watcher and shows
//! progress (a live line on a terminal, timestamped plain lines otherwise).

// Public: the modules the end-to-end crate (tests/) reads from (console,
// formation, monitor, policy, staging); the rest are the crate's own.
pub(crate) mod apply;
pub(crate) mod capacity;
pub(crate) mod cause;
pub(crate) mod change;
pub(crate) mod console;
pub(crate) mod create_only;
pub(crate) mod credentials;
pub(crate) mod delete;
pub(crate) mod ec2;
pub(crate) mod events;
#[cfg(test)]
pub(crate) mod failing;
pub(crate) mod failover;
#[cfg(test)]
pub(crate) mod fake;
pub mod formation;
pub(crate) mod image;
pub(crate) mod logs;
pub(crate) mod monitor;
pub(crate) mod package;
pub(crate) mod phase;
pub mod policy;
pub(crate) mod port;
pub(crate) mod prepare;
pub(crate) mod quotas;
pub(crate) mod resume;
pub(crate) mod sdk;
pub(crate) mod service_quotas;
pub(crate) mod staging;
pub(crate) mod status;
pub(crate) mod template;
pub(crate) mod time;
pub(crate) mod update;
pub(crate) mod watch;
