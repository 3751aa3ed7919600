//! Soft RC queue pairs: the send engine (the "NIC"), receive queues, SRQs, flush-on-error and
//! fault injection.
//!
//! Normal operation: `queue_send` copies work requests into an owner-local batch;
//! `flush_send` (the doorbell) moves the batch into the QP's send queue and executes it in
//! order on the calling thread: SEND pops the peer's receive queue and copies into its buffers,
//! RDMA WRITE/READ copy through the peer's key table, LOCAL_INV/BIND_MW change the local key
//! table. Completions go to the CQs (lock-free MPMC rings). A SEND that finds no receive
//! (RNR) stays at the head of the send queue and is retried on later doorbells, CQ polls and
//! the peer's receive doorbells, up to the *peer's* `rnr_retry_count` times (7 = forever; the
//! count is the one the receiver asked for at connection time, as rdma_cm does).
//!
//! Recovery: any error completion moves the QP to ERROR and tears the connection down: both
//! QPs go to ERROR, both get `Disconnected`, and every outstanding send and receive WR
//! completes with `WR_FLUSH_ERR` (so do WRs posted later). Flushing runs on whichever thread
//! holds (or next takes) the queue's lock: locks here are try-locks plus a "dirty" flag that the
//! holder re-checks after unlocking, so no thread ever waits for a lock whose holder waits.
//!
//! Locks and their holders (no cycles, so no deadlock): a QP's send-queue lock is held while
//! its engine runs; the engine may spin for the *peer's* receive token (held only for one
//! delivery or one flush, which never wait for anything).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::Backoff;

use super::cq::CqShared;
use super::mr::{BindReq, Pin, MAX_SGE};
use super::trace::{TraceEvent, TraceOp};
use super::{DeviceInner, SoftProvider};
use crate::verbs::validate;
use crate::verbs::{
    errno, Access, CmEvent, CmEventKind, Completion, PrivateData, QpOptions, QpState, QueuePair,
    RecvWr, SendFlags, SendOp, SendWr, Sge, SharedReceiveQueue, VerbsCall, VerbsError, WcFlags,
    WcOpcode, WcStatus, RNR_RETRY_INFINITE,
};

/// Internal state value of a destroyed QP (reported as RESET; nothing completes any more).
const DESTROYED: u8 = 0xff;
/// Messages are split into packets of this size for PSN accounting in traces.
const MTU: u64 = 4096;
/// Largest message (IBA: 2^31).
const MAX_MSG: u64 = 1 << 31;

// ---------------------------------------------------------------------------------------------
// Queue entries
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
pub(crate) struct RecvEntry {
    wr_id: u64,
    num_sge: u8,
    sges: [Sge; MAX_SGE],
}

impl RecvEntry {
    fn from_wr(wr: &RecvWr<'_>) -> RecvEntry {
        let mut e = RecvEntry {
            wr_id: wr.wr_id,
            num_sge: wr.sgl.len() as u8,
            sges: [Sge::default(); MAX_SGE],
        };
        e.sges[..wr.sgl.len()].copy_from_slice(wr.sgl);
        e
    }
}

#[derive(Clone, Copy)]
enum SqOp {
    Send,
    SendInv(u32),
    Write { raddr: u64, rkey: u32 },
    Read { raddr: u64, rkey: u32 },
    LocalInv(u32),
    Bind(BindReq),
}

impl SqOp {
    fn opcode(&self) -> WcOpcode {
        match self {
            SqOp::Send | SqOp::SendInv(_) => WcOpcode::SEND,
            SqOp::Write { .. } => WcOpcode::RDMA_WRITE,
            SqOp::Read { .. } => WcOpcode::RDMA_READ,
            SqOp::LocalInv(_) => WcOpcode::LOCAL_INV,
            SqOp::Bind(_) => WcOpcode::BIND_MW,
        }
    }
}

#[derive(Clone, Copy)]
struct SqEntry {
    wr_id: u64,
    op: SqOp,
    flags: SendFlags,
    num_sge: u8,
    sges: [Sge; MAX_SGE],
    /// With `INLINE`: the data was copied into the entry's inline area.
    inline_len: u32,
}

const EMPTY_ENTRY: SqEntry = SqEntry {
    wr_id: 0,
    op: SqOp::Send,
    flags: SendFlags::NONE,
    num_sge: 0,
    sges: [Sge {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_SGE],
    inline_len: 0,
};

/// A contiguous piece of registered memory taking part in a copy.
#[derive(Clone, Copy)]
struct Seg {
    ptr: *mut u8,
    len: usize,
}

const NO_SEG: Seg = Seg {
    ptr: core::ptr::null_mut(),
    len: 0,
};

/// Segments of one side of a copy, each pinned in its key table while the list lives.
struct SegList<'a> {
    segs: [Seg; MAX_SGE],
    pins: [Option<Pin<'a>>; MAX_SGE],
    n: usize,
    total: u64,
}

impl<'a> SegList<'a> {
    fn new() -> SegList<'a> {
        SegList {
            segs: [NO_SEG; MAX_SGE],
            pins: [const { None }; MAX_SGE],
            n: 0,
            total: 0,
        }
    }

    fn push(&mut self, seg: Seg, pin: Option<Pin<'a>>) {
        // n < MAX_SGE: callers push at most one segment per SGE of a WR (<= MAX_SGE).
        if self.n < MAX_SGE {
            self.segs[self.n] = seg;
            self.pins[self.n] = pin;
            self.n += 1;
            self.total += seg.len as u64;
        }
    }

    fn segs(&self) -> &[Seg] {
        &self.segs[..self.n]
    }
}

