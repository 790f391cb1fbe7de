//! `network`: a new VPC's range (private, /16 to /24, large enough for
//! `workers.max` in the subnets [`crate::spec::vpc_subnets`] makes of it) or an
//! existing VPC and its subnets; the cluster placement group; Elastic
//! Fabric Adapter (`on`, or `auto`: on where every node's type has it).

use super::super::model::{EfaMode, ExistingNetwork};
use super::super::suggestion::backticked;
use super::{At, Checker, is_aws_id, ticked};
use crate::catalog::{self, InstanceType};
use crate::spec::{NetworkSpec, WorkerSpec};
use ipnet::{IpNet, Ipv4Net};
use std::net::Ipv4Addr;

/// The VPC ranges synth lays subnets out in: a /16 has room for many, a
/// /24 is the smallest its four subnets fit in.
const VPC_PREFIXES: std::ops::RangeInclusive<u8> = 16..=24;

/// Types to name when saying which types support EFA; only the ones the
/// catalog confirms are shown, so the message never claims a wrong type.
const EFA_EXAMPLES: [&str; 6] =
    ["p4d.24xlarge", "p5.48xlarge", "p4de.24xlarge", "g5.48xlarge", "c5n.18xlarge", "hpc7g.16xlarge"];

/// How full the subnets of a new VPC get ([`crate::spec::vpc_subnets`]: four
/// equal blocks, two public and two private subnets, of which one of each is
/// used when every node must share one zone). Workers spread evenly over the
/// private subnets (Auto Scaling balances zones); each private subnet also
/// holds an EFS mount target, and the first one a private master.
/// <https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html>
struct SubnetLayout {
    vpc_prefix: u8,
    zones: u32,
    master_public: bool,
}

impl SubnetLayout {
    /// Addresses AWS keeps in every subnet (network, router, DNS, future, broadcast).
    const RESERVED: u32 = 5;

    fn subnet_prefix(&self) -> u8 {
        crate::spec::subnet_prefix(self.vpc_prefix)
    }

    fn usable(&self) -> u32 {
        (1u32 << (32 - u32::from(self.subnet_prefix()))).saturating_sub(Self::RESERVED)
    }

    /// Workers the first (fullest) private subnet takes, per zone.
    fn room_per_zone(&self) -> u32 {
        self.usable().saturating_sub(1 + u32::from(!self.master_public))
    }

    fn max_workers(&self) -> u32 {
        self.room_per_zone() * self.zones
    }

    fn fits(&self, workers: u32) -> bool {
        workers.div_ceil(self.zones) <= self.room_per_zone()
    }
}

/// "p4d.24xlarge, ..." from the EFA examples the catalog confirms.
fn efa_examples() -> String {
    let known: Vec<&str> = EFA_EXAMPLES.into_iter().filter(|n| catalog::lookup(n).is_some_and(|t| t.efa)).collect();
    if known.is_empty() {
        "see https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types".to_owned()
    } else {
        format!(
            "for example {}; all are listed at https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types",
            backticked(known)
        )
    }
}

/// Parses an IPv4 CIDR; the error says what is wrong with it.
pub(super) fn parse_cidr(text: &str) -> Result<Ipv4Net, &'static str> {
    if !text.contains('/') {
        return Err("has no prefix length (the `/N` part)");
    }
    match text.parse::<IpNet>() {
        Ok(IpNet::V4(net)) => Ok(net),
        Ok(IpNet::V6(_)) => Err("is an IPv6 range; only IPv4 ranges are supported here"),
        Err(_) => Err("is not an IPv4 range (CIDR) such as `10.0.0.0/16`"),
    }
}

fn default_vpc_cidr() -> Ipv4Net {
    Ipv4Net::new(Ipv4Addr::new(10, 0, 0, 0), 16).unwrap_or_default()
}

/// Whether `net` lies inside one of the RFC 1918 private ranges.
fn is_private(net: &Ipv4Net) -> bool {
    [(Ipv4Addr::new(10, 0, 0, 0), 8), (Ipv4Addr::new(172, 16, 0, 0), 12), (Ipv4Addr::new(192, 168, 0, 0), 16)]
        .into_iter()
        .filter_map(|(a, p)| Ipv4Net::new(a, p).ok())
        .any(|private| private.contains(net))
}

