//! [`StackSignals`] for the master: its own creation policy signal
//! (`SignalResource`) and the formation wait condition (an HTTP PUT to the
//! wait condition handle's presigned URL).
//!
//! Wait condition signals: <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-waitcondition.html>.
//! The handle is a presigned S3 URL signed with an empty `Content-Type`, so
//! the PUT must send exactly that header, empty, or S3 refuses the signature.

use std::time::Duration;

use aws_sdk_cloudformation::types::ResourceSignalStatus;

use super::error::{SdkResult, from_status, from_ureq};
use crate::ports::{Formation, PortError, StackSignals};

/// How long the wait condition PUT may take to connect.
const SIGNAL_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the whole wait condition PUT may take.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of an error response body is read.
const ERROR_BODY_LIMIT: u64 = 16 * 1024;

/// The stack's signals, as the master sends them.
#[derive(Clone, Debug)]
pub struct CfnSignals {
    /// The CloudFormation client.
    pub client: aws_sdk_cloudformation::Client,
    /// The stack name or id.
    pub stack: String,
    /// The master instance's logical id (the resource with the creation policy).
    pub master_resource: String,
    /// The formation wait condition handle: a presigned URL.
    pub handle_url: String,
}

impl StackSignals for CfnSignals {
    #[tracing::instrument(skip(self), fields(stack = %self.stack, resource = %self.master_resource))]
    async fn master_up(&self, unique_id: &str) -> Result<(), PortError> {
        self.client
            .signal_resource()
            .stack_name(&self.stack)
            .logical_resource_id(&self.master_resource)
            .unique_id(unique_id)
            .status(ResourceSignalStatus::Success)
            .send()
            .await
            .or_port_error(|| {
                format!("CloudFormation SignalResource ({}) on stack {}", self.master_resource, self.stack)
            })?;
        Ok(())
    }

    // The URL is a credential for this one signal: it is not logged.
    #[tracing::instrument(skip(self, outcome), fields(stack = %self.stack, success = outcome.success))]
    async fn formation(&self, outcome: &Formation) -> Result<(), PortError> {
        let url = self.handle_url.clone();
        let body = signal_body(outcome);
        tokio::task::spawn_blocking(move || put_signal(&url, &body))
            .await
            .map_err(|e| PortError::Transient(format!("the wait condition signal task failed: {e}")))?
    }
}

/// The wait condition signal document.
pub(crate) fn signal_body(outcome: &Formation) -> String {
    serde_json::json!({
        "Status": if outcome.success { "SUCCESS" } else { "FAILURE" },
        "Reason": outcome.reason,
        "UniqueId": outcome.unique_id,
        "Data": outcome.data,
    })
    .to_string()
}

/// PUTs `body` to the presigned `url` (blocking).
fn put_signal(url: &str, body: &str) -> Result<(), PortError> {
    const ACTION: &str = "signalling the formation wait condition";
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(SIGNAL_CONNECT_TIMEOUT))
        .timeout_global(Some(SIGNAL_TIMEOUT))
        // Non-2xx answers are read here, so the error can quote S3's reason.
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent.put(url).header("Content-Type", "").send(body).map_err(|e| from_ureq(ACTION, &e))?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        tracing::info!(status, "formation signalled");
        return Ok(());
    }
    let text = response.body_mut().with_config().limit(ERROR_BODY_LIMIT).read_to_string().unwrap_or_default();
    Err(from_status(ACTION, status, &text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::test_server::{Reply, TestServer, form_fields, query_error, sdk_config};

    fn signals(handle_url: String) -> CfnSignals {
        signals_at(&handle_url, handle_url.clone())
    }

    fn signals_at(endpoint: &str, handle_url: String) -> CfnSignals {
        CfnSignals {
            client: aws_sdk_cloudformation::Client::new(&sdk_config(endpoint)),
            stack: "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1".into(),
            master_resource: "Master".into(),
            handle_url,
        }
    }

    // moto does not implement SignalResource, so the request is checked here.
    #[tokio::test]
    async fn master_up_signals_the_master_resource() {
        let server = TestServer::start(|_| {
            Reply::new(200, "<SignalResourceResponse><ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata></SignalResourceResponse>")
                .header("content-type", "text/xml")
        });
        signals_at(&server.url(), String::new()).master_up("i-0abc").await.unwrap();
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let fields = form_fields(&requests[0].body);
        assert_eq!(fields["Action"], "SignalResource");
        assert_eq!(fields["StackName"], "arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack%2Fs%2F1");
        assert_eq!(fields["LogicalResourceId"], "Master");
        assert_eq!(fields["UniqueId"], "i-0abc");
        assert_eq!(fields["Status"], "SUCCESS");
    }

    #[tokio::test]
    async fn master_up_refused_is_permanent_with_the_code() {
        let server = TestServer::start(|_| query_error(400, "ValidationError", "Stack s does not exist"));
        let err = signals_at(&server.url(), String::new()).master_up("i-0abc").await.unwrap_err();
        assert!(
            matches!(&err, PortError::Permanent(m) if m.contains("ValidationError: Stack s does not exist") && m.contains("Master")),
            "{err:?}"
        );
    }

    fn outcome(success: bool) -> Formation {
        Formation {
            success,
            reason: "2 of 8 workers launched: \"InsufficientInstanceCapacity\"".into(),
            unique_id: "i-0123".into(),
            data: "{\"workers\":2}".into(),
        }
    }

    #[test]
    fn body_is_the_documented_document() {
        let body: serde_json::Value = serde_json::from_str(&signal_body(&outcome(false))).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "Status": "FAILURE",
                "Reason": "2 of 8 workers launched: \"InsufficientInstanceCapacity\"",
                "UniqueId": "i-0123",
                "Data": "{\"workers\":2}",
            })
        );
        assert!(signal_body(&outcome(true)).contains("\"Status\":\"SUCCESS\""));
    }

    #[tokio::test]
    async fn formation_puts_with_an_empty_content_type() {
        let server = TestServer::start(|_| Reply::new(200, ""));
        let url = format!("{}/cloudformation-waitcondition/handle?X-Amz-Signature=abc", server.url());
        signals(url).formation(&outcome(true)).await.unwrap();
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let request = &requests[0];
        assert_eq!(request.method, "PUT");
        assert_eq!(request.path, "/cloudformation-waitcondition/handle?X-Amz-Signature=abc");
        assert_eq!(request.header("content-type"), Some(""), "headers: {:?}", request.headers);
        assert_eq!(request.body, signal_body(&outcome(true)));
    }

    #[tokio::test]
    async fn refused_signature_is_permanent_and_quoted() {
        let server = TestServer::start(|_| {
            Reply::new(
                403,
                "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message></Error>",
            )
        });
        let err = signals(format!("{}/h", server.url())).formation(&outcome(true)).await.unwrap_err();
        match err {
            PortError::Permanent(m) => assert!(m.contains("403") && m.contains("SignatureDoesNotMatch"), "{m}"),
            other => panic!("expected permanent, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn server_error_is_transient() {
        let server = TestServer::start(|_| Reply::new(503, "Slow Down"));
        let err = signals(format!("{}/h", server.url())).formation(&outcome(true)).await.unwrap_err();
        assert!(matches!(&err, PortError::Transient(m) if m.contains("503") && m.contains("Slow Down")), "{err:?}");
    }

    #[tokio::test]
    async fn closed_port_is_transient() {
        let url = format!("http://{}/h", crate::aws::test_server::closed_port());
        let err = signals(url).formation(&outcome(true)).await.unwrap_err();
        assert!(matches!(err, PortError::Transient(_)), "{err:?}");
    }
}
