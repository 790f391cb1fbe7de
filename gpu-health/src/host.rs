//! The parts of the real port that need no GPU library: the kernel log, the
//! EFA devices and DCGM's command line. Paths start at a root (`Host::at` in tests, `Host::system` on a node)
//! so tests read a directory that stands in for `/`.
//!
//! - Kernel log: `/dev/kmsg` first, read without blocking from the oldest
//!   record the kernel's ring buffer still holds to its end (no journald
//!   needed, and it is what the kernel itself holds; the agent runs as
//!   root). When it cannot be opened (a user with `kernel.dmesg_restrict`,
//!   as Ubuntu sets it, running `trainer doctor`), `journalctl -k -b -o
//!   short-monotonic`, which a user in the `adm` group may read and which
//!   keeps the whole boot where the ring buffer has wrapped. Records are
//!   given as `dmesg` prints them, `[ seconds.micros] message`, so two
//!   equal messages stay two lines.
//! - EFA: the entries of `/sys/class/infiniband` whose device's driver is
//!   `efa`.
//! - DCGM: `dcgmi diag -r <level> -j` when `dcgmi` is on `PATH`, killed at
//!   its timeout; its JSON is read whatever its exit status (it exits
//!   non-zero when a test fails), in both layouts DCGM has had ([`parse_dcgm`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::facts::{DcgmOutcome, DcgmResult};

/// How long `journalctl` may take to print the boot's kernel log.
const JOURNALCTL_TIMEOUT: Duration = Duration::from_secs(20);

/// The host's files and commands, from a root directory.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    root: PathBuf,
    /// Where `dcgmi` and `journalctl` are looked for (`PATH`'s entries).
    path: Vec<PathBuf>,
}

impl Host {
    /// The real host: `/`, and the process's `PATH`.
    pub(crate) fn system() -> Host {
        let path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
        Host { root: PathBuf::from("/"), path }
    }

    /// A host whose files are under `root` and whose commands are looked for in `path`.
    #[cfg(test)]
    pub(crate) fn at(root: impl Into<PathBuf>, path: Vec<PathBuf>) -> Host {
        Host { root: root.into(), path }
    }

    fn file(&self, absolute: &str) -> PathBuf {
        node_contract::files::under(&self.root, absolute)
    }

    fn command(&self, name: &str) -> Option<PathBuf> {
        self.path.iter().map(|dir| dir.join(name)).find(|p| p.is_file())
    }

    /// The kernel log since boot (as far as the ring buffer or the journal keeps it).
    pub(crate) fn kernel_log(&self) -> Result<Vec<String>, String> {
        match read_kmsg(&self.file("/dev/kmsg")) {
            Ok(lines) => Ok(lines),
            Err(kmsg) => {
                let Some(journalctl) = self.command("journalctl") else {
                    return Err(format!("{kmsg}; and journalctl is not on PATH"));
                };
                let out = run(
                    Command::new(journalctl).args(["-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"]),
                    JOURNALCTL_TIMEOUT,
                )
                .map_err(|e| format!("{kmsg}; and journalctl -k -b: {e}"))?;
                if !out.success {
                    return Err(format!("{kmsg}; and journalctl -k -b failed: {}", out.stderr.trim()));
                }
                Ok(out.stdout.lines().map(str::to_string).collect())
            }
        }
    }

    /// EFA devices: `/sys/class/infiniband/*` whose `device/driver` is `efa`.
    pub(crate) fn efa_devices(&self) -> Result<u32, String> {
        let dir = self.file("/sys/class/infiniband");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // No RDMA device at all: the directory does not exist.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(format!("reading {}: {e}", dir.display())),
        };
        let mut count = 0;
        for entry in entries.flatten() {
            let driver = std::fs::read_link(entry.path().join("device/driver")).ok();
            if driver.as_deref().and_then(Path::file_name).is_some_and(|n| n == "efa") {
                count += 1;
            }
        }
        Ok(count)
    }

    /// `dcgmi diag -r <level> -j`; `None` when `dcgmi` is not on `PATH`.
    pub(crate) fn dcgm(&self, level: u8, timeout: Duration) -> Option<Result<DcgmOutcome, String>> {
        let dcgmi = self.command("dcgmi")?;
        let out = match run(Command::new(dcgmi).args(["diag", "-r", &level.to_string(), "-j"]), timeout) {
            Ok(o) => o,
            Err(e) => return Some(Err(format!("dcgmi diag -r {level}: {e}"))),
        };
        Some(parse_dcgm(&out.stdout, level).map_err(|e| {
            let stderr = out.stderr.trim();
            if stderr.is_empty() { e } else { format!("{e} (dcgmi said: {stderr})") }
        }))
    }
}

