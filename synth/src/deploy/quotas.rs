//! EC2's vCPU quotas for running instances, by instance family and market:
//! the one table of Service Quotas codes synth knows ([`QUOTAS`]), and
//! which row an instance type counts against ([`quota_for`]).
//!
//! EC2 counts running On-Demand instances and Spot requests in vCPUs, one
//! quota per group of families and market, per account and region
//! (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-on-demand-instances.html>,
//! "On-Demand Instance quotas";
//! <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html>).
//! The codes are the ones AWS's quota tables link to in the Service Quotas
//! console (`.../servicequotas/home/services/ec2/quotas/L-...`). AWS's Spot
//! table splits P in two, "All P4, P3 and P2 Spot Instance Requests" and
//! "All P5 Spot Instance Requests", so P5 types (p5, p5e, p5en) count
//! against the second. A family this table does not list (High Memory
//! `u-`, HPC, Mac) is reported as not checked, never guessed.

/// How the instances are bought.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Market {
    /// On-Demand (and On-Demand Capacity Reservations).
    OnDemand,
    /// Spot.
    Spot,
}

impl Market {
    /// As the table prints it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Market::OnDemand => "On-Demand",
            Market::Spot => "Spot",
        }
    }
}

/// One vCPU quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuotaKind {
    /// The Service Quotas code (service code `ec2`).
    pub code: &'static str,
    /// Its name in the Service Quotas console.
    pub name: &'static str,
    /// The market it counts.
    pub market: Market,
    /// The group of families it counts ([`class_of`]).
    class: Class,
}

/// The groups of instance families that share a quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// A, C, D, H, I, M, R, T, Z.
    Standard,
    /// G and VT.
    G,
    /// P (On-Demand: all of P; Spot: P4, P3 and P2).
    P,
    /// P5, P5e, P5en: their own Spot quota.
    P5,
    Inf,
    Trn,
    Dl,
    F,
    X,
}

const fn row(code: &'static str, name: &'static str, market: Market, class: Class) -> QuotaKind {
    QuotaKind { code, name, market, class }
}

/// Every vCPU quota synth checks.
pub(crate) const QUOTAS: &[QuotaKind] = &[
    row(
        "L-1216C47A",
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        Market::OnDemand,
        Class::Standard,
    ),
    row("L-DB2E81BA", "Running On-Demand G and VT instances", Market::OnDemand, Class::G),
    row("L-417A185B", "Running On-Demand P instances", Market::OnDemand, Class::P),
    row("L-1945791B", "Running On-Demand Inf instances", Market::OnDemand, Class::Inf),
    row("L-2C3B7624", "Running On-Demand Trn instances", Market::OnDemand, Class::Trn),
    row("L-6E869C2A", "Running On-Demand DL instances", Market::OnDemand, Class::Dl),
    row("L-74FC7D96", "Running On-Demand F instances", Market::OnDemand, Class::F),
    row("L-7295265B", "Running On-Demand X instances", Market::OnDemand, Class::X),
    row("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", Market::Spot, Class::Standard),
    row("L-3819A6DF", "All G and VT Spot Instance Requests", Market::Spot, Class::G),
    row("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests", Market::Spot, Class::P),
    row("L-C4BD4855", "All P5 Spot Instance Requests", Market::Spot, Class::P5),
    row("L-B5D1601B", "All Inf Spot Instance Requests", Market::Spot, Class::Inf),
    row("L-6B0D517C", "All Trn Spot Instance Requests", Market::Spot, Class::Trn),
    row("L-85EED4F7", "All DL Spot Instance Requests", Market::Spot, Class::Dl),
    row("L-88CF9481", "All F Spot Instance Requests", Market::Spot, Class::F),
    row("L-E3A00192", "All X Spot Instance Requests", Market::Spot, Class::X),
];

/// The letters an instance type's family starts with (`p` of
/// `p4d.24xlarge`, `inf` of `inf2.xlarge`, `u` of `u-6tb1.metal`).
fn letters(instance_type: &str) -> &str {
    let end = instance_type.find(|c: char| !c.is_ascii_lowercase()).unwrap_or(instance_type.len());
    &instance_type[..end]
}

/// The group of families `instance_type` counts in for `market`, if the table has it.
fn class_of(instance_type: &str, market: Market) -> Option<Class> {
    let class = match letters(instance_type) {
        "a" | "c" | "d" | "h" | "i" | "m" | "r" | "t" | "z" | "im" | "is" => Class::Standard,
        "g" | "gr" | "vt" => Class::G,
        "p" if market == Market::Spot && instance_type.starts_with("p5") => Class::P5,
        "p" => Class::P,
        "inf" => Class::Inf,
        "trn" => Class::Trn,
        "dl" => Class::Dl,
        "f" => Class::F,
        "x" => Class::X,
        _ => return None,
    };
    Some(class)
}

/// The vCPU quota that instances of `instance_type` bought in `market`
/// count against, or `None` for a family the table does not have.
pub(crate) fn quota_for(instance_type: &str, market: Market) -> Option<&'static QuotaKind> {
    let class = class_of(instance_type, market)?;
    QUOTAS.iter().find(|q| q.class == class && q.market == market)
}

/// The quota `code`'s row.
pub(crate) fn by_code(code: &str) -> Option<&'static QuotaKind> {
    QUOTAS.iter().find(|q| q.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_counts_against_its_quota() {
        let code = |t: &str, m: Market| quota_for(t, m).map(|q| q.code);
        assert_eq!(code("p4d.24xlarge", Market::OnDemand), Some("L-417A185B"));
        assert_eq!(code("p5.48xlarge", Market::OnDemand), Some("L-417A185B"));
        assert_eq!(code("p3.16xlarge", Market::Spot), Some("L-7212CCBC"));
        assert_eq!(code("p5e.48xlarge", Market::Spot), Some("L-C4BD4855"));
        assert_eq!(code("g5.xlarge", Market::OnDemand), Some("L-DB2E81BA"));
        assert_eq!(code("g4dn.xlarge", Market::Spot), Some("L-3819A6DF"));
        assert_eq!(code("vt1.3xlarge", Market::OnDemand), Some("L-DB2E81BA"));
        assert_eq!(code("c6i.4xlarge", Market::OnDemand), Some("L-1216C47A"));
        assert_eq!(code("im4gn.large", Market::Spot), Some("L-34B43A08"));
        assert_eq!(code("inf2.xlarge", Market::OnDemand), Some("L-1945791B"));
        assert_eq!(code("trn1.32xlarge", Market::Spot), Some("L-6B0D517C"));
        assert_eq!(code("dl1.24xlarge", Market::OnDemand), Some("L-6E869C2A"));
        assert_eq!(code("f1.2xlarge", Market::Spot), Some("L-88CF9481"));
        assert_eq!(code("x2idn.16xlarge", Market::OnDemand), Some("L-7295265B"));
        for unknown in ["u-6tb1.metal", "hpc7g.16xlarge", "mac2.metal", ""] {
            assert_eq!(code(unknown, Market::OnDemand), None, "{unknown}");
        }
    }

    #[test]
    fn the_table_has_each_code_once_and_every_class_in_both_markets() {
        let mut codes: Vec<&str> = QUOTAS.iter().map(|q| q.code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), QUOTAS.len());
        assert_eq!(QUOTAS.iter().filter(|q| q.market == Market::OnDemand).count(), 8);
        assert_eq!(by_code("L-417A185B").map(|q| q.name), Some("Running On-Demand P instances"));
    }
}
