//! A TCP proxy the test can cut: nodes reach one service (CloudWatch Logs,
//! through `AWS_ENDPOINT_URL_CLOUDWATCH_LOGS`) through it, and while it is
//! cut every connection, open or new, is closed at once, as a service that
//! cannot be reached. Not an AWS behaviour: the network between a node and
//! the service failing.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{Error, Result};

/// The proxy; stops accepting when dropped.
pub struct CuttableProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl CuttableProxy {
    /// Listens on `listen` (port 0: a free one) and forwards to `target`.
    pub fn start(listen: SocketAddr, target: SocketAddr) -> Result<CuttableProxy> {
        let listener = TcpListener::bind(listen).map_err(|e| Error::Setup(format!("proxy on {listen}: {e}")))?;
        let addr = listener.local_addr().map_err(|e| Error::Setup(format!("proxy address: {e}")))?;
        listener.set_nonblocking(true).map_err(|e| Error::Setup(format!("proxy: {e}")))?;
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, o, s) = (cut.clone(), open.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                let _ = client.set_nonblocking(false);
                if c.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(target) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                if let Ok(mut open) = o.lock() {
                    open.extend(client.try_clone().ok());
                    open.extend(server.try_clone().ok());
                }
                pipe(&client, &server);
                pipe(&server, &client);
            }
        });
        Ok(CuttableProxy { addr, cut, open, stop })
    }

    /// `http://<address>`, for an endpoint variable.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts the service off: open connections are closed, new ones refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        if let Ok(mut open) = self.open.lock() {
            for stream in open.drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}

/// Copies `from` into `to` on a thread of its own until either side closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else { return };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
