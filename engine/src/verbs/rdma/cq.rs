//! Completion queues and the per-QP queue accounting fed by them.
//!
//! Normal operation: `ibv_poll_cq` fills a stack array of [`POLL_BURST`] `ibv_wc`s, which are
//! converted into the caller's [`Completion`]s; then each completion is charged to its QP's
//! accounting, found by `qp_num` (binary search) in the CQ's current table of attached QPs: a
//! successful send completion frees the send slots up to its WR, a receive completion frees one
//! receive slot (of the QP or of its SRQ). The poll takes no lock: the table is an immutable
//! sorted array behind an atomic pointer, replaced whole when a QP attaches or detaches (control
//! path); the replaced array is freed once the CQ's single poller is not inside an accounting
//! pass that may have loaded it (a pass counter, odd while a pass runs).
//!
//! Recovery: an error completion marks its QP as errored (accounting off: the device flushes
//! everything). A CQ overrun is an async `IBV_EVENT_CQ_ERR` on the context; the async fd is
//! drained without blocking every [`ASYNC_CHECK_INTERVAL`] empty polls, and from then on every
//! poll of the overrun CQ fails with `EOVERFLOW`.
//!
//! Each CQ has its own completion channel (`channel.rs`) for an owner that sleeps when idle
//! ([`CompletionQueue::wait_fd`], [`CompletionQueue::arm_notify`]).

use core::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rdma_sys as sys;

use super::channel::CompChannel;
use super::owned::Owned;
use super::DeviceInner;
use crate::verbs::{
    errno, validate, Completion, CompletionQueue, VerbsCall, VerbsError, WcFlags, WcOpcode,
    WcStatus,
};

/// Completions fetched per `ibv_poll_cq` call (the size of the stack array of `ibv_wc`).
pub const POLL_BURST: usize = 32;
/// Empty polls between two non-blocking reads of the device's async events.
pub const ASYNC_CHECK_INTERVAL: u32 = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Accounting
// ---------------------------------------------------------------------------------------------

/// `ibv_modify_qp(ERR)`: moves `qp` to the error state (everything posted flushes). The
/// result is not checked: a QP already in ERROR or being torn down is where it should be.
///
/// # Safety
/// `qp` must be a live QP.
pub(crate) unsafe fn modify_to_error(qp: *mut sys::ibv_qp) {
    // SAFETY: plain old data.
    let mut attr: sys::ibv_qp_attr = unsafe { core::mem::zeroed() };
    attr.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
    // SAFETY: the caller guarantees the QP is live; only the state changes.
    unsafe {
        sys::ibv_modify_qp(
            qp,
            &mut attr,
            sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as core::ffi::c_int,
        );
    }
}

/// Outstanding receives of an SRQ: posted by the SRQ owner, completed by any CQ poller.
#[derive(Default)]
pub(crate) struct SrqAcct {
    /// Receives completed so far.
    pub(crate) completed: AtomicU64,
}

/// Where the connection is (mirrored in [`QpAcct`] for the data path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Active side: waiting for `ADDR_RESOLVED`.
    ResolvingAddr = 0,
    /// Active side: waiting for `ROUTE_RESOLVED`.
    ResolvingRoute = 1,
    /// Active side: `rdma_connect` sent, waiting for `ESTABLISHED`.
    Connecting = 2,
    /// Connected (passive side: from `rdma_accept` on).
    Connected = 3,
    /// Terminal: the QP is in the error state.
    Closed = 4,
}

impl Phase {
    pub(crate) fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::ResolvingAddr,
            1 => Phase::ResolvingRoute,
            2 => Phase::Connecting,
            3 => Phase::Connected,
            _ => Phase::Closed,
        }
    }

    /// Sends may be queued (RTS, or the error state where they flush).
    pub(crate) fn can_send(self) -> bool {
        matches!(self, Phase::Connected | Phase::Closed)
    }
}

