//! The provider conformance suite: checks, generic over the provider, of every rule the verbs
//! boundary promises (see `docs/verbs.md`), positive and negative.
//!
//! A provider plugs in through an [`Env`]: two devices (client and server side, possibly the
//! same), fresh listen addresses, and how to wait (yield for the soft provider, sleep a little
//! on real hardware). Each check builds its own connection(s) through the boundary's connection
//! manager, so CM behaviour is covered too. [`run_all`] runs every check and prints
//! `PASS name` / `FAIL name: reason` / `SKIP name (why)`; the soft provider's test file runs
//! each check as its own `#[test]`.
//!
//! Per-device expectations: where real devices legitimately differ, a check picks what it
//! expects from the [`Profile`] of the devices under test (the soft provider, rxe, other IB /
//! RoCE devices, siw, other iWARP devices), and every alternative names the section of
//! `docs/rdma-provider.md` that documents it. The soft provider's expectations are always the
//! exact behaviour of `docs/verbs.md`. A check that needs something a device lacks (type-2
//! memory windows, RNR retry, SRQs) declares it ([`Needs`]) and is reported as skipped, with the
//! reason, instead of failing.
//!
//! Error checks end the way a ULP would: after the first error completion the requester calls
//! `disconnect`, then the check looks for `Disconnected` and flushes on both sides. On iWARP a
//! remote error is not reported on the WR that caused it: the responder terminates the
//! connection, and the checks look for exactly that (both sides `Disconnected` without any call
//! from the ULP, later WRs flushed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    vendor, Access, CmEvent, CmEventKind, Completion, CompletionQueue, ConnRequest, Device,
    DeviceCaps, Keys, Listener, MemoryWindow, ProtectionDomain, Provider, QpInit, QpOptions,
    QpState, QueuePair, RecvWr, Registrar, SendFlags, SendOp, SendWr, Sge, SharedReceiveQueue,
    Transport, VerbsError, WcFlags, WcOpcode, WcStatus, PRIVATE_DATA_ACCEPT_MAX,
    PRIVATE_DATA_CONNECT_MAX, PRIVATE_DATA_REJECT_MAX, REJECT_CONSUMER, RNR_RETRY_INFINITE,
};

/// Outcome of one check: `Err` carries the reason.
pub type CheckResult = Result<(), String>;

/// What a provider supplies to run the suite.
pub trait Env {
    /// The provider under test.
    type P: Provider;
    /// Device of the active (client) side.
    fn client(&self) -> &<Self::P as Provider>::Device;
    /// Device of the passive (server) side.
    fn server(&self) -> &<Self::P as Provider>::Device;
    /// A fresh address the server device can listen on.
    fn listen_addr(&mut self) -> SocketAddr;
    /// Called in every wait loop iteration (yield / short sleep).
    fn idle(&mut self) {
        std::thread::yield_now();
    }
    /// How long to wait for something that must happen.
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    /// Wait-loop iterations used to conclude that something does *not* happen.
    fn settle_iterations(&self) -> u32 {
        200
    }
    /// Called when a check takes a documented device-specific path (which one, and what the
    /// device did), so a run's log shows it. Default: ignored.
    fn note(&mut self, _what: &str) {}
}

/// One named check.
pub struct Check<E: Env> {
    /// Name (also the soft provider's test name).
    pub name: &'static str,
    /// The check.
    pub run: fn(&mut E) -> CheckResult,
    /// What the devices must support for the check to run.
    pub needs: Needs,
}

/// Which device behaviour the checks expect where devices legitimately differ (each difference
/// is documented in `docs/rdma-provider.md` section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// The soft provider: exactly the behaviour of `docs/verbs.md`.
    Soft,
    /// Soft-RoCE (`rdma_rxe`): IB transport plus the rxe differences (section 2.3).
    Rxe,
    /// Any other InfiniBand / RoCE device: IB transport, statuses where IB devices differ.
    Ib,
    /// Soft-iWARP (`siw`): iWARP plus the siw differences (section 2.4).
    Siw,
    /// Any other iWARP device: iWARP semantics (section 2.4), no siw quirks.
    Iwarp,
}

impl Profile {
    /// The profile of a device pair: the soft provider by name, others by transport and vendor.
    pub fn of<P: Provider>(client: &DeviceCaps, server: &DeviceCaps) -> Profile {
        if P::NAME == "soft" {
            return Profile::Soft;
        }
        let both = |v: u32| client.vendor_id == v && server.vendor_id == v;
        if client.transport == Transport::Iwarp || server.transport == Transport::Iwarp {
            if both(vendor::SIW) {
                Profile::Siw
            } else {
                Profile::Iwarp
            }
        } else if both(vendor::RXE) {
            Profile::Rxe
        } else {
            Profile::Ib
        }
    }

    /// iWARP semantics (no RNR; remote errors terminate the connection).
    pub fn iwarp(self) -> bool {
        matches!(self, Profile::Siw | Profile::Iwarp)
    }
}

/// The profile of `env`'s devices.
pub fn profile<E: Env>(env: &E) -> Profile {
    Profile::of::<E::P>(env.client().caps(), env.server().caps())
}

/// What a check needs from both devices (a set of flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Needs(pub u8);

impl Needs {
    /// Nothing beyond RC queue pairs.
    pub const NONE: Needs = Needs(0);
    /// Type-2 memory windows ([`DeviceCaps::mw_type2`]).
    pub const MW_TYPE2: Needs = Needs(1);
    /// Send With Invalidate / Local Invalidate ([`DeviceCaps::send_with_invalidate`]).
    pub const SEND_WITH_INV: Needs = Needs(2);
    /// RNR retry (IB transport; iWARP has none).
    pub const RNR: Needs = Needs(4);
    /// Shared receive queues ([`DeviceCaps::max_srq`] > 0).
    pub const SRQ: Needs = Needs(8);

    /// True when every flag of `other` is set.
    pub const fn contains(self, other: Needs) -> bool {
        self.0 & other.0 == other.0
    }

    /// Why a check with these needs cannot run on the two devices (`None`: it can).
    pub fn missing(self, client: &DeviceCaps, server: &DeviceCaps) -> Option<&'static str> {
        let all = |f: fn(&DeviceCaps) -> bool| f(client) && f(server);
        if self.contains(Needs::MW_TYPE2) && !all(|c| c.mw_type2) {
            return Some("device has no type-2 memory windows");
        }
        if self.contains(Needs::SEND_WITH_INV) && !all(|c| c.send_with_invalidate) {
            return Some("device has no Send With Invalidate");
        }
        if self.contains(Needs::RNR) && !all(|c| c.transport == Transport::Ib) {
            return Some(
                "iWARP has no RNR retry: a SEND that finds no receive ends the connection, \
                 see rnr_retry_zero (docs/rdma-provider.md 2.4)",
            );
        }
        if self.contains(Needs::SRQ) && !all(|c| c.max_srq > 0) {
            return Some("device has no shared receive queues");
        }
        None
    }
}

impl core::ops::BitOr for Needs {
    type Output = Needs;
    fn bitor(self, rhs: Needs) -> Needs {
        Needs(self.0 | rhs.0)
    }
}

/// What running one check gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed.
    Pass,
    /// The check failed (the reason).
    Fail(String),
    /// The devices lack what the check needs (why).
    Skip(&'static str),
}

/// Why `check` cannot run on `env`'s devices (`None`: it can).
pub fn skip_reason<E: Env>(env: &E, check: &Check<E>) -> Option<&'static str> {
    check
        .needs
        .missing(env.client().caps(), env.server().caps())
}

