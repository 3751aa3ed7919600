//! The scale benchmark at a reduced size (issue 16: "the scale test passes in CI at a reduced
//! size"): 64 established connections to one server reactor with calls in flight (inline and
//! DDP), a storm of 64 connects at once (half of them over the server's `max_connections`,
//! refused with `ConnectionLimit`) and the disconnects of the admitted ones at once; every
//! call completes exactly once with the right octets, the storms settle, and the server's
//! connection count comes back.

use std::time::Duration;

use rpcrdma_bench::scale::{run, ScaleConfig};

/// 64 established connections, a storm of 64, 2 calls in flight each, short phases.
fn reduced(credits: u32, max_connections: u32, srq: Option<u32>) -> ScaleConfig {
    ScaleConfig {
        conns: 64,
        storm: 64,
        in_flight: 2,
        ddp_every: 3,
        phase: Duration::from_millis(400),
        storm_limit: Duration::from_secs(60),
        credits,
        max_connections,
        srq,
    }
}

#[test]
fn accepts_many_connections_and_storms_with_every_call_exactly_once() {
    // Half the storm over the server's limit: refused with a reason, the rest served.
    let cfg = reduced(8, 96, None);
    let r = run(&cfg);
    eprint!("{r}");
    assert!(r.passed(), "{r}");
    assert_eq!(r.server_conns, (64, 96, 64), "{r}");
    assert_eq!((r.storm_connected, r.storm_refused), (32, 32), "{r}");
    // Established connections kept calling in every phase.
    for p in &r.phases {
        assert!(p.calls > 0, "no call completed in phase {}: {r}", p.name);
    }
    let (issued, ok, failed) = r.calls;
    assert_eq!((issued, failed), (ok, 0), "{r}");
    // Receive memory grows with the connections when each posts its own.
    assert!(r.recv_bytes.1 > r.recv_bytes.0, "{r}");
}

/// The same with the server's receives on a shared receive queue: receive memory is the
/// queue's, the same with 64 connections as with 128 at the storm's peak (each connection
/// reserves its grant plus its backward receives in the queue; a connect the queue cannot back
/// one credit for would be refused with a reason).
#[test]
fn accepts_many_connections_and_storms_on_a_shared_receive_queue() {
    let cfg = reduced(2, 0, Some(1024));
    let r = run(&cfg);
    eprint!("{r}");
    assert!(r.passed(), "{r}");
    assert_eq!(r.recv_bytes.0, r.recv_bytes.1, "{r}");
    assert!(r.recv_bytes.0 >= 1024 * 4096, "{r}");
    assert_eq!(r.server_conns, (64, 128, 64), "{r}");
    for p in &r.phases {
        assert!(p.calls > 0, "no call completed in phase {}: {r}", p.name);
    }
}
