//! The blueprint front end's fuzz target: proptest generates YAML trees
//! (field names from the blueprint schema, values from a list of the
//! awkward ones: signed zeros, huge and hex numbers, YAML 1.1 booleans,
//! tags, anchors, control characters, `${`, long text) and renders them in
//! block and flow style, alone or spliced into a valid blueprint, or
//! damages a valid blueprint's text character by character. For every
//! input `synth::blueprint::load` must
//! - return, without a panic, within [`CASE_BOUND`];
//! - on failure, point every problem at a real line, column and span of the
//!   text, and render a bounded report;
//! - on success, give a spec that compiles into a template that passes the
//!   `cfn` crate's checks (a blueprint synth accepts must build).
//!
//! `cargo test` runs it for [`DEFAULT_SECONDS`]; `SYNTH_FUZZ_SECONDS=N`
//! runs it longer (scripts/test gives it 40 s), `SYNTH_FUZZ_SEED=<hex>`
//! repeats a run (the seed is printed). A failure is shrunk to the smallest
//! input that still fails, printed as YAML.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use synth::blueprint;
use synth::region::Region;

const DEFAULT_SECONDS: u64 = 3;
/// CPU time to load one input, in a debug build; real ones take milliseconds.
const CASE_BOUND: Duration = Duration::from_secs(5);

const MINIMAL: &str =
    "name: fuzz\nmaster:\n  instance_type: c5.xlarge\nworkers:\n  instance_type: c5.xlarge\n  count: 2\n";

const FIELDS: &[&str] = &[
    "name",
    "region",
    "image",
    "ssm_parameter",
    "ami",
    "family",
    "user",
    "root_device",
    "agent_package_url",
    "agent_package_sha256",
    "master",
    "instance_type",
    "public",
    "workers",
    "count",
    "min",
    "max",
    "spot",
    "storage",
    "root_volume_gb",
    "efs",
    "mount",
    "file_system_id",
    "network",
    "vpc_cidr",
    "existing",
    "vpc_id",
    "public_subnet_id",
    "private_subnet_ids",
    "placement_group",
    "efa",
    "access",
    "ssh",
    "key_name",
    "cidr",
    "session_manager",
    "elastic",
    "prepare_data_script",
    "timeouts",
    "formation_minutes",
    "tags",
    "us-east-1",
    "eu-west-1",
    "<<",
    "cuont",
];

/// Paths a generated value replaces in the valid blueprint.
const PATHS: &[&[&str]] = &[
    &["name"],
    &["region"],
    &["master", "instance_type"],
    &["master", "public"],
    &["workers", "count"],
    &["workers", "max"],
    &["workers", "min"],
    &["workers", "spot"],
    &["image", "ssm_parameter"],
    &["image", "ami", "us-east-1"],
    &["image", "user"],
    &["image", "agent_package_url"],
    &["storage", "root_volume_gb"],
    &["storage", "efs", "mount"],
    &["storage", "efs", "file_system_id"],
    &["network", "vpc_cidr"],
    &["network", "efa"],
    &["network", "placement_group"],
    &["network", "existing", "private_subnet_ids"],
    &["access", "ssh", "key_name"],
    &["access", "ssh", "cidr"],
    &["elastic", "prepare_data_script"],
    &["timeouts", "formation_minutes"],
    &["tags", "team"],
];

const SCALARS: &[&str] = &[
    "",
    "~",
    "null",
    "0",
    "-0",
    "+0",
    "-1",
    "1",
    "2",
    "8",
    "1000",
    "1001",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "0x10",
    "0o17",
    "1e400",
    ".inf",
    "-.inf",
    ".nan",
    "1.5",
    "true",
    "false",
    "on",
    "off",
    "yes",
    "no",
    "auto",
    "p3.2xlarge",
    "c5.xlarge",
    "p4d.24xlarge",
    "P3.2XLARGE",
    "us-east-1",
    "mars-north-1",
    "10.0.0.0/16",
    "10.0.0.0/24",
    "10.0.0.1/16",
    "0.0.0.0/0",
    "203.0.113.7/32",
    "fd00::/8",
    "ami-12345678",
    "fs-0123456789abcdef0",
    "vpc-12345678",
    "subnet-12345678",
    "/efs",
    "/etc",
    "/",
    "../x",
    "${AWS::Region}",
    "s3://bucket/key.deb",
    "https://",
    "ubuntu",
    "ec2-user",
    "amazon-linux",
    "it's",
    " lead",
    "a;b$c",
    "é",
    "\u{0}",
    "\t",
    "\r",
    ": x",
    "- y",
    "[",
    "{",
    "&a",
    "*a",
    "!!str 8",
    "!Ref x",
    "#c",
    "%YAML",
    "---",
    "\u{feff}",
];

