//! Instance types as the blueprint names them (`master.instance_type`,
//! each of the workers' types): known to synth's catalogue
//! ([`crate::catalog`]) and offered in every region the template is for.

use super::{At, Checker, ticked};
use crate::catalog::{self, InstanceType};
use crate::region::Region;

/// Why `t` cannot be used in every target region, if it cannot.
fn offering_problem(t: &InstanceType, targets: &[Region]) -> Option<String> {
    let missing: Vec<&str> = targets.iter().filter(|r| !t.offered_in(**r)).map(|r| r.code()).collect();
    if missing.is_empty() {
        return None;
    }
    Some(if targets.len() == 1 {
        format!("`{}` is not offered in {}", t.name, missing.join(", "))
    } else {
        format!(
            "`{}` is not offered in {}, and a template without `region:` is for all five regions",
            t.name,
            missing.join(", ")
        )
    })
}

impl Checker<'_> {
    /// The catalog's entry for the instance type written at `path`, if any.
    pub(super) fn type_of(
        &mut self,
        path: &str,
        name: Option<&str>,
        region: Option<Region>,
        targets: &[Region],
    ) -> Option<&'static InstanceType> {
        name.and_then(|t| self.instance_type(path, t, region, targets))
    }

    /// Looks the type up and checks it is offered where the template is for.
    pub(super) fn instance_type(
        &mut self,
        path: &str,
        name: &str,
        region: Option<Region>,
        targets: &[Region],
    ) -> Option<&'static InstanceType> {
        let Some(t) = catalog::lookup(name) else {
            let help = match catalog::suggest(name) {
                Some(close) => format!("did you mean `{close}`?"),
                None => "use an EC2 instance type name such as `p4d.24xlarge`; see https://aws.amazon.com/ec2/instance-types/".to_owned(),
            };
            self.error(path, At::Value, format!("{} is not a known EC2 instance type", ticked(name)), help);
            return None;
        };
        if let Some(message) = offering_problem(t, targets) {
            let help = match region {
                Some(r) => format!("choose a type offered in {r}, or another region"),
                None => {
                    let offered: Vec<_> = targets.iter().filter(|r| t.offered_in(**r)).map(|r| r.code()).collect();
                    match offered.first() {
                        Some(first) => format!(
                            "pin a region where it is offered (for example `region: {first}`), or choose another type"
                        ),
                        None => "choose another type".to_owned(),
                    }
                }
            };
            self.error(path, At::Value, message, help);
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Accelerator, InstanceStore};

    #[test]
    fn offerings_name_the_missing_regions() {
        let t = InstanceType {
            name: "x1.test",
            accelerator: Accelerator::None,
            accelerators: 0,
            efa: false,
            cluster_placement: true,
            efa_rdma: false,
            network_mbps: None,
            instance_store: InstanceStore::Unknown,
            regions: Region::UsEast1.bit() | Region::UsWest2.bit(),
        };
        assert_eq!(offering_problem(&t, &[Region::UsEast1]), None);
        assert_eq!(offering_problem(&t, &[Region::EuWest1]).unwrap(), "`x1.test` is not offered in eu-west-1");
        let all = offering_problem(&t, &Region::ALL).unwrap();
        assert!(all.contains("us-east-2, eu-west-1, ap-southeast-2"), "{all}");
    }
}
