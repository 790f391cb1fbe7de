//! Where an object's key goes on disk: `dir` joined with the key less the
//! data set's prefix, as `aws s3 sync` writes it, only when that stays
//! inside `dir`. A key with a `..` or `.` segment, an empty segment
//! (`a//b`, a leading `/`), a control character, or one that does not
//! start with the prefix is refused with the key named; a zero-byte key
//! ending in `/` is a console "folder" marker and is skipped.

use std::path::{Path, PathBuf};

/// Why a key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsafe {
    /// It is not under the data set's prefix.
    OutsidePrefix,
    /// Nothing after the prefix.
    Empty,
    /// An empty segment (`//`, or a leading `/`): an absolute path.
    EmptySegment,
    /// A `.` or `..` segment.
    DotSegment,
    /// A control character (NUL included).
    Control,
}

impl std::fmt::Display for Unsafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unsafe::OutsidePrefix => "it is not under the data set's prefix",
            Unsafe::Empty => "it names nothing after the prefix",
            Unsafe::EmptySegment => "it has an empty segment (`//` or a leading `/`)",
            Unsafe::DotSegment => "it has a `.` or `..` segment",
            Unsafe::Control => "it has a control character",
        })
    }
}

/// Whether a listed object is a folder marker (a zero-byte key ending in
/// `/`): nothing to write.
pub(crate) fn is_folder_marker(key: &str, size: u64) -> bool {
    size == 0 && key.ends_with('/')
}

/// The path under `dir` that `key` (under `prefix`) is written to.
pub(crate) fn path_in(dir: &Path, prefix: &str, key: &str) -> Result<PathBuf, Unsafe> {
    let rest = key.strip_prefix(prefix).ok_or(Unsafe::OutsidePrefix)?;
    if rest.is_empty() {
        return Err(Unsafe::Empty);
    }
    if rest.chars().any(char::is_control) {
        return Err(Unsafe::Control);
    }
    let mut path = dir.to_path_buf();
    for segment in rest.split('/') {
        match segment {
            "" => return Err(Unsafe::EmptySegment),
            "." | ".." => return Err(Unsafe::DotSegment),
            s => path.push(s),
        }
    }
    Ok(path)
}

/// The temporary name a file is written under until it is complete: in
/// the same directory (so the rename is atomic), hidden, with a suffix.
pub(crate) fn partial_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.dl-partial"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_would_escape_the_directory_are_refused() {
        let dir = Path::new("/scratch/imagenet");
        assert_eq!(path_in(dir, "in/", "in/train/n01/a.jpg"), Ok(PathBuf::from("/scratch/imagenet/train/n01/a.jpg")));
        assert_eq!(path_in(dir, "", ".hidden/x"), Ok(PathBuf::from("/scratch/imagenet/.hidden/x")));
        let cases: &[(&str, Unsafe)] = &[
            ("in/../../etc/passwd", Unsafe::DotSegment),
            ("in/a/./b", Unsafe::DotSegment),
            ("in/..", Unsafe::DotSegment),
            ("in//etc/passwd", Unsafe::EmptySegment),
            ("in/a//b", Unsafe::EmptySegment),
            ("in/a/", Unsafe::EmptySegment),
            ("in/", Unsafe::Empty),
            ("other/a", Unsafe::OutsidePrefix),
            ("in/a\0b", Unsafe::Control),
            ("in/a\nb", Unsafe::Control),
        ];
        for (key, why) in cases {
            assert_eq!(path_in(dir, "in/", key), Err(*why), "{key:?}");
        }
        assert!(is_folder_marker("in/train/", 0) && !is_folder_marker("in/train/", 1));
        assert_eq!(partial_path(Path::new("/d/a.jpg")), PathBuf::from("/d/.a.jpg.dl-partial"));
    }
}
