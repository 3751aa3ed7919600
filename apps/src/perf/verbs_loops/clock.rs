//! The loops' stamp clock: perftest's `get_cycles()` (the CPU's time-stamp counter, one
//! instruction) where the kernel itself keeps time with the TSC, the monotonic clock elsewhere;
//! stamps are converted to nanoseconds with a rate measured against the monotonic clock over
//! the stamped interval itself.
//!
//! Normal operation: [`Clock::now`] is the only call inside a measured loop; [`Clock::rate`]
//! is read once per size, after the loop. Recovery: when the TSC is not the kernel's
//! clocksource (its rate may change, or it may differ between CPUs), or the clocksource cannot
//! be read, every stamp is a monotonic-clock nanosecond reading and the rate is 1.

use std::sync::OnceLock;
use std::time::Instant;

/// Whether the kernel keeps time with the TSC (read once per process).
fn tsc_is_clocksource() -> bool {
    static TSC: OnceLock<bool> = OnceLock::new();
    *TSC.get_or_init(|| {
        cfg!(target_arch = "x86_64")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc")
    })
}

/// A stamp clock started at [`Clock::start`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    start: Instant,
    /// TSC at `start` (0 when the monotonic clock is used).
    tsc0: u64,
    tsc: bool,
}

impl Clock {
    /// Starts a clock: stamps count from now.
    pub(super) fn start() -> Clock {
        let tsc = tsc_is_clocksource();
        let start = Instant::now();
        Clock {
            start,
            tsc0: if tsc { read_tsc() } else { 0 },
            tsc,
        }
    }

    /// The current stamp (ticks since the start).
    #[inline]
    pub(super) fn now(&self) -> u64 {
        if self.tsc {
            read_tsc().wrapping_sub(self.tsc0)
        } else {
            self.start.elapsed().as_nanos() as u64
        }
    }

    /// Nanoseconds per tick, measured from the start to now (call after the stamped loop).
    pub(super) fn rate(&self) -> Rate {
        if !self.tsc {
            return Rate(1.0);
        }
        let ticks = self.now();
        let ns = self.start.elapsed().as_nanos() as f64;
        if ticks == 0 || ns <= 0.0 {
            return Rate(1.0);
        }
        Rate(ns / ticks as f64)
    }
}

/// A tick-to-nanosecond conversion.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rate(f64);

impl Rate {
    /// `ticks` in nanoseconds.
    #[inline]
    pub(super) fn ns(self, ticks: u64) -> u64 {
        (ticks as f64 * self.0) as u64
    }

    /// Converts every stamp of `stamps` to nanoseconds in place.
    pub(super) fn convert(self, stamps: &mut [u64]) {
        if self.0 != 1.0 {
            stamps.iter_mut().for_each(|t| *t = self.ns(*t));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn read_tsc() -> u64 {
    // SAFETY: RDTSC has no preconditions; it only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn read_tsc() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_convert_to_elapsed_nanoseconds() {
        let c = Clock::start();
        let t0 = c.now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t1 = c.now();
        let r = c.rate();
        let ns = r.ns(t1 - t0);
        assert!(ns >= 19_000_000, "{ns} ns for a 20 ms sleep");
        assert!(ns < 10_000_000_000, "{ns} ns for a 20 ms sleep");
        let mut v = [t0, t1];
        r.convert(&mut v);
        assert!((v[1] - v[0]).abs_diff(ns) <= 1);
    }
}
