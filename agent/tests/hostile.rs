//! `agent render` and `agent status` against hostile inputs and outputs,
//! one row per class: manifests that must be refused for their real reason
//! (oversized, another version, another cluster, two nodes under one index,
//! alias, address or host name), node configs that would write outside the
//! user's home, inputs without end, and output into a closed pipe or onto
//! a full disk. Every row checks the exit code, the message, that nothing
//! panicked, that the run ended within a bound, and that a refused manifest
//! printed nothing.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_output::testkit::{closed_pipe, full_disk, run_case, run_within, stderr_to, stdout_to};
use serde_json::{Value, json};

const BOUND: Duration = Duration::from_secs(30);

fn host_key(seed: u8) -> String {
    let key = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[seed; 32]));
    key.public_key().to_openssh().unwrap()
}

/// A worker's node config, as synth writes it.
fn config() -> Value {
    json!({
        "version": 7, "cluster": "demo", "stack_id": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/1",
        "stack_name": "demo", "region": "us-east-1", "role": "worker",
        "queues": { "master": "https://sqs.us-east-1.amazonaws.com/123456789012/demo-master",
                    "workers": "https://sqs.us-east-1.amazonaws.com/123456789012/demo-workers" },
        "efs": { "file_system_id": "fs-12345678", "mount": "/efs" },
        "default_user": "ubuntu", "formation_timeout_seconds": 1800
    })
}

fn node(i: u32) -> Value {
    json!({
        "index": i, "alias": format!("deeplearning-worker{i}"), "instance_id": format!("i-000000000000000{i}"),
        "private_ip": format!("10.0.0.{}", 4 + i), "hostname": format!("ip-10-0-0-{}", 4 + i), "gpus": 0,
        "ssh_host_key": host_key(i as u8)
    })
}

/// A manifest message of three nodes: the whole manifest in one part.
fn manifest() -> Value {
    json!({
        "version": 2, "kind": "manifest_part", "cluster": "demo", "generation": 4, "publication": 1,
        "part": 0, "parts": 1, "node_count": 3, "master": "i-0000000000000001",
        "nodes": [node(1), node(2), node(3)], "cluster_public_key": host_key(42)
    })
}

/// The manifest as a state file holds it: without the message's envelope
/// (`version`, `kind`) and part numbering.
fn bare_manifest() -> Value {
    let mut m = manifest();
    let fields = m.as_object_mut().unwrap();
    for envelope in ["version", "kind", "publication", "part", "parts", "node_count"] {
        fields.remove(envelope);
    }
    m
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    fn write(&self, name: &str, value: &Value) {
        fs::write(self.path(name), serde_json::to_string_pretty(value).unwrap()).unwrap();
    }
}

/// A root with `node.json` and `manifest.json` as given.
fn dir(config: Value, manifest: Value) -> Dir {
    let d = Dir(tempfile::tempdir().unwrap());
    fs::create_dir_all(d.path("root")).unwrap();
    d.write("node.json", &config);
    d.write("manifest.json", &manifest);
    d
}

fn agent(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agent"));
    c.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).env("AGENT_LOG", "warn");
    c
}

/// `agent render` of `manifest.json` for node 2, with `node.json`.
fn render(d: &Dir) -> Command {
    render_from(d, &d.arg("node.json"), &d.arg("manifest.json"))
}

/// `agent render` for node 2 with this config and manifest.
fn render_from(d: &Dir, config: &str, manifest: &str) -> Command {
    let root = d.arg("root");
    agent(&["render", "--root", &root, "--config", config, "--manifest", manifest, "--self", "i-0000000000000002"])
}

fn spoiled(edit: impl FnOnce(&mut Value)) -> Dir {
    let mut m = manifest();
    edit(&mut m);
    dir(config(), m)
}

struct Case {
    name: &'static str,
    /// The directory: the node config, the manifest, a root.
    setup: fn() -> Dir,
    /// What runs against it.
    command: fn(&Dir) -> Command,
    code: i32,
    says: &'static str,
}

