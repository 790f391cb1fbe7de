//! The two fixed models on the device: their layer plan, built from the CPU
//! model (the same flat parameter layout: layers in order, weight then bias;
//! Linear weight `[out][in]`, Conv weight `[out_c][in_c][kh][kw]`), the
//! forward and backward passes, and the SGD update.
//!
//! Buffers are row-major, batch first, as on the host. cuBLAS is
//! column-major: a row-major `r x c` matrix is, to cuBLAS, the column-major
//! `c x r` matrix, its transpose, with leading dimension `c`. So a row-major
//! product `C = A B` is computed as the column-major `C^T = B^T A^T`: each
//! GEMM below names its row-major product and then the column-major call.
//!
//! Host synchronisation. A training step waits for nothing on the device:
//! the batch goes over from page-locked (pinned) host memory, two buffers
//! in turn, so the copy is queued like a kernel and the host goes on to
//! gather the next batch; each sample's loss and hit stay on the device in
//! [`Pending`] until [`Net::take_stats`] reads them back in one copy (the
//! engine does every [`READ_EVERY`] steps, and at the end of an epoch).
//! Evaluation still reads each call's sums at once.
//!
//! Step times ([`StepTimer`]): two timing events around each step's forward
//! and backward, read at the next read of the sums (the device is done with
//! them by then), give this rank's mean compute time over the window; it
//! rides in every step's all-reduce of the next window from a small device
//! buffer ([`Net::carry_times`], a device-to-device copy: no host wait), so
//! each read brings every rank's mean of the window before.

use std::ops::Range;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, PinnedHostSlice, sys};

use super::kernels::Kernels;
use super::{CudaError, bias_grad, call};
use crate::train::data::CLASSES;
use crate::train::engine::{Batch, Slots, StepStats};
use crate::train::model;
use crate::train::optim::Sgd;

#[derive(Debug, Clone, Copy)]
enum Op {
    Linear { inp: usize, out: usize },
    Conv { c: usize, h: usize, w: usize, oc: usize, k: usize, pad: usize, oh: usize, ow: usize },
    Pool { h: usize, w: usize },
}

#[derive(Debug, Clone)]
struct Layer {
    op: Op,
    /// ReLU applied in place to this layer's output.
    relu: bool,
    /// Where the weight and the bias are in the flat parameter vector.
    weight: Range<usize>,
    bias: Range<usize>,
    /// Floats per sample, in and out.
    in_len: usize,
    out_len: usize,
}

impl Layer {
    /// Floats per sample of its im2col matrix (0 unless a convolution).
    fn col_len(&self) -> usize {
        match self.op {
            Op::Conv { c, k, oh, ow, .. } => c * k * k * oh * ow,
            _ => 0,
        }
    }
}

/// The layer plan of the CPU `model`: its layers with its parameter ranges,
/// channel-first throughout. The CPU model's `Transpose` layers only move its
/// activations between channel-first and channel-last (see `model`), which
/// the device does not do, so they are dropped; a `Relu` becomes the in-place
/// flag of the layer before it.
fn plan(model: &model::Model) -> Vec<Layer> {
    let mut layers: Vec<Layer> = Vec::new();
    for (layer, &at) in model.layers().iter().zip(model.offsets()) {
        let op = match *layer {
            model::Layer::Linear { inputs, outputs } => Op::Linear { inp: inputs, out: outputs },
            model::Layer::Conv(s) => {
                Op::Conv { c: s.in_c, h: s.h, w: s.w, oc: s.out_c, k: s.k, pad: s.pad, oh: s.out_h(), ow: s.out_w() }
            }
            model::Layer::MaxPool { h, w, .. } => Op::Pool { h, w },
            model::Layer::Relu { len } => {
                let before = layers.last_mut().expect("the models apply a ReLU to a layer's output");
                debug_assert_eq!(before.out_len, len, "a ReLU over its layer's output");
                before.relu = true;
                continue;
            }
            model::Layer::Transpose { .. } => continue,
        };
        let (wl, bl) = layer.param_counts();
        layers.push(Layer {
            op,
            relu: false,
            weight: at..at + wl,
            bias: at + wl..at + wl + bl,
            in_len: layer.in_len(),
            out_len: layer.out_len(),
        });
    }
    layers
}

/// A column-major GEMM `C = op(A) op(B) + beta C` (`m x n`, inner `k`).
#[allow(clippy::too_many_arguments)]
fn gemm_cfg(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    beta: f32,
    ldc: usize,
) -> GemmConfig<f32> {
    let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
    GemmConfig {
        transa: op(ta),
        transb: op(tb),
        m: m as i32,
        n: n as i32,
        k: k as i32,
        alpha: 1.0,
        lda: lda as i32,
        ldb: ldb as i32,
        beta,
        ldc: ldc as i32,
    }
}

/// Training steps between two reads of the device's per-sample losses
/// and hits (and of the leaving flag): the host waits for the device once
/// per this many steps instead of once per step. Every rank of a group
/// reads after the same steps (their step counters agree), so a leave is
/// seen by all of them at once, at most this many steps after it was raised
/// (milliseconds on a GPU, against a notice of minutes).
pub(super) const READ_EVERY: u64 = 16;

