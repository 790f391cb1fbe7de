//! `trainer` against hostile inputs and outputs, one row per class: hosts
//! files that must be refused before anything starts (a NUL byte, shell
//! characters, slots without end, more ranks than a job runs, a file
//! without end), a rendezvous port of 0, training inputs that used to cost
//! an epoch or a gigabyte before they were refused (a checkpoint directory
//! that is a file, a gzip bomb, 100,000 threads), and output into a closed
//! pipe or onto a full disk. Every row checks the exit code, the message,
//! that nothing panicked, that the run ended within a bound, and for
//! `launch` that no job directory was made (nothing started).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_output::testkit::{closed_pipe, full_disk, run_case, run_within, stdout_to};

const BOUND: Duration = Duration::from_secs(60);

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        let d = Dir(tempfile::tempdir().unwrap());
        write_mnist(&d.path("mnist"), None);
        d
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    fn file(&self, name: &str, text: &str) -> String {
        fs::write(self.path(name), text).unwrap();
        self.arg(name)
    }
}

fn idx(magic: u32, dims: &[u32], payload: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    dims.iter().for_each(|d| v.extend_from_slice(&d.to_be_bytes()));
    v.extend_from_slice(payload);
    v
}

/// A tiny MNIST-shaped dataset (40 training and 10 test digits of noise);
/// with `bomb`, the training images are gzipped and followed by that many
/// MiB of zeros the header does not declare.
fn write_mnist(dir: &Path, bomb: Option<usize>) {
    fs::create_dir_all(dir).unwrap();
    for (split, n) in [("train", 40u32), ("t10k", 10)] {
        let pixels: Vec<u8> = (0..n * 784).map(|i| (i * 37 % 251) as u8).collect();
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        let images = idx(0x803, &[n, 28, 28], &pixels);
        match bomb.filter(|_| split == "train") {
            Some(mib) => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                gz.write_all(&images).unwrap();
                for _ in 0..mib {
                    gz.write_all(&[0u8; 1 << 20]).unwrap();
                }
                fs::write(dir.join("train-images-idx3-ubyte.gz"), gz.finish().unwrap()).unwrap();
            }
            None => fs::write(dir.join(format!("{split}-images-idx3-ubyte")), images).unwrap(),
        }
        fs::write(dir.join(format!("{split}-labels-idx1-ubyte")), idx(0x801, &[n], &labels)).unwrap();
    }
}

/// `trainer ARGS` in the temp dir (where a launch without EFS puts its
/// logs), with none of a cluster's environment.
fn trainer(d: &Dir, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trainer"));
    c.args(args).current_dir(d.0.path()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for var in ["DEEPLEARNING_WORKERS_PATH", "EFS_MOUNT", "RANK", "WORLD_SIZE", "MASTER_ADDR", "TRAINER_ROOT"] {
        c.env_remove(var);
    }
    c
}

fn launch(d: &Dir, hosts: &str, extra: &[&str]) -> Command {
    let hosts = d.file("hosts", hosts);
    let mut args = vec!["launch", "--job", "hostile", "--hosts", &hosts, "--root", "/nonexistent"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "true"]);
    trainer(d, &args)
}

fn train(d: &Dir, data: &str, extra: &[&str]) -> Command {
    let mut args = vec!["train", "--model", "mlp", "--data", data, "--epochs", "2", "--batch-size", "20"];
    args.extend_from_slice(extra);
    trainer(d, &args)
}

