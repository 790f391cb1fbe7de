//! The CPU model's arithmetic for each GPU kernel, in the device's layouts
//! (channel-first activations `[n][c][h][w]`; im2col matrices
//! `[n][c*k*k][oh*ow]`): what the kernel checks (`kernel_check`) compare
//! every kernel's output with, so that a difference names the kernel.
//!
//! Each reference runs the CPU model's own code (`model`: its layers, its
//! im2col and col2im, its bias and loss functions; `optim`'s SGD), with
//! only layout conversions around it: the CPU model keeps convolution
//! activations channel-last and orders im2col columns `(ky, kx, c)`, the
//! device keeps them channel-first and orders them `(c, ky, kx)`. Pure
//! functions on host memory; the tests check them against the kernels'
//! formulas written out on the CPU.

use crate::train::cpu::kernels;
use crate::train::cpu::net::{Workspace, softmax_cross_entropy};
use crate::train::data::CLASSES;
use crate::train::model::{ConvShape, Layer, Model};
use crate::train::optim::Sgd;

/// Per sample, `[c][inner]` to `[inner][c]` (channel-first to channel-last).
fn to_channel_last(x: &[f32], channels: usize, inner: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    kernels::transpose(x, &mut out, channels, inner);
    out
}

/// Per sample, `[inner][c]` to `[c][inner]`.
fn to_channel_first(x: &[f32], channels: usize, inner: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    kernels::transpose(x, &mut out, inner, channels);
    out
}

/// `y[n][c][p] + bias[c]` (`bias_add`; `inner` = 1 for a linear layer's `[n][c]`).
pub(crate) fn bias_add(y: &[f32], bias: &[f32], inner: usize) -> Vec<f32> {
    let channels = bias.len();
    // The CPU model starts each output row (channel-last) from the bias and adds the product to it.
    let mut out = vec![0.0; y.len()];
    kernels::fill_bias(&mut out, bias);
    for (o, v) in out.iter_mut().zip(to_channel_last(y, channels, inner)) {
        *o += v;
    }
    to_channel_first(&out, channels, inner)
}

