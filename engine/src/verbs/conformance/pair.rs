//! The suite's building blocks: registered buffers ([`Buf`]) with their test pattern, a
//! connected pair of QPs with their PDs, CQs and buffers ([`Pair`], [`connect`],
//! [`connect_with`]), waiting for events and completions with the environment's timeout, and
//! the expectations the checks share (a completion's status, both sides down, posts in ERROR).
//!
//! Normal operation: every helper drives the provider only through the verbs boundary and
//! waits with `Env::idle` between polls. Recovery: a helper that times out or sees something
//! unexpected returns `Err(reason)`; the check returns it and the runner reports `FAIL`.

use super::*;

/// Where the suite's buffers live when not on this process's heap: a run whose two sides are
/// other processes installs memory mapped at the same address in all of them
/// ([`set_buf_memory`]), so a check fills and reads what those processes' devices place.
pub trait BufMemory: Send + Sync + 'static {
    /// `len` (> 0) zeroed octets, or `None` when the memory is exhausted.
    fn alloc(&self, len: usize) -> Option<*mut u8>;
    /// Gives back what [`BufMemory::alloc`] returned for `len` octets.
    ///
    /// # Safety
    /// `ptr` came from `alloc(len)` of this memory and is not used afterwards.
    unsafe fn free(&self, ptr: *mut u8, len: usize);
}

static BUF_MEMORY: std::sync::OnceLock<&'static dyn BufMemory> = std::sync::OnceLock::new();

/// Makes every [`Buf`] created from now on in this process come from `mem` (once per process;
/// `false` when another memory was installed before).
pub fn set_buf_memory(mem: &'static dyn BufMemory) -> bool {
    BUF_MEMORY.set(mem).is_ok()
}

/// A buffer registered with a PD, on the heap (or in the memory of [`set_buf_memory`]). The
/// memory is only touched through raw pointers, since the device may write it at any time
/// while registered.
pub struct Buf<P: Provider> {
    mr: Option<P::Mr>,
    ptr: *mut u8,
    len: usize,
    keys: Keys,
    mem: Option<&'static dyn BufMemory>,
}

/// `len.max(1)` zeroed octets from `mem` or the heap.
fn buf_alloc(mem: Option<&'static dyn BufMemory>, len: usize) -> Result<*mut u8, String> {
    match mem {
        Some(m) => m
            .alloc(len.max(1))
            .ok_or_else(|| format!("no buffer memory for {len} octets")),
        None => Ok(Box::into_raw(vec![0u8; len.max(1)].into_boxed_slice()) as *mut u8),
    }
}

/// Frees what [`buf_alloc`] gave.
///
/// # Safety
/// `ptr` came from `buf_alloc(mem, len)` and nothing uses it afterwards.
unsafe fn buf_free(mem: Option<&'static dyn BufMemory>, ptr: *mut u8, len: usize) {
    match mem {
        // SAFETY: the caller's contract.
        Some(m) => unsafe { m.free(ptr, len.max(1)) },
        // SAFETY: `ptr` came from Box::into_raw of a slice of len.max(1) octets.
        None => {
            drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(ptr, len.max(1))) })
        }
    }
}

// SAFETY: `Buf` owns its allocation and registration exclusively; the registration is Send
// (MemoryRegion: Send + Sync); the memory is only accessed through volatile raw-pointer reads and
// writes, which are as valid from another thread as from this one.
unsafe impl<P: Provider> Send for Buf<P> {}

