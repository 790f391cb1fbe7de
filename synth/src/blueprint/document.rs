//! The blueprint's YAML as a tree of nodes that remember where they are in
//! the text, built from `saphyr-parser` events.
//!
//! Everything after this step (serde, the source map, validation) works on
//! this tree, so every message can point at a line and column, and the YAML
//! problems serde would hide or stop at are caught here with a clear message:
//! syntax errors (tabs, bad indentation), duplicate keys, an empty file, more
//! than one document, a list or a bare value at the top level, and custom
//! tags. Aliases are expanded in place; the node count, the nesting depth and
//! the length of every value are capped so a hostile file (an alias "billion
//! laughs", ten thousand nested lists, a megabyte-long value) is an error,
//! not an exhausted machine. Every check here is linear in the text's size
//! (duplicate keys are found through a hash set per mapping).

use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span};

use super::diagnostic::{Diagnostic, Location, shown, ticked};

/// More nodes than any real blueprint has, after alias expansion.
const MAX_NODES: usize = 100_000;
/// Deeper than any real blueprint nests (the deepest field is four levels).
const MAX_DEPTH: usize = 64;
/// Longer than any blueprint value (the longest are paths and URLs: Linux
/// paths stop at 4096 bytes, SSM parameter names at 2048).
pub(crate) const MAX_SCALAR_BYTES: usize = 4096;

/// One YAML node and where it is.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// What the node holds.
    pub kind: NodeKind,
    /// Where it is in the text.
    pub location: Location,
}

/// The three kinds of YAML node.
#[derive(Clone, Debug)]
pub(crate) enum NodeKind {
    /// A scalar. `plain` is false for quoted and block scalars, which are
    /// always strings; plain ones may resolve to null, a boolean or a number.
    Scalar { value: String, plain: bool },
    /// A list.
    Sequence(Vec<Node>),
    /// A mapping; keys are scalars (enforced while building).
    Mapping(Vec<(Node, Node)>),
}

impl Node {
    /// The scalar's text, if it is a scalar.
    pub(super) fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Whether this is a plain scalar that YAML reads as null (`~`, `null`, or nothing).
    pub(super) fn is_null(&self) -> bool {
        matches!(&self.kind, NodeKind::Scalar { value, plain: true } if is_null_text(value))
    }

    /// A short description for messages: "a mapping", "a list", "the string \"x\"".
    pub(super) fn describe(&self) -> String {
        match &self.kind {
            NodeKind::Mapping(_) => "a mapping".into(),
            NodeKind::Sequence(_) => "a list".into(),
            NodeKind::Scalar { value, plain } => {
                if *plain && is_null_text(value) {
                    "nothing (an empty value)".into()
                } else {
                    format!("the value {}", shown(&format!("{value:?}")))
                }
            }
        }
    }
}

impl Node {
    /// The node as block-style YAML that serde_yaml_ng reads as it reads the
    /// original: plain scalars keep their text (so they resolve as they did),
    /// quoted and block scalars and folded plain ones become double-quoted
    /// strings. Used to read a blueprint again with a wrong value taken out,
    /// so every type error is found in one run (see `deserialize`).
    pub(super) fn to_yaml(&self) -> String {
        let mut out = String::new();
        match &self.kind {
            NodeKind::Mapping(entries) if entries.is_empty() => out.push_str("{}\n"),
            NodeKind::Sequence(items) if items.is_empty() => out.push_str("[]\n"),
            NodeKind::Scalar { .. } => {
                self.emit_scalar(&mut out);
                out.push('\n');
            }
            _ => self.emit_block(&mut out, 0),
        }
        out
    }

