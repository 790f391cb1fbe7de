//! IAM, both directions (docs/ARCHITECTURE.md, "IAM: every call and who
//! makes it"). The local AWS enforces the template's policies
//! (tests/moto/README.md, patch (t)), so every other end-to-end test shows
//! that each role may make the calls the agent makes; these show what each
//! role may not do, each a call refused with `AccessDenied`:
//!
//! - a worker cannot change or terminate in its worker group, signal its
//!   stack, receive from the master's queue, write another stack's log
//!   group, or read the staging bucket's other keys;
//! - the master cannot touch another stack's group, queues or signals;
//! - the lifecycle hook role can only send to the master's queue.
//!
//! And the operations table is complete: every AWS SDK operation called in
//! `agent/src/aws/` and `synth/src/deploy/` has a row, naming a test that
//! exists.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;

use aws_sdk_sqs::error::ProvideErrorMetadata;
use e2e::moto::{ACCOUNT, AssumedBy, RoleCredentials};
use e2e::{ClusterStack, Error, LocalAws, TestResult, repo_root};

/// The code of a refused call, or a description of what came instead.
fn refusal<T: std::fmt::Debug, E: ProvideErrorMetadata + std::fmt::Debug>(result: Result<T, E>) -> String {
    match result {
        Ok(out) => format!("allowed: {out:?}"),
        Err(e) => e.code().map_or_else(|| format!("no error code: {e:?}"), str::to_owned),
    }
}

/// Asserts that `result` (what `what` got) is refused with AccessDenied.
fn assert_denied<T: std::fmt::Debug, E: ProvideErrorMetadata + std::fmt::Debug>(what: &str, result: Result<T, E>) {
    assert_eq!(refusal(result), "AccessDenied", "{what}");
}

/// Two stacks of one blueprint in one local AWS, and the credentials of the
/// first one's roles, as EC2 and Auto Scaling get them.
struct Stacks {
    aws: LocalAws,
    ours: ClusterStack,
    theirs: ClusterStack,
    master: aws_config::SdkConfig,
    worker: aws_config::SdkConfig,
    hook: aws_config::SdkConfig,
}

async fn stacks(blueprint: &str, name: &str) -> Result<Stacks, e2e::Report> {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let ours = ClusterStack::create(&aws, blueprint, &format!("{name}-ours"), 1, &[]).await?;
    let theirs = ClusterStack::create(&aws, blueprint, &format!("{name}-theirs"), 1, &[]).await?;
    let node = |profile: &str, id: &str| -> e2e::Result<RoleCredentials> {
        aws.service_credentials(&AssumedBy::Ec2 { instance_profile: profile, instance_id: id }, 900)
    };
    let master = node(ours.resource("MasterInstanceProfile")?, ours.master_instance_id()?)?;
    let workers = ours.worker_instance_ids(&aws).await?;
    let worker = node(ours.resource("WorkerInstanceProfile")?, &workers[0])?;
    let hook_role = format!("arn:aws:iam::{ACCOUNT}:role/{}", ours.resource("LifecycleHookRole")?);
    let hook = aws
        .service_credentials(&AssumedBy::Service { service: "autoscaling.amazonaws.com", role_arn: &hook_role }, 900)?;
    let (master, worker, hook) = (aws.sdk_config_as(&master), aws.sdk_config_as(&worker), aws.sdk_config_as(&hook));
    Ok(Stacks { aws, ours, theirs, master, worker, hook })
}

type AutoScaling<T, E> = Result<T, aws_sdk_autoscaling::error::SdkError<E>>;

/// `TerminateInstanceInAutoScalingGroup` of `instance` (the group keeps its capacity).
async fn terminate(
    autoscaling: &aws_sdk_autoscaling::Client,
    instance: &str,
) -> AutoScaling<
    aws_sdk_autoscaling::operation::terminate_instance_in_auto_scaling_group::TerminateInstanceInAutoScalingGroupOutput,
    aws_sdk_autoscaling::operation::terminate_instance_in_auto_scaling_group::TerminateInstanceInAutoScalingGroupError,
> {
    autoscaling
        .terminate_instance_in_auto_scaling_group()
        .instance_id(instance)
        .should_decrement_desired_capacity(false)
        .send()
        .await
}

/// `CompleteLifecycleAction` CONTINUE of `instance` in `group`'s terminating hook.
async fn complete_lifecycle_action(
    autoscaling: &aws_sdk_autoscaling::Client,
    group: &str,
    instance: &str,
) -> AutoScaling<
    aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionOutput,
    aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionError,
