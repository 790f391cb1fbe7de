//! The nodes' data protocol on [`node_contract::data::DATA_PORT`], the
//! asking side ([`request`], [`read_body`]); [`super::server`] answers.
//!
//! Plain TCP, one request a connection (the network gate's probe is
//! plain TCP too). The asker sends one line, `dl-data/1 ` and a JSON
//! [`Request`] (bucket, key, the size and ETag of its listing, the byte
//! range); the server answers one line, a JSON [`Reply`], then, when it
//! is `ok`, exactly `len` bytes. The reply carries S3's checksum of the
//! whole object when the server has it, and the asker verifies the bytes
//! against it as against S3's own.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::store::Integrity;

/// The first word of every request: the protocol and its version.
pub(crate) const MAGIC: &str = "dl-data/1";

/// The longest request or reply line.
pub(crate) const MAX_LINE: u64 = 16 * 1024;

/// How long a reply may take to start: the server may be fetching the
/// whole object from S3 first.
const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// How long the body may stall (no byte for this long) before the
/// transfer is given up.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a node asks a peer for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Request {
    /// The bucket.
    pub bucket: String,
    /// The whole key.
    pub key: String,
    /// The object's size in the asker's listing.
    pub size: u64,
    /// Its ETag there.
    pub etag: String,
    /// The first byte wanted.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

/// A peer's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reply {
    /// Whether the bytes follow.
    pub ok: bool,
    /// How many bytes follow.
    pub len: u64,
    /// S3's checksum of the whole object, when the server has it.
    pub integrity: Integrity,
    /// Why not, when not `ok`.
    pub error: Option<String>,
}

/// Asks `addr` for `request`: the reply's header and the stream its
/// bytes follow on. Every failure is a reason to read from S3 instead.
pub(crate) async fn request(
    addr: SocketAddr,
    request: &Request,
    connect_timeout: Duration,
) -> Result<(Reply, BufReader<TcpStream>), String> {
    let mut stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("cannot connect to {addr}: {e}")),
        Err(_) => return Err(format!("{addr} did not accept within {connect_timeout:?}")),
    };
    let _ = stream.set_nodelay(true);
    let line = format!("{MAGIC} {}\n", serde_json::to_string(request).unwrap_or_default());
    stream.write_all(line.as_bytes()).await.map_err(|e| format!("sending to {addr}: {e}"))?;
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut header = String::new();
    let read = async { (&mut reader).take(MAX_LINE).read_line(&mut header).await };
    match tokio::time::timeout(REPLY_TIMEOUT, read).await {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => return Err(format!("{addr} closed the connection without a reply")),
        Ok(Err(e)) => return Err(format!("reading {addr}'s reply: {e}")),
        Err(_) => return Err(format!("{addr} did not reply within {REPLY_TIMEOUT:?}")),
    }
    let reply: Reply =
        serde_json::from_str(header.trim_end()).map_err(|e| format!("{addr}'s reply does not read: {e}"))?;
    if !reply.ok {
        return Err(format!("{addr}: {}", reply.error.unwrap_or_else(|| "no reason given".into())));
    }
    if reply.len != request.len {
        return Err(format!("{addr} offers {} bytes where {} were asked", reply.len, request.len));
    }
    Ok((reply, reader))
}

/// Reads a reply's `len` bytes.
pub(crate) async fn read_body(mut reader: BufReader<TcpStream>, len: u64) -> Result<Bytes, String> {
    let mut buf = BytesMut::zeroed(len as usize);
    let mut at = 0;
    while at < buf.len() {
        match tokio::time::timeout(STALL_TIMEOUT, reader.read(&mut buf[at..])).await {
            Ok(Ok(0)) => return Err(format!("the peer closed the connection after {at} of {len} bytes")),
            Ok(Ok(n)) => at += n,
            Ok(Err(e)) => return Err(format!("after {at} of {len} bytes: {e}")),
            Err(_) => return Err(format!("no byte for {STALL_TIMEOUT:?} after {at} of {len}")),
        }
    }
    Ok(buf.freeze())
}
