//! Where the workers' capacity comes from: `workers.instance_type` or
//! `workers.instance_types`, and `workers.capacity` (or its shorthand
//! `workers.spot`), checked and turned into one of the shapes Auto Scaling
//! can launch ([`WorkerCapacity`]).
//!
//! The rules are AWS's, said at build time instead of as a failed launch:
//! - A Capacity Block is consumed through the launch template's
//!   `capacity-block` market type, which no other source shares, and holds
//!   one instance type in one zone: it is the group's only source, with one
//!   type (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/launch-template-capacity-blocks.html>).
//! - Capacity Reservations are On-Demand capacity: Auto Scaling launches into
//!   them first or only (`capacity-reservations-first` / `-only`), and falls
//!   back to On-Demand, never to Spot
//!   (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/use-capacity-reservations.html>).
//! - One group does not fall back between Spot and On-Demand: its mixed
//!   instances policy splits the capacity in fixed shares, which is not
//!   what an ordered list says.

use std::collections::HashSet;

use super::super::model::{CapacityBlockSource, CapacitySource, Workers};
use super::{At, Checker, ticked};
use crate::catalog::{Accelerator, InstanceType};
use crate::region::Region;
use crate::spec::{CapacityBlock, WorkerCapacity};

/// The most instance types a blueprint may list (Auto Scaling takes 40
/// overrides; a data-parallel cluster needs far fewer).
pub(super) const MAX_INSTANCE_TYPES: usize = 20;

/// The workers' instance types as written, each with its path: `None` when
/// neither field is there (reported) or both are (reported).
pub(super) fn type_names(c: &mut Checker<'_>, w: &mut Workers) -> Option<Vec<(String, String)>> {
    let (one, list) = (w.instance_type.take(), w.instance_types.take());
    if one.is_some() && list.is_some() {
        // Said once; the list's own checks still run.
        c.error(
            "workers.instance_types",
            At::Key,
            "is given beside `instance_type`; give one of them",
            "list every type under `instance_types` (most wanted first), or keep one `instance_type`",
        );
    }
    match (one, list) {
        (Some(one), None) => Some(vec![("workers.instance_type".to_owned(), one)]),
        (_, Some(list)) => {
            if list.is_empty() {
                c.error(
                    "workers.instance_types",
                    At::Value,
                    "is empty; it lists the types the workers may be, most wanted first",
                    "for example `instance_types: [p5.48xlarge, p5e.48xlarge]`, or use `instance_type:` for one",
                );
                return None;
            }
            if list.len() > MAX_INSTANCE_TYPES {
                c.error(
                    "workers.instance_types",
                    At::Value,
                    format!("lists {} types; at most {MAX_INSTANCE_TYPES} are allowed", list.len()),
                    "keep the types you would really train on, most wanted first",
                );
            }
            let mut seen = HashSet::new();
            let mut out = Vec::with_capacity(list.len());
            for (i, name) in list.into_iter().enumerate() {
                let path = format!("workers.instance_types[{i}]");
                if !seen.insert(name.clone()) {
                    c.error(&path, At::Value, format!("{} is listed twice", ticked(&name)), "list each type once");
                    continue;
                }
                out.push((path, name));
            }
            Some(out)
        }
        (None, None) => {
            c.diagnostics.push(super::super::deserialize::missing_field("workers", "instance_type", c.map));
            None
        }
    }
}

/// Types of one accelerator kind (the image and its drivers are one), and
/// a warning when their GPU counts differ (a data-parallel job wants the
/// same number of ranks on every node).
pub(super) fn mixed_types(c: &mut Checker<'_>, types: &[(&str, &'static InstanceType)]) {
    let Some((_, first)) = types.first() else { return };
    let mut kinds_differ = false;
    for (path, t) in &types[1..] {
        if kind(t) != kind(first) {
            kinds_differ = true;
            c.error(
                path,
                At::Value,
                format!(
                    "`{}` has {}, but `{}` (the first type) has {}; every worker boots the same image",
                    t.name,
                    describe(t),
                    first.name,
                    describe(first)
                ),
                "list types of one kind: all NVIDIA GPU types, or all CPU types",
            );
        }
    }
    let counts: HashSet<u32> = types.iter().map(|(_, t)| t.accelerators).collect();
    if counts.len() > 1 && first.accelerators > 0 && !kinds_differ {
        let listed: Vec<String> = types.iter().map(|(_, t)| format!("`{}` {}", t.name, t.accelerators)).collect();
        c.warning(
            "workers.instance_types",
            At::Key,
            format!("the types have different GPU counts ({}); each node's hostfile gives it its own", listed.join(", ")),
            "data-parallel jobs usually want the same number of ranks on every node: list types with equal GPU counts, or give `trainer launch` a fixed number of ranks per node (its nproc-per-node option)",
        );
    }
}

