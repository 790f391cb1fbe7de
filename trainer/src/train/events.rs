//! TensorBoard event files: the training loop's scalars (loss, accuracy,
//! throughput) per epoch, written by rank 0 under
//! `$EFS_MOUNT/trainer/<job>/tb/` (or `--tb-dir`), where `tensorboard
//! --logdir` on any node (or a copy) shows them.
//!
//! The format is TensorFlow's: a file named `events.out.tfevents.<secs>.<host>.<pid>`
//! holding TFRecords (u64 length, masked CRC-32C of the length, the data,
//! masked CRC-32C of the data), each an `Event` protobuf; the first names the
//! file version, the rest carry `Summary` values with `simple_value`. The
//! three messages are declared here with prost's derive (the fields TensorBoard
//! reads, with their numbers from tensorflow/core/util/event.proto and
//! framework/summary.proto); no protoc is needed. The maintained crates do the
//! work: `crc32c` and `prost`. (`tensorboard-rs` exists but is inactive and
//! pulls protobuf 2 and an image crate.)
//!
//! [`read`] decodes a file back, checking every CRC: for the tests and for
//! tools that want the numbers without TensorBoard.
//!
//! Files touched: the one event file this writer creates (and its directory).

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;

/// The scalar tags the training loop writes (TensorBoard groups by the part before `/`).
pub mod tag {
    /// Mean training loss over the epoch.
    pub const TRAIN_LOSS: &str = "train/loss";
    /// Training accuracy, 0..1.
    pub const TRAIN_ACCURACY: &str = "train/accuracy";
    /// Mean loss on the held-out set.
    pub const TEST_LOSS: &str = "test/loss";
    /// Accuracy on the held-out set, 0..1.
    pub const TEST_ACCURACY: &str = "test/accuracy";
    /// Training samples per second, all ranks together.
    pub const THROUGHPUT: &str = "throughput/samples_per_sec";
}

/// The TensorBoard flags of `trainer train` (flatten into its `Args`).
#[derive(Debug, Clone, clap::Args)]
// Flattened into `trainer train`: no group of its own (its name, `Args`, would clash).
#[group(skip)]
pub struct Args {
    /// Where rank 0 writes TensorBoard event files; default:
    /// `$EFS_MOUNT/trainer/<job>/tb` (run `tensorboard --logdir` on it).
    #[arg(long, value_name = "DIR", help_heading = "Metrics")]
    pub tb_dir: Option<PathBuf>,
}

impl Args {
    /// The directory the event file goes into.
    pub fn dir(&self) -> PathBuf {
        self.tb_dir.clone().unwrap_or_else(|| crate::jobdir::path("tb"))
    }
}

/// The protobuf messages, as TensorFlow declares them (only the fields used).
pub mod proto {
    /// `tensorflow.Event`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        /// Seconds since the Unix epoch.
        #[prost(double, tag = "1")]
        pub wall_time: f64,
        /// The global step.
        #[prost(int64, tag = "2")]
        pub step: i64,
        /// What the event carries.
        #[prost(oneof = "What", tags = "3, 5")]
        pub what: Option<What>,
    }

    /// `Event.what` (the variants used).
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum What {
        /// `file_version`, e.g. `brain.Event:2`: the first event of a file.
        #[prost(string, tag = "3")]
        FileVersion(String),
        /// `summary`.
        #[prost(message, tag = "5")]
        Summary(Summary),
    }

    /// `tensorflow.Summary`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Summary {
        /// The values.
        #[prost(message, repeated, tag = "1")]
        pub value: Vec<Value>,
    }

    /// `tensorflow.Summary.Value` with `simple_value`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Value {
        /// The tag (the chart's name).
        #[prost(string, tag = "1")]
        pub tag: String,
        /// The scalar.
        #[prost(float, optional, tag = "2")]
        pub simple_value: Option<f32>,
    }
}

/// The file version TensorBoard expects in the first event.
pub const FILE_VERSION: &str = "brain.Event:2";

