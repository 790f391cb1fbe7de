//! Kernel-by-kernel checks of the GPU engine against the CPU model's
//! arithmetic, on one GPU (`scripts/gpu-check.sh` runs them through the
//! `gpu_kernels` example): every kernel of `kernels.cu` alone, launched by
//! the engine's own launch functions on seeded random inputs and compared
//! with its `reference`, and the bias gradient's cuBLAS products
//! (`bias_grad`) up to LeNet's shapes at batch 1,024; then, per model, three steps of the engine's own
//! passes (`net`, with its cuBLAS GEMMs) compared layer by layer with the
//! CPU model's forward, backward and SGD: a full batch, a smaller one in
//! the same device buffers (as an epoch's last batch runs), then a larger
//! one (the buffers grow). A failure names
//! the kernel, or the model, layer and quantity.
//!
//! Tolerances: element-wise kernels whose arithmetic is the same operations
//! in the same order must match exactly; sums in another order (col2im) and
//! `expf`/`logf` against Rust's `exp`/`ln` within a few float roundings; a
//! model step within 1e-3 relative (L2): cuBLAS sums in another order, and a
//! max-pool window whose two largest inputs differ by less than that
//! rounding may route its gradient to the other one, while a wrong GEMM or
//! layout is off by order 1.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::kernels::Kernels;
use super::net::Net;
use super::{CudaError, call, open_device};
use super::{bias_grad, reference};
use crate::train::cpu::net::{Workspace, softmax_cross_entropy};
use crate::train::data::CLASSES;
use crate::train::engine::{Batch, StepStats};
use crate::train::model::{Arch, ConvShape, Layer, Model};
use crate::train::optim::Sgd;

/// One check's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// What was compared: `kernel im2col (3x6x5, k3 pad1)`, `lenet 1x28x28: layer 1 conv weight gradient`.
    pub check: String,
    /// Whether it is within its tolerance.
    pub passed: bool,
    /// The measured difference and the tolerance.
    pub detail: String,
}

/// How close the device's values must be to the CPU's.
#[derive(Debug, Clone, Copy)]
enum Tolerance {
    /// Bit for bit.
    Exact,
    /// `|gpu - cpu|` at most this times `1 + |cpu|`, element by element.
    Elementwise(f64),
    /// `|gpu - cpu| / |cpu|` (L2 norms) at most this.
    RelativeL2(f64),
}

/// Compares the device's `gpu` with the CPU's `cpu` under `tolerance`.
fn compare(check: String, gpu: &[f32], cpu: &[f32], tolerance: Tolerance) -> Outcome {
    if gpu.len() != cpu.len() {
        let detail = format!("{} values from the GPU, {} from the CPU", gpu.len(), cpu.len());
        return Outcome { check, passed: false, detail };
    }
    let (mut max_abs, mut worst, mut diff2, mut norm2) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut first_bad = None;
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        let (g, c) = (f64::from(g), f64::from(c));
        let d = if g == c { 0.0 } else { (g - c).abs() };
        max_abs = max_abs.max(d);
        worst = worst.max(d / (1.0 + c.abs()));
        diff2 += d * d;
        norm2 += c * c;
        let bad = match tolerance {
            Tolerance::Exact => d != 0.0 || g.is_nan() != c.is_nan(),
            Tolerance::Elementwise(tol) => d.is_nan() || d > tol * (1.0 + c.abs()),
            Tolerance::RelativeL2(_) => !d.is_finite(),
        };
        if bad && first_bad.is_none() {
            first_bad = Some(format!("; first difference at index {i}: GPU {g}, CPU {c}"));
        }
    }
    let relative = diff2.sqrt() / norm2.sqrt().max(f64::MIN_POSITIVE);
    let (passed, limit) = match tolerance {
        Tolerance::Exact => (first_bad.is_none(), "exact".to_owned()),
        Tolerance::Elementwise(tol) => (first_bad.is_none(), format!("|d| <= {tol:e} (1 + |cpu|)")),
        Tolerance::RelativeL2(tol) => (first_bad.is_none() && relative <= tol, format!("relative L2 <= {tol:e}")),
    };
    let detail = format!(
        "{} values, max |gpu - cpu| {max_abs:.2e}, max relative {worst:.2e}, relative L2 {relative:.2e} (tolerance: {limit}){}",
        gpu.len(),
        first_bad.unwrap_or_default()
    );
    Outcome { check, passed, detail }
}

