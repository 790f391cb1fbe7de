//! The EC2 calls synth makes, as signed EC2 Query API requests rather than
//! through aws-sdk-ec2, whose cold build costs minutes and gigabytes
//! (docs/TESTING.md, "Build output and cost") for a handful of calls:
//! `synth resume`'s two (`DescribeInstances` for the master's state,
//! `StartInstances` for a master the idle guard stopped) and the capacity
//! check's reads (`DescribeInstanceTypeOfferings`,
//! `DescribeInstanceTypes`, `DescribeCapacityReservations`, and for Spot
//! workers `GetSpotPlacementScores`; see [`super::capacity`]).
//!
//! A request is a form POST (`Action=...&Version=2016-11-15&InstanceId.1=...`)
//! signed with SigV4 (the `aws-sigv4` crate, which the SDK uses too) with the
//! same credentials the SDK clients use, sent with `ureq` (already built for
//! the agent) on a blocking thread. The endpoint is configuration, as for
//! the SDK clients: `AWS_ENDPOINT_URL_EC2`, else the shared endpoint
//! override (`AWS_ENDPOINT_URL` or the profile's `endpoint_url`, what
//! `SdkConfig::endpoint_url` holds), else AWS's regional endpoint
//! (<https://docs.aws.amazon.com/general/latest/gr/ec2-service.html>).
//! Errors come back in EC2's XML (`<Response><Errors><Error><Code>`), and
//! are mapped to [`CloudError`] as the SDK's are.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_sdk_cloudformation::config::{Credentials, ProvideCredentials, SharedCredentialsProvider};

use super::port::{CloudError, CloudResult, Reservation};

/// The EC2 API version the requests speak (the current one).
const VERSION: &str = "2016-11-15";

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a hand-signed call is tried, and the longest wait before
/// the first retry, when the loaded config names no retry settings: the
/// SDK's standard retry mode (3 attempts; exponential backoff from 1 s with
/// jitter; <https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html>).
/// A loaded config carries the settings synth's SDK clients use
/// (`SdkConfig::retry_config`, `AWS_MAX_ATTEMPTS` included), and [`Signed`]
/// takes them from there, so a throttle is met the same way whichever way
/// a call is made.
const ATTEMPTS: u32 = 3;
const FIRST_WAIT: Duration = Duration::from_secs(1);

