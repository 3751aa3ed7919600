//! Reactors in interrupt mode (`BackoffConfig::interrupt`) over the soft provider: an idle
//! reactor sleeps in `poll(2)`, and the sleep ends through a descriptor (counted in
//! `idle_wakeups`) for a control message, a submission rung on its doorbell, a completion a
//! soft CQ notices and an RPC round trip (submission on the client's node, completions on
//! both), and at its next timer; it sleeps past its longest sleep only when every poller armed
//! all its sources.
//!
//! The reactor tests set the longest sleep to 60 s, so a wake-up that did not come through a
//! descriptor or the timer would leave the reactor asleep far beyond the tests' 20 s waits: they
//! fail, rather than merely slow down, without the wake-up path. The round trip uses the
//! 10 ms bound of the preset (the soft provider's connection events have no descriptor) and
//! tells wake-ups from timeouts by the counters.

mod api_common;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_poller::doorbell::Waker;
use rpcrdma_poller::ring::{self, Consumer};
use rpcrdma_poller::{
    BackoffConfig, CallbackMode, Client, ClientOptions, Cores, PinPolicy, Placement, Poller,
    PollerCtx, Proc, ReactorConfig, ReactorSet, Server, StatsSnapshot,
};

/// Interrupt mode with a 60 s longest sleep and short spin / yield phases.
fn long_sleep() -> BackoffConfig {
    BackoffConfig {
        spin_polls: 10,
        yield_polls: 2,
        min_sleep_ns: 60_000_000_000,
        max_sleep_ns: 60_000_000_000,
        ..BackoffConfig::interrupt()
    }
}

