//! Shared pieces of the rpcrdma benchmarks: pinned thread pairs, latency histograms, the
//! cross-core cache-line ping-pong floor, a side-by-side report printed as ratios, and a tiny
//! SVG line-plot writer ([`svg`]) for the latency-vs-size and the
//! latency-percentile plots ([`percentiles`]).
#![warn(missing_docs)]

pub mod cli;
pub mod cost;
pub mod percentiles;
pub mod scale;
pub mod soak;
pub mod soft_rtt;
pub mod svg;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

/// The cores the benchmark pins its two threads to (the first two the process may use), or
/// `None` when fewer than two are available (then threads run unpinned).
///
/// `core_affinity::get_core_ids` reads the *calling thread's* mask, so the answer is taken once,
/// on first use, and remembered: a later call from an already pinned thread would otherwise see
/// one core and put both sides of a measurement on it.
pub fn two_cores() -> Option<(core_affinity::CoreId, core_affinity::CoreId)> {
    static CORES: std::sync::OnceLock<Option<(core_affinity::CoreId, core_affinity::CoreId)>> =
        std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        let ids = core_affinity::get_core_ids()?;
        if ids.len() < 2 {
            return None;
        }
        Some((ids[0], ids[1]))
    })
}

/// Pins the current thread to `core` when given; returns whether pinning happened.
pub fn pin(core: Option<core_affinity::CoreId>) -> bool {
    core.map(core_affinity::set_for_current).unwrap_or(false)
}

/// A new latency histogram in nanoseconds (1 ns .. 10 s, 3 significant figures).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static histogram bounds are valid")
}

/// One row of a side-by-side report.
pub struct Row {
    /// What was measured.
    pub name: String,
    /// Round-trip (or per-operation) latencies in nanoseconds.
    pub hist: Histogram<u64>,
}

impl Row {
    /// Builds a row from a name and a histogram.
    pub fn new(name: impl Into<String>, hist: Histogram<u64>) -> Row {
        Row {
            name: name.into(),
            hist,
        }
    }
}

/// Prints rows with p50 / p99 / mean and the ratio of each p50 to the first row's p50 (the
/// baseline, normally the physical floor).
pub fn report(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "measurement", "count", "p50 ns", "p99 ns", "mean ns", "p50 / base"
    );
    let base = rows
        .first()
        .map(|r| r.hist.value_at_quantile(0.5).max(1))
        .unwrap_or(1);
    for r in rows {
        let p50 = r.hist.value_at_quantile(0.5);
        println!(
            "{:<44} {:>10} {:>10} {:>10} {:>10.1} {:>12.2}",
            r.name,
            r.hist.len(),
            p50,
            r.hist.value_at_quantile(0.99),
            r.hist.mean(),
            p50 as f64 / base as f64
        );
    }
}

/// Bare cross-core cache-line ping-pong: thread A writes `i` into line 1 and waits for B to echo
/// it into line 2. Each sample is one round trip: the physical floor for any cross-core handoff.
pub fn cacheline_pingpong(iters: u64) -> Histogram<u64> {
    let lines = Arc::new((
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ));
    let cores = two_cores();
    let echo = {
        let lines = Arc::clone(&lines);
        std::thread::spawn(move || {
            pin(cores.map(|c| c.1));
            for i in 1..=iters {
                // Acquire pairs with the Release store of `ping` by the timing thread.
                while lines.0.load(Ordering::Acquire) != i {
                    core::hint::spin_loop();
                }
                // Release pairs with the Acquire load of `pong` by the timing thread.
                lines.1.store(i, Ordering::Release);
            }
        })
    };
    pin(cores.map(|c| c.0));
    let mut h = histogram();
    for i in 1..=iters {
        let t = Instant::now();
        // Release pairs with the Acquire load in the echo thread.
        lines.0.store(i, Ordering::Release);
        // Acquire pairs with the Release store in the echo thread.
        while lines.1.load(Ordering::Acquire) != i {
            core::hint::spin_loop();
        }
        h.saturating_record(t.elapsed().as_nanos() as u64);
    }
    echo.join().expect("echo thread");
    h
}