/// Queue accounting of one QP, shared between the QP (producer of WRs) and the CQs that
/// receive its completions (consumers).
pub(crate) struct QpAcct {
    pub(crate) qp_num: u32,
    /// The `ibv_qp` (moved to the error state when a CQ it uses overruns).
    qp: *mut sys::ibv_qp,
    /// Set by a CQ poll on an error completion, or by the QP on disconnect; never cleared.
    errored: AtomicBool,
    /// Send WRs retired (the value of `posted` right after the last completed signaled WR).
    sq_completed: AtomicU64,
    /// Ring of "send WRs posted up to and including this signaled WR", oldest first.
    marks: Box<[AtomicU64]>,
    /// Marks pushed (written by the QP only).
    marks_head: AtomicU64,
    /// Marks consumed (written by the send CQ's poller only).
    marks_tail: AtomicU64,
    /// Receives completed (the QP's own receive queue).
    rq_completed: AtomicU64,
    /// The QP's SRQ accounting, if it has one.
    srq: Option<Arc<SrqAcct>>,
    /// The connection phase ([`Phase`] as u8), written under the QP's progress lock.
    phase: AtomicU8,
}

// SAFETY: the raw QP pointer is only used for ibv_modify_qp (thread-safe) while the QP is
// attached to a CQ, i.e. alive (the QP detaches itself before it is destroyed, and detaching
// waits until the CQ's poller no longer reads a table holding it).
unsafe impl Send for QpAcct {}
// SAFETY: see Send; everything else is atomic.
unsafe impl Sync for QpAcct {}

impl QpAcct {
    pub(crate) fn new(
        qp: *mut sys::ibv_qp,
        qp_num: u32,
        max_send_wr: u32,
        srq: Option<Arc<SrqAcct>>,
        phase: u8,
    ) -> QpAcct {
        let n = max_send_wr.max(1) as usize;
        QpAcct {
            qp,
            qp_num,
            errored: AtomicBool::new(false),
            sq_completed: AtomicU64::new(0),
            marks: (0..n).map(|_| AtomicU64::new(0)).collect(),
            marks_head: AtomicU64::new(0),
            marks_tail: AtomicU64::new(0),
            rq_completed: AtomicU64::new(0),
            srq,
            phase: AtomicU8::new(phase),
        }
    }

