//! The blueprint text -> the [`super::model`] structs, by `serde_yaml_ng`.
//!
//! `serde_ignored` collects every unknown field (all of them, not only the
//! first), and `serde_path_to_error` gives the field path of a type error;
//! after each type error the wrong value is taken out of the document tree
//! and the rest read again, so every type error is found in one run.
//! This module only turns what those libraries report into diagnostics: the
//! position comes from the [`SourceMap`], the allowed field names from the
//! JSON Schema, and serde's standard messages ("invalid type: string
//! \"eight\", expected u32") are reworded for users ("expected a whole number,
//! found the text \"eight\"").
//!
//! `serde_yaml_ng` resolves plain scalars as YAML 1.2 does: `on`, `yes` and
//! `no` are strings, not booleans; a field that wants a string takes any
//! scalar's text as written, so `version: 1.10` in `tags` stays `1.10`.

use std::collections::HashSet;

use serde_json::Value;

use super::diagnostic::{Diagnostic, Location, shown, ticked};
use super::document::{Node, NodeKind};
use super::model::Blueprint;
use super::schema::json_schema;
use super::source_map::{SourceMap, join};
use super::suggestion::{backticked, did_you_mean};

/// At most this many type errors are collected (a report shows the first
/// [`super::diagnostic::MAX_REPORTED`] problems): each costs one more read of
/// the blueprint, so the work stays linear in its size.
const MAX_TYPE_ERRORS: usize = 50;

/// What reading the blueprint into the model found.
pub(crate) struct Deserialized {
    /// The blueprint, with every value that had a type error left out; `None`
    /// when a type error could not be taken out to read on.
    pub blueprint: Option<Blueprint>,
    /// Every unknown field and every type error, in the order found.
    pub diagnostics: Vec<Diagnostic>,
    /// The paths of the type errors: later checks say nothing more about
    /// these fields (a wrong `count` is not also a missing one).
    pub wrong: Vec<String>,
    /// `parent.field` for each unknown field that is a likely typo of
    /// `field`: the typo is the one mistake, not also a missing field.
    pub misspelt: Vec<String>,
}

/// Reads the blueprint into the model, reporting every unknown field and
/// every type error at once: after a type error the wrong value is taken out
/// of the YAML tree `root` (parsed from `text`) and the rest read again, so a
/// file with nine wrong values gets nine errors in one run.
pub(crate) fn blueprint(text: &str, root: &Node, map: &SourceMap) -> Deserialized {
    let schema = json_schema();
    let mut unknown: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut errors: Vec<Diagnostic> = Vec::new();
    let mut wrong: Vec<String> = Vec::new();
    // The tree with the wrong values taken out, once there is one.
    let mut edited: Option<Node> = None;
    let blueprint = loop {
        let yaml = edited.as_ref().map(Node::to_yaml);
        let (result, found) = read(yaml.as_deref().unwrap_or_else(|| without_bom(text)));
        for path in found {
            if seen.insert(path.clone()) {
                unknown.push(path);
            }
        }
        let e = match result {
            Ok(b) => break Some(b),
            Err(e) => e,
        };
        let path = error_path(e.path());
        // A problem made by taking a value out (its parent read again
        // without it) is not the user's; stop reading there.
        if edited.is_some() && wrong.iter().any(|w| w == &path || is_under(w, &path)) {
            break None;
        }
        // Positions in a text read again are not the file's; the source
        // map has every path that can be taken out.
        let diagnostic = type_error(&e, edited.is_none().then_some(text), text, map, &schema);
        let missing = diagnostic.message == MISSING;
        errors.push(diagnostic);
        wrong.push(path.clone());
        if missing || path.is_empty() || !map.contains(&path) || errors.len() >= MAX_TYPE_ERRORS {
            break None;
        }
        let tree = edited.get_or_insert_with(|| root.clone());
        if !take_out(tree, "", &path) {
            break None;
        }
    };
    let mut diagnostics = Vec::with_capacity(unknown.len() + errors.len());
    let mut misspelt = Vec::new();
    for path in &unknown {
        let (d, close) = unknown_field(path, map, &schema);
        if let Some(close) = close {
            misspelt.push(join(split(path).0, &close));
        }
        diagnostics.push(d);
    }
    diagnostics.extend(errors);
    Deserialized { blueprint, diagnostics, wrong, misspelt }
}

