//! Self-tests of the end-to-end harness: each piece works on its own, with
//! the real moto, real namespaces and the SDK's own IMDS client, before
//! scenario tests build on it. They need root, `ip`, `curl`, `ssh-keygen`
//! and moto in `.venv` (scripts/test installs it).

use aws_sdk_cloudformation::types::ResourceSignalStatus;
use e2e::imds::Identity;
use e2e::moto::{AssumedBy, REGION};
use e2e::node::NodeSpec;
use e2e::{Cluster, ClusterStack, Error, Imds, LocalAws, Network, Node, TestResult};
use node_contract::{NodeConfig, Role};
use std::net::{Ipv4Addr, SocketAddr};

fn identity(user_data: Option<&str>) -> Identity {
    Identity {
        instance_id: "i-0123456789abcdef0".into(),
        local_ipv4: Ipv4Addr::new(10, 213, 99, 10),
        instance_type: "g4dn.xlarge".into(),
        availability_zone: "us-east-1a".into(),
        region: REGION.into(),
        image_id: "ami-0e2e0e2e0e2e0e2e0".into(),
        account_id: "123456789012".into(),
        user_data: user_data.map(str::to_string),
    }
}

fn unexpected(what: &str, detail: impl std::fmt::Debug) -> Error {
    Error::Unexpected { what: what.into(), detail: format!("{detail:?}") }
}

