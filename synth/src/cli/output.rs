//! Writing results: to stdout, or atomically to a file (temporary file in the
//! same directory, fsync, rename), so a failed run never leaves a partial
//! template behind.

use std::io::{self, Write};
use std::path::Path;

/// Writes `text` to `path` atomically, or to stdout when `path` is `None`.
pub(super) fn write(path: Option<&Path>, text: &str) -> io::Result<()> {
    match path {
        None => {
            let mut out = io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()
        }
        Some(path) => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let mut file = tempfile::Builder::new().prefix(".synth-").suffix(".tmp").tempfile_in(dir)?;
            file.write_all(text.as_bytes())?;
            file.as_file().sync_all()?;
            file.persist(path).map_err(|e| e.error)?;
            Ok(())
        }
    }
}

/// Whether an error is stdout closing early (`synth build x | head`), which is not a failure.
pub(super) fn is_broken_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}
