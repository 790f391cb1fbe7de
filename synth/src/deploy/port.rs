//! The edge of `synth deploy` and friends: every AWS call they make, as one
//! small trait ([`Cloud`]), with plain data types that the pure core
//! ([`super::watch`], [`super::cause`], [`super::change`]) reads.
//!
//! [`super::sdk`] implements it with the AWS SDK (CloudFormation, S3, STS,
//! Auto Scaling), against AWS or, through the SDK's endpoint override, the
//! local AWS of the tests. Unit tests use in-memory implementations. A new
//! command that needs another service adds its methods here and their SDK
//! calls in [`super::sdk`], as `synth logs` did for CloudWatch Logs (EC2's
//! two calls are signed Query API requests, [`super::ec2`]).

use std::collections::BTreeMap;
use std::future::Future;

/// An AWS call failed. Every variant's message says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CloudError {
    /// No credentials were found in the standard chain.
    #[error(
        "no AWS credentials: set AWS_PROFILE (or pass --profile), or run `aws configure` \
         (or `aws sso login`), then try again (SYNTH_LOG=debug shows what each source of credentials said){}",
        detail_suffix(.0)
    )]
    NoCredentials(String),
    /// The credentials lack a permission: the message names the IAM action
    /// and the principal AWS refused, and `synth policy` ([`refusal`]).
    #[error("{}", refusal(.what, .message, .action.as_deref()))]
    Denied {
        /// The call, e.g. "CloudFormation CreateStack on stack demo".
        what: String,
        /// The service's message.
        message: String,
        /// The IAM action synth knows the call needs
        /// (`super::policy::action_of`), for a refusal that does not name
        /// it (S3's).
        action: Option<String>,
    },
    /// AWS did not accept the credentials themselves (an unknown key, a
    /// secret that does not match, an expired session): the message names
    /// the credentials used and what to check (`credentials::rejected`
    /// writes it when it classifies the answer).
    #[error("{said}")]
    Rejected {
        /// The call.
        what: String,
        /// AWS's error code (`InvalidClientTokenId`, ...).
        code: String,
        /// The whole message.
        said: String,
    },
    /// The request was refused as invalid.
    #[error("{what}: {message}")]
    Invalid {
        /// The call.
        what: String,
        /// The service's message.
        message: String,
    },
    /// AWS throttled the call (`Throttling`, `SlowDown`, HTTP 429, ...): for
    /// a call through the SDK, also each of the SDK's own retries (its
    /// standard mode backs off and tries three times). Not invalid input:
    /// the same call goes through once the account's request rate is lower.
    #[error("{what}: AWS throttled the call ({message}); wait a minute, then try again")]
    Throttled {
        /// The call.
        what: String,
        /// The service's message.
        message: String,
    },
    /// The service could not be reached or failed.
    #[error("{what}: {message}. Check the network and the region, then try again")]
    Unavailable {
        /// The call.
        what: String,
        /// What happened.
        message: String,
    },
}

/// What the credentials provider said, under the message (it may be an
/// error chain of several lines, as `cli_output::report` writes them).
fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() { String::new() } else { format!("\n  caused by: {detail}") }
}