struct Case {
    name: &'static str,
    setup: fn(&Dir) -> Command,
    code: i32,
    says: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "a NUL byte in the hosts file: refused at its line",
        setup: |d| launch(d, "h1\n\0h2\n", &[]),
        code: 2,
        says: "hosts:2: a host is a name, an address or user@host",
    },
    Case {
        name: "shell characters in a host: refused at its line",
        setup: |d| launch(d, "h1;reboot\n", &[]),
        code: 2,
        says: "hosts:1: a host is a name",
    },
    Case {
        name: "slots=4294967295 on one host: refused, nothing allocated",
        setup: |d| launch(d, "h1 slots=4294967295\n", &[]),
        code: 2,
        says: "hosts:1: slots must be at most 256",
    },
    Case {
        name: "slots=100000: refused before any log file is made",
        setup: |d| launch(d, "h1 slots=100000\n", &[]),
        code: 2,
        says: "slots must be at most 256",
    },
    Case {
        name: "more ranks than a job runs",
        setup: |d| {
            let hosts: String = (0..20).map(|i| format!("h{i} slots=256\n")).collect();
            launch(d, &hosts, &[])
        },
        code: 2,
        says: "5120 ranks on 20 hosts is more than the 4096 a job runs",
    },
    Case {
        name: "--nproc-per-node 100000",
        setup: |d| launch(d, "h1\n", &["--nproc-per-node", "100000"]),
        code: 2,
        says: "100000 is more than 256 processes on one host",
    },
    Case {
        name: "--port 0",
        setup: |d| launch(d, "h1\n", &["--port", "0"]),
        code: 2,
        says: "invalid value '0' for '--port <PORT>'",
    },
    Case {
        name: "an endless hosts file: stopped at 1 MiB",
        setup: |d| trainer(d, &["launch", "--hosts", "/dev/zero", "--", "true"]),
        code: 2,
        says: "cannot read /dev/zero: it is larger than 1024 KiB",
    },
    Case {
        name: "doctor --local into a closed pipe: ends quietly",
        setup: |d| stdout_to(trainer(d, &["doctor", "--local", "--root", &d.arg("root")]), closed_pipe()),
        code: 1,
        says: "",
    },
    Case {
        name: "doctor --local onto a full disk: exit 2 and why",
        setup: |d| stdout_to(trainer(d, &["doctor", "--local", "--root", &d.arg("root")]), full_disk()),
        code: 2,
        says: "cannot write to standard output: No space left on device",
    },
    Case {
        name: "kill-local onto a full disk: exit 2",
        setup: |d| stdout_to(trainer(d, &["kill-local", "--root", &d.arg("root")]), full_disk()),
        code: 2,
        says: "No space left on device",
    },
    Case {
        name: "a checkpoint directory that is a file: refused before the data is read",
        setup: |d| {
            let file = d.file("afile", "not a directory");
            train(d, "/nonexistent/data", &["--checkpoint-dir", &file])
        },
        code: 2,
        says: "afile: it exists and is not a directory",
    },
    Case {
        name: "--threads 100000",
        setup: |d| train(d, &d.arg("mnist"), &["--threads", "100000"]),
        code: 2,
        says: "100000 is more than 1024 threads",
    },
    Case {
        name: "a gzip bomb: read no further than its header declares",
        setup: |d| {
            write_mnist(&d.path("bomb"), Some(256));
            train(d, &d.arg("bomb"), &[])
        },
        code: 2,
        says: "need 31376 bytes but the file goes on after them: trailing bytes",
    },
    Case {
        name: "train onto a full disk: exit 2, not 0 with the output lost",
        setup: |d| stdout_to(train(d, &d.arg("mnist"), &["--checkpoint-dir", &d.arg("ckpt")]), full_disk()),
        code: 2,
        says: "cannot write to standard output: No space left on device",
    },
    Case {
        name: "train into a closed pipe: ends quietly, as a SIGPIPE would (141)",
        setup: |d| stdout_to(train(d, &d.arg("mnist"), &[]), closed_pipe()),
        code: 141,
        says: "",
    },
];

#[test]
fn every_hostile_case_ends_within_its_bound_before_anything_starts() {
    for case in CASES {
        let d = Dir::new();
        let mut command = (case.setup)(&d);
        run_case(&mut command, BOUND, case.name, case.code, case.says);
        // A refused launch made no job directory: no rank was set up.
        assert!(!d.path("trainer/hostile").exists(), "{}: the job started", case.name);
    }
    // The checkpoint of the epoch whose line could not be written is there.
    let d = Dir::new();
    let mut c = stdout_to(train(&d, &d.arg("mnist"), &["--checkpoint-dir", &d.arg("ckpt")]), full_disk());
    run_within(&mut c, BOUND);
    let saved = fs::read_dir(d.path("ckpt")).map(|r| r.count()).unwrap_or(0);
    assert_eq!(saved, 1, "the first epoch's checkpoint is saved before the run ends");
}