/// `db[c]`, the sum of `dy[n][c][p]` over samples and positions, added in
/// f64 and rounded once: what the device's bias gradient (`bias_grad`,
/// cuBLAS products) is checked against. The CPU model's own sum (f32,
/// sample by sample; the tests here check the two agree) drifts over a
/// batch of 1,024 LeNet outputs (802,816 values a channel) by about as
/// much as a tolerance would allow; against the exact sum the device's own
/// rounding is what is measured.
pub(crate) fn bias_grad_exact(dy: &[f32], channels: usize, inner: usize) -> Vec<f32> {
    let mut db = vec![0.0f64; channels];
    for (i, row) in dy.chunks_exact(inner.max(1)).enumerate() {
        db[i % channels] += row.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    db.into_iter().map(|v| v as f32).collect()
}

/// The CPU model's output of `layers` on `x` (one sample of `x.len()`
/// floats) and its input gradient for the output gradient `dy`.
fn layers_forward_backward(layers: Vec<Layer>, x: &[f32], dy: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let model = Model::from_layers(layers);
    let n = x.len() / model.input_len();
    let mut ws = Workspace::default();
    let y = model.forward(&[], x, n, &mut ws).to_vec();
    let dx = model.backward(&[], &mut ws, dy, &mut [], true);
    (y, dx)
}

/// ReLU of `x` (`relu_forward`), and `dy` masked by it (`relu_backward`).
pub(crate) fn relu(x: &[f32], dy: &[f32]) -> (Vec<f32>, Vec<f32>) {
    layers_forward_backward(vec![Layer::Relu { len: x.len() }], x, dy)
}

/// 2x2 max-pool of channel-first `x` (`maxpool_forward`), and the input
/// gradient for the output gradient `dy` (`maxpool_backward`).
pub(crate) fn maxpool(c: usize, h: usize, w: usize, x: &[f32], dy: &[f32]) -> (Vec<f32>, Vec<f32>) {
    // The CPU pool works channel-last; LeNet's Transpose layers frame it the same way.
    let layers = vec![
        Layer::Transpose { rows: c, cols: h * w },
        Layer::MaxPool { c, h, w },
        Layer::Transpose { rows: (h / 2) * (w / 2), cols: c },
    ];
    layers_forward_backward(layers, x, dy)
}

/// Where entry `(sample, position, c, ky, kx)` of an im2col matrix is in
/// the CPU model's layout (`[n][oh*ow][(ky*k + kx)*c + ch]`) and in the
/// device's (`[n][(ch*k + ky)*k + kx][oh*ow]`), for every entry.
fn column_entries(s: ConvShape, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let (p, patch, k, c) = (s.out_h() * s.out_w(), s.in_c * s.k * s.k, s.k, s.in_c);
    (0..n).flat_map(move |sample| {
        (0..p).flat_map(move |pos| {
            (0..c).flat_map(move |ch| {
                (0..k * k).map(move |tap| {
                    let cpu = (sample * p + pos) * patch + tap * c + ch;
                    let device = (sample * patch + ch * k * k + tap) * p + pos;
                    (cpu, device)
                })
            })
        })
    })
}

/// The device's im2col matrix of channel-first `x` (`im2col`).
pub(crate) fn im2col(s: ConvShape, x: &[f32], n: usize) -> Vec<f32> {
    let per_sample = s.out_h() * s.out_w() * s.in_c * s.k * s.k;
    let mut cols = vec![0.0; n * per_sample];
    let x = to_channel_last(x, s.in_c, s.h * s.w);
    for (cols, x) in cols.chunks_exact_mut(per_sample).zip(x.chunks_exact(s.in_c * s.h * s.w)) {
        kernels::im2col_sample(s, x, cols);
    }
    let mut out = vec![0.0; cols.len()];
    for (cpu, device) in column_entries(s, n) {
        out[device] = cols[cpu];
    }
    out
}

/// The channel-first input gradient of the device's im2col matrix gradient `dcol` (`col2im`).
pub(crate) fn col2im(s: ConvShape, dcol: &[f32], n: usize) -> Vec<f32> {
    let mut cols = vec![0.0; dcol.len()];
    for (cpu, device) in column_entries(s, n) {
        cols[cpu] = dcol[device];
    }
    let mut dx = vec![0.0; n * s.in_c * s.h * s.w];
    let per_sample = cols.len() / n.max(1);
    for (cols, dx) in cols.chunks_exact(per_sample.max(1)).zip(dx.chunks_exact_mut(s.in_c * s.h * s.w)) {
        kernels::col2im_sample(s, cols, dx);
    }
    to_channel_first(&dx, s.in_c, s.h * s.w)
}

/// Per sample of the `CLASSES`-wide logits `z`: its loss, 1 when its
/// arg-max is its label (else 0), and the loss's gradient (`softmax_xent`).
pub(crate) fn softmax_xent(z: &[f32], labels: &[u8]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (mut loss, mut correct, mut dz) = (Vec::new(), Vec::new(), Vec::new());
    let mut d = Vec::new();
    for (row, &label) in z.chunks_exact(CLASSES).zip(labels) {
        // One sample at a time: the CPU function returns sums over its batch.
        let stats = softmax_cross_entropy(row, &[label], &mut d);
        loss.push(stats.loss_sum as f32);
        correct.push(stats.correct as f32);
        dz.extend_from_slice(&d);
    }
    (loss, correct, dz)
}

/// Parameters and momentum after one SGD update (`sgd`).
pub(crate) fn sgd(
    sgd: Sgd,
    lr: f32,
    params: &[f32],
    momentum: &[f32],
    grad_sum: &[f32],
    scale: f32,
) -> (Vec<f32>, Vec<f32>) {
    let (mut w, mut v) = (params.to_vec(), momentum.to_vec());
    sgd.update(lr, &mut w, &mut v, grad_sum, scale);
    (w, v)
}

#[cfg(test)]
mod tests {
    //! Each reference against its kernel's formula in `kernels.cu`, written
    //! out on the CPU: the layouts agree, so on a GPU a difference is the
    //! kernel's (or the launch's), not the reference's.

    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..len).map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect()
    }

    const SHAPES: [ConvShape; 3] = [
        ConvShape { in_c: 1, out_c: 6, k: 5, pad: 2, h: 28, w: 28 },
        ConvShape { in_c: 3, out_c: 4, k: 3, pad: 1, h: 6, w: 5 },
        ConvShape { in_c: 6, out_c: 16, k: 5, pad: 0, h: 14, w: 14 },
    ];

    #[test]
    fn bias_add_and_bias_grad_follow_the_channel_first_layout() {
        let (n, c, p) = (3, 5, 7);
        let (y, b) = (values(n * c * p, 1), values(c, 2));
        // kernels.cu bias_add: y[i] += b[(i / inner) % channels].
        let kernel: Vec<f32> = y.iter().enumerate().map(|(i, &v)| v + b[(i / p) % c]).collect();
        assert_eq!(bias_add(&y, &b, p), kernel);
        assert_eq!(
            bias_add(&y[..n * c], &b, 1),
            y[..n * c].iter().enumerate().map(|(i, &v)| v + b[i % c]).collect::<Vec<_>>()
        );
        // The bias gradient in the device's layout: for n, for p: sum += dy[(n * channels + c) * inner + p].
        let sums: Vec<f32> = (0..c)
            .map(|ch| (0..n).flat_map(|s| (0..p).map(move |q| (s, q))).map(|(s, q)| y[(s * c + ch) * p + q]).sum())
            .collect();
        // The CPU model's own bias gradient, on the channel-last layout.
        let bias_grad = |dy: &[f32], channels: usize, inner: usize| {
            let mut db = vec![0.0; channels];
            kernels::bias_grad(&to_channel_last(dy, channels, inner), &mut db);
            db
        };
        assert_eq!(bias_grad(&y, c, p), sums);
        let exact = bias_grad_exact(&y, c, p);
        for (e, s) in exact.iter().zip(&sums) {
            assert!((e - s).abs() <= 1e-5 * (1.0 + s.abs()), "{e} vs {s}");
        }
        assert_eq!(bias_grad_exact(&y[..n * c], c, 1), bias_grad(&y[..n * c], c, 1));
    }

    #[test]
    fn relu_and_maxpool_follow_the_kernels() {
        let x = values(2 * 3 * 4 * 6, 3);
        let dy = values(x.len(), 4);
        let (y, dx) = relu(&x, &dy);
        assert_eq!(y, x.iter().map(|&v| if v < 0.0 { 0.0 } else { v }).collect::<Vec<_>>());
        // kernels.cu relu_backward reads the output: dy is zeroed where y <= 0.
        assert_eq!(dx, dy.iter().zip(&y).map(|(&d, &v)| if v <= 0.0 { 0.0 } else { d }).collect::<Vec<_>>());

        // Few distinct values, so windows hold ties: the first maximum in row order wins.
        let (c, h, w) = (3, 4, 6);
        let x: Vec<f32> = values(2 * c * h * w, 5).iter().map(|v| (v * 2.0).round()).collect();
        let dy = values(2 * c * (h / 2) * (w / 2), 6);
        let (y, dx) = maxpool(c, h, w, &x, &dy);
        let (oh, ow) = (h / 2, w / 2);
        let mut kernel_dx = vec![0.0; x.len()];
        for i in 0..y.len() {
            // kernels.cu maxpool_forward and maxpool_backward.
            let (ox, oy, plane) = (i % ow, (i / ow) % oh, i / (ow * oh));
            let base = plane * h * w;
            let mut best = base + 2 * oy * w + 2 * ox;
            for dyy in 0..2 {
                for dxx in 0..2 {
                    let j = base + (2 * oy + dyy) * w + 2 * ox + dxx;
                    if x[j] > x[best] {
                        best = j;
                    }
                }
            }
            assert_eq!(y[i], x[best], "output {i}");
            kernel_dx[best] = dy[i];
        }
        assert_eq!(dx, kernel_dx);
    }

    #[test]
    fn im2col_and_col2im_follow_the_kernels() {
        for s in SHAPES {
            let n = 2;
            let (c, h, w, k, pad, oh, ow) = (s.in_c, s.h, s.w, s.k, s.pad, s.out_h(), s.out_w());
            let x = values(n * c * h * w, 7);
            // kernels.cu im2col, one entry per thread i.
            let total = n * c * k * k * oh * ow;
            let kernel: Vec<f32> = (0..total)
                .map(|i| {
                    let (p, row, sample) = (i % (oh * ow), (i / (oh * ow)) % (c * k * k), i / (oh * ow * c * k * k));
                    let (ox, oy, kx, ky, ch) = (p % ow, p / ow, row % k, (row / k) % k, row / (k * k));
                    let (y, xx) = ((oy + ky) as isize - pad as isize, (ox + kx) as isize - pad as isize);
                    if y >= 0 && (y as usize) < h && xx >= 0 && (xx as usize) < w {
                        x[((sample * c + ch) * h + y as usize) * w + xx as usize]
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_eq!(im2col(s, &x, n), kernel, "{s:?}");

            let dcol = values(total, 8);
            // kernels.cu col2im, one input element per thread i (a gather).
            let kernel: Vec<f32> = (0..n * c * h * w)
                .map(|i| {
                    let (xx, y, ch, sample) = (i % w, (i / w) % h, (i / (w * h)) % c, i / (w * h * c));
                    let mut sum = 0.0f32;
                    for ky in 0..k {
                        let Some(oy) = (y + pad).checked_sub(ky).filter(|&oy| oy < oh) else { continue };
                        for kx in 0..k {
                            let Some(ox) = (xx + pad).checked_sub(kx).filter(|&ox| ox < ow) else { continue };
                            sum += dcol[((sample * c * k * k) + (ch * k + ky) * k + kx) * oh * ow + oy * ow + ox];
                        }
                    }
                    sum
                })
                .collect();
            let reference = col2im(s, &dcol, n);
            // The CPU adds in another order: equal up to rounding.
            for (i, (a, b)) in reference.iter().zip(&kernel).enumerate() {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{s:?} element {i}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn softmax_and_sgd_follow_the_kernels() {
        let z = values(3 * CLASSES, 9);
        let labels = [3u8, 0, 9];
        let (loss, correct, dz) = softmax_xent(&z, &labels);
        for (s, row) in z.chunks(CLASSES).enumerate() {
            // kernels.cu softmax_xent.
            let label = usize::from(labels[s]);
            let (mut best, mut max) = (0, row[0]);
            for (j, &v) in row.iter().enumerate().skip(1) {
                if v > max {
                    (best, max) = (j, v);
                }
            }
            let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
            assert!((loss[s] - (sum.ln() + max - row[label])).abs() < 1e-6, "sample {s}");
            assert_eq!(correct[s], f32::from(u8::from(best == label)));
            for j in 0..CLASSES {
                let want = (row[j] - max).exp() / sum - if j == label { 1.0 } else { 0.0 };
                assert!((dz[s * CLASSES + j] - want).abs() < 1e-6, "sample {s} class {j}");
            }
        }

        let (w, v, g) = (values(50, 10), values(50, 11), values(50, 12));
        let opt = Sgd { momentum: 0.9, weight_decay: 5e-4 };
        let (w2, v2) = sgd(opt, 0.05, &w, &v, &g, 0.25);
        for i in 0..w.len() {
            // kernels.cu sgd.
            let grad = g[i] * 0.25 + 5e-4 * w[i];
            let vel = 0.9 * v[i] + grad;
            assert_eq!((w2[i], v2[i]), (w[i] - 0.05 * vel, vel), "parameter {i}");
        }
    }
}