/// Runs `attempt` until it succeeds, fails in a way retrying cannot mend,
/// or has been tried `attempts` times: a throttle and an unreachable or
/// failing service (5xx) are tried again, after a wait that starts at
/// `first_wait` and doubles each time, with jitter (between half the wait
/// and all of it). Only reads and `StartInstances`, which AWS makes
/// idempotent, go through it.
async fn retrying<T, F, Fut>(attempts: u32, first_wait: Duration, mut attempt: F) -> CloudResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = CloudResult<T>>,
{
    let mut wait = first_wait;
    let mut tried = 1;
    loop {
        match attempt().await {
            Err(e @ (CloudError::Throttled { .. } | CloudError::Unavailable { .. })) if tried < attempts => {
                tracing::debug!(error = %e, tried, "retrying a hand-signed call");
                tokio::time::sleep(jittered(wait)).await;
                wait *= 2;
                tried += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Between half of `wait` and all of it, by the clock's nanoseconds (no
/// random number generator for this: many synth processes throttled at
/// once are what the jitter spreads, and their clocks differ).
fn jittered(wait: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    wait / 2 + wait / 2 * (nanos % 1000) / 1000
}

/// Where a hand-signed request goes and as whom: what [`Ec2`] and
/// `super::service_quotas::ServiceQuotas` share (the endpoint resolved as
/// the SDK clients resolve it, the region, the SDK's credentials), and the
/// one way they sign and send a POST.
#[derive(Clone, Debug)]
pub(super) struct Signed {
    endpoint: String,
    region: String,
    /// The service's SigV4 signing name (`ec2`, `servicequotas`).
    name: &'static str,
    credentials: Option<SharedCredentialsProvider>,
    /// How many times a call is tried ([`retrying`]).
    attempts: u32,
    /// The longest wait before the first retry.
    first_wait: Duration,
}

impl Signed {
    /// For a loaded config and its region: the endpoint is `endpoint_env`
    /// (`AWS_ENDPOINT_URL_EC2`), else the shared override, else
    /// `https://<host>.<region>.amazonaws.com`.
    pub(super) fn new(config: &SdkConfig, region: &str, endpoint_env: &str, host: &str, name: &'static str) -> Signed {
        let endpoint = std::env::var(endpoint_env)
            .ok()
            .filter(|e| !e.is_empty())
            .or_else(|| config.endpoint_url().map(str::to_owned))
            .unwrap_or_else(|| format!("https://{host}.{region}.amazonaws.com"));
        let retry = config.retry_config();
        Signed {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            region: region.to_owned(),
            name,
            credentials: config.credentials_provider(),
            attempts: retry.map_or(ATTEMPTS, |r| r.max_attempts()).max(1),
            first_wait: retry.map_or(FIRST_WAIT, |r| r.initial_backoff()),
        }
    }

    /// [`Signed::post`], the answer judged by `judge` (its status and text:
    /// the value, or the error it means), tried again as [`retrying`] says.
    pub(super) async fn call<T>(
        &self,
        what: &str,
        headers: &[(&str, &str)],
        body: &str,
        judge: impl Fn(u16, String) -> CloudResult<T>,
    ) -> CloudResult<T> {
        retrying(self.attempts, self.first_wait, || async {
            let (status, text) = self.post(what, headers, body.to_owned()).await?;
            judge(status, text)
        })
        .await
    }

    /// Signs `body` with `headers` and POSTs it to the endpoint's `/` on a
    /// blocking thread: the status and the answer's text, whatever the
    /// status; `what` names the call in errors.
    async fn post(&self, what: &str, headers: &[(&str, &str)], body: String) -> CloudResult<(u16, String)> {
        let unavailable = |message: String| CloudError::Unavailable { what: what.to_owned(), message };
        let provider = self.credentials.as_ref().ok_or_else(|| CloudError::NoCredentials(String::new()))?;
        let credentials =
            provider.provide_credentials().await.map_err(|e| CloudError::NoCredentials(cli_output::report(&e)))?;
        let url = format!("{}/", self.endpoint);
        let headers =
            sign(&url, &self.region, self.name, credentials, headers, body.as_bytes()).map_err(unavailable)?;
        let sent = tokio::task::spawn_blocking(move || send(&url, &headers, &body))
            .await
            .map_err(|e| unavailable(format!("the request's thread failed: {e}")))?;
        sent.map_err(unavailable)
    }
}

/// Signs and sends EC2 Query API requests.
#[derive(Clone, Debug)]
pub(crate) struct Ec2 {
    signed: Signed,
}

impl Ec2 {
    /// The client for a loaded config and its region.
    pub(crate) fn new(config: &SdkConfig, region: &str) -> Ec2 {
        Ec2 { signed: Signed::new(config, region, "AWS_ENDPOINT_URL_EC2", "ec2", "ec2") }
    }

    /// The instance's state name (`pending`, `running`, `stopping`,
    /// `stopped`, `shutting-down`, `terminated`), or `None` when EC2 does
    /// not know the instance.
    pub(crate) async fn instance_state(&self, id: &str) -> CloudResult<Option<String>> {
        let what = format!("EC2 DescribeInstances on instance {id}");
        match self.call(&what, "DescribeInstances", &[("InstanceId.1", instance_id(&what, id)?)]).await {
            Ok(body) => {
                Ok(tag_text(&body, "instanceState").and_then(|state| tag_text(state, "name")).map(str::to_owned))
            }
            Err(CloudError::Invalid { message, .. }) if message.starts_with("InvalidInstanceID") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Starts a stopped instance (EBS-backed; its disks and private address
    /// are kept).
    pub(crate) async fn start_instance(&self, id: &str) -> CloudResult<()> {
        let what = format!("EC2 StartInstances on instance {id}");
        self.call(&what, "StartInstances", &[("InstanceId.1", instance_id(&what, id)?)]).await.map(drop)
    }

    /// The Availability Zones of the region that offer `instance_type`
    /// (`DescribeInstanceTypeOfferings`, location type `availability-zone`,
    /// filtered by the type), sorted.
    pub(crate) async fn instance_type_zones(&self, instance_type: &str) -> CloudResult<Vec<String>> {
        let what = format!("EC2 DescribeInstanceTypeOfferings of {instance_type}");
        let name = instance_type_name(&what, instance_type)?;
        let params = [
            ("LocationType", "availability-zone"),
            ("Filter.1.Name", "instance-type"),
            ("Filter.1.Value.1", name),
            ("MaxResults", "1000"),
        ];
        let body = self.call(&what, "DescribeInstanceTypeOfferings", &params).await?;
        let set = tag_text(&body, "instanceTypeOfferingSet").unwrap_or_default();
        let mut zones: Vec<String> = items(set)
            .filter(|item| tag_text(item, "instanceType") == Some(name))
            .filter_map(|item| tag_text(item, "location").map(str::to_owned))
            .collect();
        zones.sort();
        zones.dedup();
        Ok(zones)
    }

    /// The type's default vCPUs (`DescribeInstanceTypes`,
    /// `VCpuInfo.DefaultVCpus`), or `None` when EC2 does not know the type
    /// in this region (`InvalidInstanceType`).
    pub(crate) async fn instance_vcpus(&self, instance_type: &str) -> CloudResult<Option<u32>> {
        let what = format!("EC2 DescribeInstanceTypes of {instance_type}");
        let name = instance_type_name(&what, instance_type)?;
        match self.call(&what, "DescribeInstanceTypes", &[("InstanceType.1", name)]).await {
            Ok(body) => Ok(tag_text(&body, "vCpuInfo")
                .and_then(|info| tag_text(info, "defaultVCpus"))
                .and_then(|n| n.trim().parse().ok())),
            Err(CloudError::Invalid { message, .. }) if message.starts_with("InvalidInstanceType") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The Capacity Reservation (or Capacity Block) `id`
    /// (`DescribeCapacityReservations`), or `None` when EC2 does not know
    /// it in this account and region (`InvalidCapacityReservationId.NotFound`).
    pub(crate) async fn capacity_reservation(&self, id: &str) -> CloudResult<Option<Reservation>> {
        let what = format!("EC2 DescribeCapacityReservations of {id}");
        if !id.starts_with("cr-") || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(CloudError::Invalid { what, message: "not a Capacity Reservation id".into() });
        }
        match self.call(&what, "DescribeCapacityReservations", &[("CapacityReservationId.1", id)]).await {
            Ok(body) => {
                let set = tag_text(&body, "capacityReservationSet").unwrap_or_default();
                Ok(items(set).map(reservation_of).find(|r| r.id == id))
            }
            Err(CloudError::Invalid { message, .. })
                if message.starts_with("InvalidCapacityReservationId.NotFound")
                    || message.starts_with("InvalidCapacityReservationId.Malformed") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The Spot placement score (1 to 10) of `capacity` instances of
    /// `types` in this region (`GetSpotPlacementScores`, the region alone,
    /// not per zone), or `None` when EC2 gives none.
    pub(crate) async fn spot_placement_score(&self, types: &[String], capacity: u32) -> CloudResult<Option<u32>> {
        let what = "EC2 GetSpotPlacementScores".to_owned();
        let mut names = Vec::new();
        for t in types {
            names.push(instance_type_name(&what, t)?.to_owned());
        }
        let capacity = capacity.max(1).to_string();
        let keys: Vec<String> = (1..=names.len()).map(|i| format!("InstanceType.{i}")).collect();
        let mut params: Vec<(&str, &str)> =
            keys.iter().map(String::as_str).zip(names.iter().map(String::as_str)).collect();
        params.extend([
            ("TargetCapacity", capacity.as_str()),
            ("TargetCapacityUnitType", "units"),
            ("SingleAvailabilityZone", "false"),
            ("RegionName.1", self.signed.region.as_str()),
        ]);
        let body = self.call(&what, "GetSpotPlacementScores", &params).await?;
        let set = tag_text(&body, "spotPlacementScoreSet").unwrap_or_default();
        Ok(items(set)
            .filter(|item| tag_text(item, "regionName").is_none_or(|r| r == self.signed.region))
            .find_map(|item| tag_text(item, "score").and_then(|n| n.trim().parse().ok())))
    }

    /// One signed request with the form `params` (values that need no
    /// escaping: checked by the callers); the answer's body on success.
    async fn call(&self, what: &str, action: &str, params: &[(&str, &str)]) -> CloudResult<String> {
        let mut body = format!("Action={action}&Version={VERSION}");
        for (key, value) in params {
            body.push_str(&format!("&{key}={value}"));
        }
        let form = ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8");
        self.signed
            .call(what, &[form], &body, |status, text| {
                if (200..300).contains(&status) {
                    return Ok(text);
                }
                Err(error_of(what, status, &text))
            })
            .await
    }
}

/// An instance id as it goes into the form: `i-` and hex digits, so
/// nothing needs escaping; anything else is refused before it is sent.
fn instance_id<'a>(what: &str, id: &'a str) -> CloudResult<&'a str> {
    if id.starts_with("i-") && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Ok(id)
    } else {
        Err(CloudError::Invalid { what: what.to_owned(), message: "not an EC2 instance id".into() })
    }
}

/// An instance type name as it goes into the form (`p4d.24xlarge`: lower
/// case letters, digits, `.` and `-`), else refused before it is sent.
fn instance_type_name<'a>(what: &str, name: &'a str) -> CloudResult<&'a str> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    if ok {
        Ok(name)
    } else {
        Err(CloudError::Invalid { what: what.to_owned(), message: "not an instance type".into() })
    }
}

/// A Capacity Reservation as EC2 describes it (one `<item>` of
/// `capacityReservationSet`).
fn reservation_of(item: &str) -> Reservation {
    let text = |tag: &str| tag_text(item, tag).map(|t| unescape(t.trim()));
    let count = |tag: &str| text(tag).and_then(|n| n.parse().ok()).unwrap_or(0);
    let time = |tag: &str| text(tag).and_then(|t| node_contract::interruption::parse_utc(&utc_seconds(&t)));
    Reservation {
        id: text("capacityReservationId").unwrap_or_default(),
        instance_type: text("instanceType").unwrap_or_default(),
        zone: text("availabilityZone").unwrap_or_default(),
        state: text("state").unwrap_or_default(),
        total: count("totalInstanceCount"),
        available: count("availableInstanceCount"),
        start_unix: time("startDate"),
        end_unix: time("endDate"),
        capacity_block: text("reservationType").is_some_and(|t| t == "capacity-block"),
    }
}

/// `2030-06-10T11:30:00.000Z` as `2030-06-10T11:30:00Z` (EC2 writes
/// milliseconds; the parser reads whole seconds).
fn utc_seconds(text: &str) -> String {
    match text.split_once('.') {
        Some((seconds, rest)) if rest.ends_with('Z') => format!("{seconds}Z"),
        _ => text.to_owned(),
    }
}

/// The texts of the `<item>`s directly in `set`, in order (nested items
/// are inside their parent's text).
fn items(set: &str) -> impl Iterator<Item = &str> {
    let mut rest = set;
    std::iter::from_fn(move || {
        let start = rest.find("<item>")? + "<item>".len();
        // The matching close: count nested items.
        let mut depth = 1;
        let mut at = start;
        while depth > 0 {
            let open = rest[at..].find("<item>").map(|i| at + i);
            let close = rest[at..].find("</item>").map(|i| at + i)?;
            match open {
                Some(o) if o < close => {
                    depth += 1;
                    at = o + "<item>".len();
                }
                _ => {
                    depth -= 1;
                    at = close + "</item>".len();
                }
            }
        }
        let item = &rest[start..at - "</item>".len()];
        rest = &rest[at..];
        Some(item)
    })
}

/// The SigV4 headers (with `headers`, which are signed too) of a POST of
/// `body` to `url` for the service `name` signs as (`ec2`, `servicequotas`).
fn sign(
    url: &str,
    region: &str,
    name: &str,
    credentials: Credentials,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity = credentials.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(name)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("signing the request: {e}"))?
        .into();
    let signable = SignableRequest::new("POST", url, headers.iter().copied(), SignableBody::Bytes(body))
        .map_err(|e| format!("signing the request: {e}"))?;
    let (instructions, _) = sign(signable, &params).map_err(|e| format!("signing the request: {e}"))?.into_parts();
    let mut signed: Vec<(String, String)> = headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    signed.extend(instructions.headers().map(|(k, v)| (k.to_owned(), v.to_owned())));
    Ok(signed)
}

/// POSTs `body`; the status and the answer's text, whatever the status.
fn send(url: &str, headers: &[(String, String)], body: &str) -> Result<(u16, String), String> {
    let mut request = ureq::post(url);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let mut response = request
        .config()
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .build()
        .send(body)
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, text))
}

/// An EC2 error answer (`<Response><Errors><Error><Code>..</Code><Message>..`)
/// as the port's error, by the same rules as the SDK's (`super::sdk`).
fn error_of(what: &str, status: u16, body: &str) -> CloudError {
    let code = tag_text(body, "Code").unwrap_or_default();
    let message = tag_text(body, "Message").map(unescape).unwrap_or_else(|| format!("HTTP {status}"));
    let message = if code.is_empty() { format!("HTTP {status}: {message}") } else { format!("{code}: {message}") };
    super::credentials::classify(what, status, code, message)
}

/// The text between the first `<tag>` and its `</tag>`.
fn tag_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(&xml[start..end])
}

