//! Checkpoints of the training state, written by rank 0 into the checkpoint
//! directory (default `$EFS_MOUNT/trainer/<job>/checkpoints`, see
//! [`jobdir`](crate::jobdir)), and resume from the newest valid one.
//!
//! One file per epoch, `checkpoint-epoch-NNNNNN.ckpt` (after NNNNNN
//! epochs), and one per mid-epoch leave, `checkpoint-epoch-NNNNNN-step-SSSSSSSSS.ckpt`
//! (SSSSSSSSS steps into the epoch after NNNNNN, written when a rank left
//! there: [`super::epochs`]); the last K of all of them are kept.
//! A write is atomic: a hidden temp file in the same directory, fsync, rename
//! over the final name, fsync of the directory; so a reader sees either the
//! whole new file or none of it, even when the writer is killed. Every file is
//! checksummed, so a file damaged later (a flipped byte, a truncated copy) is
//! recognised and skipped on resume with a warning naming it.
//!
//! File layout (little-endian):
//!
//! ```text
//! magic  b"TRAINCKP"  8 bytes
//! version u32         FORMAT_VERSION
//! body_len u64        bytes after this header
//! crc32c u32          CRC-32C of magic, version, body_len and body
//! body:
//!   meta_len u32, meta (JSON: model, dataset shape, hyper-parameters)
//!   epoch u64, step u64
//!   epoch_step u64, generation u64       (version 2 only)
//!   params_len u64, params (f32 each)
//!   momentum_len u64, momentum (f32 each)
//! ```
//!
//! `epoch_step` is how many steps of the epoch after `epoch` the state has
//! run (0 at a boundary), and `generation` the membership generation whose
//! permutation that epoch follows, so a resume goes on with the same
//! remaining samples. A version 1 file (written before mid-epoch leaves)
//! still loads, as a boundary checkpoint.
//!
//! Files touched: the checkpoint directory only (created when missing).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::engine::TrainState;

/// The format this build writes (it reads this one and version 1).
pub const FORMAT_VERSION: u32 = 2;
/// Checkpoints kept when `--keep-checkpoints` is not given.
pub const DEFAULT_KEEP: usize = 3;

const MAGIC: &[u8; 8] = b"TRAINCKP";
const HEADER_LEN: usize = 8 + 4 + 8 + 4;
const PREFIX: &str = "checkpoint-epoch-";
const SUFFIX: &str = ".ckpt";
/// Temp files start with this (hidden, and never matching [`PREFIX`]).
const TEMP_PREFIX: &str = ".checkpoint-epoch-";
/// Between the epoch and the step in a mid-epoch checkpoint's name.
const STEP_INFIX: &str = "-step-";

/// The checkpoint flags of `trainer train` (flatten into its `Args`).
#[derive(Debug, Clone, clap::Args)]
// Flattened into `trainer train`: no group of its own (its name, `Args`, would clash).
#[group(skip)]
pub struct Args {
    /// Where rank 0 writes checkpoints (one per epoch); default:
    /// `$EFS_MOUNT/trainer/<job>/checkpoints`, so every node sees them.
    #[arg(long, value_name = "DIR", help_heading = "Checkpoints")]
    pub checkpoint_dir: Option<PathBuf>,
    /// How many of the newest checkpoints to keep; older ones are deleted
    /// after each successful write.
    #[arg(long, default_value_t = DEFAULT_KEEP, value_parser = parse_keep, value_name = "K", help_heading = "Checkpoints")]
    pub keep_checkpoints: usize,
    /// Continue from the newest valid checkpoint in the checkpoint directory
    /// (a corrupt one is skipped with a warning; none at all starts afresh).
    #[arg(long, help_heading = "Checkpoints")]
    pub resume: bool,
}

impl Args {
    /// The checkpoint store these flags describe.
    pub fn store(&self) -> Store {
        Store::new(
            self.checkpoint_dir.clone().unwrap_or_else(|| crate::jobdir::path("checkpoints")),
            self.keep_checkpoints,
        )
    }
}

