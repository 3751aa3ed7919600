//! Backward-direction RPC (RFC 8167) through the public API: clients that serve a program on
//! their backchannel, server handlers and sessions that send backward calls, over two
//! reactors, in both callback modes; backward credits, calls refused to clients that did not
//! say they serve them, connections dropped in the middle of backward traffic (every call
//! completing exactly once after the clients reconnect and rebind their sessions), timeouts
//! and closed sessions.

mod api_common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::verbs::soft::SoftFaults;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackchannelService, CallbackMode, Client, ClientError, ClientOptions, Program, ProtocolVersion,
    Reject, ReplyBuilder, Request, Server, ServerOptions,
};

use api_common::back::*;

/// Forward calls whose handlers send backward calls with the forward call's XID, while the
/// test thread sends backward calls to every session: several clients over two reactors.
fn colliding_xids(mode: CallbackMode, workers: usize, version: ProtocolVersion) {
    let w = World::new(workers);
    let nclients = 4;
    let per_fwd = 100;
    let per_back = 100;
    let nfwd = nclients * per_fwd;
    // Backward tally: BOUNCE calls at 0..nfwd, session calls after.
    let back = Tally::new(nfwd + nclients * per_back);
    let refused = Arc::new(Mutex::new(Vec::new()));
    let server = Server::builder()
        .program(server_program(Arc::clone(&back), refused))
        .options(ServerOptions {
            // Room for every call a connection may get at once: an inline handler cannot
            // wait for ring space (BOUNCE would fail with SYSTEM_ERR).
            backchannel_queue: 512,
            ..server_opts(mode, 4)
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let log = ClientLog::new();
    let opts = ClientOptions {
        credits: 8,
        mode,
        version,
        ..ClientOptions::default()
    };
    let clients = bound_clients(&w.client_ep, w.addr, opts, &log, nclients, 100);
    let fwd = Tally::new(nfwd);
    let feeder = {
        let server = server.clone();
        let back = Arc::clone(&back);
        std::thread::spawn(move || {
            for k in 0..nclients {
                let base = nfwd + k * per_back;
                back_fire(&server, 100 + k as u64, base..base + per_back, &back);
            }
        })
    };
    // In worker mode every other forward call waits for its backward call.
    forward_fire(&clients, per_fwd, &fwd, bounce_proc(mode));
    feeder.join().unwrap();
    let nback = nfwd + nclients * per_back;
    fwd.wait(nfwd as u64, 30, "forward");
    let end = Instant::now() + Duration::from_secs(30);
    while back.done() < nback as u64 {
        if Instant::now() > end {
            for c in &clients {
                eprintln!("client {:?} {:?}", c.state(), c.stats().snapshot());
            }
            for s in server.connection_stats() {
                eprintln!("server conn {s:?}");
            }
            panic!("backward: only {} of {nback} completed", back.done());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    back.all_ok_exactly_once(nback, "backward");
    for c in &clients {
        let n = c.negotiated().expect("negotiated");
        assert_eq!(n.version, version, "{n:?}");
    }
    check_forward_xids_used_backward(&fwd, &log, nfwd);
    // Counters: every backward call sent once, answered once.
    check_back_totals(&server, nback as u64);
    let received: u64 = clients
        .iter()
        .map(|c| c.stats().snapshot().back_calls)
        .sum();
    assert_eq!(received, nback as u64);
    for c in &clients {
        let s = c.stats().snapshot();
        assert_eq!(s.back_calls, (2 * per_back) as u64, "{s:?}");
        assert_eq!(s.back_replies, s.back_calls, "{s:?}");
    }
    for i in 0..2 {
        let s = w.server_ep.node_stats(i).unwrap();
        assert!(s.connections >= 1, "server node {i}: {s:?}");
    }
    w.stop();
}

#[test]
fn accepts_backward_calls_with_colliding_xids_inline() {
    colliding_xids(CallbackMode::Inline, 0, ProtocolVersion::V1);
}

#[test]
fn accepts_backward_calls_with_colliding_xids_v2() {
    // Version Two carries the direction in the header (rdma_direction) and requires the
    // backward direction: the same traffic over Version Two.
    colliding_xids(CallbackMode::Inline, 0, ProtocolVersion::V2);
}

#[test]
fn accepts_backward_calls_with_colliding_xids_worker_mode() {
    colliding_xids(CallbackMode::Worker, 2, ProtocolVersion::V1);
}

#[test]
fn accepts_backward_credits_granted_by_the_client() {
    // The server asks for 8 backward credits; the client grants 2.
    let w = World::new(1);
    let back = Tally::new(1);
    let server = Server::builder()
        .program(server_program(back, Arc::new(Mutex::new(Vec::new()))))
        .options(server_opts(CallbackMode::Inline, 8))
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
        service(&log, 2),
    )
    .expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    bind(&c, 7, true).expect("bind");
    // One call first: the grant arrives with its reply (one credit before that).
    let r = server
        .back_call_blocking(
            7,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 1, 2),
        )
        .expect("first backward call");
    assert_eq!(r.results(), 3u32.to_be_bytes());
    log.server_done.fetch_add(1, Ordering::SeqCst);
    let bc = server.session_backchannel(7).expect("bound");
    // Hold the client's handlers and send 20.
    log.gate.set(false);
    let n = 20;
    let tally = Tally::new(n);
    for i in 0..n {
        let t = Arc::clone(&tally);
        let l = Arc::clone(&log);
        server
            .back_call(
                7,
                Proc::new(CB_PROG, 1, CB_SUM),
                sum_args(server.back_args(), i as u32, 3),
                move |r| {
                    l.server_done.fetch_add(1, Ordering::SeqCst);
                    t.record(i, &r, i as u32 + 3)
                },
            )
            .expect("back_call");
    }
    // Exactly the grant is on the wire; the rest waits on the server.
    wait_for("2 calls at the client and 18 queued", 10, || {
        let s = bc.stats().snapshot();
        c.stats().snapshot().back_calls == 3 && s.back_queued == 18
    });
    let s = bc.stats().snapshot();
    assert_eq!(s.back_calls, 3, "{s:?}");
    assert_eq!(s.back_in_flight, 2, "{s:?}");
    log.gate.set(true);
    tally.wait(n as u64, 20, "backward");
    tally.all_ok_exactly_once(n, "backward");
    let max = log.max_outstanding.load(Ordering::SeqCst);
    assert!(
        max <= 2,
        "{max} backward calls outstanding with 2 credits granted"
    );
    let s = bc.stats().snapshot();
    assert_eq!(s.back_calls, 21, "{s:?}");
    assert_eq!(s.back_replies, 21, "{s:?}");
    assert_eq!(c.stats().snapshot().back_calls, 21);
    w.stop();
}

#[test]
fn rejects_backward_calls_to_a_client_that_did_not_enable_them() {
    let w = World::new(0);
    let refused = Arc::new(Mutex::new(Vec::new()));
    let server = Server::builder()
        .program(server_program(Tally::new(1), Arc::clone(&refused)))
        .options(server_opts(CallbackMode::Inline, 4))
        .start(&w.server_ep, w.addr)
        .expect("server");
    // A client that serves nothing, and one that serves the program but whose upper layer
    // did not tell the server.
    let plain = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("plain");
    let log = ClientLog::new();
    let serving = Client::connect_serving(
        &w.client_ep,
        w.addr,
        ClientOptions::default(),
        service(&log, 4),
    )
    .expect("serving");
    assert!(plain.wait_connected(Duration::from_secs(5)));
    assert!(serving.wait_connected(Duration::from_secs(5)));
    bind(&plain, 1, false).expect("bind plain");
    bind(&serving, 2, false).expect("bind serving");
    for s in [1u64, 2] {
        let e = server
            .back_call_blocking(
                s,
                Proc::new(CB_PROG, 1, CB_SUM),
                sum_args(server.back_args(), 1, 1),
            )
            .unwrap_err();
        assert_eq!(e, ClientError::NotServed, "session {s}");
    }
    // From a handler: a blocking call on the reactor is refused; a call before `enable` is
    // refused too.
    let r = plain
        .call_blocking(Proc::new(PROG, 2, TRY_BACK), plain.args().unwrap())
        .expect("try_back");
    assert_eq!(
        r.results(),
        1u32.to_be_bytes(),
        "blocking call from the reactor"
    );
    wait_for("the refused callback", 5, || {
        !refused.lock().unwrap().is_empty()
    });
    assert_eq!(*refused.lock().unwrap(), vec![ClientError::NotServed]);
    // An unknown session is refused at once, with the arguments back.
    let e = server
        .back_call(
            99,
            Proc::new(CB_PROG, 1, CB_SUM),
            server.back_args().unwrap(),
            |_| panic!("must not run"),
        )
        .unwrap_err();
    assert_eq!(e.error, ClientError::SessionClosed);
    // Nothing was sent; each refusal was counted.
    let t = server.totals();
    assert_eq!(t.back_calls, 0, "{t:?}");
    assert_eq!(t.back_errors, 3, "{t:?}");
    assert_eq!(plain.stats().snapshot().back_calls, 0);
    assert_eq!(serving.stats().snapshot().back_calls, 0);
    assert_eq!(log.entered.load(Ordering::SeqCst), 0);
    // Once the client says it serves the backchannel, the same session works.
    bind(&serving, 2, true).expect("rebind serving");
    let r = server
        .back_call_blocking(
            2,
            Proc::new(CB_PROG, 1, CB_SUM),
            sum_args(server.back_args(), 4, 5),
        )
        .expect("after enable");
    assert_eq!(r.results(), 9u32.to_be_bytes());
    w.stop();
}

#[test]
fn rejects_handler_backchannel_when_the_server_has_none() {
    let w = World::new(0);
    let _server = Server::builder()
        .program(server_program(
            Tally::new(1),
            Arc::new(Mutex::new(Vec::new())),
        ))
        .options(server_opts(CallbackMode::Inline, 0))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let c = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    // SESSION answers SYSTEM_ERR when `Request::backchannel` is `None`.
    assert_eq!(
        bind(&c, 1, true).unwrap_err(),
        ClientError::Rpc(AcceptStat::SystemErr)
    );
    w.stop();
}

#[test]
fn accepts_backchannel_dispatch_like_the_server() {
    let w = World::new(0);
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
        ClientOptions::default(),
        service(&log, 4),
    )
    .expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    bind(&c, 5, true).expect("bind");
    let call = |prog: u32, vers: u32, p: u32| {
        server.back_call_blocking(
            5,
            Proc::new(prog, vers, p),
            sum_args(server.back_args(), 20, 22),
        )
    };
    assert_eq!(
        call(CB_PROG, 2, CB_SUM).unwrap().results(),
        42u32.to_be_bytes()
    );
    // NULL: an empty SUCCESS.
    assert!(call(CB_PROG, 1, 0).unwrap().results().is_empty());
    assert_eq!(
        call(CB_PROG + 1, 1, CB_SUM).unwrap_err(),
        ClientError::Rpc(AcceptStat::ProgUnavail)
    );
    assert_eq!(
        call(CB_PROG, 5, CB_SUM).unwrap_err(),
        ClientError::Rpc(AcceptStat::ProgMismatch { low: 1, high: 2 })
    );
    assert_eq!(
        call(CB_PROG, 1, 9).unwrap_err(),
        ClientError::Rpc(AcceptStat::ProcUnavail)
    );
    assert_eq!(
        call(CB_PROG, 1, CB_GARBAGE).unwrap_err(),
        ClientError::Rpc(AcceptStat::GarbageArgs)
    );
    // Backward calls carry no chunks: a receptacle is refused locally.
    let mut a = sum_args(server.back_args(), 1, 1);
    a.receptacle(server.back_args().unwrap().into_buf())
        .unwrap();
    let e = server
        .back_call_blocking(5, Proc::new(CB_PROG, 1, CB_SUM), a)
        .unwrap_err();
    assert!(matches!(e, ClientError::BadCall(_)), "{e:?}");
    // Client counters: 6 calls ran or were answered with an RPC error.
    let s = c.stats().snapshot();
    assert_eq!(s.back_calls, 6, "{s:?}");
    assert_eq!(s.back_replies, 6, "{s:?}");
    assert_eq!(s.back_errors, 4, "{s:?}");
    let t = server.totals();
    assert_eq!(t.back_calls, 6, "{t:?}");
    assert_eq!(t.back_replies, 2, "{t:?}");
    assert_eq!(t.back_errors, 5, "{t:?}");
    w.stop();
}

/// The upper layer: after every reconnection, binds the new connection to its session
/// (200 + the client's index); returns the number of rebinds.
fn spawn_rebinder(
    clients: Vec<Client>,
    stop: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seen = vec![0u64; clients.len()];
        let mut binds = 0;
        while stop.load(Ordering::SeqCst) == 0 {
            for (k, c) in clients.iter().enumerate() {
                let r = c.stats().snapshot().reconnects;
                if r != seen[k] {
                    seen[k] = r;
                    let mut a = c.args().unwrap();
                    let s = 200 + k as u64;
                    a.put_u32((s >> 32) as u32).unwrap();
                    a.put_u32(s as u32).unwrap();
                    a.put_u32(1).unwrap();
                    let f = Arc::clone(&failures);
                    c.call(Proc::new(PROG, 2, SESSION), a, move |r| {
                        if r.is_err() {
                            f.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                    .expect("rebind");
                    binds += 1;
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        binds
    })
}

/// Drops every client connection up to four times, each after another sixth of the `n`
/// backward calls completed, with a backward call on the wire (held in a client handler in
/// worker mode); returns the number of drops.
fn spawn_dropper(
    mode: CallbackMode,
    n: usize,
    faults: Arc<Mutex<Vec<SoftFaults>>>,
    tally: Arc<Tally>,
    log: Arc<ClientLog>,
    server: Server,
) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let mut drops = 0;
        let mut last = 0;
        while tally.done() < n as u64 && drops < 4 {
            let d = tally.done();
            if d >= last + (n as u64) / 6 {
                last = d;
                let gated = mode == CallbackMode::Worker;
                if gated {
                    // Hold a backward call in a client handler: it is on the wire when the
                    // connections go.
                    log.gate.set(false);
                    let end = Instant::now() + Duration::from_secs(10);
                    while log.gate.waiting.load(Ordering::SeqCst) == 0
                        && tally.done() < n as u64
                        && Instant::now() < end
                    {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                } else if server.totals().back_in_flight == 0 {
                    last = d.saturating_sub(n as u64 / 6);
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                for f in faults.lock().unwrap().drain(..) {
                    f.drop_connection();
                }
                drops += 1;
                if gated {
                    log.gate.set(true);
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        log.gate.set(true);
        drops
    })
}

/// Connections dropped in the middle of backward traffic: every backward call completes
/// exactly once, successfully, after the clients reconnect and rebind their sessions.
fn drop_mid_backward_traffic(mode: CallbackMode, workers: usize) {
    let w = World::new(workers);
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
        .options(server_opts(mode, 4))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let log = ClientLog::new();
    let opts = ClientOptions {
        credits: 4,
        mode,
        max_retransmits: 50,
        max_reconnects: 50,
        ..ClientOptions::default()
    };
    let nclients = 3;
    let clients: Vec<Client> = (0..nclients)
        .map(|_| {
            Client::connect_serving(&w.client_ep, w.addr, opts, service(&log, 4)).expect("client")
        })
        .collect();
    for (k, c) in clients.iter().enumerate() {
        assert!(c.wait_connected(Duration::from_secs(5)));
        bind(c, 200 + k as u64, true).expect("bind");
    }
    let per = 300;
    let n = nclients * per;
    let tally = Tally::new(n);
    let stop = Arc::new(AtomicU64::new(0));
    let bind_failures = Arc::new(AtomicU64::new(0));
    let rebinder = spawn_rebinder(
        clients.clone(),
        Arc::clone(&stop),
        Arc::clone(&bind_failures),
    );
    let dropper = spawn_dropper(
        mode,
        n,
        Arc::clone(&faults),
        Arc::clone(&tally),
        Arc::clone(&log),
        server.clone(),
    );
    for k in 0..nclients {
        back_fire(&server, 200 + k as u64, k * per..(k + 1) * per, &tally);
    }
    let end = Instant::now() + Duration::from_secs(60);
    while tally.done() < n as u64 {
        if Instant::now() > end {
            for c in &clients {
                eprintln!("{:?} {:?}", c.state(), c.stats().snapshot());
            }
            for s in server.connection_stats() {
                eprintln!("server conn {s:?}");
            }
            panic!(
                "{mode:?}: only {} of {n} backward calls completed",
                tally.done()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let drops = dropper.join().unwrap();
    stop.store(1, Ordering::SeqCst);
    let binds = rebinder.join().unwrap();
    tally.all_ok_exactly_once(n, "backward");
    assert_eq!(bind_failures.load(Ordering::SeqCst), 0, "a rebind failed");
    assert!(drops > 0, "no connection was dropped");
    let lost: u64 = clients
        .iter()
        .map(|c| c.stats().snapshot().connection_losses)
        .sum();
    assert!(lost > 0 && binds > 0, "lost {lost} rebinds {binds}");
    // Retransmissions reuse the XID: every XID a client ran belongs to a completed call.
    let replied: HashSet<u32> = tally.xids.lock().unwrap().iter().copied().collect();
    assert_eq!(replied.len(), n, "XIDs not unique per call");
    let ran = log.xids.lock().unwrap();
    assert!(ran.len() >= n);
    let foreign = ran.iter().filter(|x| !replied.contains(x)).count();
    assert_eq!(
        foreign, 0,
        "{foreign} backward calls ran under an XID no reply carried"
    );
    let t = server.totals();
    if mode == CallbackMode::Worker {
        // Each drop had a backward call on the wire (held in a client handler).
        assert!(t.back_retransmits > 0, "{t:?}");
    }
    assert_eq!(t.back_replies, n as u64, "{t:?}");
    eprintln!(
        "{mode:?}: {drops} drops, {lost} losses, {binds} rebinds, {} backward sends, {} \
         retransmits, {} runs for {n} calls",
        t.back_calls,
        t.back_retransmits,
        ran.len()
    );
    drop(ran);
    w.stop();
}

#[test]
fn accepts_connection_drop_mid_backward_traffic_inline() {
    drop_mid_backward_traffic(CallbackMode::Inline, 0);
}

#[test]
fn accepts_connection_drop_mid_backward_traffic_worker_mode() {
    drop_mid_backward_traffic(CallbackMode::Worker, 2);
}

/// A client in worker mode whose backward handler makes a blocking forward call on the same
/// client (an NFSv4.1 client returning a recalled delegation, or flushing data, before it
/// answers CB_RECALL): the forward call completes while the handler waits. (Before, the
/// outcome of `call_blocking` went through the connection's worker, the one running the
/// handler: the handler waited for itself forever, the call timeout included.)
#[test]
fn accepts_forward_call_from_a_backward_handler_in_worker_mode() {
    let w = World::new(2);
    let server = Server::builder()
        .program(server_program(
            Tally::new(1),
            Arc::new(Mutex::new(Vec::new())),
        ))
        .options(server_opts(CallbackMode::Inline, 4))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let me: Arc<std::sync::OnceLock<Client>> = Arc::new(std::sync::OnceLock::new());
    // What each handler got: the forward result, or why it gave up waiting.
    let inner: Arc<Mutex<Vec<Result<u32, String>>>> = Arc::new(Mutex::new(Vec::new()));
    let (m2, i2) = (Arc::clone(&me), Arc::clone(&inner));
    let prog = Program::new(CB_PROG, 1..=1).procedure(
        CB_SUM,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let c = m2.get().ok_or(Reject::SystemErr)?.clone();
            // Forward SUM with the backward call's arguments, made with `call_blocking` on
            // another thread while this handler (on the worker) waits for it, at most 10 s:
            // a regression fails the test instead of hanging it.
            let mut a = c.args().ok_or(Reject::SystemErr)?;
            a.put(req.args).map_err(|_| Reject::SystemErr)?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let r = c
                    .call_blocking(Proc::new(PROG, 2, SUM), a)
                    .map(|rep| be32(rep.results(), 0).unwrap_or(u32::MAX))
                    .map_err(|e| format!("{e:?}"));
                let _ = tx.send(r);
            });
            let r = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| Err("no outcome within 10 s".into()));
            i2.lock().unwrap().push(r.clone());
            let v = r.map_err(|_| Reject::SystemErr)?;
            out.put_u32(v).map_err(|_| Reject::SystemErr)
        },
    );
    let c = Client::connect_serving(
        &w.client_ep,
        w.addr,
        ClientOptions {
            mode: CallbackMode::Worker,
            ..ClientOptions::default()
        },
        BackchannelService::new().program(prog).credits(2),
    )
    .expect("client");
    assert!(me.set(c.clone()).is_ok());
    assert!(c.wait_connected(Duration::from_secs(5)));
    bind(&c, 11, true).expect("bind");
    for i in 0..3u32 {
        let mut a = server.back_args().expect("buffer");
        a.put_u32(i).unwrap();
        a.put_u32(40).unwrap();
        // (The server's backward calls time out after 30 s by default.)
        let r = server.back_call_blocking(11, Proc::new(CB_PROG, 1, CB_SUM), a);
        let inner = inner.lock().unwrap().clone();
        let r = r.unwrap_or_else(|e| panic!("backward call {i}: {e:?}; handlers: {inner:?}"));
        assert_eq!(r.results(), (i + 40).to_be_bytes(), "{inner:?}");
    }
    let inner = inner.lock().unwrap().clone();
    assert_eq!(inner, vec![Ok(40), Ok(41), Ok(42)]);
    w.stop();
}
