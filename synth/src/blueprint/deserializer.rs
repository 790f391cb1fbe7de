//! A serde `Deserializer` over the positioned YAML tree
//! ([`super::document::Node`]), so the [`super::model`] structs are filled by
//! ordinary `#[derive(Deserialize)]` while every error still knows its field
//! path, line and column.
//!
//! Two things are done here rather than by serde:
//! - Unknown fields of a struct are taken out before serde sees the mapping
//!   and recorded (all of them, with the allowed names and a "did you mean"),
//!   instead of stopping at the first one as `deny_unknown_fields` would.
//! - Error messages are written for users: "expected a whole number, found the
//!   string \"eight\"", not "invalid type: string \"eight\", expected u32".
//!
//! Plain scalars resolve as in the YAML 1.2 core schema (as serde_yaml_ng
//! does): `on`, `yes` and `no` are strings, not booleans. A field that wants a
//! string takes any scalar's text as written, so `version: 1.10` in `tags`
//! stays `1.10`.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};

use super::diagnostic::{Diagnostic, Location};
use super::document::{Node, NodeKind, is_null_text};
use super::source_map::join;
use super::suggestion::{backticked, did_you_mean};

/// A deserialization error: the message, and (once known) the field path and
/// the place to point at.
#[derive(Debug)]
pub(crate) struct Error {
    message: String,
    help: Option<String>,
    /// A required field that is missing: the path gets it appended.
    missing: Option<&'static str>,
    at: Option<(String, Location)>,
}

impl Error {
    fn new(message: String) -> Self {
        Error {
            message,
            help: None,
            missing: None,
            at: None,
        }
    }

    /// Fills in the path and position, unless a deeper node already did.
    fn at(mut self, path: &str, location: &Location) -> Self {
        if self.at.is_none() {
            let path = match self.missing {
                Some(field) => join(path, field),
                None => path.to_owned(),
            };
            self.at = Some((path, location.clone()));
        }
        self
    }

    /// The finished diagnostic; `fallback` is used when no node claimed the
    /// error (which only happens for errors raised outside any node).
    pub fn into_diagnostic(self, fallback: Location) -> Diagnostic {
        let (path, location) = self.at.unwrap_or((String::new(), fallback));
        let help = self.help.or_else(|| {
            self.missing.map(|field| {
                let parent = path.rsplit_once('.').map(|(p, _)| p);
                missing_help(field, parent)
            })
        });
        let mut d = Diagnostic::error(path, location, self.message);
        d.help = help;
        d
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::new(msg.to_string())
    }

    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        let expected = expected(exp, false);
        let mut e = Error::new(format!("expected {expected}, found {}", unexpected(&unexp)));
        e.help = type_help(&expected, &unexp);
        e
    }

    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        let mut e = Error::new(format!(
            "expected {}, found {}",
            expected(exp, true),
            unexpected(&unexp)
        ));
        e.help = Some(match unexp {
            Unexpected::Signed(n) if n < 0 => "this value cannot be negative".to_owned(),
            _ => "write a value in the allowed range".to_owned(),
        });
        e
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let mut e = Error::new(format!(
            "`{variant}` is not allowed here; expected one of {}",
            backticked(expected.iter().copied())
        ));
        // `yes`/`no` are switches in YAML 1.1; where `on`/`off` exist, they are what was meant.
        let switch = match variant {
            "yes" | "y" | "enabled" | "enable" => Some("on"),
            "no" | "n" | "disabled" | "disable" => Some("off"),
            _ => None,
        }
        .filter(|s| expected.contains(s));
        e.help = Some(
            match switch.or_else(|| did_you_mean(variant, expected.iter().copied())) {
                Some(close) => format!("did you mean `{close}`?"),
                None => format!("write one of {}", backticked(expected.iter().copied())),
            },
        );
        e
    }

    fn missing_field(field: &'static str) -> Self {
        let mut e = Error::new("this required field is missing".to_owned());
        e.missing = Some(field);
        e
    }

    fn duplicate_field(field: &'static str) -> Self {
        // The document builder rejects duplicate keys first; this is a backstop.
        Error::new(format!("`{field}` is set twice"))
    }
}