impl<P: Provider> Buf<P> {
    /// Allocates `len` zeroed octets and registers them in `pd` with `access`.
    pub fn new(pd: &P::Pd, len: usize, access: Access) -> Result<Buf<P>, String> {
        let mem = BUF_MEMORY.get().copied();
        let ptr = buf_alloc(mem, len)?;
        // SAFETY: the allocation outlives the registration: `Drop` drops the registration
        // before freeing the memory, and nothing else frees it.
        let reg = unsafe { pd.register(ptr, len, access) };
        match reg {
            Ok((mr, keys)) => Ok(Buf {
                mr: Some(mr),
                ptr,
                len,
                keys,
                mem,
            }),
            Err(e) => {
                // SAFETY: `ptr` came from buf_alloc(mem, len) and is not used afterwards.
                unsafe { buf_free(mem, ptr, len) };
                Err(format!("register: {e}"))
            }
        }
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Keys given at registration.
    pub fn keys(&self) -> Keys {
        self.keys
    }

    /// The registration (for BIND_MW).
    pub fn mr(&self) -> &P::Mr {
        // Invariant: present until `dereg`; checks never use it afterwards.
        self.mr.as_ref().expect("buffer deregistered")
    }

    /// An SGE over `[off, off + len)`.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            len: len as u32,
            lkey: self.keys.lkey,
        }
    }

    /// Fills the buffer with a pattern derived from `seed`.
    pub fn fill(&self, seed: u8) {
        for i in 0..self.len {
            // SAFETY: i < len, inside the allocation.
            unsafe { self.ptr.add(i).write_volatile(pattern(seed, i)) };
        }
    }

    /// Copies `data` in at `off` (clipped to the buffer).
    pub fn write(&self, off: usize, data: &[u8]) {
        for (k, b) in data.iter().enumerate() {
            if off + k < self.len {
                // SAFETY: index inside the allocation.
                unsafe { self.ptr.add(off + k).write_volatile(*b) };
            }
        }
    }

    /// Copies `[off, off + len)` out.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let end = (off + len).min(self.len);
        (off.min(end)..end)
            // SAFETY: index inside the allocation.
            .map(|i| unsafe { self.ptr.add(i).read_volatile() })
            .collect()
    }

    /// Deregisters now (the memory stays allocated until drop).
    pub fn dereg(&mut self) {
        self.mr = None;
    }
}

impl<P: Provider> Drop for Buf<P> {
    fn drop(&mut self) {
        self.mr = None;
        // SAFETY: allocated by buf_alloc(self.mem, self.len) in `new`; the registration is
        // gone, so no device access remains.
        unsafe { buf_free(self.mem, self.ptr, self.len) };
    }
}

/// The test pattern.
pub fn pattern(seed: u8, i: usize) -> u8 {
    seed.wrapping_add((i as u8).wrapping_mul(7))
        .wrapping_add((i >> 8) as u8)
}

pub(super) fn expected(seed: u8, off: usize, len: usize) -> Vec<u8> {
    (off..off + len).map(|i| pattern(seed, i)).collect()
}

/// One side of a connection.
pub struct Side<P: Provider> {
    /// Protection domain (shareable between connections).
    pub pd: Arc<P::Pd>,
    /// CQ for both send and receive completions.
    pub cq: P::Cq,
    /// The QP.
    pub qp: P::Qp,
}

/// A connected pair.
pub struct Pair<P: Provider> {
    /// Active side.
    pub c: Side<P>,
    /// Passive side.
    pub s: Side<P>,
}

/// Options of [`connect`].
#[derive(Clone, Copy)]
pub struct PairOpts<'a> {
    /// Client QP options.
    pub c: QpOptions,
    /// Server QP options.
    pub s: QpOptions,
    /// Client CQ depth.
    pub c_cq: u32,
    /// Server CQ depth.
    pub s_cq: u32,
    /// Connect private data.
    pub c_pdata: &'a [u8],
    /// Accept private data.
    pub s_pdata: &'a [u8],
}

impl Default for PairOpts<'_> {
    fn default() -> Self {
        PairOpts {
            c: QpOptions::default(),
            s: QpOptions::default(),
            c_cq: 512,
            s_cq: 512,
            c_pdata: &[],
            s_pdata: &[],
        }
    }
}

pub(super) fn wait_until<E: Env, T>(
    env: &mut E,
    what: &str,
    mut f: impl FnMut(&mut E) -> Result<Option<T>, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + env.timeout();
    loop {
        if let Some(v) = f(env)? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        env.idle();
    }
}

/// Listens on a fresh address of the server device. A port still taken (`EADDRINUSE`: on a
/// loopback device the active side's ephemeral rdma_cm ports share the address) is skipped.
pub fn listen_fresh<E: Env>(
    env: &mut E,
    backlog: u32,
) -> Result<(SocketAddr, <E::P as Provider>::Listener), String> {
    let mut tries = 0;
    loop {
        let addr = env.listen_addr();
        match env.server().listen(addr, backlog) {
            Ok(l) => return Ok((addr, l)),
            Err(e) if e.errno == crate::verbs::errno::EADDRINUSE && tries < 16 => tries += 1,
            Err(e) => return Err(format!("listen on {addr}: {e}")),
        }
    }
}

