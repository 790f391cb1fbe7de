//! Problems found in a blueprint, and how they are shown to users.
//!
//! A [`Diagnostic`] names the field (`workers.count`), where it is (line and
//! column, 1-based, plus the byte range to underline), what is wrong, and what
//! to do. [`Diagnostics`] is the error [`super::load`] returns: every problem
//! found, with the text they point into, so `Display` prints them rustc-style
//! (through `annotate-snippets`, without colour, so the output is the same on
//! a terminal, in a log and in a snapshot).
//!
//! What a message can grow with is bounded: values from the blueprint are
//! echoed through [`shown`] (cut at [`MAX_SHOWN_CHARS`]), and a report lists
//! the first [`MAX_REPORTED`] problems and counts the rest.

use std::fmt;
use std::ops::Range;

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

/// Problems printed in full; the rest are counted ("and 9,950 more").
pub(super) const MAX_REPORTED: usize = 50;

/// Characters of a blueprint value echoed in a message; a longer value is
/// cut, with its length said.
pub(crate) const MAX_SHOWN_CHARS: usize = 160;

/// `value` for a message: whole when short, else its first
/// [`MAX_SHOWN_CHARS`] characters, an ellipsis and its length.
pub(crate) fn shown(value: &str) -> String {
    match value.char_indices().nth(MAX_SHOWN_CHARS) {
        None => value.to_owned(),
        Some((cut, _)) => format!("{}… ({} characters)", &value[..cut], value.chars().count()),
    }
}

/// [`shown`] in backticks: "`p3.2xlarge`".
pub(crate) fn ticked(value: &str) -> String {
    match value.char_indices().nth(MAX_SHOWN_CHARS) {
        None => format!("`{value}`"),
        Some((cut, _)) => format!("`{}…` ({} characters)", &value[..cut], value.chars().count()),
    }
}

/// Bytes of a long line shown after the underlined span.
const MAX_TAIL_BYTES: usize = 256;

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The blueprint cannot be built.
    Error,
    /// The blueprint builds, but probably not into what the user wants.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// A place in the blueprint text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Byte range to underline.
    pub span: Range<usize>,
}

/// One problem in a blueprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The field, as a dotted path such as `workers.count` or
    /// `network.existing.private_subnet_ids[1]`; empty for the whole document.
    pub path: String,
    /// 1-based line of the value (or of the key, for a missing or unknown field).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The bytes of the blueprint text the message is about.
    pub span: Range<usize>,
    /// What is wrong: the field, the value, what is allowed.
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    pub(crate) fn new(
        severity: Severity,
        path: impl Into<String>,
        location: Location,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity,
            path: path.into(),
            line: location.line,
            column: location.column,
            span: location.span,
            message: message.into(),
            help: None,
        }
    }

    pub(crate) fn error(path: impl Into<String>, location: Location, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, path, location, message)
    }

    pub(crate) fn warning(path: impl Into<String>, location: Location, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, path, location, message)
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The title line's text: `workers.count: expected ...`.
    fn title(&self) -> String {
        if self.path.is_empty() { self.message.clone() } else { format!("{}: {}", self.path, self.message) }
    }

    /// Renders this one problem rustc-style, pointing into `text` (the
    /// blueprint) read from `path`.
    pub fn render(&self, text: &str, path: &str) -> String {
        let level = match self.severity {
            Severity::Error => Level::ERROR,
            Severity::Warning => Level::WARNING,
        };
        let title = self.title();
        // A span outside the text (it cannot happen for spans made by this
        // module, but the fields are public) falls back to the line start.
        let span = if self.span.start <= self.span.end
            && self.span.end <= text.len()
            && text.is_char_boundary(self.span.start)
            && text.is_char_boundary(self.span.end)
        {
            self.span.clone()
        } else {
            0..0
        };
        // Only the line the span starts on goes to the renderer, which
        // otherwise walks the whole text for every problem (quadratic in a
        // report with many); a line is cut [`MAX_TAIL_BYTES`] after the span.
        let line_begin = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[span.start..].find('\n').map_or(text.len(), |i| span.start + i);
        let mut cut = line_end.min(span.end.max(span.start) + MAX_TAIL_BYTES).max(span.end.min(line_end));
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let line_number = 1 + text.as_bytes()[..line_begin].iter().filter(|b| **b == b'\n').count();
        let local = span.start - line_begin..span.end.min(cut) - line_begin;
        let mut group = level.primary_title(title.as_str()).element(
            Snippet::source(&text[line_begin..cut])
                .line_start(line_number)
                .path(path)
                .fold(true)
                .annotation(AnnotationKind::Primary.span(local)),
        );
        if let Some(help) = &self.help {
            group = group.element(Level::HELP.message(help.as_str()));
        }
        let report: [Group<'_>; 1] = [group];
        Renderer::plain().render(&report)
    }
}

