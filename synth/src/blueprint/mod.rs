//! The blueprint front end: YAML text in, a validated [`ClusterSpec`] (or
//! every problem with the blueprint, each with its line and column) out.
//!
//! The steps, each in its own module:
//! 1. [`document`]: `saphyr-parser` events -> a tree of nodes that know their
//!    positions, only to check the YAML and index it (syntax errors,
//!    duplicate keys, empty files, second documents and tags stop here);
//! 2. [`source_map`]: that tree -> an index from field path to line and
//!    column, for every later message;
//! 3. [`deserialize`]: the text -> the [`model`] serde structs, parsed by
//!    `serde_yaml_ng`; `serde_ignored` collects every unknown field (reported
//!    with the allowed names from the JSON Schema and a "did you mean"), and
//!    `serde_path_to_error` names the field of a type error; the wrong value
//!    is taken out of the tree and the rest read again, so every type error
//!    is reported, and the later checks skip the fields already reported;
//! 4. [`validate`]: every rule and default -> [`ClusterSpec`] and warnings.
//!
//! Nothing here touches files, the network or AWS; the caller reads the file
//! and passes its text and path (the path only appears in messages).

mod deserialize;
mod diagnostic;
mod document;
mod model;
mod schema;
mod source_map;
mod suggestion;
mod validate;

pub use diagnostic::{Diagnostic, Diagnostics, Severity, render_all};
pub use schema::json_schema;
pub(crate) use suggestion::did_you_mean;
pub use validate::DEFAULT_SSM_PARAMETER;

use crate::region::Region;
use crate::spec::ClusterSpec;

/// A blueprint that passed every check.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The cluster, every default filled in.
    pub spec: ClusterSpec,
    /// Things the user should know that do not stop the build.
    pub warnings: Vec<Diagnostic>,
    /// The image, in words, when it is a stock image with no agent and the
    /// blueprint names no package to install at boot: a template built
    /// as it is would fail to form. `synth deploy` stages the package
    /// itself; `synth build` and `validate` say what a console upload needs.
    pub missing_agent: Option<String>,
}

/// The blueprint as a template's `Metadata` may hold it: CloudFormation's
/// schema for metadata (cfn-lint E4002) takes strings, integers, booleans,
/// objects and arrays, so a fraction is kept as its text (`0.5`) and an
/// empty value (`key:` or `~`, the field left out) is dropped.
fn as_metadata(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) if !(n.is_i64() || n.is_u64()) => Value::String(n.to_string()),
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, as_metadata(v))).collect())
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| if v.is_null() { Value::String(String::new()) } else { as_metadata(v) })
                .collect(),
        ),
        other => other,
    }
}

/// Parses and checks the blueprint `text`, read from `path`.
///
/// `region` is the region asked for on the command line: it selects the
/// region when the blueprint has none, and is an error when the blueprint
/// pins a different one. With neither, the spec is for all five regions
/// (`spec.region` is `None`) and every region-specific check runs for each.
///
/// On failure, the error holds every problem found (warnings included),
/// sorted errors first; it displays them rustc-style.
pub fn load(text: &str, path: &str, region: Option<Region>) -> Result<Loaded, Diagnostics> {
    let fail = |items: Vec<Diagnostic>| Diagnostics::new(items, text, path);
    let root = document::parse(text).map_err(|d| fail(vec![d]))?;
    let map = source_map::SourceMap::new(&root, text);

    let read = deserialize::blueprint(text, &root, &map);
    let mut diagnostics = read.diagnostics;
    // A type error that could not be taken out leaves no blueprint to check
    // further; it is reported with everything found before it.
    let Some(blueprint) = read.blueprint else {
        return Err(fail(diagnostics));
    };

    // Unknown fields and type errors do not stop validation: the user gets
    // every kind of problem in one run, one error per mistake (a field with
    // a wrong value is not also missing, nor a misspelt one).
    let (spec, found) = validate::validate(blueprint, &map, region);
    diagnostics.extend(found.into_iter().filter(|d| {
        let reported = read.wrong.iter().any(|w| d.path == *w || deserialize::is_under(&d.path, w));
        let misspelt = d.message == deserialize::MISSING && read.misspelt.contains(&d.path);
        !reported && !misspelt
    }));
    match spec {
        Some(mut spec) if diagnostics.iter().all(|d| d.severity == Severity::Warning) => {
            // Only once the blueprint is otherwise right (no error from any
            // step): until then, the errors are what to fix.
            let missing_agent = validate::missing_agent(&spec.image, &map);
            // The record of what was written (a document the checks above
            // accepted also reads as JSON; if it did not, there is no record).
            spec.blueprint = serde_yaml_ng::from_str::<serde_json::Value>(text).ok().map(as_metadata);
            Ok(Loaded { spec, warnings: diagnostics, missing_agent })
        }
        _ => Err(fail(diagnostics)),
    }
}

