//! Real-time wake-ups of reactors (`ReactorConfig::realtime`, `rpcrdma_poller::sched`): a
//! reactor that sleeps when idle waits for work in `SCHED_FIFO`, returns to the fair class
//! once it has been busy past the bound (counted in `rt_demotions`), and is real-time again
//! after its next sleep; off, or without back-off, it stays in the fair class. The kernel's
//! view of each thread is read with `sched_getscheduler` on the reactor itself.
//!
//! Needs the right to `SCHED_FIFO` (root, `CAP_SYS_NICE` or `RLIMIT_RTPRIO`); where it is
//! refused the handle says so and the tests check only that.

use rpcrdma_poller::sched::{current_policy, RealtimeWake};
use rpcrdma_poller::{
    BackoffConfig, Cores, PinPolicy, Poller, PollerCtx, ReactorConfig, ReactorSet,
};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(realtime: Option<RealtimeWake>, backoff: BackoffConfig) -> ReactorConfig {
    let mut c = ReactorConfig::new(Cores::Count(1));
    c.pin = PinPolicy::Off;
    c.backoff = backoff;
    c.realtime = realtime;
    c.drain_timeout = Duration::from_secs(2);
    c.name = "test-rt".into();
    c
}

fn sleeping() -> BackoffConfig {
    BackoffConfig {
        enabled: true,
        spin_polls: 10,
        yield_polls: 2,
        min_sleep_ns: 20_000,
        max_sleep_ns: 200_000,
        interrupt: false,
    }
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    cond()
}

/// The reactor thread's scheduling policy, read on it.
fn policy_of(set: &ReactorSet) -> i32 {
    let got = Arc::new(AtomicI32::new(-1));
    let g = Arc::clone(&got);
    set.handles()[0]
        .run(move |_| g.store(current_policy(), Relaxed))
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || got.load(Relaxed) != -1));
    got.load(Relaxed)
}

/// Reports work on every poll while `busy` holds.
struct Busy(Arc<AtomicBool>);

impl Poller for Busy {
    fn poll(&mut self, _now: u64, _cx: &mut PollerCtx<'_>) -> usize {
        usize::from(self.0.load(Relaxed))
    }
}

#[test]
fn accepts_fifo_while_waiting_and_the_fair_class_after_a_busy_stretch() {
    let rt = RealtimeWake {
        priority: 1,
        demote_after_us: 1_000,
    };
    let set = ReactorSet::start(&config(Some(rt), sleeping())).unwrap();
    let Some(prio) = set.handles()[0].realtime() else {
        eprintln!("skipped: SCHED_FIFO refused (needs CAP_SYS_NICE or RLIMIT_RTPRIO)");
        assert_eq!(
            policy_of(&set),
            libc::SCHED_OTHER,
            "refused: the fair class"
        );
        return;
    };
    assert_eq!(prio, 1);
    assert_eq!(policy_of(&set), libc::SCHED_FIFO, "woken from a sleep");
    assert_eq!(set.handles()[0].stats().rt_demotions, 0);

    // Busy for 20 ms without a sleep: past the 1 ms bound, the fair class.
    let busy = Arc::new(AtomicBool::new(true));
    set.handles()[0]
        .add_poller(Box::new(Busy(Arc::clone(&busy))))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || set.handles()[0]
            .stats()
            .rt_demotions
            >= 1),
        "no return to the fair class while busy"
    );
    assert_eq!(policy_of(&set), libc::SCHED_OTHER, "busy: the fair class");

    // Idle again: it sleeps, and waits for work real-time.
    busy.store(false, Relaxed);
    let sleeps = set.handles()[0].stats().idle_sleeps;
    assert!(wait_until(Duration::from_secs(5), || set.handles()[0]
        .stats()
        .idle_sleeps
        > sleeps + 2));
    assert_eq!(
        policy_of(&set),
        libc::SCHED_FIFO,
        "after a sleep: real-time"
    );
}

#[test]
fn rejects_realtime_for_busy_polling_reactors_and_keeps_the_class_when_off() {
    let before = current_policy();
    let set = ReactorSet::start(&config(None, sleeping())).unwrap();
    assert_eq!(set.handles()[0].realtime(), None, "off");
    assert_eq!(policy_of(&set), before, "off: the class it started in");
    drop(set);
    // A busy-polling reactor never waits: the setting does not apply.
    let set = ReactorSet::start(&config(
        Some(RealtimeWake::DEFAULT),
        BackoffConfig::busy_poll(),
    ))
    .unwrap();
    assert_eq!(set.handles()[0].realtime(), None, "busy polling");
    assert_eq!(policy_of(&set), before);
}
