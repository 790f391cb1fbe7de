//! The SDK-backed ports ([`agent::aws`]) against a real local AWS stand-in:
//! a moto server (SQS, Auto Scaling, CloudFormation) started by this test
//! binary on 127.0.0.1, reached through the SDK's endpoint override.
//!
//! moto comes from the project's venv (`<repo>/.venv`, installed by
//! `scripts/test`). Without it these tests fail and say how to install it.
//! Every test makes its own queues and groups, so they run in parallel on one
//! server; the server stops when the test process exits.

use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent::aws::{AsgWorkerGroup, CfnSignals, Clients, SqsQueue};
use agent::ports::{PortError, Queue, StackSignals, WorkerGroup};
use aws_sdk_sqs::config::Credentials;

const REGION: &str = "us-east-1";
const MOTO_VERSION: &str = "5.2.5";

/// The moto server shared by every test in this binary.
struct Moto {
    url: String,
    // Held so the server lives as long as this process: the wrapper shell
    // stops moto when this pipe closes (the process exits, however it exits).
    _child: Child,
    _lifeline: ChildStdin,
}

fn moto_executable() -> PathBuf {
    // The workspace root is the agent crate's parent directory.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    repo.join(".venv/bin/moto_server")
}

fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(start_moto)
}

fn start_moto() -> Moto {
    let exe = moto_executable();
    assert!(
        exe.exists(),
        "moto is not installed at {}. Install it with:\n  python3 -m venv {venv}\n  {venv}/bin/pip install 'moto[server]=={MOTO_VERSION}'\n(or run scripts/test, which does this)",
        exe.display(),
        venv = exe.parent().unwrap().parent().unwrap().display(),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = std::env::temp_dir().join(format!("agent-aws-moto-{port}.log"));
    // moto runs in the background of a shell that waits on its stdin; when this
    // process exits the pipe closes, `read` returns and the shell stops moto.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" -H 127.0.0.1 -p "$1" >"$2" 2>&1 & moto=$!; read _ignored; kill "$moto"; wait "$moto""#)
        .arg(&exe)
        .arg(port.to_string())
        .arg(&log)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
    let lifeline = child.stdin.take().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if ureq::get(&format!("{url}/moto-api/")).call().is_ok() {
            break;
        }
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(status) = child.try_wait().unwrap() {
            panic!("moto exited ({status}) before answering:\n{}", log_text());
        }
        assert!(Instant::now() < deadline, "moto did not answer on {url} within 60 s:\n{}", log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    Moto { url, _child: child, _lifeline: lifeline }
}

async fn clients_at(endpoint: &str) -> Clients {
    let config = agent::aws::config_loader(REGION)
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
        .load()
        .await;
    Clients::new(&config)
}

async fn moto_clients() -> Clients {
    clients_at(&moto().url).await
}

/// A name no other test (or earlier run against the same server) uses.
fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}-{}-{nanos}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn new_queue(clients: &Clients) -> SqsQueue {
    let created = clients.sqs.create_queue().queue_name(unique("q")).send().await.unwrap();
    SqsQueue::new(clients.sqs.clone(), created.queue_url.unwrap())
}

const NO_WAIT: Duration = Duration::ZERO;

#[tokio::test]
async fn sqs_send_receive_delete() {
    let clients = moto_clients().await;
    let queue = new_queue(&clients).await;
    queue.send("{\"kind\":\"register\"}").await.unwrap();

    let first = queue.receive(10, Duration::from_secs(1), Some(Duration::ZERO)).await.unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].body, "{\"kind\":\"register\"}");

    // Visibility 0 leaves the message visible: the next receive sees it again.
    let again = queue.receive(10, Duration::from_secs(1), Some(Duration::ZERO)).await.unwrap();
    assert_eq!(again.len(), 1, "visibility 0 should keep the message visible: {again:?}");
    assert_eq!(again[0].body, first[0].body);

    queue.delete(&again[0].receipt).await.unwrap();
    let after = queue.receive(10, Duration::from_secs(1), Some(Duration::ZERO)).await.unwrap();
    assert!(after.is_empty(), "deleted message came back: {after:?}");
}

