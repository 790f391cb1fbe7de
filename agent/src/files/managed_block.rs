//! Our block inside a file we share with others (`/etc/hosts`, `/etc/fstab`,
//! known hosts, authorized keys, the SSH client config).
//!
//! The block sits between two marker lines, [`BEGIN`] and [`END`]; every
//! line outside it is kept byte for byte, whoever wrote it. [`merge`] is the
//! whole algorithm and is idempotent: merging the same body twice gives the
//! same file. Damaged files are repaired as follows:
//!
//! - No markers (or no file): the block is appended at the end (a final line
//!   without a newline gets one first, so the block starts on its own line).
//! - Several complete blocks: they collapse into one, at the first block's place.
//! - A `BEGIN` with no `END` after it (someone deleted the END line): only the
//!   dangling `BEGIN` line is removed, and the lines after it are **kept**, since
//!   we cannot know where our old block ended and the lines may be someone
//!   else's; the fresh block goes where a complete block was, else at the end.
//!   Replacing from `BEGIN` to the end of the file would be tidier but could
//!   delete lines we never owned.
//! - An `END` with no `BEGIN` before it (an `END` before the `BEGIN`): the
//!   stray `END` line is removed.
//! - CRLF files: markers are recognised with or without `\r`; the lines we do
//!   not own keep their `\r\n`, our own block is written with `\n`.
//!
//! The markers are `#` comments, valid in every file this is used for.

/// The line that opens our block.
pub(crate) const BEGIN: &str =
    "# BEGIN deeplearning-cluster (managed by the deeplearning agent; edits inside are replaced)";
/// The line that closes our block.
pub(crate) const END: &str = "# END deeplearning-cluster";

/// Recognises a BEGIN line even if someone edited the explanation after the name.
const BEGIN_PREFIX: &str = "# BEGIN deeplearning-cluster";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Begin,
    End,
    Other,
}

fn kind(line: &str) -> Kind {
    let line = line.trim_end_matches(['\n', '\r']).trim_end();
    if line == BEGIN_PREFIX || line.starts_with(&format!("{BEGIN_PREFIX} ")) {
        Kind::Begin
    } else if line == END {
        Kind::End
    } else {
        Kind::Other
    }
}

/// The block for `body` (lines without markers), markers included.
pub(crate) fn block(body: &str) -> String {
    let mut out = String::with_capacity(BEGIN.len() + END.len() + body.len() + 3);
    out.push_str(BEGIN);
    out.push('\n');
    out.push_str(body);
    if !body.is_empty() && !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(END);
    out.push('\n');
    out
}

/// `existing` with our block replaced by (or extended with) one holding `body`.
pub(crate) fn merge(existing: &str, body: &str) -> String {
    let lines: Vec<&str> = existing.split_inclusive('\n').collect();
    let kinds: Vec<Kind> = lines.iter().map(|l| kind(l)).collect();

    // Find complete blocks (BEGIN ... END with no BEGIN between); every other
    // marker line is dangling and dropped on its own.
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    let mut open: Option<usize> = None;
    for (i, k) in kinds.iter().enumerate() {
        match k {
            Kind::Begin => open = Some(i),
            Kind::End => {
                if let Some(b) = open.take() {
                    blocks.push((b, i));
                }
            }
            Kind::Other => {}
        }
    }
    let in_block = |i: usize| blocks.iter().any(|&(b, e)| b <= i && i <= e);

    let fresh = block(body);
    let mut out = String::with_capacity(existing.len() + fresh.len());
    let mut placed = false;
    for (i, line) in lines.iter().enumerate() {
        if in_block(i) {
            if !placed && blocks[0].0 == i {
                out.push_str(&fresh);
                placed = true;
            }
            continue;
        }
        if kinds[i] != Kind::Other {
            // A dangling BEGIN or a stray END.
            continue;
        }
        out.push_str(line);
    }
    if !placed {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&fresh);
    }
    out
}

