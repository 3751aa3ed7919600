//! SPSC ring and MPSC ring semantics: full/empty, bulk all-or-nothing, burst partial, wraparound,
//! drop of leftovers, panic safety, and multi-thread stress with sequence numbers.

use rpcrdma_poller::ring::{self, MAX_CAPACITY};
use rpcrdma_poller::{mpsc, RingError};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts drops of a `Tracked` into a shared counter.
#[derive(Debug)]
struct Tracked(u64, Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

fn uninit<T, const N: usize>() -> [MaybeUninit<T>; N] {
    std::array::from_fn(|_| MaybeUninit::uninit())
}

/// Small deterministic generator for the stress tests.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn stress_items() -> u64 {
    if cfg!(miri) {
        300
    } else {
        100_000
    }
}

// ---------------------------------------------------------------- SPSC

#[test]
fn accepts_halves_sent_to_other_threads() {
    fn is_send<T: Send>(_: &T) {}
    let (p, c) = ring::channel::<String>(2).unwrap();
    let (mp, mc) = mpsc::channel::<String>(2).unwrap();
    is_send(&p);
    is_send(&c);
    is_send(&mp);
    is_send(&mc);
}

#[test]
fn rejects_spsc_capacity_not_power_of_two() {
    for cap in [0, 3, 6, 1000, MAX_CAPACITY + 1, MAX_CAPACITY * 2] {
        assert_eq!(
            ring::channel::<u8>(cap).unwrap_err(),
            RingError::BadCapacity,
            "{cap}"
        );
    }
    for cap in [1, 2, 1024] {
        let (p, c) = ring::channel::<u8>(cap).unwrap();
        assert_eq!((p.capacity(), c.capacity()), (cap, cap));
    }
}

#[test]
fn accepts_spsc_full_and_empty() {
    let (mut p, mut c) = ring::channel::<u64>(8).unwrap();
    assert_eq!(c.dequeue(), None);
    assert_eq!((p.free_count(), c.used_count()), (8, 0));
    for i in 0..8 {
        p.enqueue(i).unwrap();
        assert_eq!(p.used_count(), i as usize + 1);
    }
    // Full: the item comes back.
    assert_eq!(p.enqueue(99), Err(99));
    assert_eq!((p.free_count(), c.used_count(), c.free_count()), (0, 8, 0));
    for i in 0..8 {
        assert_eq!(c.dequeue(), Some(i));
    }
    assert_eq!(c.dequeue(), None);
    assert_eq!(p.free_count(), 8);
}

#[test]
fn rejects_spsc_enqueue_bulk_without_room() {
    let (mut p, mut c) = ring::channel::<u64>(8).unwrap();
    p.enqueue_bulk_slice(&[0, 1, 2, 3, 4, 5]).unwrap();
    // Three do not fit in two free slots: nothing moves, the iterator comes back untouched.
    let back = p.enqueue_bulk(vec![6, 7, 8]).unwrap_err();
    assert_eq!(back.collect::<Vec<_>>(), [6, 7, 8]);
    assert_eq!(p.enqueue_bulk_slice(&[6, 7, 8]), Err(RingError::Full));
    // More than the capacity never fits.
    assert_eq!(p.enqueue_bulk_slice(&[0; 9]), Err(RingError::Full));
    assert_eq!(c.used_count(), 6);
    // Two fit.
    p.enqueue_bulk([6, 7]).unwrap();
    assert_eq!(c.used_count(), 8);
    let mut out = uninit::<u64, 8>();
    assert_eq!(c.dequeue_bulk(&mut out).unwrap(), &[0, 1, 2, 3, 4, 5, 6, 7]);
    // An empty bulk is always accepted.
    p.enqueue_bulk_slice(&[]).unwrap();
    assert!(p.enqueue_bulk(std::iter::empty()).is_ok());
}

#[test]
fn rejects_spsc_dequeue_bulk_when_short() {
    let (mut p, mut c) = ring::channel::<u64>(8).unwrap();
    p.enqueue_bulk_slice(&[10, 11, 12]).unwrap();
    let mut out = uninit::<u64, 4>();
    assert!(c.dequeue_bulk(&mut out).is_none());
    let mut called = 0;
    assert_eq!(
        c.dequeue_bulk_with(4, |_| called += 1),
        Err(RingError::Empty)
    );
    assert_eq!(called, 0);
    assert_eq!(c.used_count(), 3);
    let mut got = Vec::new();
    c.dequeue_bulk_with(3, |v| got.push(v)).unwrap();
    assert_eq!(got, [10, 11, 12]);
}

