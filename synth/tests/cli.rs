//! The `synth` binary end to end: exit codes, stdout versus stderr, and that
//! a failed build writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .expect("synth runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn build_prints_a_template_on_stdout_only() {
    let o = synth(&["build", "blueprints/minimal.yaml", "--region", "eu-west-1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let template: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("stdout is the JSON template");
    assert_eq!(template["AWSTemplateFormatVersion"], "2010-09-09");
    assert!(template["Rules"]["SupportedRegion"].to_string().contains("eu-west-1"));
}

#[test]
fn an_invalid_blueprint_exits_1_and_prints_nothing_on_stdout() {
    let dir = temp_dir("invalid");
    let bp = dir.join("bad.yaml");
    std::fs::write(
        &bp,
        "name: Bad_Name\nmaster: {instance_type: c5.xlarge}\nworkers: {instance_type: c5.xlarge, count: 2, cuont: 3}\n",
    )
    .unwrap();
    let o = synth(&["build", bp.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "no partial output: {}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("bad.yaml:1:7"), "names the line and column: {err}");
    assert!(err.contains("cuont") && err.contains("count"), "did you mean: {err}");
    let v = synth(&["validate", bp.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(1));
    assert_eq!(stderr(&v), err, "validate reports the same problems");
}

#[test]
fn a_failed_build_leaves_the_output_file_untouched() {
    let dir = temp_dir("untouched");
    let out = dir.join("stack.json");
    std::fs::write(&out, "previous").unwrap();
    let bp = dir.join("bad.yaml");
    std::fs::write(
        &bp,
        "name: ok\nmaster: {instance_type: c5.xlarge}\nworkers: {instance_type: c5.xlarge, count: 5, max: 2}\n",
    )
    .unwrap();
    let o = synth(&["build", bp.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(leftovers.len(), 2, "no temporary files left: {leftovers:?}");

    let o = synth(&["build", "blueprints/minimal.yaml", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(written["Resources"]["MasterInstance"].is_object());
}

#[test]
fn usage_and_io_errors_exit_2() {
    let o = synth(&["build", "no/such/blueprint.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read the blueprint no/such/blueprint.yaml"), "{}", stderr(&o));
    let o = synth(&["build", "blueprints/minimal.yaml", "--region", "mars-north-1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("us-east-1, us-east-2, us-west-2, eu-west-1, ap-southeast-2"), "{}", stderr(&o));
    let o = synth(&["build", "blueprints/minimal.yaml", "-o", "/nonexistent-dir/stack.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot write the template to /nonexistent-dir/stack.json"), "{}", stderr(&o));
    let o = synth(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn validate_schema_and_regions() {
    let o = synth(&["validate", "blueprints/gpu-cluster.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "validate prints nothing on stdout: {}", stdout(&o));
    assert!(
        stderr(&o)
            .contains("ok: blueprints/gpu-cluster.yaml builds a template for all five supported regions: us-east-1,"),
        "{}",
        stderr(&o)
    );

    let o = synth(&["schema"]);
    assert_eq!(o.status.code(), Some(0));
    let schema: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let props = schema["properties"].as_object().expect("an object schema");
    for field in
        ["name", "region", "image", "master", "workers", "storage", "network", "access", "elastic", "timeouts", "tags"]
    {
        assert!(props.contains_key(field), "schema lacks {field}");
    }

    let o = synth(&["regions"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o).lines().count(), 5);
    assert!(stdout(&o).contains("ap-southeast-2  Asia Pacific (Sydney)"));

    let o = synth(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Exit codes"));
}

/// `synth policy`: each part is one IAM policy document on stdout, scoped
/// by the options; a prefix that could widen an ARN is refused (exit 2,
/// nothing printed); `--help` says how to attach it.
#[test]
fn policy_prints_each_document_and_refuses_a_widening_prefix() {
    for part in ["calls", "resources"] {
        let o = synth(&["policy", "--part", part, "--stack-name-prefix", "ml", "--region", "eu-west-1"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(o.stderr.is_empty(), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(doc["Version"], "2012-10-17");
        let statements = doc["Statement"].as_array().unwrap();
        assert!(statements.iter().all(|s| s["Effect"] == "Allow" && s["Sid"].is_string()), "{doc}");
        assert!(!stdout(&o).contains("stack/*/*"), "scoped to the prefix: {doc}");
    }
    let o = synth(&["policy", "--part", "calls", "--stack-name-prefix", "ml*"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(stderr(&o).contains("--stack-name-prefix \"ml*\": a stack name starts with a letter"), "{}", stderr(&o));
    let o = synth(&["policy"]);
    assert_eq!(o.status.code(), Some(2), "--part is required");
    let o = synth(&["policy", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("aws iam create-policy") && stdout(&o).contains("attach-user-policy"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_blueprint_on_stdin() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["build", "-", "--region", "us-west-2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"name: piped\nmaster: {instance_type: c5.xlarge}\nworkers: {instance_type: c5.xlarge, count: 1}\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"AWSTemplateFormatVersion\""));
}

#[test]
fn image_prints_the_image_builder_template_without_the_missing_agent_warning() {
    let o = synth(&["image", "blueprints/gpu-cluster.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let template: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("stdout is the JSON template");
    assert_eq!(template["Resources"]["Pipeline"]["Type"], "AWS::ImageBuilder::ImagePipeline");
    assert!(!stderr(&o).contains("no deeplearning agent"), "{}", stderr(&o));
    // The same blueprint, as a cluster: the stock image cannot hold the agent.
    let o = synth(&["validate", "blueprints/gpu-cluster.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("image.agent_package_url"), "{}", stderr(&o));
    let o = synth(&["validate", "blueprints/install-at-boot.yaml"]);
    assert!(!stderr(&o).contains("no deeplearning agent"), "{}", stderr(&o));
}
