//! The burns, through CUDA, cuBLAS and NCCL as cudarc loads them at run
//! time:
//!
//! - GEMM: BF16 × BF16 → BF16 with FP32 accumulation
//!   (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`), square 8192 matrices of random
//!   values in [-1, 1) (random, not constant: constant operands draw less
//!   power and would hide a GPU that slows down at its power limit), after
//!   a warm-up; 2·8192³ floating point operations each.
//! - Memory: 1 GiB device-to-device copies (`cuMemcpyDtoDAsync`), counting
//!   the bytes read and the bytes written, as nvbandwidth and BabelStream's
//!   Copy do (so the figure compares with the datasheet's bandwidth).
//! - All-reduce: one communicator per GPU in this process
//!   (`ncclCommInitAll`), in-place sums of 256 MiB of f32 on every GPU in
//!   one NCCL group, bus bandwidth as nccl-tests computes it for
//!   all-reduce: bytes / time × 2(n-1)/n.
//!
//! Each is timed with CUDA events around whole batches and runs until
//! `for_ms` of GPU time has passed. A GPU that stops answering (its events
//! never complete) is an error after `for_ms` plus [`HANG`], not a hung
//! gate; an all-reduce past it aborts its communicators.
//!
//! GPUs are found by PCI address, so NVML's index `gpu` is the same GPU
//! here whatever CUDA's device order (fastest first by default) or
//! `CUDA_VISIBLE_DEVICES`.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::{CudaBlas, result as blas, sys as blas_sys};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, result, sys};
use cudarc::nccl::{Comm, ReduceOp, result as nccl};

/// How long past its time a burn may go before its GPU counts as hung
/// (contexts, allocations, cuBLAS's first kernel choice, NCCL's first
/// connections).
pub(super) const HANG: Duration = Duration::from_secs(30);

const GEMM_N: usize = 8192;
const COPY_BYTES: usize = 1 << 30;
const ALLREDUCE_FLOATS: usize = 64 << 20;

/// The libraries the burns load.
#[derive(Clone, Copy, Debug)]
enum Library {
    Driver,
    Cublas,
    Nccl,
}

impl Library {
    fn present(self) -> bool {
        // cudarc's loaders panic on a missing library; this only tries to load one.
        std::panic::catch_unwind(|| {
            // SAFETY: loading NVIDIA's own libraries runs their initialisers,
            // exactly as cudarc does before its first call; nothing is called.
            unsafe {
                match self {
                    Library::Driver => sys::is_culib_present(),
                    Library::Cublas => blas_sys::is_culib_present(),
                    Library::Nccl => cudarc::nccl::sys::is_culib_present(),
                }
            }
        })
        .unwrap_or(false)
    }

    fn missing(self) -> String {
        match self {
            Library::Driver => "no NVIDIA driver: the CUDA driver library (libcuda.so.1) was not found".into(),
            Library::Cublas => {
                "no cuBLAS library (libcublas.so.12) found: install the CUDA 12 runtime libraries (cuda-libraries-12-8)"
                    .into()
            }
            // cudarc 0.19 looks for the unversioned name (scripts/gpu-toolchain found this for the trainer).
            Library::Nccl => {
                "no NCCL library (libnccl.so) found: install NCCL 2 for CUDA 12 with its unversioned link \
                              (libnccl2 and libnccl-dev, or `ln -s libnccl.so.2 libnccl.so`)"
                    .into()
            }
        }
    }
}

fn need(libraries: &[Library]) -> Result<(), String> {
    match libraries.iter().find(|l| !l.present()) {
        Some(l) => Err(l.missing()),
        None => Ok(()),
    }
}

fn call<E: std::fmt::Debug>(step: &'static str) -> impl FnOnce(E) -> String {
    move |e| format!("CUDA: {step}: {e:?}")
}

