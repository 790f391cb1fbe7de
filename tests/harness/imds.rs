//! A per-node instance metadata service (IMDSv2) stand-in: what the agent
//! asks EC2 about itself, for a node that is only a network namespace.
//!
//! Tokens are enforced as on EC2: `PUT /latest/api/token` with
//! `x-aws-ec2-metadata-token-ttl-seconds` (1..=21600) returns a token and
//! echoes that header (the SDK's client rejects a reply without it); every
//! `GET` needs a live `x-aws-ec2-metadata-token`, else 401. Served paths:
//! `meta-data/{instance-id, local-ipv4, local-hostname, hostname, instance-type,
//! ami-id, placement/availability-zone, placement/region}`, `user-data`
//! (404 when there is none) and `dynamic/instance-identity/document`.
//! See <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html>.
//!
//! Interruption notices, 404 until a test gives one
//! ([`Imds::set_instance_action`], [`Imds::set_rebalance_recommendation`]):
//! `meta-data/spot/instance-action` (`{"action": ..., "time": ...}`) and
//! `meta-data/events/recommendations/rebalance` (`{"noticeTime": ...}`), as
//! EC2 serves them
//! (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html>).
//!
//! Role credentials, once a test gives the node an instance profile
//! ([`Imds::set_role`]): `meta-data/iam/security-credentials/` names the
//! role and `meta-data/iam/security-credentials/<role>` serves its temporary
//! credentials (`AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`),
//! obtained from the local AWS as EC2 obtains them (launcher patch (t5)) and
//! replaced by new ones a third of their lifetime (at most five minutes)
//! before they expire, as EC2 makes new credentials available ahead of the
//! expiration (<https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/iam-roles-for-amazon-ec2.html#instance-metadata-security-credentials>).
//! The SDK's default credential chain finds them there, so a node's
//! processes run with no keys in their environment.
//!
//! Plain blocking HTTP/1.1 on std threads, keep-alive included: a few dozen
//! requests per test do not need an async server.

use crate::moto::{AssumedBy, RoleCredentials};
use crate::{Error, Result};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a node's metadata says about it.
#[derive(Clone, Debug)]
pub struct Identity {
    /// `i-...`
    pub instance_id: String,
    /// The node's address (its namespace IP).
    pub local_ipv4: Ipv4Addr,
    /// e.g. `g4dn.xlarge`
    pub instance_type: String,
    /// e.g. `us-east-1a`
    pub availability_zone: String,
    /// e.g. `us-east-1`
    pub region: String,
    /// e.g. `ami-...`
    pub image_id: String,
    /// The account id.
    pub account_id: String,
    /// The user data, if any (the script with the node config).
    pub user_data: Option<String>,
}

impl Identity {
    /// `ip-10-213-1-10.ec2.internal`, as EC2 names hosts in us-east-1.
    pub fn local_hostname(&self) -> String {
        let dashed = self.local_ipv4.to_string().replace('.', "-");
        if self.region == "us-east-1" {
            format!("ip-{dashed}.ec2.internal")
        } else {
            format!("ip-{dashed}.{}.compute.internal", self.region)
        }
    }

    /// The instance identity document, as EC2 serves it; `pendingTime`:
    /// when this instance was launched (unix seconds).
    pub fn document(&self, launched_unix: u64) -> String {
        serde_json::json!({
            "accountId": self.account_id,
            "architecture": "x86_64",
            "availabilityZone": self.availability_zone,
            "imageId": self.image_id,
            "instanceId": self.instance_id,
            "instanceType": self.instance_type,
            "pendingTime": node_contract::interruption::format_utc(launched_unix),
            "privateIp": self.local_ipv4.to_string(),
            "region": self.region,
            "version": "2017-09-30",
        })
        .to_string()
    }
}

/// Largest token lifetime IMDS grants (six hours).
const MAX_TTL_SECONDS: u64 = 21600;

/// The notices a node's metadata serves (JSON bodies), none at first.
#[derive(Clone, Debug, Default)]
struct Notices {
    instance_action: Option<String>,
    rebalance: Option<String>,
}

/// Where a node's role credentials come from: the local AWS, for the
/// instance profile the template gave the node.
#[derive(Clone, Debug)]
pub struct Role {
    /// The local AWS's endpoint (`LocalAws::endpoint`).
    pub aws_endpoint: String,
    /// The node's instance profile (name or ARN).
    pub instance_profile: String,
    /// How long each set of credentials lives, in seconds (EC2: about six hours; 60 to 43200).
    pub lifetime_seconds: u32,
}

/// The credentials served now and when they expire.
struct Served {
    credentials: RoleCredentials,
    expires: Instant,
}

struct RoleState {
    role: Role,
    served: Option<Served>,
    issued: u64,
}