/// One read of `yaml` into the model: the result, and the unknown fields'
/// paths.
fn read(yaml: &str) -> (Result<Blueprint, serde_path_to_error::Error<serde_yaml_ng::Error>>, Vec<String>) {
    let mut unknown = Vec::new();
    let de = serde_yaml_ng::Deserializer::from_str(yaml);
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(ignored_path(&path));
    let ignored = serde_ignored::Deserializer::new(de, &mut record);
    let result = serde_path_to_error::deserialize(ignored);
    (result, unknown)
}

/// Whether `path` is inside `ancestor` (`workers.count` in `workers`; every
/// path in the root, `""`).
pub(crate) fn is_under(path: &str, ancestor: &str) -> bool {
    ancestor.is_empty()
        || path.strip_prefix(ancestor).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// Takes the value at `target` out of `node` (whose path is `at`): a mapping
/// entry is removed, a list item becomes the empty text `""` (removing it
/// would renumber the items after it). Whether it was found.
fn take_out(node: &mut Node, at: &str, target: &str) -> bool {
    match &mut node.kind {
        NodeKind::Scalar { .. } => false,
        NodeKind::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let path = format!("{at}[{i}]");
                if path == target {
                    item.kind = NodeKind::Scalar { value: String::new(), plain: false };
                    return true;
                }
                if is_under(target, &path) {
                    return take_out(item, &path, target);
                }
            }
            false
        }
        NodeKind::Mapping(entries) => {
            for i in 0..entries.len() {
                let path = join(at, entries[i].0.scalar().unwrap_or_default());
                if path == target {
                    entries.remove(i);
                    return true;
                }
                if is_under(target, &path) && take_out(&mut entries[i].1, &path, target) {
                    return true;
                }
            }
            false
        }
    }
}

/// A `serde_ignored` path in the source map's form (`a.b[0].c`; `Option`
/// layers dropped).
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => join(&ignored_path(parent), key),
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

/// A `serde_path_to_error` path in the source map's form.
fn error_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = join(&out, key),
            Segment::Enum { variant } => out = join(&out, variant),
            Segment::Unknown => {}
        }
    }
    out
}

/// `(parent, last key)` of a path: `("workers", "cuont")`.
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('.').unwrap_or(("", path))
}

/// The schema of the value at `path`, following `$ref`, `Option`'s `anyOf`
/// and a `oneOf` of a mapping and a scalar.
fn schema_at<'s>(schema: &'s Value, path: &str) -> Option<&'s Value> {
    let resolve = |mut node: &'s Value| -> Option<&'s Value> {
        loop {
            if let Some(r) = node.get("$ref").and_then(Value::as_str) {
                node = schema.pointer(r.strip_prefix('#')?)?;
            } else if let Some(any) = node.get("anyOf").and_then(Value::as_array) {
                node = any.iter().find(|v| v.get("type") != Some(&Value::from("null")))?;
            } else if let Some(one) =
                node.get("oneOf").and_then(Value::as_array).filter(|_| node.get("properties").is_none())
                && let Some(mapping) = one.iter().find(|v| v.get("$ref").is_some() || v.get("properties").is_some())
            {
                // A mapping or a scalar (`gpu_check: false`): the mapping's fields.
                node = mapping;
            } else {
                return Some(node);
            }
        }
    };
    let mut node = resolve(schema)?;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, indexes) = part.split_once('[').unwrap_or((part, ""));
        node = resolve(node.get("properties")?.get(key)?)?;
        for _ in indexes.matches(']') {
            node = resolve(node.get("items")?)?;
        }
    }
    Some(node)
}

