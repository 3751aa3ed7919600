//! A verbs test's memory and connections: the mempool region holding each QP's send and
//! receive areas ([`Mem`]), the peer's coordinates, the per-side QPs, CQ and completion buffer
//! ([`Side`]), the QP options and CQ depth a test asks for, and connecting (client) /
//! accepting (server) with the private data of [`super::hello`].
//!
//! Normal operation: everything is allocated and registered before the first measurement;
//! posting and polling go through [`Side`] with no allocation. Recovery: a verbs error, error
//! completion, unexpected disconnect or timeout is returned as [`PerfError`]; a server rejects
//! a request it cannot serve.

use std::net::SocketAddr;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::{
    errno, Access, CmEvent, CmEventKind, Completion, CompletionQueue, ConnRequest, Device,
    DeviceCaps, Keys, Listener, Provider, QpInit, QpOptions, QueuePair, RecvWr, SendFlags, SendWr,
    Sge, VerbsError, WcStatus, RNR_RETRY_INFINITE,
};
use rpcrdma_mempool::{HugePagePolicy, PageKind, Region, RegionOptions};

use super::super::{Config, PerfError, Test, MAX_ITERS, MAX_SIZE, MIN_ITERS};

use super::hello::{Hello, Reply};
use super::{
    area_for, pattern, ConnInfo, Observer, CLIENT_SEED, EVENT_CHECK_SPINS, LAT_RECVS, LAT_SEND_WR,
    MAX_QPS, POLL_BATCH, SERVER_SEED,
};

/// One side's buffers: a registered mempool region, per QP a send area then a receive area.
pub(super) struct Mem {
    pub(super) region: Region,
    pub(super) keys: Keys,
    pub(super) area: u64,
}