#[tokio::test]
async fn sqs_delete_batch_deletes_what_one_receive_returned() {
    let clients = moto_clients().await;
    let queue = new_queue(&clients).await;
    for i in 0..3 {
        queue.send(&format!("{{\"n\":{i}}}")).await.unwrap();
    }
    let mut receipts = Vec::new();
    for _ in 0..5 {
        for r in queue.receive(10, Duration::from_secs(1), Some(Duration::from_secs(30))).await.unwrap() {
            receipts.push(r.receipt);
        }
        if receipts.len() == 3 {
            break;
        }
    }
    assert_eq!(receipts.len(), 3);
    assert_eq!(queue.delete_batch(&[]).await.unwrap(), 0, "nothing to delete, no call");
    let refs: Vec<&str> = receipts.iter().map(String::as_str).collect();
    assert_eq!(queue.delete_batch(&refs).await.unwrap(), 0, "every message deleted");
    let attributes = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&queue.url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let count = |name: aws_sdk_sqs::types::QueueAttributeName| {
        attributes.attributes().and_then(|a| a.get(&name)).cloned().unwrap_or_default()
    };
    assert_eq!(count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages), "0");
    assert_eq!(count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible), "0");
}

#[tokio::test]
async fn sqs_default_visibility_hides_a_received_message() {
    let clients = moto_clients().await;
    let queue = new_queue(&clients).await;
    queue.send("one").await.unwrap();
    let got = queue.receive(1, NO_WAIT, Some(Duration::from_secs(60))).await.unwrap();
    assert_eq!(got.len(), 1);
    let hidden = queue.receive(1, NO_WAIT, None).await.unwrap();
    assert!(hidden.is_empty(), "a message received with a 60 s visibility timeout was seen again: {hidden:?}");
}

#[tokio::test]
async fn sqs_receives_at_most_max() {
    let clients = moto_clients().await;
    let queue = new_queue(&clients).await;
    for i in 0..5 {
        queue.send(&format!("m{i}")).await.unwrap();
    }
    let got = queue.receive(2, Duration::from_secs(1), None).await.unwrap();
    assert!(!got.is_empty() && got.len() <= 2, "{got:?}");
}

#[tokio::test]
async fn sqs_long_poll_waits_and_returns_early_on_a_message() {
    let clients = moto_clients().await;
    let queue = new_queue(&clients).await;

    let started = Instant::now();
    let none = queue.receive(10, Duration::from_secs(2), None).await.unwrap();
    let waited = started.elapsed();
    assert!(none.is_empty());
    assert!(waited >= Duration::from_millis(1800), "an empty long poll of 2 s returned after {waited:?}");

    let sender = queue.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sender.send("late").await.unwrap();
    });
    let started = Instant::now();
    let got = queue.receive(10, Duration::from_secs(10), None).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(got.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(), ["late"]);
    assert!(waited < Duration::from_secs(8), "the long poll did not return when a message arrived: {waited:?}");
}

/// The longest poll SQS allows outlasts the client's ordinary attempt
/// timeout ([`agent::aws::ATTEMPT_TIMEOUT`]): receive gives itself a longer one.
#[tokio::test]
async fn sqs_full_length_long_poll_is_not_cut_short() {
    let clients = moto_clients().await;
    let queue = new_queue(&clients).await;
    assert!(agent::aws::sqs::MAX_WAIT >= agent::aws::ATTEMPT_TIMEOUT);
    let started = Instant::now();
    let none = queue.receive(10, agent::aws::sqs::MAX_WAIT, None).await.unwrap();
    assert!(none.is_empty());
    assert!(started.elapsed() >= Duration::from_secs(19), "returned after {:?}", started.elapsed());
}

