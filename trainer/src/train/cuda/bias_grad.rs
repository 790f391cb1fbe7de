//! A layer's bias gradient on the device, `db[c]` = the sum of `dy[n][c][p]`
//! over the batch's samples `n` and the layer's positions `p` (one position
//! for a linear layer), as cuBLAS products with a vector of ones, as the
//! convolution's weight gradient is summed over samples (`net`).
//!
//! It was one thread per channel looping over samples and positions: six
//! threads for LeNet's first convolution, each adding 802,816 floats at
//! batch 1,024, which Nsight Compute measured as 95.6 % of all kernel time
//! of a LeNet step on an H200. As products the sums spread over the whole
//! GPU and cuBLAS chooses how (it has tuned kernels for a matrix times a
//! vector): first, per sample and channel, the sum over positions (the
//! `(n*C) x P` matrix `dy` times `P` ones), then, per channel, the sum
//! over samples (`C x N` times `N` ones). A linear layer needs only the
//! second. The plan ([`plan`]) is separate from its launch ([`run`]) so
//! that the tests here run the same products through cuBLAS's documented
//! column-major arithmetic on the CPU, without a GPU.

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, CudaViewMut};

use super::{CudaError, call};

/// A buffer one product of the plan reads (`a`) or writes (`c`); its `b`
/// is always the ones vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Matrix {
    /// The layer's output gradient, `n x channels x inner` floats.
    Dy,
    /// The per-sample sums over positions, `n x channels` floats.
    Part,
    /// The bias gradient, `channels` floats.
    Db,
}

/// One column-major product `c = op(a) * ones` (cuBLAS SGEMM with one column).
#[derive(Debug, Clone, Copy)]
pub(super) struct Product {
    pub(super) cfg: GemmConfig<f32>,
    pub(super) a: Matrix,
    pub(super) c: Matrix,
}

/// Floats the ones vector needs for `n` samples of `inner` positions.
pub(super) fn ones_len(n: usize, inner: usize) -> usize {
    n.max(inner).max(1)
}

/// Floats the per-sample sums need (none for a linear layer).
pub(super) fn part_len(n: usize, channels: usize, inner: usize) -> usize {
    if inner > 1 { n * channels } else { 0 }
}

/// The products that make `db` from `dy` (`n` samples of `channels` x
/// `inner`, row-major as the engine keeps them): one for a linear layer,
/// two for a convolution.
pub(super) fn plan(n: usize, channels: usize, inner: usize) -> Vec<Product> {
    let column = |ta: bool, m: usize, k: usize, lda: usize| GemmConfig {
        transa: if ta { CUBLAS_OP_T } else { CUBLAS_OP_N },
        transb: CUBLAS_OP_N,
        m: m as i32,
        n: 1,
        k: k as i32,
        alpha: 1.0,
        lda: lda as i32,
        ldb: k.max(1) as i32,
        beta: 0.0,
        ldc: m.max(1) as i32,
    };
    // Per channel, the sum over samples: row-major S (n x channels) is, to
    // cuBLAS, the column-major S^T (channels x n, ld channels); db = S^T ones.
    let over_samples = |a| Product { cfg: column(false, channels, n, channels), a, c: Matrix::Db };
    if inner <= 1 {
        return vec![over_samples(Matrix::Dy)];
    }
    // Per sample and channel, the sum over positions: row-major dY ((n*channels)
    // x inner) is the column-major dY^T (inner x n*channels, ld inner); its
    // transpose times the ones gives the n*channels sums, row-major S.
    let over_positions = Product { cfg: column(true, n * channels, inner, inner), a: Matrix::Dy, c: Matrix::Part };
    vec![over_positions, over_samples(Matrix::Part)]
}

