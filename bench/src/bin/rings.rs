//! Rings side by side: our SPSC ring, crossbeam's `ArrayQueue` (MPMC) and our MPSC ring, with the
//! producer and the consumer pinned to the two cores.
//!
//! - Throughput: 2^20 `u64` items per run, single-item and burst-of-32 enqueue/dequeue; each run
//!   gives one sample, the per-item cost in picoseconds (ps, so that sub-ns differences survive the
//!   integer histogram). `ArrayQueue` has no burst calls: its "burst" rows loop over single calls;
//!   the MPSC ring has burst dequeue only.
//! - One-way latency: ping-pong of one item through two queues of the same kind; each sample is
//!   half a round trip (ns), next to the bare cache-line ping-pong floor (also halved).
//!
//! Run: `cargo run --release -p rpcrdma-bench --bin rings`.

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use rpcrdma_bench::{cacheline_pingpong, histogram, pin, report, two_cores, Row};
use rpcrdma_poller::mpsc::{self, MpscConsumer, MpscProducer};
use rpcrdma_poller::ring::{self, Consumer, Producer};
use std::mem::MaybeUninit;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Ring size for every queue.
const CAP: usize = 1024;
/// Items per throughput run.
const ITEMS: u64 = 1 << 20;
/// Throughput runs (samples) per row.
const RUNS: usize = 15;
/// Round trips per latency row.
const ROUND_TRIPS: u64 = 100_000;
/// Burst size.
const BURST: usize = 32;

type Cores = Option<(core_affinity::CoreId, core_affinity::CoreId)>;

/// The producing side of a queue under test.
trait Tx: Send + 'static {
    fn push(&mut self, v: u64) -> bool;
    fn push_burst(&mut self, v: &[u64]) -> usize;
}

/// The consuming side of a queue under test.
trait Rx: Send + 'static {
    fn pop(&mut self) -> Option<u64>;
    fn pop_burst<'a>(&mut self, out: &'a mut [MaybeUninit<u64>]) -> &'a [u64];
}

impl Tx for Producer<u64> {
    #[inline]
    fn push(&mut self, v: u64) -> bool {
        self.enqueue(v).is_ok()
    }
    #[inline]
    fn push_burst(&mut self, v: &[u64]) -> usize {
        self.enqueue_burst_slice(v)
    }
}

impl Rx for Consumer<u64> {
    #[inline]
    fn pop(&mut self) -> Option<u64> {
        self.dequeue()
    }
    #[inline]
    fn pop_burst<'a>(&mut self, out: &'a mut [MaybeUninit<u64>]) -> &'a [u64] {
        self.dequeue_burst(out)
    }
}

/// crossbeam's bounded MPMC queue (shared by both sides).
struct Cb(Arc<ArrayQueue<u64>>);

impl Tx for Cb {
    #[inline]
    fn push(&mut self, v: u64) -> bool {
        self.0.push(v).is_ok()
    }
    #[inline]
    fn push_burst(&mut self, v: &[u64]) -> usize {
        v.iter().take_while(|&&x| self.0.push(x).is_ok()).count()
    }
}

impl Rx for Cb {
    #[inline]
    fn pop(&mut self) -> Option<u64> {
        self.0.pop()
    }
    #[inline]
    fn pop_burst<'a>(&mut self, out: &'a mut [MaybeUninit<u64>]) -> &'a [u64] {
        let mut n = 0;
        while n < out.len() {
            match self.0.pop() {
                Some(v) => {
                    out[n].write(v);
                    n += 1;
                }
                None => break,
            }
        }
        // SAFETY: the first `n` elements were written above.
        unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<u64>(), n) }
    }
}

impl Tx for MpscProducer<u64> {
    #[inline]
    fn push(&mut self, v: u64) -> bool {
        self.enqueue(v).is_ok()
    }
    #[inline]
    fn push_burst(&mut self, v: &[u64]) -> usize {
        v.iter().take_while(|&&x| self.enqueue(x).is_ok()).count()
    }
}

impl Rx for MpscConsumer<u64> {
    #[inline]
    fn pop(&mut self) -> Option<u64> {
        self.dequeue()
    }
    #[inline]
    fn pop_burst<'a>(&mut self, out: &'a mut [MaybeUninit<u64>]) -> &'a [u64] {
        self.dequeue_burst(out)
    }
}

fn spsc() -> (Producer<u64>, Consumer<u64>) {
    ring::channel(CAP).expect("power-of-two capacity")
}

fn crossbeam() -> (Cb, Cb) {
    let q = Arc::new(ArrayQueue::new(CAP));
    (Cb(Arc::clone(&q)), Cb(q))
}

fn mpsc_ring() -> (MpscProducer<u64>, MpscConsumer<u64>) {
    mpsc::channel(CAP).expect("power-of-two capacity")
}

