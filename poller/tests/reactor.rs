//! Reactors on the (two) cores shared with the test runner, idle back-off on: start, pin, stop,
//! configuration errors, placement, pollers with timers, graceful drain, control messages
//! delivered exactly once (also when racing with stop), panics reported.

use rpcrdma_poller::{
    current_cpu, BackoffConfig, CoreId, Cores, PinPolicy, Placement, Poller, PollerCtx,
    ReactorConfig, ReactorError, ReactorHandle, ReactorSet, TimerHandle,
};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn usable() -> Vec<CoreId> {
    // Test threads are never pinned, so this is the process's mask.
    core_affinity::get_core_ids().unwrap_or_default()
}

/// Reactors for the tests: at most two, pinned, back-off on (the cores are shared).
fn config(n: usize) -> ReactorConfig {
    let mut c = ReactorConfig::new(Cores::Count(n));
    c.backoff = BackoffConfig {
        enabled: true,
        spin_polls: 200,
        yield_polls: 20,
        min_sleep_ns: 20_000,
        max_sleep_ns: 500_000,
        interrupt: false,
    };
    c.drain_timeout = Duration::from_secs(2);
    c.name = "test-reactor".into();
    c
}

fn reactors() -> usize {
    usable().len().clamp(1, 2)
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

#[test]
fn accepts_start_pin_and_stop_with_backoff() {
    let n = reactors();
    let mut set = ReactorSet::start(&config(n)).unwrap();
    assert_eq!(set.len(), n);
    let (tx, rx) = std::sync::mpsc::channel();
    for h in set.handles() {
        assert!(h.is_pinned(), "{h:?}");
        let core = h.core().unwrap().id;
        let tx = tx.clone();
        h.run(move |cx| {
            let _ = tx.send((cx.index(), core, current_cpu()));
        })
        .unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..n {
        let (index, core, cpu) = rx.recv_timeout(Duration::from_secs(2)).unwrap();
        // Pinned: the reactor thread runs on its core and nowhere else.
        assert_eq!(cpu, Some(core), "reactor {index}");
        seen.push(core);
    }
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), n, "one core per reactor");
    // Idle reactors back off: they sleep rather than spin.
    assert!(wait_until(Duration::from_secs(2), || (0..n).all(|i| set
        .stats(i)
        .unwrap()
        .idle_sleeps
        > 5)));
    let s = set.stats(0).unwrap();
    assert!(s.iterations >= s.busy_iterations && s.iterations > 0);
    assert!(s.control_messages >= 1);
    set.stop().unwrap();
    assert!(set.handles().iter().all(ReactorHandle::is_stopped));
    // Idempotent.
    set.stop().unwrap();
}

#[test]
fn rejects_more_pinned_reactors_than_cores() {
    let available = usable().len();
    let err = ReactorSet::start(&config(available + 1)).unwrap_err();
    assert_eq!(
        err,
        ReactorError::NotEnoughCores {
            wanted: available + 1,
            available
        }
    );
}

#[test]
fn rejects_core_outside_the_mask() {
    let mut c = config(1);
    c.cores = Cores::Ids(vec![CoreId { id: 100_000 }]);
    assert_eq!(
        ReactorSet::start(&c).unwrap_err(),
        ReactorError::CoreNotAllowed(100_000)
    );
}

#[test]
fn rejects_duplicate_core() {
    let first = usable()[0];
    let mut c = config(1);
    c.cores = Cores::Ids(vec![first, first]);
    assert_eq!(
        ReactorSet::start(&c).unwrap_err(),
        ReactorError::DuplicateCore(first.id)
    );
}

#[test]
fn rejects_no_reactors_and_bad_sizes() {
    assert_eq!(
        ReactorSet::start(&config(0)).unwrap_err(),
        ReactorError::NoReactors
    );
    let mut c = config(1);
    c.cores = Cores::Ids(Vec::new());
    assert_eq!(ReactorSet::start(&c).unwrap_err(), ReactorError::NoReactors);
    let mut c = config(1);
    c.control_capacity = 1000;
    assert!(matches!(
        ReactorSet::start(&c).unwrap_err(),
        ReactorError::BadConfig(_)
    ));
    let mut c = config(1);
    c.timer_slots = 3;
    assert!(matches!(
        ReactorSet::start(&c).unwrap_err(),
        ReactorError::BadConfig(_)
    ));
}