#[test]
fn accepts_spsc_burst_partial() {
    let (mut p, mut c) = ring::channel::<u64>(8).unwrap();
    p.enqueue(100).unwrap();
    // Seven free slots: seven of ten move, the rest stay in the iterator.
    let mut it = 0..10u64;
    assert_eq!(p.enqueue_burst(&mut it), 7);
    assert_eq!(it.next(), Some(7));
    assert_eq!(p.enqueue_burst(&mut it), 0);
    assert_eq!(p.enqueue_burst_slice(&[1, 2]), 0);
    let mut out = uninit::<u64, 3>();
    assert_eq!(c.dequeue_burst(&mut out), &[100, 0, 1]);
    assert_eq!(p.enqueue_burst_slice(&[20, 21, 22, 23]), 3);
    let mut out = uninit::<u64, 32>();
    assert_eq!(c.dequeue_burst(&mut out), &[2, 3, 4, 5, 6, 20, 21, 22]);
    assert!(c.dequeue_burst(&mut out).is_empty());
    p.enqueue_bulk_slice(&[1, 2, 3]).unwrap();
    let mut got = Vec::new();
    assert_eq!(c.dequeue_burst_with(2, |v| got.push(v)), 2);
    assert_eq!(c.dequeue_burst_with(10, |v| got.push(v)), 1);
    assert_eq!(c.dequeue_burst_with(10, |v| got.push(v)), 0);
    assert_eq!(got, [1, 2, 3]);
}

#[test]
fn accepts_spsc_wraparound_with_every_call() {
    let (mut p, mut c) = ring::channel::<u64>(4).unwrap();
    let mut next_in = 0u64;
    let mut next_out = 0u64;
    let mut rng = Lcg(7);
    let check = |v: u64, next_out: &mut u64| {
        assert_eq!(v, *next_out);
        *next_out += 1;
    };
    while next_out < 2_000 {
        let k = rng.next() as usize % 5;
        match rng.next() % 5 {
            0 => {
                if p.enqueue(next_in).is_ok() {
                    next_in += 1;
                }
            }
            1 => {
                if p.enqueue_bulk((0..k as u32).map(|i| next_in + u64::from(i)))
                    .is_ok()
                {
                    next_in += k as u64;
                }
            }
            2 => {
                let mut it = next_in..next_in + k as u64;
                next_in += p.enqueue_burst(&mut it) as u64;
            }
            3 => {
                let v: Vec<u64> = (next_in..next_in + k as u64).collect();
                if p.enqueue_bulk_slice(&v).is_ok() {
                    next_in += k as u64;
                }
            }
            _ => {
                let v: Vec<u64> = (next_in..next_in + k as u64).collect();
                next_in += p.enqueue_burst_slice(&v) as u64;
            }
        }
        let k = rng.next() as usize % 5;
        let mut out = uninit::<u64, 4>();
        match rng.next() % 5 {
            0 => {
                if let Some(v) = c.dequeue() {
                    check(v, &mut next_out);
                }
            }
            1 => {
                if let Some(s) = c.dequeue_bulk(&mut out[..k]) {
                    s.iter().for_each(|&v| check(v, &mut next_out));
                }
            }
            2 => c
                .dequeue_burst(&mut out[..k])
                .iter()
                .for_each(|&v| check(v, &mut next_out)),
            3 => {
                let _ = c.dequeue_bulk_with(k, |v| check(v, &mut next_out));
            }
            _ => {
                c.dequeue_burst_with(k, |v| check(v, &mut next_out));
            }
        }
        assert_eq!(c.used_count() as u64, next_in - next_out);
    }
}

#[test]
fn accepts_spsc_leftovers_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let (mut p, mut c) = ring::channel::<Tracked>(8).unwrap();
        // Move the positions so that the leftovers straddle the end of the array.
        for i in 0..6 {
            p.enqueue(Tracked(i, drops.clone())).unwrap();
        }
        for _ in 0..6 {
            drop(c.dequeue().unwrap());
        }
        assert_eq!(drops.load(Ordering::Relaxed), 6);
        p.enqueue_bulk((0..7u32).map(|i| Tracked(i.into(), drops.clone())))
            .map_err(|_| ())
            .unwrap();
        // Two taken through a MaybeUninit buffer, moved out and dropped by us.
        let mut out = uninit::<Tracked, 2>();
        let got = c.dequeue_bulk(&mut out).unwrap();
        assert_eq!((got[0].0, got[1].0), (0, 1));
        // SAFETY: `dequeue_bulk` initialised both; each is read (moved out) once.
        unsafe {
            drop(std::ptr::read(&got[0]));
            drop(std::ptr::read(&got[1]));
        }
        assert_eq!(drops.load(Ordering::Relaxed), 8);
        drop(p);
        assert!(c.is_abandoned());
        assert_eq!(c.used_count(), 5);
    }
    // The five left in the ring are dropped with it.
    assert_eq!(drops.load(Ordering::Relaxed), 13);
}

