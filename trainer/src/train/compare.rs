//! `trainer compare`: whether two finished training runs agree, through the
//! trainer's own readers: the last epoch line of each run's stdout
//! ([`run::parse_epoch_line`](super::run::parse_epoch_line), beside the
//! function that writes it) and the newest intact checkpoint of each
//! ([`checkpoint::Store::latest`](super::checkpoint::Store::latest)), so a
//! change to either format changes this reader with it and no second
//! parser falls behind.
//!
//! A run is a directory as `scripts/gpu-check.sh` lays it out: `stdout`
//! (what `trainer train` printed) and `checkpoints/` (its
//! `--checkpoint-dir`). Three quantities are compared: the last epoch's
//! mean training loss (relative difference), its test accuracy (points),
//! and the final weights (relative L2 distance over the flat parameter
//! vector). Training is chaotic: a last-bit difference in one step can move
//! a run onto a nearby trajectory. So `--drift` runs (A's device with the
//! learning rate a few roundings off) measure how far A drifts from itself,
//! and a quantity also passes within twice that.
//!
//! Output: one `PASS` or `FAIL` line per quantity on stdout, then both runs'
//! samples/s. A comparison that cannot run (a missing or unreadable file,
//! no epoch line, no checkpoint, parameter vectors of different lengths) is
//! one `FAIL` line with the reason: never a silent pass. Exit code 0 when
//! every line passed, 1 otherwise (2: usage).

use std::path::{Path, PathBuf};

use super::checkpoint::{DEFAULT_KEEP, Store};
use super::run::{EpochFigures, parse_epoch_line};
use crate::exit::{EXIT_FAILED, EXIT_OK};

/// Arguments of `trainer compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The reference run's directory (`stdout`, `checkpoints/`).
    pub a: PathBuf,
    /// The run compared with it.
    pub b: PathBuf,
    /// Runs like A with the learning rate a few roundings off: B also passes
    /// within twice the furthest of them from A.
    #[arg(long, value_name = "DIR")]
    pub drift: Vec<PathBuf>,
    /// Allowed relative difference of the last epoch's training loss.
    #[arg(long, default_value_t = 0.02)]
    pub loss_tol: f64,
    /// Allowed difference of the test accuracy, in percentage points.
    #[arg(long, default_value_t = 1.0)]
    pub acc_tol: f64,
    /// Allowed relative L2 distance of the final weights.
    #[arg(long, default_value_t = 0.02)]
    pub weight_tol: f64,
}

/// What one run ended with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    /// Its last epoch line's figures.
    pub last: EpochFigures,
    /// Its newest intact checkpoint's parameters.
    pub params: Vec<f32>,
}

/// Reads a run directory: the last epoch line of `stdout` and the newest
/// intact checkpoint in `checkpoints/`.
pub(crate) fn read_run(dir: &Path) -> Result<Outcome, String> {
    let stdout = dir.join("stdout");
    let text = std::fs::read_to_string(&stdout).map_err(|e| format!("cannot read {}: {e}", stdout.display()))?;
    let last = text
        .lines()
        .filter_map(parse_epoch_line)
        .next_back()
        .ok_or_else(|| format!("{} has no epoch line", stdout.display()))?;
    let store = Store::new(dir.join("checkpoints"), DEFAULT_KEEP);
    let (_, checkpoint) = store
        .latest()
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{} holds no intact checkpoint", store.dir().display()))?;
    Ok(Outcome { last, params: checkpoint.state.params })
}

/// The three differences between `a` and `b`: relative loss, accuracy
/// points, relative L2 distance of the weights.
pub(crate) fn differences(a: &Outcome, b: &Outcome) -> Result<[f64; 3], String> {
    if a.params.len() != b.params.len() {
        return Err(format!("the checkpoints hold {} and {} parameters", a.params.len(), b.params.len()));
    }
    let accuracy = |o: &Outcome| o.last.test_accuracy.ok_or("a run has no test accuracy (test-acc -)");
    let (diff, norm) = a.params.iter().zip(&b.params).fold((0.0f64, 0.0f64), |(d, n), (&x, &y)| {
        (d + (f64::from(x) - f64::from(y)).powi(2), n + f64::from(x).powi(2))
    });
    Ok([
        (a.last.loss - b.last.loss).abs() / a.last.loss.abs().max(1e-12),
        (accuracy(a)? - accuracy(b)?).abs(),
        diff.sqrt() / norm.sqrt().max(f64::MIN_POSITIVE),
    ])
}