#[tokio::test]
async fn sqs_missing_queue_is_permanent() {
    let clients = moto_clients().await;
    let url = format!("{}/123456789012/{}", moto().url, unique("missing"));
    let queue = SqsQueue::new(clients.sqs.clone(), url.clone());
    for err in [
        queue.send("x").await.unwrap_err(),
        queue.receive(1, NO_WAIT, None).await.unwrap_err(),
        queue.delete("not-a-receipt").await.unwrap_err(),
    ] {
        match &err {
            PortError::Permanent(m) => {
                assert!(m.contains("NonExistentQueue") || m.contains("QueueDoesNotExist"), "{m}");
                assert!(m.contains(&url), "the error should name the queue: {m}");
            }
            other => panic!("expected a permanent error, got {other:?}"),
        }
    }
}

/// A worker group made the way the stack makes it: a launch template and an
/// Auto Scaling group, created through CloudFormation.
async fn new_group(clients: &Clients, desired: u32) -> AsgWorkerGroup {
    let name = unique("workers");
    let template = serde_json::json!({
        "Resources": {
            "WorkerLaunchTemplate": {
                "Type": "AWS::EC2::LaunchTemplate",
                "Properties": {
                    "LaunchTemplateData": { "ImageId": "ami-12c6146b", "InstanceType": "t3.micro" }
                }
            },
            "Workers": {
                "Type": "AWS::AutoScaling::AutoScalingGroup",
                "Properties": {
                    "AutoScalingGroupName": name,
                    "AvailabilityZones": ["us-east-1a"],
                    "LaunchTemplate": {
                        "LaunchTemplateId": { "Ref": "WorkerLaunchTemplate" },
                        "Version": { "Fn::GetAtt": ["WorkerLaunchTemplate", "LatestVersionNumber"] }
                    },
                    "MinSize": "0",
                    "MaxSize": "4",
                    "DesiredCapacity": desired.to_string()
                }
            }
        }
    });
    clients
        .cloudformation
        .create_stack()
        .stack_name(unique("stack"))
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();
    AsgWorkerGroup::new(clients.autoscaling.clone(), name)
}

async fn desired_and_instances(clients: &Clients, group: &str) -> (i32, usize) {
    let out = clients.autoscaling.describe_auto_scaling_groups().auto_scaling_group_names(group).send().await.unwrap();
    let group = &out.auto_scaling_groups()[0];
    (group.desired_capacity().unwrap(), group.instances().len())
}

#[tokio::test]
async fn asg_set_desired_capacity() {
    let clients = moto_clients().await;
    let group = new_group(&clients, 1).await;
    assert_eq!(desired_and_instances(&clients, &group.name).await, (1, 1));
    group.set_desired_capacity(3).await.unwrap();
    assert_eq!(desired_and_instances(&clients, &group.name).await, (3, 3));
    group.set_desired_capacity(2).await.unwrap();
    assert_eq!(desired_and_instances(&clients, &group.name).await, (2, 2));
}