/// Seeded inputs in `[-1, 1)`, 24-bit mantissas (as the model tests use).
fn values(rng: &mut ChaCha8Rng, len: usize) -> Vec<f32> {
    (0..len).map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect()
}

/// The device, its kernels, a cuBLAS handle on its stream and the inputs' random source.
struct Device {
    stream: Arc<CudaStream>,
    kernels: Kernels,
    blas: CudaBlas,
    rng: ChaCha8Rng,
}

impl Device {
    fn up<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>, CudaError> {
        self.stream.clone_htod(host).map_err(call("copying a check's input to the device"))
    }

    fn down<T: DeviceRepr + Default + Clone>(&self, device: &CudaSlice<T>) -> Result<Vec<T>, CudaError> {
        self.stream.clone_dtoh(device).map_err(call("copying a check's output to the host"))
    }

    fn zeros(&self, len: usize) -> Result<CudaSlice<f32>, CudaError> {
        self.stream.alloc_zeros::<f32>(len.max(1)).map_err(call("allocating device memory"))
    }

    fn values(&mut self, len: usize) -> Vec<f32> {
        values(&mut self.rng, len)
    }

    /// `bias_add`, and the bias gradient (`bias_grad`: cuBLAS products with a
    /// ones vector), in a linear layer's layout (`inner` 1) and a convolution's,
    /// the larger ones at LeNet's batch-1024 shapes.
    fn bias(&mut self, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
        let shapes = [
            (5, 10, 1, "linear 5x10"),
            (3, 6, 28 * 28, "conv 3x6x28x28"),
            (1024, 120, 1, "linear 1024x120"),
            (1024, 6, 28 * 28, "conv 1024x6x28x28"),
            (1024, 16, 10 * 10, "conv 1024x16x10x10"),
        ];
        for (n, channels, inner, what) in shapes {
            let (y, bias) = (self.values(n * channels * inner), self.values(channels));
            let (mut y_dev, bias_dev) = (self.up(&y)?, self.up(&bias)?);
            self.kernels.bias_add(&mut y_dev, &bias_dev.slice(..), y.len(), channels, inner)?;
            let gpu = self.down(&y_dev)?;
            let cpu = reference::bias_add(&y, &bias, inner);
            report(compare(format!("kernel bias_add ({what})"), &gpu, &cpu, Tolerance::Exact));

            let dy = self.values(n * channels * inner);
            let (dy_dev, mut db) = (self.up(&dy)?, self.up(&vec![f32::NAN; channels])?);
            let ones = self.up(&vec![1.0f32; bias_grad::ones_len(n, inner)])?;
            let mut part = self.up(&vec![f32::NAN; bias_grad::part_len(n, channels, inner).max(1)])?;
            bias_grad::run(&self.blas, (&ones, &mut part), &dy_dev, &mut db.slice_mut(..), (n, channels, inner))?;
            let gpu = self.down(&db)?;
            // cuBLAS adds in its own order: against the exact sum (up to 802,816 values
            // in [-1, 1), about 500 in size) a running f32 sum is off by about 1e-6 of
            // it, so 1e-4 leaves room for any order; a wrong layout sums other
            // channels' or samples' values and is off by order 1.
            let cpu = reference::bias_grad_exact(&dy, channels, inner);
            let tolerance = Tolerance::Elementwise(1e-4);
            report(compare(format!("cuBLAS bias_grad ({what})"), &gpu, &cpu, tolerance));
        }
        Ok(())
    }

    /// `relu_forward` and `relu_backward`.
    fn relu(&mut self, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
        let (x, dy) = (self.values(4 * 6 * 24 * 24), self.values(4 * 6 * 24 * 24));
        let (y_cpu, dx_cpu) = reference::relu(&x, &dy);
        let mut y = self.up(&x)?;
        self.kernels.relu_forward(&mut y, x.len())?;
        report(compare("kernel relu_forward".into(), &self.down(&y)?, &y_cpu, Tolerance::Exact));
        let mut d = self.up(&dy)?;
        self.kernels.relu_backward(&mut d, &y, dy.len())?;
        report(compare("kernel relu_backward".into(), &self.down(&d)?, &dx_cpu, Tolerance::Exact));
        Ok(())
    }