/// The field names allowed in the mapping at `path`.
fn fields_at<'s>(schema: &'s Value, path: &str) -> Vec<&'s str> {
    schema_at(schema, path)
        .and_then(|s| s.get("properties")?.as_object())
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// The values allowed for the enum at `path`.
fn variants_at<'s>(schema: &'s Value, path: &str) -> Vec<&'s str> {
    let Some(s) = schema_at(schema, path) else {
        return Vec::new();
    };
    match (s.get("enum"), s.get("oneOf")) {
        (Some(Value::Array(values)), _) => values.iter().filter_map(Value::as_str).collect(),
        (_, Some(Value::Array(items))) => items.iter().filter_map(|v| v.get("const")?.as_str()).collect(),
        _ => Vec::new(),
    }
}

fn within(parent: &str) -> String {
    if parent.is_empty() { "at the top level".to_owned() } else { format!("in `{parent}`") }
}

/// The error for an unknown field, and the field it is likely a typo of.
fn unknown_field(path: &str, map: &SourceMap, schema: &Value) -> (Diagnostic, Option<String>) {
    let (parent, name) = split(path);
    let fields = fields_at(schema, parent);
    let listed = backticked(fields.iter().copied());
    let close = if name == "<<" { None } else { did_you_mean(name, fields.iter().copied()) };
    let help = match close {
        _ if name == "<<" => "YAML merge keys (`<<`) are not supported in blueprints; write the fields out".to_owned(),
        Some(close) => format!("did you mean `{close}`? The fields allowed {} are {listed}", within(parent)),
        None => format!("the fields allowed {} are {listed}", within(parent)),
    };
    let d = Diagnostic::error(path, map.key(path), format!("unknown field {}", ticked(name))).with_help(help);
    (d, close.map(str::to_owned))
}