/// The report's lines and whether every one passed.
pub(crate) fn compare(args: &Args) -> (Vec<String>, bool) {
    let name = |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
    let (an, bn) = (name(&args.a), name(&args.b));
    let fail = |reason: String| (vec![format!("FAIL {an} vs {bn}: the comparison could not run: {reason}")], false);
    let (a, b) = match (read_run(&args.a), read_run(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let diffs = match differences(&a, &b) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    // The furthest each drift run got from A, per quantity.
    let mut drift: Option<[f64; 3]> = None;
    for dir in &args.drift {
        match read_run(dir).and_then(|c| differences(&a, &c)) {
            Ok(d) => {
                let m = drift.get_or_insert([0.0; 3]);
                m.iter_mut().zip(d).for_each(|(m, d)| *m = m.max(d));
            }
            Err(e) => return fail(format!("drift run {}: {e}", dir.display())),
        }
    }
    let acc = |o: &Outcome| o.last.test_accuracy.unwrap_or(f64::NAN);
    let checks = [
        ("loss", args.loss_tol, format!("{:.4} vs {:.4}", a.last.loss, b.last.loss)),
        ("test accuracy", args.acc_tol, format!("{:.2}% vs {:.2}%", acc(&a), acc(&b))),
        ("weights", args.weight_tol, format!("{} parameters", a.params.len())),
    ];
    let mut lines = Vec::new();
    let mut ok = true;
    for (i, (what, tol, detail)) in checks.into_iter().enumerate() {
        let allowed = drift.map_or(tol, |d| tol.max(2.0 * d[i]));
        let also = drift.map_or_else(String::new, |d| {
            format!("; {an} vs its drift runs: up to {:.5}, so up to {allowed:.5}", d[i])
        });
        // NaN (a diverged run) fails: it is never <= anything.
        let pass = diffs[i] <= allowed;
        ok &= pass;
        lines.push(format!(
            "{} {an} vs {bn}: {what}: {detail}: difference {:.5} (tolerance {tol}{also})",
            if pass { "PASS" } else { "FAIL" },
            diffs[i]
        ));
    }
    let (ra, rb) = (a.last.samples_per_sec, b.last.samples_per_sec);
    lines.push(format!("  samples/s (last epoch): {an} {ra:.0}, {bn} {rb:.0} ({:.2}x {an})", rb / ra.max(1e-9)));
    (lines, ok)
}

/// Runs `trainer compare`: prints the report, returns the exit code.
pub(crate) fn run(args: &Args) -> Result<u8, cli_output::Closed> {
    let (lines, ok) = compare(args);
    cli_output::print_report(&(lines.join("\n") + "\n"), if ok { EXIT_OK } else { EXIT_FAILED })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(loss: f64, acc: Option<f64>, params: Vec<f32>) -> Outcome {
        Outcome { last: EpochFigures { loss, test_accuracy: acc, samples_per_sec: 1.0 }, params }
    }

    #[test]
    fn differences_are_relative_loss_points_and_relative_l2() {
        let a = outcome(0.5, Some(90.0), vec![3.0, 4.0]);
        let b = outcome(0.55, Some(88.5), vec![3.0, 4.5]);
        let d = differences(&a, &b).unwrap();
        assert!((d[0] - 0.1).abs() < 1e-9 && (d[1] - 1.5).abs() < 1e-9 && (d[2] - 0.1).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn what_cannot_be_compared_is_an_error() {
        let a = outcome(0.5, Some(90.0), vec![1.0]);
        assert!(differences(&a, &outcome(0.5, Some(90.0), vec![1.0, 2.0])).unwrap_err().contains("1 and 2"));
        assert!(differences(&a, &outcome(0.5, None, vec![1.0])).unwrap_err().contains("test accuracy"));
    }

    #[test]
    fn a_missing_run_is_one_fail_line() {
        let dir = tempfile::tempdir().unwrap();
        let args = Args {
            a: dir.path().join("a"),
            b: dir.path().join("b"),
            drift: Vec::new(),
            loss_tol: 0.02,
            acc_tol: 1.0,
            weight_tol: 0.02,
        };
        let (lines, ok) = compare(&args);
        assert!(!ok);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("FAIL a vs b: the comparison could not run: cannot read"), "{lines:?}");
    }
}
