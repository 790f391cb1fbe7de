//! `access`: how people reach the master: an SSH key pair and the range
//! SSH is open to, and Session Manager (on by default).

use super::{At, Checker, ticked};
use crate::spec::AccessSpec;
use ipnet::Ipv4Net;
use std::net::Ipv4Addr;

use super::network::parse_cidr;

impl Checker<'_> {
    pub(super) fn access(&mut self, access: Option<super::super::model::Access>, master_public: bool) -> AccessSpec {
        let (ssh, session_manager) = access.map_or((None, None), |a| (a.ssh, a.session_manager));
        let session_manager = session_manager.unwrap_or(true);
        let (key_name, cidr_text) = ssh.map_or((None, None), |s| (s.key_name, s.cidr));
        if let Some(problem) = key_name.as_deref().and_then(crate::spec::key_name_problem) {
            self.error(
                "access.ssh.key_name",
                At::Value,
                problem,
                "write the name of an EC2 key pair in the region (rename or import the key under a plainer name if needed), or remove `key_name`",
            );
        }
        let ssh_cidr = cidr_text.as_deref().and_then(|text| self.ssh_cidr(text));
        if cidr_text.is_some() && key_name.is_none() {
            self.warning(
                "access.ssh.cidr",
                At::Value,
                "SSH is opened to this range, but no key pair is set, so nobody outside the cluster holds a key that logs in",
                "set `access.ssh.key_name` to an EC2 key pair you have, or drop `cidr` and use Session Manager",
            );
        }
        if cidr_text.is_some() && !master_public {
            self.warning(
                "access.ssh.cidr",
                At::Value,
                "the master is private (`master.public: false`), so SSH from this range only reaches it from inside the VPC (a VPN or peering)",
                "use Session Manager to reach a private master, or set `master.public: true`",
            );
        }
        if cidr_text.is_none() && !session_manager {
            self.warning(
                "access.session_manager",
                At::Value,
                "with Session Manager off and no SSH range, nobody can log into the cluster",
                "keep `session_manager: true`, or set `access.ssh.cidr` to your own address (`x.x.x.x/32`)",
            );
        }
        AccessSpec { key_name, ssh_cidr, session_manager }
    }

    fn ssh_cidr(&mut self, text: &str) -> Option<Ipv4Net> {
        const PATH: &str = "access.ssh.cidr";
        match parse_cidr(text) {
            Err(problem) => {
                let help = if text.parse::<Ipv4Addr>().is_ok() {
                    format!("for this one address, write `{text}/32`")
                } else {
                    "write an IPv4 range such as `203.0.113.7/32` (your own address)".to_owned()
                };
                self.error(PATH, At::Value, format!("{} {problem}", ticked(text)), help);
                None
            }
            Ok(net) if net.prefix_len() == 0 => {
                self.error(
                    PATH,
                    At::Value,
                    format!("`{text}` opens SSH to the whole internet"),
                    "allow only your own address (`x.x.x.x/32`, see https://checkip.amazonaws.com), or drop `ssh.cidr` and use Session Manager",
                );
                None
            }
            Ok(net) if net.trunc() != net => {
                self.error(
                    PATH,
                    At::Value,
                    format!("{} has host bits set; the network is `{}`", ticked(text), net.trunc()),
                    format!("write `{}` for the whole range, or `{}/32` for this one address", net.trunc(), net.addr()),
                );
                None
            }
            Ok(net) => Some(net),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_names() {
        use crate::spec::key_name_problem;
        for ok in ["my-key", "dev key (2024)", "a;b$c", &"k".repeat(255)] {
            assert_eq!(key_name_problem(ok), None, "{ok}");
        }
        for bad in ["", " lead", "trail ", "it's", "tab\there", "ключ", &"k".repeat(256)] {
            assert!(key_name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