/// Whether the sums are read after the step that brings the step count to
/// `steps`: after every [`READ_EVERY`]th step of training.
pub(super) fn read_due(steps: u64) -> bool {
    steps.is_multiple_of(READ_EVERY)
}

/// Where the next step's `n` per-sample values go in a window of `len`
/// entries of which `used` hold values not yet read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// At `used`.
    Fits,
    /// The window is full: read what it holds first, then at 0.
    Read,
    /// Read what it holds, then replace it by one of `len` entries
    /// ([`READ_EVERY`] batches of `n`): the batch outgrew the window.
    Grow { len: usize },
}

fn room(used: usize, n: usize, len: usize) -> Room {
    if used + n <= len {
        Room::Fits
    } else if n <= len {
        Room::Read
    } else {
        Room::Grow { len: n * READ_EVERY as usize }
    }
}

/// The sums over per-sample losses and hits read back from the device
/// (the arithmetic of the CPU's `softmax_cross_entropy`: losses added in
/// `f64`, a hit being any non-zero).
fn sum_stats(loss: &[f32], correct: &[i32]) -> StepStats {
    StepStats {
        loss_sum: loss.iter().map(|&l| f64::from(l)).sum(),
        correct: correct.iter().filter(|&&c| c != 0).count() as u64,
        samples: loss.len() as u64,
    }
}

/// The per-sample losses and hits of the training steps since the last
/// read, on the device, back to back.
struct Pending {
    loss: CudaSlice<f32>,
    correct: CudaSlice<i32>,
    /// Entries written since the last read.
    used: usize,
    /// Sums read early (the window was full or outgrown), added to the next read.
    held: StepStats,
}

impl Pending {
    fn new(stream: &Arc<CudaStream>, len: usize) -> Result<Self, CudaError> {
        let alloc = call("allocating device memory");
        Ok(Self {
            loss: stream.alloc_zeros::<f32>(len.max(1)).map_err(alloc)?,
            correct: stream.alloc_zeros::<i32>(len.max(1)).map_err(call("allocating device memory"))?,
            used: 0,
            held: StepStats::default(),
        })
    }

    /// Reads the window back (one synchronising copy each for the losses
    /// and the hits) and empties it; returns everything not yet returned.
    fn take(&mut self, stream: &Arc<CudaStream>) -> Result<StepStats, CudaError> {
        let mut stats = std::mem::take(&mut self.held);
        if self.used > 0 {
            let used = self.used;
            self.used = 0;
            let loss = stream.clone_dtoh(&self.loss.slice(0..used)).map_err(call("copying the losses to the host"))?;
            let correct =
                stream.clone_dtoh(&self.correct.slice(0..used)).map_err(call("copying the hits to the host"))?;
            stats += sum_stats(&loss, &correct);
        }
        Ok(stats)
    }

    /// Makes room for a step of `n` samples; returns where its values go.
    fn reserve(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<usize, CudaError> {
        match room(self.used, n, self.loss.len()) {
            Room::Fits => {}
            Room::Read => self.held = self.take(stream)?,
            Room::Grow { len } => {
                let held = self.take(stream)?;
                *self = Self::new(stream, len)?;
                self.held = held;
            }
        }
        let at = self.used;
        self.used += n;
        Ok(at)
    }
}

/// One of the two page-locked host buffers a batch is staged in, and the
/// event recorded after its copy to the device was queued: the host writes
/// the buffer again only once that copy is done.
struct Staged {
    images: PinnedHostSlice<f32>,
    labels: PinnedHostSlice<u8>,
    copied: CudaEvent,
}

impl Staged {
    fn new(stream: &Arc<CudaStream>, images: usize, labels: usize) -> Result<Self, CudaError> {
        let ctx = stream.context();
        let pin = call("allocating page-locked host memory (cuMemHostAlloc)");
        // SAFETY: the memory is uninitialised until written; both buffers are
        // zeroed here, before anything reads them.
        let (mut images, mut labels) = unsafe {
            let images = ctx.alloc_pinned::<f32>(images.max(1)).map_err(pin)?;
            let labels = ctx.alloc_pinned::<u8>(labels.max(1)).map_err(call("allocating page-locked host memory"))?;
            (images, labels)
        };
        let zero = call("zeroing page-locked host memory");
        // SAFETY: each pointer is the start of its own allocation of `len()` elements.
        unsafe {
            std::ptr::write_bytes(images.as_mut_ptr().map_err(zero)?, 0, images.len());
            std::ptr::write_bytes(
                labels.as_mut_ptr().map_err(call("zeroing page-locked host memory"))?,
                0,
                labels.len(),
            );
        }
        let copied = ctx.new_event(None).map_err(call("creating a CUDA event"))?;
        Ok(Self { images, labels, copied })
    }
}

impl Drop for Staged {
    /// Page-locked memory is freed only after the copy that reads it is done.
    fn drop(&mut self) {
        let _ = self.copied.synchronize();
    }
}

/// Timing events around the forward and backward passes of the steps
/// between two reads of the sums, [`READ_EVERY`] pairs made once.
pub(super) struct StepTimer {
    /// Start and end events per step of the window, and whether the step
    /// had samples (a rank without any computed nothing to compare).
    events: Vec<(CudaEvent, CudaEvent, bool)>,
    /// Steps of this window recorded so far.
    used: usize,
}

impl StepTimer {
    fn new(stream: &Arc<CudaStream>) -> Result<Self, CudaError> {
        let ctx = stream.context();
        let event = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(call("creating a CUDA event"));
        let events = (0..READ_EVERY).map(|_| Ok((event()?, event()?, false))).collect::<Result<_, CudaError>>()?;
        Ok(Self { events, used: 0 })
    }