impl Mem {
    pub(super) fn new<P: Provider>(
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

    pub(super) fn base(&self) -> u64 {
        self.region.as_ptr() as u64
    }

    pub(super) fn send_off(&self, q: u32) -> u64 {
        u64::from(q) * 2 * self.area
    }

    pub(super) fn recv_off(&self, q: u32) -> u64 {
        self.send_off(q) + self.area
    }

    pub(super) fn sge(&self, off: u64, len: u64) -> Sge {
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
    pub(super) fn fill(&self, qps: u32, seed: u8) {
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
    pub(super) fn load(&self, off: u64) -> u8 {
        // SAFETY: offset inside the region. Volatile: the peer's device writes it.
        let v = unsafe { self.ptr(off).read_volatile() };
        // Acquire fence: pairs with the device's (soft: the peer thread's) stores of the
        // message, so the octets before the polled one are seen once it is.
        fence(Ordering::Acquire);
        v
    }

    /// Writes one octet of our own send area.
    #[inline]
    pub(super) fn store(&self, off: u64, v: u8) {
        // SAFETY: offset inside the region; our send area is only read by our device.
        unsafe { self.ptr(off).write_volatile(v) };
    }

    /// Checks `[off, off + len)` against `seed`'s pattern (offsets relative to the area).
    pub(super) fn check(&self, off: u64, len: u64, seed: u8, what: &str) -> Result<(), PerfError> {
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

    pub(super) fn page_kind(&self) -> PageKind {
        self.region.page_kind()
    }
}

/// The peer's buffer coordinates.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeerMem {
    pub(super) addr: u64,
    pub(super) rkey: u32,
    pub(super) area: u64,
}

impl PeerMem {
    pub(super) fn send_addr(&self, q: u32) -> u64 {
        self.addr + u64::from(q) * 2 * self.area
    }

    pub(super) fn recv_addr(&self, q: u32) -> u64 {
        self.send_addr(q) + self.area
    }
}

/// One side of a run. Field order is drop order: QPs, CQ, memory, PD.
pub(super) struct Side<P: Provider> {
    pub(super) qps: Vec<P::Qp>,
    pub(super) cq: P::Cq,
    pub(super) mem: Mem,
    pub(super) _pd: P::Pd,
    pub(super) peer: PeerMem,
    pub(super) wcs: Vec<Completion>,
    /// Client: a disconnect is an error. Server: it is the end of the run.
    pub(super) server: bool,
    pub(super) spins: u32,
    /// Signaled sends posted and not yet polled.
    pub(super) pending: u64,
    /// What the loops asked of the device so far.
    pub(super) work: Work,
    /// Time the send doorbells (`RPCRDMA_PERF_WORK=1`).
    pub(super) timed: bool,
}

/// Counts of the verbs calls a side made (plain counters, printed per size on request).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Work {
    /// Send WRs queued.
    pub(super) send_wrs: u64,
    /// `ibv_post_send` calls (send doorbells).
    pub(super) send_posts: u64,
    /// `ibv_post_recv` calls.
    pub(super) recv_posts: u64,
    /// CQ polls.
    pub(super) polls: u64,
    /// CQ polls that returned nothing.
    pub(super) empty_polls: u64,
    /// Completions polled.
    pub(super) completions: u64,
    /// Nanoseconds spent in send doorbells (`RPCRDMA_PERF_WORK=1` only).
    pub(super) post_ns: u64,
}

impl Work {
    /// The counts since `before`, per `iters` iterations, as one line.
    pub(super) fn per_iteration(&self, before: &Work, iters: u64) -> String {
        let n = iters.max(1) as f64;
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / n;
        format!(
            " Work per iteration: send WRs {:.2}, send doorbells {:.2}, receive posts {:.2}, \
             CQ polls {:.2} ({:.2} empty), completions {:.2}, ns in send doorbells {:.0}",
            d(self.send_wrs, before.send_wrs),
            d(self.send_posts, before.send_posts),
            d(self.recv_posts, before.recv_posts),
            d(self.polls, before.polls),
            d(self.empty_polls, before.empty_polls),
            d(self.completions, before.completions),
            d(self.post_ns, before.post_ns),
        )
    }
}

impl<P: Provider> Side<P> {
    /// Polls once; fails on an error completion (a flush on the server means "client gone").
    pub(super) fn poll(&mut self) -> Result<usize, PerfError> {
        let n = self.cq.poll(&mut self.wcs)?;
        self.work.polls += 1;
        self.work.completions += n as u64;
        if n == 0 {
            self.work.empty_polls += 1;
        }
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
    pub(super) fn check_events(&mut self) -> Result<(), PerfError> {
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
    pub(super) fn idle(&mut self, stop: Option<&AtomicBool>) -> Result<(), PerfError> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % EVENT_CHECK_SPINS == 0 {
            // Relaxed: a plain request flag; nothing is published through it.
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Err(PerfError::Disconnected);
            }
            self.check_events()?;
        }
        // No PAUSE: perftest's loops poll back to back, and a PAUSE delays noticing the
        // completion (about 140 cycles on recent x86; a trip through the TCG main loop in the
        // CI's emulated CPU).
        Ok(())
    }

    /// Posts one send WR on QP `q` (its own doorbell).
    pub(super) fn post(&mut self, q: u32, wr: &SendWr<'_, P>) -> Result<(), PerfError> {
        self.queue(q, wr)?;
        self.flush(q)
    }

    /// Queues one send WR on QP `q`; nothing reaches the device before [`Side::flush`].
    #[inline]
    pub(super) fn queue(&mut self, q: u32, wr: &SendWr<'_, P>) -> Result<(), PerfError> {
        let qp = &mut self.qps[q as usize];
        if let Err(e) = qp.queue_send(wr) {
            if e.errno == errno::ENOMEM {
                let depth = qp.options().max_send_wr;
                return Err(PerfError::QueueFull {
                    queue: "send",
                    depth,
                });
            }
            return Err(e.into());
        }
        self.work.send_wrs += 1;
        if wr.flags.contains(SendFlags::SIGNALED) {
            self.pending += 1;
        }
        Ok(())
    }

    /// Hands QP `q`'s queued send WRs to the device: one `ibv_post_send`, one doorbell.
    #[inline]
    pub(super) fn flush(&mut self, q: u32) -> Result<(), PerfError> {
        if self.timed {
            let t = std::time::Instant::now();
            self.qps[q as usize].flush_send()?;
            self.work.post_ns += t.elapsed().as_nanos() as u64;
        } else {
            self.qps[q as usize].flush_send()?;
        }
        self.work.send_posts += 1;
        Ok(())
    }

    /// Polls until every signaled send posted so far has completed.
    pub(super) fn reap(&mut self, stop: Option<&AtomicBool>) -> Result<(), PerfError> {
        while self.pending > 0 {
            if self.poll()? == 0 {
                self.idle(stop)?;
            }
        }
        Ok(())
    }

    pub(super) fn post_recv(&mut self, q: u32, n: u32) -> Result<(), PerfError> {
        post_recvs::<P>(&mut self.qps[q as usize], &self.mem, q, n)?;
        self.work.recv_posts += 1;
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
pub(super) fn server_recvs<P: Provider>(test: Test, qp: &P::Qp) -> u32 {
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
    // perftest's default outstanding reads (`-o`): the device's maximum (rdma_cm carries it
    // in one octet).
    let rd = caps
        .max_qp_init_rd_atom
        .min(caps.max_qp_rd_atom)
        .clamp(1, u32::from(u8::MAX)) as u8;
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

/// The error of a connection the server rejected (`ev` is the `Rejected` event), with the
/// reason text it sent as private data.
fn rejected(ev: &CmEvent) -> PerfError {
    let why = String::from_utf8_lossy(ev.private_data.as_slice()).into_owned();
    PerfError::Protocol(format!(
        "connection rejected (reason {}){}{}",
        ev.status,
        if why.is_empty() { "" } else { ": " },
        why
    ))
}

fn wait_established<P: Provider>(qp: &mut P::Qp, timeout: Duration) -> Result<(), PerfError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(ev) = qp.poll_event()? {
            match ev.kind {
                CmEventKind::Established => return Ok(()),
                CmEventKind::Rejected => {
                    return Err(rejected(&ev));
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

/// What the observer is told about QP `q` once it is connected.
fn conn_info<P: Provider>(q: u32, qp: &P::Qp, mem: &Mem) -> ConnInfo {
    ConnInfo {
        qp_index: q,
        qpn: qp.qp_num(),
        local: qp.local_addr(),
        remote: qp.peer_addr(),
        page_kind: mem.page_kind(),
    }
}

pub(super) fn client_connect<P: Provider>(
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
                return Err(rejected(&ev));
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
        obs.connected(&conn_info::<P>(q, &qp, &mem));
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
        work: Work::default(),
        timed: show_work(),
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
pub(super) fn server_accept<P: Provider>(
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
        obs.connected(&conn_info::<P>(q, &qp, &mem));
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
            work: Work::default(),
            timed: show_work(),
        },
    ))
}

/// Whether to print the work per iteration of each size on stderr (`RPCRDMA_PERF_WORK=1`).
pub(super) fn show_work() -> bool {
    std::env::var_os("RPCRDMA_PERF_WORK").is_some_and(|v| v == "1")
}
