//! [`Queue`] on an SQS standard queue.
//!
//! Long polling, visibility timeouts and deletion follow
//! <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html>.

use std::time::Duration;

use super::error::SdkResult;
use crate::ports::{MAX_BATCH, PortError, Queue, Received};

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
            .or_port_error(|| format!("SQS SendMessage to {}", self.url))?;
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
                aws_sdk_sqs::config::Builder::default().timeout_config(super::sdk_config::long_poll_timeouts(wait)),
            )
            .send()
            .await
            .or_port_error(|| format!("SQS ReceiveMessage from {}", self.url))?;
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
            .or_port_error(|| format!("SQS DeleteMessage from {}", self.url))?;
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
        let entries = batch_entries(receipts, |id, receipt| {
            aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder().id(id).receipt_handle(receipt).build()
        });
        let output = self
            .client
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .or_port_error(|| format!("SQS DeleteMessageBatch from {}", self.url))?;
        for failed in output.failed() {
            tracing::debug!(id = failed.id(), code = failed.code(), "a message of the batch was not deleted");
        }
        Ok(not_done(output.failed().len(), receipts))
    }

    /// `ChangeMessageVisibilityBatch` to 0 seconds.
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibilityBatch.html>
    #[tracing::instrument(skip(self, receipts), fields(queue = %self.url, count = receipts.len()))]
    async fn show_batch(&self, receipts: &[&str]) -> Result<usize, PortError> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let entries = batch_entries(receipts, |id, receipt| {
            aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(id)
                .receipt_handle(receipt)
                .visibility_timeout(0)
                .build()
        });
        let output = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .or_port_error(|| format!("SQS ChangeMessageVisibilityBatch on {}", self.url))?;
        Ok(not_done(output.failed().len(), receipts))
    }
}

/// The entries of one batch call: the first [`MAX_BATCH`] receipts, each
/// with its position as its id (`entry(id, receipt)` builds one).
fn batch_entries<T, E: std::fmt::Debug>(receipts: &[&str], entry: impl Fn(String, &str) -> Result<T, E>) -> Vec<T> {
    receipts
        .iter()
        .take(MAX_BATCH)
        .enumerate()
        .map(|(i, receipt)| entry(i.to_string(), receipt).expect("id and receipt handle are set"))
        .collect()
}

/// How many of `receipts` a batch call left undone: the `failed` entries it
/// reported, and the receipts past [`MAX_BATCH`] it was not given.
fn not_done(failed: usize, receipts: &[&str]) -> usize {
    failed + receipts.len().saturating_sub(MAX_BATCH)
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use super::*;
    use crate::aws::test_server::{Reply, TestServer};

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

    /// How long the stand-in holds every request before it answers.
    const HELD: Duration = Duration::from_millis(2000);

    /// A queue on a stand-in that holds every request for [`HELD`], with the
    /// agent's own SDK configuration ([`crate::aws::config_loader`]).
    async fn held_queue(reply: &'static str) -> (TestServer, SqsQueue) {
        let server = TestServer::start(move |_| {
            std::thread::sleep(HELD);
            Reply::new(200, reply).header("content-type", "application/x-amz-json-1.0")
        });
        let config = crate::aws::config_loader("us-east-1")
            .endpoint_url(server.url())
            .credentials_provider(aws_sdk_sqs::config::Credentials::new("testing", "testing", None, None, "test"))
            .load()
            .await;
        let queue =
            SqsQueue::new(aws_sdk_sqs::Client::new(&config), "https://sqs.us-east-1.amazonaws.com/123456789012/q");
        (server, queue)
    }

    /// Runs `call` and returns its output and how often it was polled.
    async fn polls<T>(call: impl Future<Output = T>) -> (T, usize) {
        let count = Arc::new(AtomicUsize::new(0));
        let started = std::time::Instant::now();
        let out = Polls { inner: Box::pin(call), count: count.clone() }.await;
        assert!(started.elapsed() >= HELD);
        (out, count.load(Ordering::SeqCst))
    }

    /// A call waiting on the service is not woken while it waits. The SDK's
    /// upload stalled-stream protection, left on, re-arms a 100 ms timer for
    /// the whole wait (it checks the request body's throughput even after
    /// the body is sent): ten wake-ups a second for an idle node's long
    /// poll, and as many for every send while the service is slow.
    /// Connecting, sending and reading take a handful of polls; a 100 ms
    /// timer would add 20.
    #[tokio::test(flavor = "current_thread")]
    async fn a_call_sleeps_while_the_service_holds_it() {
        let (server, queue) = held_queue(r#"{"Messages":[{"Body":"b","ReceiptHandle":"r","MessageId":"m"}]}"#).await;
        let (received, count) = polls(queue.receive(10, Duration::from_secs(20), None)).await;
        assert_eq!(received.unwrap(), vec![Received { body: "b".into(), receipt: "r".into() }]);
        assert!(count <= 8, "the receive was polled {count} times in {HELD:?}");

        let (server2, queue) =
            held_queue(r#"{"MessageId":"m","MD5OfMessageBody":"92eb5ffee6ae2fec3ad71c777531578f"}"#).await;
        let (sent, count) = polls(queue.send("b")).await;
        sent.unwrap();
        assert!(count <= 8, "the send was polled {count} times in {HELD:?}");
        assert_eq!((server.requests().len(), server2.requests().len()), (1, 1));
    }
}