    /// A mapping's or a sequence's lines at `indent` spaces.
    fn emit_block(&self, out: &mut String, indent: usize) {
        let child = |out: &mut String, node: &Node| match &node.kind {
            NodeKind::Mapping(e) if !e.is_empty() => {
                out.push('\n');
                node.emit_block(out, indent + 2);
            }
            NodeKind::Sequence(i) if !i.is_empty() => {
                out.push('\n');
                node.emit_block(out, indent + 2);
            }
            NodeKind::Mapping(_) => out.push_str(" {}\n"),
            NodeKind::Sequence(_) => out.push_str(" []\n"),
            NodeKind::Scalar { .. } => {
                out.push(' ');
                node.emit_scalar(out);
                out.push('\n');
            }
        };
        match &self.kind {
            NodeKind::Mapping(entries) => {
                for (key, value) in entries {
                    out.extend(std::iter::repeat_n(' ', indent));
                    key.emit_scalar(out);
                    out.push(':');
                    child(out, value);
                }
            }
            NodeKind::Sequence(items) => {
                for item in items {
                    out.extend(std::iter::repeat_n(' ', indent));
                    out.push('-');
                    child(out, item);
                }
            }
            NodeKind::Scalar { .. } => self.emit_scalar(out),
        }
    }

    fn emit_scalar(&self, out: &mut String) {
        if let NodeKind::Scalar { value, plain } = &self.kind {
            // A plain scalar was valid plain text where it was written, and
            // block context allows more than flow context; one folded over
            // lines holds a line break and is a string whatever its style.
            if *plain && !value.contains('\n') {
                out.push_str(value);
            } else {
                out.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned()));
            }
        }
    }
}

/// Whether a plain scalar's text is null under the YAML 1.2 core schema.
fn is_null_text(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// Converts saphyr's character positions to byte offsets and 1-based columns.
pub(crate) struct Positions<'t> {
    text: &'t str,
    /// Byte offset of every character, plus one past the end; empty when the
    /// text is ASCII (then character index = byte offset).
    char_to_byte: Vec<usize>,
}

impl<'t> Positions<'t> {
    pub(super) fn new(text: &'t str) -> Self {
        let char_to_byte = if text.is_ascii() {
            Vec::new()
        } else {
            text.char_indices().map(|(b, _)| b).chain(std::iter::once(text.len())).collect()
        };
        Positions { text, char_to_byte }
    }

    fn byte(&self, char_index: usize) -> usize {
        if self.char_to_byte.is_empty() {
            char_index.min(self.text.len())
        } else {
            self.char_to_byte.get(char_index).copied().unwrap_or(self.text.len())
        }
    }

    /// The location of a marker, one character wide (or empty at the end of the text).
    pub(super) fn at(&self, marker: &Marker) -> Location {
        let start = self.byte(marker.index());
        let end = self.text[start..].chars().next().map_or(start, |c| start + c.len_utf8());
        Location { line: marker.line(), column: marker.col() + 1, span: start..end }
    }

