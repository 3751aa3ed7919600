//! Backward-direction RPC (RFC 8167) sessions through the public API: unanswered backward
//! calls time out and fail with the session closed, calls on the wire when a connection drops,
//! session rebinding within the grace period and sessions gone after it.

mod api_common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::verbs::soft::SoftFaults;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackCallOptions, CallbackMode, Client, ClientError, ClientOptions, Reply, Server, ServerOptions,
};

use api_common::back::*;

/// Waits for a callback's outcome stored in `slot`.
fn outcome(slot: &Arc<Mutex<Option<Result<Reply, ClientError>>>>) -> Result<Reply, ClientError> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(r) = slot.lock().unwrap().take() {
            return r;
        }
        assert!(Instant::now() < end, "no outcome");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn rejects_unanswered_backward_calls_with_timeout_and_closed_session() {
    let w = World::new(1);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let server = Server::builder()
        .program(server_program(
            Tally::new(1),
            Arc::new(Mutex::new(Vec::new())),
        ))
        .options(server_opts(CallbackMode::Inline, 4))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let log = ClientLog::new();
    let c = Client::connect_serving(
        &w.client_ep,
        w.addr,
        ClientOptions {
            mode: CallbackMode::Worker,
            ..ClientOptions::default()
        },
        service(&log, 4),
    )
    .expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    bind(&c, 1, true).expect("bind");
    let slot = Arc::new(Mutex::new(None));
    let short = BackCallOptions {
        timeout_ms: Some(100),
        ..BackCallOptions::default()
    };
    // 1. On the wire, the client's handler held: times out; the late reply is dropped and the
    // next call works.
    log.gate.set(false);
    let s2 = Arc::clone(&slot);
    server
        .back_call_with(
            1,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 1, 1),
            short,
            move |r| *s2.lock().unwrap() = Some(r),
        )
        .expect("back_call");
    assert_eq!(outcome(&slot).unwrap_err(), ClientError::TimedOut);
    assert_eq!(
        log.entered.load(Ordering::SeqCst),
        1,
        "the call reached the client"
    );
    log.gate.set(true);
    let r = server
        .back_call_blocking(
            1,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 2, 3),
        )
        .expect("after the timeout");
    assert_eq!(r.results(), 5u32.to_be_bytes());
    // 2. Parked for a session whose client never comes back: times out.
    let before = faults.lock().unwrap().len();
    let gone = Client::connect_serving(
        &w.client_ep,
        w.addr,
        ClientOptions {
            max_reconnects: 0,
            ..ClientOptions::default()
        },
        service(&log, 4),
    )
    .expect("client");
    assert!(gone.wait_connected(Duration::from_secs(5)));
    bind(&gone, 2, true).expect("bind");
    let f = faults.lock().unwrap()[before].clone();
    f.drop_connection();
    wait_for("the client to give up", 10, || {
        gone.state() == rpcrdma_poller::ClientState::Failed
    });
    let s2 = Arc::clone(&slot);
    server
        .back_call_with(
            2,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 1, 1),
            short,
            move |r| *s2.lock().unwrap() = Some(r),
        )
        .expect("parked call");
    assert_eq!(outcome(&slot).unwrap_err(), ClientError::TimedOut);
    // 3. Parked without a deadline: closing the session completes it.
    let s2 = Arc::clone(&slot);
    let never = BackCallOptions {
        timeout_ms: Some(0),
        ..BackCallOptions::default()
    };
    server
        .back_call_with(
            2,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 1, 1),
            never,
            move |r| *s2.lock().unwrap() = Some(r),
        )
        .expect("parked call");
    assert!(server.close_session(2));
    assert_eq!(outcome(&slot).unwrap_err(), ClientError::SessionClosed);
    assert!(!server.close_session(2));
    let e = server
        .back_call(
            2,
            Proc::new(CB_PROG, 1, CB_SUM),
            server.back_args().unwrap(),
            |_| panic!("must not run"),
        )
        .unwrap_err();
    assert_eq!(e.error, ClientError::SessionClosed);
    // The lingering connection left once its session closed.
    wait_for("the lost connection to leave", 10, || {
        (0..2)
            .map(|i| w.server_ep.node_stats(i).unwrap().connections)
            .sum::<u64>()
            == 1
    });
    let t = server.totals();
    assert_eq!(t.back_errors, 3, "{t:?}");
    w.stop();
}