/// Waits for the next CM event of `qp`.
pub fn wait_event<E: Env>(env: &mut E, qp: &mut <E::P as Provider>::Qp) -> Result<CmEvent, String> {
    wait_until(env, "a CM event", |_| qp.poll_event().map_err(e2s))
}

/// Waits for a CM event of `kind` (other kinds are skipped).
pub fn wait_event_kind<E: Env>(
    env: &mut E,
    qp: &mut <E::P as Provider>::Qp,
    kind: CmEventKind,
) -> Result<CmEvent, String> {
    wait_until(env, "a CM event", |_| {
        Ok(qp.poll_event().map_err(e2s)?.filter(|e| e.kind == kind))
    })
}

/// Result of [`connect_with`].
pub struct Connected<P: Provider> {
    /// The pair.
    pub pair: Pair<P>,
    /// The client's `Established` event (carries the accept's private data).
    pub established: CmEvent,
    /// The private data the server saw in the connect request.
    pub request_private_data: Vec<u8>,
}

/// Connects a pair: the server side uses `s_pd` if given (to share a PD between connections).
pub fn connect_with<E: Env>(
    env: &mut E,
    o: PairOpts<'_>,
    s_pd: Option<Arc<<E::P as Provider>::Pd>>,
    s_srq: Option<&<E::P as Provider>::Srq>,
) -> Result<Connected<E::P>, String> {
    let (addr, mut l) = listen_fresh(env, 8)?;
    let c_pd = Arc::new(env.client().alloc_pd().map_err(e2s)?);
    let c_cq = env.client().create_cq(o.c_cq).map_err(e2s)?;
    let mut c_qp = env
        .client()
        .connect(
            addr,
            QpInit {
                pd: &c_pd,
                send_cq: &c_cq,
                recv_cq: &c_cq,
                srq: None,
                opts: o.c,
            },
            o.c_pdata,
        )
        .map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let req_pdata = req.private_data().to_vec();
    let s_pd = match s_pd {
        Some(pd) => pd,
        None => Arc::new(env.server().alloc_pd().map_err(e2s)?),
    };
    let s_cq = env.server().create_cq(o.s_cq).map_err(e2s)?;
    let mut s_qp = req
        .accept(
            QpInit {
                pd: &s_pd,
                send_cq: &s_cq,
                recv_cq: &s_cq,
                srq: s_srq,
                opts: o.s,
            },
            o.s_pdata,
        )
        .map_err(e2s)?;
    let ev = wait_event(env, &mut c_qp)?;
    ensure!(
        ev.kind == CmEventKind::Established,
        "client got {:?}, expected Established",
        ev.kind
    );
    let sev = wait_event(env, &mut s_qp)?;
    ensure!(
        sev.kind == CmEventKind::Established,
        "server got {:?}, expected Established",
        sev.kind
    );
    ensure!(
        c_qp.state() == QpState::Rts && s_qp.state() == QpState::Rts,
        "states after connect: {:?} / {:?}",
        c_qp.state(),
        s_qp.state()
    );
    Ok(Connected {
        pair: Pair {
            c: Side {
                pd: c_pd,
                cq: c_cq,
                qp: c_qp,
            },
            s: Side {
                pd: s_pd,
                cq: s_cq,
                qp: s_qp,
            },
        },
        established: ev,
        request_private_data: req_pdata,
    })
}

/// Connects a pair with default options.
pub fn connect<E: Env>(env: &mut E) -> Result<Pair<E::P>, String> {
    connect_opts(env, PairOpts::default())
}

/// Connects a pair with `o`.
pub fn connect_opts<E: Env>(env: &mut E, o: PairOpts<'_>) -> Result<Pair<E::P>, String> {
    Ok(connect_with(env, o, None, None)?.pair)
}