/// An iterator that claims `claimed` items, yields `yields` and then panics (if `panics`).
struct Liar {
    claimed: usize,
    yields: u64,
    given: u64,
    panics: bool,
}

impl Iterator for Liar {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        if self.given == self.yields {
            if self.panics {
                panic!("iterator failed");
            }
            return None;
        }
        self.given += 1;
        Some(self.given - 1)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.claimed, Some(self.claimed))
    }
}

impl ExactSizeIterator for Liar {}

#[test]
fn accepts_spsc_iterator_that_panics_or_lies() {
    let (mut p, mut c) = ring::channel::<u64>(8).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = p.enqueue_bulk(Liar {
            claimed: 5,
            yields: 2,
            given: 0,
            panics: true,
        });
    }));
    assert!(r.is_err());
    // The two written before the panic are published, not lost.
    assert_eq!(c.used_count(), 2);
    // A short iterator enqueues what it yields.
    p.enqueue_bulk(Liar {
        claimed: 5,
        yields: 3,
        given: 0,
        panics: false,
    })
    .map_err(|_| ())
    .unwrap();
    let mut out = uninit::<u64, 8>();
    assert_eq!(c.dequeue_burst(&mut out), &[0, 1, 0, 1, 2]);
}

#[test]
fn accepts_spsc_sink_that_panics() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let (mut p, mut c) = ring::channel::<Tracked>(8).unwrap();
        for i in 0..5 {
            p.enqueue(Tracked(i, drops.clone())).unwrap();
        }
        let r = catch_unwind(AssertUnwindSafe(|| {
            c.dequeue_burst_with(5, |t| {
                if t.0 == 2 {
                    panic!("sink failed");
                }
            });
        }));
        assert!(r.is_err());
        // Items 0, 1, 2 were handed out (and dropped by the sink); 3 and 4 remain.
        assert_eq!(drops.load(Ordering::Relaxed), 3);
        assert_eq!(c.dequeue().map(|t| t.0), Some(3));
    }
    assert_eq!(drops.load(Ordering::Relaxed), 5);
}

#[test]
fn accepts_spsc_zero_sized_items() {
    let (mut p, mut c) = ring::channel::<()>(4).unwrap();
    assert_eq!(p.enqueue_burst(&mut std::iter::repeat(()).take(10)), 4);
    assert_eq!(p.enqueue(()), Err(()));
    assert_eq!(c.dequeue_burst_with(10, |()| {}), 4);
}

#[test]
fn accepts_spsc_two_thread_stress_in_order() {
    let n = stress_items();
    let (mut p, mut c) = ring::channel::<u64>(64).unwrap();
    let producer = std::thread::spawn(move || {
        let mut rng = Lcg(1);
        let mut next = 0u64;
        let mut buf = [0u64; 32];
        while next < n {
            let before = next;
            let k = (rng.next() % 32 + 1).min(n - next);
            match rng.next() % 4 {
                0 => {
                    if p.enqueue(next).is_ok() {
                        next += 1;
                    }
                }
                1 => {
                    if p.enqueue_bulk((0..k as u32).map(|i| next + u64::from(i)))
                        .is_ok()
                    {
                        next += k;
                    }
                }
                2 => {
                    for (i, b) in buf[..k as usize].iter_mut().enumerate() {
                        *b = next + i as u64;
                    }
                    next += p.enqueue_burst_slice(&buf[..k as usize]) as u64;
                }
                _ => {
                    let mut it = next..next + k;
                    next += p.enqueue_burst(&mut it) as u64;
                }
            }
            if next == before {
                std::thread::yield_now();
            }
        }
    });
    let mut rng = Lcg(2);
    let mut expect = 0u64;
    let mut seen = 0u64;
    let mut out = uninit::<u64, 32>();
    while seen < n {
        let before = seen;
        let k = (rng.next() % 32 + 1) as usize;
        let mut check = |v: u64| {
            // No loss, no duplicate, order preserved: every item is the next sequence number.
            assert_eq!(v, expect);
            expect += 1;
            seen += 1;
        };
        match rng.next() % 4 {
            0 => {
                if let Some(v) = c.dequeue() {
                    check(v);
                }
            }
            1 => {
                if let Some(s) = c.dequeue_bulk(&mut out[..k]) {
                    s.iter().for_each(|&v| check(v));
                }
            }
            2 => c
                .dequeue_burst(&mut out[..k])
                .iter()
                .for_each(|&v| check(v)),
            _ => {
                c.dequeue_burst_with(k, check);
            }
        }
        if seen == before {
            std::thread::yield_now();
        }
    }
    producer.join().unwrap();
    assert_eq!(c.dequeue(), None);
    assert!(c.is_abandoned());
}

