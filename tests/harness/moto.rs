//! The local AWS: moto server started from `tests/moto/launcher.py` (which
//! adds what the project needs and moto lacks; see tests/moto/README.md),
//! and AWS SDK configs pointed at it.
//!
//! The server listens on one address; for multi-node tests that is the
//! bridge address of a [`crate::Network`], which the nodes' namespaces reach.

use crate::{Error, Result, repo_root, venv};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The region every test uses.
pub const REGION: &str = "us-east-1";
/// moto's default account.
pub const ACCOUNT: &str = "123456789012";
/// The access key id of the harness's administrator (user `e2e-admin`,
/// allowed everything), which the launcher makes at start and again after
/// every reset (launcher patch (t)): the principal that sets up and
/// inspects a test's resources. moto enforces IAM: every other principal
/// gets only what its policies grant.
pub const ACCESS_KEY: &str = "AKIAE2EADMINISTRATOR";
/// The administrator's secret access key.
pub const SECRET_KEY: &str = "e2e-administrator-secret-access-key";

/// Temporary credentials of a role, as the service that assumes it gets
/// them (launcher patch (t5)), in the shape the instance metadata serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleCredentials {
    /// The role's name.
    pub role_name: String,
    /// `ASIA...`
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token.
    pub token: String,
    /// When they expire, RFC 3339 UTC (`2026-01-01T00:00:00Z`).
    pub expiration: String,
    /// The metadata's JSON document for them (`Code`, `LastUpdated`,
    /// `Type`, `AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`).
    pub document: String,
}

/// Which role a service assumes, for [`LocalAws::service_credentials`].
#[derive(Clone, Debug)]
pub enum AssumedBy<'a> {
    /// EC2, for an instance with this instance profile.
    Ec2 {
        /// The instance profile, by name or ARN.
        instance_profile: &'a str,
        /// The instance the credentials are for.
        instance_id: &'a str,
    },
    /// Another service assuming a role.
    Service {
        /// The service principal (`autoscaling.amazonaws.com`).
        service: &'a str,
        /// The role's ARN.
        role_arn: &'a str,
    },
}

