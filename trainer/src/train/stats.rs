//! [`StepStats`]: the loss and accuracy sums over the samples of a step, an
//! evaluation or an epoch. A leaf room, below both the model's arithmetic
//! (its loss function returns them) and the engines that add them up over
//! steps and ranks ([`super::engine`] re-exports them).

/// Sums over the samples of one step or evaluation, on this rank.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Sum of the samples' cross-entropy losses.
    pub loss_sum: f64,
    /// Samples whose arg-max prediction equals the label.
    pub correct: u64,
    /// Samples counted.
    pub samples: u64,
}

impl std::ops::AddAssign for StepStats {
    fn add_assign(&mut self, other: StepStats) {
        self.loss_sum += other.loss_sum;
        self.correct += other.correct;
        self.samples += other.samples;
    }
}

impl StepStats {
    /// Mean loss per sample (0 over no samples).
    pub fn mean_loss(&self) -> f64 {
        self.loss_sum / self.samples.max(1) as f64
    }

    /// As three floats, for an all-reduce (counts stay exact below 2^24).
    pub fn to_floats(self) -> [f32; 3] {
        [self.loss_sum as f32, self.correct as f32, self.samples as f32]
    }

    /// Back from [`StepStats::to_floats`] (summed).
    pub fn from_floats(f: [f32; 3]) -> Self {
        Self { loss_sum: f64::from(f[0]), correct: f[1].round() as u64, samples: f[2].round() as u64 }
    }
}