#[test]
fn accepts_unpinned_reactors_when_allowed() {
    let available = usable().len();
    let mut c = config(available + 1);
    c.pin = PinPolicy::AllowUnpinned;
    let set = ReactorSet::start(&c).unwrap();
    assert_eq!(set.len(), available + 1);
    assert!(set.handles()[..available].iter().all(|h| h.is_pinned()));
    let last = &set.handles()[available];
    assert!(!last.is_pinned() && last.core().is_none());
    drop(set);

    let mut c = config(2);
    c.pin = PinPolicy::Off;
    let set = ReactorSet::start(&c).unwrap();
    assert!(set.handles().iter().all(|h| !h.is_pinned()));
}

/// The nice value of thread `tid` (or of the calling thread, 0), from `/proc` (field 19 of `stat`).
fn nice_of(tid: i32) -> i32 {
    let path = if tid == 0 {
        "/proc/thread-self/stat".to_string()
    } else {
        format!("/proc/self/task/{tid}/stat")
    };
    let stat = std::fs::read_to_string(path).unwrap();
    // The command name may hold spaces: count fields after its closing parenthesis.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

#[test]
fn accepts_reactor_nice_for_the_reactor_threads_only() {
    // A lower priority (a higher nice value) needs no privilege: the test holds as any user,
    // whatever priority it was started at.
    let before = nice_of(0);
    let want = (before + 3).min(19);
    let mut c = config(reactors());
    c.pin = PinPolicy::Off;
    c.nice = Some(want);
    let set = ReactorSet::start(&c).unwrap();
    let tids = Arc::new(Mutex::new(Vec::new()));
    for h in set.handles() {
        assert_eq!(h.nice(), Some(want), "reactor {}", h.index());
        let t = Arc::clone(&tids);
        // SAFETY: gettid has no preconditions.
        h.run(move |_| t.lock().unwrap().push(unsafe { libc::gettid() }))
            .unwrap();
    }
    assert!(wait_until(Duration::from_secs(5), || tids
        .lock()
        .unwrap()
        .len()
        == set.len()));
    for &tid in tids.lock().unwrap().iter() {
        assert_eq!(
            nice_of(tid),
            want,
            "the kernel's view of reactor thread {tid}"
        );
    }
    assert_eq!(nice_of(0), before, "the starting thread keeps its priority");
    drop(set);

    // Out of range: clamped to the kernel's range, not refused.
    c.nice = Some(99);
    let set = ReactorSet::start(&c).unwrap();
    assert!(set.handles().iter().all(|h| h.nice() == Some(19)));
    drop(set);

    // Default: inherited.
    c.nice = None;
    let set = ReactorSet::start(&c).unwrap();
    assert!(set.handles().iter().all(|h| h.nice() == Some(before)));
}

/// What a probe poller records (shared with the test).
#[derive(Default)]
struct ProbeState {
    polls: AtomicU64,
    work: AtomicU64,
    timers: AtomicU64,
    shutdowns: AtomicU64,
    polls_after_shutdown: AtomicU64,
    reactor: AtomicUsize,
    dropped: AtomicBool,
}

/// Reports one work item every 4th poll, keeps a periodic timer, drains 10 polls after shutdown
/// (or never, if `never_drains`).
struct Probe {
    st: Arc<ProbeState>,
    polls: u64,
    period: u64,
    shut: bool,
    after: u64,
    never_drains: bool,
}

impl Probe {
    fn new(st: &Arc<ProbeState>) -> Box<Probe> {
        Box::new(Probe {
            st: Arc::clone(st),
            polls: 0,
            period: 200_000,
            shut: false,
            after: 0,
            never_drains: false,
        })
    }
}

impl Poller for Probe {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        assert_eq!(now, cx.now());
        if self.polls == 0 {
            self.st.reactor.store(cx.reactor_index(), Relaxed);
            cx.arm_timer(now + self.period, 7).unwrap();
        }
        self.polls += 1;
        self.st.polls.fetch_add(1, Relaxed);
        if self.shut {
            self.after += 1;
            self.st.polls_after_shutdown.fetch_add(1, Relaxed);
        }
        if self.polls % 4 == 0 {
            self.st.work.fetch_add(1, Relaxed);
            1
        } else {
            0
        }
    }

    fn on_timer(&mut self, token: u64, cx: &mut PollerCtx<'_>) {
        assert_eq!(token, 7);
        self.st.timers.fetch_add(1, Relaxed);
        cx.arm_timer(cx.now() + self.period, 7).unwrap();
    }

    fn shutdown(&mut self, _now: u64) {
        self.shut = true;
        self.st.shutdowns.fetch_add(1, Relaxed);
    }

    fn is_drained(&self) -> bool {
        !self.never_drains && self.after >= 10
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.st.dropped.store(true, Relaxed);
    }
}

