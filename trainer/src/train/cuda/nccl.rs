//! [`Nccl`]: the GPU [`Collective`], one NCCL communicator per membership
//! generation, built from the rendezvous' [`Group`]: rank 0 makes the
//! unique id with [`new_nccl_id`], the rendezvous hands the bytes to every
//! rank (`Group::nccl_id`), and each rank joins with [`Nccl::from_group`].
//!
//! NCCL talks to its peers over the network itself (sockets, or EFA with
//! the aws-ofi-nccl plugin), on the ports the cluster's security group opens
//! between nodes.
//!
//! A dead or hung peer would leave NCCL's kernels waiting for it forever, so
//! every collective is watched: an event recorded after it is polled, and
//! when it has not completed within [`NCCL_TIMEOUT`] the communicator is
//! aborted (`ncclCommAbort`, which ends its kernels) and the call fails; the
//! elastic layer then treats the group as broken and re-forms it, as it does
//! for the CPU ring's timeouts. Not watched: `ncclCommInitRank` (a rank that
//! dies between the rendezvous' decision and its init leaves the others
//! waiting there).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use cudarc::nccl::{Comm, Id, ReduceOp};

use super::{CudaError, Library, call, probe};
use crate::train::collective::{Collective, CollectiveError, Group};
use crate::train::timing::{Timed, mean_seconds};

/// Bytes in NCCL's unique id (`ncclUniqueId`).
const ID_LEN: usize = 128;

/// How long one collective may take before its group is taken as broken.
/// NCCL connects to its peers during a new communicator's first collective
/// (seconds over EFA), so this is longer than the CPU ring's 10 s silence,
/// and short enough for the survivors to re-form within 30 s.
pub(super) const NCCL_TIMEOUT: Duration = Duration::from_secs(20);

/// Calls `done` until it returns `Ok(true)`, sleeping between calls (a few
/// microseconds at first, growing to 100 us: a step's all-reduce may take
/// about a millisecond, and a query costs less than a microsecond);
/// `Ok(false)` once `timeout` has passed without it.
fn poll_until<E>(timeout: Duration, mut done: impl FnMut() -> Result<bool, E>) -> Result<bool, E> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(5);
    loop {
        if done()? {
            return Ok(true);
        }
        if start.elapsed() >= timeout {
            return Ok(false);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_micros(100));
    }
}

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
    /// `None` once aborted after a timeout.
    comm: Option<Comm>,
    /// Recorded after each collective, polled until it completes.
    done: CudaEvent,
    timeout: Duration,
    rank: usize,
    world_size: usize,
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
    fn new(stream: &Arc<CudaStream>, rank: usize, world_size: usize, id: &[u8]) -> Result<Self, CudaError> {
        probe(&[Library::Nccl])?;
        let bytes: [u8; ID_LEN] = id.try_into().map_err(|_| {
            CudaError::Shape(format!("an NCCL unique id has {ID_LEN} bytes, the rendezvous passed {}", id.len()))
        })?;
        let id = Id::uninit(bytes.map(|b| b as core::ffi::c_char));
        // NCCL uses the calling thread's current context for the communicator's device.
        stream.context().bind_to_thread().map_err(call("binding the CUDA context"))?;
        let comm = Comm::from_rank(stream.clone(), rank, world_size, id)
            .map_err(call("joining the NCCL group (ncclCommInitRank)"))?;
        let done = stream.context().new_event(None).map_err(call("creating a CUDA event"))?;
        Ok(Self { comm: Some(comm), done, timeout: NCCL_TIMEOUT, rank, world_size })
    }

    fn comm(&self) -> Result<&Comm, CollectiveError> {
        self.comm.as_ref().ok_or_else(|| {
            CollectiveError::Device(
                "NCCL: this communicator was aborted after a timeout; the group must re-form".into(),
            )
        })
    }

    /// Waits for the collective just queued (`what`) to complete; aborts the
    /// communicator when it does not within the timeout.
    fn finish(&mut self, what: &str) -> Result<(), CollectiveError> {
        let stream = self.comm()?.stream();
        self.done.record(&stream).map_err(device)?;
        let done = &self.done;
        if poll_until(self.timeout, || done.try_is_complete()).map_err(device)? {
            return Ok(());
        }
        // Dropping cudarc's Comm calls ncclCommAbort, which ends the kernels
        // that wait for the missing peer (and panics if the abort fails).
        let comm = self.comm.take();
        let aborted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(comm))).is_ok();
        Err(CollectiveError::Device(format!(
            "NCCL {what} (rank {} of {}) did not finish within {} s: a peer is gone or hung; {}",
            self.rank,
            self.world_size,
            self.timeout.as_secs(),
            if aborted { "communicator aborted" } else { "and aborting the communicator failed" }
        )))
    }
}

