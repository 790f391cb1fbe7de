//! `AWS::SQS::Queue`

use serde::Serialize;

use super::resource;
use crate::Tag;

/// `AWS::SQS::Queue`
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Queue {
    /// Server-side encryption with SQS-owned keys.
    pub sqs_managed_sse_enabled: bool,
    /// Seconds a message is kept.
    pub message_retention_period: u32,
    /// Seconds a received message stays hidden from other receivers.
    pub visibility_timeout: u32,
    /// Default long-poll wait, seconds.
    pub receive_message_wait_time_seconds: u32,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}
resource!(Queue, "AWS::SQS::Queue", ["Arn", "QueueName", "QueueUrl"]);