    /// The mean compute seconds per step of the window's steps with samples
    /// (waits for their end events: called after a read, when they are
    /// done); `None` when none had samples. Starts a new window.
    fn take_mean(&mut self) -> Result<Option<f32>, CudaError> {
        let mut ms = Vec::with_capacity(self.used);
        for (start, end, samples) in &self.events[..self.used] {
            ms.push(if *samples {
                Some(start.elapsed_ms(end).map_err(call("reading a step's timing events"))?)
            } else {
                None
            });
        }
        self.used = 0;
        Ok(window_mean(&ms))
    }
}

/// The mean of a window's step times (milliseconds; `None`: a step without
/// samples, left out), in seconds; `None` when no step had samples.
pub(super) fn window_mean(ms: &[Option<f32>]) -> Option<f32> {
    let timed: Vec<f32> = ms.iter().flatten().copied().filter(|m| m.is_finite() && *m >= 0.0).collect();
    (!timed.is_empty()).then(|| timed.iter().sum::<f32>() / timed.len() as f32 / 1000.0)
}

/// Per-batch device buffers, sized for `capacity` samples.
struct Buffers {
    capacity: usize,
    /// `acts[i]`: input of layer `i`; the last is the logits.
    acts: Vec<CudaSlice<f32>>,
    /// Gradients of the loss sum with respect to `acts`.
    dacts: Vec<CudaSlice<f32>>,
    /// Max-pool arg-max indices, per layer (empty for other layers).
    argmax: Vec<CudaSlice<i32>>,
    col: CudaSlice<f32>,
    dcol: CudaSlice<f32>,
    /// Per-sample convolution weight gradients, summed by one GEMM with `ones`.
    wpart: CudaSlice<f32>,
    /// Per-sample sums of a convolution's output gradient over its positions
    /// (the first half of its bias gradient, `bias_grad`).
    bias_part: CudaSlice<f32>,
    /// Ones: `capacity`, or a convolution's positions if more.
    ones: CudaSlice<f32>,
    labels: CudaSlice<u8>,
    loss: CudaSlice<f32>,
    correct: CudaSlice<i32>,
    /// The batch's two host staging buffers, used in turn.
    staged: [Staged; 2],
    /// Which of `staged` the next batch goes in.
    turn: usize,
}

impl Buffers {
    fn new(stream: &Arc<CudaStream>, layers: &[Layer], capacity: usize) -> Result<Self, CudaError> {
        let zeros = |n: usize| stream.alloc_zeros::<f32>(n.max(1)).map_err(call("allocating device memory"));
        let mut acts = vec![zeros(capacity * layers[0].in_len)?];
        let mut dacts = vec![zeros(capacity * layers[0].in_len)?];
        let mut argmax = Vec::new();
        for layer in layers {
            acts.push(zeros(capacity * layer.out_len)?);
            dacts.push(zeros(capacity * layer.out_len)?);
            let pooled = if matches!(layer.op, Op::Pool { .. }) { capacity * layer.out_len } else { 0 };
            argmax.push(stream.alloc_zeros::<i32>(pooled.max(1)).map_err(call("allocating device memory"))?);
        }
        let col_len = layers.iter().map(Layer::col_len).max().unwrap_or(0) * capacity;
        let weights = |l: &Layer| if matches!(l.op, Op::Conv { .. }) { l.weight.len() } else { 0 };
        let wpart_len = layers.iter().map(weights).max().unwrap_or(0) * capacity;
        // The bias gradients' scratch and ones (bias_grad.rs), for every layer with a bias.
        let bias_shapes: Vec<(usize, usize)> = layers
            .iter()
            .filter_map(|l| match l.op {
                Op::Linear { out, .. } => Some((out, 1)),
                Op::Conv { oc, oh, ow, .. } => Some((oc, oh * ow)),
                Op::Pool { .. } => None,
            })
            .collect();
        let bias_part_len = bias_shapes.iter().map(|&(c, p)| bias_grad::part_len(capacity, c, p)).max().unwrap_or(0);
        let ones_len = bias_shapes.iter().map(|&(_, p)| bias_grad::ones_len(capacity, p)).max().unwrap_or(capacity);
        let ones = stream.clone_htod(&vec![1.0f32; ones_len.max(1)]).map_err(call("copying to the device"))?;
        let in_len = capacity * layers[0].in_len;
        let staged = [Staged::new(stream, in_len, capacity)?, Staged::new(stream, in_len, capacity)?];
        Ok(Self {
            capacity,
            acts,
            dacts,
            argmax,
            col: zeros(col_len)?,
            dcol: zeros(col_len)?,
            wpart: zeros(wpart_len)?,
            bias_part: zeros(bias_part_len)?,
            ones,
            labels: stream.alloc_zeros::<u8>(capacity.max(1)).map_err(call("allocating device memory"))?,
            loss: zeros(capacity)?,
            correct: stream.alloc_zeros::<i32>(capacity.max(1)).map_err(call("allocating device memory"))?,
            staged,
            turn: 0,
        })
    }
}

/// A model's parameters, optimiser state and work buffers on one device.
pub(super) struct Net {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    layers: Vec<Layer>,
    sgd: Sgd,
    params: CudaSlice<f32>,
    grads: CudaSlice<f32>,
    momentum: CudaSlice<f32>,
    buffers: Buffers,
    pending: Pending,
    /// This rank's place in its group's slots after the gradients.
    slots: Slots,
    /// This rank's part of the slots as every step of this window carries
    /// it: zero, and its mean time of the window before in its own slot.
    mine: CudaSlice<f32>,
    timer: StepTimer,
}

impl Net {
    pub(super) fn new(stream: Arc<CudaStream>, model: &model::Model, sgd: Sgd) -> Result<Self, CudaError> {
        let layers = plan(model);
        let count = model.num_params();
        let kernels = Kernels::load(&stream)?;
        let blas = CudaBlas::new(stream.clone()).map_err(call("creating the cuBLAS handle"))?;
        let zeros = || stream.alloc_zeros::<f32>(count).map_err(call("allocating device memory"));
        let (params, momentum) = (zeros()?, zeros()?);
        // After the gradients, all-reduced with them: the leaving flag and
        // each rank's time (a group of one until `set_slots`).
        let slots = Slots { rank: 0, world: 1 };
        let grads = stream.alloc_zeros::<f32>(count + slots.count()).map_err(call("allocating device memory"))?;
        let mine = stream.alloc_zeros::<f32>(slots.count()).map_err(call("allocating device memory"))?;
        let buffers = Buffers::new(&stream, &layers, 1)?;
        let pending = Pending::new(&stream, READ_EVERY as usize)?;
        let timer = StepTimer::new(&stream)?;
        Ok(Self { stream, blas, kernels, layers, sgd, params, grads, momentum, buffers, pending, slots, mine, timer })
    }