/// Polls `cq` until `n` completions arrived.
pub fn wait_wcs<E: Env>(
    env: &mut E,
    cq: &mut <E::P as Provider>::Cq,
    n: usize,
) -> Result<Vec<Completion>, String> {
    let mut got = Vec::with_capacity(n);
    let mut buf = [Completion::default(); 16];
    wait_until(env, &format!("{n} completion(s)"), |_| {
        let want = (n - got.len()).min(buf.len());
        let k = cq.poll(&mut buf[..want]).map_err(e2s)?;
        got.extend_from_slice(&buf[..k]);
        Ok((got.len() == n).then_some(()))
    })
    .map_err(|e| format!("{e}; got {got:?}"))?;
    Ok(got)
}

/// Polls `cq` until one completion arrived.
pub fn wait_wc<E: Env>(env: &mut E, cq: &mut <E::P as Provider>::Cq) -> Result<Completion, String> {
    Ok(wait_wcs(env, cq, 1)?[0])
}

/// Polls `cq` for a while and returns whatever arrived (to check that nothing else does).
pub fn settle<E: Env>(
    env: &mut E,
    cq: &mut <E::P as Provider>::Cq,
) -> Result<Vec<Completion>, String> {
    let mut got = Vec::new();
    let mut buf = [Completion::default(); 16];
    for _ in 0..env.settle_iterations() {
        let k = cq.poll(&mut buf).map_err(e2s)?;
        got.extend_from_slice(&buf[..k]);
        env.idle();
    }
    Ok(got)
}

pub(super) fn expect_wc(
    wc: &Completion,
    wr_id: u64,
    status: WcStatus,
    opcode: Option<WcOpcode>,
) -> CheckResult {
    ensure!(
        wc.wr_id == wr_id,
        "completion wr_id {:#x}, expected {wr_id:#x} ({wc:?})",
        wc.wr_id
    );
    ensure!(
        wc.status == status,
        "wr {wr_id:#x}: status {} ({}), expected {}",
        wc.status.name(),
        wc.status.0,
        status.name()
    );
    if let Some(op) = opcode {
        ensure!(
            wc.opcode == op,
            "wr {wr_id:#x}: opcode {:?}, expected {op:?}",
            wc.opcode
        );
    }
    Ok(())
}

pub(super) fn expect_status_in(wc: &Completion, wr_id: u64, allowed: &[WcStatus]) -> CheckResult {
    ensure!(
        wc.wr_id == wr_id,
        "completion wr_id {:#x}, expected {wr_id:#x}",
        wc.wr_id
    );
    ensure!(
        allowed.contains(&wc.status),
        "wr {wr_id:#x}: status {}, expected one of {:?}",
        wc.status.name(),
        allowed.iter().map(|s| s.name()).collect::<Vec<_>>()
    );
    Ok(())
}

pub(super) fn post_recv<P: Provider>(qp: &mut P::Qp, wr_id: u64, sgl: &[Sge]) -> CheckResult {
    qp.queue_recv(&RecvWr { wr_id, sgl }).map_err(e2s)?;
    qp.flush_recv().map_err(e2s)
}

pub(super) fn post_send<P: Provider>(qp: &mut P::Qp, wr: SendWr<'_, P>) -> CheckResult {
    qp.queue_send(&wr).map_err(e2s)?;
    qp.flush_send().map_err(e2s)
}

pub(super) fn wr<'a, P: Provider>(wr_id: u64, op: SendOp<'a, P>, sgl: &'a [Sge]) -> SendWr<'a, P> {
    SendWr {
        wr_id,
        op,
        sgl,
        flags: SendFlags::SIGNALED,
    }
}

/// After the client's RDMA Write completed: waits until its data is placed at the server
/// before the check reads the target. On IB the requester's completion follows the
/// responder's acknowledgement, so the data is there. On iWARP the completion only says the
/// Write was handed to TCP (docs/rdma-provider.md 2.4): the client sends a message behind it,
/// and the server's receive of that message completes only after the Write before it on the
/// same stream was placed (RFC 5040, ordering and completions), which is what a ULP relies on.
pub(super) fn wait_placed<E: Env>(env: &mut E, p: &mut Pair<E::P>) -> CheckResult {
    if !profile(env).iwarp() {
        return Ok(());
    }
    let sb = Buf::<E::P>::new(&p.c.pd, 64, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 64, LW)?;
    post_recv::<E::P>(&mut p.s.qp, 0x91, &[rb.sge(0, 64)])?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(0x90, &[sb.sge(0, 8)]))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 0x90, WcStatus::SUCCESS, None)
        .map_err(|e| format!("the Send behind the Write: {e}"))?;
    expect_wc(&wait_wc(env, &mut p.s.cq)?, 0x91, WcStatus::SUCCESS, None)
        .map_err(|e| format!("the receive behind the Write: {e}"))
}

