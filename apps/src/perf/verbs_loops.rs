//! The verbs benchmark loops (perftest's `run_iter_*`: send/write/read, latency and bandwidth),
//! generic over the verbs provider.
//!
//! Normal operation: the server listens and accepts `qps` connections; the client's connect
//! private data ([`Hello`], 44 octets) carries the test, the sizes (one size or a doubling
//! series), iterations or duration, and the client buffer's address, rkey and slot size; the
//! accept private data ([`Reply`], 20 octets) carries the server's. Each side maps one mempool
//! region (hugepages on request) holding, per QP, a send area filled with the side's pattern
//! and a receive area. The client then runs perftest's loops:
//!
//! - `send_lat`: SEND, wait for the echoed SEND; `write_lat`: RDMA WRITE whose last octet is an
//!   iteration counter, wait until the peer's WRITE brings the same counter back (memory
//!   polling); `read_lat`: one RDMA READ at a time. Every post is stamped; the round trips are
//!   the differences between consecutive stamps.
//! - BW tests: up to `tx_depth` WRs outstanding per QP, one signaled per `cq_mod`, post and
//!   completion stamps as perftest's `run_iter_bw`.
//!
//! The server echoes (send_lat, write_lat), posts receives (send_bw) or stays passive
//! (read_lat, write_bw, read_bw) until the client disconnects. Data is checked where a side
//! knows what must have arrived: first message of each size (SEND tests), the receive area
//! after each write_lat / read size, and for write_bw an RDMA READ of the peer's receive area
//! after the run.
//!
//! Recovery: the first verbs error, error completion, timeout or mismatch ends the run with a
//! [`PerfError`]; the client then disconnects, which ends the server. A server sees the client's
//! disconnect (event or flushed receives) as the normal end.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::{Device, Listener, Provider, QueuePair};
use rpcrdma_mempool::PageKind;

use super::{Config, PerfError, SizeResult};
use client::client_run;
pub use conn::validate;
use conn::{client_connect, server_accept};
pub use hello::{Hello, Reply};
use server::server_run;

mod client;
mod clock;
mod conn;
mod hello;
mod server;

/// Most QPs a run may use.
pub const MAX_QPS: u32 = 64;
/// Private data magic ("RPF1").
const MAGIC: u32 = 0x5250_4631;
/// Private data version.
const HELLO_VERSION: u8 = 1;
/// Octets of the connect private data.
pub const HELLO_LEN: usize = 44;
/// Octets of the accept private data.
pub const REPLY_LEN: usize = 20;
/// Pattern seed of the client's send areas.
pub const CLIENT_SEED: u8 = 0xc1;
/// Pattern seed of the server's send areas.
pub const SERVER_SEED: u8 = 0x5e;
/// Latency tests signal one send in this many (the others retire with it).
const LAT_SIGNAL_EVERY: u64 = 16;
/// Receives posted per QP in latency SEND tests.
const LAT_RECVS: u32 = 16;
/// Send queue depth of latency tests.
const LAT_SEND_WR: u32 = 64;
/// Spin iterations between connection-event checks in polling loops.
const EVENT_CHECK_SPINS: u32 = 1 << 16;
/// Completions polled per call.
const POLL_BATCH: usize = 64;
/// Flag bit in [`Hello`]: duration mode.
const FLAG_DURATION: u8 = 1;

/// The octet at offset `i` of a send area filled with `seed`.
#[inline]
pub fn pattern(seed: u8, i: u64) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8)
}

/// The write_lat marker of iteration `i`: 1..=255, never 0 (the initial receive content).
#[inline]
fn counter(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Slot area for messages up to `max_size`: at least 64 octets, 4 KiB aligned.
pub fn area_for(max_size: u64) -> u64 {
    (max_size.max(64) + 4095) & !4095
}

/// The duration-mode sampling margin: perftest's 2 s, at most a quarter of the duration.
pub fn margin_for(d: Duration) -> Duration {
    (d / 4).min(Duration::from_secs(2))
}

// ---------------------------------------------------------------------------------------------
// Observer
// ---------------------------------------------------------------------------------------------

/// One established QP.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// QP index.
    pub qp_index: u32,
    /// Local QP number.
    pub qpn: u32,
    /// Local address.
    pub local: SocketAddr,
    /// Peer address.
    pub remote: SocketAddr,
    /// What backs the local buffers.
    pub page_kind: PageKind,
}

