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
use e2e::synth_cli::{bin as synth_bin, command as synth, command_as as synth_as};
use e2e::{Cluster, ClusterStack, Network};

type TestResult = Result<(), Box<dyn std::error::Error>>;

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
    fn finish(self) -> (i32, String, String) {
        self.finish_within(Duration::from_secs(120))
    }

    /// Waits for the exit (at most `limit`); returns (code, stdout, stderr).
    fn finish_within(mut self, limit: Duration) -> (i32, String, String) {
        let deadline = Instant::now() + limit;
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
    std::fs::write(&path, e2e::synth_cli::placeholder_deb()).unwrap();
    path
}

/// Waits until the stack's formation handle exists and PUTs `status` with `reason` to it.
fn signal(aws: &LocalAws, stack: &str, status: &str, reason: &str) {
    let url = format!("{}/_waitcondition/123456789012/us-east-1/{stack}/FormationHandle", aws.endpoint());
    // The counts the master's success signal always carries (agent
    // `cluster::formation`): synth claims a formation only from them.
    let data = r#"{"generation":1,"joined_workers":2,"min_workers":2,"nodes":3,"requested_workers":2}"#;
    let body =
        serde_json::json!({"Status": status, "Reason": reason, "UniqueId": "i-master", "Data": data}).to_string();
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
    aws.calls().unwrap().iter().filter(|c| c["principal"] == format!("user/{key}") && c["action"] == action).count()
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
        let xml = aws.signed_get("s3", &format!("/{BUCKET}?versioning")).unwrap();
        let versioning = if xml.contains("<Status>Enabled</Status>") { "Enabled".to_owned() } else { xml };
        (versioning, encryption, block, keys.len(), keys)
    })
}

/// A blueprint file: minimal.yaml with `edit` applied to its text.
fn blueprint(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> String {
    let text = std::fs::read_to_string(e2e::repo_root().join("blueprints/minimal.yaml")).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(text)).unwrap();
    path.display().to_string()
}

const IMAGE: &str = "ImageId=/e2e/ami-id";

/// `synth deploy blueprints/minimal.yaml` in us-east-1 with the test image
/// and `package`, then `extra`, calls logged under access key `key`.
fn deploy_minimal(aws: &LocalAws, key: &str, package: &Path, extra: &[&str]) -> Command {
    let mut cmd = synth(aws, key, &["deploy", "blueprints/minimal.yaml", "--region", "us-east-1", "-p", IMAGE]);
    cmd.arg("--agent-package").arg(package).args(extra);
    cmd
}