    /// The location of a span, cut at the end of its first line so an
    /// underline never runs over several lines.
    pub(super) fn span(&self, span: &Span) -> Location {
        let start = self.byte(span.start.index());
        let end = self.byte(span.end.index()).max(start);
        let line_end = self.text[start..].find('\n').map_or(self.text.len(), |i| start + i);
        let mut end = end.min(line_end);
        // Trailing blanks before a comment or the line end are not part of the value.
        while end > start && self.text.as_bytes()[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        if end == start {
            return self.at(&span.start);
        }
        Location { line: span.start.line(), column: span.start.col() + 1, span: start..end }
    }

    /// The location of the first character of the text, for problems with the
    /// whole document.
    pub(super) fn document_start(&self) -> Location {
        let end = self.text.chars().next().map_or(0, char::len_utf8);
        Location { line: 1, column: 1, span: 0..end }
    }
}

/// A container being built: its start, its kind and what it holds so far.
enum Open {
    Sequence {
        location: Location,
        anchor: usize,
        items: Vec<Node>,
    },
    Mapping {
        location: Location,
        anchor: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
        /// Each key so far and its line, to find a duplicate without a scan.
        lines: HashMap<String, usize>,
    },
}

/// The path (`tags.team`, `workers.instance_types[2]`) of the node being
/// read inside `stack`, and whether it is a mapping's key rather than a value.
fn path_in(stack: &[Open]) -> (String, bool) {
    let mut path = String::new();
    for open in stack {
        match open {
            Open::Sequence { items, .. } => path.push_str(&format!("[{}]", items.len())),
            Open::Mapping { key: Some(key), .. } => {
                let key = key.scalar().unwrap_or("?");
                path = if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
            }
            Open::Mapping { key: None, .. } => return (path, true),
        }
    }
    (path, false)
}

/// Parses the whole text into one node. Errors are complete diagnostics.
pub(crate) fn parse(text: &str) -> Result<Node, Diagnostic> {
    let positions = Positions::new(text);
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    let mut nodes = 0usize;
    let mut aliases = false;

    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| syntax_error(&positions, text, e.marker(), e.info()))?;
        let location = positions.span(&span);
        let finished: Node = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => continue,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(Diagnostic::error(
                        "",
                        positions.at(&span.start),
                        "a blueprint is one YAML document, but this file has a second one",
                    )
                    .with_help(
                        "remove the `---` line and what follows it, or put the second blueprint in its own file",
                    ));
                }
                continue;
            }
            Event::Alias(id) => {
                let Some(target) = anchors.get(&id) else {
                    return Err(Diagnostic::error(
                        "",
                        location,
                        "this alias names an anchor that is not defined before it",
                    )
                    .with_help(
                        "define the anchor (`&name`) on a complete value above the alias, or write the value out",
                    ));
                };
                nodes += count_nodes(target);
                aliases = true;
                let mut copy = target.clone();
                // The copy points at the alias, so messages about it point where the user wrote it.
                copy.location = location;
                copy
            }
            Event::Scalar(value, style, anchor, tag) => {
                if value.len() > MAX_SCALAR_BYTES {
                    let (path, is_key) = path_in(&stack);
                    let what = match (is_key, path.is_empty()) {
                        (true, true) => "this key at the top level".to_owned(),
                        (true, false) => format!("this key in `{path}`"),
                        (false, _) => "this value".to_owned(),
                    };
                    return Err(Diagnostic::error(
                        if is_key { "" } else { path.as_str() },
                        location,
                        format!(
                            "{what} is {} bytes long; no blueprint field takes more than {MAX_SCALAR_BYTES}",
                            value.len()
                        ),
                    )
                    .with_help("shorten it; a blueprint holds names, sizes, ids, paths and URLs"));
                }
                let plain = style == ScalarStyle::Plain;
                let plain = match tag {
                    None => plain,
                    // `!!str 8` is a string; other core tags (`!!int 8`) keep plain resolution.
                    Some(tag) if tag.is_yaml_core_schema() => plain && tag.suffix != "str",
                    Some(tag) => return Err(unsupported_tag(&positions, &span, &tag.to_string())),
                };
                let node = Node { kind: NodeKind::Scalar { value: value.into_owned(), plain }, location };
                if anchor > 0 {
                    anchors.insert(anchor, node.clone());
                }
                nodes += 1;
                node
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                if let Some(tag) = tag.as_ref().filter(|t| !t.is_yaml_core_schema()) {
                    return Err(unsupported_tag(&positions, &span, &tag.to_string()));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(Diagnostic::error(
                        "",
                        location,
                        format!("the YAML nests more than {MAX_DEPTH} levels deep"),
                    ));
                }
                let location = positions.at(&span.start);
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Open::Sequence { location, anchor, items: Vec::new() }
                } else {
                    Open::Mapping { location, anchor, entries: Vec::new(), key: None, lines: HashMap::new() }
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match stack.pop() {
                    Some(Open::Sequence { location, anchor, items }) => {
                        (Node { kind: NodeKind::Sequence(items), location }, anchor)
                    }
                    Some(Open::Mapping { location, anchor, entries, .. }) => {
                        (Node { kind: NodeKind::Mapping(entries), location }, anchor)
                    }
                    // The parser never ends a container it did not start; if it
                    // ever does, say so instead of panicking.
                    None => {
                        return Err(Diagnostic::error(
                            "",
                            location,
                            "the YAML parser ended a list or mapping it never started",
                        ));
                    }
                };
                if anchor > 0 {
                    anchors.insert(anchor, node.clone());
                }
                nodes += 1;
                node
            }
        };
        if nodes > MAX_NODES {
            let message = if aliases {
                format!(
                    "the YAML expands to more than {MAX_NODES} values through its aliases; no blueprint is that large"
                )
            } else {
                format!("the YAML has more than {MAX_NODES} values; no blueprint is that large")
            };
            return Err(Diagnostic::error("", finished.location, message)
                .with_help("a blueprint needs a few dozen values; remove what is not part of the cluster"));
        }
        match stack.last_mut() {
            None => {
                root = Some(finished);
            }
            Some(Open::Sequence { items, .. }) => items.push(finished),
            Some(Open::Mapping { entries, key, lines, .. }) => match key.take() {
                None => {
                    let Some(name) = finished.scalar() else {
                        return Err(Diagnostic::error(
                            "",
                            finished.location.clone(),
                            format!("a mapping key must be a plain name, found {}", finished.describe()),
                        )
                        .with_help("write keys as `name: value`"));
                    };
                    if let Some(first) = lines.get(name) {
                        return Err(Diagnostic::error(
                            "",
                            finished.location.clone(),
                            format!("duplicate key {}: it is already set on line {first}", ticked(name)),
                        )
                        .with_help("keep one of the two lines; YAML does not allow a key twice in one mapping"));
                    }
                    lines.insert(name.to_owned(), finished.location.line);
                    *key = Some(finished);
                }
                Some(k) => entries.push((k, finished)),
            },
        }
    }

    match root {
        Some(root) if root.is_null() || documents == 0 => Err(empty(&positions)),
        Some(root) => Ok(root),
        None => Err(empty(&positions)),
    }
}