/// Writing or reading an event file failed.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The directory or file could not be created.
    #[error("creating TensorBoard event file in {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Appending to the file failed.
    #[error("writing TensorBoard event file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Reading the file failed.
    #[error("reading TensorBoard event file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not intact.
    #[error("TensorBoard event file {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Appends events to one new event file.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates `dir` if needed and a new event file in it, starting with the
    /// file-version event.
    pub fn create(dir: &Path) -> Result<Self, EventsError> {
        let create = |source| EventsError::Create { path: dir.to_owned(), source };
        fs::create_dir_all(dir).map_err(create)?;
        let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        let name = format!(
            "events.out.tfevents.{}.{}.{}",
            unix_now().trunc() as u64,
            if host.is_empty() { "localhost" } else { host },
            std::process::id()
        );
        let path = dir.join(name);
        // create_new: a second writer in the same second and process gets an error, never a shared file.
        let file = File::options().write(true).create_new(true).open(&path).map_err(create)?;
        let mut writer = Self { path, out: BufWriter::new(file) };
        writer.write_event(&proto::Event {
            wall_time: unix_now(),
            step: 0,
            what: Some(proto::What::FileVersion(FILE_VERSION.into())),
        })?;
        writer.flush()?;
        tracing::info!(path = %writer.path.display(), "writing TensorBoard events");
        Ok(writer)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds one event with `values` (tag, value) at `step`. Buffered: call
    /// [`flush`](Self::flush) at epoch ends so TensorBoard sees them.
    pub fn scalars(&mut self, step: u64, values: &[(&str, f64)]) -> Result<(), EventsError> {
        let value =
            values.iter().map(|&(tag, v)| proto::Value { tag: tag.to_owned(), simple_value: Some(v as f32) }).collect();
        self.write_event(&proto::Event {
            wall_time: unix_now(),
            step: i64::try_from(step).unwrap_or(i64::MAX),
            what: Some(proto::What::Summary(proto::Summary { value })),
        })
    }

    /// Writes the buffered events to the file.
    pub fn flush(&mut self) -> Result<(), EventsError> {
        self.out.flush().map_err(|source| EventsError::Write { path: self.path.clone(), source })
    }

    fn write_event(&mut self, event: &proto::Event) -> Result<(), EventsError> {
        let data = event.encode_to_vec();
        let len = (data.len() as u64).to_le_bytes();
        let mut record = Vec::with_capacity(data.len() + 16);
        record.extend_from_slice(&len);
        record.extend_from_slice(&masked_crc(&len).to_le_bytes());
        record.extend_from_slice(&data);
        record.extend_from_slice(&masked_crc(&data).to_le_bytes());
        self.out.write_all(&record).map_err(|source| EventsError::Write { path: self.path.clone(), source })
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "the last TensorBoard events were not written");
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// TFRecord's masked CRC-32C: rotated and offset so that a CRC of data that
/// itself contains CRCs stays well distributed (tensorflow/core/lib/hash/crc32c.h).
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Every event of the file at `path`, checking both CRCs of every record.
pub fn read(path: &Path) -> Result<Vec<proto::Event>, EventsError> {
    let bytes = fs::read(path).map_err(|source| EventsError::Read { path: path.to_owned(), source })?;
    let corrupt = |offset, reason: String| EventsError::Corrupt { path: path.to_owned(), offset, reason };
    let mut events = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 12 {
            return Err(corrupt(at, format!("{} bytes, too short for a record header", rest.len())));
        }
        let (len_bytes, len_crc) = (&rest[..8], u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes")));
        if masked_crc(len_bytes) != len_crc {
            return Err(corrupt(at, "length CRC mismatch".into()));
        }
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
        let len = usize::try_from(len).ok().filter(|&n| n <= rest.len().saturating_sub(16));
        let Some(len) = len else {
            return Err(corrupt(at, "record longer than the rest of the file (truncated)".into()));
        };
        let data = &rest[12..12 + len];
        let data_crc = u32::from_le_bytes(rest[12 + len..16 + len].try_into().expect("4 bytes"));
        if masked_crc(data) != data_crc {
            return Err(corrupt(at, "data CRC mismatch".into()));
        }
        let event = proto::Event::decode(data).map_err(|e| corrupt(at, format!("not an Event protobuf: {e}")))?;
        events.push(event);
        at += 16 + len;
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against bytes TensorFlow writes: every event file it makes starts with
    /// the 24-byte file-version record, whose header is `18 00 .. 00 a3 7f 4b 22`.
    #[test]
    fn masked_crc_matches_tensorflow() {
        assert_eq!(masked_crc(&24u64.to_le_bytes()).to_le_bytes(), [0xa3, 0x7f, 0x4b, 0x22]);
    }

    #[test]
    fn written_scalars_read_back_with_valid_crcs() {
        let dir = tempfile::tempdir().unwrap();
        let path = {
            let mut writer = EventWriter::create(&dir.path().join("tb")).unwrap();
            writer.scalars(1, &[(tag::TRAIN_LOSS, 2.25), (tag::TRAIN_ACCURACY, 0.5)]).unwrap();
            writer.scalars(2, &[(tag::THROUGHPUT, 1234.0)]).unwrap();
            writer.path().to_owned()
        };
        assert!(path.file_name().unwrap().to_str().unwrap().starts_with("events.out.tfevents."));
        let events = read(&path).unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].what, Some(proto::What::FileVersion(FILE_VERSION.into())));
        let scalars: Vec<(i64, String, f32)> = events[1..]
            .iter()
            .flat_map(|e| match &e.what {
                Some(proto::What::Summary(s)) => {
                    s.value.iter().map(|v| (e.step, v.tag.clone(), v.simple_value.unwrap())).collect::<Vec<_>>()
                }
                other => panic!("not a summary: {other:?}"),
            })
            .collect();
        assert_eq!(
            scalars,
            [
                (1, tag::TRAIN_LOSS.to_owned(), 2.25),
                (1, tag::TRAIN_ACCURACY.to_owned(), 0.5),
                (2, tag::THROUGHPUT.to_owned(), 1234.0)
            ]
        );
        assert!(events.iter().all(|e| e.wall_time > 1.5e9));
    }

    #[test]
    fn damaged_records_are_reported_with_their_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = {
            let mut writer = EventWriter::create(dir.path()).unwrap();
            writer.scalars(7, &[(tag::TEST_ACCURACY, 0.97)]).unwrap();
            writer.path().to_owned()
        };
        let good = fs::read(&path).unwrap();
        let first_len = 16 + u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;

        let mut flipped = good.clone();
        flipped[first_len + 14] ^= 1;
        fs::write(&path, &flipped).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("offset {first_len}: data CRC mismatch")), "{err}");

        fs::write(&path, &good[..good.len() - 3]).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }
}
