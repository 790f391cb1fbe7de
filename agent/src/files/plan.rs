//! A plan: the files for one manifest as seen by one node, with their
//! content, mode and owner, as [`super::plan()`] makes it and
//! [`super::apply()`] writes it. Nothing here touches the file system.

use std::path::PathBuf;

/// The files for one manifest as seen by one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// In the order they are written.
    pub files: Vec<PlannedFile>,
}

/// One file of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFile {
    /// Absolute as on the node (`/etc/hosts`), or `~user/...` for a file in a
    /// user's home, resolved against `<root>/etc/passwd` when rendered.
    pub path: PathBuf,
    /// What goes in it.
    pub content: Content,
    /// Permission bits, for example `0o644`.
    pub mode: u32,
    /// The owning user's name; `None` for root.
    pub owner: Option<String>,
}

/// What a planned file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// The whole file is ours.
    Whole(String),
    /// The body of our managed block inside a shared file (see [`managed_block`]).
    Block(String),
}