/// Reads every record `/dev/kmsg` holds, without blocking at the end.
fn read_kmsg(path: &Path) -> Result<Vec<String>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut lines = Vec::new();
    // One read returns one record; a record is at most about 8 KiB (the kernel's CONSOLE_EXT_LOG_MAX).
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(line) = kmsg_record(&String::from_utf8_lossy(&buf[..n])) {
                    lines.push(line);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: the ring buffer overwrote the record this reader was at; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        }
    }
    Ok(lines)
}

/// One `/dev/kmsg` record ("6,1234,5480339,-;NVRM: ...\n SUBSYSTEM=pci\n")
/// as `dmesg` prints it: "[    5.480339] NVRM: ...".
pub(crate) fn kmsg_record(record: &str) -> Option<String> {
    let (head, rest) = record.split_once(';')?;
    let micros: u64 = head.split(',').nth(2)?.parse().ok()?;
    // Continuation lines (" KEY=value") follow the message after a newline.
    let message = rest.split('\n').next().unwrap_or("");
    Some(format!("[{:5}.{:06}] {message}", micros / 1_000_000, micros % 1_000_000))
}

/// A command's output.
struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs a command to its end or its timeout (then kills it), reading its
/// output as it comes (a full pipe would stop it).
fn run(command: &mut Command, timeout: Duration) -> Result<Output, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start: {e}"))?;
    let mut out = child.stdout.take().expect("stdout is piped");
    let mut err = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {} s (killed)", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for it: {e}")),
        }
    };
    let stdout = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    Ok(Output { success: status.success(), stdout, stderr })
}

/// Reads `dcgmi diag -j`'s JSON. DCGM 3 puts the tests under `"DCGM GPU
/// Diagnostic"` with results naming `"gpu_ids": "0"`; DCGM 4 under `"DCGM
/// Diagnostic"` with `"entity_group": "GPU", "entity_id": 0`. Both hold
/// `test_categories[].tests[].results[]` with a `status` and `warnings`
/// (objects with a `warning` text, or plain strings).
pub(crate) fn parse_dcgm(json: &str, level: u8) -> Result<DcgmOutcome, String> {
    // dcgmi may print a line before the document; the JSON is from the first brace on.
    let start = json.find('{').ok_or_else(|| format!("dcgmi diag -r {level} printed no JSON"))?;
    let doc: Value = serde_json::from_str(&json[start..])
        .map_err(|e| format!("dcgmi diag -r {level} printed JSON that does not parse: {e}"))?;
    let root = doc.get("DCGM Diagnostic").or_else(|| doc.get("DCGM GPU Diagnostic")).unwrap_or(&doc);
    if let Some(e) = root.get("runtime_error").and_then(Value::as_str).filter(|e| !e.is_empty()) {
        return Err(format!("dcgmi diag -r {level}: {e}"));
    }
    let mut results = Vec::new();
    for category in root.get("test_categories").and_then(Value::as_array).into_iter().flatten() {
        for test in category.get("tests").and_then(Value::as_array).into_iter().flatten() {
            let name = test.get("name").and_then(Value::as_str).unwrap_or("unnamed test");
            for r in test.get("results").and_then(Value::as_array).into_iter().flatten() {
                let Some(status) = r.get("status").and_then(Value::as_str) else { continue };
                results.push(DcgmResult {
                    test: name.to_string(),
                    gpu: result_gpu(r),
                    status: status.to_string(),
                    detail: warnings(r),
                });
            }
        }
    }
    if results.is_empty() {
        return Err(format!("dcgmi diag -r {level} gave no test results"));
    }
    Ok(DcgmOutcome { level, results })
}

