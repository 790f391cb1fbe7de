//! Whether a failed call is worth retrying: AWS SDK and HTTP errors mapped to
//! [`PortError`].
//!
//! The kind of failure is `aws_errors`' (the one classifier synth shares):
//! a throttle and a transient failure (no answer, a cut-off response, 5xx,
//! a conflict that clears by itself) are [`PortError::Transient`]; the
//! rest (no permission, credentials AWS refused, no such queue or group,
//! invalid input) are permanent, and the message then carries the
//! service's error code and message so the user can act on it.

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::ports::PortError;

/// Maps an SDK error from `action` (for example "SQS ReceiveMessage on <url>") to a [`PortError`].
pub(crate) fn from_sdk<E>(action: &str, err: &SdkError<E>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match err {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let code = context.err().code();
            let message = context.err().message().unwrap_or("no message");
            let described = match code {
                Some(code) => format!("{action} failed: {code}: {message} (HTTP {status})"),
                None => format!("{action} failed: HTTP {status}: {message}"),
            };
            if aws_errors::of_sdk(err).is_retryable() {
                PortError::Transient(described)
            } else {
                PortError::Permanent(described)
            }
        }
        // No answer, or no complete answer: the endpoint is down, unreachable, or slow.
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            PortError::Transient(format!("{action}: no answer: {}", chain(err)))
        }
        // The request could not even be built (bad input, missing region or credentials).
        _ => PortError::Permanent(format!("{action}: could not send the request: {}", chain(err))),
    }
}

/// The step every SDK call of the ports ends with: the call's result, its
/// error mapped to a [`PortError`] by [`from_sdk`]. `action` names the call
/// and what it was on (for example "SQS SendMessage to <url>"); it is only
/// built when the call failed.
pub(crate) trait SdkResult<T> {
    /// `Ok` as it is; an SDK error as a [`PortError`] that names `action`.
    fn or_port_error(self, action: impl FnOnce() -> String) -> Result<T, PortError>;
}

impl<T, E> SdkResult<T> for Result<T, SdkError<E>>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    fn or_port_error(self, action: impl FnOnce() -> String) -> Result<T, PortError> {
        self.map_err(|e| from_sdk(&action(), &e))
    }
}

/// Maps an HTTP answer outside 2xx to a [`PortError`] by its status
/// (`aws_errors::classify`): 5xx, 408 and 429 may clear, the rest will not.
pub(crate) fn from_status(action: &str, status: u16, body: &str) -> PortError {
    let described = format!("{action} failed: HTTP {status}: {}", excerpt(body));
    if aws_errors::classify(status, "").is_retryable() {
        PortError::Transient(described)
    } else {
        PortError::Permanent(described)
    }
}

/// Maps a `ureq` transport error to a [`PortError`].
pub(crate) fn from_ureq(action: &str, err: &ureq::Error) -> PortError {
    use ureq::Error as E;
    match err {
        E::StatusCode(status) => from_status(action, *status, ""),
        E::Io(_)
        | E::Timeout(_)
        | E::HostNotFound
        | E::ConnectionFailed
        | E::Protocol(_)
        | E::BodyStalled
        | E::ConnectProxyFailed(_) => PortError::Transient(format!("{action}: no answer: {err}")),
        _ => PortError::Permanent(format!("{action}: {err}")),
    }
}

/// An error and its sources on one line, `outer: inner: root`, without a
/// source whose text is already there (the SDK's wrappers often repeat
/// their source's text): the chain [`cli_output::report`] writes, one cause
/// a line, joined into one line for a log line or a signal's reason.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    cli_output::report(err).replace("\n  caused by: ", ": ")
}