    /// The connection phase.
    pub(crate) fn phase(&self) -> Phase {
        // Acquire: pairs with the Release store in `set_phase`.
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    pub(crate) fn set_phase(&self, p: u8) {
        // Release: pairs with the Acquire load in `phase` (QP's queue_send, any thread).
        self.phase.store(p, Ordering::Release);
    }

    pub(crate) fn errored(&self) -> bool {
        // Acquire: pairs with the Release store in `set_errored` (CQ poller or QP).
        self.errored.load(Ordering::Acquire)
    }

    pub(crate) fn set_errored(&self) {
        // Release: pairs with the Acquire load in `errored` (QP's queue_send/queue_recv).
        self.errored.store(true, Ordering::Release);
    }

    /// Send WRs retired so far.
    pub(crate) fn sq_completed(&self) -> u64 {
        // Acquire: pairs with the Release store in `on_send_completion`.
        self.sq_completed.load(Ordering::Acquire)
    }

    /// Receives completed so far.
    pub(crate) fn rq_completed(&self) -> u64 {
        // Acquire: pairs with the Release fetch_add in `on_recv_completion`.
        self.rq_completed.load(Ordering::Acquire)
    }

    /// Records a posted signaled WR: `posted` is the number of send WRs posted so far,
    /// including it. Called by the QP only (single producer).
    pub(crate) fn push_mark(&self, posted: u64) {
        // Relaxed: only this producer writes marks_head.
        let h = self.marks_head.load(Ordering::Relaxed);
        // Acquire: pairs with the Release store of marks_tail in `on_send_completion`, so the
        // slot we overwrite was read already.
        let t = self.marks_tail.load(Ordering::Acquire);
        let cap = self.marks.len() as u64;
        if h.wrapping_sub(t) >= cap {
            // Cannot happen while the send-queue check holds (outstanding <= depth); the mark
            // is dropped, which only delays freeing slots.
            return;
        }
        // Relaxed: published by the Release store of marks_head below.
        self.marks[(h % cap) as usize].store(posted, Ordering::Relaxed);
        // Release: pairs with the Acquire load of marks_head in `on_send_completion`.
        self.marks_head.store(h.wrapping_add(1), Ordering::Release);
    }

    /// Removes the `k` most recent marks (their WRs were not posted after all). Called by the
    /// QP only; no completion can consume them since their WRs never reached the device.
    pub(crate) fn rollback_marks(&self, k: u64) {
        // Relaxed: only this producer writes marks_head.
        let h = self.marks_head.load(Ordering::Relaxed);
        // Acquire: pairs with the Release store of marks_tail in `on_send_completion`.
        let t = self.marks_tail.load(Ordering::Acquire);
        let k = k.min(h.wrapping_sub(t));
        // Release: pairs with the Acquire load of marks_head in `on_send_completion`.
        self.marks_head.store(h.wrapping_sub(k), Ordering::Release);
    }

    /// A successful send completion (always a signaled WR): retire up to its mark.
    fn on_send_completion(&self) {
        // Relaxed: only the send CQ's poller writes marks_tail.
        let t = self.marks_tail.load(Ordering::Relaxed);
        // Acquire: pairs with the Release store of marks_head in `push_mark`.
        let h = self.marks_head.load(Ordering::Acquire);
        if t == h {
            return;
        }
        let cap = self.marks.len() as u64;
        // Relaxed: the slot was published by the Acquire load of marks_head above.
        let m = self.marks[(t % cap) as usize].load(Ordering::Relaxed);
        // Release: pairs with the Acquire load of marks_tail in `push_mark`.
        self.marks_tail.store(t.wrapping_add(1), Ordering::Release);
        // Release: pairs with the Acquire load in `sq_completed` (QP's queue_send).
        self.sq_completed.store(m, Ordering::Release);
    }

    /// A successful send completion, for the unit tests.
    #[cfg(test)]
    pub(crate) fn test_send_completion(&self) {
        self.on_send_completion();
    }

    fn on_recv_completion(&self) {
        match &self.srq {
            // Release: pairs with the Acquire load in RdmaSrq::queue_recv.
            Some(s) => s.completed.fetch_add(1, Ordering::Release),
            // Release: pairs with the Acquire load in `rq_completed`.
            None => self.rq_completed.fetch_add(1, Ordering::Release),
        };
    }
}

// ---------------------------------------------------------------------------------------------
// CQ
// ---------------------------------------------------------------------------------------------

/// CQs by `ibv_cq` address with their overrun flags, for async `IBV_EVENT_CQ_ERR` events.
static CQ_ERRORS: Mutex<Vec<(usize, Arc<AtomicBool>)>> = Mutex::new(Vec::new());

/// The `struct ibv_async_event` layout read as plain integers (the event type as a `u32`
/// rather than a Rust enum, so an unknown value from a newer kernel is not undefined
/// behaviour).
#[repr(C)]
struct AsyncEvent {
    element: *mut core::ffi::c_void,
    event_type: u32,
}

/// `IBV_EVENT_CQ_ERR`.
const IBV_EVENT_CQ_ERR: u32 = 0;

/// Reads every pending async event of `ctx` without blocking (the fd is non-blocking) and
/// flags overrun CQs.
fn drain_async(ctx: *mut sys::ibv_context) {
    loop {
        let mut ev = AsyncEvent {
            element: core::ptr::null_mut(),
            event_type: u32::MAX,
        };
        // SAFETY: ctx is live; AsyncEvent has the layout of struct ibv_async_event (a
        // pointer-sized union then a C enum).
        let rc = unsafe {
            sys::ibv_get_async_event(
                ctx,
                (&mut ev as *mut AsyncEvent).cast::<sys::ibv_async_event>(),
            )
        };
        if rc != 0 {
            return;
        }
        tracing::debug!("async event {} element {:p}", ev.event_type, ev.element);
        if ev.event_type == IBV_EVENT_CQ_ERR {
            let key = ev.element as usize;
            let table = lock(&CQ_ERRORS);
            if let Some((_, flag)) = table.iter().find(|(k, _)| *k == key) {
                // Release: pairs with the Acquire load at the top of RdmaCq::poll.
                flag.store(true, Ordering::Release);
            } else {
                tracing::warn!(
                    "CQ_ERR for an unknown CQ; known: {:x?}",
                    table.iter().map(|e| e.0).collect::<Vec<_>>()
                );
            }
        }
        // SAFETY: the event came from ibv_get_async_event and is acknowledged once.
        unsafe {
            sys::ibv_ack_async_event((&mut ev as *mut AsyncEvent).cast::<sys::ibv_async_event>())
        };
    }
}

/// The QPs attached to a CQ, sorted by `qp_num`: an immutable snapshot.
type QpTable = Box<[Arc<QpAcct>]>;

/// The QPs attached to a CQ, read without a lock by the CQ's single poller.
///
/// The table is an immutable sorted array behind an atomic pointer. Attach and detach (control
/// path, serialized by a mutex the poller never takes) publish a new array, then free the old
/// one once the poller is not inside a read pass that may have loaded it: the poller counts its
/// passes (the counter is odd while a pass runs), and a writer that sees an odd count after
/// publishing waits until the count moves on. Reads allocate nothing and never wait.
///
/// Only one thread may read at a time (the CQ's poller: `poll` takes `&mut RdmaCq`).
pub(crate) struct AttachTable {
    /// The current table (`Box::into_raw` of a `QpTable`; never null).
    table: AtomicPtr<QpTable>,
    /// Read passes: odd while one runs.
    passes: AtomicU64,
    /// Serializes writers.
    edit: Mutex<()>,
}

impl Drop for AttachTable {
    fn drop(&mut self) {
        // Relaxed: &mut self, no other thread can hold the table any more.
        let t = self.table.load(Ordering::Relaxed);
        // SAFETY: the table came from Box::into_raw and nobody else can read it now.
        drop(unsafe { Box::from_raw(t) });
    }
}

impl AttachTable {
    pub(crate) fn new() -> AttachTable {
        let empty: QpTable = Box::new([]);
        AttachTable {
            table: AtomicPtr::new(Box::into_raw(Box::new(empty))),
            passes: AtomicU64::new(0),
            edit: Mutex::new(()),
        }
    }

