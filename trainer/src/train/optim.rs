//! SGD with momentum and weight decay, PyTorch's convention:
//! `g' = g + weight_decay * w; v = momentum * v + g'; w = w - lr * v`,
//! applied to every parameter (biases included).
//!
//! Inputs: the flat parameter, momentum and summed-gradient vectors of one
//! model (same layout); nothing outside memory is touched.

/// The optimiser's hyper-parameters (the learning rate is per step, so a
/// schedule can change it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    /// Momentum factor (0 for plain SGD).
    pub momentum: f32,
    /// L2 penalty added to the gradient.
    pub weight_decay: f32,
}

impl Sgd {
    /// One update with the gradient `grad_sum * scale` (the engine passes
    /// the all-reduced gradient sum and `1 / global batch`).
    pub fn update(&self, lr: f32, params: &mut [f32], velocity: &mut [f32], grad_sum: &[f32], scale: f32) {
        assert!(params.len() == velocity.len() && params.len() == grad_sum.len(), "layouts differ");
        for ((w, v), &g) in params.iter_mut().zip(velocity.iter_mut()).zip(grad_sum) {
            let g = g * scale + self.weight_decay * *w;
            *v = self.momentum * *v + g;
            *w -= lr * *v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_pytorch_by_hand() {
        let sgd = Sgd { momentum: 0.9, weight_decay: 0.1 };
        let (mut w, mut v) = (vec![1.0f32, -2.0], vec![0.0f32, 0.5]);
        sgd.update(0.5, &mut w, &mut v, &[4.0, 2.0], 0.5);
        // g' = [2 + 0.1, 1 - 0.2] = [2.1, 0.8]; v = [2.1, 0.45 + 0.8]; w -= 0.5 v.
        assert!((v[0] - 2.1).abs() < 1e-6 && (v[1] - 1.25).abs() < 1e-6, "{v:?}");
        assert!((w[0] - -0.05).abs() < 1e-6 && (w[1] - -2.625).abs() < 1e-6, "{w:?}");
    }
}