/// What to add for a missing required field, with an example value.
fn missing_help(field: &str, parent: Option<&str>) -> String {
    let example = match field {
        "name" => "`name: my-cluster` (lower-case letters, digits and `-`)",
        "master" => "a `master:` section with `instance_type:` (for example `p3.2xlarge`)",
        "workers" => "a `workers:` section with `instance_type:` and `count:`",
        "instance_type" => "`instance_type:` with an EC2 instance type, for example `p3.2xlarge`",
        "count" => "`count:` with the number of workers to launch, for example `count: 2`",
        _ => "",
    };
    match (parent, example.is_empty()) {
        (Some(parent), true) => format!("add `{field}:` with a value under `{parent}:`"),
        (Some(parent), false) => format!("under `{parent}:`, add {example}"),
        (None, true) => format!("add `{field}:` with a value at the top level"),
        (None, false) => format!("at the top level, add {example}"),
    }
}

/// What serde expected, in users' words.
fn expected(exp: &dyn de::Expected, with_range: bool) -> String {
    let raw = exp.to_string();
    let range = match raw.as_str() {
        "u8" => Some(u8::MAX as u64),
        "u16" => Some(u16::MAX as u64),
        "u32" => Some(u32::MAX as u64),
        "u64" | "usize" => Some(u64::MAX),
        _ => None,
    };
    match (range, raw.as_str()) {
        (Some(max), _) if with_range => format!("a whole number from 0 to {max}"),
        (Some(_), _) => "a whole number".to_owned(),
        (None, "a boolean") => "`true` or `false`".to_owned(),
        (None, "a string" | "a borrowed string") => "a text value".to_owned(),
        (None, "a map") => "a mapping of `key: value` lines".to_owned(),
        (None, "a sequence") => "a list".to_owned(),
        _ => raw,
    }
}

/// What serde found, in users' words.
fn unexpected(unexp: &Unexpected<'_>) -> String {
    match unexp {
        Unexpected::Str(s) => format!("the text {s:?}"),
        Unexpected::Unsigned(n) => format!("the number {n}"),
        Unexpected::Signed(n) => format!("the number {n}"),
        Unexpected::Float(n) => format!("the number {n}"),
        Unexpected::Bool(b) => format!("`{b}`"),
        Unexpected::Unit | Unexpected::Option => "nothing (an empty value)".to_owned(),
        Unexpected::Map => "a mapping".to_owned(),
        Unexpected::Seq => "a list".to_owned(),
        other => other.to_string(),
    }
}

/// A hint for the common type mistakes.
fn type_help(expected: &str, unexp: &Unexpected<'_>) -> Option<String> {
    Some(match (expected, unexp) {
        ("a whole number", Unexpected::Str(_)) => "write the number in digits, without quotes, for example `8`".to_owned(),
        ("a whole number", Unexpected::Float(_)) => "write a whole number, without a decimal point".to_owned(),
        ("`true` or `false`", Unexpected::Str(_)) => {
            "write `true` or `false` without quotes (`yes`, `no`, `on` and `off` are text in YAML 1.2)".to_owned()
        }
        (_, Unexpected::Unit) => "write a value after the colon".to_owned(),
        ("a mapping of `key: value` lines", _) => {
            "write one `key: value` per line, indented under the field, or `{ key: value, ... }` on one line".to_owned()
        }
        ("a text value", Unexpected::Map | Unexpected::Seq) => {
            "write a single value on this line; quote it if it contains `: ` or starts with `[` or `{`".to_owned()
        }
        _ => return None,
    })
}

/// Deserializes one node at `path`. `key` is the node's key, if it has one:
/// errors about the node as a whole (a missing field) point there.
pub(crate) struct NodeDeserializer<'a> {
    node: &'a Node,
    path: String,
    key: Option<&'a Location>,
    unknown: &'a RefCell<Vec<Diagnostic>>,
}

impl<'a> NodeDeserializer<'a> {
    /// The deserializer for the document's root; unknown fields anywhere
    /// below are pushed onto `unknown`.
    pub fn root(node: &'a Node, unknown: &'a RefCell<Vec<Diagnostic>>) -> Self {
        NodeDeserializer {
            node,
            path: String::new(),
            key: None,
            unknown,
        }
    }

    fn child(&self, node: &'a Node, path: String, key: Option<&'a Location>) -> Self {
        NodeDeserializer {
            node,
            path,
            key,
            unknown: self.unknown,
        }
    }