/// The body of our block in `existing` (the first complete one), if any.
#[cfg(test)]
pub(crate) fn body_of(existing: &str) -> Option<String> {
    let mut body: Option<String> = None;
    for line in existing.split_inclusive('\n') {
        match (kind(line), &mut body) {
            (Kind::Begin, _) => body = Some(String::new()),
            (Kind::End, Some(b)) => return Some(std::mem::take(b)),
            (Kind::Other, Some(b)) => b.push_str(line),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: &str = BEGIN;
    const E: &str = END;

    #[test]
    fn table() {
        let body = "10.0.0.5 deeplearning-worker1\n";
        let new = block(body);
        // (case, existing, expected)
        let cases: Vec<(&str, String, String)> = vec![
            ("empty (or missing) file", String::new(), new.clone()),
            (
                "no markers: appended, foreign lines kept",
                "127.0.0.1 localhost\n".into(),
                format!("127.0.0.1 localhost\n{new}"),
            ),
            (
                "markers present: replaced in place",
                format!("127.0.0.1 localhost\n{B}\n10.0.0.9 old\n{E}\n::1 ip6-localhost\n"),
                format!("127.0.0.1 localhost\n{new}::1 ip6-localhost\n"),
            ),
            ("empty block present", format!("a\n{B}\n{E}\nb\n"), format!("a\n{new}b\n")),
            (
                "BEGIN without END: the dangling BEGIN goes, the lines after it stay, a fresh block is appended",
                format!("a\n{B}\n10.0.0.9 old\nb\n"),
                format!("a\n10.0.0.9 old\nb\n{new}"),
            ),
            (
                "duplicated blocks collapse into one at the first position",
                format!("a\n{B}\nold1\n{E}\nb\n{B}\nold2\n{E}\nc\n"),
                format!("a\n{new}b\nc\n"),
            ),
            (
                "END before BEGIN: the stray END goes",
                format!("a\n{E}\nb\n{B}\nold\n{E}\nc\n"),
                format!("a\nb\n{new}c\n"),
            ),
            (
                "END then BEGIN, nothing else: both dangling, block appended",
                format!("a\n{E}\nb\n{B}\nc\n"),
                format!("a\nb\nc\n{new}"),
            ),
            (
                "two BEGINs then one END: the first BEGIN is dangling",
                format!("a\n{B}\nx\n{B}\nold\n{E}\nb\n"),
                format!("a\nx\n{new}b\n"),
            ),
            (
                "CRLF lines: foreign lines keep CRLF, markers with CR are recognised",
                format!("127.0.0.1 localhost\r\n{B}\r\nold\r\n{E}\r\n::1 localhost\r\n"),
                format!("127.0.0.1 localhost\r\n{new}::1 localhost\r\n"),
            ),
            (
                "no trailing newline: one is added before the block",
                "127.0.0.1 localhost".into(),
                format!("127.0.0.1 localhost\n{new}"),
            ),
            ("no trailing newline after END", format!("a\n{B}\nold\n{E}"), format!("a\n{new}")),
            (
                "no trailing newline after a foreign line that follows the block",
                format!("{B}\nold\n{E}\nlast"),
                format!("{new}last"),
            ),
            (
                "foreign lines between duplicated blocks are kept",
                format!("{B}\nold\n{E}\nforeign 1\nforeign 2\n{B}\n{E}\n"),
                format!("{new}foreign 1\nforeign 2\n"),
            ),
            (
                "marker-like lines with trailing spaces are ours; other comments are not",
                format!("# BEGIN deeplearning-clusterX\n{B}  \nold\n{E} \n# END\n"),
                format!("# BEGIN deeplearning-clusterX\n{new}# END\n"),
            ),
            (
                "an older BEGIN wording is still recognised",
                "# BEGIN deeplearning-cluster (old text)\nold\n# END deeplearning-cluster\n".into(),
                new.clone(),
            ),
        ];
        for (case, existing, expected) in cases {
            let merged = merge(&existing, body);
            assert_eq!(merged, expected, "case: {case}");
            assert_eq!(merge(&merged, body), merged, "idempotent: {case}");
            assert_eq!(body_of(&merged).as_deref(), Some(body), "body read back: {case}");
            assert_eq!(merged.matches(BEGIN).count(), 1, "one block: {case}");
        }
    }

    #[test]
    fn block_bodies_without_trailing_newline_and_empty_bodies() {
        assert_eq!(block("x"), format!("{B}\nx\n{E}\n"));
        assert_eq!(block(""), format!("{B}\n{E}\n"));
        assert_eq!(body_of("no block here\n"), None);
        assert_eq!(body_of(&format!("{B}\nunterminated\n")), None);
    }

    #[test]
    fn a_changed_body_replaces_the_old_one() {
        let first = merge("keep\n", "one\n");
        let second = merge(&first, "two\n");
        assert_eq!(second, format!("keep\n{B}\ntwo\n{E}\n"));
    }
}
