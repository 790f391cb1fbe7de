//! Training data: the MNIST idx reader (optionally gzipped), the CIFAR-10
//! binary reader, normalisation, the per-epoch sample order and each rank's
//! slice of a global batch.
//!
//! Inputs: a directory (`trainer train --data DIR`) holding either
//! - MNIST: `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//!   `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte` (also spelt
//!   `train-images.idx3-ubyte`; each optionally with `.gz`), or
//! - CIFAR-10: `data_batch_1.bin` .. `data_batch_5.bin` and `test_batch.bin`
//!   (records of 1 label byte and 3 x 32 x 32 pixel bytes, channel-major).
//!
//! Nothing is written. Every corrupt or truncated file is an error naming the
//! file and the byte offset (in the decompressed stream for `.gz` files).
//!
//! Memory: the sample order is a permutation of the whole training set that
//! changes every epoch, so over an epoch every rank's slices reach every
//! sample. A rank therefore reads its split once and keeps it as raw bytes
//! (one byte per pixel: 47 MB for MNIST's 60,000 digits, 154 MB for CIFAR-10),
//! and converts to normalised `f32` only the samples of its own slice of the
//! batch being computed ([`Dataset::gather`]). Only rank 0 needs the test
//! split (it evaluates).

use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// The number of classes of both datasets.
pub const CLASSES: usize = 10;

/// A dataset file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// MNIST idx files (`train-images-idx3-ubyte[.gz]` ...): 1 x 28 x 28 digits.
    Mnist,
    /// CIFAR-10 binary batches (`data_batch_N.bin`, `test_batch.bin`): 3 x 32 x 32 images.
    Cifar10,
}

/// Which split of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The training split.
    Train,
    /// The held-out test split.
    Test,
}

/// Reading a dataset failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The directory holds neither format's files.
    #[error(
        "{dir}: no dataset found; looked for MNIST ({mnist}) and CIFAR-10 ({cifar}). Point --data at the directory \
         holding them (or pass --format)"
    )]
    NotFound {
        /// The directory searched.
        dir: PathBuf,
        /// MNIST file names looked for.
        mnist: String,
        /// CIFAR-10 file names looked for.
        cifar: String,
    },
    /// One file of the split is missing.
    #[error("{dir}: no {what}; looked for {looked_for}")]
    Missing {
        /// The directory searched.
        dir: PathBuf,
        /// What is missing.
        what: &'static str,
        /// The names looked for.
        looked_for: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A gzip file is damaged.
    #[error("{path}: bad gzip data after {offset} decompressed bytes: {source}")]
    Gzip {
        /// The file.
        path: PathBuf,
        /// Decompressed bytes read before the failure.
        offset: u64,
        /// What the decoder said.
        source: std::io::Error,
    },
    /// A file's content does not fit its format.
    #[error("{path}: at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the problem (in the decompressed data for `.gz` files).
        offset: u64,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// The images and labels files disagree.
    #[error("{images} holds {n_images} images but {labels} holds {n_labels} labels; the files do not belong together")]
    CountMismatch {
        /// The images file.
        images: PathBuf,
        /// Its image count.
        n_images: usize,
        /// The labels file.
        labels: PathBuf,
        /// Its label count.
        n_labels: usize,
    },
}