#[tokio::test]
async fn asg_healthy_group_has_no_launch_failures() {
    let clients = moto_clients().await;
    let group = new_group(&clients, 2).await;
    assert_eq!(group.launch_failures().await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn unreachable_endpoint_is_transient() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let clients = clients_at(&format!("http://{closed}")).await;
    let queue = SqsQueue::new(clients.sqs.clone(), format!("http://{closed}/123456789012/q"));
    let started = Instant::now();
    let err = queue.receive(1, Duration::from_secs(1), None).await.unwrap_err();
    assert!(matches!(&err, PortError::Transient(m) if m.contains("no answer")), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());

    let group = AsgWorkerGroup::new(clients.autoscaling.clone(), "workers");
    let err = group.set_desired_capacity(1).await.unwrap_err();
    assert!(matches!(err, PortError::Transient(_)), "{err:?}");

    let signals = CfnSignals {
        client: clients.cloudformation.clone(),
        stack: "s".into(),
        master_resource: "Master".into(),
        handle_url: format!("http://{closed}/handle"),
    };
    let err = signals.master_up("i-0abc").await.unwrap_err();
    assert!(matches!(err, PortError::Transient(_)), "{err:?}");
}

/// The training data's S3 port ([`agent::aws::S3Objects`]) under the data
/// fetch: a listing of several pages, small objects with and without a
/// checksum (one CRC32, verified), a large one in ranged parts after its
/// HEAD, written under the data set's directory; a missing bucket is an
/// error that names it and the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_data_set_is_fetched_through_the_sdk_port() {
    use agent::data::{DataFetch, Plan, Tuning};
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::ChecksumAlgorithm;
    use node_contract::data::{DataSet, Fetcher};

    let config = agent::aws::config_loader(REGION)
        .endpoint_url(&moto().url)
        .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
        .load()
        .await;
    let client = agent::aws::S3Objects::client(&config);
    let bucket = unique("data").to_lowercase();
    client.create_bucket().bucket(&bucket).send().await.unwrap();
    let body = |i: usize, len: usize| -> Vec<u8> { (0..len).map(|j| ((i * 13 + j) % 251) as u8).collect() };
    let mut objects: Vec<(String, Vec<u8>)> =
        (0..1005).map(|i| (format!("in/small/{i:04}.jpg"), body(i, 300))).collect();
    objects.push(("in/large.bin".into(), body(7, 2_500_000)));
    for (i, (key, bytes)) in objects.iter().enumerate() {
        let mut put = client.put_object().bucket(&bucket).key(key).body(ByteStream::from(bytes.clone()));
        if i % 2 == 0 {
            put = put.checksum_algorithm(ChecksumAlgorithm::Crc32);
        }
        put.send().await.unwrap();
    }
    // A folder marker, skipped.
    client.put_object().bucket(&bucket).key("in/small/").body(ByteStream::from_static(b"")).send().await.unwrap();

    let root = tempfile::tempdir().unwrap();
    let set = DataSet { bucket: bucket.clone(), prefix: "in/".into(), dir: "/data".into(), fetcher: Fetcher::Master };
    let mut plan =
        Plan::for_node(root.path(), "/efs", vec![set.clone()], "127.0.0.1", "boot", node_contract::Role::Master);
    plan.tuning = Tuning { part_size: 1 << 20, parts_in_flight: 4, objects_in_flight: 16, ..Tuning::default() };
    let fetch = DataFetch::start(agent::aws::S3Objects::new(client.clone()), plan.clone()).await.unwrap();
    let ready = fetch.run().await.unwrap();
    let total: usize = objects.iter().map(|(_, b)| b.len()).sum();
    assert_eq!((ready.bytes, ready.bytes_from_s3), (total as u64, total as u64));
    for (key, bytes) in &objects {
        let got = std::fs::read(root.path().join("data").join(&key[3..])).unwrap();
        assert!(got == *bytes, "{key} differs");
    }
    // 1,005 small GETs and 3 parts of the large one.
    assert_eq!(fetch.progress().snapshot().s3_gets, 1008);
    // The port decodes S3's checksum headers: the CRC32 PutObject stored.
    {
        use agent::data::{Checksum, Integrity, ObjectStore};
        let crc = agent::data::checksum::compute(&Checksum::Crc32(0), &objects[0].1);
        let s3 = agent::aws::S3Objects::new(client.clone());
        assert_eq!(s3.head(&bucket, &objects[0].0).await.unwrap().integrity, Integrity::Full(crc.clone()));
        assert_eq!(s3.get(&bucket, &objects[0].0, None).await.unwrap().integrity, Integrity::Full(crc));
    }

    let missing = DataSet { bucket: format!("{bucket}-missing"), ..set };
    let plan = Plan { sets: vec![missing], ..plan };
    let fetch = DataFetch::start(agent::aws::S3Objects::new(client), plan).await.unwrap();
    let err = fetch.run().await.unwrap_err().to_string();
    assert!(err.starts_with(&format!("s3://{bucket}-missing/in/: NoSuchBucket listing it")), "{err}");
}
