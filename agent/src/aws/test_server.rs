//! A tiny HTTP/1.1 server for unit tests: one thread per connection, one
//! request per connection (`Connection: close`), every request recorded.
//! It stands in for the services the agent reaches over plain HTTP (the wait
//! condition handle, the instance metadata service).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub method: String,
    /// The path with its query string.
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl Request {
    /// A header's value, by lowercase name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// What the server answers.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub(crate) fn new(status: u16, body: &str) -> Self {
        Self { status, headers: Vec::new(), body: body.to_owned() }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running server; it lives until the test process ends.
pub(crate) struct TestServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl TestServer {
    /// Starts a server on 127.0.0.1 answering every request with `handler`.
    pub(crate) fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let handler = Arc::clone(&handler);
                let recorded = Arc::clone(&recorded);
                std::thread::spawn(move || serve(stream, &*handler, &recorded));
            }
        });
        Self { addr, requests }
    }

    /// `http://127.0.0.1:<port>`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

/// An address on which nothing listens (bound, then released).
pub(crate) fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn serve(stream: TcpStream, handler: &Handler, recorded: &Mutex<Vec<Request>>) {
    let Some(request) = read_request(&stream) else { return };
    recorded.lock().unwrap().push(request.clone());
    let reply = handler(&request);
    let mut out =
        format!("HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n", reply.status, reply.body.len());
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&reply.body);
    let mut stream = stream;
    let _ = stream.write_all(out.as_bytes());
    let _ = stream.flush();
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// An SDK config that sends every service to `endpoint`, with test credentials and no retries.
pub(crate) fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    use aws_sdk_sqs::config::{Credentials, SharedCredentialsProvider};
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "test",
        )))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build()
}

/// The fields of an `application/x-www-form-urlencoded` body (the AWS query protocol), not decoded.
pub(crate) fn form_fields(body: &str) -> BTreeMap<String, String> {
    body.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// An AWS query protocol error reply.
pub(crate) fn query_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::new(
        status,
        &format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>\
             <RequestId>r-1</RequestId></ErrorResponse>"
        ),
    )
    .header("content-type", "text/xml")
}
