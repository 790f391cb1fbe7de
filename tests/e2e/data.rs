//! Training data on every node before it joins (docs/ARCHITECTURE.md,
//! "Training data"), against the local AWS's S3 with IAM enforced: the
//! nodes' roles read exactly the data's prefixes (tests/e2e/iam.rs shows
//! the other direction).
//!
//! - A cluster forms only once every node's files match the bucket's; the
//!   nodes fetched together, so the objects were read from S3 about once,
//!   not once per node (the launcher records every S3 request with its
//!   path, range and principal); the formation signal carries the fetch;
//!   the master left its data line on the worker group for `synth status`.
//! - A worker that joins later fetches before it joins; a restarted agent
//!   fetches only what is missing.
//! - A node whose role may not read one object fails, and the formation's
//!   reason names the object.
//!
//! EFS is one host directory every node's `<root>/efs` links to
//! ([`SharedEfs`]), as a real EFS mount gives every node the same files:
//! the nodes find each other there, and the master's EFS set is there.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use e2e::scenario::{SharedEfs, applied, edit_node_config, wait_until};
use e2e::{Cluster, Error, TestResult};

const BUCKET: &str = "e2e-training-data";
const BLUEPRINT: &str = "tests/fixtures/data/cluster.yaml";

/// The bucket's objects: 40 small "images" and one object large enough to
/// be fetched in ranged parts under train/, and 5 objects under val/.
fn objects() -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    for i in 0..40u32 {
        let body: Vec<u8> = (0..65_536u32).map(|b| (b.wrapping_mul(31) ^ i) as u8).collect();
        all.insert(format!("train/n{:02}/img{i:03}.jpg", i % 4), body);
    }
    all.insert("train/shard-000.tar".into(), (0..24u32 << 20).map(|b| (b >> 7) as u8 ^ (b as u8)).collect());
    for i in 0..5u32 {
        all.insert(format!("val/img{i}.jpg"), vec![i as u8; 10_000]);
    }
    all
}

fn s3(aws: &e2e::LocalAws) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&aws.sdk_config()).force_path_style(true).build())
}

async fn fill_bucket(aws: &e2e::LocalAws, objects: &BTreeMap<String, Vec<u8>>) -> e2e::Result<()> {
    let s3 = s3(aws);
    s3.create_bucket().bucket(BUCKET).send().await.map_err(|e| Error::aws("CreateBucket", &e))?;
    for (key, body) in objects {
        let put = s3.put_object().bucket(BUCKET).key(key).body(body.clone().into()).send().await;
        put.map_err(|e| Error::aws(format!("PutObject {key}"), &e))?;
    }
    Ok(())
}