/// One throughput run: the producer (on core 2) sends 0..ITEMS, the consumer (this thread, on
/// core 1) checks the sequence. Returns picoseconds per item.
fn one_run<T: Tx, R: Rx>(cores: Cores, (mut tx, mut rx): (T, R), burst: bool) -> u64 {
    let start = Arc::new(Barrier::new(2));
    let producer = {
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            pin(cores.map(|c| c.1));
            start.wait();
            let mut next = 0u64;
            let mut buf = [0u64; BURST];
            while next < ITEMS {
                if burst {
                    let k = (ITEMS - next).min(BURST as u64) as usize;
                    for (i, b) in buf[..k].iter_mut().enumerate() {
                        *b = next + i as u64;
                    }
                    let n = tx.push_burst(&buf[..k]);
                    if n == 0 {
                        core::hint::spin_loop();
                    }
                    next += n as u64;
                } else if tx.push(next) {
                    next += 1;
                } else {
                    core::hint::spin_loop();
                }
            }
        })
    };
    start.wait();
    let t = Instant::now();
    let mut expect = 0u64;
    let mut out = [MaybeUninit::<u64>::uninit(); BURST];
    while expect < ITEMS {
        if burst {
            let got = rx.pop_burst(&mut out);
            if got.is_empty() {
                core::hint::spin_loop();
            }
            for &v in got {
                assert_eq!(v, expect, "sequence broken");
                expect += 1;
            }
        } else if let Some(v) = rx.pop() {
            assert_eq!(v, expect, "sequence broken");
            expect += 1;
        } else {
            core::hint::spin_loop();
        }
    }
    let ns = t.elapsed().as_nanos() as u64;
    producer.join().expect("producer thread");
    ns.saturating_mul(1000) / ITEMS
}

fn throughput<T: Tx, R: Rx>(cores: Cores, make: fn() -> (T, R), burst: bool) -> Histogram<u64> {
    // One warm-up run, not recorded.
    one_run(cores, make(), burst);
    let mut h = histogram();
    for _ in 0..RUNS {
        h.saturating_record(one_run(cores, make(), burst));
    }
    h
}

/// Ping-pong through two queues of one kind; samples are half round trips (ns).
fn latency<T: Tx, R: Rx>(cores: Cores, make: fn() -> (T, R)) -> Histogram<u64> {
    let (mut ping_tx, mut ping_rx) = make();
    let (mut pong_tx, mut pong_rx) = make();
    let echo = std::thread::spawn(move || {
        pin(cores.map(|c| c.1));
        for i in 0..ROUND_TRIPS {
            let v = loop {
                if let Some(v) = ping_rx.pop() {
                    break v;
                }
                core::hint::spin_loop();
            };
            assert_eq!(v, i, "sequence broken");
            while !pong_tx.push(v) {
                core::hint::spin_loop();
            }
        }
    });
    let mut h = histogram();
    for i in 0..ROUND_TRIPS {
        let t = Instant::now();
        while !ping_tx.push(i) {
            core::hint::spin_loop();
        }
        let v = loop {
            if let Some(v) = pong_rx.pop() {
                break v;
            }
            core::hint::spin_loop();
        };
        h.saturating_record(t.elapsed().as_nanos() as u64 / 2);
        assert_eq!(v, i, "sequence broken");
    }
    echo.join().expect("echo thread");
    h
}

fn halved(h: &Histogram<u64>) -> Histogram<u64> {
    let mut out = histogram();
    for v in h.iter_recorded() {
        let _ = out.record_n(v.value_iterated_to() / 2, v.count_at_value());
    }
    out
}

fn main() {
    // Read the usable cores before anything is pinned.
    let cores = two_cores();
    match cores {
        Some((a, b)) => println!("consumer on core {}, producer on core {}", a.id, b.id),
        None => println!("fewer than two usable cores: threads run unpinned"),
    }
    // Other processes on these two cores make every number here meaningless: say so up front.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let one: f64 = load
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        println!("load average (1 min) before the run: {one:.2}");
        if one > 0.5 {
            println!("WARNING: the machine is busy; expect noisy, inflated numbers");
        }
    }
    let floor = halved(&cacheline_pingpong(ROUND_TRIPS));
    pin(cores.map(|c| c.0));

    let rows = vec![
        Row::new("spsc ring, single", throughput(cores, spsc, false)),
        Row::new("spsc ring, burst 32", throughput(cores, spsc, true)),
        Row::new(
            "crossbeam ArrayQueue, single",
            throughput(cores, crossbeam, false),
        ),
        Row::new(
            "crossbeam ArrayQueue, 32 singles",
            throughput(cores, crossbeam, true),
        ),
        Row::new(
            "mpsc ring (1 producer), single",
            throughput(cores, mpsc_ring, false),
        ),
        Row::new(
            "mpsc ring (1 producer), deq burst 32",
            throughput(cores, mpsc_ring, true),
        ),
    ];
    report(
        &format!(
            "Throughput, {ITEMS} u64 items per run, {RUNS} runs: PICOSECONDS per item \
             (columns say ns; read ps), ratio to the spsc single row"
        ),
        &rows,
    );
    println!("\nns per item (p50 of runs):");
    for r in &rows {
        println!(
            "  {:<40} {:>7.2}",
            r.name,
            r.hist.value_at_quantile(0.5) as f64 / 1000.0
        );
    }

    let rows = vec![
        Row::new("cache-line ping-pong / 2 (floor)", floor),
        Row::new("spsc ring", latency(cores, spsc)),
        Row::new("crossbeam ArrayQueue", latency(cores, crossbeam)),
        Row::new("mpsc ring", latency(cores, mpsc_ring)),
    ];
    report(
        &format!(
            "One-way latency (half round trip, ns), {ROUND_TRIPS} round trips, ratio to the floor"
        ),
        &rows,
    );
}
