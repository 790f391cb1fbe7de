//! The two models of `trainer train` (an MLP and LeNet-5) as layer lists:
//! their layers' shapes, their parameter layout and deterministic
//! initialisation. The passes over them belong to the engines: on the CPU
//! [`cpu::net`](super::cpu::net) (its kernels in
//! [`cpu::kernels`](super::cpu::kernels)), on a GPU `cuda::net`; this room
//! computes nothing but the layout and the initial parameters.
//!
//! Inputs: the model's choice and the input's `(channels, height, width)`;
//! nothing outside memory is touched. The layout is the shared design's:
//! - one flat `f32` vector; layers in order, each layer's weight then bias;
//! - Linear weight `[out][in]`, Conv weight `[out_c][in_c][kh][kw]`, bias `[out]`;
//! - LeNet flattens in `(c, y, x)` order (the CPU keeps activations
//!   channel-last between convolutions and changes layout only at the
//!   model's edges, with [`Layer::Transpose`]).

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::data::CLASSES;

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
    /// Floats of one output position's input patch (`in_c * k * k`).
    pub(crate) fn patch(&self) -> usize {
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
    /// drawn from ChaCha8 in layout order, 24-bit mantissas. Every engine
    /// (CPU or GPU) starts from these, made on the host.
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
