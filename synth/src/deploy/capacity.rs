//! The capacity check: whether a region can hold the cluster a blueprint
//! asks for, before anything is created (`synth capacity`, and `synth
//! deploy` before its first change). Per region, for every instance type
//! the blueprint uses (the master's, the workers' and their fallbacks):
//! the Availability Zones that offer it (EC2
//! `DescribeInstanceTypeOfferings`), its vCPUs (`DescribeInstanceTypes`),
//! the account's vCPU quota it counts against (Service Quotas
//! `GetServiceQuota`, codes in [`super::quotas`]) beside the vCPUs the
//! cluster needs at `count` and at `max`; and the reservations and
//! Capacity Blocks `workers.capacity` names (`DescribeCapacityReservations`);
//! for Spot workers, the region's Spot placement score for them
//! (`GetSpotPlacementScores`: a likelihood, so a low score is a warning,
//! and a score AWS refuses is said and skipped).
//!
//! What counts against which quota:
//! - the master: its family's On-Demand quota, always (it is an On-Demand
//!   instance whatever the workers are);
//! - On-Demand workers: their family's On-Demand quota; Spot workers: the
//!   Spot one. With several types, every worker may be launched as any of
//!   them, so each family's quota is checked for all the workers at the
//!   largest of its types' vCPUs (the safe side);
//! - workers in On-Demand Capacity Reservations: EC2 only lets a
//!   reservation be made within the On-Demand quota ("Capacity Reservation
//!   limits": you can reserve as many instances as the quota allows, less
//!   those running), so the reserved instances already hold their quota and
//!   the check counts only the workers beyond what the named reservations
//!   have free, when the blueprint falls back to On-Demand (`then on_demand`);
//!   reservation groups are not read, so a shortfall there is a warning;
//! - workers in a Capacity Block: none. A block is capacity bought for its
//!   window, with its own purchase limits; its instances are launched
//!   through the launch template's `capacity-block` market type, not
//!   against the running On-Demand quota. The block itself is checked
//!   instead: found, of the blueprint's type, zone, start and end, big
//!   enough for `count`, not expired or cancelled.
//!
//! [`assess`] is the decision, pure, from what was read ([`Found`]);
//! [`read`] reads it through the [`Cloud`] port; [`render`] and [`json`]
//! write the report; [`preflight`] is `synth deploy`'s use of it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::console::{Console, Display};
use super::port::{Cloud, CloudResult, Quota, Reservation};
use super::quotas::{Market, QuotaKind, by_code, quota_for};
use crate::exit::ExitCode;
use crate::spec::{ClusterSpec, WorkerCapacity};

/// What the blueprint asks of a region.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ask {
    /// The master's instance type.
    pub master: String,
    /// The workers' types, most wanted first.
    pub workers: Vec<String>,
    /// Workers requested.
    pub count: u32,
    /// The elastic ceiling.
    pub max: u32,
    /// Where the workers' capacity comes from.
    pub capacity: WorkerCapacity,
}

impl Ask {
    /// What `spec` asks, with `count` and `max` as the stack's parameters
    /// may override them (`-p WorkerCount=N`, `-p MaxWorkers=N`).
    pub(crate) fn of(spec: &ClusterSpec, count: Option<u32>, max: Option<u32>) -> Ask {
        let count = count.unwrap_or(spec.workers.count);
        Ask {
            master: spec.master.instance_type.clone(),
            workers: spec.workers.instance_types().map(str::to_owned).collect(),
            count,
            max: max.unwrap_or(spec.workers.max).max(count),
            capacity: spec.workers.capacity.clone(),
        }
    }

    /// Every type, the master's first, each once.
    fn types(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        std::iter::once(self.master.as_str())
            .chain(self.workers.iter().map(String::as_str))
            .filter(|t| seen.insert(*t))
            .collect()
    }

    /// The market the workers count in; `None`: a Capacity Block (no quota).
    fn worker_market(&self) -> Option<Market> {
        match self.capacity {
            WorkerCapacity::OnDemand | WorkerCapacity::Reserved { .. } => Some(Market::OnDemand),
            WorkerCapacity::Spot => Some(Market::Spot),
            WorkerCapacity::CapacityBlock(_) => None,
        }
    }

    /// The reservation ids the blueprint names, in its order.
    fn reservation_ids(&self) -> Vec<&str> {
        match &self.capacity {
            WorkerCapacity::Reserved { ids, .. } => ids.iter().map(String::as_str).collect(),
            WorkerCapacity::CapacityBlock(block) => vec![block.id.as_str()],
            _ => Vec::new(),
        }
    }

    /// The quota codes the check reads, in the table's order.
    fn quota_codes(&self) -> Vec<&'static str> {
        let mut codes = BTreeSet::new();
        codes.extend(quota_for(&self.master, Market::OnDemand).map(|q| q.code));
        if let Some(market) = self.worker_market() {
            codes.extend(self.workers.iter().filter_map(|t| quota_for(t, market)).map(|q| q.code));
        }
        super::quotas::QUOTAS.iter().map(|q| q.code).filter(|c| codes.contains(c)).collect()
    }
}

/// One instance type as EC2 describes it in the region.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TypeFound {
    /// `p4d.24xlarge`
    pub name: String,
    /// Its default vCPUs; `None`: EC2 does not know the type here.
    pub vcpus: Option<u32>,
    /// The zones that offer it, sorted.
    pub zones: Vec<String>,
}

