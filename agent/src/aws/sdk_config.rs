//! How the agent's SDK clients are configured: the region, the timeouts
//! and retries of every call ([`config_loader`]), the longer budget of a
//! long poll ([`long_poll_timeouts`]), stalled-stream protection
//! ([`stall_protection`]), and everything else (credentials, endpoint
//! overrides) from the standard sources.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, ConfigLoader, SdkConfig};

/// How long a connection may take to open. Short: the services are in-region.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one attempt of an ordinary call may take. Long polls get their
/// own, longer budget (see [`long_poll_timeouts`]).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How many attempts the SDK makes (standard retry mode, with backoff) before
/// the error reaches the caller, which has its own, slower retry loop.
pub const MAX_ATTEMPTS: u32 = 3;

/// The SDK clients the agent uses, sharing one config.
#[derive(Clone, Debug)]
pub struct Clients {
    /// SQS: the master and worker queues.
    pub sqs: aws_sdk_sqs::Client,
    /// Auto Scaling: the worker group.
    pub autoscaling: aws_sdk_autoscaling::Client,
    /// CloudFormation: the master's `SignalResource`.
    pub cloudformation: aws_sdk_cloudformation::Client,
    /// CloudWatch Logs: the node's own stream.
    pub logs: aws_sdk_cloudwatchlogs::Client,
    /// S3: the training data (path-style with an endpoint override).
    pub s3: aws_sdk_s3::Client,
}

impl Clients {
    /// Builds the clients from one loaded config.
    pub fn new(config: &SdkConfig) -> Self {
        Self {
            sqs: aws_sdk_sqs::Client::new(config),
            autoscaling: aws_sdk_autoscaling::Client::new(config),
            cloudformation: aws_sdk_cloudformation::Client::new(config),
            logs: aws_sdk_cloudwatchlogs::Client::new(config),
            s3: super::s3::S3Objects::client(config),
        }
    }
}

/// The config loader the agent uses: `region`, the agent's timeouts and
/// retries, everything else (credentials, endpoint overrides) from the
/// standard sources. Callers may refine it before `load()`.
pub fn config_loader(region: &str) -> ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest())
        .region(aws_config::Region::new(region.to_owned()))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
        .stalled_stream_protection(stall_protection())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .operation_timeout(ATTEMPT_TIMEOUT * MAX_ATTEMPTS + Duration::from_secs(10))
                .build(),
        )
}

/// Stalled-stream protection for every call: on for response bodies, off
/// for request bodies.
///
/// The SDK's upload protection watches a request body's throughput with a
/// timer that fires every 100 ms (a tenth of its 1 s window) for as long as
/// the response has not come, whether or not the body has all been sent.
/// Every request the agent makes has a small body written at once (the
/// largest, a manifest part, is 256 KiB), so there is no upload to stall,
/// and each call is cut off by its attempt timeout ([`ATTEMPT_TIMEOUT`],
/// [`long_poll_timeouts`]) when the service stops answering. Left on, it
/// wakes the node's runtime ten times a second per call in flight: through
/// a 20 s long poll 200 wake-ups for nothing (about 1.3 ms of CPU a second
/// for an idle agent), and with a slow service, where every node has a
/// send, a long poll and a log upload waiting, about 30 wake-ups a second
/// per node (at 1,000 nodes on two cores the agents took 1.6 of them while
/// the local AWS starved; the formation benchmark's progress lines). A
/// response body that stalls is still caught by the download protection.
/// <https://docs.aws.amazon.com/sdk-for-rust/latest/dg/stalled-stream-protection.html>
pub fn stall_protection() -> aws_config::stalled_stream_protection::StalledStreamProtectionConfig {
    aws_config::stalled_stream_protection::StalledStreamProtectionConfig::enabled()
        .upload_enabled(false)
        .download_enabled(true)
        .build()
}

/// The SDK clients for `region`, from the standard config sources.
pub async fn clients(region: &str) -> Clients {
    Clients::new(&config_loader(region).load().await)
}

/// Timeouts for one long poll waiting up to `wait`: an attempt must outlast the
/// wait (the service answers only when it ends), with room for the transfer.
pub fn long_poll_timeouts(wait: Duration) -> TimeoutConfig {
    let attempt = wait + ATTEMPT_TIMEOUT;
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt)
        .operation_timeout(attempt * MAX_ATTEMPTS + Duration::from_secs(10))
        .build()
}
