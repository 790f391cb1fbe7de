//! `synth validate`'s work grows linearly with the blueprint: for each
//! shape of input that can grow (unknown fields, list items, mapping keys,
//! problems to report, comment text), the time to load and render the
//! report at 8 times the size is compared with the time at 1 times.
//!
//! What it catches: anything quadratic. A linear step takes about 8 times
//! as long at 8 times the size, n log n about 9 to 10 times, a quadratic one
//! 64 times (these shapes took 31 s, 129 s and 6 s at the sizes the issue
//! found). The bound is 24, three times linear, so a shared and loaded CPU
//! does not fail it: the time is this thread's CPU time (from
//! `/proc/thread-self/schedstat`; wall time where that is missing), so time
//! spent waiting for a core behind other processes does not count; each
//! size is timed 5 times, alternating with the other, and the medians are
//! compared, so a burst of load that slows a few runs moves neither median
//! much. It is a ratio measured side by side in one run, not an absolute
//! time.

mod common;

use std::time::Duration;

use synth::blueprint;

/// The ratio of times at 8x the size that still counts as linear.
const MAX_RATIO: f64 = 24.0;
const RUNS: usize = 5;

const HEAD: &str =
    "name: scale\nmaster:\n  instance_type: c5.xlarge\nworkers:\n  instance_type: c5.xlarge\n  count: 2\n";

/// The validate path without the template: parse, check, render every problem.
fn validate(text: &str) -> usize {
    match blueprint::load(text, "scale.yaml", None) {
        Ok(loaded) => loaded.warnings.len(),
        Err(problems) => problems.to_string().len(),
    }
}

fn time(text: &str) -> Duration {
    common::cpu_time(|| validate(text)).1
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median times at size `n` and `8 * n`, measured alternately.
fn ratio(make: fn(usize) -> String, n: usize) -> (f64, Duration, Duration) {
    let (small, large) = (make(n), make(8 * n));
    // Once each first: allocations and lazily built tables are not timed.
    validate(&small);
    validate(&large);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        a.push(time(&small));
        b.push(time(&large));
    }
    let (a, b) = (median(a), median(b));
    (b.as_secs_f64() / a.as_secs_f64().max(1e-9), a, b)
}

/// A shape of blueprint: its name, the text at size `n`, and the small `n`.
type Shape = (&'static str, fn(usize) -> String, usize);

/// Shapes of blueprint that grow with `n`.
const SHAPES: &[Shape] = &[
    (
        "unknown fields in one mapping",
        |n| format!("{HEAD}{}", (0..n).map(|i| format!("  extra{i}: 1\n")).collect::<String>()),
        1000,
    ),
    (
        "subnet ids in one list (each checked against the others)",
        |n| {
            let ids: Vec<String> = (0..n).map(|i| format!("subnet-{:08x}", i % 64)).collect();
            format!(
                "{HEAD}network:\n  existing:\n    vpc_id: vpc-12345678\n    private_subnet_ids: [{}]\n",
                ids.join(", ")
            )
        },
        1000,
    ),
    (
        "tags (each key checked for duplicates)",
        |n| format!("{HEAD}tags:\n{}", (0..n).map(|i| format!("  t{i}: v\n")).collect::<String>()),
        2000,
    ),
    ("nested lists of scalars", |n| format!("{HEAD}tags: {{t: [{}]}}\n", vec!["[a, b, c]"; n].join(", ")), 1000),
    ("comment text", |n| format!("{HEAD}{}", "# a comment line of some length, repeated\n".repeat(n)), 2000),
];

#[test]
fn validate_time_grows_linearly_with_the_blueprint() {
    let mut report = Vec::new();
    for (shape, make, n) in SHAPES {
        let (r, small, large) = ratio(*make, *n);
        report.push(format!("{shape}: {n} -> {}: {small:?} -> {large:?}, ratio {r:.1}", 8 * n));
        assert!(r < MAX_RATIO, "{shape}: 8x the size took {r:.1}x the time ({small:?} -> {large:?}); quadratic?");
    }
    eprintln!("{}", report.join("\n"));
}
