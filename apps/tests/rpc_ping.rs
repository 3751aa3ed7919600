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
    assert!(
        s.contains("in use          : RPC-over-RDMA version 1, inline calls 4096 / replies 4096, remote invalidation on"),
        "{s}"
    );
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

/// Runs a loopback ping with `args` on `port`; returns stdout (status 0 required).
fn loopback(port: &str, args: &[&str]) -> String {
    let out = Command::new(bin())
        .args([
            "--loopback",
            "-c",
            "2",
            "--backoff",
            "shared_cores",
            "-p",
            port,
        ])
        .args(args)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s
}

#[test]
fn accepts_chunk_shapes_as_announced_and_seen_on_the_wire() {
    // Default: inline call, reply buffers small enough that no Reply chunk is offered.
    let s = loopback("20052", &[]);
    assert!(
        s.contains(
            " call            : 40 octets of RPC message (0 of arguments): inline, RDMA_MSG"
        ),
        "{s}"
    );
    assert!(s.contains(" reply chunk     : not offered"), "{s}");
    assert!(
        s.contains("calls 2 RDMA_MSG, 0 RDMA_NOMSG + Position-Zero Read chunk (last 0 octets), 0 offering a Reply chunk; replies 2 RDMA_MSG, 0 RDMA_NOMSG"),
        "{s}"
    );
    // Arguments over the 1024-octet send size we advertise: a long call; replies stay inline.
    let s = loopback("20053", &["--inline-send", "1024", "--arg-size", "2000"]);
    assert!(
        s.contains("sent   RFC 8797 v1: max send 1024, max receive 4096, R=1"),
        "{s}"
    );
    assert!(
        s.contains(": long call, RDMA_NOMSG + Position-Zero Read chunk (28-octet header"),
        "{s}"
    );
    assert!(
        s.contains("calls 0 RDMA_MSG, 2 RDMA_NOMSG + Position-Zero Read chunk (last 2040 octets), 0 offering a Reply chunk"),
        "{s}"
    );
    // --reply-chunk: every call offers one (our server still answers a NULL call inline).
    let s = loopback("20054", &["--reply-chunk"]);
    assert!(s.contains(" reply chunk     : offered (4096 octets"), "{s}");
    assert!(
        s.contains("calls 2 RDMA_MSG, 0 RDMA_NOMSG + Position-Zero Read chunk (last 0 octets), 2 offering a Reply chunk; replies 2 RDMA_MSG"),
        "{s}"
    );
    // Arguments larger than the buffers' default: both (the buffers grow past the threshold).
    let s = loopback("20055", &["--arg-size", "9000"]);
    assert!(s.contains(" 2 calls, 2 replies, 0 failed"), "{s}");
    assert!(
        s.contains("calls 0 RDMA_MSG, 2 RDMA_NOMSG + Position-Zero Read chunk (last 9040 octets), 2 offering a Reply chunk"),
        "{s}"
    );
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
        &["--loopback", "--rpcrdma-version", "3"],
        &["--loopback", "-c", "0"],
        &["--bogus"],
        &["a", "b"],
        &["--loopback", "--arg-size", "2000000"],
        &["--loopback", "--inline-send", "512"],
    ] {
        let out = Command::new(bin()).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let out = Command::new(bin())
        .args([
            "--loopback",
            "--rpcrdma-version",
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

#[test]
fn accepts_version_two_ping_and_reports_what_is_in_use() {
    // The loopback server answers Version Two: the connection stays in Version Two.
    let s = loopback("20053", &["--rpcrdma-version", "2"]);
    assert!(
        s.contains("in use          : RPC-over-RDMA version 2, inline calls 4096 / replies 4096"),
        "{s}"
    );
    assert!(!s.contains("fell back"), "{s}");
    assert!(s.contains(" 2 calls, 2 replies, 0 failed"), "{s}");
}