/// The two documents `synth policy --part calls|resources` prints for `args`.
fn printed_policies(args: &[&str]) -> Vec<serde_json::Value> {
    ["calls", "resources"]
        .iter()
        .map(|part| {
            let mut all = vec!["policy", "--part", part];
            all.extend_from_slice(args);
            let out = Command::new(synth_bin()).args(&all).output().expect("synth policy runs");
            assert!(out.status.success(), "synth policy: {}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_slice(&out.stdout).expect("synth policy prints JSON")
        })
        .collect()
}

/// `policies` without the statement whose `Sid` is `sid`.
fn without_statement(policies: &[serde_json::Value], sid: &str) -> Vec<serde_json::Value> {
    let mut policies = policies.to_vec();
    let mut removed = 0;
    for policy in &mut policies {
        let statements = policy["Statement"].as_array_mut().unwrap();
        let before = statements.len();
        statements.retain(|s| s["Sid"] != sid);
        removed += before - statements.len();
    }
    assert_eq!(removed, 1, "one statement {sid} in {policies:?}");
    policies
}

/// The whole lifecycle, run by a user whose only permissions are what
/// `synth policy` prints (moto checks each of synth's calls against it;
/// what CloudFormation then does on the user's behalf it does not check,
/// see `synth::deploy::policy`); and a user without the statement that
/// allows changing stacks is told which action is missing.
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
    let policy = printed_policies(&["--stack-name-prefix", "minimal", "--region", "us-east-1"]);
    let secret = aws.user_with_policies(key, &policy)?;
    let synth = |_: &LocalAws, _: &str, args: &[&str]| synth_as(&aws, &secret, args);
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
    assert!(err.contains("Formed the cluster: 3 nodes, 2 of 2 workers joined (the master's signal)"), "{err}");
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
    assert!(err.contains("Keeping image ami-"), "the image is not the cause: {err}");
    assert!(!err.contains("pin the image"), "{err}");
    assert_eq!(physical_id(&aws, "minimal", "MasterInstance"), master, "nothing changed");
    let (code, _, err) = run(deploy(&["--yes", "--allow-replacement", "-p", "WorkerCount=3", "-p", "MaxWorkers=4"]));
    assert_eq!(code, 0, "{err}");
    assert_ne!(physical_id(&aws, "minimal", "MasterInstance"), master, "replaced");

    // The stack commands.
    let (code, out, err) = run(synth(&aws, key, &["outputs", "minimal", "--region", "us-east-1", "--json"]));
    assert_eq!(code, 0, "{err}");
    let outputs: serde_json::Value = serde_json::from_str(&out)?;
    // minimal.yaml has no key pair and no SSH range: ssh cannot work, and
    // the output says why instead of a command `synth ssh` would refuse.
    assert!(
        outputs["SshCommand"].as_str().is_some_and(|s| s.starts_with("none: its KeyName parameter is empty")),
        "{out}"
    );
    let (code, out, _) = run(synth(&aws, key, &["status", "--region", "us-east-1"]));
    assert_eq!(code, 0);
    assert!(out.starts_with("minimal") && out.contains("UPDATE_COMPLETE"), "{out}");
    let (code, out, _) = run(synth(&aws, key, &["events", "minimal", "--region", "us-east-1"]));
    assert_eq!(code, 0);
    assert!(out.contains("CREATE_COMPLETE") && out.contains("FormationWaitCondition"), "{out}");
    let (code, out, err) = run(synth(&aws, key, &["status", "minimal", "--region", "us-east-1"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("UPDATE_COMPLETE"), "{out}");
    let (code, _, err) = run(synth(&aws, key, &["logs", "minimal", "--region", "us-east-1"]));
    assert!(!err.contains("refused"), "synth logs is allowed: {err}");
    assert!(code == 0 || code == 1, "{err}");
    let (code, out, err) = run(synth(&aws, key, &["stage", pkg, "--region", "us-east-1"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("agent_package_url: s3://"), "{out}");
    let diff = ["diff", &bp, "--region", "us-east-1", "-p", IMAGE, "--agent-package", pkg, "-p", "WorkerCount=2"];
    let (code, out, err) = run(synth(&aws, key, &diff));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("~ WorkerGroup"), "{out}\n{err}");
    assert!(aws.refused().is_empty(), "the policy allowed every call: {:?}", aws.refused());

    // Without the statement that changes stacks, diff names the action it lacks.
    let narrow = without_statement(&policy, "SynthChangesStacks");
    let narrow_key = aws.user_with_policies("deployer-without-changes", &narrow)?;
    let (code, _, err) = run(synth_as(&aws, &narrow_key, &diff));
    assert_eq!(code, 2, "{err}");
    let error: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        error,
        ["error: CloudFormation CreateChangeSet on stack minimal: AWS refused cloudformation:CreateChangeSet to \
          user/deployer-without-changes: the deploying user's policy lacks it; `synth policy` prints the policy \
          this release needs"],
        "{err}"
    );

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

/// The `.deb` that `packaging/build --debug` makes from the debug binaries
/// (the same packaging as a release, without a release build): made when
/// missing or older than either binary.
fn debug_package() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let target = exe.ancestors().nth(3).expect("a target dir").to_owned();
    let deb = target.join("package-debug/deeplearning-agent_0.1.0-1_amd64.deb");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = ["agent", "trainer"]
        .iter()
        .all(|b| matches!((modified(&deb), modified(&target.join("debug").join(b))), (Some(d), Some(b)) if d >= b));
    if !fresh {
        let out = Command::new(e2e::repo_root().join("packaging/build"))
            .arg("--debug")
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("packaging/build runs");
        assert!(out.status.success(), "packaging/build --debug failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(deb.exists(), "{} was not made", deb.display());
    deb
}

/// `synth deploy` of an example blueprint is what the nodes boot from: each
/// namespace node gets the user data of the launch template moto holds,
/// downloads the agent package deploy staged (`aws s3 cp`), checks it and
/// installs it with apt-get in its own layer (`e2e::boot`), and runs the
/// installed agent; the master's formation signal completes the stack that
/// deploy is watching. Also measures the watcher's AWS calls per minute.
#[test]
fn a_deployed_blueprint_boots_nodes_that_install_the_staged_package_and_form() -> TestResult {
    let deb = debug_package();
    let network = Network::create(3)?;
    let aws = LocalAws::start_holding(network.host_ip().into())?;
    ensure_image_parameter(&aws)?;
    let key = "deployer";
    let running = Running::start(deploy_minimal(&aws, key, &deb, &[]));

    // moto creates every resource within CreateStack, then holds the stack on its wait condition.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stack = loop {
        let stack = runtime().block_on(ClusterStack::describe(&aws, "minimal"));
        if let Ok(stack) = stack
            && ["MasterInstance", "WorkerGroup", "MasterLaunchTemplate", "WorkerLaunchTemplate"]
                .iter()
                .all(|r| stack.resources.contains_key(*r))
        {
            break stack;
        }
        assert!(Instant::now() < deadline, "no stack from synth deploy: {}", running.stderr());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(stack_status(&aws, "minimal").as_deref(), Some("CREATE_IN_PROGRESS"), "held on formation");
    let cluster = runtime().block_on(Cluster::adopt(network, aws, stack))?;
    // EC2 instances take about a minute to boot: so do these, and the
    // watcher settles into its slowest polling, whose rate is measured below.
    std::thread::sleep(Duration::from_secs(60));
    let boots = cluster.nodes().iter().map(|n| n.boot()).collect::<Result<Vec<_>, _>>()?;

    let (code, out, err) = running.finish_within(Duration::from_secs(300));
    let logs = || boots.iter().map(|b| format!("--- {}\n{}", b.log_path().display(), b.log())).collect::<String>();
    assert_eq!(code, 0, "{err}\n{}", logs());
    assert!(err.contains("Uploaded agent package deeplearning-agent_0.1.0-1_amd64.deb"), "{err}");
    assert!(err.contains("Formed the cluster: 3 nodes, 2 of 2 workers joined (the master's signal)"), "{err}");
    assert!(out.lines().any(|l| l.starts_with("MasterAddress")), "{out}");
    assert_eq!(stack_status(cluster.aws(), "minimal").as_deref(), Some("CREATE_COMPLETE"));
    // The phase table, from the timeline summary in the master's signal:
    // deploy prints it once formed, status whenever asked.
    let registered_row = |text: &str| {
        assert!(text.contains("Formation (seconds after the first launch or boot the master knows of):"), "{text}");
        let row = text.lines().map(str::trim_start).find(|l| l.starts_with("registered ")).unwrap_or_default();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.len(), 5, "phase, nodes, median, slowest, slowest node: {text}");
        assert_eq!(cells[1], "3", "the master and both workers registered: {text}");
        assert!(cells[4].starts_with("deeplearning-worker"), "{text}");
        row.to_owned()
    };
    let from_deploy = registered_row(&err);
    eprintln!(
        "--- deploy's phase table ---\n{}",
        err.lines().skip_while(|l| !l.starts_with("Formation")).collect::<Vec<_>>().join("\n")
    );
    // The deploy's calls end here: `synth status` below is not its watcher.
    let deploy_calls = cluster.aws().calls()?.into_iter().filter(|c| c["principal"] == format!("user/{key}")).count();
    let (code, status, status_err) = run(synth(cluster.aws(), key, &["status", "minimal", "--region", "us-east-1"]));
    assert_eq!(code, 0, "{status_err}");
    assert_eq!(registered_row(&status), from_deploy, "the same signal: {status}");
    let signals = cluster.aws().signals("minimal")?;
    assert!(
        signals.iter().any(|s| s["Status"] == "SUCCESS" && s["Reason"].as_str().is_some_and(|r| r.contains("2 of 2"))),
        "{signals:?}"
    );
    eprintln!("--- the master's boot ---\n{}", boots[0].log().lines().take(30).collect::<Vec<_>>().join("\n"));
    for boot in &boots {
        let log = boot.log();
        assert!(log.contains("Setting up deeplearning-agent (0.1.0-1)"), "installed by apt-get: {log}");
        assert!(log.contains("boot: deeplearning-agent.service enabled"), "{log}");
        assert!(log.contains("boot: starting the installed agent"), "{log}");
    }
    // Every node applies the manifest: the workers file lists all three, the master first.
    for node in cluster.nodes() {
        let path = node.root().join("opt/deeplearning/workers");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.lines().count() == 3 {
                assert!(text.starts_with("deeplearning-worker1\n"), "the master is worker 1: {text}");
                break;
            }
            assert!(Instant::now() < deadline, "{} on {}: {text:?}\n{}", path.display(), node.hostname(), logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // Each node's boot output (cloud-init's log) is in its log stream, the
    // package's installation included.
    let group = runtime().block_on(cluster.aws().log_group_of("minimal"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let streams = runtime().block_on(cluster.aws().log_streams(&group))?.unwrap_or_default();
        let installed = |id: &str| {
            streams
                .iter()
                .filter(|(name, _)| node_contract::logs::parse_stream_name(name).is_some_and(|(_, of)| of == id))
                .flat_map(|(_, lines)| lines)
                .any(|l| l.starts_with("[boot] ") && l.contains("Setting up deeplearning-agent (0.1.0-1)"))
        };
        let missing: Vec<String> =
            cluster.nodes().iter().map(|n| n.instance_id()).filter(|id| !installed(id)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no boot output in {missing:?}'s streams: {:?}", streams.keys());
        std::thread::sleep(Duration::from_millis(500));
    }

    // The watcher's calls, from CreateStack to the end, per minute.
    let calls: Vec<serde_json::Value> = cluster
        .aws()
        .calls()?
        .into_iter()
        .filter(|c| c["principal"] == format!("user/{key}"))
        .take(deploy_calls)
        .collect();
    let start = calls.iter().find(|c| c["action"] == "CreateStack").and_then(|c| c["t"].as_f64()).unwrap_or(0.0);
    let watched: Vec<&serde_json::Value> = calls.iter().filter(|c| c["t"].as_f64().unwrap_or(0.0) > start).collect();
    let span = watched.last().and_then(|c| c["t"].as_f64()).unwrap_or(start) - start;
    let mut by_action = std::collections::BTreeMap::<String, usize>::new();
    for c in &watched {
        *by_action.entry(c["action"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
    }
    let per_minute = watched.len() as f64 * 60.0 / span.max(1.0);
    eprintln!(
        "watcher: {} calls in {span:.0} s of a deploy waiting on formation ({per_minute:.1} per minute): {by_action:?}",
        watched.len()
    );
    // Polls back off from 2 s to 15 s (events; the worker group every 15 s while
    // forming): about 8 a minute once settled, more in the first seconds.
    assert!(per_minute <= 15.0, "{per_minute:.1} calls per minute: {by_action:?}");
    Ok(())
}

#[test]
fn a_formation_failure_prints_the_agents_reason_first() -> TestResult {
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let running = Running::start(deploy_minimal(&aws, "deployer", &pkg, &[]));
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
    let (code, _, err) = run(deploy_minimal(&aws, "deployer", &pkg, &[]));
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
    let (code, _, err) = run(deploy_minimal(&aws, "deployer", &pkg, &["--keep-on-failure"]));
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

/// The console route: `synth stage` uploads the package once and prints the
/// blueprint lines; with them the blueprint builds without the warning.
#[test]
fn stage_uploads_once_and_prints_the_lines_a_blueprint_needs() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let stage = || synth(&aws, "stager", &["stage", pkg.to_str().unwrap(), "--region", "us-east-1"]);
    let (code, out, err) = run(stage());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("Created staging bucket") && err.contains("Uploaded agent package"), "{err}");
    // The digest as coreutils computes it, not by synth's own code.
    let sum = std::process::Command::new("sha256sum").arg(&pkg).output()?;
    assert!(sum.status.success(), "sha256sum: {}", String::from_utf8_lossy(&sum.stderr));
    let sum = String::from_utf8(sum.stdout)?;
    let sha = sum.split_whitespace().next().expect("sha256sum prints the digest first");
    assert_eq!(
        out,
        format!(
            "image:\n  agent_package_url: s3://{BUCKET}/agent/{sha}/deeplearning-agent_0.1.0-1_amd64.deb\n  \
             agent_package_sha256: {sha}\n"
        )
    );
    let (code, again, err) = run(stage());
    assert_eq!((code, &again), (0, &out), "{err}");
    assert!(err.contains("Reusing agent package") && !err.contains("Uploaded"), "{err}");
    assert_eq!(staging_bucket(&aws).3, 1, "uploaded once");

    let before = blueprint(dir.path(), "console.yaml", |t| t);
    let (_, _, err) = run(synth(&aws, "stager", &["validate", &before, "--region", "us-east-1"]));
    assert!(err.contains("would fail to form"), "{err}");
    let after = blueprint(dir.path(), "console.yaml", |t| t + &out);
    let (code, _, err) = run(synth(&aws, "stager", &["validate", &after, "--region", "us-east-1"]));
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("would fail to form"), "{err}");
    Ok(())
}

/// A user without one statement of `synth policy` is told, in one line
/// (exit 2, as for any AWS error), which action AWS refused and to whom,
/// and where the policy is: S3, whose HEAD answer names nothing, through
/// the action synth knows the call needs; CloudFormation in AWS's words.
#[test]
fn a_user_without_a_statement_is_told_the_missing_action() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let pkg = pkg.to_str().unwrap();
    let policy = printed_policies(&["--region", "us-east-1"]);
    let rows: [(&str, &[&str], &str); 2] = [
        (
            "SynthStagingBucket",
            &["stage", pkg, "--region", "us-east-1"],
            // HeadBucket passes without it: FSx for Lustre's import needs
            // s3:ListBucket on any bucket (its own statement), so the first
            // call refused is the bucket's creation.
            "error: S3 CreateBucket on bucket deeplearning-cluster-staging-123456789012-us-east-1: AWS refused \
             s3:CreateBucket (AccessDenied: Access Denied): the deploying user's policy may lack it; `synth policy` \
             prints the policy this release needs",
        ),
        (
            "SynthAny",
            &["status", "--region", "us-east-1"],
            "error: CloudFormation DescribeStacks: AWS refused cloudformation:DescribeStacks to user/without-SynthAny: \
             the deploying user's policy lacks it; `synth policy` prints the policy this release needs",
        ),
    ];
    for (sid, args, says) in rows {
        let key = aws.user_with_policies(&format!("without-{sid}"), &without_statement(&policy, sid))?;
        let (code, out, err) = run(synth_as(&aws, &key, args));
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors, [says], "without {sid}: {err}");
        assert!(!err.contains("caused by") && !err.contains("Error {"), "no SDK dump: {err}");
        // With the whole policy the same command goes past that call.
        let key = aws.user_with_policies(&format!("with-{sid}"), &policy)?;
        let (code, _, err) = run(synth_as(&aws, &key, args));
        assert_eq!(code, 0, "{err}");
    }
    Ok(())
}

/// Stack minimal deployed in `aws` (which completes it at once) with a
/// package in a temporary directory: the directory, the package, stdout.
fn created_minimal(aws: &LocalAws) -> Result<(tempfile::TempDir, PathBuf, String), Box<dyn std::error::Error>> {
    ensure_image_parameter(aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let (code, out, err) = run(deploy_minimal(aws, "deployer", &pkg, &[]));
    assert_eq!(code, 0, "{err}");
    Ok((dir, pkg, out))
}

/// Ctrl-C at the update's prompt (on a terminal: `script` gives synth a
/// pseudo-terminal, and the ^C typed into it is the SIGINT) deletes the
/// change set that was never executed, and nothing changes.
#[test]
fn ctrl_c_at_the_prompt_deletes_the_change_set() -> TestResult {
    use std::io::Write;
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let (_dir, pkg, _) = created_minimal(&aws)?;

    // The same command, run by script with the same environment.
    let resize = deploy_minimal(&aws, "deployer", &pkg, &["-p", "WorkerCount=3", "-p", "MaxWorkers=3"]);
    let mut running = in_a_terminal(&resize, 200, 50);
    let deadline = Instant::now() + Duration::from_secs(60);
    let out = || std::fs::read_to_string(&running.out).unwrap_or_default();
    while !out().contains("Apply these changes to stack minimal? [y/N]") {
        assert!(Instant::now() < deadline, "no prompt: {}", out());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(out().contains("~ WorkerGroup"), "{}", out());
    let sets = runtime().block_on(aws.cloudformation().list_change_sets().stack_name("minimal").send())?;
    assert_eq!(sets.summaries().len(), 1, "the change set waits for the answer");
    running.child.stdin.take().expect("script's stdin").write_all(b"\x03")?;
    let (code, out, _) = running.finish();
    assert_eq!(code, 130, "{out}");
    assert!(out.contains("Interrupted: nothing was changed (the change set was deleted)."), "{out}");
    let sets = runtime().block_on(aws.cloudformation().list_change_sets().stack_name("minimal").send())?;
    assert!(sets.summaries().is_empty(), "{:?}", sets.summaries());
    let group = physical_id(&aws, "minimal", "WorkerGroup");
    let desired = runtime().block_on(aws.auto_scaling_group(&group))?.desired_capacity();
    assert_eq!(desired, Some(2), "nothing was applied");
    Ok(())
}

/// The image a stack was created with is the image its updates keep: the
/// SSM parameter names a newer image between the create and a resize, and
/// the resize keeps the AMI the create resolved (the master untouched);
/// with --update-image the preview says the master would be replaced.
#[test]
fn an_update_keeps_the_image_the_stack_was_created_with() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let (_dir, pkg, out) = created_minimal(&aws)?;
    let output = |out: &str| -> Option<String> {
        out.lines().find_map(|l| l.strip_prefix("ImageAmi").map(|v| v.trim().to_owned()))
    };
    let created = output(&out).expect("the stack records its image");
    assert!(created.starts_with("ami-"), "{out}");

    // AWS publishes a newer image under the parameter.
    let images = aws.query("ec2", &[("Action", "DescribeImages"), ("Version", "2016-11-15")])?;
    let newer = images
        .split("<imageId>")
        .skip(1)
        .filter_map(|rest| rest.split("</imageId>").next())
        .find(|id| *id != created)
        .expect("moto lists a second image")
        .to_owned();
    let body = serde_json::json!({"Name": IMAGE_PARAMETER, "Value": newer, "Type": "String", "Overwrite": true});
    aws.json_call("ssm", "AmazonSSM.PutParameter", &body)?;

    // A resize keeps the image: the master is not touched.
    let master = physical_id(&aws, "minimal", "MasterInstance");
    let resize = ["-p", "WorkerCount=3", "-p", "MaxWorkers=3"];
    let (code, _, err) = run(synth(
        &aws,
        "deployer",
        &[
            "diff",
            "blueprints/minimal.yaml",
            "--region",
            "us-east-1",
            "-p",
            IMAGE,
            "-p",
            "WorkerCount=3",
            "-p",
            "MaxWorkers=3",
            "--agent-package",
            pkg.to_str().unwrap(),
        ],
    ));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("Keeping image {created}, the one stack minimal was created with")), "{err}");
    let mut args = vec!["--yes"];
    args.extend(resize);
    let (code, _, err) = run(deploy_minimal(&aws, "deployer", &pkg, &args));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("Keeping image {created}")), "{err}");
    assert!(err.contains("~ WorkerGroup") && !err.contains("MasterInstance"), "the master is not touched: {err}");
    assert_eq!(physical_id(&aws, "minimal", "MasterInstance"), master);
    let (_, out, _) = run(synth(&aws, "deployer", &["outputs", "minimal", "--region", "us-east-1"]));
    assert_eq!(output(&out).as_deref(), Some(created.as_str()), "the recorded image stays: {out}");

    // Asked for the newer image: the preview says the master is replaced,
    // and without --allow-replacement nothing changes.
    args.push("--update-image");
    let (code, _, err) = run(deploy_minimal(&aws, "deployer", &pkg, &args));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error: refused: MasterInstance (AWS::EC2::Instance) would be replaced"), "{err}");
    assert!(
        err.contains("--update-image boots the master from the image the ImageId SSM parameter names now"),
        "{err}"
    );
    assert!(!err.contains("Keeping image"), "{err}");
    assert_eq!(physical_id(&aws, "minimal", "MasterInstance"), master, "nothing changed");
    let sets = runtime().block_on(aws.cloudformation().list_change_sets().stack_name("minimal").send())?;
    let open: Vec<_> = sets
        .summaries()
        .iter()
        .filter(|s| s.execution_status() != Some(&aws_sdk_cloudformation::types::ExecutionStatus::ExecuteComplete))
        .collect();
    assert!(open.is_empty(), "the refused change set is deleted: {open:?}");
    Ok(())
}

/// `cmd` run in a pseudo-terminal of `cols` x `rows` (`script(1)`: no
/// crate to build), with `cmd`'s environment; the terminal's bytes go to
/// the returned [`Running`]'s stdout file.
fn in_a_terminal(cmd: &Command, cols: u16, rows: u16) -> Running {
    in_a_terminal_then(cmd, cols, rows, "")
}

/// [`in_a_terminal`], with `shell_tail` after the command line (a
/// redirection, a pipe).
fn in_a_terminal_then(cmd: &Command, cols: u16, rows: u16, shell_tail: &str) -> Running {
    let mut line = vec![synth_bin().display().to_string()];
    line.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    let shell = format!("stty cols {cols} rows {rows} && exec {}{shell_tail}", line.join(" "));
    let mut script = Command::new("script");
    script.args(["-qfec", &shell, "/dev/null"]).current_dir(e2e::repo_root()).stdin(Stdio::piped());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => script.env(k, v),
            None => script.env_remove(k),
        };
    }
    Running::start(script)
}