fn one_reactor(backoff: BackoffConfig) -> ReactorSet {
    let mut c = ReactorConfig::new(Cores::Count(1));
    c.pin = PinPolicy::Off;
    c.backoff = backoff;
    ReactorSet::start(&c).expect("reactor")
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until reactor 0 of `set` is asleep (one more sleep begun than in `from`, and no
/// iteration since for a while), returning its counters then.
fn asleep(set: &ReactorSet, from: &StatsSnapshot) -> StatsSnapshot {
    wait_until("the reactor to sleep", || {
        set.stats(0).unwrap().idle_sleeps > from.idle_sleeps
    });
    // The counters move only when the reactor runs: unchanged over 20 ms, it is in a sleep.
    loop {
        let a = set.stats(0).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        if set.stats(0).unwrap() == a {
            return a;
        }
    }
}

/// A poller taking items from a ring other threads fill, handing out a waker of its reactor
/// on its first poll, and arming a timer on request.
struct Intake {
    rx: Consumer<u64>,
    waker: Option<Sender<Waker>>,
    seen: Arc<AtomicU64>,
    timer_at: Arc<AtomicU64>,
    fired: Arc<AtomicU64>,
}

impl Poller for Intake {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        if let Some(tx) = self.waker.take() {
            let _ = tx.send(cx.waker());
        }
        let mut n = 0;
        while let Some(v) = self.rx.dequeue() {
            self.seen.fetch_add(v, Relaxed);
            if v == 1000 {
                cx.arm_timer(now + 50_000_000, 7).expect("timer");
            }
            n += 1;
        }
        n
    }

    fn on_timer(&mut self, token: u64, cx: &mut PollerCtx<'_>) {
        self.timer_at.store(cx.now(), Relaxed);
        self.fired.store(token, Relaxed);
    }
}

#[test]
fn accepts_sleep_and_wakeups_for_control_submission_and_timer() {
    let mut set = one_reactor(long_sleep());
    let (mut tx, rx) = ring::channel::<u64>(16).unwrap();
    let (wtx, wrx) = channel();
    let seen = Arc::new(AtomicU64::new(0));
    let fired = Arc::new(AtomicU64::new(0));
    let timer_at = Arc::new(AtomicU64::new(0));
    set.add_poller(
        Placement::Reactor(0),
        Box::new(Intake {
            rx,
            waker: Some(wtx),
            seen: Arc::clone(&seen),
            timer_at: Arc::clone(&timer_at),
            fired: Arc::clone(&fired),
        }),
    )
    .unwrap();
    let waker = wrx.recv_timeout(Duration::from_secs(20)).expect("waker");

    // Idle: it sleeps (and not by timing out: the sleep lasts 60 s).
    let s0 = asleep(&set, &StatsSnapshot::default());
    assert!(s0.idle_sleeps >= 1, "{s0:?}");

    // A control message wakes it through its eventfd.
    let (ctx, crx) = channel();
    set.handles()[0]
        .run(move |_| {
            let _ = ctx.send(());
        })
        .unwrap();
    crx.recv_timeout(Duration::from_secs(20))
        .expect("control message handled");
    let s1 = asleep(&set, &s0);
    assert!(s1.idle_wakeups > s0.idle_wakeups, "{s0:?} {s1:?}");

    // A submission: publish, then ring through the waker.
    tx.enqueue(5).unwrap();
    waker.wake();
    wait_until("the submission", || seen.load(Relaxed) == 5);
    let s2 = asleep(&set, &s1);
    assert!(s2.idle_wakeups > s1.idle_wakeups, "{s1:?} {s2:?}");

    // A timer 50 ms ahead ends the sleep at its deadline.
    tx.enqueue(1000).unwrap();
    waker.wake();
    wait_until("the timer", || fired.load(Relaxed) == 7);
    assert!(timer_at.load(Relaxed) > 0);
    set.stop().unwrap();
}

/// Without the eventfd: a reactor parking on its doorbell (`interrupt: false`) does not count
/// descriptor wake-ups, and an interrupt-mode reactor that is only ever woken by its timeout
/// (nothing to wake it) counts none either.
#[test]
fn rejects_wakeups_counted_without_a_descriptor() {
    let parking = BackoffConfig {
        interrupt: false,
        min_sleep_ns: 1_000_000,
        max_sleep_ns: 1_000_000,
        ..long_sleep()
    };
    let mut set = one_reactor(parking);
    let sleeps = |set: &ReactorSet| set.stats(0).unwrap().idle_sleeps;
    wait_until("sleeps", || sleeps(&set) > 5);
    let (ctx, crx) = channel();
    set.handles()[0]
        .run(move |_| {
            let _ = ctx.send(());
        })
        .unwrap();
    crx.recv_timeout(Duration::from_secs(20)).expect("handled");
    let s = sleeps(&set);
    wait_until("sleeps", || sleeps(&set) > s + 5);
    assert_eq!(set.stats(0).unwrap().idle_wakeups, 0);
    set.stop().unwrap();

    let timed = BackoffConfig {
        min_sleep_ns: 1_000_000,
        max_sleep_ns: 1_000_000,
        ..long_sleep()
    };
    let mut set = one_reactor(timed);
    // A source only polling sees: every sleep times out after 1 ms. Adding it is a control
    // message, which may wake the reactor through its descriptor: count from after it.
    set.add_poller(Placement::Reactor(0), Box::new(Quiet { armed: false }))
        .unwrap();
    let s = sleeps(&set);
    wait_until("sleeps", || sleeps(&set) > s + 3);
    let woken = set.stats(0).unwrap().idle_wakeups;
    let s = sleeps(&set);
    wait_until("sleeps", || sleeps(&set) > s + 20);
    assert_eq!(set.stats(0).unwrap().idle_wakeups, woken);
    set.stop().unwrap();
}

fn total(set: &ReactorSet) -> StatsSnapshot {
    (0..set.len())
        .map(|i| set.stats(i).unwrap())
        .fold(StatsSnapshot::default(), |a, s| StatsSnapshot {
            idle_sleeps: a.idle_sleeps + s.idle_sleeps,
            idle_wakeups: a.idle_wakeups + s.idle_wakeups,
            ..a
        })
}

/// Round trips between a client and a server on interrupt-mode reactors, each call made while
/// both reactors sleep: every call wakes them through descriptors (the client's submission,
/// the soft CQs' notices), so wake-ups grow with the calls.
#[test]
fn accepts_round_trips_waking_sleeping_reactors() {
    let mut cfg = reactor_config(2);
    cfg.backoff = BackoffConfig::interrupt();
    let w = World::with_reactors(0, &cfg);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .mode(CallbackMode::Inline)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(client.wait_connected(Duration::from_secs(20)), "connect");
    const CALLS: u64 = 10;
    let before = total(&w.set);
    for i in 0..CALLS {
        // Both reactors asleep (10 ms bound: several sleeps pass meanwhile).
        std::thread::sleep(Duration::from_millis(30));
        let mut a = client.args().unwrap();
        a.put_opaque(&i.to_be_bytes()).unwrap();
        let r = client
            .call_blocking(Proc::new(PROG, 3, ECHO), a)
            .expect("echo");
        assert_eq!(&r.results()[4..12], &i.to_be_bytes());
    }
    let after = total(&w.set);
    assert!(after.idle_sleeps > before.idle_sleeps + CALLS, "{after:?}");
    // At least one descriptor wake-up per call (the client's node takes the submission).
    assert!(
        after.idle_wakeups >= before.idle_wakeups + CALLS,
        "{before:?} {after:?}"
    );
    w.stop();
}

/// A poller that reports (or not) that all its sources wake the reactor.
struct Quiet {
    armed: bool,
}

impl Poller for Quiet {
    fn poll(&mut self, _now: u64, _cx: &mut PollerCtx<'_>) -> usize {
        0
    }

    fn arm_wakeups(&mut self, _fds: &mut rpcrdma_poller::wait::WaitSet) -> bool {
        self.armed
    }
}

/// When every poller armed all its sources, the reactor sleeps past the back-off's longest
/// sleep (1 ms here) until a descriptor or a timer (`ARMED_SLEEP_NS` at most); when one did
/// not, the longest sleep bounds every sleep.
#[test]
fn accepts_long_sleeps_only_when_every_source_is_armed() {
    let short = BackoffConfig {
        min_sleep_ns: 1_000_000,
        max_sleep_ns: 1_000_000,
        ..long_sleep()
    };
    let mut sleeps = [0u64; 2];
    for (i, armed) in [true, false].into_iter().enumerate() {
        let mut set = one_reactor(short);
        set.add_poller(Placement::Reactor(0), Box::new(Quiet { armed }))
            .unwrap();
        wait_until("a sleep", || set.stats(0).unwrap().idle_sleeps >= 2);
        let s0 = set.stats(0).unwrap().idle_sleeps;
        std::thread::sleep(Duration::from_millis(300));
        sleeps[i] = set.stats(0).unwrap().idle_sleeps - s0;
        set.stop().unwrap();
    }
    assert!(sleeps[0] <= 1, "armed: {sleeps:?} sleeps in 300 ms");
    assert!(sleeps[1] >= 10, "not armed: {sleeps:?} sleeps in 300 ms");
}

/// A poller owning a soft CQ that rings the reactor's doorbell for every completion (as the
/// runtime's node does), counting what it polls.
struct CqOwner {
    cq: Option<rpcrdma_engine::verbs::soft::SoftCq>,
    got: Arc<AtomicU64>,
}

impl Poller for CqOwner {
    fn poll(&mut self, _now: u64, cx: &mut PollerCtx<'_>) -> usize {
        use rpcrdma_engine::verbs::{Completion, CompletionQueue};
        let Some(cq) = self.cq.as_mut() else {
            return 0;
        };
        if self.got.load(Relaxed) == u64::MAX {
            // First poll: the CQ's notice rings this reactor's doorbell.
            let bell = Arc::clone(cx.doorbell().expect("a sleeping reactor has a doorbell"));
            assert!(cq.set_notify(Arc::new(move || bell.ring())));
            self.got.store(0, Relaxed);
        }
        let mut wc = [Completion::default(); 4];
        let n = cq.poll(&mut wc).expect("poll");
        self.got.fetch_add(n as u64, Relaxed);
        n
    }
}

/// A completion queued by another thread wakes a reactor asleep in interrupt mode (60 s
/// longest sleep): through the CQ's notice and the doorbell's eventfd.
#[test]
fn accepts_a_completion_waking_the_reactor() {
    use rpcrdma_engine::verbs::conformance::{connect, Buf};
    use rpcrdma_engine::verbs::soft::SoftEnv;
    use rpcrdma_engine::verbs::{Access, QueuePair, RecvWr, SendWr};
    let mut env = SoftEnv::new();
    let mut p = connect(&mut env).expect("a connected soft pair");
    let sb =
        Buf::<rpcrdma_engine::verbs::soft::SoftProvider>::new(&p.c.pd, 256, Access::LOCAL_WRITE)
            .unwrap();
    let rb =
        Buf::<rpcrdma_engine::verbs::soft::SoftProvider>::new(&p.s.pd, 256, Access::LOCAL_WRITE)
            .unwrap();
    let got = Arc::new(AtomicU64::new(u64::MAX));
    let mut set = one_reactor(long_sleep());
    set.add_poller(
        Placement::Reactor(0),
        Box::new(CqOwner {
            cq: Some(p.s.cq),
            got: Arc::clone(&got),
        }),
    )
    .unwrap();
    wait_until("the notice set", || got.load(Relaxed) != u64::MAX);
    let s0 = asleep(&set, &StatsSnapshot::default());
    p.s.qp
        .queue_recv(&RecvWr {
            wr_id: 1,
            sgl: &[rb.sge(0, 64)],
        })
        .unwrap();
    p.s.qp.flush_recv().unwrap();
    p.c.qp
        .queue_send(&SendWr::send(2, &[sb.sge(0, 64)]))
        .unwrap();
    p.c.qp.flush_send().unwrap();
    wait_until("the completion", || got.load(Relaxed) >= 1);
    let s1 = set.stats(0).unwrap();
    assert!(s1.idle_wakeups > s0.idle_wakeups, "{s0:?} {s1:?}");
    set.stop().unwrap();
}
