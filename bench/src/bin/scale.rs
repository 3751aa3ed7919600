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

const USAGE: &str = "usage: scale [--conns N] [--storm N] [--in-flight N] [--seconds S]
             [--max-connections N] [--srq DEPTH] [--credits N]
  --conns N            connections, 1..=20000
  --storm N            connect/disconnect storm size, 0..=20000
  --in-flight N        calls in flight per connection, 1..=8
  --seconds S          each phase, 1..=86400
  --max-connections N  the server's limit, 0..=4294967295
  --srq DEPTH          shared receive queue depth, 1..=1048576
  --credits N          credits per connection, 1..=128
  -h, --help           this text
  -V, --version        the program's version
";

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
    if let Some(n) = flags.number("--conns", 1, 20_000) {
        cfg.conns = n as usize;
    }
    if let Some(n) = flags.number("--storm", 0, 20_000) {
        cfg.storm = n as usize;
    }
    if let Some(n) = flags.number("--in-flight", 1, 8) {
        cfg.in_flight = n as u32;
    }
    if let Some(s) = flags.number("--seconds", 1, 86_400) {
        cfg.phase = Duration::from_secs(s);
    }
    if let Some(n) = flags.number("--max-connections", 0, u64::from(u32::MAX)) {
        cfg.max_connections = n as u32;
    }
    if let Some(n) = flags.number("--srq", 1, 1 << 20) {
        cfg.srq = Some(n as u32);
    }
    if let Some(n) = flags.number("--credits", 1, 128) {
        cfg.credits = n as u32;
    }
    let report = run(&cfg);
    print!("{report}");
    std::process::exit(if report.passed() { 0 } else { 1 });
}
