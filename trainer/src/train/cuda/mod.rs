//! The GPU path of `trainer train` (cargo feature `cuda`): [`CudaEngine`]
//! keeps the parameters, gradients, momentum and activations in device
//! memory, runs the linear layers and the im2col convolutions as cuBLAS
//! SGEMMs and everything element-wise as NVRTC-compiled kernels
//! (`kernels.cu`), and sums gradients across ranks with [`Nccl`].
//!
//! Everything is loaded at run time by cudarc (`dynamic-loading`, CUDA 12.8
//! API): `libcuda.so.1` (the driver), cuBLAS, NVRTC and NCCL. Some cudarc
//! calls panic when their library is missing, so [`probe`] checks each one
//! first and every entry point here returns [`CudaError::Missing`] ("--device
//! cuda: no CUDA driver (libcuda.so.1) found on this host; ...") instead.
//!
//! The parameter layout is the CPU model's (one flat vector, layers in order,
//! weight then bias), so checkpoints and state transfers are
//! device-independent and `set_state` with the host's `Model::init(seed)`
//! makes CPU and GPU start identical.
//!
//! Modules: [`kernels`] (the NVRTC kernels, compiled for the device's
//! architecture, and their launches), `bias_grad` (a layer's bias gradient
//! as cuBLAS products with a ones vector), `net` (the layer plan, forward,
//! backward and SGD on the device), [`nccl`](Nccl) (the collective and its
//! watchdog), `reference` (the CPU model's arithmetic in the device's
//! layouts) and [`kernel_check`] (each kernel and one step of each model
//! against that reference, on a GPU). [`Library::resolves`] looks a symbol
//! up in a library as cudarc loads it (`scripts/gpu-toolchain` checks every
//! symbol the trainer uses that way, without a GPU).

mod bias_grad;
pub mod kernel_check;
pub mod kernels;
mod nccl;
mod net;
mod reference;

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

pub use nccl::{DeviceBench, Nccl, new_nccl_id};

use super::model::Model;
use super::optim::Sgd;

use super::collective::{Collective, Single};
use super::engine::{Batch, Engine, EngineError, Slots, StepStats, Stepped, TrainState, leaving_flag};

/// A GPU library is missing, or a CUDA call failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A library could not be loaded: no driver, or CUDA 12 libraries not installed.
    #[error("--device cuda: no {what} ({lib}) found on this host; {hint}")]
    Missing {
        /// What is missing, e.g. "CUDA driver".
        what: &'static str,
        /// The library file cudarc looks for.
        lib: &'static str,
        /// What to do.
        hint: &'static str,
    },
    /// The driver loaded but reports no device with this ordinal.
    #[error("--device cuda: GPU {ordinal} requested, the driver reports {count}")]
    NoDevice {
        /// The requested ordinal (`LOCAL_RANK`).
        ordinal: usize,
        /// Devices the driver reports.
        count: i32,
    },
    /// A driver, cuBLAS or NCCL call failed.
    #[error("CUDA: {step}: {detail}")]
    Call {
        /// What was being done.
        step: &'static str,
        /// The library's error.
        detail: String,
    },
    /// NVRTC could not compile the kernels.
    #[error("CUDA: compiling the element-wise kernels with NVRTC: {0}")]
    Compile(String),
    /// This NVRTC does not know the GPU's architecture (it is older than the GPU).
    #[error("CUDA: this NVRTC cannot compile for {arch}: {log}")]
    Architecture {
        /// The architecture asked for, e.g. `sm_90`.
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// A batch, a state, the epoch's sums or an NCCL id of another size was given.
    #[error("{0}")]
    Shape(String),
}

impl From<CudaError> for EngineError {
    fn from(e: CudaError) -> Self {
        EngineError::Device(e.to_string())
    }
}

/// Wraps a library error with the step that failed.
pub(crate) fn call<E: std::fmt::Debug>(step: &'static str) -> impl FnOnce(E) -> CudaError {
    move |e| CudaError::Call { step, detail: format!("{e:?}") }
}

/// The libraries the GPU path needs, as cudarc loads them (dynamic loading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// `libcuda.so.1`, installed with the NVIDIA driver.
    Driver,
    /// cuBLAS (CUDA 12 toolkit or the `nvidia-cublas-cu12` wheel).
    Cublas,
    /// NVRTC.
    Nvrtc,
    /// NCCL.
    Nccl,
}