const CASES: &[Case] = &[
    Case { name: "a good manifest renders", setup: || dir(config(), manifest()), command: render, code: 0, says: "" },
    Case {
        name: "two nodes with one index",
        setup: || spoiled(|m| m["nodes"][2]["index"] = json!(2)),
        command: render,
        code: 1,
        says: "two nodes have index 2, i-0000000000000002 and i-0000000000000003",
    },
    Case {
        name: "two nodes with one index in a bare manifest (the agent's own check)",
        setup: || {
            let mut m = bare_manifest();
            m["nodes"][2]["index"] = json!(2);
            dir(config(), m)
        },
        command: render,
        code: 1,
        says: "gives index \"2\" to two nodes, i-0000000000000002 and i-0000000000000003",
    },
    Case {
        name: "two nodes with one alias (two addresses under one name in /etc/hosts)",
        setup: || spoiled(|m| m["nodes"][2]["alias"] = json!("deeplearning-worker2")),
        command: render,
        code: 1,
        says: "gives alias \"deeplearning-worker2\" to two nodes",
    },
    Case {
        name: "two nodes with one address",
        setup: || spoiled(|m| m["nodes"][2]["private_ip"] = json!("10.0.0.5")),
        command: render,
        code: 1,
        says: "gives private_ip \"10.0.0.5\" to two nodes",
    },
    Case {
        name: "two nodes with one host name",
        setup: || spoiled(|m| m["nodes"][2]["hostname"] = json!("ip-10-0-0-5")),
        command: render,
        code: 1,
        says: "gives hostname \"ip-10-0-0-5\" to two nodes",
    },
    Case {
        name: "another cluster's manifest",
        setup: || spoiled(|m| m["cluster"] = json!("other")),
        command: render,
        code: 1,
        says: "is for cluster \"other\", and this node is in cluster \"demo\"",
    },
    Case {
        name: "a manifest of another version: that reason, not a state-file error",
        setup: || spoiled(|m| m["version"] = json!(1)),
        command: render,
        code: 1,
        says: "message version 1 is not supported",
    },
    Case {
        name: "one part of a manifest of several: that reason",
        setup: || spoiled(|m| m["parts"] = json!(2)),
        command: render,
        code: 1,
        says: "is part 1 of 2 of generation 4; give the whole manifest",
    },
    Case {
        name: "a bare manifest (as a state file keeps it) renders",
        setup: || dir(config(), bare_manifest()),
        command: render,
        code: 0,
        says: "",
    },
    Case {
        name: "an oversized manifest body: that reason",
        setup: || {
            let d = dir(config(), manifest());
            let mut body = serde_json::to_string(&manifest()).unwrap();
            body.push_str(&" ".repeat(300 * 1024));
            fs::write(d.path("manifest.json"), body).unwrap();
            d
        },
        command: render,
        code: 1,
        says: "over the 262144-byte limit",
    },
    Case {
        name: "a state file renders like its manifest",
        setup: || {
            dir(config(), json!({ "version": 1, "instance_id": "i-1", "generation": 4, "manifest": bare_manifest() }))
        },
        command: render,
        code: 0,
        says: "",
    },
    Case {
        name: "a state file of another version",
        setup: || {
            dir(config(), json!({ "version": 7, "instance_id": "i-1", "generation": 1, "manifest": bare_manifest() }))
        },
        command: render,
        code: 1,
        says: "is not a usable state file: agent state version 7 is not supported",
    },
    Case {
        name: "neither a manifest nor a state file",
        setup: || dir(config(), json!({ "hello": "world" })),
        command: render,
        code: 1,
        says: "is neither a manifest message",
    },
    Case {
        name: "an endless manifest: stopped at its bound",
        setup: || dir(config(), manifest()),
        command: |d| render_from(d, &d.arg("node.json"), "/dev/zero"),
        code: 1,
        says: "cannot read the manifest /dev/zero: it is larger than 524288 bytes",
    },
    Case {
        name: "an endless node config: stopped at its bound",
        setup: || dir(config(), manifest()),
        command: |d| render_from(d, "/dev/zero", &d.arg("manifest.json")),
        code: 1,
        says: "cannot read the node config /dev/zero: it is larger than 65536 bytes",
    },
    Case {
        name: "a default_user that climbs out of /home",
        setup: || {
            let mut c = config();
            c["default_user"] = json!("../../root");
            dir(c, manifest())
        },
        command: render,
        code: 1,
        says: "its default_user \"../../root\" is not a login name",
    },
    Case {
        // A file that cannot be read is the machine's error, not a refused
        // input: exit 2, as synth's for a blueprint it cannot read.
        name: "a missing node config: its cause once, exit 2",
        setup: || {
            let d = dir(config(), manifest());
            fs::remove_file(d.path("node.json")).unwrap();
            d
        },
        command: render,
        code: 2,
        says: "node.json: No such file or directory (os error 2)\n",
    },
    Case {
        name: "render into a closed pipe: ends quietly",
        setup: || dir(config(), manifest()),
        command: |d| stdout_to(render(d), closed_pipe()),
        code: 0,
        says: "",
    },
    Case {
        name: "render onto a full disk: exit 2 and why",
        setup: || dir(config(), manifest()),
        command: |d| stdout_to(render(d), full_disk()),
        code: 2,
        says: "cannot write the output to standard output: No space left on device",
    },
    Case {
        name: "status onto a full disk: exit 2 and why",
        setup: || {
            let d = dir(config(), manifest());
            let state = json!({ "version": 1, "instance_id": "i-0000000000000002", "generation": 4, "manifest": bare_manifest() });
            let file = d.path("root/var/lib/deeplearning/state.json");
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(&file, serde_json::to_string(&state).unwrap()).unwrap();
            d
        },
        command: |d| stdout_to(agent(&["status", "--root", &d.arg("root")]), full_disk()),
        code: 2,
        says: "No space left on device",
    },
    Case {
        name: "an error reported onto a full stderr: exit 2",
        setup: || dir(config(), manifest()),
        command: |d| stderr_to(agent(&["status", "--root", &d.arg("root")]), full_disk()),
        code: 2,
        says: "",
    },
    Case {
        name: "--help into a closed pipe: ends quietly",
        setup: || dir(config(), manifest()),
        command: |_| stdout_to(agent(&["--help"]), closed_pipe()),
        code: 0,
        says: "",
    },
];

