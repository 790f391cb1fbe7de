//! Stragglers at the master (docs/ARCHITECTURE.md, "The GPU gate"): rank 0
//! of `trainer train` names a rank whose steps stay slower than the median
//! of the others' (`node_contract::straggler`); the agent on its node sends
//! the finding here. The master logs it with the GPU facts it holds for
//! that node (its boot GPU check's verdict, [`super::gpu`]) and keeps the
//! newest few for `synth status`, on the worker group's tag
//! (`node_contract::straggler::STRAGGLER_TAG`). A finding the agent sends
//! again (a restart re-reads the file) is recognised and not counted twice.
//!
//! Under the GPU gate's `replace` (and `fail`, which acts as `replace` once
//! the cluster formed), the master marks a straggler's node unhealthy so its
//! group replaces it, as it does a node that fails the gate, but only when
//! rank 0 recorded the finding just after the job saved a checkpoint
//! (`after_checkpoint`): the replacement then costs only the steps since.
//! The master's own node cannot be replaced by a group: it is named only.

use node_contract::gpu::GpuAction;
use node_contract::straggler::{Straggler, StragglerMark};

use super::{MasterState, Phase, replacement_budget, shorten};
use crate::cluster::effect::Effect;

/// The most stragglers the master keeps (the newest), and so the most the
/// tag could name.
pub(super) const KEPT: usize = 8;

/// The floor of the stragglers' [`replacement_budget`]: the most
/// stragglers' nodes the master replaces over its life is a tenth of the
/// cluster's nodes, at least 1. Being slower than the others is a
/// judgement, not a fault: a job whose ranks are uneven by design, or a
/// worker group of mixed instance types, names a straggler again on every
/// replacement; past the budget stragglers are only named.
pub(super) const REPLACEMENTS_AT_LEAST: u32 = 1;

impl MasterState {
    /// A straggler `trainer train` named.
    pub(super) fn on_straggler(&mut self, s: Straggler, fx: &mut Vec<Effect>) {
        let same = |k: &Straggler| {
            (k.alias.as_str(), k.instance_id.as_str(), k.local_rank, k.named_unix_ms)
                == (s.alias.as_str(), s.instance_id.as_str(), s.local_rank, s.named_unix_ms)
        };
        if self.stragglers.iter().any(same) {
            fx.push(Effect::Log(format!("straggler: {} again (already counted)", s.who())));
            return;
        }
        fx.push(Effect::Log(format!("straggler: {}; {}", s.line(), self.gpu_facts(&s.instance_id))));
        let replace = matches!(
            (self.gpu_action, &self.phase),
            (Some(GpuAction::Replace), _) | (Some(GpuAction::Fail), Phase::Formed)
        );
        if replace {
            let id = s.instance_id.clone();
            let nodes = self.members.workers() as usize + 1;
            if id.is_empty() || self.members.get(&id).is_none() {
                fx.push(Effect::Log(format!("straggler: {} is not a member; nothing to replace", s.who())));
            } else if id == self.master_id {
                fx.push(Effect::Log(
                    "straggler: it is the master, which its group cannot replace; named only".to_owned(),
                ));
            } else if !s.after_checkpoint {
                fx.push(Effect::Log(format!(
                    "straggler: {} is not replaced: no checkpoint was saved just before it was named",
                    s.who()
                )));
            } else if self.straggler_replacements >= replacement_budget(nodes, REPLACEMENTS_AT_LEAST) {
                fx.push(Effect::Log(format!(
                    "straggler: {} is not replaced: {} straggler replacement(s) made already, the most for {} nodes \
                     (a cluster that keeps naming stragglers points at the job or its instance types, not at \
                     instances)",
                    s.who(),
                    self.straggler_replacements,
                    nodes
                )));
            } else {
                self.straggler_replacements += 1;
                fx.push(Effect::Log(format!(
                    "straggler: marking {} unhealthy so its group replaces it (the job saved a checkpoint just \
                     before)",
                    s.who()
                )));
                fx.push(Effect::MarkUnhealthy(id));
            }
        }
        self.stragglers.insert(0, s);
        self.stragglers.truncate(KEPT);
        fx.push(Effect::MarkStragglers(StragglerMark { stragglers: self.stragglers.clone() }));
    }

    /// What the master knows of `instance_id`'s GPUs: its boot GPU check.
    fn gpu_facts(&self, instance_id: &str) -> String {
        match self.gpu.verdict(instance_id) {
            Some(Ok(())) => "its GPU check at boot passed (its GPUs may have slowed since: throttling is read at boot \
                             only)"
                .to_owned(),
            Some(Err(line)) => format!("its GPU check at boot failed: {}", shorten(line, 512)),
            None if self.gpu_action.is_none() => "no GPU check (the GPU gate is off)".to_owned(),
            None => "no GPU check report from it".to_owned(),
        }
    }
}
