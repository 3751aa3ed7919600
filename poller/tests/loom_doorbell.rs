//! Model-checked doorbell handshake (`rpcrdma_poller::doorbell::Doorbell`) over the real SPSC
//! ring, run by scripts/loom.sh (`RUSTFLAGS="--cfg loom"`; this file is empty in normal builds).
//! Under that cfg the doorbell's flag and fences and the ring's head and tail are loom's, and the
//! doorbell parks and unparks loom threads, so a lost wake-up shows as loom's "deadlock" (the
//! owner parked forever with an item in its ring and nobody left to ring).
//!
//! The owner does what a worker or reactor does: poll the ring; when empty, arm the bell, poll
//! once more (the re-check), park only if that found nothing, disarm, repeat. Producers enqueue
//! and then ring. `loom_doorbell_weak_handshake_is_caught` runs the same protocol with the
//! SeqCst fence pair replaced by Release/Acquire accesses and expects loom to find the lost
//! wake-up (store buffering: each side misses the other's store). The `_eventfd` models run the
//! same protocol on a bell in eventfd mode (a reactor in interrupt mode): the ring then adds
//! to a counter the owner's sleep waits on and reads back to zero (loom's model of the eventfd
//! and `poll(2)`), and a count left by a ring that raced with a wake-up only ends a later sleep
//! early. docs/memory-model.md
//! (doorbell section) and `scripts/loom.sh --mutants` weaken the real code the same way.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use rpcrdma_poller::doorbell::Doorbell;
use rpcrdma_poller::ring::{self, Consumer};
use std::sync::Arc;

/// `loom::model` with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// The owner's loop: takes `want` items, sleeping on `bell` whenever the ring is empty.
fn owner(mut c: Consumer<u64>, bell: Arc<Doorbell>, want: usize) -> Vec<u64> {
    bell.register();
    let mut got = Vec::new();
    while got.len() < want {
        if let Some(v) = c.dequeue() {
            got.push(v);
            continue;
        }
        bell.arm();
        // The re-check: anything published before the producer's fence is seen here.
        if let Some(v) = c.dequeue() {
            bell.disarm();
            got.push(v);
            continue;
        }
        bell.park(None);
    }
    got
}

/// A bell of either kind.
fn bell(eventfd: bool) -> Arc<Doorbell> {
    Arc::new(if eventfd {
        Doorbell::with_eventfd().unwrap()
    } else {
        Doorbell::new()
    })
}

/// One producer, one item: the owner always gets it (no lost wake-up), whatever the interleaving.
fn no_lost_wakeup(eventfd: bool) {
    model(move || {
        let (mut p, c) = ring::channel::<u64>(2).unwrap();
        let bell = bell(eventfd);
        let b2 = Arc::clone(&bell);
        let o = thread::spawn(move || owner(c, b2, 1));
        let t = thread::spawn(move || {
            p.enqueue(7).unwrap();
            bell.ring();
        });
        t.join().unwrap();
        assert_eq!(o.join().unwrap(), vec![7]);
    });
}

#[test]
fn loom_doorbell_no_lost_wakeup() {
    no_lost_wakeup(false);
}

#[test]
fn loom_doorbell_no_lost_wakeup_eventfd() {
    no_lost_wakeup(true);
}

/// Two items rung separately: the owner may wake for the first, disarm, and arm again before the
/// second; it still gets both, in order.
fn two_rings_rearm(eventfd: bool) {
    model(move || {
        let (mut p, c) = ring::channel::<u64>(2).unwrap();
        let bell = bell(eventfd);
        let b2 = Arc::clone(&bell);
        let o = thread::spawn(move || owner(c, b2, 2));
        let t = thread::spawn(move || {
            for v in [1, 2] {
                p.enqueue(v).unwrap();
                bell.ring();
            }
        });
        t.join().unwrap();
        assert_eq!(o.join().unwrap(), vec![1, 2]);
    });
}

#[test]
fn loom_doorbell_two_rings_rearm() {
    two_rings_rearm(false);
}

#[test]
fn loom_doorbell_two_rings_rearm_eventfd() {
    two_rings_rearm(true);
}

/// The handshake with the fence pair weakened to a Release store of the flag and an Acquire load
/// of it (the owner: `flag = true` then re-check the ring; the producer: publish then load the
/// flag). Without the SeqCst fences both loads may read the old values, the producer skips the
/// unpark and the owner parks forever: loom must report the deadlock.
#[test]
#[should_panic(expected = "deadlock")]
fn loom_doorbell_weak_handshake_is_caught() {
    model(|| {
        let (mut p, mut c) = ring::channel::<u64>(2).unwrap();
        let sleeping = Arc::new(AtomicBool::new(false));
        let s2 = Arc::clone(&sleeping);
        let o = thread::spawn(move || loop {
            if c.dequeue().is_some() {
                return;
            }
            s2.store(true, Ordering::Release);
            if c.dequeue().is_some() {
                return;
            }
            thread::park();
            s2.store(false, Ordering::Relaxed);
        });
        let owner_thread = o.thread().clone();
        let t = thread::spawn(move || {
            p.enqueue(1).unwrap();
            if sleeping.load(Ordering::Acquire) {
                owner_thread.unpark();
            }
        });
        t.join().unwrap();
        o.join().unwrap();
    });
}
