//! The two models of `trainer train` (an MLP and LeNet-5) as layer lists
//! with forward and backward passes on the CPU, their parameter layout and
//! deterministic initialisation, and the softmax cross-entropy loss.
//!
//! Inputs: batches of normalised images (`C x H x W` floats per sample, as
//! [`data`](super::data) makes them) and one flat parameter vector. Nothing
//! outside memory is touched.
//!
//! Matrix products go through the `gemm` crate (threaded with rayon: call
//! from inside a rayon pool to choose the thread count); convolutions are
//! im2col + GEMM. Between convolution layers activations are kept
//! channel-last (`N x H x W x C`), which makes a convolution one GEMM per
//! block of samples (`(m*OH*OW) x (K*K*C)` by `(K*K*C) x OC`, a block sized
//! to stay in cache, one task each; see [`CONV_BLOCK_FLOATS`]) with no
//! per-sample products, and im2col columns in `(ky, kx, c)` order, whose
//! in-bounds runs are contiguous in the input (slice copies, no per-element
//! index arithmetic); the filters are reordered to match for each product
//! (a few thousand floats). The layout changes only at the model's edges
//! ([`Layer::Transpose`]), so parameters and the flatten order are exactly
//! those of the shared design:
//! - one flat `f32` vector; layers in order, each layer's weight then bias;
//! - Linear weight `[out][in]`, Conv weight `[out_c][in_c][kh][kw]`, bias `[out]`;
//! - LeNet flattens in `(c, y, x)` order.

use gemm::{Parallelism, gemm};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rayon::prelude::*;

use super::data::CLASSES;
use super::stats::StepStats;

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// flatten -> Linear(C*H*W, 256) -> ReLU -> Linear(256, 128) -> ReLU -> Linear(128, 10).
    Mlp,
    /// LeNet-5: two 5x5 convolutions (6 and 16 channels) with ReLU and 2x2 max pooling,
    /// then Linear 120 -> 84 -> 10.
    Lenet,
}

/// A convolution's shape: `in_c` channels of `h x w` in, `out_c` channels
/// out, a square `k x k` kernel, stride 1, `pad` zeros on every side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvShape {
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
}

impl ConvShape {
    /// Output height.
    pub(crate) fn out_h(&self) -> usize {
        self.h + 2 * self.pad + 1 - self.k
    }
    /// Output width.
    pub(crate) fn out_w(&self) -> usize {
        self.w + 2 * self.pad + 1 - self.k
    }
    fn patch(&self) -> usize {
        self.in_c * self.k * self.k
    }
}

/// One layer; sizes are per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// `y = W x + b`, `W` is `[outputs][inputs]`.
    Linear {
        /// Input features.
        inputs: usize,
        /// Output features.
        outputs: usize,
    },
    /// Convolution on channel-last activations (`H x W x C` per sample).
    Conv(ConvShape),
    /// `max(x, 0)` element-wise over `len` values.
    Relu {
        /// Values per sample.
        len: usize,
    },
    /// 2x2 max pooling, stride 2, on channel-last `h x w x c`.
    MaxPool {
        /// Channels.
        c: usize,
        /// Input height (even).
        h: usize,
        /// Input width (even).
        w: usize,
    },
    /// Per sample, the `rows x cols` matrix becomes `cols x rows`: channel-first
    /// `C x (H*W)` to channel-last and back (the flatten in `(c, y, x)` order).
    Transpose {
        /// Rows in.
        rows: usize,
        /// Columns in.
        cols: usize,
    },
}

impl Layer {
    /// Floats per sample in.
    pub(crate) fn in_len(&self) -> usize {
        match *self {
            Layer::Linear { inputs, .. } => inputs,
            Layer::Conv(s) => s.h * s.w * s.in_c,
            Layer::Relu { len } => len,
            Layer::MaxPool { c, h, w } => c * h * w,
            Layer::Transpose { rows, cols } => rows * cols,
        }
    }

    /// Floats per sample out.
    pub(crate) fn out_len(&self) -> usize {
        match *self {
            Layer::Linear { outputs, .. } => outputs,
            Layer::Conv(s) => s.out_h() * s.out_w() * s.out_c,
            Layer::Relu { len } => len,
            Layer::MaxPool { c, h, w } => c * (h / 2) * (w / 2),
            Layer::Transpose { rows, cols } => rows * cols,
        }
    }

    /// Weight count and bias count.
    pub(crate) fn param_counts(&self) -> (usize, usize) {
        match *self {
            Layer::Linear { inputs, outputs } => (inputs * outputs, outputs),
            Layer::Conv(s) => (s.out_c * s.patch(), s.out_c),
            _ => (0, 0),
        }
    }

    /// Fan-in of the layer's units (for initialisation).
    fn fan_in(&self) -> usize {
        match *self {
            Layer::Linear { inputs, .. } => inputs,
            Layer::Conv(s) => s.patch(),
            _ => 0,
        }
    }
}

/// A model: its layers and where each layer's parameters start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    layers: Vec<Layer>,
    offsets: Vec<usize>,
    params: usize,
}

impl Model {
    /// The model `arch` for inputs of `(channels, height, width)`; 10 classes.
    pub fn new(arch: Arch, (c, h, w): (usize, usize, usize)) -> Self {
        let layers = match arch {
            Arch::Mlp => vec![
                Layer::Linear { inputs: c * h * w, outputs: 256 },
                Layer::Relu { len: 256 },
                Layer::Linear { inputs: 256, outputs: 128 },
                Layer::Relu { len: 128 },
                Layer::Linear { inputs: 128, outputs: CLASSES },
            ],
            Arch::Lenet => {
                let conv1 = ConvShape { in_c: c, out_c: 6, k: 5, pad: 2, h, w };
                let (h1, w1) = (conv1.out_h() / 2, conv1.out_w() / 2);
                let conv2 = ConvShape { in_c: 6, out_c: 16, k: 5, pad: 0, h: h1, w: w1 };
                let (h2, w2) = (conv2.out_h() / 2, conv2.out_w() / 2);
                vec![
                    Layer::Transpose { rows: c, cols: h * w },
                    Layer::Conv(conv1),
                    Layer::Relu { len: conv1.out_h() * conv1.out_w() * 6 },
                    Layer::MaxPool { c: 6, h: conv1.out_h(), w: conv1.out_w() },
                    Layer::Conv(conv2),
                    Layer::Relu { len: conv2.out_h() * conv2.out_w() * 16 },
                    Layer::MaxPool { c: 16, h: conv2.out_h(), w: conv2.out_w() },
                    Layer::Transpose { rows: h2 * w2, cols: 16 },
                    Layer::Linear { inputs: 16 * h2 * w2, outputs: 120 },
                    Layer::Relu { len: 120 },
                    Layer::Linear { inputs: 120, outputs: 84 },
                    Layer::Relu { len: 84 },
                    Layer::Linear { inputs: 84, outputs: CLASSES },
                ]
            }
        };
        Self::from_layers(layers)
    }