/// CUDA's ordinal of the GPU at this PCI address.
fn ordinal(pci: (u32, u32, u32)) -> Result<usize, String> {
    need(&[Library::Driver])?;
    result::init().map_err(call("initialising the driver (cuInit)"))?;
    let count = result::device::get_count().map_err(call("counting devices (cuDeviceGetCount)"))?;
    for o in 0..count {
        let dev = result::device::get(o).map_err(call("opening a device (cuDeviceGet)"))?;
        let attr = |a| {
            // SAFETY: `dev` came from cuDeviceGet just above.
            unsafe { result::device::get_attribute(dev, a) }.map_err(call("reading a device's PCI address"))
        };
        let at = (
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        );
        if (at.0 as u32, at.1 as u32, at.2 as u32) == pci {
            return usize::try_from(o).map_err(|_| "CUDA: a negative device ordinal".to_string());
        }
    }
    Err(format!(
        "the GPU at PCI {:04x}:{:02x}:{:02x} is not among CUDA's {count} devices (CUDA_VISIBLE_DEVICES?)",
        pci.0, pci.1, pci.2
    ))
}

fn context(pci: (u32, u32, u32)) -> Result<Arc<CudaContext>, String> {
    CudaContext::new(ordinal(pci)?).map_err(call("creating a context (cuDevicePrimaryCtxRetain)"))
}

fn timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, String> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(call("creating an event"))
}