/// What the check read in one region.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Found {
    /// The region.
    pub region: String,
    /// Every type of [`Ask`], the master's first.
    pub types: Vec<TypeFound>,
    /// Each quota read, by code; `None`: Service Quotas has no such quota.
    pub quotas: BTreeMap<String, Option<Quota>>,
    /// Each reservation named, by id; `None`: EC2 has no such reservation.
    pub reservations: Vec<(String, Option<Reservation>)>,
    /// Spot workers: the region's Spot placement score for them (`None`
    /// inside: EC2 gave none), or why it was not read.
    pub spot: Option<Result<Option<u32>, String>>,
}

/// Reads what the check needs through `cloud`.
pub(crate) async fn read<C: Cloud>(cloud: &C, ask: &Ask) -> CloudResult<Found> {
    let mut found = Found { region: cloud.region().to_owned(), ..Found::default() };
    for name in ask.types() {
        let vcpus = cloud.instance_vcpus(name).await?;
        let zones = cloud.instance_type_zones(name).await?;
        found.types.push(TypeFound { name: name.to_owned(), vcpus, zones });
    }
    for code in ask.quota_codes() {
        found.quotas.insert(code.to_owned(), cloud.service_quota("ec2", code).await?);
    }
    for id in ask.reservation_ids() {
        found.reservations.push((id.to_owned(), cloud.capacity_reservation(id).await?));
    }
    if ask.capacity == WorkerCapacity::Spot {
        // Optional: a score AWS refuses or cannot give is said, not fatal.
        found.spot = Some(cloud.spot_placement_score(&ask.workers, ask.count).await.map_err(|e| e.to_string()));
    }
    Ok(found)
}

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Severity {
    /// The cluster cannot be made as asked: `synth deploy` refuses.
    Blocker,
    /// Worth knowing (scaling to `max` would hit a quota, something was not checked).
    Warning,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// How bad.
    pub severity: Severity,
    /// What, and what to do, in one paragraph.
    pub text: String,
}

/// One instance type's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TypeRow {
    /// The type.
    pub name: String,
    /// `master`, `worker`, `fallback`, or `master, worker`.
    pub role: String,
    /// Its vCPUs, when EC2 knows the type.
    pub vcpus: Option<u32>,
    /// The zones that offer it.
    pub zones: Vec<String>,
}

/// One quota's row.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QuotaRow {
    /// The quota.
    pub kind: &'static QuotaKind,
    /// Its value in the account; `None`: not found.
    pub value: Option<f64>,
    /// vCPUs the cluster needs at `count`.
    pub at_count: u64,
    /// vCPUs at `max`.
    pub at_max: u64,
    /// `ok`, `blocked`, `low for max`, `not found`.
    pub verdict: &'static str,
}

/// One reservation's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReservationRow {
    /// The id.
    pub id: String,
    /// What the blueprint says it is: `reservation` or `capacity block`.
    pub kind: &'static str,
    /// What EC2 said; `None`: not found.
    pub found: Option<Reservation>,
    /// `ok` or `blocked`.
    pub verdict: &'static str,
}

/// The check's result in one region.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    /// The region.
    pub region: String,
    /// Workers at `count` and at `max`.
    pub count: u32,
    /// The elastic ceiling.
    pub max: u32,
    /// The types.
    pub types: Vec<TypeRow>,
    /// The quotas.
    pub quotas: Vec<QuotaRow>,
    /// The reservations.
    pub reservations: Vec<ReservationRow>,
    /// Spot workers: the region's Spot placement score for them (1 to 10).
    pub spot_score: Option<u32>,
    /// Blockers first, then warnings.
    pub problems: Vec<Problem>,
}

impl Report {
    /// The blockers.
    pub(crate) fn blockers(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(|p| p.severity == Severity::Blocker)
    }

    /// Whether nothing blocks.
    pub(crate) fn fits(&self) -> bool {
        self.blockers().next().is_none()
    }

    /// The region's verdict in one line.
    pub(crate) fn verdict(&self) -> String {
        let blockers = self.blockers().count();
        let warnings = self.problems.len() - blockers;
        let warned = match warnings {
            0 => String::new(),
            1 => " (1 warning)".to_owned(),
            n => format!(" ({n} warnings)"),
        };
        if blockers == 0 {
            format!("{}: fits: {} workers (up to {}){warned}", self.region, self.count, self.max)
        } else {
            let what = if blockers == 1 { "1 blocker".to_owned() } else { format!("{blockers} blockers") };
            format!("{}: blocked: {what}{warned}", self.region)
        }
    }
}

/// A quota value as vCPUs (Service Quotas gives floats).
fn vcpus_of(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 { value.floor() as u64 } else { 0 }
}

/// Whether a reservation in `state` holds no capacity any more.
fn gone(state: &str) -> bool {
    matches!(state, "expired" | "cancelled" | "failed" | "payment-failed")
}

/// How to raise quota `code` to `value` in `region`.
fn how_to_raise(code: &str, value: u64, region: &str) -> String {
    format!(
        "raise it in the Service Quotas console (https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/{code}) \
         or with `aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} \
         --desired-value {value} --region {region}`"
    )
}

