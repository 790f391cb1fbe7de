//! Every blueprint in `fixtures/blueprint/invalid/` must fail to load, with a
//! message that points at a line; the rendered messages are snapshots in the
//! repository's `snapshots/errors/`, so a change in wording is reviewed like
//! code. Every blueprint in `fixtures/blueprint/valid/` must load; its
//! warnings are snapshots in `snapshots/warnings/`.
//!
//! A fixture may name the region the build asks for (what `--region` would
//! pass) in a comment line `# synth-test-region: eu-west-1`.

use std::path::Path;

use synth::blueprint::{self, Severity};
use synth::region::Region;

/// The fixture's text, the path to show in messages, and the region asked for.
fn read(path: &Path) -> (String, String, Option<Region>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let region = text
        .lines()
        .find_map(|l| l.strip_prefix("# synth-test-region:"))
        .map(|r| r.trim().parse::<Region>().unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    // A path relative to the tests directory keeps the snapshots the same on every machine.
    let shown =
        path.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")).unwrap_or(path).display().to_string();
    (text, shown, region)
}

/// `path:LINE:COL`, as annotate-snippets prints the location of each problem.
fn has_line_reference(rendered: &str, shown: &str) -> bool {
    rendered.lines().any(|l| {
        l.trim_start().strip_prefix("--> ").and_then(|rest| rest.strip_prefix(shown)).is_some_and(|pos| {
            let mut parts = pos.split(':').skip(1);
            let line = parts.next().and_then(|n| n.parse::<usize>().ok());
            let col = parts.next().and_then(|n| n.parse::<usize>().ok());
            matches!((line, col), (Some(l), Some(c)) if l > 0 && c > 0)
        })
    })
}

#[test]
fn invalid_blueprints_fail_with_a_located_message() {
    let mut count = 0;
    insta::with_settings!({snapshot_path => "../../snapshots/errors", prepend_module_to_snapshot => false}, {
        insta::glob!("fixtures/blueprint/invalid/*.yaml", |path| {
            count += 1;
            let (text, shown, region) = read(path);
            let Err(problems) = blueprint::load(&text, &shown, region) else {
                panic!("{shown} loaded, but it is an invalid fixture");
            };
            assert!(problems.error_count() > 0, "{shown}: failed without an error");
            let rendered = problems.to_string();
            for d in &problems.items {
                assert!(d.line > 0 && d.column > 0, "{shown}: {d:?} has no position");
                assert!(d.help.is_some(), "{shown}: `{}` has no help line", d.message);
            }
            for d in &problems.items {
                // The header's position comes from the underlined span; it must
                // agree with the line and column the diagnostic reports.
                let one = d.render(&text, &shown);
                assert!(has_line_reference(&one, &shown), "{shown}: no `{shown}:LINE:COL` in\n{one}");
                let expected = format!("--> {shown}:{}:{}", d.line, d.column);
                assert!(one.contains(&expected), "{shown}: expected `{expected}` in\n{one}");
            }
            insta::assert_snapshot!(rendered);
        });
    });
    assert!(count >= 35, "only {count} invalid fixtures");
}

#[test]
fn several_problems_are_reported_together() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blueprint/invalid/several-problems.yaml");
    let (text, shown, region) = read(&path);
    let problems = blueprint::load(&text, &shown, region).unwrap_err();
    let paths: Vec<&str> = problems.items.iter().map(|d| d.path.as_str()).collect();
    for expected in
        ["name", "master.pubic", "workers.min", "network.vpc_cidr", "access.ssh.cidr", "timeouts.formation_minutes"]
    {
        assert!(paths.contains(&expected), "{expected} not reported; got {paths:?}");
    }
}

#[test]
fn valid_blueprints_load() {
    let mut count = 0;
    insta::with_settings!({snapshot_path => "../../snapshots/warnings", prepend_module_to_snapshot => false}, {
        insta::glob!("fixtures/blueprint/valid/*.yaml", |path| {
            count += 1;
            let (text, shown, region) = read(path);
            let loaded = blueprint::load(&text, &shown, region).unwrap_or_else(|e| panic!("{shown} did not load:\n{e}"));
            assert!(loaded.warnings.iter().all(|w| w.severity == Severity::Warning));
            insta::assert_snapshot!(blueprint::render_all(&loaded.warnings, &text, &shown));
        });
    });
    assert!(count >= 5, "only {count} valid fixtures");
}
