//! `rpcrdma-ping`: a loopback run reports the negotiated values and round trips and exits 0;
//! an address nobody listens on fails cleanly with status 1; usage errors exit 2.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rpcrdma-ping"))
}

#[test]
fn accepts_loopback_ping() {
    let out = Command::new(bin())
        .args([
            "--loopback",
            "-c",
            "4",
            "--credits",
            "16",
            "--backoff",
            "shared_cores",
        ])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        s.contains("RPCRDMA-PING 10.0.0.2:20049: program 100003 version 3"),
        "{s}"
    );
    assert!(
        s.contains("private data    : server RFC 8797 v1: max send 4096, max receive 4096, R=1"),
        "{s}"
    );
    assert!(
        s.contains("negotiated      : RPC-over-RDMA version 1, inline calls 4096 / replies 4096, remote invalidation on"),
        "{s}"
    );
    assert!(s.contains("credits         : asked 16, granted 16"), "{s}");
    assert!(s.contains("rdma_vers 1, rdma_credit 16"), "{s}");
    assert_eq!(
        s.matches(" NULL reply from 10.0.0.2:20049: seq ").count(),
        4,
        "{s}"
    );
    assert!(s.contains(" 4 calls, 4 replies, 0 failed, 0% lost"), "{s}");
    let l = s
        .lines()
        .find(|l| l.starts_with(" rtt min/avg/max/p50/p99 = "))
        .expect("rtt line");
    let v: Vec<f64> = l[" rtt min/avg/max/p50/p99 = ".len()..]
        .trim_end_matches(" us")
        .split('/')
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(v.len(), 5);
    assert!(
        v[0] > 0.0 && v[0] <= v[3] && v[3] <= v[4] && v[4] <= v[2],
        "{v:?}"
    );
}

#[test]
fn accepts_loopback_other_program_and_small_inline() {
    let out = Command::new(bin())
        .args(["--loopback", "-q", "-c", "2", "-P", "100005", "-v", "1"])
        .args([
            "--inline-size",
            "1500",
            "--no-remote-invalidate",
            "-p",
            "20050",
        ])
        .args(["--backoff", "shared_cores"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}");
    // 1500 is advertised as 1024 (RFC 8797 encodes multiples of 1024).
    assert!(
        s.contains("sent   RFC 8797 v1: max send 1024, max receive 1024, R=0"),
        "{s}"
    );
    assert!(s.contains("remote invalidation off"), "{s}");
    assert!(s.contains(" 2 calls, 2 replies, 0 failed"), "{s}");
}

#[test]
fn rejects_address_without_server() {
    let t = Instant::now();
    let out = Command::new(bin())
        .args(["10.0.0.2", "-t", "2000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no answer from 10.0.0.2:20049"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn rejects_usage_errors() {
    for bad in [
        &[][..],
        &["--loopback", "--version", "3"],
        &["--loopback", "-c", "0"],
        &["--bogus"],
        &["a", "b"],
    ] {
        let out = Command::new(bin()).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let out = Command::new(bin())
        .args([
            "--loopback",
            "--version",
            "2",
            "--inline-size",
            "1024",
            "-p",
            "20051",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an inline size of at least 4096"));
}