/// Whether every object under `prefix` is at `dir` under its key less the
/// prefix, byte for byte; a description of the first difference if not.
fn matches(dir: &Path, prefix: &str, objects: &BTreeMap<String, Vec<u8>>) -> Result<(), String> {
    for (key, body) in objects.iter().filter(|(k, _)| k.starts_with(prefix)) {
        let path = dir.join(&key[prefix.len()..]);
        match std::fs::read(&path) {
            Ok(bytes) if &bytes == body => {}
            Ok(bytes) => {
                return Err(format!("{} has {} bytes, not the object's {}", path.display(), bytes.len(), body.len()));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(())
}

/// The S3 GETs of keys under `prefix` the launcher recorded, as (principal, key, range).
fn gets(aws: &e2e::LocalAws, prefix: &str) -> e2e::Result<Vec<(String, String, Option<String>)>> {
    let wanted = format!("/{BUCKET}/{prefix}");
    Ok(aws
        .calls()?
        .into_iter()
        .filter(|c| c["service"] == "s3" && c["method"] == "GET")
        .filter_map(|c| {
            let path = c["path"].as_str()?;
            let key = path.strip_prefix(&format!("/{BUCKET}/"))?;
            path.starts_with(&wanted).then(|| {
                (
                    c["principal"].as_str().unwrap_or_default().to_owned(),
                    key.to_owned(),
                    c["range"].as_str().map(str::to_owned),
                )
            })
        })
        .collect())
}

/// Bytes a GET asked for: its range's length, or the whole object.
fn asked(range: Option<&str>, whole: usize) -> usize {
    let Some(spec) = range.and_then(|r| r.strip_prefix("bytes=")) else { return whole };
    let Some((a, b)) = spec.split_once('-') else { return whole };
    match (a.parse::<usize>(), b.parse::<usize>()) {
        (Ok(a), Ok(b)) => (b.min(whole.saturating_sub(1)) + 1).saturating_sub(a),
        _ => whole,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_forms_once_every_node_holds_its_data_read_from_s3_about_once() -> TestResult {
    let stack = "data-forms";
    let mut cluster = Cluster::start_with_spares(BLUEPRINT, stack, 2, &[("MaxWorkers", "4")], 1).await?;
    let objects = objects();
    fill_bucket(cluster.aws(), &objects).await?;
    let efs = SharedEfs::new()?;
    for node in cluster.nodes() {
        efs.link(node)?;
    }
    let mut agents = cluster.spawn_agents()?;
    {
        let refs: Vec<_> = agents.iter().collect();
        wait_until("generation 1 with 3 nodes everywhere", Duration::from_secs(180), &refs, || {
            cluster.nodes().iter().all(|n| applied(n.root()).is_some_and(|(g, m)| g == 1 && m.len() == 3))
        })?;
    }
    // Every node holds train/ in its scratch directory; val/ is on EFS once.
    for node in cluster.nodes() {
        matches(&node.root().join("scratch/train"), "train/", &objects).map_err(|e| Error::Setup(e.to_string()))?;
    }
    matches(&efs.path().join("val"), "val/", &objects).map_err(|e| Error::Setup(e.to_string()))?;

    // S3 read about once: the bytes the nodes asked S3 for under train/
    // are within 1.5x of the data set (each node fetching everything: 3x).
    let train_bytes: usize = objects.iter().filter(|(k, _)| k.starts_with("train/")).map(|(_, b)| b.len()).sum();
    let read: usize = gets(cluster.aws(), "train/")?
        .iter()
        .map(|(_, key, range)| asked(range.as_deref(), objects.get(key).map_or(0, Vec::len)))
        .sum();
    assert!(
        read as f64 <= 1.5 * train_bytes as f64,
        "the nodes read {read} bytes of train/ from S3 for a data set of {train_bytes}"
    );
    let readers: std::collections::BTreeSet<String> =
        gets(cluster.aws(), "train/")?.into_iter().map(|(who, _, _)| who).collect();
    assert!(readers.len() >= 2, "one node read everything: {readers:?}");
    // Only the master read val/.
    let master_session = format!("/{}", cluster.master().instance_id());
    for (who, key, _) in gets(cluster.aws(), "val/")? {
        assert!(who.ends_with(&master_session), "{who} read {key}, which only the master fetches");
    }

    // The signal carries the fetch, and the master's line is on the group.
    let signals = cluster.aws().signals(stack)?;
    let success = signals
        .iter()
        .find(|s| s["LogicalResourceId"] == "FormationWaitCondition" && s["Status"] == "SUCCESS")
        .ok_or_else(|| Error::Setup(format!("no success signal: {signals:?}")))?;
    let data: serde_json::Value = serde_json::from_str(success["Data"].as_str().unwrap_or("{}"))
        .map_err(|e| Error::Setup(format!("the signal's data: {e}")))?;
    assert_eq!(data["data"]["nodes"], 3, "{data}");
    assert!(data["data"]["bytes"].as_u64() >= Some(train_bytes as u64), "{data}");
    assert_eq!(data["timeline"]["data_ready"]["nodes"], 3, "{data}");
    let group = cluster.stack().worker_group()?.to_string();
    let tagged = || async {
        let g = cluster.aws().auto_scaling_group(&group).await.ok()?;
        g.tags()
            .iter()
            .find(|t| t.key() == Some(node_contract::data::DATA_TAG))
            .and_then(|t| t.value().map(str::to_owned))
    };
    let mut tag = None;
    for _ in 0..40 {
        tag = tagged().await;
        if tag.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mark = tag.as_deref().and_then(node_contract::data::DataMark::from_tag);
    assert!(mark.as_ref().is_some_and(|m| m.line.contains("3 nodes")), "the worker group's data tag: {tag:?}");

    // A worker that joins later fetches before it joins.
    let new_id =
        cluster.scale_out(3).await?.into_iter().next().ok_or_else(|| Error::Setup("no new instance".into()))?;
    let node = cluster.add_worker(&new_id)?;
    efs.link(node)?;
    let new_root = node.root().to_path_buf();
    agents.push(node.spawn_agent(&[])?);
    {
        let refs: Vec<_> = agents.iter().collect();
        wait_until("generation 2 with 4 nodes on the new worker", Duration::from_secs(120), &refs, || {
            applied(&new_root).is_some_and(|(_, m)| m.len() == 4)
        })?;
    }
    matches(&new_root.join("scratch/train"), "train/", &objects).map_err(|e| Error::Setup(e.to_string()))?;
    let master_state = e2e::scenario::read(cluster.master().root(), "/var/lib/deeplearning/master.json");
    let state: serde_json::Value = serde_json::from_str(&master_state).unwrap_or_default();
    let joined = &state["timeline"]["nodes"][&new_id];
    assert!(
        joined["data_ready_ms"].as_u64().is_some()
            && joined["data_ready_ms"].as_u64() <= joined["registered_ms"].as_u64(),
        "the new worker registered before its data was ready: {joined}"
    );

    // A restarted agent fetches only what is missing: one file removed,
    // one GET (or its parts) for it, none for the rest.
    let victim = 1;
    agents[victim].kill();
    let root = cluster.nodes()[victim].root().to_path_buf();
    std::fs::remove_file(root.join("scratch/train/n01/img001.jpg")).map_err(Error::io("removing a file", &root))?;
    let session = format!("/{}", cluster.nodes()[victim].instance_id());
    let before = gets(cluster.aws(), "train/")?.into_iter().filter(|(who, _, _)| who.ends_with(&session)).count();
    agents[victim] = cluster.nodes()[victim].spawn_agent(&[])?;
    {
        let refs: Vec<_> = agents.iter().collect();
        wait_until("the removed file back", Duration::from_secs(90), &refs, || {
            matches(&root.join("scratch/train"), "train/", &objects).is_ok()
        })?;
    }
    let after: Vec<String> = gets(cluster.aws(), "train/")?
        .into_iter()
        .filter(|(who, _, _)| who.ends_with(&session))
        .skip(before)
        .map(|(_, key, _)| key)
        .collect();
    assert!(
        after.iter().all(|k| k == "train/n01/img001.jpg"),
        "the restarted agent read complete files again: {after:?}"
    );
    Ok(())
}

/// A worker whose role may not read its data (an explicit deny on the
/// objects, added to the worker role as an administrator would): the
/// objects whose home it is fail to fetch (the master reads them itself
/// once the worker cannot serve them), it does not join, and the failed
/// formation's reason names an object and AWS's refusal.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_cannot_read_an_object_is_named_with_its_key() -> TestResult {
    let stack = "data-denied";
    let mut cluster = Cluster::start_with(BLUEPRINT, stack, 1, &[("MinWorkers", "1")]).await?;
    let objects = objects();
    fill_bucket(cluster.aws(), &objects).await?;
    let locked = "train/";
    let role = cluster.stack().resource("WorkerRole")?.to_string();
    let deny = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Action": "s3:GetObject", "Resource": format!("arn:aws:s3:::{BUCKET}/{locked}*")}]
    });
    let policy = deny.to_string();
    cluster.aws().query(
        "iam",
        &[
            ("Action", "PutRolePolicy"),
            ("Version", "2010-05-08"),
            ("RoleName", &role),
            ("PolicyName", "deny-one-object"),
            ("PolicyDocument", &policy),
        ],
    )?;
    // The worker's refused reads are what this test is about.
    cluster.allow_refusals("s3:GetObject");
    let efs = SharedEfs::new()?;
    for node in cluster.nodes() {
        efs.link(node)?;
    }
    edit_node_config(cluster.master(), |c| c["formation_timeout_seconds"] = 25.into())?;
    let agents = cluster.spawn_agents()?;
    let refs: Vec<_> = agents.iter().collect();
    wait_until("the formation signal", Duration::from_secs(120), &refs, || {
        cluster.aws().signals(stack).is_ok_and(|s| s.iter().any(|x| x["LogicalResourceId"] == "FormationWaitCondition"))
    })?;
    let signals = cluster.aws().signals(stack)?;
    let formation = signals
        .iter()
        .find(|s| s["LogicalResourceId"] == "FormationWaitCondition")
        .ok_or_else(|| Error::Setup("no formation signal".into()))?;
    let reason = formation["Reason"].as_str().unwrap_or_default();
    assert_eq!(formation["Status"], "FAILURE", "{reason}");
    let named = format!("s3://{BUCKET}/{locked}");
    assert!(
        reason.contains(&named) && reason.contains("AccessDenied"),
        "the reason does not name the object: {reason}"
    );
    let worker = cluster.workers()[0].root();
    assert!(applied(worker).is_none(), "the worker applied a manifest");
    Ok(())
}
