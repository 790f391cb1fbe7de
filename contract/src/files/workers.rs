//! `/opt/deeplearning/workers`: one alias per line, master first, in index
//! order. `$DEEPLEARNING_WORKERS_PATH` ([`super::profile::WORKERS_PATH_VAR`])
//! points here; the format is what MXNet's `launch.py -H` reads, so the file
//! has no comments. It is read back as a hosts file without slots
//! ([`super::hostfile::parse_line`]).

/// The file, as on a node.
pub const PATH: &str = "/opt/deeplearning/workers";

/// The whole file for `aliases`, in the order given (the agent gives them
/// master first, then by index).
pub fn content<'a>(aliases: impl IntoIterator<Item = &'a str>) -> String {
    aliases.into_iter().map(|alias| format!("{alias}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::super::hostfile::{HostEntry, parse_line};
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let aliases = ["deeplearning-worker1", "deeplearning-worker2", "deeplearning-worker10"];
        let text = content(aliases);
        assert_eq!(text, "deeplearning-worker1\ndeeplearning-worker2\ndeeplearning-worker10\n");
        let back: Vec<HostEntry> = text.lines().filter_map(|l| parse_line(l).unwrap()).collect();
        let names: Vec<_> = back.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, aliases.map(|a| (a, None)));
        assert_eq!(content([]), "");
    }
}
