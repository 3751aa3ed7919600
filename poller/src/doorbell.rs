//! A doorbell that wakes a polling thread only when it is about to sleep (eventfd/futex style,
//! built on the futex behind [`std::thread::park`]).
//!
//! Normal operation: the owner (a reactor or a worker) polls its rings; producers publish into a
//! ring and then [`Doorbell::ring`] it. While the owner spins, ringing costs a SeqCst fence and one
//! load of a flag only its owner writes, on a line of its own: no read-modify-write, no system
//! call. When the owner runs out of work it [`Doorbell::arm`]s the bell ("I am going to
//! sleep"), checks every ring once more (a whole poll), and only if that finds nothing
//! [`Doorbell::park`]s; any producer that published before the re-check is seen by it, and any
//! that published after it sees the flag and unparks the owner (the classic lost-wake-up race,
//! closed by the fence pair documented on [`Doorbell::arm`] and [`Doorbell::ring`];
//! `poller/tests/loom_doorbell.rs` model-checks it). [`Doorbell::disarm`] ends the sleeping
//! state when the re-check found work or the owner woke up.
//!
//! Recovery: a spurious wake-up (a ring that raced with the owner waking up on its own, another
//! thread unparking the owner) only ends a park early: the owner polls and arms again. One owner
//! per bell; any number of producers.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(loom)]
use loom::thread::Thread;
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(not(loom))]
use std::thread::Thread;

use crossbeam_utils::CachePadded;
use std::sync::OnceLock;

/// A polling thread's doorbell: producers ring it after publishing work; it wakes the owner only
/// if the owner announced that it is about to sleep.
#[derive(Debug, Default)]
pub struct Doorbell {
    /// True from [`Doorbell::arm`] to [`Doorbell::disarm`]; written by the owner only.
    sleeping: CachePadded<AtomicBool>,
    /// The owner (set once by [`Doorbell::register`], before it first arms).
    thread: OnceLock<Thread>,
}

impl Doorbell {
    /// A bell with no owner yet (the owner calls [`Doorbell::register`] on its thread).
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// Makes the calling thread the owner. Call once, on the owner's thread, before the first
    /// [`Doorbell::arm`]; later calls change nothing.
    pub fn register(&self) {
        #[cfg(not(loom))]
        let me = std::thread::current();
        #[cfg(loom)]
        let me = loom::thread::current();
        let _ = self.thread.set(me);
    }

    /// Owner: "I am going to sleep". Re-check every source of work afterwards (a full poll),
    /// then [`Doorbell::park`] if it found nothing or [`Doorbell::disarm`] if it found some.
    #[inline]
    pub fn arm(&self) {
        // Release store (pairs with the Acquire flag load in `ring`: a producer that sees `true`
        // also sees `thread`, set before this in program order), then the SeqCst fence (pairs
        // with the SeqCst fence in `ring`):
        // the owner's re-check of its rings comes after this fence. If the producer's fence
        // comes first in the single total order, the re-check sees its publication; otherwise
        // the producer's flag load after its fence sees this store. Either way no wake-up is
        // lost (Dekker / store-buffering; a plain Release store and Acquire loads would allow
        // both sides to miss each other).
        self.sleeping.store(true, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    /// Owner: the re-check found work, or the owner woke up: producers stop unparking.
    #[inline]
    pub fn disarm(&self) {
        // Relaxed: ends the sleeping state; a producer that still sees `true` unparks once
        // more, which only ends a later park early (the park token).
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Whether the owner has armed the bell (diagnostics and tests).
    pub fn is_armed(&self) -> bool {
        // Relaxed: a status read.
        self.sleeping.load(Ordering::Relaxed)
    }

    /// Owner: sleeps until rung (or another unpark), after [`Doorbell::arm`] and a re-check
    /// that found nothing; `timeout` bounds the sleep when the owner also has work no producer
    /// rings for (timers, sources polled without a doorbell). Disarms before returning.
    pub fn park(&self, timeout: Option<core::time::Duration>) {
        #[cfg(not(loom))]
        match timeout {
            Some(t) => std::thread::park_timeout(t),
            None => std::thread::park(),
        }
        #[cfg(loom)]
        {
            let _ = timeout;
            loom::thread::park();
        }
        self.disarm();
    }

    /// Producer: call after publishing work (the publication, e.g. a ring's Release store,
    /// comes before this call in program order). Wakes the owner only if it has armed the bell;
    /// otherwise a fence and one load, no system call.
    #[inline]
    pub fn ring(&self) {
        // SeqCst fence (pairs with the SeqCst fence in `arm`): our publication is ordered before
        // this fence and the flag load after it; see `arm`.
        fence(Ordering::SeqCst);
        // Acquire (pairs with the Release store in `arm`; the owner registers before it arms):
        // a `true` here means `thread` is set.
        if self.sleeping.load(Ordering::Acquire) {
            self.wake();
        }
    }

    /// Unparks the owner unconditionally (shutdown, or a producer that must not depend on the
    /// flag). A no-op before [`Doorbell::register`].
    #[cold]
    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}
