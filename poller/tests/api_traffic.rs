//! Many connections across two reactors, both callback modes, concurrency up to (and beyond)
//! the credit limit, DDP in both directions, and a connection dropped in the middle of traffic
//! with every call completing exactly once.

mod api_common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::verbs::soft::{SoftConfig, SoftFaults};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallbackMode, Client, ClientError, ClientOptions, EndpointConfig, PersistentStags, Reply,
    Server, ServerOptions,
};

/// Fires `per` SUM calls on each client without waiting; call `i` sums (i, 7).
fn fire(clients: &[Client], per: usize, tally: &Arc<Tally>) {
    for (k, c) in clients.iter().enumerate() {
        for j in 0..per {
            let i = k * per + j;
            let mut a = loop {
                match c.args() {
                    Some(a) => break a,
                    None => std::thread::sleep(Duration::from_micros(100)),
                }
            };
            a.put_u32(i as u32).unwrap();
            a.put_u32(7).unwrap();
            let t = Arc::clone(tally);
            let mut args = a;
            loop {
                let t2 = Arc::clone(&t);
                match c.call(Proc::new(PROG, 2, SUM), args, move |r| {
                    t2.record(i, &r, i as u32 + 7)
                }) {
                    Ok(()) => break,
                    Err(r) => {
                        assert_eq!(r.error, ClientError::Busy);
                        args = r.args;
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
    }
}

fn many_connections(mode: CallbackMode, workers: usize) {
    let w = World::new(workers);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(ServerOptions {
            credits: 8,
            mode,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        credits: 8,
        mode,
        ..ClientOptions::default()
    };
    let clients: Vec<Client> = (0..6)
        .map(|_| Client::connect(&w.client_ep, w.addr, opts).expect("client"))
        .collect();
    for c in &clients {
        assert!(c.wait_connected(Duration::from_secs(5)));
    }
    let per = 300;
    let tally = Tally::new(clients.len() * per);
    fire(&clients, per, &tally);
    tally.wait((clients.len() * per) as u64, 30, "calls");
    tally.exactly_once();
    assert_eq!(
        tally.ok.load(Ordering::Relaxed),
        (clients.len() * per) as u64
    );
    // Both reactors carried connections of both endpoints.
    for i in 0..2 {
        let s = w.client_ep.node_stats(i).unwrap();
        assert!(s.connections >= 1, "client node {i}: {s:?}");
        let s = w.server_ep.node_stats(i).unwrap();
        assert!(s.connections >= 1, "server node {i}: {s:?}");
        assert!(s.completions > 0);
    }
    // The credit limit was reached but never exceeded; calls queued beyond it.
    for c in &clients {
        let s = c.stats().snapshot();
        assert_eq!(s.replies, per as u64);
        assert!(s.credits_granted <= 8);
    }
    // The server counts a reply when its Send completes, which may follow the client's
    // receive by a poll.
    let want = (clients.len() * per) as u64;
    let end = Instant::now() + Duration::from_secs(5);
    while server.totals().replies < want && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = server.totals();
    assert_eq!(t.replies, want);
    assert_eq!(server.accepted(), clients.len() as u64);
    w.stop();
}

#[test]
fn accepts_many_connections_inline() {
    many_connections(CallbackMode::Inline, 0);
}

#[test]
fn accepts_many_connections_worker_mode() {
    many_connections(CallbackMode::Worker, 2);
}

#[test]
fn accepts_ddp_calls_both_directions() {
    for mode in [CallbackMode::Inline, CallbackMode::Worker] {
        let w = World::new(1);
        let _server = Server::builder()
            .program(program(w.server_ep.buffers().clone()))
            .mode(mode)
            .start(&w.server_ep, w.addr)
            .expect("server");
        let client = Client::connect(
            &w.client_ep,
            w.addr,
            ClientOptions {
                mode,
                ..ClientOptions::default()
            },
        )
        .expect("client");
        ddp_round(&client);
        let n = client.negotiated().expect("negotiated");
        assert!(n.remote_invalidate, "{n:?}");
        w.stop();
    }
}

#[test]
fn accepts_ddp_calls_on_devices_without_memory_windows_or_send_with_invalidate() {
    // Such devices (siw, some RoCE NICs) make the client expose chunks through persistent
    // STags and the server answer with plain Sends: neither side offers remote invalidation,
    // and the soft provider refuses both memory windows and Send With Invalidate as such a
    // device would. Every DDP shape still works. (The client endpoint opts in to persistent
    // STags: without it, `Client::connect` refuses; see tests/api_exposure.rs.)
    let mut dev = SoftConfig::default();
    dev.caps.mw_type2 = false;
    dev.caps.send_with_invalidate = false;
    let client_cfg = EndpointConfig {
        persistent_stags: PersistentStags::EndpointWide,
        ..endpoint_config(1)
    };
    let w = World::with_client_endpoint(1, &reactor_config(2), &dev, client_cfg);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    ddp_round(&client);
    let n = client.negotiated().expect("negotiated");
    assert!(!n.remote_invalidate, "{n:?}");
    let pd = n.peer_private_data.expect("server private data");
    assert!(
        !pd.remote_invalidate,
        "server advertised R without Send With Invalidate"
    );
    w.stop();
}

#[test]
fn accepts_connection_drop_mid_traffic_exactly_once() {
    for mode in [CallbackMode::Inline, CallbackMode::Worker] {
        let w = World::new(1);
        let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
        let f2 = Arc::clone(&faults);
        assert!(w
            .client_ep
            .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
        // The server logs the XID of every call it runs.
        let served: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(Vec::new()));
        let s2 = Arc::clone(&served);
        let logging = rpcrdma_poller::Program::new(PROG, 2..=3).procedure(
            SUM,
            move |req: &rpcrdma_poller::Request<'_>, out: &mut rpcrdma_poller::ReplyBuilder<'_>| {
                s2.lock().unwrap().push(req.xid);
                sum(req, out)
            },
        );
        let _server = Server::builder()
            .program(logging)
            .options(ServerOptions {
                credits: 4,
                mode,
                ..ServerOptions::default()
            })
            .start(&w.server_ep, w.addr)
            .expect("server");
        let opts = ClientOptions {
            credits: 4,
            mode,
            max_retransmits: 50,
            max_reconnects: 50,
            ..ClientOptions::default()
        };
        let clients: Vec<Client> = (0..3)
            .map(|_| Client::connect(&w.client_ep, w.addr, opts).expect("client"))
            .collect();
        for c in &clients {
            assert!(c.wait_connected(Duration::from_secs(5)));
        }
        let per = 400;
        let n = clients.len() * per;
        let tally = Tally::new(n);
        let dropper = {
            let faults = Arc::clone(&faults);
            let tally = Arc::clone(&tally);
            std::thread::spawn(move || {
                let mut drops = 0;
                let mut last = 0;
                while tally.done() < n as u64 && drops < 6 {
                    let d = tally.done();
                    if d >= last + 150 {
                        last = d;
                        let f = faults.lock().unwrap().last().cloned();
                        if let Some(f) = f {
                            f.drop_connection();
                            drops += 1;
                        }
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                drops
            })
        };
        fire(&clients, per, &tally);
        let end = Instant::now() + Duration::from_secs(30);
        while tally.done() < n as u64 {
            if Instant::now() > end {
                for c in &clients {
                    eprintln!(
                        "{:?} pending {} {:?}",
                        c.state(),
                        c.pending(),
                        c.stats().snapshot()
                    );
                }
                for i in 0..2 {
                    eprintln!("client node {i} {:?}", w.client_ep.node_stats(i));
                    eprintln!("server node {i} {:?}", w.server_ep.node_stats(i));
                }
                panic!("{mode:?}: only {} of {n} completed", tally.done());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let drops = dropper.join().unwrap();
        tally.exactly_once();
        assert_eq!(tally.bad.load(Ordering::Relaxed), 0);
        assert_eq!(
            tally.ok.load(Ordering::Relaxed),
            n as u64,
            "errors: {}",
            tally.err.load(Ordering::Relaxed)
        );
        assert!(drops > 0, "no connection was dropped");
        let lost: u64 = clients
            .iter()
            .map(|c| c.stats().snapshot().connection_losses)
            .sum();
        let reconnects: u64 = clients
            .iter()
            .map(|c| c.stats().snapshot().reconnects)
            .sum();
        assert!(
            lost > 0 && reconnects > 0,
            "lost {lost} reconnects {reconnects}"
        );
        for c in &clients {
            assert_eq!(c.pending(), 0);
        }
        // Retransmissions reuse the XID: every XID the server ran belongs to a completed call.
        let replied: HashSet<u32> = tally.xids.lock().unwrap().iter().copied().collect();
        assert_eq!(replied.len(), n, "XIDs not unique per call");
        let served = served.lock().unwrap();
        assert!(served.len() >= n);
        let foreign = served.iter().filter(|x| !replied.contains(x)).count();
        assert_eq!(
            foreign, 0,
            "{foreign} calls ran under an XID no reply carried"
        );
        let retransmits: u64 = clients
            .iter()
            .map(|c| c.stats().snapshot().retransmits)
            .sum();
        eprintln!(
            "{mode:?}: {drops} drops, {lost} losses, {reconnects} reconnects, {retransmits} \
             retransmits, {} executions for {n} calls",
            served.len()
        );
        drop(served);
        w.stop();
    }
}

#[test]
fn accepts_graceful_shutdown_losing_nothing() {
    let w = World::new(0);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .credits(4)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        credits: 4,
        ..ClientOptions::default()
    };
    let clients: Vec<Client> = (0..4)
        .map(|_| Client::connect(&w.client_ep, w.addr, opts).expect("client"))
        .collect();
    for c in &clients {
        assert!(c.wait_connected(Duration::from_secs(5)));
    }
    let per = 200;
    let n = clients.len() * per;
    let tally = Tally::new(n);
    fire(&clients, per, &tally);
    // Stop at once: everything accepted must still complete, successfully.
    w.stop();
    assert_eq!(tally.done(), n as u64);
    tally.exactly_once();
    assert_eq!(tally.ok.load(Ordering::Relaxed), n as u64);
    for c in &clients {
        assert!(c
            .call(Proc::new(PROG, 2, 0), c.args().unwrap(), |_| {})
            .is_err());
    }
}

#[test]
fn rejects_calls_after_close_and_completes_pending() {
    let w = World::new(0);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let c = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    let tally = Tally::new(100);
    fire(std::slice::from_ref(&c), 100, &tally);
    c.close();
    let e = c
        .call(Proc::new(PROG, 2, 0), c.args().unwrap(), |_| {})
        .unwrap_err();
    assert_eq!(e.error, ClientError::Closed);
    tally.wait(100, 10, "calls");
    tally.exactly_once();
    assert_eq!(tally.ok.load(Ordering::Relaxed), 100);
    w.stop();
}

/// Dropping every handle of a client closes its connection as `Client::close` would: calls
/// already made complete (each once, successfully), then the connection goes away at the
/// server too. A clone keeps the connection open while it lives.
#[test]
fn accepts_last_client_handle_dropped_closing_the_connection() {
    let w = World::new(0);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let c = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    let tally = Tally::new(100);
    fire(std::slice::from_ref(&c), 100, &tally);
    let other = c.clone();
    drop(c);
    // A clone still holds the connection open: it takes calls.
    let (tx, rx) = std::sync::mpsc::channel();
    other
        .call(Proc::new(PROG, 2, 0), other.args().unwrap(), move |r| {
            let _ = tx.send(r.is_ok());
        })
        .expect("the clone still calls");
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
    assert_eq!(server.live_connections().len(), 1);
    drop(other);
    tally.wait(100, 10, "calls");
    tally.exactly_once();
    assert_eq!(tally.ok.load(Ordering::Relaxed), 100);
    let t0 = Instant::now();
    while !server.live_connections().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the server still has the connection 10 s after the last client handle went"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    w.stop();
}

/// A connection lost while a call is on the wire with its memory windows bound: the client
/// deallocates the windows before it destroys the QP. (A bound type-2 window holds a reference
/// to its QP; kernel rxe warns at such a destroy and frees the QP under the window — seen with
/// the Linux NFS server interop run, docs/interop-nfs.md.)
#[test]
fn accepts_connection_loss_releasing_windows_before_qp() {
    use rpcrdma_engine::verbs::soft::DelayMode;
    let w = World::new(0);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(ServerOptions {
            credits: 4,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        credits: 4,
        max_retransmits: 0,
        max_reconnects: 0,
        ..ClientOptions::default()
    };
    let client = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let qp = faults.lock().unwrap().last().cloned().expect("client QP");
    // The client sees none of its completions from now on: the call below stays on the wire
    // with its windows (Write chunk, Reply chunk) bound.
    qp.delay_completions(DelayMode::Hold);
    let mut a = client.args().unwrap();
    a.put_u32(5000).unwrap();
    a.put_u32(0x11).unwrap();
    a.receptacle(client.buffer().unwrap()).unwrap();
    let outcome: Arc<Mutex<Option<Result<Reply, ClientError>>>> = Arc::new(Mutex::new(None));
    let o2 = Arc::clone(&outcome);
    client
        .call(Proc::new(PROG, 2, FILL), a, move |r| {
            *o2.lock().unwrap() = Some(r)
        })
        .expect("call");
    // Binds and the Send executed (their completions, and the reply's, are held).
    let end = Instant::now() + Duration::from_secs(10);
    while qp.held_completions() < 4 {
        assert!(Instant::now() < end, "held {}", qp.held_completions());
        std::thread::sleep(Duration::from_millis(1));
    }
    qp.drop_connection();
    while outcome.lock().unwrap().is_none() {
        assert!(Instant::now() < end, "the call never completed");
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = outcome.lock().unwrap().take().unwrap();
    assert!(r.is_err(), "the call cannot succeed: {r:?}");
    while client.stats().snapshot().connection_losses == 0 {
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(1));
    }
    let fabric = w.fabric.clone();
    w.stop();
    assert_eq!(
        fabric.windows_bound_at_qp_destroy(),
        0,
        "memory windows were still bound when the client destroyed its QP"
    );
}

/// A connection lost under a call that may not be sent again (`max_retransmits` 0): when the
/// call's outcome is delivered, the client already says it is no longer connected and has
/// counted the loss. (Before, the failed calls completed first and the state still said
/// `Connected`: the NFSv4.1 interop run, waiting for the reconnection after such a failure,
/// saw `wait_connected` return at once, docs/interop-nfs.md.)
#[test]
fn accepts_lost_connection_published_before_its_failed_calls_complete() {
    use rpcrdma_engine::verbs::soft::DelayMode;
    use rpcrdma_poller::ClientState;
    let w = World::new(0);
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        credits: 4,
        max_retransmits: 0,
        max_reconnects: 3,
        // The client stays in its back-off for the rest of the test.
        reconnect_min_ms: 600_000,
        reconnect_max_ms: 600_000,
        ..ClientOptions::default()
    };
    let client = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let qp = faults.lock().unwrap().last().cloned().expect("client QP");
    qp.delay_completions(DelayMode::Hold);
    let mut a = client.args().unwrap();
    a.put_u32(7).unwrap();
    // (outcome, state and losses seen by the callback)
    type Seen = (Result<Reply, ClientError>, ClientState, u64);
    let outcome: Arc<Mutex<Option<Seen>>> = Arc::new(Mutex::new(None));
    let o2 = Arc::clone(&outcome);
    let c2 = client.clone();
    client
        .call(Proc::new(PROG, 1, ECHO), a, move |r| {
            let losses = c2.stats().snapshot().connection_losses;
            *o2.lock().unwrap() = Some((r, c2.state(), losses));
        })
        .expect("call");
    let end = Instant::now() + Duration::from_secs(10);
    while qp.held_completions() < 1 {
        assert!(Instant::now() < end, "the call's Send never executed");
        std::thread::sleep(Duration::from_millis(1));
    }
    qp.drop_connection();
    while outcome.lock().unwrap().is_none() {
        assert!(Instant::now() < end, "the call never completed");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (r, state, losses) = outcome.lock().unwrap().take().unwrap();
    assert!(matches!(r, Err(ClientError::RetransmitsExhausted)), "{r:?}");
    assert_eq!(
        state,
        ClientState::Reconnecting,
        "the state the failed call's callback saw"
    );
    assert_eq!(losses, 1, "the loss is counted before the call completes");
    assert_eq!(client.state(), ClientState::Reconnecting);
    w.stop();
}
