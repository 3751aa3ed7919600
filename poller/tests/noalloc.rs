//! No heap allocation after creation: a counting global allocator watches every SPSC and MPSC
//! enqueue/dequeue form, timer arm/cancel/rearm/expire/next_deadline, the counters, and the reactor
//! run loop itself (polling, timers, idle back-off) on the reactor thread.
//!
//! Counting is per thread (the test harness allocates on its own threads).

use rpcrdma_poller::{
    mpsc, ring, stats, BackoffConfig, Cores, PinPolicy, Placement, Poller, PollerCtx,
    ReactorConfig, ReactorSet, TimerWheel,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread local
// (its access does not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn accepts_counter_active() {
    let before = allocs();
    drop(std::hint::black_box(vec![1u8; 10]));
    assert!(allocs() > before, "counting allocator not active");
}

#[test]
fn accepts_no_allocation_in_ring_operations() {
    // Creation may allocate.
    let (mut p, mut c) = ring::channel::<u64>(128).unwrap();
    let (mp, mut mc) = mpsc::channel::<u64>(128).unwrap();
    let mp2 = mp.clone();
    let items: [u64; 32] = std::array::from_fn(|i| i as u64);
    let mut out = [MaybeUninit::<u64>::uninit(); 32];
    let mut sum = 0u64;

    let before = allocs();
    for round in 0..200usize {
        let k = round % 32 + 1;
        // SPSC: every enqueue form.
        p.enqueue(1).unwrap();
        p.enqueue_bulk(items[..k].iter().copied()).unwrap();
        p.enqueue_bulk_slice(&items[..k]).unwrap();
        let _ = p.enqueue_bulk_slice(&[0; 129]);
        let mut it = items[..k].iter().copied();
        sum += p.enqueue_burst(&mut it.by_ref()) as u64;
        sum += p.enqueue_burst_slice(&items) as u64;
        // SPSC: every dequeue form.
        sum += c.dequeue().unwrap_or(0);
        if let Some(s) = c.dequeue_bulk(&mut out[..k]) {
            sum += s[0];
        }
        let _ = c.dequeue_bulk_with(k, |v| sum += v);
        sum += c.dequeue_burst(&mut out[..k]).len() as u64;
        while c.dequeue_burst_with(32, |v| sum += v) > 0 {}
        sum += (p.free_count() + c.used_count()) as u64;
        // MPSC.
        for i in 0..k as u64 {
            mp.enqueue(i).unwrap();
            mp2.enqueue(i).unwrap();
        }
        sum += mc.dequeue().unwrap_or(0);
        if let Some(s) = mc.dequeue_bulk(&mut out[..k / 2]) {
            sum += s.len() as u64;
        }
        let _ = mc.dequeue_bulk_with(2, |v| sum += v);
        sum += mc.dequeue_burst(&mut out[..3]).len() as u64;
        while mc.dequeue_burst_with(32, |v| sum += v) > 0 {}
    }
    assert_eq!(allocs() - before, 0, "ring operations allocated");
    assert!(sum > 0);
}

#[test]
fn accepts_no_allocation_in_timer_operations() {
    let mut w = TimerWheel::<u64>::new(1024, 64, 100).unwrap();
    let (sw, sr) = stats::stats();
    let mut handles = [None; 64];
    let mut fired = 0u64;

    let before = allocs();
    let mut now = 0u64;
    for round in 0..2_000u64 {
        let slot = (round % 64) as usize;
        if let Some(h) = handles[slot].take() {
            if round % 3 == 0 {
                w.cancel(h);
            } else {
                w.rearm(h, now + round % 50_000);
                handles[slot] = Some(h);
            }
        }
        if handles[slot].is_none() {
            handles[slot] = w.arm(now + (round * 37) % 20_000, round).ok();
        }
        let _ = w.next_deadline();
        now += 150;
        fired += w.expire_max(now, 8, |_| {}) as u64;
        fired += w.expire(now, |_| {}) as u64;
        sw.iteration(round % 2 == 0);
        sw.timer_expiries(fired);
        let _ = sr.snapshot();
    }
    assert_eq!(allocs() - before, 0, "timer operations allocated");
    assert!(fired > 100);
}

/// Records the reactor thread's allocation count at two moments, while re-arming a timer every
/// few polls and reporting work only now and then (so the back-off runs too).
struct Watcher {
    polls: u64,
    at_warm: Arc<AtomicU64>,
    at_end: Arc<AtomicU64>,
}

impl Poller for Watcher {
    fn poll(&mut self, now: u64, cx: &mut PollerCtx<'_>) -> usize {
        self.polls += 1;
        match self.polls {
            1_000 => self.at_warm.store(allocs() + 1, Relaxed),
            6_000 => self.at_end.store(allocs() + 1, Relaxed),
            _ => {}
        }
        if self.polls % 16 == 0 {
            let h = cx.arm_timer(now + 30_000, self.polls).unwrap();
            if self.polls % 32 == 0 {
                cx.cancel_timer(h);
            }
        }
        usize::from(self.polls % 4 == 0)
    }

    fn on_timer(&mut self, _token: u64, cx: &mut PollerCtx<'_>) {
        let _ = cx.arm_timer(cx.now() + 10_000, 0);
    }
}

/// Runs a [`Watcher`] on one reactor with `backoff` and checks that its loop did not allocate
/// between the two marks; returns the reactor's counters.
fn reactor_loop_allocations(backoff: BackoffConfig) -> rpcrdma_poller::StatsSnapshot {
    let mut cfg = ReactorConfig::new(Cores::Count(1));
    cfg.pin = PinPolicy::AllowUnpinned;
    cfg.backoff = backoff;
    let mut set = ReactorSet::start(&cfg).unwrap();
    let at_warm = Arc::new(AtomicU64::new(0));
    let at_end = Arc::new(AtomicU64::new(0));
    set.add_poller(
        Placement::Reactor(0),
        Box::new(Watcher {
            polls: 0,
            at_warm: at_warm.clone(),
            at_end: at_end.clone(),
        }),
    )
    .unwrap();
    let mut waited = 0;
    while at_end.load(Relaxed) == 0 && waited < 10_000 {
        std::thread::sleep(Duration::from_millis(1));
        waited += 1;
    }
    let (warm, end) = (at_warm.load(Relaxed), at_end.load(Relaxed));
    assert!(warm > 0 && end > 0, "poller did not run long enough");
    let s = set.stats(0).unwrap();
    set.stop().unwrap();
    assert_eq!(end - warm, 0, "the reactor loop allocated");
    s
}

#[test]
fn accepts_no_allocation_in_the_reactor_loop() {
    let s = reactor_loop_allocations(BackoffConfig {
        enabled: true,
        spin_polls: 2,
        yield_polls: 2,
        min_sleep_ns: 1_000,
        max_sleep_ns: 2_000,
        interrupt: false,
    });
    assert!(
        s.timer_expiries > 0 && s.idle_sleeps + s.idle_yields > 0,
        "{s:?}"
    );
}

/// Interrupt mode: arming the pollers' wake-ups, the descriptor set and the `poll(2)` sleep
/// do not allocate either (no spin or yield phase: every idle stretch sleeps).
#[test]
fn accepts_no_allocation_in_the_interrupt_loop() {
    let s = reactor_loop_allocations(BackoffConfig {
        spin_polls: 0,
        yield_polls: 0,
        min_sleep_ns: 2_000,
        max_sleep_ns: 2_000,
        ..BackoffConfig::interrupt()
    });
    assert!(s.timer_expiries > 0 && s.idle_sleeps > 0, "{s:?}");
}
