//! Contention on an idle reactor's CPU: when a reactor in interrupt mode loses its CPU to
//! another runnable thread during its spin and yield phases, it stops spinning and yielding for a
//! while and goes straight to its armed sleep.
//!
//! Why: a thread that spins or yields stays runnable. Beside a thread that never sleeps (a CPU
//! hog, a build), the scheduler hands the hog the CPU at a yield or at the tick, and the reactor
//! then waits on the run queue for up to the hog's time slice (milliseconds) although its next
//! request may have arrived meanwhile: no wake-up happens for a thread that is already runnable.
//! A reactor that sleeps in `ppoll(2)` is woken by the completion channel instead, and the Linux
//! scheduler lets a thread waking from a sleep preempt a thread that has been running (CFS's
//! sleeper credit; EEVDF's lag), so its requests wait for a wake-up only. Spinning and
//! yielding also spend the CPU time that earns that preference.
//!
//! Normal operation: the reactor reads its clock once per iteration anyway; [`Contention`]
//! compares the readings of consecutive idle iterations of the spin and yield phases. An idle
//! iteration polls and spins or yields: it takes microseconds. A gap longer than
//! [`ContentionConfig::gap_ns`] means the thread was off its CPU in between (a yield that handed
//! the CPU to a busy thread, a preemption at the tick). The reactor then ends the phases at once
//! (arms its wake-up sources and sleeps), and the next `skip` idle stretches go straight to the
//! armed sleep; `skip` starts at [`ContentionConfig::first_skip`] and doubles, up to
//! [`ContentionConfig::max_skip`], each time the stretch after a skip window finds the CPU
//! taken again. A stretch that runs both phases to the end without such a gap (nobody else
//! wanted the CPU) sets `skip` back to `first_skip`. No system call and no allocation: only
//! the clock readings the run loop takes anyway.
//!
//! Recovery: a gap that was not contention (the whole machine paused, e.g. a virtual CPU
//! descheduled by its host) costs one skip window of `first_skip` stretches that sleep at once
//! instead of spinning: correct, only slower to answer.

/// Settings of the contention detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentionConfig {
    /// A gap between two idle iterations longer than this (ns) means the CPU was taken.
    pub gap_ns: u64,
    /// Idle stretches that skip the spin and yield phases after the first detection.
    pub first_skip: u32,
    /// The longest skip window (stretches).
    pub max_skip: u32,
}

impl ContentionConfig {
    /// The reactors' settings in interrupt mode: a gap of 1 ms (an idle iteration takes
    /// microseconds; a scheduler tick is 1 to 10 ms, a time slice a few of them), windows of 16
    /// stretches doubling to 4 096.
    pub const fn reactor() -> Self {
        ContentionConfig {
            gap_ns: 1_000_000,
            first_skip: 16,
            max_skip: 4096,
        }
    }
}

/// The detector's state for one reactor (see the module documentation).
#[derive(Clone, Debug)]
pub struct Contention {
    cfg: ContentionConfig,
    /// The clock at the previous idle iteration of this stretch's spin and yield phases.
    last: Option<u64>,
    /// Idle stretches (sleeps) left in the current skip window.
    skip_left: u32,
    /// The length of the next skip window.
    skip_len: u32,
    /// Detections so far.
    detections: u64,
}

impl Contention {
    /// A detector with `cfg` (windows at least one stretch long).
    pub fn new(cfg: ContentionConfig) -> Self {
        let first = cfg.first_skip.max(1);
        let cfg = ContentionConfig {
            first_skip: first,
            max_skip: cfg.max_skip.max(first),
            ..cfg
        };
        Contention {
            cfg,
            last: None,
            skip_left: 0,
            skip_len: first,
            detections: 0,
        }
    }

    /// Whether idle stretches skip the spin and yield phases now.
    #[inline]
    pub fn skipping(&self) -> bool {
        self.skip_left > 0
    }

    /// How many times the CPU was found taken.
    pub fn detections(&self) -> u64 {
        self.detections
    }

    /// A busy iteration: the idle stretch, if any, is over.
    #[inline]
    pub fn busy(&mut self) {
        self.last = None;
    }