/// Copies `total` octets from the `src` segments to the `dst` segments, in order.
///
/// # Safety
/// Every segment must lie inside memory that is registered and pinned (its registration cannot
/// end while the pin lives), or inside an engine-owned inline buffer; `total` must not exceed
/// either side's length. Overlap between source and destination is allowed (memmove), since
/// loopback RDMA may copy within one region. Concurrent access by the application is part of
/// the registration contract (`Registrar::register` is unsafe).
unsafe fn copy_segs(src: &[Seg], dst: &[Seg], mut total: usize) {
    let (mut i, mut j, mut so, mut dof) = (0usize, 0usize, 0usize, 0usize);
    while total > 0 && i < src.len() && j < dst.len() {
        let n = (src[i].len - so).min(dst[j].len - dof).min(total);
        // SAFETY: per the function contract both ranges are inside live, pinned memory.
        unsafe { core::ptr::copy(src[i].ptr.add(so), dst[j].ptr.add(dof), n) };
        total -= n;
        so += n;
        dof += n;
        if so == src[i].len {
            i += 1;
            so = 0;
        }
        if dof == dst[j].len {
            j += 1;
            dof = 0;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared receive queue
// ---------------------------------------------------------------------------------------------

pub(crate) struct SrqShared {
    pub(crate) dev: Arc<DeviceInner>,
    pd: u32,
    ring: ArrayQueue<RecvEntry>,
}

/// A soft shared receive queue.
pub struct SoftSrq {
    pub(crate) shared: Arc<SrqShared>,
    staged: Vec<RecvEntry>,
    max_wr: u32,
    max_sge: u32,
    doorbells: u64,
}

impl core::fmt::Debug for SoftSrq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftSrq(max_wr {})", self.max_wr)
    }
}

impl SoftSrq {
    pub(crate) fn new(dev: Arc<DeviceInner>, pd: u32, max_wr: u32, max_sge: u32) -> SoftSrq {
        SoftSrq {
            shared: Arc::new(SrqShared {
                dev,
                pd,
                ring: ArrayQueue::new(max_wr.max(1) as usize),
            }),
            staged: Vec::with_capacity(max_wr as usize),
            max_wr,
            max_sge,
            doorbells: 0,
        }
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let err = |e| Err(VerbsError::new(VerbsCall::PostSrqRecv, e));
        validate::recv_wr(wr, self.max_sge, VerbsCall::PostSrqRecv)?;
        if self.shared.ring.len() + self.staged.len() >= self.max_wr as usize {
            return err(errno::ENOMEM);
        }
        self.staged.push(RecvEntry::from_wr(wr));
        Ok(())
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        for e in self.staged.drain(..) {
            // Cannot fail: occupancy was checked against the ring's capacity when queued and
            // only consumers run concurrently.
            let _ = self.shared.ring.push(e);
        }
        self.doorbells += 1;
        Ok(())
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }
}

// ---------------------------------------------------------------------------------------------
// QP shared state
// ---------------------------------------------------------------------------------------------

/// How a QP's completions are held back (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayMode {
    /// Hold every completion until [`SoftFaults::release_completions`].
    Hold,
    /// Hold each completion until its CQ has been polled this many more times.
    Polls(u32),
}

#[derive(Clone, Copy)]
struct Held {
    c: Completion,
    recv: bool,
    due: u64,
}

struct SendEngine {
    ring: Box<[SqEntry]>,
    inline: Box<[u8]>,
    max_inline: usize,
    head: usize,
    len: usize,
    peer: Option<Arc<QpShared>>,
    rnr_retry: u8,
    /// Retries left for the RNR-blocked head WR (None: head not yet attempted).
    rnr_left: Option<u8>,
    psn: u32,
    /// Executed unsignaled WRs not yet retired by a later completion.
    unsignaled: u32,
    /// Send WRs executed so far (fault injection counts these).
    executed: u64,
}

enum Outcome {
    Done(u32),
    Fail(WcStatus),
    Rnr,
}

pub(crate) struct QpShared {
    pub(crate) qp_num: u32,
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) pd: u32,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    srq: Option<Arc<SrqShared>>,
    state: AtomicU8,
    connected: AtomicBool,
    down: AtomicBool,
    /// Set on both QPs of a connection before either changes state when it is torn down, so
    /// an engine that finds its peer gone flushes instead of reporting a transport error.
    link_down: AtomicBool,
    pub(crate) local_addr: SocketAddr,
    pub(crate) peer_addr: SocketAddr,
    pub(crate) opts: QpOptions,
    pub(crate) initiator_depth: AtomicU8,
    pub(crate) responder_resources: AtomicU8,
    rq: Option<ArrayQueue<RecvEntry>>,
    rq_token: AtomicBool,
    sq_lock: AtomicBool,
    sq_dirty: AtomicBool,
    engine: UnsafeCell<SendEngine>,
    sq_retired: AtomicU32,
    rnr_waiting: AtomicBool,
    pub(crate) events: ArrayQueue<CmEvent>,
    pub(crate) peer: OnceLock<Weak<QpShared>>,
    fail_at: AtomicU64,
    fail_status: AtomicU32,
    delay_mode: AtomicU8,
    delay_polls: AtomicU32,
    held: Mutex<VecDeque<Held>>,
    held_waiting: AtomicBool,
}

// SAFETY: `engine` is only accessed by the holder of `sq_lock` (acquired with an atomic swap,
// released with a store that publishes the engine's changes); every other field is Sync.
unsafe impl Sync for QpShared {}