> {
    autoscaling
        .complete_lifecycle_action()
        .auto_scaling_group_name(group)
        .lifecycle_hook_name("worker-terminating")
        .instance_id(instance)
        .lifecycle_action_result("CONTINUE")
        .send()
        .await
}

async fn log_group(aws: &LocalAws, stack: &ClusterStack) -> e2e::Result<String> {
    aws.log_group_of(&stack.name).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_cannot_manage_the_cluster_or_read_what_is_not_its_own() -> TestResult {
    let s = stacks("blueprints/minimal.yaml", "iam-worker").await?;
    let group = s.ours.worker_group()?;
    let workers = s.ours.worker_instance_ids(&s.aws).await?;
    let autoscaling = aws_sdk_autoscaling::Client::new(&s.worker);
    let set = autoscaling.set_desired_capacity().auto_scaling_group_name(group).desired_capacity(3).send().await;
    assert_denied("a worker sets its group's desired capacity", set);
    assert_denied("a worker terminates an instance of its group", terminate(&autoscaling, &workers[0]).await);
    let complete = complete_lifecycle_action(&autoscaling, group, &workers[0]).await;
    assert_denied("a worker completes a lifecycle action of its group", complete);

    let signal = aws_sdk_cloudformation::Client::new(&s.worker)
        .signal_resource()
        .stack_name(&s.ours.name)
        .logical_resource_id("MasterInstance")
        .unique_id(&workers[0])
        .status(aws_sdk_cloudformation::types::ResourceSignalStatus::Success)
        .send()
        .await;
    assert_denied("a worker signals its stack", signal);

    let sqs = aws_sdk_sqs::Client::new(&s.worker);
    let receive = sqs.receive_message().queue_url(s.ours.resource("MasterQueue")?).send().await;
    assert_denied("a worker receives from the master's queue", receive);
    let send = sqs.send_message().queue_url(s.ours.resource("WorkerQueue")?).message_body("{}").send().await;
    assert_denied("a worker sends to the workers' queue (only the master publishes there)", send);
    let theirs = sqs.send_message().queue_url(s.theirs.resource("MasterQueue")?).message_body("{}").send().await;
    assert_denied("a worker sends to another stack's master queue", theirs);

    let logs = aws_sdk_cloudwatchlogs::Client::new(&s.worker);
    let own_group = log_group(&s.aws, &s.ours).await?;
    logs.create_log_stream()
        .log_group_name(&own_group)
        .log_stream_name(&workers[0])
        .send()
        .await
        .map_err(|e| Error::aws("CreateLogStream in its own group as a worker", &e))?;
    let other_group = log_group(&s.aws, &s.theirs).await?;
    let stream = logs.create_log_stream().log_group_name(&other_group).log_stream_name(&workers[0]).send().await;
    assert_denied("a worker creates a stream in another stack's log group", stream);
    let event = aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
        .timestamp(1_700_000_000_000)
        .message("not ours")
        .build()
        .map_err(|e| Error::Setup(e.to_string()))?;
    let put =
        logs.put_log_events().log_group_name(&other_group).log_stream_name(&workers[0]).log_events(event).send().await;
    assert_denied("a worker writes another stack's log group", put);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_master_cannot_touch_another_stacks_group_queues_or_signals() -> TestResult {
    let s = stacks("blueprints/minimal.yaml", "iam-master").await?;
    let autoscaling = aws_sdk_autoscaling::Client::new(&s.master);
    // Its own group, as the agent does it; then the other stack's.
    autoscaling
        .set_desired_capacity()
        .auto_scaling_group_name(s.ours.worker_group()?)
        .desired_capacity(1)
        .send()
        .await
        .map_err(|e| Error::aws("SetDesiredCapacity of its own group as the master", &e))?;
    let theirs = s.theirs.worker_group()?;
    let set = autoscaling.set_desired_capacity().auto_scaling_group_name(theirs).desired_capacity(3).send().await;
    assert_denied("the master sets another stack's desired capacity", set);
    let their_workers = s.theirs.worker_instance_ids(&s.aws).await?;
    let complete = complete_lifecycle_action(&autoscaling, theirs, &their_workers[0]).await;
    assert_denied("the master completes another stack's lifecycle action", complete);
    assert_denied("the master terminates another stack's worker", terminate(&autoscaling, &their_workers[0]).await);

    let sqs = aws_sdk_sqs::Client::new(&s.master);
    for queue in ["MasterQueue", "WorkerQueue"] {
        let url = s.theirs.resource(queue)?;
        let send = sqs.send_message().queue_url(url).message_body("{}").send().await;
        assert_denied(&format!("the master sends to another stack's {queue}"), send);
        let receive = sqs.receive_message().queue_url(url).send().await;
        assert_denied(&format!("the master receives from another stack's {queue}"), receive);
    }

    let signal = aws_sdk_cloudformation::Client::new(&s.master)
        .signal_resource()
        .stack_name(&s.theirs.name)
        .logical_resource_id("MasterInstance")
        .unique_id(s.theirs.master_instance_id()?)
        .status(aws_sdk_cloudformation::types::ResourceSignalStatus::Success)
        .send()
        .await;
    assert_denied("the master signals another stack", signal);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lifecycle_hook_role_can_only_send_to_the_masters_queue() -> TestResult {
    let s = stacks("blueprints/minimal.yaml", "iam-hook").await?;
    let sqs = aws_sdk_sqs::Client::new(&s.hook);
    let master_queue = s.ours.resource("MasterQueue")?;
    sqs.send_message()
        .queue_url(master_queue)
        .message_body("{}")
        .send()
        .await
        .map_err(|e| Error::aws("SendMessage to the master queue as the hook role", &e))?;
    let receive = sqs.receive_message().queue_url(master_queue).send().await;
    assert_denied("the hook role receives from the master's queue", receive);
    let workers = sqs.send_message().queue_url(s.ours.resource("WorkerQueue")?).message_body("{}").send().await;
    assert_denied("the hook role sends to the workers' queue", workers);
    let theirs = sqs.send_message().queue_url(s.theirs.resource("MasterQueue")?).message_body("{}").send().await;
    assert_denied("the hook role sends to another stack's master queue", theirs);
    let set = aws_sdk_autoscaling::Client::new(&s.hook)
        .set_desired_capacity()
        .auto_scaling_group_name(s.ours.worker_group()?)
        .desired_capacity(3)
        .send()
        .await;
    assert_denied("the hook role sets the desired capacity", set);
    // Only Auto Scaling may assume it: EC2 (an instance given it) may not.
    let role_arn = format!("arn:aws:iam::{ACCOUNT}:role/{}", s.ours.resource("LifecycleHookRole")?);
    let as_ec2 =
        s.aws.service_credentials(&AssumedBy::Service { service: "ec2.amazonaws.com", role_arn: &role_arn }, 900);
    let refused = as_ec2.expect_err("EC2 assumed the lifecycle hook role").to_string();
    assert!(refused.contains("403") && refused.contains("does not trust ec2.amazonaws.com"), "{refused}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_read_exactly_the_agent_package_from_the_bucket() -> TestResult {
    // install-at-boot.yaml: nodes fetch s3://my-artifacts-bucket/deeplearning/deeplearning-agent_0.1.0-1_amd64.deb.
    let s = stacks("blueprints/install-at-boot.yaml", "iam-package").await?;
    let (bucket, key) = ("my-artifacts-bucket", "deeplearning/deeplearning-agent_0.1.0-1_amd64.deb");
    let admin = s3(&s.aws.sdk_config());
    admin.create_bucket().bucket(bucket).send().await.map_err(|e| Error::aws("CreateBucket", &e))?;
    for k in [key, "deeplearning/other.deb", "secrets/keys.txt"] {
        let put = admin.put_object().bucket(bucket).key(k).body(k.as_bytes().to_vec().into()).send().await;
        put.map_err(|e| Error::aws(format!("PutObject {k}"), &e))?;
    }
    for config in [&s.worker, &s.master] {
        let node = s3(config);
        let package = node.get_object().bucket(bucket).key(key).send().await;
        let package = package.map_err(|e| Error::aws("GetObject of the package as a node", &e))?;
        let bytes = package.body.collect().await.map_err(|e| Error::Setup(e.to_string()))?.into_bytes();
        assert_eq!(bytes.as_ref(), key.as_bytes());
        for other in ["deeplearning/other.deb", "secrets/keys.txt"] {
            let read = node.get_object().bucket(bucket).key(other).send().await;
            assert_denied(&format!("a node reads {other} from the staging bucket"), read);
        }
        let put = node.put_object().bucket(bucket).key(key).body(b"replaced".to_vec().into()).send().await;
        assert_denied("a node replaces the agent package", put);
    }
    Ok(())
}

/// The data sets' prefixes, and nothing else of their bucket: a node reads
/// and lists its data, never another prefix; a worker not even the set the
/// master alone fetches onto EFS (launcher patch (t10) evaluates the
/// listing's `s3:prefix` condition as AWS does).
#[tokio::test(flavor = "multi_thread")]
async fn nodes_read_and_list_exactly_their_data_prefixes() -> TestResult {
    // imagenet-data.yaml: imagenet/train/ to scratch (every node), imagenet/val/ to EFS (the master).
    let s = stacks("blueprints/imagenet-data.yaml", "iam-data").await?;
    let bucket = "my-training-data";
    let (train, val, other) = ("imagenet/train/n01/a.jpg", "imagenet/val/b.jpg", "imagenet/secret/c.jpg");
    let admin = s3(&s.aws.sdk_config());
    admin.create_bucket().bucket(bucket).send().await.map_err(|e| Error::aws("CreateBucket", &e))?;
    for k in [train, val, other] {
        let put = admin.put_object().bucket(bucket).key(k).body(k.as_bytes().to_vec().into()).send().await;
        put.map_err(|e| Error::aws(format!("PutObject {k}"), &e))?;
    }
    let (master, worker) = (s3(&s.master), s3(&s.worker));
    let read = |client: aws_sdk_s3::Client, key: &'static str| async move {
        client.get_object().bucket(bucket).key(key).send().await.map(|_| ())
    };
    let list = |client: aws_sdk_s3::Client, prefix: Option<&'static str>| async move {
        client
            .list_objects_v2()
            .bucket(bucket)
            .set_prefix(prefix.map(str::to_owned))
            .send()
            .await
            .map(|out| out.contents().iter().filter_map(|o| o.key()).map(str::to_owned).collect::<Vec<_>>())
    };
    read(worker.clone(), train).await.map_err(|e| Error::aws("GetObject of its data as a worker", &e))?;
    let listed = list(worker.clone(), Some("imagenet/train/")).await;
    assert_eq!(listed.map_err(|e| Error::aws("ListObjectsV2 of its prefix as a worker", &e))?, vec![train]);
    assert_denied("a worker reads the set the master fetches onto EFS", read(worker.clone(), val).await);
    assert_denied("a worker reads another prefix of the bucket", read(worker.clone(), other).await);
    assert_denied("a worker lists another prefix", list(worker.clone(), Some("imagenet/secret/")).await);
    assert_denied("a worker lists the whole bucket", list(worker.clone(), None).await);
    assert_denied("a worker lists a prefix above its own", list(worker.clone(), Some("imagenet/")).await);
    for key in [train, val] {
        read(master.clone(), key).await.map_err(|e| Error::aws(format!("GetObject {key} as the master"), &e))?;
    }
    let listed = list(master.clone(), Some("imagenet/val/")).await;
    assert_eq!(listed.map_err(|e| Error::aws("ListObjectsV2 of the EFS set as the master", &e))?, vec![val]);
    assert_denied("the master reads another prefix", read(master.clone(), other).await);
    assert_denied("the master lists another prefix", list(master.clone(), Some("imagenet/secret/")).await);
    let put = master.put_object().bucket(bucket).key(train).body(b"replaced".to_vec().into()).send().await;
    assert_denied("the master writes its data", put);
    Ok(())
}

/// The training data's calls need exactly what the node role will grant
/// for a data set: `s3:GetObject` on the prefix's objects and
/// `s3:ListBucket` on the bucket under the condition `s3:prefix` equals
/// the prefix. The agent's fetch (the SDK port, a small object with one
/// GET, a large one after its HEAD in ranged GETs) completes with that
/// policy alone, and a data set under another prefix is refused, its URL
/// and the step named (the listing: launcher patch (t10) evaluates the
/// `s3:prefix` condition as AWS does).
#[tokio::test(flavor = "multi_thread")]
async fn a_node_fetches_its_data_with_get_object_and_a_prefix_scoped_list_only() -> TestResult {
    use agent::data::{DataFetch, Plan, Tuning};
    use node_contract::data::{DataSet, Fetcher};

    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let bucket = "training-data-iam";
    let admin = s3(&aws.sdk_config());
    admin.create_bucket().bucket(bucket).send().await.map_err(|e| Error::aws("CreateBucket", &e))?;
    let large: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    for (k, body) in [("train/a.jpg", vec![1u8; 1000]), ("train/large.bin", large), ("secret/b.jpg", vec![2u8; 10])] {
        let put = admin.put_object().bucket(bucket).key(k).body(body.into()).send().await;
        put.map_err(|e| Error::aws(format!("PutObject {k}"), &e))?;
    }
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": format!("arn:aws:s3:::{bucket}/train/*")},
            {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": format!("arn:aws:s3:::{bucket}"),
             "Condition": {"StringEquals": {"s3:prefix": "train/"}}},
        ],
    });
    let (key, secret) = aws.user_with_policies("data-reader", &[policy])?;
    let config = aws_config::SdkConfig::builder()
        .endpoint_url(aws.endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new(key, secret, None, None, "e2e"),
        ))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let store = agent::aws::S3Objects::new(agent::aws::S3Objects::client(&config));
    let root = tempfile::tempdir().map_err(|e| Error::Setup(e.to_string()))?;
    let set = DataSet { bucket: bucket.into(), prefix: "train/".into(), dir: "/data".into(), fetcher: Fetcher::Master };
    let mut plan =
        Plan::for_node(root.path(), "/efs", vec![set.clone()], "127.0.0.1", "boot", node_contract::Role::Master);
    plan.tuning = Tuning { part_size: 1 << 20, ..Tuning::default() };
    let fetch = DataFetch::start(store.clone(), plan.clone()).await.map_err(|e| Error::Setup(e.to_string()))?;
    let ready = fetch.run().await.map_err(|e| Error::Setup(format!("the fetch with the data policy: {e}")))?;
    assert_eq!(ready.bytes, 3_001_000);
    assert_eq!(
        std::fs::read(root.path().join("data/a.jpg")).map_err(|e| Error::Setup(e.to_string()))?,
        vec![1u8; 1000]
    );

    let other = DataSet { prefix: "secret/".into(), ..set };
    let fetch =
        DataFetch::start(store, Plan { sets: vec![other], ..plan }).await.map_err(|e| Error::Setup(e.to_string()))?;
    let refused = fetch.run().await.map(|_| ()).map_err(|e| e.to_string());
    let refused = refused.expect_err("listing another prefix is refused");
    // The listing is refused (the `s3:prefix` condition), the set named.
    assert!(refused.starts_with("s3://training-data-iam/secret/: AccessDenied listing it"), "{refused}");
    Ok(())
}

fn s3(config: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(config).force_path_style(true).build())
}

// --- The operations table -------------------------------------------------------

/// The directories whose AWS SDK calls the table must list.
const SCANNED: [&str; 2] = ["agent/src/aws", "synth/src/deploy"];
/// The heading of the table's section in docs/ARCHITECTURE.md.
const TABLE_HEADING: &str = "## IAM: every call and who makes it";
/// How the table names each SDK crate's service.
const SERVICES: [(&str, &str); 6] = [
    ("aws-sdk-autoscaling", "Auto Scaling"),
    ("aws-sdk-cloudformation", "CloudFormation"),
    ("aws-sdk-cloudwatchlogs", "CloudWatch Logs"),
    ("aws-sdk-s3", "S3"),
    ("aws-sdk-sqs", "SQS"),
    ("aws-sdk-sts", "STS"),
];

/// Every operation of the SDK crates above, by snake-case name (each has a
/// `src/client/<operation>.rs` in its crate), with the service's name.
fn sdk_operations() -> BTreeMap<String, Vec<&'static str>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Only this platform's packages: the others' (Windows crates) may not be downloaded.
    let platform = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &platform])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut operations: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some((_, service)) = SERVICES.iter().find(|(name, _)| package["name"] == *name) else { continue };
        let manifest = Path::new(package["manifest_path"].as_str().unwrap_or_default());
        let client = manifest.parent().expect("a crate directory").join("src/client");
        for entry in std::fs::read_dir(&client).unwrap_or_else(|e| panic!("{}: {e}", client.display())) {
            let path = entry.expect("a directory entry").path();
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
            // `customize` is the fluent builders' hook, not an operation.
            if path.extension().is_some_and(|e| e == "rs") && stem != "customize" {
                operations.entry(stem).or_default().push(service);
            }
        }
    }
    assert!(operations.contains_key("send_message"), "no SDK operations found: {operations:?}");
    operations
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `DescribeAutoScalingGroups` from `describe_auto_scaling_groups`.
fn camel(snake: &str) -> String {
    snake.split('_').map(|w| w[..1].to_uppercase() + &w[1..]).collect()
}

/// Every SDK operation the scanned directories call (a zero-argument
/// method call named as an operation of one of the SDK crates), as
/// `(service, Operation)`, with the files that call it.
fn called_operations() -> BTreeMap<(String, String), BTreeSet<String>> {
    let operations = sdk_operations();
    let root = repo_root();
    let mut files = Vec::new();
    for dir in SCANNED {
        rust_files(&root.join(dir), &mut files);
    }
    let mut called: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        let bytes = text.as_bytes();
        let mut i = 0;
        while let Some(found) = text[i..].find("()") {
            let end = i + found;
            let start = text[..end].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |p| p + 1);
            let name = &text[start..end];
            let called_as_method = start > 0 && bytes[start - 1] == b'.';
            if called_as_method && let Some(services) = operations.get(name) {
                let shown = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
                for service in services {
                    called.entry((service.to_string(), camel(name))).or_default().insert(shown.clone());
                }
            }
            i = end + 2;
        }
    }
    called
}

/// The table's rows: `(service, Operation)` -> the row's cells.
fn table_rows() -> BTreeMap<(String, String), Vec<String>> {
    let path = repo_root().join("docs/ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("docs/ARCHITECTURE.md");
    let section = text.split_once(TABLE_HEADING).map(|(_, s)| s).expect("the IAM section in docs/ARCHITECTURE.md");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<String> = line.trim_matches('|').split(" | ").map(|c| c.trim().to_owned()).collect();
        // The first cell: `Operation` (Service).
        let first = &cells[0];
        let (Some(op), Some(service)) =
            (first.split('`').nth(1), first.split_once('(').and_then(|(_, rest)| rest.split_once(')')).map(|(s, _)| s))
        else {
            continue;
        };
        rows.insert((service.to_owned(), op.to_owned()), cells);
    }
    rows
}

#[test]
fn every_aws_call_in_the_code_has_a_row_in_the_iam_table() {
    let called = called_operations();
    let rows = table_rows();
    // Ambiguous names (an operation of two SDKs) count once for each; a row
    // for either one covers the call.
    let mut missing = Vec::new();
    let mut by_name: BTreeMap<&str, Vec<&(String, String)>> = BTreeMap::new();
    for key in called.keys() {
        by_name.entry(key.1.as_str()).or_default().push(key);
    }
    for (name, keys) in &by_name {
        if !keys.iter().any(|k| rows.contains_key(*k)) {
            missing.push(format!("{name} ({}), called in {:?}", keys[0].0, called[keys[0]]));
        }
    }
    assert!(
        missing.is_empty(),
        "AWS calls with no row in docs/ARCHITECTURE.md's IAM table (operation -> IAM action and resource -> \
         principal -> test):\n{}",
        missing.join("\n")
    );
    assert!(called.len() >= 30, "the scan found only {} operations: {called:?}", called.len());
    // synth's calls: each is in the policy `synth policy` prints, as the IAM
    // action AWS authorizes it as (GetCallerIdentity needs none).
    for ((service, op), files) in &called {
        if op == "GetCallerIdentity" || !files.iter().any(|f| f.starts_with("synth/")) {
            continue;
        }
        assert!(
            synth::deploy::policy::CALLS.iter().any(|c| c.operation.split(' ').any(|word| word == op)),
            "{op} ({service}), called in {files:?}, has no row in synth::deploy::policy::CALLS: `synth policy` \
             would not allow it"
        );
    }
    // Each row names tests that exist: `file::test`, in tests/e2e/<file>.rs.
    for ((service, op), cells) in &rows {
        assert_eq!(cells.len(), 4, "{op} ({service}): a row has 4 cells: {cells:?}");
        let named: Vec<&str> = cells[3].split('`').skip(1).step_by(2).collect();
        assert!(!named.is_empty(), "{op} ({service}) names no test: {cells:?}");
        for test in named {
            let (file, function) = test.split_once("::").unwrap_or_else(|| panic!("{op}: {test} is not file::test"));
            let source = std::fs::read_to_string(repo_root().join(format!("tests/e2e/{file}.rs")))
                .unwrap_or_else(|e| panic!("{op} ({service}) names {test}: tests/e2e/{file}.rs: {e}"));
            assert!(source.contains(&format!("fn {function}(")), "{op} ({service}) names {test}, which does not exist");
        }
    }
}
