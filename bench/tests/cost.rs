//! The cost benchmark's code path under `cargo test`: the `cost` binary's native mode runs 50
//! NULL and 50 DDP RPCs (4 KiB Read chunk argument, 4 KiB Write chunk result) on one reactor
//! and checks every reply, and 50 bare SEND round trips on one thread; the callgrind parser and the attribution rule on a hand-written
//! callgrind file (scripts/cost.sh runs the real thing under valgrind).

use std::process::Command;

use rpcrdma_bench::cost::profile::{budget_value, Profile, BUCKETS};

fn run_kind(kind: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cost"))
        .args(["run", "--kind", kind, "--warmup", "10", "--n", "50"])
        .output()
        .expect("cost binary runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{kind}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn accepts_native_null_ddp_and_send_runs_with_right_replies() {
    for kind in ["null", "ddp", "send"] {
        let text = run_kind(kind);
        assert!(
            text.contains("60 replies right, 0 wrong or failed"),
            "{kind}: {text}"
        );
    }
}

#[test]
fn accepts_native_null_run_with_32_calls_in_flight() {
    let out = Command::new(env!("CARGO_BIN_EXE_cost"))
        .args(["run", "--kind", "null", "--warmup", "40", "--n", "200"])
        .args(["--window", "32"])
        .output()
        .expect("cost binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("window 32: 240 replies right, 0 wrong or failed"),
        "{text}"
    );
}

#[test]
fn rejects_unknown_kind() {
    let out = Command::new(env!("CARGO_BIN_EXE_cost"))
        .args(["run", "--kind", "bogus", "--n", "1"])
        .output()
        .expect("cost binary runs");
    assert_eq!(out.status.code(), Some(2));
}

/// A callgrind file in the format of the Callgrind manual: name compression, a call edge with
/// its inclusive cost, a caller-less function and a libc function reached from two sides.
const SAMPLE: &str = "\
# callgrind format
version: 1
positions: line
events: Ir
summary: 1000
fl=(1) a.rs
fn=(1) <rpcrdma_poller::runtime::Node<P> as rpcrdma_poller::reactor::Poller>::poll
10 100
cfn=(2) rpcrdma_poller::client::ClientConn<P>::service
calls=1 20
11 400
cfn=(3) rpcrdma_poller::server::ServerConn<P>::on_call
calls=1 30
12 500
fn=(2)
20 100
cfn=(4) __memcpy_avx_unaligned_erms
calls=2 0
+1 300
fn=(3)
30 400
cfn=(4)
calls=1 0
31 100
fn=(4)
0 400
totals: 1000
";

#[test]
fn accepts_sample_profile_and_splits_by_anchor_and_caller() {
    let p = Profile::parse(SAMPLE).expect("parses");
    assert_eq!(p.total, 1000);
    assert_eq!(p.self_cost.iter().sum::<u64>(), 1000);
    let s = p.split();
    let b = |name: &str| s.buckets[BUCKETS.iter().position(|x| *x == name).unwrap()];
    // memcpy (400 self) is called for 300 by the client and 100 by the server: 3:1.
    assert!((b("client") - 400.0).abs() < 1e-6, "{:?}", s.buckets);
    assert!((b("server") - 500.0).abs() < 1e-6, "{:?}", s.buckets);
    assert!((b("runtime") - 100.0).abs() < 1e-6, "{:?}", s.buckets);
    let poll = s.functions.iter().find(|f| f.0.contains("Node")).unwrap();
    assert_eq!((poll.1, poll.2), (100, 1000));
}

#[test]
fn accepts_budget_lines_and_the_checked_in_budget() {
    assert_eq!(
        budget_value("# x\nnull = 21_300 # c\nddp=5\n", "null"),
        Some(21300)
    );
    assert_eq!(budget_value("ddp=5\n", "null"), None);
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/cost-budget.toml"))
        .expect("budget file");
    for key in ["null", "ddp", "send", "tolerance_percent"] {
        assert!(budget_value(&text, key).is_some(), "{key}");
    }
}