impl Checker<'_> {
    pub(super) fn network(
        &mut self,
        vpc_cidr: Option<String>,
        existing: Option<ExistingNetwork>,
        master_public: bool,
        placement_group: bool,
    ) -> NetworkSpec {
        if vpc_cidr.is_some() && existing.is_some() {
            self.error(
                "network.vpc_cidr",
                At::Key,
                "both `vpc_cidr` and `existing` are set; the cluster goes in a new VPC or an existing one, not both",
                "remove `vpc_cidr` to use the existing VPC, or `existing` to create a new VPC",
            );
        }
        if let Some(existing) = existing {
            return self.existing_network(existing, master_public, placement_group);
        }
        let text = vpc_cidr.unwrap_or_else(|| "10.0.0.0/16".to_owned());
        let vpc_cidr = match parse_cidr(&text) {
            Err(problem) => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} {problem}", ticked(&text)),
                    "write a private IPv4 range such as `10.0.0.0/16`",
                );
                default_vpc_cidr()
            }
            Ok(net) if net.trunc() != net => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} has host bits set; the network is `{}`", ticked(&text), net.trunc()),
                    format!("write `{}`", net.trunc()),
                );
                net.trunc()
            }
            Ok(net) if !VPC_PREFIXES.contains(&net.prefix_len()) => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} is a /{} range; a VPC is /16 to /24 here", ticked(&text), net.prefix_len()),
                    "use a /16 (room for many subnets) such as `10.0.0.0/16`; /24 is the smallest the subnets fit in",
                );
                net
            }
            Ok(net) if !is_private(&net) => {
                self.error(
                    "network.vpc_cidr",
                    At::Value,
                    format!("{} is not a private (RFC 1918) range", ticked(&text)),
                    "use a range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16, such as `10.0.0.0/16`",
                );
                net
            }
            Ok(net) => net,
        };
        NetworkSpec::New { vpc_cidr }
    }

    fn existing_network(&mut self, e: ExistingNetwork, master_public: bool, placement_group: bool) -> NetworkSpec {
        let private_subnet_ids = e.private_subnet_ids.unwrap_or_default();
        if !is_aws_id(&e.vpc_id, "vpc-") {
            self.error(
                "network.existing.vpc_id",
                At::Value,
                format!("{} is not a VPC id", ticked(&e.vpc_id)),
                "a VPC id is `vpc-` followed by 8 or 17 lower-case hex digits, for example `vpc-0123456789abcdef0`",
            );
        }
        let subnet_help = "a subnet id is `subnet-` followed by 8 or 17 lower-case hex digits, for example `subnet-0123456789abcdef0`";
        if let Some(id) = &e.public_subnet_id {
            if !is_aws_id(id, "subnet-") {
                self.error(
                    "network.existing.public_subnet_id",
                    At::Value,
                    format!("{} is not a subnet id", ticked(id)),
                    subnet_help,
                );
            }
            if !master_public {
                self.warning(
                    "network.existing.public_subnet_id",
                    At::Value,
                    "is not used: the master is private (`master.public: false`) and goes in a private subnet",
                    "remove `public_subnet_id`, or set `master.public: true`",
                );
            }
        } else if master_public {
            self.error(
                "network.existing.public_subnet_id",
                At::Key,
                "is missing; a public master (`master.public` is true by default) needs a public subnet",
                "add `public_subnet_id: subnet-...` (a subnet whose route table has an internet gateway), or set `master.public: false`",
            );
        }
        if private_subnet_ids.is_empty() {
            self.error(
                "network.existing.private_subnet_ids",
                At::Key,
                "is empty or missing; the workers need at least one private subnet",
                "list the private subnets the workers may use, for example `private_subnet_ids: [subnet-0123456789abcdef0]`",
            );
        }
        let mut seen = std::collections::HashSet::new();
        for (i, id) in private_subnet_ids.iter().enumerate() {
            let path = format!("network.existing.private_subnet_ids[{i}]");
            if !is_aws_id(id, "subnet-") {
                self.error(&path, At::Value, format!("{} is not a subnet id", ticked(id)), subnet_help);
            } else if !seen.insert(id.as_str()) {
                self.error(&path, At::Value, format!("{} is listed twice", ticked(id)), "list each subnet once");
            }
        }
        if private_subnet_ids.len() == 1 && !placement_group {
            self.warning(
                "network.existing.private_subnet_ids",
                At::Key,
                "one private subnet puts every worker in one Availability Zone; when that zone runs out of capacity, no worker can launch",
                "list private subnets in two or more zones, unless you want one zone (then also set `network.placement_group: true`)",
            );
        }
        NetworkSpec::Existing { vpc_id: e.vpc_id, public_subnet_id: e.public_subnet_id, private_subnet_ids }
    }

    /// Whether the new VPC's subnets hold `workers.max` workers beside the
    /// master, the EFS mount targets and the NAT gateway. Subnets of an
    /// existing VPC are not known here (their free addresses even less): a
    /// launch that finds no address fails there, and the master's formation
    /// message names the group's launch failure.
    pub(super) fn subnet_capacity(
        &mut self,
        network: &NetworkSpec,
        workers: &WorkerSpec,
        master_public: bool,
        one_zone: bool,
    ) {
        let NetworkSpec::New { vpc_cidr } = network else {
            return;
        };
        // A range outside /16 to /24 is refused on its own (above), and the
        // subnet arithmetic holds only within it (a /31 has no /33 subnets).
        if !VPC_PREFIXES.contains(&vpc_cidr.prefix_len()) {
            return;
        }
        // A public range is refused on its own too: one error per mistake,
        // and a larger range around it would be no more private.
        if !is_private(vpc_cidr) {
            return;
        }
        let layout =
            |prefix: u8| SubnetLayout { vpc_prefix: prefix, zones: if one_zone { 1 } else { 2 }, master_public };
        let here = layout(vpc_cidr.prefix_len());
        if here.fits(workers.max) {
            return;
        }
        let smallest = VPC_PREFIXES
            .rev()
            .find(|p| layout(*p).fits(workers.max))
            .and_then(|p| Ipv4Net::new(vpc_cidr.network(), p).ok())
            .map(|n| n.trunc());
        let (subnets, each, hold) = if here.zones == 1 {
            ("its one private subnet", "", "holds")
        } else {
            ("its 2 private subnets", " each", "hold")
        };
        let message = format!(
            "`{vpc_cidr}` is too small for {} workers: {subnets} (/{}{each}: {} addresses after the 5 AWS reserves in every subnet) {hold} at most {} workers beside the master and the EFS mount targets",
            workers.max,
            here.subnet_prefix(),
            here.usable(),
            here.max_workers()
        );
        let help = match smallest {
            Some(net) => format!(
                "use `vpc_cidr: {net}` or a larger range (the smallest that holds {} workers), or lower `workers.max` to {}",
                workers.max,
                here.max_workers()
            ),
            None => format!("lower `workers.max` to {}", here.max_workers()),
        };
        self.error("network.vpc_cidr", At::Value, message, help);
    }

    pub(super) fn placement(
        &mut self,
        placement_group: bool,
        master: Option<&InstanceType>,
        workers: &[&InstanceType],
    ) {
        if !placement_group {
            return;
        }
        let nodes = std::iter::once(("the master's", master)).chain(workers.iter().map(|t| ("the workers'", Some(*t))));
        for (whose, t) in nodes {
            if let Some(t) = t.filter(|t| !t.cluster_placement) {
                self.error(
                    "network.placement_group",
                    At::Value,
                    format!("is on, but {whose} type `{}` cannot be launched in a cluster placement group", t.name),
                    "set `placement_group: false`, or choose a type that supports cluster placement groups (see https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html)",
                );
            }
        }
    }

    pub(super) fn efa(
        &mut self,
        mode: EfaMode,
        master: Option<&InstanceType>,
        workers: &[&InstanceType],
        master_public: bool,
    ) -> bool {
        match mode {
            EfaMode::Off => false,
            EfaMode::On => {
                let nodes = std::iter::once(("master", master)).chain(workers.iter().map(|t| ("workers", Some(*t))));
                for (role, t) in nodes {
                    if let Some(t) = t.filter(|t| !t.efa) {
                        let whose = if role == "master" { "the master's" } else { "the workers'" };
                        self.error(
                            "network.efa",
                            At::Value,
                            format!("is `on`, but {whose} type `{}` does not support Elastic Fabric Adapter", t.name),
                            format!(
                                "choose an EFA type for `{role}.instance_type` ({}), or set `efa: auto`",
                                efa_examples()
                            ),
                        );
                    }
                }
                if master_public {
                    self.error(
                        "network.efa",
                        At::Value,
                        "is `on`, but the master is public; EFA traffic does not leave its subnet, so the master must sit in the workers' private subnet",
                        "set `master.public: false` and reach the master through Session Manager",
                    );
                }
                true
            }
            EfaMode::Auto => {
                let (Some(m), Some(w)) = (master, workers.first()) else {
                    return false;
                };
                // On only when every type a worker may be has EFA.
                let on = m.efa && workers.iter().all(|t| t.efa) && !master_public;
                let without = workers.iter().find(|t| !t.efa);
                if !on && w.efa {
                    let why = if !m.efa {
                        format!("the master's type `{}` does not support it", m.name)
                    } else if let Some(t) = without {
                        format!("the workers' type `{}` does not support it", t.name)
                    } else {
                        "the master is public, and EFA traffic does not leave the workers' private subnet".to_owned()
                    };
                    let help = if !m.efa {
                        format!(
                            "for EFA, choose an EFA type for the master ({}) and set `master.public: false`; or set `network.efa: off` to silence this",
                            efa_examples()
                        )
                    } else if without.is_some() {
                        "for EFA, list only EFA types under `workers.instance_types`; or set `network.efa: off` to silence this".to_owned()
                    } else {
                        "for EFA, set `master.public: false` and use Session Manager; or set `network.efa: off` to silence this".to_owned()
                    };
                    self.warning_near(
                        "network.efa",
                        "workers.instance_type",
                        format!("Elastic Fabric Adapter stays off although `{}` supports it: {why}", w.name),
                        help,
                    );
                }
                on
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{checked, fake};
    use super::super::workers::MAX_WORKERS;
    use super::*;
    use crate::catalog::Accelerator;

    #[test]
    fn cidrs() {
        assert!(parse_cidr("10.0.0.0/16").is_ok());
        assert!(parse_cidr("10.0.0.0").unwrap_err().contains("prefix length"));
        assert!(parse_cidr("fd00::/8").unwrap_err().contains("IPv6"));
        assert!(parse_cidr("10.0.0.300/16").is_err());
        assert!(parse_cidr("10.0.0.0/33").is_err());
        let net = parse_cidr("203.0.113.7/24").unwrap();
        assert_ne!(net.trunc(), net);
        assert_eq!(net.trunc().to_string(), "203.0.113.0/24");
    }

    #[test]
    fn subnet_layouts() {
        // A /24 VPC: four /26 subnets of 59 usable addresses.
        let two = SubnetLayout { vpc_prefix: 24, zones: 2, master_public: true };
        assert_eq!((two.subnet_prefix(), two.usable(), two.max_workers()), (26, 59, 116));
        assert!(two.fits(116) && !two.fits(117));
        let private_one_zone = SubnetLayout { vpc_prefix: 24, zones: 1, master_public: false };
        assert_eq!(private_one_zone.max_workers(), 57);
        // The default /16: /18 subnets hold every allowed worker count.
        assert!(SubnetLayout { vpc_prefix: 16, zones: 1, master_public: false }.fits(MAX_WORKERS));
    }

    #[test]
    fn private_ranges() {
        for ok in ["10.0.0.0/16", "172.16.0.0/16", "172.31.255.0/24", "192.168.0.0/16"] {
            assert!(is_private(&ok.parse().unwrap()), "{ok}");
        }
        for bad in ["11.0.0.0/16", "172.32.0.0/16", "192.169.0.0/16", "8.8.8.0/24"] {
            assert!(!is_private(&bad.parse().unwrap()), "{bad}");
        }
    }

    #[test]
    fn placement_groups_need_types_that_allow_them() {
        let text = "network:\n  placement_group: true\n";
        let no = fake("t2.test", false, false, Accelerator::None);
        let yes = fake("c5.test", false, true, Accelerator::None);
        let d = checked(text, |c| c.placement(true, Some(&yes), &[&no]));
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("the workers' type `t2.test`"), "{}", d[0].message);
        assert_eq!((d[0].line, d[0].column), (2, 20));
        assert!(checked(text, |c| c.placement(false, Some(&no), &[&no])).is_empty());
    }

    #[test]
    fn efa_on_names_each_unsupported_type() {
        let text = "network:\n  efa: on\n";
        let no = fake("g4.test", false, true, Accelerator::Nvidia);
        let d = checked(text, |c| {
            assert!(c.efa(EfaMode::On, Some(&no), &[&no], false));
        });
        assert_eq!(d.len(), 2);
        assert!(d[0].message.contains("the master's type `g4.test`"));
        assert!(d[1].help.as_deref().unwrap_or_default().contains("workers.instance_type"));
    }
}