    /// Runs `f` on the current table. Only the CQ's poller calls this (one reader at a time).
    pub(crate) fn read<R>(&self, f: impl FnOnce(&[Arc<QpAcct>]) -> R) -> R {
        // SeqCst: with the SeqCst load of `table` below and, in `replace`, the SeqCst store of
        // `table` followed by the SeqCst load of `passes`: either this pass loads the new
        // table, or the writer sees this pass running (odd) and waits for it to end.
        self.passes.fetch_add(1, Ordering::SeqCst);
        // SeqCst: see above.
        let t = self.table.load(Ordering::SeqCst);
        // SAFETY: a published table is freed only after `passes` moved past the odd value the
        // writer saw after unpublishing it, i.e. after every pass that could have loaded it.
        let r = f(unsafe { &*t });
        // Release: pairs with the Acquire load of `passes` in `replace`'s wait, so the writer
        // frees the table only after our reads of it.
        self.passes.fetch_add(1, Ordering::Release);
        r
    }

    /// Publishes the table `edit` derives from the current one (`None`: no change).
    fn replace(&self, edit: impl FnOnce(&[Arc<QpAcct>]) -> Option<Vec<Arc<QpAcct>>>) {
        let _g = lock(&self.edit);
        // Relaxed: only writers, serialized by `edit`, store `table`.
        let old = self.table.load(Ordering::Relaxed);
        // SAFETY: `old` is the current table; only writers free tables and we hold `edit`.
        let Some(new) = edit(unsafe { &*old }) else {
            return;
        };
        let new: QpTable = new.into_boxed_slice();
        // SeqCst: see `read`.
        self.table
            .store(Box::into_raw(Box::new(new)), Ordering::SeqCst);
        // SeqCst: see `read`.
        let p = self.passes.load(Ordering::SeqCst);
        if p % 2 == 1 {
            // The poller is inside a pass that may have loaded `old`: wait for it to end (a
            // pass is a few atomic operations per completion and never blocks).
            // Acquire: pairs with the Release increment that ends the pass.
            while self.passes.load(Ordering::Acquire) == p {
                std::thread::yield_now();
            }
        }
        // SAFETY: `old` came from Box::into_raw, is unpublished, and no pass reads it now.
        drop(unsafe { Box::from_raw(old) });
    }