    /// Where to point for a problem with this node's value. An empty value
    /// has no width; its key is a better place.
    fn location(&self) -> &'a Location {
        match (self.node.is_null(), self.key) {
            (true, Some(key)) => key,
            _ => &self.node.location,
        }
    }

    /// Where to point for a problem with this node as a whole (a missing
    /// field): its key, or its start for the root.
    fn whole(&self) -> &'a Location {
        self.key.unwrap_or(&self.node.location)
    }

    fn fail<T>(&self, e: Error) -> Result<T, Error> {
        Err(e.at(&self.path, self.location()))
    }

    fn mapping_expected<T>(&self, fields: &[&str]) -> Result<T, Error> {
        let found = self.node.describe();
        let top = if self.path.is_empty() {
            "the blueprint"
        } else {
            "this field"
        };
        let mut e = Error::new(format!(
            "{top} must be a mapping with the fields {}, found {found}",
            backticked(fields.iter().copied())
        ));
        e.help = Some(if self.path.is_empty() {
            "start from the minimal blueprint: `name:`, `master:` with `instance_type:`, and `workers:` with `instance_type:` and `count:`".to_owned()
        } else {
            format!(
                "write the fields indented on the lines under `{}:`",
                self.path.rsplit('.').next().unwrap_or_default()
            )
        });
        self.fail(e)
    }
}

/// Integers as the YAML 1.2 core schema writes them: decimal, `0x`, `0o`.
fn parse_int(text: &str) -> Option<Result<u64, i64>> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = if let Some(hex) = digits.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = digits.strip_prefix("0o") {
        u64::from_str_radix(oct, 8).ok()?
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()?
    } else {
        return None;
    };
    if negative {
        // `-0` is 0; anything below i64::MIN is not a number we can hold.
        if magnitude == 0 {
            Some(Ok(0))
        } else {
            0i64.checked_sub_unsigned(magnitude).map(Err)
        }
    } else {
        Some(Ok(magnitude))
    }
}