    /// A model made of `layers` (each layer's input must be the previous one's output).
    pub fn from_layers(layers: Vec<Layer>) -> Self {
        for pair in layers.windows(2) {
            assert_eq!(pair[0].out_len(), pair[1].in_len(), "layer sizes do not chain: {pair:?}");
        }
        let mut offsets = Vec::with_capacity(layers.len());
        let mut params = 0;
        for layer in &layers {
            offsets.push(params);
            let (w, b) = layer.param_counts();
            params += w + b;
        }
        Self { layers, offsets, params }
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Where each layer's parameters (weight, then bias) start in the flat
    /// parameter vector, by layer index (the GPU path lays its buffers out by them).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Length of the flat parameter vector.
    pub fn num_params(&self) -> usize {
        self.params
    }

    /// Floats per input sample.
    pub fn input_len(&self) -> usize {
        self.layers[0].in_len()
    }

    /// Floats per output sample (the logits).
    pub fn output_len(&self) -> usize {
        self.layers.last().map_or(0, Layer::out_len)
    }

    /// Deterministic initial parameters from `seed`: every weight and bias
    /// uniform in `±1/sqrt(fan_in)` (PyTorch's default for Linear and Conv),
    /// drawn from ChaCha8 in layout order, 24-bit mantissas.
    pub fn init(&self, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut params = Vec::with_capacity(self.params);
        for layer in &self.layers {
            let (w, b) = layer.param_counts();
            let bound = 1.0 / (layer.fan_in().max(1) as f32).sqrt();
            for _ in 0..w + b {
                let unit = (rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
                params.push((2.0 * unit - 1.0) * bound);
            }
        }
        params
    }

    /// Runs the model on `n` samples `x`; returns the logits (`n x outputs`),
    /// keeping what the backward pass needs in `ws`.
    pub fn forward<'w>(&self, params: &[f32], x: &[f32], n: usize, ws: &'w mut Workspace) -> &'w [f32] {
        assert_eq!(params.len(), self.params, "parameter vector length");
        assert_eq!(x.len(), n * self.input_len(), "input length");
        ws.prepare(self.layers.len());
        ws.acts[0].clear();
        ws.acts[0].extend_from_slice(x);
        let mut i = 0;
        while i < self.layers.len() {
            let end = self.segment_end(i);
            if end > i + 1 {
                self.forward_blocks(params, i..end, n, ws);
                i = end;
                continue;
            }
            let layer = &self.layers[i];
            let (before, after) = ws.acts.split_at_mut(i + 1);
            let (input, out) = (&before[i], &mut after[0]);
            // Every layer writes all of its output: the buffer is not zeroed first.
            out.resize(n * layer.out_len(), 0.0);
            let p = &params[self.offsets[i]..];
            match *layer {
                Layer::Linear { inputs, outputs } => linear_forward(p, inputs, outputs, input, out, n),
                Layer::Conv(s) => conv_forward(p, s, input, out, &mut ws.conv),
                Layer::Relu { .. } => elementwise(out, input, |o, x| {
                    o.iter_mut().zip(x).for_each(|(o, &v)| *o = v.max(0.0));
                }),
                Layer::MaxPool { c, h, w } => pool_forward(c, h, w, input, out, &mut ws.argmax[i]),
                Layer::Transpose { rows, cols } => transpose(input, out, rows, cols),
            }
            i += 1;
        }
        &ws.acts[self.layers.len()]
    }

    /// The end (exclusive) of the run of layers from `start` that the
    /// forward pass takes block by block: the layers that work on each
    /// sample alone (convolution, ReLU, max pooling, transpose) after
    /// `start`, when the run has a convolution; else `start + 1`.
    fn segment_end(&self, start: usize) -> usize {
        let per_sample = |l: &Layer| !matches!(l, Layer::Linear { .. });
        let end = start + self.layers[start..].iter().take_while(|l| per_sample(l)).count();
        if self.layers[start..end].iter().any(|l| matches!(l, Layer::Conv(_))) { end } else { start + 1 }
    }

    /// The forward pass of the layers `range` (see [`Model::segment_end`]),
    /// one task per block of samples on the pool, each block going through
    /// every layer of the run while it is in the core's cache: LeNet's
    /// convolutions, ReLUs, poolings and transposes were one pass over the
    /// whole batch each, the ReLU and pooling reading back from memory what
    /// the convolution had just written (at batch 256 its output is 4.8 MB).
    /// Every layer still writes its whole output (the backward pass reads
    /// them); each value is computed as [`Model::forward`] computes it layer
    /// by layer, so the result does not depend on the block size.
    fn forward_blocks(&self, params: &[f32], range: std::ops::Range<usize>, n: usize, ws: &mut Workspace) {
        let layers = &self.layers[range.clone()];
        // Samples per block: the smallest block of the run's convolutions (each sized to stay in cache).
        let block = layers.iter().filter_map(|l| if let Layer::Conv(s) = l { Some(conv_block(*s)) } else { None });
        let block = block.min().unwrap_or(1);
        // Each convolution's filters in im2col column order, made once for all blocks.
        let taps: Vec<Vec<f32>> = layers
            .iter()
            .zip(&self.offsets[range.clone()])
            .map(|(l, &at)| {
                let mut w = Vec::new();
                if let Layer::Conv(s) = *l {
                    tap_major(s, &params[at..], &mut w);
                }
                w
            })
            .collect();
        for (j, layer) in layers.iter().enumerate() {
            // Every value is written by its block: not zeroed first.
            ws.acts[range.start + j + 1].resize(n * layer.out_len(), 0.0);
            if matches!(layer, Layer::MaxPool { .. }) {
                ws.argmax[range.start + j].resize(n * layer.out_len(), 0);
            }
        }
        let (inputs, outputs) = ws.acts.split_at_mut(range.start + 1);
        let x = &inputs[range.start];
        let in_len = layers[0].in_len();
        let mut outs: Vec<_> = outputs.iter_mut().zip(layers).map(|(o, l)| o.chunks_mut(block * l.out_len())).collect();
        let mut args: Vec<_> =
            ws.argmax[range.clone()].iter_mut().zip(layers).map(|(a, l)| a.chunks_mut(block * l.out_len())).collect();
        let blocks: Vec<Block<'_>> = x
            .chunks(block * in_len)
            .enumerate()
            .map(|(b, x)| {
                let outs = outs.iter_mut().map(|o| o.next().expect("every output has a chunk per block")).collect();
                // A layer that is not a pooling has no indices (an empty buffer: no chunk).
                let args = args.iter_mut().map(|a| a.next().unwrap_or_default()).collect();
                (b * block, x, outs, args)
            })
            .collect();
        blocks.into_par_iter().for_each(|(first, x, mut outs, mut args)| {
            for (j, layer) in layers.iter().enumerate() {
                let (done, rest) = outs.split_at_mut(j);
                let (input, out): (&[f32], &mut [f32]) = (if j == 0 { x } else { &*done[j - 1] }, &mut *rest[0]);
                match *layer {
                    Layer::Conv(s) => {
                        let bias = &params[self.offsets[range.start + j] + s.out_c * s.patch()..][..s.out_c];
                        conv_block_forward(s, bias, &taps[j], input, out);
                    }
                    Layer::Relu { .. } => out.iter_mut().zip(input).for_each(|(o, &v)| *o = v.max(0.0)),
                    Layer::MaxPool { c, h, w } => {
                        let (per_in, per_out) = (layer.in_len(), layer.out_len());
                        let samples = input.chunks_exact(per_in).zip(out.chunks_exact_mut(per_out));
                        for (k, ((x, out), arg)) in samples.zip(args[j].chunks_exact_mut(per_out)).enumerate() {
                            pool_sample(c, h, w, x, out, arg, (first + k) * per_in);
                        }
                    }
                    Layer::Transpose { rows, cols } => transpose(input, out, rows, cols),
                    Layer::Linear { .. } => unreachable!("a block-by-block run has no linear layer"),
                }
            }
        });
    }

