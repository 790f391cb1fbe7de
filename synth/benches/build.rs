//! How long `synth::build` takes per template, next to the floor of any JSON
//! producer measured in the same run: parsing the same template into a
//! `serde_json::Value` and printing it pretty again.
//!
//! ```text
//! cargo bench -p synth --bench build      # release mode, as the target assumes
//! ```
//!
//! For every `blueprints/*.yaml`, builds the template as written (`portable`
//! when the blueprint names no region) and for each supported region; a region
//! the blueprint rejects is skipped with the reason. A blueprint that does not
//! build as written, or an internal template error, makes the run fail (exit 1),
//! since every example blueprint is meant to build.
//!
//! Plain `harness = false` with `std::time::Instant`: the numbers are compared
//! within one run, so a statistics framework would add a dependency and little
//! else.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use synth::region::Region;

/// Each measurement runs for about this long (after a short warm-up).
const MEASURE: Duration = Duration::from_millis(300);
/// ... and at least this many times, however slow one build is.
const MIN_ITERATIONS: u32 = 10;
const WARM_UP: u32 = 5;
/// The design target for one template, in release mode.
const TARGET_MS: f64 = 10.0;

/// One blueprint x region that built.
struct Row {
    blueprint: String,
    region: String,
    bytes: usize,
    build_us: f64,
    reference_us: f64,
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; a filter argument selects blueprints by substring.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../blueprints");
    let blueprints = match list_blueprints(&dir) {
        Ok(b) if !b.is_empty() => b,
        Ok(_) => {
            eprintln!("bench: no blueprints in {}", dir.display());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("bench: cannot read {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    if cfg!(debug_assertions) {
        eprintln!("bench: this is a debug build; run `cargo bench` for numbers that mean something");
    }

    let mut rows = Vec::new();
    let mut failed = false;
    for path in &blueprints {
        let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let display = path.display().to_string();
        let source = match std::fs::read_to_string(path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("bench: cannot read {display}: {e}");
                failed = true;
                continue;
            }
        };
        let own = own_region(&source);
        // The blueprint as written first, then every region it does not already name.
        let mut cases = vec![(None, own.clone().unwrap_or_else(|| "portable".into()))];
        cases.extend(
            Region::ALL
                .into_iter()
                .filter(|r| own.as_deref() != Some(r.code()))
                .map(|r| (Some(r), r.code().to_owned())),
        );
        for (region, label) in cases {
            match synth::build(&source, &display, region) {
                Ok(built) => rows.push(measure(&name, &label, &source, &display, region, &built.json)),
                Err(synth::BuildError::Blueprint(why)) if region.is_some() => {
                    let why = why.lines().next().unwrap_or_default();
                    println!("skip {name} @ {label}: {why}");
                }
                Err(e) => {
                    eprintln!("bench: {display} @ {label} does not build:\n{e}");
                    failed = true;
                }
            }
        }
    }

    print_table(&rows);
    if rows.is_empty() {
        eprintln!("bench: nothing was measured");
        failed = true;
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// `blueprints/*.yaml`, sorted.
fn list_blueprints(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    Ok(paths)
}

/// The blueprint's own `region` field, if any (only to label the as-written build).
fn own_region(source: &str) -> Option<String> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(source).ok()?;
    doc.get("region")?.as_str().map(str::to_owned)
}

fn measure(blueprint: &str, region_label: &str, source: &str, path: &str, region: Option<Region>, json: &str) -> Row {
    let build_us = mean_us(|| {
        black_box(synth::build(black_box(source), path, region).map(|b| b.json.len()).unwrap_or(0));
    });
    let reference_us = mean_us(|| {
        let value: serde_json::Value = serde_json::from_str(black_box(json)).expect("synth printed valid JSON");
        black_box(serde_json::to_string_pretty(&value).expect("a Value always prints"));
    });
    Row { blueprint: blueprint.to_owned(), region: region_label.to_owned(), bytes: json.len(), build_us, reference_us }
}

/// Mean time of one call of `f`, in microseconds, after a warm-up.
fn mean_us(mut f: impl FnMut()) -> f64 {
    for _ in 0..WARM_UP {
        f();
    }
    let start = Instant::now();
    let mut n = 0u32;
    while n < MIN_ITERATIONS || start.elapsed() < MEASURE {
        f();
        n += 1;
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn print_table(rows: &[Row]) {
    println!();
    println!("{:<28} {:<15} {:>9} {:>11} {:>11} {:>7}", "blueprint", "region", "bytes", "build µs", "json µs", "ratio");
    for r in rows {
        println!(
            "{:<28} {:<15} {:>9} {:>11.1} {:>11.1} {:>6.1}x",
            r.blueprint,
            r.region,
            r.bytes,
            r.build_us,
            r.reference_us,
            r.build_us / r.reference_us
        );
    }
    println!();
    println!(
        "json µs: serde_json parse to Value + to_string_pretty of the same template (the floor of any JSON producer)"
    );
    if let Some(worst) = rows.iter().max_by(|a, b| a.build_us.total_cmp(&b.build_us)) {
        let ms = worst.build_us / 1000.0;
        let verdict = if ms < TARGET_MS { "OK" } else { "MISSED" };
        println!(
            "worst: {ms:.3} ms per template ({} @ {}); target: < {TARGET_MS} ms per template in release mode: {verdict}",
            worst.blueprint, worst.region
        );
    }
}
