//! The metrics port: a thread of its own that answers `GET /metrics` with the Prometheus text
//! of a [`Metrics`] registry (std `TcpListener`, HTTP/1.0-style: one request per connection).
//!
//! Normal operation: [`MetricsServer::start`] binds the address and starts the thread; it
//! accepts (non-blocking, checking its stop flag every 50 ms) and serves each connection on a
//! thread of its own, so scrapes run concurrently: one reads one request head (at most 8 KiB)
//! within [`HEAD_DEADLINE`] from the accept — a whole-request deadline, not a per-read
//! timeout, so a peer trickling one byte at a time gains nothing — answers `GET /metrics`
//! with status 200 and the exposition (`Content-Type: text/plain; version=0.0.4`), `GET /`
//! with a one-line index, anything else with 404 / 405, within [`WRITE_DEADLINE`], and
//! closes. At most [`MAX_SCRAPES`] connections are served at once, at most
//! [`MAX_SCRAPES_PER_PEER`] from one address; a connection over either bound is closed at
//! once. Rendering reads counters with relaxed loads and asks reactors for histogram copies
//! (see [`super::latency`]): the reactors never wait for these threads. A server's own port
//! lives in the server's shared state and refers to the server weakly: it closes when the
//! server is gone (reactors stopped, no handle left), whoever drops it last.
//!
//! Recovery: a client that sends garbage, too much or nothing gets an error status or is
//! dropped at its deadline; slow or silent sockets (slowloris) hold at most their address's
//! share of the bound, each for at most the deadline, and never delay another scrape. I/O
//! errors on one connection do not stop the thread; a connection thread that cannot be
//! started is dropped. Dropping the [`MetricsServer`] makes the accepting thread stop within
//! 50 ms (connection threads end at their deadlines); [`MetricsServer::stop`] also joins it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Metrics;

/// Longest request head read.
const MAX_HEAD: usize = 8192;
/// Connections served at once.
pub const MAX_SCRAPES: u32 = 16;
/// Connections served at once from one peer address.
pub const MAX_SCRAPES_PER_PEER: u32 = 4;
/// Time from the accept to a complete request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// Time to write the whole response.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// The thread serving a metrics port. Dropping it tells the thread to stop (it does within
/// 50 ms, without being waited for: a drop may happen on any thread, a reactor's included);
/// [`MetricsServer::stop`] also waits for it.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    metrics: Metrics,
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
        let served = metrics.clone();
        let thread = std::thread::Builder::new()
            .name("rpcrdma-metrics".into())
            .spawn(move || serve(&l, &served, &st))?;
        Ok(MetricsServer {
            addr,
            metrics,
            stop,
            thread: Some(thread),
        })
    }

    /// The address served (with the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The registry served (an application adds its own families with
    /// [`Metrics::add_collector`]).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
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
    let open = Arc::new(Open::default());
    // Acquire: pairs with the Release store in `MetricsServer::signal`.
    while !stop.load(Ordering::Acquire) {
        match l.accept() {
            Ok((s, peer)) => {
                let Some(guard) = Open::enter(&open, peer.ip()) else {
                    continue; // over a bound: closed at once (dropped)
                };
                let m = m.clone();
                let _ = std::thread::Builder::new()
                    .name("rpcrdma-metrics-conn".into())
                    .spawn(move || {
                        let _ = answer(s, &m);
                        drop(guard);
                    });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Connections being served: in all and per peer address.
#[derive(Default)]
struct Open {
    held: Mutex<(u32, HashMap<IpAddr, u32>)>,
}

/// One connection's place in [`Open`]; dropping it gives the place back.
struct OpenGuard {
    open: Arc<Open>,
    ip: IpAddr,
}

impl Open {
    /// A place for a connection from `ip`, or `None` over [`MAX_SCRAPES`] or
    /// [`MAX_SCRAPES_PER_PEER`].
    fn enter(open: &Arc<Open>, ip: IpAddr) -> Option<OpenGuard> {
        let mut h = open.held.lock().unwrap_or_else(|e| e.into_inner());
        let (total, by_peer) = &mut *h;
        let n = by_peer.entry(ip).or_insert(0);
        if *total >= MAX_SCRAPES || *n >= MAX_SCRAPES_PER_PEER {
            if *n == 0 {
                by_peer.remove(&ip);
            }
            return None;
        }
        *n += 1;
        *total += 1;
        Some(OpenGuard {
            open: Arc::clone(open),
            ip,
        })
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let mut h = self.open.held.lock().unwrap_or_else(|e| e.into_inner());
        let (total, by_peer) = &mut *h;
        *total = total.saturating_sub(1);
        if let Some(n) = by_peer.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                by_peer.remove(&self.ip);
            }
        }
    }
}

/// Reads one request head, all of it within [`HEAD_DEADLINE`] of `start`.
fn read_head(s: &mut TcpStream, start: Instant) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let end = start + HEAD_DEADLINE;
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
    Ok(Some(head))
}

/// Reads one request head and answers it.
fn answer(mut s: TcpStream, m: &Metrics) -> std::io::Result<()> {
    let start = Instant::now();
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(WRITE_DEADLINE))?;
    let Some(head) = read_head(&mut s, start)? else {
        return respond(
            &mut s,
            "431 Request Header Fields Too Large",
            "text/plain",
            "",
        );
    };
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

/// Writes the response, all of it within [`WRITE_DEADLINE`] (a peer that reads slowly is
/// dropped then).
fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let end = Instant::now() + WRITE_DEADLINE;
    for mut part in [head.as_bytes(), body.as_bytes()] {
        while !part.is_empty() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            s.set_write_timeout(Some(left))?;
            let n = s.write(part)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            part = &part[n..];
        }
    }
    s.flush()
}
