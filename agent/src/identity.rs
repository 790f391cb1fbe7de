//! Who this node is: the facts its `register` message carries.
//!
//! From the instance metadata service (IMDSv2, session tokens; the stack
//! requires them): instance id, private IP, hostname, instance type and
//! Availability Zone
//! (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-categories.html>),
//! and the user data that carries the node config. From the filesystem under
//! `--root`: the kernel's boot id (a reboot is a new boot, so the master can
//! tell a restarted agent from a rebooted node) and the SSH host public key
//! (for every node's known hosts). The GPU count comes from [`crate::gpu`].
//!
//! The IMDS endpoint is configuration: `AWS_EC2_METADATA_SERVICE_ENDPOINT`
//! when set (the SDK's IMDS client reads it), else `http://169.254.169.254`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_config::imds::client::error::ImdsError;

/// The environment variable that overrides the IMDS endpoint (read by the SDK's IMDS client).
pub const ENDPOINT_VAR: &str = "AWS_EC2_METADATA_SERVICE_ENDPOINT";
/// The IMDS endpoint on EC2 (IPv4).
pub const DEFAULT_ENDPOINT: &str = "http://169.254.169.254";

/// Where the kernel publishes the boot id.
const BOOT_ID: &str = "proc/sys/kernel/random/boot_id";
/// The kernel's statistics, with its boot time (`btime`).
const PROC_STAT: &str = "proc/stat";
/// The host public keys, in order of preference.
const HOST_KEYS: &[&str] =
    &["etc/ssh/ssh_host_ed25519_key.pub", "etc/ssh/ssh_host_ecdsa_key.pub", "etc/ssh/ssh_host_rsa_key.pub"];
/// Key types a host key line may start with.
const HOST_KEY_TYPES: &[&str] =
    &["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"];

/// This node, as it registers with the master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The EC2 instance id (`i-...`).
    pub instance_id: String,
    /// The primary private IPv4 address.
    pub private_ip: String,
    /// The private DNS hostname (`ip-10-0-1-5.ec2.internal`).
    pub hostname: String,
    /// The instance type (`p4d.24xlarge`).
    pub instance_type: String,
    /// The Availability Zone (`us-east-1a`).
    pub availability_zone: String,
    /// The kernel's boot id: changes on every boot.
    pub boot_id: String,
    /// The SSH host public key, `<type> <base64>`, without its comment.
    pub ssh_host_key: String,
    /// CUDA devices the driver reports.
    pub gpus: u32,
}

/// Finding out who this node is failed.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// No answer from IMDS at all.
    #[error(
        "IMDS at {endpoint} did not answer ({path}): {detail}. Is this an EC2 instance with the metadata service \
         enabled (HttpTokens required is fine)? Outside EC2, set {ENDPOINT_VAR} to a metadata server."
    )]
    Unreachable {
        /// The configured endpoint.
        endpoint: String,
        /// The path asked for.
        path: String,
        /// The underlying error.
        detail: String,
    },
    /// IMDS answered but gave no usable session token.
    #[error(
        "IMDS at {endpoint} gave no usable IMDSv2 session token ({path}): {detail}. Check that the metadata \
         service is enabled and, in a container, that the instance's HttpPutResponseHopLimit is at least 2."
    )]
    Token {
        /// The configured endpoint.
        endpoint: String,
        /// The path asked for.
        path: String,
        /// The underlying error.
        detail: String,
    },
    /// IMDS answered with an error status.
    #[error("IMDS at {endpoint} answered HTTP {status} for {path}{hint}")]
    Status {
        /// The configured endpoint.
        endpoint: String,
        /// The path asked for.
        path: String,
        /// The HTTP status.
        status: u16,
        /// What to check, with a leading separator, or empty.
        hint: String,
    },
    /// IMDS answered with nothing where a value is required.
    #[error("IMDS at {endpoint} answered an empty value for {path}")]
    Empty {
        /// The configured endpoint.
        endpoint: String,
        /// The path asked for.
        path: String,
    },
    /// Any other IMDS client failure.
    #[error("reading {path} from IMDS at {endpoint} failed: {detail}")]
    Imds {
        /// The configured endpoint.
        endpoint: String,
        /// The path asked for.
        path: String,
        /// The underlying error.
        detail: String,
    },
    /// The boot id could not be read.
    #[error("cannot read the boot id from {} or {}: {source}. Is /proc mounted?", under_root.display(), host.display())]
    BootId {
        /// The path under `--root`.
        under_root: PathBuf,
        /// The host's own path.
        host: PathBuf,
        /// Why (from the host path).
        source: std::io::Error,
    },
    /// No readable, well-formed SSH host public key.
    #[error(
        "no usable SSH host public key ({tried}): {detail}. Is openssh-server installed and has it generated \
         its host keys (ssh-keygen -A)?"
    )]
    HostKey {
        /// The files tried, comma-separated.
        tried: String,
        /// What was wrong.
        detail: String,
    },
}

