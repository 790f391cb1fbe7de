//! The network gate's verdict on the master, pure (docs/ARCHITECTURE.md,
//! "The network gate"): the check under way ([`Gate`]: who is to report,
//! what came, until when), and [`judge`], which compares each node's
//! measured bandwidth with the expected one (or the median) and names the
//! slow and the unmeasured ([`Verdict`]). The master's gate room
//! (`super::gate`) holds a [`Gate`] in its state and acts on the verdict;
//! the schedule both sides follow is [`crate::netgate`], the sockets are
//! the runner's.

use std::collections::BTreeMap;

use node_contract::NetworkCheck;
use node_contract::message::LinkReport;
use serde::{Deserialize, Serialize};

use crate::netgate::PROBE_CEILING_GBPS;

/// A formation signal the master holds until the gate decides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HeldSignal {
    /// The success reason, without the gate's verdict.
    pub reason: String,
    /// The signal's data.
    pub data: String,
}

/// A network check under way on the master: the generation measured, who
/// is to report, what came, until when it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Gate {
    /// The generation whose ring is measured.
    pub generation: u64,
    /// When the master decides with what it has.
    pub deadline_ms: u64,
    /// Every node of the generation, in index order.
    pub nodes: Vec<GateNode>,
    /// The reports in, by sender.
    pub reports: BTreeMap<String, LinkReport>,
    /// The formation success signal, when this check decides it.
    pub held: Option<HeldSignal>,
}

impl Gate {
    /// Whether every node reported.
    pub(crate) fn complete(&self) -> bool {
        self.nodes.iter().all(|n| self.reports.contains_key(&n.instance_id))
    }
}

/// A node the gate waits for, as the generation lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GateNode {
    /// `i-...`
    pub instance_id: String,
    /// `deeplearning-workerN`.
    pub alias: String,
    /// Private IPv4 address.
    pub ip: String,
}

/// What the gate compared the nodes with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "gbps")]
pub(crate) enum Reference {
    /// The instance type's bandwidth (capped at [`PROBE_CEILING_GBPS`]).
    Expected(f64),
    /// No figure for the type: the median of the measured nodes (the upper
    /// middle for an even count, so that half the nodes being slow is
    /// seen).
    Median(f64),
    /// Nothing was measured.
    None,
}

/// One node's link, as judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct JudgedLink {
    /// The sender.
    pub node: GateNode,
    /// The receiver's alias (its ring neighbour), when reported.
    pub peer: Option<String>,
    /// Measured Gbit/s; `None`: no report, or the probe failed.
    pub gbps: Option<f64>,
    /// `gbps` over the reference.
    pub fraction: Option<f64>,
    /// Below the minimum fraction.
    pub slow: bool,
    /// Why there is no figure.
    pub error: Option<String>,
}

/// The master's judgement of one generation's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Verdict {
    /// The generation measured.
    pub generation: u64,
    /// The minimum fraction.
    pub min_fraction: f64,
    /// What the nodes were compared with.
    pub reference: Reference,
    /// Every node of the generation, in index order.
    pub links: Vec<JudgedLink>,
}

impl Verdict {
    /// The slow nodes.
    pub(crate) fn slow(&self) -> impl Iterator<Item = &JudgedLink> {
        self.links.iter().filter(|l| l.slow)
    }