struct State {
    identity: Mutex<Identity>,
    role: Mutex<Option<RoleState>>,
    /// When the server started: the instance's launch, for `pendingTime`
    /// (unix seconds).
    launched_unix: u64,
    notices: Mutex<Notices>,
    tokens: Mutex<HashMap<String, Instant>>,
    next_token: AtomicU64,
    requests: AtomicU64,
    notice_polls: AtomicU64,
    stop: AtomicBool,
}

/// A running metadata server; stops on drop.
pub struct Imds {
    addr: SocketAddr,
    state: Arc<State>,
}

impl Imds {
    /// Serves `identity` on `bind` (port 0 picks a free one).
    pub fn start(bind: SocketAddr, identity: Identity) -> Result<Imds> {
        let listener = TcpListener::bind(bind).map_err(Error::io("binding the metadata server", bind.to_string()))?;
        let addr = listener.local_addr().map_err(Error::io("metadata server address", bind.to_string()))?;
        let launched_unix =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let state = Arc::new(State {
            identity: Mutex::new(identity),
            role: Mutex::new(None),
            launched_unix,
            notices: Mutex::new(Notices::default()),
            tokens: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            requests: AtomicU64::new(0),
            notice_polls: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let accept_state = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_state.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let state = accept_state.clone();
                std::thread::spawn(move || serve_connection(stream, &state));
            }
        });
        Ok(Imds { addr, state })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ip:port/`, for `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Replaces the user data (a test can give a node another config).
    pub fn set_user_data(&self, user_data: Option<String>) {
        self.state.identity.lock().expect("identity lock").user_data = user_data;
    }

    /// Serves a Spot instance action: `action` (`terminate`, `stop`,
    /// `hibernate`) at `time` (RFC 3339 UTC), as EC2 does two minutes ahead.
    /// `None` takes it away (404 again).
    pub fn set_instance_action(&self, notice: Option<(&str, &str)>) {
        let body = notice.map(|(action, time)| serde_json::json!({"action": action, "time": time}).to_string());
        self.state.notices.lock().expect("notices lock").instance_action = body;
    }

    /// Serves a rebalance recommendation made at `notice_time` (RFC 3339
    /// UTC); `None` takes it away.
    pub fn set_rebalance_recommendation(&self, notice_time: Option<&str>) {
        let body = notice_time.map(|t| serde_json::json!({"noticeTime": t}).to_string());
        self.state.notices.lock().expect("notices lock").rebalance = body;
    }

    /// Serves credentials of `role`'s instance profile from now on.
    pub fn set_role(&self, role: Role) {
        *self.state.role.lock().expect("role lock") = Some(RoleState { role, served: None, issued: 0 });
    }

    /// How many sets of role credentials it has obtained so far (each
    /// rotation adds one).
    pub fn credentials_issued(&self) -> u64 {
        self.state.role.lock().expect("role lock").as_ref().map_or(0, |r| r.issued)
    }

    /// The role credentials it serves now (obtained if none yet), or
    /// `None` when the node has no instance profile.
    pub fn role_credentials(&self) -> Result<Option<RoleCredentials>> {
        let identity = self.identity();
        current_credentials(&self.state, &identity.instance_id)
    }

    /// How many times the notice paths were asked for (both together).
    pub fn notice_polls(&self) -> u64 {
        self.state.notice_polls.load(Ordering::SeqCst)
    }

    /// The identity it serves.
    pub fn identity(&self) -> Identity {
        self.state.identity.lock().expect("identity lock").clone()
    }

    /// How many requests it has answered.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Imds {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let length: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, path, headers })
}

fn serve_connection(stream: TcpStream, state: &State) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        if state.stop.load(Ordering::SeqCst) {
            return;
        }
        state.requests.fetch_add(1, Ordering::SeqCst);
        let (status, extra, body) = answer(&request, state);
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nServer: EC2ws\r\n",
            body.len()
        );
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if writer.write_all(head.as_bytes()).and_then(|_| writer.write_all(body.as_bytes())).is_err() {
            return;
        }
    }
}