/// Runs one check, unless the devices lack what it needs.
pub fn run_check<E: Env>(env: &mut E, check: &Check<E>) -> Outcome {
    if let Some(why) = skip_reason(env, check) {
        return Outcome::Skip(why);
    }
    match (check.run)(env) {
        Ok(()) => Outcome::Pass,
        Err(e) => Outcome::Fail(e),
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn e2s(e: VerbsError) -> String {
    format!("{e}")
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// A heap buffer registered with a PD. The memory is only touched through raw pointers, since
/// the device may write it at any time while registered.
pub struct Buf<P: Provider> {
    mr: Option<P::Mr>,
    ptr: *mut u8,
    len: usize,
    keys: Keys,
}

// SAFETY: `Buf` owns its allocation and registration exclusively; the registration is Send
// (MemoryRegion: Send + Sync); the memory is only accessed through volatile raw-pointer reads and
// writes, which are as valid from another thread as from this one.
unsafe impl<P: Provider> Send for Buf<P> {}

impl<P: Provider> Buf<P> {
    /// Allocates `len` zeroed octets and registers them in `pd` with `access`.
    pub fn new(pd: &P::Pd, len: usize, access: Access) -> Result<Buf<P>, String> {
        let mem: Box<[u8]> = vec![0u8; len.max(1)].into_boxed_slice();
        let ptr = Box::into_raw(mem) as *mut u8;
        // SAFETY: the allocation outlives the registration: `Drop` drops the registration
        // before freeing the memory, and nothing else frees it.
        let reg = unsafe { pd.register(ptr, len, access) };
        match reg {
            Ok((mr, keys)) => Ok(Buf {
                mr: Some(mr),
                ptr,
                len,
                keys,
            }),
            Err(e) => {
                // SAFETY: `ptr` came from Box::into_raw of a slice of len.max(1) octets.
                drop(unsafe {
                    Box::from_raw(core::ptr::slice_from_raw_parts_mut(ptr, len.max(1)))
                });
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
        // SAFETY: allocated by Box::into_raw in `new` with len.max(1) octets; the registration
        // is gone, so no device access remains.
        drop(unsafe {
            Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                self.ptr,
                self.len.max(1),
            ))
        });
    }
}

/// The test pattern.
pub fn pattern(seed: u8, i: usize) -> u8 {
    seed.wrapping_add((i as u8).wrapping_mul(7))
        .wrapping_add((i >> 8) as u8)
}

fn expected(seed: u8, off: usize, len: usize) -> Vec<u8> {
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

fn wait_until<E: Env, T>(
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
            Err(e) if e.errno == super::errno::EADDRINUSE && tries < 16 => tries += 1,
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

fn expect_wc(
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

fn expect_status_in(wc: &Completion, wr_id: u64, allowed: &[WcStatus]) -> CheckResult {
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

fn post_recv<P: Provider>(qp: &mut P::Qp, wr_id: u64, sgl: &[Sge]) -> CheckResult {
    qp.queue_recv(&RecvWr { wr_id, sgl }).map_err(e2s)?;
    qp.flush_recv().map_err(e2s)
}

fn post_send<P: Provider>(qp: &mut P::Qp, wr: SendWr<'_, P>) -> CheckResult {
    qp.queue_send(&wr).map_err(e2s)?;
    qp.flush_send().map_err(e2s)
}

fn wr<'a, P: Provider>(wr_id: u64, op: SendOp<'a, P>, sgl: &'a [Sge]) -> SendWr<'a, P> {
    SendWr {
        wr_id,
        op,
        sgl,
        flags: SendFlags::SIGNALED,
    }
}

/// After an error on the client side: the client QP is in ERROR; the client disconnects (as a
/// ULP would); both sides report `Disconnected` and the server QP ends in ERROR.
fn expect_both_down<E: Env>(env: &mut E, p: &mut Pair<E::P>) -> CheckResult {
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
fn expect_terminated<E: Env>(env: &mut E, p: &mut Pair<E::P>) -> CheckResult {
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
fn expect_posted_in_error<E: Env>(
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
fn iwarp_remote_error_statuses(prof: Profile) -> &'static [WcStatus] {
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

const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const LW: Access = Access::LOCAL_WRITE;

// ---------------------------------------------------------------------------------------------
// Send / receive
// ---------------------------------------------------------------------------------------------

/// SEND of one SGE into a posted receive: both complete, the data and length arrive.
pub fn send_recv_basic<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    sb.fill(1);
    post_recv::<E::P>(&mut p.s.qp, 7, &[rb.sge(0, 4096)])?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 100)]))?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    expect_wc(&wc, 1, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    ensure!(
        wc.qp_num == p.c.qp.qp_num(),
        "send completion qp_num {}",
        wc.qp_num
    );
    let rc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&rc, 7, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(
        rc.byte_len == 100,
        "receive byte_len {}, expected 100",
        rc.byte_len
    );
    ensure!(rc.qp_num == p.s.qp.qp_num(), "receive qp_num {}", rc.qp_num);
    ensure!(
        !rc.flags.contains(WcFlags::WITH_INV),
        "WITH_INV set on a plain SEND"
    );
    ensure!(
        rb.read(0, 100) == expected(1, 0, 100),
        "received data differs"
    );
    ensure!(
        rb.read(100, 16) == vec![0; 16],
        "bytes beyond the message were written"
    );
    Ok(())
}

/// Multi-SGE gather (3 pieces) into multi-SGE scatter (2 pieces), in order.
pub fn send_recv_multi_sge<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    sb.fill(3);
    post_recv::<E::P>(&mut p.s.qp, 9, &[rb.sge(0, 50), rb.sge(1000, 200)])?;
    let g = [sb.sge(0, 10), sb.sge(100, 30), sb.sge(2000, 60)];
    post_send::<E::P>(&mut p.c.qp, SendWr::send(2, &g))?;
    expect_wc(
        &wait_wc(env, &mut p.c.cq)?,
        2,
        WcStatus::SUCCESS,
        Some(WcOpcode::SEND),
    )?;
    let rc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&rc, 9, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(rc.byte_len == 100, "byte_len {}, expected 100", rc.byte_len);
    let mut msg = expected(3, 0, 10);
    msg.extend(expected(3, 100, 30));
    msg.extend(expected(3, 2000, 60));
    let mut got = rb.read(0, 50);
    got.extend(rb.read(1000, 50));
    ensure!(got == msg, "scattered data differs");
    ensure!(
        rb.read(1050, 4) == vec![0; 4],
        "wrote past the message in the second SGE"
    );
    Ok(())
}

/// The statuses of a SEND the receiver cannot take (the requester's and the receive's), per
/// profile, for [`recv_too_small`] and [`recv_wrong_pd`].
struct RecvErr {
    sender: &'static [WcStatus],
    receiver: &'static [WcStatus],
}

/// After a SEND the receiver could not take: on IB both QPs are in ERROR after the requester's
/// error completion (the ULP disconnects); on iWARP the receiver terminates the connection.
fn recv_error_check<E: Env>(
    env: &mut E,
    mut p: Pair<E::P>,
    rb: &Buf<E::P>,
    recv_len: usize,
    exp: RecvErr,
) -> CheckResult {
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_recv::<E::P>(&mut p.s.qp, 5, &[rb.sge(0, recv_len)])?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 100)]))?;
    let wc = wait_wc(env, &mut p.c.cq).map_err(|e| format!("sender: {e}"))?;
    expect_status_in(&wc, 1, exp.sender).map_err(|e| format!("sender: {e}"))?;
    let rc = wait_wc(env, &mut p.s.cq).map_err(|e| format!("receiver: {e}"))?;
    expect_status_in(&rc, 5, exp.receiver).map_err(|e| format!("receiver: {e}"))?;
    if profile(env) != Profile::Soft {
        env.note(&format!(
            "sender {}, receiver {}",
            wc.status.name(),
            rc.status.name()
        ));
    }
    if profile(env).iwarp() {
        return expect_terminated(env, &mut p);
    }
    expect_both_down(env, &mut p)
}

/// A SEND larger than the receive buffer: the receive fails (`LOC_LEN_ERR`), the sender gets
/// `REM_INV_REQ_ERR`, both QPs go to ERROR. Device differences: docs/rdma-provider.md 2.3, 2.4.
pub fn recv_too_small<E: Env>(env: &mut E) -> CheckResult {
    let p = connect(env)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    let exp = match profile(env) {
        Profile::Soft => RecvErr {
            sender: &[WcStatus::REM_INV_REQ_ERR],
            receiver: &[WcStatus::LOC_LEN_ERR],
        },
        // docs/rdma-provider.md 2.3: rxe NAKs with "remote operational error" and fails the
        // receive with LOC_QP_OP_ERR.
        Profile::Rxe => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.3: IB devices report the receive as LOC_LEN_ERR (rdmavt:
        // LOC_QP_OP_ERR) and the sender as REM_INV_REQ_ERR (rxe: REM_OP_ERR).
        Profile::Ib => RecvErr {
            sender: &[WcStatus::REM_INV_REQ_ERR, WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.4: the SEND completes once handed to TCP; the receiver's
        // receive fails and it terminates the connection.
        Profile::Siw => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Siw),
            receiver: &[WcStatus::LOC_LEN_ERR],
        },
        // docs/rdma-provider.md 2.4: other iWARP devices may also report the remote error to
        // the sender; the receive fails and the connection is terminated.
        Profile::Iwarp => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Iwarp),
            receiver: &[WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR],
        },
    };
    recv_error_check(env, p, &rb, 16, exp)
}

/// A receive SGE whose lkey belongs to another PD: the receive fails with a local protection
/// error and the sender gets `REM_OP_ERR`. Device differences: docs/rdma-provider.md 2.3, 2.4.
pub fn recv_wrong_pd<E: Env>(env: &mut E) -> CheckResult {
    let p = connect(env)?;
    let other = env.server().alloc_pd().map_err(e2s)?;
    let rb = Buf::<E::P>::new(&other, 4096, LW)?;
    let exp = match profile(env) {
        Profile::Soft => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_PROT_ERR],
        },
        // docs/rdma-provider.md 2.3: rxe fails the receive with LOC_QP_OP_ERR.
        Profile::Rxe => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.3: IB devices report LOC_PROT_ERR (rdmavt LOC_QP_OP_ERR).
        Profile::Ib => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_PROT_ERR, WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.4: the SEND completes; siw fails the receive with
        // GENERAL_ERR and terminates.
        Profile::Siw => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Siw),
            receiver: &[WcStatus::GENERAL_ERR],
        },
        // docs/rdma-provider.md 2.4: other iWARP devices may also report the remote error to
        // the sender; the receive fails and the connection is terminated.
        Profile::Iwarp => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Iwarp),
            receiver: &[
                WcStatus::LOC_PROT_ERR,
                WcStatus::LOC_QP_OP_ERR,
                WcStatus::GENERAL_ERR,
            ],
        },
    };
    recv_error_check(env, p, &rb, 4096, exp)
}

