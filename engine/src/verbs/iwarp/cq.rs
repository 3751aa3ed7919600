//! Completion queues of the iWARP provider, and the progress of the process's connections:
//! a software device has no thread of its own, so each poll (of a CQ, a QP's events, a
//! listener) also drives every connection of the process that no other thread is driving.
//!
//! Normal operation: QPs push completions in order; [`CompletionQueue::poll`] first drives the
//! QPs attached to the CQ, then those of the process ([`progress_all`]), then hands out a burst.
//! A notice set with `set_notify` runs after every push.
//!
//! Recovery: a push into a full CQ overruns it: every later poll fails with `EOVERFLOW` and the
//! pushing QP goes to ERROR (its own handling, on the `false` [`CqInner::push`] returns).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::device::lock;
use crate::verbs::{errno, Completion, CompletionQueue, CqNotify, VerbsCall, VerbsError};

/// What a poll drives: one connection's socket I/O.
pub(crate) trait Drive: Send + Sync {
    /// Does the I/O that can be done now (blocking on the connection's own lock).
    fn drive(&self);
    /// As [`Drive::drive`], unless another thread is driving the connection right now.
    fn try_drive(&self);
}

/// Every connection of this process (see the module doc).
static ALL: Mutex<Vec<Weak<dyn Drive>>> = Mutex::new(Vec::new());

/// Adds a connection to those every poll drives.
pub(crate) fn register(c: Weak<dyn Drive>) {
    lock(&ALL).push(c);
}

thread_local! {
    /// The connections one poll drives, taken out of their lists so that no list lock is held
    /// while driving; kept per thread so that a poll allocates nothing once it has grown.
    static SCRATCH: std::cell::Cell<Vec<Arc<dyn Drive>>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` on the live connections of `list` (dropping the dead ones from it), without
/// holding `list`'s lock while `f` runs and without allocating once the scratch has grown.
fn each_live(list: &Mutex<Vec<Weak<dyn Drive>>>, f: impl Fn(&dyn Drive)) {
    let mut live = SCRATCH.take();
    {
        let mut l = lock(list);
        l.retain(|w| w.strong_count() > 0);
        live.extend(l.iter().filter_map(Weak::upgrade));
    }
    for c in &live {
        f(c.as_ref());
    }
    live.clear();
    SCRATCH.set(live);
}

/// Drives every connection of this process that no other thread is driving right now.
pub(crate) fn progress_all() {
    each_live(&ALL, |c| c.try_drive());
}

#[derive(Default)]
struct CqQueue {
    items: VecDeque<Completion>,
    overflow: bool,
}

pub(crate) struct CqInner {
    depth: u32,
    q: Mutex<CqQueue>,
    /// The QPs whose socket I/O a poll of this CQ drives.
    qps: Mutex<Vec<Weak<dyn Drive>>>,
    notify: OnceLock<CqNotify>,
}

impl CqInner {
    /// Queues a completion; `false` when the CQ is (or now becomes) overrun.
    pub(crate) fn push(&self, c: Completion) -> bool {
        let mut q = lock(&self.q);
        if q.overflow {
            return false;
        }
        if q.items.len() >= self.depth as usize {
            q.overflow = true;
            return false;
        }
        q.items.push_back(c);
        drop(q);
        if let Some(n) = self.notify.get() {
            n();
        }
        true
    }

    pub(crate) fn attach(&self, qp: Weak<dyn Drive>) {
        let mut qps = lock(&self.qps);
        qps.retain(|w| w.strong_count() > 0);
        qps.push(qp);
    }

    /// A new CQ of `depth` entries.
    pub(crate) fn new(depth: u32) -> CqInner {
        CqInner {
            depth,
            q: Mutex::new(CqQueue::default()),
            qps: Mutex::new(Vec::new()),
            notify: OnceLock::new(),
        }
    }
}

/// A completion queue.
pub struct IwarpCq {
    pub(crate) inner: Arc<CqInner>,
}

impl CompletionQueue for IwarpCq {
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, VerbsError> {
        each_live(&self.inner.qps, |qp| qp.drive());
        progress_all();
        let mut q = lock(&self.inner.q);
        if q.overflow {
            return Err(VerbsError::new(VerbsCall::PollCq, errno::EOVERFLOW));
        }
        let n = out.len().min(q.items.len());
        for (slot, c) in out.iter_mut().zip(q.items.drain(..n)) {
            *slot = c;
        }
        Ok(n)
    }

    fn depth(&self) -> u32 {
        self.inner.depth
    }

    fn set_notify(&mut self, notify: CqNotify) -> bool {
        self.inner.notify.set(notify).is_ok()
    }
}
