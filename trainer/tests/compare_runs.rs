//! `trainer compare`, the comparison `scripts/gpu-check.sh` makes between a
//! CPU and a GPU run, made here between CPU runs of the real binary: two
//! runs with the same seed agree, a run with another seed does not, and a
//! run that cannot be read (no checkpoint, another model) is a FAIL with
//! the reason and exit 1. A change to the checkpoint or epoch-line format
//! that the comparison no longer reads therefore fails here, in CI, instead
//! of emptying the GPU check.

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// One `trainer train` run into `dir` laid out as gpu-check.sh does:
/// `dir/stdout` and `dir/checkpoints/`.
fn train(dir: &Path, model: &str, seed: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["train", "--model", model, "--epochs", "1", "--threads", "2", "--seed", seed, "--data"])
        .arg(common::mnist_dir())
        .arg("--checkpoint-dir")
        .arg(dir.join("checkpoints"))
        .arg("--tb-dir")
        .arg(dir.join("tb"))
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    assert!(out.status.success(), "trainer train: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(dir.join("stdout"), &out.stdout).unwrap();
}

fn compare(a: &Path, b: &Path, drift: &[&Path]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trainer"));
    command.arg("compare").arg(a).arg(b);
    for d in drift {
        command.arg("--drift").arg(d);
    }
    command.output().unwrap()
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn runs_are_compared_through_the_trainers_own_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, other, lenet) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("c"), tmp.path().join("l"));
    train(&a, "mlp", "7");
    train(&b, "mlp", "7");
    train(&other, "mlp", "8");

    // The same seed on the same device: the same run, every quantity passes.
    let out = compare(&a, &b, &[]);
    let text = lines(&out);
    assert_eq!(out.status.code(), Some(0), "{text:#?}");
    assert_eq!(text.iter().filter(|l| l.starts_with("PASS a vs b: ")).count(), 3, "{text:#?}");
    assert!(text.iter().any(|l| l.contains("weights") && l.contains("difference 0.00000")), "{text:#?}");

    // Another seed starts from other weights: the weights fail.
    let out = compare(&a, &other, &[]);
    let text = lines(&out);
    assert_eq!(out.status.code(), Some(1), "{text:#?}");
    assert!(text.iter().any(|l| l.starts_with("FAIL a vs c: weights")), "{text:#?}");

    // With `other` as a drift run, twice its distance is allowed: it passes.
    let out = compare(&a, &b, &[&other]);
    assert_eq!(out.status.code(), Some(0), "{:#?}", lines(&out));

    // A run that cannot be compared is a FAIL with the reason, never a pass.
    std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
    let out = compare(&a, &tmp.path().join("empty"), &[]);
    let text = lines(&out);
    assert_eq!(out.status.code(), Some(1), "{text:#?}");
    assert!(text[0].starts_with("FAIL a vs empty: the comparison could not run: cannot read"), "{text:#?}");
    std::fs::copy(a.join("stdout"), tmp.path().join("empty/stdout")).unwrap();
    let text = lines(&compare(&a, &tmp.path().join("empty"), &[]));
    assert!(text[0].contains("holds no intact checkpoint"), "{text:#?}");
    train(&lenet, "lenet", "7");
    let out = compare(&a, &lenet, &[]);
    let text = lines(&out);
    assert_eq!(out.status.code(), Some(1), "{text:#?}");
    assert!(text[0].contains("parameters"), "{text:#?}");
}