/// The IMDS endpoint this process uses: [`ENDPOINT_VAR`] when set, else [`DEFAULT_ENDPOINT`].
pub fn configured_endpoint() -> String {
    std::env::var(ENDPOINT_VAR).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
}

/// An IMDSv2 client for the configured endpoint, failing within seconds when
/// there is no metadata service.
///
/// The SDK's builder reads [`ENDPOINT_VAR`] itself (and the
/// `ec2_metadata_service_endpoint` profile key), so nothing is set here.
pub fn imds_client() -> aws_config::imds::Client {
    tuned(aws_config::imds::Client::builder()).build()
}

/// An IMDSv2 client for an explicit endpoint, for unit tests that run in
/// parallel and so cannot set the environment. Product code configures the
/// endpoint through [`ENDPOINT_VAR`] only, so that error messages, which name
/// [`configured_endpoint`], name the endpoint actually used.
#[cfg(test)]
pub(crate) fn imds_client_at(endpoint: &str) -> Result<aws_config::imds::Client, IdentityError> {
    let builder = aws_config::imds::Client::builder().endpoint(endpoint).map_err(|e| IdentityError::Imds {
        endpoint: endpoint.to_owned(),
        path: String::new(),
        detail: format!("not a usable endpoint URL: {e}"),
    })?;
    Ok(tuned(builder).build())
}

/// The agent's timeouts and retries. IMDS is link-local: it answers in
/// milliseconds or not at all, so connection attempts are short; error
/// statuses (5xx, 401 for an expired token) are retried by the client.
fn tuned(builder: aws_config::imds::client::Builder) -> aws_config::imds::client::Builder {
    builder
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(Duration::from_secs(4))
        .operation_timeout(Duration::from_secs(15))
        .max_attempts(4)
}

/// Who this node is: metadata from `imds`, boot id and host key under `root`, and `gpus`.
pub async fn discover(imds: &aws_config::imds::Client, root: &Path, gpus: u32) -> Result<Identity, IdentityError> {
    let instance_id = get_value(imds, "/latest/meta-data/instance-id").await?;
    let private_ip = get_value(imds, "/latest/meta-data/local-ipv4").await?;
    let hostname = get_value(imds, "/latest/meta-data/local-hostname").await?;
    let instance_type = get_value(imds, "/latest/meta-data/instance-type").await?;
    let availability_zone = get_value(imds, "/latest/meta-data/placement/availability-zone").await?;
    let identity = Identity {
        instance_id,
        private_ip,
        hostname,
        instance_type,
        availability_zone,
        boot_id: boot_id(root)?,
        ssh_host_key: ssh_host_key(root)?,
        gpus,
    };
    tracing::info!(?identity, "identity discovered");
    Ok(identity)
}

/// Where IMDS serves the instance identity document.
const IDENTITY_DOCUMENT: &str = "/latest/dynamic/instance-identity/document";

/// When EC2 launched this instance, or last started it: `pendingTime` of
/// its instance identity document
/// (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-identity-documents.html>),
/// in unix milliseconds (whole seconds). `None`, with a warning, when it
/// cannot be read: the formation timeline then has no `launched` for this
/// node, and nothing else changes.
pub async fn launched_ms(imds: &aws_config::imds::Client) -> Option<u64> {
    match get(imds, IDENTITY_DOCUMENT).await {
        Ok(document) => {
            let launched = pending_time_ms(&document);
            if launched.is_none() {
                tracing::warn!(
                    "the instance identity document has no usable pendingTime (the formation timeline will not have this node's launch)"
                );
            }
            launched
        }
        Err(e) => {
            tracing::warn!(
                "cannot read the instance identity document (the formation timeline will not have this node's launch): {e}"
            );
            None
        }
    }
}

/// `pendingTime` of an instance identity document, in unix milliseconds.
fn pending_time_ms(document: &str) -> Option<u64> {
    let document: serde_json::Value = serde_json::from_str(document).ok()?;
    let text = document.get("pendingTime")?.as_str()?;
    node_contract::interruption::parse_utc(text)?.checked_mul(1000)
}

/// The instance's user data (the template writes the node config there).
pub async fn user_data(imds: &aws_config::imds::Client) -> Result<String, IdentityError> {
    get(imds, "/latest/user-data").await
}

