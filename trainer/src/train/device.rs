//! The device seam: given `--device`, this room builds everything that
//! depends on where the buffers live, and it is the one place outside
//! `cuda/` that knows whether the build has the `cuda` feature:
//! - [`Device`]: this rank's [`Engine`] (the CPU's or the GPU's) and how a
//!   new group's gradients are summed ([`Device::join_group`]: the TCP ring
//!   on the CPU, NCCL on a GPU);
//! - [`nccl_id_maker`]: what the rendezvous' host calls to make each group's
//!   NCCL unique id;
//! - [`BenchDevice`]: `trainer bench`'s timed collective on either;
//! - [`gpu_libraries`]: whether the GPU path can load its libraries here
//!   (`trainer doctor`, the install check).
//!
//! The rooms above (`run`, `bench`) name the device only by its `--device`
//! value ([`Choice`]); the rooms below (`engine`, `collective`, `ring`,
//! `timing`, `cpu`, `cuda`) do not know this one. A build without the `cuda`
//! feature refuses `--device cuda` here, with one message, before any
//! rendezvous.

use std::sync::Arc;

pub(crate) use super::args::Device as Choice;
use super::collective::{Group, Single};
use super::cpu::{CpuEngine, PoolError};
#[cfg(feature = "cuda")]
use super::cuda::{self, CudaEngine, DeviceBench, Library, Nccl};
use super::engine::{Engine, EngineError};
use super::model::Model;
use super::optim::Sgd;
use super::ring::Ring;
use super::timing::{Host, Timed};

/// The device could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The CPU's compute threads could not be started.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The GPU, its libraries, or this build cannot be used (the message
    /// names the flag: `--device cuda: ...`).
    #[error("{0}")]
    Unavailable(String),
}

/// What a build without the `cuda` feature says to `--device cuda`.
#[cfg(not(feature = "cuda"))]
fn built_without_cuda() -> DeviceError {
    DeviceError::Unavailable(
        "--device cuda: this trainer was built without the `cuda` feature; use --device cpu".to_owned(),
    )
}

/// This rank's engine on its device; the device decides how a new group's
/// gradients are summed.
// One per process, never moved in a loop: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Device {
    /// The model on host memory ([`CpuEngine`]).
    Cpu(CpuEngine),
    /// The model on a GPU (`CudaEngine`).
    #[cfg(feature = "cuda")]
    Cuda(CudaEngine),
}

impl Device {
    /// The engine for `model` on `choice`: on the CPU with `threads` compute
    /// threads (0: one per core), on a GPU with ordinal `ordinal` (this
    /// rank's `LOCAL_RANK`). Alone in its group until
    /// [`join_group`](Self::join_group); its parameters are zero on every
    /// device: the caller loads the starting state with `set_state`.
    pub(crate) fn new(
        choice: Choice,
        model: Model,
        sgd: Sgd,
        threads: usize,
        ordinal: usize,
    ) -> Result<Self, DeviceError> {
        match choice {
            Choice::Cpu => {
                let zeros = vec![0.0; model.num_params()];
                Ok(Device::Cpu(CpuEngine::new(model, zeros, sgd, threads, Box::new(Single))?))
            }
            #[cfg(feature = "cuda")]
            Choice::Cuda => {
                let engine =
                    CudaEngine::new(ordinal, &model, sgd).map_err(|e| DeviceError::Unavailable(e.to_string()))?;
                Ok(Device::Cuda(engine))
            }
            #[cfg(not(feature = "cuda"))]
            Choice::Cuda => {
                let _ = ordinal;
                Err(built_without_cuda())
            }
        }
    }

    /// The engine the training loop drives.
    pub(crate) fn engine(&mut self) -> &mut dyn Engine {
        match self {
            Device::Cpu(e) => e,
            #[cfg(feature = "cuda")]
            Device::Cuda(e) => e,
        }
    }

    /// Sums gradients over `group` from now on: the CPU over its TCP `ring`,
    /// a GPU through NCCL (the ring only carried the state broadcast).
    pub(crate) fn join_group(&mut self, group: &Group, ring: Ring) -> Result<(), EngineError> {
        match self {
            Device::Cpu(e) => {
                let _ = group; // the ring already knows its group
                e.set_collective(Box::new(ring));
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(e) => {
                drop(ring);
                let nccl = Nccl::from_group(e.stream(), group).map_err(EngineError::from)?;
                e.set_collective(Box::new(nccl)).map_err(EngineError::from)
            }
        }
    }
}

/// What the rendezvous' host calls to make each group's NCCL unique id
/// (`HostConfig::nccl_id`) when the ranks sum on GPUs; `None` for the TCP
/// ring, and always in a build without the `cuda` feature.
pub(crate) fn nccl_id_maker(choice: Choice) -> Option<Arc<dyn Fn() -> Vec<u8> + Send + Sync>> {
    #[cfg(feature = "cuda")]
    {
        // A failure here shows up on every rank as NCCL refusing an empty id.
        (choice == Choice::Cuda).then(|| {
            Arc::new(|| {
                cuda::new_nccl_id().unwrap_or_else(|e| {
                    tracing::error!("cannot make the NCCL unique id: {e}");
                    Vec::new()
                })
            }) as Arc<dyn Fn() -> Vec<u8> + Send + Sync>
        })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = choice;
        None
    }
}

/// Whether `trainer train --device cuda` can load what it needs on this
/// host: the CUDA driver, cuBLAS, NVRTC and NCCL (loaded only, nothing is
/// called in them).
pub(crate) fn gpu_libraries() -> Result<(), String> {
    #[cfg(feature = "cuda")]
    {
        cuda::probe(&[Library::Driver, Library::Cublas, Library::Nvrtc, Library::Nccl]).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this trainer was built without the `cuda` feature and cannot use NCCL or the GPUs: install the \
             package built with it (the default)"
            .to_owned())
    }
}