/// One split of a dataset in memory: raw pixel bytes, channel-major per
/// sample (`C x H x W`), and labels.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Channels per image.
    pub channels: usize,
    /// Image height.
    pub height: usize,
    /// Image width.
    pub width: usize,
    pixels: Vec<u8>,
    labels: Vec<u8>,
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Dataset {
    /// Makes a dataset from raw parts (`pixels` is `labels.len()` samples of
    /// `channels * height * width` bytes); `mean`/`std` are per channel, on
    /// the `0..1` scale.
    pub fn from_parts(
        (channels, height, width): (usize, usize, usize),
        pixels: Vec<u8>,
        labels: Vec<u8>,
        mean: Vec<f32>,
        std: Vec<f32>,
    ) -> Self {
        assert_eq!(pixels.len(), labels.len() * channels * height * width, "pixels and labels disagree");
        assert!(mean.len() == channels && std.len() == channels, "one mean and std per channel");
        Self { channels, height, width, pixels, labels, mean, std }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Floats per sample (`C * H * W`).
    pub fn sample_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// All labels, by sample.
    pub fn labels(&self) -> &[u8] {
        &self.labels
    }

    /// Replaces `images` and `labels` with the samples at `indices`,
    /// normalised: `(x / 255 - mean[c]) / std[c]`.
    pub fn gather(&self, indices: &[usize], images: &mut Vec<f32>, labels: &mut Vec<u8>) {
        let len = self.sample_len();
        let plane = self.height * self.width;
        images.clear();
        labels.clear();
        images.reserve(indices.len() * len);
        for &i in indices {
            let raw = &self.pixels[i * len..(i + 1) * len];
            for (c, channel) in raw.chunks_exact(plane).enumerate() {
                let (scale, shift) = (1.0 / (255.0 * self.std[c]), self.mean[c] / self.std[c]);
                images.extend(channel.iter().map(|&p| f32::from(p) * scale - shift));
            }
            labels.push(self.labels[i]);
        }
    }
}

/// MNIST's usual normalisation (mean and standard deviation of its 60,000 training digits).
const MNIST_MEAN: [f32; 1] = [0.1307];
const MNIST_STD: [f32; 1] = [0.3081];
/// CIFAR-10's per-channel statistics over its 50,000 training images.
const CIFAR_MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
const CIFAR_STD: [f32; 3] = [0.2470, 0.2435, 0.2616];

const CIFAR_RECORD: usize = 1 + 3 * 32 * 32;

fn mnist_names(split: Split, kind: &str, idx: u8) -> Vec<String> {
    let prefix = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    let mut names = Vec::new();
    for sep in ['-', '.'] {
        for gz in ["", ".gz"] {
            names.push(format!("{prefix}-{kind}{sep}idx{idx}-ubyte{gz}"));
        }
    }
    names
}

fn cifar_names(split: Split) -> Vec<String> {
    match split {
        Split::Train => (1..=5).map(|i| format!("data_batch_{i}.bin")).collect(),
        Split::Test => vec!["test_batch.bin".to_owned()],
    }
}

fn first_existing(dir: &Path, names: &[String]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// The format of the files in `dir`: MNIST when its training images are
/// there, CIFAR-10 when its first training batch is.
pub fn detect(dir: &Path) -> Result<Format, DataError> {
    if first_existing(dir, &mnist_names(Split::Train, "images", 3)).is_some() {
        return Ok(Format::Mnist);
    }
    if dir.join("data_batch_1.bin").is_file() {
        return Ok(Format::Cifar10);
    }
    Err(DataError::NotFound {
        dir: dir.to_owned(),
        mnist: mnist_names(Split::Train, "images", 3).join(", "),
        cifar: "data_batch_1.bin .. data_batch_5.bin, test_batch.bin".to_owned(),
    })
}

/// Reads one split of the dataset in `dir` (its format detected when `format` is `None`).
pub fn load(dir: &Path, format: Option<Format>, split: Split) -> Result<Dataset, DataError> {
    let format = match format {
        Some(f) => f,
        None => detect(dir)?,
    };
    match format {
        Format::Mnist => load_mnist(dir, split),
        Format::Cifar10 => load_cifar(dir, split),
    }
}

/// The most bytes one dataset file may hold (decompressed): 27 times
/// CIFAR-10's training set. An idx header that declares more is refused
/// before anything is decompressed, and no file is read past it, so a gzip
/// "bomb" costs what its header claims at most, never what it expands to.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// How far past its declared payload a `.gz` file is decompressed (and
/// discarded) to tell damaged data from trailing bytes.
const GZIP_DRAIN_BYTES: u64 = 64 << 20;

/// A dataset file being read: plain, or gunzipped when its name ends in
/// `.gz`; it counts the (decompressed) bytes read, for error offsets.
struct Source<'p> {
    path: &'p Path,
    reader: Box<dyn Read>,
    gzip: bool,
    offset: u64,
}

impl<'p> Source<'p> {
    fn open(path: &'p Path) -> Result<Self, DataError> {
        let file = std::fs::File::open(path).map_err(|source| DataError::Read { path: path.to_owned(), source })?;
        let gzip = path.extension().is_some_and(|e| e == "gz");
        let reader: Box<dyn Read> = if gzip {
            Box::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)))
        } else {
            Box::new(std::io::BufReader::new(file))
        };
        Ok(Source { path, reader, gzip, offset: 0 })
    }

    /// Reads and discards up to `limit` more bytes (constant memory): past
    /// the end of what a header declares, damaged gzip data shows itself as
    /// a decoder error here, not as extra bytes.
    fn drain(&mut self, limit: u64) -> Result<(), DataError> {
        let mut buf = vec![0u8; 1 << 16];
        let mut left = limit;
        while left > 0 {
            let want = buf.len().min(left as usize);
            match self.reader.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    left -= n as u64;
                    self.offset += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) if self.gzip => {
                    return Err(DataError::Gzip { path: self.path.to_owned(), offset: self.offset, source });
                }
                Err(source) => return Err(DataError::Read { path: self.path.to_owned(), source }),
            }
        }
        Ok(())
    }

    /// The next `limit` bytes, or fewer where the file ends.
    fn read_up_to(&mut self, limit: u64) -> Result<Vec<u8>, DataError> {
        let mut data = Vec::with_capacity(limit.min(1 << 24) as usize);
        // Read in pieces so that a failure can say how far decoding got.
        let mut buf = vec![0u8; 1 << 16];
        while (data.len() as u64) < limit {
            let want = buf.len().min((limit - data.len() as u64) as usize);
            match self.reader.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    data.extend_from_slice(&buf[..n]);
                    self.offset += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) if self.gzip => {
                    return Err(DataError::Gzip { path: self.path.to_owned(), offset: self.offset, source });
                }
                Err(source) => return Err(DataError::Read { path: self.path.to_owned(), source }),
            }
        }
        Ok(data)
    }
}