// ---------------------------------------------------------------- MPSC

#[test]
fn rejects_mpsc_capacity_not_power_of_two() {
    for cap in [0, 5, MAX_CAPACITY + 1] {
        assert_eq!(
            mpsc::channel::<u8>(cap).unwrap_err(),
            RingError::BadCapacity
        );
    }
}

#[test]
fn accepts_mpsc_full_empty_bulk_and_burst() {
    let (p, mut c) = mpsc::channel::<u64>(8).unwrap();
    let p2 = p.clone();
    assert_eq!(c.dequeue(), None);
    for i in 0..8 {
        if i % 2 == 0 { &p } else { &p2 }.enqueue(i).unwrap();
    }
    assert_eq!(p.enqueue(8), Err(8));
    assert_eq!(c.used_count(), 8);
    // Bulk: all or nothing.
    let mut out = uninit::<u64, 9>();
    assert!(c.dequeue_bulk(&mut out).is_none());
    assert_eq!(
        c.dequeue_bulk_with(9, |_| panic!("must not run")),
        Err(RingError::Empty)
    );
    assert_eq!(c.dequeue_bulk(&mut out[..3]).unwrap(), &[0, 1, 2]);
    let mut got = Vec::new();
    c.dequeue_bulk_with(2, |v| got.push(v)).unwrap();
    assert_eq!(got, [3, 4]);
    // Burst: partial.
    assert_eq!(c.dequeue_burst(&mut out[..2]), &[5, 6]);
    assert_eq!(c.dequeue_burst(&mut out), &[7]);
    assert!(c.dequeue_burst(&mut out).is_empty());
    // Wraparound over several laps.
    for lap in 0..10u64 {
        for i in 0..5 {
            p.enqueue(lap * 5 + i).unwrap();
        }
        let mut got = Vec::new();
        assert_eq!(c.dequeue_burst_with(100, |v| got.push(v)), 5);
        assert_eq!(got, (lap * 5..lap * 5 + 5).collect::<Vec<_>>());
    }
}

#[test]
fn accepts_mpsc_leftovers_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let (p, mut c) = mpsc::channel::<Tracked>(4).unwrap();
        for i in 0..3 {
            p.enqueue(Tracked(i, drops.clone())).unwrap();
        }
        for _ in 0..3 {
            drop(c.dequeue());
        }
        assert_eq!(drops.load(Ordering::Relaxed), 3);
        // Positions 3, 4, 5: slots 3, 0, 1 (straddling the array's end).
        for i in 3..6 {
            p.enqueue(Tracked(i, drops.clone())).unwrap();
        }
        assert_eq!(c.used_count(), 3);
        drop(c);
        assert_eq!(drops.load(Ordering::Relaxed), 3);
        assert_eq!(p.used_count(), 3);
    }
    assert_eq!(drops.load(Ordering::Relaxed), 6);
}

#[test]
fn accepts_mpsc_three_producer_stress() {
    const PRODUCERS: u64 = 3;
    let per = stress_items() / 3;
    let (p, mut c) = mpsc::channel::<u64>(64).unwrap();
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|id| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let mut v = (id << 48) | i;
                    while let Err(back) = p.enqueue(v) {
                        v = back;
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    drop(p);
    let mut next = [0u64; PRODUCERS as usize];
    let mut total = 0;
    let mut rng = Lcg(3);
    let mut out = uninit::<u64, 16>();
    while total < PRODUCERS * per {
        let before = total;
        let mut check = |v: u64| {
            let (id, seq) = ((v >> 48) as usize, v & 0xffff_ffff_ffff);
            // Per producer: no loss, no duplicate, order preserved.
            assert_eq!(seq, next[id], "producer {id}");
            next[id] += 1;
            total += 1;
        };
        let k = (rng.next() % 16 + 1) as usize;
        match rng.next() % 4 {
            0 => {
                if let Some(v) = c.dequeue() {
                    check(v);
                }
            }
            1 => {
                let _ = c.dequeue_bulk_with(k, check);
            }
            2 => c
                .dequeue_burst(&mut out[..k])
                .iter()
                .for_each(|&v| check(v)),
            _ => {
                c.dequeue_burst_with(k, check);
            }
        }
        if total == before {
            std::thread::yield_now();
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(next, [per; PRODUCERS as usize]);
    assert_eq!(c.dequeue(), None);
    assert!(c.is_abandoned());
}
