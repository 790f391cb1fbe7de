//! `/etc/profile.d/deeplearning.sh`: the `DEEPLEARNING_*` environment,
//! `EFS_MOUNT`, `DEEPLEARNING_SCRATCH` ([`crate::data::SCRATCH_ENV`]) while
//! the node's scratch volume is mounted, and the node's NCCL/EFA
//! environment, for every login shell and for `trainer`, which reads this
//! file on every host (a non-interactive `ssh host cmd` does not source
//! profile.d) and gives these variables to every rank.
//!
//! One `export NAME=VALUE` line per variable after a comment line; each
//! value is one shell word ([`quote`]), so a cluster name or mount point
//! with spaces, quotes or newlines cannot break (or inject into) every
//! user's login. The agent writes it with [`content`]; `trainer` reads it
//! back with [`parse`], which undoes [`quote`] (a value in quotes may span
//! lines).

/// The file, as on a node.
pub const PATH: &str = "/etc/profile.d/deeplearning.sh";

/// The cluster's name.
pub const CLUSTER_VAR: &str = "DEEPLEARNING_CLUSTER";
/// The generation of the manifest the file was written from.
pub const GENERATION_VAR: &str = "DEEPLEARNING_GENERATION";
/// The workers file ([`super::workers::PATH`]).
pub const WORKERS_PATH_VAR: &str = "DEEPLEARNING_WORKERS_PATH";
/// How many nodes the manifest has.
pub const WORKERS_COUNT_VAR: &str = "DEEPLEARNING_WORKERS_COUNT";
/// This node's GPUs.
pub const WORKER_GPU_COUNT_VAR: &str = "DEEPLEARNING_WORKER_GPU_COUNT";
/// The hostfile ([`super::hostfile::PATH`]).
pub const HOSTFILE_VAR: &str = "DEEPLEARNING_HOSTFILE";
/// The EFS mount point (the node config's `efs.mount`).
pub const EFS_MOUNT_VAR: &str = "EFS_MOUNT";

/// The file's first line.
pub const HEADER: &str = "# Written by the deeplearning agent from the cluster manifest; replaced on every change.\n";

/// The whole file: [`HEADER`], then `export NAME=VALUE` for each of `vars`
/// in order, each value [`quote`]d. Names are the caller's constants
/// (letters, digits and `_`), never data.
pub fn content<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::from(HEADER);
    for (name, value) in vars {
        out.push_str(&format!("export {name}={}\n", quote(value)));
    }
    out
}

/// `value` as one shell word: bare when it holds only characters no shell
/// treats specially, else in single quotes (a `'` inside becomes `'\''`).
/// [`parse`] undoes it.
pub fn quote(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:,+@%=".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// The `export`ed variables of `text`, in file order, each value as the
/// shell would see it: [`quote`] undone (single quotes, and a backslash
/// outside them, as sh reads them; a quoted value may span lines). Lines
/// that are not `export NAME=VALUE` with a name of letters, digits and `_`
/// are skipped.
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        let line = text[at..line_end].trim_start();
        let assignment = line.strip_prefix("export ").and_then(|rest| rest.split_once('=').map(|(n, _)| (rest, n)));
        let Some((rest, name)) = assignment else {
            at = line_end + 1;
            continue;
        };
        // `rest` ends where the line does.
        let value_start = line_end - rest.len() + name.len() + 1;
        let (value, end) = word(text, value_start);
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push((name.to_owned(), value));
        }
        at = text[end..].find('\n').map_or(text.len(), |i| end + i + 1);
    }
    out
}

/// The shell word of `text` that starts at `start`, unquoted, and where it
/// ends: at the first blank or newline outside single quotes.
fn word(text: &str, start: usize) -> (String, usize) {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = text[start..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            ' ' | '\t' | '\n' if !quoted => return (out, start + i),
            '\\' if !quoted => match chars.next() {
                // A backslash before a newline joins the lines.
                Some((_, '\n')) | None => {}
                Some((_, next)) => out.push(next),
            },
            c => out.push(c),
        }
    }
    (out, text.len())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn quoting() {
        let cases = [
            ("/efs", "/efs"),
            ("demo-1", "demo-1"),
            ("", "''"),
            ("my cluster", "'my cluster'"),
            ("it's", r"'it'\''s'"),
            ("$(reboot)", "'$(reboot)'"),
            ("a\nb", "'a\nb'"),
            ("`x`;y", "'`x`;y'"),
        ];
        for (value, expected) in cases {
            assert_eq!(quote(value), expected, "{value:?}");
        }
        // The quoted form means the original to a real shell.
        for value in ["it's", "$(reboot)", "a b\tc", "x'y'z", "\"q\"", "=ens5", "a\nb", "$HOME", "é ü 名前"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(value)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), value);
        }
    }

    #[test]
    fn reads_what_is_written_and_skips_the_rest() {
        let text = "# Written by the deeplearning agent\nexport DEEPLEARNING_CLUSTER='my cluster'\n\
                    export DEEPLEARNING_WORKERS_COUNT=3\nexport EFS_MOUNT='/mnt/it'\\''s'\nexport ='x'\nPATH=/bin\n";
        assert_eq!(
            parse(text),
            [
                ("DEEPLEARNING_CLUSTER".to_owned(), "my cluster".to_owned()),
                ("DEEPLEARNING_WORKERS_COUNT".to_owned(), "3".to_owned()),
                ("EFS_MOUNT".to_owned(), "/mnt/it's".to_owned()),
            ]
        );
        assert_eq!(parse("export NCCL_SOCKET_IFNAME==ens5\n"), [("NCCL_SOCKET_IFNAME".to_owned(), "=ens5".to_owned())]);
        // A value in quotes over two lines is one value, and the line after it is read.
        assert_eq!(
            parse("export A='x\nexport B=y'\nexport C=z"),
            [("A".to_owned(), "x\nexport B=y".to_owned()), ("C".to_owned(), "z".to_owned())]
        );
    }

    /// Values that trip a shell or a line-by-line reader.
    fn awkward() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just(" ".to_owned()),
            Just("'".to_owned()),
            Just("\"".to_owned()),
            Just("\n".to_owned()),
            Just("\r\n".to_owned()),
            Just("\t".to_owned()),
            Just("$".to_owned()),
            Just("$(reboot)".to_owned()),
            Just("`id`".to_owned()),
            Just("\\".to_owned()),
            Just("'\\''".to_owned()),
            Just("export X=".to_owned()),
            Just("#".to_owned()),
            Just("=".to_owned()),
            Just("é名🙂".to_owned()),
            "[a-zA-Z0-9_./:-]{0,6}",
        ];
        prop_oneof![prop::collection::vec(piece, 0..8).prop_map(|p| p.concat()), any::<String>()]
    }

    proptest! {
        /// The agent's writer and the trainer's reader agree on every value.
        #[test]
        fn every_value_round_trips(values in prop::collection::vec(awkward(), 1..5)) {
            let names = ["DEEPLEARNING_CLUSTER", "EFS_MOUNT", "NCCL_SOCKET_IFNAME", "FI_PROVIDER", "DEEPLEARNING_SCRATCH"];
            let vars: Vec<(&str, &str)> = names.iter().copied().zip(values.iter().map(String::as_str)).collect();
            let back = parse(&content(vars.iter().copied()));
            let back: Vec<(&str, &str)> = back.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            prop_assert_eq!(back, vars);
        }
    }
}