/// Whether `text` is a decimal integer (an optional sign, then digits).
fn is_decimal_integer(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Floats as the YAML 1.2 core schema writes them.
fn parse_float(text: &str) -> Option<f64> {
    match text.trim_start_matches(['+', '-']) {
        ".inf" | ".Inf" | ".INF" => {
            return Some(if text.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            });
        }
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    let body = text.trim_start_matches(['+', '-']);
    let ok = body
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && body.chars().any(|c| c.is_ascii_digit());
    if ok { text.parse().ok() } else { None }
}

impl<'de, 'a> de::Deserializer<'de> for NodeDeserializer<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let result = match &self.node.kind {
            NodeKind::Scalar {
                value,
                plain: false,
            } => visitor.visit_str(value),
            NodeKind::Scalar { value, plain: true } => {
                let v = value.as_str();
                if is_null_text(v) {
                    visitor.visit_unit()
                } else if matches!(v, "true" | "True" | "TRUE") {
                    visitor.visit_bool(true)
                } else if matches!(v, "false" | "False" | "FALSE") {
                    visitor.visit_bool(false)
                } else if let Some(n) = parse_int(v) {
                    match n {
                        Ok(u) => visitor.visit_u64(u),
                        Err(i) => visitor.visit_i64(i),
                    }
                } else if is_decimal_integer(v) {
                    // All digits, but too large for 64 bits: say so, rather
                    // than read it as an imprecise float.
                    let mut e = Error::new(format!("the number {v} is too large"));
                    e.help = Some("write a value in the allowed range".to_owned());
                    Err(e)
                } else if let Some(f) = parse_float(v) {
                    visitor.visit_f64(f)
                } else {
                    visitor.visit_str(v)
                }
            }
            NodeKind::Sequence(_) => return self.deserialize_seq(visitor),
            NodeKind::Mapping(_) => return self.deserialize_map(visitor),
        };
        result.or_else(|e| self.fail(e))
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.kind {
            NodeKind::Scalar { value, .. } if !self.node.is_null() => {
                visitor.visit_str(value).or_else(|e| self.fail(e))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.node.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let NodeKind::Sequence(items) = &self.node.kind else {
            let unexp = match self.node.scalar() {
                _ if self.node.is_null() => Unexpected::Unit,
                Some(text) => Unexpected::Str(text),
                None => Unexpected::Map,
            };
            let mut e = <Error as de::Error>::invalid_type(unexp, &visitor);
            e.help = Some("write a list, either `[a, b]` or one `- item` per line".to_owned());
            return self.fail(e);
        };
        let access = Items {
            parent: &self,
            items: items.iter().enumerate(),
        };
        visitor.visit_seq(access).or_else(|e| self.fail(e))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let NodeKind::Mapping(entries) = &self.node.kind else {
            let unexp = match &self.node.kind {
                NodeKind::Sequence(_) => Unexpected::Seq,
                _ if self.node.is_null() => Unexpected::Unit,
                NodeKind::Scalar { value, .. } => Unexpected::Str(value),
                NodeKind::Mapping(_) => Unexpected::Map,
            };
            return self.fail(<Error as de::Error>::invalid_type(unexp, &visitor));
        };
        let access = Entries {
            parent: &self,
            entries: entries.iter().collect::<Vec<_>>().into_iter(),
            value: None,
        };
        visitor
            .visit_map(access)
            .map_err(|e| e.at(&self.path, self.whole()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let NodeKind::Mapping(entries) = &self.node.kind else {
            return self.mapping_expected(fields);
        };
        // Unknown keys are reported here, all of them, and never reach serde.
        let mut known = Vec::with_capacity(entries.len());
        for entry in entries {
            let name = entry.0.scalar().unwrap_or_default();
            if fields.contains(&name) {
                known.push(entry);
                continue;
            }
            let path = join(&self.path, name);
            let within = if self.path.is_empty() {
                "at the top level".to_owned()
            } else {
                format!("in `{}`", self.path)
            };
            let mut d = Diagnostic::error(
                path,
                entry.0.location.clone(),
                format!("unknown field `{name}`"),
            );
            d.help = Some(match did_you_mean(name, fields.iter().copied()) {
                _ if name == "<<" => {
                    "YAML merge keys (`<<`) are not supported in blueprints; write the fields out"
                        .to_owned()
                }
                Some(close) => format!(
                    "did you mean `{close}`? The fields allowed {within} are {}",
                    backticked(fields.iter().copied())
                ),
                None => format!(
                    "the fields allowed {within} are {}",
                    backticked(fields.iter().copied())
                ),
            });
            self.unknown.borrow_mut().push(d);
        }
        let access = Entries {
            parent: &self,
            entries: known.into_iter(),
            value: None,
        };
        visitor
            .visit_map(access)
            .map_err(|e| e.at(&self.path, self.whole()))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.node.scalar() {
            Some(value) if !self.node.is_null() => visitor.visit_enum(value.into_deserializer()),
            _ => {
                let mut e = Error::new(format!("expected one of {}, found {}", backticked(variants.iter().copied()), self.node.describe()));
                e.help = Some("write one of the allowed values on this line, or delete the line to use the default".to_owned());
                Err(e)
            }
        }
        .or_else(|e| self.fail(e))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 bytes byte_buf unit unit_struct
    }
}

/// The items of a list, each deserialized at `path[i]`.
struct Items<'p, 'a, I> {
    parent: &'p NodeDeserializer<'a>,
    items: I,
}

impl<'de, 'a, I: Iterator<Item = (usize, &'a Node)>> de::SeqAccess<'de> for Items<'_, 'a, I> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            Some((i, node)) => {
                let child = self
                    .parent
                    .child(node, format!("{}[{i}]", self.parent.path), None);
                seed.deserialize(child).map(Some)
            }
            None => Ok(None),
        }
    }
}

/// The entries of a mapping, each value deserialized at `path.key`.
struct Entries<'p, 'a, I> {
    parent: &'p NodeDeserializer<'a>,
    entries: I,
    value: Option<&'a (Node, Node)>,
}