/// A send SGE with a bad lkey, or outside its region: `LOC_PROT_ERR`, QP to ERROR.
pub fn send_bad_lkey<E: Env>(env: &mut E) -> CheckResult {
    let prof = profile(env);
    for case in 0..2 {
        let mut p = connect(env)?;
        let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
        let rb = Buf::<E::P>::new(&p.s.pd, 8192, LW)?;
        post_recv::<E::P>(&mut p.s.qp, 5, &[rb.sge(0, 8192)])?;
        let sge = if case == 0 {
            Sge {
                lkey: sb.keys().lkey ^ 0x5a00,
                ..sb.sge(0, 64)
            }
        } else {
            sb.sge(4000, 200)
        };
        post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sge]))?;
        let allowed: &[WcStatus] = match (prof, case) {
            (Profile::Soft, _) => &[WcStatus::LOC_PROT_ERR],
            // docs/rdma-provider.md 2.3: rxe reports an lkey it does not know as a QP
            // operation error, an SGE beyond its region as a protection error.
            (Profile::Rxe, 0) => &[WcStatus::LOC_QP_OP_ERR],
            (Profile::Rxe, _) => &[WcStatus::LOC_PROT_ERR],
            // docs/rdma-provider.md 2.4: siw reports both as a QP operation error.
            (Profile::Siw, _) => &[WcStatus::LOC_QP_OP_ERR],
            (Profile::Ib | Profile::Iwarp, _) => &[WcStatus::LOC_PROT_ERR, WcStatus::LOC_QP_OP_ERR],
        };
        expect_status_in(&wait_wc(env, &mut p.c.cq)?, 1, allowed)
            .map_err(|e| format!("case {case}: {e}"))?;
        ensure!(
            p.c.qp.state() == QpState::Error,
            "case {case}: QP state {:?}",
            p.c.qp.state()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RDMA Write / Read
// ---------------------------------------------------------------------------------------------

/// RDMA Write inside a region with REMOTE_WRITE lands exactly there.
pub fn rdma_write_in_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, RW)?;
    sb.fill(4);
    let sgl = [sb.sge(10, 1000)];
    let op: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr() + 100,
        rkey: tb.keys().rkey,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(3, op, &sgl))?;
    expect_wc(
        &wait_wc(env, &mut p.c.cq)?,
        3,
        WcStatus::SUCCESS,
        Some(WcOpcode::RDMA_WRITE),
    )?;
    ensure!(
        tb.read(100, 1000) == expected(4, 10, 1000),
        "written data differs"
    );
    ensure!(
        tb.read(0, 100) == vec![0; 100],
        "bytes before the target changed"
    );
    ensure!(
        tb.read(1100, 100) == vec![0; 100],
        "bytes after the target changed"
    );
    ensure!(
        settle(env, &mut p.s.cq)?.is_empty(),
        "RDMA Write consumed a receive"
    );
    Ok(())
}

fn write_expect_access_error<E: Env>(
    env: &mut E,
    p: &mut Pair<E::P>,
    remote_addr: u64,
    rkey: u32,
    len: usize,
) -> CheckResult {
    let sb = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    let sgl = [sb.sge(0, len)];
    post_send::<E::P>(
        &mut p.c.qp,
        wr::<E::P>(3, SendOp::RdmaWrite { remote_addr, rkey }, &sgl),
    )?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    let prof = profile(env);
    if prof.iwarp() {
        // docs/rdma-provider.md 2.4: the Write completes once handed to the transport; the
        // responder's access error terminates the connection.
        expect_status_in(&wc, 3, iwarp_remote_error_statuses(prof))?;
        env.note(&format!(
            "iWARP: the Write completed {}; the responder terminates the connection",
            wc.status.name()
        ));
        return expect_terminated(env, p);
    }
    expect_wc(&wc, 3, WcStatus::REM_ACCESS_ERR, None)?;
    expect_both_down(env, p)
}

/// Posts an RDMA Read and checks its status is one of `allowed`; returns the status. Unless it
/// succeeded (a documented device quirk), the requester's QP must be in ERROR.
#[allow(clippy::too_many_arguments)]
fn read_expect_status<E: Env>(
    env: &mut E,
    p: &mut Pair<E::P>,
    remote_addr: u64,
    rkey: u32,
    len: usize,
    sink_access: Access,
    allowed: &[WcStatus],
) -> Result<WcStatus, String> {
    let db = Buf::<E::P>::new(&p.c.pd, 8192, sink_access)?;
    let sgl = [db.sge(0, len)];
    post_send::<E::P>(
        &mut p.c.qp,
        wr::<E::P>(4, SendOp::RdmaRead { remote_addr, rkey }, &sgl),
    )?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    expect_status_in(&wc, 4, allowed)?;
    if allowed.len() > 1 {
        env.note(&format!("the Read completed {}", wc.status.name()));
    }
    if wc.status.is_success() {
        return Ok(wc.status);
    }
    ensure!(
        p.c.qp.state() == QpState::Error,
        "client QP state {:?} after an error completion",
        p.c.qp.state()
    );
    Ok(wc.status)
}

/// The requester's status for an RDMA Read the responder must refuse (bad rkey, out of
/// bounds): `REM_ACCESS_ERR`, except on iWARP.
fn read_refused_statuses(prof: Profile) -> &'static [WcStatus] {
    match prof {
        Profile::Soft | Profile::Rxe | Profile::Ib => &[WcStatus::REM_ACCESS_ERR],
        // docs/rdma-provider.md 2.4: siw terminates the connection instead of answering, so the
        // Read is flushed (a later kernel answering REM_ACCESS_ERR is accepted too).
        Profile::Siw => &[WcStatus::WR_FLUSH_ERR, WcStatus::REM_ACCESS_ERR],
        // docs/rdma-provider.md 2.4: iWARP reports the error or terminates.
        Profile::Iwarp => &[
            WcStatus::REM_ACCESS_ERR,
            WcStatus::REM_OP_ERR,
            WcStatus::WR_FLUSH_ERR,
        ],
    }
}

/// RDMA Write crossing the end of the target region: REM_ACCESS_ERR, both QPs down.
pub fn rdma_write_out_of_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr() + 4096 - 10, tb.keys().rkey);
    write_expect_access_error(env, &mut p, a, k, 100)?;
    ensure!(
        tb.read(4086, 10) == vec![0; 10],
        "out-of-bounds write modified the region"
    );
    Ok(())
}

/// RDMA Write with an rkey nobody registered: REM_ACCESS_ERR.
pub fn rdma_write_wrong_rkey<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let k = tb.keys().rkey.wrapping_add(0x3300);
    write_expect_access_error(env, &mut p, tb.addr(), k, 64)
}

/// RDMA Write into a region registered without REMOTE_WRITE: REM_ACCESS_ERR.
pub fn rdma_write_missing_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    write_expect_access_error(env, &mut p, a, k, 64)?;
    ensure!(
        tb.read(0, 64) == vec![0; 64],
        "write without access modified the region"
    );
    Ok(())
}

/// RDMA Write with the rkey of a region in another PD than the target QP's: REM_ACCESS_ERR.
pub fn rdma_write_wrong_pd<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let other = env.server().alloc_pd().map_err(e2s)?;
    let tb = Buf::<E::P>::new(&other, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    write_expect_access_error(env, &mut p, a, k, 64)
}

/// RDMA Write with the rkey of a region deregistered meanwhile: REM_ACCESS_ERR.
pub fn rdma_write_after_dereg<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let mut tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    tb.dereg();
    write_expect_access_error(env, &mut p, a, k, 64)?;
    ensure!(
        tb.read(0, 64) == vec![0; 64],
        "write after dereg modified memory"
    );
    Ok(())
}

/// RDMA Read inside a region with REMOTE_READ returns its bytes, scattered over two sink SGEs
/// where the device allows (`max_sge_rd` >= 2). A device with `max_sge_rd` 1 (siw) refuses a
/// two-SGE Read with `EINVAL` (docs/rdma-provider.md 2.4) and reads into one SGE.
pub fn rdma_read_in_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, RW)?;
    let db = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    tb.fill(5);
    let two = [db.sge(0, 300), db.sge(4000, 212)];
    let one = [db.sge(0, 512)];
    let op: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: tb.addr() + 1000,
        rkey: tb.keys().rkey,
    };
    let sgl: &[Sge] = if env.client().caps().max_sge_rd >= 2 {
        &two
    } else {
        let e = p.c.qp.queue_send(&wr::<E::P>(4, op, &two));
        ensure!(
            matches!(
                e,
                Err(VerbsError {
                    errno: super::errno::EINVAL,
                    ..
                })
            ),
            "a Read into 2 SGEs with max_sge_rd 1: {e:?}"
        );
        &one
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(4, op, sgl))?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    expect_wc(&wc, 4, WcStatus::SUCCESS, Some(WcOpcode::RDMA_READ))?;
    ensure!(
        wc.byte_len == 512,
        "RDMA Read byte_len {}, expected 512",
        wc.byte_len
    );
    let mut got = db.read(0, sgl[0].len as usize);
    if sgl.len() == 2 {
        got.extend(db.read(4000, 212));
        ensure!(
            db.read(300, 16) == vec![0; 16],
            "bytes after the first sink SGE were written"
        );
    }
    ensure!(got == expected(5, 1000, 512), "read data differs");
    Ok(())
}