/// One value that must not be empty, trimmed.
async fn get_value(imds: &aws_config::imds::Client, path: &str) -> Result<String, IdentityError> {
    let value = get(imds, path).await?.trim().to_owned();
    if value.is_empty() {
        return Err(IdentityError::Empty { endpoint: configured_endpoint(), path: path.to_owned() });
    }
    Ok(value)
}

#[tracing::instrument(skip(imds))]
pub(crate) async fn get(imds: &aws_config::imds::Client, path: &str) -> Result<String, IdentityError> {
    imds.get(path).await.map(String::from).map_err(|e| describe(path, &e))
}

fn describe(path: &str, err: &ImdsError) -> IdentityError {
    let endpoint = configured_endpoint();
    let path = path.to_owned();
    let detail = crate::aws::error::chain(err);
    match err {
        ImdsError::FailedToLoadToken(token) if token.is_dispatch_failure() => {
            IdentityError::Unreachable { endpoint, path, detail }
        }
        ImdsError::FailedToLoadToken(_) => IdentityError::Token { endpoint, path, detail },
        ImdsError::ErrorResponse(response) => {
            let status = response.response().status().as_u16();
            let hint = match status {
                404 if path == "/latest/user-data" => {
                    ": the instance has no user data; the launch template should carry the node config".to_owned()
                }
                404 => ": this metadata path does not exist on this instance".to_owned(),
                403 => ": the metadata service is disabled for this instance (HttpEndpoint)".to_owned(),
                _ => String::new(),
            };
            IdentityError::Status { endpoint, path, status, hint }
        }
        ImdsError::IoError(_) => IdentityError::Unreachable { endpoint, path, detail },
        _ => IdentityError::Imds { endpoint, path, detail },
    }
}

/// The kernel's boot time (`btime` in `proc/stat`, unix seconds) under
/// `root`, or the host's own when `root` has none, in unix milliseconds;
/// `None`, with a warning, when neither can be read (the formation
/// timeline then has no `booted` for this node).
pub fn booted_ms(root: &Path) -> Option<u64> {
    let booted = btime_ms(root);
    if booted.is_none() {
        tracing::warn!("no boot time (btime) in proc/stat: the formation timeline has no `booted` for this node");
    }
    booted
}

fn btime_ms(root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(root.join(PROC_STAT))
        .or_else(|_| std::fs::read_to_string(Path::new("/").join(PROC_STAT)))
        .ok()?;
    let seconds: u64 = text.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    seconds.checked_mul(1000)
}

/// The boot id under `root`, or the host's own when `root` has none (a test root, a chroot without /proc).
fn boot_id(root: &Path) -> Result<String, IdentityError> {
    let under_root = root.join(BOOT_ID);
    let host = Path::new("/").join(BOOT_ID);
    let text = match std::fs::read_to_string(&under_root) {
        Ok(text) => text,
        Err(_) => std::fs::read_to_string(&host).map_err(|source| IdentityError::BootId {
            under_root: under_root.clone(),
            host: host.clone(),
            source,
        })?,
    };
    let id = text.trim();
    if id.is_empty() {
        return Err(IdentityError::BootId {
            under_root,
            host,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "the boot id is empty"),
        });
    }
    Ok(id.to_owned())
}