/// How long moto may take to import and answer (about a second here).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running moto server; killed on drop.
pub struct LocalAws {
    child: Child,
    ip: IpAddr,
    port: u16,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl LocalAws {
    /// Starts the launcher on `bind_ip` and a free port, and waits until
    /// `GET /moto-api/` answers.
    pub fn start(bind_ip: IpAddr) -> Result<LocalAws> {
        LocalAws::start_with(bind_ip, &[])
    }

    /// [`LocalAws::start`] where a create waits on its wait conditions: the
    /// stack stays CREATE_IN_PROGRESS until they are signalled, and a
    /// FAILURE signal fails it (launcher patch (h)), as in AWS.
    pub fn start_holding(bind_ip: IpAddr) -> Result<LocalAws> {
        LocalAws::start_with(bind_ip, &["--hold-wait-conditions"])
    }

    fn start_with(bind_ip: IpAddr, options: &[&str]) -> Result<LocalAws> {
        let python = venv::moto_python()?;
        let launcher = repo_root().join("tests/moto/launcher.py");
        let log_dir = tempfile::Builder::new().prefix("e2e-moto-").tempdir().map_err(Error::io("temp dir", "/tmp"))?;
        let log = log_dir.path().join("moto.log");
        let log_file = std::fs::File::create(&log).map_err(Error::io("creating the moto log", &log))?;
        let mut child = Command::new(&python)
            .arg(&launcher)
            .args(["--host", &bind_ip.to_string(), "--port", "0"])
            .args(options)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(Error::io("starting the moto launcher", &launcher))?;
        // The launcher prints `READY <host> <port>` once it listens.
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut aws = LocalAws { child, ip: bind_ip, port: 0, log, _log_dir: log_dir };
        let line = rx.recv_timeout(START_TIMEOUT).map_err(|_| Error::Timeout {
            what: format!("the moto launcher to print READY (log: {})", aws.log_text()),
            seconds: START_TIMEOUT.as_secs(),
        })?;
        aws.port = line.split_whitespace().nth(2).and_then(|p| p.parse().ok()).ok_or_else(|| Error::Unexpected {
            what: "the moto launcher".into(),
            detail: format!("first line {line:?}; log: {}", aws.log_text()),
        })?;
        let api = format!("{}/moto-api/", aws.endpoint());
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        while ureq::get(&api).call().is_err() {
            if std::time::Instant::now() > deadline {
                return Err(Error::Timeout { what: format!("{api} to answer"), seconds: START_TIMEOUT.as_secs() });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(aws)
    }

    /// `http://<ip>:<port>`, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.ip, self.port)
    }

    /// The address moto listens on.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The port moto listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The launcher's process id (for its memory use, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The launcher's log (moto's request log and tracebacks).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Makes the next creation of `logical_id` fail with `reason`
    /// (launcher patch (i)): the resources not yet created are cancelled and
    /// the stack rolls back (or stays CREATE_FAILED with OnFailure=DO_NOTHING).
    pub fn fail_next_create(&self, logical_id: &str, reason: &str) -> Result<()> {
        let body = serde_json::json!({"LogicalResourceId": logical_id, "Reason": reason}).to_string();
        ureq::post(format!("{}/_fail_resource", self.endpoint()))
            .send(body)
            .map_err(|e| Error::aws("POST /_fail_resource", &e))?;
        Ok(())
    }

    /// Takes `instance_type` off the shelves (launcher patch (z)) in `zone`
    /// of `region` (`None`: every zone, every region): RunInstances of it
    /// there fails with `InsufficientInstanceCapacity`, so does a stack's
    /// `AWS::EC2::Instance`, and an Auto Scaling launch goes on to its next
    /// type or records a failed scaling activity. A reset forgets it.
    pub fn insufficient_capacity(&self, instance_type: &str, zone: Option<&str>, region: Option<&str>) -> Result<()> {
        let body = serde_json::json!({"InstanceType": instance_type, "AvailabilityZone": zone, "Region": region});
        ureq::post(format!("{}/_insufficient_capacity", self.endpoint()))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| Error::aws("POST /_insufficient_capacity", &e))?;
        Ok(())
    }

    /// Every signed AWS API call since the start or the last reset (`GET /_calls`).
    pub fn calls(&self) -> Result<Vec<serde_json::Value>> {
        let url = format!("{}/_calls", self.endpoint());
        let body = ureq::get(&url)
            .call()
            .map_err(|e| Error::aws(format!("GET {url}"), &e))?
            .body_mut()
            .read_to_string()
            .map_err(|e| Error::aws(format!("GET {url}"), &e))?;
        serde_json::from_str(&body).map_err(|e| Error::Unexpected { what: url, detail: e.to_string() })
    }

    /// Wipes every resource moto holds (`POST /moto-api/reset`) and the
    /// launcher's recorded signals, lifecycle completions and activities.
    pub fn reset(&self) -> Result<()> {
        ureq::post(format!("{}/moto-api/reset", self.endpoint()))
            .send_empty()
            .map_err(|e| Error::aws("POST /moto-api/reset", &e))?;
        Ok(())
    }

    /// The credentials `who` gets for `seconds` (60 to 43200), as AWS gives
    /// them to the service (launcher patch (t5)): refused unless the
    /// role's trust policy names that service.
    pub fn service_credentials(&self, who: &AssumedBy<'_>, seconds: u32) -> Result<RoleCredentials> {
        service_credentials_at(&self.endpoint(), who, seconds)
    }

    /// The access key id and secret of IAM user `name` (made on first use,
    /// with an administrator policy; launcher patch (t)): a user deploying
    /// stacks, whose calls `GET /_calls` lists with `principal` `user/<name>`.
    pub fn user(&self, name: &str) -> Result<(String, String)> {
        let url = format!("{}/_users/{name}", self.endpoint());
        let answer = self.post_json(&url, &serde_json::Value::Null)?;
        match (answer["AccessKeyId"].as_str(), answer["SecretAccessKey"].as_str()) {
            (Some(key), Some(secret)) => Ok((key.to_owned(), secret.to_owned())),
            _ => Err(Error::Unexpected { what: format!("POST {url}"), detail: answer.to_string() }),
        }
    }

    /// Makes IAM user `name` with exactly `policies` (IAM policy documents,
    /// each a customer managed policy attached to the user, the way
    /// `synth policy --help` tells an administrator to) and one access key,
    /// through IAM's own API as the harness's administrator; returns the key
    /// id and secret. Its calls are listed with `principal` `user/<name>`.
    pub fn user_with_policies(&self, name: &str, policies: &[serde_json::Value]) -> Result<(String, String)> {
        let version = ("Version", "2010-05-08");
        self.query("iam", &[("Action", "CreateUser"), version, ("UserName", name)])?;
        for (i, policy) in policies.iter().enumerate() {
            let document = policy.to_string();
            let policy_name = format!("{name}-{i}");
            let created = self.query(
                "iam",
                &[("Action", "CreatePolicy"), version, ("PolicyName", &policy_name), ("PolicyDocument", &document)],
            )?;
            let arn = crate::stack::xml_text(&created, "Arn")
                .ok_or_else(|| Error::Unexpected { what: "IAM CreatePolicy".into(), detail: created.clone() })?;
            self.query("iam", &[("Action", "AttachUserPolicy"), version, ("UserName", name), ("PolicyArn", &arn)])?;
        }
        let key = self.query("iam", &[("Action", "CreateAccessKey"), version, ("UserName", name)])?;
        match (crate::stack::xml_text(&key, "AccessKeyId"), crate::stack::xml_text(&key, "SecretAccessKey")) {
            (Some(id), Some(secret)) => Ok((id, secret)),
            _ => Err(Error::Unexpected { what: "IAM CreateAccessKey".into(), detail: key }),
        }
    }

    fn post_json(&self, url: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
        post_json(url, body)
    }

    /// Environment for a process that should use this moto through the
    /// SDK's standard variables (no test-only code in the process).
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_DEFAULT_REGION", REGION.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// An SDK config for the test process itself: endpoint override, region
    /// us-east-1, testing credentials, nothing read from the environment.
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        self.sdk_config_with(aws_sdk_sqs::config::Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "e2e"))
    }

    /// [`LocalAws::sdk_config`] signing with a role's temporary credentials
    /// (a node's, the lifecycle hook role's): calls get what the role grants.
    pub fn sdk_config_as(&self, role: &RoleCredentials) -> aws_config::SdkConfig {
        self.sdk_config_with(aws_sdk_sqs::config::Credentials::new(
            &role.access_key_id,
            &role.secret_access_key,
            Some(role.token.clone()),
            None,
            "e2e-role",
        ))
    }

    fn sdk_config_with(&self, credentials: aws_sdk_sqs::config::Credentials) -> aws_config::SdkConfig {
        aws_config::SdkConfig::builder()
            .endpoint_url(self.endpoint())
            .region(aws_config::Region::new(REGION))
            .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(credentials))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build()
    }

    /// An SQS client for this moto.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk_config())
    }

    /// A CloudWatch Logs client for this moto.
    pub fn logs(&self) -> aws_sdk_cloudwatchlogs::Client {
        aws_sdk_cloudwatchlogs::Client::new(&self.sdk_config())
    }

    /// The newest log group of the stacks named `stack`
    /// (`node_contract::logs::log_group_prefix`), as `synth logs` picks it.
    pub async fn log_group_of(&self, stack: &str) -> Result<String> {
        let prefix = node_contract::logs::log_group_prefix(stack);
        let described = self.logs().describe_log_groups().log_group_name_prefix(&prefix).send().await;
        let described = described.map_err(|e| Error::aws(format!("DescribeLogGroups {prefix}"), &e))?;
        let newest = described.log_groups().iter().max_by_key(|g| (g.creation_time(), g.log_group_name()));
        newest
            .and_then(|g| g.log_group_name())
            .map(str::to_owned)
            .ok_or_else(|| Error::Setup(format!("no log group starts with {prefix}")))
    }

    /// Every stream of the log group `group` and its messages, oldest
    /// first; `None` when the group does not exist.
    pub async fn log_streams(&self, group: &str) -> Result<Option<BTreeMap<String, Vec<String>>>> {
        let logs = self.logs();
        let described = logs.describe_log_streams().log_group_name(group).send().await;
        let described = match described {
            Ok(d) => d,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => return Ok(None),
            Err(e) => return Err(Error::aws(format!("DescribeLogStreams {group}"), &e)),
        };
        let mut streams = BTreeMap::new();
        for stream in described.log_streams().iter().filter_map(|s| s.log_stream_name()) {
            let mut messages = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let out = logs
                    .get_log_events()
                    .log_group_name(group)
                    .log_stream_name(stream)
                    .start_from_head(true)
                    .set_next_token(token.clone())
                    .send()
                    .await
                    .map_err(|e| Error::aws(format!("GetLogEvents {group} {stream}"), &e))?;
                let page: Vec<String> = out.events().iter().filter_map(|e| e.message().map(str::to_owned)).collect();
                let next = out.next_forward_token().map(str::to_owned);
                if page.is_empty() || next == token {
                    break;
                }
                messages.extend(page);
                token = next;
            }
            streams.insert(stream.to_owned(), messages);
        }
        Ok(Some(streams))
    }

    /// An Auto Scaling client for this moto.
    pub fn autoscaling(&self) -> aws_sdk_autoscaling::Client {
        aws_sdk_autoscaling::Client::new(&self.sdk_config())
    }

    /// The Auto Scaling group `group`, as `DescribeAutoScalingGroups` reports it.
    pub async fn auto_scaling_group(&self, group: &str) -> Result<aws_sdk_autoscaling::types::AutoScalingGroup> {
        let out = self
            .autoscaling()
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(group)
            .send()
            .await
            .map_err(|e| Error::aws(format!("DescribeAutoScalingGroups {group}"), &e))?;
        out.auto_scaling_groups()
            .first()
            .cloned()
            .ok_or_else(|| Error::Unexpected { what: format!("group {group}"), detail: "not found".into() })
    }

    /// A CloudFormation client for this moto.
    pub fn cloudformation(&self) -> aws_sdk_cloudformation::Client {
        aws_sdk_cloudformation::Client::new(&self.sdk_config())
    }

    /// POSTs `body` with `headers` to moto, signed (SigV4) as the
    /// administrator for `service`, and returns the status and body.
    fn signed_post_in(
        &self,
        region: &str,
        service: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, String)> {
        self.signed_in(region, "POST", service, "/", headers, body)
    }

    /// `GET path` (with its query), signed as the administrator for
    /// `service`: a call the SDK cannot make (moto's `GetBucketVersioning`
    /// answer, which the SDK rejects). Returns the body; an error unless 2xx.
    pub fn signed_get(&self, service: &str, path: &str) -> Result<String> {
        let (status, body) = self.signed("GET", service, path, &[], b"")?;
        if !(200..300).contains(&status) {
            return Err(Error::Aws { call: format!("GET {path}"), detail: format!("HTTP {status}: {body}") });
        }
        Ok(body)
    }

    fn signed(
        &self,
        method: &str,
        service: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, String)> {
        self.signed_in(REGION, method, service, path, headers, body)
    }

    fn signed_in(
        &self,
        region: &str,
        method: &str,
        service: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, String)> {
        let url = format!("{}{path}", self.endpoint());
        let credentials = aws_sdk_sqs::config::Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "e2e");
        let identity = credentials.into();
        let mut settings = aws_sigv4::http_request::SigningSettings::default();
        if service == "s3" {
            // S3 signs the payload's hash in a header and paths as they are.
            settings.payload_checksum_kind = aws_sigv4::http_request::PayloadChecksumKind::XAmzSha256;
            settings.percent_encoding_mode = aws_sigv4::http_request::PercentEncodingMode::Single;
            settings.uri_path_normalization_mode = aws_sigv4::http_request::UriPathNormalizationMode::Disabled;
        }
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(service)
            .time(std::time::SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| Error::Setup(format!("signing a {service} call: {e}")))?
            .into();
        let signable = aws_sigv4::http_request::SignableRequest::new(
            method,
            &url,
            headers.iter().copied(),
            aws_sigv4::http_request::SignableBody::Bytes(body),
        )
        .map_err(|e| Error::Setup(format!("signing a {service} call: {e}")))?;
        let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)
            .map_err(|e| Error::Setup(format!("signing a {service} call: {e}")))?
            .into_parts();
        let signed: Vec<(&str, &str)> = headers.iter().copied().chain(instructions.headers()).collect();
        let mut response = if method == "GET" {
            let mut request = ureq::get(&url);
            for (name, value) in &signed {
                request = request.header(*name, *value);
            }
            request.config().http_status_as_error(false).build().call()
        } else {
            let mut request = ureq::post(&url);
            for (name, value) in &signed {
                request = request.header(*name, *value);
            }
            request.config().http_status_as_error(false).build().send(body)
        }
        .map_err(|e| Error::aws(format!("{service} {method} {path}"), &e))?;
        let status = response.status().as_u16();
        let text =
            response.body_mut().read_to_string().map_err(|e| Error::aws(format!("{service} {method} {path}"), &e))?;
        Ok((status, text))
    }

    /// Calls a query-protocol API (EC2, SSM's JSON aside) with a form POST
    /// and returns the XML body. The tests stay off aws-sdk-ec2: it costs
    /// minutes and gigabytes per cold build (docs/TESTING.md, "Build output and cost").
    pub fn query(&self, service: &str, params: &[(&str, &str)]) -> Result<String> {
        self.query_in(REGION, service, params)
    }

    /// [`LocalAws::query`] in `region`.
    pub fn query_in(&self, region: &str, service: &str, params: &[(&str, &str)]) -> Result<String> {
        let action = params.iter().find(|(k, _)| *k == "Action").map(|(_, v)| *v).unwrap_or("?");
        let form: String =
            params.iter().map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v))).collect::<Vec<_>>().join("&");
        let headers = [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")];
        let (status, body) = self.signed_post_in(region, service, &headers, form.as_bytes())?;
        if !(200..300).contains(&status) {
            return Err(Error::Aws { call: format!("{service} {action}"), detail: format!("HTTP {status}: {body}") });
        }
        Ok(body)
    }

    /// Calls a JSON-protocol API (`X-Amz-Target`), e.g. SSM's
    /// `AmazonSSM.PutParameter`, and returns the JSON answer (`null` for
    /// an empty one, as CloudWatch Logs' `CreateLogGroup` gives).
    pub fn json_call(&self, service: &str, target: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
        self.json_call_in(REGION, service, target, body)
    }

    /// [`LocalAws::json_call`] in `region`.
    pub fn json_call_in(
        &self,
        region: &str,
        service: &str,
        target: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let headers = [("X-Amz-Target", target), ("Content-Type", "application/x-amz-json-1.1")];
        let (status, text) = self.signed_post_in(region, service, &headers, body.to_string().as_bytes())?;
        if !(200..300).contains(&status) {
            return Err(Error::Aws { call: target.into(), detail: format!("HTTP {status}: {text}") });
        }
        if text.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| Error::Unexpected { what: target.into(), detail: e.to_string() })
    }

    /// The signals the launcher recorded for `stack` (wait condition PUTs
    /// and SignalResource calls), oldest first: objects with `Status`,
    /// `UniqueId`, `LogicalResourceId`, and `Reason`/`Data` when sent.
    pub fn signals(&self, stack: &str) -> Result<Vec<serde_json::Value>> {
        self.recorded(&format!("_signals/{stack}"))
    }

    /// The `CompleteLifecycleAction` calls the launcher recorded, oldest
    /// first: objects with `AutoScalingGroupName`, `LifecycleHookName`,
    /// `LifecycleActionToken`, `InstanceId`, `LifecycleActionResult` and
    /// `ReceivedAt` (unix seconds, a float).
    pub fn lifecycle_completions(&self) -> Result<Vec<serde_json::Value>> {
        self.recorded("_lifecycle_completions")
    }

    /// A JSON list the launcher's recording endpoint `path` serves.
    fn recorded(&self, path: &str) -> Result<Vec<serde_json::Value>> {
        let url = format!("{}/{path}", self.endpoint());
        let text = ureq::get(&url)
            .call()
            .map_err(|e| Error::aws(format!("GET {url}"), &e))?
            .body_mut()
            .read_to_string()
            .map_err(|e| Error::aws(format!("GET {url}"), &e))?;
        serde_json::from_str(&text).map_err(|e| Error::Unexpected { what: url, detail: e.to_string() })
    }

    /// Sets the EC2 quota `code` (a vCPU quota, `L-...`) to `value` in every
    /// region, as Service Quotas' `GetServiceQuota` then answers it
    /// (launcher patch (v); unset, an EC2 vCPU quota is 4,096).
    pub fn set_ec2_quota(&self, code: &str, value: f64) -> Result<()> {
        let body = serde_json::json!({"ServiceCode": "ec2", "QuotaCode": code, "Value": value});
        self.post_json(&format!("{}/_service_quotas", self.endpoint()), &body).map(drop)
    }

    /// Makes a Capacity Reservation or Capacity Block that EC2's
    /// `DescribeCapacityReservations` answers (launcher patch (w)):
    /// `reservation` has `InstanceType`, `AvailabilityZone`,
    /// `TotalInstanceCount` and optionally `CapacityReservationId`,
    /// `AvailableInstanceCount`, `State`, `StartDate`, `EndDate`,
    /// `CapacityBlock`. Returns it as stored.
    pub fn add_capacity_reservation(&self, reservation: &serde_json::Value) -> Result<serde_json::Value> {
        self.post_json(&format!("{}/_capacity_reservations", self.endpoint()), reservation)
    }

    /// Sets `region`'s Spot placement score (1 to 10) that EC2's
    /// `GetSpotPlacementScores` answers (launcher patch (y); unset: 5).
    pub fn set_spot_placement_score(&self, region: &str, score: u32) -> Result<()> {
        let body = serde_json::json!({"Region": region, "Score": score});
        self.post_json(&format!("{}/_spot_placement_scores", self.endpoint()), &body).map(drop)
    }

    /// Adds a failed scaling activity with `status_message` to `group`, as
    /// Auto Scaling records a launch it could not make; the group's
    /// `DescribeScalingActivities` returns it (newest first).
    pub fn add_failed_scaling_activity(&self, group: &str, status_message: &str) -> Result<()> {
        let url = format!("{}/_scaling_activities/{group}", self.endpoint());
        ureq::post(&url)
            .header("Content-Type", "application/json")
            .send(serde_json::json!({ "StatusMessage": status_message, "StatusCode": "Failed" }).to_string())
            .map_err(|e| Error::aws(format!("POST {url}"), &e))?;
        Ok(())
    }
}

