//! Collective operations between the ranks of one membership generation,
//! behind one trait: [`Single`] (world size 1), the TCP ring for host memory
//! (`ring`) and NCCL for device memory (`cuda`, feature `cuda`).
//!
//! The trait is generic over the buffer type so that the CPU path sums
//! `[f32]` slices in host memory and the GPU path sums device buffers, while
//! the training loop and the elastic layer see one interface.

use std::net::SocketAddr;

/// One membership generation's group as the rendezvous hands it to a rank:
/// enough to build the collective (the ring's peers, or NCCL's unique id)
/// and to know whose state the group continues from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The agent's membership generation this group was formed for.
    pub generation: u64,
    /// This process's rank, `0..world_size` (the master's process is rank 0).
    pub rank: usize,
    /// The number of ranks.
    pub world_size: usize,
    /// Every rank's data-plane address (the ring's listening sockets), by rank.
    pub peers: Vec<SocketAddr>,
    /// NCCL's unique id, made by rank 0 and passed through the rendezvous
    /// (GPU path only).
    pub nccl_id: Option<Vec<u8>>,
    /// The rank whose training state every rank takes before going on
    /// (a survivor; rank 0 unless it has none).
    pub source_rank: usize,
    /// Every rank's node, by rank, for the messages that name a rank (a
    /// straggler): told to rank 0 only, which names them; empty elsewhere.
    pub members: Vec<Member>,
}

/// The node a rank runs on, as its process introduced itself to the
/// rendezvous (from the agent's manifest).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// `deeplearning-worker<index>`.
    pub alias: String,
    /// The node's EC2 instance id.
    pub instance_id: String,
    /// Which of the node's processes (its GPU).
    pub local_rank: u32,
}

/// A collective operation failed: a peer died, timed out or spoke out of turn.
/// The elastic layer treats every such failure as a leave of the peer named
/// (when known) and re-forms the group with the survivors.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// A peer closed its connection or a read/write failed.
    #[error("rank {peer} ({addr}): {source}")]
    Peer {
        /// The peer's rank in the failed group.
        peer: usize,
        /// Its address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A peer sent nothing within the timeout (a silent dead host).
    #[error("rank {peer} ({addr}) sent nothing for {seconds} s; treating it as gone")]
    Timeout {
        /// The peer's rank in the failed group.
        peer: usize,
        /// Its address.
        addr: String,
        /// The timeout that passed.
        seconds: u64,
    },
    /// A peer sent bytes that do not fit the protocol.
    #[error("rank {peer}: protocol error: {reason}")]
    Protocol {
        /// The peer's rank in the failed group.
        peer: usize,
        /// What was wrong.
        reason: String,
    },
    /// The device library (NCCL) failed.
    #[error("{0}")]
    Device(String),
}

/// Collective operations over buffers of type `B` among `world_size` ranks.
/// Every rank calls the same operations in the same order.
pub trait Collective<B: ?Sized = [f32]> {
    /// This process's rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn world_size(&self) -> usize;
    /// Replaces `buf` on every rank with the element-wise sum over all ranks.
    fn all_reduce_sum(&mut self, buf: &mut B) -> Result<(), CollectiveError>;
    /// Replaces `buf` on every rank with `root`'s.
    fn broadcast(&mut self, buf: &mut B, root: usize) -> Result<(), CollectiveError>;
}

/// A boxed collective is one too, so an engine can hold whichever its group
/// needs (the ring, NCCL, or the group of one) behind one type.
impl<B: ?Sized, C: Collective<B> + ?Sized> Collective<B> for Box<C> {
    fn rank(&self) -> usize {
        (**self).rank()
    }

    fn world_size(&self) -> usize {
        (**self).world_size()
    }

    fn all_reduce_sum(&mut self, buf: &mut B) -> Result<(), CollectiveError> {
        (**self).all_reduce_sum(buf)
    }

    fn broadcast(&mut self, buf: &mut B, root: usize) -> Result<(), CollectiveError> {
        (**self).broadcast(buf, root)
    }
}

/// The group of one: every operation is the identity.
#[derive(Debug, Default, Clone, Copy)]
pub struct Single;

impl<B: ?Sized> Collective<B> for Single {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&mut self, _buf: &mut B) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn broadcast(&mut self, _buf: &mut B, root: usize) -> Result<(), CollectiveError> {
        if root == 0 {
            Ok(())
        } else {
            Err(CollectiveError::Protocol { peer: root, reason: format!("no rank {root} in a group of one") })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_is_the_identity_and_rejects_other_roots() {
        let mut buf = vec![1.0f32, 2.0];
        let mut one = Single;
        Collective::<[f32]>::all_reduce_sum(&mut one, &mut buf).unwrap();
        Collective::<[f32]>::broadcast(&mut one, &mut buf, 0).unwrap();
        assert_eq!(buf, [1.0, 2.0]);
        assert!(Collective::<[f32]>::broadcast(&mut one, &mut buf, 1).is_err());
    }
}