/// The server nodes' connections (a gauge of occupied reactor slots).
fn server_slots(w: &World) -> u64 {
    (0..2)
        .map(|i| w.server_ep.node_stats(i).unwrap().connections)
        .sum()
}

/// A client in worker mode (its backchannel handlers can be held at the gate) bound to
/// `session`, with `n` backward calls without deadline on the wire to it, one held in the
/// client's handler; then its connection is dropped. Returns the client and the calls' tally.
fn drop_with_calls_on_the_wire(
    w: &World,
    server: &Server,
    faults: &Arc<Mutex<Vec<SoftFaults>>>,
    log: &Arc<ClientLog>,
    opts: ClientOptions,
    session: u64,
    n: usize,
) -> (Client, Arc<Tally>) {
    let before = faults.lock().unwrap().len();
    let c = Client::connect_serving(&w.client_ep, w.addr, opts, service(log, 4)).expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    bind(&c, session, true).expect("bind");
    // One call first: the client's grant of backward credits arrives with its reply.
    let r = server
        .back_call_blocking(
            session,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 1, 2),
        )
        .expect("first backward call");
    assert_eq!(r.results(), 3u32.to_be_bytes());
    let tally = Tally::new(n);
    let never = BackCallOptions {
        timeout_ms: Some(0),
        ..BackCallOptions::default()
    };
    log.gate.set(false);
    for i in 0..n {
        let t = Arc::clone(&tally);
        server
            .back_call_with(
                session,
                Proc::new(CB_PROG, 1, CB_SUM),
                sum_args(server.back_args(), i as u32, 3),
                never,
                move |r| t.record(i, &r, i as u32 + 3),
            )
            .expect("back_call");
    }
    wait_for("a backward call held in the client", 10, || {
        log.gate.waiting.load(Ordering::SeqCst) > 0
    });
    let bc = server.session_backchannel(session).expect("bound");
    wait_for("every call on the wire", 10, || {
        bc.stats().snapshot().back_in_flight == n as u64
    });
    let losses = server.totals().connection_losses;
    let f = faults.lock().unwrap()[before].clone();
    f.drop_connection();
    wait_for("the server to lose the connection", 10, || {
        server.totals().connection_losses > losses
    });
    log.gate.set(true);
    assert_eq!(tally.done(), 0, "calls completed at the loss");
    (c, tally)
}

