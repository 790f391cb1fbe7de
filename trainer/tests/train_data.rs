//! The dataset readers on the real MNIST fixture and on damaged copies of
//! it (gzipped, truncated, corrupt gzip, mismatched counts), the CIFAR-10
//! reader on records written from real digits, and the `trainer train`
//! command line on them (exit codes and messages).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use trainer::train::data::{self, Dataset, Format, Split};

fn all(d: &Dataset) -> (Vec<f32>, Vec<u8>) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    d.gather(&(0..d.len()).collect::<Vec<_>>(), &mut x, &mut y);
    (x, y)
}

fn gzip(from: &Path, to: &Path) {
    let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(to).unwrap(), flate2::Compression::fast());
    enc.write_all(&std::fs::read(from).unwrap()).unwrap();
    enc.finish().unwrap();
}

fn load_err(dir: &Path) -> String {
    data::load(dir, None, Split::Train).unwrap_err().to_string()
}

#[test]
fn gzipped_copies_read_the_same_as_the_originals() {
    let src = common::mnist_dir();
    let dir = tempfile::tempdir().unwrap();
    for name in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"] {
        gzip(&src.join(name), &dir.path().join(format!("{name}.gz")));
    }
    let plain = data::load(&src, None, Split::Train).unwrap();
    let gz = data::load(dir.path(), None, Split::Train).unwrap();
    assert_eq!(all(&plain), all(&gz));
    // Every class is there, 400 each (the fixture's stratified split).
    let mut counts = [0; 10];
    plain.labels().iter().for_each(|&l| counts[l as usize] += 1);
    assert_eq!(counts, [400; 10]);
}

#[test]
fn damaged_real_files_name_the_file_and_offset() {
    let src = common::mnist_dir();
    let dir = tempfile::tempdir().unwrap();
    let images = std::fs::read(src.join("train-images-idx3-ubyte")).unwrap();
    let labels = std::fs::read(src.join("train-labels-idx1-ubyte")).unwrap();
    std::fs::write(dir.path().join("train-labels-idx1-ubyte"), &labels).unwrap();

    // Truncated in the middle of digit 1234.
    let cut = 16 + 1234 * 784 + 100;
    std::fs::write(dir.path().join("train-images-idx3-ubyte"), &images[..cut]).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("train-images-idx3-ubyte: at byte 967572") && e.contains("truncated"), "{e}");

    // The same truncation inside a gzip file: offsets are in the decompressed data.
    std::fs::remove_file(dir.path().join("train-images-idx3-ubyte")).unwrap();
    let gz = dir.path().join("train-images-idx3-ubyte.gz");
    std::fs::write(dir.path().join("cut"), &images[..cut]).unwrap();
    gzip(&dir.path().join("cut"), &gz);
    let e = load_err(dir.path());
    assert!(e.contains("train-images-idx3-ubyte.gz: at byte 967572"), "{e}");

    // A gzip stream cut short, and one with damaged compressed bytes.
    gzip(&src.join("train-images-idx3-ubyte"), &gz);
    let whole = std::fs::read(&gz).unwrap();
    std::fs::write(&gz, &whole[..whole.len() / 2]).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("train-images-idx3-ubyte.gz: bad gzip data after") && e.contains("decompressed bytes"), "{e}");
    let mut damaged = whole.clone();
    for b in &mut damaged[200..260] {
        *b ^= 0x5a;
    }
    std::fs::write(&gz, &damaged).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("train-images-idx3-ubyte.gz: bad gzip data after"), "{e}");

    // Labels of the test split paired with the training images.
    std::fs::write(&gz, &whole).unwrap();
    std::fs::copy(src.join("t10k-labels-idx1-ubyte"), dir.path().join("train-labels-idx1-ubyte")).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("4000 images") && e.contains("1000 labels"), "{e}");
}

/// Real digits as CIFAR-10 records: each 28x28 digit centred in 32x32, the
/// same in all three channels.
fn cifar_records(images: &[u8], labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (digit, &label) in images.chunks_exact(784).zip(labels) {
        out.push(label);
        for _channel in 0..3 {
            for y in 0..32 {
                for x in 0..32 {
                    let inside = (2..30).contains(&y) && (2..30).contains(&x);
                    out.push(if inside { digit[(y - 2) * 28 + (x - 2)] } else { 0 });
                }
            }
        }
    }
    out
}