/// Runs `program args` through `command` and returns its stdout, or fails with its stderr.
fn output(mut command: std::process::Command, what: &str) -> e2e::Result<String> {
    let out = command.output().map_err(Error::io("running a command in a namespace", what))?;
    if !out.status.success() {
        return Err(Error::Command {
            command: what.into(),
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn moto_serves_sqs_to_the_sdk() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let sqs = aws.sqs();
    let url = sqs
        .create_queue()
        .queue_name("self-test")
        .send()
        .await
        .map_err(|e| Error::aws("CreateQueue", &e))?
        .queue_url
        .unwrap_or_default();
    sqs.send_message().queue_url(&url).message_body("hello").send().await.map_err(|e| Error::aws("SendMessage", &e))?;
    let received = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .map_err(|e| Error::aws("ReceiveMessage", &e))?;
    let bodies: Vec<_> = received.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["hello"]);
    aws.reset()?;
    let after = sqs.get_queue_url().queue_name("self-test").send().await;
    assert!(after.is_err(), "the queue survived /moto-api/reset");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_synth_template_creates_in_moto_and_signals_are_recorded() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let stack = ClusterStack::create(&aws, "blueprints/minimal.yaml", "selftest", 2, &[]).await?;

    // Both launch templates' user data, as moto resolved it, carry a node config.
    let master = NodeConfig::from_json(&stack.node_config_json(&aws, "MasterLaunchTemplate")?)
        .map_err(|e| unexpected("master node config", e))?;
    let worker = NodeConfig::from_json(&stack.node_config_json(&aws, "WorkerLaunchTemplate")?)
        .map_err(|e| unexpected("worker node config", e))?;
    assert_eq!(master.role, Role::Master);
    assert_eq!(worker.role, Role::Worker);
    for config in [&master, &worker] {
        assert_eq!(config.queues.master, stack.resource("MasterQueue")?);
        assert_eq!(config.queues.workers, stack.resource("WorkerQueue")?);
        assert!(config.queues.master.contains("selftest-MasterQueue"), "{}", config.queues.master);
        assert_eq!(config.stack_name, "selftest");
        assert_eq!(config.stack_id, stack.id);
        assert_eq!(config.region, REGION);
    }
    assert_eq!(master.worker_group.as_deref(), Some(stack.worker_group()?));
    assert_eq!(stack.outputs.get("WorkerGroupName").map(String::as_str), Some(stack.worker_group()?));
    assert_eq!(stack.worker_instance_ids(&aws).await?.len(), 2);
    // The master reads the cluster's size from its worker group, not from its user data.
    let group = aws.auto_scaling_group(stack.worker_group()?).await?;
    let size = agent::aws::autoscaling::group_size(&group).map_err(|e| unexpected("the worker group's size", e))?;
    assert_eq!(size, agent::ports::GroupSize { requested: 2, min: 0 });
    let signals = master.signals.as_ref().ok_or_else(|| unexpected("master node config", "no signals"))?;
    assert_eq!(signals.master_resource, "MasterInstance");
    let handle = &signals.formation_handle_url;
    assert!(handle.starts_with(&format!("{}/_waitcondition/", aws.endpoint())), "{handle}");

    // Patch (q): the wait condition's Data (the FormationData output) is
    // an empty object before any signal.
    assert_eq!(stack.outputs.get("FormationData").map(String::as_str), Some("{}"));

    // A wait condition signal PUT to the handle URL becomes a stack event.
    let body = r#"{"Status":"SUCCESS","Reason":"2 of 2 workers","UniqueId":"master","Data":"2"}"#;
    ureq::put(handle).send(body).map_err(|e| Error::aws(format!("PUT {handle}"), &e))?;
    // SignalResource through the SDK becomes a stack event too.
    let cfn = aws.cloudformation();
    cfn.signal_resource()
        .stack_name("selftest")
        .logical_resource_id("MasterInstance")
        .unique_id(stack.master_instance_id()?)
        .status(ResourceSignalStatus::Success)
        .send()
        .await
        .map_err(|e| Error::aws("SignalResource", &e))?;
    let events = cfn
        .describe_stack_events()
        .stack_name("selftest")
        .send()
        .await
        .map_err(|e| Error::aws("DescribeStackEvents", &e))?;
    let reason_of = |logical: &str| {
        events
            .stack_events()
            .iter()
            .find(|e| e.logical_resource_id() == Some(logical) && e.resource_status_reason().is_some())
            .and_then(|e| e.resource_status_reason().map(str::to_string))
    };
    assert_eq!(
        reason_of("FormationWaitCondition").as_deref(),
        Some("Received SUCCESS signal with UniqueId master: 2 of 2 workers")
    );
    assert_eq!(
        reason_of("MasterInstance"),
        Some(format!("Received SUCCESS signal with UniqueId {}", stack.master_instance_id()?))
    );
    // ... and then the SUCCESS signals' Data by UniqueId, as AWS gives it.
    let described = ClusterStack::describe(&aws, "selftest").await?;
    assert_eq!(described.outputs.get("FormationData").map(String::as_str), Some(r#"{"master": "2"}"#));
    let recorded = aws.signals("selftest")?;
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    assert_eq!(recorded[0]["Data"], "2");
    assert_eq!(recorded[1]["LogicalResourceId"], "MasterInstance");
    // A malformed signal is refused, as the wait condition would not count it.
    let bad = ureq::put(handle).config().http_status_as_error(false).build().send("{\"Status\":\"MAYBE\"}");
    assert_eq!(bad.map_err(|e| Error::aws("PUT", &e))?.status(), 400);
    Ok(())
}

/// Launcher patches (k) to (n): a change set lists only what changed, a
/// resize updates the worker group in place and leaves the master alone, a
/// changed launch template replaces the master, and the stack deletes.
#[tokio::test(flavor = "multi_thread")]
async fn stack_updates_change_what_aws_changes_and_the_stack_deletes() -> TestResult {
    use aws_sdk_cloudformation::types::{Capability, ChangeSetType, Parameter};
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let stack = ClusterStack::create(&aws, "blueprints/minimal.yaml", "updates", 2, &[]).await?;
    let template = e2e::stack::build_template("blueprints/minimal.yaml")?;
    let cfn = aws.cloudformation();
    let params = |extra: &[(&str, &str)]| {
        let mut all = vec![("ImageId", e2e::stack::IMAGE_PARAMETER), ("WorkerCount", "2"), ("MaxWorkers", "2")];
        all.extend_from_slice(extra);
        Some(all.iter().map(|(k, v)| Parameter::builder().parameter_key(*k).parameter_value(*v).build()).collect())
    };
    let update = |extra: &'static [(&'static str, &'static str)]| {
        let (cfn, template) = (cfn.clone(), template.clone());
        async move {
            cfn.update_stack()
                .stack_name("updates")
                .template_body(template)
                .set_parameters(params(extra))
                .capabilities(Capability::CapabilityIam)
                .send()
                .await
                .map_err(|e| Error::aws("UpdateStack", &e))
        }
    };
    let physical = |logical: &'static str| {
        let cfn = cfn.clone();
        async move {
            // (moto's DescribeStackResource fails when a resource was skipped)
            let out = cfn.list_stack_resources().stack_name("updates").send().await;
            let out = out.map_err(|e| Error::aws("ListStackResources", &e))?;
            let found = out.stack_resource_summaries().iter().find(|r| r.logical_resource_id() == Some(logical));
            Ok::<_, Error>(found.and_then(|r| r.physical_resource_id().map(str::to_owned)))
        }
    };

    // (k) A change set of the template as it is lists nothing (moto used to
    // list the wait condition handle, whose stored template it had changed).
    let set = cfn
        .create_change_set()
        .stack_name("updates")
        .change_set_name("same")
        .change_set_type(ChangeSetType::Update)
        .template_body(&template)
        .set_parameters(params(&[("WorkerCount", "3"), ("MaxWorkers", "3")]))
        .capabilities(Capability::CapabilityIam)
        .send()
        .await
        .map_err(|e| Error::aws("CreateChangeSet", &e))?;
    let described = cfn
        .describe_change_set()
        .change_set_name(set.id().unwrap_or_default())
        .send()
        .await
        .map_err(|e| Error::aws("DescribeChangeSet", &e))?;
    let listed: Vec<_> =
        described.changes().iter().filter_map(|c| c.resource_change()?.logical_resource_id()).collect();
    assert!(!listed.contains(&"FormationHandle"), "{listed:?}");

    // (m) More workers: the same group keeps its instances and gets one
    // more; (l) the master, whose user data names the group, stays.
    let master = stack.master_instance_id()?.to_owned();
    let group = stack.worker_group()?.to_owned();
    let workers = stack.worker_instance_ids(&aws).await?;
    update(&[("WorkerCount", "3"), ("MaxWorkers", "3"), ("MinWorkers", "1")]).await?;
    assert_eq!(physical("WorkerGroup").await?.as_deref(), Some(group.as_str()));
    let now = stack.worker_instance_ids(&aws).await?;
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(workers.iter().all(|w| now.contains(w)), "{workers:?} kept in {now:?}");
    let size = agent::aws::autoscaling::group_size(&aws.auto_scaling_group(&group).await?)
        .map_err(|e| unexpected("the worker group's size", e))?;
    assert_eq!(size, agent::ports::GroupSize { requested: 3, min: 1 }, "the min-workers tag follows");
    assert_eq!(physical("MasterInstance").await?.as_deref(), Some(master.as_str()));

    // (l) A new master launch template version replaces the master.
    update(&[("WorkerCount", "3"), ("MaxWorkers", "3"), ("MinWorkers", "1"), ("MasterInstanceType", "g4dn.2xlarge")])
        .await?;
    let replaced = physical("MasterInstance").await?;
    assert!(replaced.as_deref().is_some_and(|id| id != master), "{replaced:?}");

    // (n) The stack, VPC included, deletes.
    let log_group = aws.log_group_of("updates").await?;
    let run = node_contract::logs::stack_run(&stack.id).unwrap_or_default();
    assert_eq!(log_group, node_contract::logs::log_group_name("updates", run), "named by the stack's name and run");
    assert!(aws.log_streams(&log_group).await?.is_some(), "the stack made no log group {log_group}");
    cfn.delete_stack().stack_name("updates").send().await.map_err(|e| Error::aws("DeleteStack", &e))?;
    let gone = cfn.describe_stacks().stack_name("updates").send().await;
    assert!(gone.is_err(), "{gone:?}");
    // Not a patch: moto keeps a resource whose DeletionPolicy is Retain, as
    // AWS does, so the nodes' log group outlives the stack.
    assert!(aws.log_streams(&log_group).await?.is_some(), "the log group {log_group} went with the stack");
    Ok(())
}

/// moto's FSx backend as boto3 (in the launcher's venv) describes it.
fn describe_file_systems(aws: &LocalAws) -> e2e::Result<serde_json::Value> {
    let mut command = std::process::Command::new(e2e::venv::moto_python()?);
    command
        .args([
            "-c",
            "import boto3, json; print(json.dumps(boto3.client('fsx').describe_file_systems()['FileSystems'], default=str))",
        ])
        .envs(aws.env());
    let text = output(command, "boto3 fsx describe_file_systems")?;
    serde_json::from_str(&text).map_err(|e| unexpected("DescribeFileSystems", e))
}

/// Launcher patches (aa) and (ab): a template's FSx for Lustre file system is
/// made in moto's FSx backend (what DescribeFileSystems shows), with the
/// DNS name and Lustre mount name `Fn::GetAtt` gives the nodes, its data
/// repository association is made on it, and both go with the stack.
#[tokio::test(flavor = "multi_thread")]
async fn moto_makes_fsx_for_lustre_and_its_s3_link_from_a_template() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let stack = ClusterStack::create(&aws, "blueprints/fsx-imagenet.yaml", "fsxself", 1, &[]).await?;
    let fs_id = stack.resource("FsxFileSystem")?;
    let systems = describe_file_systems(&aws)?;
    let systems = systems.as_array().ok_or_else(|| unexpected("DescribeFileSystems", &systems))?;
    assert_eq!(systems.len(), 1, "{systems:?}");
    let fs = &systems[0];
    assert_eq!(fs["FileSystemId"], fs_id);
    assert_eq!(fs["FileSystemType"], "LUSTRE");
    assert_eq!(fs["StorageCapacity"], 2400);
    assert_eq!(fs["DNSName"], format!("{fs_id}.fsx.{REGION}.amazonaws.com"));
    assert_eq!(fs["LustreConfiguration"]["DeploymentType"], "PERSISTENT_2");
    assert_eq!(fs["LustreConfiguration"]["PerUnitStorageThroughput"], 250);
    assert_eq!(fs["SubnetIds"][0], stack.resource("PrivateSubnet1")?);
    let worker = NodeConfig::from_json(&stack.node_config_json(&aws, "WorkerLaunchTemplate")?)
        .map_err(|e| unexpected("worker node config", e))?;
    let fsx = worker.fsx.ok_or_else(|| unexpected("worker node config", "no fsx"))?;
    assert_eq!(
        (fsx.file_system_id.as_str(), &fsx.dns_name),
        (fs_id, fs["DNSName"].as_str().map(str::to_string).as_ref().unwrap())
    );
    assert_eq!(fs["LustreConfiguration"]["MountName"], fsx.mount_name.as_str());
    let association = stack.resource("FsxDataRepositoryAssociation")?;
    assert!(association.starts_with("dra-") && association.len() == 21, "{association}");

    let cfn = aws.cloudformation();
    cfn.delete_stack().stack_name("fsxself").send().await.map_err(|e| Error::aws("DeleteStack", &e))?;
    assert_eq!(describe_file_systems(&aws)?, serde_json::json!([]), "the file system went with the stack");
    Ok(())
}

/// User plus system CPU seconds a process has used (`/proc/<pid>/stat`).
fn cpu_seconds(pid: u32) -> e2e::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
    // After the command's closing parenthesis: utime and stime are the 12th and 13th fields.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: f64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<f64>().ok()).sum();
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// Launcher patch (r): a receive costs moto time linear in the queue's
/// length. moto 5.2.5 computes every queue attribute three times for each
/// message it returns (a pass over the queue each): 10 messages from a queue
/// of 1,000 took about 0.45 s of moto's CPU, with the patch a few ms. CPU
/// time, not wall time, so a busy machine does not decide the outcome.
#[tokio::test(flavor = "multi_thread")]
async fn moto_receives_from_a_long_queue_in_milliseconds() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let sqs = aws.sqs();
    let url = sqs
        .create_queue()
        .queue_name("long-queue")
        .send()
        .await
        .map_err(|e| Error::aws("CreateQueue", &e))?
        .queue_url
        .unwrap_or_default();
    for batch in 0..100 {
        let entries = (0..10)
            .map(|i| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(format!("message {batch}-{i}"))
                    .build()
                    .map_err(|e| unexpected("a batch entry", e))
            })
            .collect::<e2e::Result<Vec<_>>>()?;
        sqs.send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| Error::aws("SendMessageBatch", &e))?;
    }
    let receives = 10;
    let before = cpu_seconds(aws.pid())?;
    for _ in 0..receives {
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(|e| Error::aws("ReceiveMessage", &e))?;
        assert_eq!(received.messages().len(), 10, "{received:?}");
    }
    let per_receive = (cpu_seconds(aws.pid())? - before) / f64::from(receives);
    assert!(per_receive < 0.05, "moto spent {per_receive:.3} s of CPU per receive from a queue of 1,000 messages");
    Ok(())
}

