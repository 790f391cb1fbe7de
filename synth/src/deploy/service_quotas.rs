//! Service Quotas' `GetServiceQuota`, the one call the capacity check
//! ([`super::capacity`]) makes to it, as a signed request rather than
//! through an SDK crate (the same reasons as [`super::ec2`]).
//!
//! Service Quotas speaks the JSON 1.1 protocol: a `POST /` with the header
//! `X-Amz-Target: ServiceQuotasV20190624.GetServiceQuota`, the body
//! `{"ServiceCode": "ec2", "QuotaCode": "L-..."}`, signed with SigV4 as
//! `servicequotas`. The endpoint is configuration, as for the SDK clients:
//! `AWS_ENDPOINT_URL_SERVICE_QUOTAS`, else the shared endpoint override
//! (`AWS_ENDPOINT_URL`, the profile's `endpoint_url`), else AWS's regional
//! endpoint `https://servicequotas.<region>.amazonaws.com`
//! (<https://docs.aws.amazon.com/general/latest/gr/sq.html>). Errors come
//! back as JSON (`{"__type": "...", "message": "..."}`) and are mapped to
//! [`CloudError`] as the SDK's are.

use aws_config::SdkConfig;
use serde_json::{Value, json};

use super::ec2::Signed;
use super::port::{CloudError, CloudResult, Quota};

/// The operation's target header.
const TARGET: &str = "ServiceQuotasV20190624.GetServiceQuota";

/// Signs and sends Service Quotas requests.
#[derive(Clone, Debug)]
pub(crate) struct ServiceQuotas {
    signed: Signed,
}

impl ServiceQuotas {
    /// The client for a loaded config and its region.
    pub(crate) fn new(config: &SdkConfig, region: &str) -> ServiceQuotas {
        let signed = Signed::new(config, region, "AWS_ENDPOINT_URL_SERVICE_QUOTAS", "servicequotas", "servicequotas");
        ServiceQuotas { signed }
    }

    /// The applied value of quota `code` of `service`, or `None` when
    /// Service Quotas has no such quota (`NoSuchResourceException`).
    pub(crate) async fn quota(&self, service: &str, code: &str) -> CloudResult<Option<Quota>> {
        let what = format!("Service Quotas GetServiceQuota of {service} {code}");
        let plain =
            |s: &str| !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !plain(service) || !plain(code) {
            return Err(CloudError::Invalid { what, message: "not a service code and quota code".into() });
        }
        let body = json!({"ServiceCode": service, "QuotaCode": code}).to_string();
        let headers = [("Content-Type", "application/x-amz-json-1.1"), ("X-Amz-Target", TARGET)];
        let answer = self
            .signed
            .call(&what, &headers, &body, |status, text| {
                let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if (200..300).contains(&status) {
                    return Ok(Some((answer, text)));
                }
                match error_of(&what, status, &answer, &text) {
                    CloudError::Invalid { message, .. } if message.starts_with("NoSuchResourceException") => Ok(None),
                    e => Err(e),
                }
            })
            .await?;
        let Some((answer, text)) = answer else { return Ok(None) };
        quota_of(&answer).map(Some).ok_or_else(|| CloudError::Unavailable {
            what: what.clone(),
            message: format!("the answer has no Quota.Value: {}", cut(&text)),
        })
    }
}

/// The quota in a `GetServiceQuota` answer.
fn quota_of(answer: &Value) -> Option<Quota> {
    let quota = answer.get("Quota")?;
    Some(Quota {
        name: quota.get("QuotaName").and_then(Value::as_str).unwrap_or_default().to_owned(),
        value: quota.get("Value").and_then(Value::as_f64)?,
    })
}

/// A JSON-protocol error answer as the port's error, by the same rules as
/// the SDK's (`super::sdk`): the code is `__type` (after any `#`).
fn error_of(what: &str, status: u16, answer: &Value, text: &str) -> CloudError {
    let code = answer
        .get("__type")
        .or_else(|| answer.get("code"))
        .and_then(Value::as_str)
        .map(|t| t.rsplit('#').next().unwrap_or(t))
        .unwrap_or_default();
    let said = answer.get("message").or_else(|| answer.get("Message")).and_then(Value::as_str);
    let message = match (code, said) {
        ("", _) => format!("HTTP {status}: {}", said.map_or_else(|| cut(text), str::to_owned)),
        (code, Some(said)) => format!("{code}: {said}"),
        (code, None) => code.to_owned(),
    };
    super::credentials::classify(what, status, code, message)
}

/// At most 200 characters of an unexpected answer, for a message.
fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_errors_are_read_from_json() {
        let answer = json!({"Quota": {"ServiceCode": "ec2", "QuotaCode": "L-417A185B",
            "QuotaName": "Running On-Demand P instances", "Value": 384.0}});
        assert_eq!(quota_of(&answer), Some(Quota { name: "Running On-Demand P instances".into(), value: 384.0 }));
        assert_eq!(quota_of(&json!({})), None);
        let denied = json!({"__type": "AccessDeniedException", "message": "User: arn:aws:iam::1:user/d is not \
            authorized to perform: servicequotas:GetServiceQuota on resource: *"});
        let e = error_of("Service Quotas GetServiceQuota of ec2 L-1", 400, &denied, "");
        assert!(matches!(&e, CloudError::Denied { .. }), "{e:?}");
        assert!(e.to_string().contains("AWS refused servicequotas:GetServiceQuota to user/d"), "{e}");
        let missing = json!({"__type": "com.amazonaws#NoSuchResourceException", "message": "no"});
        let e = error_of("x", 400, &missing, "");
        assert_eq!(e, CloudError::Invalid { what: "x".into(), message: "NoSuchResourceException: no".into() });
        assert!(matches!(error_of("x", 503, &Value::Null, "busy"), CloudError::Unavailable { .. }));
    }
}