    /// Adds `acct` (kept sorted by `qp_num`; attaching twice is a no-op).
    pub(crate) fn attach(&self, acct: &Arc<QpAcct>) {
        self.replace(|qps| {
            if qps.iter().any(|a| Arc::ptr_eq(a, acct)) {
                return None;
            }
            let pos = qps.partition_point(|a| a.qp_num < acct.qp_num);
            let mut v = Vec::with_capacity(qps.len() + 1);
            v.extend(qps[..pos].iter().cloned());
            v.push(Arc::clone(acct));
            v.extend(qps[pos..].iter().cloned());
            Some(v)
        });
    }

    /// Removes `acct`; on return no read pass sees it any more (its QP may be destroyed).
    pub(crate) fn detach(&self, acct: &Arc<QpAcct>) {
        self.replace(|qps| {
            if !qps.iter().any(|a| Arc::ptr_eq(a, acct)) {
                return None;
            }
            Some(
                qps.iter()
                    .filter(|a| !Arc::ptr_eq(a, acct))
                    .cloned()
                    .collect(),
            )
        });
    }

    /// Charges completions to their QPs' accounting (the poller, after each non-empty poll).
    pub(crate) fn account(&self, done: &[Completion]) {
        self.read(|qps| {
            for c in done {
                let Ok(i) = qps.binary_search_by_key(&c.qp_num, |a| a.qp_num) else {
                    continue;
                };
                let a = &qps[i];
                if !c.status.is_success() {
                    a.set_errored();
                } else if c.opcode.is_recv() {
                    a.on_recv_completion();
                } else {
                    a.on_send_completion();
                }
            }
        });
    }
}

/// The verbs CQ and the accounting of the QPs attached to it.
///
/// Polling is serialized by `&mut RdmaCq` (one `RdmaCq` per `CqInner`), which makes it the
/// attach table's single reader; shared access attaches/detaches QPs (the table's writers) or
/// reads the raw pointer. The verbs CQ is destroyed when every QP using it (each holding an
/// `Arc`) is gone.
pub(crate) struct CqInner {
    cq: Owned<sys::ibv_cq>,
    /// The CQ's completion channel: declared after `cq`, so destroyed after it.
    channel: CompChannel,
    depth: u32,
    overrun: Arc<AtomicBool>,
    /// The QPs whose completions arrive here.
    qps: AttachTable,
    dev: Arc<DeviceInner>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // The CQ itself is destroyed right after, when the `cq` field drops: acknowledge every
        // channel event first (ibv_destroy_cq waits for the acknowledgements).
        self.channel.consume(self.cq.as_ptr());
        let key = self.cq.as_ptr() as usize;
        lock(&CQ_ERRORS).retain(|(k, _)| *k != key);
    }
}

impl CqInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        self.cq.as_ptr()
    }

    pub(crate) fn attach(&self, acct: &Arc<QpAcct>) {
        self.qps.attach(acct);
    }

    /// Detaches `acct`; on return the poller no longer sees it (the QP may be destroyed).
    pub(crate) fn detach(&self, acct: &Arc<QpAcct>) {
        self.qps.detach(acct);
    }

    /// A CQ overrun: every QP attached goes to the error state (as the IB spec has it; rxe
    /// leaves them in RTS), so their outstanding work flushes. Called by the poller.
    fn overrun_qps(&self) {
        self.qps.read(|qps| {
            for a in qps {
                a.set_errored();
                // SAFETY: QPs in the table are alive: a QP detaches (which waits for this pass
                // to end) before it is destroyed.
                unsafe { modify_to_error(a.qp) };
            }
        });
    }
}

/// A completion queue (see [`CompletionQueue`]).
pub struct RdmaCq {
    inner: Arc<CqInner>,
    empty_polls: u32,
}

impl RdmaCq {
    pub(crate) fn create(dev: &Arc<DeviceInner>, depth: u32) -> Result<RdmaCq, VerbsError> {
        validate::cq_depth(depth, dev.caps())?;
        let cqe = core::ffi::c_int::try_from(depth)
            .map_err(|_| VerbsError::new(VerbsCall::CreateCq, errno::EINVAL))?;
        let channel = CompChannel::new(dev.ctx())?;
        let null = core::ptr::null_mut();
        // SAFETY: the context and the channel are live; vector 0; the CQ is ours.
        let cq = unsafe { Owned::new(sys::ibv_create_cq(dev.ctx(), cqe, null, channel.raw(), 0)) };
        let cq = cq.ok_or_else(|| super::os_err(VerbsCall::CreateCq))?;
        let overrun = Arc::new(AtomicBool::new(false));
        lock(&CQ_ERRORS).push((cq.as_ptr() as usize, Arc::clone(&overrun)));
        Ok(RdmaCq {
            inner: Arc::new(CqInner {
                cq,
                channel,
                depth,
                overrun,
                qps: AttachTable::new(),
                dev: Arc::clone(dev),
            }),
            empty_polls: 0,
        })
    }