/// Reads a whole file (at most [`MAX_FILE_BYTES`]), decompressing it when
/// its name ends in `.gz`.
fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    let data = Source::open(path)?.read_up_to(MAX_FILE_BYTES + 1)?;
    if data.len() as u64 > MAX_FILE_BYTES {
        return Err(DataError::Corrupt {
            path: path.to_owned(),
            offset: MAX_FILE_BYTES,
            reason: format!("the file holds more than {} GiB, more than a dataset file may", MAX_FILE_BYTES >> 30),
        });
    }
    Ok(data)
}

fn be_u32(data: &[u8], offset: usize, path: &Path, what: &str) -> Result<u32, DataError> {
    data.get(offset..offset + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(|| {
        DataError::Corrupt {
            path: path.to_owned(),
            offset: data.len() as u64,
            reason: format!("file ends inside the header, expected the {what} (4 bytes) at byte {offset}"),
        }
    })
}

/// Reads an idx file with `dims` dimensions of unsigned bytes: the header
/// first, then exactly the payload its dimensions declare (refused above
/// [`MAX_FILE_BYTES`] before it is read); returns the dimensions and the
/// payload.
fn read_idx(path: &Path, dims: usize) -> Result<(Vec<usize>, Vec<u8>), DataError> {
    let corrupt =
        |offset: usize, reason: String| DataError::Corrupt { path: path.to_owned(), offset: offset as u64, reason };
    let mut source = Source::open(path)?;
    let header = 4 + 4 * dims;
    let head = source.read_up_to(header as u64)?;
    let magic = be_u32(&head, 0, path, "magic number")?;
    let expected = 0x0800 | dims as u32;
    if magic != expected {
        return Err(corrupt(
            0,
            format!(
                "magic number {magic:#010x}, expected {expected:#010x} (idx, unsigned bytes, {dims} dimension(s)); \
                 is this the right file, or a gzip file without .gz?"
            ),
        ));
    }
    let mut shape = Vec::with_capacity(dims);
    for d in 0..dims {
        let n = be_u32(&head, 4 + 4 * d, path, "dimension")? as usize;
        if n == 0 {
            return Err(corrupt(4 + 4 * d, format!("dimension {d} is 0")));
        }
        shape.push(n);
    }
    let payload = shape.iter().try_fold(1u64, |a, &n| a.checked_mul(n as u64));
    let Some(payload) = payload.filter(|&p| p <= MAX_FILE_BYTES) else {
        return Err(corrupt(
            4,
            format!(
                "dimensions {shape:?} are too large (more than the {} GiB a dataset file may hold)",
                MAX_FILE_BYTES >> 30
            ),
        ));
    };
    // One byte past the payload tells a file that goes on from one that ends.
    let mut data = source.read_up_to(payload + 1)?;
    let need = header as u64 + payload;
    let has = header as u64 + data.len() as u64;
    if data.len() as u64 > payload && source.gzip {
        // Damaged compressed data often decodes into too many bytes; its
        // checksum error comes at the end of the stream. Look that far (in
        // constant memory, at most [`GZIP_DRAIN_BYTES`]) before calling the
        // rest trailing bytes.
        source.drain(GZIP_DRAIN_BYTES)?;
    }
    if data.len() as u64 != payload {
        let why = if has < need {
            format!("dimensions {shape:?} need {need} bytes but the file has {has}: truncated")
        } else {
            format!("dimensions {shape:?} need {need} bytes but the file goes on after them: trailing bytes")
        };
        return Err(corrupt(has.min(need) as usize, why));
    }
    data.truncate(payload as usize);
    Ok((shape, data))
}

fn check_labels(labels: &[u8], path: &Path, header: usize) -> Result<(), DataError> {
    match labels.iter().position(|&l| l as usize >= CLASSES) {
        Some(i) => Err(DataError::Corrupt {
            path: path.to_owned(),
            offset: (header + i) as u64,
            reason: format!("label {} is not a class 0..{}", labels[i], CLASSES - 1),
        }),
        None => Ok(()),
    }
}

fn load_mnist(dir: &Path, split: Split) -> Result<Dataset, DataError> {
    let find = |kind: &str, idx: u8, what: &'static str| {
        let names = mnist_names(split, kind, idx);
        first_existing(dir, &names).ok_or_else(|| DataError::Missing {
            dir: dir.to_owned(),
            what,
            looked_for: names.join(", "),
        })
    };
    let images_path = find("images", 3, "MNIST images file")?;
    let labels_path = find("labels", 1, "MNIST labels file")?;
    let (shape, pixels) = read_idx(&images_path, 3)?;
    let (label_shape, labels) = read_idx(&labels_path, 1)?;
    if shape[0] != label_shape[0] {
        return Err(DataError::CountMismatch {
            images: images_path,
            n_images: shape[0],
            labels: labels_path,
            n_labels: label_shape[0],
        });
    }
    check_labels(&labels, &labels_path, 8)?;
    Ok(Dataset::from_parts((1, shape[1], shape[2]), pixels, labels, MNIST_MEAN.to_vec(), MNIST_STD.to_vec()))
}