fn empty(positions: &Positions<'_>) -> Diagnostic {
    Diagnostic::error("", positions.document_start(), "the blueprint is empty")
        .with_help("a blueprint needs at least `name`, `master.instance_type`, `workers.instance_type` and `workers.count`; copy one from `blueprints/`")
}

fn syntax_error(positions: &Positions<'_>, text: &str, marker: &Marker, info: &str) -> Diagnostic {
    // The scanner reports a tab where the token it was reading began, which
    // can be a line above the tab; point at the tab itself.
    // "tab" as a word: "found unprintable character" is about something else.
    let tab = info.split(|c: char| !c.is_ascii_alphabetic()).any(|w| w == "tab" || w == "tabs");
    if tab && let Some(tab) = first_indenting_tab(text, marker.line()) {
        return Diagnostic::error("", positions.at(&tab), "the file is not valid YAML: a tab is used for indentation")
            .with_help("indent with spaces: YAML does not allow tabs in indentation");
    }
    let help = if tab {
        "indent with spaces: YAML does not allow tabs in indentation"
    } else if info.contains("unprintable") {
        "YAML does not allow this control character (a NUL byte, say): a blueprint is UTF-8 text, not a binary file"
    } else if info.contains("mapping values are not allowed") {
        "a value that contains `: ` must be quoted, and a nested mapping must be indented under its key"
    } else {
        "check the indentation and quoting around this position"
    };
    Diagnostic::error("", positions.at(marker), format!("the file is not valid YAML: {info}")).with_help(help)
}

/// The first tab in a line's leading whitespace, on `from_line` (1-based) or
/// later, as a marker.
fn first_indenting_tab(text: &str, from_line: usize) -> Option<Marker> {
    let mut char_index = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let indent: Vec<char> = line.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
        if i + 1 >= from_line
            && let Some(col) = indent.iter().position(|c| *c == '\t')
        {
            return Some(Marker::new(char_index + col, i + 1, col));
        }
        char_index += line.chars().count();
    }
    None
}

