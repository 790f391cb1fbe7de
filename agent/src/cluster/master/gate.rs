//! The network gate on the master (docs/ARCHITECTURE.md, "The network
//! gate"): a check opened for a generation that adds a node, the nodes'
//! link reports, and the verdict with its action (warn, replace slow
//! workers within [`NETWORK_REPLACEMENTS_AT_LEAST`]'s budget, or fail a formation
//! whose signal the check holds).

use std::collections::BTreeMap;

use node_contract::NetworkAction;
use node_contract::message::{LinkReport, Manifest};

use super::verdict::{self, Gate, GateNode};
use super::{MasterState, NETWORK_REPLACEMENTS_AT_LEAST, Phase, replacement_budget, shorten};
use crate::cluster::effect::Effect;
use crate::netgate;

impl MasterState {
    /// Opens a network check of `next` when the gate is on and `next` adds
    /// a node to two or more (see [`netgate::checks`]). A check still open
    /// for an older generation is superseded; a formation signal it held
    /// moves to the new one, with its deadline, so formation is never held
    /// longer than one time budget.
    pub(super) fn open_gate(&mut self, next: &Manifest, now_ms: u64, fx: &mut Vec<Effect>) {
        let Some(check) = &self.network_check else { return };
        // `self.manifest` is still the generation before `next`.
        if !netgate::checks(self.manifest.as_ref(), next) {
            if next.nodes.len() < 2 && self.gate.is_none() {
                fx.push(Effect::Log(format!(
                    "no network check of generation {}: one node, no link to measure",
                    next.generation
                )));
            }
            return;
        }
        let budget_ms = u64::from(check.timeout_seconds) * 1_000;
        let mut deadline_ms = now_ms + budget_ms;
        let mut held = None;
        if let Some(old) = self.gate.take() {
            fx.push(Effect::Log(format!(
                "the network check of generation {} is superseded by generation {}",
                old.generation, next.generation
            )));
            if old.held.is_some() {
                deadline_ms = old.deadline_ms;
                held = old.held;
            }
        }
        // By index: the membership lists a manifest's nodes so.
        let nodes: Vec<GateNode> = next
            .nodes
            .iter()
            .map(|n| GateNode { instance_id: n.instance_id.clone(), alias: n.alias.clone(), ip: n.private_ip.clone() })
            .collect();
        fx.push(Effect::Log(format!(
            "network check of generation {}: waiting up to {} s for {} nodes' measurements",
            next.generation,
            deadline_ms.saturating_sub(now_ms) / 1000,
            nodes.len()
        )));
        self.gate = Some(Gate { generation: next.generation, deadline_ms, nodes, reports: BTreeMap::new(), held });
    }

    /// A node's probe measured its link: kept when it belongs to the open
    /// check; the check decides once every node reported.
    pub(super) fn on_link_report(&mut self, r: LinkReport, now_ms: u64, fx: &mut Vec<Effect>) {
        let Some(gate) = self.gate.as_mut() else {
            fx.push(Effect::Log(format!(
                "ignored a link report from {} for generation {}: no network check is open",
                shorten(&r.instance_id, 64),
                r.generation
            )));
            return;
        };
        if r.generation != gate.generation || !gate.nodes.iter().any(|n| n.instance_id == r.instance_id) {
            fx.push(Effect::Log(format!(
                "ignored a link report from {} for generation {}: the open check is of generation {} and its nodes",
                shorten(&r.instance_id, 64),
                r.generation,
                gate.generation
            )));
            return;
        }
        match r.gbps() {
            Some(g) => fx.push(Effect::Log(format!("{} measured {g:.3} Gbit/s to {}", r.instance_id, r.peer))),
            None => fx.push(Effect::Log(format!(
                "{} could not measure its link to {}: {}",
                r.instance_id,
                r.peer,
                r.error.as_deref().unwrap_or("nothing measured")
            ))),
        }
        gate.reports.insert(r.instance_id.clone(), r);
        if gate.complete() {
            self.decide_gate(now_ms, fx);
        }
    }