fn kind(t: &InstanceType) -> Accelerator {
    if t.accelerators == 0 { Accelerator::None } else { t.accelerator }
}

fn describe(t: &InstanceType) -> String {
    match kind(t) {
        Accelerator::None => "no accelerator".to_owned(),
        Accelerator::Nvidia => format!("{} NVIDIA GPUs", t.accelerators),
        Accelerator::Neuron => format!("{} AWS Neuron accelerators", t.accelerators),
        Accelerator::Other => format!("{} accelerators of another kind", t.accelerators),
    }
}

/// The workers' capacity from `capacity` (or `spot`). `types` is how many
/// instance types are listed; `now_unix` decides whether a Capacity Block
/// has started.
pub(super) fn capacity(
    c: &mut Checker<'_>,
    spot: Option<bool>,
    sources: Option<Vec<CapacitySource>>,
    types: usize,
    region: Option<Region>,
    now_unix: u64,
) -> WorkerCapacity {
    let Some(sources) = sources else {
        return if spot.unwrap_or(false) { WorkerCapacity::Spot } else { WorkerCapacity::OnDemand };
    };
    if spot == Some(true) {
        c.error(
            "workers.spot",
            At::Key,
            "is given beside `capacity`; `spot: true` is `capacity: [spot]`",
            "leave `spot` out and list `spot` under `capacity`",
        );
    }
    if sources.is_empty() {
        c.error(
            "workers.capacity",
            At::Value,
            "is empty; it lists where the workers' capacity comes from, in order",
            "for example `capacity: [on_demand]`, or leave it out for On-Demand workers",
        );
        return WorkerCapacity::OnDemand;
    }
    let last = sources.len() - 1;
    let mut ids = Vec::new();
    let mut groups = Vec::new();
    let (mut on_demand, mut spot_at, mut block) = (None, None, None);
    let mut seen = HashSet::new();
    for (i, source) in sources.into_iter().enumerate() {
        let path = format!("workers.capacity[{i}]");
        match source {
            CapacitySource::OnDemand => {
                if on_demand.replace(i).is_some() {
                    c.error(&path, At::Value, "`on_demand` is listed twice", "list each source once");
                } else if i != last {
                    c.error(
                        &path,
                        At::Value,
                        "`on_demand` is the fallback when the reservations are full, so it goes last",
                        "move `on_demand` to the end of the list",
                    );
                }
            }
            CapacitySource::Spot => {
                if spot_at.replace(i).is_some() {
                    c.error(&path, At::Value, "`spot` is listed twice", "list each source once");
                }
            }
            CapacitySource::Reservation(id) => {
                let target = Target {
                    path: format!("{path}.reservation"),
                    well_formed: is_reservation_id(&id),
                    what: "a Capacity Reservation id",
                    help: "a reservation id is `cr-` followed by 17 lower-case hex digits, for example `cr-0123456789abcdef0`",
                    once: "list each reservation once",
                };
                ids.extend(target.check(c, &mut seen, id));
            }
            CapacitySource::ReservationGroup(arn) => {
                let target = Target {
                    path: format!("{path}.reservation_group"),
                    well_formed: is_resource_group_arn(&arn),
                    what: "a resource group ARN",
                    help: "give the ARN of a resource group of Capacity Reservations, `arn:aws:resource-groups:<region>:<account>:group/<name>`",
                    once: "list each group once",
                };
                groups.extend(target.check(c, &mut seen, arn));
            }
            CapacitySource::CapacityBlock(b) => {
                if block.is_some() {
                    c.error(
                        &path,
                        At::Value,
                        "a second Capacity Block: a worker group launches from one block",
                        "keep one `capacity_block`; for a bigger cluster, buy one block of that many instances",
                    );
                } else {
                    block =
                        Some((path.clone(), capacity_block(c, &format!("{path}.capacity_block"), b, region, now_unix)));
                }
            }
        }
    }
    let reserved = !ids.is_empty() || !groups.is_empty();
    if let Some((path, block)) = block {
        let others = on_demand.is_some() || spot_at.is_some() || reserved;
        if others {
            c.error(
                &path,
                At::Value,
                "a Capacity Block is the group's only capacity: its instances launch with the launch template's `capacity-block` market type, which no other source shares",
                "keep only the `capacity_block` entry; deploy another cluster for other capacity",
            );
        }
        if types > 1 {
            c.error(
                "workers.instance_types",
                At::Key,
                "lists several types, but a Capacity Block holds one instance type",
                "use `instance_type:` with the block's type",
            );
        }
        return block.map_or(WorkerCapacity::OnDemand, WorkerCapacity::CapacityBlock);
    }
    if let Some(i) = spot_at {
        if reserved {
            c.error(
                &format!("workers.capacity[{i}]"),
                At::Value,
                "Spot cannot follow Capacity Reservations: reservations are On-Demand capacity, and Auto Scaling falls back from them to On-Demand only",
                "end the list with `on_demand`, or deploy a separate Spot cluster",
            );
        } else if on_demand.is_some() {
            c.error(
                &format!("workers.capacity[{i}]"),
                At::Value,
                "one worker group does not fall back between Spot and On-Demand: Auto Scaling splits a mixed group in fixed shares",
                "choose `spot` or `on_demand`",
            );
        }
        return WorkerCapacity::Spot;
    }
    if reserved {
        return WorkerCapacity::Reserved { ids, groups, then_on_demand: on_demand.is_some() };
    }
    WorkerCapacity::OnDemand
}

