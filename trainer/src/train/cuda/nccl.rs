//! [`Nccl`]: the GPU [`Collective`], one NCCL communicator per membership
//! generation, built from the rendezvous' [`Group`]: rank 0 makes the
//! unique id with [`new_nccl_id`], the rendezvous hands the bytes to every
//! rank (`Group::nccl_id`), and each rank joins with [`Nccl::from_group`].
//!
//! NCCL talks to its peers over the network itself (sockets, or EFA with
//! the aws-ofi-nccl plugin), on the ports the cluster's security group opens
//! between nodes.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::{Comm, Id, ReduceOp};

use super::{CudaError, Library, call, probe};
use crate::train::collective::{Collective, CollectiveError, Group};

/// Bytes in NCCL's unique id (`ncclUniqueId`).
pub const ID_LEN: usize = 128;

/// A new NCCL unique id (rank 0 makes it; every rank of the group needs the same bytes).
pub fn new_nccl_id() -> Result<Vec<u8>, CudaError> {
    // Id::new panics without libnccl: probe first.
    probe(&[Library::Driver, Library::Nccl])?;
    let id = Id::new().map_err(call("making the NCCL unique id (ncclGetUniqueId)"))?;
    Ok(id.internal().iter().map(|&c| c as u8).collect())
}

/// One rank's NCCL communicator.
#[derive(Debug)]
pub struct Nccl {
    comm: Comm,
}

impl Nccl {
    /// Joins the group `group` describes, on `stream`'s device. Blocks until
    /// every rank of the group has joined (NCCL's `ncclCommInitRank`).
    pub fn from_group(stream: &Arc<CudaStream>, group: &Group) -> Result<Self, CudaError> {
        let id = group.nccl_id.as_deref().ok_or_else(|| {
            CudaError::Shape(format!(
                "generation {}: the rendezvous passed no NCCL id (rank 0 must make one with new_nccl_id)",
                group.generation
            ))
        })?;
        Self::new(stream, group.rank, group.world_size, id)
    }

    /// Joins as `rank` of `world_size` ranks sharing the unique id `id`.
    pub fn new(stream: &Arc<CudaStream>, rank: usize, world_size: usize, id: &[u8]) -> Result<Self, CudaError> {
        probe(&[Library::Nccl])?;
        let bytes: [u8; ID_LEN] = id.try_into().map_err(|_| {
            CudaError::Shape(format!("an NCCL unique id has {ID_LEN} bytes, the rendezvous passed {}", id.len()))
        })?;
        let id = Id::uninit(bytes.map(|b| b as core::ffi::c_char));
        // NCCL uses the calling thread's current context for the communicator's device.
        stream.context().bind_to_thread().map_err(call("binding the CUDA context"))?;
        let comm = Comm::from_rank(stream.clone(), rank, world_size, id)
            .map_err(call("joining the NCCL group (ncclCommInitRank)"))?;
        Ok(Self { comm })
    }
}

fn device(e: impl std::fmt::Debug) -> CollectiveError {
    CollectiveError::Device(format!("NCCL: {e:?}"))
}

impl Collective<CudaSlice<f32>> for Nccl {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    fn all_reduce_sum(&mut self, buf: &mut CudaSlice<f32>) -> Result<(), CollectiveError> {
        // Queued on the engine's stream, so the SGD kernel after it sees the sum.
        self.comm.all_reduce_in_place(buf, &ReduceOp::Sum).map(drop).map_err(device)
    }

    fn broadcast(&mut self, buf: &mut CudaSlice<f32>, root: usize) -> Result<(), CollectiveError> {
        let root = i32::try_from(root).map_err(device)?;
        self.comm.broadcast_in_place(buf, root).map(drop).map_err(device)
    }
}
