//! Real-time wake-ups for polling threads: a reactor or worker that sleeps when idle runs in
//! the `SCHED_FIFO` class while it is waiting for work, and in the fair class (`SCHED_OTHER`
//! at its nice value) once it has been busy for a while.
//!
//! Why: a fair-class thread woken on a core that another runnable thread holds waits for the
//! scheduler to preempt that thread. On a kernel that preempts lazily (Linux 6.13 and later
//! with `CONFIG_PREEMPT_LAZY`, Debian's default from 6.18) that wait is the next tick, up to
//! 4 ms at 250 Hz, on every wake-up: every call of a one-call-at-a-time client pays it once per
//! wake-up on its path (docs/performance-nfs.md, "The metadata workload on Linux 6.18"). A
//! woken real-time thread preempts at once, lazy or not. A real-time thread that stays busy
//! would keep the fair class off its core until the kernel's real-time throttling steps in
//! (`sched_rt_runtime_us`: 95 %); so the class is for the wake-up only.
//!
//! Normal operation: `RtThread::start` (on the thread) puts it in `SCHED_FIFO` at
//! [`RealtimeWake::priority`]. The thread tells `RtThread::busy` each time it did work and
//! `RtThread::woke` after each sleep; once it has been awake for
//! [`RealtimeWake::demote_after_us`] without a sleep — a steady load, not a wake-up — it
//! returns to `SCHED_OTHER` (its nice value kept: `sched_setscheduler` keeps it) and shares its
//! core as any thread does. `RtThread::sleeping`, as it goes to sleep, makes it real-time
//! again. While real-time it skips its idle spin and yield phases and sleeps as soon as it
//! finds nothing to do: a real-time thread that spins keeps the fair class off its core, and
//! with it the work it waits for (the kernel's completion processing of a software RDMA
//! device, the client it serves on the same host). So it holds its core ahead of the fair class for at most `demote_after_us` per
//! wake-up, and the system calls happen only at those two changes: a latency-bound thread that
//! never reaches the bound makes none.
//!
//! Recovery: where the class cannot be set (`EPERM`: no `CAP_SYS_NICE` and an
//! `RLIMIT_RTPRIO` below the priority, or a cgroup without real-time runtime), the thread
//! stays in the fair class for good and `RtThread::start` says so (`None`); a later failure
//! to return to the class leaves it in the fair class likewise. Nothing else depends on it.

use serde::{Deserialize, Serialize};

/// Real-time wake-ups for a polling thread (module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealtimeWake {
    /// `SCHED_FIFO` priority while waiting for work (1..=99; clamped).
    pub priority: u8,
    /// Busy this long (microseconds) without a sleep, the thread returns to the fair class
    /// until it next goes to sleep.
    pub demote_after_us: u64,
}

impl RealtimeWake {
    /// The lowest real-time priority, demoted after 2 ms awake.
    pub const DEFAULT: RealtimeWake = RealtimeWake {
        priority: 1,
        demote_after_us: 2_000,
    };
}

impl Default for RealtimeWake {
    fn default() -> Self {
        RealtimeWake::DEFAULT
    }
}

/// One thread's class (module documentation). Owned by the thread it changes.
#[derive(Debug)]
pub(crate) struct RtThread {
    /// Priority and bound (ns); `None`: off, or the class could not be set.
    cfg: Option<(i32, u64)>,
    tid: libc::pid_t,
    /// In `SCHED_FIFO` now.
    fifo: bool,
    /// When the thread last woke (its clock, ns).
    awake_since: u64,
    /// Returns to the fair class so far (the reactor counts them in its statistics).
    demotions: u64,
}

impl RtThread {
    /// A thread that stays in its class.
    pub(crate) const OFF: RtThread = RtThread {
        cfg: None,
        tid: 0,
        fifo: false,
        awake_since: 0,
        demotions: 0,
    };

    /// Call on the thread: puts it in `SCHED_FIFO` as `cfg` says (`now`: the thread's clock).
    /// Returns the state and the priority it runs at (`None`: off or refused).
    pub(crate) fn start(cfg: Option<RealtimeWake>, now: u64) -> (RtThread, Option<u8>) {
        let Some(c) = cfg else {
            return (RtThread::OFF, None);
        };
        let prio = c.priority.clamp(1, 99);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let mut t = RtThread {
            cfg: Some((i32::from(prio), c.demote_after_us.saturating_mul(1000))),
            tid,
            fifo: false,
            awake_since: now,
            demotions: 0,
        };
        if !t.set(true) {
            t.cfg = None;
            return (t, None);
        }
        (t, Some(prio))
    }

    /// The thread did work at `now`: past the bound since it woke, it returns to the fair
    /// class. True when it did so now.
    #[inline]
    pub(crate) fn busy(&mut self, now: u64) -> bool {
        match self.cfg {
            Some((_, bound)) if self.fifo && now.saturating_sub(self.awake_since) > bound => {
                self.demote()
            }
            _ => false,
        }
    }

