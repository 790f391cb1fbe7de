//! Snapshot of the template of every example blueprint, built for every
//! supported region and once for all five (`portable`), in the repository's
//! `snapshots/templates/`. `tests/lint-templates.sh` runs cfn-lint and
//! checkov on each of these snapshots.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use synth::region::Region;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn blueprints() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("blueprints"))
        .expect("blueprints/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// What a blueprint is built for: once for all five regions (`portable`)
/// and for each region, or only for its own region when it pins one (a
/// Capacity Block's blueprint: the block is in one region).
fn targets(text: &str) -> Vec<(String, Option<Region>)> {
    let pinned = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text)
        .ok()
        .and_then(|v| v.get("region").and_then(|r| r.as_str()).map(str::to_owned));
    if let Some(code) = pinned {
        let region: Region = code.parse().unwrap_or_else(|_| panic!("pinned region {code} is not supported"));
        return vec![(code, Some(region))];
    }
    let mut t = vec![("portable".to_owned(), None)];
    t.extend(Region::ALL.iter().map(|r| (r.code().to_owned(), Some(*r))));
    t
}

#[test]
fn every_blueprint_in_every_region_matches_its_snapshot() {
    let files = blueprints();
    assert!(files.len() >= 7, "expected at least 7 example blueprints, found {}", files.len());
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        for (target, region) in targets(&text) {
            let shown = format!("blueprints/{stem}.yaml");
            let built = synth::build(&text, &shown, region).unwrap_or_else(|e| panic!("{shown} for {target}: {e}"));
            insta::with_settings!({
                snapshot_path => repo().join("snapshots/templates"),
                prepend_module_to_snapshot => false,
                omit_expression => true,
                description => format!("synth build {shown}{}", region.map(|r| format!(" --region {r}")).unwrap_or_default()),
            }, {
                insta::assert_snapshot!(format!("{stem}@{target}"), built.json);
            });
        }
    }
}

/// The example blueprints whose base images differ (the default Deep
/// Learning AMI, Canonical's Ubuntu, and one with the package's URL and
/// checksum as the template's defaults): their Image Builder templates
/// (`synth image`), in every region, in `snapshots/images/`.
const IMAGE_BLUEPRINTS: [&str; 3] = ["gpu-cluster", "cpu-cluster", "install-at-boot"];

#[test]
fn image_templates_match_their_snapshots() {
    for stem in IMAGE_BLUEPRINTS {
        let shown = format!("blueprints/{stem}.yaml");
        let text = std::fs::read_to_string(repo().join(&shown)).unwrap();
        for region in Region::ALL {
            let built =
                synth::build_image(&text, &shown, Some(region)).unwrap_or_else(|e| panic!("{shown} for {region}: {e}"));
            let template: serde_json::Value = serde_json::from_str(&built.json).unwrap();
            let regions =
                template["Resources"]["Distribution"]["Properties"]["Distributions"].as_array().unwrap().len();
            assert_eq!(regions, Region::ALL.len(), "{shown}: the image goes to every region");
            insta::with_settings!({
                snapshot_path => repo().join("snapshots/images"),
                prepend_module_to_snapshot => false,
                omit_expression => true,
                description => format!("synth image {shown} --region {region}"),
            }, {
                insta::assert_snapshot!(format!("{stem}@{}", region.code()), built.json);
            });
        }
    }
}

#[test]
fn no_snapshot_is_left_over_from_a_removed_blueprint() {
    let expected: BTreeSet<String> = blueprints()
        .iter()
        .flat_map(|f| {
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(f).unwrap();
            targets(&text).into_iter().map(move |(t, _)| format!("{stem}@{t}.snap"))
        })
        .collect();
    let dir = repo().join("snapshots/templates");
    let found: BTreeSet<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".snap"))
                .collect()
        })
        .unwrap_or_default();
    let stale: Vec<&String> = found.difference(&expected).collect();
    assert!(stale.is_empty(), "snapshots without a blueprint (delete them): {stale:?}");
}
