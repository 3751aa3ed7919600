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

use rpcrdma_bench::cli::Flags;
use rpcrdma_bench::soak::{run, SoakConfig};

const USAGE: &str = "usage: soak [--seconds N] [--seed S] [--clients N]
  --seconds N     how long, 1..=86400
  --seed S        the fault schedule's seed
  --clients N     clients, 1..=64
  -h, --help      this text
  -V, --version   the program's version
";

fn main() {
    let flags = Flags::new(USAGE, &["--seconds", "--seed", "--clients"]);
    let mut cfg = SoakConfig::default();
    if let Some(s) = flags.number("--seconds", 1, 86_400) {
        cfg.duration = Duration::from_secs(s);
    }
    if let Some(s) = flags.number("--seed", 0, u64::MAX) {
        cfg.seed = s;
    }
    if let Some(n) = flags.number("--clients", 1, 64) {
        cfg.clients = n as usize;
    }
    let report = run(&cfg);
    print!("{report}");
    std::process::exit(if report.passed() { 0 } else { 1 });
}
