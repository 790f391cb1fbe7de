//! `trainer doctor`'s GPU table: one row per check per host, columns
//! aligned: HOST, GPU, CHECK, VALUE, EXPECTED, VERDICT. A node's report
//! that ran out of its budget gets a last `budget` row that fails.

use node_contract::gpu::{GpuReport, Verdict};

const HEADER: [&str; 6] = ["HOST", "GPU", "CHECK", "VALUE", "EXPECTED", "VERDICT"];

/// The table for the hosts' reports, in the order given.
pub fn table(rows: &[(String, GpuReport)]) -> String {
    let mut cells: Vec<[String; 6]> = vec![HEADER.map(str::to_string)];
    for (host, report) in rows {
        for c in &report.checks {
            cells.push([
                host.clone(),
                c.gpu.map(|g| g.to_string()).unwrap_or_else(|| "-".into()),
                c.check.clone(),
                c.value.clone(),
                if c.expected.is_empty() { "-".into() } else { c.expected.clone() },
                c.verdict.name().to_string(),
            ]);
        }
        if report.timed_out {
            cells.push([
                host.clone(),
                "-".into(),
                "budget".into(),
                format!("stopped after {} ms", report.millis),
                "every check within the budget".into(),
                Verdict::Fail.name().to_string(),
            ]);
        }
    }
    let mut widths = [0usize; 6];
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use node_contract::gpu::GpuLevel;

    use crate::fixture::{Fixture, FixtureGpus};

    fn report(f: &Fixture, expect: &node_contract::gpu::GpuExpect) -> node_contract::gpu::GpuReport {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpus.json");
        f.write(&path).unwrap();
        let mut r = crate::gate(
            &FixtureGpus::new(&path),
            "i-0abc",
            "10.0.1.5",
            "p5.48xlarge",
            Some(expect),
            GpuLevel::Quick,
            Duration::from_secs(60),
        );
        r.millis = 41_000;
        for c in &mut r.checks {
            c.millis = 0;
        }
        r
    }

    #[test]
    fn the_table_aligns_every_hosts_checks() {
        let healthy = report(&Fixture::healthy("H100", 2), &Fixture::expect("H100", 2));
        let mut f = Fixture::healthy("H100", 2);
        f.kernel_log.push(
            "[ 4821.093317] NVRM: Xid (PCI:0000:64:00): 79, pid=4120, name=python, GPU has fallen off the bus.".into(),
        );
        f.devices[0].pcie_width_current = Some(8);
        let mut broken = report(&f, &Fixture::expect("H100", 2));
        broken.timed_out = true;
        let text = super::table(&[("compute-1".into(), healthy), ("compute-2".into(), broken)]);
        // Every line's columns start at the same places (in characters: a value holds "×").
        let lines: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
        let header: String = lines[0].iter().collect();
        for col in ["GPU", "CHECK", "VALUE", "EXPECTED", "VERDICT"] {
            let at = header.find(col).unwrap();
            for l in &lines[1..] {
                assert!(
                    l.len() > at && l[at - 1] == ' ' && l[at] != ' ',
                    "{col} in {:?}",
                    l.iter().collect::<String>()
                );
            }
        }
        insta::assert_snapshot!(text);
    }
}
