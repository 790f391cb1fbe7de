//! [`Cloud`] with the AWS SDK: CloudFormation (stacks, events, change
//! sets), S3 (the staging bucket), STS (the account id), Auto Scaling
//! (the worker group, for the formation progress line and `synth resume`),
//! CloudWatch Logs (the nodes' lines, for `synth logs`), EC2's calls of
//! `synth resume` and of the capacity check ([`super::ec2`], without the
//! SDK) and Service Quotas' `GetServiceQuota` ([`super::service_quotas`],
//! without the SDK).
//!
//! Configuration comes from aws-config's standard chain: environment,
//! profiles (`--profile` picks one), SSO, instance metadata. Endpoints are
//! configuration too: with an endpoint override (`AWS_ENDPOINT_URL`, or
//! `AWS_ENDPOINT_URL_S3`) S3 is addressed path-style
//! (`http://host:port/bucket/key`), which endpoints other than AWS's own
//! need, since their host names carry no bucket.

use std::collections::BTreeMap;
use std::future::Future;

use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_cloudformation::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_cloudformation::types::{Capability, ChangeSetType, OnFailure, Parameter};
use aws_sdk_s3::primitives::ByteStream;

use super::credentials;
pub(crate) use super::credentials::ConnectError;
use super::policy::action_of;
use super::port::*;

/// The SDK clients, sharing one config.
#[derive(Clone, Debug)]
pub(crate) struct SdkCloud {
    region: String,
    cloudformation: aws_sdk_cloudformation::Client,
    s3: aws_sdk_s3::Client,
    sts: aws_sdk_sts::Client,
    autoscaling: aws_sdk_autoscaling::Client,
    logs: aws_sdk_cloudwatchlogs::Client,
    ec2: super::ec2::Ec2,
    quotas: super::service_quotas::ServiceQuotas,
}

/// How to reach AWS.
#[derive(Clone, Debug, Default)]
pub(crate) struct Connection {
    /// The region; `None`: the standard chain's (`AWS_REGION`, the profile).
    pub region: Option<String>,
    /// A named profile; `None`: `AWS_PROFILE` or the default.
    pub profile: Option<String>,
}

impl SdkCloud {
    /// Loads the standard config, checks that a region and credentials are
    /// there, and makes the clients.
    pub(crate) async fn connect(connection: &Connection) -> Result<SdkCloud, ConnectError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &connection.region {
            loader = loader.region(Region::new(region.clone()));
        }
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(profile) = &connection.profile {
            // A named profile that is not there is an error naming it, and
            // a named profile's credentials are the ones used, as the AWS
            // CLI does: aws-config's default chain would take keys from the
            // environment first and ignore the profile silently.
            check_profile(profile, "--profile").await?;
            let credentials = ProfileFileCredentialsProvider::builder().profile_name(profile).build();
            loader = loader.profile_name(profile).credentials_provider(credentials);
        } else if let Some(profile) = env("AWS_PROFILE") {
            // The same check when the environment names it, also when the
            // environment's keys are what the chain will use: a name that
            // is not there is a mistake either way.
            check_profile(&profile, "AWS_PROFILE").await?;
        }
        let config = loader.load().await;
        let region = config.region().map(|r| r.to_string()).ok_or(ConnectError::NoRegion)?;
        if connection.region.is_none() {
            credentials::check_region(&region, env)?;
        }
        let key_id = check_credentials(&config).await?;
        let set = profiles().await;
        let sso = |name: &str| {
            set.as_ref()
                .and_then(|s| s.get_profile(name))
                .is_some_and(|p| p.get("sso_session").is_some() || p.get("sso_start_url").is_some())
        };
        credentials::record(credentials::Source::find(connection.profile.as_deref(), env, sso), &key_id);
        Ok(SdkCloud::new(&config, region))
    }

    /// The clients for a loaded config.
    pub(crate) fn new(config: &SdkConfig, region: String) -> SdkCloud {
        let path_style = config.endpoint_url().is_some() || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
        let s3 = aws_sdk_s3::config::Builder::from(config).force_path_style(path_style).build();
        SdkCloud {
            ec2: super::ec2::Ec2::new(config, &region),
            quotas: super::service_quotas::ServiceQuotas::new(config, &region),
            region,
            cloudformation: aws_sdk_cloudformation::Client::new(config),
            s3: aws_sdk_s3::Client::from_conf(s3),
            sts: aws_sdk_sts::Client::new(config),
            autoscaling: aws_sdk_autoscaling::Client::new(config),
            logs: aws_sdk_cloudwatchlogs::Client::new(config),
        }
    }
}