impl LocalAws {
    /// The calls the local AWS refused so far (a policy that does not allow
    /// them, unknown or expired credentials), one line each:
    /// `REFUSED <principal> <service>:<Action> <code>: <message>`.
    pub fn refused(&self) -> Vec<String> {
        self.log_text().lines().filter(|l| l.starts_with("REFUSED ")).map(str::to_owned).collect()
    }
}

impl Drop for LocalAws {
    fn drop(&mut self) {
        // Every refusal is shown with the test's output: a refused call an
        // agent retries, or one a test meant, is seen either way.
        for line in self.refused() {
            eprintln!("local AWS: {line}");
        }
        // E2E_PRINT_CALLS=1: which principal made which calls (for
        // docs/ARCHITECTURE.md's IAM table), one line per kind of principal.
        if std::env::var_os("E2E_PRINT_CALLS").is_some() {
            let mut made: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
            for call in self.calls().unwrap_or_default() {
                let principal = call["principal"].as_str().unwrap_or("?");
                // `assumed-role/<stack>-MasterRole-<suffix>/<session>` -> MasterRole.
                let kind = match principal.strip_prefix("assumed-role/") {
                    Some(role) => {
                        role.split('/').next().unwrap_or_default().rsplit('-').nth(1).unwrap_or("?").to_owned()
                    }
                    None => principal.to_owned(),
                };
                let action =
                    format!("{}:{}", call["service"].as_str().unwrap_or("?"), call["action"].as_str().unwrap_or("?"));
                made.entry(kind).or_default().insert(action);
            }
            for (kind, actions) in made {
                eprintln!("local AWS calls by {kind}: {}", actions.into_iter().collect::<Vec<_>>().join(" "));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `application/x-www-form-urlencoded` encoding of one key or value
/// (unreserved characters kept, everything else percent-encoded).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// POSTs JSON to one of the launcher's own routes and returns its JSON answer.
fn post_json(url: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
    let mut response = ureq::post(url)
        .header("Content-Type", "application/json")
        .config()
        .http_status_as_error(false)
        .build()
        .send(body.to_string())
        .map_err(|e| Error::aws(format!("POST {url}"), &e))?;
    let status = response.status();
    let text = response.body_mut().read_to_string().map_err(|e| Error::aws(format!("POST {url}"), &e))?;
    if !status.is_success() {
        return Err(Error::Aws { call: format!("POST {url}"), detail: format!("HTTP {status}: {text}") });
    }
    serde_json::from_str(&text).map_err(|e| Error::Unexpected { what: url.to_owned(), detail: e.to_string() })
}

/// [`LocalAws::service_credentials`] of the local AWS at `endpoint` (the
/// metadata stand-in asks it for a node's role credentials).
pub fn service_credentials_at(endpoint: &str, who: &AssumedBy<'_>, seconds: u32) -> Result<RoleCredentials> {
    let request = match who {
        AssumedBy::Ec2 { instance_profile, instance_id } => serde_json::json!({
            "Service": "ec2.amazonaws.com", "InstanceProfile": instance_profile,
            "SessionName": instance_id, "DurationSeconds": seconds,
        }),
        AssumedBy::Service { service, role_arn } => serde_json::json!({
            "Service": service, "RoleArn": role_arn, "DurationSeconds": seconds,
        }),
    };
    let url = format!("{endpoint}/_service_credentials");
    let mut document = post_json(&url, &request)?;
    let field = |name: &str| {
        document[name].as_str().map(str::to_owned).ok_or_else(|| Error::Unexpected {
            what: format!("POST {url}"),
            detail: format!("no {name} in {document}"),
        })
    };
    let role_name = field("RoleName")?;
    let access_key_id = field("AccessKeyId")?;
    let secret_access_key = field("SecretAccessKey")?;
    let token = field("Token")?;
    let expiration = field("Expiration")?;
    // The metadata serves the document without the role's name (that is the path).
    if let Some(map) = document.as_object_mut() {
        map.remove("RoleName");
    }
    Ok(RoleCredentials {
        role_name,
        access_key_id,
        secret_access_key,
        token,
        expiration,
        document: document.to_string(),
    })
}