impl QpShared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: Arc<DeviceInner>,
        qp_num: u32,
        pd: u32,
        send_cq: Arc<CqShared>,
        recv_cq: Arc<CqShared>,
        srq: Option<Arc<SrqShared>>,
        opts: QpOptions,
        local_addr: SocketAddr,
        peer_addr: SocketAddr,
    ) -> Arc<QpShared> {
        let sq = opts.max_send_wr as usize;
        let max_inline = opts.max_inline_data as usize;
        let rq = if srq.is_some() {
            None
        } else {
            Some(ArrayQueue::new(opts.max_recv_wr.max(1) as usize))
        };
        let held_cap = (opts.max_send_wr + opts.max_recv_wr) as usize + 64;
        let qp = Arc::new(QpShared {
            qp_num,
            dev,
            pd,
            send_cq,
            recv_cq,
            srq,
            state: AtomicU8::new(QpState::Init as u8),
            connected: AtomicBool::new(false),
            down: AtomicBool::new(false),
            link_down: AtomicBool::new(false),
            local_addr,
            peer_addr,
            opts,
            initiator_depth: AtomicU8::new(opts.initiator_depth),
            responder_resources: AtomicU8::new(opts.responder_resources),
            rq,
            rq_token: AtomicBool::new(false),
            sq_lock: AtomicBool::new(false),
            sq_dirty: AtomicBool::new(false),
            engine: UnsafeCell::new(SendEngine {
                ring: vec![EMPTY_ENTRY; sq].into_boxed_slice(),
                inline: vec![0u8; sq * max_inline].into_boxed_slice(),
                max_inline,
                head: 0,
                len: 0,
                peer: None,
                // Replaced by the peer's count at establishment.
                rnr_retry: 0,
                rnr_left: None,
                psn: qp_num.wrapping_mul(0x9e37) & 0xff_ffff,
                unsignaled: 0,
                executed: 0,
            }),
            sq_retired: AtomicU32::new(0),
            rnr_waiting: AtomicBool::new(false),
            events: ArrayQueue::new(8),
            peer: OnceLock::new(),
            fail_at: AtomicU64::new(0),
            fail_status: AtomicU32::new(0),
            delay_mode: AtomicU8::new(0),
            delay_polls: AtomicU32::new(0),
            held: Mutex::new(VecDeque::with_capacity(held_cap)),
            held_waiting: AtomicBool::new(false),
        });
        qp.send_cq.attach(&qp);
        if !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq) {
            qp.recv_cq.attach(&qp);
        }
        qp
    }

    #[inline]
    fn raw_state(&self) -> u8 {
        // Acquire: pairs with the SeqCst/Release state changes (connect, error).
        self.state.load(Ordering::Acquire)
    }

    pub(crate) fn state(&self) -> QpState {
        match self.raw_state() {
            DESTROYED => QpState::Reset,
            s => QpState::from_u8(s),
        }
    }

    #[inline]
    fn is_error(&self) -> bool {
        self.raw_state() == QpState::Error as u8
    }

    #[inline]
    fn can_receive(&self) -> bool {
        let s = self.raw_state();
        s == QpState::Rtr as u8 || s == QpState::Rts as u8
    }

    /// Connection established: links the engine to `peer`, moves to RTS.
    pub(crate) fn establish(&self, peer: &Arc<QpShared>) {
        let _ = self.peer.set(Arc::downgrade(peer));
        // As rdma_cm over the IB CM: the RNR retry count of our sends is the one the peer asked
        // for (carried in its REQ or REP), not our own option.
        let rnr = peer.opts.rnr_retry_count;
        self.with_engine(|e| {
            e.peer = Some(peer.clone());
            e.rnr_retry = rnr;
        });
        // SeqCst: orders with the error transition's compare-exchange.
        if self
            .state
            .compare_exchange(
                QpState::Init as u8,
                QpState::Rts as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            // Release: pairs with the Acquire in `go_error`.
            self.connected.store(true, Ordering::Release);
        }
    }

    pub(crate) fn push_event(&self, kind: CmEventKind, status: i32, pd: &[u8]) {
        let ev = CmEvent {
            kind,
            status,
            private_data: PrivateData::new(pd).unwrap_or(PrivateData::EMPTY),
        };
        let _ = self.events.push(ev);
    }

    // --- completions ------------------------------------------------------------------------

    fn push_completion(&self, c: Completion, recv: bool) {
        let cq = if recv { &self.recv_cq } else { &self.send_cq };
        // Acquire: pairs with the Release store in `SoftFaults::delay_completions`.
        let mode = self.delay_mode.load(Ordering::Acquire);
        if mode != 0 || self.held_waiting.load(Ordering::Acquire) {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            // Re-check under the lock: a release may have just emptied it.
            if mode != 0 || !held.is_empty() {
                let due = match mode {
                    1 => u64::MAX,
                    2 => {
                        // Relaxed: a counter; staleness only shifts the due poll by one.
                        cq.polls.load(Ordering::Relaxed)
                            + self.delay_polls.load(Ordering::Relaxed) as u64
                    }
                    _ => 0,
                };
                if held.len() < held.capacity() {
                    held.push_back(Held { c, recv, due });
                    drop(held);
                    self.set_work(&self.held_waiting);
                    return;
                }
            }
        }
        cq.push(c);
    }

    fn set_work(&self, flag: &AtomicBool) {
        // AcqRel swap: only the transition adjusts the CQ counters.
        if !flag.swap(true, Ordering::AcqRel) {
            // Release: pairs with the Acquire load in `SoftCq::poll`.
            self.send_cq.work.fetch_add(1, Ordering::Release);
            self.recv_cq.work.fetch_add(1, Ordering::Release);
        }
    }

    fn clear_work(&self, flag: &AtomicBool) {
        // AcqRel swap: only the transition adjusts the CQ counters.
        if flag.swap(false, Ordering::AcqRel) {
            // Release: pairs with the Acquire load in `SoftCq::poll`.
            self.send_cq.work.fetch_sub(1, Ordering::Release);
            self.recv_cq.work.fetch_sub(1, Ordering::Release);
        }
    }

    /// Moves held completions whose time has come (all of them with `all`) to their CQs.
    fn release_held(&self, all: bool) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(h) = held.front().copied() {
            let cq = if h.recv { &self.recv_cq } else { &self.send_cq };
            // Relaxed: a counter (see push_completion).
            if !all && h.due > cq.polls.load(Ordering::Relaxed) {
                break;
            }
            held.pop_front();
            cq.push(h.c);
        }
        if held.is_empty() {
            self.clear_work(&self.held_waiting);
        }
    }

    /// Deferred work, driven by a poll of `cq`.
    pub(crate) fn progress(&self, _cq: &CqShared) {
        // Acquire: pairs with the AcqRel swaps in set_work.
        if self.held_waiting.load(Ordering::Acquire) {
            self.release_held(false);
        }
        if self.rnr_waiting.load(Ordering::Acquire) {
            self.sq_kick();
        }
    }

    // --- errors and connection teardown -----------------------------------------------------

    /// Moves the QP to ERROR (unless destroyed or already there); returns true on the
    /// transition. Outstanding work is flushed.
    fn go_error(&self, event: bool) -> bool {
        self.go_error_with(event, None)
    }

    /// [`go_error`](Self::go_error), reporting `terminal` (a failed connect's event) instead of
    /// `Disconnected`. Either event is queued before the flushes, as with rdma_cm: a consumer
    /// that sees a flushed completion finds the event that explains it (a reject's reason).
    fn go_error_with(&self, event: bool, terminal: Option<(CmEventKind, i32, &[u8])>) -> bool {
        let mut cur = self.raw_state();
        loop {
            if cur == QpState::Error as u8 || cur == DESTROYED {
                return false;
            }
            // SeqCst: pairs with the token/lock SeqCst handshakes in rq_release / sq_drive.
            match self.state.compare_exchange(
                cur,
                QpState::Error as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        if let Some((kind, status, pd)) = terminal {
            self.push_event(kind, status, pd);
        } else if event
            // Acquire: pairs with the Release in `establish`.
            && self.connected.load(Ordering::Acquire)
            && !self.down.swap(true, Ordering::AcqRel)
        {
            self.push_event(CmEventKind::Disconnected, 0, &[]);
        }
        self.rq_try_flush();
        self.sq_kick();
        true
    }

    /// Moves this QP and its peer to ERROR, with `Disconnected` on both.
    pub(crate) fn connection_down(&self) {
        let peer = self.peer.get().and_then(Weak::upgrade);
        // SeqCst: both flags are visible before either state change (see peer_gone).
        self.link_down.store(true, Ordering::SeqCst);
        if let Some(peer) = &peer {
            peer.link_down.store(true, Ordering::SeqCst);
        }
        self.go_error(true);
        if let Some(peer) = peer {
            peer.go_error(true);
        }
    }

    /// The peer cannot receive: part of a teardown (flush) or a vanished peer (transport
    /// retries exhausted). Called after reading the peer's state.
    fn peer_gone(&self) -> Outcome {
        // SeqCst: pairs with the stores in connection_down, made before the peer's state
        // changed, which we have already observed.
        if self.link_down.load(Ordering::SeqCst) {
            Outcome::Fail(WcStatus::WR_FLUSH_ERR)
        } else {
            Outcome::Fail(WcStatus::RETRY_EXC_ERR)
        }
    }

    /// Puts a not-yet-connected QP in ERROR (rejected / unreachable), flushing its receives.
    pub(crate) fn fail_connect(&self, kind: CmEventKind, status: i32, pd: &[u8]) {
        self.go_error_with(false, Some((kind, status, pd)));
    }

    /// Marks the QP destroyed: nothing completes any more; the peer sees the connection go down.
    pub(crate) fn destroy(&self) {
        let peer = self.peer.get().and_then(Weak::upgrade);
        // SeqCst: see connection_down.
        self.link_down.store(true, Ordering::SeqCst);
        if let Some(peer) = &peer {
            peer.link_down.store(true, Ordering::SeqCst);
        }
        // SeqCst: pairs with go_error's compare-exchange.
        self.state.store(DESTROYED, Ordering::SeqCst);
        if let Some(peer) = peer {
            peer.go_error(true);
        }
        self.with_engine(|e| {
            e.len = 0;
            e.peer = None;
        });
        self.rq_try_flush();
        self.clear_work(&self.rnr_waiting);
        self.clear_work(&self.held_waiting);
        self.send_cq.detach(self);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.detach(self);
        }
    }

    // --- receive queue ----------------------------------------------------------------------

    fn rq_acquire(&self) {
        let backoff = Backoff::new();
        // SeqCst: Dekker half paired with go_error's state exchange (see rq_release).
        while self.rq_token.swap(true, Ordering::SeqCst) {
            backoff.snooze();
        }
    }

    fn rq_release(&self) {
        // SeqCst: pairs with go_error's SeqCst state change so one side sees the other.
        self.rq_token.store(false, Ordering::SeqCst);
        if self.raw_state() >= QpState::Error as u8 && self.rq_nonempty() {
            self.rq_try_flush();
        }
    }

    fn rq_nonempty(&self) -> bool {
        self.rq.as_ref().is_some_and(|q| !q.is_empty())
    }

    /// Flushes the receive queue if the QP is in ERROR (or drops it if destroyed), unless the
    /// token is busy: its holder re-checks on release.
    fn rq_try_flush(&self) {
        loop {
            let st = self.raw_state();
            if st < QpState::Error as u8 || !self.rq_nonempty() {
                return;
            }
            // SeqCst: see rq_acquire.
            if self.rq_token.swap(true, Ordering::SeqCst) {
                return;
            }
            if let Some(rq) = &self.rq {
                while let Some(r) = rq.pop() {
                    if st == QpState::Error as u8 {
                        self.push_completion(self.flush_wc(r.wr_id, WcOpcode::RECV), true);
                    }
                }
            }
            // SeqCst: see rq_release.
            self.rq_token.store(false, Ordering::SeqCst);
        }
    }

    fn flush_wc(&self, wr_id: u64, opcode: WcOpcode) -> Completion {
        Completion {
            wr_id,
            status: WcStatus::WR_FLUSH_ERR,
            opcode,
            qp_num: self.qp_num,
            ..Completion::default()
        }
    }

    /// Delivers a SEND into this QP (the responder), with the receive token held.
    /// Returns the byte count, RNR, or the status the *requester* gets.
    fn deliver(
        &self,
        src_qpn: u32,
        src: &SegList<'_>,
        inv: Option<u32>,
    ) -> Result<u32, Option<WcStatus>> {
        if !self.can_receive() {
            return Err(Some(WcStatus::RETRY_EXC_ERR));
        }
        let (entry, recv_pd) = match &self.srq {
            Some(srq) => (srq.ring.pop(), srq.pd),
            None => (self.rq.as_ref().and_then(|q| q.pop()), self.pd),
        };
        let Some(r) = entry else {
            return Err(None); // RNR
        };
        let total = src.total;
        let mut wc = Completion {
            wr_id: r.wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV,
            byte_len: 0,
            qp_num: self.qp_num,
            src_qp: src_qpn,
            ..Completion::default()
        };
        let sges = &r.sges[..(r.num_sge as usize).min(MAX_SGE)];
        let capacity: u64 = sges.iter().map(|s| s.len as u64).sum();
        if total > capacity {
            wc.status = WcStatus::LOC_LEN_ERR;
            self.push_completion(wc, true);
            return Err(Some(WcStatus::REM_INV_REQ_ERR));
        }
        let mut dst = SegList::new();
        let mut need = total;
        for s in sges {
            if need == 0 {
                break;
            }
            if s.len == 0 {
                continue;
            }
            let take = need.min(s.len as u64);
            match self.dev.keys.pin_local(s.lkey, s.addr, take, true, recv_pd) {
                Some(pin) => dst.push(
                    Seg {
                        ptr: s.addr as *mut u8,
                        len: take as usize,
                    },
                    Some(pin),
                ),
                None => {
                    wc.status = WcStatus::LOC_PROT_ERR;
                    self.push_completion(wc, true);
                    return Err(Some(WcStatus::REM_OP_ERR));
                }
            }
            need -= take;
        }
        // SAFETY: source segments are pinned by the requester (or are its inline buffer),
        // destination segments are pinned above; `total` fits both (checked).
        unsafe { copy_segs(src.segs(), dst.segs(), total as usize) };
        drop(dst);
        if let Some(rkey) = inv {
            if !self.dev.keys.invalidate(rkey, self.pd, Some(self.qp_num)) {
                wc.status = WcStatus::REM_INV_REQ_ERR;
                self.push_completion(wc, true);
                return Err(Some(WcStatus::REM_INV_REQ_ERR));
            }
            wc.flags = WcFlags::WITH_INV;
            wc.invalidated_rkey = rkey;
        }
        wc.byte_len = total as u32;
        self.push_completion(wc, true);
        Ok(total as u32)
    }

    // --- send queue -------------------------------------------------------------------------

    /// Runs `f` on the engine with the send-queue lock held (spinning for it), then drives
    /// whatever was requested meanwhile.
    fn with_engine<R>(&self, f: impl FnOnce(&mut SendEngine) -> R) -> R {
        let backoff = Backoff::new();
        // SeqCst: lock handshake with sq_drive's dirty re-check.
        while self.sq_lock.swap(true, Ordering::SeqCst) {
            backoff.snooze();
        }
        // SAFETY: we hold sq_lock, the only way to reach the engine.
        let r = f(unsafe { &mut *self.engine.get() });
        self.sq_unlock();
        r
    }

    fn sq_unlock(&self) {
        loop {
            // SeqCst: pairs with sq_kick's dirty store + lock swap.
            while self.sq_dirty.swap(false, Ordering::SeqCst) {
                // SAFETY: we hold sq_lock.
                self.run(unsafe { &mut *self.engine.get() });
            }
            self.sq_lock.store(false, Ordering::SeqCst);
            if !self.sq_dirty.load(Ordering::SeqCst) {
                return;
            }
            // SeqCst: re-take the lock; pairs with sq_kick's dirty store + swap.
            if self.sq_lock.swap(true, Ordering::SeqCst) {
                return; // someone else holds it now and will see the dirty flag
            }
        }
    }

    /// Asks for the send queue to be driven (by us now, or by its current holder).
    fn sq_kick(&self) {
        // SeqCst: the holder re-checks `sq_dirty` after unlocking.
        self.sq_dirty.store(true, Ordering::SeqCst);
        if self.sq_lock.swap(true, Ordering::SeqCst) {
            return;
        }
        self.sq_unlock();
    }

    fn retire(&self, e: &mut SendEngine) {
        let n = e.unsignaled + 1;
        e.unsignaled = 0;
        // Release: pairs with the owner's Acquire load in queue_send.
        self.sq_retired.fetch_add(n, Ordering::Release);
    }

    /// Executes queued send WRs in order until empty, RNR-blocked, or everything is flushed.
    fn run(&self, e: &mut SendEngine) {
        loop {
            if e.len == 0 {
                e.rnr_left = None;
                self.clear_work(&self.rnr_waiting);
                return;
            }
            let st = self.raw_state();
            if st == QpState::Error as u8 || st == DESTROYED {
                while e.len > 0 {
                    let w = e.ring[e.head];
                    e.head = (e.head + 1) % e.ring.len();
                    e.len -= 1;
                    if st == QpState::Error as u8 {
                        self.push_completion(self.flush_wc(w.wr_id, w.op.opcode()), false);
                    }
                    self.retire(e);
                }
                continue;
            }
            let w = e.ring[e.head];
            let inline = Seg {
                // SAFETY: the slot's inline area lies inside `e.inline` (head < ring length,
                // area = max_inline octets); it is not modified while the entry executes.
                ptr: unsafe { e.inline.as_mut_ptr().add(e.head * e.max_inline) },
                len: w.inline_len as usize,
            };
            let attempt_first = e.rnr_left.is_none();
            if attempt_first {
                e.executed += 1;
            }
            // Relaxed: fault-injection settings written by the test thread before posting.
            let fail_at = self.fail_at.load(Ordering::Relaxed);
            let outcome = if attempt_first && fail_at != 0 && fail_at == e.executed {
                self.fail_at.store(0, Ordering::Relaxed);
                Outcome::Fail(WcStatus(self.fail_status.load(Ordering::Relaxed)))
            } else {
                let peer = e.peer.as_deref();
                self.execute(peer, &mut e.psn, &w, inline)
            };
            match outcome {
                Outcome::Rnr => {
                    let left = e.rnr_left.unwrap_or(e.rnr_retry);
                    if left == 0 {
                        self.finish(e, &w, WcStatus::RNR_RETRY_EXC_ERR, 0);
                    } else {
                        e.rnr_left = Some(if left >= RNR_RETRY_INFINITE {
                            RNR_RETRY_INFINITE
                        } else {
                            left - 1
                        });
                        self.set_work(&self.rnr_waiting);
                        return;
                    }
                }
                Outcome::Done(n) => self.finish(e, &w, WcStatus::SUCCESS, n),
                Outcome::Fail(s) => self.finish(e, &w, s, 0),
            }
        }
    }

    /// Pops the head WR with `status`, completing it if signaled or failed.
    fn finish(&self, e: &mut SendEngine, w: &SqEntry, status: WcStatus, byte_len: u32) {
        e.head = (e.head + 1) % e.ring.len();
        e.len -= 1;
        e.rnr_left = None;
        self.clear_work(&self.rnr_waiting);
        if status.is_success() && !w.flags.contains(SendFlags::SIGNALED) {
            e.unsignaled += 1;
            return;
        }
        let c = Completion {
            wr_id: w.wr_id,
            status,
            opcode: w.op.opcode(),
            byte_len,
            qp_num: self.qp_num,
            ..Completion::default()
        };
        self.push_completion(c, false);
        self.retire(e);
        if !status.is_success() {
            self.connection_down();
        }
    }

    /// Validates and pins a local SGL (`write`: the device writes into it).
    fn local_segs(&self, w: &SqEntry, write: bool) -> Result<SegList<'_>, WcStatus> {
        let mut l = SegList::new();
        for s in &w.sges[..(w.num_sge as usize).min(MAX_SGE)] {
            if s.len == 0 {
                continue;
            }
            let pin = self
                .dev
                .keys
                .pin_local(s.lkey, s.addr, s.len as u64, write, self.pd)
                .ok_or(WcStatus::LOC_PROT_ERR)?;
            l.push(
                Seg {
                    ptr: s.addr as *mut u8,
                    len: s.len as usize,
                },
                Some(pin),
            );
        }
        if l.total > MAX_MSG {
            return Err(WcStatus::LOC_LEN_ERR);
        }
        Ok(l)
    }

    fn gather<'a>(&'a self, w: &SqEntry, inline: Seg) -> Result<SegList<'a>, WcStatus> {
        if w.flags.contains(SendFlags::INLINE) {
            let mut l = SegList::new();
            if inline.len > 0 {
                l.push(inline, None);
            }
            return Ok(l);
        }
        self.local_segs(w, false)
    }

    fn execute(&self, peer: Option<&QpShared>, psn: &mut u32, w: &SqEntry, inline: Seg) -> Outcome {
        match w.op {
            SqOp::LocalInv(rkey) => {
                if self.dev.keys.invalidate(rkey, self.pd, None) {
                    Outcome::Done(0)
                } else {
                    Outcome::Fail(WcStatus::LOC_QP_OP_ERR)
                }
            }
            SqOp::Bind(req) => match self.dev.keys.bind(&req) {
                Ok(()) => Outcome::Done(0),
                Err(_) => Outcome::Fail(WcStatus::MW_BIND_ERR),
            },
            SqOp::Send | SqOp::SendInv(_) => {
                let Some(peer) = peer.filter(|p| p.can_receive()) else {
                    return self.peer_gone();
                };
                let src = match self.gather(w, inline) {
                    Ok(l) => l,
                    Err(s) => return Outcome::Fail(s),
                };
                let inv = match w.op {
                    SqOp::SendInv(k) => Some(k),
                    _ => None,
                };
                peer.rq_acquire();
                let r = peer.deliver(self.qp_num, &src, inv);
                peer.rq_release();
                let out = match r {
                    Ok(n) => Outcome::Done(n),
                    Err(None) => return Outcome::Rnr,
                    Err(Some(WcStatus::RETRY_EXC_ERR)) => return self.peer_gone(),
                    Err(Some(s)) => Outcome::Fail(s),
                };
                let op = if inv.is_some() {
                    TraceOp::SendWithInv
                } else {
                    TraceOp::Send
                };
                self.trace(peer, psn, op, &src, src.total, 0, 0, inv.unwrap_or(0), &out);
                out
            }
            SqOp::Write { raddr, rkey } => {
                let Some(peer) = peer.filter(|p| p.can_receive()) else {
                    return self.peer_gone();
                };
                let src = match self.gather(w, inline) {
                    Ok(l) => l,
                    Err(s) => return Outcome::Fail(s),
                };
                let total = src.total;
                let out = if total == 0 {
                    Outcome::Done(0)
                } else {
                    match peer.dev.keys.pin_remote(
                        rkey,
                        raddr,
                        total,
                        Access::REMOTE_WRITE,
                        peer.pd,
                        peer.qp_num,
                    ) {
                        Some(pin) => {
                            let dst = [Seg {
                                ptr: raddr as *mut u8,
                                len: total as usize,
                            }];
                            // SAFETY: source pinned by `src` (or inline buffer); destination
                            // inside the pinned remote region (bounds checked by pin_remote).
                            unsafe { copy_segs(src.segs(), &dst, total as usize) };
                            drop(pin);
                            Outcome::Done(total as u32)
                        }
                        None => Outcome::Fail(WcStatus::REM_ACCESS_ERR),
                    }
                };
                self.trace(
                    peer,
                    psn,
                    TraceOp::RdmaWrite,
                    &src,
                    total,
                    raddr,
                    rkey,
                    0,
                    &out,
                );
                out
            }
            SqOp::Read { raddr, rkey } => {
                let Some(peer) = peer.filter(|p| p.can_receive()) else {
                    return self.peer_gone();
                };
                let dst = match self.local_segs(w, true) {
                    Ok(l) => l,
                    Err(s) => return Outcome::Fail(s),
                };
                let total = dst.total;
                let empty = SegList::new();
                self.trace(
                    peer,
                    psn,
                    TraceOp::RdmaReadRequest,
                    &empty,
                    total,
                    raddr,
                    rkey,
                    0,
                    &Outcome::Done(0),
                );
                if total == 0 {
                    return Outcome::Done(0);
                }
                match peer.dev.keys.pin_remote(
                    rkey,
                    raddr,
                    total,
                    Access::REMOTE_READ,
                    peer.pd,
                    peer.qp_num,
                ) {
                    Some(pin) => {
                        let src = [Seg {
                            ptr: raddr as *mut u8,
                            len: total as usize,
                        }];
                        // SAFETY: source inside the pinned remote region (bounds checked);
                        // destination pinned by `dst` with LOCAL_WRITE.
                        unsafe { copy_segs(&src, dst.segs(), total as usize) };
                        drop(pin);
                        let out = Outcome::Done(total as u32);
                        peer.trace_read_response(self, raddr, rkey, &dst);
                        out
                    }
                    None => Outcome::Fail(WcStatus::REM_ACCESS_ERR),
                }
            }
        }
    }

    // --- trace ------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn trace(
        &self,
        peer: &QpShared,
        psn: &mut u32,
        op: TraceOp,
        data: &SegList<'_>,
        len: u64,
        remote_addr: u64,
        rkey: u32,
        inv_rkey: u32,
        out: &Outcome,
    ) {
        let pkts = len.div_ceil(MTU).max(1) as u32;
        let my_psn = *psn;
        *psn = psn.wrapping_add(pkts) & 0xff_ffff;
        let Some(hook) = self.dev.fabric.trace.get() else {
            return;
        };
        let mut slices: [&[u8]; MAX_SGE] = [&[]; MAX_SGE];
        for (i, s) in data.segs().iter().enumerate() {
            // SAFETY: the segment is pinned registered memory (or the inline buffer) for the
            // duration of this call; see copy_segs for the concurrency contract.
            slices[i] = unsafe { core::slice::from_raw_parts(s.ptr, s.len) };
        }
        let status = match out {
            Outcome::Done(_) => WcStatus::SUCCESS,
            Outcome::Fail(s) => *s,
            Outcome::Rnr => WcStatus::RNR_RETRY_EXC_ERR,
        };
        hook(&TraceEvent {
            op,
            src: self.local_addr,
            dst: self.peer_addr,
            src_qpn: self.qp_num,
            dst_qpn: peer.qp_num,
            psn: my_psn,
            remote_addr,
            rkey,
            len: len as u32,
            inv_rkey: if op == TraceOp::SendWithInv {
                inv_rkey
            } else {
                0
            },
            payload: &slices[..data.n],
            status,
        });
    }

    fn trace_read_response(&self, requester: &QpShared, raddr: u64, rkey: u32, data: &SegList<'_>) {
        let Some(hook) = self.dev.fabric.trace.get() else {
            return;
        };
        let mut slices: [&[u8]; MAX_SGE] = [&[]; MAX_SGE];
        for (i, s) in data.segs().iter().enumerate() {
            // SAFETY: as in `trace`.
            slices[i] = unsafe { core::slice::from_raw_parts(s.ptr, s.len) };
        }
        hook(&TraceEvent {
            op: TraceOp::RdmaReadResponse,
            src: self.local_addr,
            dst: self.peer_addr,
            src_qpn: self.qp_num,
            dst_qpn: requester.qp_num,
            psn: 0,
            remote_addr: raddr,
            rkey,
            len: data.total as u32,
            inv_rkey: 0,
            payload: &slices[..data.n],
            status: WcStatus::SUCCESS,
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The owner's QP handle
// ---------------------------------------------------------------------------------------------

/// A soft RC queue pair (owner handle).
pub struct SoftQp {
    pub(crate) shared: Arc<QpShared>,
    staged_send: Vec<SqEntry>,
    staged_inline: Box<[u8]>,
    staged_recv: Vec<RecvEntry>,
    sq_posted: u32,
    doorbells: u64,
    peer: Option<Arc<QpShared>>,
}

impl core::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "SoftQp({}, {:?})",
            self.shared.qp_num,
            self.shared.state()
        )
    }
}