/// The decision: what `found` says about `ask` in its region.
pub(crate) fn assess(ask: &Ask, found: &Found) -> Report {
    let region = found.region.as_str();
    let mut problems = Vec::new();
    let block =
        |problems: &mut Vec<Problem>, text: String| problems.push(Problem { severity: Severity::Blocker, text });
    let warn = |problems: &mut Vec<Problem>, text: String| problems.push(Problem { severity: Severity::Warning, text });

    // The types.
    let mut types = Vec::new();
    for t in &found.types {
        let mut roles = Vec::new();
        if t.name == ask.master {
            roles.push("master");
        }
        match ask.workers.iter().position(|w| *w == t.name) {
            Some(0) => roles.push("worker"),
            Some(_) => roles.push("fallback"),
            None => {}
        }
        if t.vcpus.is_none() {
            block(
                &mut problems,
                format!(
                    "EC2 does not know instance type {} in {region}: check its name, or choose another region",
                    t.name
                ),
            );
        } else if t.zones.is_empty() {
            block(
                &mut problems,
                format!(
                    "{} ({}) is offered in no Availability Zone of {region}: choose another type or region \
                     (`aws ec2 describe-instance-type-offerings --location-type availability-zone --filters \
                     Name=instance-type,Values={} --region {region}`)",
                    t.name,
                    roles.join(", "),
                    t.name
                ),
            );
        }
        types.push(TypeRow { name: t.name.clone(), role: roles.join(", "), vcpus: t.vcpus, zones: t.zones.clone() });
    }
    let vcpus = |name: &str| found.types.iter().find(|t| t.name == name).and_then(|t| t.vcpus);

    // The reservations.
    let mut reservations = Vec::new();
    let mut reserved_free: u32 = 0;
    let (groups, then_on_demand) = match &ask.capacity {
        WorkerCapacity::Reserved { groups, then_on_demand, .. } => (!groups.is_empty(), *then_on_demand),
        _ => (false, true),
    };
    for (id, r) in &found.reservations {
        let before = problems.len();
        let kind =
            if matches!(ask.capacity, WorkerCapacity::CapacityBlock(_)) { "capacity block" } else { "reservation" };
        match (r, &ask.capacity) {
            (None, _) => block(
                &mut problems,
                format!(
                    "{kind} {id} is not in {region}: EC2 has no Capacity Reservation of that id in this account and \
                     region (`aws ec2 describe-capacity-reservations --region {region}` lists them)"
                ),
            ),
            (Some(r), WorkerCapacity::CapacityBlock(b)) => {
                if !r.capacity_block {
                    block(
                        &mut problems,
                        format!("{id} is a Capacity Reservation, not a Capacity Block: use `reservation: {id}`"),
                    );
                }
                if r.zone != b.zone {
                    block(
                        &mut problems,
                        format!(
                            "Capacity Block {id} is in {}, but the blueprint puts it in {}: every worker launches in \
                             the block's zone; write `zone: {}`",
                            r.zone, b.zone, r.zone
                        ),
                    );
                }
                if ask.workers.first().is_some_and(|w| *w != r.instance_type) {
                    block(
                        &mut problems,
                        format!(
                            "Capacity Block {id} holds {}, but the workers are {}: write `instance_type: {}`",
                            r.instance_type, ask.workers[0], r.instance_type
                        ),
                    );
                }
                let utc = node_contract::interruption::format_utc;
                if let (Some(theirs), Some(ours)) = (r.start_unix, b.start_unix)
                    && theirs != ours
                {
                    block(
                        &mut problems,
                        format!("Capacity Block {id} starts at {}, but the blueprint says {}", utc(theirs), utc(ours)),
                    );
                }
                match r.end_unix {
                    Some(theirs) if theirs != b.end_unix => block(
                        &mut problems,
                        format!(
                            "Capacity Block {id} ends at {}, but the blueprint says {}: the workers would be scaled \
                             in at the wrong time",
                            utc(theirs),
                            utc(b.end_unix)
                        ),
                    ),
                    _ => {}
                }
                if r.total < ask.count {
                    block(
                        &mut problems,
                        format!(
                            "Capacity Block {id} holds {} instances, fewer than the {} workers asked (`count`)",
                            r.total, ask.count
                        ),
                    );
                }
                if gone(&r.state) {
                    block(&mut problems, format!("Capacity Block {id} is {}: it holds no capacity", r.state));
                }
            }
            (Some(r), _) => {
                if !ask.workers.contains(&r.instance_type) {
                    block(
                        &mut problems,
                        format!(
                            "reservation {id} holds {}, which is not among the workers' types ({}): instances of \
                             those types never launch into it",
                            r.instance_type,
                            ask.workers.join(", ")
                        ),
                    );
                } else if gone(&r.state) {
                    let text = format!("reservation {id} is {}: it holds no capacity", r.state);
                    if then_on_demand { warn(&mut problems, text) } else { block(&mut problems, text) }
                } else if r.state == "active" {
                    reserved_free = reserved_free.saturating_add(r.available);
                }
            }
        }
        let verdict = if problems[before..].iter().any(|p| p.severity == Severity::Blocker) { "blocked" } else { "ok" };
        reservations.push(ReservationRow { id: id.clone(), kind, found: r.clone(), verdict });
    }
    if matches!(ask.capacity, WorkerCapacity::Reserved { .. })
        && !then_on_demand
        && !groups
        && reserved_free < ask.count
    {
        warn(
            &mut problems,
            format!(
                "the reservations have {reserved_free} instances free, fewer than the {} workers asked; the \
                 blueprint launches only into them (no `on_demand` after them), so the rest wait for room",
                ask.count
            ),
        );
    }

    // The quotas: vCPUs needed per code at count and at max.
    let mut needs: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    if let (Some(q), Some(v)) = (quota_for(&ask.master, Market::OnDemand), vcpus(&ask.master)) {
        let n = needs.entry(q.code).or_default();
        n.0 += u64::from(v);
        n.1 += u64::from(v);
    }
    let reserved = matches!(ask.capacity, WorkerCapacity::Reserved { .. });
    if let Some(market) = ask.worker_market() {
        let (count, max) = if reserved && then_on_demand {
            (ask.count.saturating_sub(reserved_free), ask.max.saturating_sub(reserved_free))
        } else if reserved {
            (0, 0)
        } else {
            (ask.count, ask.max)
        };
        // Per quota, the largest of the workers' types that count against it.
        let mut largest: BTreeMap<&'static str, u32> = BTreeMap::new();
        for w in &ask.workers {
            if let (Some(q), Some(v)) = (quota_for(w, market), vcpus(w)) {
                let l = largest.entry(q.code).or_default();
                *l = (*l).max(v);
            }
        }
        for (code, v) in largest {
            let n = needs.entry(code).or_default();
            n.0 += u64::from(count) * u64::from(v);
            n.1 += u64::from(max) * u64::from(v);
        }
    }
    for t in ask.types() {
        let market = if t == ask.master { Some(Market::OnDemand) } else { ask.worker_market() };
        if let Some(market) = market
            && quota_for(t, market).is_none()
            && vcpus(t).is_some()
        {
            warn(
                &mut problems,
                format!("{t}: synth knows no {} vCPU quota for its family; its quota is not checked", market.label()),
            );
        }
    }
    let mut quotas = Vec::new();
    for (code, (at_count, at_max)) in &needs {
        let Some(kind) = by_code(code) else { continue };
        let value = found.quotas.get(*code).and_then(|q| q.as_ref()).map(|q| q.value);
        let verdict = match value {
            None => {
                warn(
                    &mut problems,
                    format!("Service Quotas has no quota {code} ({}) in {region}; it is not checked", kind.name),
                );
                "not found"
            }
            Some(v) if vcpus_of(v) < *at_count => {
                let text = format!(
                    "quota {} ({code}) is {} vCPUs in {region}, but the cluster needs {at_count} at {} workers \
                     ({at_max} at {}): {}",
                    kind.name,
                    vcpus_of(v),
                    ask.count,
                    ask.max,
                    how_to_raise(code, *at_max, region)
                );
                // Reservation groups are not read: they may hold the workers.
                if groups && kind.market == Market::OnDemand {
                    warn(&mut problems, format!("{text} (unless the reservation groups hold the workers)"));
                    "low"
                } else {
                    block(&mut problems, text);
                    "blocked"
                }
            }
            Some(v) if vcpus_of(v) < *at_max => {
                warn(
                    &mut problems,
                    format!(
                        "quota {} ({code}) is {} vCPUs in {region}: enough for {} workers, not for {} ({at_max} \
                         vCPUs); to scale that far, {}",
                        kind.name,
                        vcpus_of(v),
                        ask.count,
                        ask.max,
                        how_to_raise(code, *at_max, region)
                    ),
                );
                "low for max"
            }
            Some(_) => "ok",
        };
        quotas.push(QuotaRow { kind, value, at_count: *at_count, at_max: *at_max, verdict });
    }
    quotas.sort_by_key(|q| super::quotas::QUOTAS.iter().position(|k| k.code == q.kind.code));
    let spot_score = match &found.spot {
        Some(Ok(Some(score))) => {
            if *score <= 3 {
                warn(
                    &mut problems,
                    format!(
                        "the Spot placement score of {} workers ({}) in {region} is {score} of 10: Spot is unlikely \
                         to hold them there now; more instance types, or another region, may score higher",
                        ask.count,
                        ask.workers.join(", ")
                    ),
                );
            }
            Some(*score)
        }
        Some(Err(e)) => {
            warn(&mut problems, format!("the Spot placement score was not read: {e}"));
            None
        }
        _ => None,
    };
    problems.sort_by_key(|p| p.severity != Severity::Blocker);
    Report {
        region: found.region.clone(),
        count: ask.count,
        max: ask.max,
        types,
        quotas,
        reservations,
        spot_score,
        problems,
    }
}

