//! `workers`: how many (`count`, `min`, `max`), checked together and
//! against the most a cluster may have, and turned into the
//! [`WorkerSpec`]. Their instance types and capacity are [`super::capacity`]'s.

use super::{At, Checker, capacity};
use crate::region::Region;
use crate::spec::{WorkerCapacity, WorkerSpec};

/// More than this and the worker group is not a cluster this project can
/// form in one formation window (and past the default Auto Scaling quotas).
pub(super) const MAX_WORKERS: u32 = 1000;

impl Checker<'_> {
    /// The workers' sizes and capacity, or `None` when `count` is missing
    /// (reported by the caller; the checks that do not need it still run).
    pub(super) fn workers(
        &mut self,
        w: super::super::model::Workers,
        count: Option<u32>,
        type_count: usize,
        region: Option<Region>,
    ) -> Option<WorkerSpec> {
        let min = w.min.unwrap_or(0);
        if let Some(written_max) = w.max
            && written_max > MAX_WORKERS
        {
            self.error(
                "workers.max",
                At::Value,
                format!("{written_max} workers is more than the {MAX_WORKERS} allowed"),
                format!("set `max` to {MAX_WORKERS} or fewer"),
            );
        }
        let capacity = capacity::capacity(self, w.spot, w.capacity, type_count, region, self.now_unix);
        let spot = capacity == WorkerCapacity::Spot;
        if spot && min > 0 {
            self.warning(
                "workers.min",
                At::Value,
                format!("Spot capacity may not be there for {min} workers, and Spot workers can be reclaimed at any time; formation fails when fewer than min join"),
                "set `min: 0`, or use on-demand workers (`spot: false`) when the cluster must reach min",
            );
        }
        if let WorkerCapacity::CapacityBlock(block) = &capacity
            && block.start_unix.is_some()
            && min > 0
        {
            self.error(
                "workers.min",
                At::Value,
                format!("min is {min}, but the Capacity Block starts after the deploy: the cluster forms with the master alone and the workers join at the block's start"),
                "set `min: 0`",
            );
        }
        let count = count?;
        let max = w.max.unwrap_or(count);
        if min > count {
            self.error(
                "workers.min",
                At::Value,
                format!("min is {min} but count is {count}; min may not be more than count"),
                format!("lower `min` to at most {count}, or raise `count`"),
            );
        }
        match w.max {
            Some(written_max) if count > written_max => self.error(
                "workers.count",
                At::Value,
                format!("count is {count} but max is {written_max}; count may not be more than max"),
                format!("raise `max` to at least {count}, or lower `count`"),
            ),
            None if count > MAX_WORKERS => self.error(
                "workers.count",
                At::Value,
                format!("{count} workers is more than the {MAX_WORKERS} allowed"),
                format!("set `count` to {MAX_WORKERS} or fewer"),
            ),
            _ => {}
        }
        Some(WorkerSpec { instance_type: String::new(), fallback_types: Vec::new(), count, min, max, capacity })
    }
}
