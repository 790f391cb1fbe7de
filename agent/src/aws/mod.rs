//! The ports of [`crate::ports`] implemented with the AWS SDK: SQS queues
//! ([`SqsQueue`]), the workers' Auto Scaling group ([`AsgWorkerGroup`]),
//! the CloudFormation signals ([`CfnSignals`]), the node's log stream
//! ([`CloudWatchLogs`]) and the training data's objects ([`S3Objects`],
//! the port of [`crate::data::store`]).
//!
//! Endpoints are configuration: [`clients`] ([`sdk_config`]) loads the standard SDK config
//! (region, credentials from the instance profile, endpoint overrides from
//! `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_SQS` / ... when set), so the same
//! code runs against AWS and against a local stand-in. Failures become
//! [`crate::ports::PortError`]s by the rules in [`error`].

pub mod autoscaling;
pub(crate) mod cloudformation;
pub(crate) mod error;
pub(crate) mod logs;
pub(crate) mod s3;
pub(crate) mod sdk_config;
pub mod sqs;

pub use autoscaling::AsgWorkerGroup;
pub use cloudformation::CfnSignals;
pub use logs::CloudWatchLogs;
pub use s3::S3Objects;
pub use sdk_config::{
    ATTEMPT_TIMEOUT, CONNECT_TIMEOUT, Clients, MAX_ATTEMPTS, clients, config_loader, long_poll_timeouts,
    stall_protection,
};
pub use sqs::SqsQueue;

#[cfg(test)]
pub(crate) mod test_server;