/// Read depths as a Linux NFS/RDMA client sets them (xprtrdma: `initiator_depth` 0, it never
/// reads; `responder_resources` its device's maximum): the passive side may still issue RDMA
/// Reads towards it (what a server does to pull Read chunks), and its negotiated initiator
/// depth is the requester's responder resources, not the requester's initiator depth.
pub fn rdma_read_depths_of_a_linux_requester<E: Env>(env: &mut E) -> CheckResult {
    let c = QpOptions {
        initiator_depth: 0,
        responder_resources: 8,
        ..QpOptions::default()
    };
    let s = QpOptions {
        initiator_depth: 16,
        responder_resources: 16,
        ..QpOptions::default()
    };
    let mut p = connect_opts(
        env,
        PairOpts {
            c,
            s,
            ..PairOpts::default()
        },
    )?;
    let so = p.s.qp.options();
    ensure!(
        so.initiator_depth >= 1 && so.initiator_depth <= 8,
        "server initiator depth {} (requester serves 8 reads)",
        so.initiator_depth
    );
    ensure!(
        so.responder_resources == 0,
        "server responder resources {} (requester issues none)",
        so.responder_resources
    );
    let tb = Buf::<E::P>::new(&p.c.pd, 4096, RW)?;
    let db = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    tb.fill(9);
    let op: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: tb.addr() + 100,
        rkey: tb.keys().rkey,
    };
    post_send::<E::P>(&mut p.s.qp, wr::<E::P>(7, op, &[db.sge(0, 1000)]))?;
    let wc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&wc, 7, WcStatus::SUCCESS, Some(WcOpcode::RDMA_READ))?;
    ensure!(
        db.read(0, 1000) == expected(9, 100, 1000),
        "read data differs"
    );
    Ok(())
}

/// RDMA Read crossing the end of the source region: REM_ACCESS_ERR.
pub fn rdma_read_out_of_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr() + 4000, tb.keys().rkey);
    let allowed = read_refused_statuses(profile(env));
    read_expect_status(env, &mut p, a, k, 200, LW, allowed)?;
    expect_both_down(env, &mut p)
}

/// RDMA Read from a region without REMOTE_READ: REM_ACCESS_ERR.
pub fn rdma_read_missing_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    tb.fill(12);
    let (a, k) = (tb.addr(), tb.keys().rkey);
    let prof = profile(env);
    let allowed: &[WcStatus] = match prof {
        // docs/rdma-provider.md 2.4: siw does not check the source region's REMOTE_READ right:
        // the Read succeeds (device bug; upper layers never rely on a missing REMOTE_READ for
        // protection). A refusal (fixed kernel) is accepted too.
        Profile::Siw => &[
            WcStatus::SUCCESS,
            WcStatus::WR_FLUSH_ERR,
            WcStatus::REM_ACCESS_ERR,
        ],
        _ => read_refused_statuses(prof),
    };
    if read_expect_status(env, &mut p, a, k, 64, LW, allowed)?.is_success() {
        ensure!(
            p.c.qp.state() == QpState::Rts,
            "QP state {:?} after the unchecked Read",
            p.c.qp.state()
        );
        return Ok(());
    }
    expect_both_down(env, &mut p)
}

/// RDMA Read with an invalid rkey: REM_ACCESS_ERR.
pub fn rdma_read_wrong_rkey<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey ^ 0x01);
    let allowed = read_refused_statuses(profile(env));
    read_expect_status(env, &mut p, a, k, 64, LW, allowed)?;
    expect_both_down(env, &mut p)
}

/// RDMA Read into a local sink registered without LOCAL_WRITE: LOC_PROT_ERR.
pub fn rdma_read_sink_needs_local_write<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    let allowed = [WcStatus::LOC_PROT_ERR];
    read_expect_status(env, &mut p, a, k, 64, Access::NONE, &allowed)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Memory windows and invalidation
// ---------------------------------------------------------------------------------------------

const MW_ACC: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const MR_MW: Access = Access(Access::LOCAL_WRITE.0 | Access::MW_BIND.0);

/// Binds `mw` over `[off, off + len)` of `buf` on `side`'s QP; returns the new rkey after
/// checking the BIND_MW completion.
#[allow(clippy::too_many_arguments)]
fn bind<E: Env>(
    env: &mut E,
    side: &mut Side<E::P>,
    mw: &<E::P as Provider>::Mw,
    buf: &Buf<E::P>,
    off: u64,
    len: u64,
    access: Access,
    expect: WcStatus,
) -> Result<u32, String> {
    let rkey = mw.next_rkey();
    bind_key(env, side, mw, buf, off, len, access, expect, rkey)
}

/// As [`bind`], with the new key `rkey` chosen by the caller (any consumer key byte).
#[allow(clippy::too_many_arguments)]
fn bind_key<E: Env>(
    env: &mut E,
    side: &mut Side<E::P>,
    mw: &<E::P as Provider>::Mw,
    buf: &Buf<E::P>,
    off: u64,
    len: u64,
    access: Access,
    expect: WcStatus,
    rkey: u32,
) -> Result<u32, String> {
    let op: SendOp<'_, E::P> = SendOp::BindMw {
        mw,
        mr: buf.mr(),
        rkey,
        addr: buf.addr() + off,
        len,
        access,
    };
    post_send::<E::P>(&mut side.qp, wr::<E::P>(0xb1, op, &[]))?;
    let wc = wait_wc(env, &mut side.cq)?;
    let opcode = expect.is_success().then_some(WcOpcode::BIND_MW);
    expect_wc(&wc, 0xb1, expect, opcode)?;
    ensure!(
        mw.rkey() == rkey,
        "window key {:#x} after bind, expected {rkey:#x}",
        mw.rkey()
    );
    Ok(rkey)
}

fn local_inv<E: Env>(
    env: &mut E,
    side: &mut Side<E::P>,
    rkey: u32,
    expect: WcStatus,
) -> CheckResult {
    post_send::<E::P>(
        &mut side.qp,
        wr::<E::P>(0x1a, SendOp::LocalInv { rkey }, &[]),
    )?;
    let wc = wait_wc(env, &mut side.cq)?;
    let opcode = expect.is_success().then_some(WcOpcode::LOCAL_INV);
    expect_wc(&wc, 0x1a, expect, opcode)
}

/// A type-2 window bound on the server's QP grants the client remote read/write inside the
/// window, and nothing outside it (even inside the region).
pub fn mw_bind_and_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    let k0 = mw.rkey();
    let k = bind(
        env,
        &mut p.s,
        &mw,
        &tb,
        1024,
        2048,
        MW_ACC,
        WcStatus::SUCCESS,
    )?;
    ensure!(
        k != k0 && k >> 8 == k0 >> 8,
        "bind key {k:#x} from {k0:#x}: key byte must change"
    );
    let sb = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    sb.fill(6);
    let sgl = [sb.sge(0, 512)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr() + 1024 + 100,
        rkey: k,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    ensure!(
        tb.read(1124, 512) == expected(6, 0, 512),
        "write through window differs"
    );
    let dsg = [sb.sge(4096, 512)];
    let r: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: tb.addr() + 1024 + 100,
        rkey: k,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(2, r, &dsg))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 2, WcStatus::SUCCESS, None)?;
    ensure!(
        sb.read(4096, 512) == expected(6, 0, 512),
        "read through window differs"
    );
    // Inside the region, outside the window.
    if profile(env) == Profile::Rxe {
        // docs/rdma-provider.md 2.3: rxe checks a window access against the underlying region
        // only, so a Write crossing the window's end (inside the region) succeeds (device bug;
        // upper layers never expose through a window what the region must not expose). A
        // refusal (fixed kernel) is accepted too.
        let sgl = [sb.sge(0, 64)];
        let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
            remote_addr: tb.addr() + 1024 + 2048 - 8,
            rkey: k,
        };
        post_send::<E::P>(&mut p.c.qp, wr::<E::P>(3, w, &sgl))?;
        let wc = wait_wc(env, &mut p.c.cq)?;
        expect_status_in(&wc, 3, &[WcStatus::SUCCESS, WcStatus::REM_ACCESS_ERR])?;
        env.note(&format!(
            "rxe: Write crossing the window's end: {}",
            wc.status.name()
        ));
        if wc.status.is_success() {
            return Ok(());
        }
        expect_both_down(env, &mut p)?;
        ensure!(
            tb.read(3072, 64) == vec![0; 64],
            "write beyond the window landed"
        );
        return Ok(());
    }
    write_expect_access_error(env, &mut p, tb.addr() + 1024 + 2048 - 8, k, 64)?;
    ensure!(
        tb.read(3072, 64) == vec![0; 64],
        "write beyond the window landed"
    );
    Ok(())
}

