//! Optional idle back-off for polling loops.
//!
//! Normal operation: off by default ([`BackoffConfig::busy_poll`]): an idle loop iteration costs
//! nothing extra and the core spins at full speed, as in SPDK/DPDK. When enabled (for cores shared
//! with other work, tests on small machines, or power), consecutive idle iterations go through three
//! phases: the first `spin_polls` only issue a CPU spin hint, the next `yield_polls` call
//! [`std::thread::yield_now`], and after that each idle iteration sleeps, starting at
//! `min_sleep_ns` and doubling up to `max_sleep_ns`. Any useful work resets the sequence
//! ([`Backoff::reset`]). Sleeps use [`std::thread::park_timeout`], so whoever hands the thread work
//! can wake it at once with [`std::thread::Thread::unpark`], and the caller may cap a sleep (e.g. at
//! the next timer deadline). [`Backoff::sleeps_next`] tells a loop that the next idle iteration
//! would sleep, so it can arm a [`crate::doorbell::Doorbell`] and poll once more first (the
//! reactors and workers do).
//!
//! Interrupt mode ([`BackoffConfig::interrupt`], after SPDK's reactor interrupt mode): the same
//! phases, but a reactor sleeps in `poll(2)` on descriptors instead of parking: its doorbell's
//! eventfd (submissions, control messages, worker results, in-process completion notices) and
//! every descriptor its pollers arm (a CQ's completion channel, connection events). The sleep
//! ends when one is readable or at the next timer; `max_sleep_ns` only bounds it while some
//! source cannot wake the reactor. Workers have no descriptors and park as before.
//!
//! Recovery: nothing to recover; a spurious wake-up just ends a sleep early.

use core::time::Duration;

/// Idle back-off settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Whether to back off at all (`false`: pure busy-poll).
    pub enabled: bool,
    /// Idle iterations that only issue a spin hint.
    pub spin_polls: u32,
    /// Idle iterations, after the spinning ones, that yield the CPU.
    pub yield_polls: u32,
    /// First sleep (ns).
    pub min_sleep_ns: u64,
    /// Longest sleep (ns); sleeps double from `min_sleep_ns` up to this.
    pub max_sleep_ns: u64,
    /// Reactors sleep in `poll(2)` on their wake-up descriptors (see the module documentation);
    /// `false`: they park on their doorbell. Only meaningful with `enabled`.
    pub interrupt: bool,
}

impl BackoffConfig {
    /// Pure busy-polling (back-off off). The default.
    pub const fn busy_poll() -> Self {
        BackoffConfig {
            enabled: false,
            spin_polls: 0,
            yield_polls: 0,
            min_sleep_ns: 0,
            max_sleep_ns: 0,
            interrupt: false,
        }
    }

    /// Back-off for cores shared with other threads (tests, small machines): 100 spinning idle
    /// polls, 10 yielding ones, then sleeps from 10 us doubling to 1 ms. Short phases: a loop
    /// that sleeps on a [`crate::doorbell::Doorbell`] is woken at once by whoever hands it
    /// work, while spinning or yielding on a shared core keeps that core from the thread the
    /// work was just handed to.
    pub const fn shared_cores() -> Self {
        BackoffConfig {
            enabled: true,
            spin_polls: 100,
            yield_polls: 10,
            min_sleep_ns: 10_000,
            max_sleep_ns: 1_000_000,
            interrupt: false,
        }
    }

    /// Interrupt mode, for cores shared with other work and for idle servers: the phases of
    /// [`BackoffConfig::shared_cores`] (100 spinning idle polls, 10 yielding ones), then a
    /// reactor sleeps in `poll(2)` until a descriptor is readable (a submission, a completion,
    /// a connection event) or its next timer. The 10 ms longest sleep bounds it only while a
    /// poller has a source that cannot wake it (the soft provider's connection events, connect
    /// requests waiting for a slot: [`crate::reactor::Poller::arm_wakeups`]); otherwise only
    /// [`crate::reactor::ARMED_SLEEP_NS`] does.
    pub const fn interrupt() -> Self {
        BackoffConfig {
            enabled: true,
            spin_polls: 100,
            yield_polls: 10,
            min_sleep_ns: 10_000_000,
            max_sleep_ns: 10_000_000,
            interrupt: true,
        }
    }
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig::busy_poll()
    }
}

/// What one idle iteration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAction {
    /// Nothing (back-off off) or a spin hint.
    Spin,
    /// Yielded the CPU.
    Yield,
    /// Slept (parked) for at most this many nanoseconds.
    Sleep(u64),
}

/// Back-off state of one polling loop.
#[derive(Clone, Debug)]
pub struct Backoff {
    cfg: BackoffConfig,
    /// Consecutive idle iterations (saturating).
    idle: u32,
    /// The next sleep (ns).
    sleep_ns: u64,
}

