//! An index from a field's path (`workers.count`,
//! `network.existing.private_subnet_ids[1]`, `tags.team`) to where its key and
//! value are in the blueprint text.
//!
//! Validation works on typed structs that no longer know where they came
//! from; it asks this index where to point. A missing field has no position of
//! its own, so lookups fall back to the nearest ancestor that is written in
//! the file, and finally to the start of the document.

use std::collections::HashMap;

use super::diagnostic::Location;
use super::document::{Node, NodeKind, Positions};

/// Where one field is.
#[derive(Clone, Debug)]
struct Entry {
    /// The key (`count` in `count: 8`); `None` for list items and the root.
    key: Option<Location>,
    /// The value (`8`).
    value: Location,
    /// Whether the value is a plain null (`count:` with nothing after it);
    /// messages about an empty value point at its key instead.
    null: bool,
}

/// Path -> position index of one blueprint.
#[derive(Debug)]
pub(crate) struct SourceMap {
    entries: HashMap<String, Entry>,
    document: Location,
}

impl SourceMap {
    /// Indexes every node of `root`, the tree parsed from `text`.
    pub(super) fn new(root: &Node, text: &str) -> Self {
        let mut map = SourceMap { entries: HashMap::new(), document: Positions::new(text).document_start() };
        map.insert(String::new(), None, root);
        map
    }

    fn insert(&mut self, path: String, key: Option<&Node>, node: &Node) {
        match &node.kind {
            NodeKind::Scalar { .. } => {}
            NodeKind::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.insert(format!("{path}[{i}]"), None, item);
                }
            }
            NodeKind::Mapping(entries) => {
                for (k, v) in entries {
                    let name = k.scalar().unwrap_or_default();
                    self.insert(join(&path, name), Some(k), v);
                }
            }
        }
        let entry = Entry { key: key.map(|k| k.location.clone()), value: node.location.clone(), null: node.is_null() };
        self.entries.insert(path, entry);
    }

    /// Where the value at `path` is; for an empty value, where its key is; for
    /// an absent field, where its nearest written ancestor's key is.
    pub(super) fn value(&self, path: &str) -> Location {
        match self.entries.get(path) {
            Some(Entry { key: Some(key), null: true, .. }) => key.clone(),
            Some(entry) => entry.value.clone(),
            None => self.ancestor(path),
        }
    }

    /// Where the key at `path` is (the value, for list items); for an absent
    /// field, where its nearest written ancestor's key is.
    pub(super) fn key(&self, path: &str) -> Location {
        match self.entries.get(path) {
            Some(Entry { key: Some(key), .. }) => key.clone(),
            Some(entry) if !path.is_empty() => entry.value.clone(),
            _ => self.ancestor(path),
        }
    }

    /// Whether the field is written in the file (even as an empty value).
    pub(super) fn contains(&self, path: &str) -> bool {
        self.entries.contains_key(path)
    }

    fn ancestor(&self, path: &str) -> Location {
        let mut path = path;
        while let Some(parent) = parent(path) {
            if let Some(Entry { key: Some(key), .. }) = self.entries.get(parent) {
                return key.clone();
            }
            path = parent;
        }
        self.document.clone()
    }
}

/// `a.b` from `a` and `b`; `b` from the root and `b`.
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_owned() } else { format!("{parent}.{key}") }
}

/// The path one level up: `a` for `a.b` and `a[0]`; `None` for the root.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    Some(path.rfind(['.', '[']).map_or("", |i| &path[..i]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint::document::parse;

    const TEXT: &str = "\
name: demo
workers:
  instance_type: p3.2xlarge
  count:
network:
  existing:
    vpc_id: vpc-12345678
    private_subnet_ids: [subnet-12345678, subnet-87654321]
tags: { team: ml }
";

    fn map() -> SourceMap {
        SourceMap::new(&parse(TEXT).unwrap(), TEXT)
    }

    fn at(l: Location) -> (usize, usize) {
        (l.line, l.column)
    }

    #[test]
    fn values_and_keys_have_their_own_positions() {
        let m = map();
        assert_eq!(at(m.value("workers.instance_type")), (3, 18));
        assert_eq!(at(m.key("workers.instance_type")), (3, 3));
        assert_eq!(at(m.value("network.existing.vpc_id")), (7, 13));
        assert_eq!(at(m.value("network.existing.private_subnet_ids[1]")), (8, 43));
        assert_eq!(at(m.value("tags.team")), (9, 15));
        assert_eq!(at(m.key("tags.team")), (9, 9));
    }

    #[test]
    fn empty_values_point_at_their_key() {
        assert_eq!(at(map().value("workers.count")), (4, 3));
    }

    #[test]
    fn absent_fields_point_at_the_nearest_ancestor() {
        let m = map();
        assert!(!m.contains("workers.max"));
        assert_eq!(at(m.value("workers.max")), (2, 1));
        assert_eq!(at(m.key("network.existing.public_subnet_id")), (6, 3));
        assert_eq!(at(m.value("storage.efs.mount")), (1, 1));
    }

    #[test]
    fn parents() {
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a.b"), Some("a"));
        assert_eq!(parent("a"), Some(""));
        assert_eq!(parent(""), None);
    }
}
