//! The element-wise kernels of the GPU engine: their CUDA C source
//! (`kernels.cu`), compiled at run time by NVRTC for the device's
//! architecture ([`compile`]), and one launch function per kernel
//! (`Kernels`), which the engine's passes (`net`) and the kernel checks
//! (`kernel_check`) both call, so a check runs exactly what training runs.
//!
//! `scripts/gpu-toolchain` (CI) compiles the source through [`compile`] for
//! every architecture in [`ARCHITECTURES`] and assembles the PTX with
//! ptxas, on a machine without a GPU: NVRTC and ptxas need none.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::result::NvrtcError;
use cudarc::nvrtc::sys::nvrtcResult;
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use super::{CudaError, call};
use crate::train::optim::Sgd;

/// The CUDA C source of the kernels.
pub const SOURCE: &str = include_str!("kernels.cu");

/// The kernels [`SOURCE`] defines, in its order (a test reads them from the source).
pub const NAMES: [&str; 9] = [
    "bias_add",
    "relu_forward",
    "relu_backward",
    "maxpool_forward",
    "maxpool_backward",
    "im2col",
    "col2im",
    "softmax_xent",
    "sgd",
];

/// A GPU architecture, as CUDA numbers it (compute capability `major.minor`):
/// `sm_90` is an H100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ComputeCapability {
    /// The major version (9 for Hopper).
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    /// `sm_90`: the name ptxas and `nvidia-smi` use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

impl FromStr for ComputeCapability {
    type Err = String;

    /// `sm_90`, `compute_90` or `9.0`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a GPU architecture: write it as sm_90 (or compute_90, or 9.0)");
        let digits = s.strip_prefix("sm_").or_else(|| s.strip_prefix("compute_"));
        let (major, minor) = match digits {
            // The last digit is the minor version: sm_90 is 9.0, sm_100 is 10.0.
            Some(d) if d.len() >= 2 && d.bytes().all(|b| b.is_ascii_digit()) => d.split_at(d.len() - 1),
            Some(_) => return Err(bad()),
            None => s.split_once('.').ok_or_else(bad)?,
        };
        let number = |v: &str| v.parse::<u32>().map_err(|_| bad());
        Ok(Self { major: number(major)?, minor: number(minor)? })
    }
}

/// The GPU families of the EC2 instances the Deep Learning AMIs run on, by
/// architecture; CI compiles and assembles the kernels for each.
pub const ARCHITECTURES: [(ComputeCapability, &str); 7] = [
    (ComputeCapability { major: 7, minor: 0 }, "V100 (p3)"),
    (ComputeCapability { major: 7, minor: 5 }, "T4 (g4dn)"),
    (ComputeCapability { major: 8, minor: 0 }, "A100 (p4d)"),
    (ComputeCapability { major: 8, minor: 6 }, "A10G (g5)"),
    (ComputeCapability { major: 8, minor: 9 }, "L4, L40S (g6, g6e)"),
    (ComputeCapability { major: 9, minor: 0 }, "H100, H200 (p5, p5e)"),
    (ComputeCapability { major: 10, minor: 0 }, "B200 (p6)"),
];