fn load_cifar(dir: &Path, split: Split) -> Result<Dataset, DataError> {
    let names = cifar_names(split);
    let paths: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).filter(|p| p.is_file()).collect();
    if paths.is_empty() {
        return Err(DataError::Missing { dir: dir.to_owned(), what: "CIFAR-10 batch", looked_for: names.join(", ") });
    }
    if paths.len() < names.len() {
        tracing::warn!(dir = %dir.display(), found = paths.len(), "not every CIFAR-10 training batch is there; training on those found");
    }
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for path in &paths {
        let data = read_file(path)?;
        if data.is_empty() || data.len() % CIFAR_RECORD != 0 {
            let whole = data.len() / CIFAR_RECORD * CIFAR_RECORD;
            return Err(DataError::Corrupt {
                path: path.clone(),
                offset: whole as u64,
                reason: format!(
                    "{} bytes is not a whole number of {CIFAR_RECORD}-byte records (1 label + 3072 pixels): \
                     the record at byte {whole} is short; truncated?",
                    data.len()
                ),
            });
        }
        for (r, record) in data.chunks_exact(CIFAR_RECORD).enumerate() {
            if record[0] as usize >= CLASSES {
                return Err(DataError::Corrupt {
                    path: path.clone(),
                    offset: (r * CIFAR_RECORD) as u64,
                    reason: format!("record {r}: label {} is not a class 0..{}", record[0], CLASSES - 1),
                });
            }
            labels.push(record[0]);
            pixels.extend_from_slice(&record[1..]);
        }
    }
    Ok(Dataset::from_parts((3, 32, 32), pixels, labels, CIFAR_MEAN.to_vec(), CIFAR_STD.to_vec()))
}

