//! The models' passes on the CPU: [`Model::forward`] and [`Model::backward`]
//! chain the [`kernels`](super::kernels) layer by layer (LeNet's convolution
//! stack block by block, in cache), keeping what the backward pass needs in
//! a [`Workspace`]; and the softmax cross-entropy loss.
//!
//! Inputs: batches of normalised images (`C x H x W` floats per sample, as
//! [`data`](crate::train::data) makes them) and one flat parameter vector in
//! the [`model`](crate::train::model) layout. Nothing outside memory is
//! touched.

use rayon::prelude::*;

use super::kernels::{
    ConvScratch, ELEMENTWISE_CHUNK, conv_backward, conv_block, conv_block_forward, conv_forward, dense_backward,
    elementwise, linear_forward, pool_backward, pool_forward, pool_sample, tap_major, transpose,
};
use crate::train::data::CLASSES;
use crate::train::model::{Layer, Model};
use crate::train::stats::StepStats;

// The passes are methods of `Model` (callers write `model.forward(..)`) but
// declared here, beside the kernels they run: `model` holds the layout only
// and imports no backend; these read it through its accessors.
impl Model {
    /// Runs the model on `n` samples `x`; returns the logits (`n x outputs`),
    /// keeping what the backward pass needs in `ws`.
    pub fn forward<'w>(&self, params: &[f32], x: &[f32], n: usize, ws: &'w mut Workspace) -> &'w [f32] {
        assert_eq!(params.len(), self.num_params(), "parameter vector length");
        assert_eq!(x.len(), n * self.input_len(), "input length");
        ws.prepare(self.layers().len());
        ws.acts[0].clear();
        ws.acts[0].extend_from_slice(x);
        let mut i = 0;
        while i < self.layers().len() {
            let end = self.segment_end(i);
            if end > i + 1 {
                self.forward_blocks(params, i..end, n, ws);
                i = end;
                continue;
            }
            let layer = &self.layers()[i];
            let (before, after) = ws.acts.split_at_mut(i + 1);
            let (input, out) = (&before[i], &mut after[0]);
            // Every layer writes all of its output: the buffer is not zeroed first.
            out.resize(n * layer.out_len(), 0.0);
            let p = &params[self.offsets()[i]..];
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
        &ws.acts[self.layers().len()]
    }

    /// The end (exclusive) of the run of layers from `start` that the
    /// forward pass takes block by block: the layers that work on each
    /// sample alone (convolution, ReLU, max pooling, transpose) after
    /// `start`, when the run has a convolution; else `start + 1`.
    fn segment_end(&self, start: usize) -> usize {
        let per_sample = |l: &Layer| !matches!(l, Layer::Linear { .. });
        let end = start + self.layers()[start..].iter().take_while(|l| per_sample(l)).count();
        if self.layers()[start..end].iter().any(|l| matches!(l, Layer::Conv(_))) { end } else { start + 1 }
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
        let layers = &self.layers()[range.clone()];
        // Samples per block: the smallest block of the run's convolutions (each sized to stay in cache).
        let block = layers.iter().filter_map(|l| if let Layer::Conv(s) = l { Some(conv_block(*s)) } else { None });
        let block = block.min().unwrap_or(1);
        // Each convolution's filters in im2col column order, made once for all blocks.
        let taps: Vec<Vec<f32>> = layers
            .iter()
            .zip(&self.offsets()[range.clone()])
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
                        let bias = &params[self.offsets()[range.start + j] + s.out_c * s.patch()..][..s.out_c];
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
        assert_eq!(grads.len(), self.num_params(), "gradient vector length");
        let n = ws.acts[0].len() / self.input_len();
        // The two gradient buffers are the workspace's, reused step after step.
        let (mut delta, mut d_in) = (std::mem::take(&mut ws.delta), std::mem::take(&mut ws.d_in));
        delta.clear();
        delta.extend_from_slice(d_out);
        // Below the first layer with parameters no gradient is needed (LeNet's
        // first convolution would otherwise pay a GEMM and a col2im for nothing).
        let first_trained = self.layers().iter().position(|l| l.param_counts() != (0, 0)).unwrap_or(0);
        let needs_dx = |i: usize| i > first_trained || input_grad;
        // A ReLU whose gradient its max pooling's backward pass already masked.
        let mut relu_done = None;
        for (i, layer) in self.layers().iter().enumerate().rev() {
            if relu_done == Some(i) {
                continue;
            }
            let need_dx = needs_dx(i);
            let input = &ws.acts[i];
            let p = &params[self.offsets()[i]..];
            let (w, b) = layer.param_counts();
            let g = &mut grads[self.offsets()[i]..self.offsets()[i] + w + b];
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
                    if need_dx && i > 0 && matches!(self.layers()[i - 1], Layer::Relu { .. }) && needs_dx(i - 1) =>
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
    use crate::train::model::{Arch, ConvShape};
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

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