#[test]
fn every_hostile_case_ends_within_its_bound_with_the_real_reason() {
    for case in CASES {
        let d = (case.setup)();
        let mut command = (case.command)(&d);
        let out = run_case(&mut command, BOUND, case.name, case.code, case.says);
        if case.code == 1 {
            assert!(out.stdout.is_empty(), "{}: a refused input printed {} bytes", case.name, out.stdout.len());
        }
        // No cause is printed twice (`...: No such file...: No such file...`).
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            let parts: Vec<&str> = line.split(": ").collect();
            let repeated = parts.windows(2).any(|w| w[0] == w[1] && w[0].contains("os error"));
            assert!(!repeated, "{}: a cause twice in {line:?}", case.name);
        }
        drop(d);
    }
}

/// The README's `agent render` example renders from the files it shows.
#[test]
fn the_documented_render_example_works() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let root = tempfile::tempdir().unwrap();
    let mut c = agent(&[
        "render",
        "--root",
        &root.path().display().to_string(),
        "--config",
        &docs.join("node.json").display().to_string(),
        "--manifest",
        &docs.join("manifest.json").display().to_string(),
        "--self",
        "i-0f9e8d7c6b5a40312",
    ]);
    let out = run_within(&mut c, BOUND);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("10.0.3.12 deeplearning-worker2 ip-10-0-3-12.ec2.internal ip-10-0-3-12\n"), "{stdout}");
    assert!(stdout.contains("==> /opt/deeplearning/hostfile <==\ndeeplearning-worker1 slots=8\n"), "{stdout}");
}