/// Every problem [`super::load`] found, with the text they point into.
#[derive(Clone, Debug)]
pub struct Diagnostics {
    /// Errors first, then warnings; each in the order of the text.
    pub items: Vec<Diagnostic>,
    text: String,
    path: String,
}

impl Diagnostics {
    pub(crate) fn new(mut items: Vec<Diagnostic>, text: &str, path: &str) -> Self {
        items.sort_by_key(|d| (d.severity, d.line, d.column));
        Diagnostics { items, text: text.to_owned(), path: path.to_owned() }
    }

    /// How many of the problems are errors.
    pub fn error_count(&self) -> usize {
        self.items.iter().filter(|d| d.severity == Severity::Error).count()
    }

    /// Every problem rendered, separated by blank lines, with a count at the
    /// end when there is more than one.
    pub fn render(&self) -> String {
        render_all(&self.items, &self.text, &self.path)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for Diagnostics {}

/// Renders several problems (for example the warnings of a blueprint that
/// loaded) into one text: the first [`MAX_REPORTED`] in full, separated by
/// blank lines, then how many more there are, and a count at the end when
/// there is more than one.
pub fn render_all(items: &[Diagnostic], text: &str, path: &str) -> String {
    let mut out = items.iter().take(MAX_REPORTED).map(|d| d.render(text, path)).collect::<Vec<_>>().join("\n\n");
    if items.len() > MAX_REPORTED {
        let rest = &items[MAX_REPORTED..];
        let fields: Vec<&str> = rest.iter().take(5).map(|d| d.path.as_str()).filter(|p| !p.is_empty()).collect();
        out.push_str(&format!(
            "\n\n... and {} more, not shown{}",
            rest.len(),
            if fields.is_empty() { String::new() } else { format!(" (at {}, ...)", fields.join(", ")) }
        ));
    }
    if items.len() > 1 {
        let errors = items.iter().filter(|d| d.severity == Severity::Error).count();
        let warnings = items.len() - errors;
        let mut counts = Vec::new();
        if errors > 0 {
            counts.push(plural(errors, "error"));
        }
        if warnings > 0 {
            counts.push(plural(warnings, "warning"));
        }
        out.push_str(&format!(
            "\n\n{}: {} in {path}",
            if errors > 0 { "error" } else { "warning" },
            counts.join(" and ")
        ));
    }
    out.push('\n');
    out
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_rustc_without_colour() {
        let text = "name: x\nworkers:\n  count: eight\n";
        let d = Diagnostic::error(
            "workers.count",
            Location { line: 3, column: 10, span: 26..31 },
            "expected a whole number",
        )
        .with_help("write digits");
        let out = d.render(text, "x.yaml");
        assert!(out.starts_with("error: workers.count: expected a whole number\n"), "{out}");
        assert!(out.contains("--> x.yaml:3:10"), "{out}");
        assert!(out.contains("^^^^^"), "{out}");
        assert!(out.contains("= help: write digits"), "{out}");
        assert!(!out.contains('\u{1b}'), "no colour codes: {out:?}");
    }

    #[test]
    fn sorts_errors_before_warnings_and_counts_them() {
        let at = |line| Location { line, column: 1, span: 0..1 };
        let ds = Diagnostics::new(
            vec![
                Diagnostic::warning("a", at(1), "w"),
                Diagnostic::error("b", at(2), "e2"),
                Diagnostic::error("c", at(1), "e1"),
            ],
            "a\nb\n",
            "p.yaml",
        );
        let paths: Vec<_> = ds.items.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["c", "b", "a"]);
        assert_eq!(ds.error_count(), 2);
        assert!(ds.to_string().trim_end().ends_with("error: 2 errors and 1 warning in p.yaml"));
    }

    #[test]
    fn long_values_and_long_reports_are_cut() {
        assert_eq!(ticked("p3.2xlarge"), "`p3.2xlarge`");
        let long = "é".repeat(100_000);
        let t = ticked(&long);
        assert!(t.ends_with("…` (100000 characters)") && t.chars().count() < MAX_SHOWN_CHARS + 30, "{t}");
        let at = |line| Location { line, column: 1, span: 0..1 };
        let items: Vec<Diagnostic> = (1..=1000).map(|i| Diagnostic::error(format!("f{i}"), at(1), "bad")).collect();
        let out = render_all(&items, "x\n", "p.yaml");
        assert_eq!(out.matches("error: f").count(), MAX_REPORTED);
        assert!(out.contains("... and 950 more, not shown (at f51, f52, f53, f54, f55, ...)"), "{out}");
        assert!(out.trim_end().ends_with("error: 1000 errors in p.yaml"), "{out}");
    }

    #[test]
    fn a_bad_span_does_not_panic() {
        let d = Diagnostic {
            severity: Severity::Error,
            path: String::new(),
            line: 9,
            column: 9,
            span: 50..99,
            message: "m".into(),
            help: None,
        };
        assert!(d.render("ab", "p").contains("error: m"));
    }
}
