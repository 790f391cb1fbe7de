//! The one classifier of AWS's error answers, shared by `synth` (its calls
//! through the SDK and the two it signs by hand) and the agent (its ports):
//! what kind of failure an answer is, from the error code AWS sent, the
//! HTTP status, or the lack of an answer. Each side keeps its own words for
//! the user; only the classification lives here, so a throttle is a
//! throttle on both sides (and never "invalid input").
//!
//! Inputs: an [`SdkError`] of any AWS SDK client ([`of_sdk`]), or the status
//! and code of an answer read by hand ([`classify`]). No I/O; it depends
//! only on the SDK's runtime types, which every SDK client already builds.
//!
//! The order of the checks matters and is the documented order of
//! [`classify`]: AWS answers an unknown access key with HTTP 403, which is
//! not a missing permission, so credentials come first; S3 answers
//! `SlowDown` with HTTP 503, which is a throttle, not an outage.

#![deny(missing_docs)]

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// What kind of failure an AWS error answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// No answer, or no complete one (the endpoint is down, unreachable or
    /// slow), the service failed (5xx), or a conflict that clears by
    /// itself: retrying may succeed.
    Transient,
    /// The service asked us to slow down: retry later, more slowly.
    Throttled,
    /// The credentials lack a permission (an IAM policy, a bucket policy).
    Denied,
    /// AWS did not accept the credentials themselves: an unknown key, a
    /// secret that does not match, an expired session, a clock that is off.
    Credentials,
    /// What the request named is not there (a queue, a bucket, a key).
    NotFound,
    /// The service understood the request and refused it as it stands; or
    /// the request could not be built.
    Invalid,
}

impl Kind {
    /// Whether the same request, sent again later, may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, Kind::Transient | Kind::Throttled)
    }
}

/// Codes that mean "slow down", whatever the HTTP status: those the SDK's
/// own retry classifier treats as throttling
/// (<https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html>),
/// less `LimitExceededException`, which CloudFormation and CloudWatch Logs
/// answer for a quota (too many stacks, too many log groups): waiting does
/// not clear that, and calling it a throttle would send the user the wrong way.
pub const THROTTLED: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Codes of a failure that retrying may clear, whatever the HTTP status:
/// the SDK's transient codes, and Auto Scaling's `ResourceContention`
/// ("another update to this group is in progress"), which clears by itself.
pub const TRANSIENT: &[&str] = &[
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "ResourceContention",
];

/// Codes AWS answers when it does not accept the credentials themselves,
/// as opposed to a permission they lack.
pub const CREDENTIALS: &[&str] = &[
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "AuthFailure",
    "InvalidToken",
    "ExpiredToken",
    "ExpiredTokenException",
    "TokenRefreshRequired",
    "RequestExpired",
];

/// Codes that say what the request named is not there. EC2's
/// `Invalid<Thing>.NotFound` codes are recognised by their suffix.
pub const NOT_FOUND: &[&str] = &[
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
    "NoSuchBucket",
    "NoSuchKey",
    "NoSuchUpload",
    "NotFound",
    "NoSuchEntity",
    "ResourceNotFound",
    "ResourceNotFoundException",
    "NoSuchResourceException",
];

/// The kind of an AWS error answer with HTTP `status` and error `code`
/// (empty when the answer had none, as a HEAD answer has no body). In this
/// order: a credentials code; a throttling code or 429; a transient code,
/// 5xx or 408; a refusal (`AccessDenied...`, EC2's `UnauthorizedOperation`,
/// or 403); a missing thing (a not-found code or 404); else invalid.
pub fn classify(status: u16, code: &str) -> Kind {
    if CREDENTIALS.contains(&code) {
        Kind::Credentials
    } else if THROTTLED.contains(&code) || status == 429 {
        Kind::Throttled
    } else if TRANSIENT.contains(&code) || status >= 500 || status == 408 {
        Kind::Transient
    } else if code.contains("AccessDenied") || code.contains("UnauthorizedOperation") || status == 403 {
        Kind::Denied
    } else if NOT_FOUND.contains(&code) || code.ends_with(".NotFound") || status == 404 {
        Kind::NotFound
    } else {
        Kind::Invalid
    }
}

