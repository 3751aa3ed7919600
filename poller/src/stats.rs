//! Per-reactor counters, written by the owning reactor thread and readable from any thread while it
//! runs.
//!
//! Normal operation: [`stats`] creates one counter block (on its own cache lines) and returns the
//! single [`StatsWriter`] (not `Clone`; the owner keeps it) and a [`StatsReader`] (`Clone`, for
//! monitoring). With one writer, each update is a relaxed load and a relaxed store: no locked
//! instruction on the polling path, and the cache line stays with the owner's core until somebody
//! reads it. Readers take a [`StatsSnapshot`]; counters are individually exact but a snapshot is
//! not atomic across counters.
//!
//! Recovery: nothing to recover; counters wrap at 2^64.

use core::sync::atomic::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// The counters (`u64`s, padded to cache lines).
#[derive(Default)]
struct Counters {
    iterations: AtomicU64,
    busy_iterations: AtomicU64,
    work_items: AtomicU64,
    control_messages: AtomicU64,
    timer_expiries: AtomicU64,
    idle_yields: AtomicU64,
    idle_sleeps: AtomicU64,
    idle_wakeups: AtomicU64,
    rt_demotions: AtomicU64,
    pollers: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Run-loop iterations.
    pub iterations: u64,
    /// Iterations that did useful work (pollers, timers or control messages).
    pub busy_iterations: u64,
    /// Useful work items reported by pollers (sum of `poll` return values).
    pub work_items: u64,
    /// Control messages handled.
    pub control_messages: u64,
    /// Timers expired.
    pub timer_expiries: u64,
    /// Idle iterations that yielded the CPU (back-off).
    pub idle_yields: u64,
    /// Idle iterations that slept (back-off).
    pub idle_sleeps: u64,
    /// Interrupt-mode sleeps ended by a ready descriptor (a doorbell ring, a completion
    /// channel, a connection event) rather than by their timeout (a timer, the longest sleep).
    pub idle_wakeups: u64,
    /// Returns from the real-time class to the fair class after a busy stretch
    /// ([`crate::sched::RealtimeWake`]).
    pub rt_demotions: u64,
    /// Pollers currently registered (a gauge).
    pub pollers: u64,
}

/// `part / whole` (0 when `whole` is 0): the busy fractions of the reactor's and the nodes'
/// snapshots.
pub(crate) fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

impl StatsSnapshot {
    /// Fraction of iterations that did useful work (0 when there were none).
    pub fn busy_fraction(&self) -> f64 {
        fraction(self.busy_iterations, self.iterations)
    }
}

/// Creates a counter block: the one writer and a reader.
pub fn stats() -> (StatsWriter, StatsReader) {
    let c = Arc::new(CachePadded::new(Counters::default()));
    (StatsWriter(Arc::clone(&c)), StatsReader(c))
}

/// The single writer of a counter block (not `Clone`).
pub struct StatsWriter(Arc<CachePadded<Counters>>);

/// Adds `n` to a counter that only this writer stores.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    // Relaxed load and store: we are the only writer, so the load sees our own last store (no
    // pairing needed); readers' Relaxed loads in `StatsReader::snapshot` may see any recent value,
    // which is all a statistic promises.
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl StatsWriter {
    /// One run-loop iteration; `busy` if it did useful work.
    #[inline]
    pub fn iteration(&self, busy: bool) {
        bump(&self.0.iterations, 1);
        if busy {
            bump(&self.0.busy_iterations, 1);
        }
    }

    /// `n` work items done by pollers.
    #[inline]
    pub fn work_items(&self, n: u64) {
        if n != 0 {
            bump(&self.0.work_items, n);
        }
    }

    /// `n` control messages handled.
    #[inline]
    pub fn control_messages(&self, n: u64) {
        if n != 0 {
            bump(&self.0.control_messages, n);
        }
    }

    /// `n` timers expired.
    #[inline]
    pub fn timer_expiries(&self, n: u64) {
        if n != 0 {
            bump(&self.0.timer_expiries, n);
        }
    }

    /// One idle yield.
    #[inline]
    pub fn idle_yield(&self) {
        bump(&self.0.idle_yields, 1);
    }

    /// One idle sleep.
    #[inline]
    pub fn idle_sleep(&self) {
        bump(&self.0.idle_sleeps, 1);
    }

    /// One interrupt-mode sleep ended by a ready descriptor.
    #[inline]
    pub fn idle_wakeup(&self) {
        bump(&self.0.idle_wakeups, 1);
    }

    /// One return to the fair class ([`crate::sched`]).
    #[inline]
    pub fn rt_demotion(&self) {
        bump(&self.0.rt_demotions, 1);
    }

    /// Sets the poller gauge.
    #[inline]
    pub fn set_pollers(&self, n: u64) {
        // Relaxed: a gauge read by `snapshot` only (pairs with nothing).
        self.0.pollers.store(n, Ordering::Relaxed);
    }

    /// A reader of this block.
    pub fn reader(&self) -> StatsReader {
        StatsReader(Arc::clone(&self.0))
    }
}

/// A reader of a counter block (`Clone`, any thread).
#[derive(Clone)]
pub struct StatsReader(Arc<CachePadded<Counters>>);

impl StatsReader {
    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let c = &self.0;
        // Relaxed (all): statistics only; each pairs with nothing but sees some recent value of
        // the writer's Relaxed stores in `bump` / `set_pollers`.
        StatsSnapshot {
            iterations: c.iterations.load(Ordering::Relaxed),
            busy_iterations: c.busy_iterations.load(Ordering::Relaxed),
            work_items: c.work_items.load(Ordering::Relaxed),
            control_messages: c.control_messages.load(Ordering::Relaxed),
            timer_expiries: c.timer_expiries.load(Ordering::Relaxed),
            idle_yields: c.idle_yields.load(Ordering::Relaxed),
            idle_sleeps: c.idle_sleeps.load(Ordering::Relaxed),
            idle_wakeups: c.idle_wakeups.load(Ordering::Relaxed),
            rt_demotions: c.rt_demotions.load(Ordering::Relaxed),
            pollers: c.pollers.load(Ordering::Relaxed),
        }
    }
}

impl core::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.snapshot().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_counts_seen_by_reader() {
        let (w, r) = stats();
        w.iteration(true);
        w.iteration(false);
        w.work_items(5);
        w.control_messages(2);
        w.timer_expiries(3);
        w.idle_yield();
        w.idle_sleep();
        w.idle_wakeup();
        w.rt_demotion();
        w.set_pollers(4);
        let s = r.snapshot();
        assert_eq!(
            s,
            StatsSnapshot {
                iterations: 2,
                busy_iterations: 1,
                work_items: 5,
                control_messages: 2,
                timer_expiries: 3,
                idle_yields: 1,
                idle_sleeps: 1,
                idle_wakeups: 1,
                rt_demotions: 1,
                pollers: 4,
            }
        );
        assert_eq!(s.busy_fraction(), 0.5);
    }
}