/// The start of a response body, on one line, for an error message.
pub(crate) fn excerpt(body: &str) -> String {
    const MAX: usize = 300;
    let one_line = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return "(empty body)".to_owned();
    }
    match one_line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &one_line[..cut]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageError;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;

    fn service_error(status: u16, code: &str, message: &str) -> SdkError<ReceiveMessageError> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        let raw = Response::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        SdkError::service_error(ReceiveMessageError::generic(meta), raw)
    }

    #[test]
    fn service_errors_by_code_and_status() {
        let cases: &[(u16, &str, bool)] = &[
            (400, "Throttling", true),
            (400, "ThrottlingException", true),
            (400, "RequestThrottled", true),
            (400, "RequestLimitExceeded", true),
            (429, "TooManyRequestsException", true),
            (400, "ResourceContention", true),
            (500, "InternalError", true),
            (503, "ServiceUnavailable", true),
            (502, "SomethingNew", true),
            // A 429 is a throttle whatever its code (before the shared
            // classifier, only a throttling code made it transient).
            (429, "SomethingNew", true),
            (400, "ExpiredToken", false),
            (403, "SignatureDoesNotMatch", false),
            (403, "AccessDenied", false),
            (403, "AccessDeniedException", false),
            (400, "AWS.SimpleQueueService.NonExistentQueue", false),
            (400, "QueueDoesNotExist", false),
            (400, "ValidationError", false),
            (400, "InvalidParameterValue", false),
        ];
        for &(status, code, transient) in cases {
            let err = from_sdk("SQS ReceiveMessage on q", &service_error(status, code, "the message"));
            match (&err, transient) {
                (PortError::Transient(m), true) | (PortError::Permanent(m), false) => {
                    assert!(m.contains(code), "{m}");
                    assert!(m.contains("the message"), "{m}");
                    assert!(m.contains("SQS ReceiveMessage on q"), "{m}");
                    assert!(m.contains(&status.to_string()), "{m}");
                }
                _ => panic!("{status} {code}: expected transient={transient}, got {err:?}"),
            }
        }
    }

    #[test]
    fn service_error_without_code_uses_the_status() {
        let meta = ErrorMetadata::builder().build();
        let raw = Response::new(StatusCode::try_from(404).unwrap(), SdkBody::empty());
        let err = SdkError::<ReceiveMessageError>::service_error(ReceiveMessageError::generic(meta), raw);
        assert_eq!(from_sdk("X", &err), PortError::Permanent("X failed: HTTP 404: no message".to_owned()));
    }

    #[test]
    fn no_answer_is_transient() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let dispatch = SdkError::<ReceiveMessageError>::dispatch_failure(ConnectorError::io(refused.into()));
        assert!(matches!(from_sdk("X", &dispatch), PortError::Transient(m) if m.contains("connection refused")));

        let timeout = SdkError::<ReceiveMessageError>::timeout_error("operation timed out");
        assert!(matches!(from_sdk("X", &timeout), PortError::Transient(_)));

        let raw = Response::new(StatusCode::try_from(200).unwrap(), SdkBody::empty());
        let cut = SdkError::<ReceiveMessageError>::response_error("truncated body", raw);
        assert!(matches!(from_sdk("X", &cut), PortError::Transient(_)));
    }

    #[test]
    fn chain_joins_sources_once() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let dispatch = SdkError::<ReceiveMessageError>::dispatch_failure(ConnectorError::io(refused.into()));
        let text = chain(&dispatch);
        assert!(text.starts_with("dispatch failure"), "{text}");
        assert!(text.ends_with("connection refused"), "{text}");
        assert_eq!(text.matches("connection refused").count(), 1, "{text}");
        assert!(!text.contains("DispatchFailure"), "no Debug dump: {text}");
    }

    #[test]
    fn construction_failure_is_permanent() {
        let err = SdkError::<ReceiveMessageError>::construction_failure("no region configured");
        assert!(matches!(from_sdk("X", &err), PortError::Permanent(m) if m.contains("no region configured")));
    }

    #[test]
    fn http_status_classes() {
        assert!(matches!(from_status("PUT", 503, "busy"), PortError::Transient(m) if m.contains("busy")));
        assert!(matches!(from_status("PUT", 429, ""), PortError::Transient(_)));
        assert!(matches!(from_status("PUT", 408, ""), PortError::Transient(_)));
        assert!(matches!(from_status("PUT", 403, "<Error><Code>SignatureDoesNotMatch</Code></Error>"),
                PortError::Permanent(m) if m.contains("HTTP 403") && m.contains("SignatureDoesNotMatch")));
        assert!(matches!(from_status("PUT", 404, ""), PortError::Permanent(m) if m.contains("(empty body)")));
    }

    #[test]
    fn ureq_errors() {
        assert!(matches!(from_ureq("PUT", &ureq::Error::ConnectionFailed), PortError::Transient(_)));
        assert!(matches!(from_ureq("PUT", &ureq::Error::HostNotFound), PortError::Transient(_)));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(matches!(from_ureq("PUT", &ureq::Error::Io(io)), PortError::Transient(_)));
        assert!(matches!(from_ureq("PUT", &ureq::Error::StatusCode(502)), PortError::Transient(_)));
        assert!(matches!(from_ureq("PUT", &ureq::Error::StatusCode(403)), PortError::Permanent(_)));
        assert!(matches!(from_ureq("PUT", &ureq::Error::BadUri("x".into())), PortError::Permanent(_)));
    }

    #[test]
    fn excerpt_is_one_bounded_line() {
        assert_eq!(excerpt("a\n  b\tc"), "a b c");
        let long = "x".repeat(1000);
        assert_eq!(excerpt(&long).len(), 303);
        assert_eq!(excerpt("é".repeat(400).as_str()).chars().count(), 303);
    }
}