/// Whether the profile `name` is defined, read with aws-config's own
/// profile parser (the files and variables it reads, the same rules); the
/// error says what named it (`named_by`) and which profiles there are.
async fn check_profile(name: &str, named_by: &'static str) -> Result<(), ConnectError> {
    let profiles = profiles().await;
    if profiles.as_ref().is_some_and(|set| set.get_profile(name).is_some()) {
        return Ok(());
    }
    // Files that cannot be read or parsed define no profile; the provider
    // would fail on them the same way.
    let mut known: Vec<String> = profiles.map(|set| set.profiles().map(str::to_owned).collect()).unwrap_or_default();
    known.sort();
    Err(ConnectError::NoProfile { profile: name.to_owned(), named_by, known })
}

/// The profiles of the default files: ~/.aws/config and ~/.aws/credentials,
/// or where AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE point.
async fn profiles() -> Option<aws_config::profile::ProfileSet> {
    use aws_types::os_shim_internal::{Env, Fs};
    let files = Default::default();
    aws_config::profile::load(&Fs::real(), &Env::real(), &files, None).await.ok()
}

/// The credentials' access key id, once the chain gave some.
async fn check_credentials(config: &SdkConfig) -> Result<String, CloudError> {
    use aws_sdk_cloudformation::config::ProvideCredentials;
    let Some(provider) = config.credentials_provider() else {
        return Err(CloudError::NoCredentials(String::new()));
    };
    // What each source of the chain said (several lines, the last source
    // tried: instance metadata, which a laptop does not have) is for
    // `SYNTH_LOG=debug`; the error is one paragraph saying what to do.
    provider.provide_credentials().await.map(|c| c.access_key_id().to_owned()).map_err(|e| {
        tracing::debug!(error = %cli_output::report(&e), "no credentials from the standard chain");
        CloudError::NoCredentials(String::new())
    })
}

/// Maps an SDK error from `what` to a [`CloudError`]: an answer through
/// [`credentials::classify`], anything else by `aws_errors::of_sdk`.
fn from_sdk<E>(what: &str, err: SdkError<E>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match &err {
        SdkError::ServiceError(context) => {
            let code = context.err().code().unwrap_or("");
            let status = context.raw().status().as_u16();
            let message = context.err().message().unwrap_or("no message").to_owned();
            let message =
                if code.is_empty() { format!("HTTP {status}: {message}") } else { format!("{code}: {message}") };
            credentials::classify(what, status, code, message)
        }
        // No answer (or no complete one): transient. A request that could
        // not be built: invalid, by the same classifier.
        _ => {
            let message = DisplayErrorContext(&err).to_string();
            match aws_errors::of_sdk(&err) {
                aws_errors::Kind::Invalid => CloudError::Invalid { what: what.to_owned(), message },
                _ => CloudError::Unavailable { what: what.to_owned(), message },
            }
        }
    }
}

/// Sends one SDK request (`call`: its `send()`) and maps its error into the
/// port's with [`from_sdk`]; `what` names the call in that message. The one
/// place every method's AWS call goes through.
async fn send<T, E>(what: impl FnOnce() -> String, call: impl Future<Output = Result<T, SdkError<E>>>) -> CloudResult<T>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    call.await.map_err(|e| from_sdk(&what(), e))
}

/// Reads page after page (`page` gets the previous page's token and gives
/// its items and the next token; an empty token, as CloudWatch Logs may
/// send, ends it too) until there is no next page or `enough` items are
/// there.
async fn every_page<T, F, Fut>(enough: usize, mut page: F) -> CloudResult<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = CloudResult<(Vec<T>, Option<String>)>>,
{
    let mut all = Vec::new();
    let mut token = None;
    loop {
        let (items, next) = page(token).await?;
        all.extend(items);
        match next.filter(|t| !t.is_empty()) {
            Some(next) if all.len() < enough => token = Some(next),
            _ => return Ok(all),
        }
    }
}