    /// A new group: the slots after the gradients are its (the gradient
    /// buffer is made again, zero), and no time is carried until the first
    /// window in it is read.
    pub(super) fn set_slots(&mut self, slots: Slots) -> Result<(), CudaError> {
        let count = self.params.len();
        self.grads = self.stream.alloc_zeros::<f32>(count + slots.count()).map_err(call("allocating device memory"))?;
        self.mine = self.stream.alloc_zeros::<f32>(slots.count()).map_err(call("allocating device memory"))?;
        self.slots = slots;
        self.timer.used = 0;
        Ok(())
    }

    /// Forgets the window's times and carries none (a new state: its steps
    /// are another epoch's, or a redo's).
    pub(super) fn reset_times(&mut self) -> Result<(), CudaError> {
        self.timer.used = 0;
        self.stream.memset_zeros(&mut self.mine).map_err(call("clearing the step times"))
    }

    /// Records the start of a step's own work (before the batch's copy).
    pub(super) fn begin_step(&mut self) -> Result<(), CudaError> {
        let at = self.timer.used.min(self.timer.events.len() - 1);
        self.timer.events[at].0.record(&self.stream).map_err(call("recording a timing event"))
    }

    /// Records the end of a step's own work (after the backward pass,
    /// before the all-reduce); `samples`: the step had any.
    pub(super) fn end_step(&mut self, samples: bool) -> Result<(), CudaError> {
        let at = self.timer.used.min(self.timer.events.len() - 1);
        let pair = &mut self.timer.events[at];
        pair.1.record(&self.stream).map_err(call("recording a timing event"))?;
        pair.2 = samples;
        self.timer.used = (at + 1).min(self.timer.events.len());
        Ok(())
    }

    /// Puts this rank's part of the slots after the gradients (after
    /// [`Net::forward_backward`], which may zero the whole buffer, and
    /// before [`Net::set_leaving_flag`]): a copy on the device, queued.
    pub(super) fn carry_times(&mut self) -> Result<(), CudaError> {
        let n = self.params.len();
        let mut dst = self.grads.slice_mut(n..n + self.slots.count());
        self.stream.memcpy_dtod(&self.mine, &mut dst).map_err(call("copying the step times"))
    }