    #[cold]
    fn demote(&mut self) -> bool {
        if self.set(false) {
            self.demotions += 1;
            return true;
        }
        false
    }

    /// The thread is about to sleep: it waits for work in `SCHED_FIFO` again.
    #[inline]
    pub(crate) fn sleeping(&mut self) {
        if self.cfg.is_some() && !self.fifo && !self.set(true) {
            // Refused now (the limits changed): the fair class for good.
            self.cfg = None;
        }
    }

    /// Whether real-time wake-ups are on for this thread (the clock needs reading).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.cfg.is_some()
    }

    /// The thread woke from a sleep at `now`.
    #[inline]
    pub(crate) fn woke(&mut self, now: u64) {
        self.awake_since = now;
    }

    /// Returns to the fair class so far.
    #[cfg(test)]
    pub(crate) fn demotions(&self) -> u64 {
        self.demotions
    }

    /// Whether the thread is in `SCHED_FIFO` now (it then sleeps as soon as it is idle:
    /// [`crate::backoff::Backoff::skip_to_sleep`]).
    #[inline]
    pub(crate) fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// `sched_setscheduler(2)` on this thread: `SCHED_FIFO` at the priority, or `SCHED_OTHER`
    /// (which keeps the nice value). False when refused.
    fn set(&mut self, fifo: bool) -> bool {
        let Some((prio, _)) = self.cfg else {
            return false;
        };
        let (policy, p) = if fifo {
            (libc::SCHED_FIFO, prio)
        } else {
            (libc::SCHED_OTHER, 0)
        };
        let param = libc::sched_param { sched_priority: p };
        // SAFETY: our own thread id and a live sched_param.
        let r = unsafe { libc::sched_setscheduler(self.tid, policy, &param) };
        if r == 0 {
            self.fifo = fifo;
        }
        r == 0
    }
}

/// The scheduling policy of the calling thread (`SCHED_*`), for reports and tests.
pub fn current_policy() -> i32 {
    // SAFETY: gettid has no preconditions; sched_getscheduler only reads.
    unsafe { libc::sched_getscheduler(libc::gettid()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn may_be_realtime() -> bool {
        let (mut t, got) = RtThread::start(Some(RealtimeWake::DEFAULT), 0);
        if got.is_none() {
            return false;
        }
        t.set(false);
        true
    }

    #[test]
    fn accepts_off_as_no_change() {
        let before = current_policy();
        let (mut t, got) = RtThread::start(None, 0);
        assert_eq!(got, None);
        assert!(!t.busy(u64::MAX));
        t.sleeping();
        assert_eq!(current_policy(), before);
        assert_eq!(t.demotions(), 0);
    }

    #[test]
    fn accepts_fifo_while_waiting_and_the_fair_class_past_the_bound() {
        // Its own thread: the test harness's threads stay as they are.
        std::thread::spawn(|| {
            if !may_be_realtime() {
                eprintln!("skipped: SCHED_FIFO refused (needs CAP_SYS_NICE or RLIMIT_RTPRIO)");
                return;
            }
            let cfg = RealtimeWake {
                priority: 200,
                demote_after_us: 100,
            };
            let (mut t, got) = RtThread::start(Some(cfg), 1_000);
            assert_eq!(got, Some(99), "clamped to 99");
            assert_eq!(current_policy(), libc::SCHED_FIFO);
            assert!(!t.busy(1_000 + 100_000), "at the bound: still real-time");
            assert_eq!(current_policy(), libc::SCHED_FIFO);
            assert!(t.busy(1_000 + 100_001), "past it: the fair class");
            assert_eq!(current_policy(), libc::SCHED_OTHER);
            assert!(!t.busy(10_000_000), "once per stretch");
            assert_eq!(t.demotions(), 1);
            t.sleeping();
            assert_eq!(current_policy(), libc::SCHED_FIFO, "waits real-time again");
            t.woke(20_000_000);
            assert!(
                !t.busy(20_000_000 + 99_000),
                "a new stretch from the wake-up"
            );
            assert!(t.is_fifo());
            assert!(t.busy(20_000_000 + 200_000));
            assert_eq!(t.demotions(), 2);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn accepts_a_kept_nice_value_across_the_classes() {
        std::thread::spawn(|| {
            if !may_be_realtime() {
                eprintln!("skipped: SCHED_FIFO refused");
                return;
            }
            // SAFETY: this thread's id; setpriority / getpriority on it.
            let (tid, nice) = unsafe {
                let tid = libc::gettid() as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, 5);
                (tid, libc::getpriority(libc::PRIO_PROCESS, tid))
            };
            assert_eq!(nice, 5);
            let (mut t, _) = RtThread::start(Some(RealtimeWake::DEFAULT), 0);
            assert!(t.busy(10_000_000));
            // SAFETY: as above.
            let after = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
            assert_eq!(after, 5, "the fair class at the nice value it had");
        })
        .join()
        .expect("thread");
    }
}