/// Rebinding after invalidation rotates the key byte; the old key no longer works, the new
/// one does. The first rebind uses `ibv_inc_rkey`; the second a consumer key byte drawn at
/// random (as the connection engine does, [`super::KeyGen`]), which providers must accept.
pub fn mw_rebind_rotates_key<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    let k0 = bind(env, &mut p.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    local_inv(env, &mut p.s, k0, WcStatus::SUCCESS)?;
    let k1 = bind(env, &mut p.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    ensure!(k0 != k1, "rebind reused key {k0:#x}");
    local_inv(env, &mut p.s, k1, WcStatus::SUCCESS)?;
    // A byte other than the incremented one (the draw never repeats the current byte).
    let mut gen = super::KeyGen::new(0x5eed);
    let mut want = gen.next_rkey(k1);
    while want == super::inc_rkey(k1) {
        want = gen.next_rkey(k1);
    }
    let k2 = bind_key(
        env,
        &mut p.s,
        &mw,
        &tb,
        0,
        4096,
        MW_ACC,
        WcStatus::SUCCESS,
        want,
    )?;
    ensure!(k2 == want, "bind key {k2:#x}, asked for {want:#x}");
    ensure!(k1 != k2, "rebind reused key {k1:#x}");
    ensure!(
        k1 >> 8 == k2 >> 8,
        "rebind changed the index bits: {k1:#x} -> {k2:#x}"
    );
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: k2,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    write_expect_access_error(env, &mut p, tb.addr(), k1, 64)
}

/// Binding over a region registered without MW_BIND fails with MW_BIND_ERR.
pub fn mw_bind_requires_mw_bind_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    bind(
        env,
        &mut p.s,
        &mw,
        &tb,
        0,
        1024,
        MW_ACC,
        WcStatus::MW_BIND_ERR,
    )?;
    ensure!(
        p.s.qp.state() == QpState::Error,
        "QP state {:?} after MW_BIND_ERR",
        p.s.qp.state()
    );
    Ok(())
}

/// Binding a type-2 window that is already bound fails with MW_BIND_ERR.
pub fn mw_bind_twice_fails<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    bind(env, &mut p.s, &mw, &tb, 0, 1024, MW_ACC, WcStatus::SUCCESS)?;
    bind(
        env,
        &mut p.s,
        &mw,
        &tb,
        0,
        1024,
        MW_ACC,
        WcStatus::MW_BIND_ERR,
    )?;
    Ok(())
}

/// After LOCAL_INV of a window's key, access through it fails.
pub fn mw_local_inv_blocks_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    let k = bind(env, &mut p.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: k,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    local_inv(env, &mut p.s, k, WcStatus::SUCCESS)?;
    write_expect_access_error(env, &mut p, tb.addr(), k, 64)
}

/// A type-2 window is usable only through the QP that bound it: a second connection to the
/// same server PD gets REM_ACCESS_ERR with the same key.
pub fn mw_bound_to_qp<E: Env>(env: &mut E) -> CheckResult {
    let mut a = connect_with(env, PairOpts::default(), None, None)?.pair;
    let spd = a.s.pd.clone();
    let mut b = connect_with(env, PairOpts::default(), Some(spd), None)?.pair;
    let tb = Buf::<E::P>::new(&a.s.pd, 4096, MR_MW)?;
    let mw = a.s.pd.alloc_mw().map_err(e2s)?;
    let k = bind(env, &mut a.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    let sb = Buf::<E::P>::new(&a.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: k,
    };
    post_send::<E::P>(&mut a.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut a.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    write_expect_access_error(env, &mut b, tb.addr(), k, 64)
}

/// SEND_WITH_INV invalidates the receiver's window before the receive completes, and the
/// receive completion carries WITH_INV and the key.
pub fn send_with_inv<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    // The client exposes a window (as an RPC-over-RDMA requester does for a Write chunk).
    let cb = Buf::<E::P>::new(&p.c.pd, 8192, MR_MW)?;
    let mw = p.c.pd.alloc_mw().map_err(e2s)?;
    let k = bind(env, &mut p.c, &mw, &cb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    let rb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_recv::<E::P>(&mut p.c.qp, 0x77, &[rb.sge(0, 4096)])?;
    let sb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    sb.fill(8);
    let sgl = [sb.sge(0, 256)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: cb.addr(),
        rkey: k,
    };
    let s_inv = SendWr {
        wr_id: 2,
        op: SendOp::SendWithInv { rkey: k },
        sgl: &sgl[..],
        flags: SendFlags::SIGNALED,
    };
    p.s.qp.queue_send(&wr::<E::P>(1, w, &sgl)).map_err(e2s)?;
    p.s.qp.queue_send(&s_inv).map_err(e2s)?;
    p.s.qp.flush_send().map_err(e2s)?;
    let wcs = wait_wcs(env, &mut p.s.cq, 2)?;
    expect_wc(&wcs[0], 1, WcStatus::SUCCESS, None)?;
    expect_wc(&wcs[1], 2, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    let rc = wait_wc(env, &mut p.c.cq)?;
    expect_wc(&rc, 0x77, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(
        rc.flags.contains(WcFlags::WITH_INV),
        "receive lacks WITH_INV ({:?})",
        rc.flags
    );
    ensure!(
        rc.invalidated_rkey == k,
        "invalidated rkey {:#x}, expected {k:#x}",
        rc.invalidated_rkey
    );
    ensure!(
        cb.read(0, 256) == expected(8, 0, 256),
        "write before the send differs"
    );
    // The key is dead now: the server's next write through it fails.
    let mut flipped = Pair { c: p.s, s: p.c };
    write_expect_access_error(env, &mut flipped, cb.addr(), k, 64)
}

/// SEND_WITH_INV naming a key that is not a window bound to the receiving QP: the receive
/// completes in error and both QPs go down. siw (profile `Siw`) checks only that the STag
/// belongs to the receiver's PD and invalidates a registered region's key as well: the receive
/// succeeds, and the region's key is dead afterwards (docs/rdma-provider.md 2.4).
pub fn send_with_inv_bad_key<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW | Access::REMOTE_WRITE)?;
    post_recv::<E::P>(&mut p.s.qp, 0x55, &[rb.sge(0, 4096)])?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    // A region's key: regions are not invalidatable (not fast-registration MRs).
    let op: SendOp<'_, E::P> = SendOp::SendWithInv {
        rkey: rb.keys().rkey,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, op, &sgl))?;
    let rc = wait_wc(env, &mut p.s.cq)?;
    ensure!(rc.wr_id == 0x55, "receive wr_id {:#x}", rc.wr_id);
    if rc.status.is_success() && profile(env) == Profile::Siw {
        env.note("siw invalidated a registered region's key (it checks only the PD)");
        let _ = wait_wc(env, &mut p.c.cq)?;
        return write_expect_access_error(env, &mut p, rb.addr(), rb.keys().rkey, 64);
    }
    ensure!(
        !rc.status.is_success(),
        "receive succeeded despite an invalid invalidate key"
    );
    let _ = wait_wc(env, &mut p.c.cq)?;
    let _ = p.c.qp.disconnect();
    wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    ensure!(
        p.s.qp.state() == QpState::Error,
        "receiver state {:?}",
        p.s.qp.state()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RNR, flush, ordering
// ---------------------------------------------------------------------------------------------

/// With the receiver's rnr_retry_count 0, a SEND that finds no receive fails with
/// RNR_RETRY_EXC_ERR. On iWARP (no RNR) the receiver terminates the connection instead.
pub fn rnr_retry_zero<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        // The sender's own count must not matter: the receiver's (0) governs.
        c: QpOptions {
            rnr_retry_count: RNR_RETRY_INFINITE,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 32)]))?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    let prof = profile(env);
    if prof.iwarp() {
        // docs/rdma-provider.md 2.4: no RNR on iWARP; the SEND completes once handed to the
        // transport and the receiver, having no receive, terminates the connection.
        expect_status_in(&wc, 1, iwarp_remote_error_statuses(prof))?;
        env.note(&format!(
            "iWARP: the SEND completed {}; the receiver terminates the connection",
            wc.status.name()
        ));
        return expect_terminated(env, &mut p);
    }
    expect_wc(&wc, 1, WcStatus::RNR_RETRY_EXC_ERR, None)?;
    expect_both_down(env, &mut p)
}

/// With the receiver's rnr_retry_count infinite, a SEND waits for the receive and then
/// completes; later WRs wait behind it. The count is the receiver's (rdma_cm carries it to the
/// peer in the REQ / REP): the sender's own is 0 here.
pub fn rnr_retry_waits_for_recv<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        s: QpOptions {
            rnr_retry_count: RNR_RETRY_INFINITE,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    sb.fill(9);
    let sgl = [sb.sge(0, 32)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: rb.addr() + 1024,
        rkey: rb.keys().rkey,
    };
    p.c.qp.queue_send(&SendWr::send(1, &sgl)).map_err(e2s)?;
    p.c.qp.queue_send(&wr::<E::P>(2, w, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    let early = settle(env, &mut p.c.cq)?;
    ensure!(
        early.is_empty(),
        "completions before any receive was posted: {early:?}"
    );
    ensure!(
        rb.read(1024, 32) == vec![0; 32],
        "a WR behind the RNR-blocked SEND executed"
    );
    post_recv::<E::P>(&mut p.s.qp, 3, &[rb.sge(0, 1024)])?;
    let wcs = wait_wcs(env, &mut p.c.cq, 2)?;
    expect_wc(&wcs[0], 1, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    expect_wc(&wcs[1], 2, WcStatus::SUCCESS, Some(WcOpcode::RDMA_WRITE))?;
    expect_wc(
        &wait_wc(env, &mut p.s.cq)?,
        3,
        WcStatus::SUCCESS,
        Some(WcOpcode::RECV),
    )?;
    ensure!(
        rb.read(0, 32) == expected(9, 0, 32),
        "received data differs"
    );
    Ok(())
}

/// With the receiver's finite RNR retry count and no receive ever posted, the SEND eventually
/// fails with RNR_RETRY_EXC_ERR (the sender's own count, infinite here, does not matter).
pub fn rnr_retry_exhausted<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            rnr_retry_count: RNR_RETRY_INFINITE,
            ..QpOptions::default()
        },
        s: QpOptions {
            rnr_retry_count: 2,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 32)]))?;
    expect_wc(
        &wait_wc(env, &mut p.c.cq)?,
        1,
        WcStatus::RNR_RETRY_EXC_ERR,
        None,
    )?;
    expect_both_down(env, &mut p)
}