/// A generated YAML value.
#[derive(Clone, Debug)]
enum Yaml {
    Scalar(String),
    List(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(SCALARS).prop_map(str::to_owned),
        2 => "[ -~]{0,12}",
        1 => any::<String>().prop_map(|s| s.chars().take(16).collect()),
        1 => (1usize..6000).prop_map(|n| "x".repeat(n)),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![6 => proptest::sample::select(FIELDS).prop_map(str::to_owned), 1 => scalar()]
}

fn tree() -> impl Strategy<Value = Yaml> {
    scalar().prop_map(Yaml::Scalar).prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Yaml::List),
            proptest::collection::vec((key(), inner), 0..7).prop_map(Yaml::Map),
        ]
    })
}

/// How a scalar is written: plain (it may not survive: that is the point),
/// single- or double-quoted.
fn write_scalar(s: &str, style: u8) -> String {
    match style % 3 {
        0 => s.to_owned(),
        1 => format!("'{}'", s.replace('\'', "''")),
        _ => format!("{s:?}"),
    }
}

/// Flow style: `{a: [1, 2]}`.
fn flow(y: &Yaml, style: u8) -> String {
    match y {
        Yaml::Scalar(s) => write_scalar(s, style),
        Yaml::List(items) => format!("[{}]", items.iter().map(|i| flow(i, style)).collect::<Vec<_>>().join(", ")),
        Yaml::Map(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!("{}: {}", write_scalar(k, style), flow(v, style)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Block style, indented by `indent`; nested collections switch to flow
/// style when `style` says so.
fn block(y: &Yaml, indent: usize, style: u8, out: &mut String) {
    let pad = " ".repeat(indent);
    match y {
        Yaml::Scalar(s) => {
            out.push_str(&write_scalar(s, style));
            out.push('\n');
        }
        Yaml::List(items) if items.is_empty() || style % 5 == 4 => {
            out.push_str(&flow(y, style));
            out.push('\n');
        }
        Yaml::Map(entries) if entries.is_empty() || style % 5 == 4 => {
            out.push_str(&flow(y, style));
            out.push('\n');
        }
        Yaml::List(items) => {
            out.push('\n');
            for item in items {
                out.push_str(&format!("{pad}- "));
                block(item, indent + 2, style, out);
            }
        }
        Yaml::Map(entries) => {
            out.push('\n');
            for (k, v) in entries {
                out.push_str(&format!("{pad}{}: ", write_scalar(k, style)));
                block(v, indent + 2, style, out);
            }
        }
    }
}

/// The minimal blueprint as a tree.
fn base() -> Yaml {
    let scalar = |s: &str| Yaml::Scalar(s.to_owned());
    Yaml::Map(vec![
        ("name".into(), scalar("fuzz")),
        ("master".into(), Yaml::Map(vec![("instance_type".into(), scalar("c5.xlarge"))])),
        (
            "workers".into(),
            Yaml::Map(vec![("instance_type".into(), scalar("c5.xlarge")), ("count".into(), scalar("2"))]),
        ),
    ])
}

/// `node` with `value` at `path` (made where missing).
fn set(node: Yaml, path: &[&str], value: Yaml) -> Yaml {
    let Some((first, rest)) = path.split_first() else { return value };
    let mut entries = match node {
        Yaml::Map(entries) => entries,
        _ => Vec::new(),
    };
    match entries.iter_mut().find(|(k, _)| k == first) {
        Some((_, v)) => *v = set(std::mem::replace(v, Yaml::Map(Vec::new())), rest, value),
        None => entries.push(((*first).to_owned(), set(Yaml::Map(Vec::new()), rest, value))),
    }
    Yaml::Map(entries)
}

/// Edits of a text: (position as a fraction of its characters, what to do).
#[derive(Clone, Debug)]
enum Edit {
    Delete,
    Insert(char),
    Replace(char),
}

fn damaged(text: &str, edits: &[(f64, Edit)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, edit) in edits {
        let i = ((chars.len() as f64) * at) as usize;
        match edit {
            Edit::Delete if i < chars.len() => {
                chars.remove(i);
            }
            Edit::Insert(c) => chars.insert(i.min(chars.len()), *c),
            Edit::Replace(c) if i < chars.len() => chars[i] = *c,
            _ => {}
        }
    }
    chars.into_iter().collect()
}

fn edit() -> impl Strategy<Value = (f64, Edit)> {
    let c = prop_oneof![
        proptest::sample::select(vec![
            ':', '-', ' ', '\n', '\t', '#', '[', ']', '{', '}', '"', '\'', '&', '*', '!', '|', '>', '%', '@', '`', ',',
            '?', '\0', 'é'
        ]),
        any::<char>(),
    ];
    (0.0..1.0f64, prop_oneof![Just(Edit::Delete), c.clone().prop_map(Edit::Insert), c.prop_map(Edit::Replace)])
}

/// Every kind of input, as (text, region asked for).
fn input() -> impl Strategy<Value = (String, Option<Region>)> {
    let region = proptest::option::of(proptest::sample::select(Region::ALL.to_vec()));
    let text = prop_oneof![
        // A whole generated document, in block or flow style.
        (tree(), any::<u8>()).prop_map(|(y, style)| {
            let mut out = String::new();
            block(&y, 0, style, &mut out);
            out
        }),
        // The valid blueprint with one to three fields replaced.
        (proptest::collection::vec((proptest::sample::select(PATHS), tree()), 1..4), any::<u8>()).prop_map(
            |(changes, style)| {
                let mut y = base();
                for (path, value) in changes {
                    y = set(y, path, value);
                }
                let mut out = String::new();
                block(&y, 0, style, &mut out);
                out
            }
        ),
        // A real blueprint, damaged a few characters at a time.
        (
            proptest::sample::select(vec![
                MINIMAL,
                include_str!("fixtures/blueprint/valid/full.yaml"),
                include_str!("../../blueprints/efa-p4d.yaml"),
                include_str!("../../blueprints/existing-vpc.yaml"),
            ]),
            proptest::collection::vec(edit(), 1..6)
        )
            .prop_map(|(text, edits)| damaged(text, &edits)),
    ];
    (text, region)
}

/// Inputs that loaded (and built), for the summary: a fuzz target that only
/// ever reaches the parser's errors would test little.
static LOADED: AtomicU64 = AtomicU64::new(0);

/// The properties, for one input.
fn check(text: &str, region: Option<Region>) -> Result<(), TestCaseError> {
    let (loaded, took) = common::cpu_time(|| blueprint::load(text, "fuzz.yaml", region));
    match loaded {
        Err(problems) => {
            for d in &problems.items {
                prop_assert!(d.line >= 1 && d.column >= 1, "no position: {d:?}");
                prop_assert!(
                    d.span.start <= d.span.end
                        && d.span.end <= text.len()
                        && text.is_char_boundary(d.span.start)
                        && text.is_char_boundary(d.span.end),
                    "span outside the text: {d:?}"
                );
            }
            let report = problems.to_string();
            prop_assert!(report.len() < 256 * 1024, "a {}-byte report", report.len());
        }
        Ok(loaded) => {
            let template = synth::TemplateKind::Cluster.compile(&loaded.spec);
            if let Err(e) = template.render() {
                return Err(TestCaseError::fail(format!("a blueprint that loads does not build: {e}")));
            }
            LOADED.fetch_add(1, Ordering::Relaxed);
        }
    }
    prop_assert!(took < CASE_BOUND, "loading took {took:?} of CPU");
    Ok(())
}

#[test]
fn the_blueprint_front_end_survives_generated_yaml() {
    let seconds = std::env::var("SYNTH_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SECONDS);
    let seed: [u8; 32] = match std::env::var("SYNTH_FUZZ_SEED") {
        Ok(hex) => {
            let bytes: Vec<u8> =
                (0..hex.len()).step_by(2).filter_map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
            bytes.try_into().expect("SYNTH_FUZZ_SEED is 64 hex digits")
        }
        Err(_) => std::array::from_fn(|_| random_byte()),
    };
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    eprintln!("fuzz: {seconds} s, SYNTH_FUZZ_SEED={hex}");
    let config = Config { failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let strategy = input();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut cases = 0u64;
    while Instant::now() < deadline {
        let tree = strategy.new_tree(&mut runner).expect("a generated input");
        if let Err(e) = runner.run_one(tree, |(text, region)| check(&text, region)) {
            panic!("fuzz: {e}\n(repeat with SYNTH_FUZZ_SEED={hex})");
        }
        cases += 1;
    }
    let loaded = LOADED.load(Ordering::Relaxed);
    eprintln!("fuzz: {cases} inputs, none failed; {loaded} loaded and built, the rest were refused");
    assert!(cases > 0);
}

/// A random byte from the clock and the process id, for the seed only
/// (proptest's own RNG is seeded from it, so a run can be repeated).
fn random_byte() -> u8 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) as u8
}