    /// Back-propagates `d_out` (the loss's gradient w.r.t. the logits of the
    /// last [`forward`](Self::forward)) and writes the parameter gradients to
    /// `grads` (overwritten). Returns the gradient w.r.t. the input when
    /// `input_grad` is true (gradient checks), else an empty vector.
    pub fn backward(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        d_out: &[f32],
        grads: &mut [f32],
        input_grad: bool,
    ) -> Vec<f32> {
        assert_eq!(grads.len(), self.params, "gradient vector length");
        let n = ws.acts[0].len() / self.input_len();
        // The two gradient buffers are the workspace's, reused step after step.
        let (mut delta, mut d_in) = (std::mem::take(&mut ws.delta), std::mem::take(&mut ws.d_in));
        delta.clear();
        delta.extend_from_slice(d_out);
        // Below the first layer with parameters no gradient is needed (LeNet's
        // first convolution would otherwise pay a GEMM and a col2im for nothing).
        let first_trained = self.layers.iter().position(|l| l.param_counts() != (0, 0)).unwrap_or(0);
        let needs_dx = |i: usize| i > first_trained || input_grad;
        // A ReLU whose gradient its max pooling's backward pass already masked.
        let mut relu_done = None;
        for (i, layer) in self.layers.iter().enumerate().rev() {
            if relu_done == Some(i) {
                continue;
            }
            let need_dx = needs_dx(i);
            let input = &ws.acts[i];
            let p = &params[self.offsets[i]..];
            let (w, b) = layer.param_counts();
            let g = &mut grads[self.offsets[i]..self.offsets[i] + w + b];
            // Every layer writes all of its input gradient (the ones that add
            // into it zero their part first, in cache): not zeroed here.
            d_in.resize(if need_dx { n * layer.in_len() } else { 0 }, 0.0);
            match *layer {
                Layer::Linear { inputs, outputs } => {
                    dense_backward(p, input, (n, inputs, outputs), &delta, g, need_dx.then_some(&mut d_in[..]));
                }
                Layer::Conv(s) => {
                    conv_backward(p, s, input, &delta, g, need_dx.then_some(&mut d_in[..]), &mut ws.conv);
                }
                Layer::Relu { .. } if need_dx => {
                    let chunks = d_in.par_chunks_mut(ELEMENTWISE_CHUNK).zip(delta.par_chunks(ELEMENTWISE_CHUNK));
                    chunks.zip(input.par_chunks(ELEMENTWISE_CHUNK)).for_each(|((d, dy), x)| {
                        for ((d, &dy), &x) in d.iter_mut().zip(dy).zip(x) {
                            *d = if x > 0.0 { dy } else { 0.0 };
                        }
                    });
                }
                // A pooling after a ReLU (LeNet's): both backward passes in one,
                // the pooling's input gradient masked where the ReLU's input
                // was not positive (one pass over the activations, not two).
                Layer::MaxPool { c, h, w }
                    if need_dx && i > 0 && matches!(self.layers[i - 1], Layer::Relu { .. }) && needs_dx(i - 1) =>
                {
                    pool_backward(c, h, w, &ws.argmax[i], &delta, Some(&ws.acts[i - 1]), &mut d_in);
                    relu_done = Some(i - 1);
                }
                Layer::MaxPool { c, h, w } if need_dx => pool_backward(c, h, w, &ws.argmax[i], &delta, None, &mut d_in),
                Layer::Transpose { rows, cols } if need_dx => transpose(&delta, &mut d_in, cols, rows),
                _ => {}
            }
            std::mem::swap(&mut delta, &mut d_in);
        }
        let input_gradient = if input_grad { delta.clone() } else { Vec::new() };
        (ws.delta, ws.d_in) = (delta, d_in);
        input_gradient
    }
}

/// One block of samples of a block-by-block forward pass: its first
/// sample's index in the batch, its input, and its part of each layer's
/// output and of each pooling's indices (empty for other layers).
type Block<'a> = (usize, &'a [f32], Vec<&'a mut [f32]>, Vec<&'a mut [u32]>);

/// Buffers one model's forward and backward passes reuse between steps.
#[derive(Debug, Default)]
pub struct Workspace {
    /// `acts[i]` is layer `i`'s input; the last one is the logits.
    acts: Vec<Vec<f32>>,
    /// Where each max-pool output came from, as an index into its input (by layer index).
    argmax: Vec<Vec<u32>>,
    /// Scratch of the convolution layers (shared by all of them).
    conv: ConvScratch,
    /// The backward pass's gradient w.r.t. the current layer's output and input.
    delta: Vec<f32>,
    d_in: Vec<f32>,
}