fn parse_keep(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(k) if k >= 1 => Ok(k),
        _ => Err(format!("`{s}` is not a count of at least 1 (the newest checkpoint is always kept)")),
    }
}

/// The shape of the dataset a model was trained on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetShape {
    /// The dataset format, e.g. `mnist` or `cifar10`.
    pub format: String,
    /// Channels per image.
    pub channels: u32,
    /// Image height in pixels.
    pub height: u32,
    /// Image width in pixels.
    pub width: u32,
    /// Number of classes.
    pub classes: u32,
}

impl std::fmt::Display for DatasetShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}x{}x{}, {} classes", self.format, self.channels, self.height, self.width, self.classes)
    }
}

/// The hyper-parameters a checkpoint was made with. A resume with other
/// values is allowed (a deliberate change) and logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hyper {
    /// Learning rate.
    pub lr: f32,
    /// SGD momentum.
    pub momentum: f32,
    /// Weight decay.
    pub weight_decay: f32,
    /// Global batch size.
    pub batch_size: u64,
    /// Shuffling and initialisation seed.
    pub seed: u64,
}

/// What a checkpoint is of: checked on resume before its state is used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The model name (`mlp`, `lenet`).
    pub model: String,
    /// The dataset it was trained on.
    pub dataset: DatasetShape,
    /// The hyper-parameters.
    pub hyper: Hyper,
}

/// Where in the epoch after `state.epoch` a checkpoint was taken: after
/// `step` steps, of the permutation of `generation`. Zero at a boundary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InEpoch {
    /// Steps of the epoch already run (0: none, a boundary checkpoint).
    pub step: u64,
    /// The membership generation whose permutation the epoch follows.
    pub generation: u64,
}

/// A checkpoint: what it is of, the state, and where in its epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// What it is of.
    pub meta: Meta,
    /// The training state.
    pub state: TrainState,
    /// Where in the epoch (zero for a boundary checkpoint).
    pub in_epoch: InEpoch,
}

/// A checkpoint could not be written or used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The directory could not be created, listed or synced.
    #[error("checkpoint directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing (or renaming) a checkpoint failed; the previous ones are intact.
    #[error("writing checkpoint {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A checkpoint could not be read.
    #[error("reading checkpoint {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is damaged (resume skips it).
    #[error("checkpoint {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file is intact but in a format this build does not know.
    #[error(
        "checkpoint {path} has format version {found}; this trainer reads versions 1 to {FORMAT_VERSION}: resume with the trainer that wrote it, or use another --checkpoint-dir"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The newest valid checkpoint is of another model or dataset.
    #[error(
        "checkpoint {path} is of {found}, but this run trains {wanted}: use another --checkpoint-dir, or run without --resume"
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What the checkpoint is of.
        found: String,
        /// What this run trains.
        wanted: String,
    },
}

/// A checkpoint directory and how many checkpoints it keeps.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    keep: usize,
}