/// A page's next token, owned.
fn next(token: Option<&str>) -> Option<String> {
    token.map(str::to_owned)
}

fn millis(t: Option<&aws_sdk_cloudformation::primitives::DateTime>) -> Option<i64> {
    t.and_then(|t| t.to_millis().ok())
}

fn stack_of(s: &aws_sdk_cloudformation::types::Stack) -> Stack {
    Stack {
        name: s.stack_name().unwrap_or_default().to_owned(),
        id: s.stack_id().unwrap_or_default().to_owned(),
        status: s.stack_status().map(|x| x.as_str().to_owned()).unwrap_or_default(),
        reason: s.stack_status_reason().map(str::to_owned),
        description: s.description().map(str::to_owned),
        outputs: s
            .outputs()
            .iter()
            .map(|o| Output {
                key: o.output_key().unwrap_or_default().to_owned(),
                value: o.output_value().unwrap_or_default().to_owned(),
                description: o.description().map(str::to_owned),
            })
            .collect(),
        parameters: s
            .parameters()
            .iter()
            .filter_map(|p| Some((p.parameter_key()?.to_owned(), p.parameter_value().unwrap_or_default().to_owned())))
            .collect(),
        changed_ms: millis(s.last_updated_time()).or(millis(s.creation_time())),
    }
}

fn event_of(e: &aws_sdk_cloudformation::types::StackEvent) -> Event {
    Event {
        id: e.event_id().unwrap_or_default().to_owned(),
        at_ns: e.timestamp().map_or(0, |t| i128::from(t.secs()) * 1_000_000_000 + i128::from(t.subsec_nanos())),
        logical_id: e.logical_resource_id().unwrap_or_default().to_owned(),
        physical_id: e.physical_resource_id().filter(|p| !p.is_empty()).map(str::to_owned),
        resource_type: e.resource_type().unwrap_or_default().to_owned(),
        status: e.resource_status().map(|s| s.as_str().to_owned()).unwrap_or_default(),
        reason: e.resource_status_reason().map(str::to_owned),
    }
}

fn resource_of(r: &aws_sdk_cloudformation::types::StackResourceSummary) -> Resource {
    Resource {
        logical_id: r.logical_resource_id().unwrap_or_default().to_owned(),
        physical_id: r.physical_resource_id().filter(|p| !p.is_empty()).map(str::to_owned),
        resource_type: r.resource_type().unwrap_or_default().to_owned(),
        status: r.resource_status().map(|s| s.as_str().to_owned()).unwrap_or_default(),
        reason: r.resource_status_reason().map(str::to_owned),
    }
}

fn change_of(r: &aws_sdk_cloudformation::types::ResourceChange) -> Change {
    Change {
        action: r.action().map(|a| a.as_str().to_owned()).unwrap_or_default(),
        logical_id: r.logical_resource_id().unwrap_or_default().to_owned(),
        resource_type: r.resource_type().unwrap_or_default().to_owned(),
        replacement: r.replacement().map(|x| x.as_str().to_owned()),
        details: r
            .details()
            .iter()
            .filter_map(|d| {
                let target = d.target()?;
                Some((
                    target.name().unwrap_or_else(|| target.attribute().map(|a| a.as_str()).unwrap_or("?")).to_owned(),
                    target.requires_recreation().map(|x| x.as_str().to_owned()).unwrap_or_default(),
                ))
            })
            .collect(),
    }
}

fn log_event_of(e: &aws_sdk_cloudwatchlogs::types::FilteredLogEvent) -> LogEvent {
    LogEvent {
        stream: e.log_stream_name().unwrap_or_default().to_owned(),
        at_ms: e.timestamp().unwrap_or_default(),
        id: e.event_id().unwrap_or_default().to_owned(),
        message: e.message().unwrap_or_default().to_owned(),
    }
}

