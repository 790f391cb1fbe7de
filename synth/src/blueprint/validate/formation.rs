//! How long a cluster may take to form (`timeouts.formation_minutes`) and
//! the network gate every node runs before it joins
//! (`formation.network_check`). The GPU gate is [`super::gpu`]'s.

use super::{At, Checker};
use crate::catalog::InstanceType;
use node_contract::{NetworkAction, NetworkCheck};

/// The shortest time budget of a network check, seconds: the probes'
/// schedule alone takes up to 14 s (agent/src/netgate.rs).
const NETWORK_CHECK_MIN_SECONDS: u32 = 20;

impl Checker<'_> {
    /// The gate's settings; without the blueprint's `expected_gbps`, the
    /// catalogue's baseline bandwidth of the slower of the master's and the
    /// workers' types (a ring runs at its slowest link), or none when
    /// either is not known (the master then compares with the median).
    pub(super) fn network_check(
        &mut self,
        c: super::super::model::NetworkCheck,
        master: Option<&InstanceType>,
        workers: &[&InstanceType],
    ) -> NetworkCheck {
        let path = "formation.network_check";
        let min_fraction = c.min_fraction.unwrap_or(0.5);
        if !(min_fraction > 0.0 && min_fraction <= 1.0) {
            self.error(
                &format!("{path}.min_fraction"),
                At::Value,
                format!("{min_fraction} is not a fraction above 0 and at most 1"),
                "write the share of the expected bandwidth a node must reach, for example 0.5",
            );
        }
        let action = self.named(
            &format!("{path}.action"),
            c.action.as_deref(),
            NetworkAction::Warn,
            NetworkAction::from_name,
            &NetworkAction::NAMES,
            "an action",
        );
        let timeout_seconds = c.timeout_seconds.unwrap_or(60);
        // The probe's schedule alone takes up to 14 s (agent/src/netgate.rs).
        let (min, max) = (NETWORK_CHECK_MIN_SECONDS, node_contract::NETWORK_CHECK_MAX_SECONDS);
        if !(min..=max).contains(&timeout_seconds) {
            self.error(
                &format!("{path}.timeout_seconds"),
                At::Value,
                format!("{timeout_seconds} seconds is outside the allowed {min} to {max}"),
                "the nodes' probes take up to 14 seconds; the formation signal waits at most this long (default 60)",
            );
        }
        if let Some(g) = c.expected_gbps
            && !(g.is_finite() && g > 0.0)
        {
            self.error(
                &format!("{path}.expected_gbps"),
                At::Value,
                format!("{g} is not a positive bandwidth"),
                "write the instance type's network bandwidth in Gbit/s, for example 25, or leave it out",
            );
        }
        // The slowest of every type a node may be; unknown when any is.
        let catalogue = std::iter::once(master)
            .chain(workers.iter().copied().map(Some))
            .map(|t| t.and_then(InstanceType::network_gbps))
            .try_fold(f64::INFINITY, |slowest, gbps| gbps.map(|g| slowest.min(g)))
            .filter(|g| g.is_finite() && !workers.is_empty());
        NetworkCheck { min_fraction, action, timeout_seconds, expected_gbps: c.expected_gbps.or(catalogue) }
    }

    pub(super) fn formation_minutes(&mut self, written: Option<u32>) -> u32 {
        let m = written.unwrap_or(30);
        if !(5..=720).contains(&m) {
            self.error(
                "timeouts.formation_minutes",
                At::Value,
                format!("{m} minutes is outside the allowed 5 to 720"),
                "instances need a few minutes to boot, and CloudFormation waits at most 12 hours for a signal; the default is 30",
            );
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use node_contract::NetworkAction;

    #[test]
    fn the_network_checks_expected_bandwidth_comes_from_the_blueprint_else_the_slower_type() {
        let spec = |extra: &str, master: &str, workers: &str| {
            let text = format!(
                "name: demo\nmaster:\n  instance_type: {master}\nworkers:\n  instance_type: {workers}\n  count: 2\n\
                 formation:\n  network_check:\n    action: fail\n{extra}"
            );
            crate::blueprint::load(&text, "bp.yaml", None).map(|l| l.spec.network_check.unwrap())
        };
        let c = spec("", "c5.xlarge", "c5n.18xlarge").unwrap();
        assert_eq!(c.expected_gbps, Some(1.25), "the slower of the two types");
        assert_eq!((c.min_fraction, c.action, c.timeout_seconds), (0.5, NetworkAction::Fail, 60));
        assert_eq!(spec("", "p4d.24xlarge", "p4d.24xlarge").unwrap().expected_gbps, Some(400.0));
        assert_eq!(spec("    expected_gbps: 12\n", "c5.xlarge", "c5.xlarge").unwrap().expected_gbps, Some(12.0));
        // A type without a transcribed figure: unknown, the median decides.
        assert_eq!(spec("", "c5.xlarge", "t3.large").unwrap().expected_gbps, None);
        assert!(crate::catalog::lookup("t3.large").is_some_and(|t| t.network_mbps.is_none()));
    }
}
