//! The metrics port: a thread of its own that answers `GET /metrics` with the Prometheus text
//! of a [`Metrics`] registry (std `TcpListener`, HTTP/1.0-style: one request per connection).
//!
//! Normal operation: [`MetricsServer::start`] binds the address and starts the thread; it
//! accepts (non-blocking, checking its stop flag every 50 ms), reads one request head (at most
//! 8 KiB, 2 s), answers `GET /metrics` with status 200 and the exposition (`Content-Type:
//! text/plain; version=0.0.4`), `GET /` with a one-line index, anything else with 404 / 405,
//! and closes. Rendering reads counters with relaxed loads and asks reactors for histogram
//! copies (see [`super::latency`]): the reactors never wait for this thread. A server's own
//! port lives in the server's shared state and refers to the server weakly: it closes when the
//! server is gone (reactors stopped, no handle left), whoever drops it last.
//!
//! Recovery: a client that sends garbage, too much or nothing gets an error status or is
//! dropped after the timeout; I/O errors on one connection do not stop the thread. Dropping the
//! [`MetricsServer`] makes the thread stop within 50 ms; [`MetricsServer::stop`] also joins it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::Metrics;

/// Longest request head read.
const MAX_HEAD: usize = 8192;

/// The thread serving a metrics port. Dropping it tells the thread to stop (it does within
/// 50 ms, without being waited for: a drop may happen on any thread, a reactor's included);
/// [`MetricsServer::stop`] also waits for it.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` (port 0: any free port) and serves `metrics` there on a new thread.
    pub fn start(addr: SocketAddr, metrics: Metrics) -> std::io::Result<MetricsServer> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        let addr = l.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("rpcrdma-metrics".into())
            .spawn(move || serve(&l, &metrics, &st))?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address served (with the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread and waits for it (the port is closed when this returns).
    pub fn stop(mut self) {
        self.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn signal(&self) {
        // Release: pairs with the Acquire load in `serve`.
        self.stop.store(true, Ordering::Release);
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.signal();
    }
}

fn serve(l: &TcpListener, m: &Metrics, stop: &AtomicBool) {
    // Acquire: pairs with the Release store in `MetricsServer::halt`.
    while !stop.load(Ordering::Acquire) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = answer(s, m);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Reads one request head and answers it.
fn answer(mut s: TcpStream, m: &Metrics) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            );
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return respond(&mut s, "405 Method Not Allowed", "text/plain", "GET only\n");
    }
    let path = path.split('?').next().unwrap_or("");
    match path {
        "/metrics" => {
            let body = m.render();
            let body = if method == "HEAD" { "" } else { &body };
            respond(
                &mut s,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body,
            )
        }
        "/" => respond(
            &mut s,
            "200 OK",
            "text/plain",
            "rpcrdma metrics: GET /metrics\n",
        ),
        _ => respond(&mut s, "404 Not Found", "text/plain", "not found\n"),
    }
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}
