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
//! The variants are interleaved (one run or chunk of each in turn, repeated), so that noise from
//! other processes on the shared cores hits every row alike and the ratios stay meaningful. Every
//! measurement runs in fresh threads pinned to the two cores; the main thread stays unpinned.
//!
//! Run: `cargo run --release -p rpcrdma-bench --bin rings`.

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::{cacheline_pingpong, histogram, pin, report, two_cores, Row};
use rpcrdma_poller::mpsc::{self, MpscConsumer, MpscProducer};
use rpcrdma_poller::ring::{self, Consumer, Producer};
use std::mem::MaybeUninit;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

/// Ring size for every queue.
const CAP: usize = 1024;
/// Items per throughput run.
const ITEMS: u64 = 1 << 20;
/// Throughput runs (samples) per row.
const RUNS: usize = 15;
/// Latency chunks per row (interleaved).
const CHUNKS: usize = 20;
/// Round trips per latency chunk.
const CHUNK_ROUND_TRIPS: u64 = 5_000;
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

/// Runs `f` on a fresh thread pinned to the first core (the consumer / timing side).
fn on_first_core<R: Send + 'static>(cores: Cores, f: impl FnOnce() -> R + Send + 'static) -> R {
    thread::spawn(move || {
        pin(cores.map(|c| c.0));
        f()
    })
    .join()
    .expect("measurement thread")
}

/// One throughput run: the producer (second core) sends 0..ITEMS, the consumer (first core)
/// checks the sequence. Returns picoseconds per item.
fn one_run<T: Tx, R: Rx>(cores: Cores, (mut tx, mut rx): (T, R), burst: bool) -> u64 {
    let start = Arc::new(Barrier::new(2));
    let producer = {
        let start = Arc::clone(&start);
        thread::spawn(move || {
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
    on_first_core(cores, move || {
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
    })
}

/// One latency chunk: ping-pong through two queues of one kind; samples are half round trips.
fn latency_chunk<T: Tx, R: Rx>(cores: Cores, make: fn() -> (T, R)) -> Histogram<u64> {
    let (mut ping_tx, mut ping_rx) = make();
    let (mut pong_tx, mut pong_rx) = make();
    let echo = thread::spawn(move || {
        pin(cores.map(|c| c.1));
        for i in 0..CHUNK_ROUND_TRIPS {
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
    on_first_core(cores, move || {
        let mut h = histogram();
        for i in 0..CHUNK_ROUND_TRIPS {
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
    })
}

/// The bare cache-line ping-pong, halved. It runs on a fresh unpinned thread, so that
/// `cacheline_pingpong` sees the full CPU mask and pins its own pair.
fn floor_chunk() -> Histogram<u64> {
    let rtt = thread::spawn(|| cacheline_pingpong(CHUNK_ROUND_TRIPS))
        .join()
        .expect("ping-pong thread");
    let mut out = histogram();
    for v in rtt.iter_recorded() {
        let _ = out.record_n(v.value_iterated_to() / 2, v.count_at_value());
    }
    out
}

type Sample = Box<dyn Fn(Cores) -> u64>;
type Chunk = Box<dyn Fn(Cores) -> Histogram<u64>>;

const USAGE: &str = "usage: rings (no options: SPSC and MPSC ring round trips beside the floor)
  -h, --help      this text
  -V, --version   the program's version
";

fn main() {
    Flags::new(USAGE, &[]);
    // Read the usable cores before anything is pinned (the main thread never is).
    let cores = two_cores();
    match cores {
        Some((a, b)) => println!("consumer on core {}, producer on core {}", a.id, b.id),
        None => println!("fewer than two usable cores: threads run unpinned"),
    }
    // Other processes on these two cores inflate every number: say so up front.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let one: f64 = load
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        println!("load average (1 min) before the run: {one:.2}");
        if one > 0.5 {
            println!("WARNING: the machine is busy; expect noisy numbers (ratios suffer least)");
        }
    }

    let variants: Vec<(&str, Sample)> = vec![
        ("spsc ring, single", Box::new(|c| one_run(c, spsc(), false))),
        (
            "spsc ring, burst 32",
            Box::new(|c| one_run(c, spsc(), true)),
        ),
        (
            "crossbeam ArrayQueue, single",
            Box::new(|c| one_run(c, crossbeam(), false)),
        ),
        (
            "crossbeam ArrayQueue, 32 singles",
            Box::new(|c| one_run(c, crossbeam(), true)),
        ),
        (
            "mpsc ring (1 producer), single",
            Box::new(|c| one_run(c, mpsc_ring(), false)),
        ),
        (
            "mpsc ring (1 producer), deq burst 32",
            Box::new(|c| one_run(c, mpsc_ring(), true)),
        ),
    ];
    // One warm-up run each, not recorded; then the runs, interleaved.
    for (_, f) in &variants {
        f(cores);
    }
    let mut hists: Vec<Histogram<u64>> = variants.iter().map(|_| histogram()).collect();
    for _ in 0..RUNS {
        for (h, (_, f)) in hists.iter_mut().zip(&variants) {
            h.saturating_record(f(cores));
        }
    }
    let rows: Vec<Row> = variants
        .iter()
        .zip(hists)
        .map(|((name, _), h)| Row::new(*name, h))
        .collect();
    report(
        &format!(
            "Throughput, {ITEMS} u64 items per run, {RUNS} interleaved runs: PICOSECONDS per item \
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

    let chunks: Vec<(&str, Chunk)> = vec![
        (
            "cache-line ping-pong / 2 (floor)",
            Box::new(|_| floor_chunk()),
        ),
        ("spsc ring", Box::new(|c| latency_chunk(c, spsc))),
        (
            "crossbeam ArrayQueue",
            Box::new(|c| latency_chunk(c, crossbeam)),
        ),
        ("mpsc ring", Box::new(|c| latency_chunk(c, mpsc_ring))),
    ];
    let mut hists: Vec<Histogram<u64>> = chunks.iter().map(|_| histogram()).collect();
    for _ in 0..CHUNKS {
        for (h, (_, f)) in hists.iter_mut().zip(&chunks) {
            h.add(f(cores)).expect("same histogram bounds");
        }
    }
    let rows: Vec<Row> = chunks
        .iter()
        .zip(hists)
        .map(|((name, _), h)| Row::new(*name, h))
        .collect();
    report(
        &format!(
            "One-way latency (half round trip, ns), {CHUNKS} interleaved chunks of \
             {CHUNK_ROUND_TRIPS} round trips, ratio to the floor"
        ),
        &rows,
    );
}
