//! The rendezvous' wire protocol: what a process says ([`Report`], its
//! [`Hello`] first), what the host answers ([`Decision`]), and how either
//! travels: one JSON object per line, `{"v": 2, "type": ..., ...}`
//! ([`send`], [`receive`]). A line longer than [`MAX_LINE`] bytes, an
//! unknown version or malformed JSON is an error, never a panic.
//!
//! Inputs: any byte stream (the control connections; a buffer in tests).
//! No files.

use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;

use super::RendezvousError;
use crate::train::collective::Member;
use serde::{Deserialize, Serialize};

/// The rendezvous protocol this build speaks.
/// Version 2 added leaving: `leaving` in `boundary`, the `stopped` report
/// and `step` in `group`.
pub const PROTOCOL_VERSION: u32 = 2;
/// Longest control line accepted, in bytes.
pub const MAX_LINE: u64 = 1 << 20;

/// A process introduces itself (first line on a control connection).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The node's instance id (from the agent's state file).
    pub instance_id: String,
    /// `deeplearning-worker<index>`.
    pub alias: String,
    /// The node's private IP (names its prepare-data marker).
    pub ip: String,
    /// The agent's worker index (1 = the master): the rank order.
    pub index: u32,
    /// Which of the node's processes this is.
    pub local_rank: u32,
    /// Where this process's ring listens.
    pub data_addr: SocketAddr,
    /// Epochs completed in the state it holds.
    pub epoch: u64,
    /// Steps completed in the state it holds.
    pub step: u64,
}

/// What a process tells the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Report {
    /// First line: who this is.
    Hello(Hello),
    /// The group formed in `round` finished epoch `epoch`.
    Boundary {
        /// The round of the group it trained in.
        round: u64,
        /// The epoch just completed.
        epoch: u64,
        /// This process leaves (its host was given an interruption notice).
        #[serde(default)]
        leaving: bool,
    },
    /// The group formed in `round` stopped after `step` steps of epoch
    /// `epoch`: a rank raised its leaving flag in that step's all-reduce.
    Stopped {
        /// The round of the group it trained in.
        round: u64,
        /// The epoch it stopped in.
        epoch: u64,
        /// Steps of the epoch completed (by every member: the same all-reduce).
        step: u64,
        /// This process is the one leaving (or one of them).
        #[serde(default)]
        leaving: bool,
    },
    /// A collective of the group formed in `round` failed during epoch `epoch`.
    Failed {
        /// The round of the group it trained in.
        round: u64,
        /// The epoch that was interrupted.
        epoch: u64,
        /// The collective's error, for the host's log.
        error: String,
    },
}

/// What the host tells a process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    /// Train in a (new) group.
    Group {
        /// Rendezvous round (grows by one with every group formed).
        round: u64,
        /// The agent's generation the group was formed for.
        generation: u64,
        /// This process's rank.
        rank: usize,
        /// Every rank's data-plane address.
        peers: Vec<SocketAddr>,
        /// The rank whose state everyone takes.
        source_rank: usize,
        /// NCCL's unique id (GPU path).
        nccl_id: Option<Vec<u8>>,
        /// The epoch to run next.
        epoch: u64,
        /// The epoch is a redo after a failure: restore its starting state.
        redo: bool,
        /// Steps of `epoch` already run by the members (a group formed
        /// mid-epoch after a leave: no state moves); 0 otherwise.
        #[serde(default)]
        step: u64,
        /// Every rank's node, by rank: sent to rank 0 only (the process
        /// that hosts the rendezvous, so always of the same release), which
        /// names a straggler by them; empty for the others.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        members: Vec<Member>,
    },
    /// Same group, next epoch (or, after a mid-epoch stop, the rest of the epoch).
    Continue {
        /// The current round.
        round: u64,
    },
    /// This process is no longer a member: exit cleanly.
    Left {
        /// Why, for the log.
        reason: String,
    },
    /// This process cannot take part (bad version, bad input).
    Refused {
        /// Why.
        reason: String,
    },
}

/// A versioned line on the wire.
#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    v: u32,
    #[serde(flatten)]
    body: T,
}

/// Writes `body` as one versioned JSON line.
pub fn send<T: Serialize>(w: &mut impl Write, body: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(&Envelope { v: PROTOCOL_VERSION, body }).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)
}

/// Reads one versioned JSON line; `Ok(None)` at end of file.
pub fn receive<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead, from: &str) -> Result<Option<T>, ReceiveError> {
    let mut line = Vec::new();
    r.take(MAX_LINE + 1).read_until(b'\n', &mut line).map_err(ReceiveError::Io)?;
    if line.is_empty() {
        return Ok(None);
    }
    let malformed = |reason: String| ReceiveError::Malformed(RendezvousError::Malformed { from: from.into(), reason });
    if line.last() != Some(&b'\n') {
        return Err(if line.len() as u64 > MAX_LINE {
            malformed(format!("a line longer than {MAX_LINE} bytes"))
        } else {
            ReceiveError::Io(std::io::ErrorKind::UnexpectedEof.into())
        });
    }
    #[derive(Deserialize)]
    struct Probe {
        v: Option<u64>,
    }
    let probe: Probe = serde_json::from_slice(&line).map_err(|e| malformed(e.to_string()))?;
    if probe.v != Some(u64::from(PROTOCOL_VERSION)) {
        return Err(malformed(format!("protocol version {:?}, this build speaks {PROTOCOL_VERSION}", probe.v)));
    }
    let env: Envelope<T> = serde_json::from_slice(&line).map_err(|e| malformed(e.to_string()))?;
    Ok(Some(env.body))
}

/// Why [`receive`] failed.
#[derive(Debug)]
pub enum ReceiveError {
    /// The connection failed.
    Io(std::io::Error),
    /// The line is not the protocol.
    Malformed(RendezvousError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_bad_ones_are_errors() {
        let mut buf = Vec::new();
        send(&mut buf, &Report::Boundary { round: 3, epoch: 2, leaving: false }).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&buf),
            "{\"v\":2,\"type\":\"boundary\",\"round\":3,\"epoch\":2,\"leaving\":false}\n"
        );
        let got: Report = receive(&mut buf.as_slice(), "t").unwrap().unwrap();
        assert_eq!(got, Report::Boundary { round: 3, epoch: 2, leaving: false });
        // `leaving` and `step` may be left out (they default to false and 0).
        let line = "{\"v\":2,\"type\":\"stopped\",\"round\":4,\"epoch\":1,\"step\":7}\n";
        let got: Report = receive(&mut line.as_bytes(), "t").unwrap().unwrap();
        assert_eq!(got, Report::Stopped { round: 4, epoch: 1, step: 7, leaving: false });

        for (line, want) in [
            ("{\"v\":1,\"type\":\"boundary\",\"round\":3,\"epoch\":2}\n", "protocol version Some(1)"),
            ("{\"type\":\"boundary\"}\n", "protocol version None"),
            ("{\"v\":2,\"type\":\"dance\"}\n", "unknown variant"),
            ("not json\n", "expected"),
        ] {
            match receive::<Report>(&mut line.as_bytes(), "peer") {
                Err(ReceiveError::Malformed(e)) => assert!(e.to_string().contains(want), "{line}: {e}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        let long = vec![b'x'; MAX_LINE as usize + 10];
        assert!(matches!(receive::<Report>(&mut long.as_slice(), "p"), Err(ReceiveError::Malformed(_))));
        assert!(matches!(receive::<Report>(&mut &b"{\"v\":1"[..], "p"), Err(ReceiveError::Io(_))));
        assert!(matches!(receive::<Report>(&mut &b""[..], "p"), Ok(None)));
    }
}