/// What to say when AWS refused a call (`what`, as [`super::sdk`] names
/// it) with `message`, in one line: the action and who was refused, from
/// AWS's own words when it gives them ("User: arn:... is not authorized to
/// perform: cloudformation:CreateChangeSet on resource: ..."), else `known`,
/// the action synth knows the call needs; and where the policy that allows
/// it is.
pub(crate) fn refusal(what: &str, message: &str, known: Option<&str>) -> String {
    const HINT: &str = "the deploying user's policy lacks it; `synth policy` prints the policy this release needs";
    let (who, said) = match message.split_once(" is not authorized to perform: ") {
        Some((user, rest)) => {
            let who = user.rsplit("User: ").next().unwrap_or(user).trim();
            let action = rest.split([' ', ',', ';']).next().unwrap_or_default().trim_end_matches('.');
            (Some(who.rsplit(':').next().unwrap_or(who).to_owned()), (!action.is_empty()).then(|| action.to_owned()))
        }
        None => (None, None),
    };
    let action = said.or_else(|| known.map(str::to_owned));
    match (action, who) {
        (Some(action), Some(who)) => format!("{what}: AWS refused {action} to {who}: {HINT}"),
        (Some(action), None) => format!(
            "{what}: AWS refused {action} ({message}): the deploying user's policy may lack it; \
             `synth policy` prints the policy this release needs"
        ),
        (None, _) => format!(
            "{what}: AWS refused it ({message}): the deploying user's policy may lack it; \
             `synth policy` prints the policy this release needs"
        ),
    }
}

/// What every method returns.
pub(crate) type CloudResult<T> = Result<T, CloudError>;

/// A stack, as `DescribeStacks` gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stack {
    /// Its name.
    pub name: String,
    /// Its id (an ARN).
    pub id: String,
    /// `CREATE_COMPLETE`, `UPDATE_ROLLBACK_IN_PROGRESS`, ...
    pub status: String,
    /// Why it is in that status, when CloudFormation says.
    pub reason: Option<String>,
    /// The template's description.
    pub description: Option<String>,
    /// The outputs, in the order CloudFormation lists them.
    pub outputs: Vec<Output>,
    /// The parameter values it runs with.
    pub parameters: BTreeMap<String, String>,
    /// When it was last created or updated (unix milliseconds).
    pub changed_ms: Option<i64>,
}

/// One stack output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// `MasterAddress`, `SshCommand`, ...
    pub key: String,
    /// Its value.
    pub value: String,
    /// What it is.
    pub description: Option<String>,
}

/// One stack event (`DescribeStackEvents`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Event {
    /// Unique per event: what de-duplicates them.
    pub id: String,
    /// When it happened to the precision the service gives (unix
    /// nanoseconds): what orders events of one second or millisecond.
    pub at_ns: i128,
    /// The resource's logical id (the stack's name for the stack's own events).
    pub logical_id: String,
    /// The resource's physical id, when it has one.
    pub physical_id: Option<String>,
    /// `AWS::EC2::VPC`, ..., `AWS::CloudFormation::Stack` for the stack itself.
    pub resource_type: String,
    /// `CREATE_IN_PROGRESS`, `CREATE_FAILED`, ...
    pub status: String,
    /// The status reason.
    pub reason: Option<String>,
}

impl Event {
    /// When it happened, in unix milliseconds (what is printed and timed).
    pub(crate) fn at_ms(&self) -> i64 {
        i64::try_from(self.at_ns.div_euclid(1_000_000)).unwrap_or(0)
    }

    /// Whether the event is about the stack itself, not one of its resources.
    pub(crate) fn is_stack(&self) -> bool {
        self.resource_type == "AWS::CloudFormation::Stack"
    }
}

/// One page of events, newest first, as the API gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EventPage {
    /// The events of this page, newest first.
    pub events: Vec<Event>,
    /// The token of the next (older) page.
    pub next: Option<String>,
}

/// One resource of a stack (`ListStackResources`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resource {
    /// Logical id.
    pub logical_id: String,
    /// Physical id.
    pub physical_id: Option<String>,
    /// Type.
    pub resource_type: String,
    /// Status.
    pub status: String,
    /// Status reason.
    pub reason: Option<String>,
}

/// Where CloudFormation reads a template from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TemplateSource {
    /// Inline (at most 51,200 bytes).
    Body(String),
    /// An S3 object's HTTPS URL (at most 1 MB).
    Url(String),
}