    /// `maxpool_forward` and `maxpool_backward`, with ties in the windows.
    fn maxpool(&mut self, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
        let (n, c, h, w) = (4, 6, 28, 28);
        // A few distinct values, so that many windows hold ties: the first maximum
        // (in row order) must win on both sides.
        let x: Vec<f32> = self.values(n * c * h * w).iter().map(|v| (v * 3.0).round()).collect();
        let total = n * c * (h / 2) * (w / 2);
        let dy = self.values(total);
        let (y_cpu, dx_cpu) = reference::maxpool(c, h, w, &x, &dy);
        let (x_dev, mut y) = (self.up(&x)?, self.zeros(total)?);
        let mut arg = self.stream.alloc_zeros::<i32>(total).map_err(call("allocating device memory"))?;
        self.kernels.maxpool_forward(&x_dev, &mut y, &mut arg, total, h, w)?;
        report(compare("kernel maxpool_forward (4x6x28x28, ties)".into(), &self.down(&y)?, &y_cpu, Tolerance::Exact));
        let (dy_dev, mut dx) = (self.up(&dy)?, self.up(&vec![f32::NAN; x.len()])?);
        self.kernels.maxpool_backward(&dy_dev, &arg, &mut dx, total)?;
        let check = "kernel maxpool_backward (4x6x28x28, ties)".to_owned();
        report(compare(check, &self.down(&dx)?, &dx_cpu, Tolerance::Exact));
        Ok(())
    }

    /// `im2col` and `col2im` on LeNet's two convolutions and a padded multi-channel one.
    fn columns(&mut self, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
        let shapes = [
            ConvShape { in_c: 1, out_c: 6, k: 5, pad: 2, h: 28, w: 28 },
            ConvShape { in_c: 6, out_c: 16, k: 5, pad: 0, h: 14, w: 14 },
            ConvShape { in_c: 3, out_c: 4, k: 3, pad: 1, h: 6, w: 5 },
        ];
        let n = 3;
        for s in shapes {
            let what = format!("{}x{}x{}, k{} pad{}", s.in_c, s.h, s.w, s.k, s.pad);
            let dims = [s.in_c, s.h, s.w, s.k, s.pad, s.out_h(), s.out_w()];
            let x = self.values(n * s.in_c * s.h * s.w);
            let cols = reference::im2col(s, &x, n);
            let (x_dev, mut col) = (self.up(&x)?, self.up(&vec![f32::NAN; cols.len()])?);
            self.kernels.im2col(&x_dev, &mut col, n, dims)?;
            report(compare(format!("kernel im2col ({what})"), &self.down(&col)?, &cols, Tolerance::Exact));

            let dcol = self.values(cols.len());
            let dx_cpu = reference::col2im(s, &dcol, n);
            let (dcol_dev, mut dx) = (self.up(&dcol)?, self.up(&vec![f32::NAN; x.len()])?);
            self.kernels.col2im(&dcol_dev, &mut dx, n, dims)?;
            // The CPU adds each input's taps in another order.
            let tolerance = Tolerance::Elementwise(1e-5);
            report(compare(format!("kernel col2im ({what})"), &self.down(&dx)?, &dx_cpu, tolerance));
        }
        Ok(())
    }

    /// `softmax_xent`: per-sample loss, hit, and gradient.
    fn softmax(&mut self, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
        let n = 64;
        let z: Vec<f32> = self.values(n * CLASSES).iter().map(|v| v * 8.0).collect();
        let labels: Vec<u8> = (0..n).map(|_| (self.rng.next_u32() % CLASSES as u32) as u8).collect();
        let (loss_cpu, correct_cpu, dz_cpu) = reference::softmax_xent(&z, &labels);
        let (z_dev, labels_dev) = (self.up(&z)?, self.up(&labels)?);
        let (mut loss, mut dz) = (self.zeros(n)?, self.zeros(n * CLASSES)?);
        let mut correct = self.stream.alloc_zeros::<i32>(n).map_err(call("allocating device memory"))?;
        let (mut loss_view, mut correct_view) = (loss.slice_mut(0..n), correct.slice_mut(0..n));
        self.kernels.softmax_xent(&z_dev, &labels_dev, &mut loss_view, &mut correct_view, &mut dz, true, n, CLASSES)?;
        // expf and logf on the device are within 2 units in the last place.
        let tolerance = Tolerance::Elementwise(1e-5);
        report(compare("kernel softmax_xent: loss".into(), &self.down(&loss)?, &loss_cpu, tolerance));
        let hits: Vec<f32> = self.down(&correct)?.iter().map(|&c| c as f32).collect();
        report(compare("kernel softmax_xent: correct".into(), &hits, &correct_cpu, Tolerance::Exact));
        report(compare("kernel softmax_xent: gradient".into(), &self.down(&dz)?, &dz_cpu, tolerance));
        Ok(())
    }