/// An error flushes everything outstanding on both sides with WR_FLUSH_ERR (sends after the
/// failed one, receives on both QPs) and WRs posted later flush too.
pub fn flush_on_error_both_sides<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let cb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sbuf = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    for i in 0..4u64 {
        p.s.qp
            .queue_recv(&RecvWr {
                wr_id: 100 + i,
                sgl: &[sbuf.sge(i as usize * 1024, 1024)],
            })
            .map_err(e2s)?;
        p.c.qp
            .queue_recv(&RecvWr {
                wr_id: 200 + i,
                sgl: &[cb.sge(i as usize * 1024, 1024)],
            })
            .map_err(e2s)?;
    }
    p.s.qp.flush_recv().map_err(e2s)?;
    p.c.qp.flush_recv().map_err(e2s)?;
    let sgl = [cb.sge(0, 16)];
    let bad: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: sbuf.addr(),
        rkey: sbuf.keys().rkey ^ 0x7700,
    };
    p.c.qp.queue_send(&wr::<E::P>(1, bad, &sgl)).map_err(e2s)?;
    p.c.qp.queue_send(&SendWr::send(2, &sgl)).map_err(e2s)?;
    p.c.qp.queue_send(&SendWr::send(3, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    let prof = profile(env);
    if prof.iwarp() {
        // docs/rdma-provider.md 2.4: the bad Write and the SENDs behind it may all complete
        // (handed to TCP) before the responder's termination arrives; whatever had not
        // completed flushes. The responder took nothing after the bad Write: its receives
        // flush, as do the requester's.
        let mut c_wcs = wait_wcs(env, &mut p.c.cq, 7)?;
        c_wcs.sort_by_key(|w| w.wr_id);
        let c_ids: Vec<u64> = c_wcs.iter().map(|w| w.wr_id).collect();
        ensure!(
            c_ids == [1, 2, 3, 200, 201, 202, 203],
            "client completed {c_ids:?}"
        );
        expect_status_in(&c_wcs[0], 1, iwarp_remote_error_statuses(prof))?;
        for w in &c_wcs[1..3] {
            expect_status_in(w, w.wr_id, iwarp_remote_error_statuses(prof))?;
        }
        for w in &c_wcs[3..] {
            expect_wc(w, w.wr_id, WcStatus::WR_FLUSH_ERR, None)?;
        }
        wait_event_kind(env, &mut p.c.qp, CmEventKind::Disconnected)?;
        wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    } else {
        let first = wait_wc(env, &mut p.c.cq)?;
        expect_wc(&first, 1, WcStatus::REM_ACCESS_ERR, None)?;
        expect_both_down(env, &mut p)?;
        let mut c_wcs = wait_wcs(env, &mut p.c.cq, 6)?;
        c_wcs.sort_by_key(|w| w.wr_id);
        let c_ids: Vec<u64> = c_wcs.iter().map(|w| w.wr_id).collect();
        ensure!(
            c_ids == [2, 3, 200, 201, 202, 203],
            "client flushed {c_ids:?}"
        );
        for w in &c_wcs {
            ensure!(
                w.status == WcStatus::WR_FLUSH_ERR,
                "client wr {} status {}",
                w.wr_id,
                w.status.name()
            );
        }
    }
    let s_wcs = wait_wcs(env, &mut p.s.cq, 4)?;
    for (i, w) in s_wcs.iter().enumerate() {
        expect_wc(w, 100 + i as u64, WcStatus::WR_FLUSH_ERR, None)?;
    }
    // Posting in ERROR is accepted and flushes (siw: never completes, see
    // expect_posted_in_error).
    p.c.qp.queue_send(&SendWr::send(4, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_posted_in_error(env, &mut p.c.cq, 4).map_err(|e| format!("send in ERROR: {e}"))?;
    post_recv::<E::P>(&mut p.s.qp, 105, &[sbuf.sge(0, 16)])?;
    expect_posted_in_error(env, &mut p.s.cq, 105).map_err(|e| format!("receive in ERROR: {e}"))
}

/// `disconnect` flushes both sides' receives and reports `Disconnected` on both.
pub fn disconnect_flushes_both<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let cb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    post_recv::<E::P>(&mut p.c.qp, 1, &[cb.sge(0, 64)])?;
    post_recv::<E::P>(&mut p.s.qp, 2, &[sb.sge(0, 64)])?;
    p.c.qp.disconnect().map_err(e2s)?;
    wait_event_kind(env, &mut p.c.qp, CmEventKind::Disconnected)?;
    wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::WR_FLUSH_ERR, None)?;
    expect_wc(&wait_wc(env, &mut p.s.cq)?, 2, WcStatus::WR_FLUSH_ERR, None)?;
    ensure!(
        p.c.qp.state() == QpState::Error && p.s.qp.state() == QpState::Error,
        "states after disconnect: {:?} / {:?}",
        p.c.qp.state(),
        p.s.qp.state()
    );
    Ok(())
}

/// RC ordering: a SEND posted after an RDMA Write is delivered after the written data is in
/// place.
pub fn ordering_write_then_send<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let len = 256 * 1024;
    let sb = Buf::<E::P>::new(&p.c.pd, len, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, len, RW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 64, LW)?;
    sb.fill(10);
    post_recv::<E::P>(&mut p.s.qp, 9, &[rb.sge(0, 64)])?;
    let sgl = [sb.sge(0, len)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    let unsignaled = SendWr {
        flags: SendFlags::NONE,
        ..wr::<E::P>(1, w, &sgl)
    };
    let hdr = [sb.sge(0, 8)];
    p.c.qp.queue_send(&unsignaled).map_err(e2s)?;
    p.c.qp.queue_send(&SendWr::send(2, &hdr)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_wc(
        &wait_wc(env, &mut p.s.cq)?,
        9,
        WcStatus::SUCCESS,
        Some(WcOpcode::RECV),
    )?;
    ensure!(
        tb.read(0, len) == expected(10, 0, len),
        "written data not in place at receive"
    );
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 2, WcStatus::SUCCESS, None)?;
    Ok(())
}

/// Fence: a SEND fenced behind an RDMA Read carries the data the Read brought in.
pub fn fence_read_then_send<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let src = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    let mid = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    src.fill(11);
    post_recv::<E::P>(&mut p.s.qp, 8, &[rb.sge(0, 4096)])?;
    let dst = [mid.sge(0, 512)];
    let r: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: src.addr() + 512,
        rkey: src.keys().rkey,
    };
    p.c.qp
        .queue_send(&SendWr {
            flags: SendFlags::NONE,
            ..wr::<E::P>(1, r, &dst)
        })
        .map_err(e2s)?;
    p.c.qp
        .queue_send(&SendWr::send(2, &dst).with_flags(SendFlags::SIGNALED | SendFlags::FENCE))
        .map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 2, WcStatus::SUCCESS, None)?;
    let rc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&rc, 8, WcStatus::SUCCESS, None)?;
    ensure!(
        rb.read(0, 512) == expected(11, 512, 512),
        "fenced SEND did not carry the read data"
    );
    Ok(())
}

/// Unsignaled WRs complete silently; only signaled ones produce completions.
pub fn unsignaled_is_silent<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    for i in 0..4u64 {
        p.s.qp
            .queue_recv(&RecvWr {
                wr_id: 10 + i,
                sgl: &[rb.sge(i as usize * 64, 64)],
            })
            .map_err(e2s)?;
    }
    p.s.qp.flush_recv().map_err(e2s)?;
    let sgl = [sb.sge(0, 16)];
    for i in 0..3u64 {
        let w = SendWr::send(i, &sgl).with_flags(SendFlags::NONE);
        p.c.qp.queue_send(&w).map_err(e2s)?;
    }
    p.c.qp.queue_send(&SendWr::send(3, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 3, WcStatus::SUCCESS, None)?;
    let extra = settle(env, &mut p.c.cq)?;
    ensure!(extra.is_empty(), "unsignaled WRs completed: {extra:?}");
    let r = wait_wcs(env, &mut p.s.cq, 4)?;
    ensure!(
        r.iter().map(|w| w.wr_id).collect::<Vec<_>>() == [10, 11, 12, 13],
        "receives completed out of order: {r:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Queue limits, CQ, doorbells
// ---------------------------------------------------------------------------------------------

/// Posting beyond the send or receive queue depth fails with ENOMEM; too many SGEs with
/// EINVAL.
pub fn queue_depth_enforced<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 2,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [b.sge(0, 8)];
    for i in 0..4 {
        p.c.qp
            .queue_recv(&RecvWr {
                wr_id: i,
                sgl: &sgl,
            })
            .map_err(e2s)?;
    }
    let e = p.c.qp.queue_recv(&RecvWr {
        wr_id: 9,
        sgl: &sgl,
    });
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: super::errno::ENOMEM,
                ..
            })
        ),
        "5th receive on a depth-4 queue: {e:?}"
    );
    for i in 0..4 {
        p.c.qp.queue_send(&SendWr::send(i, &sgl)).map_err(e2s)?;
    }
    let e = p.c.qp.queue_send(&SendWr::send(9, &sgl));
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: super::errno::ENOMEM,
                ..
            })
        ),
        "5th send on a depth-4 queue: {e:?}"
    );
    let three = [b.sge(0, 8), b.sge(8, 8), b.sge(16, 8)];
    let mut q = connect_opts(env, o)?;
    let e = q.c.qp.queue_send(&SendWr::send(1, &three));
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: super::errno::EINVAL,
                ..
            })
        ),
        "3 SGEs with max_send_sge 2: {e:?}"
    );
    Ok(())
}

