//! The serving side of the nodes' data protocol ([`super::wire`]): a node
//! serves the objects of its data sets to its peers on
//! [`node_contract::data::DATA_PORT`] ([`serve`]). A request for an object
//! this node does not have yet makes it fetch the object from S3 first
//! (pull-through, single-flight with its own fetch:
//! [`super::engine::Engine::ensure`]), so it is read from S3 once, whoever
//! asks first.
//!
//! Only keys under a prefix of this node's own data sets are served, and
//! only inside their directories ([`super::key::path_in`]). The cluster's
//! security group admits only the cluster's nodes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use node_contract::data::DataSet;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use super::engine::{Engine, Target};
use super::key;
use super::progress::Progress;
use super::store::{Integrity, ObjectStore};
use super::wire::{MAGIC, MAX_LINE, Reply, Request};

/// One data set this node serves, with its directory on this node.
#[derive(Clone, Debug)]
pub(crate) struct Served {
    /// The data set.
    pub set: DataSet,
    /// Its directory (under the agent's root).
    pub dir: PathBuf,
}

/// Serves this node's data sets on `listener` until the task is dropped.
pub(crate) async fn serve<S: ObjectStore>(listener: TcpListener, engine: Arc<Engine<S>>, sets: Arc<Vec<Served>>) {
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                debug!("the data server could not accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (engine, sets) = (engine.clone(), sets.clone());
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &engine, &sets).await {
                debug!(peer = %from, "a data request was not answered: {e}");
            }
        });
    }
}

async fn answer<S: ObjectStore>(stream: TcpStream, engine: &Arc<Engine<S>>, sets: &[Served]) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    (&mut reader).take(MAX_LINE).read_line(&mut line).await?;
    let mut stream = reader.into_inner();
    let target = match parse(&line, sets) {
        Ok(t) => t,
        Err(why) => return refuse(&mut stream, &why).await,
    };
    let (target, offset, len) = target;
    let done = match engine.ensure(&target, None).await {
        Ok(d) => d,
        Err(e) => return refuse(&mut stream, &e.to_string()).await,
    };
    let mut file = match tokio::fs::File::open(&target.path).await {
        Ok(f) => f,
        Err(e) => return refuse(&mut stream, &format!("{}: {e}", target.path.display())).await,
    };
    let reply = Reply { ok: true, len, integrity: done.integrity, error: None };
    stream.write_all(format!("{}\n", serde_json::to_string(&reply).unwrap_or_default()).as_bytes()).await?;
    use tokio::io::AsyncSeekExt;
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let mut body = file.take(len);
    let sent = tokio::io::copy_buf(&mut BufReader::with_capacity(1 << 20, &mut body), &mut stream).await?;
    Progress::add(&engine.progress().bytes_served, sent);
    stream.shutdown().await
}

/// The object and range a request line asks for, if this node serves it.
fn parse(line: &str, sets: &[Served]) -> Result<(Target, u64, u64), String> {
    let json = line.trim_end().strip_prefix(MAGIC).map(str::trim_start).ok_or("not a dl-data/1 request")?;
    let r: Request = serde_json::from_str(json).map_err(|e| format!("the request does not read: {e}"))?;
    let served = sets
        .iter()
        .filter(|s| s.set.bucket == r.bucket && r.key.starts_with(&s.set.prefix))
        .max_by_key(|s| s.set.prefix.len())
        .ok_or_else(|| format!("s3://{}/{} is in none of this node's data sets", r.bucket, r.key))?;
    let path = key::path_in(&served.dir, &served.set.prefix, &r.key)
        .map_err(|why| format!("s3://{}/{}: refused: {why}", r.bucket, r.key))?;
    if r.offset.checked_add(r.len).is_none_or(|end| end > r.size) {
        return Err(format!("bytes {}+{} are outside s3://{}/{} ({} bytes)", r.offset, r.len, r.bucket, r.key, r.size));
    }
    let target = Target { bucket: r.bucket, key: r.key, size: r.size, etag: r.etag, path };
    Ok((target, r.offset, r.len))
}

async fn refuse(stream: &mut TcpStream, why: &str) -> std::io::Result<()> {
    let reply = Reply { ok: false, len: 0, integrity: Integrity::None, error: Some(why.to_owned()) };
    stream.write_all(format!("{}\n", serde_json::to_string(&reply).unwrap_or_default()).as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use node_contract::data::Fetcher;

    #[test]
    fn requests_outside_the_served_sets_are_refused() {
        let sets = vec![Served {
            set: DataSet { bucket: "b".into(), prefix: "in/".into(), dir: "/d".into(), fetcher: Fetcher::EveryNode },
            dir: PathBuf::from("/root/d"),
        }];
        let line = |key: &str, offset: u64, len: u64| {
            let r = Request { bucket: "b".into(), key: key.into(), size: 10, etag: String::new(), offset, len };
            format!("{MAGIC} {}\n", serde_json::to_string(&r).unwrap())
        };
        let (t, o, l) = parse(&line("in/a/b.jpg", 2, 8), &sets).unwrap();
        assert_eq!((t.path, o, l), (PathBuf::from("/root/d/a/b.jpg"), 2, 8));
        assert!(parse(&line("in/../x", 0, 1), &sets).unwrap_err().contains("refused"));
        assert!(parse(&line("out/x", 0, 1), &sets).unwrap_err().contains("none of this node's data sets"));
        assert!(parse(&line("in/x", 5, 6), &sets).unwrap_err().contains("outside"));
        assert!(parse("GET / HTTP/1.1\r\n", &sets).is_err());
    }
}