#[test]
fn accepts_session_rebind_within_grace() {
    let w = World::new(1);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    // Long enough for the client to reconnect and bind again on a loaded machine; the test
    // then outlives it, to see that the rebind cancelled the expiry.
    let grace_ms = 1500;
    let server = Server::builder()
        .program(server_program(
            Tally::new(1),
            Arc::new(Mutex::new(Vec::new())),
        ))
        .options(ServerOptions {
            session_grace_ms: grace_ms,
            ..server_opts(CallbackMode::Inline, 4)
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let log = ClientLog::new();
    let opts = ClientOptions {
        mode: CallbackMode::Worker,
        ..ClientOptions::default()
    };
    let n = 3;
    let (c, tally) = drop_with_calls_on_the_wire(&w, &server, &faults, &log, opts, 9, n);
    let lost_at = Instant::now();
    // The client reconnects; its upper layer binds the new connection to the session.
    wait_for("the reconnection", 10, || {
        c.stats().snapshot().reconnects > 0
    });
    assert!(c.wait_connected(Duration::from_secs(5)));
    bind(&c, 9, true).expect("rebind");
    assert!(
        lost_at.elapsed() < Duration::from_millis(grace_ms),
        "the rebind came after the grace period; the test proves nothing"
    );
    // The parked calls were sent again on the new connection, with their XIDs.
    tally.wait(n as u64, 20, "backward");
    tally.all_ok_exactly_once(n, "backward");
    let t = server.totals();
    assert!(t.back_retransmits >= 1, "{t:?}");
    assert_eq!(t.sessions_expired, 0, "{t:?}");
    // The lost connection handed its calls over and left its slot.
    wait_for("the lost connection to leave", 10, || server_slots(&w) == 1);
    // Past the grace period: the session was not expired, and it still carries calls.
    while lost_at.elapsed() < Duration::from_millis(2 * grace_ms) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let t = server.totals();
    assert_eq!(t.sessions_expired, 0, "{t:?}");
    let r = server
        .back_call_blocking(
            9,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 4, 5),
        )
        .expect("the session lives on");
    assert_eq!(r.results(), 9u32.to_be_bytes());
    assert_eq!(server_slots(&w), 1);
    w.stop();
}

#[test]
fn rejects_session_after_grace_expiry() {
    let w = World::new(1);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let server = Server::builder()
        .program(server_program(
            Tally::new(1),
            Arc::new(Mutex::new(Vec::new())),
        ))
        .options(ServerOptions {
            session_grace_ms: 40,
            ..server_opts(CallbackMode::Inline, 4)
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let log = ClientLog::new();
    // A client that does not come back.
    let opts = ClientOptions {
        mode: CallbackMode::Worker,
        max_reconnects: 0,
        ..ClientOptions::default()
    };
    let n = 3;
    let (gone, tally) = drop_with_calls_on_the_wire(&w, &server, &faults, &log, opts, 11, n);
    wait_for("the client to give up", 10, || {
        gone.state() == rpcrdma_poller::ClientState::Failed
    });
    // After the grace period: every pending call failed with SessionClosed, once.
    tally.wait(n as u64, 10, "backward");
    {
        let seen = tally.seen.lock().unwrap();
        assert!(seen.iter().all(|&k| k == 1), "{seen:?}");
        let errors = tally.errors.lock().unwrap();
        assert_eq!(*errors, vec![ClientError::SessionClosed; n]);
    }
    // The lost connection's slot is free, the session gone, the expiry counted.
    wait_for("the lost connection to leave", 10, || server_slots(&w) == 0);
    let t = server.totals();
    assert_eq!(t.sessions_expired, 1, "{t:?}");
    assert_eq!(t.back_errors, n as u64, "{t:?}");
    assert!(server.session_backchannel(11).is_none());
    let e = server
        .back_call(
            11,
            Proc::new(CB_PROG, 1, CB_SUM),
            server.back_args().unwrap(),
            |_| panic!("must not run"),
        )
        .unwrap_err();
    assert_eq!(e.error, ClientError::SessionClosed);
    assert!(!server.close_session(11), "the expiry closed it already");
    // A later bind of the same session id starts a fresh session: nothing of the old one
    // moves to it.
    let fresh = Client::connect_serving(
        &w.client_ep,
        w.addr,
        ClientOptions::default(),
        service(&log, 4),
    )
    .expect("client");
    assert!(fresh.wait_connected(Duration::from_secs(5)));
    bind(&fresh, 11, true).expect("bind a fresh session");
    let r = server
        .back_call_blocking(
            11,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 20, 22),
        )
        .expect("fresh session");
    assert_eq!(r.results(), 42u32.to_be_bytes());
    let t = server.totals();
    assert_eq!(t.back_retransmits, 0, "{t:?}");
    assert_eq!(t.sessions_expired, 1, "{t:?}");
    assert_eq!(fresh.stats().snapshot().back_calls, 1);
    // Still exactly once.
    assert_eq!(tally.done(), n as u64);
    assert_eq!(server_slots(&w), 1);
    w.stop();
}
