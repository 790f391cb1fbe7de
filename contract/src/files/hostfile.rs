//! `/opt/deeplearning/hostfile`: `<alias> slots=<gpus>` per line, master
//! first, the format mpirun (Open MPI), Horovod and DeepSpeed read.
//! `$DEEPLEARNING_HOSTFILE` ([`super::profile::HOSTFILE_VAR`]) points here.
//!
//! A node without GPUs gets one slot ([`slots`]), so CPU-only clusters still
//! run one process per node.
//!
//! The reader ([`parse_line`]) reads this file, the workers file (a hosts
//! file whose lines have no slots) and a hosts file a user wrote for
//! `trainer launch --hosts` (blank lines, `#` comments, mpirun's
//! `max_slots=`), and refuses what cannot name a host.

/// The file, as on a node.
pub const PATH: &str = "/opt/deeplearning/hostfile";

/// The most processes one host runs: `slots=N` above it is refused (and
/// `trainer launch --nproc-per-node N` too) before anything starts. One
/// rank per GPU is usual and EC2's largest instances have 8 to 16
/// accelerators; 256 also allows one rank per vCPU of a p5.48xlarge (192)
/// for CPU jobs. Every rank costs the launcher an ssh connection, its pipes
/// and a log file.
pub const MAX_SLOTS_PER_HOST: u32 = 256;

/// The slots of a node with `gpus` GPUs: one per GPU, one without GPUs.
pub fn slots(gpus: u32) -> u32 {
    gpus.max(1)
}

/// The whole file for `hosts` (alias, GPUs), in the order given (the agent
/// gives them master first, then by index).
pub fn content<'a>(hosts: impl IntoIterator<Item = (&'a str, u32)>) -> String {
    hosts.into_iter().map(|(alias, gpus)| format!("{alias} slots={}\n", slots(gpus))).collect()
}

/// One line of a hosts file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// Alias, host name or address, as given to `ssh`.
    pub name: String,
    /// `slots=N`, when the line has it.
    pub slots: Option<u32>,
}

/// Characters a host entry may hold: a name, an IPv4 or IPv6 address
/// (`:`, `%` for a zone), or `user@host` as ssh takes it. Anything else (a
/// NUL byte, a quote, `;`) cannot name a host and would only fail later,
/// after other ranks started.
fn is_host(name: &str) -> bool {
    name.len() <= 255 && name.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:@%".contains(c))
}

/// One line of a hosts file: `Ok(None)` for a blank line or a `#` comment,
/// the entry, or why the line is not one (the caller names the file and
/// the line).
pub fn parse_line(raw: &str) -> Result<Option<HostEntry>, &'static str> {
    let line = raw.split('#').next().unwrap_or_default().trim();
    if line.is_empty() {
        return Ok(None);
    }
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or_default();
    if name.contains('=') || name.starts_with('-') {
        return Err("the first word must be a host name");
    }
    if !is_host(name) {
        return Err("a host is a name, an address or user@host (letters, digits and . - _ : @ %)");
    }
    let mut slots = None;
    for word in words {
        match word.split_once('=') {
            Some(("slots", n)) => {
                let n = n.parse::<u32>().ok().filter(|n| *n > 0).ok_or("slots must be >= 1")?;
                if n > MAX_SLOTS_PER_HOST {
                    return Err("slots must be at most 256 per host");
                }
                slots = Some(n);
            }
            // mpirun's hostfile also allows max_slots; it does not change how many we start.
            Some(("max_slots", _)) => {}
            _ => return Err("unknown word"),
        }
    }
    Ok(Some(HostEntry { name: name.to_owned(), slots }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let hosts = [("deeplearning-worker1", 8), ("deeplearning-worker2", 0), ("deeplearning-worker3", 256)];
        let text = content(hosts);
        assert_eq!(
            text,
            "deeplearning-worker1 slots=8\ndeeplearning-worker2 slots=1\ndeeplearning-worker3 slots=256\n"
        );
        let back: Vec<HostEntry> = text.lines().filter_map(|l| parse_line(l).unwrap()).collect();
        let read: Vec<_> = back.iter().map(|h| (h.name.as_str(), h.slots.unwrap())).collect();
        assert_eq!(read, hosts.map(|(alias, gpus)| (alias, slots(gpus))));
        assert_eq!(MAX_SLOTS_PER_HOST, 256, "the refusal's message says 256");
    }

    #[test]
    fn lines_a_user_may_write() {
        assert_eq!(parse_line("  # a comment"), Ok(None));
        assert_eq!(parse_line(""), Ok(None));
        let entry = |name: &str, slots| Ok(Some(HostEntry { name: name.into(), slots }));
        assert_eq!(parse_line("h3 slots=2 max_slots=8 # gpus"), entry("h3", Some(2)));
        assert_eq!(parse_line("ubuntu@10.0.0.5"), entry("ubuntu@10.0.0.5", None));
        for (line, reason) in [
            ("b slots=0", "slots must be >= 1"),
            ("a gpus=2", "unknown word"),
            ("a slots=257", "slots must be at most 256 per host"),
            ("h1;reboot", "a host is a name, an address or user@host (letters, digits and . - _ : @ %)"),
            ("slots=2", "the first word must be a host name"),
        ] {
            assert_eq!(parse_line(line), Err(reason), "{line}");
        }
    }
}
