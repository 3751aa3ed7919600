//! The meaning of the connection counters (issue 13 §2 item 6): a failed connection attempt is
//! not a lost connection, and a server reply counts once its Send completed successfully.
//!
//! Normal operation: calls through a soft fabric with fault injection (`SoftFaults`) on the
//! QP of one side; recovery: the client's reconnection attempts fail against a server that no
//! longer listens (or nobody at all) and the counters say so.

mod api_common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::verbs::soft::SoftFaults;
use rpcrdma_engine::verbs::WcStatus;
use rpcrdma_poller::{Client, ClientError, ClientOptions, ClientState, Server};

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Nobody listens: the first connection and the three reconnection attempts all fail before
/// establishment. None of them is a lost connection; each attempt is counted as a reconnect
/// attempt and as a failed connection attempt.
#[test]
fn rejects_counting_failed_connect_attempts_as_losses() {
    let w = World::new(0);
    let opts = ClientOptions {
        max_reconnects: 3,
        reconnect_min_ms: 1,
        reconnect_max_ms: 4,
        ..ClientOptions::default()
    };
    let client = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    let mut a = client.args().unwrap();
    a.put_u32(1).unwrap();
    let e = client.call_blocking(PROG, 2, SUM, a);
    assert_eq!(e.unwrap_err(), ClientError::ReconnectFailed);
    let s = client.stats().snapshot();
    assert_eq!(s.connection_losses, 0, "{s:?}");
    assert_eq!(s.reconnects, 3, "{s:?}");
    assert_eq!(s.connect_failures, 4, "{s:?}");
    w.stop();
}

/// An established connection is lost and the server no longer listens: the three
/// reconnection attempts fail. One connection was lost, not four.
#[test]
fn accepts_one_loss_for_one_lost_connection_whose_reconnects_fail() {
    let w = World::new(0);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        max_reconnects: 3,
        reconnect_min_ms: 1,
        reconnect_max_ms: 4,
        ..ClientOptions::default()
    };
    let client = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let mut a = client.args().unwrap();
    a.put_u32(1).unwrap();
    a.put_u32(2).unwrap();
    client.call_blocking(PROG, 2, SUM, a).expect("sum");
    server.stop_listening();
    let qp = faults.lock().unwrap().last().cloned().expect("client QP");
    qp.drop_connection();
    wait_until("the client to give up", || {
        client.state() == ClientState::Failed
    });
    let s = client.stats().snapshot();
    assert_eq!(s.connection_losses, 1, "{s:?}");
    assert_eq!(s.reconnects, 3, "{s:?}");
    assert_eq!(s.connect_failures, 3, "{s:?}");
    w.stop();
}

/// RFC 8166 (Send operations carry every RPC-over-RDMA message): a Send that completes in error did not
/// deliver it. The server's `replies` counts the first reply (its Send completed) and not the
/// second (its Send failed, and the connection with it).
#[test]
fn rejects_counting_a_reply_whose_send_failed() {
    let w = World::new(0);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .server_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        max_retransmits: 0,
        max_reconnects: 0,
        ..ClientOptions::default()
    };
    let client = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let mut a = client.args().unwrap();
    a.put_u32(1).unwrap();
    a.put_u32(2).unwrap();
    client.call_blocking(PROG, 2, SUM, a).expect("sum");
    wait_until("the first reply counted", || server.totals().replies == 1);
    let qp = faults.lock().unwrap().last().cloned().expect("server QP");
    qp.fail_nth_send(1, WcStatus::LOC_PROT_ERR);
    let mut a = client.args().unwrap();
    a.put_u32(3).unwrap();
    a.put_u32(4).unwrap();
    assert!(client.call_blocking(PROG, 2, SUM, a).is_err());
    wait_until("the server to lose the connection", || {
        server.totals().connection_losses == 1
    });
    let t = server.totals();
    assert_eq!(t.calls, 2, "{t:?}");
    assert_eq!(t.replies, 1, "the failed reply Send was counted: {t:?}");
    w.stop();
}

/// Connection churn (issue 13 part 3: the one-hour soak's RSS grew because every accepted
/// connection's counters were kept forever): after more connections than
/// [`CLOSED_KEPT`] come and go, the server lists the live one and the last `CLOSED_KEPT`
/// closed ones only, and its totals still count every call of every connection.
#[test]
fn accepts_connection_churn_with_bounded_connection_stats_and_exact_totals() {
    use rpcrdma_poller::CLOSED_KEPT;
    let w = World::new(0);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let rounds = CLOSED_KEPT as u64 + 20;
    for i in 0..rounds {
        let client =
            Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
        let mut a = client.args().unwrap();
        a.put_u32(1).unwrap();
        a.put_u32(2).unwrap();
        client.call_blocking(PROG, 2, SUM, a).expect("sum");
        client.close();
        wait_until("the server to drop the connection", || {
            server.totals().connection_losses == i + 1
        });
    }
    let live = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    let mut a = live.args().unwrap();
    a.put_u32(3).unwrap();
    live.call_blocking(PROG, 2, SUM, a).expect("sum");
    wait_until("the closed connections to be retired", || {
        server.connection_stats().len() == CLOSED_KEPT + 1
    });
    // A reply counts when its Send completes, which may be after the client has it.
    wait_until("the last reply's Send to complete", || {
        server.totals().replies == rounds + 1
    });
    let t = server.totals();
    assert_eq!(t.calls, rounds + 1, "{t:?}");
    assert_eq!(t.replies, rounds + 1, "{t:?}");
    assert_eq!(server.accepted(), rounds + 1);
    // Accept order: the live connection, accepted last, is listed last.
    let last = *server.connection_stats().last().unwrap();
    assert_eq!((last.calls, last.connection_losses), (1, 0), "{last:?}");
    assert_eq!(
        t.credits_granted, last.credits_granted,
        "closed gauges count zero"
    );
    w.stop();
}