/// What serde found, parsed back from its standard wording
/// (`serde::de::Unexpected`'s `Display`).
#[derive(Debug, PartialEq)]
enum Found<'m> {
    /// A string, as serde quotes it (`"eight"`).
    Str(&'m str),
    Integer(&'m str),
    Float(&'m str),
    Bool(&'m str),
    Unit,
    Map,
    Seq,
    Other(&'m str),
}

impl<'m> Found<'m> {
    fn parse(text: &'m str) -> Self {
        // serde_yaml_ng writes integers beyond 64 bits as "integer `N` as u128".
        let text = text.strip_suffix(" as u128").or_else(|| text.strip_suffix(" as i128")).unwrap_or(text);
        let quoted = |prefix: &str| text.strip_prefix(prefix).and_then(|t| t.strip_prefix('`')?.strip_suffix('`'));
        if let Some(s) = text.strip_prefix("string ") {
            Found::Str(s)
        } else if let Some(n) = quoted("integer ") {
            Found::Integer(n)
        } else if let Some(n) = quoted("floating point ") {
            Found::Float(n)
        } else if let Some(b) = quoted("boolean ") {
            Found::Bool(b)
        } else {
            match text {
                "unit value" | "Option value" => Found::Unit,
                "map" => Found::Map,
                "sequence" => Found::Seq,
                other => Found::Other(other),
            }
        }
    }

    /// In users' words.
    fn describe(&self) -> String {
        match self {
            Found::Str(s) => format!("the text {}", shown(s)),
            Found::Integer(n) | Found::Float(n) => format!("the number {n}"),
            Found::Bool(b) => format!("`{b}`"),
            Found::Unit => "nothing (an empty value)".to_owned(),
            Found::Map => "a mapping".to_owned(),
            Found::Seq => "a list".to_owned(),
            Found::Other(o) => shown(o),
        }
    }
}

/// What serde expected (`serde::de::Expected`'s `Display`), in users' words.
fn expected(raw: &str, with_range: bool) -> String {
    let range = match raw {
        "u8" => Some(u8::MAX as u64),
        "u16" => Some(u16::MAX as u64),
        "u32" => Some(u32::MAX as u64),
        "u64" | "usize" => Some(u64::MAX),
        _ => None,
    };
    match (range, raw) {
        (Some(max), _) if with_range => format!("a whole number from 0 to {max}"),
        (Some(_), _) => "a whole number".to_owned(),
        (None, "a boolean") => "`true` or `false`".to_owned(),
        (None, "a string" | "a borrowed string") => "a text value".to_owned(),
        (None, "a map") => "a mapping of `key: value` lines".to_owned(),
        (None, "a sequence") => "a list".to_owned(),
        _ => raw.to_owned(),
    }
}

/// A hint for the common type mistakes.
fn type_help(expected: &str, found: &Found<'_>) -> String {
    match (expected, found) {
        ("a whole number", Found::Str(_)) => "write the number in digits, without quotes, for example `8`".to_owned(),
        ("a whole number", Found::Float(_)) => "write a whole number, without a decimal point".to_owned(),
        ("`true` or `false`", Found::Str(_)) => {
            "write `true` or `false` without quotes (`yes`, `no`, `on` and `off` are text in YAML 1.2)".to_owned()
        }
        (_, Found::Unit) => "write a value after the colon".to_owned(),
        ("a mapping of `key: value` lines", _) => {
            "write one `key: value` per line, indented under the field, or `{ key: value, ... }` on one line".to_owned()
        }
        ("a list", _) => "write a list, either `[a, b]` or one `- item` per line".to_owned(),
        ("a text value", Found::Map | Found::Seq) => {
            "write a single value on this line; quote it if it contains `: ` or starts with `[` or `{`".to_owned()
        }
        _ => format!("write {expected} here"),
    }
}

/// The message of a missing required field.
pub(crate) const MISSING: &str = "this required field is missing";

/// `field` of the mapping at `parent` (`""`: the top level) is required and
/// missing. Pointed at the key of the mapping it belongs in; for the top
/// level, at the first key.
pub(crate) fn missing_field(parent: &str, field: &str, map: &SourceMap) -> Diagnostic {
    let at = if parent.is_empty() { map.value("") } else { map.key(parent) };
    Diagnostic::error(join(parent, field), at, MISSING).with_help(missing_help(field, split(parent).1))
}

/// What to add for a missing required field, with an example value.
fn missing_help(field: &str, parent: &str) -> String {
    let example = match field {
        "name" => "`name: my-cluster` (lower-case letters, digits and `-`)",
        "master" => "a `master:` section with `instance_type:` (for example `p3.2xlarge`)",
        "workers" => "a `workers:` section with `instance_type:` and `count:`",
        "instance_type" => "`instance_type:` with an EC2 instance type, for example `p3.2xlarge`",
        "count" => "`count:` with the number of workers to launch, for example `count: 2`",
        _ => "",
    };
    match (parent.is_empty(), example.is_empty()) {
        (false, true) => format!("add `{field}:` with a value under `{parent}:`"),
        (false, false) => format!("under `{parent}:`, add {example}"),
        (true, true) => format!("add `{field}:` with a value at the top level"),
        (true, false) => format!("at the top level, add {example}"),
    }
}

/// serde_yaml_ng's message without its `path: ` prefix and ` at line N
/// column M` suffix.
fn bare_message(e: &serde_yaml_ng::Error, path: &str) -> String {
    let mut message = e.to_string();
    if let Some(at) = e.location() {
        let suffix = format!(" at line {} column {}", at.line(), at.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_owned();
        }
    }
    for prefix in [format!("{path}: "), ".: ".to_owned()] {
        if let Some(stripped) = message.strip_prefix(&prefix) {
            return stripped.to_owned();
        }
    }
    message
}

fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// The place serde_yaml_ng names, as a [`Location`] one character wide.
fn yaml_location(e: &serde_yaml_ng::Error, text: &str) -> Option<Location> {
    let at = e.location()?;
    let bom = text.len() - without_bom(text).len();
    let text = without_bom(text);
    let line_start: usize = text.split_inclusive('\n').take(at.line().checked_sub(1)?).map(str::len).sum();
    let rest = text.get(line_start..)?;
    let start = line_start + rest.char_indices().nth(at.column().saturating_sub(1)).map_or(rest.len(), |(i, _)| i);
    let end = text[start..].chars().next().filter(|c| *c != '\n').map_or(start, |c| start + c.len_utf8());
    Some(Location {
        line: at.line(),
        column: at.column() + usize::from(bom > 0 && at.line() == 1),
        span: start + bom..end + bom,
    })
}

/// The diagnostic for a type error. `read` is the text serde read when it is
/// the file's own (its positions are the file's), `text` the file's text.
fn type_error(
    e: &serde_path_to_error::Error<serde_yaml_ng::Error>,
    read: Option<&str>,
    text: &str,
    map: &SourceMap,
    schema: &Value,
) -> Diagnostic {
    let path = error_path(e.path());
    let message = bare_message(e.inner(), &e.path().to_string());
    let location = match read {
        _ if map.contains(&path) => map.value(&path),
        Some(read) => yaml_location(e.inner(), read).unwrap_or_else(|| map.value(&path)),
        None => map.value(&path),
    };
    let error =
        |message: String, help: String| Diagnostic::error(path.clone(), location.clone(), message).with_help(help);

    if let Some(field) = message.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
        return missing_field(&path, field, map);
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        let (found, exp) = rest.rsplit_once(", expected ").unwrap_or((rest, ""));
        let found = Found::parse(found);
        if exp.starts_with("struct ") {
            return mapping_expected(&path, &found, schema, error);
        }
        // serde_yaml_ng expects an enum that is not a scalar as a tagged value.
        if exp.starts_with("enum ") || exp.contains("YAML tag") {
            let variants = variants_at(schema, &path);
            return error(
                format!("expected one of {}, found {}", backticked(variants), found.describe()),
                "write one of the allowed values on this line, or delete the line to use the default".to_owned(),
            );
        }
        let exp = expected(exp, false);
        if let (Found::Integer(n), "a whole number") = (&found, exp.as_str()) {
            // serde_yaml_ng calls a negative number for an unsigned field a type error.
            return range_error(rest, &found, n.starts_with('-'), written(text, &location), error);
        }
        if matches!(found, Found::Float(_)) && exp == "a whole number" {
            // Too many digits for 64 bits reads as a float; say it is too large.
            let written = text.get(location.span.clone()).unwrap_or_default();
            let digits = written.strip_prefix(['-', '+']).unwrap_or(written);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return error(
                    format!("the number {written} is too large"),
                    "write a value in the allowed range".to_owned(),
                );
            }
        }
        let help = type_help(&exp, &found);
        return error(format!("expected {exp}, found {}", found.describe()), help);
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        let (found, _) = rest.rsplit_once(", expected ").unwrap_or((rest, ""));
        let found = Found::parse(found);
        let negative = matches!(found, Found::Integer(n) if n.starts_with('-'));
        return range_error(rest, &found, negative, written(text, &location), error);
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (variant, allowed) = rest.split_once('`').unwrap_or((rest, ""));
        let allowed: Vec<&str> = allowed.split('`').skip(1).step_by(2).collect();
        // `yes`/`no` are switches in YAML 1.1; where `on`/`off` exist, they are what was meant.
        let switch = match variant {
            "yes" | "y" | "enabled" | "enable" => Some("on"),
            "no" | "n" | "disabled" | "disable" => Some("off"),
            _ => None,
        }
        .filter(|s| allowed.contains(s));
        let help = match switch.or_else(|| did_you_mean(variant, allowed.iter().copied())) {
            Some(close) => format!("did you mean `{close}`?"),
            None => format!("write one of {}", backticked(allowed.iter().copied())),
        };
        return error(
            format!("{} is not allowed here; expected one of {}", ticked(variant), backticked(allowed.iter().copied())),
            help,
        );
    }
    if let Some(field) = message.strip_prefix("duplicate field `").and_then(|m| m.strip_suffix('`')) {
        // The document builder rejects duplicate keys first; this is a backstop.
        return error(format!("`{field}` is set twice"), "keep one of the two lines".to_owned());
    }
    error(message, "check the value at this position against the blueprint schema (`synth schema`)".to_owned())
}

/// The text at `location`, as the user wrote it.
fn written<'t>(text: &'t str, location: &Location) -> &'t str {
    text.get(location.span.clone()).unwrap_or_default()
}