impl Store {
    /// The store in `dir`, keeping the newest `keep` (at least 1) checkpoints.
    /// Nothing is touched until the first save.
    pub fn new(dir: impl Into<PathBuf>, keep: usize) -> Self {
        Self { dir: dir.into(), keep: keep.max(1) }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the directory and proves a file can be written in it, so that
    /// a `--checkpoint-dir` that is a file, or read-only, fails before the
    /// first epoch rather than after it.
    pub fn check_writable(&self) -> Result<(), CheckpointError> {
        if self.dir.exists() && !self.dir.is_dir() {
            let source = std::io::Error::new(std::io::ErrorKind::NotADirectory, "it exists and is not a directory");
            return Err(CheckpointError::Dir { path: self.dir.clone(), source });
        }
        fs::create_dir_all(&self.dir).map_err(|source| CheckpointError::Dir { path: self.dir.clone(), source })?;
        let probe = self.dir.join(format!("{TEMP_PREFIX}probe.tmp.{}", std::process::id()));
        fs::write(&probe, b"").map_err(|source| CheckpointError::Write { path: probe.clone(), source })?;
        let _ = fs::remove_file(&probe);
        Ok(())
    }

    /// The file a checkpoint after `epoch` epochs is named.
    pub fn path_for(&self, epoch: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{epoch:06}{SUFFIX}"))
    }

    /// The file a checkpoint `in_epoch.step` steps into the epoch after
    /// `epoch` is named (the boundary's name for step 0).
    pub fn path_at(&self, epoch: u64, in_epoch: InEpoch) -> PathBuf {
        match in_epoch.step {
            0 => self.path_for(epoch),
            step => self.dir.join(format!("{PREFIX}{epoch:06}{STEP_INFIX}{step:09}{SUFFIX}")),
        }
    }

    /// Writes `state` atomically as the checkpoint of `state.epoch` (replacing
    /// one of the same epoch), then deletes all but the newest K checkpoints
    /// and temp files left by writers that were killed. Returns the file.
    pub fn save(&self, meta: &Meta, state: &TrainState) -> Result<PathBuf, CheckpointError> {
        self.save_at(meta, state, InEpoch::default())
    }

    /// [`save`](Self::save) of a state `in_epoch.step` steps into the epoch
    /// after `state.epoch` (a mid-epoch leave), under [`path_at`](Self::path_at).
    pub fn save_at(&self, meta: &Meta, state: &TrainState, in_epoch: InEpoch) -> Result<PathBuf, CheckpointError> {
        fs::create_dir_all(&self.dir).map_err(|source| CheckpointError::Dir { path: self.dir.clone(), source })?;
        let path = self.path_at(state.epoch, in_epoch);
        let temp = self.dir.join(format!(
            "{TEMP_PREFIX}{:06}{STEP_INFIX}{}{SUFFIX}.tmp.{}",
            state.epoch,
            in_epoch.step,
            std::process::id()
        ));
        let bytes = encode(meta, state, in_epoch);
        let written = write_synced(&temp, &bytes).and_then(|()| fs::rename(&temp, &path));
        if let Err(source) = written {
            let _ = fs::remove_file(&temp);
            return Err(CheckpointError::Write { path, source });
        }
        // The rename is durable only once the directory entry is on disk.
        sync_dir(&self.dir)?;
        tracing::info!(path = %path.display(), bytes = bytes.len(), "checkpoint written");
        self.prune()?;
        Ok(path)
    }

    /// The newest checkpoint that reads back intact, skipping damaged ones
    /// with a warning naming each; `None` when there is none (or no directory).
    pub fn latest(&self) -> Result<Option<(PathBuf, Checkpoint)>, CheckpointError> {
        for (_, path) in self.list()?.into_iter().rev() {
            match load(&path) {
                Ok(checkpoint) => return Ok(Some((path, checkpoint))),
                Err(CheckpointError::Corrupt { path, reason }) => {
                    tracing::warn!(path = %path.display(), %reason, "skipping a corrupt checkpoint");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// [`latest`](Self::latest), checked against what this run trains: another
    /// model or dataset is an error; other hyper-parameters are logged.
    pub fn resume(&self, wanted: &Meta) -> Result<Option<Checkpoint>, CheckpointError> {
        let Some((path, checkpoint)) = self.latest()? else { return Ok(None) };
        let found = &checkpoint.meta;
        if found.model != wanted.model || found.dataset != wanted.dataset {
            return Err(CheckpointError::Mismatch {
                path,
                found: format!("model `{}` on {}", found.model, found.dataset),
                wanted: format!("model `{}` on {}", wanted.model, wanted.dataset),
            });
        }
        // Mid-epoch, the place is a count of steps of one shuffle: another
        // batch size or seed would skip or repeat samples.
        let (was, now) = (&found.hyper, &wanted.hyper);
        if checkpoint.in_epoch.step > 0 && (was.batch_size != now.batch_size || was.seed != now.seed) {
            return Err(CheckpointError::Mismatch {
                path,
                found: format!(
                    "a stop {} steps into an epoch with batch size {} and seed {}",
                    checkpoint.in_epoch.step, was.batch_size, was.seed
                ),
                wanted: format!("batch size {} and seed {}", now.batch_size, now.seed),
            });
        }
        if found.hyper != wanted.hyper {
            tracing::warn!(
                path = %path.display(),
                checkpoint = ?found.hyper,
                now = ?wanted.hyper,
                "resuming with other hyper-parameters than the checkpoint was made with"
            );
        }
        Ok(Some(checkpoint))
    }

    /// The checkpoints in the directory, oldest first, by epoch and step.
    fn list(&self) -> Result<Vec<(Place, PathBuf)>, CheckpointError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(CheckpointError::Dir { path: self.dir.clone(), source }),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| CheckpointError::Dir { path: self.dir.clone(), source })?;
            let name = entry.file_name();
            if let Some(at) = name.to_str().and_then(position_in_name) {
                found.push((at, entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Deletes all but the newest K checkpoints, and temp files of killed writers.
    fn prune(&self) -> Result<(), CheckpointError> {
        let all = self.list()?;
        let old = all.len().saturating_sub(self.keep);
        for (_, path) in &all[..old] {
            remove(path);
        }
        // Only rank 0 writes, one save at a time: any temp file now is a leftover.
        let entries =
            fs::read_dir(&self.dir).map_err(|source| CheckpointError::Dir { path: self.dir.clone(), source })?;
        for entry in entries.flatten() {
            if entry.file_name().to_str().is_some_and(|n| n.starts_with(TEMP_PREFIX)) {
                remove(&entry.path());
            }
        }
        Ok(())
    }
}

/// Where a checkpoint file is in the run: (epochs completed, steps into the next).
type Place = (u64, u64);

/// The [`Place`] in a checkpoint's file name; `None` for any other name.
fn position_in_name(name: &str) -> Option<Place> {
    let rest = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let digits = |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u64>().ok())?;
    match rest.split_once(STEP_INFIX) {
        None => Some((digits(rest)?, 0)),
        Some((epoch, step)) => Some((digits(epoch)?, digits(step)?)).filter(|&(_, s)| s > 0),
    }
}

/// Best-effort delete: a file that cannot be deleted costs space, not correctness.
fn remove(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => tracing::debug!(path = %path.display(), "deleted"),
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "could not delete an old checkpoint file"),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|source| CheckpointError::Dir { path: dir.to_owned(), source })
}

/// Reads and verifies one checkpoint file.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = fs::read(path).map_err(|source| CheckpointError::Read { path: path.to_owned(), source })?;
    decode(&bytes).map_err(|e| match e {
        Decode::Corrupt(reason) => CheckpointError::Corrupt { path: path.to_owned(), reason },
        Decode::Version(found) => CheckpointError::Version { path: path.to_owned(), found },
    })
}

/// The whole file for `meta`, `state` and where in its epoch.
pub fn encode(meta: &Meta, state: &TrainState, in_epoch: InEpoch) -> Vec<u8> {
    let meta = serde_json::to_vec(meta).expect("the checkpoint metadata is plain data and always serialises");
    let body_len = 4 + meta.len() + 8 + 8 + 8 + 8 + 8 + 4 * state.params.len() + 8 + 4 * state.momentum.len();
    let mut out = Vec::with_capacity(HEADER_LEN + body_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body_len as u64).to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the checksum, filled in below
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&state.epoch.to_le_bytes());
    out.extend_from_slice(&state.step.to_le_bytes());
    out.extend_from_slice(&in_epoch.step.to_le_bytes());
    out.extend_from_slice(&in_epoch.generation.to_le_bytes());
    for values in [&state.params, &state.momentum] {
        out.extend_from_slice(&(values.len() as u64).to_le_bytes());
        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    let crc = checksum(&out);
    out[20..24].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Why bytes are not a checkpoint this build can use.
enum Decode {
    Corrupt(String),
    Version(u32),
}

/// CRC-32C of everything but the checksum field itself.
fn checksum(file: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&file[..20]), &file[HEADER_LEN..])
}

fn decode(bytes: &[u8]) -> Result<Checkpoint, Decode> {
    let corrupt = |reason: String| Decode::Corrupt(reason);
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(format!("{} bytes, shorter than the {HEADER_LEN}-byte header", bytes.len())));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt("not a trainer checkpoint (bad magic bytes)".into()));
    }
    let mut header = Reader { bytes: &bytes[8..HEADER_LEN], at: 8 };
    let version = header.u32()?;
    let body_len = header.u64()?;
    let stored = header.u32()?;
    let expected = HEADER_LEN as u64 + body_len;
    if bytes.len() as u64 != expected {
        return Err(corrupt(format!("{} bytes, the header says {expected} (truncated or appended to)", bytes.len())));
    }
    let actual = checksum(bytes);
    if actual != stored {
        return Err(corrupt(format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})")));
    }
    // Checked after the checksum: a damaged version field is corruption, not a newer format.
    if version != 1 && version != FORMAT_VERSION {
        return Err(Decode::Version(version));
    }
    let mut body = Reader { bytes: &bytes[HEADER_LEN..], at: HEADER_LEN };
    let meta_len = body.u32()? as usize;
    let meta = serde_json::from_slice(body.take(meta_len)?)
        .map_err(|e| corrupt(format!("metadata at offset {HEADER_LEN}: {e}")))?;
    let epoch = body.u64()?;
    let step = body.u64()?;
    let in_epoch =
        if version == 1 { InEpoch::default() } else { InEpoch { step: body.u64()?, generation: body.u64()? } };
    let params = body.floats()?;
    let momentum = body.floats()?;
    if body.at != bytes.len() {
        return Err(corrupt(format!("{} unread bytes at offset {}", bytes.len() - body.at, body.at)));
    }
    Ok(Checkpoint { meta, state: TrainState { params, momentum, epoch, step }, in_epoch })
}

