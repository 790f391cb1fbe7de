//! [`Queue`] on an SQS standard queue.
//!
//! Long polling, visibility timeouts and deletion follow
//! <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html>.

use std::time::Duration;

use super::error::from_sdk;
use crate::ports::{PortError, Queue, Received};

/// The longest long poll SQS allows.
pub const MAX_WAIT: Duration = Duration::from_secs(20);
/// The longest visibility timeout SQS allows (12 hours).
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);

/// One SQS queue, by URL.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    /// The SQS client.
    pub client: aws_sdk_sqs::Client,
    /// The queue URL.
    pub url: String,
}

impl SqsQueue {
    /// The queue at `url`.
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self { client, url: url.into() }
    }
}

impl Queue for SqsQueue {
    #[tracing::instrument(skip(self, body), fields(queue = %self.url, bytes = body.len()))]
    async fn send(&self, body: &str) -> Result<(), PortError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| from_sdk(&format!("SQS SendMessage to {}", self.url), &e))?;
        Ok(())
    }

    #[tracing::instrument(skip(self), fields(queue = %self.url))]
    async fn receive(&self, max: u8, wait: Duration, visibility: Option<Duration>) -> Result<Vec<Received>, PortError> {
        let wait = wait.min(MAX_WAIT);
        let mut request = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(i32::from(max.clamp(1, 10)))
            .wait_time_seconds(wait.as_secs() as i32);
        if let Some(visibility) = visibility {
            request = request.visibility_timeout(visibility.min(MAX_VISIBILITY).as_secs() as i32);
        }
        let output = request
            .customize()
            .config_override(
                aws_sdk_sqs::config::Builder::default()
                    .timeout_config(super::long_poll_timeouts(wait))
                    .stalled_stream_protection(long_poll_stall_protection()),
            )
            .send()
            .await
            .map_err(|e| from_sdk(&format!("SQS ReceiveMessage from {}", self.url), &e))?;
        let received: Vec<Received> = output
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| match (m.body, m.receipt_handle) {
                (Some(body), Some(receipt)) => Some(Received { body, receipt }),
                // SQS always returns both; a message without them could not be handled or deleted.
                _ => {
                    tracing::warn!(message_id = ?m.message_id, "message without body or receipt handle, skipped");
                    None
                }
            })
            .collect();
        tracing::debug!(count = received.len(), "received");
        Ok(received)
    }

    #[tracing::instrument(skip(self, receipt), fields(queue = %self.url))]
    async fn delete(&self, receipt: &str) -> Result<(), PortError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| from_sdk(&format!("SQS DeleteMessage from {}", self.url), &e))?;
        Ok(())
    }

    /// `DeleteMessageBatch`: one call for what one receive returned, instead
    /// of one `DeleteMessage` per message (the master handles two messages
    /// per node at formation). Entry ids are the receipts' positions.
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessageBatch.html>
    #[tracing::instrument(skip(self, receipts), fields(queue = %self.url, count = receipts.len()))]
    async fn delete_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let entries = receipts
            .iter()
            .take(MAX_BATCH)
            .enumerate()
            .map(|(i, receipt)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .build()
                    .expect("id and receipt handle are set")
            })
            .collect();
        let output = self
            .client
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| from_sdk(&format!("SQS DeleteMessageBatch from {}", self.url), &e))?;
        for failed in output.failed() {
            tracing::debug!(id = failed.id(), code = failed.code(), "a message of the batch was not deleted");
        }
        Ok(output.failed().len() + receipts.len().saturating_sub(MAX_BATCH))
    }

    /// `ChangeMessageVisibilityBatch` to 0 seconds.
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibilityBatch.html>
    #[tracing::instrument(skip(self, receipts), fields(queue = %self.url, count = receipts.len()))]
    async fn show_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let entries = receipts
            .iter()
            .take(MAX_BATCH)
            .enumerate()
            .map(|(i, receipt)| {
                aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .visibility_timeout(0)
                    .build()
                    .expect("id and receipt handle are set")
            })
            .collect();
        let output = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| from_sdk(&format!("SQS ChangeMessageVisibilityBatch on {}", self.url), &e))?;
        Ok(output.failed().len() + receipts.len().saturating_sub(MAX_BATCH))
    }
}

/// Stalled-stream protection for a long poll: on for the response body,
/// off for the request body.
///
/// The SDK's upload protection watches the request body's throughput with a
/// timer that fires every 100 ms (a tenth of its 1 s window) for as long as
/// the response has not come, whether or not the body has all been sent:
/// through a 20 s long poll that is 200 wake-ups of the node's runtime for
/// nothing, the largest part of what an idle agent costs (about 1.3 ms of
/// CPU a second each; 1,000 agents on two cores took half the machine). A
/// receive's request body is a few hundred bytes of JSON, written at once,
/// so there is no upload to stall; a service that stops answering is still
/// cut off by the attempt timeout ([`super::long_poll_timeouts`]), and a
/// response body that stalls by the download protection, which stays on.
/// <https://docs.aws.amazon.com/sdk-for-rust/latest/dg/stalled-stream-protection.html>
pub fn long_poll_stall_protection() -> aws_sdk_sqs::config::StalledStreamProtectionConfig {
    aws_sdk_sqs::config::StalledStreamProtectionConfig::enabled().upload_enabled(false).download_enabled(true).build()
}

/// The most entries one `DeleteMessageBatch` takes.
pub const MAX_BATCH: usize = 10;

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use super::*;
    use crate::aws::test_server::{Reply, TestServer, sdk_config};

    /// Counts how often the future it wraps is polled: once at the start,
    /// then once for every wake-up of its task.
    struct Polls<F> {
        inner: Pin<Box<F>>,
        count: Arc<AtomicUsize>,
    }

    impl<F: Future> Future for Polls<F> {
        type Output = F::Output;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            self.count.fetch_add(1, Ordering::SeqCst);
            self.inner.as_mut().poll(cx)
        }
    }

    /// A receive waiting on the service is not woken while it waits. The SDK's
    /// upload stalled-stream protection, left on, re-arms a 100 ms timer for
    /// the whole wait (it checks the request body's throughput even after
    /// the body is sent): ten wake-ups a second for every idle node.
    #[tokio::test(flavor = "current_thread")]
    async fn a_long_poll_sleeps_while_the_service_holds_it() {
        const HELD: Duration = Duration::from_millis(2000);
        let server = TestServer::start(|_| {
            std::thread::sleep(HELD);
            Reply::new(200, r#"{"Messages":[{"Body":"b","ReceiptHandle":"r","MessageId":"m"}]}"#)
                .header("content-type", "application/x-amz-json-1.0")
        });
        let queue = SqsQueue::new(
            aws_sdk_sqs::Client::new(&sdk_config(&server.url())),
            "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        );
        let count = Arc::new(AtomicUsize::new(0));
        let started = std::time::Instant::now();
        let received =
            Polls { inner: Box::pin(queue.receive(10, Duration::from_secs(20), None)), count: count.clone() }
                .await
                .unwrap();
        assert!(started.elapsed() >= HELD);
        assert_eq!(received, vec![Received { body: "b".into(), receipt: "r".into() }]);
        assert_eq!(server.requests().len(), 1);
        // Connecting, sending and reading take a handful of polls; a 100 ms
        // timer would add 20.
        let polls = count.load(Ordering::SeqCst);
        assert!(polls <= 8, "the receive was polled {polls} times in {HELD:?}");
    }
}
