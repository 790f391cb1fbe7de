//! The CPU's kernels: matrix products, the layers' forward and backward
//! passes one layer at a time (linear, convolution, ReLU, max pooling,
//! transpose) on host memory, for [`net`](super::net) to chain. The GPU
//! path never runs them; its kernel checks compare against them.
//!
//! Inputs: slices of activations, parameters and gradients, shaped by the
//! [`model`](crate::train::model) layout. Nothing outside memory is touched.
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
//! ([`Layer::Transpose`](crate::train::model::Layer::Transpose)), so
//! parameters and the flatten order are exactly those of the shared design.

use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use crate::train::model::ConvShape;

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

pub(super) fn linear_forward(p: &[f32], inputs: usize, outputs: usize, x: &[f32], out: &mut [f32], n: usize) {
    let (w, b) = p.split_at(inputs * outputs);
    fill_bias(out, &b[..outputs]);
    matmul(n, outputs, inputs, out, true, View::rows(x, inputs), View::transposed(w, inputs));
}

/// The backward pass of Linear, `Y = A W^T + b` (`A` is `rows x inputs`, `W`
/// is `outputs x inputs`): `dW = dY^T A`, `db` = column sums of `dY`, and, when
/// asked, `dA = dY W`.
pub(super) fn dense_backward(
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
pub(super) fn conv_block(s: ConvShape) -> usize {
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
pub(super) struct ConvScratch {
    /// The weights with each filter in `(ky, kx, c)` order, as the im2col columns.
    w: Vec<f32>,
    /// Each block's weight gradient (in that order) and bias gradient, summed in block order.
    parts: Vec<f32>,
}

/// Copies the `[out_c][in_c][ky][kx]` weights (the parameter layout) into
/// the `[out_c][ky][kx][in_c]` order of the im2col columns.
pub(super) fn tap_major(s: ConvShape, w: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.resize(s.out_c * s.patch(), 0.0);
    transpose(&w[..out.len()], out, s.in_c, s.k * s.k);
}

/// The convolution over the batch, block by block ([`conv_block`] samples
/// each, one task per block on the pool): a block's im2col matrix, then one
/// GEMM `(m*OH*OW) x (K*K*C)` by `(K*K*C) x OC` into its output rows.
pub(super) fn conv_forward(p: &[f32], s: ConvShape, x: &[f32], out: &mut [f32], tmp: &mut ConvScratch) {
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
pub(super) fn conv_block_forward(s: ConvShape, bias: &[f32], w: &[f32], x: &[f32], out: &mut [f32]) {
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
pub(super) fn conv_backward(
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
pub(super) const ELEMENTWISE_CHUNK: usize = 1 << 14;

/// `f(out chunk, x chunk)` over matching chunks of `out` and `x`, one task
/// each (an element-wise pass gives the same result on any thread count).
pub(super) fn elementwise(out: &mut [f32], x: &[f32], f: impl Fn(&mut [f32], &[f32]) + Sync) {
    out.par_chunks_mut(ELEMENTWISE_CHUNK).zip(x.par_chunks(ELEMENTWISE_CHUNK)).for_each(|(o, x)| f(o, x));
}

/// The max pooling's backward pass, sample by sample on the pool: each
/// output's gradient goes to the input its maximum came from (`argmax`,
/// indices into the whole batch's input, as [`pool_forward`] writes them).
/// With `relu_input`, the input of a ReLU whose output the pooling read,
/// the gradient is also that ReLU's: zero where its input was not positive
/// (what the ReLU's own backward pass would make of this one's result, bit
/// for bit).
pub(super) fn pool_backward(
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

pub(super) fn pool_forward(c: usize, h: usize, w: usize, x: &[f32], out: &mut [f32], argmax: &mut Vec<u32>) {
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
pub(super) fn pool_sample(c: usize, h: usize, w: usize, x: &[f32], out: &mut [f32], arg: &mut [u32], base: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..len).map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect()
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
}