/// Compiles [`SOURCE`] with NVRTC to PTX for `arch` (its virtual
/// architecture `compute_XY`, which the driver then assembles for the
/// device), or for NVRTC's default architecture with `None`. This is what
/// the engine runs when it starts, with the device's own architecture.
///
/// An NVRTC that does not know `arch` (older than the GPU) gives
/// [`CudaError::Architecture`]; any other failure is [`CudaError::Compile`]
/// with NVRTC's log.
pub fn compile(arch: Option<ComputeCapability>) -> Result<Ptx, CudaError> {
    let options = CompileOptions {
        options: arch.map(|a| format!("--gpu-architecture=compute_{}{}", a.major, a.minor)).into_iter().collect(),
        ..CompileOptions::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(SOURCE, options).map_err(|e| match e {
        CompileError::CompileError { nvrtc: NvrtcError(nvrtcResult::NVRTC_ERROR_INVALID_OPTION), log, .. }
            if arch.is_some() =>
        {
            CudaError::Architecture {
                arch: arch.map(|a| a.to_string()).unwrap_or_default(),
                log: log.to_string_lossy().trim().to_owned(),
            }
        }
        CompileError::CompileError { nvrtc, log, .. } => {
            CudaError::Compile(format!("{:?}: {}", nvrtc.0, log.to_string_lossy().trim()))
        }
        other => CudaError::Compile(format!("{other:?}")),
    })
}

/// Launch geometry for one thread per element.
fn grid(n: usize) -> LaunchConfig {
    LaunchConfig::for_num_elems(n as u32)
}

/// The kernels, compiled and loaded on one device, and the stream they run on.
pub(super) struct Kernels {
    stream: Arc<CudaStream>,
    bias_add: CudaFunction,
    relu_forward: CudaFunction,
    relu_backward: CudaFunction,
    maxpool_forward: CudaFunction,
    maxpool_backward: CudaFunction,
    im2col: CudaFunction,
    col2im: CudaFunction,
    softmax_xent: CudaFunction,
    sgd: CudaFunction,
}

impl Kernels {
    /// Compiles the kernels for `stream`'s device and loads them there.
    pub(super) fn load(stream: &Arc<CudaStream>) -> Result<Self, CudaError> {
        let ctx = stream.context();
        let (major, minor) = ctx.compute_capability().map_err(call("reading the device's compute capability"))?;
        let arch = ComputeCapability { major: major as u32, minor: minor as u32 };
        let ptx = match compile(Some(arch)) {
            // A GPU newer than this NVRTC: its default PTX runs there too (the
            // driver compiles PTX for newer architectures).
            Err(CudaError::Architecture { arch, log }) => {
                tracing::warn!("NVRTC cannot compile for {arch} ({log}); compiling for its default architecture");
                compile(None)?
            }
            other => other?,
        };
        let module = ctx.load_module(ptx).map_err(|e| match e {
            DriverError(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION) => CudaError::Call {
                step: "loading the compiled kernels",
                detail: "the driver is older than the NVRTC library (libnvrtc.so.12) that compiled them: \
                         update the NVIDIA driver, or install the NVRTC of the CUDA version `nvidia-smi` shows"
                    .to_owned(),
            },
            e => call("loading the compiled kernels")(e),
        })?;
        let f = |name: &str| module.load_function(name).map_err(call("finding a compiled kernel"));
        Ok(Self {
            stream: stream.clone(),
            bias_add: f("bias_add")?,
            relu_forward: f("relu_forward")?,
            relu_backward: f("relu_backward")?,
            maxpool_forward: f("maxpool_forward")?,
            maxpool_backward: f("maxpool_backward")?,
            im2col: f("im2col")?,
            col2im: f("col2im")?,
            softmax_xent: f("softmax_xent")?,
            sgd: f("sgd")?,
        })
    }

    /// `y[n][c][p] += bias[c]` over `total` floats of `channels` x `inner`.
    pub(super) fn bias_add(
        &self,
        y: &mut CudaSlice<f32>,
        bias: &CudaView<'_, f32>,
        total: usize,
        channels: usize,
        inner: usize,
    ) -> Result<(), CudaError> {
        let (t, c, p) = (total as i32, channels as i32, inner as i32);
        let mut launch = self.stream.launch_builder(&self.bias_add);
        launch.arg(y).arg(bias).arg(&t).arg(&c).arg(&p);
        // SAFETY: (float*, const float*, int x3); y has at least `total` floats and bias `channels`;
        // indices stay below both.
        unsafe { launch.launch(grid(total)) }.map_err(call("bias kernel"))?;
        Ok(())
    }

    /// ReLU in place on the first `total` floats of `y`.
    pub(super) fn relu_forward(&self, y: &mut CudaSlice<f32>, total: usize) -> Result<(), CudaError> {
        let t = total as i32;
        let mut launch = self.stream.launch_builder(&self.relu_forward);
        launch.arg(y).arg(&t);
        // SAFETY: (float*, int); y has at least `total` floats.
        unsafe { launch.launch(grid(total)) }.map_err(call("ReLU forward kernel"))?;
        Ok(())
    }

    /// `dy *= (y > 0)` over `total` floats, `y` being the ReLU's output.
    pub(super) fn relu_backward(
        &self,
        dy: &mut CudaSlice<f32>,
        y: &CudaSlice<f32>,
        total: usize,
    ) -> Result<(), CudaError> {
        let t = total as i32;
        let mut launch = self.stream.launch_builder(&self.relu_backward);
        launch.arg(dy).arg(y).arg(&t);
        // SAFETY: (float*, const float*, int); dy and y have at least `total` floats.
        unsafe { launch.launch(grid(total)) }.map_err(call("ReLU backward kernel"))?;
        Ok(())
    }

    /// 2x2 max-pool of `x` (planes of `h x w`) into `total` outputs `y`,
    /// with each maximum's index into `x` in `arg`.
    pub(super) fn maxpool_forward(
        &self,
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        arg: &mut CudaSlice<i32>,
        total: usize,
        h: usize,
        w: usize,
    ) -> Result<(), CudaError> {
        let (t, hh, ww) = (total as i32, h as i32, w as i32);
        let mut launch = self.stream.launch_builder(&self.maxpool_forward);
        launch.arg(x).arg(y).arg(arg).arg(&t).arg(&hh).arg(&ww);
        // SAFETY: (const float*, float*, int*, int x3); x has total*4 floats as planes of h x w;
        // y and arg have at least `total`.
        unsafe { launch.launch(grid(total)) }.map_err(call("max-pool forward kernel"))?;
        Ok(())
    }

    /// Zeroes `dx` and puts each of the `total` output gradients `dy` at its maximum `arg`.
    pub(super) fn maxpool_backward(
        &self,
        dy: &CudaSlice<f32>,
        arg: &CudaSlice<i32>,
        dx: &mut CudaSlice<f32>,
        total: usize,
    ) -> Result<(), CudaError> {
        self.stream.memset_zeros(dx).map_err(call("zeroing a gradient buffer"))?;
        let t = total as i32;
        let mut launch = self.stream.launch_builder(&self.maxpool_backward);
        launch.arg(dy).arg(arg).arg(dx).arg(&t);
        // SAFETY: (const float*, const int*, float*, int); dy and arg have `total` entries, and
        // each arg-max (written by maxpool_forward) indexes within dx, the pool's input size.
        unsafe { launch.launch(grid(total)) }.map_err(call("max-pool backward kernel"))?;
        Ok(())
    }

    /// `x` (`n x c x h x w`) to its im2col matrix `col` (`n x (c*k*k) x (oh*ow)`);
    /// `dims` is `[c, h, w, k, pad, oh, ow]`.
    pub(super) fn im2col(
        &self,
        x: &CudaSlice<f32>,
        col: &mut CudaSlice<f32>,
        n: usize,
        dims: [usize; 7],
    ) -> Result<(), CudaError> {
        let [c, _, _, ks, _, oh, ow] = dims;
        // One thread per element of col.
        self.cols_kernel(&self.im2col, x, col, n * c * ks * ks * oh * ow, dims, "im2col kernel")
    }

    /// The adjoint of [`im2col`](Self::im2col): `dx` (`n x c x h x w`) is the
    /// sum of the entries of `dcol` that im2col copies each element of `x` to.
    pub(super) fn col2im(
        &self,
        dcol: &CudaSlice<f32>,
        dx: &mut CudaSlice<f32>,
        n: usize,
        dims: [usize; 7],
    ) -> Result<(), CudaError> {
        let [c, h, w, ..] = dims;
        // One thread per element of dx.
        self.cols_kernel(&self.col2im, dcol, dx, n * c * h * w, dims, "col2im kernel")
    }

    /// Launches `im2col` or `col2im`, which take the same arguments: the source,
    /// the destination, `total` threads, then `dims` (`c, h, w, k, pad, oh, ow`).
    fn cols_kernel(
        &self,
        kernel: &CudaFunction,
        src: &CudaSlice<f32>,
        dst: &mut CudaSlice<f32>,
        total: usize,
        dims: [usize; 7],
        what: &'static str,
    ) -> Result<(), CudaError> {
        let t = total as i32;
        let dims = dims.map(|d| d as i32);
        let mut launch = self.stream.launch_builder(kernel);
        launch.arg(src).arg(dst).arg(&t);
        for d in &dims {
            launch.arg(d);
        }
        // SAFETY: both kernels are (const float*, float*, int total, int x7 dims), matching the
        // arguments; the callers pass buffers of n*c*h*w (image side) and n*c*k*k*oh*ow (column
        // side) floats, as the dims say, and `total` is the destination's length.
        unsafe { launch.launch(grid(total)) }.map_err(call(what))?;
        Ok(())
    }

    /// Per sample of the `n` rows of logits `z` (`classes` each): its loss,
    /// whether its arg-max is its label, and with `want_grad` the gradient
    /// `softmax(z) - onehot(label)` in `dz`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn softmax_xent(
        &self,
        z: &CudaSlice<f32>,
        labels: &CudaSlice<u8>,
        loss: &mut CudaViewMut<'_, f32>,
        correct: &mut CudaViewMut<'_, i32>,
        dz: &mut CudaSlice<f32>,
        want_grad: bool,
        n: usize,
        classes: usize,
    ) -> Result<(), CudaError> {
        let (want, batch, classes) = (i32::from(want_grad), n as i32, classes as i32);
        let mut launch = self.stream.launch_builder(&self.softmax_xent);
        launch.arg(z).arg(labels).arg(loss).arg(correct).arg(dz).arg(&want).arg(&batch).arg(&classes);
        // SAFETY: (const float*, const unsigned char*, float*, int*, float*, int x3); z and dz have
        // n*classes floats, labels/loss/correct n entries, and every label is below `classes`.
        unsafe { launch.launch(grid(n)) }.map_err(call("softmax cross-entropy kernel"))?;
        Ok(())
    }

    /// The SGD update of the `w.len()` parameters `w` and momentum `v` with
    /// the summed gradients `g` scaled by `scale` (1 / global batch).
    pub(super) fn sgd(
        &self,
        w: &mut CudaSlice<f32>,
        v: &mut CudaSlice<f32>,
        g: &CudaSlice<f32>,
        lr: f32,
        sgd: Sgd,
        scale: f32,
    ) -> Result<(), CudaError> {
        let total = w.len();
        let t = total as i32;
        let Sgd { momentum, weight_decay } = sgd;
        let mut launch = self.stream.launch_builder(&self.sgd);
        launch.arg(w).arg(v).arg(g).arg(&t).arg(&lr).arg(&momentum).arg(&weight_decay).arg(&scale);
        // SAFETY: (float*, float*, const float*, int, float x4); the three buffers have at least
        // `total` floats (the engine allocates them together; the gradients have one more, the
        // leaving flag) and each thread touches one index < total.
        unsafe { launch.launch(grid(total)) }.map_err(call("the SGD update kernel"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NAMES is what the source defines: a kernel added to kernels.cu
    /// without a launcher (or renamed in one place) fails here, not on a GPU.
    #[test]
    fn names_are_the_kernels_of_the_source() {
        let defined: Vec<&str> = SOURCE
            .split("__global__ void ")
            .skip(1)
            .map(|rest| rest.split('(').next().unwrap_or_default().trim())
            .collect();
        assert_eq!(defined, NAMES);
        assert_eq!(SOURCE.matches("extern \"C\" __global__").count(), NAMES.len(), "every kernel is extern \"C\"");
    }

    #[test]
    fn architectures_read_and_print_as_cuda_names_them() {
        let sm90 = ComputeCapability { major: 9, minor: 0 };
        for text in ["sm_90", "compute_90", "9.0"] {
            assert_eq!(text.parse::<ComputeCapability>(), Ok(sm90), "{text}");
        }
        assert_eq!("sm_100".parse::<ComputeCapability>().map(|a| a.to_string()), Ok("sm_100".to_owned()));
        assert_eq!("sm_86".parse::<ComputeCapability>().map(|a| (a.major, a.minor)), Ok((8, 6)));
        for bad in ["sm_9", "sm_", "90", "sm_9x", "gfx90a", ""] {
            let err = bad.parse::<ComputeCapability>().unwrap_err();
            assert!(err.contains("write it as sm_90"), "{bad}: {err}");
        }
        let names: Vec<String> = ARCHITECTURES.iter().map(|(a, _)| a.to_string()).collect();
        assert_eq!(names, ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100"]);
    }
}