/// A stack to create, or the change set of an update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StackRequest {
    /// The stack's name.
    pub name: String,
    /// The template.
    pub template: TemplateSource,
    /// Parameter values; parameters not named take the template's default.
    pub parameters: BTreeMap<String, String>,
    /// On a create: keep what was created when it fails (no rollback).
    pub keep_on_failure: bool,
}

/// One resource change of a change set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Change {
    /// `Add`, `Modify`, `Remove`, `Import`, `Dynamic`.
    pub action: String,
    /// Logical id.
    pub logical_id: String,
    /// Type.
    pub resource_type: String,
    /// `True`, `False`, `Conditional`; `None` where the service does not say.
    pub replacement: Option<String>,
    /// The properties that change and whether each needs recreation
    /// (`Never`, `Conditionally`, `Always`).
    pub details: Vec<(String, String)>,
}

/// A change set (`DescribeChangeSet`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChangeSet {
    /// Its id (an ARN).
    pub id: String,
    /// `CREATE_PENDING`, `CREATE_IN_PROGRESS`, `CREATE_COMPLETE`, `FAILED`, ...
    pub status: String,
    /// Why it failed, when it did.
    pub reason: Option<String>,
    /// Its resource changes.
    pub changes: Vec<Change>,
}

/// The worker group's instances, for the formation progress line, and the
/// idle guard's state, for `synth status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GroupState {
    /// Desired capacity.
    pub desired: u32,
    /// Instances in service.
    pub in_service: u32,
    /// The master's idle guard's tag (`node_contract::idle::IDLE_TAG`);
    /// `None` without a guard, or before the master wrote it.
    pub idle: Option<node_contract::idle::IdleMark>,
    /// The master's line on the nodes' data fetches
    /// (`node_contract::data::DATA_TAG`); `None` without data sets, or
    /// before the master wrote it.
    pub data: Option<node_contract::data::DataMark>,
    /// The master's count while the cluster forms
    /// (`node_contract::formation::FORMATION_TAG`); `None` before the
    /// master wrote it (or from an older agent).
    pub forming: Option<node_contract::formation::FormingMark>,
    /// The newest stragglers `trainer train` named
    /// (`node_contract::straggler::STRAGGLER_TAG`); `None` before the
    /// master named any.
    pub stragglers: Option<node_contract::straggler::StragglerMark>,
}

/// One line a node wrote to CloudWatch Logs (`FilterLogEvents`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogEvent {
    /// The stream it is in (`worker3-i-0abc...`, see `node_contract::logs`).
    pub stream: String,
    /// When the node wrote it (unix milliseconds).
    pub at_ms: i64,
    /// Unique within the group: what de-duplicates lines read twice.
    pub id: String,
    /// The line.
    pub message: String,
}

/// One page of log events, oldest first, as `FilterLogEvents` gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogPage {
    /// The events of this page.
    pub events: Vec<LogEvent>,
    /// The token of the next page.
    pub next: Option<String>,
}

/// A log group: its name and when it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogGroupInfo {
    /// The group's name.
    pub name: String,
    /// When it was created (unix milliseconds).
    pub created_ms: i64,
}

/// Which events of a log group to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogQuery {
    /// The log group.
    pub group: String,
    /// Only these streams; empty: every stream of the group.
    pub streams: Vec<String>,
    /// Only events at or after this time (unix milliseconds).
    pub start_ms: Option<i64>,
}

/// A Capacity Reservation or Capacity Block, as `DescribeCapacityReservations` gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// `cr-...`
    pub id: String,
    /// The instance type it holds.
    pub instance_type: String,
    /// Its Availability Zone.
    pub zone: String,
    /// `active`, `pending`, `scheduled`, `expired`, `cancelled`, `failed`,
    /// `payment-pending`, `payment-failed`, ...
    pub state: String,
    /// Instances it holds.
    pub total: u32,
    /// Of those, not running now.
    pub available: u32,
    /// When it starts (unix seconds), when EC2 says.
    pub start_unix: Option<u64>,
    /// When it ends (unix seconds); `None`: it does not end by itself.
    pub end_unix: Option<u64>,
    /// A Capacity Block for ML (`ReservationType` `capacity-block`).
    pub capacity_block: bool,
}