/// A reservation or resource group named in `capacity`, and what to say
/// when it is malformed or listed twice.
struct Target {
    path: String,
    well_formed: bool,
    what: &'static str,
    help: &'static str,
    once: &'static str,
}

impl Target {
    /// `value` when it is well formed and not seen before (reported otherwise).
    fn check(self, c: &mut Checker<'_>, seen: &mut HashSet<String>, value: String) -> Option<String> {
        if !self.well_formed {
            c.error(&self.path, At::Value, format!("{} is not {}", ticked(&value), self.what), self.help);
            None
        } else if !seen.insert(value.clone()) {
            c.error(&self.path, At::Value, format!("{} is listed twice", ticked(&value)), self.once);
            None
        } else {
            Some(value)
        }
    }
}

/// A Capacity Block's fields; `None` when one is missing or wrong (reported).
fn capacity_block(
    c: &mut Checker<'_>,
    path: &str,
    b: CapacityBlockSource,
    region: Option<Region>,
    now_unix: u64,
) -> Option<CapacityBlock> {
    let id = match b.id {
        Some(id) if is_reservation_id(&id) => Some(id),
        Some(id) => {
            c.error(
                &format!("{path}.id"),
                At::Value,
                format!("{} is not a Capacity Block id", ticked(&id)),
                "a block's id is its Capacity Reservation id: `cr-` followed by 17 lower-case hex digits",
            );
            None
        }
        None => {
            c.error(
                path,
                At::Key,
                "has no `id`",
                "add `id: cr-...` (the EC2 console lists it under Capacity Reservations)",
            );
            None
        }
    };
    let zone = match (b.zone, region) {
        (None, _) => {
            c.error(
                path,
                At::Key,
                "has no `zone`; a block is in one Availability Zone and every worker must launch there",
                "add `zone:` with the block's Availability Zone, for example `zone: us-east-1a`",
            );
            None
        }
        (Some(zone), None) => {
            c.error(
                &format!("{path}.zone"),
                At::Value,
                format!(
                    "the block is in {}, but the blueprint has no `region`; a block is in one region",
                    ticked(&zone)
                ),
                format!("pin the region: `region: {}`", zone_region(&zone).unwrap_or("us-east-1")),
            );
            None
        }
        (Some(zone), Some(region)) => {
            if zone_region(&zone) == Some(region.code()) {
                Some(zone)
            } else {
                c.error(
                    &format!("{path}.zone"),
                    At::Value,
                    format!("{} is not an Availability Zone of {region}", ticked(&zone)),
                    format!("write the block's zone as the EC2 console shows it, for example `{}a`", region.code()),
                );
                None
            }
        }
    };
    let end = time(c, &format!("{path}.end"), b.end.as_deref(), path, "end");
    let start = b.start.as_deref().and_then(|s| time(c, &format!("{path}.start"), Some(s), path, "start"));
    let (Some(id), Some(zone), Some(end_unix)) = (id, zone, end) else { return None };
    if let Some(s) = start
        && s >= end_unix
    {
        c.error(
            &format!("{path}.end"),
            At::Value,
            "is not after the block's start",
            "copy the start and end times from the block's details in the EC2 console",
        );
        return None;
    }
    let block = CapacityBlock { id, zone, start_unix: start.filter(|s| *s > now_unix), end_unix };
    if block.scale_in_unix() <= now_unix {
        c.error(
            &format!("{path}.end"),
            At::Value,
            format!(
                "the block ends at {}: its workers would have to leave by {}, which has passed",
                node_contract::interruption::format_utc(end_unix),
                node_contract::interruption::format_utc(block.scale_in_unix())
            ),
            "EC2 reclaims a block's instances 30 minutes before its end; use a block that has at least an hour left",
        );
        return None;
    }
    Some(block)
}