/// The first readable host public key under `root`, as `<type> <base64>`.
fn ssh_host_key(root: &Path) -> Result<String, IdentityError> {
    let paths: Vec<PathBuf> = HOST_KEYS.iter().map(|p| root.join(p)).collect();
    let mut problems = Vec::new();
    for path in &paths {
        match std::fs::read_to_string(path) {
            Ok(text) => match key_without_comment(&text) {
                Some(key) => return Ok(key),
                None => problems.push(format!("{} is not an OpenSSH public key line", path.display())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    let tried = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    let detail = if problems.is_empty() { "none of them exists".to_owned() } else { problems.join("; ") };
    Err(IdentityError::HostKey { tried, detail })
}

/// `<type> <base64>` from an OpenSSH public key line, dropping the comment.
fn key_without_comment(text: &str) -> Option<String> {
    let mut fields = text.split_whitespace();
    let kind = fields.next()?;
    let data = fields.next()?;
    let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=');
    (HOST_KEY_TYPES.contains(&kind) && data.len() >= 16 && data.chars().all(base64)).then(|| format!("{kind} {data}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::test_server::{Reply, Request, TestServer, closed_port};
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    const TOKEN: &str = "AQAEAFTNrA4eEGx0AQgJ1arIq_token==";
    const TTL: &str = "x-aws-ec2-metadata-token-ttl-seconds";
    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMrOh3zoTnvb2P0pR0ZAXZDbLUX8fZz3Kpr2B2D8S8xN";

    /// A metadata server for one instance that enforces IMDSv2 as EC2 does.
    fn imds_server(user_data: Option<&'static str>) -> TestServer {
        TestServer::start(move |r: &Request| {
            if r.method == "PUT" {
                return match (r.path.as_str(), r.header(TTL)) {
                    ("/latest/api/token", Some(ttl)) => Reply::new(200, TOKEN).header(TTL, ttl),
                    _ => Reply::new(400, "missing token TTL"),
                };
            }
            if r.method != "GET" || r.header("x-aws-ec2-metadata-token") != Some(TOKEN) {
                return Reply::new(401, "");
            }
            match r.path.as_str() {
                "/latest/meta-data/instance-id" => Reply::new(200, "i-0abc123def4567890"),
                "/latest/meta-data/local-ipv4" => Reply::new(200, "10.0.1.5"),
                "/latest/meta-data/local-hostname" => Reply::new(200, "ip-10-0-1-5.ec2.internal"),
                "/latest/meta-data/instance-type" => Reply::new(200, "g5.12xlarge"),
                "/latest/meta-data/placement/availability-zone" => Reply::new(200, "us-east-1b"),
                IDENTITY_DOCUMENT => Reply::new(
                    200,
                    r#"{"instanceId":"i-0abc123def4567890","pendingTime":"2026-11-26T01:02:03Z","region":"us-east-1"}"#,
                ),
                "/latest/user-data" => match user_data {
                    Some(data) => Reply::new(200, data),
                    None => Reply::new(404, "Not Found"),
                },
                _ => Reply::new(404, "Not Found"),
            }
        })
    }

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        root
    }

    #[tokio::test]
    async fn discovers_from_a_token_enforcing_imds() {
        let server = imds_server(None);
        let root = root_with(&[
            (BOOT_ID, "6f1b2c3d-0000-4000-8000-000000000001\n"),
            ("etc/ssh/ssh_host_ed25519_key.pub", &format!("{ED25519} root@ip-10-0-1-5\n")),
            ("etc/ssh/ssh_host_rsa_key.pub", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ root@x\n"),
        ]);
        let imds = imds_client_at(&server.url()).unwrap();
        let identity = discover(&imds, root.path(), 4).await.unwrap();
        assert_eq!(
            identity,
            Identity {
                instance_id: "i-0abc123def4567890".into(),
                private_ip: "10.0.1.5".into(),
                hostname: "ip-10-0-1-5.ec2.internal".into(),
                instance_type: "g5.12xlarge".into(),
                availability_zone: "us-east-1b".into(),
                boot_id: "6f1b2c3d-0000-4000-8000-000000000001".into(),
                ssh_host_key: ED25519.into(),
                gpus: 4,
            }
        );
        let requests = server.requests();
        assert_eq!(requests[0].method, "PUT", "the token comes first: {requests:?}");
        assert!(requests.iter().filter(|r| r.method == "GET").all(|r| r.header("x-aws-ec2-metadata-token").is_some()));
        // One token serves every GET (the client caches it for its TTL).
        assert_eq!(requests.iter().filter(|r| r.method == "PUT").count(), 1);
    }

    #[tokio::test]
    async fn the_launch_time_is_the_identity_documents_pending_time() {
        let server = imds_server(None);
        let imds = imds_client_at(&server.url()).unwrap();
        assert_eq!(launched_ms(&imds).await, Some(1_795_654_923_000));
        // No document (an old metadata stand-in), or one without a usable time: no launch time, no error.
        let empty = TestServer::start(|r: &Request| match r.method.as_str() {
            "PUT" => Reply::new(200, TOKEN).header(TTL, "21600"),
            _ => Reply::new(404, "Not Found"),
        });
        assert_eq!(launched_ms(&imds_client_at(&empty.url()).unwrap()).await, None);
        for document in ["{}", "not json", r#"{"pendingTime":"yesterday"}"#, r#"{"pendingTime":17}"#] {
            assert_eq!(pending_time_ms(document), None, "{document}");
        }
        assert_eq!(pending_time_ms(r#"{"pendingTime":"1970-01-01T00:00:01Z"}"#), Some(1_000));
    }

    #[tokio::test]
    async fn user_data_is_returned_verbatim() {
        let data = "{\"version\":1,\"role\":\"worker\"}\n";
        let server = imds_server(Some(data));
        let imds = imds_client_at(&server.url()).unwrap();
        assert_eq!(user_data(&imds).await.unwrap(), data);
    }

    #[tokio::test]
    async fn missing_user_data_says_so() {
        let server = imds_server(None);
        let imds = imds_client_at(&server.url()).unwrap();
        let err = user_data(&imds).await.unwrap_err();
        assert!(matches!(err, IdentityError::Status { status: 404, .. }), "{err:?}");
        assert!(err.to_string().contains("no user data"), "{err}");
    }

    #[tokio::test]
    async fn falls_back_to_the_host_boot_id_and_other_key_types() {
        let server = imds_server(None);
        let ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmK";
        let root = root_with(&[("etc/ssh/ssh_host_ecdsa_key.pub", &format!("{ecdsa}\n"))]);
        let imds = imds_client_at(&server.url()).unwrap();
        let identity = discover(&imds, root.path(), 0).await.unwrap();
        let host_boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert_eq!(identity.boot_id, host_boot_id.trim());
        assert_eq!(identity.ssh_host_key, ecdsa);
    }

    #[tokio::test]
    async fn no_host_key_names_the_files() {
        let server = imds_server(None);
        let root = root_with(&[("etc/ssh/ssh_host_ed25519_key.pub", "garbage\n")]);
        let imds = imds_client_at(&server.url()).unwrap();
        let err = discover(&imds, root.path(), 0).await.unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, IdentityError::HostKey { .. }), "{err:?}");
        assert!(message.contains("ssh_host_ed25519_key.pub is not an OpenSSH public key line"), "{message}");
        assert!(message.contains("ssh_host_rsa_key.pub"), "{message}");
        assert!(message.contains("ssh-keygen -A"), "{message}");
    }

    #[tokio::test]
    async fn unreachable_imds_fails_fast_and_clearly() {
        let imds = imds_client_at(&format!("http://{}", closed_port())).unwrap();
        let started = Instant::now();
        let err = discover(&imds, Path::new("/nonexistent"), 0).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        assert!(matches!(err, IdentityError::Unreachable { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("did not answer (/latest/meta-data/instance-id)"), "{message}");
        assert!(message.contains("metadata service enabled (HttpTokens required is fine)"), "{message}");
    }

    #[tokio::test]
    async fn a_silent_imds_times_out_within_seconds() {
        // Accepts connections and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let _held: Vec<_> = listener.incoming().collect();
        });
        let imds = imds_client_at(&format!("http://{addr}")).unwrap();
        let started = Instant::now();
        let err = user_data(&imds).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        assert!(matches!(err, IdentityError::Unreachable { .. } | IdentityError::Token { .. }), "{err:?}");
    }

    /// As moto's metadata endpoint does: a token without its TTL header, which the SDK rejects.
    #[tokio::test]
    async fn a_token_without_ttl_is_a_token_error() {
        let server = TestServer::start(|r: &Request| match r.method.as_str() {
            "PUT" => Reply::new(200, TOKEN),
            _ => Reply::new(200, "i-0abc"),
        });
        let imds = imds_client_at(&server.url()).unwrap();
        let err = user_data(&imds).await.unwrap_err();
        assert!(matches!(err, IdentityError::Token { .. }), "{err:?}");
        assert!(err.to_string().contains("HttpPutResponseHopLimit"), "{err}");
    }

    #[test]
    fn the_boot_time_is_btime_under_the_root_or_the_hosts() {
        let root = root_with(&[("proc/stat", "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n")]);
        assert_eq!(booted_ms(root.path()), Some(1_700_000_000_000));
        // No proc/stat under the root: the host's, which has a btime in the past.
        let bare = tempfile::tempdir().unwrap();
        let host = booted_ms(bare.path()).expect("the host's /proc/stat has btime");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        assert!(host <= now, "{host} > {now}");
        // A proc/stat without a readable btime: none rather than a guess.
        let garbled = root_with(&[("proc/stat", "btime soon\n")]);
        assert_eq!(booted_ms(garbled.path()), None);
    }

    #[test]
    fn key_lines() {
        assert_eq!(key_without_comment(&format!("{ED25519} root@host\n")).as_deref(), Some(ED25519));
        assert_eq!(key_without_comment(ED25519).as_deref(), Some(ED25519));
        assert_eq!(key_without_comment("ssh-ed25519"), None);
        assert_eq!(key_without_comment("ssh-dss AAAAB3NzaC1kc3MAAACBAP root@x"), None);
        assert_eq!(key_without_comment("ssh-ed25519 not*base64*at*all*!! x"), None);
        assert_eq!(key_without_comment(""), None);
    }
}