    /// An idle iteration of the spin or yield phase, its clock reading `now` (ns); `true`: the
    /// CPU was taken since the previous one, end the phases now.
    #[inline]
    pub fn lost_cpu(&mut self, now: u64) -> bool {
        let Some(prev) = self.last.replace(now) else {
            return false;
        };
        if now.saturating_sub(prev) <= self.cfg.gap_ns {
            return false;
        }
        self.detections = self.detections.wrapping_add(1);
        self.last = None;
        self.skip_left = self.skip_len;
        self.skip_len = self.skip_len.saturating_mul(2).min(self.cfg.max_skip);
        true
    }

    /// The stretch's phases are over and the reactor arms its sleep: when they ran to the end
    /// without a gap (not skipped, nothing detected), the CPU is free again and the next skip
    /// window is back to its first length.
    #[inline]
    pub fn arming(&mut self) {
        self.last = None;
        if self.skip_left == 0 {
            self.skip_len = self.cfg.first_skip;
        }
    }

    /// The reactor slept: one stretch of the skip window is used.
    #[inline]
    pub fn slept(&mut self) {
        self.last = None;
        self.skip_left = self.skip_left.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: ContentionConfig = ContentionConfig {
        gap_ns: 1_000,
        first_skip: 2,
        max_skip: 8,
    };

    /// One stretch whose idle iterations read the clock at `times`; whether one ended it.
    fn stretch(c: &mut Contention, times: &[u64]) -> bool {
        c.busy();
        let lost = times.iter().any(|&t| c.lost_cpu(t));
        c.arming();
        c.slept();
        lost
    }

    /// The stretches that skip their phases until the detector stops skipping.
    fn window(c: &mut Contention) -> u32 {
        let mut n = 0;
        while c.skipping() {
            c.busy();
            c.arming();
            c.slept();
            n += 1;
        }
        n
    }

    #[test]
    fn accepts_short_gaps_as_a_free_cpu() {
        let mut c = Contention::new(CFG);
        assert!(!stretch(&mut c, &[0, 500, 1_500, 2_500, 2_600]));
        assert!(!c.skipping());
        assert_eq!(c.detections(), 0);
    }

    #[test]
    fn accepts_a_long_gap_as_a_taken_cpu_and_skips_a_window() {
        let mut c = Contention::new(CFG);
        c.busy();
        assert!(!c.lost_cpu(10_000));
        assert!(c.lost_cpu(11_001), "a gap of 1 001 ns > 1 000 ns");
        assert!(c.skipping());
        c.arming();
        c.slept();
        // this stretch was the first of the window of 2
        assert_eq!(window(&mut c), 1);
        assert_eq!(c.detections(), 1);
    }

    #[test]
    fn accepts_no_gap_across_a_sleep_or_busy_work() {
        let mut c = Contention::new(CFG);
        c.busy();
        assert!(!c.lost_cpu(0));
        c.busy();
        assert!(!c.lost_cpu(1_000_000), "busy work in between");
        c.arming();
        c.slept();
        c.busy();
        assert!(!c.lost_cpu(5_000_000), "a sleep in between");
        assert!(!c.skipping());
    }

    #[test]
    fn accepts_windows_doubling_while_the_cpu_stays_taken() {
        let mut c = Contention::new(CFG);
        let mut lens = Vec::new();
        for _ in 0..5 {
            assert!(stretch(&mut c, &[0, 2_000]));
            lens.push(1 + window(&mut c));
        }
        assert_eq!(lens, [2, 4, 8, 8, 8]);
    }

    #[test]
    fn accepts_a_free_cpu_resetting_the_window() {
        let mut c = Contention::new(CFG);
        assert!(stretch(&mut c, &[0, 2_000]));
        window(&mut c);
        assert!(stretch(&mut c, &[0, 2_000]));
        assert_eq!(1 + window(&mut c), 4);
        // phases run to the end without a gap
        assert!(!stretch(&mut c, &[0, 10, 20]));
        assert!(stretch(&mut c, &[0, 2_000]));
        assert_eq!(1 + window(&mut c), 2);
    }

    #[test]
    fn accepts_a_stretch_ended_by_work_as_no_news() {
        let mut c = Contention::new(CFG);
        assert!(stretch(&mut c, &[0, 2_000]));
        window(&mut c);
        // work ended the stretch before its phases: the next window still doubles
        c.busy();
        assert!(!c.lost_cpu(0));
        c.busy();
        assert!(stretch(&mut c, &[0, 2_000]));
        assert_eq!(1 + window(&mut c), 4);
    }
}