/// `db[c] = sum over n, p of dy[n][c][p]` on `blas`'s stream, with `ones`
/// (at least [`ones_len`] ones) and `part` (at least [`part_len`] floats of
/// scratch). Queued, not waited for.
pub(super) fn run(
    blas: &CudaBlas,
    (ones, part): (&CudaSlice<f32>, &mut CudaSlice<f32>),
    dy: &CudaSlice<f32>,
    db: &mut CudaViewMut<'_, f32>,
    (n, channels, inner): (usize, usize, usize),
) -> Result<(), CudaError> {
    let short = |what: &str, have: usize, need: usize| {
        CudaError::Shape(format!("bias gradient of {n} x {channels} x {inner}: {what} has {have} floats, needs {need}"))
    };
    for (what, have, need) in [
        ("the output gradient", dy.len(), n * channels * inner),
        ("the bias gradient", db.len(), channels),
        ("the ones vector", ones.len(), ones_len(n, inner)),
        ("the per-sample sums", part.len(), part_len(n, channels, inner)),
    ] {
        if have < need {
            return Err(short(what, have, need));
        }
    }
    for Product { cfg, a, c } in plan(n, channels, inner) {
        // SAFETY: the checks above give every buffer at least the floats the
        // product's dimensions and leading dimensions address (`plan`: dy
        // n*channels*inner, part n*channels, ones max(n, inner), db channels),
        // and the ones vector is never written.
        let result = unsafe {
            match (a, c) {
                (Matrix::Dy, Matrix::Db) => blas.gemm(cfg, dy, ones, db),
                (Matrix::Dy, Matrix::Part) => blas.gemm(cfg, dy, ones, part),
                (Matrix::Part, Matrix::Db) => blas.gemm(cfg, &*part, ones, db),
                (a, c) => unreachable!("the plan has no product of {a:?} into {c:?}"),
            }
        };
        result.map_err(call("bias gradient (cuBLAS SGEMM with a ones vector)"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::cuda::reference;

    /// cuBLAS's SGEMM as its documentation defines it (column-major,
    /// `C = alpha op(A) op(B) + beta C`, C not read when beta is 0; element `(i, j)` of a matrix with
    /// leading dimension `ld` at `i + j * ld`), in f64: the products the
    /// plan asks for, computed on the CPU.
    fn sgemm(cfg: &GemmConfig<f32>, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (m, n, k) = (cfg.m as usize, cfg.n as usize, cfg.k as usize);
        let (lda, ldb, ldc) = (cfg.lda as usize, cfg.ldb as usize, cfg.ldc as usize);
        let ta = cfg.transa == CUBLAS_OP_T;
        let tb = cfg.transb == CUBLAS_OP_T;
        assert!(lda >= if ta { k } else { m }.max(1) && ldb >= if tb { n } else { k }.max(1) && ldc >= m.max(1));
        for j in 0..n {
            for i in 0..m {
                let mut sum = 0.0f64;
                for l in 0..k {
                    let x = if ta { a[l + i * lda] } else { a[i + l * lda] };
                    let y = if tb { b[j + l * ldb] } else { b[l + j * ldb] };
                    sum += f64::from(x) * f64::from(y);
                }
                let at = i + j * ldc;
                // "When beta is zero, C does not have to be a valid input" (cuBLAS's
                // documentation): it is not read, so NaN there stays out.
                let before = if cfg.beta == 0.0 { 0.0 } else { f64::from(cfg.beta) * f64::from(c[at]) };
                c[at] = (f64::from(cfg.alpha) * sum + before) as f32;
            }
        }
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    /// The plan, run through cuBLAS's arithmetic on the CPU, gives the CPU
    /// model's bias gradient in the device's layout, for a linear layer and
    /// for LeNet's two convolutions; a wrong transpose or leading dimension
    /// reads another sample's or channel's values and is off by order 1.
    #[test]
    fn the_products_sum_each_channel_over_samples_and_positions() {
        for (n, channels, inner) in [(5, 10, 1), (3, 6, 28 * 28), (7, 16, 10 * 10), (1, 1, 1), (2, 3, 4)] {
            let dy = values(n * channels * inner, 7);
            let ones = vec![1.0f32; ones_len(n, inner)];
            let mut part = vec![f32::NAN; part_len(n, channels, inner)];
            let mut db = vec![f32::NAN; channels];
            let products = plan(n, channels, inner);
            assert_eq!(products.len(), if inner > 1 { 2 } else { 1 });
            for Product { cfg, a, c } in &products {
                let a = match a {
                    Matrix::Dy => dy.clone(),
                    Matrix::Part => part.clone(),
                    Matrix::Db => unreachable!("db is only written"),
                };
                let c = match c {
                    Matrix::Part => &mut part,
                    Matrix::Db => &mut db,
                    Matrix::Dy => unreachable!("dy is only read"),
                };
                sgemm(cfg, &a, &ones, c);
            }
            let exact = reference::bias_grad_exact(&dy, channels, inner);
            for (c, (&gpu, &cpu)) in db.iter().zip(&exact).enumerate() {
                // Only the per-sample sums are rounded (to f32) on the way.
                let close = (gpu - cpu).abs() <= 1e-6 * (1.0 + cpu.abs());
                assert!(close, "{n}x{channels}x{inner} channel {c}: {gpu} vs {cpu}");
            }
        }
    }

    /// A product's buffers are as large as the plan's dimensions need, and no larger than the engine allocates.
    #[test]
    fn the_plan_reads_and_writes_within_the_buffers_it_is_given() {
        for (n, channels, inner) in [(1024, 6, 784), (1024, 16, 100), (1024, 256, 1), (1, 10, 1)] {
            for Product { cfg, a, c } in plan(n, channels, inner) {
                let (m, k) = (cfg.m as usize, cfg.k as usize);
                let a_len = if cfg.transa == CUBLAS_OP_T { cfg.lda as usize * m } else { cfg.lda as usize * k };
                let a_has = match a {
                    Matrix::Dy => n * channels * inner,
                    Matrix::Part => part_len(n, channels, inner),
                    Matrix::Db => 0,
                };
                let c_has = match c {
                    Matrix::Part => part_len(n, channels, inner),
                    Matrix::Db => channels,
                    Matrix::Dy => 0,
                };
                assert!(a_len <= a_has, "{n}x{channels}x{inner}: {a:?} read up to {a_len} of {a_has}");
                assert!(k <= ones_len(n, inner) && cfg.n == 1, "{n}x{channels}x{inner}");
                assert!(m <= c_has && cfg.ldc as usize >= m, "{n}x{channels}x{inner}: {c:?} {m} of {c_has}");
            }
        }
    }
}