fn result_gpu(r: &Value) -> Option<u32> {
    if let Some(id) = r.get("entity_id").and_then(Value::as_u64) {
        let group = r.get("entity_group").and_then(Value::as_str).unwrap_or("GPU");
        return (group == "GPU").then(|| u32::try_from(id).ok()).flatten();
    }
    let ids = r.get("gpu_ids")?;
    if let Some(n) = ids.as_u64() {
        return u32::try_from(n).ok();
    }
    // "0" names one GPU; "0,1,2,3" a result for several, which names none.
    ids.as_str()?.trim().parse().ok()
}

fn warnings(r: &Value) -> String {
    let texts: Vec<String> = match r.get("warnings") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|w| w.get("warning").and_then(Value::as_str).or_else(|| w.as_str()).map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    texts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmsg_records_read_as_dmesg_prints_them() {
        assert_eq!(
            kmsg_record(
                "4,2345,812339201,-;NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus.\n"
            ),
            Some(
                "[  812.339201] NVRM: Xid (PCI:0000:86:00): 79, pid=4120, name=python, GPU has fallen off the bus."
                    .to_string()
            )
        );
        assert_eq!(
            kmsg_record(
                "6,339,5480339,-,caller=T1;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05\n SUBSYSTEM=pci\n DEVICE=+pci:0000:53:00.0\n"
            ),
            Some("[    5.480339] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05".to_string())
        );
        assert_eq!(kmsg_record("no separator"), None);
    }

    /// This machine's own kernel log: read to its end without blocking
    /// (`/dev/kmsg` as root, else journalctl), or an error that says why.
    #[test]
    fn the_hosts_kernel_log_is_read_to_its_end_without_blocking() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(Host::system().kernel_log()));
        match rx.recv_timeout(Duration::from_secs(30)).expect("reading the kernel log blocked") {
            Ok(lines) => {
                for l in lines.iter().take(50) {
                    assert!(l.starts_with('['), "not a dmesg-style line: {l:?}");
                }
            }
            Err(e) => assert!(e.starts_with("opening ") && e.contains("/dev/kmsg"), "{e}"),
        }
    }

    #[test]
    fn efa_devices_are_the_rdma_devices_the_efa_driver_owns() {
        let root = tempfile::tempdir().unwrap();
        let ib = root.path().join("sys/class/infiniband");
        let drivers = root.path().join("sys/bus/pci/drivers");
        for d in ["efa", "mlx5_core"] {
            std::fs::create_dir_all(drivers.join(d)).unwrap();
        }
        // As on a p5: rdmap<bus>s0 devices owned by efa; and one device of another driver.
        for (dev, driver) in [("rdmap79s0", "efa"), ("rdmap80s0", "efa"), ("rdmap81s0", "efa"), ("mlx5_0", "mlx5_core")]
        {
            std::fs::create_dir_all(ib.join(dev).join("device")).unwrap();
            std::os::unix::fs::symlink(drivers.join(driver), ib.join(dev).join("device/driver")).unwrap();
        }
        let host = Host::at(root.path(), vec![]);
        assert_eq!(host.efa_devices(), Ok(3));
        assert_eq!(Host::at(root.path().join("nowhere"), vec![]).efa_devices(), Ok(0));
    }

    #[test]
    fn without_dcgmi_on_the_path_dcgm_is_none() {
        let empty = tempfile::tempdir().unwrap();
        assert!(Host::at("/", vec![empty.path().to_path_buf()]).dcgm(1, Duration::from_secs(1)).is_none());
    }

    /// A stand-in `dcgmi` (a shell script) that prints a DCGM 4 document,
    /// exits 226 as dcgmi does when a test fails; and one that hangs.
    #[test]
    fn dcgmi_is_run_read_whatever_its_exit_status_and_killed_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("dcgmi");
        std::fs::write(
            &script,
            format!("#!/bin/sh\n[ \"$1 $2 $3 $4\" = 'diag -r 1 -j' ] || exit 9\ncat <<'EOF'\n{DCGM4}\nEOF\nexit 226\n"),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let host = Host::at("/", vec![dir.path().to_path_buf()]);
        let outcome = host.dcgm(1, Duration::from_secs(20)).unwrap().unwrap();
        assert_eq!(outcome.failures().map(|r| (r.test.as_str(), r.gpu)).collect::<Vec<_>>(), vec![("memory", Some(1))]);

        std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
        let start = Instant::now();
        let e = host.dcgm(1, Duration::from_millis(300)).unwrap().unwrap_err();
        assert!(e.contains("did not finish"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    /// DCGM 4's layout (the shape of DCGM's own tests, `testing/python3`,
    /// and of documents captured from DCGM 4.2: entity results, per-test summaries).
    const DCGM4: &str = r#"{
  "DCGM Diagnostic": {
    "test_categories": [
      {
        "category": "Deployment",
        "tests": [
          { "name": "software", "results": [ { "entity_group": "GPU", "entity_id": 0, "status": "Pass" }, { "entity_group": "GPU", "entity_id": 1, "status": "Pass" } ], "test_summary": { "status": "Pass" } }
        ]
      },
      {
        "category": "Hardware",
        "tests": [
          { "name": "memory", "results": [
              { "entity_group": "GPU", "entity_id": 0, "status": "Pass" },
              { "entity_group": "GPU", "entity_id": 1, "status": "Fail", "warnings": [ { "error_category": 2, "error_id": 45, "error_severity": 2, "warning": "Error using CUDA API cudaMalloc: out of memory" } ] }
            ], "test_summary": { "status": "Fail" } }
        ]
      }
    ]
  },
  "metadata": { "version": "4.2.3", "Driver Version Detected": "570.133.20" }
}"#;

    /// DCGM 3's layout (DCGM's test strings for the `-j` output of 3.x).
    const DCGM3: &str = r#"Successfully ran diagnostic for group.
{
  "DCGM GPU Diagnostic": {
    "test_categories": [
      { "category": "Deployment", "tests": [
        { "name": "Denylist", "results": [ { "status": "Pass" } ] },
        { "name": "Persistence Mode", "results": [ { "status": "Pass" } ] }
      ] },
      { "category": "Integration", "tests": [
        { "name": "PCIe", "results": [ { "gpu_ids": "0", "status": "Pass" }, { "gpu_ids": "1", "status": "Skip", "info": "Skipped" } ] }
      ] },
      { "category": "Hardware", "tests": [
        { "name": "GPU Memory", "results": [ { "gpu_ids": "0", "status": "Pass" }, { "gpu_ids": "1", "status": "Fail", "warnings": [ { "warning": "Found 2 uncorrectable ECC errors (DBE) on GPU 1", "error_id": 50 } ] } ] }
      ] }
    ],
    "version": "3.3.7"
  }
}"#;

    #[test]
    fn both_dcgm_layouts_parse_to_the_same_outcome() {
        let four = parse_dcgm(DCGM4, 1).unwrap();
        assert_eq!(four.results.len(), 4);
        let failed: Vec<_> = four.failures().collect();
        assert_eq!((failed[0].test.as_str(), failed[0].gpu), ("memory", Some(1)));
        assert_eq!(failed[0].detail, "Error using CUDA API cudaMalloc: out of memory");

        let three = parse_dcgm(DCGM3, 2).unwrap();
        assert_eq!(three.level, 2);
        assert_eq!(three.results.len(), 6);
        assert_eq!(three.results[0].gpu, None);
        let failed: Vec<_> = three.failures().collect();
        assert_eq!(failed.len(), 1);
        assert_eq!((failed[0].test.as_str(), failed[0].gpu), ("GPU Memory", Some(1)));
        assert!(failed[0].detail.contains("uncorrectable ECC"));
    }

    #[test]
    fn dcgm_output_that_says_nothing_is_an_error() {
        assert!(
            parse_dcgm("Error: unable to establish a connection to the specified host: localhost", 1)
                .unwrap_err()
                .contains("no JSON")
        );
        assert!(
            parse_dcgm("{ \"DCGM Diagnostic\": { \"runtime_error\": \"The GPU is in use\" } }", 1)
                .unwrap_err()
                .contains("The GPU is in use")
        );
        assert!(parse_dcgm("{}", 1).unwrap_err().contains("no test results"));
        assert!(parse_dcgm("{ broken", 1).unwrap_err().contains("does not parse"));
    }
}
