//! [`LogStreams`] on CloudWatch Logs: `CreateLogStream` and `PutLogEvents`
//! (<https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutLogEvents.html>).
//!
//! No sequence tokens: PutLogEvents has ignored them since 2023. One attempt
//! per call, with a short timeout: the shipper retries with its own backoff,
//! and nothing waits on it.

use std::time::Duration;

use aws_sdk_cloudwatchlogs::error::ProvideErrorMetadata;
use aws_sdk_cloudwatchlogs::types::InputLogEvent;

use super::error::{SdkResult, from_sdk};
use crate::ports::{LogEvent, LogStreams, PortError, PutOutcome};

/// How long one call may take: a batch is at most 1 MiB.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The stack's log group.
#[derive(Clone, Debug)]
pub struct CloudWatchLogs {
    /// The CloudWatch Logs client.
    pub client: aws_sdk_cloudwatchlogs::Client,
    /// The group's name (`node_contract::logs::log_group_name`).
    pub group: String,
}

impl CloudWatchLogs {
    /// The group `group` through `client`.
    pub fn new(client: aws_sdk_cloudwatchlogs::Client, group: impl Into<String>) -> Self {
        // One attempt per call within a bound, set once: the shipper retries.
        let config = client
            .config()
            .to_builder()
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .connect_timeout(super::sdk_config::CONNECT_TIMEOUT)
                    .operation_attempt_timeout(CALL_TIMEOUT)
                    .operation_timeout(CALL_TIMEOUT)
                    .build(),
            )
            .build();
        Self { client: aws_sdk_cloudwatchlogs::Client::from_conf(config), group: group.into() }
    }
}

impl LogStreams for CloudWatchLogs {
    #[tracing::instrument(level = "debug", skip(self), fields(group = %self.group))]
    async fn create_stream(&self, stream: &str) -> Result<(), PortError> {
        let result = self.client.create_log_stream().log_group_name(&self.group).log_stream_name(stream).send().await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("ResourceAlreadyExistsException") => Ok(()),
            Err(e) => Err(from_sdk(&format!("CloudWatch Logs CreateLogStream {stream} in {}", self.group), &e)),
        }
    }

    #[tracing::instrument(level = "debug", skip(self, events), fields(group = %self.group, events = events.len()))]
    async fn put(&self, stream: &str, events: &[LogEvent]) -> Result<PutOutcome, PortError> {
        let sent = events.len();
        let events: Vec<InputLogEvent> = events
            .iter()
            .filter_map(|e| InputLogEvent::builder().timestamp(e.timestamp_ms).message(&e.message).build().ok())
            .collect();
        let output = self
            .client
            .put_log_events()
            .log_group_name(&self.group)
            .log_stream_name(stream)
            .set_log_events(Some(events))
            .send()
            .await
            .or_port_error(|| format!("CloudWatch Logs PutLogEvents to {stream} in {}", self.group))?;
        // The refused events are a prefix (too old, or past retention: up to
        // an end index) and a suffix (too new: from a start index); the
        // count is for the shipper's warning only.
        let rejected = output.rejected_log_events_info().map_or(0, |info| {
            let index = |i: i32| usize::try_from(i).unwrap_or(0).min(sent);
            let old = info.too_old_log_event_end_index().max(info.expired_log_event_end_index()).map_or(0, index);
            let new = info.too_new_log_event_start_index().map_or(0, |start| sent - index(start));
            (old + new).min(sent)
        });
        Ok(PutOutcome { rejected })
    }
}