    /// The open check decides (every node reported, or its time is up):
    /// the verdict goes to the log, the state file for `trainer doctor`
    /// and, per slow node, the host log; then the action: `replace`
    /// terminates slow workers (never the master), `fail` fails a formation
    /// whose signal the check holds (after formation it warns), and a held
    /// success signal goes out with the verdict in its reason.
    pub(super) fn decide_gate(&mut self, now_ms: u64, fx: &mut Vec<Effect>) {
        let (Some(gate), Some(check)) = (self.gate.take(), self.network_check.as_ref()) else { return };
        let verdict = verdict::judge(check, gate.generation, &gate.nodes, &gate.reports);
        let mut summary = verdict.summary();
        if !gate.complete() {
            summary.push_str(&format!(" (decided at the {}-second limit)", check.timeout_seconds));
        }
        fx.push(Effect::Log(summary.clone()));
        let record = serde_json::json!({
            "version": 1,
            "action": check.action.name(),
            "decided_unix_ms": now_ms,
            "summary": summary,
            "verdict": verdict,
        });
        fx.push(Effect::WriteNetworkCheck(record.to_string()));
        let slow: Vec<&GateNode> = verdict.slow().map(|l| &l.node).collect();
        let nanos = u128::from(now_ms) * 1_000_000;
        for l in verdict.slow() {
            fx.push(Effect::AppendHostLog(format!(
                "{} SLOW {} {nanos} {:.2}",
                gate.generation,
                l.node.ip,
                l.fraction.unwrap_or_default()
            )));
        }
        if check.action == NetworkAction::Fail
            && !slow.is_empty()
            && let Some(held) = &gate.held
        {
            self.phase = Phase::Failed;
            let reason = format!("{summary} The blueprint's formation.network_check.action is fail.");
            self.signal(false, reason, held.data.clone(), fx);
            return;
        }
        // What the action did, each sentence after a space.
        let actions = match check.action {
            _ if slow.is_empty() => String::new(),
            NetworkAction::Warn => String::new(),
            NetworkAction::Fail => " (action fail: the cluster had formed, so this only warns)".to_string(),
            NetworkAction::Replace => self.replace_slow(&slow, gate.nodes.len(), fx),
        };
        if !actions.is_empty() {
            fx.push(Effect::Log(actions.trim_start().to_string()));
        }
        if let Some(held) = gate.held {
            self.signal(true, format!("{} {summary}{actions}", held.reason), held.data, fx);
        }
    }

    /// The network gate's `replace` for the `slow` nodes of a check of
    /// `nodes`: terminates each slow worker while the budget lasts, unless
    /// most nodes are slow. Returns what it did, each sentence after a space.
    fn replace_slow(&mut self, slow: &[&GateNode], nodes: usize, fx: &mut Vec<Effect>) -> String {
        if slow.len() * 2 > nodes {
            return format!(
                " {} of {nodes} nodes are below: that points at the expected bandwidth or the network, not at \
                 these nodes, so none is replaced.",
                slow.len()
            );
        }
        let budget = replacement_budget(nodes, NETWORK_REPLACEMENTS_AT_LEAST);
        let mut actions = String::new();
        for n in slow {
            if n.instance_id == self.master_id {
                actions.push_str(&format!(" {} is the master, which is not replaced.", n.alias));
            } else if self.network_replacements >= budget {
                actions.push_str(&format!(
                    " {} ({}) is not replaced: the network check replaced {} workers already, the most for this \
                     cluster (check the subnet and placement).",
                    n.alias, n.instance_id, self.network_replacements
                ));
            } else {
                self.network_replacements += 1;
                actions.push_str(&format!(" {} ({}) is terminated for a replacement.", n.alias, n.instance_id));
                fx.push(Effect::TerminateWorker(n.instance_id.clone()));
            }
        }
        actions
    }
}