/// Waits until `event` completes, or fails at `deadline`.
fn wait(event: &CudaEvent, deadline: Instant, what: &str) -> Result<(), String> {
    let mut pause = Duration::from_micros(50);
    loop {
        if event.try_is_complete().map_err(call("polling an event"))? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{what} did not finish in time: the GPU stopped answering"));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// Launches `launch` in batches of `batch` on `stream` until `for_ms` of
/// GPU time has passed: (launches, seconds).
fn timed(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    for_ms: u64,
    batch: u64,
    what: &str,
    mut launch: impl FnMut() -> Result<(), String>,
) -> Result<(u64, f64), String> {
    let start = timing_event(ctx)?;
    let end = timing_event(ctx)?;
    let deadline = Instant::now() + Duration::from_millis(for_ms) + HANG;
    start.record(stream).map_err(call("recording an event"))?;
    let mut count = 0;
    loop {
        for _ in 0..batch {
            launch()?;
            count += 1;
        }
        end.record(stream).map_err(call("recording an event"))?;
        wait(&end, deadline, what)?;
        let ms = start.elapsed_ms(&end).map_err(call("reading the events' time"))?;
        if f64::from(ms) >= for_ms as f64 {
            return Ok((count, f64::from(ms) / 1000.0));
        }
    }
}

/// A device buffer of `len` BF16 values in [-1, 1): one 2 MiB piece of
/// random values, written over and over (random enough to draw the power
/// real operands draw, and cheap to make on the host in any build profile).
fn random_bf16(stream: &Arc<CudaStream>, len: usize, seed: u64) -> Result<CudaSlice<u16>, String> {
    let mut buf = stream.alloc_zeros::<u16>(len).map_err(call("allocating a matrix"))?;
    let mut state = seed | 1;
    let piece: Vec<u16> = (0..(1 << 20))
        .map(|_| {
            // xorshift64: only a spread of values is needed, not quality.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            (x.to_bits() >> 16) as u16
        })
        .collect();
    let mut at = 0;
    while at < len {
        let n = piece.len().min(len - at);
        stream.memcpy_htod(&piece[..n], &mut buf.slice_mut(at..at + n)).map_err(call("copying a matrix to the GPU"))?;
        at += n;
    }
    Ok(buf)
}

/// Dense BF16 TFLOP/s of one GPU.
pub(super) fn gemm_tflops(pci: (u32, u32, u32), gpu: u32, for_ms: u64) -> Result<f64, String> {
    need(&[Library::Driver, Library::Cublas])?;
    let ctx = context(pci)?;
    let stream = ctx.default_stream();
    let n = GEMM_N;
    let a = random_bf16(&stream, n * n, 0x9E37_79B9_7F4A_7C15 ^ u64::from(gpu))?;
    let b = random_bf16(&stream, n * n, 0xD1B5_4A32_D192_ED03 ^ u64::from(gpu))?;
    let mut c = stream.alloc_zeros::<u16>(n * n).map_err(call("allocating a matrix"))?;
    let handle = CudaBlas::new(stream.clone()).map_err(call("creating a cuBLAS handle"))?;
    let dim = n as i32;
    let mut gemm = || -> Result<(), String> {
        let (pa, _a) = a.device_ptr(&stream);
        let (pb, _b) = b.device_ptr(&stream);
        let (pc, _c) = c.device_ptr_mut(&stream);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: three live n×n BF16 buffers on this handle's stream, leading
        // dimensions n, FP32 scalars on the host (the handle's default pointer mode).
        unsafe {
            blas::gemm_ex(
                *handle.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                dim,
                dim,
                dim,
                (&raw const alpha).cast::<c_void>(),
                pa as *const c_void,
                blas_sys::cudaDataType_t::CUDA_R_16BF,
                dim,
                pb as *const c_void,
                blas_sys::cudaDataType_t::CUDA_R_16BF,
                dim,
                (&raw const beta).cast::<c_void>(),
                pc as *mut c_void,
                blas_sys::cudaDataType_t::CUDA_R_16BF,
                dim,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(call("a BF16 GEMM (cublasGemmEx)"))
    };
    // Warm-up: cuBLAS chooses its kernel, clocks rise.
    timed(&ctx, &stream, for_ms.min(300), 4, "the GEMM warm-up", &mut gemm)?;
    let (count, seconds) = timed(&ctx, &stream, for_ms, 8, "the GEMM burn", &mut gemm)?;
    Ok(count as f64 * 2.0 * (n as f64).powi(3) / seconds / 1e12)
}

/// Device-to-device copy bandwidth of one GPU, GB/s (bytes read plus written).
pub(super) fn memory_gbps(pci: (u32, u32, u32), _gpu: u32, for_ms: u64) -> Result<f64, String> {
    need(&[Library::Driver])?;
    let ctx = context(pci)?;
    let stream = ctx.default_stream();
    let src = stream.alloc_zeros::<u8>(COPY_BYTES).map_err(call("allocating 1 GiB"))?;
    let mut dst = stream.alloc_zeros::<u8>(COPY_BYTES).map_err(call("allocating 1 GiB"))?;
    let mut copy = || stream.memcpy_dtod(&src, &mut dst).map_err(call("a device-to-device copy"));
    timed(&ctx, &stream, for_ms.min(100), 4, "the copy warm-up", &mut copy)?;
    let (count, seconds) = timed(&ctx, &stream, for_ms, 16, "the memory burn", &mut copy)?;
    Ok(count as f64 * 2.0 * COPY_BYTES as f64 / seconds / 1e9)
}

/// All-reduce bus bandwidth across the GPUs at these PCI addresses, GB/s.
pub(super) fn allreduce_busbw_gbps(pcis: &[(u32, u32, u32)], for_ms: u64) -> Result<f64, String> {
    need(&[Library::Driver, Library::Nccl])?;
    let n = pcis.len();
    if n < 2 {
        return Err(format!("an all-reduce needs 2 GPUs or more, this node has {n}"));
    }
    let contexts = pcis.iter().map(|p| context(*p)).collect::<Result<Vec<_>, _>>()?;
    let streams: Vec<Arc<CudaStream>> = contexts.iter().map(|c| c.default_stream()).collect();
    let comms = Comm::from_devices(streams.clone()).map_err(call("creating the communicators (ncclCommInitAll)"))?;
    let mut bufs = streams
        .iter()
        .map(|s| s.alloc_zeros::<f32>(ALLREDUCE_FLOATS).map_err(call("allocating 256 MiB")))
        .collect::<Result<Vec<_>, _>>()?;
    let starts = contexts.iter().map(timing_event).collect::<Result<Vec<_>, _>>()?;
    let ends = contexts.iter().map(timing_event).collect::<Result<Vec<_>, _>>()?;

    // One round: every GPU's all-reduce in one NCCL group (one thread drives them all).
    let round = |bufs: &mut [CudaSlice<f32>]| -> Result<(), String> {
        nccl::group_start().map_err(call("ncclGroupStart"))?;
        let mut launched = Ok(());
        for (comm, buf) in comms.iter().zip(bufs.iter_mut()) {
            if let Err(e) = comm.all_reduce_in_place(buf, &ReduceOp::Sum) {
                launched = Err(call("an all-reduce (ncclAllReduce)")(e));
                break;
            }
        }
        nccl::group_end().map_err(call("ncclGroupEnd"))?;
        launched
    };
    let wait_all = |events: &[CudaEvent], deadline: Instant| -> Result<(), String> {
        for (e, s) in events.iter().zip(&streams) {
            e.record(s).map_err(call("recording an event"))?;
        }
        events.iter().try_for_each(|e| wait(e, deadline, "the all-reduce"))
    };

    // Warm-up: NCCL connects its peers during the first collectives.
    for _ in 0..3 {
        round(&mut bufs)?;
    }
    wait_all(&ends, Instant::now() + HANG)?;

    let deadline = Instant::now() + Duration::from_millis(for_ms) + HANG;
    for (e, s) in starts.iter().zip(&streams) {
        e.record(s).map_err(call("recording an event"))?;
    }
    let mut rounds = 0u64;
    let seconds = loop {
        for _ in 0..4 {
            round(&mut bufs)?;
            rounds += 1;
        }
        wait_all(&ends, deadline)?;
        let mut slowest = 0f32;
        for (s, e) in starts.iter().zip(&ends) {
            slowest = slowest.max(s.elapsed_ms(e).map_err(call("reading the events' time"))?);
        }
        if f64::from(slowest) >= for_ms as f64 {
            break f64::from(slowest) / 1000.0;
        }
    };
    let bytes = (ALLREDUCE_FLOATS * std::mem::size_of::<f32>()) as f64;
    let algbw = bytes * rounds as f64 / seconds / 1e9;
    Ok(algbw * 2.0 * (n as f64 - 1.0) / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where cuBLAS and NCCL are installed (CI: NVIDIA's wheels, as
    /// scripts/gpu-toolchain installs them, on LD_LIBRARY_PATH), every
    /// function the burns call resolves in them as cudarc loads them; where
    /// they are not, a burn names the missing library. The driver's
    /// functions cannot be checked without a driver.
    #[test]
    fn the_library_functions_the_burns_call_resolve_or_the_library_is_named() {
        let symbols: [(Library, &[&str]); 2] = [
            (Library::Cublas, &["cublasCreate_v2", "cublasSetStream_v2", "cublasGemmEx"]),
            (Library::Nccl, &["ncclCommInitAll", "ncclAllReduce", "ncclGroupStart", "ncclGroupEnd", "ncclCommAbort"]),
        ];
        for (library, names) in symbols {
            if !library.present() {
                assert!(
                    need(&[library])
                        .unwrap_err()
                        .starts_with(&format!("no {}", ["cuBLAS", "NCCL"][library as usize - 1]))
                );
                eprintln!("{library:?} is not installed here: its symbols are not checked");
                continue;
            }
            for name in names {
                // SAFETY: the library is present (probed above); a symbol is only looked up, never called.
                let found = unsafe {
                    match library {
                        Library::Cublas => blas_sys::culib().get::<*const c_void>(name.as_bytes()).is_ok(),
                        _ => cudarc::nccl::sys::culib().get::<*const c_void>(name.as_bytes()).is_ok(),
                    }
                };
                assert!(found, "{name} is not in the {library:?} library cudarc loads");
            }
        }
        if !Library::Driver.present() {
            assert!(gemm_tflops((0, 0x53, 0), 0, 10).unwrap_err().starts_with("no "));
            assert!(memory_gbps((0, 0x53, 0), 0, 10).unwrap_err().starts_with("no NVIDIA driver"));
            assert!(allreduce_busbw_gbps(&[(0, 0x53, 0), (0, 0x64, 0)], 10).unwrap_err().starts_with("no "));
        }
    }
}