/// Where `trainer bench` sums its buffers: host memory (the TCP ring) or
/// this rank's GPU (NCCL), opened before the rendezvous so that a host
/// without the GPU or its libraries fails at once instead of after the
/// others waited for it.
pub(crate) enum BenchDevice {
    /// Host buffers over the TCP ring.
    Host,
    /// Device buffers through NCCL, on this GPU's stream.
    #[cfg(feature = "cuda")]
    Gpu(Arc<cudarc::driver::CudaStream>),
}

impl BenchDevice {
    /// Opens `choice` (a GPU: ordinal `ordinal`, with NCCL loadable).
    pub(crate) fn open(choice: Choice, ordinal: usize) -> Result<Self, DeviceError> {
        match choice {
            Choice::Cpu => Ok(BenchDevice::Host),
            #[cfg(feature = "cuda")]
            Choice::Cuda => cuda::open_device(ordinal)
                .and_then(|stream| {
                    cuda::probe(&[Library::Nccl])?;
                    Ok(BenchDevice::Gpu(stream))
                })
                .map_err(|e| DeviceError::Unavailable(e.to_string())),
            #[cfg(not(feature = "cuda"))]
            Choice::Cuda => {
                let _ = ordinal;
                Err(built_without_cuda())
            }
        }
    }

    /// The timed collective over `group`, and what carries it ("TCP ring",
    /// "NCCL"): the `ring` itself on the host; on a GPU, NCCL (the ring only
    /// formed the group).
    pub(crate) fn join(self, group: &Group, ring: Ring) -> Result<(Box<dyn Timed>, &'static str), DeviceError> {
        match self {
            BenchDevice::Host => {
                let _ = group; // the ring already knows its group
                Ok((Box::new(Host(ring)), "TCP ring"))
            }
            #[cfg(feature = "cuda")]
            BenchDevice::Gpu(stream) => {
                drop(ring);
                let nccl = DeviceBench::join(&stream, group).map_err(|e| DeviceError::Unavailable(e.to_string()))?;
                Ok((Box::new(nccl), "NCCL"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::model::Arch;

    fn sgd() -> Sgd {
        Sgd { momentum: 0.9, weight_decay: 5e-4 }
    }

    #[test]
    fn the_cpu_builds_its_engine_and_no_nccl_id() {
        let model = Model::new(Arch::Mlp, (1, 28, 28));
        let params = model.num_params();
        let mut device = Device::new(Choice::Cpu, model, sgd(), 1, 0).unwrap();
        assert_eq!(device.engine().state().unwrap().params, vec![0.0; params]);
        assert!(nccl_id_maker(Choice::Cpu).is_none());
        assert!(matches!(BenchDevice::open(Choice::Cpu, 0), Ok(BenchDevice::Host)));
    }

    /// This project's machines have no GPU: `--device cuda` is refused with
    /// the reason (the missing library, or the build without the feature),
    /// by every entry point the same way, and nothing panics.
    #[test]
    fn without_a_gpu_every_entry_point_gives_the_same_reason() {
        let model = Model::new(Arch::Lenet, (1, 28, 28));
        let Err(engine) = Device::new(Choice::Cuda, model, sgd(), 1, 0) else {
            return; // A GPU host: scripts/gpu-check.sh covers it.
        };
        let engine = engine.to_string();
        let driverless = |s: &str| s.contains("(libcuda.so.1)") || s.contains("without the `cuda` feature");
        if !driverless(&engine) {
            return; // A driver without every library: the libraries' own messages are cuda's tests.
        }
        assert!(engine.starts_with("--device cuda: "), "{engine}");
        let bench = BenchDevice::open(Choice::Cuda, 0).err().expect("no driver, yet a bench device").to_string();
        assert_eq!(engine, bench);
        // The install check names the same missing driver (or the same missing feature).
        let libraries = gpu_libraries().expect_err("no driver, yet the GPU libraries load");
        assert!(driverless(&libraries), "{libraries}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_the_cuda_feature_says_so() {
        let model = Model::new(Arch::Mlp, (1, 28, 28));
        let err = Device::new(Choice::Cuda, model, sgd(), 1, 0).err().unwrap().to_string();
        assert_eq!(err, "--device cuda: this trainer was built without the `cuda` feature; use --device cpu");
        assert!(nccl_id_maker(Choice::Cuda).is_none());
    }
}