/// XML's five entities, as text.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttled() -> CloudError {
        CloudError::Throttled { what: "EC2 DescribeInstances".into(), message: "RequestLimitExceeded".into() }
    }

    /// Counts the attempts `answers` (one per attempt, the last repeated) meet.
    async fn attempts(answers: Vec<CloudResult<u32>>) -> (CloudResult<u32>, u32) {
        let tried = std::sync::atomic::AtomicU32::new(0);
        let outcome = retrying(ATTEMPTS, FIRST_WAIT, || {
            let n = tried.fetch_add(1, std::sync::atomic::Ordering::SeqCst) as usize;
            let answer = answers[n.min(answers.len() - 1)].clone();
            async move { answer }
        })
        .await;
        (outcome, tried.into_inner())
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_or_a_failing_service_is_tried_three_times_with_growing_waits() {
        let started = tokio::time::Instant::now();
        let (outcome, tried) = attempts(vec![Err(throttled()), Err(throttled()), Ok(7)]).await;
        assert_eq!((outcome.ok(), tried), (Some(7), 3));
        // 0.5-1 s, then 1-2 s.
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(1500) && waited <= Duration::from_secs(3), "{waited:?}");

        let unavailable = CloudError::Unavailable { what: "EC2".into(), message: "HTTP 503".into() };
        let (outcome, tried) = attempts(vec![Err(unavailable)]).await;
        assert!(matches!(outcome, Err(CloudError::Unavailable { .. })), "{outcome:?}");
        assert_eq!(tried, 3, "three attempts, then the error");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_or_invalid_input_is_not_tried_again() {
        let denied = CloudError::Denied { what: "EC2".into(), message: "UnauthorizedOperation".into(), action: None };
        let (outcome, tried) = attempts(vec![Err(denied), Ok(1)]).await;
        assert!(matches!(outcome, Err(CloudError::Denied { .. })), "{outcome:?}");
        assert_eq!(tried, 1);
        let invalid = CloudError::Invalid { what: "EC2".into(), message: "InvalidInstanceID.Malformed".into() };
        assert_eq!(attempts(vec![Err(invalid), Ok(1)]).await.1, 1);
    }

    /// A one-thread HTTP server that answers each request with the next
    /// of `answers` (status, body) and closes the connection; it returns
    /// the requests' bodies when every answer has been given.
    fn serve(answers: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let server = std::thread::spawn(move || {
            let mut bodies = Vec::new();
            for (status, body) in answers {
                let (mut stream, _) = listener.accept().expect("a request");
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // The headers, then as many bytes as Content-Length says.
                loop {
                    let n = stream.read(&mut buf).expect("reading the request");
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length || n == 0 {
                            bodies.push(text[end + 4..].to_string());
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(answer.as_bytes()).expect("writing the answer");
            }
            bodies
        });
        (url, server)
    }

    #[tokio::test]
    async fn ec2_answering_503_then_the_instance_is_asked_again_and_read() {
        let unavailable = "<Response><Errors><Error><Code>Unavailable</Code><Message>The service is \
                           unavailable</Message></Error></Errors></Response>";
        let described = "<DescribeInstancesResponse><reservationSet><item><instancesSet><item>\
                         <instanceId>i-0abc</instanceId><instanceState><code>16</code><name>running</name>\
                         </instanceState></item></instancesSet></item></reservationSet></DescribeInstancesResponse>";
        let (url, server) = serve(vec![(503, unavailable), (200, described)]);
        let config = SdkConfig::builder()
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDTEST", "secret", None, None, "test",
            )))
            .endpoint_url(url)
            .build();
        let ec2 = Ec2::new(&config, "us-east-1");
        assert_eq!(ec2.instance_state("i-0abc").await.expect("read on the second try").as_deref(), Some("running"));
        let bodies = server.join().expect("the server");
        assert_eq!(bodies.len(), 2, "one retry: {bodies:?}");
        assert!(bodies.iter().all(|b| b.contains("Action=DescribeInstances") && b.contains("InstanceId.1=i-0abc")));
    }

    #[test]
    fn the_state_and_errors_are_read_from_ec2s_xml() {
        let described = "<DescribeInstancesResponse><reservationSet><item><instancesSet><item>\
                         <instanceId>i-1</instanceId><instanceState><code>80</code><name>stopped</name>\
                         </instanceState><tagSet><item><key>name</key></item></tagSet></item></instancesSet>\
                         </item></reservationSet></DescribeInstancesResponse>";
        assert_eq!(tag_text(described, "instanceState").and_then(|s| tag_text(s, "name")), Some("stopped"));
        let refused = "<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not \
                       authorized to perform this operation. User: arn:aws:iam::1:user/d is not authorized to \
                       perform: ec2:StartInstances on resource: arn:aws:ec2:us-east-1:1:instance/i-1</Message>\
                       </Error></Errors></Response>";
        let e = error_of("EC2 StartInstances on instance i-1", 403, refused);
        assert!(matches!(&e, CloudError::Denied { .. }), "{e:?}");
        assert!(e.to_string().contains("AWS refused ec2:StartInstances to user/d"), "{e}");
        let missing = "<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID \
                       &apos;i-2&apos; does not exist</Message></Error></Errors></Response>";
        let e = error_of("EC2 DescribeInstances on instance i-2", 400, missing);
        assert_eq!(
            e,
            CloudError::Invalid {
                what: "EC2 DescribeInstances on instance i-2".into(),
                message: "InvalidInstanceID.NotFound: The instance ID 'i-2' does not exist".into()
            }
        );
        assert!(matches!(error_of("x", 503, "busy"), CloudError::Unavailable { .. }));
    }

    #[test]
    fn offerings_and_reservations_are_read_from_ec2s_xml() {
        let offerings = "<DescribeInstanceTypeOfferingsResponse><instanceTypeOfferingSet>\
                         <item><instanceType>p4d.24xlarge</instanceType><locationType>availability-zone</locationType>\
                         <location>us-east-1b</location></item>\
                         <item><instanceType>p4d.24xlarge</instanceType><location>us-east-1a</location></item>\
                         </instanceTypeOfferingSet></DescribeInstanceTypeOfferingsResponse>";
        let set = tag_text(offerings, "instanceTypeOfferingSet").unwrap();
        let zones: Vec<&str> = items(set).filter_map(|i| tag_text(i, "location")).collect();
        assert_eq!(zones, ["us-east-1b", "us-east-1a"]);
        let nested = "<item><a><item>x</item></a><id>1</id></item><item><id>2</id></item>";
        assert_eq!(items(nested).collect::<Vec<_>>(), ["<a><item>x</item></a><id>1</id>", "<id>2</id>"]);
        assert_eq!(items("<item>unclosed").count(), 0);
        let reservation = "<capacityReservationId>cr-0123456789abcdef0</capacityReservationId>\
                           <instanceType>p5.48xlarge</instanceType><availabilityZone>us-east-1a</availabilityZone>\
                           <totalInstanceCount>8</totalInstanceCount><availableInstanceCount>6</availableInstanceCount>\
                           <state>scheduled</state><startDate>2030-06-10T11:30:00.000Z</startDate>\
                           <endDate>2030-06-17T11:30:00Z</endDate><reservationType>capacity-block</reservationType>";
        let r = reservation_of(reservation);
        assert_eq!(
            (r.id.as_str(), r.instance_type.as_str(), r.zone.as_str(), r.state.as_str(), r.total, r.available),
            ("cr-0123456789abcdef0", "p5.48xlarge", "us-east-1a", "scheduled", 8, 6)
        );
        assert_eq!(r.start_unix, node_contract::interruption::parse_utc("2030-06-10T11:30:00Z"));
        assert_eq!(r.end_unix, node_contract::interruption::parse_utc("2030-06-17T11:30:00Z"));
        assert!(r.capacity_block);
        assert!(instance_type_name("x", "p4d.24xlarge").is_ok());
        assert!(instance_type_name("x", "p4d&Action=RunInstances").is_err());
    }
}