impl SoftQp {
    pub(crate) fn new(shared: Arc<QpShared>) -> SoftQp {
        let o = shared.opts;
        SoftQp {
            staged_send: Vec::with_capacity(o.max_send_wr as usize),
            staged_inline: vec![0u8; (o.max_send_wr * o.max_inline_data) as usize]
                .into_boxed_slice(),
            staged_recv: Vec::with_capacity(if shared.srq.is_some() {
                0
            } else {
                o.max_recv_wr as usize
            }),
            sq_posted: 0,
            doorbells: 0,
            peer: None,
            shared,
        }
    }

    /// Fault injection and diagnostics handle for this QP (usable from any thread).
    pub fn faults(&self) -> SoftFaults {
        SoftFaults {
            qp: self.shared.clone(),
        }
    }

    /// Send WRs posted and not yet retired by a completion (diagnostics).
    pub fn send_queue_used(&self) -> u32 {
        // Acquire: pairs with the Release in `retire`.
        self.sq_posted
            .wrapping_sub(self.shared.sq_retired.load(Ordering::Acquire))
            + self.staged_send.len() as u32
    }

    fn send_err(e: i32) -> Result<(), VerbsError> {
        Err(VerbsError::new(VerbsCall::PostSend, e))
    }

    fn recv_err(e: i32) -> Result<(), VerbsError> {
        Err(VerbsError::new(VerbsCall::PostRecv, e))
    }