    /// `sgd`.
    fn sgd(&mut self, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
        let len = 10_000;
        let (w, v, g) = (self.values(len), self.values(len), self.values(len));
        let opt = Sgd { momentum: 0.9, weight_decay: 5e-4 };
        let (lr, scale) = (0.05, 1.0 / 64.0);
        let (w_cpu, v_cpu) = reference::sgd(opt, lr, &w, &v, &g, scale);
        let (mut w_dev, mut v_dev, g_dev) = (self.up(&w)?, self.up(&v)?, self.up(&g)?);
        self.kernels.sgd(&mut w_dev, &mut v_dev, &g_dev, lr, opt, scale)?;
        // NVRTC may fuse a multiply and an add (one rounding instead of two).
        let tolerance = Tolerance::Elementwise(1e-6);
        report(compare("kernel sgd: parameters".into(), &self.down(&w_dev)?, &w_cpu, tolerance));
        report(compare("kernel sgd: momentum".into(), &self.down(&v_dev)?, &v_cpu, tolerance));
        Ok(())
    }

    /// Steps of `arch` on `shape` through the engine's passes against the CPU
    /// model, one per entry of `sizes` (its batch size) on the same device
    /// buffers: a batch smaller than an earlier one runs in buffers sized for
    /// the larger (an epoch's last, partial batch).
    fn model_steps(
        &mut self,
        arch: Arch,
        shape: (usize, usize, usize),
        sizes: &[usize],
        report: &mut dyn FnMut(Outcome),
    ) -> Result<(), CudaError> {
        let model_name = format!("{} {}x{}x{}", format!("{arch:?}").to_lowercase(), shape.0, shape.1, shape.2);
        let model = Model::new(arch, shape);
        let opt = Sgd { momentum: 0.9, weight_decay: 5e-4 };
        let lr = 0.05;
        let mut params = model.init(7);
        let mut momentum = self.values(params.len()).iter().map(|v| v * 0.01).collect::<Vec<_>>();
        let mut net = Net::new(self.stream.clone(), &model, opt)?;
        net.upload(&params, &momentum)?;
        // The buffers grow to the largest batch so far (net.rs, `load`).
        let mut capacity = 0;
        for (k, &n) in sizes.iter().enumerate() {
            capacity = capacity.max(n);
            let name = match (k, n < capacity) {
                (0, _) => model_name.clone(),
                (_, true) => format!("{model_name} step {} (partial batch: {n} of {capacity})", k + 1),
                (_, false) => format!("{model_name} step {}", k + 1),
            };
            let images = self.values(n * model.input_len());
            let labels: Vec<u8> = (0..n).map(|_| (self.rng.next_u32() % CLASSES as u32) as u8).collect();
            let batch = Batch { images: &images, labels: &labels };

            // The CPU model: forward, loss, backward, update.
            let mut ws = Workspace::default();
            let mut d_logits = Vec::new();
            let stats_cpu = softmax_cross_entropy(model.forward(&params, &images, n, &mut ws), &labels, &mut d_logits);
            let mut grads_cpu = vec![0.0; params.len()];
            model.backward(&params, &mut ws, &d_logits, &mut grads_cpu, false);
            let (params_cpu, momentum_cpu) = reference::sgd(opt, lr, &params, &momentum, &grads_cpu, 1.0 / n as f32);

            // The engine's passes on the device.
            net.forward_backward(&batch)?;
            let stats = net.take_stats()?;
            let grads = self.down(net.grads_mut())?;
            net.update(lr, 1.0 / n as f32)?;
            let (params_gpu, _) = net.download()?;

            let step = Tolerance::RelativeL2(1e-3);
            let stat = |s: StepStats| [s.loss_sum as f32, s.correct as f32];
            let check = format!("{name}: forward (loss sum, correct)");
            report(compare(check, &stat(stats), &stat(stats_cpu), Tolerance::Elementwise(1e-4)));
            for (i, (layer, &at)) in model.layers().iter().zip(model.offsets()).enumerate() {
                let (weights, biases) = layer.param_counts();
                let what = match *layer {
                    Layer::Linear { inputs, outputs } => format!("linear {inputs}->{outputs}"),
                    Layer::Conv(s) => format!("conv {}x{}x{}->{} k{} pad{}", s.in_c, s.h, s.w, s.out_c, s.k, s.pad),
                    _ => continue,
                };
                for (part, range) in [("weight", at..at + weights), ("bias", at + weights..at + weights + biases)] {
                    let check = format!("{name}: layer {i} {what}: {part} gradient");
                    report(compare(check, &grads[range.clone()], &grads_cpu[range], step));
                }
            }
            // The update itself (new - old), which the parameters would hide.
            let delta = |new: &[f32]| new.iter().zip(&params).map(|(a, b)| a - b).collect::<Vec<_>>();
            report(compare(format!("{name}: SGD step"), &delta(&params_gpu), &delta(&params_cpu), step));

            // Evaluation with the updated parameters.
            let stats = net.evaluate(&batch)?;
            let mut ws = Workspace::default();
            let stats_cpu =
                softmax_cross_entropy(model.forward(&params_cpu, &images, n, &mut ws), &labels, &mut d_logits);
            let check = format!("{name}: evaluation after the step (loss sum, correct)");
            report(compare(check, &stat(stats), &stat(stats_cpu), Tolerance::Elementwise(1e-3)));
            // Both continue from the CPU's state, so each step is checked on its own.
            net.upload(&params_cpu, &momentum_cpu)?;
            (params, momentum) = (params_cpu, momentum_cpu);
        }
        Ok(())
    }
}

