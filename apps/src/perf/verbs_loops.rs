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
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rpcrdma_engine::verbs::{
    Access, CmEventKind, Completion, CompletionQueue, ConnRequest, Device, DeviceCaps, Keys,
    Listener, Provider, QpInit, QpOptions, QueuePair, RecvWr, SendFlags, SendOp, SendWr, Sge,
    VerbsError, WcOpcode, WcStatus, RNR_RETRY_INFINITE,
};
use rpcrdma_mempool::{HugePagePolicy, PageKind, Region, RegionOptions};

use super::report::Progress;
use super::stats::{lat_duration, BwStats, LatStats};
use super::{Config, Outcome, PerfError, SizeResult, Test, MAX_ITERS, MAX_SIZE, MIN_ITERS};

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
const EVENT_CHECK_SPINS: u32 = 4096;
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
// Private data
// ---------------------------------------------------------------------------------------------

/// The connect private data: what the server needs to mirror the client's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The test.
    pub test: Test,
    /// Duration mode.
    pub duration_ms: Option<u32>,
    /// Index of this QP.
    pub qp_index: u16,
    /// QPs the client opens.
    pub qps: u16,
    /// Inline threshold.
    pub inline: u16,
    /// First size.
    pub first_size: u32,
    /// Last size (sizes double from the first).
    pub last_size: u32,
    /// Iterations per size.
    pub iters: u32,
    /// Client buffer base address.
    pub addr: u64,
    /// Client buffer rkey.
    pub rkey: u32,
    /// Client slot area.
    pub area: u32,
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get64(b: &[u8], at: usize) -> u64 {
    (u64::from(get32(b, at)) << 32) | u64::from(get32(b, at + 4))
}

impl Hello {
    /// Encodes (big-endian): magic, version, test, flags, qp_index(8), qps(16), inline(16),
    /// first, last, iters, duration_ms, addr(64), rkey, area.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        put32(&mut b, 0, MAGIC);
        b[4] = HELLO_VERSION;
        b[5] = self.test.code();
        b[6] = if self.duration_ms.is_some() {
            FLAG_DURATION
        } else {
            0
        };
        b[7] = self.qp_index as u8;
        b[8..10].copy_from_slice(&self.qps.to_be_bytes());
        b[10..12].copy_from_slice(&self.inline.to_be_bytes());
        put32(&mut b, 12, self.first_size);
        put32(&mut b, 16, self.last_size);
        put32(&mut b, 20, self.iters);
        put32(&mut b, 24, self.duration_ms.unwrap_or(0));
        b[28..36].copy_from_slice(&self.addr.to_be_bytes());
        put32(&mut b, 36, self.rkey);
        put32(&mut b, 40, self.area);
        b
    }

    /// Decodes and validates untrusted private data.
    pub fn decode(b: &[u8]) -> Result<Hello, PerfError> {
        let bad = |why: &str| PerfError::Protocol(format!("bad connect private data: {why}"));
        if b.len() < HELLO_LEN {
            return Err(bad("too short (not an rpcrdma-perf client?)"));
        }
        if get32(b, 0) != MAGIC {
            return Err(bad("wrong magic (not an rpcrdma-perf client?)"));
        }
        if b[4] != HELLO_VERSION {
            return Err(bad("unknown version"));
        }
        let test = Test::from_code(b[5]).ok_or_else(|| bad("unknown test"))?;
        let duration_ms = (b[6] & FLAG_DURATION != 0).then(|| get32(b, 24));
        let h = Hello {
            test,
            duration_ms,
            qp_index: u16::from(b[7]),
            qps: u16::from_be_bytes([b[8], b[9]]),
            inline: u16::from_be_bytes([b[10], b[11]]),
            first_size: get32(b, 12),
            last_size: get32(b, 16),
            iters: get32(b, 20),
            addr: get64(b, 28),
            rkey: get32(b, 36),
            area: get32(b, 40),
        };
        let (first, last) = (u64::from(h.first_size), u64::from(h.last_size));
        if h.qps == 0 || u32::from(h.qps) > MAX_QPS || h.qp_index >= h.qps {
            return Err(bad("QP count or index out of range"));
        }
        if first == 0 || last > MAX_SIZE || last < first || !(last / first).is_power_of_two() {
            return Err(bad("sizes out of range"));
        }
        if h.last_size % h.first_size != 0 {
            return Err(bad("sizes are not a doubling series"));
        }
        if u64::from(h.area) != area_for(last) {
            return Err(bad("slot area does not match the sizes"));
        }
        match h.duration_ms {
            Some(0) => return Err(bad("zero duration")),
            Some(_) if first != last => return Err(bad("duration mode with several sizes")),
            None if !(MIN_ITERS..=MAX_ITERS).contains(&u64::from(h.iters)) => {
                return Err(bad("iterations out of range"))
            }
            _ => {}
        }
        Ok(h)
    }

    /// The sizes the client runs.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = u64::from(self.first_size);
        while s <= u64::from(self.last_size) {
            v.push(s);
            s *= 2;
        }
        v
    }
}

/// The accept private data: the server buffer's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Server buffer base address.
    pub addr: u64,
    /// Server buffer rkey.
    pub rkey: u32,
    /// Server slot area.
    pub area: u32,
}

impl Reply {
    /// Encodes (big-endian): magic, addr(64), rkey, area.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        put32(&mut b, 0, MAGIC);
        b[4..12].copy_from_slice(&self.addr.to_be_bytes());
        put32(&mut b, 12, self.rkey);
        put32(&mut b, 16, self.area);
        b
    }

    /// Decodes untrusted private data; the area must be the one expected.
    pub fn decode(b: &[u8], want_area: u64) -> Result<Reply, PerfError> {
        if b.len() < REPLY_LEN || get32(b, 0) != MAGIC {
            return Err(PerfError::Protocol(
                "bad accept private data (not an rpcrdma-perf server?)".into(),
            ));
        }
        let r = Reply {
            addr: get64(b, 4),
            rkey: get32(b, 12),
            area: get32(b, 16),
        };
        if u64::from(r.area) != want_area {
            return Err(PerfError::Protocol(format!(
                "server slot area {} differs from ours {want_area}",
                r.area
            )));
        }
        Ok(r)
    }
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// One side's buffers: a registered mempool region, per QP a send area then a receive area.
struct Mem {
    region: Region,
    keys: Keys,
    area: u64,
}