/// After an error on the client side: the client QP is in ERROR; the client disconnects (as a
/// ULP would); both sides report `Disconnected` and the server QP ends in ERROR.
pub(super) fn expect_both_down<E: Env>(env: &mut E, p: &mut Pair<E::P>) -> CheckResult {
    ensure!(
        p.c.qp.state() == QpState::Error,
        "client QP state {:?} after an error completion, expected Error",
        p.c.qp.state()
    );
    let _ = p.c.qp.disconnect();
    wait_event_kind(env, &mut p.c.qp, CmEventKind::Disconnected)?;
    wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    ensure!(
        p.s.qp.state() == QpState::Error,
        "server QP state {:?} after disconnect, expected Error",
        p.s.qp.state()
    );
    Ok(())
}

/// iWARP (docs/rdma-provider.md 2.4): a remote error terminates the connection. Without any
/// call from the ULP both sides report `Disconnected` and both QPs end in ERROR; a WR posted to
/// the requester afterwards flushes.
pub(super) fn expect_terminated<E: Env>(env: &mut E, p: &mut Pair<E::P>) -> CheckResult {
    wait_event_kind(env, &mut p.c.qp, CmEventKind::Disconnected)
        .map_err(|e| format!("requester: {e}: the connection was not terminated"))?;
    wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)
        .map_err(|e| format!("responder: {e}: the connection was not terminated"))?;
    ensure!(
        p.c.qp.state() == QpState::Error && p.s.qp.state() == QpState::Error,
        "states after termination: {:?} / {:?}, expected Error",
        p.c.qp.state(),
        p.s.qp.state()
    );
    let _ = settle(env, &mut p.c.cq)?;
    let b = Buf::<E::P>::new(&p.c.pd, 64, LW)?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(0x7e, &[b.sge(0, 8)]))?;
    expect_posted_in_error(env, &mut p.c.cq, 0x7e).map_err(|e| format!("after termination: {e}"))
}

/// A WR posted to a QP already in ERROR: flushed (`WR_FLUSH_ERR`); on siw never completed at
/// all (docs/rdma-provider.md 2.4: libsiw writes it into the queue the kernel flushed when the
/// QP entered ERROR, and nothing flushes it later).
pub(super) fn expect_posted_in_error<E: Env>(
    env: &mut E,
    cq: &mut <E::P as Provider>::Cq,
    wr_id: u64,
) -> CheckResult {
    if profile(env) == Profile::Siw {
        let late = settle(env, cq)?;
        ensure!(
            late.is_empty(),
            "siw completed WRs posted in ERROR: {late:?}"
        );
        env.note(&format!(
            "siw: wr {wr_id:#x} posted in ERROR never completes"
        ));
        return Ok(());
    }
    let wc = wait_wc(env, cq).map_err(|e| format!("flush of wr {wr_id:#x}: {e}"))?;
    expect_wc(&wc, wr_id, WcStatus::WR_FLUSH_ERR, None)
}

/// The requester's completion of a WR that hits a remote error, on iWARP (docs/rdma-provider.md
/// 2.4): siw completes it `SUCCESS` (handed to TCP), or, when the responder's termination
/// overtakes its transmission, `LOC_QP_OP_ERR` / `WR_FLUSH_ERR`; other iWARP devices may also
/// report the remote error itself.
pub(super) fn iwarp_remote_error_statuses(prof: Profile) -> &'static [WcStatus] {
    match prof {
        Profile::Siw => &[
            WcStatus::SUCCESS,
            WcStatus::LOC_QP_OP_ERR,
            WcStatus::WR_FLUSH_ERR,
        ],
        _ => &[
            WcStatus::SUCCESS,
            WcStatus::LOC_QP_OP_ERR,
            WcStatus::REM_ACCESS_ERR,
            WcStatus::REM_INV_REQ_ERR,
            WcStatus::REM_OP_ERR,
            WcStatus::WR_FLUSH_ERR,
        ],
    }
}

pub(super) const RW: Access =
    Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
pub(super) const LW: Access = Access::LOCAL_WRITE;