    /// One line for the formation reason and the log: the slow nodes first
    /// (alias, instance id, address, Gbit/s, fraction), then every node's
    /// fraction, and what the reference was.
    pub(crate) fn summary(&self) -> String {
        let reference = match self.reference {
            Reference::Expected(g) => format!("the expected {g:.2} Gbit/s"),
            Reference::Median(g) => {
                format!("the median of the nodes, {g:.2} Gbit/s (no expected bandwidth is known for the instance type)")
            }
            Reference::None => "nothing (no node could be measured)".to_string(),
        };
        let slow: Vec<String> = self
            .slow()
            .map(|l| {
                format!(
                    "{} ({}, {}) sent {:.2} Gbit/s to {}, {:.2} of the reference",
                    l.node.alias,
                    l.node.instance_id,
                    l.node.ip,
                    l.gbps.unwrap_or_default(),
                    l.peer.as_deref().unwrap_or("its neighbour"),
                    l.fraction.unwrap_or_default()
                )
            })
            .collect();
        let head = if slow.is_empty() {
            format!("no node below {:.2} of {reference}", self.min_fraction)
        } else {
            format!("below {:.2} of {reference}: {}", self.min_fraction, slow.join("; "))
        };
        let fractions: Vec<String> = self
            .links
            .iter()
            .map(|l| match (l.fraction, &l.error) {
                (Some(f), _) => format!("{} {f:.2}", l.node.alias),
                (None, Some(e)) => format!("{} unmeasured ({e})", l.node.alias),
                (None, None) => format!("{} unmeasured", l.node.alias),
            })
            .collect();
        format!(
            "Network check of generation {}: {head}. Measured fractions: {}.",
            self.generation,
            fractions.join(", ")
        )
    }
}

/// Judges `reports` (by sender instance id) of generation `generation`
/// against `check`: each node's Gbit/s over the reference (the expected
/// figure capped at [`PROBE_CEILING_GBPS`], or without one the median of
/// the measured nodes); a node below `check.min_fraction` (strictly) is
/// slow. A node without a report, or whose probe failed, is named as
/// unmeasured and not judged slow: which end of its link failed is not known.
pub(crate) fn judge(
    check: &NetworkCheck,
    generation: u64,
    nodes: &[GateNode],
    reports: &BTreeMap<String, LinkReport>,
) -> Verdict {
    let alias_of = |id: &str| nodes.iter().find(|n| n.instance_id == id).map(|n| n.alias.clone());
    let mut measured: Vec<f64> = nodes
        .iter()
        .filter_map(|n| reports.get(&n.instance_id).and_then(LinkReport::gbps))
        .filter(|g| g.is_finite())
        .collect();
    let reference = match check.expected_gbps {
        Some(g) => Reference::Expected(g.min(PROBE_CEILING_GBPS)),
        None if measured.is_empty() => Reference::None,
        None => {
            measured.sort_by(f64::total_cmp);
            Reference::Median(measured[measured.len() / 2])
        }
    };
    let base = match reference {
        Reference::Expected(g) | Reference::Median(g) => Some(g),
        Reference::None => None,
    };
    let links = nodes
        .iter()
        .map(|n| {
            let report = reports.get(&n.instance_id);
            let gbps = report.and_then(LinkReport::gbps).filter(|g| g.is_finite());
            let fraction = gbps.zip(base).map(|(g, b)| g / b);
            let error = match report {
                None => Some("no report".to_string()),
                Some(r) if gbps.is_none() => Some(r.error.clone().unwrap_or_else(|| "nothing measured".into())),
                Some(_) => None,
            };
            JudgedLink {
                node: n.clone(),
                peer: report.map(|r| alias_of(&r.peer).unwrap_or_else(|| r.peer.clone())),
                gbps,
                fraction,
                slow: fraction.is_some_and(|f| f < check.min_fraction),
                error,
            }
        })
        .collect();
    Verdict { generation, min_fraction: check.min_fraction, reference, links }
}

#[cfg(test)]
mod tests {
    use node_contract::NetworkAction;
    use node_contract::message::worker_alias;

    use super::*;

    fn check(expected: Option<f64>) -> NetworkCheck {
        NetworkCheck { min_fraction: 0.5, action: NetworkAction::Warn, timeout_seconds: 30, expected_gbps: expected }
    }

    fn nodes(n: u32) -> Vec<GateNode> {
        (1..=n)
            .map(|i| GateNode { instance_id: format!("i-{i}"), alias: worker_alias(i), ip: format!("10.0.0.{i}") })
            .collect()
    }