    /// After a read (the host has waited for the device): this window's
    /// mean time goes into this rank's slot for the next window's steps.
    pub(super) fn publish_window_time(&mut self) -> Result<(), CudaError> {
        let mean = self.timer.take_mean()?;
        let mut part = vec![0f32; self.slots.count()];
        self.slots.write(&mut part, false, mean);
        self.stream.memcpy_htod(&part[..], &mut self.mine).map_err(call("copying the step times to the device"))
    }

    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(super) fn grads_mut(&mut self) -> &mut CudaSlice<f32> {
        &mut self.grads
    }

    /// Writes this rank's leaving flag into the slot after the gradients
    /// (after [`Net::forward_backward`], which may zero the whole buffer):
    /// zero is set on the device (queued, no copy); a raised flag, rare, is
    /// copied.
    pub(super) fn set_leaving_flag(&mut self, flag: f32) -> Result<(), CudaError> {
        let n = self.params.len();
        let mut slot = self.grads.slice_mut(n..n + 1);
        if flag == 0.0 {
            self.stream.memset_zeros(&mut slot).map_err(call("clearing the leaving flag"))
        } else {
            self.stream.memcpy_htod(&[flag][..], &mut slot).map_err(call("copying the leaving flag to the device"))
        }
    }

    /// The slots after the gradients after the all-reduce (the group's
    /// sums: the leaving count and every rank's time, [`Slots::read`]).
    pub(super) fn read_slots(&self) -> Result<Vec<f32>, CudaError> {
        let n = self.params.len();
        self.stream
            .clone_dtoh(&self.grads.slice(n..n + self.slots.count()))
            .map_err(call("copying the leaving flag and the step times to the host"))
    }

    pub(super) fn download(&self) -> Result<(Vec<f32>, Vec<f32>), CudaError> {
        let get = |s: &CudaSlice<f32>| self.stream.clone_dtoh(s).map_err(call("copying the state to the host"));
        Ok((get(&self.params)?, get(&self.momentum)?))
    }

    pub(super) fn upload(&mut self, params: &[f32], momentum: &[f32]) -> Result<(), CudaError> {
        let want = self.params.len();
        if params.len() != want || momentum.len() != want {
            return Err(CudaError::Shape(format!(
                "the state has {} parameters and {} momentum values; this model has {want}",
                params.len(),
                momentum.len()
            )));
        }
        for (host, device) in [(params, &mut self.params), (momentum, &mut self.momentum)] {
            self.stream.memcpy_htod(host, device).map_err(call("copying the state to the device"))?;
        }
        Ok(())
    }

    /// Forward and backward on `batch`; `grads` then holds this rank's
    /// gradient sum over its samples (zero for an empty batch). The batch's
    /// losses and hits stay on the device: [`Net::take_stats`] reads them.
    /// Nothing here waits for the device.
    pub(super) fn forward_backward(&mut self, batch: &Batch<'_>) -> Result<(), CudaError> {
        let n = self.load(batch)?;
        if n == 0 {
            self.stream.memset_zeros(&mut self.grads).map_err(call("zeroing the gradients"))?;
            return Ok(());
        }
        self.forward(n)?;
        let at = self.pending.reserve(&self.stream, n)?;
        let b = &mut self.buffers;
        let last = b.acts.len() - 1;
        let (z, dz) = (&b.acts[last], &mut b.dacts[last]);
        let (mut loss, mut correct) =
            (self.pending.loss.slice_mut(at..at + n), self.pending.correct.slice_mut(at..at + n));
        self.kernels.softmax_xent(z, &b.labels, &mut loss, &mut correct, dz, true, n, CLASSES)?;
        self.backward(n)
    }

    /// The loss and accuracy sums of the training steps since the last
    /// call (waits for them).
    pub(super) fn take_stats(&mut self) -> Result<StepStats, CudaError> {
        self.pending.take(&self.stream)
    }

    /// Forgets the sums of the training steps not yet read (their epoch is
    /// being redone, from a state set again).
    pub(super) fn discard_stats(&mut self) {
        self.pending.used = 0;
        self.pending.held = StepStats::default();
    }

    pub(super) fn evaluate(&mut self, batch: &Batch<'_>) -> Result<StepStats, CudaError> {
        let n = self.load(batch)?;
        if n == 0 {
            return Ok(StepStats::default());
        }
        self.forward(n)?;
        let b = &mut self.buffers;
        let last = b.acts.len() - 1;
        let (z, dz) = (&b.acts[last], &mut b.dacts[last]);
        let (mut loss, mut correct) = (b.loss.slice_mut(0..n), b.correct.slice_mut(0..n));
        self.kernels.softmax_xent(z, &b.labels, &mut loss, &mut correct, dz, false, n, CLASSES)?;
        let loss = self.stream.clone_dtoh(&b.loss.slice(0..n)).map_err(call("copying the losses to the host"))?;
        let correct = self.stream.clone_dtoh(&b.correct.slice(0..n)).map_err(call("copying the hits to the host"))?;
        Ok(sum_stats(&loss, &correct))
    }

    /// The SGD update with the summed gradients scaled by `scale` (1 / global batch).
    pub(super) fn update(&mut self, lr: f32, scale: f32) -> Result<(), CudaError> {
        self.kernels.sgd(&mut self.params, &mut self.momentum, &self.grads, lr, self.sgd, scale)
    }

