//! `rpcrdma-nfs-check` against a server whose connection is dead, on the user-space iWARP
//! provider over loopback TCP: the test is the server, at the verbs level, and the check runs
//! as its own process (`--provider iwarp --parts small`).
//!
//! - a server that accepts the connection, posts its receives and never answers: the first
//!   call (NULL) times out with nothing received, and every later call of that client must
//!   fail at once saying so, not wait out its own `--timeout`;
//! - a server that accepts, takes the first call and disconnects: every later call must fail
//!   at once saying the connection was lost.
//!
//! Either way the run ends with `FAIL` lines, the `nfs-check: 0 passed, N failed` summary and
//! exit status 1. The checks count the calls that waited out the timeout (one at most), never
//! the time taken.

mod procs;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use procs::run_to_end;
use rpcrdma_engine::verbs::conformance::Buf;
use rpcrdma_engine::verbs::iwarp::IwarpProvider;
use rpcrdma_engine::verbs::{
    Access, Completion, CompletionQueue, ConnRequest, Device, Listener, Provider, QpInit,
    QpOptions, QueuePair, RecvWr,
};

type P = IwarpProvider;
const CHECK: &str = env!("CARGO_BIN_EXE_rpcrdma-nfs-check");
/// Receives the server posts (more than the client's credits: no Send finds none).
const RECVS: u64 = 32;
const RECV_LEN: usize = 4096;

/// What the server does with the connection once accepted.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    /// Takes every call and answers none.
    Silent,
    /// Disconnects when the first call arrives.
    Drop,
}

/// Serves one client connection per connect request on `l` as `then` says, until `stop`.
fn serve(
    dev: <P as Provider>::Device,
    mut l: <P as Provider>::Listener,
    then: Then,
    stop: Arc<AtomicBool>,
) {
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(256).expect("cq");
    let rb = Buf::<P>::new(&pd, RECV_LEN * RECVS as usize, Access::LOCAL_WRITE).expect("buffer");
    let mut qps = Vec::new();
    let mut wc = [Completion::default(); 16];
    while !stop.load(Ordering::Relaxed) {
        if let Some(req) = l.poll().expect("listener") {
            let init = QpInit {
                pd: &pd,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                opts: QpOptions::default(),
            };
            let qp = req
                .accept_prepared(init, &[], &mut |qp| {
                    for i in 0..RECVS {
                        let sgl = [rb.sge(i as usize * RECV_LEN, RECV_LEN)];
                        qp.queue_recv(&RecvWr {
                            wr_id: i,
                            sgl: &sgl,
                        })?;
                    }
                    qp.flush_recv()
                })
                .expect("accept");
            qps.push(qp);
        }
        let n = cq.poll(&mut wc).expect("poll");
        for qp in &mut qps {
            // Established, then (after a drop) Disconnected: nothing to do but read them.
            while let Ok(Some(_)) = qp.poll_event() {}
            if then == Then::Drop && n > 0 {
                let _ = qp.disconnect();
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Runs the small client of the check against a server that does `then`; its output.
fn check_against(then: Then) -> (Option<i32>, String) {
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let dev = P::open(lo).expect("open");
    let l = dev.listen(SocketAddr::new(lo, 0), 4).expect("listen");
    let port = l.local_addr().port();
    let stop = Arc::new(AtomicBool::new(false));
    let s = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || serve(dev, l, then, stop))
    };
    let target = format!("127.0.0.1:{port}");
    let out = run_to_end(
        CHECK,
        &[
            "--provider",
            "iwarp",
            "--parts",
            "small",
            "--timeout",
            "1000",
            "--grace-wait",
            "0",
            &target,
        ],
    );
    stop.store(true, Ordering::Relaxed);
    s.join().expect("server thread");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (
        out.status.code(),
        format!("{stdout}\n---- stderr\n{stderr}"),
    )
}

/// The FAIL lines of the calls (the connection checks aside).
fn call_fails(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("FAIL ") && !l.contains("connection-kept"))
        .collect()
}

#[test]
fn rejects_calls_at_once_after_the_first_call_got_no_reply() {
    let (code, out) = check_against(Then::Silent);
    assert_eq!(code, Some(1), "{out}");
    let fails = call_fails(&out);
    assert!(
        fails[0].starts_with(
            "FAIL small/null: no reply within the call timeout; no reply to the first call on \
             this connection"
        ),
        "{out}"
    );
    let waited = out.matches("no reply within the call timeout").count();
    assert_eq!(
        waited, 1,
        "only the first call waits out the timeout: {out}"
    );
    let lookup = fails
        .iter()
        .find(|l| l.starts_with("FAIL small/getattr-inline"));
    assert!(
        lookup
            .is_some_and(|l| l.contains("not sent: no reply to the first call on this connection")),
        "the next call fails at once, saying why: {out}"
    );
    assert!(out.contains(" failed (small/null, "), "{out}");
}

#[test]
fn rejects_calls_at_once_after_the_server_dropped_the_connection() {
    let (code, out) = check_against(Then::Drop);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        !out.contains("no reply within the call timeout"),
        "no call waits out the timeout on a connection reported lost: {out}"
    );
    assert!(
        out.contains("FAIL small/null: the connection was lost with the call outstanding"),
        "{out}"
    );
    // "not sent" once the poller has published the loss; the same words when the call was
    // handed over just before and the poller failed it.
    assert!(
        out.contains("FAIL small/getattr-inline: call failed: not sent: connection lost")
            || out.contains("FAIL small/getattr-inline: call failed: connection lost"),
        "the next call fails at once, saying why: {out}"
    );
    assert!(
        out.contains("FAIL small/connection-kept: 1 connection losses"),
        "{out}"
    );
    assert!(
        out.contains("nfs-check: 0 passed, 4 failed (small/null, "),
        "{out}"
    );
}