fn parameters(values: &BTreeMap<String, String>) -> Vec<Parameter> {
    values.iter().map(|(k, v)| Parameter::builder().parameter_key(k).parameter_value(v).build()).collect()
}

/// Whether a CloudFormation error says the stack does not exist.
fn is_missing_stack(e: &CloudError) -> bool {
    matches!(e, CloudError::Invalid { message, .. } if message.contains("does not exist"))
}

impl Cloud for SdkCloud {
    fn region(&self) -> &str {
        &self.region
    }

    #[tracing::instrument(skip(self))]
    async fn account_id(&self) -> CloudResult<String> {
        let out = send(|| "STS GetCallerIdentity".into(), self.sts.get_caller_identity().send()).await?;
        Ok(out.account().unwrap_or_default().to_owned())
    }

    #[tracing::instrument(skip(self))]
    async fn stack(&self, name: &str) -> CloudResult<Option<Stack>> {
        let what = || format!("CloudFormation DescribeStacks on stack {name}");
        match send(what, self.cloudformation.describe_stacks().stack_name(name).send()).await {
            Ok(out) => Ok(out.stacks().first().map(stack_of)),
            Err(e) if is_missing_stack(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[tracing::instrument(skip(self))]
    async fn stacks(&self) -> CloudResult<Vec<Stack>> {
        every_page(usize::MAX, |token| async move {
            let call = self.cloudformation.describe_stacks().set_next_token(token).send();
            let out = send(|| "CloudFormation DescribeStacks".into(), call).await?;
            Ok((out.stacks().iter().map(stack_of).collect(), next(out.next_token())))
        })
        .await
    }

    #[tracing::instrument(skip(self))]
    async fn events(&self, stack: &str, page: Option<String>) -> CloudResult<EventPage> {
        let what = || format!("CloudFormation DescribeStackEvents on stack {stack}");
        let out = send(what, self.cloudformation.describe_stack_events().stack_name(stack).set_next_token(page).send())
            .await?;
        Ok(EventPage { events: out.stack_events().iter().map(event_of).collect(), next: next(out.next_token()) })
    }

    #[tracing::instrument(skip(self))]
    async fn template(&self, stack: &str) -> CloudResult<String> {
        let what = || format!("CloudFormation GetTemplate on stack {stack}");
        let out = send(what, self.cloudformation.get_template().stack_name(stack).send()).await?;
        Ok(out.template_body().unwrap_or_default().to_owned())
    }

    #[tracing::instrument(skip(self))]
    async fn resources(&self, stack: &str) -> CloudResult<Vec<Resource>> {
        every_page(usize::MAX, |token| async move {
            let call = self.cloudformation.list_stack_resources().stack_name(stack).set_next_token(token).send();
            let out = send(|| format!("CloudFormation ListStackResources on stack {stack}"), call).await?;
            Ok((out.stack_resource_summaries().iter().map(resource_of).collect(), next(out.next_token())))
        })
        .await
    }

    #[tracing::instrument(skip(self, request), fields(stack = %request.name))]
    async fn create_stack(&self, request: &StackRequest) -> CloudResult<String> {
        let mut call = self
            .cloudformation
            .create_stack()
            .stack_name(&request.name)
            .set_parameters(Some(parameters(&request.parameters)))
            // The templates make IAM roles without fixed names.
            .capabilities(Capability::CapabilityIam)
            .on_failure(if request.keep_on_failure { OnFailure::DoNothing } else { OnFailure::Rollback });
        call = match &request.template {
            TemplateSource::Body(body) => call.template_body(body),
            TemplateSource::Url(url) => call.template_url(url),
        };
        let out = send(|| format!("CloudFormation CreateStack on stack {}", request.name), call.send()).await?;
        Ok(out.stack_id().unwrap_or_default().to_owned())
    }

    #[tracing::instrument(skip(self, request), fields(stack = %request.name))]
    async fn create_change_set(&self, request: &StackRequest, change_set: &str) -> CloudResult<String> {
        let mut call = self
            .cloudformation
            .create_change_set()
            .stack_name(&request.name)
            .change_set_name(change_set)
            .change_set_type(ChangeSetType::Update)
            .set_parameters(Some(parameters(&request.parameters)))
            .capabilities(Capability::CapabilityIam)
            .description("synth deploy");
        call = match &request.template {
            TemplateSource::Body(body) => call.template_body(body),
            TemplateSource::Url(url) => call.template_url(url),
        };
        let out = send(|| format!("CloudFormation CreateChangeSet on stack {}", request.name), call.send()).await?;
        Ok(out.id().unwrap_or(change_set).to_owned())
    }

    #[tracing::instrument(skip(self))]
    async fn change_set(&self, id: &str) -> CloudResult<ChangeSet> {
        // Every page repeats the status; the changes are spread over them.
        let pages = every_page(usize::MAX, |token| async move {
            let call = self.cloudformation.describe_change_set().change_set_name(id).set_next_token(token).send();
            let out = send(|| "CloudFormation DescribeChangeSet".into(), call).await?;
            let status = out.status().map(|s| s.as_str().to_owned()).unwrap_or_default();
            let changes = out.changes().iter().filter_map(|c| c.resource_change()).map(change_of).collect();
            let page = ChangeSet { id: id.to_owned(), status, reason: out.status_reason().map(str::to_owned), changes };
            Ok((vec![page], next(out.next_token())))
        })
        .await?;
        Ok(pages
            .into_iter()
            .reduce(|mut set, page| {
                set.changes.extend(page.changes);
                ChangeSet { changes: set.changes, ..page }
            })
            .unwrap_or_else(|| ChangeSet { id: id.to_owned(), ..ChangeSet::default() }))
    }

    #[tracing::instrument(skip(self))]
    async fn execute_change_set(&self, id: &str) -> CloudResult<()> {
        let call = self.cloudformation.execute_change_set().change_set_name(id).send();
        send(|| "CloudFormation ExecuteChangeSet".into(), call).await.map(drop)
    }

    #[tracing::instrument(skip(self))]
    async fn delete_change_set(&self, id: &str) -> CloudResult<()> {
        let call = self.cloudformation.delete_change_set().change_set_name(id).send();
        send(|| "CloudFormation DeleteChangeSet".into(), call).await.map(drop)
    }

    #[tracing::instrument(skip(self))]
    async fn delete_stack(&self, name: &str) -> CloudResult<()> {
        let call = self.cloudformation.delete_stack().stack_name(name).send();
        send(|| format!("CloudFormation DeleteStack on stack {name}"), call).await.map(drop)
    }

    #[tracing::instrument(skip(self))]
    async fn log_groups(&self, prefix: &str) -> CloudResult<Vec<LogGroupInfo>> {
        every_page(usize::MAX, |token| async move {
            let call = self.logs.describe_log_groups().log_group_name_prefix(prefix).set_next_token(token).send();
            let out = send(|| format!("CloudWatch Logs DescribeLogGroups for {prefix}"), call).await?;
            let groups = out.log_groups().iter().filter_map(|g| {
                let name = g.log_group_name()?.to_owned();
                Some(LogGroupInfo { name, created_ms: g.creation_time().unwrap_or_default() })
            });
            Ok((groups.collect(), next(out.next_token())))
        })
        .await
    }

    #[tracing::instrument(skip(self))]
    async fn log_streams(&self, group: &str, limit: usize) -> CloudResult<Vec<String>> {
        let mut names = every_page(limit, |token| async move {
            let call = self.logs.describe_log_streams().log_group_name(group).set_next_token(token).send();
            let out = send(|| format!("CloudWatch Logs DescribeLogStreams in {group}"), call).await?;
            let names = out.log_streams().iter().filter_map(|s| s.log_stream_name().map(str::to_owned));
            Ok((names.collect(), next(out.next_token())))
        })
        .await?;
        names.truncate(limit);
        Ok(names)
    }

    #[tracing::instrument(skip(self))]
    async fn log_events(&self, query: &LogQuery, page: Option<String>) -> CloudResult<LogPage> {
        let streams = (!query.streams.is_empty()).then(|| query.streams.clone());
        let call = self
            .logs
            .filter_log_events()
            .log_group_name(&query.group)
            .set_log_stream_names(streams)
            .set_start_time(query.start_ms)
            .set_next_token(page)
            .send();
        let out = send(|| format!("CloudWatch Logs FilterLogEvents in {}", query.group), call).await?;
        Ok(LogPage {
            events: out.events().iter().map(log_event_of).collect(),
            next: out.next_token().filter(|t| !t.is_empty()).map(str::to_owned),
        })
    }

    #[tracing::instrument(skip(self))]
    async fn group(&self, name: &str) -> CloudResult<Option<GroupState>> {
        let call = self.autoscaling.describe_auto_scaling_groups().auto_scaling_group_names(name).send();
        let out = send(|| format!("Auto Scaling DescribeAutoScalingGroups on group {name}"), call).await?;
        Ok(out.auto_scaling_groups().first().map(|g| {
            // The marks the master leaves in the group's tags.
            let tag = |key: &str| g.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value());
            GroupState {
                desired: g.desired_capacity().and_then(|d| u32::try_from(d).ok()).unwrap_or(0),
                in_service: g
                    .instances()
                    .iter()
                    .filter(|i| i.lifecycle_state().is_some_and(|s| s.as_str() == "InService"))
                    .count() as u32,
                idle: tag(node_contract::idle::IDLE_TAG).and_then(node_contract::idle::IdleMark::from_tag),
                data: tag(node_contract::data::DATA_TAG).and_then(node_contract::data::DataMark::from_tag),
                forming: tag(node_contract::formation::FORMATION_TAG)
                    .and_then(node_contract::formation::FormingMark::from_tag),
                stragglers: tag(node_contract::straggler::STRAGGLER_TAG)
                    .and_then(node_contract::straggler::StragglerMark::from_tag),
            }
        }))
    }

    #[tracing::instrument(skip(self))]
    async fn set_desired_capacity(&self, group: &str, desired: u32) -> CloudResult<()> {
        let desired = i32::try_from(desired).unwrap_or(i32::MAX);
        let call =
            self.autoscaling.set_desired_capacity().auto_scaling_group_name(group).desired_capacity(desired).send();
        send(|| format!("Auto Scaling SetDesiredCapacity on group {group}"), call).await.map(drop)
    }

    #[tracing::instrument(skip(self))]
    async fn delete_group_tag(&self, group: &str, key: &str) -> CloudResult<()> {
        use aws_sdk_autoscaling::types::Tag;
        let tag = Tag::builder().resource_id(group).resource_type("auto-scaling-group").key(key).build();
        let call = self.autoscaling.delete_tags().tags(tag).send();
        send(|| format!("Auto Scaling DeleteTags on group {group}"), call).await.map(drop)
    }

    #[tracing::instrument(skip(self))]
    async fn instance_state(&self, id: &str) -> CloudResult<Option<String>> {
        self.ec2.instance_state(id).await
    }

    #[tracing::instrument(skip(self))]
    async fn start_instance(&self, id: &str) -> CloudResult<()> {
        self.ec2.start_instance(id).await
    }

    #[tracing::instrument(skip(self))]
    async fn instance_type_zones(&self, instance_type: &str) -> CloudResult<Vec<String>> {
        self.ec2.instance_type_zones(instance_type).await
    }

    #[tracing::instrument(skip(self))]
    async fn instance_vcpus(&self, instance_type: &str) -> CloudResult<Option<u32>> {
        self.ec2.instance_vcpus(instance_type).await
    }

    #[tracing::instrument(skip(self))]
    async fn capacity_reservation(&self, id: &str) -> CloudResult<Option<Reservation>> {
        self.ec2.capacity_reservation(id).await
    }

    #[tracing::instrument(skip(self))]
    async fn spot_placement_score(&self, types: &[String], capacity: u32) -> CloudResult<Option<u32>> {
        self.ec2.spot_placement_score(types, capacity).await
    }

    #[tracing::instrument(skip(self))]
    async fn service_quota(&self, service: &str, code: &str) -> CloudResult<Option<Quota>> {
        self.quotas.quota(service, code).await
    }

    #[tracing::instrument(skip(self))]
    async fn bucket_exists(&self, bucket: &str) -> CloudResult<bool> {
        match self.s3.head_bucket().bucket(bucket).send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
                Some(404) => Ok(false),
                Some(403) => Err(CloudError::Denied {
                    what: format!("S3 HeadBucket on bucket {bucket}"),
                    action: action_of("S3 HeadBucket").map(str::to_owned),
                    // A HEAD answer has no body: S3 says nothing more.
                    message: "HTTP 403: the bucket is another account's, or these credentials may not list it".into(),
                }),
                _ => Err(from_sdk(&format!("S3 HeadBucket on bucket {bucket}"), e)),
            },
        }
    }