impl<'de, 'a, I: Iterator<Item = &'a (Node, Node)>> de::MapAccess<'de> for Entries<'_, 'a, I> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(entry);
        let (key, _) = entry;
        let path = join(&self.parent.path, key.scalar().unwrap_or_default());
        seed.deserialize(self.parent.child(key, path, None))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((key, value)) = self.value.take() else {
            return Err(Error::new(
                "internal error: a value was read before its key".to_owned(),
            ));
        };
        let path = join(&self.parent.path, key.scalar().unwrap_or_default());
        seed.deserialize(self.parent.child(value, path, Some(&key.location)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint::document::parse;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        count: u32,
        spot: Option<bool>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        workers: Inner,
        tags: Option<BTreeMap<String, String>>,
    }

    fn load(text: &str) -> (Result<Outer, Diagnostic>, Vec<Diagnostic>) {
        let root = parse(text).unwrap();
        let unknown = RefCell::new(Vec::new());
        let result = Outer::deserialize(NodeDeserializer::root(&root, &unknown))
            .map_err(|e| e.into_diagnostic(root.location.clone()));
        (result, unknown.into_inner())
    }

    #[test]
    fn type_errors_carry_path_and_value_position() {
        let (r, _) = load("name: x\nworkers:\n  count: eight\n");
        let d = r.unwrap_err();
        assert_eq!(d.path, "workers.count");
        assert_eq!((d.line, d.column), (3, 10));
        assert_eq!(
            d.message,
            "expected a whole number, found the text \"eight\""
        );
    }

    #[test]
    fn missing_fields_point_at_the_parent_key() {
        let (r, _) = load("name: x\nworkers:\n  spot: true\n");
        let d = r.unwrap_err();
        assert_eq!(d.path, "workers.count");
        assert_eq!((d.line, d.column), (2, 1));
        assert!(
            d.help.unwrap().contains("under `workers:`"),
            "help names the section"
        );
    }

    #[test]
    fn every_unknown_field_is_collected_with_a_suggestion() {
        let (r, unknown) = load("name: x\nnmae: y\nworkers:\n  count: 1\n  cont: 2\n  gpus: 8\n");
        assert!(r.is_ok());
        let paths: Vec<_> = unknown.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["nmae", "workers.cont", "workers.gpus"]);
        assert!(
            unknown[1]
                .help
                .as_ref()
                .unwrap()
                .starts_with("did you mean `count`?")
        );
        assert!(!unknown[2].help.as_ref().unwrap().contains("did you mean"));
        assert_eq!((unknown[1].line, unknown[1].column), (5, 3));
    }

    #[test]
    fn strings_keep_their_text_and_numbers_resolve() {
        let (r, _) =
            load("name: 007\nworkers: { count: 0x10, spot: false }\ntags: { v: 1.10, on: yes }\n");
        let o = r.unwrap();
        assert_eq!(o.name, "007");
        assert_eq!(o.workers.count, 16);
        let tags = o.tags.unwrap();
        assert_eq!(tags["v"], "1.10");
        assert_eq!(tags["on"], "yes");
    }

    #[test]
    fn negative_and_huge_numbers_are_range_errors() {
        let d = load("name: x\nworkers: { count: -1 }\n").0.unwrap_err();
        assert!(d.message.contains("from 0 to 4294967295"), "{}", d.message);
        let d = load("name: x\nworkers: { count: 99999999999 }\n")
            .0
            .unwrap_err();
        assert!(
            d.message.contains("found the number 99999999999"),
            "{}",
            d.message
        );
        let d = load("name: x\nworkers: { count: 18446744073709551616 }\n")
            .0
            .unwrap_err();
        assert_eq!(d.message, "the number 18446744073709551616 is too large");
    }

    #[test]
    fn yaml_1_1_booleans_are_text() {
        let d = load("name: x\nworkers: { count: 1, spot: yes }\n")
            .0
            .unwrap_err();
        assert_eq!(d.path, "workers.spot");
        assert!(d.help.unwrap().contains("YAML 1.2"));
    }

    #[test]
    fn core_schema_numbers() {
        assert_eq!(parse_int("42"), Some(Ok(42)));
        assert_eq!(parse_int("-3"), Some(Err(-3)));
        assert_eq!(parse_int("0o17"), Some(Ok(15)));
        assert_eq!(parse_int("1_000"), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_float("8.5"), Some(8.5));
        assert_eq!(parse_float("1e3"), Some(1000.0));
        assert_eq!(parse_float("p3.2xlarge"), None);
        assert_eq!(parse_float("10.0.0.0/16"), None);
    }
}