/// What follows the first `needle` in `text`, to the end of its line.
fn after_first<'t>(text: &'t str, needle: &str) -> Option<&'t str> {
    let at = text.find(needle)? + needle.len();
    Some(text[at..].lines().next().unwrap_or_default())
}

/// The terminal after `bytes`, as vt100 renders them on a `cols` x `rows`
/// screen (its `screen()`).
fn screen(bytes: &[u8], cols: u16, rows: u16) -> vt100::Parser {
    let size = |n: u16| std::num::NonZeroU16::new(n).expect("a terminal has a size");
    let mut parser = vt100::Parser::new(size(rows), size(cols), 0);
    parser.process(bytes);
    parser
}

/// The spinner's frames as synth draws them (its finished state, a space,
/// left out): written out here, as a user sees them, not borrowed from synth.
const SPINNER: &str = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏";

/// The seconds on the live line's clock (`41s`, `1m 05s`).
fn clock_of(line: &str) -> Option<u64> {
    let mut words = line.split_whitespace().skip(1);
    let first = words.next()?;
    if let Some(m) = first.strip_suffix('m') {
        let s = words.next()?.strip_suffix('s')?;
        return Some(m.parse::<u64>().ok()? * 60 + s.parse::<u64>().ok()?);
    }
    first.strip_suffix('s')?.parse().ok()
}