    /// Copies the batch to the device; returns its sample count.
    fn load(&mut self, batch: &Batch<'_>) -> Result<usize, CudaError> {
        let n = batch.labels.len();
        let in_len = self.layers[0].in_len;
        if batch.images.len() != n * in_len {
            return Err(CudaError::Shape(format!(
                "a batch of {n} labels has {} floats of images, expected {n} x {in_len}",
                batch.images.len()
            )));
        }
        if n > self.buffers.capacity {
            // The old staging buffers wait for their copies as they are dropped.
            self.buffers = Buffers::new(&self.stream, &self.layers, n)?;
        }
        if n > 0 {
            let b = &mut self.buffers;
            let staged = &mut b.staged[b.turn];
            b.turn = 1 - b.turn;
            // This buffer's previous copy (two batches ago) must be done before it is written.
            staged.copied.synchronize().map_err(call("waiting for a batch copy"))?;
            let host = call("writing page-locked host memory");
            staged.images.as_mut_slice().map_err(host)?[..n * in_len].copy_from_slice(batch.images);
            let host = call("writing page-locked host memory");
            staged.labels.as_mut_slice().map_err(host)?[..n].copy_from_slice(batch.labels);
            // The whole staging buffer goes over (cudarc copies a pinned
            // buffer whole); what lies past the batch is never read.
            let copy = call("copying the batch to the device");
            self.stream.memcpy_htod(&staged.images, &mut b.acts[0]).map_err(copy)?;
            let copy = call("copying the labels to the device");
            self.stream.memcpy_htod(&staged.labels, &mut b.labels).map_err(copy)?;
            staged.copied.record(&self.stream).map_err(call("recording a CUDA event"))?;
        }
        Ok(n)
    }

    fn forward(&mut self, n: usize) -> Result<(), CudaError> {
        let Self { blas, kernels: k, layers, params, buffers: b, .. } = self;
        for (i, layer) in layers.iter().enumerate() {
            let (before, after) = b.acts.split_at_mut(i + 1);
            let (x, y) = (&before[i], &mut after[0]);
            let (weight, bias) = (params.slice(layer.weight.clone()), params.slice(layer.bias.clone()));
            match layer.op {
                Op::Linear { inp, out } => {
                    // Row-major Y (n x out) = X (n x inp) W^T, W row-major (out x inp).
                    // Column-major: Y^T (out x n) = W (out x inp) X^T (inp x n); W's buffer is
                    // column-major W^T (ld inp), so transpose it; X's buffer is X^T (ld inp).
                    let cfg = gemm_cfg(true, false, out, n, inp, inp, inp, 0.0, out);
                    // SAFETY: dimensions and leading dimensions above describe buffers of at
                    // least out*inp (weight), n*inp (x) and n*out (y) floats.
                    unsafe { blas.gemm(cfg, &weight, x, y) }.map_err(call("linear forward (cuBLAS SGEMM)"))?;
                    k.bias_add(y, &bias, n * out, out, 1)?;
                }
                Op::Conv { c, h, w, oc, k: ks, pad, oh, ow } => {
                    let (rows, p) = (c * ks * ks, oh * ow);
                    k.im2col(x, &mut b.col, n, [c, h, w, ks, pad, oh, ow])?;
                    // Per sample, row-major Y (oc x p) = W (oc x rows) COL (rows x p).
                    // Column-major: Y^T (p x oc) = COL^T (p x rows) W^T (rows x oc): both buffers
                    // already hold those transposes (ld p and rows). Batched over samples, W shared.
                    let cfg = StridedBatchedConfig {
                        gemm: gemm_cfg(false, false, p, oc, rows, p, rows, 0.0, p),
                        batch_size: n as i32,
                        stride_a: (rows * p) as i64,
                        stride_b: 0,
                        stride_c: (oc * p) as i64,
                    };
                    // SAFETY: col holds n*rows*p floats, weight oc*rows, y n*oc*p, as the strides say.
                    unsafe { blas.gemm_strided_batched(cfg, &b.col, &weight, y) }
                        .map_err(call("convolution forward (cuBLAS batched SGEMM)"))?;
                    k.bias_add(y, &bias, n * oc * p, oc, p)?;
                }
                Op::Pool { h, w } => k.maxpool_forward(x, y, &mut b.argmax[i], n * layer.out_len, h, w)?,
            }
            if layer.relu {
                k.relu_forward(y, n * layer.out_len)?;
            }
        }
        Ok(())
    }