/// The report as a readable table (stdout).
pub(crate) fn render(report: &Report) -> String {
    let mut out = format!("Region {}: {} workers, up to {}\n\n", report.region, report.count, report.max);
    let mut rows = vec![["TYPE".to_owned(), "ROLE".to_owned(), "VCPUS".to_owned(), "ZONES".to_owned()]];
    for t in &report.types {
        let zones = if t.zones.is_empty() { "none".to_owned() } else { t.zones.join(" ") };
        rows.push([t.name.clone(), t.role.clone(), t.vcpus.map_or("?".to_owned(), |v| v.to_string()), zones]);
    }
    out.push_str(&table(&rows, &[false, false, true, false]));
    if let Some(score) = report.spot_score {
        out.push_str(&format!(
            "\nSpot placement score: {score} of 10 for {} workers (10: very likely to be fulfilled now)\n",
            report.count
        ));
    }
    if !report.quotas.is_empty() {
        out.push('\n');
        let mut rows = vec![["QUOTA", "NAME", "MARKET", "VALUE", "AT COUNT", "AT MAX", ""].map(str::to_owned).to_vec()];
        for q in &report.quotas {
            rows.push(vec![
                q.kind.code.to_owned(),
                q.kind.name.to_owned(),
                q.kind.market.label().to_owned(),
                q.value.map_or("?".to_owned(), |v| vcpus_of(v).to_string()),
                q.at_count.to_string(),
                q.at_max.to_string(),
                q.verdict.to_owned(),
            ]);
        }
        out.push_str(&table(&rows, &[false, false, false, true, true, true, false]));
    }
    if !report.reservations.is_empty() {
        out.push('\n');
        let mut rows =
            vec![["RESERVATION", "KIND", "TYPE", "ZONE", "STATE", "FREE", "WINDOW", ""].map(str::to_owned).to_vec()];
        let utc = node_contract::interruption::format_utc;
        for r in &report.reservations {
            let row = match &r.found {
                Some(f) => vec![
                    r.id.clone(),
                    if f.capacity_block { "capacity block" } else { "reservation" }.to_owned(),
                    f.instance_type.clone(),
                    f.zone.clone(),
                    f.state.clone(),
                    format!("{} of {}", f.available, f.total),
                    match (f.start_unix, f.end_unix) {
                        (Some(s), Some(e)) => format!("{} to {}", utc(s), utc(e)),
                        (None, Some(e)) => format!("until {}", utc(e)),
                        (Some(s), None) => format!("from {}", utc(s)),
                        (None, None) => "no end".to_owned(),
                    },
                    r.verdict.to_owned(),
                ],
                None => vec![
                    r.id.clone(),
                    r.kind.to_owned(),
                    "-".into(),
                    "-".into(),
                    "not found".into(),
                    "-".into(),
                    "-".into(),
                    r.verdict.to_owned(),
                ],
            };
            rows.push(row);
        }
        out.push_str(&table(&rows, &[false, false, false, false, false, true, false, false]));
    }
    if !report.problems.is_empty() {
        out.push('\n');
        for p in &report.problems {
            let label = match p.severity {
                Severity::Blocker => "blocker",
                Severity::Warning => "warning",
            };
            out.push_str(&format!("{label}: {}\n", p.text));
        }
    }
    out
}

