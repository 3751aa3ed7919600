//! The scale and connection-storm benchmark (issue 16): many client connections to one server
//! reactor with calls in flight, then connect and disconnect storms; prints one report (see
//! `rpcrdma_bench::scale`). Exits 1 when an invariant broke, 2 on bad usage.
//!
//! `cargo run --release -p rpcrdma-bench --bin scale -- [--conns N] [--storm N]
//! [--in-flight N] [--seconds S] [--max-connections N] [--srq DEPTH] [--credits N]` (defaults:
//! 1000 connections, a storm of 1000, 2 calls in flight each, 3 s steady phases, no connection
//! limit, receives per connection, 8 credits per connection).

use std::time::Duration;

use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::scale::{run, ScaleConfig};

const USAGE: &str =
    "usage: scale [--conns N] [--storm N] [--in-flight N] [--seconds S] [--max-connections N] [--srq DEPTH] [--credits N]";

fn main() {
    let flags = Flags::new(
        USAGE,
        &[
            "--conns",
            "--storm",
            "--in-flight",
            "--seconds",
            "--max-connections",
            "--srq",
            "--credits",
        ],
    );
    let mut cfg = ScaleConfig::default();
    if let Some(n) = flags.number("--conns") {
        cfg.conns = n.clamp(1, 20_000) as usize;
    }
    if let Some(n) = flags.number("--storm") {
        cfg.storm = n.min(20_000) as usize;
    }
    if let Some(n) = flags.number("--in-flight") {
        cfg.in_flight = n.clamp(1, 8) as u32;
    }
    if let Some(s) = flags.number("--seconds") {
        cfg.phase = Duration::from_secs(s.max(1));
    }
    if let Some(n) = flags.number("--max-connections") {
        cfg.max_connections = n.min(u64::from(u32::MAX)) as u32;
    }
    if let Some(n) = flags.number("--srq") {
        cfg.srq = Some(n.clamp(1, 1 << 20) as u32);
    }
    if let Some(n) = flags.number("--credits") {
        cfg.credits = n.clamp(1, 128) as u32;
    }
    let report = run(&cfg);
    print!("{report}");
    std::process::exit(if report.passed() { 0 } else { 1 });
}