impl Workspace {
    fn prepare(&mut self, layers: usize) {
        self.acts.resize_with(layers + 1, Vec::new);
        self.argmax.resize_with(layers, Vec::new);
    }
}

/// A strided matrix view for [`matmul`]: element `(r, c)` is `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

impl<'a> View<'a> {
    fn rows(data: &'a [f32], cols: usize) -> Self {
        Self { data, rs: cols, cs: 1 }
    }
    /// The transpose of a row-major matrix with `cols` columns.
    fn transposed(data: &'a [f32], cols: usize) -> Self {
        Self { data, rs: 1, cs: cols }
    }
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `dst (m x n, row-major) = [dst +] a (m x k) * b (k x n)`, threaded over the current rayon pool.
fn matmul(m: usize, n: usize, k: usize, dst: &mut [f32], accumulate: bool, a: View<'_>, b: View<'_>) {
    matmul_on(m, n, k, dst, accumulate, a, b, Parallelism::Rayon(0));
}

/// [`matmul`] with the given parallelism (`None` inside a task that is itself one of many).
#[allow(clippy::too_many_arguments)]
fn matmul_on(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    accumulate: bool,
    a: View<'_>,
    b: View<'_>,
    parallelism: Parallelism,
) {
    assert!(dst.len() >= m * n && a.fits(m, k) && b.fits(k, n), "matmul shapes: {m}x{k} by {k}x{n}");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    // SAFETY: the assert above keeps every index the kernel touches inside
    // the three slices (max index (rows-1)*rs + (cols-1)*cs), `dst` is
    // borrowed mutably so it cannot alias `a` or `b`, and f32 is a type gemm
    // supports.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

pub(crate) fn fill_bias(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len()) {
        row.copy_from_slice(bias);
    }
}

pub(crate) fn bias_grad(delta: &[f32], gb: &mut [f32]) {
    gb.fill(0.0);
    for row in delta.chunks_exact(gb.len()) {
        gb.iter_mut().zip(row).for_each(|(g, &d)| *g += d);
    }
}

fn linear_forward(p: &[f32], inputs: usize, outputs: usize, x: &[f32], out: &mut [f32], n: usize) {
    let (w, b) = p.split_at(inputs * outputs);
    fill_bias(out, &b[..outputs]);
    matmul(n, outputs, inputs, out, true, View::rows(x, inputs), View::transposed(w, inputs));
}

/// The backward pass of Linear, `Y = A W^T + b` (`A` is `rows x inputs`, `W`
/// is `outputs x inputs`): `dW = dY^T A`, `db` = column sums of `dY`, and, when
/// asked, `dA = dY W`.
fn dense_backward(
    p: &[f32],
    a: &[f32],
    (rows, inputs, outputs): (usize, usize, usize),
    delta: &[f32],
    g: &mut [f32],
    da: Option<&mut [f32]>,
) {
    let (gw, gb) = g.split_at_mut(inputs * outputs);
    matmul(outputs, inputs, rows, gw, false, View::transposed(delta, outputs), View::rows(a, inputs));
    bias_grad(delta, gb);
    if let Some(da) = da {
        matmul(
            rows,
            inputs,
            outputs,
            da,
            false,
            View::rows(delta, outputs),
            View::rows(&p[..inputs * outputs], inputs),
        );
    }
}

/// For output column `ox`, the kernel columns `kx0..kx1` that fall inside
/// the image (the others read the zero padding). Needs `pad < k`.
fn kx_range(s: ConvShape, ox: usize) -> (usize, usize) {
    (s.pad.saturating_sub(ox), s.k.min(s.w + s.pad - ox))
}

/// For output row `oy`, the kernel rows `ky0..ky1` that fall inside the image.
fn ky_range(s: ConvShape, oy: usize) -> (usize, usize) {
    (s.pad.saturating_sub(oy), s.k.min(s.h + s.pad - oy))
}

/// Walks the im2col matrix of one sample: for every output position and
/// kernel row inside the image, `f(start in the im2col matrix, start in the
/// channel-last sample, length)`. With columns in `(ky, kx, c)` order both
/// runs are contiguous (the in-bounds `kx` of one kernel row are adjacent
/// pixels), so im2col and col2im are slice copies and adds. The in-bounds
/// kernel rows and columns are ranges computed once per output row and
/// column (this loop runs thousands of times per sample).
fn for_each_run(s: ConvShape, mut f: impl FnMut(usize, usize, usize)) {
    let (ow, patch, c, k) = (s.out_w(), s.patch(), s.in_c, s.k);
    for oy in 0..s.out_h() {
        let (ky0, ky1) = ky_range(s, oy);
        for ox in 0..ow {
            let (kx0, kx1) = kx_range(s, ox);
            let len = (kx1 - kx0) * c;
            let row = (oy * ow + ox) * patch + kx0 * c;
            // The pixel (oy + ky - pad, ox + kx0 - pad), without going below 0 on the way.
            let pixel = |ky: usize| ((oy + ky - s.pad) * s.w + ox + kx0 - s.pad) * c;
            for ky in ky0..ky1 {
                f(row + ky * k * c, pixel(ky), len);
            }
        }
    }
}

/// Fills one sample's zeroed im2col rows (`(OH*OW) x (K*K*C)`, columns in
/// `(ky, kx, c)` order) from its channel-last pixels `x`. The runs of
/// LeNet's two convolutions (a whole kernel row inside the image: 5 floats
/// of one channel, 30 of six) are copied by a loop compiled for their
/// length; this was a third of LeNet's step as one generic loop.
pub(crate) fn im2col_sample(s: ConvShape, x: &[f32], cols: &mut [f32]) {
    match s.k * s.in_c {
        5 => im2col_rows::<5>(s, x, cols),
        30 => im2col_rows::<30>(s, x, cols),
        _ => for_each_run(s, |at, pixel, len| copy_run(&mut cols[at..at + len], &x[pixel..pixel + len])),
    }
}

/// [`im2col_sample`] for kernels whose rows are `RUN` floats (`k * in_c`):
/// per output row and in-bounds kernel row, the output columns whose kernel
/// row lies wholly inside the image copy `RUN` floats each (the input row's
/// windows, one channel-last pixel apart); the few at the edges, whose
/// kernel row is cut by the padding, copy what is inside.
fn im2col_rows<const RUN: usize>(s: ConvShape, x: &[f32], cols: &mut [f32]) {
    let (ow, patch, c, row_len) = (s.out_w(), s.patch(), s.in_c, s.w * s.in_c);
    // Output columns `pad..=w + pad - k` see a whole kernel row (when there are any).
    let inner = s.pad..(s.w + s.pad + 1).saturating_sub(s.k).max(s.pad);
    for oy in 0..s.out_h() {
        let (ky0, ky1) = ky_range(s, oy);
        let rows = &mut cols[oy * ow * patch..][..ow * patch];
        for ky in ky0..ky1 {
            let line = &x[(oy + ky - s.pad) * row_len..][..row_len];
            let dst = rows[inner.start * patch..].chunks_exact_mut(patch);
            for (dst, src) in dst.zip(line.windows(RUN).step_by(c)).take(inner.len()) {
                let dst: &mut [f32; RUN] = (&mut dst[ky * RUN..][..RUN]).try_into().expect("RUN floats");
                *dst = src.try_into().expect("RUN floats");
            }
            for ox in (0..inner.start).chain(inner.end..ow) {
                let (kx0, kx1) = kx_range(s, ox);
                let len = (kx1 - kx0) * c;
                let (at, pixel) = (ox * patch + (ky * s.k + kx0) * c, (ox + kx0 - s.pad) * c);
                copy_run(&mut rows[at..at + len], &line[pixel..pixel + len]);
            }
        }
    }
}

/// `dst.copy_from_slice(src)` for the short runs of im2col (a 5x5 kernel
/// copies runs of 5 floats per channel, thousands per sample): copies of a
/// length known at compile time (8 floats at a time, then the rest) are a
/// few moves, where a length known only at run time is a call to `memcpy`,
/// which costs more than the copy.
#[inline(always)]
fn copy_run(mut dst: &mut [f32], mut src: &[f32]) {
    while let Some((s, rest)) = src.split_first_chunk::<8>() {
        let (d, d_rest) = std::mem::take(&mut dst).split_first_chunk_mut::<8>().expect("dst as long as src");
        *d = *s;
        (dst, src) = (d_rest, rest);
    }
    macro_rules! fixed {
        ($($n:literal)*) => {
            match src.len() {
                $($n => dst[..$n].copy_from_slice(&src[..$n]),)*
                _ => unreachable!("fewer than 8 left"),
            }
        };
    }
    fixed!(0 1 2 3 4 5 6 7)
}

/// The adjoint of [`im2col_sample`]: adds each entry of one sample's im2col
/// gradient back to the pixel it came from.
pub(crate) fn col2im_sample(s: ConvShape, cols: &[f32], dx: &mut [f32]) {
    for_each_run(s, |at, pixel, len| {
        dx[pixel..pixel + len].iter_mut().zip(&cols[at..at + len]).for_each(|(d, &v)| *d += v);
    });
}

/// Floats of im2col matrix per block of samples that one task convolves:
/// small enough that a block's matrix, its input and output stay in a
/// core's cache between the im2col, the GEMM and (backward) the col2im.
/// Materialising the whole batch's matrix instead (80 MB for LeNet's first
/// convolution at batch 1,024) made every pass over it a trip to memory.
const CONV_BLOCK_FLOATS: usize = 1 << 16;

/// Samples per block of a convolution (see [`CONV_BLOCK_FLOATS`]): fixed by
/// the shape alone, so that the weight gradient's sum over blocks runs in
/// the same order (and gives the same result) on any thread count.
fn conv_block(s: ConvShape) -> usize {
    (CONV_BLOCK_FLOATS / (s.out_h() * s.out_w() * s.patch()).max(1)).max(1)
}

/// One compute thread's block buffers: an im2col matrix per convolution
/// shape, and one im2col gradient.
type BlockCols = (Vec<(ConvShape, Vec<f32>)>, Vec<f32>);

thread_local! {
    /// Each compute thread's block buffers, reused step after step.
    static BLOCK_COLS: std::cell::RefCell<BlockCols> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Runs `f` with this thread's im2col matrix for shape `s` and its
/// gradient buffer, `len` floats each. A padded convolution's im2col
/// leaves the padding's entries alone, so each shape has its own matrix:
/// its padding entries, zero when it grew, stay zero (a shorter block keeps
/// whole samples of the same pattern), where a matrix shared with another
/// shape had to be zeroed for every block (a memset of the whole matrix,
/// 3 % of a LeNet step). The gradient is not zeroed (a GEMM overwrites it).
fn with_block_cols<R>(s: ConvShape, len: usize, f: impl FnOnce(&mut [f32], &mut [f32]) -> R) -> R {
    BLOCK_COLS.with(|cell| {
        let (matrices, d_cols) = &mut *cell.borrow_mut();
        let at = match matrices.iter().position(|(shape, _)| *shape == s) {
            Some(at) => at,
            None => {
                matrices.push((s, Vec::new()));
                matrices.len() - 1
            }
        };
        let cols = &mut matrices[at].1;
        cols.resize(len, 0.0);
        d_cols.resize(len, 0.0);
        f(cols, d_cols)
    })
}

/// Scratch space of the convolution layers.
#[derive(Debug, Default)]
struct ConvScratch {
    /// The weights with each filter in `(ky, kx, c)` order, as the im2col columns.
    w: Vec<f32>,
    /// Each block's weight gradient (in that order) and bias gradient, summed in block order.
    parts: Vec<f32>,
}

/// Copies the `[out_c][in_c][ky][kx]` weights (the parameter layout) into
/// the `[out_c][ky][kx][in_c]` order of the im2col columns.
fn tap_major(s: ConvShape, w: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.resize(s.out_c * s.patch(), 0.0);
    transpose(&w[..out.len()], out, s.in_c, s.k * s.k);
}

/// The convolution over the batch, block by block ([`conv_block`] samples
/// each, one task per block on the pool): a block's im2col matrix, then one
/// GEMM `(m*OH*OW) x (K*K*C)` by `(K*K*C) x OC` into its output rows.
fn conv_forward(p: &[f32], s: ConvShape, x: &[f32], out: &mut [f32], tmp: &mut ConvScratch) {
    let patch = s.patch();
    tap_major(s, p, &mut tmp.w);
    let (bias, w) = (&p[s.out_c * patch..][..s.out_c], &tmp.w[..]);
    let (block, in_len, positions) = (conv_block(s), s.h * s.w * s.in_c, s.out_h() * s.out_w());
    out.par_chunks_mut(block * positions * s.out_c)
        .zip(x.par_chunks(block * in_len))
        .for_each(|(out, x)| conv_block_forward(s, bias, w, x, out));
}

/// One block of samples of a convolution (`x` their channel-last inputs,
/// `out` their outputs), on this thread: the block's im2col matrix, then
/// one GEMM with the filters `w` in im2col column order ([`tap_major`]).
fn conv_block_forward(s: ConvShape, bias: &[f32], w: &[f32], x: &[f32], out: &mut [f32]) {
    let (patch, in_len, positions) = (s.patch(), s.h * s.w * s.in_c, s.out_h() * s.out_w());
    let rows = out.len() / s.out_c;
    with_block_cols(s, rows * patch, |cols, _| {
        for (cols, x) in cols.chunks_exact_mut(positions * patch).zip(x.chunks_exact(in_len)) {
            im2col_sample(s, x, cols);
        }
        fill_bias(out, bias);
        let (a, b) = (View::rows(cols, patch), View::transposed(w, patch));
        matmul_on(rows, s.out_c, patch, out, true, a, b, Parallelism::None);
    });
}

/// The convolution's backward pass, block by block as [`conv_forward`]
/// (the im2col matrix is rebuilt from the layer's input `x`, in cache,
/// rather than kept from the forward pass): each block's weight gradient
/// into its own part, summed in block order; when asked, the input gradient
/// through the block's im2col gradient and col2im.
fn conv_backward(
    p: &[f32],
    s: ConvShape,
    x: &[f32],
    delta: &[f32],
    g: &mut [f32],
    dx: Option<&mut [f32]>,
    tmp: &mut ConvScratch,
) {
    let (patch, weights) = (s.patch(), s.out_c * s.patch());
    let (block, in_len, positions) = (conv_block(s), s.h * s.w * s.in_c, s.out_h() * s.out_w());
    let n = x.len() / in_len;
    if dx.is_some() {
        // The weights are read only for the input gradient.
        tap_major(s, p, &mut tmp.w);
    }
    // Each block's part: its weight gradient, then its bias gradient (the
    // block's output gradient summed while it is in cache, not in one pass
    // over the whole batch's on one thread afterwards).
    let part_len = weights + s.out_c;
    tmp.parts.clear();
    tmp.parts.resize(n.div_ceil(block) * part_len, 0.0);
    let w = &tmp.w[..];
    let work = |part: &mut [f32], x: &[f32], delta: &[f32], dx: Option<&mut [f32]>| {
        let rows = delta.len() / s.out_c;
        let (part, bias_part) = part.split_at_mut(weights);
        bias_grad(delta, bias_part);
        with_block_cols(s, rows * patch, |cols, d_cols| {
            for (cols, x) in cols.chunks_exact_mut(positions * patch).zip(x.chunks_exact(in_len)) {
                im2col_sample(s, x, cols);
            }
            let (d, c) = (View::transposed(delta, s.out_c), View::rows(cols, patch));
            matmul_on(s.out_c, patch, rows, part, false, d, c, Parallelism::None);
            if let Some(dx) = dx {
                let (d, w) = (View::rows(delta, s.out_c), View::rows(w, patch));
                matmul_on(rows, patch, s.out_c, d_cols, false, d, w, Parallelism::None);
                dx.fill(0.0);
                for (d_cols, dx) in d_cols.chunks_exact(positions * patch).zip(dx.chunks_exact_mut(in_len)) {
                    col2im_sample(s, d_cols, dx);
                }
            }
        });
    };
    let blocks = tmp.parts.par_chunks_mut(part_len).zip(x.par_chunks(block * in_len));
    let blocks = blocks.zip(delta.par_chunks(block * positions * s.out_c));
    match dx {
        None => blocks.for_each(|((part, x), delta)| work(part, x, delta, None)),
        Some(dx) => blocks.zip(dx.par_chunks_mut(block * in_len)).for_each(|(((part, x), delta), dx)| {
            work(part, x, delta, Some(dx));
        }),
    }
    // The blocks' sum, in block order, then back to the parameter layout:
    // each filter from (ky, kx, c) to (c, ky, kx).
    let (first, rest) = tmp.parts.split_at_mut(part_len);
    for part in rest.chunks_exact(part_len) {
        first.iter_mut().zip(part).for_each(|(g, &v)| *g += v);
    }
    transpose(&first[..weights], &mut g[..weights], s.k * s.k, s.in_c);
    g[weights..weights + s.out_c].copy_from_slice(&first[weights..]);
}

/// Floats per task of the element-wise passes (ReLU): enough to be worth
/// a task, few enough that LeNet's large activations use every thread.
const ELEMENTWISE_CHUNK: usize = 1 << 14;

/// `f(out chunk, x chunk)` over matching chunks of `out` and `x`, one task
/// each (an element-wise pass gives the same result on any thread count).
fn elementwise(out: &mut [f32], x: &[f32], f: impl Fn(&mut [f32], &[f32]) + Sync) {
    out.par_chunks_mut(ELEMENTWISE_CHUNK).zip(x.par_chunks(ELEMENTWISE_CHUNK)).for_each(|(o, x)| f(o, x));
}

/// The max pooling's backward pass, sample by sample on the pool: each
/// output's gradient goes to the input its maximum came from (`argmax`,
/// indices into the whole batch's input, as [`pool_forward`] writes them).
/// With `relu_input`, the input of a ReLU whose output the pooling read,
/// the gradient is also that ReLU's: zero where its input was not positive
/// (what the ReLU's own backward pass would make of this one's result, bit
/// for bit).
fn pool_backward(
    c: usize,
    h: usize,
    w: usize,
    argmax: &[u32],
    delta: &[f32],
    relu_input: Option<&[f32]>,
    dx: &mut [f32],
) {
    let (per_in, per_out) = (h * w * c, (h / 2) * (w / 2) * c);
    let samples = dx.par_chunks_mut(per_in).zip(argmax.par_chunks(per_out)).zip(delta.par_chunks(per_out));
    samples.enumerate().for_each(|(s, ((dx, arg), dy))| {
        dx.fill(0.0);
        let base = s * per_in;
        match relu_input {
            None => {
                for (&arg, &dy) in arg.iter().zip(dy) {
                    dx[arg as usize - base] += dy;
                }
            }
            Some(x) => {
                let x = &x[base..base + per_in];
                for (&arg, &dy) in arg.iter().zip(dy) {
                    let at = arg as usize - base;
                    if x[at] > 0.0 {
                        dx[at] += dy;
                    }
                }
            }
        }
    });
}

fn pool_forward(c: usize, h: usize, w: usize, x: &[f32], out: &mut [f32], argmax: &mut Vec<u32>) {
    let (oh, ow) = (h / 2, w / 2);
    argmax.clear();
    argmax.resize(out.len(), 0);
    let per_in = h * w * c;
    let per_out = oh * ow * c;
    let samples = out.par_chunks_mut(per_out).zip(argmax.par_chunks_mut(per_out)).zip(x.par_chunks(per_in));
    samples.enumerate().for_each(|(s, ((out, arg), x))| pool_sample(c, h, w, x, out, arg, s * per_in));
}

/// One sample's 2x2 max pooling (`x` its channel-last input): each output,
/// and in `arg` where its maximum is as an index into the batch's input
/// (`base` is where this sample starts there; the first maximum in row
/// order wins a tie).
fn pool_sample(c: usize, h: usize, w: usize, x: &[f32], out: &mut [f32], arg: &mut [u32], base: usize) {
    let (oh, ow) = (h / 2, w / 2);
    for oy in 0..oh {
        for ox in 0..ow {
            for ch in 0..c {
                let mut best = ((2 * oy) * w + 2 * ox) * c + ch;
                for (dy, dx) in [(0, 1), (1, 0), (1, 1)] {
                    let i = ((2 * oy + dy) * w + 2 * ox + dx) * c + ch;
                    if x[i] > x[best] {
                        best = i;
                    }
                }
                let o = (oy * ow + ox) * c + ch;
                out[o] = x[best];
                arg[o] = (base + best) as u32;
            }
        }
    }
}

/// Per sample, `rows x cols` in `x` becomes `cols x rows` in `out`.
pub(crate) fn transpose(x: &[f32], out: &mut [f32], rows: usize, cols: usize) {
    for (x, out) in x.chunks_exact(rows * cols).zip(out.chunks_exact_mut(rows * cols)) {
        for r in 0..rows {
            for c in 0..cols {
                out[c * rows + r] = x[r * cols + c];
            }
        }
    }
}

/// Softmax cross-entropy of `logits` (`n x CLASSES`) against `labels`:
/// returns the summed loss and correct count, and writes to `d_logits` the
/// gradient of the SUMMED loss (`softmax - one_hot`, per sample).
pub fn softmax_cross_entropy(logits: &[f32], labels: &[u8], d_logits: &mut Vec<f32>) -> StepStats {
    let mut stats = StepStats { samples: labels.len() as u64, ..StepStats::default() };
    d_logits.clear();
    d_logits.resize(logits.len(), 0.0);
    for ((row, d), &label) in logits.chunks_exact(CLASSES).zip(d_logits.chunks_exact_mut(CLASSES)).zip(labels) {
        let label = usize::from(label);
        let (best, max) =
            row.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
        stats.loss_sum += f64::from(sum.ln() - (row[label] - max));
        stats.correct += u64::from(best == label);
        for (di, &v) in d.iter_mut().zip(row) {
            *di = (v - max).exp() / sum;
        }
        d[label] -= 1.0;
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..len).map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect()
    }

    /// Compares the analytic gradient of `L = sum(r * model(x))` w.r.t. the
    /// parameters and the input with central differences, computed in f32
    /// (hence the loose tolerance), on `checks` entries of each.
    fn grad_check(model: &Model, n: usize) {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        pool.install(|| {
            // Realistic scales (the model's own init) keep activations O(1), so a
            // step of `eps` rarely crosses a ReLU or max-pool kink.
            let params = model.init(1);
            let x = values(n * model.input_len(), 2);
            let r = values(n * model.output_len(), 3);
            let mut ws = Workspace::default();
            let objective = |p: &[f32], x: &[f32], ws: &mut Workspace| -> f64 {
                model.forward(p, x, n, ws).iter().zip(&r).map(|(&o, &r)| f64::from(o) * f64::from(r)).sum()
            };
            objective(&params, &x, &mut ws);
            let mut grads = vec![f32::NAN; model.num_params()];
            let dx = model.backward(&params, &mut ws, &r, &mut grads, true);
            assert!(grads.iter().all(|g| g.is_finite()), "every gradient written");
            let eps = 5e-3f32;
            let check = |analytic: f32, numeric: f64, what: String| {
                let tol = 2e-2 * (1.0 + analytic.abs().max(numeric.abs() as f32));
                assert!((analytic - numeric as f32).abs() <= tol, "{what}: analytic {analytic}, numeric {numeric}");
            };
            let stride = |len: usize| (len / 40).max(1);
            for i in (0..params.len()).step_by(stride(params.len())) {
                let (mut plus, mut minus) = (params.clone(), params.clone());
                plus[i] += eps;
                minus[i] -= eps;
                let numeric = (objective(&plus, &x, &mut ws) - objective(&minus, &x, &mut ws)) / (2.0 * f64::from(eps));
                check(grads[i], numeric, format!("param {i}"));
            }
            for i in (0..x.len()).step_by(stride(x.len())) {
                let (mut plus, mut minus) = (x.clone(), x.clone());
                plus[i] += eps;
                minus[i] -= eps;
                let numeric =
                    (objective(&params, &plus, &mut ws) - objective(&params, &minus, &mut ws)) / (2.0 * f64::from(eps));
                check(dx[i], numeric, format!("input {i}"));
            }
        });
    }

    #[test]
    fn gradient_linear() {
        grad_check(&Model::from_layers(vec![Layer::Linear { inputs: 7, outputs: 5 }]), 3);
    }

    #[test]
    fn gradient_conv_padded_multichannel() {
        let s = ConvShape { in_c: 3, out_c: 4, k: 3, pad: 1, h: 6, w: 5 };
        grad_check(&Model::from_layers(vec![Layer::Conv(s)]), 2);
        let s = ConvShape { in_c: 2, out_c: 3, k: 5, pad: 0, h: 7, w: 7 };
        grad_check(&Model::from_layers(vec![Layer::Conv(s)]), 2);
    }

    #[test]
    fn gradient_relu_pool_transpose() {
        grad_check(&Model::from_layers(vec![Layer::Relu { len: 24 }]), 2);
        grad_check(&Model::from_layers(vec![Layer::MaxPool { c: 3, h: 4, w: 6 }]), 2);
        grad_check(&Model::from_layers(vec![Layer::Transpose { rows: 3, cols: 5 }]), 2);
    }

    #[test]
    fn gradient_mlp_and_lenet() {
        grad_check(&Model::new(Arch::Mlp, (1, 6, 6)), 3);
        grad_check(&Model::new(Arch::Lenet, (1, 28, 28)), 2);
        grad_check(&Model::new(Arch::Lenet, (3, 32, 32)), 1);
    }

    #[test]
    fn shapes_and_layout_follow_the_design() {
        let mlp = Model::new(Arch::Mlp, (1, 28, 28));
        assert_eq!(mlp.num_params(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
        let lenet = Model::new(Arch::Lenet, (1, 28, 28));
        let conv = 6 * 25 + 6 + 16 * 6 * 25 + 16;
        assert_eq!(lenet.num_params(), conv + 400 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10);
        let cifar = Model::new(Arch::Lenet, (3, 32, 32));
        assert_eq!(cifar.num_params(), 6 * 75 + 6 + 16 * 150 + 16 + 576 * 120 + 120 + 120 * 84 + 84 + 850);
        assert_eq!(lenet.init(5), lenet.init(5));
        assert_ne!(lenet.init(5), lenet.init(6));
        let bound = 1.0 / 25f32.sqrt();
        assert!(lenet.init(5)[..156].iter().all(|v| v.abs() <= bound));
    }

    /// A conv whose kernel picks one input pixel shows the weight layout
    /// `[out_c][in_c][ky][kx]` and the channel-first flatten order.
    #[test]
    fn conv_weight_layout_is_out_in_ky_kx() {
        let s = ConvShape { in_c: 2, out_c: 1, k: 3, pad: 1, h: 3, w: 3 };
        let model = Model::from_layers(vec![
            Layer::Transpose { rows: 2, cols: 9 },
            Layer::Conv(s),
            Layer::Transpose { rows: 9, cols: 1 },
        ]);
        let mut params = vec![0.0; model.num_params()];
        // Weight [0][1][0][2]: channel 1, the pixel up and to the right.
        params[9 + 2] = 1.0;
        let x: Vec<f32> = (0..18).map(|v| v as f32).collect();
        let mut ws = Workspace::default();
        let y = model.forward(&params, &x, 1, &mut ws);
        // Output (1, 1) sees input (0, 2) of channel 1: 9 + 2.
        assert_eq!(y[4], 11.0);
        assert_eq!(y[0], 0.0, "padding");
    }

    /// The copies compiled for a run length fill the same im2col matrix as
    /// the general walk, padded or not, with or without whole kernel rows.
    #[test]
    fn im2col_by_run_length_matches_the_general_walk() {
        let shapes = [
            ConvShape { in_c: 1, out_c: 1, k: 5, pad: 2, h: 7, w: 6 },
            ConvShape { in_c: 6, out_c: 1, k: 5, pad: 0, h: 9, w: 8 },
            ConvShape { in_c: 1, out_c: 1, k: 5, pad: 4, h: 3, w: 2 },
            ConvShape { in_c: 6, out_c: 1, k: 5, pad: 1, h: 5, w: 5 },
        ];
        for s in shapes {
            let x = values(s.h * s.w * s.in_c, 4);
            let len = s.out_h() * s.out_w() * s.patch();
            let (mut fast, mut general) = (vec![0.0; len], vec![0.0; len]);
            im2col_sample(s, &x, &mut fast);
            for_each_run(s, |at, pixel, len| general[at..at + len].copy_from_slice(&x[pixel..pixel + len]));
            assert_eq!(fast, general, "{s:?}");
        }
    }

    /// LeNet's convolution stack runs block by block (`forward_blocks`):
    /// every activation is what the layers give run one at a time over the
    /// whole batch, bit for bit, at batch sizes that do and do not fill the
    /// last block, and the indices of the poolings too.
    #[test]
    fn block_by_block_forward_is_layer_by_layer() {
        for (shape, n) in [((1, 28, 28), 7), ((3, 32, 32), 4), ((1, 28, 28), 1)] {
            let model = Model::new(Arch::Lenet, shape);
            assert_eq!(model.segment_end(0), 8, "transpose, conv, relu, pool, conv, relu, pool, transpose");
            let params = model.init(3);
            let x = values(n * model.input_len(), 5);
            let mut ws = Workspace::default();
            model.forward(&params, &x, n, &mut ws);
            let mut input = x.clone();
            for (i, (&layer, &at)) in model.layers().iter().zip(model.offsets()).enumerate() {
                let one = Model::from_layers(vec![layer]);
                let (w, b) = layer.param_counts();
                let mut alone = Workspace::default();
                let out = one.forward(&params[at..at + w + b], &input, n, &mut alone).to_vec();
                assert!(out == ws.acts[i + 1], "{shape:?} batch {n}: layer {i} {layer:?}");
                if let Layer::MaxPool { .. } = layer {
                    assert_eq!(alone.argmax[0], ws.argmax[i], "{shape:?} batch {n}: layer {i} indices");
                }
                input = out;
            }
        }
    }

    /// The pooling's backward pass that also masks for the ReLU before it
    /// gives the gradients of the two passes one after the other, bit for
    /// bit: the same LeNet with an identity (a one-row transpose) between
    /// each ReLU and its pooling takes the separate passes.
    #[test]
    fn pooling_and_relu_backward_in_one_pass_is_both_passes() {
        let lenet = Model::new(Arch::Lenet, (1, 28, 28));
        let mut apart = Vec::new();
        for &layer in lenet.layers() {
            if let Layer::MaxPool { c, h, w } = layer {
                apart.push(Layer::Transpose { rows: 1, cols: c * h * w });
            }
            apart.push(layer);
        }
        let apart = Model::from_layers(apart);
        let n = 5;
        let params = lenet.init(2);
        let x = values(n * lenet.input_len(), 6);
        let d_out = values(n * lenet.output_len(), 7);
        let gradients = |model: &Model| {
            let mut ws = Workspace::default();
            model.forward(&params, &x, n, &mut ws);
            let mut grads = vec![f32::NAN; params.len()];
            let dx = model.backward(&params, &mut ws, &d_out, &mut grads, true);
            (grads, dx)
        };
        let (fused, separate) = (gradients(&lenet), gradients(&apart));
        assert!(fused.0 == separate.0, "parameter gradients");
        assert!(fused.1 == separate.1, "input gradients");
        assert!(fused.0.iter().any(|&g| g != 0.0));
    }

    #[test]
    fn cross_entropy_of_uniform_logits_is_ln10() {
        let mut d = Vec::new();
        let stats = softmax_cross_entropy(&[0.0; 20], &[3, 4], &mut d);
        assert!((stats.loss_sum - 2.0 * 10f64.ln()).abs() < 1e-5);
        assert!((d[3] + 0.9).abs() < 1e-6 && (d[13] - 0.1).abs() < 1e-6);
    }
}