impl Mem {
    fn new<P: Provider>(
        pd: &P::Pd,
        qps: u32,
        area: u64,
        hugepages: bool,
    ) -> Result<Mem, PerfError> {
        let len = u64::from(qps) * 2 * area;
        let opts = RegionOptions {
            hugepages: if hugepages {
                HugePagePolicy::Prefer
            } else {
                HugePagePolicy::Never
            },
            // Registration pins the memory on real devices; no mlock (RLIMIT_MEMLOCK).
            lock: false,
            ..RegionOptions::default()
        };
        let region =
            Region::new(len as usize, &opts).map_err(|e| PerfError::Memory(e.to_string()))?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let keys = region
            .register(pd, access)
            .map_err(|e| PerfError::Memory(format!("register: {e}")))?;
        Ok(Mem { region, keys, area })
    }

    fn base(&self) -> u64 {
        self.region.as_ptr() as u64
    }

    fn send_off(&self, q: u32) -> u64 {
        u64::from(q) * 2 * self.area
    }

    fn recv_off(&self, q: u32) -> u64 {
        self.send_off(q) + self.area
    }

    fn sge(&self, off: u64, len: u64) -> Sge {
        Sge {
            addr: self.base() + off,
            len: len as u32,
            lkey: self.keys.lkey,
        }
    }

    fn ptr(&self, off: u64) -> *mut u8 {
        debug_assert!((off as usize) < self.region.len());
        // SAFETY: callers pass offsets inside the region (slot arithmetic on `area`).
        unsafe { self.region.as_ptr().add(off as usize) }
    }

    /// Fills every send area with `seed`'s pattern and zeroes the receive areas. Called before
    /// the peer knows the buffer's keys.
    fn fill(&self, qps: u32, seed: u8) {
        for q in 0..qps {
            let s = self.ptr(self.send_off(q));
            let r = self.ptr(self.recv_off(q));
            for i in 0..self.area {
                // SAFETY: both areas are `area` octets inside the region; nothing else accesses
                // them yet.
                unsafe {
                    s.add(i as usize).write(pattern(seed, i));
                    r.add(i as usize).write(0);
                }
            }
        }
    }

    /// Reads one octet the peer may be writing (RDMA memory polling).
    #[inline]
    fn load(&self, off: u64) -> u8 {
        // SAFETY: offset inside the region. Volatile: the peer's device writes it.
        let v = unsafe { self.ptr(off).read_volatile() };
        // Acquire fence: pairs with the device's (soft: the peer thread's) stores of the
        // message, so the octets before the polled one are seen once it is.
        fence(Ordering::Acquire);
        v
    }

    /// Writes one octet of our own send area.
    #[inline]
    fn store(&self, off: u64, v: u8) {
        // SAFETY: offset inside the region; our send area is only read by our device.
        unsafe { self.ptr(off).write_volatile(v) };
    }

    /// Checks `[off, off + len)` against `seed`'s pattern (offsets relative to the area).
    fn check(&self, off: u64, len: u64, seed: u8, what: &str) -> Result<(), PerfError> {
        // Acquire fence: pairs with the completion / poll that told us the data arrived.
        fence(Ordering::Acquire);
        let p = self.ptr(off);
        for i in 0..len {
            // SAFETY: inside the region. Volatile: a later message of the same content may be
            // landing concurrently (SEND streams reuse one receive area).
            let got = unsafe { p.add(i as usize).read_volatile() };
            let want = pattern(seed, i);
            if got != want {
                return Err(PerfError::Verify(format!(
                    "{what}: octet {i} of {len} is {got:#04x}, expected {want:#04x}"
                )));
            }
        }
        Ok(())
    }

    fn page_kind(&self) -> PageKind {
        self.region.page_kind()
    }
}

/// The peer's buffer coordinates.
#[derive(Debug, Clone, Copy)]
struct PeerMem {
    addr: u64,
    rkey: u32,
    area: u64,
}

impl PeerMem {
    fn send_addr(&self, q: u32) -> u64 {
        self.addr + u64::from(q) * 2 * self.area
    }

    fn recv_addr(&self, q: u32) -> u64 {
        self.send_addr(q) + self.area
    }
}

// ---------------------------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------------------------

/// One side of a run. Field order is drop order: QPs, CQ, memory, PD.
struct Side<P: Provider> {
    qps: Vec<P::Qp>,
    cq: P::Cq,
    mem: Mem,
    _pd: P::Pd,
    peer: PeerMem,
    wcs: Vec<Completion>,
    /// Client: a disconnect is an error. Server: it is the end of the run.
    server: bool,
    spins: u32,
    /// Signaled sends posted and not yet polled.
    pending: u64,
}

impl<P: Provider> Side<P> {
    /// Polls once; fails on an error completion (a flush on the server means "client gone").
    fn poll(&mut self) -> Result<usize, PerfError> {
        let n = self.cq.poll(&mut self.wcs)?;
        for wc in &self.wcs[..n] {
            if wc.status.is_success() {
                if !wc.opcode.is_recv() {
                    self.pending = self.pending.saturating_sub(1);
                }
            } else {
                if wc.status == WcStatus::WR_FLUSH_ERR {
                    return Err(PerfError::Disconnected);
                }
                return Err(PerfError::Completion {
                    status: wc.status,
                    opcode: wc.opcode,
                    wr_id: wc.wr_id,
                });
            }
        }
        Ok(n)
    }

    /// Fails with `Disconnected` once any QP reported the end of its connection.
    fn check_events(&mut self) -> Result<(), PerfError> {
        for qp in &mut self.qps {
            while let Some(ev) = qp.poll_event()? {
                if matches!(
                    ev.kind,
                    CmEventKind::Disconnected | CmEventKind::DeviceRemoval
                ) {
                    return Err(PerfError::Disconnected);
                }
            }
        }
        Ok(())
    }