/// Launcher patch (s): an SQS request does not wait for moto's request
/// dispatcher lock. With a thousand agents' requests in flight, that lock
/// was a convoy (1,037 of moto's 1,095 threads waiting for it). The test
/// holds the lock for 3 s (`POST /_hold_dispatcher`) and sends meanwhile.
/// Launcher patches (v), (w), (x) and (y): Service Quotas answers EC2's vCPU
/// quotas (4,096 unset, a test's value once set, an unknown code refused as
/// AWS refuses it); a Capacity Reservation made through the launcher is
/// described in EC2's XML, and an unknown id is
/// `InvalidCapacityReservationId.NotFound`; p3.2xlarge and p3.16xlarge are
/// known and offered; Spot placement scores are answered per region.
#[tokio::test(flavor = "multi_thread")]
async fn moto_answers_quotas_capacity_reservations_and_p3_types() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let quota = |code: &str| {
        aws.json_call(
            "servicequotas",
            "ServiceQuotasV20190624.GetServiceQuota",
            &serde_json::json!({"ServiceCode": "ec2", "QuotaCode": code}),
        )
    };
    let p = quota("L-417A185B")?;
    assert_eq!(p["Quota"]["Value"], 4096.0, "{p}");
    assert_eq!(p["Quota"]["QuotaName"], "Running On-Demand P instances", "{p}");
    aws.set_ec2_quota("L-417A185B", 0.0)?;
    assert_eq!(quota("L-417A185B")?["Quota"]["Value"], 0.0);
    let unknown = quota("L-00000000").expect_err("an unknown quota code is refused");
    assert!(format!("{unknown:?}").contains("NoSuchResourceException"), "{unknown:?}");

    aws.add_capacity_reservation(&serde_json::json!({
        "CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1b", "TotalInstanceCount": 8, "AvailableInstanceCount": 6,
        "EndDate": "2030-06-17T11:30:00.000Z", "CapacityBlock": true,
    }))?;
    let described = aws.query(
        "ec2",
        &[
            ("Action", "DescribeCapacityReservations"),
            ("Version", "2016-11-15"),
            ("CapacityReservationId.1", "cr-0123456789abcdef0"),
        ],
    )?;
    for part in [
        "<availabilityZone>us-east-1b</availabilityZone>",
        "<totalInstanceCount>8</totalInstanceCount>",
        "<availableInstanceCount>6</availableInstanceCount>",
        "<reservationType>capacity-block</reservationType>",
        "<endDate>2030-06-17T11:30:00.000Z</endDate>",
    ] {
        assert!(described.contains(part), "{part} not in {described}");
    }
    let missing = aws
        .query(
            "ec2",
            &[
                ("Action", "DescribeCapacityReservations"),
                ("Version", "2016-11-15"),
                ("CapacityReservationId.1", "cr-0123456789abcdef1"),
            ],
        )
        .expect_err("an unknown reservation is refused");
    assert!(format!("{missing:?}").contains("InvalidCapacityReservationId.NotFound"), "{missing:?}");

    for (name, vcpus) in [("p3.2xlarge", 8), ("p3.16xlarge", 64)] {
        let types = aws.query(
            "ec2",
            &[("Action", "DescribeInstanceTypes"), ("Version", "2016-11-15"), ("InstanceType.1", name)],
        )?;
        assert!(types.contains(&format!("<defaultVCpus>{vcpus}</defaultVCpus>")), "{types}");
        let offered = aws.query(
            "ec2",
            &[
                ("Action", "DescribeInstanceTypeOfferings"),
                ("Version", "2016-11-15"),
                ("LocationType", "availability-zone"),
                ("Filter.1.Name", "instance-type"),
                ("Filter.1.Value.1", name),
            ],
        )?;
        assert!(offered.contains("<location>us-east-1a</location>"), "{offered}");
    }

    // (y): a Spot placement score per region asked, 5 unless set.
    aws.set_spot_placement_score("us-west-2", 9)?;
    let scores = aws.query(
        "ec2",
        &[
            ("Action", "GetSpotPlacementScores"),
            ("Version", "2016-11-15"),
            ("InstanceType.1", "g5.xlarge"),
            ("TargetCapacity", "4"),
            ("RegionName.1", "us-east-1"),
            ("RegionName.2", "us-west-2"),
        ],
    )?;
    assert!(scores.contains("<regionName>us-east-1</regionName><score>5</score>"), "{scores}");
    assert!(scores.contains("<regionName>us-west-2</regionName><score>9</score>"), "{scores}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn moto_serves_sqs_while_its_dispatcher_lock_is_held() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    let sqs = aws.sqs();
    let url = sqs
        .create_queue()
        .queue_name("unlocked")
        .send()
        .await
        .map_err(|e| Error::aws("CreateQueue", &e))?
        .queue_url
        .unwrap_or_default();
    let hold_url = format!("{}/_hold_dispatcher?seconds=3", aws.endpoint());
    let hold = std::thread::spawn(move || ureq::post(hold_url).send_empty().map(|_| ()));
    // Let the hold take the lock first.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    sqs.send_message()
        .queue_url(&url)
        .message_body("while held")
        .send()
        .await
        .map_err(|e| Error::aws("SendMessage", &e))?;
    let took = started.elapsed();
    let held = hold.join().map_err(|_| unexpected("the hold thread", "panicked"))?;
    held.map_err(|e| Error::aws("POST /_hold_dispatcher", &e))?;
    assert!(took < std::time::Duration::from_millis(1500), "SendMessage waited {took:?} for the dispatcher's lock");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_metadata_stand_in_answers_the_sdk_imds_client() -> TestResult {
    let imds = Imds::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), identity(Some("#!/bin/bash\necho hi\n")))?;
    let client = aws_config::imds::Client::builder()
        .endpoint(imds.endpoint())
        .map_err(|e| unexpected("imds endpoint", e))?
        .build();
    let get = |path: &'static str| {
        let client = client.clone();
        async move { client.get(path).await.map(String::from).map_err(|e| Error::aws(format!("IMDS {path}"), &e)) }
    };
    assert_eq!(get("/latest/meta-data/instance-id").await?, "i-0123456789abcdef0");
    assert_eq!(get("/latest/meta-data/local-ipv4").await?, "10.213.99.10");
    assert_eq!(get("/latest/meta-data/local-hostname").await?, "ip-10-213-99-10.ec2.internal");
    assert_eq!(get("/latest/meta-data/instance-type").await?, "g4dn.xlarge");
    assert_eq!(get("/latest/meta-data/placement/availability-zone").await?, "us-east-1a");
    assert_eq!(get("/latest/user-data").await?, "#!/bin/bash\necho hi\n");
    let document: serde_json::Value = serde_json::from_str(&get("/latest/dynamic/instance-identity/document").await?)
        .map_err(|e| unexpected("identity document", e))?;
    assert_eq!(document["instanceId"], "i-0123456789abcdef0");
    assert_eq!(document["region"], REGION);
    // The launch is when the stand-in started, as RFC 3339 in UTC (the agent's timeline reads it).
    let launched = document["pendingTime"].as_str().and_then(node_contract::interruption::parse_utc).unwrap_or(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    assert!((now.saturating_sub(60)..=now).contains(&launched), "{document}");
    assert!(get("/latest/meta-data/no-such-thing").await.is_err());
    imds.set_user_data(None);
    assert!(get("/latest/user-data").await.is_err(), "user data after it was removed");

    // Tokens are enforced: no token, no metadata.
    let base = imds.endpoint();
    let without = ureq::get(format!("{base}latest/meta-data/instance-id"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .map_err(|e| Error::aws("GET without token", &e))?;
    assert_eq!(without.status(), 401);
    let no_ttl = ureq::put(format!("{base}latest/api/token"))
        .config()
        .http_status_as_error(false)
        .build()
        .send_empty()
        .map_err(|e| Error::aws("PUT token", &e))?;
    assert_eq!(no_ttl.status(), 400);
    let token = ureq::put(format!("{base}latest/api/token"))
        .header("x-aws-ec2-metadata-token-ttl-seconds", "60")
        .send_empty()
        .map_err(|e| Error::aws("PUT token", &e))?;
    assert_eq!(token.headers().get("x-aws-ec2-metadata-token-ttl-seconds").and_then(|v| v.to_str().ok()), Some("60"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_in_namespaces_reach_moto_and_their_metadata_and_are_cleaned_up() -> TestResult {
    let names;
    let bridge;
    {
        let network = Network::create(2)?;
        names = [network.namespace(0).to_string(), network.namespace(1).to_string()];
        bridge = network.bridge();
        let aws = LocalAws::start(network.host_ip().into())?;
        let spec = |id: &str| NodeSpec {
            instance_id: id.into(),
            instance_type: "g4dn.xlarge".into(),
            user_data: Some("#!/bin/bash\n".into()),
            instance_profile: None,
        };
        let nodes = [
            Node::create(&network, 0, &aws, spec("i-00000000000000001"))?,
            Node::create(&network, 1, &aws, spec("i-00000000000000002"))?,
        ];
        for node in &nodes {
            for file in
                ["etc/passwd", "etc/hosts", "etc/ssh/ssh_host_ed25519_key.pub", "proc/sys/kernel/random/boot_id"]
            {
                assert!(node.root().join(file).is_file(), "{file} missing in {}", node.root().display());
            }
            // moto, from inside the namespace.
            let mut curl = node.command("curl");
            curl.args(["-sSf", "--max-time", "10", &format!("{}/moto-api/", aws.endpoint())]);
            output(curl, "curl moto-api in a namespace")?;
            // The metadata token flow, from inside the namespace, with the
            // endpoint the node's processes get.
            let script = "t=$(curl -sSf --max-time 5 -X PUT -H 'x-aws-ec2-metadata-token-ttl-seconds: 60' \
                          \"${AWS_EC2_METADATA_SERVICE_ENDPOINT}latest/api/token\") && \
                          curl -sSf --max-time 5 -H \"x-aws-ec2-metadata-token: $t\" \
                          \"${AWS_EC2_METADATA_SERVICE_ENDPOINT}latest/meta-data/instance-id\" && \
                          echo && hostname && ip -4 -o addr show dev eth0";
            let mut sh = node.command("sh");
            sh.args(["-c", script]);
            let out = output(sh, "metadata token flow in a namespace")?;
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines[0], node.instance_id());
            assert_eq!(lines[1], node.hostname());
            assert!(lines[2].contains(&format!("{}/24", node.ip())), "{out}");
        }
        // One node reaches a server on the other; the server is killed on drop.
        let mut server = nodes[1].command("python3");
        server.args(["-m", "http.server", "8080", "--bind", &nodes[1].ip().to_string()]);
        let mut running = nodes[1].spawn_logged(server, "http")?;
        let mut curl = nodes[0].command("curl");
        curl.args(["-sSf", "--retry", "20", "--retry-connrefused", "--retry-delay", "1", "--max-time", "30"])
            .arg(format!("http://{}:8080/", nodes[1].ip()));
        output(curl, "curl from node 0 to node 1")?;
        let pids = e2e::netns::run("ip", &["netns", "pids", &names[1]])?;
        assert!(!pids.trim().is_empty(), "no process in {}", names[1]);
        assert!(running.try_wait()?.is_none(), "the server exited: {}", running.log());
    }
    let listed = e2e::netns::run("ip", &["netns", "list"])?;
    for name in &names {
        assert!(!listed.lines().any(|l| l.split_whitespace().next() == Some(name.as_str())), "{name} left: {listed}");
    }
    assert!(e2e::netns::run("ip", &["link", "show", &bridge]).is_err(), "{bridge} left behind");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_gives_each_instance_a_node_with_its_user_data() -> TestResult {
    let cluster = Cluster::start("blueprints/minimal.yaml", "cluster", 2).await?;
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.master().instance_id(), cluster.stack().master_instance_id()?);
    let worker_ids: Vec<String> = cluster.workers().iter().map(|n| n.instance_id()).collect();
    assert_eq!(worker_ids, cluster.stack().worker_instance_ids(cluster.aws()).await?);
    for (node, role) in cluster.nodes().iter().zip([Role::Master, Role::Worker, Role::Worker]) {
        let user_data = node.imds().identity().user_data.ok_or_else(|| unexpected("node", "no user data"))?;
        let json = node_contract::config_from_user_data(&user_data).map_err(|e| unexpected("user data", e))?;
        let config = NodeConfig::from_json(json).map_err(|e| unexpected("node config", e))?;
        assert_eq!(config.role, role);
        // The handle URL is reachable from the node: moto listens on the bridge.
        if let Some(signals) = config.signals {
            let mut curl = node.command("curl");
            curl.args(["-sSf", "--max-time", "10", "-X", "PUT", "--data-binary"])
                .arg(r#"{"Status":"FAILURE","Reason":"self-test","UniqueId":"master","Data":"none"}"#)
                .arg(&signals.formation_handle_url);
            output(curl, "PUT to the formation handle from the master")?;
        }
    }
    // An agent is started in its node's namespace with the node's root,
    // endpoints and hostname (a stand-in script records how).
    let fake = cluster.master().root().join("fake-agent");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"args: $*\"\necho \"aws: $AWS_ENDPOINT_URL $AWS_REGION\"\n\
         echo \"imds: $AWS_EC2_METADATA_SERVICE_ENDPOINT\"\necho \"host: $(hostname)\"\necho done\n",
    )
    .map_err(Error::io("writing the fake agent", &fake))?;
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(Error::io("chmod", &fake))?;
    let worker = &cluster.workers()[0];
    let agent = worker.spawn_agent_binary(&fake, &["--config", "/x.json"])?;
    agent.wait_for_log("done", std::time::Duration::from_secs(10))?;
    let log = agent.log();
    assert!(
        log.contains(&format!("args: run --root {} --no-mount --config /x.json", worker.root().display())),
        "{log}"
    );
    assert!(log.contains(&format!("aws: {} us-east-1", cluster.aws().endpoint())), "{log}");
    assert!(log.contains(&format!("imds: {}", worker.imds().endpoint())), "{log}");
    assert!(log.contains(&format!("host: {}", worker.hostname())), "{log}");

    let signals = cluster.aws().signals("cluster")?;
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(signals[0]["Status"], "FAILURE");
    assert_eq!(signals[0]["LogicalResourceId"], "FormationWaitCondition");
    Ok(())
}

/// The error code of a refused call, or what came instead.
fn error_code<T: std::fmt::Debug, E: aws_sdk_sqs::error::ProvideErrorMetadata + std::fmt::Debug>(
    result: Result<T, E>,
) -> String {
    match result {
        Ok(out) => format!("allowed: {out:?}"),
        Err(e) => e.code().map_or_else(|| format!("no error code: {e:?}"), str::to_owned),
    }
}

/// The moto log's request lines answered 403 (a refused signature,
/// unknown or expired credentials, or a call a policy does not allow).
fn refused_requests(aws: &LocalAws) -> Vec<String> {
    let log = std::fs::read_to_string(aws.log_path()).unwrap_or_default();
    log.lines().filter(|l| l.contains("HTTP/1.1\" 403")).map(str::to_owned).collect()
}

/// Launcher patch (t): IAM is enforced from the first request, and the
/// template's scoped statements allow what AWS allows. Without (t1) the
/// master's calls on its group, its stack and its log group are denied;
/// without (t2) its log stream is; without (t3) every role's call is an
/// HTTP 500; without (t5) no role credentials can be had.
#[tokio::test(flavor = "multi_thread")]
async fn moto_enforces_iam_as_aws_does() -> TestResult {
    let aws = LocalAws::start(Ipv4Addr::LOCALHOST.into())?;
    // Keys moto does not know are refused: nothing is let through unchecked.
    let unknown = aws_sdk_sqs::config::Credentials::new("testing", "testing", None, None, "e2e");
    let config = aws
        .sdk_config()
        .to_builder()
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(unknown))
        .build();
    let refused = aws_sdk_sqs::Client::new(&config).list_queues().send().await;
    assert_eq!(error_code(refused), "InvalidClientTokenId");

    let stack = ClusterStack::create(&aws, "blueprints/minimal.yaml", "enforced", 1, &[]).await?;
    let who = AssumedBy::Ec2 {
        instance_profile: stack.resource("MasterInstanceProfile")?,
        instance_id: stack.master_instance_id()?,
    };
    let master = aws.service_credentials(&who, 900)?;
    assert_eq!(master.role_name, stack.resource("MasterRole")?);
    assert!(master.access_key_id.starts_with("ASIA") && !master.token.is_empty(), "{master:?}");
    let as_master = aws.sdk_config_as(&master);
    // (t1) Auto Scaling: the statement on the group's ARN allows it.
    aws_sdk_autoscaling::Client::new(&as_master)
        .set_desired_capacity()
        .auto_scaling_group_name(stack.worker_group()?)
        .desired_capacity(1)
        .send()
        .await
        .map_err(|e| Error::aws("SetDesiredCapacity as the master", &e))?;
    // (t1) CloudFormation: the statement on the stack id allows it.
    aws_sdk_cloudformation::Client::new(&as_master)
        .signal_resource()
        .stack_name(&stack.name)
        .logical_resource_id("MasterInstance")
        .unique_id(stack.master_instance_id()?)
        .status(ResourceSignalStatus::Success)
        .send()
        .await
        .map_err(|e| Error::aws("SignalResource as the master", &e))?;
    // (t1, t2) CloudWatch Logs: the statement on the group's `Arn` (`...:*`) covers its streams.
    let group = aws.log_group_of(&stack.name).await?;
    let logs = aws_sdk_cloudwatchlogs::Client::new(&as_master);
    logs.create_log_stream()
        .log_group_name(&group)
        .log_stream_name("master")
        .send()
        .await
        .map_err(|e| Error::aws("CreateLogStream as the master", &e))?;
    let event = aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
        .timestamp(1_700_000_000_000)
        .message("hello")
        .build()
        .map_err(|e| unexpected("a log event", e))?;
    logs.put_log_events()
        .log_group_name(&group)
        .log_stream_name("master")
        .log_events(event)
        .send()
        .await
        .map_err(|e| Error::aws("PutLogEvents as the master", &e))?;
    // What the role does not grant is denied, with AccessDenied.
    let listed = aws_sdk_sqs::Client::new(&as_master).list_queues().send().await;
    assert_eq!(error_code(listed), "AccessDenied");
    // (t5) Only the services a role trusts get its credentials.
    let master_role = format!("arn:aws:iam::123456789012:role/{}", stack.resource("MasterRole")?);
    let as_auto_scaling = AssumedBy::Service { service: "autoscaling.amazonaws.com", role_arn: &master_role };
    let refused = aws.service_credentials(&as_auto_scaling, 900).expect_err("Auto Scaling assumed the master's role");
    assert!(refused.to_string().contains("403"), "{refused}");
    // A deploying user is allowed everything, and its calls are logged as its.
    let (key, _) = aws.user("deployer")?;
    assert!(key.starts_with("AKIA"), "{key}");
    let calls = aws.calls()?;
    let principals: Vec<&str> = calls.iter().filter_map(|c| c["principal"].as_str()).collect();
    assert!(principals.contains(&"user/e2e-admin"), "{principals:?}");
    let session = format!("assumed-role/{}/{}", master.role_name, stack.master_instance_id()?);
    assert!(principals.contains(&session.as_str()), "{principals:?}");
    Ok(())
}

/// A node's role credentials, served by its metadata, rotate under a
/// running agent (here after 40 s: they live 60 s and are replaced 20 s
/// before they expire) without a single refused call; the first ones are
/// refused once expired (launcher patch (t4)), as AWS refuses them. One
/// rotation is waited for, not two: the second proved nothing the first
/// does not (the same refresh path, 40 s more of a CI run).
#[tokio::test(flavor = "multi_thread")]
async fn node_credentials_rotate_under_a_running_agent() -> TestResult {
    let mut cluster = Cluster::start("blueprints/minimal.yaml", "rotation", 1).await?;
    // The first credentials are used once more after they expired (below).
    cluster.allow_refusals("ExpiredToken");
    let mut first = Vec::new();
    for node in cluster.nodes() {
        node.set_credentials_lifetime(60);
        first.push(node.imds().role_credentials()?.ok_or_else(|| unexpected("role credentials", "none"))?);
        // The node's processes get no keys: only the metadata has them.
        assert!(!node.env().iter().any(|(k, _)| k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY"));
    }
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    let formed =
        e2e::scenario::wait_until("generation 1 with 2 nodes", std::time::Duration::from_secs(60), &refs, || {
            cluster
                .nodes()
                .iter()
                .all(|n| e2e::scenario::applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 2))
        })?;
    let rotated =
        e2e::scenario::wait_until("a rotation on every node", std::time::Duration::from_secs(110), &refs, || {
            cluster.nodes().iter().all(|n| n.imds().credentials_issued() >= 2)
        })?;
    // Each node goes on calling with its second set of credentials (a
    // worker's next call may be a long poll's end, up to 20 s away). The
    // call log is read once a second, not at every poll of `wait_until`.
    let mut polls = 0u32;
    let mut second_keys = || -> bool {
        polls += 1;
        if polls % 10 != 1 {
            return false;
        }
        let Ok(calls) = cluster.aws().calls() else { return false };
        cluster.nodes().iter().zip(&first).all(|(node, first)| {
            let session = format!("assumed-role/{}/{}", first.role_name, node.instance_id());
            let keys: std::collections::BTreeSet<&str> =
                calls.iter().filter(|c| c["principal"] == session.as_str()).filter_map(|c| c["key"].as_str()).collect();
            keys.len() >= 2
        })
    };
    let used = e2e::scenario::wait_until(
        "calls with the second credentials on every node",
        std::time::Duration::from_secs(60),
        &refs,
        &mut second_keys,
    )?;
    eprintln!("formed after {formed:?}, rotated {rotated:?} later, second credentials used {used:?} after that");
    let refused = refused_requests(cluster.aws());
    assert!(refused.is_empty(), "refused requests while the credentials rotated:\n{}", refused.join("\n"));
    for agent in &agents {
        let log = agent.log();
        for refusal in ["ExpiredToken", "InvalidClientTokenId", "AccessDenied"] {
            assert!(!log.contains(refusal), "{refusal}: {log}");
        }
    }
    // The first credentials expired 60 s after they were issued: refused.
    let expired = aws_sdk_sqs::Client::new(&cluster.aws().sdk_config_as(&first[1]))
        .receive_message()
        .queue_url(cluster.stack().resource("WorkerQueue")?)
        .send()
        .await;
    assert_eq!(error_code(expired), "ExpiredToken");
    Ok(())
}
