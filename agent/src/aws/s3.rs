//! The training data's [`ObjectStore`] on the AWS SDK ([`S3Objects`]):
//! `ListObjectsV2` with the data set's prefix, `HeadObject` and
//! `GetObject` (a range, or the whole object with checksum mode on). IAM:
//! `s3:ListBucket` on the bucket (a policy may hold it to the prefix with
//! an `s3:prefix` condition) and `s3:GetObject` on the objects; nothing
//! else (no `HeadBucket`, no `GetBucketLocation`: the bucket's region is
//! the node's, as the template requires).
//!
//! The client is built from the agent's config ([`super::sdk_config`]),
//! path-style when an endpoint override is set (a local S3 has no
//! per-bucket host names), as synth's is.

use std::ops::Range;

use aws_errors::Kind;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{ChecksumMode, ChecksumType};

use crate::data::store::{Checksum, Got, Head, Integrity, ObjectInfo, ObjectStore, StoreError, StoreErrorKind};

/// S3, for the data fetch.
#[derive(Clone, Debug)]
pub struct S3Objects {
    client: aws_sdk_s3::Client,
}

impl S3Objects {
    /// The store on `client`.
    pub fn new(client: aws_sdk_s3::Client) -> S3Objects {
        S3Objects { client }
    }

    /// The S3 client for a loaded config: path-style addressing when an
    /// endpoint override is set.
    pub fn client(config: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
        let path_style = config.endpoint_url().is_some() || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
        aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(config).force_path_style(path_style).build())
    }
}

/// An SDK error as a [`StoreError`]: denied, not found, transient or
/// other, by `aws_errors`' kind of it (credentials S3 refused count as denied).
fn store_error<E>(err: SdkError<E>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match &err {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let code = context.err().code().map(str::to_owned).unwrap_or_else(|| match status {
                403 => "AccessDenied".to_owned(),
                404 => "NotFound".to_owned(),
                s => format!("HTTP{s}"),
            });
            let message = context.err().message().unwrap_or("no message").to_owned();
            let kind = match aws_errors::classify(status, &code) {
                Kind::Transient | Kind::Throttled => StoreErrorKind::Transient,
                Kind::Denied | Kind::Credentials => StoreErrorKind::Denied,
                Kind::NotFound => StoreErrorKind::NotFound,
                Kind::Invalid => StoreErrorKind::Other,
            };
            StoreError::new(kind, &code, format!("{message} (HTTP {status})"))
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            StoreError::new(StoreErrorKind::Transient, "NoAnswer", super::error::chain(&err))
        }
        _ => StoreError::new(StoreErrorKind::Other, "RequestNotSent", super::error::chain(&err)),
    }
}

fn decode<const N: usize>(b64: &str) -> Option<[u8; N]> {
    aws_smithy_types::base64::decode(b64).ok()?.try_into().ok()
}

/// The checksum S3 gave, from its headers: a full-object one is decoded;
/// a composite one (`...-N`, or `ChecksumType: COMPOSITE`) is named.
fn integrity(
    crc32: Option<&str>,
    crc32c: Option<&str>,
    crc64: Option<&str>,
    sha256: Option<&str>,
    kind: Option<&ChecksumType>,
) -> Integrity {
    let composite = |v: &str| v.contains('-') || kind == Some(&ChecksumType::Composite);
    if let Some(v) = crc64 {
        // CRC-64/NVME is always a full-object checksum.
        return decode::<8>(v).map_or(Integrity::None, |b| Integrity::Full(Checksum::Crc64Nvme(u64::from_be_bytes(b))));
    }
    if let Some(v) = crc32c {
        if composite(v) {
            return Integrity::Composite("CRC32C".into());
        }
        return decode::<4>(v).map_or(Integrity::None, |b| Integrity::Full(Checksum::Crc32c(u32::from_be_bytes(b))));
    }
    if let Some(v) = crc32 {
        if composite(v) {
            return Integrity::Composite("CRC32".into());
        }
        return decode::<4>(v).map_or(Integrity::None, |b| Integrity::Full(Checksum::Crc32(u32::from_be_bytes(b))));
    }
    if let Some(v) = sha256 {
        if composite(v) {
            return Integrity::Composite("SHA256".into());
        }
        return decode::<32>(v).map_or(Integrity::None, |b| Integrity::Full(Checksum::Sha256(b)));
    }
    Integrity::None
}