impl Library {
    fn present(self) -> bool {
        // cudarc's loaders panic on a missing library; this only tries to
        // load one (cudarc::*::sys::is_culib_present) and calls nothing in it.
        let found = std::panic::catch_unwind(|| {
            // SAFETY: loading a shared library runs its initialisers; these are
            // NVIDIA's own libraries, loaded exactly as cudarc loads them for use.
            unsafe {
                match self {
                    Library::Driver => cudarc::driver::sys::is_culib_present(),
                    Library::Cublas => cudarc::cublas::sys::is_culib_present(),
                    Library::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                    Library::Nccl => cudarc::nccl::sys::is_culib_present(),
                }
            }
        });
        found.unwrap_or(false)
    }

    fn missing(self) -> CudaError {
        let (what, lib, hint) = match self {
            Library::Driver => (
                "CUDA driver",
                "libcuda.so.1",
                "install the NVIDIA driver on a GPU instance, or train with --device cpu",
            ),
            Library::Cublas => (
                "cuBLAS library",
                "libcublas.so.12",
                "install the CUDA 12 runtime libraries (cuda-libraries-12-8), or train with --device cpu",
            ),
            Library::Nvrtc => (
                "NVRTC library",
                "libnvrtc.so.12",
                "install the CUDA 12 runtime libraries (cuda-libraries-12-8), or train with --device cpu",
            ),
            // cudarc 0.19 looks for the unversioned name (libnccl.so) and a few
            // others, but not the runtime package's libnccl.so.2: the link that
            // the development package adds is needed (scripts/gpu-toolchain
            // found this with NVIDIA's own NCCL wheel, which has only libnccl.so.2).
            Library::Nccl => (
                "NCCL library",
                "libnccl.so",
                "install NCCL 2 for CUDA 12 with its unversioned link libnccl.so on the library path \
                 (Debian/Ubuntu: libnccl2 and libnccl-dev; or `ln -s libnccl.so.2 libnccl.so` beside it), \
                 or train with --device cpu",
            ),
        };
        CudaError::Missing { what, lib, hint }
    }

    /// Every library, as cudarc's modules name them (`cudarc::cublas`, ...).
    pub const ALL: [Library; 4] = [Library::Driver, Library::Cublas, Library::Nvrtc, Library::Nccl];

    /// The name of cudarc's module that loads it: `driver`, `cublas`, `nvrtc`, `nccl`.
    pub fn module(self) -> &'static str {
        match self {
            Library::Driver => "driver",
            Library::Cublas => "cublas",
            Library::Nvrtc => "nvrtc",
            Library::Nccl => "nccl",
        }
    }

    /// Whether `symbol` resolves in the library as cudarc loads it (the
    /// library it finds, by its search, is the one a call would use);
    /// [`CudaError::Missing`] when the library itself cannot be loaded.
    pub fn resolves(self, symbol: &str) -> Result<bool, CudaError> {
        probe(&[self])?;
        // SAFETY: the probe above found the library, so culib() loads it rather than panicking;
        // a symbol is only looked up (dlsym), never called, so its type does not matter.
        let found = unsafe {
            let lib = match self {
                Library::Driver => cudarc::driver::sys::culib(),
                Library::Cublas => cudarc::cublas::sys::culib(),
                Library::Nvrtc => cudarc::nvrtc::sys::culib(),
                Library::Nccl => cudarc::nccl::sys::culib(),
            };
            lib.get::<*const std::ffi::c_void>(symbol.as_bytes()).is_ok()
        };
        Ok(found)
    }
}

impl std::str::FromStr for Library {
    type Err = String;

    /// A cudarc module name, as [`Library::module`] gives it.
    fn from_str(s: &str) -> Result<Self, String> {
        Library::ALL
            .into_iter()
            .find(|l| l.module() == s)
            .ok_or_else(|| format!("`{s}` is not one of the GPU libraries: driver, cublas, nvrtc, nccl"))
    }
}

/// Checks that every library in `libs` can be loaded, without panicking.
pub fn probe(libs: &[Library]) -> Result<(), CudaError> {
    match libs.iter().find(|lib| !lib.present()) {
        Some(lib) => Err(lib.missing()),
        None => Ok(()),
    }
}

/// Opens GPU `ordinal` (this rank's `LOCAL_RANK`) and its stream.
pub fn open_device(ordinal: usize) -> Result<Arc<CudaStream>, CudaError> {
    probe(&[Library::Driver])?;
    let count = CudaContext::device_count().map_err(call("counting devices (cuDeviceGetCount)"))?;
    if ordinal >= usize::try_from(count).unwrap_or(0) {
        return Err(CudaError::NoDevice { ordinal, count });
    }
    let ctx = CudaContext::new(ordinal).map_err(call("opening the device (cuCtxCreate)"))?;
    Ok(ctx.default_stream())
}