#[test]
fn accepts_pollers_with_timers_and_graceful_drain() {
    let n = reactors();
    let mut set = ReactorSet::start(&config(n)).unwrap();
    let states: Vec<Arc<ProbeState>> = (0..4).map(|_| Arc::default()).collect();
    let mut placed = vec![0; n];
    for st in &states {
        let i = set
            .add_poller(Placement::RoundRobin, Probe::new(st))
            .unwrap();
        placed[i] += 1;
    }
    // Round-robin: evenly spread.
    assert!(placed.iter().all(|&k| k == 4 / n), "{placed:?}");
    assert!(wait_until(Duration::from_secs(3), || states.iter().all(
        |s| s.timers.load(Relaxed) >= 3 && s.work.load(Relaxed) >= 3
    )));
    set.stop().unwrap();
    for st in &states {
        assert_eq!(st.shutdowns.load(Relaxed), 1);
        assert!(st.polls_after_shutdown.load(Relaxed) >= 10);
        assert!(st.dropped.load(Relaxed));
    }
    // The counters match what the pollers saw, exactly.
    let total = |f: fn(&ProbeState) -> u64| states.iter().map(|s| f(s)).sum::<u64>();
    let stats: Vec<_> = (0..n).map(|i| set.stats(i).unwrap()).collect();
    assert_eq!(
        stats.iter().map(|s| s.work_items).sum::<u64>(),
        total(|s| s.work.load(Relaxed))
    );
    assert_eq!(
        stats.iter().map(|s| s.timer_expiries).sum::<u64>(),
        total(|s| s.timers.load(Relaxed))
    );
    assert!(stats.iter().map(|s| s.control_messages).sum::<u64>() >= 4 + n as u64);
    assert!(stats
        .iter()
        .all(|s| s.pollers == 0 && s.busy_iterations > 0));
}

#[test]
fn accepts_explicit_placement_and_rejects_unknown_reactor() {
    let n = reactors();
    let set = ReactorSet::start(&config(n)).unwrap();
    let st = Arc::default();
    assert_eq!(
        set.add_poller(Placement::Reactor(n - 1), Probe::new(&st))
            .unwrap(),
        n - 1
    );
    assert!(wait_until(Duration::from_secs(2), || st
        .polls
        .load(Relaxed)
        > 0));
    assert_eq!(st.reactor.load(Relaxed), n - 1);
    assert_eq!(
        set.add_poller(Placement::Reactor(99), Probe::new(&st))
            .unwrap_err(),
        ReactorError::NoSuchReactor(99)
    );
    assert_eq!(
        set.run_on(Placement::Reactor(99), |_| {}).unwrap_err(),
        ReactorError::NoSuchReactor(99)
    );
}

#[test]
fn accepts_drain_timeout_for_a_stuck_poller() {
    let mut c = config(1);
    c.drain_timeout = Duration::from_millis(50);
    let mut set = ReactorSet::start(&c).unwrap();
    let st = Arc::default();
    let mut p = Probe::new(&st);
    p.never_drains = true;
    set.add_poller(Placement::RoundRobin, p).unwrap();
    assert!(wait_until(Duration::from_secs(2), || st
        .polls
        .load(Relaxed)
        > 0));
    let t = Instant::now();
    set.stop().unwrap();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(45) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(st.shutdowns.load(Relaxed), 1);
    assert!(st.dropped.load(Relaxed));
}

