//! The scale and connection-storm benchmark (issue 16): many client connections to one server
//! reactor with calls in flight, then connect and disconnect storms; prints one report (see
//! `rpcrdma_bench::scale`). Exits 1 when an invariant broke, 2 on bad usage.
//!
//! `cargo run --release -p rpcrdma-bench --bin scale -- [--conns N] [--storm N]
//! [--in-flight N] [--seconds S] [--max-connections N] [--srq DEPTH] [--credits N]` (defaults:
//! 1000 connections, a storm of 1000, 2 calls in flight each, 3 s steady phases, no connection
//! limit, receives per connection, 8 credits per connection).

use std::time::Duration;

use rpcrdma_bench::scale::{run, ScaleConfig};

const USAGE: &str =
    "usage: scale [--conns N] [--storm N] [--in-flight N] [--seconds S] [--max-connections N] [--srq DEPTH] [--credits N]";

fn value(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).and_then(|v| v.parse().ok()) {
        Some(v) => Some(v),
        None => {
            eprintln!("{USAGE} ({name} needs a number)");
            std::process::exit(2)
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for a in args.iter().filter(|a| a.starts_with("--")) {
        if !matches!(
            a.as_str(),
            "--conns"
                | "--storm"
                | "--in-flight"
                | "--seconds"
                | "--max-connections"
                | "--srq"
                | "--credits"
        ) {
            eprintln!("{USAGE} (unknown option {a})");
            std::process::exit(2);
        }
    }
    let mut cfg = ScaleConfig::default();
    if let Some(n) = value(&args, "--conns") {
        cfg.conns = n.clamp(1, 20_000) as usize;
    }
    if let Some(n) = value(&args, "--storm") {
        cfg.storm = n.min(20_000) as usize;
    }
    if let Some(n) = value(&args, "--in-flight") {
        cfg.in_flight = n.clamp(1, 8) as u32;
    }
    if let Some(s) = value(&args, "--seconds") {
        cfg.phase = Duration::from_secs(s.max(1));
    }
    if let Some(n) = value(&args, "--max-connections") {
        cfg.max_connections = n.min(u64::from(u32::MAX)) as u32;
    }
    if let Some(n) = value(&args, "--srq") {
        cfg.srq = Some(n.clamp(1, 1 << 20) as u32);
    }
    if let Some(n) = value(&args, "--credits") {
        cfg.credits = n.clamp(1, 128) as u32;
    }
    let report = run(&cfg);
    print!("{report}");
    std::process::exit(if report.passed() { 0 } else { 1 });
}