/// What a person sees while a create waits for the formation, in a
/// pseudo-terminal of 70 columns, sampled every 200 ms for 6 s: one status
/// line, whose clock counts each second (never a jump of more than one
/// second between samples, and at least four seconds counted), no
/// spinner frame left on any other line, the live line narrower than the
/// terminal and the story lines whole; then the master signals and it ends 0.
#[test]
fn progress_on_a_terminal_is_one_line_whose_clock_ticks() -> TestResult {
    let (cols, rows) = (70, 30);
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let running = in_a_terminal(&deploy_minimal(&aws, "deployer", &pkg, &[]), cols, rows);
    let bytes = || std::fs::read(&running.out).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&bytes()).contains("formation") {
        assert!(Instant::now() < deadline, "no formation phase: {}", String::from_utf8_lossy(&bytes()));
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut clocks = Vec::new();
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(200));
        let parser = screen(&bytes(), cols, rows);
        let screen = parser.screen();
        let lines: Vec<String> = screen.rows(0, cols).collect();
        let text = lines.join("\n");
        let spinners: Vec<&String> = lines.iter().filter(|l| l.starts_with(|c| SPINNER.contains(c))).collect();
        assert_eq!(spinners.len(), 1, "one status line, no leftover frames:\n{text}");
        assert!(
            lines.iter().all(|l| !l.trim_start().starts_with(|c| SPINNER.contains(c)) || l.starts_with(|c| SPINNER.contains(c))),
            "{text}"
        );
        // The live line alone is cut to the terminal's width: it is drawn
        // again in place. Story lines go to the scrollback whole (issue 35),
        // wrapping where they are wider.
        let live = spinners[0].trim_end().chars().count();
        assert!(live < usize::from(cols), "the live line is as wide as the terminal: {:?}\n{text}", spinners[0]);
        assert!(spinners[0].contains("formation"), "{text}");
        clocks.push(clock_of(spinners[0]).unwrap_or_else(|| panic!("no clock: {text}")));
    }
    let steps: Vec<u64> = clocks.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steps.iter().all(|s| *s <= 1), "the clock jumps: {clocks:?}");
    assert!(clocks[clocks.len() - 1] - clocks[0] >= 4, "the clock counts each second: {clocks:?}");
    signal(&aws, "minimal", "SUCCESS", "2 of 2 workers joined; the cluster has 3 nodes, the master included");
    let (code, out, _) = running.finish();
    assert_eq!(code, 0, "{out}");
    let end = screen(out.as_bytes(), cols, rows);
    let text: Vec<String> = end.screen().rows(0, cols).collect();
    assert!(text.iter().all(|l| !l.starts_with(|c| SPINNER.contains(c))), "the live line is gone: {text:#?}");
    assert!(text.iter().any(|l| l.contains("Formed the cluster: 3 nodes")), "{text:#?}");
    // Whole, across rows: the package's S3 URL (about 150 characters, the
    // story's longest line, still on the screen at the end), not cut at 70.
    let contents = end.screen().contents();
    let url = after_first(&contents, "s3://deeplearning-cluster-staging-123456789012-us-east-1/agent/");
    assert!(url.is_some_and(|rest| rest.contains("/deeplearning-agent_0.1.0-1_amd64.deb")), "cut: {contents}");
    assert!(!contents.contains('…'), "cut: {contents}");
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
    let running = Running::start(deploy_minimal(&aws, "watcher", &pkg, &[]));
    // Watch a stack that waits on formation for a while, counting the watcher's calls.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.stderr().contains("Ready workers") {
        assert!(Instant::now() < deadline, "no progress: {}", running.stderr());
        std::thread::sleep(Duration::from_millis(200));
    }
    let watch_start = Instant::now();
    let before: Vec<String> =
        aws.calls()?.iter().filter(|c| c["principal"] == "user/watcher").map(|c| c["action"].to_string()).collect();
    std::thread::sleep(Duration::from_secs(45));
    let during: Vec<String> =
        aws.calls()?.iter().filter(|c| c["principal"] == "user/watcher").map(|c| c["action"].to_string()).collect();
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