/// Receives what a run produces, as it happens.
pub trait Observer {
    /// A QP is connected.
    fn connected(&mut self, _info: &ConnInfo) {}
    /// Every QP is connected and the measurements start, with `cfg` in effect (a server's
    /// sizes, iterations and duration are the client's). Print the result header now.
    fn running(&mut self, _cfg: &Config) {}
    /// A size finished; `hist` holds its samples in ns (latency: RTT / factor per iteration;
    /// BW: post-to-completion time of each signaled WR).
    fn result(&mut self, _r: &SizeResult, _hist: &Histogram<u64>) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// A latency histogram in ns: 1 ns .. 60 s, 3 significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds are valid")
}

// ---------------------------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------------------------

/// Runs the client side against a server at `server`; returns one result per size. The
/// observer sees each size as it finishes.
pub fn run_client<P: Provider>(
    cfg: &Config,
    dev: &P::Device,
    server: SocketAddr,
    obs: &mut dyn Observer,
) -> Result<Vec<SizeResult>, PerfError> {
    validate(cfg)?;
    let mut side = client_connect::<P>(cfg, dev, server, obs)?;
    let r = client_run(cfg, &mut side, obs);
    for qp in &mut side.qps {
        let _ = qp.disconnect();
    }
    r
}

/// Runs the server side: listens on `listen`, calls `ready` with the bound address, serves one
/// client (its test must be `cfg.test`; sizes, iterations and duration come from the client)
/// until it disconnects. `stop` (checked while waiting) aborts. The observer sees send_bw
/// results (measured from the first to the last receive of each size, no peak).
pub fn run_server<P: Provider>(
    cfg: &Config,
    dev: &P::Device,
    listen: SocketAddr,
    stop: &AtomicBool,
    ready: &mut dyn FnMut(SocketAddr),
    obs: &mut dyn Observer,
) -> Result<Config, PerfError> {
    let mut listener = dev.listen(listen, MAX_QPS)?;
    ready(listener.local_addr());
    let (eff, mut side) = server_accept::<P>(cfg, dev, &mut listener, stop, obs)?;
    drop(listener);
    obs.running(&eff);
    let r = server_run(&eff, &mut side, stop, obs);
    for qp in &mut side.qps {
        let _ = qp.disconnect();
    }
    match r {
        Ok(()) | Err(PerfError::Disconnected) => Ok(eff),
        Err(e) => Err(e),
    }
}

/// Runs both sides in this process: the server on a thread pinned to `cores.1`, the client
/// on the calling thread, pinned to `cores.0` (when given). `server_addr` is where the server
/// listens (the server device's address).
pub fn run_loopback<P: Provider>(
    cfg: &Config,
    client: &P::Device,
    server: &P::Device,
    server_addr: SocketAddr,
    cores: (Option<core_affinity::CoreId>, Option<core_affinity::CoreId>),
    obs: &mut dyn Observer,
) -> Result<Vec<SizeResult>, PerfError> {
    validate(cfg)?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<SocketAddr>();
        let stop_ref = &stop;
        let h = s.spawn(move || {
            if let Some(c) = cores.1 {
                core_affinity::set_for_current(c);
            }
            run_server::<P>(
                cfg,
                server,
                server_addr,
                stop_ref,
                &mut |a| {
                    let _ = tx.send(a);
                },
                &mut NoObserver,
            )
        });
        if let Some(c) = cores.0 {
            core_affinity::set_for_current(c);
        }
        let client_result = match rx.recv_timeout(cfg.connect_timeout) {
            Ok(addr) => run_client::<P>(cfg, client, addr, obs),
            Err(_) => Err(PerfError::Timeout("the server to listen")),
        };
        if client_result.is_err() {
            // Relaxed: a plain request flag; the join below synchronises.
            stop.store(true, Ordering::Relaxed);
        }
        let server_result = h
            .join()
            .unwrap_or_else(|_| Err(PerfError::Protocol("server thread panicked".into())));
        match (client_result, server_result) {
            // The server failed first and hung up: its error is the cause.
            (Err(PerfError::Disconnected), Err(e)) => Err(PerfError::Peer(Box::new(e))),
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(PerfError::Peer(Box::new(e))),
            (Ok(r), Ok(_)) => Ok(r),
        }
    })
}
