//! The event files `trainer train` writes read back with TensorBoard's own
//! reader (`EventAccumulator`), pinned in `tensorboard-requirements.txt` and
//! installed into the workspace's `.venv` on first run (as `scripts/test`
//! installs its tools).

use std::path::{Path, PathBuf};
use std::process::Command;

use trainer::train::events::{EventWriter, tag};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// `.venv/bin/python` with tensorboard, installing it when missing.
fn python_with_tensorboard() -> PathBuf {
    let root = workspace();
    let python = root.join(".venv/bin/python");
    let has = |p: &Path| Command::new(p).args(["-c", "import tensorboard"]).output().is_ok_and(|o| o.status.success());
    if has(&python) {
        return python;
    }
    if !python.exists() {
        let status = Command::new("python3").args(["-m", "venv"]).arg(root.join(".venv")).status();
        assert!(status.is_ok_and(|s| s.success()), "python3 -m venv .venv failed: install python3-venv");
    }
    let requirements = root.join("trainer/tests/tensorboard-requirements.txt");
    let status = Command::new(root.join(".venv/bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements)
        .status();
    assert!(status.is_ok_and(|s| s.success()), "pip install -r {} failed", requirements.display());
    assert!(has(&python), "tensorboard is still not importable from {}", python.display());
    python
}

#[test]
fn tensorboard_reads_the_scalars() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut writer = EventWriter::create(dir.path()).unwrap();
        for epoch in 1..=3u64 {
            let e = epoch as f64;
            writer
                .scalars(
                    epoch * 50,
                    &[(tag::TRAIN_LOSS, 2.0 / e), (tag::TEST_ACCURACY, 0.5 + e / 10.0), (tag::THROUGHPUT, 1000.0 * e)],
                )
                .unwrap();
            writer.flush().unwrap();
        }
    }
    let python = python_with_tensorboard();
    let script = workspace().join("trainer/tests/tensorboard_scalars.py");
    let out = Command::new(python).arg(script).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut expected = Vec::new();
    for epoch in 1..=3u64 {
        let e = epoch as f64;
        for (tag, value) in
            [(tag::TEST_ACCURACY, 0.5 + e / 10.0), (tag::THROUGHPUT, 1000.0 * e), (tag::TRAIN_LOSS, 2.0 / e)]
        {
            // TensorBoard reads simple_value as a float32, printed by Python as a double.
            expected.push((tag.to_owned(), epoch * 50, f64::from(value as f32)));
        }
    }
    expected.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let got: Vec<(String, u64, f64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_owned(), f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert_eq!(got, expected);
}
