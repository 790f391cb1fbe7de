//! A [`Cloud`] that fails on purpose: [`Failing`] wraps any cloud (the
//! in-memory [`super::fake::FakeCloud`] in unit tests) and answers the
//! Nth call of a chosen operation with a chosen [`CloudError`], passing
//! every other call through. mountpoint-s3's `failure_client` is the model:
//! a fault test of a flow needs no network and no failure knob in the fake.
//!
//! A failed call never reaches the wrapped cloud, so what the fake holds
//! afterwards is what the flow changed before and after the failure, and
//! its call log shows what was tried.
//!
//! The error names the call the way [`super::sdk`] does ("CloudFormation
//! DeleteStack on stack demo"), so a test reads the message a user would.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::credentials::classify;
use super::port::*;

/// One operation of the [`Cloud`] port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Op {
    AccountId,
    Stack,
    Stacks,
    Events,
    Template,
    Resources,
    CreateStack,
    CreateChangeSet,
    ChangeSet,
    ExecuteChangeSet,
    DeleteChangeSet,
    DeleteStack,
    LogGroups,
    LogStreams,
    LogEvents,
    Group,
    SetDesiredCapacity,
    DeleteGroupTag,
    InstanceState,
    StartInstance,
    InstanceTypeZones,
    InstanceVcpus,
    CapacityReservation,
    SpotPlacementScore,
    ServiceQuota,
    BucketExists,
    CreateStagingBucket,
    ObjectExists,
    PutObject,
}

/// The kind of failure, as [`super::sdk`] classifies AWS's answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// `Throttling: Rate exceeded`.
    Throttled,
    /// The service could not be reached.
    Unavailable,
    /// The caller's policy lacks the call's action (named from
    /// [`super::policy`], as S3's bare "Access Denied" is).
    Denied,
    /// The credentials stopped working (an expired session).
    Expired,
    /// The service says the thing named is not there
    /// (`ResourceNotFoundException`, which the port reports as invalid).
    NotFound,
}

impl Fault {
    /// The error a call named `what` gets: AWS's answer for the fault,
    /// through the classifier the real calls' answers go through.
    fn error(self, what: String) -> CloudError {
        let (status, code, message) = match self {
            Fault::Unavailable => {
                // No answer came, so there is no code to classify.
                return CloudError::Unavailable { what, message: "dispatch failure: connection reset by peer".into() };
            }
            Fault::Expired => {
                // A short sentence of its own rather than `credentials::rejected`'s
                // (which names where the credentials came from): what the
                // tests read.
                return CloudError::Rejected {
                    said: format!("{what}: the session's credentials expired (ExpiredToken); sign in again"),
                    what,
                    code: "ExpiredToken".into(),
                };
            }
            Fault::Throttled => (400, "Throttling", "Rate exceeded"),
            Fault::Denied => (403, "AccessDenied", "Access Denied"),
            Fault::NotFound => (400, "ResourceNotFoundException", "the resource does not exist"),
        };
        classify(&what, status, code, format!("{code}: {message}"))
    }
}

/// Which calls of an operation fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Calls {
    /// Only the Nth (from 1).
    Nth(usize),
    /// The Nth and every one after it.
    From(usize),
}

/// Wraps `C`; fails the calls [`Failing::fail`] chose.
pub(crate) struct Failing<C> {
    inner: C,
    rules: Vec<(Op, Calls, Fault)>,
    /// Calls made so far, failed ones included, by operation.
    counts: Mutex<BTreeMap<Op, usize>>,
}

impl<C: Cloud> Failing<C> {
    /// `inner`, failing nothing yet.
    pub(crate) fn new(inner: C) -> Failing<C> {
        Failing { inner, rules: Vec::new(), counts: Mutex::default() }
    }

    /// Fails the `nth` call (from 1) of `op` with `fault`.
    pub(crate) fn fail(mut self, op: Op, nth: usize, fault: Fault) -> Failing<C> {
        self.rules.push((op, Calls::Nth(nth), fault));
        self
    }

    /// Fails the `nth` call of `op` and every later one with `fault`.
    pub(crate) fn fail_from(mut self, op: Op, nth: usize, fault: Fault) -> Failing<C> {
        self.rules.push((op, Calls::From(nth), fault));
        self
    }

    /// The wrapped cloud, to see what it holds.
    pub(crate) fn inner(&self) -> &C {
        &self.inner
    }

    /// How many calls of `op` were made, failed ones included.
    pub(crate) fn count(&self, op: Op) -> usize {
        self.counts.lock().unwrap().get(&op).copied().unwrap_or(0)
    }

    /// Counts a call of `op`; the error it gets, if it is one to fail.
    /// `what` names it in the error.
    fn check(&self, op: Op, what: impl FnOnce() -> String) -> CloudResult<()> {
        let n = {
            let mut counts = self.counts.lock().unwrap();
            let n = counts.entry(op).or_insert(0);
            *n += 1;
            *n
        };
        let hit = self.rules.iter().find(|(o, calls, _)| {
            *o == op
                && match *calls {
                    Calls::Nth(k) => n == k,
                    Calls::From(k) => n >= k,
                }
        });
        match hit {
            Some((_, _, fault)) => Err(fault.error(what())),
            None => Ok(()),
        }
    }
}