/// Finishes itself on its 5th poll, leaving a timer armed behind.
struct Quitter(Arc<ProbeState>, u64);

impl Poller for Quitter {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        self.1 += 1;
        if self.1 == 1 {
            cx.arm_timer(now + 1_000_000, 1).unwrap();
        }
        if self.1 == 5 {
            cx.finish();
        }
        1
    }
    fn on_timer(&mut self, _token: u64, _cx: &mut PollerCtx<'_>) {
        self.0.timers.fetch_add(1, Relaxed);
    }
    fn shutdown(&mut self, _now: u64) {
        self.0.shutdowns.fetch_add(1, Relaxed);
    }
}

impl Drop for Quitter {
    fn drop(&mut self) {
        self.0.polls.store(self.1, Relaxed);
        self.0.dropped.store(true, Relaxed);
    }
}

#[test]
fn accepts_poller_finishing_itself() {
    let set = ReactorSet::start(&config(1)).unwrap();
    let st: Arc<ProbeState> = Arc::default();
    set.add_poller(Placement::RoundRobin, Box::new(Quitter(st.clone(), 0)))
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || st
        .dropped
        .load(Relaxed)));
    assert_eq!(st.polls.load(Relaxed), 5);
    // Its timer still fires (after ~1 ms) but goes nowhere: counted, not delivered.
    assert!(wait_until(Duration::from_secs(2), || set
        .stats(0)
        .unwrap()
        .timer_expiries
        == 1));
    assert_eq!(st.timers.load(Relaxed), 0);
    assert_eq!(st.shutdowns.load(Relaxed), 0);
    assert_eq!(set.stats(0).unwrap().pollers, 0);
}

#[test]
fn accepts_reactor_ctx_add_and_remove() {
    let set = ReactorSet::start(&config(1)).unwrap();
    let st: Arc<ProbeState> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let st2 = st.clone();
    set.run_on(Placement::Reactor(0), move |cx| {
        let id = cx.add_poller(Probe::new(&st2));
        let count = cx.poller_count();
        let removed = cx.remove_poller(id);
        let again = cx.remove_poller(id);
        let _ = tx.send((cx.index(), count, removed, again, cx.is_stopping()));
    })
    .unwrap();
    let got = rx.recv_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(got, (0, 1, true, false, false));
    assert_eq!(st.shutdowns.load(Relaxed), 1);
    assert!(st.dropped.load(Relaxed));
}

/// Arms two timers, cancels one; tries to cancel another poller's timer.
struct TimerUser {
    st: Arc<ProbeState>,
    shared: Arc<Mutex<Option<TimerHandle>>>,
    first: bool,
    publish: bool,
}

impl Poller for TimerUser {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        if !self.first {
            return 0;
        }
        self.first = false;
        let keep = cx.arm_timer(now + 300_000, 1).unwrap();
        let drop_it = cx.arm_timer(now + 300_000, 2).unwrap();
        assert!(cx.cancel_timer(drop_it));
        assert!(!cx.cancel_timer(drop_it), "stale");
        if self.publish {
            *self.shared.lock().unwrap() = Some(keep);
        } else {
            let other = self.shared.lock().unwrap().take();
            // Not ours: refused, and the owner's timer still fires.
            if let Some(h) = other {
                assert!(!cx.cancel_timer(h));
                assert!(!cx.rearm_timer(h, 0));
                self.st.work.fetch_add(1, Relaxed);
            }
        }
        1
    }
    fn on_timer(&mut self, token: u64, _cx: &mut PollerCtx<'_>) {
        assert_eq!(token, 1);
        self.st.timers.fetch_add(1, Relaxed);
    }
}