    pub(crate) fn inner(&self) -> &Arc<CqInner> {
        &self.inner
    }
}

/// The kernel's `IB_WC_WITH_INVALIDATE` bit as rxe leaks it to user space.
const KERNEL_WC_WITH_INVALIDATE: u32 = 1 << 2;

fn convert(wc: &sys::ibv_wc, inv_quirk: bool) -> Completion {
    let mut flags = WcFlags(wc.wc_flags);
    if inv_quirk && flags.0 & KERNEL_WC_WITH_INVALIDATE != 0 {
        flags = WcFlags((flags.0 & !KERNEL_WC_WITH_INVALIDATE) | WcFlags::WITH_INV.0);
    }
    let invalidated_rkey = if flags.contains(WcFlags::WITH_INV) {
        // SAFETY: with IBV_WC_WITH_INV the union holds the invalidated rkey (both members are
        // u32-sized plain data anyway).
        unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey }
    } else {
        0
    };
    Completion {
        wr_id: wc.wr_id,
        status: WcStatus(wc.status),
        opcode: WcOpcode(wc.opcode),
        byte_len: wc.byte_len,
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        flags,
        invalidated_rkey,
        vendor_err: wc.vendor_err,
    }
}

impl CompletionQueue for RdmaCq {
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, VerbsError> {
        let inner = &*self.inner;
        // Acquire: pairs with the Release store in `drain_async`.
        if inner.overrun.load(Ordering::Acquire) {
            return Err(VerbsError::new(VerbsCall::PollCq, errno::EOVERFLOW));
        }
        let mut wcs: [MaybeUninit<sys::ibv_wc>; POLL_BURST] =
            // SAFETY: an array of MaybeUninit needs no initialization.
            unsafe { MaybeUninit::uninit().assume_init() };
        let quirk = inner.dev.wc_inv_quirk();
        let mut total = 0usize;
        while total < out.len() {
            let want = (out.len() - total).min(POLL_BURST);
            // SAFETY: the CQ is live; wcs has room for `want` entries.
            let n = unsafe { sys::ibv_poll_cq(inner.raw(), want as i32, wcs.as_mut_ptr().cast()) };
            if n < 0 {
                return Err(VerbsError::new(VerbsCall::PollCq, errno::EIO));
            }
            let n = (n as usize).min(want);
            for (dst, wc) in out[total..total + n].iter_mut().zip(&wcs[..n]) {
                // SAFETY: ibv_poll_cq initialized the first n entries.
                *dst = convert(unsafe { wc.assume_init_ref() }, quirk);
            }
            total += n;
            if n < want {
                break;
            }
        }
        if total > 0 {
            self.empty_polls = 0;
            inner.qps.account(&out[..total]);
        } else {
            self.empty_polls += 1;
            if self.empty_polls >= ASYNC_CHECK_INTERVAL {
                self.empty_polls = 0;
                drain_async(inner.dev.ctx());
                // Acquire: pairs with the Release store in `drain_async`.
                if inner.overrun.load(Ordering::Acquire) {
                    inner.overrun_qps();
                    return Err(VerbsError::new(VerbsCall::PollCq, errno::EOVERFLOW));
                }
            }
        }
        Ok(total)
    }

    fn depth(&self) -> u32 {
        self.inner.depth
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.inner.channel.fd())
    }

    fn arm_notify(&mut self) -> Result<bool, VerbsError> {
        let inner = &*self.inner;
        inner.channel.consume(inner.raw());
        inner.channel.arm(inner.raw())?;
        Ok(true)
    }

    fn consume_events(&mut self) -> usize {
        self.inner.channel.consume(self.inner.raw())
    }
}