/// The errors the blueprint `text` (which loads) has once the fields in
/// `overrides` (a field's path, such as `workers.count`, and its value as
/// given; an empty value leaves the field out) are written over it: what a
/// stack parameter set on the command line would break, checked by the
/// blueprint's own rules. A value of digits is a number, any other text;
/// a field the blueprint lists as `workers.instance_types` is its first
/// type.
pub fn check_overrides(text: &str, region: Option<Region>, overrides: &[(&str, &str)]) -> Vec<Diagnostic> {
    let Ok(mut root) = document::parse(text) else {
        return Vec::new();
    };
    for (field, value) in overrides {
        let digits = value.strip_prefix('-').unwrap_or(value);
        let plain = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        let node = (!value.is_empty()).then(|| document::Node {
            kind: document::NodeKind::Scalar { value: (*value).to_owned(), plain },
            location: root.location.clone(),
        });
        set(&mut root, field, node);
    }
    match load(&root.to_yaml(), "", region) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.items.into_iter().filter(|d| d.severity == Severity::Error).collect(),
    }
}

/// Writes `value` at the dotted `path` of the mapping `node` (making the
/// mappings on the way), or removes the field when `value` is `None`.
fn set(node: &mut document::Node, path: &str, value: Option<document::Node>) {
    use document::{Node, NodeKind};
    let (key, rest) = path.split_once('.').map_or((path, None), |(k, r)| (k, Some(r)));
    let location = node.location.clone();
    let NodeKind::Mapping(entries) = &mut node.kind else {
        return;
    };
    // The first of a list of types stands for the one type.
    if key == "instance_type"
        && rest.is_none()
        && let Some((_, list)) = entries.iter_mut().find(|(k, _)| k.scalar() == Some("instance_types"))
    {
        if let (NodeKind::Sequence(items), Some(value)) = (&mut list.kind, value) {
            match items.first_mut() {
                Some(first) => *first = value,
                None => items.push(value),
            }
        }
        return;
    }
    let found = entries.iter().position(|(k, _)| k.scalar() == Some(key));
    match (rest, found, value) {
        (None, Some(i), Some(value)) => entries[i].1 = value,
        (None, Some(i), None) => {
            entries.remove(i);
        }
        (None, None, Some(value)) => {
            let k = Node { kind: NodeKind::Scalar { value: key.to_owned(), plain: true }, location };
            entries.push((k, value));
        }
        (None, None, None) => {}
        (Some(rest), Some(i), value) => set(&mut entries[i].1, rest, value),
        (Some(_), None, None) => {}
        (Some(rest), None, Some(value)) => {
            let k = Node { kind: NodeKind::Scalar { value: key.to_owned(), plain: true }, location: location.clone() };
            let mut child = Node { kind: NodeKind::Mapping(Vec::new()), location };
            set(&mut child, rest, Some(value));
            entries.push((k, child));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::spec::{AccessSpec, EfsSpec, ImageSource, ImageSpec, MasterSpec, NetworkSpec, WorkerSpec};

    const MINIMAL: &str = "\
name: minimal
master:
  instance_type: p3.2xlarge
workers:
  instance_type: p3.2xlarge
  count: 2
";

    fn ok(text: &str, region: Option<Region>) -> Loaded {
        load(text, "t.yaml", region).unwrap_or_else(|e| panic!("did not load:\n{e}"))
    }

    fn errors(text: &str, region: Option<Region>) -> Vec<String> {
        let e = load(text, "t.yaml", region).expect_err("should fail");
        e.items.iter().filter(|d| d.severity == Severity::Error).map(|d| d.path.clone()).collect()
    }

    /// The record the template keeps holds only what CloudFormation's
    /// metadata takes (cfn-lint E4002: no fraction, no null).
    #[test]
    fn the_recorded_blueprint_holds_no_fraction_and_no_null() {
        let text =
            format!("{MINIMAL}formation:\n  network_check: {{ min_fraction: 0.5, action: replace }}\ntags:\n  a: ~\n");
        let loaded = ok(&text, None);
        let record = loaded.spec.blueprint.expect("a record");
        assert_eq!(record["formation"]["network_check"]["min_fraction"], "0.5");
        assert_eq!(record["workers"]["count"], 2);
        assert!(record["tags"].as_object().is_some_and(|t| t.is_empty()), "{record}");
    }

    #[test]
    fn the_minimal_blueprint_gets_every_default() {
        let loaded = ok(MINIMAL, None);
        // No warning; the default (stock) image has no agent.
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.missing_agent.as_deref(), Some("the default image (the stock Deep Learning AMI)"));
        let expected = ClusterSpec {
            name: "minimal".into(),
            region: None,
            image: ImageSpec {
                source: ImageSource::SsmParameter(DEFAULT_SSM_PARAMETER.into()),
                user: "ubuntu".into(),
                root_device: "/dev/sda1".into(),
                package_format: node_contract::PackageFormat::Deb,
                agent_package: None,
            },
            master: MasterSpec { instance_type: "p3.2xlarge".into(), public: true },
            workers: WorkerSpec {
                instance_type: "p3.2xlarge".into(),
                fallback_types: Vec::new(),
                count: 2,
                min: 0,
                max: 2,
                capacity: crate::spec::WorkerCapacity::OnDemand,
            },
            root_volume_gb: 200,
            efs: EfsSpec { mount: "/efs".into(), file_system_id: None },
            scratch: Some("/scratch".into()),
            data: Vec::new(),
            fsx: None,
            network: NetworkSpec::New { vpc_cidr: "10.0.0.0/16".parse().unwrap() },
            placement_group: false,
            efa: false,
            access: AccessSpec { key_name: None, ssh_cidr: None, session_manager: true },
            prepare_data_script: None,
            formation_minutes: 30,
            network_check: None,
            // On by default for GPU types: a p3.2xlarge promises one V100
            // (no BF16 figure: its GEMM is measured, not judged).
            gpu_check: Some(node_contract::gpu::GpuCheck {
                level: node_contract::gpu::GpuLevel::Quick,
                action: node_contract::gpu::GpuAction::Replace,
                timeout_seconds: 60,
                expect: [(
                    "p3.2xlarge".to_owned(),
                    node_contract::gpu::GpuExpect {
                        gpus: 1,
                        model: Some("V100".into()),
                        efa_devices: None,
                        bf16_tflops: None,
                        memory_gbps: Some(900.0),
                        nvlink_busbw_gbps: None,
                    },
                )]
                .into(),
            }),
            log_retention_days: 14,
            idle: None,
            tags: BTreeMap::new(),
            blueprint: Some(serde_yaml_ng::from_str(MINIMAL).unwrap()),
        };
        assert_eq!(loaded.spec, expected);
    }

    #[test]
    fn missing_fields_point_at_the_parent_key() {
        let e = load(
            "name: x\nmaster: { instance_type: p3.2xlarge }\nworkers:\n  instance_type: p3.2xlarge\n",
            "t.yaml",
            None,
        )
        .expect_err("should fail");
        let [d] = &e.items[..] else { panic!("{:?}", e.items) };
        assert_eq!(d.path, "workers.count");
        assert_eq!((d.line, d.column), (3, 1));
        assert!(d.help.as_deref().unwrap().contains("under `workers:`"));
    }

    #[test]
    fn every_problem_is_reported_in_one_pass_whatever_is_missing() {
        // One mistake of each kind: a typo in a required field, a missing
        // required field and section, an unknown instance type, a bad CIDR,
        // a value out of range, a bad enum value.
        let text = "\
master:
  instance_type: p3.2xlarge
workers:
  instance_type: p9.mega
  cuont: 2
  max: 5000
network:
  vpc_cidr: 10.0.0.0/33
formation:
  network_check:
    action: explode
";
        let e = load(text, "t.yaml", None).expect_err("should fail");
        let paths: Vec<&str> = e.items.iter().map(|d| d.path.as_str()).collect();
        for expected in [
            "name",
            "workers.cuont",
            "workers.instance_type",
            "workers.max",
            "network.vpc_cidr",
            "formation.network_check.action",
        ] {
            assert!(paths.contains(&expected), "{expected} not reported: {paths:?}\n{e}");
        }
        // The typo is one mistake: `count` is not also reported missing.
        assert!(!paths.contains(&"workers.count"), "{paths:?}");
        assert_eq!(e.error_count(), 6, "{e}");
        // Every missing section is reported once, not field by field.
        let e = load("name: x\n", "t.yaml", None).expect_err("should fail");
        assert_eq!(e.items.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(), ["master", "workers"]);
    }

    #[test]
    fn every_type_error_is_reported_in_one_run_once() {
        // Nine wrong types (issue 35), a misspelt section and a bad CIDR:
        // eleven mistakes, eleven errors, one run.
        let text = "\
name: x
master:
  instance_type: [p3.2xlarge]
  public: \"yes please\"
workers:
  instance_type: p3.2xlarge
  count: four
  min: -1
  max: 2.5
  spot: 1
storage:
  root_volume_gb: 1.5
network:
  vpc_cidr: 10.0.0.0/33
  placement_group: yes
timeouts: { formation_minutes: \"x\" }
logs: {retention_days: true}
acess: {}
";
        let e = load(text, "t.yaml", None).expect_err("should fail");
        let paths: Vec<&str> = e.items.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "master.instance_type",
                "master.public",
                "workers.count",
                "workers.min",
                "workers.max",
                "workers.spot",
                "storage.root_volume_gb",
                "network.vpc_cidr",
                "network.placement_group",
                "timeouts.formation_minutes",
                "logs.retention_days",
                "acess",
            ],
            "{e}"
        );
        // Each at its own line, and `count` only for its wrong type.
        let count: Vec<_> = e.items.iter().filter(|d| d.path == "workers.count").collect();
        assert_eq!(count.len(), 1);
        assert_eq!((count[0].line, count[0].message.as_str()), (7, "expected a whole number, found the text \"four\""));
        // A misspelt section is not also a missing one.
        let e = load(
            "name: x\nmastr: { instance_type: p3.2xlarge }\nworkers: { instance_type: p3.2xlarge, count: 1 }\n",
            "t.yaml",
            None,
        )
        .expect_err("should fail");
        assert_eq!(e.items.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(), ["mastr"], "{e}");
    }

    /// Issue 35: for `8.8.0.0/24` the size check suggested `8.8.0.0/23`,
    /// no more private; a value longer than any field was reported without
    /// its field.
    #[test]
    fn a_public_range_is_one_error_and_a_long_value_names_its_field() {
        let text = "name: x\nmaster: {instance_type: p3.2xlarge}\nworkers: {instance_type: p3.2xlarge, count: 300}\nnetwork: {vpc_cidr: 8.8.0.0/24}\n";
        let e = load(text, "t.yaml", None).expect_err("should fail");
        let [d] = &e.items[..] else { panic!("{e}") };
        assert!(d.message.contains("not a private (RFC 1918) range"), "{e}");
        assert!(!e.to_string().contains("8.8.0.0/22") && !e.to_string().contains("8.8.0.0/23"), "{e}");
        let long = format!("{MINIMAL}tags:\n  team: {}\n", "b".repeat(5000));
        let e = load(&long, "t.yaml", None).expect_err("should fail");
        assert_eq!(e.items[0].path, "tags.team");
        assert!(e.to_string().starts_with("error: tags.team: this value is 5000 bytes long"), "{e}");
        let item = format!("{MINIMAL}  instance_types: [p3.2xlarge, {}]\n", "p".repeat(5000));
        let e = load(&item, "t.yaml", None).expect_err("should fail");
        assert_eq!(e.items[0].path, "workers.instance_types[1]");
    }

    #[test]
    fn the_region_argument_selects_or_conflicts() {
        assert_eq!(ok(MINIMAL, Some(Region::EuWest1)).spec.region, Some(Region::EuWest1));
        let pinned = format!("{MINIMAL}region: us-east-2\n");
        assert_eq!(ok(&pinned, None).spec.region, Some(Region::UsEast2));
        assert_eq!(ok(&pinned, Some(Region::UsEast2)).spec.region, Some(Region::UsEast2));
        assert_eq!(errors(&pinned, Some(Region::UsWest2)), ["region"]);
    }

    #[test]
    fn ami_maps_keep_only_the_template_regions() {
        let text = format!("{MINIMAL}image:\n  ami: {{ us-east-1: ami-11111111, eu-west-1: ami-22222222 }}\n");
        let spec = ok(&text, Some(Region::EuWest1)).spec;
        let ImageSource::AmiMap(amis) = spec.image.source else { panic!("not an AMI map") };
        assert_eq!(amis.into_iter().collect::<Vec<_>>(), [(Region::EuWest1, "ami-22222222".to_owned())]);
        assert_eq!(errors(&text, None), ["image.ami"]);
    }

    #[test]
    fn efa_auto_needs_both_types_and_a_private_master() {
        let efa = |master: &str, public: bool, workers: &str| {
            let text = format!(
                "name: e\nmaster: {{ instance_type: {master}, public: {public} }}\nworkers: {{ instance_type: {workers}, count: 1 }}\n"
            );
            let loaded = ok(&text, None);
            let warned = loaded.warnings.iter().any(|w| w.path == "network.efa");
            (loaded.spec.efa, warned)
        };
        assert_eq!(efa("p4d.24xlarge", false, "p4d.24xlarge"), (true, false));
        assert_eq!(efa("p4d.24xlarge", true, "p4d.24xlarge"), (false, true));
        assert_eq!(efa("p3.2xlarge", false, "p4d.24xlarge"), (false, true));
        assert_eq!(efa("p4d.24xlarge", false, "p3.2xlarge"), (false, false));
    }

    #[test]
    fn image_families_set_user_and_root_device() {
        let al = format!(
            "{MINIMAL}image:\n  ssm_parameter: /aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64\n"
        );
        let image = ok(&al, None).spec.image;
        assert_eq!((image.user.as_str(), image.root_device.as_str()), ("ec2-user", "/dev/xvda"));

        let unknown = format!("{MINIMAL}image:\n  ssm_parameter: /my/golden/image\n");
        let loaded = ok(&unknown, None);
        assert_eq!(loaded.spec.image.user, "ubuntu");
        assert!(loaded.warnings.iter().any(|w| w.path == "image.ssm_parameter"));

        let explicit = format!("{MINIMAL}image:\n  ssm_parameter: /my/golden/image\n  family: amazon-linux\n");
        let loaded = ok(&explicit, None);
        assert_eq!(loaded.spec.image.user, "ec2-user");
        assert!(loaded.warnings.is_empty());
    }

    #[test]
    fn unknown_fields_and_semantic_errors_are_reported_together() {
        let text = format!("{MINIMAL}  min: 5\nstorage:\n  root_volume: 100\n");
        assert_eq!(errors(&text, None), ["workers.min", "storage.root_volume"]);
    }

    #[test]
    fn the_missing_agent_is_no_warning_on_a_field_the_file_lacks() {
        // An unknown field is an error: nothing is said of the agent until
        // it is fixed.
        let unknown = format!("{MINIMAL}  cont: 3\n");
        let e = load(&unknown, "t.yaml", None).expect_err("should fail");
        assert!(e.items.iter().all(|d| !d.message.contains("agent")), "{:?}", e.items);

        // An `image:` block that does not choose the image keeps the default one.
        let unchosen = ok(&format!("{MINIMAL}image:\n  family: ubuntu\n"), None);
        assert!(unchosen.warnings.is_empty(), "{:?}", unchosen.warnings);
        assert_eq!(unchosen.missing_agent.as_deref(), Some("the default image (the stock Deep Learning AMI)"));
        let chosen = format!("{MINIMAL}image:\n  ssm_parameter: /aws/service/x/ami-id\n");
        assert_eq!(ok(&chosen, None).missing_agent.as_deref(), Some("the stock public image `/aws/service/x/ami-id`"));
        let package = format!(
            "{MINIMAL}image:\n  agent_package_url: s3://my-bucket/agent/k.deb\n  agent_package_sha256: {}\n",
            "a".repeat(64)
        );
        assert_eq!(ok(&package, None).missing_agent, None);
    }

    #[test]
    fn windows_line_endings_and_a_byte_order_mark_load() {
        let crlf = format!("\u{feff}{}", MINIMAL.replace('\n', "\r\n"));
        assert_eq!(ok(&crlf, None).spec.workers.count, 2);
    }

    /// No input may panic: every prefix of a realistic blueprint (most of
    /// them broken YAML) and a list of odd documents either load or fail.
    #[test]
    fn never_panics_on_broken_input() {
        let full = include_str!("../../tests/fixtures/blueprint/valid/full.yaml");
        for (i, _) in full.char_indices() {
            let _ = load(&full[..i], "t.yaml", None).map_err(|e| e.to_string());
        }
        let odd = [
            "",
            " ",
            "\n\n",
            "---",
            "...",
            "~",
            "null",
            "[",
            "{",
            "]",
            ":",
            "- - -",
            "? [a]\n: b\n",
            "a: &x\n  b: *x\n",
            "<<: {name: x}\n",
            "name: \u{0}\n",
            "name: x\nworkers: { count: 18446744073709551616 }\n",
            "name: x\nworkers: { count: .inf }\n",
            "'unterminated\n",
            "\"bad \\q escape\"\n",
            "*undefined\n",
            "name: [x]\n",
            "name: {a: b}\n",
            "tags: [a, b]\n",
            "tags: { a: [1] }\n",
            "image: { ami: [ami-12345678] }\n",
            "network: { existing: vpc-12345678 }\n",
            "network: { efa: [on] }\n",
            "%YAML 1.2\n---\nname: x\n",
            "!!map {name: x}\n",
            "name: !!str 12\n",
        ];
        for text in odd {
            let _ = load(text, "t.yaml", None).map(|_| ()).map_err(|e| e.to_string());
        }
        let deep = format!("{}x{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(load(&deep, "t.yaml", None).is_err());
    }
}