#[test]
fn rejects_cancel_of_another_pollers_timer() {
    let set = ReactorSet::start(&config(1)).unwrap();
    let owner: Arc<ProbeState> = Arc::default();
    let other: Arc<ProbeState> = Arc::default();
    let shared = Arc::new(Mutex::new(None));
    set.add_poller(
        Placement::Reactor(0),
        Box::new(TimerUser {
            st: owner.clone(),
            shared: shared.clone(),
            first: true,
            publish: true,
        }),
    )
    .unwrap();
    // Added after the owner armed its timer (same reactor, polled in order).
    assert!(wait_until(Duration::from_secs(2), || shared
        .lock()
        .unwrap()
        .is_some()));
    set.add_poller(
        Placement::Reactor(0),
        Box::new(TimerUser {
            st: other.clone(),
            shared,
            first: true,
            publish: false,
        }),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(2), || owner
        .timers
        .load(Relaxed)
        == 1
        && other.timers.load(Relaxed) == 1));
    assert_eq!(other.work.load(Relaxed), 1, "tried the foreign handle");
}

#[test]
fn accepts_control_messages_exactly_once_racing_with_stop() {
    const SENDERS: usize = 3;
    const PER: usize = 4_000;
    let n = reactors();
    let mut set = ReactorSet::start(&config(n)).unwrap();
    let handles: Vec<ReactorHandle> = set.handles().to_vec();
    let runs: Arc<Vec<AtomicU8>> = Arc::new((0..SENDERS * PER).map(|_| AtomicU8::new(0)).collect());
    let sent = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..SENDERS)
        .map(|s| {
            let handles = handles.clone();
            let runs = runs.clone();
            let sent = sent.clone();
            std::thread::spawn(move || {
                let mut ok = vec![false; PER];
                for (i, slot) in ok.iter_mut().enumerate() {
                    let id = s * PER + i;
                    let runs = runs.clone();
                    let r = handles[id % handles.len()].run(move |_| {
                        runs[id].fetch_add(1, Relaxed);
                    });
                    *slot = r.is_ok();
                    if let Err(e) = r {
                        assert_eq!(e, ReactorError::Stopped);
                    }
                    sent.fetch_add(1, Relaxed);
                }
                ok
            })
        })
        .collect();
    // Stop while the senders are still going.
    assert!(wait_until(Duration::from_secs(3), || sent.load(Relaxed)
        >= SENDERS * PER / 4));
    set.stop().unwrap();
    let mut accepted = 0;
    for (s, t) in threads.into_iter().enumerate() {
        let ok = t.join().unwrap();
        for (i, &was_ok) in ok.iter().enumerate() {
            let r = runs[s * PER + i].load(Relaxed);
            // Accepted: ran exactly once. Refused: never ran.
            assert_eq!(r, u8::from(was_ok), "message {s}/{i} (accepted: {was_ok})");
            accepted += usize::from(was_ok);
        }
    }
    assert!(accepted >= SENDERS * PER / 4, "{accepted}");
    // Sends after stop are refused.
    assert_eq!(handles[0].run(|_| {}), Err(ReactorError::Stopped));
    let st = Arc::default();
    assert_eq!(
        handles[0].add_poller(Probe::new(&st)),
        Err(ReactorError::Stopped)
    );
    assert!(st.dropped.load(Relaxed), "refused poller is dropped");
    let handled: u64 = (0..n).map(|i| set.stats(i).unwrap().control_messages).sum();
    // Every accepted closure plus one stop per reactor.
    assert_eq!(handled, (accepted + n) as u64);
}

/// Panics on its first poll.
struct Bomb;

impl Poller for Bomb {
    fn poll(&mut self, _now: u64, _cx: &mut PollerCtx<'_>) -> usize {
        panic!("poller failure (expected by the test)");
    }
}

#[test]
fn rejects_panicking_reactor_at_stop() {
    let mut set = ReactorSet::start(&config(1)).unwrap();
    let h = set.handle(0).unwrap().clone();
    h.add_poller(Box::new(Bomb)).unwrap();
    assert!(wait_until(Duration::from_secs(2), || h.is_stopped()));
    assert_eq!(h.run(|_| {}), Err(ReactorError::Stopped));
    assert_eq!(set.stop(), Err(ReactorError::Panicked(0)));
}
