//! Model-checked head/tail protocols of the SPSC ring (`rpcrdma_poller::ring`) and the MPSC
//! channel (`rpcrdma_poller::mpsc`), run by scripts/loom.sh (`RUSTFLAGS="--cfg loom"`; this file
//! is empty in normal builds). Under that cfg the rings' atomics are loom's (the `sync` shim in
//! poller/src/ring.rs) and every slot write and read touches a loom `UnsafeCell`, so loom reports
//! a slot read not ordered after its write, or a next-lap write not ordered after the read, as a
//! causality violation, besides the assertions below (every item once, in order).
//!
//! Models are small on purpose (capacity 2, three or four items, at most two producers) and
//! nobody spins: a producer stops at the first refusal (keeping the rest), the consumer makes a
//! fixed number of attempts, and whatever is left is drained after the joins. loom explores every
//! interleaving up to `LOOM_MAX_PREEMPTIONS` (3 unless set) preemptions.
//!
//! Every role runs on a spawned thread; the model's main thread only joins and drains, and nothing
//! yields. With loom 0.7.3 a main thread doing work was never preempted before it (so nothing
//! crossed concurrently), and a thread that yields is never again shown a store it saw before the
//! yield (which hides stale reads); both were seen with counting models. docs/memory-model.md
//! lists the orderings that were weakened on purpose to check that these models fail.
#![cfg(loom)]

use loom::thread;
use rpcrdma_poller::{mpsc, ring};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

/// `loom::model` with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Runs the consumer's attempts `f` on a thread of its own; returns the consumer (to drain after
/// the joins) and what it received.
fn consume<C: Send + 'static, T: Send + 'static>(
    mut c: C,
    f: impl FnOnce(&mut C, &mut Vec<T>) + Send + 'static,
) -> (C, Vec<T>) {
    thread::spawn(move || {
        let mut got = Vec::new();
        f(&mut c, &mut got);
        (c, got)
    })
    .join()
    .unwrap()
}

/// SPSC, capacity 2, items 0, 1, 2 one at a time (the third wraps onto slot 0): the consumer
/// gets exactly the prefix the producer managed to enqueue, in order.
#[test]
fn loom_spsc_single_items_wrap() {
    model(|| {
        let (mut p, c) = ring::channel::<u64>(2).unwrap();
        let t = thread::spawn(move || {
            let mut sent = 0;
            while sent < 3 && p.enqueue(sent).is_ok() {
                sent += 1;
            }
            sent
        });
        let (mut c, mut got) = consume(c, |c, got| {
            for _ in 0..3 {
                got.extend(c.dequeue());
            }
        });
        let sent = t.join().unwrap();
        while let Some(v) = c.dequeue() {
            got.push(v);
        }
        assert!(
            sent >= 2,
            "an empty ring of 2 refused one of the first two items"
        );
        assert_eq!(got, (0..sent).collect::<Vec<_>>());
    });
}

/// SPSC, capacity 2, the slice paths: a bulk of two, then a burst of two (which wraps when the
/// consumer has released), against two burst dequeues of up to two. All-or-nothing for the bulk,
/// order and exactly-once for everything.
#[test]
fn loom_spsc_slice_bulk_and_burst() {
    model(|| {
        let (mut p, c) = ring::channel::<u64>(2).unwrap();
        let t = thread::spawn(move || {
            p.enqueue_bulk_slice(&[1, 2])
                .expect("empty ring refused a bulk");
            2 + p.enqueue_burst_slice(&[3, 4]) as u64
        });
        let (mut c, mut got) = consume(c, |c, got| {
            for _ in 0..2 {
                let mut out = [MaybeUninit::uninit(); 2];
                got.extend_from_slice(c.dequeue_burst(&mut out));
            }
        });
        let sent = t.join().unwrap();
        let mut out = [MaybeUninit::uninit(); 2];
        got.extend_from_slice(c.dequeue_burst(&mut out));
        assert_eq!(got, (1..=sent).collect::<Vec<_>>());
    });
}

/// Drops of [`Counted`] items in the current execution (executions run one after another).
static DROPS: AtomicUsize = AtomicUsize::new(0);

/// An owned item that counts its drops.
struct Counted(u64);

impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, StdOrdering::Relaxed);
    }
}