/// Rows as aligned columns (`right`: which columns align right), two
/// spaces apart, the last column unpadded.
fn table<R: AsRef<[String]>>(rows: &[R], right: &[bool]) -> String {
    let columns = rows.first().map_or(0, |r| r.as_ref().len());
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r.as_ref().get(c).map_or(0, |s| s.chars().count())).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.as_ref().iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = widths[c].saturating_sub(cell.chars().count());
            if right.get(c).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if c + 1 < columns {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The report as JSON, for scripts.
pub(crate) fn json(report: &Report) -> Value {
    json!({
        "region": report.region,
        "count": report.count,
        "max": report.max,
        "fits": report.fits(),
        "spot_placement_score": report.spot_score,
        "types": report.types.iter().map(|t| json!({
            "instance_type": t.name, "role": t.role, "vcpus": t.vcpus, "zones": t.zones,
        })).collect::<Vec<_>>(),
        "quotas": report.quotas.iter().map(|q| json!({
            "code": q.kind.code, "name": q.kind.name, "market": q.kind.market.label(),
            "value": q.value, "needed_at_count": q.at_count, "needed_at_max": q.at_max, "verdict": q.verdict,
        })).collect::<Vec<_>>(),
        "reservations": report.reservations.iter().map(|r| json!({
            "id": r.id, "kind": r.kind, "found": r.found.is_some(),
            "instance_type": r.found.as_ref().map(|f| f.instance_type.clone()),
            "zone": r.found.as_ref().map(|f| f.zone.clone()),
            "state": r.found.as_ref().map(|f| f.state.clone()),
            "total": r.found.as_ref().map(|f| f.total),
            "available": r.found.as_ref().map(|f| f.available),
            "start_unix": r.found.as_ref().and_then(|f| f.start_unix),
            "end_unix": r.found.as_ref().and_then(|f| f.end_unix),
            "capacity_block": r.found.as_ref().map(|f| f.capacity_block),
            "verdict": r.verdict,
        })).collect::<Vec<_>>(),
        "problems": report.problems.iter().map(|p| json!({
            "severity": match p.severity { Severity::Blocker => "blocker", Severity::Warning => "warning" },
            "text": p.text,
        })).collect::<Vec<_>>(),
        "verdict": report.verdict(),
    })
}

/// `synth capacity`'s answer for every region checked: the tables (or one
/// JSON document) on stdout, then the verdict in one line; exit 0 when
/// nothing blocks in any region, else 1.
pub(crate) fn print<K: Console>(console: &K, reports: &[Report], as_json: bool) -> ExitCode {
    let fits = reports.iter().all(Report::fits);
    let verdict = {
        let blocked: Vec<&str> = reports.iter().filter(|r| !r.fits()).map(|r| r.region.as_str()).collect();
        let fit: Vec<&str> = reports.iter().filter(|r| r.fits()).map(|r| r.region.as_str()).collect();
        match (blocked.is_empty(), fit.is_empty()) {
            (true, _) => format!("verdict: the cluster fits in {}", fit.join(", ")),
            (false, true) => format!("verdict: blocked in {}: see the blockers above", blocked.join(", ")),
            (false, false) => {
                format!(
                    "verdict: blocked in {}; fits in {}: see the blockers above",
                    blocked.join(", "),
                    fit.join(", ")
                )
            }
        }
    };
    let text = if as_json {
        let document = json!({
            "fits": fits,
            "regions": reports.iter().map(json).collect::<Vec<_>>(),
            "verdict": verdict,
        });
        format!("{document:#}\n")
    } else {
        let mut text: String = reports.iter().map(|r| render(r) + "\n").collect();
        text.push_str(&verdict);
        text.push('\n');
        text
    };
    let code = if fits { ExitCode::Success } else { ExitCode::Invalid };
    crate::exit::printed(console.print(&text), "the capacity report", code)
}

/// `synth deploy`'s check before it creates anything: a blocker refuses
/// the deploy (each printed as an error, exit 1); warnings are printed and
/// the deploy goes on; a check AWS refuses or cannot answer is one
/// warning line and the deploy goes on.
pub(crate) async fn preflight<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    ask: &Ask,
    display: &Display,
) -> Result<(), ExitCode> {
    display.live("checking quotas, zones and reservations");
    let found = match read(cloud, ask).await {
        Ok(found) => found,
        Err(e) => {
            console.noteln(&format!(
                "warning: the capacity check did not run ({e}); deploying without it (`synth capacity` runs it alone)"
            ));
            return Ok(());
        }
    };
    let report = assess(ask, &found);
    for p in report.problems.iter().filter(|p| p.severity == Severity::Warning) {
        console.noteln(&format!("warning: {}", p.text));
    }
    if report.fits() {
        display.line("Checked", &format!("capacity: {}", report.verdict()));
        return Ok(());
    }
    display.finish();
    for p in report.blockers() {
        console.noteln(&format!("error: {}", p.text));
    }
    console.noteln(&format!(
        "error: refused before anything was created: {} (`synth deploy --skip-capacity-check` deploys anyway; \
         `synth capacity` shows the whole table)",
        report.verdict()
    ));
    Err(ExitCode::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::failing::{Failing, Fault, Op};
    use crate::deploy::fake::{FakeCloud, FakeConsole};
    use crate::spec::CapacityBlock;

    fn ask(master: &str, workers: &[&str], count: u32, max: u32, capacity: WorkerCapacity) -> Ask {
        Ask { master: master.into(), workers: workers.iter().map(|w| (*w).to_owned()).collect(), count, max, capacity }
    }

    /// A region where every type is offered in two zones with its real vCPUs.
    fn cloud() -> FakeCloud {
        let cloud = FakeCloud::default();
        for (t, v) in [
            ("p3.2xlarge", 8),
            ("p4d.24xlarge", 96),
            ("p3.16xlarge", 64),
            ("p5.48xlarge", 192),
            ("c6i.4xlarge", 16),
            ("g5.xlarge", 4),
        ] {
            cloud.instance_types.lock().unwrap().insert(t.into(), (v, vec!["us-east-1a".into(), "us-east-1b".into()]));
        }
        cloud
    }

    fn quota(cloud: &FakeCloud, code: &str, value: f64) {
        cloud.quotas.lock().unwrap().insert(code.into(), Quota { name: code.into(), value });
    }

    async fn report(cloud: &impl Cloud, a: &Ask) -> Report {
        assess(a, &read(cloud, a).await.unwrap())
    }

    #[tokio::test]
    async fn vcpus_are_counted_per_quota_at_count_and_at_max() {
        let cloud = cloud();
        quota(&cloud, "L-417A185B", 2000.0);
        // The reserved-gpus example without its reservation: the master
        // and the workers share P's On-Demand quota; the workers at the
        // larger of their two P types.
        let a = ask("p3.2xlarge", &["p4d.24xlarge", "p3.16xlarge"], 4, 8, WorkerCapacity::OnDemand);
        let r = report(&cloud, &a).await;
        assert_eq!(r.quotas.len(), 1);
        let q = &r.quotas[0];
        assert_eq!((q.kind.code, q.at_count, q.at_max, q.verdict), ("L-417A185B", 8 + 4 * 96, 8 + 8 * 96, "ok"));
        assert!(r.fits(), "{:?}", r.problems);
        assert_eq!(r.verdict(), "us-east-1: fits: 4 workers (up to 8)");
        assert_eq!(r.types.iter().map(|t| t.role.as_str()).collect::<Vec<_>>(), ["master", "worker", "fallback"]);

        // Spot workers on a CPU master: two quotas.
        quota(&cloud, "L-1216C47A", 16.0);
        quota(&cloud, "L-C4BD4855", 192.0 * 2.0);
        let a = ask("c6i.4xlarge", &["p5.48xlarge"], 2, 3, WorkerCapacity::Spot);
        let r = report(&cloud, &a).await;
        let rows: Vec<_> = r.quotas.iter().map(|q| (q.kind.code, q.at_count, q.at_max, q.verdict)).collect();
        assert_eq!(rows, [("L-1216C47A", 16, 16, "ok"), ("L-C4BD4855", 384, 576, "low for max")]);
        assert!(r.fits());
        assert_eq!(r.verdict(), "us-east-1: fits: 2 workers (up to 3) (1 warning)");
        assert!(
            r.problems[0].text.contains("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-C4BD4855 --desired-value 576"),
            "{:?}",
            r.problems
        );
    }

    #[tokio::test]
    async fn a_quota_below_count_blocks_and_says_how_to_raise_it() {
        let cloud = cloud();
        quota(&cloud, "L-417A185B", 0.0);
        let a = ask("p3.2xlarge", &["p4d.24xlarge"], 2, 4, WorkerCapacity::OnDemand);
        let r = report(&cloud, &a).await;
        assert!(!r.fits());
        assert_eq!(r.quotas[0].verdict, "blocked");
        assert_eq!(
            r.problems[0].text,
            "quota Running On-Demand P instances (L-417A185B) is 0 vCPUs in us-east-1, but the cluster needs 200 at \
             2 workers (392 at 4): raise it in the Service Quotas console \
             (https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/L-417A185B) or with `aws \
             service-quotas request-service-quota-increase --service-code ec2 --quota-code L-417A185B --desired-value \
             392 --region us-east-1`"
        );
        assert_eq!(r.verdict(), "us-east-1: blocked: 1 blocker");
        let table = render(&r);
        assert!(
            table.contains("L-417A185B  Running On-Demand P instances  On-Demand      0       200     392  blocked"),
            "{table}"
        );
        assert!(
            table.starts_with("Region us-east-1: 2 workers, up to 4\n\nTYPE          ROLE    VCPUS  ZONES\n"),
            "{table}"
        );
        assert_eq!(json(&r)["quotas"][0]["needed_at_max"], 392);
    }

    #[tokio::test]
    async fn a_type_offered_nowhere_or_unknown_blocks_and_an_unknown_quota_warns() {
        let cloud = cloud();
        cloud.instance_types.lock().unwrap().insert("p3.16xlarge".into(), (64, vec![]));
        let a = ask("p3.2xlarge", &["p4d.24xlarge", "p3.16xlarge", "p9.huge"], 1, 1, WorkerCapacity::OnDemand);
        let r = report(&cloud, &a).await;
        let texts: Vec<&str> = r.problems.iter().map(|p| p.text.as_str()).collect();
        assert!(
            texts[0].starts_with("p3.16xlarge (fallback) is offered in no Availability Zone of us-east-1"),
            "{texts:?}"
        );
        assert!(texts[1].starts_with("EC2 does not know instance type p9.huge in us-east-1"), "{texts:?}");
        // No quota answered (the fake has none set): not checked, said.
        assert!(texts[2].starts_with("Service Quotas has no quota L-417A185B"), "{texts:?}");
        assert_eq!(r.blockers().count(), 2);
    }

    fn block(zone: &str) -> WorkerCapacity {
        WorkerCapacity::CapacityBlock(CapacityBlock {
            id: "cr-0123456789abcdef0".into(),
            zone: zone.into(),
            start_unix: Some(1_900_000_000),
            end_unix: 1_900_600_000,
        })
    }

    fn reservation(id: &str, t: &str, zone: &str, total: u32, available: u32, block: bool) -> Reservation {
        Reservation {
            id: id.into(),
            instance_type: t.into(),
            zone: zone.into(),
            state: "scheduled".into(),
            total,
            available,
            start_unix: Some(1_900_000_000),
            end_unix: Some(1_900_600_000),
            capacity_block: block,
        }
    }

    #[tokio::test]
    async fn a_capacity_block_must_match_the_blueprint_and_needs_no_quota() {
        let cloud = cloud();
        quota(&cloud, "L-1216C47A", 16.0);
        let id = "cr-0123456789abcdef0";
        cloud.reservations.lock().unwrap().insert(id.into(), reservation(id, "p5.48xlarge", "us-east-1b", 8, 8, true));
        let a = ask("c6i.4xlarge", &["p5.48xlarge"], 8, 8, block("us-east-1a"));
        let r = report(&cloud, &a).await;
        assert_eq!(r.quotas.len(), 1, "only the master's quota: {:?}", r.quotas);
        assert_eq!(
            r.blockers().map(|p| p.text.as_str()).collect::<Vec<_>>(),
            ["Capacity Block cr-0123456789abcdef0 is in us-east-1b, but the blueprint puts it in us-east-1a: every \
              worker launches in the block's zone; write `zone: us-east-1b`"]
        );
        assert_eq!(r.reservations[0].verdict, "blocked");
        // Every other mismatch, at once.
        let mut wrong = reservation(id, "p4d.24xlarge", "us-east-1a", 4, 4, true);
        wrong.state = "expired".into();
        wrong.end_unix = Some(1_900_700_000);
        cloud.reservations.lock().unwrap().insert(id.into(), wrong);
        let r = report(&cloud, &a).await;
        let texts: Vec<&str> = r.blockers().map(|p| p.text.as_str()).collect();
        assert_eq!(texts.len(), 4, "{texts:?}");
        assert!(texts[0].contains("holds p4d.24xlarge, but the workers are p5.48xlarge"), "{texts:?}");
        let utc = node_contract::interruption::format_utc;
        let ends = format!("ends at {}, but the blueprint says {}", utc(1_900_700_000), utc(1_900_600_000));
        assert!(texts[1].contains(&ends), "{texts:?}");
        assert!(texts[2].contains("holds 4 instances, fewer than the 8 workers asked"), "{texts:?}");
        assert!(texts[3].contains("is expired"), "{texts:?}");
        // Not found.
        cloud.reservations.lock().unwrap().clear();
        let r = report(&cloud, &a).await;
        assert!(
            r.problems[0].text.starts_with("capacity block cr-0123456789abcdef0 is not in us-east-1"),
            "{:?}",
            r.problems
        );
        // As it should be.
        cloud.reservations.lock().unwrap().insert(id.into(), reservation(id, "p5.48xlarge", "us-east-1a", 8, 8, true));
        assert!(report(&cloud, &a).await.fits());
    }

    #[tokio::test]
    async fn reserved_instances_hold_their_quota_and_a_foreign_type_blocks() {
        let cloud = cloud();
        quota(&cloud, "L-417A185B", 8.0 + 2.0 * 96.0);
        let id = "cr-0aaaaaaaaaaaaaaaa";
        let mut r = reservation(id, "p4d.24xlarge", "us-east-1a", 2, 2, false);
        r.state = "active".into();
        cloud.reservations.lock().unwrap().insert(id.into(), r.clone());
        let reserved =
            |then_on_demand| WorkerCapacity::Reserved { ids: vec![id.into()], groups: vec![], then_on_demand };
        let a = ask("p3.2xlarge", &["p4d.24xlarge", "p3.16xlarge"], 4, 6, reserved(true));
        let rep = report(&cloud, &a).await;
        // 2 of the 4 workers are in the reservation: 8 + 2 × 96 at count.
        assert_eq!((rep.quotas[0].at_count, rep.quotas[0].at_max), (200, 392));
        assert!(rep.fits(), "{:?}", rep.problems);
        // Only into the reservation: no On-Demand workers, a warning that 2 wait.
        let rep = report(&cloud, &ask("p3.2xlarge", &["p4d.24xlarge"], 4, 6, reserved(false))).await;
        assert_eq!(rep.quotas[0].at_count, 8);
        assert!(rep.problems.iter().any(|p| p.text.contains("have 2 instances free, fewer than the 4 workers")));
        // A reservation of another type.
        r.instance_type = "g5.xlarge".into();
        cloud.reservations.lock().unwrap().insert(id.into(), r);
        let rep = report(&cloud, &a).await;
        assert!(rep.blockers().any(|p| p.text.starts_with(
            "reservation cr-0aaaaaaaaaaaaaaaa holds g5.xlarge, which is not among the workers' types (p4d.24xlarge, p3.16xlarge)"
        )), "{:?}", rep.problems);
    }

    #[tokio::test]
    async fn spot_workers_get_the_regions_placement_score_and_a_low_one_warns() {
        let cloud = cloud();
        quota(&cloud, "L-DB2E81BA", 1000.0);
        quota(&cloud, "L-3819A6DF", 1000.0);
        let a = ask("g5.xlarge", &["g5.xlarge"], 4, 16, WorkerCapacity::Spot);
        *cloud.spot_score.lock().unwrap() = Some(8);
        let r = report(&cloud, &a).await;
        assert_eq!((r.spot_score, r.problems.len()), (Some(8), 0), "{:?}", r.problems);
        assert!(render(&r).contains("\nSpot placement score: 8 of 10 for 4 workers"), "{}", render(&r));
        assert_eq!(json(&r)["spot_placement_score"], 8);
        *cloud.spot_score.lock().unwrap() = Some(2);
        let r = report(&cloud, &a).await;
        assert!(r.fits(), "a low score is a warning");
        assert!(r.problems[0].text.contains("is 2 of 10: Spot is unlikely"), "{:?}", r.problems);
        let refused = Failing::new(cloud).fail_from(Op::SpotPlacementScore, 1, Fault::Denied);
        let r = report(&refused, &a).await;
        assert!(r.fits() && r.spot_score.is_none());
        assert!(r.problems[0].text.starts_with("the Spot placement score was not read: EC2 GetSpotPlacementScores"));
        let cloud = refused.inner();
        // On-Demand workers: not asked.
        let calls = cloud.calls_named("spot_placement_score");
        report(cloud, &ask("g5.xlarge", &["g5.xlarge"], 4, 16, WorkerCapacity::OnDemand)).await;
        assert_eq!(cloud.calls_named("spot_placement_score"), calls);
    }

    #[tokio::test]
    async fn the_report_of_several_regions_ends_with_one_verdict_and_its_exit_code() {
        let cloud = cloud();
        quota(&cloud, "L-417A185B", 1000.0);
        let a = ask("p3.2xlarge", &["p4d.24xlarge"], 2, 4, WorkerCapacity::OnDemand);
        let fits = report(&cloud, &a).await;
        let mut blocked = fits.clone();
        blocked.region = "us-west-2".into();
        blocked.problems.push(Problem { severity: Severity::Blocker, text: "no room".into() });
        let console = FakeConsole::default();
        assert_eq!(print(&console, std::slice::from_ref(&fits), false), ExitCode::Success);
        assert!(console.stdout().ends_with("\nverdict: the cluster fits in us-east-1\n"), "{}", console.stdout());
        let console = FakeConsole::default();
        assert_eq!(print(&console, &[fits.clone(), blocked.clone()], false), ExitCode::Invalid);
        let out = console.stdout();
        assert!(out.contains("Region us-west-2: 2 workers, up to 4") && out.contains("blocker: no room"), "{out}");
        assert!(out.ends_with("verdict: blocked in us-west-2; fits in us-east-1: see the blockers above\n"), "{out}");
        let console = FakeConsole::default();
        assert_eq!(print(&console, &[fits, blocked], true), ExitCode::Invalid);
        let document: Value = serde_json::from_str(&console.stdout()).unwrap();
        assert_eq!((document["fits"].as_bool(), document["regions"].as_array().map(Vec::len)), (Some(false), Some(2)));
        assert_eq!(document["regions"][1]["problems"][0]["severity"], "blocker");
        // A closed pipe is not a failure; a full disk is exit 2.
        let console = FakeConsole::default();
        *console.print_fails.lock().unwrap() = Some(std::io::ErrorKind::BrokenPipe);
        assert_eq!(print(&console, &[], false), ExitCode::Success);
        *console.print_fails.lock().unwrap() = Some(std::io::ErrorKind::StorageFull);
        assert_eq!(print(&console, &[], false), ExitCode::Error);
    }

    #[tokio::test]
    async fn the_deploy_preflight_refuses_a_blocker_and_goes_on_when_refused() {
        let cloud = cloud();
        quota(&cloud, "L-417A185B", 0.0);
        let a = ask("p3.2xlarge", &["p4d.24xlarge"], 2, 4, WorkerCapacity::OnDemand);
        let console = FakeConsole::default();
        assert_eq!(preflight(&console, &cloud, &a, &console.display()).await, Err(ExitCode::Invalid));
        let err = console.stderr();
        assert!(err.contains("error: quota Running On-Demand P instances (L-417A185B) is 0 vCPUs"), "{err}");
        assert!(err.contains("error: refused before anything was created: us-east-1: blocked: 1 blocker"), "{err}");
        // AWS refuses the check: one warning, and on.
        let refused = Failing::new(cloud).fail_from(Op::InstanceVcpus, 1, Fault::Denied);
        let console = FakeConsole::default();
        assert_eq!(preflight(&console, &refused, &a, &console.display()).await, Ok(()));
        let err = console.stderr();
        assert_eq!(
            err.lines().filter(|l| l.starts_with("warning: the capacity check did not run")).count(),
            1,
            "{err}"
        );
        assert!(err.contains("AWS refused ec2:DescribeInstanceTypes"), "{err}");
        // Enough quota: one line, and on.
        let cloud = refused.inner();
        quota(cloud, "L-417A185B", 400.0);
        let console = FakeConsole::default();
        assert_eq!(preflight(&console, cloud, &a, &console.display()).await, Ok(()));
        assert!(
            console.stderr().contains("Checked capacity: us-east-1: fits: 2 workers (up to 4)"),
            "{}",
            console.stderr()
        );
    }
}