/// One rank's model on a GPU: [`Engine`] over device buffers, gradients
/// summed by its collective (an [`Nccl`] group, set with
/// [`set_collective`](Self::set_collective), or [`Single`] until then).
pub struct CudaEngine {
    net: net::Net,
    collective: Box<dyn Collective<CudaSlice<f32>>>,
    epoch: u64,
    step: u64,
    flag: RaisedFlag,
    /// Every rank's mean compute seconds per step over the window before
    /// the last read ([`Engine::step_seconds`]).
    seconds: Vec<f32>,
}

/// This rank's leaving flag between two reads of the group's flags: once
/// raised it stays raised until a read has counted it, so a flag raised
/// after a step that is not read is not lost.
#[derive(Debug, Default, Clone, Copy)]
struct RaisedFlag(bool);

impl RaisedFlag {
    /// The flag this step's all-reduce carries, `leaving` being this
    /// rank's wish now.
    fn carry(&mut self, leaving: bool) -> f32 {
        self.0 |= leaving;
        leaving_flag(self.0)
    }

    /// A read counted it (or a new state starts over).
    fn counted(&mut self) {
        self.0 = false;
    }
}

impl CudaEngine {
    /// The engine for the CPU `model`'s layers and parameter layout, on GPU
    /// `ordinal` (this rank's `LOCAL_RANK`), alone in its group ([`Single`])
    /// until [`set_collective`](Self::set_collective).
    /// Parameters start at zero: call [`Engine::set_state`] with the
    /// host's `Model::init(seed)` so every device starts the same.
    pub fn new(ordinal: usize, model: &Model, sgd: Sgd) -> Result<Self, CudaError> {
        let stream = open_device(ordinal)?;
        probe(&[Library::Cublas, Library::Nvrtc])?;
        let net = net::Net::new(stream, model, sgd)?;
        Ok(Self {
            net,
            collective: Box::new(Single),
            epoch: 0,
            step: 0,
            flag: RaisedFlag::default(),
            seconds: Vec::new(),
        })
    }

    /// The device's stream, on which a new group's collective is built
    /// (`Nccl::from_group(engine.stream(), &group)`).
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.net.stream()
    }

    /// Replaces the collective (the elastic layer's new group), and the
    /// slots after the gradients with the new group's.
    pub fn set_collective(&mut self, collective: Box<dyn Collective<CudaSlice<f32>>>) -> Result<(), CudaError> {
        self.net.set_slots(Slots { rank: collective.rank(), world: collective.world_size() })?;
        self.collective = collective;
        self.seconds.clear();
        Ok(())
    }
}

/// The GPU reports its sums and the group's leaving count only every
/// [`net::READ_EVERY`] steps ([`net::read_due`] of its step counter, which
/// every rank of a group shares), and zero in between; a flag this rank
/// raised stays raised until such a read. [`Engine::sum_over_ranks`] adds
/// the sums not yet reported, so an epoch's figures are whole.
impl Engine for CudaEngine {
    fn step(&mut self, batch: &Batch<'_>, global_batch: usize, lr: f32, leaving: bool) -> Result<Stepped, EngineError> {
        // This rank's own work, timed on the device; the all-reduce's wait is not.
        self.net.begin_step()?;
        self.net.forward_backward(batch)?;
        self.net.end_step(!batch.labels.is_empty())?;
        self.net.carry_times()?;
        self.net.set_leaving_flag(self.flag.carry(leaving))?;
        self.collective.all_reduce_sum(self.net.grads_mut())?;
        self.net.update(lr, 1.0 / global_batch.max(1) as f32)?;
        self.step += 1;
        if !net::read_due(self.step) {
            return Ok(Stepped::default());
        }
        let stats = self.net.take_stats()?;
        let slots = self.net.read_slots()?;
        let (leaving, seconds) = Slots::read(&slots);
        self.seconds.clear();
        self.seconds.extend_from_slice(seconds);
        self.flag.counted();
        // The host has waited for the device: this window's timing events
        // are done, and its mean rides in the next window's steps.
        self.net.publish_window_time()?;
        // The times read are each rank's mean over the window before.
        Ok(Stepped { stats, leaving, timed_steps: net::READ_EVERY })
    }