impl Backoff {
    /// Back-off state for `cfg` (sleep bounds are ordered and at least 1 ns when enabled).
    pub fn new(cfg: BackoffConfig) -> Self {
        let min = cfg.min_sleep_ns.max(1);
        let cfg = BackoffConfig {
            min_sleep_ns: min,
            max_sleep_ns: cfg.max_sleep_ns.max(min),
            ..cfg
        };
        Backoff {
            cfg,
            idle: 0,
            sleep_ns: min,
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &BackoffConfig {
        &self.cfg
    }

    /// Whether back-off is on.
    pub fn is_enabled(&self) -> bool {
        self.cfg.enabled
    }

    /// Useful work was done: start again from the spinning phase.
    #[inline]
    pub fn reset(&mut self) {
        self.idle = 0;
        self.sleep_ns = self.cfg.min_sleep_ns;
    }

    /// Whether the next idle iteration would sleep (the spin and yield phases are over), without
    /// advancing the state: the moment to arm a doorbell and poll once more.
    #[inline]
    pub fn sleeps_next(&self) -> bool {
        self.cfg.enabled && self.idle >= self.cfg.spin_polls.saturating_add(self.cfg.yield_polls)
    }

    /// Ends the spin and yield phases of this idle stretch: the next idle iteration sleeps
    /// (a thread that waits in the real-time class must not spin: it would keep the fair
    /// class, the work it waits for included, off its core; [`crate::sched`]).
    #[inline]
    pub fn skip_to_sleep(&mut self) {
        self.idle = self
            .idle
            .max(self.cfg.spin_polls.saturating_add(self.cfg.yield_polls));
    }

    /// Advances the state by one idle iteration and says what to do, without doing it.
    pub fn next_action(&mut self) -> IdleAction {
        if !self.cfg.enabled {
            return IdleAction::Spin;
        }
        let i = self.idle;
        self.idle = self.idle.saturating_add(1);
        if i < self.cfg.spin_polls {
            IdleAction::Spin
        } else if i - self.cfg.spin_polls < self.cfg.yield_polls {
            IdleAction::Yield
        } else {
            let d = self.sleep_ns;
            self.sleep_ns = self.sleep_ns.saturating_mul(2).min(self.cfg.max_sleep_ns);
            IdleAction::Sleep(d)
        }
    }

    /// One idle iteration: advances the state and performs the action. A sleep is capped at
    /// `limit_ns()` when that gives a value (e.g. the time to the next timer; it is called only
    /// when about to sleep); a cap of 0 turns the sleep into a yield.
    #[inline]
    pub fn idle<F: FnOnce() -> Option<u64>>(&mut self, limit_ns: F) -> IdleAction {
        if !self.cfg.enabled {
            return IdleAction::Spin;
        }
        match self.next_action() {
            IdleAction::Spin => {
                core::hint::spin_loop();
                IdleAction::Spin
            }
            IdleAction::Yield => {
                std::thread::yield_now();
                IdleAction::Yield
            }
            IdleAction::Sleep(d) => {
                let d = limit_ns().map_or(d, |l| d.min(l));
                if d == 0 {
                    std::thread::yield_now();
                    IdleAction::Yield
                } else {
                    std::thread::park_timeout(Duration::from_nanos(d));
                    IdleAction::Sleep(d)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_skip_to_sleep_ending_the_spin_and_yield_phases() {
        let mut b = Backoff::new(BackoffConfig {
            enabled: true,
            spin_polls: 3,
            yield_polls: 2,
            min_sleep_ns: 10,
            max_sleep_ns: 40,
            interrupt: false,
        });
        assert!(!b.sleeps_next());
        b.skip_to_sleep();
        assert!(b.sleeps_next());
        assert_eq!(b.next_action(), IdleAction::Sleep(10));
        b.skip_to_sleep();
        assert_eq!(b.next_action(), IdleAction::Sleep(20), "no step back");
        b.reset();
        assert_eq!(b.next_action(), IdleAction::Spin);
    }

    #[test]
    fn accepts_phases_in_order_and_reset() {
        let mut b = Backoff::new(BackoffConfig {
            enabled: true,
            spin_polls: 2,
            yield_polls: 1,
            min_sleep_ns: 100,
            max_sleep_ns: 350,
            interrupt: false,
        });
        let seq: Vec<_> = (0..7)
            .map(|_| (b.sleeps_next(), b.next_action()))
            .map(|(next, a)| {
                assert_eq!(
                    next,
                    matches!(a, IdleAction::Sleep(_)),
                    "sleeps_next before {a:?}"
                );
                a
            })
            .collect();
        use IdleAction::*;
        assert_eq!(
            seq,
            [
                Spin,
                Spin,
                Yield,
                Sleep(100),
                Sleep(200),
                Sleep(350),
                Sleep(350)
            ]
        );
        b.reset();
        assert_eq!(b.next_action(), Spin);
    }

    #[test]
    fn accepts_off_by_default() {
        let mut b = Backoff::new(BackoffConfig::default());
        assert!(!b.is_enabled());
        for _ in 0..10_000 {
            assert_eq!(b.idle(|| None), IdleAction::Spin);
        }
    }

    #[test]
    fn accepts_sleep_capped_by_limit() {
        let mut b = Backoff::new(BackoffConfig {
            enabled: true,
            spin_polls: 0,
            yield_polls: 0,
            min_sleep_ns: 1_000_000,
            max_sleep_ns: 1_000_000,
            interrupt: false,
        });
        assert_eq!(b.idle(|| Some(1_000)), IdleAction::Sleep(1_000));
        assert_eq!(b.idle(|| Some(0)), IdleAction::Yield);
    }
}