    fn peer_handle(&mut self) -> Option<&Arc<QpShared>> {
        if self.peer.is_none() {
            self.peer = self.shared.peer.get().and_then(Weak::upgrade);
        }
        self.peer.as_ref()
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        let bound = self.shared.dev.keys.windows_bound_to(self.shared.qp_num);
        if bound > 0 {
            // Relaxed: a statistic (see `SoftFabric::windows_bound_at_qp_destroy`).
            self.shared
                .dev
                .fabric
                .windows_bound_at_destroy
                .fetch_add(bound, Ordering::Relaxed);
        }
        self.shared.destroy();
    }
}

impl QueuePair<SoftProvider> for SoftQp {
    fn qp_num(&self) -> u32 {
        self.shared.qp_num
    }

    fn state(&self) -> QpState {
        self.shared.state()
    }

    fn options(&self) -> QpOptions {
        let mut o = self.shared.opts;
        // Relaxed: set once at connection establishment, before Established is reported.
        o.initiator_depth = self.shared.initiator_depth.load(Ordering::Relaxed);
        o.responder_resources = self.shared.responder_resources.load(Ordering::Relaxed);
        o
    }

    fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    fn peer_addr(&self) -> SocketAddr {
        self.shared.peer_addr
    }

    fn queue_send(&mut self, wr: &SendWr<'_, SoftProvider>) -> Result<(), VerbsError> {
        let sh = &*self.shared;
        match sh.state() {
            QpState::Rts | QpState::Error => {}
            _ => return Self::send_err(errno::EINVAL),
        }
        let o = &sh.opts;
        if self.send_queue_used() >= o.max_send_wr {
            return Self::send_err(errno::ENOMEM);
        }
        // SGE count, Send With Invalidate support, RDMA Read sinks, inline rules.
        validate::send_wr(wr, o, &sh.dev.caps)?;
        let mut new_mw_key = None;
        let op = match wr.op {
            SendOp::Send => SqOp::Send,
            SendOp::SendWithInv { rkey } => SqOp::SendInv(rkey),
            SendOp::RdmaWrite { remote_addr, rkey } => SqOp::Write {
                raddr: remote_addr,
                rkey,
            },
            SendOp::RdmaRead { remote_addr, rkey } => SqOp::Read {
                raddr: remote_addr,
                rkey,
            },
            SendOp::LocalInv { rkey } => SqOp::LocalInv(rkey),
            SendOp::BindMw {
                mw,
                mr,
                rkey,
                addr,
                len,
                access,
            } => {
                if !Arc::ptr_eq(&mw.dev, &sh.dev) || !Arc::ptr_eq(mr.device(), &sh.dev) {
                    return Self::send_err(errno::EINVAL);
                }
                // Relaxed: the window's key is owner data (see SoftMw).
                let old = mw.rkey.load(Ordering::Relaxed);
                let new = (old & !0xff) | (rkey & 0xff);
                new_mw_key = Some((mw, new));
                SqOp::Bind(BindReq {
                    mw_index: mw.index,
                    mw_key: old,
                    new_key: new,
                    mr_lkey: crate::verbs::MemoryRegion::keys(mr).lkey,
                    addr,
                    len,
                    access,
                    pd: sh.pd,
                    qp_num: sh.qp_num,
                })
            }
        };
        let mut entry = SqEntry {
            wr_id: wr.wr_id,
            op,
            flags: wr.flags,
            num_sge: wr.sgl.len() as u8,
            sges: [Sge::default(); MAX_SGE],
            inline_len: 0,
        };
        entry.sges[..wr.sgl.len()].copy_from_slice(wr.sgl);
        if wr.flags.contains(SendFlags::INLINE) {
            // Opcode and total length checked by `validate::send_wr`.
            let total: u64 = wr.sgl.iter().map(|s| s.len as u64).sum();
            let slot = self.staged_send.len() * o.max_inline_data as usize;
            let mut off = slot;
            for s in wr.sgl.iter().filter(|s| s.len > 0) {
                // The soft provider requires inline data to be registered memory so reading it
                // is sound (hardware reads any mapped address).
                let Some(pin) = sh
                    .dev
                    .keys
                    .pin_local(s.lkey, s.addr, s.len as u64, false, sh.pd)
                else {
                    return Self::send_err(errno::EINVAL);
                };
                let n = s.len as usize;
                // SAFETY: [addr, addr+n) lies in a pinned registration; the destination range
                // is inside `staged_inline` (total <= max_inline_data per slot).
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        s.addr as *const u8,
                        self.staged_inline.as_mut_ptr().add(off),
                        n,
                    )
                };
                drop(pin);
                off += n;
            }
            entry.inline_len = total as u32;
        }
        if let Some((mw, key)) = new_mw_key {
            // The WR is accepted: the window's current key becomes the bind's key
            // (`mw->rkey = ibv_inc_rkey(mw->rkey)` in ibverbs terms).
            // Relaxed: owner data (see SoftMw).
            mw.rkey.store(key, Ordering::Relaxed);
        }
        self.staged_send.push(entry);
        Ok(())
    }

    fn flush_send(&mut self) -> Result<(), VerbsError> {
        if self.staged_send.is_empty() {
            return Ok(());
        }
        let staged = &self.staged_send;
        let inl = &self.staged_inline;
        let max_inline = self.shared.opts.max_inline_data as usize;
        let sh = &*self.shared;
        sh.with_engine(|e| {
            let cap = e.ring.len();
            for (i, w) in staged.iter().enumerate() {
                let slot = (e.head + e.len) % cap;
                e.ring[slot] = *w;
                if w.inline_len > 0 {
                    let n = w.inline_len as usize;
                    e.inline[slot * max_inline..slot * max_inline + n]
                        .copy_from_slice(&inl[i * max_inline..i * max_inline + n]);
                }
                e.len += 1;
            }
            // The doorbell: the soft NIC executes the queue now, on this thread.
            sh.run(e);
        });
        self.sq_posted = self.sq_posted.wrapping_add(self.staged_send.len() as u32);
        self.staged_send.clear();
        self.doorbells += 1;
        Ok(())
    }

    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let sh = &*self.shared;
        if sh.state() == QpState::Reset || sh.srq.is_some() {
            return Self::recv_err(errno::EINVAL);
        }
        validate::recv_wr(wr, sh.opts.max_recv_sge, VerbsCall::PostRecv)?;
        let used = sh.rq.as_ref().map_or(0, |q| q.len()) + self.staged_recv.len();
        if used >= sh.opts.max_recv_wr as usize {
            return Self::recv_err(errno::ENOMEM);
        }
        self.staged_recv.push(RecvEntry::from_wr(wr));
        Ok(())
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        if self.staged_recv.is_empty() {
            return Ok(());
        }
        if let Some(rq) = &self.shared.rq {
            for r in self.staged_recv.drain(..) {
                // Cannot fail: occupancy checked in queue_recv; only consumers run meanwhile.
                let _ = rq.push(r);
            }
        }
        self.doorbells += 1;
        if self.shared.is_error() {
            self.shared.rq_try_flush();
        } else if let Some(peer) = self.peer_handle() {
            // Acquire: pairs with set_work's AcqRel swap.
            if peer.rnr_waiting.load(Ordering::Acquire) {
                peer.sq_kick();
            }
        }
        Ok(())
    }

    fn doorbells(&self) -> u64 {
        self.doorbells
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent>, VerbsError> {
        Ok(self.shared.events.pop())
    }

    fn disconnect(&mut self) -> Result<(), VerbsError> {
        match self.shared.state() {
            QpState::Reset => Err(VerbsError::new(VerbsCall::Disconnect, errno::EINVAL)),
            _ => {
                self.shared.connection_down();
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

/// Fault injection on one soft QP. Cloneable, usable from any thread.
#[derive(Clone)]
pub struct SoftFaults {
    qp: Arc<QpShared>,
}

impl core::fmt::Debug for SoftFaults {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftFaults(qp {})", self.qp.qp_num)
    }
}

impl SoftFaults {
    /// The `n`-th send WR executed from now on (1 = the next one) completes with `status`
    /// instead of executing; a non-success status moves the QP to ERROR as any error does.
    pub fn fail_nth_send(&self, n: u64, status: WcStatus) {
        let qp = &self.qp;
        let executed = qp.with_engine(|e| e.executed);
        // Relaxed: read by the engine under the send-queue lock taken after this call.
        qp.fail_status.store(status.0, Ordering::Relaxed);
        qp.fail_at.store(executed + n.max(1), Ordering::Relaxed);
    }

    /// Drops the connection as a link failure would: both QPs go to ERROR, flush, and report
    /// `Disconnected`.
    pub fn drop_connection(&self) {
        self.qp.connection_down();
    }

    /// Holds this QP's completions (send and receive) back from its CQs.
    pub fn delay_completions(&self, mode: DelayMode) {
        let (m, n) = match mode {
            DelayMode::Hold => (1, 0),
            DelayMode::Polls(n) => (2, n),
        };
        // Relaxed then Release: the poll count is visible to whoever sees the mode.
        self.qp.delay_polls.store(n, Ordering::Relaxed);
        self.qp.delay_mode.store(m, Ordering::Release);
    }

    /// Stops holding completions and releases everything held, in order.
    pub fn release_completions(&self) {
        // Release: pairs with the Acquire in push_completion.
        self.qp.delay_mode.store(0, Ordering::Release);
        self.qp.release_held(true);
    }

    /// Completions currently held back.
    pub fn held_completions(&self) -> usize {
        self.qp.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True while the head send WR waits for a receive (RNR retry pending).
    pub fn rnr_waiting(&self) -> bool {
        // Acquire: pairs with set_work's AcqRel swap.
        self.qp.rnr_waiting.load(Ordering::Acquire)
    }

    /// Current QP state.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }
}