/// What an agent does (the other side of `synth logs`): creates the group
/// and the stream when missing and puts `lines` (unix ms, text) there, over
/// CloudWatch Logs' own API on this moto.
fn put_lines(aws: &LocalAws, group: &str, stream: &str, lines: &[(i64, &str)]) {
    let create = |target: &str, body: serde_json::Value| {
        if let Err(e) = aws.json_call("logs", target, &body) {
            assert!(e.to_string().contains("ResourceAlreadyExistsException"), "{target}: {e}");
        }
    };
    create("Logs_20140328.CreateLogGroup", serde_json::json!({"logGroupName": group}));
    create("Logs_20140328.CreateLogStream", serde_json::json!({"logGroupName": group, "logStreamName": stream}));
    let events: Vec<_> = lines.iter().map(|(t, m)| serde_json::json!({"timestamp": t, "message": m})).collect();
    let answer = aws
        .json_call(
            "logs",
            "Logs_20140328.PutLogEvents",
            &serde_json::json!({"logGroupName": group, "logStreamName": stream, "logEvents": events}),
        )
        .expect("PutLogEvents");
    assert!(answer.get("rejectedLogEventsInfo").is_none(), "{answer}");
}

/// The text after ` | ` of each line, and each line's node column.
fn messages(out: &str) -> Vec<(String, String)> {
    out.lines()
        .map(|l| {
            let (head, message) = l.split_once(" | ").unwrap_or_else(|| panic!("no ` | ` in {l:?}"));
            (head.split_whitespace().nth(1).unwrap_or_default().to_owned(), message.to_owned())
        })
        .collect()
}