/// SPSC, capacity 2, the iterator and sink paths with owned items: `enqueue_bulk` of an
/// iterator, `enqueue_burst` of the rest, against `dequeue_bulk_with` / `dequeue_burst_with`;
/// what the consumer did not take is dropped with the ring (its `Drop` reads the slots, checked
/// to come after both halves' last accesses). Every item is received in order or dropped by the
/// ring, and each is dropped exactly once.
#[test]
fn loom_spsc_iterator_sink_and_leftovers() {
    model(|| {
        DROPS.store(0, StdOrdering::Relaxed);
        let (mut p, c) = ring::channel::<Counted>(2).unwrap();
        let t = thread::spawn(move || {
            if p.enqueue_bulk([1u64, 2].map(Counted)).is_err() {
                panic!("empty ring refused a bulk");
            }
            let mut rest = [3u64, 4].map(Counted).into_iter();
            2 + p.enqueue_burst(&mut rest) as u64
            // `rest` (what did not fit) and the producer half are dropped here.
        });
        let (c, got) = consume(c, |c, got| {
            let _ = c.dequeue_bulk_with(2, |b| got.push(b.0));
            c.dequeue_burst_with(2, |b| got.push(b.0));
        });
        let sent = t.join().unwrap();
        assert_eq!(got, (1..=got.len() as u64).collect::<Vec<_>>());
        drop(c);
        assert_eq!(
            DROPS.load(StdOrdering::Relaxed),
            4,
            "sent {sent}, got {got:?}"
        );
    });
}

/// Checks an MPSC outcome: each producer's items arrive in its order, each exactly once, and
/// exactly the ones it managed to enqueue.
fn check_mpsc(got: &[(u8, u64)], sent: &[u64]) {
    for (id, &n) in sent.iter().enumerate() {
        let mine: Vec<u64> = got
            .iter()
            .filter(|(p, _)| *p as usize == id)
            .map(|&(_, v)| v)
            .collect();
        assert_eq!(mine, (0..n).collect::<Vec<_>>(), "producer {id}: {got:?}");
    }
}

/// Spawns MPSC producer `id`, which enqueues `(id, 0..n)` until the first refusal and returns how
/// many it enqueued.
fn producer(p: mpsc::MpscProducer<(u8, u64)>, id: u8, n: u64) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut sent = 0;
        while sent < n && p.enqueue((id, sent)).is_ok() {
            sent += 1;
        }
        sent
    })
}

/// MPSC, capacity 2, two producers (two items and one) and one consumer making two single
/// dequeues: position claims by CAS, publication by the slot sequence, next lap after the
/// consumer's release. At least two items always get in (a refusal means two items are in the
/// ring of two).
#[test]
fn loom_mpsc_two_producers_one_consumer() {
    model(|| {
        let (p, c) = mpsc::channel::<(u8, u64)>(2).unwrap();
        let a = producer(p.clone(), 0, 2);
        let b = producer(p, 1, 1);
        let (mut c, mut got) = consume(c, |c, got| {
            for _ in 0..2 {
                got.extend(c.dequeue());
            }
        });
        let sent = [a.join().unwrap(), b.join().unwrap()];
        c.dequeue_burst_with(4, |v| got.push(v));
        assert!(sent[0] + sent[1] >= 2, "spuriously full: {sent:?}");
        check_mpsc(&got, &sent);
        assert!(c.dequeue().is_none() && c.is_abandoned());
    });
}

/// MPSC, capacity 2, two producers of two items each against a bulk dequeue of two and a burst:
/// bulk is all-or-nothing over consecutive published slots (a claimed but unpublished slot stops
/// it), and nothing is lost or duplicated across the wrap.
#[test]
fn loom_mpsc_bulk_and_burst_dequeue() {
    model(|| {
        let (p, c) = mpsc::channel::<(u8, u64)>(2).unwrap();
        let a = producer(p.clone(), 0, 2);
        let b = producer(p, 1, 2);
        let (mut c, mut got) = consume(c, |c, got| {
            let mut out = [MaybeUninit::uninit(); 2];
            if let Some(two) = c.dequeue_bulk(&mut out) {
                got.extend_from_slice(two);
            }
            let mut out = [MaybeUninit::uninit(); 2];
            got.extend_from_slice(c.dequeue_burst(&mut out));
        });
        let sent = [a.join().unwrap(), b.join().unwrap()];
        let mut out = [MaybeUninit::uninit(); 4];
        got.extend_from_slice(c.dequeue_burst(&mut out));
        check_mpsc(&got, &sent);
    });
}
