//! The job's rendezvous: a small TCP service hosted by rank 0 (the process
//! on the master, listening on `MASTER_ADDR:MASTER_PORT`) that assigns ranks
//! per membership round and decides, at every epoch boundary, after every
//! step where a rank raised its leaving flag, and after every collective
//! failure, who trains next.
//!
//! Every process (rank 0's included, over loopback) opens one control
//! connection and keeps it for the life of the job: its end of file is how
//! the host learns that a process died. On it a process says who it is
//! ([`Hello`]: instance id, alias and worker index from the agent's state
//! file, its data-plane address, the epoch/step of the state it holds), then
//! reports boundaries, mid-epoch stops and failures; the host answers with
//! a [`Decision`].
//!
//! A report may say the process is *leaving* (its host was given an
//! interruption notice): the host tells it `Left` at once, without waiting
//! for the others' reports (it holds nothing the group still needs: the
//! step's all-reduce and the epoch's sums are done), and the others go on
//! without it: at a boundary as after any leave, after a mid-epoch stop in a
//! group that runs the rest of the same epoch (`Group` with `step > 0`, no
//! state moved). Rank 0 never leaves. Joins still wait for a boundary.
//!
//! Inputs: the agent's state file `/var/lib/deeplearning/state.json` (the
//! generation and its manifest) and node config `/etc/deeplearning/node.json`
//! (EFS mount, prepare-data script) under a filesystem root ([`Roster`]);
//! the prepare-data markers `$EFS_MOUNT/prepare_data_success_<ip>`
//! (`node_contract::files::prepare_data`).
//!
//! Wire format: one JSON object per line, `{"v": 2, "type": ..., ...}`; a
//! line longer than [`MAX_LINE`] bytes, unknown version or malformed JSON is
//! a [`RendezvousError`], never a panic. The elastic rules themselves (who
//! joins or leaves, when) are in [`host`](mod@host)'s decision functions; the client
//! side is [`super::elastic`].
//!
//! Rooms: [`protocol`] (the wire: messages, versioned lines), [`roster`]
//! (who may train: the agent's files and the prepare-data markers) and
//! [`host`](mod@host) (the server and its elastic decisions); [`RendezvousError`],
//! here, is every room's error.

use std::net::SocketAddr;
use std::path::PathBuf;

mod host;
mod protocol;
mod roster;

pub use host::{HostConfig, host};
pub use protocol::{Decision, Hello, MAX_LINE, PROTOCOL_VERSION, ReceiveError, Report, receive, send};
pub use roster::Roster;

/// Something went wrong in the rendezvous.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// The agent's state file cannot be read.
    #[error("cannot read the agent's state file {path}: {reason}; is the agent running and has it applied a manifest?")]
    ReadState {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The node config cannot be read.
    #[error("cannot read the node config {path}: {reason}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// This node is not in the manifest it applied.
    #[error("instance {instance_id} is not in the manifest of generation {generation} ({path})")]
    NotInManifest {
        /// This node.
        instance_id: String,
        /// The manifest's generation.
        generation: u64,
        /// The state file.
        path: PathBuf,
    },
    /// Connecting to the rendezvous failed.
    #[error("cannot reach the rendezvous at {addr} (rank 0, on the master): {source}")]
    Connect {
        /// MASTER_ADDR:MASTER_PORT.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The control connection failed or closed.
    #[error(
        "the rendezvous at {addr} (rank 0, the master's process) went away: {reason}; the job cannot go on without the master"
    )]
    MasterGone {
        /// MASTER_ADDR:MASTER_PORT.
        addr: SocketAddr,
        /// What happened.
        reason: String,
    },
    /// A peer sent something that is not the protocol.
    #[error("malformed rendezvous message from {from}: {reason}")]
    Malformed {
        /// The sender.
        from: String,
        /// What was wrong.
        reason: String,
    },
    /// The host refused this process.
    #[error("the rendezvous refused this process: {0}")]
    Refused(String),
    /// No decision came in time.
    #[error("no answer from the rendezvous at {addr} within {seconds} s")]
    Timeout {
        /// MASTER_ADDR:MASTER_PORT.
        addr: SocketAddr,
        /// How long we waited.
        seconds: u64,
    },
    /// `MASTER_ADDR:MASTER_PORT` does not resolve.
    #[error("cannot resolve the rendezvous address {addr} (MASTER_ADDR:MASTER_PORT): {reason}")]
    Resolve {
        /// What was given.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The host's listening socket failed.
    #[error("the rendezvous host cannot serve: {0}")]
    Serve(std::io::Error),
}
