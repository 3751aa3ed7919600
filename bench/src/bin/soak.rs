//! The fault-injection soak (issue 13 §3): many clients across two reactors against two
//! servers, mixed inline / DDP / long / backward calls with checksummed payloads, while the
//! soft provider drops connections, fails and delays completions, makes servers unreachable
//! and worker rings fill. Prints one summary; exits 1 when an invariant was violated (the
//! list and the code that checks each are in `rpcrdma_bench::soak`'s module doc), 2 on bad
//! usage.
//!
//! `cargo run --release -p rpcrdma-bench --bin soak -- [--seconds N] [--seed S] [--clients N]`
//! (defaults: 120 s, seed 1, 12 clients). CI (`.ci/run`) runs it for 120 s.

use std::time::Duration;

use rpcrdma_bench::soak::{run, SoakConfig};

const USAGE: &str = "usage: soak [--seconds N] [--seed S] [--clients N]";

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
        if !matches!(a.as_str(), "--seconds" | "--seed" | "--clients") {
            eprintln!("{USAGE} (unknown option {a})");
            std::process::exit(2);
        }
    }
    let mut cfg = SoakConfig::default();
    if let Some(s) = value(&args, "--seconds") {
        cfg.duration = Duration::from_secs(s.max(1));
    }
    if let Some(s) = value(&args, "--seed") {
        cfg.seed = s;
    }
    if let Some(n) = value(&args, "--clients") {
        if !(1..=64).contains(&n) {
            eprintln!("{USAGE} (--clients must be 1..=64)");
            std::process::exit(2);
        }
        cfg.clients = n as usize;
    }
    let report = run(&cfg);
    print!("{report}");
    std::process::exit(if report.passed() { 0 } else { 1 });
}