fn device(e: impl std::fmt::Debug) -> CollectiveError {
    CollectiveError::Device(format!("NCCL: {e:?}"))
}

impl Collective<CudaSlice<f32>> for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce_sum(&mut self, buf: &mut CudaSlice<f32>) -> Result<(), CollectiveError> {
        // Queued on the engine's stream, so the SGD kernel after it sees the sum.
        self.comm()?.all_reduce_in_place(buf, &ReduceOp::Sum).map(drop).map_err(device)?;
        self.finish("all-reduce")
    }

    fn broadcast(&mut self, buf: &mut CudaSlice<f32>, root: usize) -> Result<(), CollectiveError> {
        let root = i32::try_from(root).map_err(device)?;
        self.comm()?.broadcast_in_place(buf, root).map(drop).map_err(device)?;
        self.finish("broadcast")
    }
}

/// `trainer bench --device cuda`: NCCL all-reduces of a buffer on this
/// rank's GPU, each waited for as the training step waits for its own.
pub struct DeviceBench {
    nccl: Nccl,
    stream: Arc<CudaStream>,
}

impl DeviceBench {
    /// Joins `group`'s NCCL communicator on `stream`'s device.
    pub fn join(stream: &Arc<CudaStream>, group: &Group) -> Result<Self, CudaError> {
        Ok(Self { nccl: Nccl::from_group(stream, group)?, stream: stream.clone() })
    }
}

impl Timed for DeviceBench {
    fn rank(&self) -> usize {
        self.nccl.rank
    }

    fn world_size(&self) -> usize {
        self.nccl.world_size
    }

    fn time_all_reduce(&mut self, floats: usize, warmup: u32, iters: u32) -> Result<f64, CollectiveError> {
        let mut buf = self.stream.clone_htod(&vec![1.0f32; floats]).map_err(device)?;
        mean_seconds(warmup, iters, || self.nccl.all_reduce_sum(&mut buf))
    }

    fn sum_host(&mut self, values: &mut [f32]) -> Result<(), CollectiveError> {
        let mut buf = self.stream.clone_htod(values).map_err(device)?;
        self.nccl.all_reduce_sum(&mut buf)?;
        let host = self.stream.clone_dtoh(&buf).map_err(device)?;
        values.copy_from_slice(&host);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_stops_when_done_or_after_the_timeout_and_passes_errors_on() {
        let mut calls = 0;
        let done = poll_until(Duration::from_secs(5), || {
            calls += 1;
            Ok::<_, ()>(calls == 3)
        });
        assert_eq!((done, calls), (Ok(true), 3));

        let start = Instant::now();
        assert_eq!(poll_until(Duration::from_millis(30), || Ok::<_, ()>(false)), Ok(false));
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(30) && waited < Duration::from_secs(2), "{waited:?}");

        assert_eq!(
            poll_until(Duration::from_secs(5), || Err::<bool, _>("sticky CUDA error")),
            Err("sticky CUDA error")
        );
    }
}
