//! What a healthy GPU node of each instance type promises, for the GPU gate
//! (`synth/data/gpu-facts.tsv`, read at build time; docs/ARCHITECTURE.md,
//! "The GPU gate").

use std::collections::BTreeMap;
use std::sync::LazyLock;

use node_contract::gpu::GpuExpect;

use super::InstanceType;

const FACTS: &str = include_str!("../../data/gpu-facts.tsv");

/// A GPU model's figures.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    bf16_tflops: Option<f64>,
    memory_gbps: Option<f64>,
    nvlink_busbw_gbps: Option<f64>,
}

#[derive(Debug, Default)]
struct Facts {
    models: BTreeMap<&'static str, Model>,
    /// Family → (model word, EFA devices).
    families: BTreeMap<&'static str, (Option<&'static str>, Option<u32>)>,
    /// Instance type → EFA devices.
    types: BTreeMap<&'static str, Option<u32>>,
}

fn dash<T: std::str::FromStr>(field: &str) -> Result<Option<T>, String> {
    if field == "-" { Ok(None) } else { field.parse().map(Some).map_err(|_| format!("{field:?} is not a number")) }
}

fn parse(text: &'static str) -> Result<Facts, String> {
    let mut facts = Facts::default();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split('\t').collect();
        let bad = |why: String| format!("gpu-facts.tsv line {}: {why}", n + 1);
        let fresh = match fields.as_slice() {
            ["model", word, tflops, memory, busbw, _note] => facts
                .models
                .insert(
                    word,
                    Model {
                        bf16_tflops: dash(tflops).map_err(bad)?,
                        memory_gbps: dash(memory).map_err(bad)?,
                        nvlink_busbw_gbps: dash(busbw).map_err(bad)?,
                    },
                )
                .is_none(),
            ["family", family, model, efa, _note] => {
                let model = (*model != "-").then_some(*model);
                facts.families.insert(family, (model, dash(efa).map_err(bad)?)).is_none()
            }
            ["type", name, efa, _note] => facts.types.insert(name, dash(efa).map_err(bad)?).is_none(),
            _ => return Err(bad(format!("{} fields, not a model, family or type row", fields.len()))),
        };
        if !fresh {
            return Err(bad(format!("{} is listed twice", fields[1])));
        }
    }
    if let Some((family, (Some(model), _))) =
        facts.families.iter().find(|(_, (m, _))| m.is_some_and(|m| !facts.models.contains_key(m)))
    {
        return Err(format!("gpu-facts.tsv: family {family} names model {model}, which has no model row"));
    }
    Ok(facts)
}

// The file is part of the build and a unit test parses it; an empty table
// (never reached) would only mean no expectations, never a panic.
static TABLE: LazyLock<Facts> = LazyLock::new(|| parse(FACTS).unwrap_or_default());

/// What a healthy node of `t` promises, or `None` for a type without NVIDIA
/// GPUs. `efa`: the stack attaches EFA to its nodes (without it a node has
/// no EFA device, whatever its type could take).
pub(crate) fn expect(t: &InstanceType, efa: bool) -> Option<GpuExpect> {
    if !t.has_nvidia_gpus() {
        return None;
    }
    let family = t.name.split_once('.').map_or(t.name, |(f, _)| f);
    let (model_word, family_efa) = TABLE.families.get(family).copied().unwrap_or((None, None));
    let efa_devices = TABLE.types.get(t.name).copied().unwrap_or(family_efa).filter(|_| efa && t.efa);
    let model = model_word.and_then(|w| TABLE.models.get(w));
    Some(GpuExpect {
        gpus: t.accelerators,
        // The model row's word is what NVML's name holds ("A100-SXM4-80GB").
        model: model_word.map(str::to_owned),
        efa_devices,
        bf16_tflops: model.and_then(|m| m.bf16_tflops),
        memory_gbps: model.and_then(|m| m.memory_gbps),
        nvlink_busbw_gbps: model.and_then(|m| m.nvlink_busbw_gbps).filter(|_| t.accelerators > 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_and_every_nvidia_family_has_a_row() {
        let facts = parse(FACTS).unwrap();
        let mut missing: Vec<&str> = super::super::table::TABLE
            .iter()
            .filter(|t| t.has_nvidia_gpus())
            .map(|t| t.name.split_once('.').map_or(t.name, |(f, _)| f))
            .filter(|f| !facts.families.contains_key(f))
            .collect();
        missing.dedup();
        assert!(missing.is_empty(), "NVIDIA families without a row in gpu-facts.tsv: {missing:?}");
        for name in facts.types.keys() {
            assert!(super::super::lookup(name).is_some(), "gpu-facts.tsv names {name}, which the catalogue lacks");
        }
    }

    #[test]
    fn bad_rows_are_refused_with_their_line() {
        let e = parse("model\tX\tlots\t1\t-\tnote\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("\"lots\""), "{e}");
        let e = parse("family\tp9\tZ100\t-\tnote\n").unwrap_err();
        assert!(e.contains("no model row"), "{e}");
        let e = parse("type\tp5.4xlarge\t-\ta\ntype\tp5.4xlarge\t-\tb\n").unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn a_p5_promises_eight_h100s_and_32_efa_devices_with_efa_on() {
        let p5 = super::super::lookup("p5.48xlarge").unwrap();
        let e = expect(p5, true).unwrap();
        assert_eq!(e.gpus, 8);
        assert_eq!(e.model.as_deref(), Some("H100"));
        assert_eq!(e.efa_devices, Some(32));
        assert_eq!((e.bf16_tflops, e.memory_gbps, e.nvlink_busbw_gbps), (Some(989.0), Some(3350.0), Some(360.0)));
        assert_eq!(expect(p5, false).unwrap().efa_devices, None, "no EFA attached, no device to count");
        let small = expect(super::super::lookup("p5.4xlarge").unwrap(), true).unwrap();
        assert_eq!((small.gpus, small.efa_devices, small.nvlink_busbw_gbps), (1, None, None));
        let p4de = expect(super::super::lookup("p4de.24xlarge").unwrap(), true).unwrap();
        assert_eq!((p4de.model.as_deref(), p4de.memory_gbps), (Some("A100-SXM4-80GB"), Some(2039.0)));
        assert_eq!(expect(super::super::lookup("c5.xlarge").unwrap(), true), None);
    }
}