fn unsupported_tag(positions: &Positions<'_>, span: &Span, tag: &str) -> Diagnostic {
    Diagnostic::error(
        "",
        positions.at(&span.start),
        format!("YAML tags such as {} are not used in blueprints", ticked(tag)),
    )
    .with_help("write the plain value; CloudFormation functions are not needed in a blueprint")
}

fn count_nodes(node: &Node) -> usize {
    match &node.kind {
        NodeKind::Scalar { .. } => 1,
        NodeKind::Sequence(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        NodeKind::Mapping(entries) => 1 + entries.iter().map(|(k, v)| count_nodes(k) + count_nodes(v)).sum::<usize>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> Diagnostic {
        parse(text).expect_err("should fail")
    }

    #[test]
    fn nodes_know_their_positions() {
        let root = parse("name: x\nworkers:\n  count: eight\n").unwrap();
        let NodeKind::Mapping(entries) = &root.kind else { panic!("not a mapping") };
        let (key, value) = &entries[1];
        assert_eq!((key.location.line, key.location.column), (2, 1));
        let NodeKind::Mapping(inner) = &value.kind else { panic!("not a mapping") };
        let (k, v) = &inner[0];
        assert_eq!((k.location.line, k.location.column), (3, 3));
        assert_eq!((v.location.line, v.location.column), (3, 10));
        assert_eq!(v.location.span.len(), "eight".len());
    }

    #[test]
    fn columns_count_characters_and_spans_count_bytes() {
        let text = "tags: { owner: \"Zoë\", x: y }\n";
        let root = parse(text).unwrap();
        let NodeKind::Mapping(entries) = &root.kind else { panic!() };
        let NodeKind::Mapping(tags) = &entries[0].1.kind else { panic!() };
        let x = &tags[1].0;
        assert_eq!(x.location.column, 23);
        assert_eq!(&text[x.location.span.clone()], "x");
    }

    #[test]
    fn empty_documents_are_errors() {
        assert!(err("").message.contains("empty"));
        assert!(err("# only a comment\n").message.contains("empty"));
        assert!(err("---\n").message.contains("empty"));
    }

    #[test]
    fn duplicate_keys_name_the_first_line() {
        let d = err("a: 1\nb: 2\na: 3\n");
        assert!(d.message.contains("duplicate key `a`"), "{}", d.message);
        assert!(d.message.contains("line 1"));
        assert_eq!(d.line, 3);
    }

    #[test]
    fn tabs_are_syntax_errors_with_help() {
        let d = err("workers:\n\tcount: 1\n");
        assert!(d.message.contains("not valid YAML"), "{}", d.message);
        assert_eq!(d.line, 2);
        let d = err("workers:\n  type: p3.2xlarge\n\tcount: 1\n");
        assert_eq!((d.line, d.column), (3, 1), "{}", d.message);
    }

    #[test]
    fn second_documents_and_custom_tags_are_errors() {
        assert!(err("a: 1\n---\nb: 2\n").message.contains("second one"));
        assert!(err("a: !Ref x\n").message.contains("`!Ref`"));
    }

    #[test]
    fn aliases_expand_and_bombs_are_stopped() {
        let root = parse("a: &x [1, 2]\nb: *x\n").unwrap();
        let NodeKind::Mapping(entries) = &root.kind else { panic!() };
        assert!(matches!(&entries[1].1.kind, NodeKind::Sequence(items) if items.len() == 2));
        assert_eq!(entries[1].1.location.line, 2);

        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(err(&bomb).message.contains("more than"));
        assert!(err(&"[".repeat(500)).message.contains("nests") || err(&"[".repeat(500)).message.contains("YAML"));
    }
}