/// Unsignaled WRs keep their send-queue slots until a later signaled WR completes: a queue
/// of only unsignaled WRs fills up.
pub fn unsignaled_hold_send_slots<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            max_send_wr: 4,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let sgl = [b.sge(0, 8)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    for i in 0..4 {
        let x = SendWr {
            flags: SendFlags::NONE,
            ..wr::<E::P>(i, w, &sgl)
        };
        p.c.qp.queue_send(&x).map_err(e2s)?;
    }
    p.c.qp.flush_send().map_err(e2s)?;
    let _ = settle(env, &mut p.c.cq)?;
    let e = p.c.qp.queue_send(&wr::<E::P>(9, w, &sgl));
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: super::errno::ENOMEM,
                ..
            })
        ),
        "send queue of 4 unsignaled WRs accepted a 5th: {e:?}"
    );
    let mut q = connect_opts(env, o)?;
    let qb = Buf::<E::P>::new(&q.c.pd, 4096, LW)?;
    let qt = Buf::<E::P>::new(&q.s.pd, 4096, RW)?;
    let qsgl = [qb.sge(0, 8)];
    let qw: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: qt.addr(),
        rkey: qt.keys().rkey,
    };
    for i in 0..3 {
        let x = SendWr {
            flags: SendFlags::NONE,
            ..wr::<E::P>(i, qw, &qsgl)
        };
        q.c.qp.queue_send(&x).map_err(e2s)?;
    }
    q.c.qp.queue_send(&wr::<E::P>(3, qw, &qsgl)).map_err(e2s)?;
    q.c.qp.flush_send().map_err(e2s)?;
    expect_wc(&wait_wc(env, &mut q.c.cq)?, 3, WcStatus::SUCCESS, None)?;
    for i in 10..14 {
        q.c.qp
            .queue_send(&wr::<E::P>(i, qw, &qsgl))
            .map_err(|e| format!("slot not freed by the signaled completion: {e}"))?;
    }
    Ok(())
}

/// More completions than the CQ holds: the CQ overruns (poll fails) and its QPs go to ERROR.
pub fn cq_overflow<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            max_send_wr: 32,
            ..QpOptions::default()
        },
        c_cq: 4,
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let sgl = [b.sge(0, 8)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    for i in 0..32 {
        p.c.qp.queue_send(&wr::<E::P>(i, w, &sgl)).map_err(e2s)?;
    }
    p.c.qp.flush_send().map_err(e2s)?;
    let mut buf = [Completion::default(); 64];
    let r = wait_until(env, "the CQ to report an overrun", |env| {
        let r = p.c.cq.poll(&mut buf);
        if r.is_err() {
            return Ok(Some(r));
        }
        env.idle();
        Ok(None)
    })?;
    ensure!(r.is_err(), "poll after overrun: {r:?}");
    wait_until(env, "the QP to enter ERROR", |_| {
        Ok((p.c.qp.state() == QpState::Error).then_some(()))
    })?;
    Ok(())
}

/// One doorbell per non-empty flush, none for an empty one.
pub fn doorbell_per_batch<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let sgl = [b.sge(0, 8)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    let d0 = p.c.qp.doorbells();
    for i in 0..5 {
        p.c.qp.queue_send(&wr::<E::P>(i, w, &sgl)).map_err(e2s)?;
    }
    p.c.qp.flush_send().map_err(e2s)?;
    ensure!(
        p.c.qp.doorbells() == d0 + 1,
        "5 WRs took {} doorbells",
        p.c.qp.doorbells() - d0
    );
    p.c.qp.flush_send().map_err(e2s)?;
    p.c.qp.flush_recv().map_err(e2s)?;
    ensure!(
        p.c.qp.doorbells() == d0 + 1,
        "an empty flush rang the doorbell"
    );
    for i in 0..3 {
        p.c.qp
            .queue_recv(&RecvWr {
                wr_id: i,
                sgl: &sgl,
            })
            .map_err(e2s)?;
    }
    p.c.qp.flush_recv().map_err(e2s)?;
    ensure!(
        p.c.qp.doorbells() == d0 + 2,
        "3 receives took {} doorbells",
        p.c.qp.doorbells() - d0 - 1
    );
    let wcs = wait_wcs(env, &mut p.c.cq, 5)?;
    ensure!(
        wcs.iter().all(|w| w.status.is_success()),
        "batch failed: {wcs:?}"
    );
    Ok(())
}

