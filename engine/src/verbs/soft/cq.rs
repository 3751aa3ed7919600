//! Soft completion queues: a bounded lock-free MPSC ring (`cq/ring.rs`: several QPs on several
//! threads push, the owner polls).
//!
//! Normal operation: producers push completions; `poll` pops a burst into the caller's array.
//! A completion channel set with `set_notify` runs after every push (the owner's doorbell).
//! When an attached QP has deferred work (an RNR-blocked send queue, held completions), `poll`
//! first drives it — the soft "NIC" has no thread of its own.
//!
//! Recovery: a push into a full ring overruns the CQ (as hardware's `IBV_EVENT_CQ_ERR`): the
//! CQ becomes unusable (`poll` fails with `EOVERFLOW`) and every attached QP goes to the error
//! state with its connection torn down. Later pushes are dropped.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crossbeam_utils::CachePadded;

use super::DeviceInner;
use crate::verbs::{errno, Completion, CompletionQueue, CqNotify, VerbsCall, VerbsError};
use ring::CqRing;

mod ring;

/// What a CQ drives in the QPs attached to it (the soft QP implements it; the CQ knows its QPs
/// only through this).
pub(crate) trait Attached: Send + Sync {
    /// Deferred work (an RNR wait, held completions), driven by a poll of the CQ.
    fn progress(&self);
    /// The CQ overran: the QP and its peer go to the error state.
    fn connection_down(&self);
}

pub(crate) struct CqShared {
    pub(crate) dev: Arc<DeviceInner>,
    /// Producers: the attached QPs' engines and flushes (any thread); consumer: `SoftCq::poll`.
    ring: CqRing<Completion>,
    depth: u32,
    overflow: AtomicBool,
    overflow_unhandled: AtomicBool,
    /// Number of `poll` calls so far (for "hold until N polls"). Written by the poller on every
    /// poll: a line of its own, so producers reading `overflow` and `notify` on every push do
    /// not fetch it back each time.
    pub(crate) polls: CachePadded<AtomicU64>,
    /// Attached QPs with deferred work (RNR wait, held completions).
    pub(crate) work: AtomicU32,
    attached: Mutex<Vec<Weak<dyn Attached>>>,
    /// The completion channel (`CompletionQueue::set_notify`), run after every push.
    notify: OnceLock<CqNotify>,
}

impl CqShared {
    /// Pushes a completion; on a full ring the CQ overruns.
    pub(crate) fn push(&self, c: Completion) {
        // Acquire: pairs with the Release store below (a sticky flag; later pushes drop).
        if self.overflow.load(Ordering::Acquire) {
            return;
        }
        if self.ring.push(c).is_err() {
            // Release/SeqCst: publish the overrun before asking someone to handle it.
            self.overflow.store(true, Ordering::Release);
            self.overflow_unhandled.store(true, Ordering::SeqCst);
            self.handle_overflow();
        }
        // After the push (or the overrun, which the owner must see too): the channel orders
        // its own check after it (a doorbell's SeqCst fence).
        if let Some(n) = self.notify.get() {
            n();
        }
    }

    /// Moves every attached QP to the error state, if the CQ overran and nobody did it yet.
    /// Never blocks: if the attach list is busy, its holder runs this after unlocking.
    pub(crate) fn handle_overflow(&self) {
        loop {
            // SeqCst: pairs with the SeqCst store in `push`, against the unlock below.
            if !self.overflow_unhandled.load(Ordering::SeqCst) {
                return;
            }
            let Ok(list) = self.attached.try_lock() else {
                return;
            };
            // SeqCst: only one handler claims the overrun (pairs with the store in `push`).
            if self.overflow_unhandled.swap(false, Ordering::SeqCst) {
                for w in list.iter() {
                    if let Some(qp) = w.upgrade() {
                        qp.connection_down();
                    }
                }
            }
            drop(list);
        }
    }

    pub(crate) fn attach(&self, qp: Weak<dyn Attached>) {
        self.attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(qp);
        self.handle_overflow();
    }

    /// Detaches the QP at address `qp`.
    pub(crate) fn detach(&self, qp: *const ()) {
        self.attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| !core::ptr::eq(w.as_ptr().cast::<()>(), qp));
        self.handle_overflow();
    }

    /// Drives attached QPs' deferred work (called by `poll` when `work` > 0).
    fn progress(&self) {
        let Ok(list) = self.attached.try_lock() else {
            return;
        };
        for w in list.iter() {
            if let Some(qp) = w.upgrade() {
                qp.progress();
            }
        }
        drop(list);
        self.handle_overflow();
    }

    pub(crate) fn is_overflowed(&self) -> bool {
        // Acquire: pairs with the Release store in `push`.
        self.overflow.load(Ordering::Acquire)
    }
}

/// A soft completion queue.
pub struct SoftCq {
    pub(crate) shared: Arc<CqShared>,
}

impl core::fmt::Debug for SoftCq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SoftCq(depth {})", self.shared.depth)
    }
}

impl SoftCq {
    pub(crate) fn new(dev: Arc<DeviceInner>, depth: u32) -> SoftCq {
        SoftCq {
            shared: Arc::new(CqShared {
                dev,
                ring: CqRing::new(depth as usize, Completion::default()),
                depth,
                overflow: AtomicBool::new(false),
                overflow_unhandled: AtomicBool::new(false),
                polls: CachePadded::new(AtomicU64::new(0)),
                work: AtomicU32::new(0),
                attached: Mutex::new(Vec::new()),
                notify: OnceLock::new(),
            }),
        }
    }

    /// Completions currently queued (diagnostics).
    pub fn len(&self) -> usize {
        self.shared.ring.len()
    }

    /// True when no completion is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.ring.is_empty()
    }
}

impl CompletionQueue for SoftCq {
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, VerbsError> {
        let s = &*self.shared;
        if s.is_overflowed() {
            s.handle_overflow();
            return Err(VerbsError::new(VerbsCall::PollCq, errno::EOVERFLOW));
        }
        // Relaxed: a counter only this poller (`&mut self`) writes, so a load and a store, not a
        // read-modify-write on a line producers read; readers tolerate staleness.
        let polls = s.polls.load(Ordering::Relaxed);
        s.polls.store(polls + 1, Ordering::Relaxed);
        // Acquire: pairs with the Release increments by QPs that defer work.
        if s.work.load(Ordering::Acquire) != 0 {
            s.progress();
            if s.is_overflowed() {
                return Err(VerbsError::new(VerbsCall::PollCq, errno::EOVERFLOW));
            }
        }
        // SAFETY: the ring's only consumer: this owner handle, through `&mut self`.
        Ok(unsafe { s.ring.pop_into(out) })
    }

    fn depth(&self) -> u32 {
        self.shared.depth
    }

    fn set_notify(&mut self, notify: CqNotify) -> bool {
        self.shared.notify.set(notify).is_ok()
    }
}