/// A Service Quotas quota's applied value (`GetServiceQuota`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Quota {
    /// The quota's name as Service Quotas gives it.
    pub name: String,
    /// Its value (vCPUs for EC2's instance quotas).
    pub value: f64,
}

/// Every AWS call of the stack commands.
pub(crate) trait Cloud: Send + Sync {
    /// The region every call goes to.
    fn region(&self) -> &str;
    /// The caller's account id (STS `GetCallerIdentity`); also the credentials check.
    fn account_id(&self) -> impl Future<Output = CloudResult<String>> + Send;

    /// The stack called `name` (or with that id), or `None` when there is none.
    fn stack(&self, name: &str) -> impl Future<Output = CloudResult<Option<Stack>>> + Send;
    /// Every stack of the region that is not deleted.
    fn stacks(&self) -> impl Future<Output = CloudResult<Vec<Stack>>> + Send;
    /// One page of the stack's events, newest first.
    fn events(&self, stack: &str, page: Option<String>) -> impl Future<Output = CloudResult<EventPage>> + Send;
    /// The stack's current template.
    fn template(&self, stack: &str) -> impl Future<Output = CloudResult<String>> + Send;
    /// The stack's resources.
    fn resources(&self, stack: &str) -> impl Future<Output = CloudResult<Vec<Resource>>> + Send;
    /// Creates a stack; returns its id.
    fn create_stack(&self, request: &StackRequest) -> impl Future<Output = CloudResult<String>> + Send;
    /// Creates the change set `change_set` of an update; returns its id.
    fn create_change_set(
        &self,
        request: &StackRequest,
        change_set: &str,
    ) -> impl Future<Output = CloudResult<String>> + Send;
    /// A change set, with all its changes.
    fn change_set(&self, id: &str) -> impl Future<Output = CloudResult<ChangeSet>> + Send;
    /// Starts the update a change set describes.
    fn execute_change_set(&self, id: &str) -> impl Future<Output = CloudResult<()>> + Send;
    /// Deletes a change set that will not be executed.
    fn delete_change_set(&self, id: &str) -> impl Future<Output = CloudResult<()>> + Send;
    /// Starts deleting a stack.
    fn delete_stack(&self, name: &str) -> impl Future<Output = CloudResult<()>> + Send;

    /// The log groups whose names start with `prefix` (`DescribeLogGroups`,
    /// every page).
    fn log_groups(&self, prefix: &str) -> impl Future<Output = CloudResult<Vec<LogGroupInfo>>> + Send;
    /// The names of the group's streams (`DescribeLogStreams`, every page),
    /// at most `limit` of them.
    fn log_streams(&self, group: &str, limit: usize) -> impl Future<Output = CloudResult<Vec<String>>> + Send;
    /// One page of the events `query` selects, oldest first
    /// (`FilterLogEvents`).
    fn log_events(&self, query: &LogQuery, page: Option<String>) -> impl Future<Output = CloudResult<LogPage>> + Send;

    /// The worker group's size, or `None` when there is no such group (yet).
    fn group(&self, name: &str) -> impl Future<Output = CloudResult<Option<GroupState>>> + Send;
    /// Sets the group's desired capacity (`SetDesiredCapacity`; `synth resume`).
    fn set_desired_capacity(&self, group: &str, desired: u32) -> impl Future<Output = CloudResult<()>> + Send;
    /// Removes the tag `key` from the group (`DeleteTags`; `synth resume`
    /// clears the idle guard's mark).
    fn delete_group_tag(&self, group: &str, key: &str) -> impl Future<Output = CloudResult<()>> + Send;