/// Unix seconds of the RFC 3339 UTC time at `path`, reported when missing or malformed.
fn time(c: &mut Checker<'_>, path: &str, text: Option<&str>, parent: &str, field: &str) -> Option<u64> {
    let Some(text) = text else {
        c.error(
            parent,
            At::Key,
            format!("has no `{field}`"),
            format!("add `{field}:` with the block's {field} time in UTC, for example `{field}: 2026-12-17T11:30:00Z`"),
        );
        return None;
    };
    let parsed = node_contract::interruption::parse_utc(text);
    if parsed.is_none() {
        c.error(
            path,
            At::Value,
            format!("{} is not an RFC 3339 UTC time", ticked(text)),
            "write it as the EC2 console shows it, in UTC: `2026-12-17T11:30:00Z`",
        );
    }
    parsed
}

/// The region of an Availability Zone name (`us-east-1a` -> `us-east-1`), when it looks like one.
fn zone_region(zone: &str) -> Option<&str> {
    let region = zone.strip_suffix(|c: char| c.is_ascii_lowercase())?;
    region.ends_with(|c: char| c.is_ascii_digit()).then_some(region)
}

fn is_reservation_id(id: &str) -> bool {
    id.strip_prefix("cr-")
        .is_some_and(|hex| hex.len() == 17 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn is_resource_group_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "resource-groups"
        && parts[5].strip_prefix("group/").is_some_and(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_name_their_region() {
        assert_eq!(zone_region("us-east-1a"), Some("us-east-1"));
        assert_eq!(zone_region("ap-southeast-2c"), Some("ap-southeast-2"));
        assert_eq!(zone_region("us-east-1"), None);
        assert_eq!(zone_region("use1-az1"), None);
    }

    #[test]
    fn ids_and_arns() {
        assert!(is_reservation_id("cr-0123456789abcdef0"));
        assert!(!is_reservation_id("cr-0123456789ABCDEF0"));
        assert!(!is_reservation_id("cr-0123"));
        assert!(is_resource_group_arn("arn:aws:resource-groups:us-east-1:123456789012:group/gpus"));
        assert!(!is_resource_group_arn("arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-1"));
        assert!(!is_resource_group_arn("arn:aws:resource-groups:us-east-1:123456789012:group/"));
    }
}