    #[tracing::instrument(skip(self))]
    async fn create_staging_bucket(&self, bucket: &str) -> CloudResult<()> {
        use aws_sdk_s3::types::*;
        let what = |call: &str| format!("S3 {call} on bucket {bucket}");
        let invalid = |call: &str, e: aws_sdk_s3::error::BuildError| CloudError::Invalid {
            what: what(call),
            message: e.to_string(),
        };
        let mut create = self.s3.create_bucket().bucket(bucket).object_ownership(ObjectOwnership::BucketOwnerEnforced);
        // us-east-1 is the default location and may not be named.
        if self.region != "us-east-1" {
            create = create.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(self.region.as_str()))
                    .build(),
            );
        }
        send(|| what("CreateBucket"), create.send()).await?;
        let block = PublicAccessBlockConfiguration::builder()
            .block_public_acls(true)
            .ignore_public_acls(true)
            .block_public_policy(true)
            .restrict_public_buckets(true)
            .build();
        let call = self.s3.put_public_access_block().bucket(bucket).public_access_block_configuration(block).send();
        send(|| what("PutPublicAccessBlock"), call).await?;
        let sse = ServerSideEncryptionByDefault::builder()
            .sse_algorithm(ServerSideEncryption::Aes256)
            .build()
            .map_err(|e| invalid("PutBucketEncryption", e))?;
        let encryption = ServerSideEncryptionConfiguration::builder()
            .rules(ServerSideEncryptionRule::builder().apply_server_side_encryption_by_default(sse).build())
            .build()
            .map_err(|e| invalid("PutBucketEncryption", e))?;
        let call =
            self.s3.put_bucket_encryption().bucket(bucket).server_side_encryption_configuration(encryption).send();
        send(|| what("PutBucketEncryption"), call).await?;
        let ownership = OwnershipControls::builder()
            .rules(
                OwnershipControlsRule::builder()
                    .object_ownership(ObjectOwnership::BucketOwnerEnforced)
                    .build()
                    .map_err(|e| invalid("PutBucketOwnershipControls", e))?,
            )
            .build()
            .map_err(|e| invalid("PutBucketOwnershipControls", e))?;
        let call = self.s3.put_bucket_ownership_controls().bucket(bucket).ownership_controls(ownership).send();
        send(|| what("PutBucketOwnershipControls"), call).await?;
        let versioning = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build();
        let call = self.s3.put_bucket_versioning().bucket(bucket).versioning_configuration(versioning).send();
        send(|| what("PutBucketVersioning"), call).await.map(drop)
    }

    #[tracing::instrument(skip(self))]
    async fn object_exists(&self, bucket: &str, key: &str) -> CloudResult<bool> {
        match self.s3.head_object().bucket(bucket).key(key).send().await {
            Ok(_) => Ok(true),
            // S3 answers 403 rather than 404 to a caller without s3:ListBucket;
            // the upload that follows then says whether writing is allowed.
            Err(e) if e.raw_response().is_some_and(|r| matches!(r.status().as_u16(), 403 | 404)) => Ok(false),
            Err(e) => Err(from_sdk(&format!("S3 HeadObject on s3://{bucket}/{key}"), e)),
        }
    }

    #[tracing::instrument(skip(self, body), fields(bytes = body.len()))]
    async fn put_object(&self, bucket: &str, key: &str, body: Vec<u8>) -> CloudResult<()> {
        let call = self.s3.put_object().bucket(bucket).key(key).body(ByteStream::from(body)).send();
        send(|| format!("S3 PutObject on s3://{bucket}/{key}"), call).await.map(drop)
    }
}
