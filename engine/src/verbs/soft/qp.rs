//! Soft RC queue pairs: the send engine (the "NIC"), receive queues, SRQs, flush-on-error and
//! fault injection.
//!
//! Normal operation: `queue_send` copies work requests into an owner-local batch;
//! `flush_send` (the doorbell) moves the batch into the QP's send queue and executes it in
//! order on the calling thread: SEND takes the oldest entry of the peer's receive queue (read
//! in place from its SPSC ring, `rq.rs`; an SRQ's lock-free ring otherwise) and copies into its
//! buffers, RDMA WRITE/READ copy through the peer's key table, LOCAL_INV/BIND_MW change the local
//! key table. Completions go to the CQs (lock-free MPMC rings). A SEND that finds no receive
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
use crossbeam_utils::CachePadded;

use super::cq::{Attached, CqShared};
use super::DeviceInner;
use crate::verbs::{CmEvent, CmEventKind, Completion, PrivateData, QpOptions, QpState, WcStatus};

mod entries;
mod faults;
mod handle;
mod nic;
mod rq;
mod srq;

pub(crate) use entries::RecvEntry;
use entries::{SqEntry, EMPTY_ENTRY, EMPTY_RECV};
pub use faults::{DelayMode, SoftFaults};
pub use handle::SoftQp;
use rq::RecvRing;
pub use srq::SoftSrq;
pub(crate) use srq::SrqShared;

/// Internal state value of a destroyed QP (reported as RESET; nothing completes any more).
const DESTROYED: u8 = 0xff;
/// Messages are split into packets of this size for PSN accounting in traces.
const MTU: u64 = 4096;
/// Largest message (IBA: 2^31).
const MAX_MSG: u64 = 1 << 31;

// ---------------------------------------------------------------------------------------------
// QP shared state
// ---------------------------------------------------------------------------------------------

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

impl SendEngine {
    /// Retires the head entry (`len` > 0). A compare, not `%`: a division per WR costs tens of
    /// cycles.
    #[inline]
    fn pop_head(&mut self) {
        self.head += 1;
        if self.head == self.ring.len() {
            self.head = 0;
        }
        self.len -= 1;
    }

    /// The slot after the last queued entry (`len` < ring length).
    #[inline]
    fn tail_slot(&self) -> usize {
        // head < ring length and len < ring length: one subtraction wraps it.
        let t = self.head + self.len;
        if t >= self.ring.len() {
            t - self.ring.len()
        } else {
            t
        }
    }
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
    /// The receive queue (None with an SRQ). Producer: the owner handle (`&mut SoftQp`);
    /// consumer: the holder of `rq_token` (a delivering peer engine or a flush).
    rq: Option<RecvRing<RecvEntry>>,
    /// Written by the peer's thread on every delivery: a line of its own (as are the owner's
    /// per-send writes below), so neither side's writes evict what the other only reads
    /// (state, options, the rings' addresses).
    rq_token: CachePadded<AtomicBool>,
    sq_lock: CachePadded<AtomicBool>,
    sq_dirty: AtomicBool,
    engine: CachePadded<UnsafeCell<SendEngine>>,
    sq_retired: CachePadded<AtomicU32>,
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
            Some(RecvRing::new(opts.max_recv_wr as usize, EMPTY_RECV))
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
            rq_token: CachePadded::new(AtomicBool::new(false)),
            sq_lock: CachePadded::new(AtomicBool::new(false)),
            sq_dirty: AtomicBool::new(false),
            engine: CachePadded::new(UnsafeCell::new(SendEngine {
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
            })),
            sq_retired: CachePadded::new(AtomicU32::new(0)),
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
        let me: Weak<dyn Attached> = Arc::downgrade(&qp) as Weak<dyn Attached>;
        if !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq) {
            qp.recv_cq.attach(me.clone());
        }
        qp.send_cq.attach(me);
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

    /// True in ERROR. SeqCst: the poster's half of the Dekker pair with `go_error` (see
    /// `RecvRing::publish`): a load as cheap as an Acquire one on x86 and AArch64.
    #[inline]
    fn is_error(&self) -> bool {
        self.state.load(Ordering::SeqCst) == QpState::Error as u8
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
        // Acquire: pairs with set_work's AcqRel swap. A plain load first, because this runs
        // after every executed send WR and the flag is almost always clear: no read-modify-write
        // (a locked instruction on the QP's shared line) unless there is something to clear. A
        // stale `false` only delays the clearing to the next call (the CQ's `progress` repeats
        // it while the counter stays up); `rnr_waiting` is set and cleared under the send-queue
        // lock, so there the load is exact.
        if !flag.load(Ordering::Acquire) {
            return;
        }
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

    /// Deferred work, driven by a poll of a CQ.
    fn drive_deferred(&self) {
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
        let me = (self as *const QpShared).cast::<()>();
        self.send_cq.detach(me);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.detach(me);
        }
    }
}

impl Attached for QpShared {
    fn progress(&self) {
        self.drive_deferred();
    }

    fn connection_down(&self) {
        QpShared::connection_down(self);
    }
}