/// A shared receive queue serves two connections.
pub fn srq_shared_by_two_qps<E: Env>(env: &mut E) -> CheckResult {
    let spd = Arc::new(env.server().alloc_pd().map_err(e2s)?);
    let mut srq = env.server().create_srq(&spd, 16, 1).map_err(e2s)?;
    let rb = Buf::<E::P>::new(&spd, 4096, LW)?;
    for i in 0..4u64 {
        srq.queue_recv(&RecvWr {
            wr_id: 50 + i,
            sgl: &[rb.sge(i as usize * 1024, 1024)],
        })
        .map_err(e2s)?;
    }
    srq.flush_recv().map_err(e2s)?;
    ensure!(srq.doorbells() == 1, "SRQ doorbells {}", srq.doorbells());
    let mut a = connect_with(env, PairOpts::default(), Some(spd.clone()), Some(&srq))?.pair;
    let mut b = connect_with(env, PairOpts::default(), Some(spd.clone()), Some(&srq))?.pair;
    let e = a.s.qp.queue_recv(&RecvWr { wr_id: 1, sgl: &[] });
    ensure!(
        e.is_err(),
        "posting a receive to a QP with an SRQ succeeded"
    );
    for (i, side) in [&mut a, &mut b].into_iter().enumerate() {
        let sb = Buf::<E::P>::new(&side.c.pd, 64, LW)?;
        sb.fill(20 + i as u8);
        post_send::<E::P>(&mut side.c.qp, SendWr::send(i as u64, &[sb.sge(0, 64)]))?;
        expect_wc(
            &wait_wc(env, &mut side.c.cq)?,
            i as u64,
            WcStatus::SUCCESS,
            None,
        )?;
        let rc = wait_wc(env, &mut side.s.cq)?;
        ensure!(rc.status.is_success(), "SRQ receive failed: {rc:?}");
        ensure!(
            rc.qp_num == side.s.qp.qp_num(),
            "SRQ receive reported qp {}",
            rc.qp_num
        );
        let slot = (rc.wr_id - 50) as usize;
        ensure!(
            rb.read(slot * 1024, 64) == expected(20 + i as u8, 0, 64),
            "SRQ data differs"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Connection management
// ---------------------------------------------------------------------------------------------

/// Private data travels with connect (56 octets) and accept (196 octets).
pub fn private_data_exchange<E: Env>(env: &mut E) -> CheckResult {
    let req: Vec<u8> = (0..PRIVATE_DATA_CONNECT_MAX as u8)
        .map(|i| i ^ 0xa5)
        .collect();
    let rep: Vec<u8> = (0..PRIVATE_DATA_ACCEPT_MAX as u8)
        .map(|i| i ^ 0x3c)
        .collect();
    let o = PairOpts {
        c_pdata: &req,
        s_pdata: &rep,
        ..PairOpts::default()
    };
    let conn = connect_with(env, o, None, None)?;
    let (ev, got_req) = (conn.established, conn.request_private_data);
    ensure!(
        got_req.len() >= req.len() && got_req[..req.len()] == req[..],
        "server saw {got_req:02x?}"
    );
    let got_rep = ev.private_data.as_slice();
    ensure!(
        got_rep.len() >= rep.len() && got_rep[..rep.len()] == rep[..],
        "client saw {got_rep:02x?}"
    );
    Ok(())
}

/// Private data beyond the RDMA-CM limits is refused.
pub fn private_data_limits<E: Env>(env: &mut E) -> CheckResult {
    let (addr, mut l) = listen_fresh(env, 4)?;
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let cq = env.client().create_cq(64).map_err(e2s)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let long = [0u8; PRIVATE_DATA_ACCEPT_MAX + 1];
    let e = env
        .client()
        .connect(addr, init, &long[..PRIVATE_DATA_CONNECT_MAX + 1]);
    ensure!(
        e.is_err(),
        "connect with 57 octets of private data succeeded"
    );
    let _qp1 = env.client().connect(addr, init, &[1, 2, 3]).map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let r = req.reject(&long[..PRIVATE_DATA_REJECT_MAX + 1]);
    ensure!(
        r.is_err(),
        "reject with 149 octets of private data succeeded"
    );
    let _qp2 = env.client().connect(addr, init, &[4, 5, 6]).map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let spd = env.server().alloc_pd().map_err(e2s)?;
    let scq = env.server().create_cq(64).map_err(e2s)?;
    let sinit = QpInit {
        pd: &spd,
        send_cq: &scq,
        recv_cq: &scq,
        srq: None,
        opts: QpOptions::default(),
    };
    let r = req.accept(sinit, &long[..]);
    ensure!(
        r.is_err(),
        "accept with 197 octets of private data succeeded"
    );
    Ok(())
}

/// Reject carries private data to the requester, whose QP ends in ERROR.
pub fn reject_with_private_data<E: Env>(env: &mut E) -> CheckResult {
    let (addr, mut l) = listen_fresh(env, 4)?;
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let mut cq = env.client().create_cq(64).map_err(e2s)?;
    let b = Buf::<E::P>::new(&pd, 64, LW)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = env.client().connect(addr, init, b"hello").map_err(e2s)?;
    post_recv::<E::P>(&mut qp, 1, &[b.sge(0, 64)])?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    ensure!(
        req.private_data().starts_with(b"hello"),
        "request private data {:02x?}",
        req.private_data()
    );
    req.reject(b"go away").map_err(e2s)?;
    let ev = wait_event(env, &mut qp)?;
    ensure!(
        ev.kind == CmEventKind::Rejected,
        "got {:?}, expected Rejected",
        ev.kind
    );
    // docs/rdma-provider.md 2.4 / 2.5: an iWARP reject is an MPA reject, reported as
    // -ECONNRESET; IB reports the IB CM reason "consumer reject".
    let status = if profile(env).iwarp() {
        -super::errno::ECONNRESET
    } else {
        REJECT_CONSUMER
    };
    ensure!(
        ev.status == status,
        "reject status {}, expected {status}",
        ev.status
    );
    ensure!(
        ev.private_data.as_slice().starts_with(b"go away"),
        "reject private data {:?}",
        ev.private_data
    );
    ensure!(
        qp.state() == QpState::Error,
        "QP state {:?} after reject",
        qp.state()
    );
    expect_wc(&wait_wc(env, &mut cq)?, 1, WcStatus::WR_FLUSH_ERR, None)?;
    Ok(())
}

/// Connecting to an address nobody listens on fails (Rejected, or Unreachable / ConnectError).
pub fn connect_without_listener<E: Env>(env: &mut E) -> CheckResult {
    let addr = env.listen_addr();
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let cq = env.client().create_cq(64).map_err(e2s)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = match env.client().connect(addr, init, &[]) {
        Ok(qp) => qp,
        Err(_) => return Ok(()),
    };
    let ev = wait_event(env, &mut qp)?;
    ensure!(
        matches!(
            ev.kind,
            CmEventKind::Rejected | CmEventKind::Unreachable | CmEventKind::ConnectError
        ),
        "got {:?}",
        ev.kind
    );
    ensure!(qp.state() != QpState::Rts, "QP is RTS without a peer");
    Ok(())
}

/// Sending before the connection is established is refused (EINVAL), receives may be posted.
pub fn post_before_established<E: Env>(env: &mut E) -> CheckResult {
    let (addr, _l) = listen_fresh(env, 4)?;
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let cq = env.client().create_cq(64).map_err(e2s)?;
    let b = Buf::<E::P>::new(&pd, 64, LW)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = env.client().connect(addr, init, &[]).map_err(e2s)?;
    ensure!(qp.state() != QpState::Rts, "QP RTS before accept");
    post_recv::<E::P>(&mut qp, 1, &[b.sge(0, 64)])?;
    let e = qp.queue_send(&SendWr::send(1, &[b.sge(0, 8)]));
    ensure!(
        e.is_err(),
        "send accepted before the connection was established"
    );
    Ok(())
}

/// `accept_prepared`: receives posted on the new QP in `prepare` (before the accept reaches the
/// requester, which is not RTS yet) are in place when the requester sees Established, so it can
/// send at once with RNR retry 0 on both sides.
pub fn recv_posted_before_accept<E: Env>(env: &mut E) -> CheckResult {
    let (addr, mut l) = listen_fresh(env, 4)?;
    let no_rnr = QpOptions {
        rnr_retry_count: 0,
        ..QpOptions::default()
    };
    let c_pd = env.client().alloc_pd().map_err(e2s)?;
    let mut c_cq = env.client().create_cq(64).map_err(e2s)?;
    let sb = Buf::<E::P>::new(&c_pd, 64, LW)?;
    sb.fill(5);
    let mut c_qp = env
        .client()
        .connect(
            addr,
            QpInit {
                pd: &c_pd,
                send_cq: &c_cq,
                recv_cq: &c_cq,
                srq: None,
                opts: no_rnr,
            },
            &[],
        )
        .map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let s_pd = env.server().alloc_pd().map_err(e2s)?;
    let mut s_cq = env.server().create_cq(64).map_err(e2s)?;
    let rb = Buf::<E::P>::new(&s_pd, 256, LW)?;
    let mut requester_was_rts = false;
    let mut prepared = 0;
    let mut s_qp = req
        .accept_prepared(
            QpInit {
                pd: &s_pd,
                send_cq: &s_cq,
                recv_cq: &s_cq,
                srq: None,
                opts: no_rnr,
            },
            &[],
            &mut |qp| {
                prepared += 1;
                requester_was_rts |= c_qp.state() == QpState::Rts;
                qp.queue_recv(&RecvWr {
                    wr_id: 77,
                    sgl: &[rb.sge(0, 256)],
                })?;
                qp.flush_recv()
            },
        )
        .map_err(e2s)?;
    ensure!(prepared == 1, "prepare ran {prepared} times");
    ensure!(!requester_was_rts, "requester was RTS before the accept");
    let ev = wait_event_kind(env, &mut c_qp, CmEventKind::Established)?;
    ensure!(
        ev.kind == CmEventKind::Established,
        "client got {:?}",
        ev.kind
    );
    // Send at once: the receive posted in `prepare` must be there (RNR retry is 0).
    post_send::<E::P>(&mut c_qp, SendWr::send(1, &[sb.sge(0, 64)]))?;
    let wc = wait_wc(env, &mut c_cq)?;
    expect_wc(&wc, 1, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    let rc = wait_wc(env, &mut s_cq)?;
    expect_wc(&rc, 77, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(rc.byte_len == 64, "receive byte_len {}", rc.byte_len);
    ensure!(rb.read(0, 64) == sb.read(0, 64), "received data differs");
    let _ = wait_event_kind(env, &mut s_qp, CmEventKind::Established);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

macro_rules! checks {
    ($($name:ident $([$($need:ident)|+])?),* $(,)?) => {
        /// Every check, in order, with what it needs.
        pub fn all_checks<E: Env>() -> Vec<Check<E>> {
            vec![$(Check {
                name: stringify!($name),
                run: $name::<E>,
                needs: Needs(0 $($(| Needs::$need.0)+)?),
            }),*]
        }
    };
}

checks!(
    send_recv_basic,
    send_recv_multi_sge,
    recv_too_small,
    recv_wrong_pd,
    send_bad_lkey,
    rdma_write_in_bounds,
    rdma_write_out_of_bounds,
    rdma_write_wrong_rkey,
    rdma_write_missing_access,
    rdma_write_wrong_pd,
    rdma_write_after_dereg,
    rdma_read_in_bounds,
    rdma_read_depths_of_a_linux_requester,
    rdma_read_out_of_bounds,
    rdma_read_missing_access,
    rdma_read_wrong_rkey,
    rdma_read_sink_needs_local_write,
    mw_bind_and_access[MW_TYPE2],
    mw_rebind_rotates_key[MW_TYPE2 | SEND_WITH_INV],
    mw_bind_requires_mw_bind_access[MW_TYPE2],
    mw_bind_twice_fails[MW_TYPE2],
    mw_local_inv_blocks_access[MW_TYPE2 | SEND_WITH_INV],
    mw_bound_to_qp[MW_TYPE2],
    send_with_inv[MW_TYPE2 | SEND_WITH_INV],
    send_with_inv_bad_key[SEND_WITH_INV],
    rnr_retry_zero,
    rnr_retry_waits_for_recv[RNR],
    rnr_retry_exhausted[RNR],
    flush_on_error_both_sides,
    disconnect_flushes_both,
    ordering_write_then_send,
    fence_read_then_send,
    unsignaled_is_silent,
    queue_depth_enforced,
    unsignaled_hold_send_slots,
    cq_overflow,
    doorbell_per_batch,
    srq_shared_by_two_qps[SRQ],
    private_data_exchange,
    private_data_limits,
    reject_with_private_data,
    connect_without_listener,
    post_before_established,
    recv_posted_before_accept,
);

/// Counts of a suite run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Checks that passed.
    pub passed: usize,
    /// Checks that failed.
    pub failed: usize,
    /// Checks skipped because the devices lack what they need.
    pub skipped: usize,
}

/// Runs every check, printing `PASS name` / `FAIL name: reason` / `SKIP name (why)`.
pub fn run_all<E: Env>(env: &mut E) -> Summary {
    let mut sum = Summary::default();
    for c in all_checks::<E>() {
        match run_check(env, &c) {
            Outcome::Pass => {
                sum.passed += 1;
                println!("PASS {}", c.name);
            }
            Outcome::Fail(e) => {
                sum.failed += 1;
                println!("FAIL {}: {e}", c.name);
            }
            Outcome::Skip(why) => {
                sum.skipped += 1;
                println!("SKIP {} ({why})", c.name);
            }
        }
    }
    sum
}