fn answer(request: &Request, state: &State) -> (&'static str, Vec<(&'static str, String)>, String) {
    let path = request.path.split('?').next().unwrap_or("");
    if path == "/latest/api/token" {
        if request.method != "PUT" {
            return ("405 Method Not Allowed", vec![], String::new());
        }
        let ttl = request.headers.get("x-aws-ec2-metadata-token-ttl-seconds").and_then(|t| t.parse::<u64>().ok());
        let Some(ttl) = ttl.filter(|t| (1..=MAX_TTL_SECONDS).contains(t)) else {
            return ("400 Bad Request", vec![], String::new());
        };
        let n = state.next_token.fetch_add(1, Ordering::SeqCst);
        let token = format!("e2e-token-{n}-{:x}", std::process::id() as u64 * 7919 + n * 104729);
        state.tokens.lock().expect("tokens lock").insert(token.clone(), Instant::now() + Duration::from_secs(ttl));
        return ("200 OK", vec![("x-aws-ec2-metadata-token-ttl-seconds", ttl.to_string())], token);
    }
    if request.method != "GET" && request.method != "HEAD" {
        return ("405 Method Not Allowed", vec![], String::new());
    }
    let token_ok = request
        .headers
        .get("x-aws-ec2-metadata-token")
        .and_then(|t| state.tokens.lock().expect("tokens lock").get(t).copied())
        .is_some_and(|expiry| Instant::now() < expiry);
    if !token_ok {
        return ("401 Unauthorized", vec![], String::new());
    }
    let identity = state.identity.lock().expect("identity lock").clone();
    let notices = state.notices.lock().expect("notices lock").clone();
    let path = path.trim_end_matches('/');
    if path == "/latest/meta-data/spot/instance-action" || path == "/latest/meta-data/events/recommendations/rebalance"
    {
        state.notice_polls.fetch_add(1, Ordering::SeqCst);
    }
    if path == "/latest/meta-data/iam/security-credentials"
        || path.starts_with("/latest/meta-data/iam/security-credentials/")
    {
        return role_answer(state, &identity.instance_id, path);
    }
    let found = match path {
        "/latest/meta-data" => Some(
            [
                "ami-id",
                "hostname",
                "iam/",
                "instance-id",
                "instance-type",
                "local-hostname",
                "local-ipv4",
                "placement/",
            ]
            .join("\n"),
        ),
        "/latest/meta-data/instance-id" => Some(identity.instance_id.clone()),
        "/latest/meta-data/local-ipv4" => Some(identity.local_ipv4.to_string()),
        "/latest/meta-data/local-hostname" | "/latest/meta-data/hostname" => Some(identity.local_hostname()),
        "/latest/meta-data/instance-type" => Some(identity.instance_type.clone()),
        "/latest/meta-data/ami-id" => Some(identity.image_id.clone()),
        "/latest/meta-data/placement" => Some("availability-zone\nregion".into()),
        "/latest/meta-data/placement/availability-zone" => Some(identity.availability_zone.clone()),
        "/latest/meta-data/placement/region" => Some(identity.region.clone()),
        "/latest/user-data" => identity.user_data.clone(),
        "/latest/dynamic/instance-identity/document" => Some(identity.document(state.launched_unix)),
        "/latest/meta-data/spot/instance-action" => notices.instance_action,
        "/latest/meta-data/events/recommendations/rebalance" => notices.rebalance,
        _ => None,
    };
    match found {
        Some(body) => ("200 OK", vec![], body),
        None => ("404 Not Found", vec![], String::new()),
    }
}

/// The credentials to serve now: the held ones, or new ones once a third
/// of their lifetime (at most five minutes) is left.
fn current_credentials(state: &State, instance_id: &str) -> Result<Option<RoleCredentials>> {
    let mut guard = state.role.lock().expect("role lock");
    let Some(role) = guard.as_mut() else { return Ok(None) };
    let lifetime = Duration::from_secs(u64::from(role.role.lifetime_seconds));
    let renew_before = (lifetime / 3).min(Duration::from_secs(300));
    let fresh = role.served.as_ref().is_some_and(|s| Instant::now() + renew_before < s.expires);
    if !fresh {
        let who = AssumedBy::Ec2 { instance_profile: &role.role.instance_profile, instance_id };
        let credentials =
            crate::moto::service_credentials_at(&role.role.aws_endpoint, &who, role.role.lifetime_seconds)?;
        role.served = Some(Served { credentials, expires: Instant::now() + lifetime });
        role.issued += 1;
    }
    Ok(role.served.as_ref().map(|s| s.credentials.clone()))
}

/// `meta-data/iam/security-credentials/` (the role's name) and
/// `meta-data/iam/security-credentials/<role>` (its credentials).
fn role_answer(state: &State, instance_id: &str, path: &str) -> (&'static str, Vec<(&'static str, String)>, String) {
    let credentials = match current_credentials(state, instance_id) {
        Ok(Some(credentials)) => credentials,
        Ok(None) => return ("404 Not Found", vec![], String::new()),
        Err(e) => return ("500 Internal Server Error", vec![], e.to_string()),
    };
    match path.trim_start_matches("/latest/meta-data/iam/security-credentials").trim_start_matches('/') {
        "" => ("200 OK", vec![], credentials.role_name),
        name if name == credentials.role_name => ("200 OK", vec![], credentials.document),
        _ => ("404 Not Found", vec![], String::new()),
    }
}