impl<C: Cloud> Cloud for Failing<C> {
    fn region(&self) -> &str {
        self.inner.region()
    }
    async fn account_id(&self) -> CloudResult<String> {
        self.check(Op::AccountId, || "STS GetCallerIdentity".into())?;
        self.inner.account_id().await
    }
    async fn stack(&self, name: &str) -> CloudResult<Option<Stack>> {
        self.check(Op::Stack, || format!("CloudFormation DescribeStacks on stack {name}"))?;
        self.inner.stack(name).await
    }
    async fn stacks(&self) -> CloudResult<Vec<Stack>> {
        self.check(Op::Stacks, || "CloudFormation DescribeStacks".into())?;
        self.inner.stacks().await
    }
    async fn events(&self, stack: &str, page: Option<String>) -> CloudResult<EventPage> {
        self.check(Op::Events, || format!("CloudFormation DescribeStackEvents on stack {stack}"))?;
        self.inner.events(stack, page).await
    }
    async fn template(&self, stack: &str) -> CloudResult<String> {
        self.check(Op::Template, || format!("CloudFormation GetTemplate on stack {stack}"))?;
        self.inner.template(stack).await
    }
    async fn resources(&self, stack: &str) -> CloudResult<Vec<Resource>> {
        self.check(Op::Resources, || format!("CloudFormation ListStackResources on stack {stack}"))?;
        self.inner.resources(stack).await
    }
    async fn create_stack(&self, request: &StackRequest) -> CloudResult<String> {
        self.check(Op::CreateStack, || format!("CloudFormation CreateStack on stack {}", request.name))?;
        self.inner.create_stack(request).await
    }
    async fn create_change_set(&self, request: &StackRequest, change_set: &str) -> CloudResult<String> {
        self.check(Op::CreateChangeSet, || format!("CloudFormation CreateChangeSet on stack {}", request.name))?;
        self.inner.create_change_set(request, change_set).await
    }
    async fn change_set(&self, id: &str) -> CloudResult<ChangeSet> {
        self.check(Op::ChangeSet, || format!("CloudFormation DescribeChangeSet {id}"))?;
        self.inner.change_set(id).await
    }
    async fn execute_change_set(&self, id: &str) -> CloudResult<()> {
        self.check(Op::ExecuteChangeSet, || format!("CloudFormation ExecuteChangeSet {id}"))?;
        self.inner.execute_change_set(id).await
    }
    async fn delete_change_set(&self, id: &str) -> CloudResult<()> {
        self.check(Op::DeleteChangeSet, || format!("CloudFormation DeleteChangeSet {id}"))?;
        self.inner.delete_change_set(id).await
    }
    async fn delete_stack(&self, name: &str) -> CloudResult<()> {
        self.check(Op::DeleteStack, || format!("CloudFormation DeleteStack on stack {name}"))?;
        self.inner.delete_stack(name).await
    }
    async fn log_groups(&self, prefix: &str) -> CloudResult<Vec<LogGroupInfo>> {
        self.check(Op::LogGroups, || format!("CloudWatch Logs DescribeLogGroups for {prefix}"))?;
        self.inner.log_groups(prefix).await
    }
    async fn log_streams(&self, group: &str, limit: usize) -> CloudResult<Vec<String>> {
        self.check(Op::LogStreams, || format!("CloudWatch Logs DescribeLogStreams in {group}"))?;
        self.inner.log_streams(group, limit).await
    }
    async fn log_events(&self, query: &LogQuery, page: Option<String>) -> CloudResult<LogPage> {
        self.check(Op::LogEvents, || format!("CloudWatch Logs FilterLogEvents in {}", query.group))?;
        self.inner.log_events(query, page).await
    }
    async fn group(&self, name: &str) -> CloudResult<Option<GroupState>> {
        self.check(Op::Group, || format!("Auto Scaling DescribeAutoScalingGroups on group {name}"))?;
        self.inner.group(name).await
    }
    async fn set_desired_capacity(&self, group: &str, desired: u32) -> CloudResult<()> {
        self.check(Op::SetDesiredCapacity, || format!("Auto Scaling SetDesiredCapacity on group {group}"))?;
        self.inner.set_desired_capacity(group, desired).await
    }
    async fn delete_group_tag(&self, group: &str, key: &str) -> CloudResult<()> {
        self.check(Op::DeleteGroupTag, || format!("Auto Scaling DeleteTags on group {group}"))?;
        self.inner.delete_group_tag(group, key).await
    }
    async fn instance_state(&self, id: &str) -> CloudResult<Option<String>> {
        self.check(Op::InstanceState, || format!("EC2 DescribeInstances on instance {id}"))?;
        self.inner.instance_state(id).await
    }
    async fn start_instance(&self, id: &str) -> CloudResult<()> {
        self.check(Op::StartInstance, || format!("EC2 StartInstances on instance {id}"))?;
        self.inner.start_instance(id).await
    }
    async fn instance_type_zones(&self, instance_type: &str) -> CloudResult<Vec<String>> {
        self.check(Op::InstanceTypeZones, || format!("EC2 DescribeInstanceTypeOfferings of {instance_type}"))?;
        self.inner.instance_type_zones(instance_type).await
    }
    async fn instance_vcpus(&self, instance_type: &str) -> CloudResult<Option<u32>> {
        self.check(Op::InstanceVcpus, || format!("EC2 DescribeInstanceTypes of {instance_type}"))?;
        self.inner.instance_vcpus(instance_type).await
    }
    async fn capacity_reservation(&self, id: &str) -> CloudResult<Option<Reservation>> {
        self.check(Op::CapacityReservation, || format!("EC2 DescribeCapacityReservations of {id}"))?;
        self.inner.capacity_reservation(id).await
    }
    async fn spot_placement_score(&self, types: &[String], capacity: u32) -> CloudResult<Option<u32>> {
        self.check(Op::SpotPlacementScore, || "EC2 GetSpotPlacementScores".into())?;
        self.inner.spot_placement_score(types, capacity).await
    }
    async fn service_quota(&self, service: &str, code: &str) -> CloudResult<Option<Quota>> {
        self.check(Op::ServiceQuota, || format!("Service Quotas GetServiceQuota of {service} {code}"))?;
        self.inner.service_quota(service, code).await
    }
    async fn bucket_exists(&self, bucket: &str) -> CloudResult<bool> {
        self.check(Op::BucketExists, || format!("S3 HeadBucket on bucket {bucket}"))?;
        self.inner.bucket_exists(bucket).await
    }
    async fn create_staging_bucket(&self, bucket: &str) -> CloudResult<()> {
        self.check(Op::CreateStagingBucket, || format!("S3 CreateBucket on bucket {bucket}"))?;
        self.inner.create_staging_bucket(bucket).await
    }
    async fn object_exists(&self, bucket: &str, key: &str) -> CloudResult<bool> {
        self.check(Op::ObjectExists, || format!("S3 HeadObject on s3://{bucket}/{key}"))?;
        self.inner.object_exists(bucket, key).await
    }
    async fn put_object(&self, bucket: &str, key: &str, body: Vec<u8>) -> CloudResult<()> {
        self.check(Op::PutObject, || format!("S3 PutObject on s3://{bucket}/{key}"))?;
        self.inner.put_object(bucket, key, body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::fake::FakeCloud;

    /// Only the chosen call fails, with the chosen error naming it; the
    /// wrapped cloud never sees it; the calls around it go through.
    #[tokio::test]
    async fn the_nth_call_of_one_operation_fails_and_the_rest_pass_through() {
        let cloud = Failing::new(FakeCloud::default()).fail(Op::PutObject, 2, Fault::Throttled);
        cloud.put_object("b", "one", vec![1]).await.unwrap();
        let e = cloud.put_object("b", "two", vec![2]).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "S3 PutObject on s3://b/two: AWS throttled the call (Throttling: Rate exceeded); wait a minute, then try again"
        );
        cloud.put_object("b", "three", vec![3]).await.unwrap();
        assert!(cloud.bucket_exists("b").await.is_ok());
        let objects = cloud.inner().objects.lock().unwrap();
        let keys: Vec<&str> = objects.keys().map(|(_, k)| k.as_str()).collect();
        assert_eq!(keys, ["one", "three"]);
        assert_eq!(cloud.inner().calls_named("put_object"), 2);
        assert_eq!(cloud.count(Op::PutObject), 3);
    }

    #[tokio::test]
    async fn each_fault_is_the_error_the_sdk_would_give() {
        let cloud = Failing::new(FakeCloud::default())
            .fail(Op::DeleteStack, 1, Fault::Denied)
            .fail(Op::Stack, 1, Fault::Unavailable)
            .fail(Op::Template, 1, Fault::NotFound)
            .fail(Op::AccountId, 1, Fault::Expired)
            .fail_from(Op::Events, 2, Fault::Throttled);
        let denied = cloud.delete_stack("demo").await.unwrap_err();
        assert!(
            matches!(&denied, CloudError::Denied { action: Some(a), .. } if a == "cloudformation:DeleteStack"),
            "{denied:?}"
        );
        assert!(
            denied
                .to_string()
                .starts_with("CloudFormation DeleteStack on stack demo: AWS refused cloudformation:DeleteStack")
        );
        assert!(matches!(cloud.stack("demo").await, Err(CloudError::Unavailable { .. })));
        assert!(
            matches!(cloud.template("demo").await, Err(CloudError::Invalid { message, .. }) if message.contains("ResourceNotFound"))
        );
        assert!(matches!(cloud.account_id().await, Err(CloudError::Rejected { code, .. }) if code == "ExpiredToken"));
        assert!(cloud.events("demo", None).await.is_ok());
        for _ in 0..3 {
            assert!(matches!(cloud.events("demo", None).await, Err(CloudError::Throttled { .. })));
        }
        // Once each failed, the rest go through.
        assert!(cloud.stack("demo").await.is_ok());
        assert!(cloud.delete_stack("demo").await.is_ok());
    }
}