/// A cursor over a byte slice that reports where it ran short.
struct Reader<'a> {
    bytes: &'a [u8],
    /// Offset in the file, for messages.
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Decode> {
        if n > self.bytes.len() {
            return Err(Decode::Corrupt(format!("needs {n} bytes at offset {}, {} left", self.at, self.bytes.len())));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        self.at += n;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, Decode> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("took 4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, Decode> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("took 8 bytes")))
    }

    fn floats(&mut self) -> Result<Vec<f32>, Decode> {
        let n = self.u64()?;
        let len = usize::try_from(n).ok().and_then(|n| n.checked_mul(4)).unwrap_or(usize::MAX);
        let raw = self.take(len)?;
        Ok(raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("chunks of 4"))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(model: &str) -> Meta {
        Meta {
            model: model.into(),
            dataset: DatasetShape { format: "mnist".into(), channels: 1, height: 28, width: 28, classes: 10 },
            hyper: Hyper { lr: 0.05, momentum: 0.9, weight_decay: 1e-4, batch_size: 64, seed: 7 },
        }
    }

    fn state(epoch: u64, len: usize) -> TrainState {
        TrainState {
            params: (0..len).map(|i| i as f32 * 0.5 - epoch as f32).collect(),
            momentum: (0..len).map(|i| -(i as f32) / 3.0).collect(),
            epoch,
            step: epoch * 100,
        }
    }

    #[test]
    fn round_trip_and_newest_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("ck"), 3);
        assert!(store.latest().unwrap().is_none(), "no directory yet");
        for epoch in 1..=2 {
            store.save(&meta("mlp"), &state(epoch, 1000)).unwrap();
        }
        let (path, got) = store.latest().unwrap().unwrap();
        assert_eq!(path, store.path_for(2));
        assert_eq!(got, Checkpoint { meta: meta("mlp"), state: state(2, 1000), in_epoch: InEpoch::default() });
        assert_eq!(store.resume(&meta("mlp")).unwrap().unwrap().state, state(2, 1000));
    }

    /// Damage the newest file in each way: resume falls back to the one before.
    #[test]
    fn corrupt_files_are_skipped() {
        type Damage = fn(&Path);
        let cases: [(&str, Damage); 4] = [
            ("flipped byte", |p| {
                let mut b = fs::read(p).unwrap();
                let mid = b.len() / 2;
                b[mid] ^= 0x10;
                fs::write(p, b).unwrap();
            }),
            ("flipped version byte", |p| {
                let mut b = fs::read(p).unwrap();
                b[8] ^= 1;
                fs::write(p, b).unwrap();
            }),
            ("truncated", |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..b.len() - 7]).unwrap();
            }),
            ("zero length", |p| fs::write(p, b"").unwrap()),
        ];
        for (what, damage) in cases {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::new(dir.path(), 5);
            store.save(&meta("lenet"), &state(1, 300)).unwrap();
            let newest = store.save(&meta("lenet"), &state(2, 300)).unwrap();
            damage(&newest);
            assert!(matches!(load(&newest), Err(CheckpointError::Corrupt { .. })), "{what}");
            let (path, got) = store.latest().unwrap().unwrap_or_else(|| panic!("{what}: nothing found"));
            assert_eq!((path, got.state), (store.path_for(1), state(1, 300)), "{what}");
        }
    }

    #[test]
    fn leftover_temp_files_are_ignored_then_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), 3);
        store.save(&meta("mlp"), &state(1, 10)).unwrap();
        // What a writer killed before its rename leaves: a whole-looking newer file under the temp name.
        let leftover = dir.path().join(format!("{TEMP_PREFIX}000002{SUFFIX}.tmp.4242"));
        fs::write(&leftover, encode(&meta("mlp"), &state(2, 10), InEpoch::default())).unwrap();
        assert_eq!(store.latest().unwrap().unwrap().1.state.epoch, 1);
        store.save(&meta("mlp"), &state(3, 10)).unwrap();
        assert!(!leftover.exists(), "the next save removes it");
    }

    #[test]
    fn keeps_the_newest_k() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), 2);
        for epoch in [3, 1, 4, 2, 5] {
            store.save(&meta("mlp"), &state(epoch, 4)).unwrap();
        }
        let mut names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["checkpoint-epoch-000004.ckpt", "checkpoint-epoch-000005.ckpt"]);
    }

    #[test]
    fn another_model_or_dataset_is_an_error_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), 3);
        store.save(&meta("lenet"), &state(1, 4)).unwrap();
        let err = store.resume(&meta("mlp")).unwrap_err().to_string();
        assert!(err.contains("model `lenet` on mnist 1x28x28") && err.contains("trains model `mlp`"), "{err}");
        let mut cifar = meta("lenet");
        cifar.dataset = DatasetShape { format: "cifar10".into(), channels: 3, height: 32, width: 32, classes: 10 };
        let err = store.resume(&cifar).unwrap_err().to_string();
        assert!(err.contains("cifar10 3x32x32"), "{err}");
        // Other hyper-parameters are a deliberate change, not an error.
        let mut other_lr = meta("lenet");
        other_lr.hyper.lr = 0.1;
        assert!(store.resume(&other_lr).unwrap().is_some());
        // So are another batch size or seed at an epoch's boundary; but a
        // stop mid-epoch counts steps of one shuffle, so there they would
        // skip or repeat samples: refused.
        let mut other_batch = meta("lenet");
        other_batch.hyper.batch_size += 1;
        assert!(store.resume(&other_batch).unwrap().is_some());
        store.save_at(&meta("lenet"), &state(1, 6), InEpoch { step: 2, generation: 1 }).unwrap();
        assert_eq!(store.resume(&other_lr).unwrap().unwrap().in_epoch.step, 2);
        let err = store.resume(&other_batch).unwrap_err().to_string();
        assert!(err.contains("2 steps into an epoch") && err.contains("without --resume"), "{err}");
        let mut other_seed = meta("lenet");
        other_seed.hyper.seed += 1;
        assert!(store.resume(&other_seed).is_err());
    }

    #[test]
    fn an_intact_file_of_another_version_is_an_error_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), 3);
        let path = store.save(&meta("mlp"), &state(1, 4)).unwrap();
        let mut b = fs::read(&path).unwrap();
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = checksum(&b);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        fs::write(&path, b).unwrap();
        let err = store.latest().unwrap_err().to_string();
        assert!(err.contains("format version 3") && err.contains("reads versions 1 to 2"), "{err}");
    }

    /// A version 1 file, as the trainer before mid-epoch checkpoints wrote it.
    fn encode_v1(meta: &Meta, state: &TrainState) -> Vec<u8> {
        let v2 = encode(meta, state, InEpoch::default());
        let meta_len = u32::from_le_bytes(v2[HEADER_LEN..HEADER_LEN + 4].try_into().unwrap()) as usize;
        // Drop the two u64 after epoch and step; fix the version, length and checksum.
        let cut = HEADER_LEN + 4 + meta_len + 16;
        let mut v1 = [&v2[..cut], &v2[cut + 16..]].concat();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let body_len = (v1.len() - HEADER_LEN) as u64;
        v1[12..20].copy_from_slice(&body_len.to_le_bytes());
        let crc = checksum(&v1);
        v1[20..24].copy_from_slice(&crc.to_le_bytes());
        v1
    }

    #[test]
    fn a_version_1_file_still_loads_as_a_boundary_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), 3);
        fs::write(store.path_for(4), encode_v1(&meta("mlp"), &state(4, 50))).unwrap();
        let (_, got) = store.latest().unwrap().unwrap();
        assert_eq!(got, Checkpoint { meta: meta("mlp"), state: state(4, 50), in_epoch: InEpoch::default() });
    }

    /// A mid-epoch checkpoint sorts after its epoch's boundary and before
    /// the next; it round-trips its place in the epoch; pruning counts it.
    #[test]
    fn mid_epoch_checkpoints_order_between_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), 3);
        store.save(&meta("mlp"), &state(2, 8)).unwrap();
        let at = InEpoch { step: 17, generation: 5 };
        let mid = store.save_at(&meta("mlp"), &state(2, 8), at).unwrap();
        assert_eq!(mid.file_name().unwrap(), "checkpoint-epoch-000002-step-000000017.ckpt");
        let (path, got) = store.latest().unwrap().unwrap();
        assert_eq!((path, got.in_epoch, got.state), (mid.clone(), at, state(2, 8)));
        store.save(&meta("mlp"), &state(3, 8)).unwrap();
        assert_eq!(store.latest().unwrap().unwrap().0, store.path_for(3));
        store.save(&meta("mlp"), &state(4, 8)).unwrap();
        let mut names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        let want = [
            "checkpoint-epoch-000002-step-000000017.ckpt",
            "checkpoint-epoch-000003.ckpt",
            "checkpoint-epoch-000004.ckpt",
        ];
        assert_eq!(names, want);
        for (name, want) in [
            ("checkpoint-epoch-000002.ckpt", Some((2, 0))),
            ("checkpoint-epoch-000002-step-000000017.ckpt", Some((2, 17))),
            ("checkpoint-epoch-000002-step-000000000.ckpt", None),
            ("checkpoint-epoch-000002-step-.ckpt", None),
            ("checkpoint-epoch--1.ckpt", None),
            ("checkpoint-epoch-+2.ckpt", None),
        ] {
            assert_eq!(position_in_name(name), want, "{name}");
        }
    }

    #[test]
    fn keep_must_be_at_least_one() {
        assert!(parse_keep("0").unwrap_err().contains("at least 1"));
        assert_eq!(parse_keep("4"), Ok(4));
    }
}
