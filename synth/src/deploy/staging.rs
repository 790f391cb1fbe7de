//! The staging bucket: where `synth deploy` puts what CloudFormation and the
//! nodes read from S3 — the agent package (when the image has no agent) and
//! a template too large to send inline.
//!
//! One bucket per account and region, made on first use the way
//! `cdk bootstrap` makes its own: private, encrypted, public access
//! blocked, bucket-owner enforced, versioned. Objects are keyed by
//! their SHA-256, so the same package is uploaded once, whatever the number
//! of stacks and deploys.

use std::path::{Path, PathBuf};

use node_contract::PackageFormat;
use sha2::{Digest, Sha256};

use super::port::{Cloud, CloudResult};

/// The most bytes CloudFormation takes as an inline `TemplateBody`; a
/// larger template goes through the staging bucket as a `TemplateURL`.
pub(crate) const INLINE_TEMPLATE_LIMIT: usize = 51_200;

/// The staging bucket of an account in a region.
pub(crate) fn bucket_name(account: &str, region: &str) -> String {
    format!("deeplearning-cluster-staging-{account}-{region}")
}

/// Where a package with this checksum and file name goes.
pub(crate) fn package_key(sha256: &str, file_name: &str) -> String {
    format!("agent/{sha256}/{file_name}")
}

/// Where a template with this checksum goes.
pub(crate) fn template_key(stack: &str, sha256: &str) -> String {
    format!("templates/{stack}/{sha256}.json")
}

/// The HTTPS URL CloudFormation reads a template from (`TemplateURL`).
pub(crate) fn template_url(bucket: &str, region: &str, key: &str) -> String {
    format!("https://{bucket}.s3.{region}.amazonaws.com/{key}")
}

/// Lower-case hex SHA-256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// An agent package read from disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Package {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its file name (kept in the object key, so a download has the right extension).
    pub file_name: String,
    /// Its content.
    pub bytes: Vec<u8>,
    /// Its SHA-256.
    pub sha256: String,
    /// What kind of package it is ([`super::package::check`]).
    pub format: PackageFormat,
}

/// Reads a package and checks that it is one ([`super::package::check`]);
/// the error says which file and why.
pub(crate) fn read_package(path: &Path) -> Result<Package, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read the agent package {}: {e}", path.display()))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{} is not a file", path.display()))?;
    let format = super::package::check(&bytes, &path.display().to_string())?;
    let sha256 = sha256_hex(&bytes);
    Ok(Package { path: path.to_owned(), file_name, bytes, sha256, format })
}

/// The file name `packaging/build` gives the package of this format.
pub(crate) fn package_file_name(format: PackageFormat) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match format {
        PackageFormat::Deb => format!("deeplearning-agent_{version}-1_amd64.deb"),
        PackageFormat::Tarball => format!("deeplearning-agent-{version}-x86_64.tar.gz"),
    }
}

/// Where `packaging/build` leaves its packages: `$CARGO_TARGET_DIR/package`,
/// else the default target dir's.
pub(crate) fn package_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("package"),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            home.join(".cache/deeplearning-cluster/target/package")
        }
    }
}

/// The staging bucket, known to exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Staging {
    /// Its name.
    pub bucket: String,
    /// Its region.
    pub region: String,
}

/// Whether [`Staging::put_once`] uploaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Upload {
    /// The object was not there; it is now.
    Uploaded,
    /// An object with that key (so that checksum) was there already.
    AlreadyThere,
}

impl Staging {
    /// The account's staging bucket in the cloud's region, created when
    /// missing; the flag says whether it was created now.
    pub(crate) async fn ensure<C: Cloud>(cloud: &C, account: &str) -> CloudResult<(Staging, bool)> {
        let staging = Staging { bucket: bucket_name(account, cloud.region()), region: cloud.region().to_owned() };
        if cloud.bucket_exists(&staging.bucket).await? {
            return Ok((staging, false));
        }
        cloud.create_staging_bucket(&staging.bucket).await?;
        Ok((staging, true))
    }

    /// Uploads `body` under `key` unless an object is there already (keys
    /// hold the content's checksum, so the object is the same).
    pub(crate) async fn put_once<C: Cloud>(&self, cloud: &C, key: &str, body: &[u8]) -> CloudResult<Upload> {
        if cloud.object_exists(&self.bucket, key).await? {
            return Ok(Upload::AlreadyThere);
        }
        cloud.put_object(&self.bucket, key, body.to_vec()).await?;
        Ok(Upload::Uploaded)
    }

    /// The `s3://` URL of a key, as nodes download it.
    pub(crate) fn s3_url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::fake::FakeCloud;

    #[tokio::test]
    async fn the_bucket_is_created_once_and_a_package_uploaded_once() {
        let cloud = FakeCloud::default();
        let (staging, created) = Staging::ensure(&cloud, "123456789012").await.unwrap();
        assert!(created);
        assert_eq!(staging.bucket, "deeplearning-cluster-staging-123456789012-us-east-1");
        let (again, created) = Staging::ensure(&cloud, "123456789012").await.unwrap();
        assert!(!created);
        assert_eq!(again, staging);
        let body = b"package".to_vec();
        let key = package_key(&sha256_hex(&body), "agent.deb");
        assert_eq!(staging.put_once(&cloud, &key, &body).await.unwrap(), Upload::Uploaded);
        assert_eq!(staging.put_once(&cloud, &key, &body).await.unwrap(), Upload::AlreadyThere);
        assert_eq!(cloud.calls_named("create_staging_bucket"), 1);
        assert_eq!(cloud.calls_named("put_object"), 1);
        assert_eq!(staging.s3_url(&key), format!("s3://{}/{key}", staging.bucket));
    }

    #[test]
    fn names_and_urls() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(
            template_url("b", "eu-west-1", "templates/s/x.json"),
            "https://b.s3.eu-west-1.amazonaws.com/templates/s/x.json"
        );
        assert!(package_file_name(PackageFormat::Deb).ends_with("-1_amd64.deb"));
        assert!(package_file_name(PackageFormat::Tarball).ends_with("-x86_64.tar.gz"));
        // The longest region keeps the name within S3's 63 characters.
        assert!(bucket_name("123456789012", "ap-southeast-2").len() <= 63);
    }
}