    fn backward(&mut self, n: usize) -> Result<(), CudaError> {
        let Self { blas, kernels: k, layers, params, grads, buffers: b, .. } = self;
        for (i, layer) in layers.iter().enumerate().rev() {
            let (dbefore, dafter) = b.dacts.split_at_mut(i + 1);
            let (dx, dy) = (&mut dbefore[i], &mut dafter[0]);
            let (x, y) = (&b.acts[i], &b.acts[i + 1]);
            let first = i == 0;
            if layer.relu {
                k.relu_backward(dy, y, n * layer.out_len)?;
            }
            let weight = params.slice(layer.weight.clone());
            let mut g = grads.slice_mut(layer.weight.start..layer.bias.end);
            let (mut gw, mut gb) = g.split_at_mut(layer.weight.len());
            match layer.op {
                Op::Linear { inp, out } => {
                    // Row-major dW (out x inp) = dY^T (out x n) X (n x inp).
                    // Column-major: dW^T (inp x out) = X^T (inp x n) dY (n x out); X's buffer is
                    // X^T (ld inp), dY's is dY^T (ld out), so transpose the second.
                    let cfg = gemm_cfg(false, true, inp, out, n, inp, out, 0.0, inp);
                    // SAFETY: x has n*inp floats, dy n*out, the weight gradient out*inp.
                    unsafe { blas.gemm(cfg, x, &*dy, &mut gw) }.map_err(call("linear weight gradient (SGEMM)"))?;
                    bias_grad::run(blas, (&b.ones, &mut b.bias_part), dy, &mut gb, (n, out, 1))?;
                    if !first {
                        // Row-major dX (n x inp) = dY (n x out) W (out x inp).
                        // Column-major: dX^T (inp x n) = W^T (inp x out) dY^T (out x n): the
                        // buffers hold exactly those (ld inp and out).
                        let cfg = gemm_cfg(false, false, inp, n, out, inp, out, 0.0, inp);
                        // SAFETY: weight out*inp, dy n*out, dx n*inp floats.
                        unsafe { blas.gemm(cfg, &weight, &*dy, dx) }.map_err(call("linear input gradient (SGEMM)"))?;
                    }
                }
                Op::Conv { c, h, w, oc, k: ks, pad, oh, ow } => {
                    let (rows, p) = (c * ks * ks, oh * ow);
                    // The scratch im2col matrix was overwritten by later convolutions: rebuild it.
                    k.im2col(x, &mut b.col, n, [c, h, w, ks, pad, oh, ow])?;
                    // Per sample, row-major dW_s (oc x rows) = dY_s (oc x p) COL_s^T (p x rows),
                    // all samples in one batched call into `wpart` (n of them, oc*rows apart).
                    // Column-major: dW_s^T (rows x oc) = COL_s (rows x p) dY_s^T (p x oc); COL_s's
                    // buffer is COL_s^T (ld p), so transpose it; dY_s's is dY_s^T (ld p).
                    let cfg = StridedBatchedConfig {
                        gemm: gemm_cfg(true, false, rows, oc, p, p, p, 0.0, rows),
                        batch_size: n as i32,
                        stride_a: (rows * p) as i64,
                        stride_b: (oc * p) as i64,
                        stride_c: (oc * rows) as i64,
                    };
                    // SAFETY: col holds n*rows*p floats, dy n*oc*p, wpart n*oc*rows, as the strides say.
                    unsafe { blas.gemm_strided_batched(cfg, &b.col, &*dy, &mut b.wpart) }
                        .map_err(call("convolution weight gradient (cuBLAS batched SGEMM)"))?;
                    // Then dW = the sum of the n parts, one GEMM with the ones vector: column-major
                    // dW (oc*rows x 1) = WPART (oc*rows x n, ld oc*rows) ONES (n x 1). No launch
                    // per sample, whatever the batch.
                    let cfg = gemm_cfg(false, false, oc * rows, 1, n, oc * rows, n, 0.0, oc * rows);
                    // SAFETY: wpart holds n*oc*rows floats, ones at least n, the weight gradient oc*rows.
                    unsafe { blas.gemm(cfg, &b.wpart, &b.ones, &mut gw) }
                        .map_err(call("convolution weight gradient sum (cuBLAS SGEMM)"))?;
                    bias_grad::run(blas, (&b.ones, &mut b.bias_part), dy, &mut gb, (n, oc, p))?;
                    if !first {
                        // Per sample, row-major dCOL (rows x p) = W^T (rows x oc) dY (oc x p).
                        // Column-major: dCOL^T (p x rows) = dY^T (p x oc) W (oc x rows); dY's buffer is
                        // dY^T (ld p); W's is W^T (ld rows), so transpose it.
                        let cfg = StridedBatchedConfig {
                            gemm: gemm_cfg(false, true, p, rows, oc, p, rows, 0.0, p),
                            batch_size: n as i32,
                            stride_a: (oc * p) as i64,
                            stride_b: 0,
                            stride_c: (rows * p) as i64,
                        };
                        // SAFETY: dy has n*oc*p floats, weight oc*rows, dcol n*rows*p.
                        unsafe { blas.gemm_strided_batched(cfg, &*dy, &weight, &mut b.dcol) }
                            .map_err(call("convolution input gradient (cuBLAS batched SGEMM)"))?;
                        k.col2im(&b.dcol, dx, n, [c, h, w, ks, pad, oh, ow])?;
                    }
                }
                Op::Pool { .. } => k.maxpool_backward(dy, &b.argmax[i], dx, n * layer.out_len)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::model::Arch;

    /// A window's mean step time leaves out the steps without samples and
    /// anything that is not a time; a window of none has no time.
    #[test]
    fn a_windows_mean_time_is_over_the_steps_with_samples() {
        assert_eq!(window_mean(&[Some(10.0), None, Some(30.0)]), Some(0.02));
        assert_eq!(window_mean(&[Some(f32::NAN), Some(-1.0), Some(4.0)]), Some(0.004));
        assert_eq!(window_mean(&[None, None]), None);
        assert_eq!(window_mean(&[]), None);
    }

    /// The host's side of reading the sums every `READ_EVERY` steps.
    #[test]
    fn sums_are_read_every_few_steps_into_a_window_that_grows_with_the_batch() {
        let reads: Vec<u64> = (1..=3 * READ_EVERY).filter(|&s| read_due(s)).collect();
        assert_eq!(reads, [READ_EVERY, 2 * READ_EVERY, 3 * READ_EVERY]);
        // A window for 16 batches of 64 takes 16 batches, then needs a read.
        let len = 64 * READ_EVERY as usize;
        let mut used = 0;
        for _ in 0..READ_EVERY {
            assert_eq!(room(used, 64, len), Room::Fits);
            used += 64;
        }
        assert_eq!(room(used, 64, len), Room::Read);
        // An epoch's smaller last batch fits where a whole one would not.
        assert_eq!(room(len - 10, 10, len), Room::Fits);
        // A larger batch (a re-shard to fewer ranks) is read before it: the window
        // is read first when it would overflow, and grows when one batch outgrows it.
        assert_eq!(room(64, 1000, len), Room::Read);
        assert_eq!(room(0, 2000, len), Room::Grow { len: 2000 * READ_EVERY as usize });
        assert_eq!(room(0, 0, 0), Room::Fits);
    }

    /// Sums as the CPU's softmax_cross_entropy makes them: f64 losses, any non-zero a hit.
    #[test]
    fn read_back_values_sum_like_the_cpu() {
        let stats = sum_stats(&[0.5, 1.25, 1e-8], &[1, 0, 7]);
        assert_eq!(stats, StepStats { loss_sum: 0.5 + 1.25 + f64::from(1e-8f32), correct: 2, samples: 3 });
        assert_eq!(sum_stats(&[], &[]), StepStats::default());
    }

    /// The flat layout's size and order, as the shared design fixes them, and
    /// the plan's weight and bias ranges are the CPU model's parameter layout
    /// (no GPU needed).
    #[test]
    fn plans_match_the_fixed_models() {
        let plan_for = |arch, shape| plan(&model::Model::new(arch, shape));
        let count = |arch, shape| plan_for(arch, shape).last().unwrap().bias.end;
        assert_eq!(count(Arch::Mlp, (1, 28, 28)), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
        assert_eq!(count(Arch::Lenet, (1, 28, 28)), 156 + 2416 + (400 * 120 + 120) + (120 * 84 + 84) + 850);
        assert_eq!(count(Arch::Lenet, (3, 32, 32)), 456 + 2416 + (576 * 120 + 120) + (120 * 84 + 84) + 850);
        let lenet = plan_for(Arch::Lenet, (1, 28, 28));
        // Weight then bias, layers back to back.
        assert_eq!((lenet[0].weight.clone(), lenet[0].bias.clone()), (0..150, 150..156));
        assert_eq!(lenet[2].weight.start, 156);
        assert_eq!(lenet[4].in_len, 400);

        for shape in [(1, 28, 28), (3, 32, 32)] {
            for arch in [Arch::Mlp, Arch::Lenet] {
                let cpu = model::Model::new(arch, shape);
                let layers = plan(&cpu);
                let mut at = 0;
                for layer in &layers {
                    // Linear weight [out][in], Conv weight [out_c][in_c][kh][kw], bias [out].
                    let (w, b) = match layer.op {
                        Op::Linear { inp, out } => (out * inp, out),
                        Op::Conv { c, oc, k, .. } => (oc * c * k * k, oc),
                        Op::Pool { .. } => (0, 0),
                    };
                    assert_eq!((layer.weight.clone(), layer.bias.clone()), (at..at + w, at + w..at + w + b));
                    at += w + b;
                }
                assert_eq!(at, cpu.num_params(), "{arch:?} on {shape:?}");
                // Each layer with parameters starts where the CPU model's does.
                let cpu_starts: Vec<usize> = cpu
                    .layers()
                    .iter()
                    .zip(cpu.offsets())
                    .filter(|(l, _)| l.param_counts() != (0, 0))
                    .map(|(_, &at)| at)
                    .collect();
                let starts: Vec<usize> =
                    layers.iter().filter(|l| !l.weight.is_empty()).map(|l| l.weight.start).collect();
                assert_eq!(starts, cpu_starts, "{arch:?} on {shape:?}");
                assert_eq!(layers[0].in_len, cpu.input_len());
                assert_eq!(layers.last().unwrap().out_len, CLASSES);
            }
        }
    }
}