#[test]
fn cifar_reader_on_records_of_real_digits() {
    let src = common::mnist_dir();
    let images = std::fs::read(src.join("train-images-idx3-ubyte")).unwrap();
    let labels = std::fs::read(src.join("train-labels-idx1-ubyte")).unwrap();
    let (images, labels) = (&images[16..], &labels[8..]);
    let dir = tempfile::tempdir().unwrap();
    // Five training batches of 500 digits and a test batch of 300.
    for b in 0..5 {
        let r = b * 800..b * 800 + 500;
        let recs = cifar_records(&images[r.start * 784..r.end * 784], &labels[r]);
        std::fs::write(dir.path().join(format!("data_batch_{}.bin", b + 1)), recs).unwrap();
    }
    std::fs::write(dir.path().join("test_batch.bin"), cifar_records(&images[..300 * 784], &labels[..300])).unwrap();
    assert_eq!(data::detect(dir.path()).unwrap(), Format::Cifar10);
    let train = data::load(dir.path(), None, Split::Train).unwrap();
    assert_eq!((train.len(), train.channels, train.height, train.width), (2500, 3, 32, 32));
    let want: Vec<u8> = (0..5).flat_map(|b| labels[b * 800..b * 800 + 500].to_vec()).collect();
    assert_eq!(train.labels(), &want[..]);
    // Pixel (y 16, x 16) of channel 2 of sample 500 is digit 800's pixel (14, 14),
    // normalised with CIFAR's blue statistics.
    let (x, _) = all(&train);
    let raw = f32::from(images[800 * 784 + 14 * 28 + 14]);
    let got = x[500 * 3072 + 2 * 1024 + 16 * 32 + 16];
    assert!((got - (raw / 255.0 - 0.4465) / 0.2616).abs() < 1e-5, "{got}");

    // One byte short in the last record of batch 3.
    let path = dir.path().join("data_batch_3.bin");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("data_batch_3.bin: at byte 1533427") && e.contains("short"), "{e}");
}

fn trainer(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .arg("train")
        .args(args)
        .env_remove("WORLD_SIZE")
        .env_remove("RANK")
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

#[test]
fn cli_trains_one_epoch_and_prints_its_line() {
    let dir = common::mnist_dir();
    let (code, out, err) =
        trainer(&["--model", "mlp", "--data", dir.to_str().unwrap(), "--epochs", "1", "--threads", "2"]);
    assert_eq!(code, 0, "{err}");
    let line = out.lines().next().unwrap_or_default();
    assert!(line.starts_with("epoch 1/1 loss ") && line.contains("test-acc ") && line.contains("samples/s"), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn cli_bad_input_exits_2_with_a_message() {
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().to_str().unwrap();
    let (code, out, err) = trainer(&["--model", "mlp", "--data", dir]);
    assert_eq!(code, 2);
    assert!(out.is_empty() && err.contains("no dataset found") && err.contains("data_batch_1.bin"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let (code, _, err) = trainer(&["--model", "mlp", "--data", dir, "--lr=-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("--lr") && err.contains("greater than 0"), "{err}");

    let (code, _, err) = trainer(&["--model", "resnet", "--data", dir]);
    assert_eq!(code, 2);
    assert!(err.contains("mlp") && err.contains("lenet"), "{err}");

    // Real idx files of 8x8 images: fine for the MLP, too small for LeNet.
    let small = tempfile::tempdir().unwrap();
    for (split, n) in [("train", 20u32), ("t10k", 10)] {
        let mut images = vec![0, 0, 8, 3];
        [n, 8, 8].iter().for_each(|d| images.extend(d.to_be_bytes()));
        images.extend((0..n * 64).map(|i| (i % 251) as u8));
        std::fs::write(small.path().join(format!("{split}-images-idx3-ubyte")), images).unwrap();
        let mut labels = vec![0, 0, 8, 1];
        labels.extend(n.to_be_bytes());
        labels.extend((0..n).map(|i| (i % 10) as u8));
        std::fs::write(small.path().join(format!("{split}-labels-idx1-ubyte")), labels).unwrap();
    }
    let small = small.path().to_str().unwrap();
    let (code, _, err) = trainer(&["--model", "lenet", "--data", small, "--epochs", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("8x8 images are too small for LeNet"), "{err}");
    let (code, out, err) = trainer(&["--model", "mlp", "--data", small, "--epochs", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("epoch 1/1 "), "{out}");

    let mnist = common::mnist_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["train", "--model", "mlp", "--data", mnist.to_str().unwrap()])
        .env("WORLD_SIZE", "two")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("WORLD_SIZE=\"two\": not a number"));
}
