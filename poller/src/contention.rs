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
//! Normal operation: two signals, either of which ends the phases at once (the reactor arms its
//! wake-up sources and sleeps) and makes the next `skip` idle stretches go straight to the armed
//! sleep:
//!
//! - the clock readings the reactor takes once per iteration anyway: an idle iteration polls and
//!   spins or yields, which takes microseconds, so two idle iterations of the spin and yield
//!   phases more than [`ContentionConfig::gap_ns`] apart mean the thread was off its CPU in
//!   between (a yield that handed the CPU to a busy thread, a preemption at the tick);
//! - the thread's run delay (the time it spent runnable but waiting for a CPU: the second field
//!   of `/proc/thread-self/schedstat`, [`RunDelay`]), read once at the start of each idle
//!   stretch that runs the phases: more than `gap_ns` since the previous stretch began means
//!   the thread lost its CPU while it worked (another thread woke on its CPU and, being
//!   favoured, took it; the busy thread beside it then ran its slice).
//!
//! `skip` starts at [`ContentionConfig::first_skip`] and doubles, up to
//! [`ContentionConfig::max_skip`], each time the stretch after a skip window finds the CPU
//! taken again; a stretch that runs both phases to the end without either signal (nobody else
//! wanted the CPU) sets it back to `first_skip`. Costs: one `pread(2)` per idle stretch that
//! runs the phases (none while busy, none while skipping); nothing allocates.
//!
//! Recovery: a gap that was not contention (the whole machine paused, e.g. a virtual CPU
//! descheduled by its host; the run delay does not count that) costs one skip window of
//! `first_skip` stretches that sleep at once instead of spinning: correct, only slower to
//! answer. Without a readable schedstat file (no procfs, a kernel without `CONFIG_SCHED_INFO`)
//! only the clock readings count.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Settings of the contention detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentionConfig {
    /// A gap between two idle iterations, or run delay between two idle stretches, longer than
    /// this (ns) means the CPU was taken.
    pub gap_ns: u64,
    /// Idle stretches that skip the spin and yield phases after the first detection.
    pub first_skip: u32,
    /// The longest skip window (stretches).
    pub max_skip: u32,
}

impl ContentionConfig {
    /// The reactors' settings in interrupt mode: 2 ms (an idle iteration takes microseconds, a
    /// favoured thread's turn on the CPU, such as a kernel worker's, well under a millisecond;
    /// a busy thread's time slice lasts milliseconds), windows of 16 stretches doubling to
    /// 4 096.
    pub const fn reactor() -> Self {
        ContentionConfig {
            gap_ns: 2_000_000,
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
    /// The run delay read at the start of the previous stretch that ran the phases.
    delay_base: Option<u64>,
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
            delay_base: None,
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

    /// An idle iteration of the spin or yield phase, its clock reading `now` (ns); at the first
    /// of a stretch, `run_delay` is asked for the thread's run delay (ns; `None`: unknown).
    /// `true`: the CPU was taken, end the phases now.
    #[inline]
    pub fn lost_cpu<F: FnOnce() -> Option<u64>>(&mut self, now: u64, run_delay: F) -> bool {
        let taken = match self.last.replace(now) {
            Some(prev) => now.saturating_sub(prev) > self.cfg.gap_ns,
            None => match (run_delay(), self.delay_base) {
                (Some(d), Some(base)) => {
                    self.delay_base = Some(d);
                    d.saturating_sub(base) > self.cfg.gap_ns
                }
                (d, _) => {
                    self.delay_base = d;
                    false
                }
            },
        };
        if taken {
            self.detections = self.detections.wrapping_add(1);
            self.last = None;
            // the next stretch that runs the phases starts a new baseline
            self.delay_base = None;
            self.skip_left = self.skip_len;
            self.skip_len = self.skip_len.saturating_mul(2).min(self.cfg.max_skip);
        }
        taken
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

/// The calling thread's run delay: nanoseconds spent runnable but waiting for a CPU, from
/// `/proc/thread-self/schedstat` (Linux; "cpu time, run delay, time slices"). Open it on the
/// thread it is about.
#[derive(Debug)]
pub struct RunDelay {
    file: Option<File>,
}

impl RunDelay {
    /// Opens the calling thread's schedstat file; without one, [`RunDelay::read`] says `None`.
    pub fn open() -> Self {
        RunDelay {
            file: File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// The run delay now (one `pread(2)`, no allocation); `None` when unavailable.
    pub fn read(&self) -> Option<u64> {
        let f = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        parse_run_delay(&buf[..n])
    }
}

/// The second decimal field of a schedstat line.
fn parse_run_delay(line: &[u8]) -> Option<u64> {
    let field = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(1)?;
    if !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    field.iter().try_fold(0u64, |v, d| {
        v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
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
        let lost = times.iter().any(|&t| c.lost_cpu(t, || None));
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
        assert!(!c.lost_cpu(10_000, || None));
        assert!(c.lost_cpu(11_001, || None), "a gap of 1 001 ns > 1 000 ns");
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
        assert!(!c.lost_cpu(0, || None));
        c.busy();
        assert!(!c.lost_cpu(1_000_000, || None), "busy work in between");
        c.arming();
        c.slept();
        c.busy();
        assert!(!c.lost_cpu(5_000_000, || None), "a sleep in between");
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
    fn accepts_run_delay_between_stretches_as_a_taken_cpu() {
        let mut c = Contention::new(CFG);
        // the first reading is the baseline; then 900 ns of waiting: free
        for d in [5_000, 5_900] {
            c.busy();
            assert!(!c.lost_cpu(0, || Some(d)));
            assert!(!c.lost_cpu(10, || panic!("read once per stretch")));
        }
        // 1 001 ns more: the thread waited for its CPU while it worked
        c.busy();
        assert!(c.lost_cpu(0, || Some(6_901)));
        assert!(c.skipping());
        c.arming();
        c.slept();
        assert_eq!(1 + window(&mut c), 2);
        // after a window a new baseline: a long wait during the window does not count
        c.busy();
        assert!(!c.lost_cpu(0, || Some(1_000_000)));
        c.busy();
        assert!(!c.lost_cpu(0, || Some(1_000_500)));
        assert_eq!(c.detections(), 1);
    }

    #[test]
    fn accepts_unknown_run_delay_as_no_news() {
        let mut c = Contention::new(CFG);
        for d in [Some(0), None, Some(1_000_000), None] {
            c.busy();
            assert!(!c.lost_cpu(0, || d));
        }
        assert!(!c.skipping());
    }

    #[test]
    fn accepts_the_second_field_of_schedstat() {
        assert_eq!(parse_run_delay(b"123 456 7\n"), Some(456));
        assert_eq!(
            parse_run_delay(b"123  18446744073709551615 7"),
            Some(u64::MAX)
        );
        assert_eq!(RunDelay { file: None }.read(), None);
    }

    #[test]
    fn rejects_a_malformed_schedstat() {
        for line in [
            &b""[..],
            b"123",
            b"123 4x6 7",
            b"1 99999999999999999999 2",
            b"1 -5 2",
        ] {
            assert_eq!(parse_run_delay(line), None, "{line:?}");
        }
    }

    #[test]
    fn accepts_a_stretch_ended_by_work_as_no_news() {
        let mut c = Contention::new(CFG);
        assert!(stretch(&mut c, &[0, 2_000]));
        window(&mut c);
        // work ended the stretch before its phases: the next window still doubles
        c.busy();
        assert!(!c.lost_cpu(0, || None));
        c.busy();
        assert!(stretch(&mut c, &[0, 2_000]));
        assert_eq!(1 + window(&mut c), 4);
    }
}