    /// An EC2 instance's state name (`running`, `stopped`, ...), or `None`
    /// when EC2 does not know it (`DescribeInstances`).
    fn instance_state(&self, id: &str) -> impl Future<Output = CloudResult<Option<String>>> + Send;
    /// Starts a stopped instance (`StartInstances`; the master the idle
    /// guard's `stop` stopped).
    fn start_instance(&self, id: &str) -> impl Future<Output = CloudResult<()>> + Send;

    /// The region's Availability Zones that offer `instance_type`
    /// (`DescribeInstanceTypeOfferings`), sorted; empty: none.
    fn instance_type_zones(&self, instance_type: &str) -> impl Future<Output = CloudResult<Vec<String>>> + Send;
    /// The type's default vCPUs (`DescribeInstanceTypes`), or `None` when
    /// EC2 does not know the type.
    fn instance_vcpus(&self, instance_type: &str) -> impl Future<Output = CloudResult<Option<u32>>> + Send;
    /// The Capacity Reservation or Capacity Block `id`
    /// (`DescribeCapacityReservations`), or `None` when EC2 does not know it.
    fn capacity_reservation(&self, id: &str) -> impl Future<Output = CloudResult<Option<Reservation>>> + Send;
    /// The Spot placement score (1 to 10) of `capacity` instances of
    /// `types` in the region (`GetSpotPlacementScores`), or `None` when EC2
    /// gives none.
    fn spot_placement_score(
        &self,
        types: &[String],
        capacity: u32,
    ) -> impl Future<Output = CloudResult<Option<u32>>> + Send;
    /// The applied value of quota `code` of `service` (Service Quotas
    /// `GetServiceQuota`), or `None` when Service Quotas has no such quota
    /// (`NoSuchResourceException`).
    fn service_quota(&self, service: &str, code: &str) -> impl Future<Output = CloudResult<Option<Quota>>> + Send;

    /// Whether the bucket exists (and is ours to use).
    fn bucket_exists(&self, bucket: &str) -> impl Future<Output = CloudResult<bool>> + Send;
    /// Creates the staging bucket: private, encrypted, public access blocked,
    /// bucket-owner enforced, versioned.
    fn create_staging_bucket(&self, bucket: &str) -> impl Future<Output = CloudResult<()>> + Send;
    /// Whether the object exists.
    fn object_exists(&self, bucket: &str, key: &str) -> impl Future<Output = CloudResult<bool>> + Send;
    /// Uploads an object.
    fn put_object(&self, bucket: &str, key: &str, body: Vec<u8>) -> impl Future<Output = CloudResult<()>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_action_and_the_user_in_one_line() {
        let text = refusal(
            "CloudFormation CreateChangeSet on stack demo",
            "User: arn:aws:iam::123456789012:user/ci-deployer is not authorized to perform: \
             cloudformation:CreateChangeSet on resource: arn:aws:cloudformation:us-east-1:123456789012:stack/demo/x \
             because no identity-based policy allows the cloudformation:CreateChangeSet action",
            Some("cloudformation:SomethingElse"),
        );
        assert_eq!(
            text,
            "CloudFormation CreateChangeSet on stack demo: AWS refused cloudformation:CreateChangeSet to \
             user/ci-deployer: the deploying user's policy lacks it; `synth policy` prints the policy this release needs"
        );
        // S3 says only "Access Denied": the action is the one synth knows.
        let text = refusal(
            "S3 PutBucketEncryption on bucket b",
            "AccessDenied: Access Denied",
            Some("s3:PutEncryptionConfiguration"),
        );
        assert!(
            text.starts_with("S3 PutBucketEncryption on bucket b: AWS refused s3:PutEncryptionConfiguration ("),
            "{text}"
        );
        assert!(!text.contains('\n'));
        let text = refusal("S3 X on bucket b", "HTTP 403: no", None);
        assert!(text.starts_with("S3 X on bucket b: AWS refused it (HTTP 403: no)"), "{text}");
    }
}