    /// Reports of `gbps` per node (`None`: a failed probe), each to the next.
    fn reports(gbps: &[Option<f64>]) -> BTreeMap<String, LinkReport> {
        let n = gbps.len();
        gbps.iter()
            .enumerate()
            .map(|(i, g)| {
                let id = format!("i-{}", i + 1);
                let report = LinkReport {
                    instance_id: id.clone(),
                    generation: 1,
                    peer: format!("i-{}", (i + 1) % n + 1),
                    // 1 s: bytes = Gbit/s * 125,000,000.
                    bytes: g.map_or(0, |g| (g * 125_000_000.0) as u64),
                    millis: if g.is_some() { 1_000 } else { 0 },
                    error: g.is_none().then(|| "connection refused".to_string()),
                };
                (id, report)
            })
            .collect()
    }

    fn slow_aliases(v: &Verdict) -> Vec<&str> {
        v.slow().map(|l| l.node.alias.as_str()).collect()
    }

    #[test]
    fn the_node_below_the_fraction_of_the_expected_bandwidth_is_named_with_its_fraction() {
        let v = judge(&check(Some(0.4)), 1, &nodes(4), &reports(&[Some(0.4), Some(0.4), Some(0.1), Some(0.38)]));
        assert_eq!(v.reference, Reference::Expected(0.4));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker3"]);
        assert!((v.links[2].fraction.unwrap() - 0.25).abs() < 1e-9);
        let s = v.summary();
        assert!(
            s.contains("deeplearning-worker3 (i-3, 10.0.0.3) sent 0.10 Gbit/s to deeplearning-worker4, 0.25"),
            "{s}"
        );
        assert!(s.contains("deeplearning-worker1 1.00, deeplearning-worker2 1.00, deeplearning-worker3 0.25, deeplearning-worker4 0.95"), "{s}");
    }

    #[test]
    fn without_an_expected_figure_the_median_is_the_reference_and_the_text_says_so() {
        let v = judge(&check(None), 1, &nodes(4), &reports(&[Some(0.4), Some(0.4), Some(0.1), Some(0.4)]));
        assert_eq!(v.reference, Reference::Median(0.4));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker3"]);
        assert!(v.summary().contains("median of the nodes, 0.40 Gbit/s (no expected bandwidth"), "{}", v.summary());
        // An even count: the upper middle, so half the nodes slow is seen.
        let v = judge(&check(None), 1, &nodes(2), &reports(&[Some(0.1), Some(0.4)]));
        assert_eq!(v.reference, Reference::Median(0.4));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker1"]);
        // Every node alike: nobody is slow.
        let v = judge(&check(None), 1, &nodes(3), &reports(&[Some(0.2), Some(0.2), Some(0.2)]));
        assert_eq!(slow_aliases(&v), Vec::<&str>::new());
        assert!(v.summary().contains("no node below 0.50"), "{}", v.summary());
    }

    #[test]
    fn exactly_the_minimum_fraction_is_acceptable() {
        let v = judge(&check(Some(1.0)), 1, &nodes(3), &reports(&[Some(0.5), Some(0.4999), Some(1.0)]));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker2"]);
    }

    #[test]
    fn missing_and_failed_reports_are_named_unmeasured_not_slow() {
        let mut r = reports(&[Some(0.4), None, Some(0.4)]);
        r.remove("i-3");
        let v = judge(&check(Some(0.4)), 1, &nodes(3), &r);
        assert_eq!(slow_aliases(&v), Vec::<&str>::new());
        let s = v.summary();
        assert!(s.contains("deeplearning-worker2 unmeasured (connection refused)"), "{s}");
        assert!(s.contains("deeplearning-worker3 unmeasured (no report)"), "{s}");
        // Nothing measured and no expected figure: no reference at all.
        let v = judge(&check(None), 1, &nodes(2), &BTreeMap::new());
        assert_eq!(v.reference, Reference::None);
        assert_eq!(slow_aliases(&v), Vec::<&str>::new());
    }

    #[test]
    fn an_expected_figure_above_what_the_probe_can_show_is_capped() {
        let v = judge(&check(Some(400.0)), 1, &nodes(2), &reports(&[Some(30.0), Some(10.0)]));
        assert_eq!(v.reference, Reference::Expected(PROBE_CEILING_GBPS));
        assert_eq!(slow_aliases(&v), ["deeplearning-worker2"]);
    }
}
