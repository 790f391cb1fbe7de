//! `synth deploy` and the stack commands against the local AWS (moto over
//! HTTP, wait conditions holding the stack as in AWS: launcher patch (h)),
//! run as a user runs them: the `synth` binary, credentials and endpoint
//! from the environment.
//!
//! Needs `cargo build -p synth` (or `SYNTH_BIN`) and moto in `.venv`.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::moto::LocalAws;
use e2e::stack::{IMAGE_PARAMETER, ensure_image_parameter};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn synth_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SYNTH_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable");
    let bin = exe.parent().and_then(Path::parent).expect("a target dir").join("synth");
    assert!(
        bin.exists(),
        "{} is missing: `cargo build -p synth` (same CARGO_TARGET_DIR), or set SYNTH_BIN",
        bin.display()
    );
    bin
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_owned()
}

/// A `synth` command with this moto's endpoint and `key` as access key id
/// (the launcher logs calls per key), and nothing from the user's AWS files.
fn synth(aws: &LocalAws, key: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(synth_bin());
    cmd.current_dir(repo()).args(args);
    for (k, v) in aws.env() {
        cmd.env(k, v);
    }
    cmd.env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null());
    cmd
}

/// A running `synth`, its stdout and stderr in files.
struct Running {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    _dir: tempfile::TempDir,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let (out, err) = (dir.path().join("out"), dir.path().join("err"));
        let child =
            cmd.stdout(File::create(&out).unwrap()).stderr(File::create(&err).unwrap()).spawn().expect("synth starts");
        Running { child, out, err, _dir: dir }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits for the exit (at most 120 s); returns (code, stdout, stderr).
    fn finish(mut self) -> (i32, String, String) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let out = std::fs::read_to_string(&self.out).unwrap_or_default();
                return (status.code().unwrap_or(-1), out, self.stderr());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("synth did not finish; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn run(cmd: Command) -> (i32, String, String) {
    Running::start(cmd).finish()
}

/// A package file as `packaging/build` names it.
fn package(dir: &Path) -> PathBuf {
    let path = dir.join("deeplearning-agent_0.1.0-1_amd64.deb");
    std::fs::write(&path, b"not really a package, but bytes with a checksum").unwrap();
    path
}

/// Waits until the stack's formation handle exists and PUTs `status` with `reason` to it.
fn signal(aws: &LocalAws, stack: &str, status: &str, reason: &str) {
    let url = format!("{}/_waitcondition/123456789012/us-east-1/{stack}/FormationHandle", aws.endpoint());
    let body =
        serde_json::json!({"Status": status, "Reason": reason, "UniqueId": "i-master", "Data": "{}"}).to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ureq::put(&url).send(&body).is_err() {
        assert!(Instant::now() < deadline, "no stack {stack} to signal");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn stack_status(aws: &LocalAws, name: &str) -> Option<String> {
    runtime().block_on(async {
        let out = aws.cloudformation().describe_stacks().stack_name(name).send().await.ok()?;
        out.stacks().first()?.stack_status().map(|s| s.as_str().to_owned())
    })
}

fn physical_id(aws: &LocalAws, stack: &str, logical: &str) -> String {
    runtime().block_on(async {
        let out = aws.cloudformation().list_stack_resources().stack_name(stack).send().await.unwrap();
        out.stack_resource_summaries()
            .iter()
            .find(|r| r.logical_resource_id() == Some(logical))
            .and_then(|r| r.physical_resource_id().map(str::to_owned))
            .unwrap_or_default()
    })
}

fn count_calls(aws: &LocalAws, key: &str, action: &str) -> usize {
    aws.calls().unwrap().iter().filter(|c| c["key"] == key && c["action"] == action).count()
}

const BUCKET: &str = "deeplearning-cluster-staging-123456789012-us-east-1";

/// The staging bucket's settings and how many object versions it holds
/// (versioned: an upload of the same key again would be a second version).
fn staging_bucket(aws: &LocalAws) -> (String, bool, bool, usize, Vec<String>) {
    let config = aws_sdk_s3::config::Builder::from(&aws.sdk_config()).force_path_style(true).build();
    let s3 = aws_sdk_s3::Client::from_conf(config);
    runtime().block_on(async {
        let encryption = s3.get_bucket_encryption().bucket(BUCKET).send().await.is_ok();
        let block = s3.get_public_access_block().bucket(BUCKET).send().await.unwrap();
        let block = block.public_access_block_configuration().is_some_and(|c| {
            c.block_public_acls() == Some(true)
                && c.ignore_public_acls() == Some(true)
                && c.block_public_policy() == Some(true)
                && c.restrict_public_buckets() == Some(true)
        });
        let versions = s3.list_object_versions().bucket(BUCKET).send().await.unwrap();
        let keys = versions.versions().iter().filter_map(|v| v.key().map(str::to_owned)).collect::<Vec<_>>();
        // moto's GetBucketVersioning answer has a root element the SDK rejects: read the XML.
        let url = format!("{}/{BUCKET}?versioning", aws.endpoint());
        let xml = ureq::get(&url).call().unwrap().body_mut().read_to_string().unwrap();
        let versioning = if xml.contains("<Status>Enabled</Status>") { "Enabled".to_owned() } else { xml };
        (versioning, encryption, block, keys.len(), keys)
    })
}

/// A blueprint file: minimal.yaml with `edit` applied to its text.
fn blueprint(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> String {
    let text = std::fs::read_to_string(repo().join("blueprints/minimal.yaml")).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(text)).unwrap();
    path.display().to_string()
}

const IMAGE: &str = "ImageId=/e2e/ami-id";

#[test]
fn a_cluster_lives_from_deploy_to_delete() -> TestResult {
    assert_eq!(IMAGE, format!("ImageId={IMAGE_PARAMETER}"));
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let pkg = pkg.to_str().unwrap();
    let bp = blueprint(dir.path(), "cluster.yaml", |t| t);
    let key = "deployer";
    assert_eq!(count_calls(&aws, key, "CreateStack"), 0);
    let deploy = |extra: &[&str]| {
        let mut args = vec!["deploy", &bp, "--region", "us-east-1", "-p", IMAGE, "--agent-package", pkg];
        args.extend_from_slice(extra);
        synth(&aws, key, &args)
    };

    // Create: held on the formation wait condition until the master signals.
    let running = Running::start(deploy(&[]));
    signal(&aws, "minimal", "SUCCESS", "2 of 2 workers joined; the cluster has 3 nodes, the master included");
    let (code, out, err) = running.finish();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("Creating") && err.contains("stack minimal in us-east-1"), "{err}");
    assert!(err.contains("Ready network"), "phases are reported: {err}");
    assert!(err.contains("Formed the cluster"), "{err}");
    assert!(err.contains("Created staging bucket deeplearning-cluster-staging-123456789012-us-east-1"), "{err}");
    for output in ["MasterAddress", "SshCommand", "FileSystemId", "WorkerGroupName"] {
        assert!(out.lines().any(|l| l.starts_with(output)), "{output} not in stdout:\n{out}");
    }
    assert_eq!(stack_status(&aws, "minimal").as_deref(), Some("CREATE_COMPLETE"));
    let (versioning, encrypted, blocked, versions, keys) = staging_bucket(&aws);
    assert_eq!((versioning.as_str(), encrypted, blocked, versions), ("Enabled", true, true, 1), "{keys:?}");
    assert!(keys[0].starts_with("agent/") && keys[0].ends_with("/deeplearning-agent_0.1.0-1_amd64.deb"), "{keys:?}");

    // The same blueprint again: nothing to change, nothing uploaded.
    let (code, _, err) = run(deploy(&["--yes"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("No changes: stack minimal is up to date"), "{err}");
    assert!(err.contains("Reusing agent package"), "{err}");
    assert_eq!(staging_bucket(&aws).3, 1, "the package is uploaded once");
    assert!(!err.contains("Created staging bucket"), "the bucket is created once: {err}");

    // More workers: the worker group changes, the master does not.
    let master = physical_id(&aws, "minimal", "MasterInstance");
    let (code, _, err) = run(deploy(&["--yes", "-p", "WorkerCount=3", "-p", "MaxWorkers=4"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("~ WorkerGroup"), "{err}");
    assert!(!err.contains("MasterInstance"), "the master is not touched: {err}");
    assert!(!err.contains("FormationHandle"), "nothing else is listed: {err}");
    assert_eq!(physical_id(&aws, "minimal", "MasterInstance"), master);

    // A bigger master replaces it (and its root volume): refused, then allowed.
    let bigger = blueprint(dir.path(), "cluster.yaml", |t| t.replacen("g4dn.xlarge", "g4dn.2xlarge", 1));
    assert_eq!(bigger, bp);
    let (code, _, err) = run(deploy(&["--yes", "-p", "WorkerCount=3", "-p", "MaxWorkers=4"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error: refused: MasterInstance (AWS::EC2::Instance) would be replaced"), "{err}");
    assert!(err.contains("--allow-replacement"), "{err}");
    assert!(err.contains("pin the image with `image.ami`"), "the SSM image is named as a cause: {err}");
    assert_eq!(physical_id(&aws, "minimal", "MasterInstance"), master, "nothing changed");
    let (code, _, err) = run(deploy(&["--yes", "--allow-replacement", "-p", "WorkerCount=3", "-p", "MaxWorkers=4"]));
    assert_eq!(code, 0, "{err}");
    assert_ne!(physical_id(&aws, "minimal", "MasterInstance"), master, "replaced");

    // The stack commands.
    let (code, out, err) = run(synth(&aws, key, &["outputs", "minimal", "--region", "us-east-1", "--json"]));
    assert_eq!(code, 0, "{err}");
    let outputs: serde_json::Value = serde_json::from_str(&out)?;
    assert!(outputs["SshCommand"].as_str().is_some_and(|s| s.starts_with("ssh ")), "{out}");
    let (code, out, _) = run(synth(&aws, key, &["status", "--region", "us-east-1"]));
    assert_eq!(code, 0);
    assert!(out.starts_with("minimal") && out.contains("UPDATE_COMPLETE"), "{out}");
    let (code, out, _) = run(synth(&aws, key, &["events", "minimal", "--region", "us-east-1"]));
    assert_eq!(code, 0);
    assert!(out.contains("CREATE_COMPLETE") && out.contains("FormationWaitCondition"), "{out}");

    // Delete, watched to the end.
    let (code, _, err) = run(synth(&aws, key, &["delete", "minimal", "--region", "us-east-1"]));
    assert_eq!(code, 2, "off a terminal, delete needs --yes: {err}");
    assert!(err.contains("pass --yes"), "{err}");
    let (code, _, err) = run(synth(&aws, key, &["delete", "minimal", "--region", "us-east-1", "--yes"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stack minimal deleted"), "{err}");
    assert_eq!(stack_status(&aws, "minimal"), None);
    Ok(())
}

#[test]
fn a_formation_failure_prints_the_agents_reason_first() -> TestResult {
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let running = Running::start(synth(
        &aws,
        "deployer",
        &[
            "deploy",
            "blueprints/minimal.yaml",
            "--region",
            "us-east-1",
            "-p",
            IMAGE,
            "--agent-package",
            pkg.to_str().unwrap(),
        ],
    ));
    let reason = "1 of 2 workers joined by the 30-minute deadline, at least 2 needed. We currently do not have sufficient g4dn.xlarge capacity in us-east-1a.";
    signal(&aws, "minimal", "FAILURE", reason);
    let (code, _, err) = running.finish();
    assert_eq!(code, 1, "{err}");
    let first_error = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert_eq!(first_error, format!("error: the cluster did not form: {reason}"), "{err}");
    assert!(err.contains("Rollback deleted what this operation created"), "{err}");
    assert_eq!(stack_status(&aws, "minimal").as_deref(), Some("ROLLBACK_COMPLETE"));
    eprintln!("--- what the user saw ---\n{err}");

    // A failed create cannot be updated: deploy says to delete it first.
    let (code, _, err) = run(synth(
        &aws,
        "deployer",
        &[
            "deploy",
            "blueprints/minimal.yaml",
            "--region",
            "us-east-1",
            "-p",
            IMAGE,
            "--agent-package",
            pkg.to_str().unwrap(),
        ],
    ));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("synth delete minimal --region us-east-1"), "{err}");
    Ok(())
}

#[test]
fn a_resource_failure_names_that_resource_not_the_cascade() -> TestResult {
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let reason = "Resource handler returned message: \"You have reached the maximum number of file systems\" (HandlerErrorCode: ServiceLimitExceeded)";
    aws.fail_next_create("FileSystem", reason)?;
    let (code, _, err) = run(synth(
        &aws,
        "deployer",
        &[
            "deploy",
            "blueprints/minimal.yaml",
            "--region",
            "us-east-1",
            "-p",
            IMAGE,
            "--agent-package",
            pkg.to_str().unwrap(),
            "--keep-on-failure",
        ],
    ));
    assert_eq!(code, 1, "{err}");
    let first_error = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert_eq!(first_error, format!("error: FileSystem (AWS::EFS::FileSystem) create failed: {reason}"), "{err}");
    assert!(err.contains("cancelled as a consequence"), "{err}");
    assert!(
        err.contains("nothing was rolled back") && err.contains("synth delete minimal --region us-east-1"),
        "{err}"
    );
    assert_eq!(stack_status(&aws, "minimal").as_deref(), Some("CREATE_FAILED"));
    Ok(())
}

#[test]
fn without_credentials_it_says_what_to_do() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let mut cmd = synth(&aws, "x", &["status", "--region", "us-east-1"]);
    cmd.env_remove("AWS_ACCESS_KEY_ID").env_remove("AWS_SECRET_ACCESS_KEY");
    let (code, _, err) = run(cmd);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no AWS credentials: set AWS_PROFILE") && err.contains("aws configure"), "{err}");
    Ok(())
}

#[test]
fn ctrl_c_stops_watching_not_the_stack() -> TestResult {
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let running = Running::start(synth(
        &aws,
        "watcher",
        &[
            "deploy",
            "blueprints/minimal.yaml",
            "--region",
            "us-east-1",
            "-p",
            IMAGE,
            "--agent-package",
            pkg.to_str().unwrap(),
        ],
    ));
    // Watch a stack that waits on formation for a while, counting the watcher's calls.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.stderr().contains("Ready workers") {
        assert!(Instant::now() < deadline, "no progress: {}", running.stderr());
        std::thread::sleep(Duration::from_millis(200));
    }
    let watch_start = Instant::now();
    let before: Vec<String> =
        aws.calls()?.iter().filter(|c| c["key"] == "watcher").map(|c| c["action"].to_string()).collect();
    std::thread::sleep(Duration::from_secs(45));
    let during: Vec<String> =
        aws.calls()?.iter().filter(|c| c["key"] == "watcher").map(|c| c["action"].to_string()).collect();
    let watched = watch_start.elapsed().as_secs_f64();
    let calls = during.len() - before.len();
    eprintln!(
        "watcher: {calls} calls in {watched:.0} s of an idle stack ({:.1} per minute): {:?}",
        calls as f64 * 60.0 / watched,
        &during[before.len()..]
    );
    // Backoff from 2 s to 15 s: at most ~12 polls in 45 s, each one or two calls.
    assert!(calls <= 24, "{calls} calls in {watched:.0} s");
    unsafe { libc::kill(running.child.id() as i32, libc::SIGINT) };
    let (code, _, err) = running.finish();
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("Stopped watching; the stack goes on"), "{err}");
    assert_eq!(stack_status(&aws, "minimal").as_deref(), Some("CREATE_IN_PROGRESS"));
    Ok(())
}
