//! Idle connections and connection admission (issue 13 §2 item 5): raw soft-provider QPs that
//! connect to a real `Server` with valid RFC 8797 private data and then never send.

mod api_common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api_common::raw::*;
use api_common::*;
use rpcrdma_engine::proto::reject;
use rpcrdma_engine::verbs::soft::SoftConfig;
use rpcrdma_engine::verbs::soft::SoftDevice;
use rpcrdma_engine::verbs::CmEventKind;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallbackMode, Client, ClientError, ClientOptions, EndpointConfig, NodeSnapshot, Program,
    RejectReason, Reply, Server, ServerOptions,
};

fn sum_call(c: &Client, a: u32, b: u32) -> Result<u32, ClientError> {
    let mut args = c.args().expect("args");
    args.put_u32(a).unwrap();
    args.put_u32(b).unwrap();
    let r = c.call_blocking(Proc::new(PROG, 2, SUM), args)?;
    let v = r.results();
    Ok(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

/// The server endpoint's node counters, summed.
fn node_totals(w: &World) -> NodeSnapshot {
    let mut t = NodeSnapshot::default();
    for i in 0..w.server_ep.nodes() {
        t.accumulate(&w.server_ep.node_stats(i).expect("node"));
    }
    t
}

/// Issue 13 §2 item 5: `max_conns_per_reactor` × reactors idle raw connections (established with
/// valid RFC 8797 private data, RFC 8797 §5.1, then silent) must not lock an honest client out:
/// like Linux's `svc_check_conn_limits`, a connect at capacity closes the connection idle the
/// longest (here after the default 2-second grace) instead of being refused. Default options.
#[test]
fn accepts_honest_client_after_idle_flood() {
    let w = World::new(0);
    let _s = start(&w, ServerOptions::default());
    let attacker = w.fabric.open(ip(3));
    let raw = flood(&attacker, w.addr, capacity(&w));
    let c = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("client");
    assert_eq!(
        sum_call(&c, 40, 2),
        Ok(42),
        "honest client after an idle flood"
    );
    assert!(node_totals(&w).evictions >= 1, "{:?}", node_totals(&w));
    c.close();
    drop(raw);
    w.stop();
}

/// The connection idle the longest is the one evicted, and its peer sees the disconnect
/// (`RDMA_CM_EVENT_DISCONNECTED`); the others stay up. The counters say so: one eviction on
/// the node and on that connection.
#[test]
fn accepts_eviction_of_the_idlest_connection_which_sees_a_disconnect() {
    let w = World::with_reactors(0, &reactor_config(1));
    let o = ServerOptions {
        evict_idle_ms: 0,
        max_conns_per_peer: 0,
        ..ServerOptions::default()
    };
    let s = start(&w, o);
    let attacker = w.fabric.open(ip(3));
    // One at a time: the first is accepted first and so is idle the longest.
    let mut raw = flood(&attacker, w.addr, capacity(&w));
    let c = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("client");
    assert_eq!(sum_call(&c, 1, 2), Ok(3));
    let ev = raw[0].event().expect("the evicted peer sees an event");
    assert_eq!(ev.kind, CmEventKind::Disconnected, "{ev:?}");
    for (i, r) in raw.iter_mut().enumerate().skip(1) {
        assert_eq!(r.poll(), None, "raw connection {i} was not evicted");
    }
    let n = node_totals(&w);
    assert_eq!(
        (n.evictions, n.rejects_full, n.idle_closes),
        (1, 0, 0),
        "{n:?}"
    );
    assert_eq!(s.totals().evictions, 1);
    assert_eq!(s.rejected(), 0);
    c.close();
    drop(raw);
    w.stop();
}

/// Opens one raw connection from each of `n` addresses (10.0.1.0 and up) and waits until
/// every one is established: a flood no per-address count tells apart from honest clients.
fn flood_from_many(w: &World, n: usize) -> (Vec<SoftDevice>, Vec<Raw>) {
    let devs: Vec<SoftDevice> = (0..n)
        .map(|i| w.fabric.open(IpAddr::V4(Ipv4Addr::new(10, 0, 1, i as u8))))
        .collect();
    let mut v: Vec<Raw> = devs.iter().map(|d| Raw::connect(d, w.addr)).collect();
    for r in v.iter_mut() {
        r.established();
    }
    (devs, v)
}

/// A connect at capacity with no connection idle for the eviction grace (or eviction off) is
/// rejected, and the reject's private data tells the client why: `ServerFull`
/// (`rpcrdma_engine::proto::reject`, this crate's format — RFC 8797 defines none for rejects).
/// The capacity is held by one connection from each of many addresses: no address holds more
/// than the newcomer's would, so only the grace could make one evictable.
#[test]
fn rejects_connect_at_capacity_with_nothing_evictable() {
    for evict_idle in [true, false] {
        let w = World::new(0);
        let o = ServerOptions {
            evict_idle,
            evict_idle_ms: 600_000,
            max_conns_per_peer: 0,
            ..ServerOptions::default()
        };
        let s = start(&w, o);
        let attacker = w.fabric.open(ip(3));
        let (_devs, mut raw) = flood_from_many(&w, capacity(&w));
        // A raw requester sees the reason in the reject's private data.
        let mut extra = Raw::connect(&attacker, w.addr);
        let ev = extra.event().expect("reject");
        assert_eq!(ev.kind, CmEventKind::Rejected, "{ev:?}");
        assert_eq!(
            reject::decode(ev.private_data.as_slice()),
            Some(RejectReason::ServerFull)
        );
        // So does a Client, when it gives up.
        let o = ClientOptions {
            max_reconnects: 0,
            ..ClientOptions::default()
        };
        let c = Client::connect(&w.client_ep, w.addr, o).expect("client");
        assert_eq!(
            sum_call(&c, 1, 2),
            Err(ClientError::Rejected(RejectReason::ServerFull))
        );
        assert_eq!(c.reject_reason(), Some(RejectReason::ServerFull));
        let n = node_totals(&w);
        assert_eq!((n.rejects_full, n.evictions), (2, 0), "{n:?}");
        assert_eq!(s.rejected(), 2);
        // Every flooding connection is still up.
        for (i, r) in raw.iter_mut().enumerate() {
            assert_eq!(r.poll(), None, "raw connection {i}");
        }
        c.close();
        drop(raw);
        w.stop();
    }
}

/// `max_conns_per_peer`: the N+1st connection from one address is rejected with `PeerLimit`,
/// visible at the client as `ClientError::Rejected(PeerLimit)` and `Client::reject_reason`;
/// other addresses are not affected, and the share comes back when a connection closes.
#[test]
fn rejects_connect_over_the_per_peer_limit() {
    let w = World::new(0);
    let o = ServerOptions {
        max_conns_per_peer: 2,
        ..ServerOptions::default()
    };
    let s = start(&w, o);
    let a = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("a");
    let b = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("b");
    assert_eq!(sum_call(&a, 1, 1), Ok(2));
    assert_eq!(sum_call(&b, 2, 2), Ok(4));
    let once = ClientOptions {
        max_reconnects: 0,
        ..ClientOptions::default()
    };
    let c = Client::connect(&w.client_ep, w.addr, once).expect("c");
    assert_eq!(
        sum_call(&c, 3, 3),
        Err(ClientError::Rejected(RejectReason::PeerLimit))
    );
    assert_eq!(c.reject_reason(), Some(RejectReason::PeerLimit));
    // A raw requester from the same address reads the same reason.
    let mut raw = Raw::connect(w.client_ep.device(), w.addr);
    let ev = raw.event().expect("reject");
    assert_eq!(ev.kind, CmEventKind::Rejected, "{ev:?}");
    assert_eq!(
        reject::decode(ev.private_data.as_slice()),
        Some(RejectReason::PeerLimit)
    );
    // Another address is served.
    let other = w.fabric.open(ip(4));
    let mut r2 = Raw::connect(&other, w.addr);
    r2.established();
    let n = node_totals(&w);
    assert_eq!((n.rejects_peer_limit, n.rejects_full), (2, 0), "{n:?}");
    assert_eq!(s.rejected(), 2);
    // Closing a connection gives its share back.
    a.close();
    wait_until("the server to see a's disconnect", || {
        s.totals().connection_losses >= 1
    });
    let d = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("d");
    assert_eq!(sum_call(&d, 4, 4), Ok(8));
    b.close();
    d.close();
    drop((raw, r2));
    w.stop();
}

/// `max_connections` (issue 16: a limit that rejects extra connects with an RDMA-CM reject
/// carrying a reason): with 3 allowed and eviction off, a 4th connect is rejected with
/// `ConnectionLimit` whatever its address (a Client and a raw requester from another address
/// both read it), and a closed connection gives its share back.
#[test]
fn rejects_connect_over_the_servers_connection_limit() {
    let w = World::new(0);
    let o = ServerOptions {
        max_connections: 3,
        evict_idle: false,
        evict_idle_ms: 0,
        ..ServerOptions::default()
    };
    let s = start(&w, o);
    let a = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("a");
    let b = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("b");
    assert_eq!(sum_call(&a, 1, 1), Ok(2));
    assert_eq!(sum_call(&b, 2, 2), Ok(4));
    let other = w.fabric.open(ip(4));
    let mut r1 = Raw::connect(&other, w.addr);
    r1.established();
    let once = ClientOptions {
        max_reconnects: 0,
        ..ClientOptions::default()
    };
    let c = Client::connect(&w.client_ep, w.addr, once).expect("c");
    assert_eq!(
        sum_call(&c, 3, 3),
        Err(ClientError::Rejected(RejectReason::ConnectionLimit))
    );
    assert_eq!(c.reject_reason(), Some(RejectReason::ConnectionLimit));
    let mut r2 = Raw::connect(&other, w.addr);
    let ev = r2.event().expect("reject");
    assert_eq!(ev.kind, CmEventKind::Rejected, "{ev:?}");
    assert_eq!(
        reject::decode(ev.private_data.as_slice()),
        Some(RejectReason::ConnectionLimit)
    );
    let n = node_totals(&w);
    assert_eq!(
        (n.rejects_conn_limit, n.rejects_full, n.evictions),
        (2, 0, 0),
        "{n:?}"
    );
    assert_eq!(s.rejected(), 2);
    // The served connections are untouched, and closing one gives its share back.
    assert_eq!(sum_call(&b, 5, 5), Ok(10));
    a.close();
    wait_until("the server to see a's disconnect", || {
        s.totals().connection_losses >= 1
    });
    let d = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("d");
    assert_eq!(sum_call(&d, 4, 4), Ok(8));
    b.close();
    d.close();
    drop((r1, r2));
    w.stop();
}

const SLOW: u32 = 0x2000_0002;

/// A program whose procedure 1 sets `entered`, then holds its call until `release` is set (at
/// most 30 s).
fn slow_program(entered: Arc<AtomicBool>, release: Arc<AtomicBool>) -> Program {
    Program::new(SLOW, 1..=1).procedure(
        1,
        move |_req: &rpcrdma_poller::Request<'_>, out: &mut rpcrdma_poller::ReplyBuilder<'_>| {
            entered.store(true, Ordering::Release);
            let end = Instant::now() + Duration::from_secs(30);
            while !release.load(Ordering::Acquire) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
            out.put_u32(7)
                .map_err(|_| rpcrdma_poller::Reject::SystemErr)
        },
    )
}

/// `idle_timeout_ms`: an idle connection is closed (its peer sees the disconnect, counted in
/// `idle_closes`), while a connection whose call is held by a slow handler on a worker is not
/// idle and survives many timeouts (as Linux nfsd never ages out a transport with work).
#[test]
fn accepts_idle_timeout_closing_an_idle_connection_but_not_a_busy_one() {
    let w = World::new(1);
    let entered = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let o = ServerOptions {
        idle_timeout_ms: 100,
        mode: CallbackMode::Worker,
        ..ServerOptions::default()
    };
    let s = Server::builder()
        .program(slow_program(Arc::clone(&entered), Arc::clone(&release)))
        .options(o)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let c = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("client");
    let (tx, rx) = std::sync::mpsc::channel::<Result<Reply, ClientError>>();
    let args = c.args().expect("args");
    c.call(Proc::new(SLOW, 1, 1), args, move |r| {
        let _ = tx.send(r);
    })
    .expect("call");
    // Under load the client's connection may itself be closed as idle before its call arrives
    // (it then reconnects and sends the call again): count from the moment the handler has it.
    wait_until("the call to reach the handler", || {
        entered.load(Ordering::Acquire)
    });
    let closes = s.totals().idle_closes;
    let losses = c.stats().snapshot().connection_losses;
    let attacker = w.fabric.open(ip(3));
    let mut raw = Raw::connect(&attacker, w.addr);
    raw.established();
    let ev = raw.event().expect("the idle connection is closed");
    assert_eq!(ev.kind, CmEventKind::Disconnected, "{ev:?}");
    // Many timeouts later the busy connection is still up.
    std::thread::sleep(Duration::from_millis(1000));
    let busy: Vec<_> = s
        .connection_stats()
        .into_iter()
        .filter(|x| x.credits_in_use > 0)
        .collect();
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert_eq!((busy[0].idle_closes, busy[0].connection_losses), (0, 0));
    assert_eq!(c.stats().snapshot().connection_losses, losses);
    assert_eq!(
        s.totals().idle_closes,
        closes + 1,
        "only the idle connection"
    );
    release.store(true, Ordering::Release);
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the slow call completes");
    assert_eq!(
        r.map(|r| r.results().to_vec()),
        Ok(7u32.to_be_bytes().to_vec())
    );
    assert!(node_totals(&w).idle_closes >= 1);
    c.close();
    drop(raw);
    w.stop();
}

/// A client that tries once (no reconnection): what a refused newcomer sees at once.
fn once() -> ClientOptions {
    ClientOptions {
        max_reconnects: 0,
        ..ClientOptions::default()
    }
}

/// Waits until `s` counts `n` accepted connections and then `ms` more milliseconds (so they
/// are idle past a grace of less than `ms`).
fn idle_for(s: &Server, n: u64, ms: u64) {
    wait_until("the connections to be accepted", || s.accepted() >= n);
    std::thread::sleep(Duration::from_millis(ms));
}

/// SRQ reservations held by idle connections (ServerOptions::shared_receive_queue): an SRQ
/// that backs two connections' grants is taken by two silent connections; a newcomer from
/// another address is admitted by evicting one of them (its reservation comes back), not
/// refused `NoResources` while the idle holders sit.
#[test]
fn accepts_newcomer_when_idle_srq_holders_sit_by_evicting_one() {
    let w = World::with_reactors(0, &reactor_config(1));
    // Grants of 4 credits + 4 backward receives: 8 each, 2 × 8 + 2 of slack.
    let o = ServerOptions {
        credits: 4,
        backchannel_credits: 4,
        shared_receive_queue: Some(18),
        evict_idle_ms: 100,
        ..ServerOptions::default()
    };
    let s = start(&w, o);
    let attacker = w.fabric.open(ip(3));
    let mut raw = flood(&attacker, w.addr, 2);
    idle_for(&s, 2, 150);
    let c = Client::connect(&w.client_ep, w.addr, once()).expect("client");
    assert_eq!(sum_call(&c, 20, 22), Ok(42), "newcomer on a full SRQ");
    let n = node_totals(&w);
    assert_eq!((n.evictions, n.rejects_other), (1, 0), "{n:?}");
    let evicted = raw.iter_mut().filter_map(|r| r.poll()).count();
    assert_eq!(evicted, 1, "one idle holder evicted");
    c.close();
    drop(raw);
    w.stop();
}

/// `max_connections` reached by idle holders: a newcomer from another address is admitted by
/// evicting the idlest holder (server-wide limit, like the reactors' slots), not refused
/// `ConnectionLimit` while they sit.
#[test]
fn accepts_newcomer_at_the_servers_connection_limit_by_evicting_an_idle_holder() {
    let w = World::with_reactors(0, &reactor_config(1));
    let o = ServerOptions {
        max_connections: 2,
        evict_idle_ms: 100,
        ..ServerOptions::default()
    };
    let s = start(&w, o);
    let attacker = w.fabric.open(ip(3));
    let mut raw = flood(&attacker, w.addr, 2);
    idle_for(&s, 2, 150);
    let c = Client::connect(&w.client_ep, w.addr, once()).expect("client");
    assert_eq!(sum_call(&c, 1, 2), Ok(3), "newcomer at max_connections");
    let ev = raw[0].event().expect("the idlest holder is evicted");
    assert_eq!(ev.kind, CmEventKind::Disconnected, "{ev:?}");
    assert_eq!(raw[1].poll(), None, "only one evicted");
    let n = node_totals(&w);
    assert_eq!((n.evictions, n.rejects_conn_limit), (1, 0), "{n:?}");
    c.close();
    drop(raw);
    w.stop();
}

/// Connections of `ep` that call NULL every `every` until `stop` (none while `pause` is
/// set; the connections stay); each thread returns the errors its calls met.
fn pingers(
    ep: &Endpoint,
    addr: SocketAddr,
    n: usize,
    every: Duration,
    stop: &Arc<AtomicBool>,
    pause: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<usize>> {
    (0..n)
        .map(|_| {
            let c = Client::connect(ep, addr, honest_opts()).expect("pinger");
            assert!(c.wait_connected(Duration::from_secs(10)));
            let stop = Arc::clone(stop);
            let pause = Arc::clone(pause);
            std::thread::spawn(move || {
                let mut errors = 0;
                while !stop.load(Ordering::Acquire) {
                    if pause.load(Ordering::Acquire) {
                        std::thread::sleep(every);
                        continue;
                    }
                    let a = c.args().expect("args");
                    errors += usize::from(c.call_blocking(Proc::new(PROG, 2, 0), a).is_err());
                    std::thread::sleep(every);
                }
                c.close();
                errors
            })
        })
        .collect()
}

/// The eviction tests' world: one reactor of 4 slots, a server with a 500 ms eviction grace
/// and no per-peer limit, an honest client that made one call, and endpoints at two more
/// addresses (10.0.0.9, 10.0.0.10).
fn eviction_world() -> (World, Server, Client, [Endpoint; 2]) {
    let cfg = EndpointConfig {
        max_conns_per_reactor: 4,
        ..endpoint_config(0)
    };
    let w = World::with_endpoints(&reactor_config(1), &SoftConfig::default(), cfg.clone(), cfg);
    let o = ServerOptions {
        evict_idle_ms: 500,
        max_conns_per_peer: 0,
        ..ServerOptions::default()
    };
    let _s = start(&w, o);
    let honest = Client::connect(&w.client_ep, w.addr, honest_opts()).expect("honest");
    assert_eq!(sum_call(&honest, 1, 1), Ok(2));
    let ep_a = Endpoint::new(&w.set, w.fabric.open(ip(9)), endpoint_config(0)).expect("ep");
    let ep_b = Endpoint::new(&w.set, w.fabric.open(ip(10)), endpoint_config(0)).expect("ep");
    (w, _s, honest, [ep_a, ep_b])
}

/// Eviction aimed at an honest client: the reactor's slots hold one honest connection, idle
/// past the eviction grace, and three of an attacker's address that each call NULL every
/// 100 ms (a fifth of the 500 ms grace, as 300 ms is of the default 2 s), so they are never
/// idle that long. The attacker's new connections must not evict the honest one (its address
/// holds the most already: nobody holds as many); one from a second attacker address evicts
/// an attacker connection (that address holds the most), never the honest one.
#[test]
fn rejects_eviction_aimed_at_an_idle_honest_client() {
    let (w, _s, honest, [ep_a, ep_b]) = eviction_world();
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(AtomicBool::new(false));
    let ping = pingers(&ep_a, w.addr, 3, Duration::from_millis(100), &stop, &pause);
    // The honest client is now idle past the grace; the attacker's connections never are.
    std::thread::sleep(Duration::from_millis(800));
    for k in 0..5 {
        let extra = Client::connect(&ep_a, w.addr, once()).expect("extra");
        assert_eq!(
            sum_call(&extra, k, 1),
            Err(ClientError::Rejected(RejectReason::ServerFull)),
            "attempt {k}: the attacker's address holds the most"
        );
        extra.close();
        std::thread::sleep(Duration::from_millis(100));
    }
    // From a second address: one of the first address's connections makes room.
    let second = Client::connect(&ep_b, w.addr, once()).expect("second");
    assert_eq!(sum_call(&second, 2, 2), Ok(4), "second address admitted");
    let h = honest.stats().snapshot();
    assert_eq!(
        (h.connection_losses, h.reconnects),
        (0, 0),
        "the honest client was evicted"
    );
    assert_eq!(sum_call(&honest, 3, 3), Ok(6));
    assert_eq!(node_totals(&w).evictions, 1, "{:?}", node_totals(&w));
    stop.store(true, Ordering::Release);
    for p in ping {
        p.join().expect("pinger");
    }
    second.close();
    honest.close();
    w.stop();
}

/// A newcomer from an address under its fair share, arriving while every connection of the
/// address over its share is busy (NULL every 10 ms: never idle an eighth of the 500 ms
/// grace), waits for one of them to settle and is admitted by its eviction, not refused; the
/// honest client idle past the grace is not touched.
#[test]
fn accepts_newcomer_once_a_busy_over_share_connection_settles() {
    let (w, _s, honest, [ep_a, ep_b]) = eviction_world();
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(AtomicBool::new(false));
    let ping = pingers(&ep_a, w.addr, 3, Duration::from_millis(10), &stop, &pause);
    std::thread::sleep(Duration::from_millis(800));
    // The busy connections pause 300 ms after the newcomer asks (it may wait 2 s).
    let pauser = {
        let pause = Arc::clone(&pause);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            pause.store(true, Ordering::Release);
        })
    };
    let second = Client::connect(&ep_b, w.addr, once()).expect("second");
    assert_eq!(sum_call(&second, 2, 2), Ok(4), "second address admitted");
    pauser.join().expect("pauser");
    let h = honest.stats().snapshot();
    assert_eq!(
        (h.connection_losses, h.reconnects),
        (0, 0),
        "the honest client was evicted"
    );
    assert_eq!(sum_call(&honest, 3, 3), Ok(6));
    assert_eq!(node_totals(&w).evictions, 1, "{:?}", node_totals(&w));
    stop.store(true, Ordering::Release);
    for p in ping {
        p.join().expect("pinger");
    }
    second.close();
    honest.close();
    w.stop();
}