/// The kind of an error of any SDK client's call: a service's answer by
/// [`classify`]; no answer, or no complete one (a dispatch failure, a
/// timeout, a cut-off response), [`Kind::Transient`]; a request that could
/// not be built, [`Kind::Invalid`].
pub fn of_sdk<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Kind {
    match err {
        SdkError::ServiceError(context) => {
            classify(context.raw().status().as_u16(), context.err().code().unwrap_or(""))
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Kind::Transient,
        _ => Kind::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    /// A service's error as the SDK's generated error types carry it.
    #[derive(Debug)]
    struct Answer(ErrorMetadata);

    impl std::fmt::Display for Answer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0.code())
        }
    }

    impl std::error::Error for Answer {}

    impl ProvideErrorMetadata for Answer {
        fn meta(&self) -> &ErrorMetadata {
            &self.0
        }
    }

    fn answer(status: u16, code: &str) -> SdkError<Answer, HttpResponse> {
        let mut meta = ErrorMetadata::builder().message("the service's words");
        if !code.is_empty() {
            meta = meta.code(code);
        }
        let raw = Response::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        SdkError::service_error(Answer(meta.build()), raw)
    }

    /// AWS's real answers (status as the service sends it) and their kinds.
    const CASES: &[(u16, &str, Kind)] = &[
        // Throttles, with the status each service uses (S3's SlowDown is a 503).
        (400, "Throttling", Kind::Throttled),
        (400, "ThrottlingException", Kind::Throttled),
        (400, "RequestThrottled", Kind::Throttled),
        (503, "RequestLimitExceeded", Kind::Throttled),
        (429, "TooManyRequestsException", Kind::Throttled),
        (503, "SlowDown", Kind::Throttled),
        (429, "", Kind::Throttled),
        // Outages and conflicts that clear by themselves.
        (500, "InternalError", Kind::Transient),
        (500, "InternalFailure", Kind::Transient),
        (503, "ServiceUnavailable", Kind::Transient),
        (502, "SomethingNew", Kind::Transient),
        (504, "", Kind::Transient),
        (400, "RequestTimeout", Kind::Transient),
        (400, "ResourceContention", Kind::Transient),
        (408, "", Kind::Transient),
        // Refusals.
        (403, "AccessDenied", Kind::Denied),
        (400, "AccessDeniedException", Kind::Denied),
        (403, "UnauthorizedOperation", Kind::Denied),
        (403, "", Kind::Denied),
        // The credentials themselves (AWS answers an unknown key with 403).
        (403, "InvalidClientTokenId", Kind::Credentials),
        (400, "UnrecognizedClientException", Kind::Credentials),
        (403, "InvalidAccessKeyId", Kind::Credentials),
        (403, "SignatureDoesNotMatch", Kind::Credentials),
        (400, "ExpiredToken", Kind::Credentials),
        (400, "ExpiredTokenException", Kind::Credentials),
        (400, "RequestExpired", Kind::Credentials),
        // Not there.
        (400, "AWS.SimpleQueueService.NonExistentQueue", Kind::NotFound),
        (400, "QueueDoesNotExist", Kind::NotFound),
        (404, "NoSuchBucket", Kind::NotFound),
        (404, "NoSuchKey", Kind::NotFound),
        (400, "ResourceNotFoundException", Kind::NotFound),
        (400, "NoSuchResourceException", Kind::NotFound),
        (400, "InvalidInstanceID.NotFound", Kind::NotFound),
        (404, "", Kind::NotFound),
        // Invalid requests (CloudFormation's missing stack is a ValidationError).
        (400, "ValidationError", Kind::Invalid),
        (400, "InvalidParameterValue", Kind::Invalid),
        (400, "InvalidInstanceID.Malformed", Kind::Invalid),
        (400, "ResourceAlreadyExistsException", Kind::Invalid),
        (400, "LimitExceededException", Kind::Invalid),
        (400, "", Kind::Invalid),
    ];

    #[test]
    fn every_code_and_status_by_its_kind() {
        for &(status, code, kind) in CASES {
            assert_eq!(classify(status, code), kind, "HTTP {status} {code:?}");
            assert_eq!(of_sdk(&answer(status, code)), kind, "the SDK's HTTP {status} {code:?}");
        }
    }

    #[test]
    fn a_throttle_is_retryable_and_never_invalid() {
        for code in THROTTLED {
            for status in [400, 403, 429, 503] {
                assert_eq!(classify(status, code), Kind::Throttled, "HTTP {status} {code}");
            }
        }
        assert!(Kind::Throttled.is_retryable() && Kind::Transient.is_retryable());
        for kind in [Kind::Denied, Kind::Credentials, Kind::NotFound, Kind::Invalid] {
            assert!(!kind.is_retryable(), "{kind:?}");
        }
    }

    #[test]
    fn no_answer_is_transient_and_an_unbuilt_request_invalid() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let dispatch = SdkError::<Answer, HttpResponse>::dispatch_failure(ConnectorError::io(refused.into()));
        assert_eq!(of_sdk(&dispatch), Kind::Transient);
        assert_eq!(of_sdk(&SdkError::<Answer, HttpResponse>::timeout_error("operation timed out")), Kind::Transient);
        let raw = Response::new(StatusCode::try_from(200).unwrap(), SdkBody::empty());
        assert_eq!(of_sdk(&SdkError::<Answer, HttpResponse>::response_error("truncated body", raw)), Kind::Transient);
        let unbuilt = SdkError::<Answer, HttpResponse>::construction_failure("no region configured");
        assert_eq!(of_sdk(&unbuilt), Kind::Invalid);
    }
}