impl ObjectStore for S3Objects {
    #[tracing::instrument(skip(self), level = "debug")]
    async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, StoreError> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(store_error)?;
            for o in page.contents() {
                if let Some(key) = o.key() {
                    objects.push(ObjectInfo {
                        key: key.to_owned(),
                        size: o.size().unwrap_or(0).max(0) as u64,
                        etag: o.e_tag().unwrap_or_default().to_owned(),
                    });
                }
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => return Ok(objects),
            }
        }
    }

    #[tracing::instrument(skip(self), level = "debug")]
    async fn head(&self, bucket: &str, key: &str) -> Result<Head, StoreError> {
        let h = self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(store_error)?;
        Ok(Head {
            size: h.content_length().unwrap_or(0).max(0) as u64,
            integrity: integrity(
                h.checksum_crc32(),
                h.checksum_crc32_c(),
                h.checksum_crc64_nvme(),
                h.checksum_sha256(),
                h.checksum_type(),
            ),
        })
    }

    async fn get(&self, bucket: &str, key: &str, range: Option<Range<u64>>) -> Result<Got, StoreError> {
        let mut request = self.client.get_object().bucket(bucket).key(key);
        request = match &range {
            // An empty range cannot be asked for: it is no bytes.
            Some(r) if r.start >= r.end => {
                return Ok(Got { bytes: bytes::Bytes::new(), integrity: Integrity::None });
            }
            Some(r) => request.range(format!("bytes={}-{}", r.start, r.end - 1)),
            // The whole object, with its checksum (the SDK also checks it).
            None => request.checksum_mode(ChecksumMode::Enabled),
        };
        let out = request.send().await.map_err(store_error)?;
        let integrity = match range {
            Some(_) => Integrity::None,
            None => integrity(
                out.checksum_crc32(),
                out.checksum_crc32_c(),
                out.checksum_crc64_nvme(),
                out.checksum_sha256(),
                out.checksum_type(),
            ),
        };
        let body = out.body.collect().await.map_err(|e| {
            StoreError::new(StoreErrorKind::Transient, "BodyCut", format!("the body was cut short: {e}"))
        })?;
        Ok(Got { bytes: body.into_bytes(), integrity })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_headers() {
        // CRC32 of "123456789" is cbf43926.
        assert_eq!(integrity(Some("y/Q5Jg=="), None, None, None, None), Integrity::Full(Checksum::Crc32(0xcbf43926)));
        assert_eq!(
            integrity(Some("y/Q5Jg==-3"), None, None, None, Some(&ChecksumType::Composite)),
            Integrity::Composite("CRC32".into())
        );
        assert_eq!(integrity(None, None, None, None, None), Integrity::None);
    }

    #[test]
    fn store_errors_by_the_shared_kind() {
        use aws_sdk_s3::operation::get_object::GetObjectError;
        use aws_smithy_runtime_api::http::{Response, StatusCode};
        use aws_smithy_types::body::SdkBody;
        let answer = |status: u16, code: &str| {
            let mut meta = aws_sdk_s3::error::ErrorMetadata::builder().message("m");
            if !code.is_empty() {
                meta = meta.code(code);
            }
            let raw = Response::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
            store_error(SdkError::service_error(GetObjectError::generic(meta.build()), raw))
        };
        let cases: &[(u16, &str, StoreErrorKind, &str)] = &[
            (503, "SlowDown", StoreErrorKind::Transient, "SlowDown"),
            (500, "InternalError", StoreErrorKind::Transient, "InternalError"),
            (429, "", StoreErrorKind::Transient, "HTTP429"),
            (403, "AccessDenied", StoreErrorKind::Denied, "AccessDenied"),
            (403, "", StoreErrorKind::Denied, "AccessDenied"),
            (403, "InvalidAccessKeyId", StoreErrorKind::Denied, "InvalidAccessKeyId"),
            (400, "ExpiredToken", StoreErrorKind::Denied, "ExpiredToken"),
            (404, "NoSuchKey", StoreErrorKind::NotFound, "NoSuchKey"),
            (404, "NoSuchBucket", StoreErrorKind::NotFound, "NoSuchBucket"),
            (404, "", StoreErrorKind::NotFound, "NotFound"),
            (416, "InvalidRange", StoreErrorKind::Other, "InvalidRange"),
        ];
        for &(status, code, kind, shown) in cases {
            let e = answer(status, code);
            assert_eq!((e.kind, e.code.as_str()), (kind, shown), "HTTP {status} {code:?}: {e:?}");
        }
    }
}