/// Runs every check on GPU `ordinal`, reporting each outcome as it is
/// known. Without a driver or a GPU, or when the kernels cannot be built
/// or a CUDA call fails, the error (nothing has been reported for the
/// checks not run).
pub fn run(ordinal: usize, report: &mut dyn FnMut(Outcome)) -> Result<(), CudaError> {
    let stream = open_device(ordinal)?;
    super::probe(&[super::Library::Cublas, super::Library::Nvrtc])?;
    let kernels = Kernels::load(&stream)?;
    let blas = CudaBlas::new(stream.clone()).map_err(call("creating the cuBLAS handle"))?;
    let mut device = Device { stream, kernels, blas, rng: ChaCha8Rng::seed_from_u64(16) };
    device.bias(report)?;
    device.relu(report)?;
    device.maxpool(report)?;
    device.columns(report)?;
    device.softmax(report)?;
    device.sgd(report)?;
    for (arch, shape) in [(Arch::Mlp, (1, 28, 28)), (Arch::Lenet, (1, 28, 28)), (Arch::Lenet, (3, 32, 32))] {
        // A full batch, a smaller one in the same buffers (an epoch's last
        // batch), a larger one (the buffers grow).
        device.model_steps(arch, shape, &[64, 32, 80], report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_pass_and_fail_as_their_tolerance_says() {
        let exact = compare("x".into(), &[1.0, 2.0], &[1.0, 2.0], Tolerance::Exact);
        assert!(exact.passed, "{exact:?}");
        let off = compare("x".into(), &[1.0, 2.0], &[1.0, 2.000001], Tolerance::Exact);
        assert!(!off.passed && off.detail.contains("first difference at index 1"), "{off:?}");
        assert!(compare("x".into(), &[1.0, 2.0], &[1.0, 2.000001], Tolerance::Elementwise(1e-5)).passed);
        assert!(!compare("x".into(), &[1.0, 2.1], &[1.0, 2.0], Tolerance::Elementwise(1e-5)).passed);
        assert!(compare("x".into(), &[100.0, 0.5], &[100.0, 0.5001], Tolerance::RelativeL2(1e-5)).passed);
        assert!(!compare("x".into(), &[1.0, 0.0], &[0.0, 1.0], Tolerance::RelativeL2(1e-3)).passed);
        assert!(!compare("x".into(), &[f32::NAN], &[1.0], Tolerance::RelativeL2(1e-3)).passed);
        assert!(!compare("x".into(), &[f32::NAN], &[1.0], Tolerance::Elementwise(1e-3)).passed);
        assert!(!compare("x".into(), &[1.0], &[1.0, 2.0], Tolerance::Exact).passed);
    }

    /// No GPU here: the checks report nothing and say why, without panicking.
    #[test]
    fn without_a_driver_the_checks_say_so() {
        if super::super::Library::Driver.present() {
            return;
        }
        let mut outcomes = Vec::new();
        let err = run(0, &mut |o| outcomes.push(o)).unwrap_err();
        assert!(matches!(err, CudaError::Missing { lib: "libcuda.so.1", .. }), "{err}");
        assert!(outcomes.is_empty());
    }
}
