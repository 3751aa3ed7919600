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
//! Eventfd mode ([`Doorbell::with_eventfd`], for a reactor in interrupt mode): the protocol is
//! the same, but the owner sleeps in `poll(2)` on the bell's eventfd together with its other
//! descriptors (completion channels, connection events), and a ring that finds the owner armed
//! writes the eventfd instead of unparking. The owner reads the eventfd when it wakes
//! ([`Doorbell::consume`]); a write by a ring that raced with that read (it saw the bell still
//! armed) only ends the next sleep at once, like a stale park token. Producers still pay only
//! the fence and the load while the owner polls.
//!
//! Other threads that hand the owner work hold a [`Waker`]: the owner's doorbell when it has
//! one (the ring protocol above), an unpark of its thread otherwise.
//!
//! Recovery: a spurious wake-up (a ring that raced with the owner waking up on its own, another
//! thread unparking the owner, an eventfd write left over from an earlier sleep) only ends a
//! sleep early: the owner polls and arms again. One owner per bell; any number of producers.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(loom)]
use loom::thread::Thread;
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(not(loom))]
use std::thread::Thread;

use crossbeam_utils::CachePadded;
use std::sync::{Arc, OnceLock};

/// A polling thread's doorbell: producers ring it after publishing work; it wakes the owner only
/// if the owner announced that it is about to sleep.
#[derive(Debug, Default)]
pub struct Doorbell {
    /// True from [`Doorbell::arm`] to [`Doorbell::disarm`]; written by the owner only.
    sleeping: CachePadded<AtomicBool>,
    /// The owner (set once by [`Doorbell::register`], before it first arms).
    thread: OnceLock<Thread>,
    /// Eventfd mode: the eventfd the owner sleeps on.
    efd: Option<EventFd>,
}

impl Doorbell {
    /// A bell with no owner yet (the owner calls [`Doorbell::register`] on its thread).
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// A bell in eventfd mode (see the module documentation): rings that find the owner armed
    /// write an eventfd (`EFD_NONBLOCK | EFD_CLOEXEC`) the owner sleeps on with `poll(2)`.
    pub fn with_eventfd() -> std::io::Result<Doorbell> {
        Ok(Doorbell {
            efd: Some(EventFd::new()?),
            ..Doorbell::default()
        })
    }

    /// The eventfd to sleep on (eventfd mode; `None` for a parking bell, and under loom, where
    /// the eventfd is a model).
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        #[cfg(not(loom))]
        return self.efd.as_ref().map(EventFd::fd);
        #[cfg(loom)]
        None
    }

    /// Owner, eventfd mode: resets the eventfd after a sleep (one non-blocking read); returns
    /// whether it had been written. A parking bell returns `false`.
    pub fn consume(&self) -> bool {
        self.efd.as_ref().is_some_and(EventFd::take)
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
    /// In eventfd mode it waits on the eventfd alone (an owner with more descriptors waits on
    /// all of them itself, then calls [`Doorbell::consume`] and [`Doorbell::disarm`]).
    pub fn park(&self, timeout: Option<core::time::Duration>) {
        match &self.efd {
            Some(e) => {
                e.wait(timeout);
                e.take();
            }
            #[cfg(not(loom))]
            None => match timeout {
                Some(t) => std::thread::park_timeout(t),
                None => std::thread::park(),
            },
            #[cfg(loom)]
            None => {
                let _ = timeout;
                loom::thread::park();
            }
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
        match &self.efd {
            Some(e) => e.post(self.thread.get()),
            None => {
                if let Some(t) = self.thread.get() {
                    t.unpark();
                }
            }
        }
    }
}

/// How another thread wakes a polling thread after handing it work (a submission, a control
/// command, a closed connection): through the thread's [`Doorbell`] when it may sleep (a fence
/// and a load while it polls), by an unpark otherwise (a busy-polling thread never sleeps; the
/// unpark costs a swap).
#[derive(Clone, Debug)]
pub struct Waker {
    thread: Thread,
    bell: Option<Arc<Doorbell>>,
}

impl Waker {
    /// A waker of the calling thread, through `bell` if it has one.
    pub fn current(bell: Option<&Arc<Doorbell>>) -> Waker {
        #[cfg(not(loom))]
        let thread = std::thread::current();
        #[cfg(loom)]
        let thread = loom::thread::current();
        Waker {
            thread,
            bell: bell.cloned(),
        }
    }

    /// Whether the calling thread is the one this wakes.
    pub fn is_current(&self) -> bool {
        #[cfg(not(loom))]
        return self.thread.id() == std::thread::current().id();
        #[cfg(loom)]
        return self.thread.id() == loom::thread::current().id();
    }

    /// Call after publishing the work (its Release store comes first): [`Doorbell::ring`], or an
    /// unpark.
    #[inline]
    pub fn wake(&self) {
        match &self.bell {
            Some(b) => b.ring(),
            None => self.thread.unpark(),
        }
    }
}

/// The eventfd of a bell in eventfd mode.
#[cfg(not(loom))]
#[derive(Debug)]
struct EventFd(std::os::fd::OwnedFd);

#[cfg(not(loom))]
impl EventFd {
    fn new() -> std::io::Result<EventFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: no pointers; returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor owned by nobody else.
        Ok(EventFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }

    /// Adds 1 to the counter (the owner's `poll(2)` sees the descriptor readable).
    fn post(&self, _owner: Option<&Thread>) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer. It fails only when the counter would
        // overflow (it is then non-zero: the owner wakes anyway).
        let _ = unsafe { libc::write(self.fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Reads (and so zeroes) the counter; whether it was non-zero.
    fn take(&self) -> bool {
        let mut v = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer; non-blocking.
        let n = unsafe { libc::read(self.fd(), v.as_mut_ptr().cast(), v.len()) };
        n == 8
    }

    /// Waits until the counter is non-zero or `timeout` passes.
    fn wait(&self, timeout: Option<core::time::Duration>) {
        let mut set = crate::wait::WaitSet::new();
        set.add(self.fd());
        set.wait(timeout.map_or(u64::MAX, |t| {
            u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
        }));
    }
}

/// The eventfd under loom: a counter, and the owner's park token for `poll(2)`.
#[cfg(loom)]
#[derive(Debug)]
struct EventFd(loom::sync::atomic::AtomicU64);

#[cfg(loom)]
impl EventFd {
    fn new() -> std::io::Result<EventFd> {
        Ok(EventFd(loom::sync::atomic::AtomicU64::new(0)))
    }

    fn post(&self, owner: Option<&Thread>) {
        // SeqCst: a model of the kernel's eventfd counter (its lock orders everything).
        self.0.fetch_add(1, Ordering::SeqCst);
        if let Some(t) = owner {
            t.unpark();
        }
    }

    fn take(&self) -> bool {
        // SeqCst: see `post`.
        self.0.swap(0, Ordering::SeqCst) > 0
    }

    fn wait(&self, _timeout: Option<core::time::Duration>) {
        // SeqCst: see `post`. A post after this load unparks: the park token is kept.
        if self.0.load(Ordering::SeqCst) == 0 {
            loom::thread::park();
        }
    }
}