/// `synth logs` reads a stack's nodes' lines by the stack's name alone:
/// merged in time order, each prefixed by its node in one column width,
/// `--node` in each of its forms, `--since`; a deleted stack's logs read
/// the same, without a CloudFormation call; a stack without a group is
/// named as such (exit 1).
#[test]
fn logs_merge_the_nodes_lines_by_the_stacks_name() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    // A stack that lived and was deleted: its group (kept by the template)
    // is all that is left.
    let cfn = aws.cloudformation();
    let template = r#"{"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}}"#;
    runtime().block_on(cfn.create_stack().stack_name("gone").template_body(template).send())?;
    runtime().block_on(cfn.delete_stack().stack_name("gone").send())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while stack_status(&aws, "gone").is_some_and(|s| s != "DELETE_COMPLETE") {
        assert!(Instant::now() < deadline, "stack gone is not deleted");
        std::thread::sleep(Duration::from_millis(200));
    }
    // An earlier stack of the same name left a group too: the newest is read.
    put_lines(&aws, "/deeplearning-cluster/gone/a-earlier-run", "master-i-0999", &[(now_ms(), "earlier stack")]);
    std::thread::sleep(Duration::from_millis(20));
    let group = "/deeplearning-cluster/gone/b-this-run";
    let t = now_ms() - 60_000;
    put_lines(
        &aws,
        group,
        "master-i-0aaa",
        &[(t - 1_200_000, "master: old"), (t, "master: up"), (t + 3_000, "master: formed")],
    );
    put_lines(&aws, group, "worker2-i-0bbb", &[(t + 1_000, "worker2: registered"), (t + 2_000, "worker2: applied")]);
    put_lines(&aws, group, "worker-i-0ccc", &[(t + 1_500, "unnumbered: waiting")]);

    let key = "reader";
    let logs = |extra: &[&str]| {
        let mut args = vec!["logs", "gone", "--region", "us-east-1"];
        args.extend_from_slice(extra);
        run(synth(&aws, key, &args))
    };
    let (code, out, err) = logs(&[]);
    assert_eq!(code, 0, "{err}");
    eprintln!("--- synth logs gone ---\n{out}");
    assert!(err.contains("note: 1 earlier stack(s) named gone left logs too") && err.contains(group), "{err}");
    let got = messages(&out);
    let want = [
        ("master", "master: old"),
        ("master", "master: up"),
        ("worker2", "worker2: registered"),
        ("worker", "unnumbered: waiting"),
        ("worker2", "worker2: applied"),
        ("master", "master: formed"),
    ];
    assert_eq!(got, want.map(|(n, m)| (n.to_owned(), m.to_owned())), "{out}");
    // One column width, UTC to the millisecond.
    let columns: std::collections::BTreeSet<usize> = out.lines().map(|l| l.find(" | ").unwrap()).collect();
    assert_eq!(columns.len(), 1, "{out}");
    assert!(out.lines().all(|l| l.len() > 24 && l.as_bytes()[10] == b'T' && &l[23..24] == "Z"), "{out}");
    // `--all` is the default, said out loud.
    assert_eq!(logs(&["--all"]).1, out);

    // --node: a label, a worker's number, an instance id.
    for node in ["worker2", "2", "i-0bbb"] {
        let (code, out, err) = logs(&["--node", node]);
        assert_eq!(code, 0, "{err}");
        let got: Vec<String> = messages(&out).into_iter().map(|(_, m)| m).collect();
        assert_eq!(got, ["worker2: registered", "worker2: applied"], "--node {node}: {out}");
    }
    let (code, out, err) = logs(&["--node", "7"]);
    assert_eq!((code, out.as_str()), (3, ""), "not found: {err}");
    assert!(
        err.contains(
            "no logs from node 7 in /deeplearning-cluster/gone/b-this-run: the nodes with logs are master, worker2, worker"
        ),
        "{err}"
    );

    // --since: a duration and an RFC 3339 time.
    let (code, out, err) = logs(&["--since", "10m"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(messages(&out).len(), 5, "the 20-minute-old line is left out: {out}");
    let (_, out, _) = logs(&["--since", &format_rfc3339(t + 1_500)]);
    let got: Vec<String> = messages(&out).into_iter().map(|(_, m)| m).collect();
    assert_eq!(got, ["unnumbered: waiting", "worker2: applied", "master: formed"], "{out}");
    let (code, _, err) = logs(&["--since", "yesterday"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("10m, 2h, 1d") && err.contains("RFC 3339"), "{err}");

    // Found by name alone: not one CloudFormation call.
    let calls = aws.calls()?;
    let ours: Vec<&serde_json::Value> = calls.iter().filter(|c| c["principal"] == format!("user/{key}")).collect();
    assert!(ours.iter().any(|c| c["action"] == "FilterLogEvents"), "{ours:?}");
    assert!(ours.iter().all(|c| c["service"] != "cloudformation"), "{ours:?}");

    // A valid query with an empty answer: one line on stderr, exit 0.
    let (code, out, err) = logs(&["--since", "2099-01-01T00:00:00Z"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(
        err.ends_with("no log lines since 2099-01-01T00:00:00Z in /deeplearning-cluster/gone/b-this-run\n"),
        "{err}"
    );

    // No group: said plainly, exit 3 (not found).
    let (code, out, err) = run(synth(&aws, key, &["logs", "never", "--region", "us-east-1"]));
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert_eq!(
        err.trim(),
        "error: no logs for stack never in region us-east-1: no log group starts with /deeplearning-cluster/never/ \
         (was the stack created by an older synth, or in another region?)"
    );
    Ok(())
}

/// The stack commands write through cli-output, as `synth build` does:
/// into a pipe whose reader has gone they end quietly (exit 0), onto a full
/// disk they say what they could not write (exit 2), and a report that
/// could not be written on stderr turns exit 1 into 2; never a panic.
#[test]
fn stack_commands_into_a_closed_pipe_or_onto_a_full_disk() -> TestResult {
    use cli_output::testkit::{closed_pipe, full_disk, run_case, stderr_to, stdout_to};
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let template = r#"{"Description": "Built by synth, for the hostile rows",
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"QueueUrl": {"Value": {"Ref": "Queue"}}}}"#;
    runtime().block_on(aws.cloudformation().create_stack().stack_name("piped").template_body(template).send())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while stack_status(&aws, "piped").as_deref() != Some("CREATE_COMPLETE") {
        assert!(Instant::now() < deadline, "stack piped is not created");
        std::thread::sleep(Duration::from_millis(200));
    }
    put_lines(&aws, "/deeplearning-cluster/piped/run-1", "master-i-0aaa", &[(now_ms(), "master: up")]);
    type Place = fn() -> Stdio;
    let (closed_pipe, full_disk): ((&str, Place), (&str, Place)) =
        (("a closed pipe", closed_pipe), ("/dev/full", full_disk));
    // The arguments, where stdout goes, the exit code, what stderr says.
    type Row = (&'static [&'static str], (&'static str, Place), i32, &'static str);
    let rows: [Row; 12] = [
        (&["logs", "piped"], closed_pipe, 0, ""),
        (&["logs", "piped"], full_disk, 2, "error: cannot write the lines to standard output: No space left on device"),
        (&["events", "piped"], closed_pipe, 0, ""),
        (&["events", "piped"], full_disk, 2, "error: cannot write the events to standard output: No space left"),
        (&["status", "piped"], closed_pipe, 0, ""),
        (&["status", "piped"], full_disk, 2, "error: cannot write the status to standard output: No space left"),
        (&["status"], closed_pipe, 0, ""),
        (&["status"], full_disk, 2, "error: cannot write the stacks to standard output: No space left"),
        (&["outputs", "piped"], closed_pipe, 0, ""),
        (&["outputs", "piped", "--json"], full_disk, 2, "error: cannot write the outputs to standard output"),
        (&["logs", "never"], closed_pipe, 3, "error: no logs for stack never"),
        (&["events", "never"], full_disk, 3, "error: no stack never in us-east-1"),
    ];
    for (args, (place, to), code, says) in rows {
        let mut all = args.to_vec();
        all.extend(["--region", "us-east-1"]);
        let mut cmd = stdout_to(synth(&aws, "hostile", &all), to());
        cmd.stderr(Stdio::piped());
        let name = format!("synth {} into {place}", all.join(" "));
        run_case(&mut cmd, Duration::from_secs(60), &name, code, says);
    }
    // The report of a stack without logs (exit 3) cannot be written: exit 2.
    let mut cmd = stderr_to(synth(&aws, "hostile", &["logs", "never", "--region", "us-east-1"]), (full_disk.1)());
    cmd.stdout(Stdio::piped());
    let out = run_case(&mut cmd, Duration::from_secs(60), "synth logs never 2> /dev/full", 2, "");
    assert!(out.stdout.is_empty());
    Ok(())
}

/// `2026-11-25T20:00:01.500Z` for unix milliseconds (through the SDK's
/// date type, as synth formats them).
fn format_rfc3339(ms: i64) -> String {
    aws_sdk_cloudformation::primitives::DateTime::from_millis(ms)
        .fmt(aws_sdk_cloudformation::primitives::DateTimeFormat::DateTime)
        .unwrap()
}

/// `synth logs --follow` prints what is there, then each new line once as
/// nodes put it (a new node's stream too, and a line that arrives late
/// with an older time), and Ctrl-C ends it with 130.
#[test]
fn logs_follow_picks_up_new_lines_once_and_stops_on_ctrl_c() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let group = "/deeplearning-cluster/live/run-1";
    let t = now_ms() - 30_000;
    put_lines(&aws, group, "master-i-0aaa", &[(t, "master: up")]);
    put_lines(&aws, group, "worker2-i-0bbb", &[(t + 1_000, "worker2: registered")]);
    let running = Running::start(synth(&aws, "follower", &["logs", "live", "--region", "us-east-1", "-f"]));
    let wait_for = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = std::fs::read_to_string(&running.out).unwrap_or_default();
            if out.lines().count() >= n {
                return out;
            }
            assert!(Instant::now() < deadline, "{n} lines expected:\n{out}\n{}", running.stderr());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(2);
    let now = now_ms();
    put_lines(&aws, group, "worker3-i-0ccc", &[(now, "worker3: registered")]);
    put_lines(&aws, group, "master-i-0aaa", &[(now + 1, "master: formed")]);
    wait_for(4);
    // Late: older than the newest line already printed (a node whose batch
    // reached CloudWatch after a faster node's).
    put_lines(&aws, group, "worker2-i-0bbb", &[(now - 5_000, "worker2: applied")]);
    let out = wait_for(5);
    assert!(out.lines().last().is_some_and(|l| l.ends_with("worker2 | worker2: applied")), "{out}");
    // Several more polls: nothing is printed twice.
    std::thread::sleep(Duration::from_secs(6));
    unsafe { libc::kill(running.child.id() as i32, libc::SIGINT) };
    let (code, out, err) = running.finish();
    assert_eq!(code, 130, "{err}");
    eprintln!("--- synth logs live -f ---\n{out}");
    let got = messages(&out);
    assert_eq!(got.len(), 5, "each line once: {out}");
    let texts: Vec<&str> = got.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(
        texts,
        ["master: up", "worker2: registered", "worker3: registered", "master: formed", "worker2: applied"],
        "{out}"
    );
    assert!(got.contains(&("worker3".to_owned(), "worker3: registered".to_owned())), "{out}");
    Ok(())
}

/// One step of the transcript: `$ <what>`, then the screen as vt100 shows
/// it after the command ended (in a 100-column pseudo-terminal), then its
/// exit code.
fn transcript_step(out: &mut String, what: &str, cmd: &Command, shell_tail: &str) -> i32 {
    transcript_answering(out, what, cmd, shell_tail, None)
}

/// [`transcript_step`], typing `answer` (and Enter) at the `[y/N]` prompt.
fn transcript_answering(out: &mut String, what: &str, cmd: &Command, shell_tail: &str, answer: Option<&str>) -> i32 {
    let (cols, rows) = (100, 300);
    let mut running = in_a_terminal_then(cmd, cols, rows, shell_tail);
    if let Some(answer) = answer {
        use std::io::Write;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&running.out).unwrap_or_default().contains("[y/N]") {
            assert!(Instant::now() < deadline, "no prompt");
            std::thread::sleep(Duration::from_millis(100));
        }
        let stdin = running.child.stdin.as_mut().expect("script's stdin");
        stdin.write_all(format!("{answer}\r").as_bytes()).expect("the answer is typed");
    }
    let (code, bytes, _) = running.finish_within(Duration::from_secs(180));
    out.push_str(&format!("$ {what}\n{}[exit {code}]\n\n", rendered(bytes.as_bytes(), cols, rows)));
    code
}