/// `rest` is `found, expected exp`; `written` is the value as written
/// (serde reports `-0` as the number 0, which would read as a contradiction).
fn range_error(
    rest: &str,
    found: &Found<'_>,
    negative: bool,
    written: &str,
    error: impl Fn(String, String) -> Diagnostic,
) -> Diagnostic {
    let exp = rest.rsplit_once(", expected ").map_or("", |(_, e)| e);
    let signed_zero = written.len() > 1 && written.starts_with(['-', '+']) && written[1..].bytes().all(|b| b == b'0');
    if signed_zero {
        return error(
            format!("expected {}, found {}", expected(exp, true), ticked(written)),
            "write `0`, without a sign".to_owned(),
        );
    }
    let help = if negative { "this value cannot be negative" } else { "write a value in the allowed range" };
    error(format!("expected {}, found {}", expected(exp, true), found.describe()), help.to_owned())
}

fn mapping_expected(
    path: &str,
    found: &Found<'_>,
    schema: &Value,
    error: impl Fn(String, String) -> Diagnostic,
) -> Diagnostic {
    let top = if path.is_empty() { "the blueprint" } else { "this field" };
    let help = if path.is_empty() {
        "start from the minimal blueprint: `name:`, `master:` with `instance_type:`, and `workers:` with `instance_type:` and `count:`".to_owned()
    } else {
        format!("write the fields indented on the lines under `{}:`", split(path).1)
    };
    error(
        format!(
            "{top} must be a mapping with the fields {}, found {}",
            backticked(fields_at(schema, path)),
            found.describe()
        ),
        help,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blueprint::document::parse;
    use crate::blueprint::model::EfaMode;

    fn load(text: &str) -> (Option<Blueprint>, Vec<Diagnostic>) {
        let root = parse(text).unwrap();
        let d = blueprint(text, &root, &SourceMap::new(&root, text));
        (d.blueprint, d.diagnostics)
    }

    fn error(text: &str) -> Diagnostic {
        let (_, mut d) = load(text);
        d.pop().expect("an error")
    }

    const BASE: &str = "name: x\nmaster: { instance_type: p3.2xlarge }\n";

    #[test]
    fn type_errors_carry_path_and_value_position() {
        let d = error(&format!("{BASE}workers:\n  instance_type: p3.2xlarge\n  count: eight\n"));
        assert_eq!(d.path, "workers.count");
        assert_eq!((d.line, d.column), (5, 10));
        assert_eq!(d.message, "expected a whole number, found the text \"eight\"");
    }

    #[test]
    fn a_missing_required_field_does_not_stop_deserializing() {
        // `validate` reports it (see the blueprint module's tests), with the
        // other problems of the file.
        let (b, unknown) = load(&format!("{BASE}workers:\n  instance_type: p3.2xlarge\n  cuont: 2\n"));
        let workers = b.expect("deserialized").workers.expect("workers");
        assert_eq!(workers.count, None);
        assert_eq!(unknown.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(), ["workers.cuont"]);
    }

    #[test]
    fn every_unknown_field_is_collected_with_a_suggestion() {
        let (b, unknown) = load(&format!(
            "{BASE}nmae: y\nworkers:\n  instance_type: p3.2xlarge\n  count: 1\n  cont: 2\n  gpus: 8\nstorage:\n  efs: {{ mnt: /x }}\n"
        ));
        assert!(b.is_some());
        let paths: Vec<_> = unknown.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["nmae", "workers.cont", "workers.gpus", "storage.efs.mnt"]);
        assert!(unknown[1].help.as_ref().unwrap().starts_with("did you mean `count`?"));
        assert!(!unknown[2].help.as_ref().unwrap().contains("did you mean"));
        assert!(unknown[3].help.as_ref().unwrap().contains("`mount`"));
        assert_eq!((unknown[1].line, unknown[1].column), (7, 3));
    }

    #[test]
    fn strings_keep_their_text() {
        let (b, _) = load(&format!(
            "{BASE}workers: {{ instance_type: p3.2xlarge, count: 0x10 }}\ntags: {{ v: 1.10, on: yes }}\nregion: 007\n"
        ));
        let b = b.unwrap();
        assert_eq!(b.region.as_deref(), Some("007"));
        assert_eq!(b.workers.as_ref().and_then(|w| w.count), Some(16));
        let tags = b.tags.unwrap();
        assert_eq!(tags["v"], "1.10");
        assert_eq!(tags["on"], "yes");
    }

    #[test]
    fn negative_and_huge_numbers_are_range_errors() {
        let w = |count: &str| error(&format!("{BASE}workers: {{ instance_type: p3.2xlarge, count: {count} }}\n"));
        let d = w("-1");
        assert!(d.message.contains("from 0 to 4294967295"), "{}", d.message);
        assert_eq!(d.help.as_deref(), Some("this value cannot be negative"));
        let d = w("99999999999");
        assert!(d.message.contains("found the number 99999999999"), "{}", d.message);
        let d = w("-0");
        assert_eq!(d.message, "expected a whole number from 0 to 4294967295, found `-0`");
        assert_eq!(d.help.as_deref(), Some("write `0`, without a sign"));
        let d = w("18446744073709551616");
        assert_eq!(d.message, "expected a whole number from 0 to 4294967295, found the number 18446744073709551616");
    }

    #[test]
    fn yaml_1_1_booleans_are_text() {
        let d = error(&format!("{BASE}workers: {{ instance_type: p3.2xlarge, count: 1, spot: yes }}\n"));
        assert_eq!(d.path, "workers.spot");
        assert!(d.help.unwrap().contains("YAML 1.2"));
        let d = error(&format!("{BASE}workers: {{ instance_type: p3.2xlarge, count: 1 }}\nnetwork: {{ efa: yes }}\n"));
        assert_eq!(d.path, "network.efa");
        assert_eq!(d.help.as_deref(), Some("did you mean `on`?"));
        // YAML 1.1 tools read a bare `on` as `true`: both mean the same.
        for (written, mode) in
            [("on", EfaMode::On), ("true", EfaMode::On), ("off", EfaMode::Off), ("false", EfaMode::Off)]
        {
            let (b, _) = load(&format!(
                "{BASE}workers: {{ instance_type: p3.2xlarge, count: 1 }}\nnetwork: {{ efa: {written} }}\n"
            ));
            assert_eq!(b.and_then(|b| b.network?.efa), Some(mode), "{written}");
        }
        let d = error(&format!("{BASE}workers: {{ instance_type: p3.2xlarge, count: 1 }}\nnetwork: {{ efa: [on] }}\n"));
        assert_eq!(d.message, "expected one of `auto`, `on`, `off`, found a list");
    }

    #[test]
    fn the_schema_gives_the_allowed_names() {
        let s = json_schema();
        assert!(fields_at(&s, "").contains(&"workers"));
        assert!(fields_at(&s, "network.existing").contains(&"vpc_id"));
        assert_eq!(variants_at(&s, "network.efa"), ["auto", "on", "off"]);
        assert!(fields_at(&s, "tags").is_empty());
    }
}