    fn evaluate(&mut self, batch: &Batch<'_>) -> Result<StepStats, EngineError> {
        Ok(self.net.evaluate(batch)?)
    }

    fn sum_over_ranks(&mut self, mut stats: StepStats) -> Result<StepStats, EngineError> {
        stats += self.net.take_stats()?;
        let stream = self.net.stream().clone();
        let mut sums = stream.clone_htod(&stats.to_floats()).map_err(call("copying the epoch's sums to the device"))?;
        self.collective.all_reduce_sum(&mut sums)?;
        let host = stream.clone_dtoh(&sums).map_err(call("copying the epoch's sums to the host"))?;
        let host: [f32; 3] = host.try_into().map_err(|v: Vec<f32>| {
            CudaError::Shape(format!("the epoch's sums came back as {} floats, not 3", v.len()))
        })?;
        Ok(StepStats::from_floats(host))
    }

    fn step_seconds(&self) -> &[f32] {
        &self.seconds
    }

    fn state(&self) -> Result<TrainState, EngineError> {
        let (params, momentum) = self.net.download()?;
        Ok(TrainState { params, momentum, epoch: self.epoch, step: self.step })
    }

    fn set_state(&mut self, state: &TrainState) -> Result<(), EngineError> {
        // A new state starts (or redoes) an epoch: the sums of steps not yet read are not its.
        self.net.discard_stats();
        self.flag.counted();
        self.net.reset_times()?;
        self.net.upload(&state.params, &state.momentum)?;
        self.epoch = state.epoch;
        self.step = state.step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::engine::leaving_count;

    /// The GPU engine's leave protocol without a GPU: three ranks, each
    /// with its own flag, sum their flags every step (the all-reduce) and
    /// look at the sum only after the steps [`net::read_due`] picks. Rank 2
    /// wants to leave at one step only (its notice watch is sticky, but the
    /// engine must not depend on it): every rank sees the count at the same
    /// read, the first at or after that step, within `READ_EVERY` steps.
    #[test]
    fn a_flag_raised_between_reads_is_counted_by_every_rank_at_the_next_read() {
        let every = net::READ_EVERY;
        for raise_at in [1, every - 1, every, every + 1, 3 * every + 5] {
            let mut flags = [RaisedFlag::default(); 3];
            let mut seen = None;
            for steps in 1..=5 * every {
                let sum: f32 =
                    flags.iter_mut().enumerate().map(|(rank, flag)| flag.carry(rank == 2 && steps == raise_at)).sum();
                if !net::read_due(steps) {
                    continue;
                }
                // Every rank reads the same all-reduced sum after the same step.
                let counts: Vec<u32> = flags
                    .iter_mut()
                    .map(|flag| {
                        flag.counted();
                        leaving_count(sum)
                    })
                    .collect();
                assert!(counts.iter().all(|&c| c == counts[0]), "{counts:?}");
                if counts[0] > 0 {
                    seen = Some((steps, counts[0]));
                    break;
                }
            }
            let (at, count) = seen.unwrap_or_else(|| panic!("a flag raised at step {raise_at} was never counted"));
            assert_eq!(count, 1, "raised at {raise_at}");
            assert!(at >= raise_at && at < raise_at + every, "raised at {raise_at}, counted at {at}");
        }
        // A flag raised and counted does not count again.
        let mut flag = RaisedFlag::default();
        assert_eq!(flag.carry(true), 1.0);
        flag.counted();
        assert_eq!(flag.carry(false), 0.0);
    }

    /// This project's machines have no GPU: every entry point says so, none panics.
    /// On a machine with a driver the same test checks the count is consistent.
    #[test]
    fn without_a_driver_everything_is_a_clear_error() {
        if Library::Driver.present() {
            let count = CudaContext::device_count().unwrap_or(0);
            assert_eq!(count < 1, open_device(0).is_err());
            return;
        }
        let err = open_device(0).unwrap_err().to_string();
        assert_eq!(
            err,
            "--device cuda: no CUDA driver (libcuda.so.1) found on this host; install the NVIDIA driver on a GPU instance, or train with --device cpu"
        );
        assert!(new_nccl_id().unwrap_err().to_string().starts_with("--device cuda: no "));
        let sgd = Sgd { momentum: 0.9, weight_decay: 5e-4 };
        let model = Model::new(crate::train::model::Arch::Lenet, (1, 28, 28));
        let engine = CudaEngine::new(0, &model, sgd);
        assert_eq!(engine.err().unwrap().to_string(), err);
    }
}