/// The screen's rows, trailing blank rows and spaces left out.
fn rendered(bytes: &[u8], cols: u16, rows: u16) -> String {
    let parser = screen(bytes, cols, rows);
    let lines: Vec<String> = parser.screen().rows(0, cols).map(|l| l.trim_end().to_owned()).collect();
    let last = lines.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1);
    lines[..last].iter().map(|l| format!("{l}\n")).collect()
}

/// Writes the transcript issue 26 asks for to $TRANSCRIPT: create -> wait
/// -> formed -> update preview -> delete against the local AWS, then the
/// mistakes the issue lists, each run in a pseudo-terminal and rendered as
/// the screen shows it. Ignored by default (it is a record, a minute long,
/// not a check): `TRANSCRIPT=/tmp/t.txt cargo test --workspace --test
/// deploy -- --ignored transcript`.
#[test]
#[ignore]
fn transcript() -> TestResult {
    let path = std::env::var("TRANSCRIPT").map_err(|_| "set TRANSCRIPT to the file to write")?;
    let aws = LocalAws::start_holding(Ipv4Addr::LOCALHOST.into())?;
    ensure_image_parameter(&aws)?;
    let dir = tempfile::tempdir()?;
    let pkg = package(dir.path());
    let pkg = pkg.to_str().unwrap();
    let mut t = String::from(
        "Transcript for issues 26 and 35: synth against the local AWS (moto with the project's launcher), every command\n\
         in a pseudo-terminal of 100 columns (script(1)), each screen as vt100 renders it after the command ended.\n\
         Written by tests/e2e/deploy.rs `transcript` (cargo test --test deploy -- --ignored transcript).\n\n",
    );
    let base = ["blueprints/minimal.yaml", "--region", "us-east-1", "-p", IMAGE, "--agent-package", pkg];
    let deploy = |extra: &[&str]| {
        let mut args = vec!["deploy"];
        args.extend(base);
        args.extend(extra);
        synth(&aws, "deployer", &args)
    };
    let stack = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--region", "us-east-1"]);
        synth(&aws, "deployer", &all)
    };

    // Create, watched while it waits for the formation, then formed.
    t.push_str("== create -> wait -> formed ==\n");
    let (cols, rows) = (100, 40);
    let running = in_a_terminal(&deploy(&[]), cols, rows);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&running.out).unwrap_or_default().contains("formation") {
        assert!(Instant::now() < deadline, "no formation phase");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(4));
    let waiting = rendered(&std::fs::read(&running.out)?, cols, rows);
    t.push_str(&format!(
        "$ synth deploy {} -p {IMAGE} --agent-package {pkg}\n--- the screen while the create waits for the master's signal ---\n{waiting}",
        base[..3].join(" ")
    ));
    signal(&aws, "minimal", "SUCCESS", "2 of 2 workers joined; the cluster has 3 nodes, the master included");
    let (code, bytes, _) = running.finish();
    t.push_str(&format!(
        "--- after the master signalled ---\n{}[exit {code}]\n\n",
        rendered(bytes.as_bytes(), cols, rows)
    ));

    t.push_str("== status, events ==\n");
    transcript_step(&mut t, "synth status minimal --region us-east-1", &stack(&["status", "minimal"]), "");
    transcript_step(
        &mut t,
        "synth events minimal --region us-east-1 | tail -4",
        &stack(&["events", "minimal"]),
        " | tail -4",
    );

    // The update preview, answered "n".
    t.push_str("== update preview (answered n at the prompt) ==\n");
    let resize = deploy(&["-p", "WorkerCount=3", "-p", "MaxWorkers=3"]);
    transcript_answering(
        &mut t,
        &format!(
            "synth deploy {} -p {IMAGE} --agent-package {pkg} -p WorkerCount=3 -p MaxWorkers=3   (then n)",
            base[..3].join(" ")
        ),
        &resize,
        "",
        Some("n"),
    );

    t.push_str("== the mistakes of issue 26 ==\n");
    let bad = dir.path().join("mistakes.yaml");
    let text = std::fs::read_to_string(e2e::repo_root().join("blueprints/minimal.yaml"))?
        .replacen("count: 2", "cuont: 2", 1)
        .replacen("g4dn.xlarge", "g4dn.mega", 1);
    std::fs::write(&bad, text + "network:\n  vpc_cidr: 10.0.0.0/33\n")?;
    let bad = bad.to_str().unwrap();
    transcript_step(
        &mut t,
        &format!("synth validate {bad}   (cuont: 2, g4dn.mega, 10.0.0.0/33)"),
        &synth(&aws, "deployer", &["validate", bad]),
        "",
    );
    transcript_step(
        &mut t,
        "synth logs minimal --region us-east-1 --since 1h   (no node wrote a line)",
        &stack(&["logs", "minimal", "--since", "1h"]),
        "",
    );
    transcript_step(
        &mut t,
        "synth logs minimal --region us-east-1 --node master",
        &stack(&["logs", "minimal", "--node", "master"]),
        "",
    );
    transcript_step(&mut t, "synth events nosuch --region us-east-1", &stack(&["events", "nosuch"]), "");
    transcript_step(&mut t, "synth status nosuch --region us-east-1", &stack(&["status", "nosuch"]), "");
    transcript_step(
        &mut t,
        &format!(
            "synth deploy {} ... -p WorkerCount=3 -p MaxWorkers=3 < /dev/null   (nobody can answer)",
            base[..3].join(" ")
        ),
        &resize,
        " < /dev/null",
    );
    let sets = runtime().block_on(aws.cloudformation().list_change_sets().stack_name("minimal").send())?;
    let open = sets
        .summaries()
        .iter()
        .filter(|s| s.execution_status() != Some(&aws_sdk_cloudformation::types::ExecutionStatus::ExecuteComplete))
        .count();
    t.push_str(&format!("(the harness: change sets of stack minimal not executed and still there: {open})\n\n"));
    transcript_step(
        &mut t,
        &format!("synth deploy {} ... -p WorkerCont=8   (a misspelt parameter)", base[..3].join(" ")),
        &deploy(&["-p", "WorkerCont=8"]),
        "",
    );
    let mut no_keys = stack(&["status"]);
    no_keys.env_remove("AWS_ACCESS_KEY_ID").env_remove("AWS_SECRET_ACCESS_KEY").env_remove("AWS_EC2_METADATA_DISABLED");
    transcript_step(&mut t, "synth status --region us-east-1   (no credentials anywhere)", &no_keys, "");
    let mut no_region = synth(&aws, "deployer", &["status"]);
    no_region.env_remove("AWS_REGION").env_remove("AWS_DEFAULT_REGION");
    transcript_step(&mut t, "synth status   (no region anywhere)", &no_region, "");
    transcript_step(
        &mut t,
        "synth status --region us-east-1 --profile nosuch   (keys in the environment)",
        &stack(&["status", "--profile", "nosuch"]),
        "",
    );
    transcript_step(
        &mut t,
        "synth build blueprints/gpu-cluster.yaml --region us-east-1 > /dev/null",
        &synth(&aws, "deployer", &["build", "blueprints/gpu-cluster.yaml", "--region", "us-east-1"]),
        " > /dev/null",
    );
    transcript_step(
        &mut t,
        "synth ssh minimal --region us-east-1   (no key pair, no SSH ingress)",
        &stack(&["ssh", "minimal"]),
        "",
    );
    transcript_step(
        &mut t,
        "synth deploy --help | grep -A2 'one region'",
        &synth(&aws, "deployer", &["deploy", "--help"]),
        " | grep -A2 'one region'",
    );

    t.push_str("== a newer image published, then a resize ==\n");
    let images = aws.query("ec2", &[("Action", "DescribeImages"), ("Version", "2016-11-15")])?;
    let ids: Vec<&str> = images.split("<imageId>").skip(1).filter_map(|r| r.split("</imageId>").next()).collect();
    let (_, out, _) = run(stack(&["outputs", "minimal"]));
    let created = out.lines().find_map(|l| l.strip_prefix("ImageAmi")).unwrap_or_default().trim().to_owned();
    let newer = ids.iter().find(|id| **id != created).copied().unwrap_or_default();
    let body = serde_json::json!({"Name": IMAGE_PARAMETER, "Value": newer, "Type": "String", "Overwrite": true});
    aws.json_call("ssm", "AmazonSSM.PutParameter", &body)?;
    t.push_str(&format!(
        "(the harness: SSM parameter {IMAGE_PARAMETER} now names {newer}; the stack was created with {created})\n\n"
    ));
    transcript_step(
        &mut t,
        &format!("synth deploy {} ... -p WorkerCount=3 -p MaxWorkers=3 --yes", base[..3].join(" ")),
        &deploy(&["-p", "WorkerCount=3", "-p", "MaxWorkers=3", "--yes"]),
        "",
    );
    transcript_step(
        &mut t,
        &format!("synth deploy {} ... -p WorkerCount=3 -p MaxWorkers=3 --yes --update-image", base[..3].join(" ")),
        &deploy(&["-p", "WorkerCount=3", "-p", "MaxWorkers=3", "--yes", "--update-image"]),
        "",
    );

    t.push_str("== the stumbles of issue 35 ==\n");
    let typed = dir.path().join("types.yaml");
    std::fs::write(
        &typed,
        "name: minimal\nmaster:\n  instance_type: g4dn.xlarge\n  public: \"yes please\"\nworkers:\n  instance_type: \
         [g4dn.xlarge]\n  count: \"four\"\n  min: -1\n  spot: 1\nstorage:\n  root_volume_gb: 1.5\nmastr: {}\n",
    )?;
    let typed = typed.to_str().unwrap();
    transcript_step(
        &mut t,
        &format!("synth validate {typed}   (wrong types, a misspelt section: one run)"),
        &synth(&aws, "deployer", &["validate", typed]),
        "",
    );
    transcript_step(
        &mut t,
        "synth stage /etc/passwd --region us-east-1   (not an agent package)",
        &stack(&["stage", "/etc/passwd"]),
        "",
    );
    transcript_step(
        &mut t,
        &format!("synth diff {} ... -p WorkerCount=50   (past workers.max)", base[..3].join(" ")),
        &{
            let mut args = vec!["diff"];
            args.extend(base);
            args.extend(["-p", "WorkerCount=50"]);
            synth(&aws, "deployer", &args)
        },
        "",
    );
    transcript_step(&mut t, "synth status minimall --region us-east-1   (a typo)", &stack(&["status", "minimall"]), "");
    transcript_step(
        &mut t,
        "synth build blueprints/minimal.yaml --region us-east-1 > /dev/null   (the console route)",
        &synth(&aws, "deployer", &["build", "blueprints/minimal.yaml", "--region", "us-east-1"]),
        " > /dev/null",
    );
    transcript_step(&mut t, "synth outputs minimal --region us-east-1", &stack(&["outputs", "minimal"]), "");
    transcript_step(
        &mut t,
        "synth events minimal --region us-east-1 | tail -3",
        &stack(&["events", "minimal"]),
        " | tail -3",
    );
    transcript_step(
        &mut t,
        "synth status --regoin us-east-1 minimal   (a misspelt flag)",
        &synth(&aws, "deployer", &["status", "--regoin", "us-east-1", "minimal"]),
        "",
    );
    let mut bad_key = stack(&["status", "minimal"]);
    bad_key.env("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000001");
    transcript_step(&mut t, "AWS_ACCESS_KEY_ID=AKIAUNKNOWNKEY000001 synth status minimal", &bad_key, "");

    t.push_str("== delete ==\n");
    transcript_step(
        &mut t,
        "synth delete minimal --region us-east-1 --yes",
        &stack(&["delete", "minimal", "--yes"]),
        "",
    );
    transcript_step(
        &mut t,
        "synth logs minimal --region us-east-1   (after the delete)",
        &stack(&["logs", "minimal"]),
        "",
    );
    transcript_step(&mut t, "synth status --region us-east-1", &stack(&["status"]), "");
    std::fs::write(&path, t)?;
    Ok(())
}

/// Now, in unix milliseconds, as CloudWatch Logs stamps events.
fn now_ms() -> i64 {
    node_contract::clock::system() as i64
}