/// The order in which an epoch visits the `len` training samples: a
/// permutation determined by `(seed, epoch, generation)` alone, the same on
/// every rank and every machine.
///
/// The algorithm is fixed here so that it never changes with a dependency
/// update: ChaCha8 (rand_chacha, whose output is defined by the ChaCha
/// specification) keyed with the little-endian bytes of seed, epoch and
/// generation followed by `b"trainer1"`, drawing `u64`s for a Fisher-Yates
/// shuffle from the end, each index reduced with Lemire's multiply-shift
/// method with rejection (unbiased). A unit test pins its output.
pub fn permutation(len: usize, seed: u64, epoch: u64, generation: u64) -> Vec<usize> {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&generation.to_le_bytes());
    key[24..].copy_from_slice(b"trainer1");
    let mut rng = ChaCha8Rng::from_seed(key);
    let mut order: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// A uniform integer in `0..n` (Lemire, "Fast random integer generation in an interval", 2019).
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

/// Rank `rank`'s part of a global batch of `len` samples among `world`
/// ranks: the `rank`-th contiguous slice, sizes differing by at most one
/// (the first `len % world` ranks take one more).
pub fn shard(len: usize, rank: usize, world: usize) -> Range<usize> {
    let (base, extra) = (len / world, len % world);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(magic: u32, dims: &[u32], payload: &[u8]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(payload);
        v
    }

    fn write_mnist(dir: &Path, n: u32, labels: &[u8]) {
        let pixels: Vec<u8> = (0..n * 4).map(|i| (i * 37 % 256) as u8).collect();
        std::fs::write(dir.join("train-images-idx3-ubyte"), idx(0x803, &[n, 2, 2], &pixels)).unwrap();
        std::fs::write(dir.join("train-labels-idx1-ubyte"), idx(0x801, &[labels.len() as u32], labels)).unwrap();
    }

    #[test]
    fn reads_small_mnist_and_normalises() {
        let dir = tempfile::tempdir().unwrap();
        write_mnist(dir.path(), 3, &[1, 2, 3]);
        assert_eq!(detect(dir.path()).unwrap(), Format::Mnist);
        let d = load(dir.path(), None, Split::Train).unwrap();
        assert_eq!((d.len(), d.channels, d.height, d.width), (3, 1, 2, 2));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        d.gather(&[2, 0], &mut x, &mut y);
        assert_eq!(y, [3, 1]);
        // Sample 2's first pixel is byte 8 of the payload: 8 * 37 % 256 = 40.
        assert!((x[0] - (40.0 / 255.0 - 0.1307) / 0.3081).abs() < 1e-6, "{}", x[0]);
        assert_eq!(x.len(), 8);
    }

    #[test]
    fn mnist_errors_name_the_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        write_mnist(dir.path(), 3, &[1, 2]);
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("3 images") && e.contains("2 labels") && e.contains("train-labels-idx1-ubyte"), "{e}");

        write_mnist(dir.path(), 3, &[1, 2, 11]);
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("train-labels-idx1-ubyte: at byte 10: label 11"), "{e}");

        std::fs::write(dir.path().join("train-images-idx3-ubyte"), idx(0x801, &[3, 2, 2], &[0; 12])).unwrap();
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("train-images-idx3-ubyte: at byte 0: magic number 0x00000801"), "{e}");

        std::fs::write(dir.path().join("train-images-idx3-ubyte"), idx(0x803, &[3, 2, 2], &[0; 11])).unwrap();
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("at byte 27") && e.contains("need 28 bytes but the file has 27: truncated"), "{e}");

        std::fs::write(dir.path().join("train-images-idx3-ubyte"), &idx(0x803, &[3], &[])[..6]).unwrap();
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("file ends inside the header"), "{e}");
    }

    #[test]
    fn a_gzip_bomb_is_read_no_further_than_its_header_says() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        // A valid header and payload, then 96 MiB of zeros (96 KiB compressed).
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&idx(0x803, &[3, 2, 2], &[0; 12])).unwrap();
        for _ in 0..96 {
            gz.write_all(&[0u8; 1 << 20]).unwrap();
        }
        let mut bytes = gz.finish().unwrap();
        // Without its trailer, a reader that decompressed everything would
        // fail with bad gzip data at the end; this one stops 64 MiB past the
        // payload (GZIP_DRAIN_BYTES), discarding as it goes, and never gets there.
        bytes.truncate(bytes.len() - 8);
        std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), &bytes).unwrap();
        std::fs::write(dir.path().join("train-labels-idx1-ubyte"), idx(0x801, &[3], &[1, 2, 3])).unwrap();
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("at byte 28: dimensions [3, 2, 2] need 28 bytes but the file goes on after them"), "{e}");

        // A header that declares more than a dataset file may hold is refused before any payload is read.
        std::fs::remove_file(dir.path().join("train-images-idx3-ubyte.gz")).unwrap();
        std::fs::write(dir.path().join("train-images-idx3-ubyte"), idx(0x803, &[100_000, 1000, 1000], &[])).unwrap();
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("are too large (more than the 4 GiB"), "{e}");
    }

    #[test]
    fn detect_lists_what_it_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path(), None, Split::Train).unwrap_err().to_string();
        assert!(e.contains("train-images-idx3-ubyte.gz") && e.contains("data_batch_1.bin"), "{e}");
        let e = load(dir.path(), Some(Format::Cifar10), Split::Test).unwrap_err().to_string();
        assert!(e.contains("test_batch.bin"), "{e}");
    }

    #[test]
    fn cifar_short_record_and_bad_label() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = vec![0u8; 2 * CIFAR_RECORD];
        data[CIFAR_RECORD] = 7;
        std::fs::write(dir.path().join("test_batch.bin"), &data).unwrap();
        let d = load(dir.path(), Some(Format::Cifar10), Split::Test).unwrap();
        assert_eq!((d.len(), d.labels()), (2, &[0u8, 7][..]));

        std::fs::write(dir.path().join("test_batch.bin"), &data[..CIFAR_RECORD + 100]).unwrap();
        let e = load(dir.path(), Some(Format::Cifar10), Split::Test).unwrap_err().to_string();
        assert!(e.contains("test_batch.bin: at byte 3073") && e.contains("short"), "{e}");

        data[CIFAR_RECORD] = 10;
        std::fs::write(dir.path().join("test_batch.bin"), &data).unwrap();
        let e = load(dir.path(), Some(Format::Cifar10), Split::Test).unwrap_err().to_string();
        assert!(e.contains("at byte 3073: record 1: label 10"), "{e}");
    }

    #[test]
    fn permutation_is_pinned_and_depends_on_every_input() {
        let p = permutation(10, 1, 2, 3);
        // Pinned: a change here reshuffles every user's training run.
        assert_eq!(p, PINNED);
        let mut sorted = permutation(1000, 7, 0, 0);
        assert_ne!(sorted, (0..1000).collect::<Vec<_>>());
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(permutation(50, 1, 2, 3), permutation(50, 2, 2, 3));
        assert_ne!(permutation(50, 1, 2, 3), permutation(50, 1, 3, 3));
        assert_ne!(permutation(50, 1, 2, 3), permutation(50, 1, 2, 4));
        assert_eq!(permutation(50, 1, 2, 3), permutation(50, 1, 2, 3));
    }
    const PINNED: [usize; 10] = [6, 7, 9, 0, 3, 1, 4, 5, 2, 8];

    #[test]
    fn shards_cover_the_batch_in_order() {
        for len in [0, 1, 5, 64, 67] {
            for world in 1..=5 {
                let parts: Vec<_> = (0..world).map(|r| shard(len, r, world)).collect();
                assert_eq!(parts[0].start, 0);
                assert_eq!(parts[world - 1].end, len);
                for w in parts.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() - w[1].len() <= 1);
                }
            }
        }
    }
}
