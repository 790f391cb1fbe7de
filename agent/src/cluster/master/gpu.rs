//! The GPU gate's verdicts at the master (docs/ARCHITECTURE.md, "The GPU
//! gate"): every node with NVIDIA GPUs checks them before it registers and
//! sends its [`GpuReport`], passed or failed. The master counts them for
//! the formation signal and `synth status` ([`GpuSummary`]) and acts on a
//! failed node by the blueprint's action: `warn` names it (it joins);
//! `replace` marks a worker unhealthy so its group launches another (a
//! master that fails fails the formation: it cannot be replaced); `fail`
//! fails a formation still under way with the node and the check named,
//! and after formation acts as `replace`.

use std::collections::{BTreeMap, BTreeSet};

use node_contract::gpu::{GPU_SUMMARY_NAMED, GpuAction, GpuReport, GpuSummary};
use node_contract::message::BootFailure;
use serde::{Deserialize, Serialize};

use super::{MasterState, Phase, shorten};
use crate::cluster::effect::Effect;

/// The most nodes whose verdicts the master keeps (a passed node is an
/// instance id): beyond it, reports are logged and acted on, not counted.
const KEPT: usize = 8192;

/// The verdicts the master has heard, by instance id; a node that reports
/// again (a reboot) counts once, with its newest verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct GpuTally {
    passed: BTreeSet<String>,
    /// Instance id → "i-... (10.0.1.7): <failure line>".
    failed: BTreeMap<String, String>,
}

impl GpuTally {
    /// `id`'s newest verdict: passed, or its failure as the master logged
    /// it ("i-... (10.0.1.7): <failure line>"); `None` when it never
    /// reported (or was not counted).
    pub(super) fn verdict(&self, id: &str) -> Option<Result<(), &str>> {
        if self.passed.contains(id) {
            return Some(Ok(()));
        }
        self.failed.get(id).map(|line| Err(line.as_str()))
    }

    fn full(&self, id: &str) -> bool {
        self.passed.len() + self.failed.len() >= KEPT && !self.passed.contains(id) && !self.failed.contains_key(id)
    }
}

impl MasterState {
    /// A node's GPU gate verdict.
    pub(super) fn on_gpu_report(&mut self, r: GpuReport, fx: &mut Vec<Effect>) {
        let id = r.instance_id.clone();
        let who = format!("{} ({}, {})", shorten(&id, 64), shorten(&r.private_ip, 64), shorten(&r.instance_type, 64));
        let Some(action) = self.gpu_action else {
            fx.push(Effect::Log(format!("a GPU check report from {who} while the GPU gate is off; logged only")));
            return;
        };
        let seconds = r.millis as f64 / 1000.0;
        let counted = !self.gpu.full(&id);
        if r.passed() {
            fx.push(Effect::Log(format!("gpu check: {who} passed {} checks in {seconds:.1} s", r.checks.len())));
            if counted {
                self.gpu.failed.remove(&id);
                self.gpu.passed.insert(id);
            }
            return;
        }
        let line = r.failure_line();
        if counted {
            self.gpu.passed.remove(&id);
            self.gpu
                .failed
                .insert(id.clone(), format!("{} ({}): {line}", shorten(&id, 64), shorten(&r.private_ip, 64)));
        }
        let forming = matches!(self.phase, Phase::Forming | Phase::AwaitingLaunchFailures { .. });
        match action {
            GpuAction::Warn => {
                fx.push(Effect::Log(format!(
                    "gpu check: {who} FAILED ({seconds:.1} s): {line}; it joins anyway (action warn)"
                )));
            }
            _ if id == self.master_id => {
                fx.push(Effect::Log(format!("gpu check: the master {who} FAILED ({seconds:.1} s): {line}")));
                if forming {
                    self.fail(
                        format!(
                            "The master's GPU check failed: {line}. The master cannot be replaced by its group: delete \
                             the stack and deploy again, or set `formation.gpu_check.action: warn` to form anyway"
                        ),
                        fx,
                    );
                }
            }
            GpuAction::Fail if forming => {
                fx.push(Effect::Log(format!("gpu check: {who} FAILED ({seconds:.1} s): {line}")));
                self.keep_as_boot_failure(&r, &line);
                self.fail(format!("{who} failed its GPU check: {line}"), fx);
            }
            GpuAction::Replace | GpuAction::Fail => {
                fx.push(Effect::Log(format!(
                    "gpu check: {who} FAILED ({seconds:.1} s): {line}; marking it unhealthy so its group replaces it"
                )));
                self.keep_as_boot_failure(&r, &line);
                fx.push(Effect::MarkUnhealthy(id));
            }
        }
    }

    /// A failed node never registers: a failed formation's reason names it
    /// with its check, not as an instance that never registered.
    fn keep_as_boot_failure(&mut self, r: &GpuReport, line: &str) {
        if self.members.get(&r.instance_id).is_none() {
            self.keep_boot_failure(BootFailure::new(
                &r.instance_id,
                &r.private_ip,
                &format!("its GPU check: {line}"),
                b"",
            ));
        }
    }

    /// The gate's outcome so far; `None` when the gate is off or no node reported.
    pub(super) fn gpu_summary(&self) -> Option<GpuSummary> {
        let action = self.gpu_action?;
        let checked = self.gpu.passed.len() + self.gpu.failed.len();
        (checked > 0).then(|| GpuSummary {
            checked: u32::try_from(checked).unwrap_or(u32::MAX),
            passed: u32::try_from(self.gpu.passed.len()).unwrap_or(u32::MAX),
            failed: self.gpu.failed.values().take(GPU_SUMMARY_NAMED).cloned().collect(),
            action,
        })
    }
}
