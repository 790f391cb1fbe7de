//! Training data: every node fetches its data sets from S3 before it
//! registers, fast, and the cluster reads S3 about once
//! (docs/ARCHITECTURE.md, "Training data: fetching from S3").
//!
//! Rooms:
//! - [`store`]: the port to S3 ([`ObjectStore`]: list, head, ranged get);
//!   [`memory`] and [`failing`] implement it for tests, and
//!   [`crate::aws::S3Objects`] on the AWS SDK.
//! - [`engine`]: one node's downloads (parallel objects, parallel ranged
//!   parts written in place, bounded memory, verified, atomic, resumable);
//!   [`checksum`] computes S3's checksums, [`key`] maps keys to paths
//!   inside the data set's directory, [`error`] names what failed.
//! - [`wire`] and [`server`]: the nodes' data protocol on `DATA_PORT`
//!   (ask, serve);
//!   [`roster`]: who fetches together (announcements on EFS) and each
//!   object's home (rendezvous hashing).
//! - [`fetch`]: a node's whole fetch ([`DataFetch`]: every set, together
//!   or master-only), its log lines and progress file; [`progress`]: the
//!   counters, the lines and the cluster's summary ([`summary_line`]).

pub mod checksum;
pub(crate) mod engine;
pub(crate) mod error;
#[cfg(test)]
pub(crate) mod failing;
pub(crate) mod fetch;
pub(crate) mod key;
#[cfg(test)]
pub(crate) mod memory;
pub(crate) mod progress;
pub(crate) mod roster;
pub(crate) mod server;
pub(crate) mod store;
pub(crate) mod wire;

pub use engine::{Engine, Target, Tuning};
pub use error::FetchError;
pub use fetch::{DataFetch, Plan, marker_path};
pub use progress::{NodeProgress, Progress, read_progress, summary_line};
pub use store::{Checksum, Got, Head, Integrity, ObjectInfo, ObjectStore, StoreError, StoreErrorKind};

#[cfg(test)]
mod tests;