    /// Called in every idle spin: checks events every [`EVENT_CHECK_SPINS`] calls.
    #[inline]
    fn idle(&mut self, stop: Option<&AtomicBool>) -> Result<(), PerfError> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % EVENT_CHECK_SPINS == 0 {
            // Relaxed: a plain request flag; nothing is published through it.
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Err(PerfError::Disconnected);
            }
            self.check_events()?;
        }
        core::hint::spin_loop();
        Ok(())
    }

    fn post(&mut self, q: u32, wr: &SendWr<'_, P>) -> Result<(), PerfError> {
        let qp = &mut self.qps[q as usize];
        qp.queue_send(wr)?;
        qp.flush_send()?;
        if wr.flags.contains(SendFlags::SIGNALED) {
            self.pending += 1;
        }
        Ok(())
    }

    /// Polls until every signaled send posted so far has completed.
    fn reap(&mut self, stop: Option<&AtomicBool>) -> Result<(), PerfError> {
        while self.pending > 0 {
            if self.poll()? == 0 {
                self.idle(stop)?;
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, q: u32, n: u32) -> Result<(), PerfError> {
        post_recvs::<P>(&mut self.qps[q as usize], &self.mem, q, n)?;
        Ok(())
    }
}

/// Posts `n` receives into QP `q`'s receive area (one doorbell).
fn post_recvs<P: Provider>(qp: &mut P::Qp, mem: &Mem, q: u32, n: u32) -> Result<(), VerbsError> {
    let sge = [mem.sge(mem.recv_off(q), mem.area)];
    for _ in 0..n {
        qp.queue_recv(&RecvWr {
            wr_id: u64::from(q),
            sgl: &sge,
        })?;
    }
    qp.flush_recv()
}

/// Receives the server posts on each QP before it accepts: the send tests' first messages must
/// find them (iWARP has no RNR retry: a SEND that meets an empty receive queue terminates the
/// connection; on IB / RoCE it would cost an RNR back-off).
fn server_recvs<P: Provider>(test: Test, qp: &P::Qp) -> u32 {
    match test {
        Test::SendLat => LAT_RECVS,
        Test::SendBw => qp.options().max_recv_wr,
        _ => 0,
    }
}

fn qp_options(cfg: &Config, caps: &DeviceCaps) -> QpOptions {
    let send_wr = if cfg.test.is_latency() {
        LAT_SEND_WR
    } else {
        // One spare slot for the verification READ after a duration run.
        cfg.tx_depth + 1
    };
    let recv_wr = if !cfg.test.is_send() {
        1
    } else if cfg.test.is_latency() {
        LAT_RECVS
    } else {
        cfg.rx_depth
    };
    let rd = caps
        .max_qp_init_rd_atom
        .min(caps.max_qp_rd_atom)
        .clamp(1, 16) as u8;
    QpOptions {
        max_send_wr: send_wr.min(caps.max_qp_wr),
        max_recv_wr: recv_wr.min(caps.max_qp_wr),
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: cfg.inline.min(caps.max_inline_data),
        rnr_retry_count: RNR_RETRY_INFINITE,
        retry_count: 7,
        initiator_depth: rd,
        responder_resources: rd,
    }
}

fn cq_depth(qps: u32, o: &QpOptions, caps: &DeviceCaps) -> u32 {
    (qps * (o.max_send_wr + o.max_recv_wr) + 64).min(caps.max_cqe)
}

/// Checks what the verbs loops rely on.
pub fn validate(cfg: &Config) -> Result<(), PerfError> {
    let bad = |s: String| Err(PerfError::Config(s));
    if cfg.sizes.is_empty() {
        return bad("no message size".into());
    }
    if cfg.sizes.iter().any(|&s| s == 0 || s > MAX_SIZE) {
        return bad(format!("message size must be 1..={MAX_SIZE}"));
    }
    for w in cfg.sizes.windows(2) {
        if w[1] != w[0] * 2 {
            return bad("sizes must be one size or a doubling series".into());
        }
    }
    match cfg.duration {
        Some(d) if d.is_zero() || d.as_millis() > u128::from(u32::MAX) => {
            return bad("duration out of range".into())
        }
        Some(_) if cfg.sizes.len() > 1 => {
            return bad("duration mode (-D) runs one size (no -a)".into())
        }
        None if !(MIN_ITERS..=MAX_ITERS).contains(&cfg.iters) => {
            return bad(format!("iterations must be {MIN_ITERS}..={MAX_ITERS}"))
        }
        _ => {}
    }
    if cfg.qps == 0 || cfg.qps > MAX_QPS {
        return bad(format!("QPs must be 1..={MAX_QPS}"));
    }
    if cfg.qps > 1 && cfg.test.is_latency() {
        return bad("multiple QPs only available on bw tests".into());
    }
    if cfg.tx_depth == 0 || cfg.cq_mod == 0 || cfg.cq_mod > cfg.tx_depth {
        return bad("need 1 <= cq_mod <= tx_depth".into());
    }
    if cfg.test.is_send() && cfg.rx_depth == 0 {
        return bad("rx depth must be at least 1".into());
    }
    Ok(())
}

fn wait_established<P: Provider>(qp: &mut P::Qp, timeout: Duration) -> Result<(), PerfError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(ev) = qp.poll_event()? {
            match ev.kind {
                CmEventKind::Established => return Ok(()),
                CmEventKind::Rejected => {
                    let why = String::from_utf8_lossy(ev.private_data.as_slice()).into_owned();
                    return Err(PerfError::Protocol(format!(
                        "connection rejected (reason {}){}{}",
                        ev.status,
                        if why.is_empty() { "" } else { ": " },
                        why
                    )));
                }
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                    return Err(PerfError::Disconnected)
                }
                other => {
                    return Err(PerfError::Protocol(format!(
                        "connect failed: {other:?} (status {})",
                        ev.status
                    )))
                }
            }
        }
        if Instant::now() > deadline {
            return Err(PerfError::Timeout("the connection to be established"));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn client_connect<P: Provider>(
    cfg: &Config,
    dev: &P::Device,
    server: SocketAddr,
    obs: &mut dyn Observer,
) -> Result<Side<P>, PerfError> {
    let caps = *dev.caps();
    let pd = dev.alloc_pd()?;
    let area = area_for(cfg.max_size());
    let mem = Mem::new::<P>(&pd, cfg.qps, area, cfg.hugepages)?;
    mem.fill(cfg.qps, CLIENT_SEED);
    let opts = qp_options(cfg, &caps);
    let cq = dev.create_cq(cq_depth(cfg.qps, &opts, &caps))?;
    let mut qps = Vec::with_capacity(cfg.qps as usize);
    let mut peer: Option<PeerMem> = None;
    for q in 0..cfg.qps {
        let hello = Hello {
            test: cfg.test,
            duration_ms: cfg.duration.map(|d| d.as_millis() as u32),
            qp_index: q as u16,
            qps: cfg.qps as u16,
            inline: opts.max_inline_data.min(u32::from(u16::MAX)) as u16,
            first_size: cfg.sizes[0] as u32,
            last_size: cfg.max_size() as u32,
            iters: cfg.iters.min(u64::from(u32::MAX)) as u32,
            addr: mem.base(),
            rkey: mem.keys.rkey,
            area: area as u32,
        };
        let init = QpInit::<P> {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts,
        };
        let mut qp = dev.connect(server, init, &hello.encode())?;
        // The first event of an active QP is the outcome of the connect.
        let deadline = Instant::now() + cfg.connect_timeout;
        let ev = loop {
            if let Some(ev) = qp.poll_event()? {
                break ev;
            }
            if Instant::now() > deadline {
                return Err(PerfError::Timeout("the server to accept"));
            }
            std::thread::sleep(Duration::from_micros(50));
        };
        match ev.kind {
            CmEventKind::Established => {}
            CmEventKind::Rejected => {
                let why = String::from_utf8_lossy(ev.private_data.as_slice()).into_owned();
                return Err(PerfError::Protocol(format!(
                    "connection rejected (reason {}){}{}",
                    ev.status,
                    if why.is_empty() { "" } else { ": " },
                    why
                )));
            }
            other => {
                return Err(PerfError::Protocol(format!(
                    "connect to {server} failed: {other:?} (status {})",
                    ev.status
                )))
            }
        }
        let r = Reply::decode(ev.private_data.as_slice(), area)?;
        let p = PeerMem {
            addr: r.addr,
            rkey: r.rkey,
            area,
        };
        if peer.is_some_and(|old| old.addr != p.addr || old.rkey != p.rkey) {
            return Err(PerfError::Protocol(
                "server buffers differ between QPs".into(),
            ));
        }
        peer = Some(p);
        obs.connected(&ConnInfo {
            qp_index: q,
            qpn: qp.qp_num(),
            local: qp.local_addr(),
            remote: qp.peer_addr(),
            page_kind: mem.page_kind(),
        });
        qps.push(qp);
    }
    let peer = peer.ok_or_else(|| PerfError::Config("no QP".into()))?;
    Ok(Side {
        qps,
        cq,
        mem,
        _pd: pd,
        peer,
        wcs: vec![Completion::default(); POLL_BATCH],
        server: false,
        spins: 0,
        pending: 0,
    })
}

fn wait_request<P: Provider>(
    l: &mut P::Listener,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> Result<P::ConnRequest, PerfError> {
    loop {
        if let Some(r) = l.poll()? {
            return Ok(r);
        }
        // Relaxed: a plain request flag; nothing is published through it.
        if stop.load(Ordering::Relaxed) {
            return Err(PerfError::Timeout("a client (stopped)"));
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Err(PerfError::Timeout("the client's next QP"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn reject<P: Provider>(req: P::ConnRequest, e: PerfError) -> PerfError {
    let msg = e.to_string();
    let n = msg
        .len()
        .min(rpcrdma_engine::verbs::PRIVATE_DATA_REJECT_MAX);
    let _ = req.reject(&msg.as_bytes()[..n]);
    e
}

/// The server's effective configuration: the client's test parameters, our local settings.
fn server_config(local: &Config, h: &Hello) -> Config {
    let mut c = local.clone();
    c.sizes = h.sizes();
    c.iters = u64::from(h.iters);
    c.duration = h.duration_ms.map(|ms| Duration::from_millis(u64::from(ms)));
    c.qps = u32::from(h.qps);
    c.inline = u32::from(h.inline);
    c.tx_depth = c.tx_depth.max(1);
    c.cq_mod = c.cq_mod.clamp(1, c.tx_depth);
    c
}

#[allow(clippy::type_complexity)]
fn server_accept<P: Provider>(
    local: &Config,
    dev: &P::Device,
    listener: &mut P::Listener,
    stop: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<(Config, Side<P>), PerfError> {
    let caps = *dev.caps();
    let first = wait_request::<P>(listener, stop, None)?;
    let hello = match Hello::decode(first.private_data()) {
        Ok(h) if h.test != local.test => {
            let e = PerfError::Protocol(format!(
                "the client runs {} but this server runs {}",
                h.test, local.test
            ));
            return Err(reject::<P>(first, e));
        }
        Ok(h) if h.qp_index != 0 => {
            return Err(reject::<P>(
                first,
                PerfError::Protocol("first QP has index != 0".into()),
            ))
        }
        Ok(h) => h,
        Err(e) => return Err(reject::<P>(first, e)),
    };
    let cfg = server_config(local, &hello);
    let pd = dev.alloc_pd()?;
    let area = area_for(cfg.max_size());
    let mem = Mem::new::<P>(&pd, cfg.qps, area, cfg.hugepages)?;
    mem.fill(cfg.qps, SERVER_SEED);
    let opts = qp_options(&cfg, &caps);
    let cq = dev.create_cq(cq_depth(cfg.qps, &opts, &caps))?;
    let reply = Reply {
        addr: mem.base(),
        rkey: mem.keys.rkey,
        area: area as u32,
    }
    .encode();
    let peer = PeerMem {
        addr: hello.addr,
        rkey: hello.rkey,
        area,
    };
    let mut qps: Vec<P::Qp> = Vec::with_capacity(cfg.qps as usize);
    let mut req = Some(first);
    for q in 0..cfg.qps {
        let r = match req.take() {
            Some(r) => r,
            None => {
                let deadline = Instant::now() + cfg.connect_timeout;
                let r = wait_request::<P>(listener, stop, Some(deadline))?;
                match Hello::decode(r.private_data()) {
                    Ok(h)
                        if h.qp_index as u32 == q
                            && h.test == hello.test
                            && h.addr == hello.addr
                            && h.rkey == hello.rkey => {}
                    Ok(_) => {
                        return Err(reject::<P>(
                            r,
                            PerfError::Protocol("QP does not belong to this run".into()),
                        ))
                    }
                    Err(e) => return Err(reject::<P>(r, e)),
                }
                r
            }
        };
        let init = QpInit::<P> {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts,
        };
        let test = cfg.test;
        let mut qp = r.accept_prepared(init, &reply, &mut |qp| {
            post_recvs::<P>(qp, &mem, q, server_recvs::<P>(test, qp))
        })?;
        wait_established::<P>(&mut qp, cfg.connect_timeout)?;
        obs.connected(&ConnInfo {
            qp_index: q,
            qpn: qp.qp_num(),
            local: qp.local_addr(),
            remote: qp.peer_addr(),
            page_kind: mem.page_kind(),
        });
        qps.push(qp);
    }
    Ok((
        cfg,
        Side {
            qps,
            cq,
            mem,
            _pd: pd,
            peer,
            wcs: vec![Completion::default(); POLL_BATCH],
            server: true,
            spins: 0,
            pending: 0,
        },
    ))
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

// ---------------------------------------------------------------------------------------------
// Client loops
// ---------------------------------------------------------------------------------------------

#[inline]
fn now_ns(clk: &Instant) -> u64 {
    clk.elapsed().as_nanos() as u64
}

fn client_run<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    obs: &mut dyn Observer,
) -> Result<Vec<SizeResult>, PerfError> {
    let run_start = Instant::now();
    let mut hist = new_histogram();
    let mut progress = Progress::new(cfg.progress);
    let msgs = (cfg.iters * u64::from(cfg.qps)) as usize;
    // Every stamp array is allocated once for the whole run.
    let mut stamps: Vec<u64> = match (cfg.duration, cfg.test.is_latency()) {
        (None, true) => vec![0; cfg.iters as usize],
        (None, false) if cfg.peak => vec![0; msgs],
        _ => Vec::new(),
    };
    let mut completed: Vec<u64> = if cfg.duration.is_none() && !cfg.test.is_latency() && cfg.peak {
        vec![0; msgs]
    } else {
        Vec::new()
    };
    let mut bw = BwState::new(cfg);
    if cfg.test == Test::SendLat {
        side.post_recv(0, LAT_RECVS)?;
    }
    let mut results = Vec::with_capacity(cfg.sizes.len());
    obs.running(cfg);
    for &size in &cfg.sizes {
        hist.reset();
        progress.start();
        let start = run_start.elapsed();
        let mut lat = LatRun {
            cfg,
            size,
            hist: &mut hist,
            progress: &mut progress,
            stamps: &mut stamps,
        };
        let (iters, outcome) = match cfg.test {
            Test::SendLat => send_lat_client(&mut lat, side)?,
            Test::WriteLat => write_lat_client(&mut lat, side)?,
            Test::ReadLat => read_lat_client(&mut lat, side)?,
            _ => bw_client(
                cfg,
                side,
                size,
                &mut bw,
                &mut stamps,
                &mut completed,
                &mut hist,
                &mut progress,
            )?,
        };
        progress.clear();
        let r = SizeResult {
            size,
            iters,
            outcome,
            start,
            elapsed: run_start.elapsed() - start,
        };
        obs.result(&r, &hist);
        results.push(r);
    }
    Ok(results)
}

struct LatRun<'a> {
    cfg: &'a Config,
    size: u64,
    hist: &'a mut Histogram<u64>,
    progress: &'a mut Progress,
    stamps: &'a mut Vec<u64>,
}

impl LatRun<'_> {
    /// perftest's latency loop around `step(i)` (post iteration `i` and wait for its answer).
    fn run(
        &mut self,
        rtt_factor: u32,
        mut step: impl FnMut(u64) -> Result<(), PerfError>,
    ) -> Result<(u64, Outcome), PerfError> {
        let clk = Instant::now();
        let factor = u64::from(rtt_factor);
        match self.cfg.duration {
            None => {
                let n = self.cfg.iters as usize;
                let stamps = &mut self.stamps[..n];
                for (i, stamp) in stamps.iter_mut().enumerate() {
                    *stamp = now_ns(&clk);
                    step(i as u64)?;
                    if i & 0xfff == 0xfff {
                        self.progress.tick(self.size, i as u64, n as u64);
                    }
                }
                for i in 0..n - 1 {
                    stamps[i] = stamps[i + 1].saturating_sub(stamps[i]);
                    self.hist.saturating_record((stamps[i] / factor).max(1));
                }
                let s = LatStats::from_round_trips(&mut stamps[..n - 1], rtt_factor)
                    .ok_or_else(|| PerfError::Config("too few iterations".into()))?;
                Ok((n as u64, Outcome::Lat(s)))
            }
            Some(d) => {
                let m = margin_for(d).as_nanos() as u64;
                let end = d.as_nanos() as u64;
                let (mut count, mut span) = (0u64, 0u64);
                let mut prev = now_ns(&clk);
                let mut i = 0u64;
                loop {
                    step(i)?;
                    i += 1;
                    let now = now_ns(&clk);
                    let rtt = now - prev;
                    prev = now;
                    if now >= m && now < end - m {
                        count += 1;
                        span += rtt;
                        self.hist.saturating_record((rtt / factor).max(1));
                    }
                    if now >= end {
                        break;
                    }
                    if i & 0xfff == 0 {
                        self.progress.tick(self.size, i, 0);
                    }
                }
                let (avg, tps) = lat_duration(count, span, rtt_factor);
                Ok((count, Outcome::LatDuration { avg, tps }))
            }
        }
    }
}

fn signaled(i: u64, every: u64) -> SendFlags {
    if i % every == every - 1 {
        SendFlags::SIGNALED
    } else {
        SendFlags::NONE
    }
}

fn inline_flag(size: u64, inline: u32) -> SendFlags {
    if size <= u64::from(inline) {
        SendFlags::INLINE
    } else {
        SendFlags::NONE
    }
}

fn send_lat_client<P: Provider>(
    lat: &mut LatRun<'_>,
    side: &mut Side<P>,
) -> Result<(u64, Outcome), PerfError> {
    let size = lat.size;
    let sge = [side.mem.sge(side.mem.send_off(0), size)];
    let inline = inline_flag(
        size,
        lat.cfg.inline.min(side.qps[0].options().max_inline_data),
    );
    let r = lat.run(2, |i| {
        let wr = SendWr::<P> {
            wr_id: i,
            op: SendOp::Send,
            sgl: &sge,
            flags: signaled(i, LAT_SIGNAL_EVERY) | inline,
        };
        side.post(0, &wr)?;
        loop {
            let n = side.poll()?;
            let mut got = None;
            for wc in &side.wcs[..n] {
                if wc.opcode.is_recv() {
                    got = Some(wc.byte_len);
                }
            }
            if let Some(len) = got {
                if u64::from(len) != size {
                    return Err(PerfError::Verify(format!(
                        "echo of {len} octets, expected {size}"
                    )));
                }
                if i == 0 {
                    side.mem
                        .check(side.mem.recv_off(0), size, SERVER_SEED, "send_lat echo")?;
                }
                side.post_recv(0, 1)?;
                return Ok(());
            }
            side.idle(None)?;
        }
    })?;
    Ok(r)
}

fn write_lat_client<P: Provider>(
    lat: &mut LatRun<'_>,
    side: &mut Side<P>,
) -> Result<(u64, Outcome), PerfError> {
    let size = lat.size;
    let sge = [side.mem.sge(side.mem.send_off(0), size)];
    let mark = side.mem.send_off(0) + size - 1;
    let polled = side.mem.recv_off(0) + size - 1;
    let inline = inline_flag(
        size,
        lat.cfg.inline.min(side.qps[0].options().max_inline_data),
    );
    let op = SendOp::RdmaWrite {
        remote_addr: side.peer.recv_addr(0),
        rkey: side.peer.rkey,
    };
    let r = lat.run(2, |i| {
        let c = counter(i);
        side.mem.store(mark, c);
        let flags = signaled(i, LAT_SIGNAL_EVERY) | inline;
        side.post(
            0,
            &SendWr::<P> {
                wr_id: i,
                op,
                sgl: &sge,
                flags,
            },
        )?;
        while side.mem.load(polled) != c {
            side.idle(None)?;
            if side.spins % 1024 == 0 {
                side.poll()?;
            }
        }
        if flags.contains(SendFlags::SIGNALED) {
            // Reap the completion (it retires the unsignaled writes before it).
            side.reap(None)?;
        }
        Ok(())
    })?;
    // The echo carried the server's pattern; restore our marker octet for the next size.
    if size > 1 {
        side.mem.check(
            side.mem.recv_off(0),
            size - 1,
            SERVER_SEED,
            "write_lat echo",
        )?;
    }
    side.mem.store(mark, pattern(CLIENT_SEED, size - 1));
    side.reap(None)?;
    Ok(r)
}

fn read_lat_client<P: Provider>(
    lat: &mut LatRun<'_>,
    side: &mut Side<P>,
) -> Result<(u64, Outcome), PerfError> {
    let size = lat.size;
    let sge = [side.mem.sge(side.mem.recv_off(0), size)];
    let op = SendOp::RdmaRead {
        remote_addr: side.peer.send_addr(0),
        rkey: side.peer.rkey,
    };
    let r = lat.run(1, |i| {
        side.post(
            0,
            &SendWr::<P> {
                wr_id: i,
                op,
                sgl: &sge,
                flags: SendFlags::SIGNALED,
            },
        )?;
        side.reap(None)
    })?;
    side.mem
        .check(side.mem.recv_off(0), size, SERVER_SEED, "read_lat data")?;
    Ok(r)
}

/// Per-run BW counters, allocated once.
struct BwState {
    scnt: Vec<u64>,
    ccnt: Vec<u64>,
    /// Post time of each QP's outstanding signaled WRs (a ring per QP).
    sig_post: Vec<u64>,
    sig_ring: usize,
    sig_head: Vec<u64>,
    sig_tail: Vec<u64>,
}

impl BwState {
    fn new(cfg: &Config) -> BwState {
        let q = cfg.qps as usize;
        let ring = (cfg.tx_depth / cfg.cq_mod.max(1)) as usize + 2;
        BwState {
            scnt: vec![0; q],
            ccnt: vec![0; q],
            sig_post: vec![0; q * ring],
            sig_ring: ring,
            sig_head: vec![0; q],
            sig_tail: vec![0; q],
        }
    }

    fn reset(&mut self) {
        self.scnt.iter_mut().for_each(|x| *x = 0);
        self.ccnt.iter_mut().for_each(|x| *x = 0);
        self.sig_head.iter_mut().for_each(|x| *x = 0);
        self.sig_tail.iter_mut().for_each(|x| *x = 0);
    }
}

#[allow(clippy::too_many_arguments)]
fn bw_client<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    size: u64,
    st: &mut BwState,
    tposted: &mut [u64],
    tcompleted: &mut [u64],
    hist: &mut Histogram<u64>,
    progress: &mut Progress,
) -> Result<(u64, Outcome), PerfError> {
    st.reset();
    let qps = cfg.qps;
    let iters = cfg.iters;
    let tx = u64::from(cfg.tx_depth);
    let cq_mod = u64::from(cfg.cq_mod);
    let inline = if cfg.test.is_read() {
        SendFlags::NONE
    } else {
        inline_flag(size, cfg.inline.min(side.qps[0].options().max_inline_data))
    };
    let duration = cfg.duration;
    let peak = duration.is_none() && cfg.peak;
    let tot = if duration.is_some() {
        u64::MAX
    } else {
        iters * u64::from(qps)
    };
    if peak {
        tcompleted[..tot as usize].iter_mut().for_each(|x| *x = 0);
    }
    let clk = Instant::now();
    let (m, end) = match duration {
        Some(d) => (margin_for(d).as_nanos() as u64, d.as_nanos() as u64),
        None => (0, u64::MAX),
    };
    let (mut totscnt, mut totccnt) = (0u64, 0u64);
    let (mut sampled, mut sample_start, mut sample_end) = (0u64, 0u64, 0u64);
    let first_post = now_ns(&clk);
    let mut loops = 0u32;
    loop {
        {
            for q in 0..qps {
                let qi = q as usize;
                while (duration.is_some() || st.scnt[qi] < iters) && st.scnt[qi] < tx + st.ccnt[qi]
                {
                    let s = st.scnt[qi];
                    let sig = s % cq_mod == cq_mod - 1 || (duration.is_none() && s == iters - 1);
                    let now = now_ns(&clk);
                    if peak {
                        tposted[totscnt as usize] = now;
                    }
                    if sig {
                        let k = (st.sig_head[qi] % st.sig_ring as u64) as usize;
                        st.sig_post[qi * st.sig_ring + k] = now;
                        st.sig_head[qi] += 1;
                    }
                    let (op, sge) = match cfg.test {
                        Test::SendBw => (SendOp::Send, side.mem.sge(side.mem.send_off(q), size)),
                        Test::WriteBw => (
                            SendOp::RdmaWrite {
                                remote_addr: side.peer.recv_addr(q),
                                rkey: side.peer.rkey,
                            },
                            side.mem.sge(side.mem.send_off(q), size),
                        ),
                        _ => (
                            SendOp::RdmaRead {
                                remote_addr: side.peer.send_addr(q),
                                rkey: side.peer.rkey,
                            },
                            side.mem.sge(side.mem.recv_off(q), size),
                        ),
                    };
                    let sgl = [sge];
                    let flags = if sig {
                        SendFlags::SIGNALED | inline
                    } else {
                        inline
                    };
                    side.post(
                        q,
                        &SendWr::<P> {
                            wr_id: u64::from(q),
                            op,
                            sgl: &sgl,
                            flags,
                        },
                    )?;
                    st.scnt[qi] += 1;
                    totscnt += 1;
                }
            }
        }
        if duration.is_none() && totccnt >= tot {
            break;
        }
        let n = side.poll()?;
        if n == 0 {
            side.idle(None)?;
        }
        let now = now_ns(&clk);
        for k in 0..n {
            let wc = side.wcs[k];
            let q = wc.wr_id as usize;
            if q >= qps as usize || wc.opcode.is_recv() {
                continue;
            }
            let fill = if duration.is_some() {
                cq_mod
            } else {
                cq_mod.min(iters - st.ccnt[q].min(iters))
            };
            if fill == 0 {
                continue;
            }
            st.ccnt[q] += fill;
            totccnt += fill;
            if st.sig_tail[q] < st.sig_head[q] {
                let k = (st.sig_tail[q] % st.sig_ring as u64) as usize;
                hist.saturating_record(now.saturating_sub(st.sig_post[q * st.sig_ring + k]).max(1));
                st.sig_tail[q] += 1;
            }
            if peak {
                tcompleted[(totccnt.min(tot) - 1) as usize] = now;
            }
            if duration.is_some() && now >= m && now < end - m {
                if sampled == 0 {
                    sample_start = now;
                }
                sampled += fill;
                sample_end = now;
            }
        }
        if duration.is_some() && now >= end {
            break;
        }
        loops = loops.wrapping_add(1);
        if loops & 0xf == 0 {
            progress.tick(
                size,
                totccnt.min(tot),
                if duration.is_some() { 0 } else { tot },
            );
        }
    }
    let last = now_ns(&clk);
    let stats = if duration.is_some() {
        BwStats::from_span(
            size,
            sampled,
            sample_end.saturating_sub(sample_start),
            cfg.unit,
        )
    } else if peak {
        let t = tot as usize;
        BwStats::from_stamps(size, &tposted[..t], &tcompleted[..t], cfg.unit)
            .ok_or_else(|| PerfError::Config("missing completion stamps".into()))?
    } else {
        BwStats::from_span(size, tot, last - first_post, cfg.unit)
    };
    bw_verify(cfg, side, size)?;
    let iters_reported = if duration.is_some() { sampled } else { tot };
    Ok((iters_reported, Outcome::Bw(stats)))
}

/// After a BW size: READ data must be the server's pattern; WRITE data is read back from the
/// server's receive area (one extra, untimed RDMA READ) and compared with ours.
fn bw_verify<P: Provider>(cfg: &Config, side: &mut Side<P>, size: u64) -> Result<(), PerfError> {
    match cfg.test {
        Test::ReadBw => {
            // Drain leftovers of a duration run (the last reads may be unsignaled).
            read_back(side, side.peer.send_addr(0), size)?;
            side.mem
                .check(side.mem.recv_off(0), size, SERVER_SEED, "read_bw data")
        }
        Test::WriteBw => {
            for q in 0..cfg.qps {
                read_back_q(side, q, side.peer.recv_addr(q), size)?;
                side.mem.check(
                    side.mem.recv_off(q),
                    size,
                    CLIENT_SEED,
                    "write_bw data at the server",
                )?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn read_back<P: Provider>(side: &mut Side<P>, remote: u64, size: u64) -> Result<(), PerfError> {
    read_back_q(side, 0, remote, size)
}

/// One signaled RDMA READ of `size` octets at `remote` into QP `q`'s receive area; waits for
/// it (RC ordering: it also retires every earlier WR of the QP).
fn read_back_q<P: Provider>(
    side: &mut Side<P>,
    q: u32,
    remote: u64,
    size: u64,
) -> Result<(), PerfError> {
    const READ_BACK: u64 = u64::MAX;
    let sgl = [side.mem.sge(side.mem.recv_off(q), size)];
    side.post(
        q,
        &SendWr::<P> {
            wr_id: READ_BACK,
            op: SendOp::RdmaRead {
                remote_addr: remote,
                rkey: side.peer.rkey,
            },
            sgl: &sgl,
            flags: SendFlags::SIGNALED,
        },
    )?;
    loop {
        let n = side.poll()?;
        if side.wcs[..n]
            .iter()
            .any(|wc| wc.wr_id == READ_BACK && wc.opcode == WcOpcode::RDMA_READ)
        {
            return Ok(());
        }
        if n == 0 {
            side.idle(None)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Server loops
// ---------------------------------------------------------------------------------------------

fn server_run<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<(), PerfError> {
    debug_assert!(side.server);
    match cfg.test {
        Test::SendLat => send_lat_server(cfg, side, stop),
        Test::WriteLat => write_lat_server(cfg, side, stop),
        Test::SendBw => send_bw_server(cfg, side, stop, obs),
        Test::ReadLat | Test::WriteBw | Test::ReadBw => passive_server(side, stop),
    }
}

/// One-sided tests: nothing to do but wait for the client to leave.
fn passive_server<P: Provider>(side: &mut Side<P>, stop: &AtomicBool) -> Result<(), PerfError> {
    loop {
        // Relaxed: a plain request flag.
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        side.check_events()?;
        side.poll()?;
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn send_lat_server<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
) -> Result<(), PerfError> {
    // LAT_RECVS receives were posted before the accept (`server_recvs`).
    let inline = cfg.inline.min(side.qps[0].options().max_inline_data);
    let mut seen_len = u32::MAX;
    let mut sent = 0u64;
    loop {
        let n = side.poll()?;
        if n == 0 {
            side.idle(Some(stop))?;
            continue;
        }
        for k in 0..n {
            let wc = side.wcs[k];
            if !wc.opcode.is_recv() {
                continue;
            }
            // The provider bounds byte_len by the receive buffer; clamp anyway.
            let len = u64::from(wc.byte_len).min(side.mem.area);
            if wc.byte_len != seen_len {
                // First message of a size: check it before answering (the next one lands in
                // the same buffer only after our answer).
                side.mem
                    .check(side.mem.recv_off(0), len, CLIENT_SEED, "send_lat message")?;
                seen_len = wc.byte_len;
            }
            side.post_recv(0, 1)?;
            let sgl = [side.mem.sge(side.mem.send_off(0), len)];
            side.post(
                0,
                &SendWr::<P> {
                    wr_id: sent,
                    op: SendOp::Send,
                    sgl: &sgl,
                    flags: signaled(sent, LAT_SIGNAL_EVERY) | inline_flag(len, inline),
                },
            )?;
            sent += 1;
        }
    }
}

fn write_lat_server<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
) -> Result<(), PerfError> {
    let inline = cfg.inline.min(side.qps[0].options().max_inline_data);
    let op = SendOp::RdmaWrite {
        remote_addr: side.peer.recv_addr(0),
        rkey: side.peer.rkey,
    };
    for &size in &cfg.sizes {
        let sgl = [side.mem.sge(side.mem.send_off(0), size)];
        let mark = side.mem.send_off(0) + size - 1;
        let polled = side.mem.recv_off(0) + size - 1;
        let n = if cfg.duration.is_some() {
            u64::MAX
        } else {
            cfg.iters
        };
        for i in 0..n {
            let c = counter(i);
            while side.mem.load(polled) != c {
                side.idle(Some(stop))?;
                if side.spins % 1024 == 0 {
                    side.poll()?;
                }
            }
            if i == 0 && size > 1 {
                side.mem.check(
                    side.mem.recv_off(0),
                    size - 1,
                    CLIENT_SEED,
                    "write_lat data",
                )?;
            }
            side.mem.store(mark, c);
            let flags = signaled(i, LAT_SIGNAL_EVERY) | inline_flag(size, inline);
            side.post(
                0,
                &SendWr::<P> {
                    wr_id: i,
                    op,
                    sgl: &sgl,
                    flags,
                },
            )?;
            if flags.contains(SendFlags::SIGNALED) {
                side.reap(Some(stop))?;
            }
        }
        side.mem.store(mark, pattern(SERVER_SEED, size - 1));
    }
    // Wait for the client to leave.
    passive_server(side, stop)
}

fn send_bw_server<P: Provider>(
    cfg: &Config,
    side: &mut Side<P>,
    stop: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<(), PerfError> {
    let qps = cfg.qps;
    // Each QP's receive queue was filled before the accept (`server_recvs`).
    let per_size = cfg.iters * u64::from(qps);
    let mut repost = vec![0u32; qps as usize];
    let hist = new_histogram();
    let run_start = Instant::now();
    let mut size_idx = 0usize;
    let (mut got, mut first) = (0u64, Instant::now());
    let mut seen_len = u32::MAX;
    loop {
        let n = side.poll()?;
        if n == 0 {
            side.idle(Some(stop))?;
            continue;
        }
        let now = Instant::now();
        for k in 0..n {
            let wc = side.wcs[k];
            if !wc.opcode.is_recv() {
                continue;
            }
            let q = (wc.wr_id as usize).min(qps as usize - 1);
            repost[q] += 1;
            if wc.byte_len != seen_len {
                side.mem.check(
                    side.mem.recv_off(q as u32),
                    u64::from(wc.byte_len).min(side.mem.area),
                    CLIENT_SEED,
                    "send_bw message",
                )?;
                seen_len = wc.byte_len;
            }
            if got == 0 {
                first = now;
            }
            got += 1;
            if cfg.duration.is_none() && got == per_size {
                let size = cfg.sizes.get(size_idx).copied().unwrap_or(0);
                let span = now.duration_since(first);
                let r = SizeResult {
                    size,
                    iters: per_size,
                    outcome: Outcome::Bw(BwStats::from_span(
                        size,
                        per_size,
                        span.as_nanos() as u64,
                        cfg.unit,
                    )),
                    start: first.duration_since(run_start),
                    elapsed: span,
                };
                obs.result(&r, &hist);
                size_idx += 1;
                got = 0;
            }
        }
        for q in 0..qps {
            let k = repost[q as usize];
            if k > 0 {
                side.post_recv(q, k)?;
                repost[q as usize] = 0;
            }
        }
    }
}
