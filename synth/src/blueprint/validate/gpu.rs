//! `formation.gpu_check`: the GPU gate every node with NVIDIA GPUs runs
//! before it joins, checked and turned into the node config's
//! [`GpuCheck`], with what each instance type the stack may launch
//! promises (synth's catalogue, `synth/data/gpu-facts.tsv`).
//!
//! On by default (`quick`, `replace`) where a node's type has NVIDIA GPUs,
//! off elsewhere; `false` turns it off.

use std::collections::BTreeMap;

use node_contract::gpu::{GpuAction, GpuCheck, GpuLevel};

use super::super::model::{GpuCheck as Written, GpuCheckSetting};
use super::{At, Checker};
use crate::catalog::{self, InstanceType};

const PATH: &str = "formation.gpu_check";

/// The shortest budget a blueprint may give: the driver's counters and a
/// burn of every GPU take several seconds.
const MIN_SECONDS: u32 = 10;

/// The gate's settings, or `None` when it is off. `master` and `workers`
/// are the catalogue's entries of every type a node may be; `efa`: the
/// stack attaches EFA (so the EFA device count is checked).
pub(super) fn gpu_check(
    c: &mut Checker<'_>,
    setting: Option<GpuCheckSetting>,
    master: Option<&InstanceType>,
    workers: &[&InstanceType],
    efa: bool,
) -> Option<GpuCheck> {
    let types: Vec<&InstanceType> = master.into_iter().chain(workers.iter().copied()).collect();
    let gpus = types.iter().any(|t| t.has_nvidia_gpus());
    let written = match setting {
        Some(GpuCheckSetting::Off) => return None,
        None if !gpus => return None,
        None | Some(GpuCheckSetting::On) => Written { level: None, action: None, timeout_seconds: None },
        Some(GpuCheckSetting::Settings(w)) => w,
    };
    let level = c.named(
        &format!("{PATH}.level"),
        written.level.as_deref(),
        GpuLevel::Quick,
        GpuLevel::from_name,
        &GpuLevel::NAMES,
        "a level",
    );
    let action = c.named(
        &format!("{PATH}.action"),
        written.action.as_deref(),
        GpuAction::Replace,
        GpuAction::from_name,
        &GpuAction::NAMES,
        "an action",
    );
    let timeout_seconds = written.timeout_seconds.unwrap_or_else(|| level.default_timeout_seconds());
    let max = node_contract::gpu::GPU_CHECK_MAX_SECONDS;
    if !(MIN_SECONDS..=max).contains(&timeout_seconds) {
        c.error(
            &format!("{PATH}.timeout_seconds"),
            At::Value,
            format!("{timeout_seconds} seconds is outside the allowed {MIN_SECONDS} to {max}"),
            format!(
                "a node spends this long at most checking its GPUs before it joins (default {} at `quick`, {} at `thorough`)",
                GpuLevel::Quick.default_timeout_seconds(),
                GpuLevel::Thorough.default_timeout_seconds()
            ),
        );
    }
    if !gpus && !types.is_empty() {
        c.warning(
            PATH,
            At::Key,
            "no node's instance type has NVIDIA GPUs: the GPU gate has nothing to check",
            "leave `gpu_check` out, or pick a GPU instance type",
        );
    }
    let expect: BTreeMap<String, _> =
        types.iter().filter_map(|t| catalog::gpu_expect(t, efa).map(|e| (t.name.to_owned(), e))).collect();
    Some(GpuCheck { level, action, timeout_seconds, expect })
}

#[cfg(test)]
mod tests {
    use node_contract::gpu::{GpuAction, GpuCheck, GpuLevel};

    fn load(types: (&str, &str), formation: &str) -> (Option<GpuCheck>, Vec<String>) {
        load_public(types, true, formation)
    }

    fn load_public(types: (&str, &str), public: bool, formation: &str) -> (Option<GpuCheck>, Vec<String>) {
        let text = format!(
            "name: demo\nregion: us-east-1\nmaster:\n  instance_type: {}\n  public: {public}\nworkers:\n  instance_type: {}\n  count: 2\n{formation}",
            types.0, types.1
        );
        let loaded = crate::blueprint::load(&text, "bp.yaml", None).unwrap();
        (loaded.spec.gpu_check, loaded.warnings.iter().map(|w| w.message.clone()).collect())
    }

    #[test]
    fn on_by_default_where_a_node_has_gpus_off_elsewhere() {
        let (check, _) = load(("p4d.24xlarge", "p5.48xlarge"), "");
        let check = check.unwrap();
        assert_eq!((check.level, check.action, check.timeout_seconds), (GpuLevel::Quick, GpuAction::Replace, 60));
        assert_eq!(check.expect.keys().collect::<Vec<_>>(), ["p4d.24xlarge", "p5.48xlarge"]);
        // EFA is `auto`: off for a public master, so no EFA device is expected.
        assert_eq!(check.expect["p5.48xlarge"].efa_devices, None);
        assert_eq!(check.expect["p5.48xlarge"].gpus, 8);
        // A CPU master with GPU workers: only the workers' type promises GPUs.
        let (check, _) = load(("c5.xlarge", "g5.xlarge"), "");
        assert_eq!(check.unwrap().expect.keys().collect::<Vec<_>>(), ["g5.xlarge"]);
        assert_eq!(load(("c5.xlarge", "c5.xlarge"), "").0, None);
    }

    #[test]
    fn false_turns_it_off_and_settings_are_read() {
        assert_eq!(load(("p4d.24xlarge", "p4d.24xlarge"), "formation:\n  gpu_check: false\n").0, None);
        let (check, _) = load(("p4d.24xlarge", "p4d.24xlarge"), "formation:\n  gpu_check: true\n");
        assert_eq!(check.unwrap().action, GpuAction::Replace);
        let (check, _) =
            load(("p4d.24xlarge", "p4d.24xlarge"), "formation:\n  gpu_check:\n    level: thorough\n    action: warn\n");
        let check = check.unwrap();
        assert_eq!((check.level, check.action, check.timeout_seconds), (GpuLevel::Thorough, GpuAction::Warn, 2400));
        let (check, _) = load_public(("p4d.24xlarge", "p4d.24xlarge"), false, "network:\n  efa: on\n");
        assert_eq!(
            check.unwrap().expect["p4d.24xlarge"].efa_devices,
            Some(4),
            "EFA attached: its 4 devices are expected"
        );
    }

    #[test]
    fn asked_for_on_cpus_it_warns_and_checks_nothing() {
        let (check, warnings) = load(("c5.xlarge", "c5.xlarge"), "formation:\n  gpu_check:\n    action: fail\n");
        assert!(check.unwrap().expect.is_empty());
        assert!(warnings.iter().any(|w| w.contains("no node's instance type has NVIDIA GPUs")), "{warnings:?}");
    }
}
