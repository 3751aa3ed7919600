//! A server node with a shared receive queue (`ServerOptions::shared_receive_queue`): many
//! clients on one reactor, calls in flight on all of them (inline and DDP), every call
//! completing exactly once; the receives in use never exceed the SRQ depth, the receive memory
//! is that of the SRQ whatever the number of connections, and grants shrink (then connects are
//! refused) when the SRQ cannot back more.

mod api_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::verbs::soft::{SoftConfig, SoftFaults};
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    BackchannelService, CallbackMode, Client, ClientError, ClientOptions, EndpointConfig,
    NodeSnapshot, Program, Reject, Reply, ReplyBuilder, Request, Server, ServerOptions,
};

const CREDITS: u32 = 4;
const DDP_LEN: usize = 12_000;

/// One reactor carrying both endpoints (so every server connection is on one node), room
/// for `conns` connections on each.
fn world(conns: usize) -> World {
    world_with(conns, 0)
}

/// [`world`] with `workers` worker threads per endpoint.
fn world_with(conns: usize, workers: usize) -> World {
    let cfg = EndpointConfig {
        max_conns_per_reactor: conns + 4,
        ..endpoint_config(workers)
    };
    World::with_endpoints(&reactor_config(1), &SoftConfig::default(), cfg.clone(), cfg)
}

fn srq_options(depth: u32, credits: u32) -> ServerOptions {
    ServerOptions {
        credits,
        shared_receive_queue: Some(depth),
        backchannel_credits: 0,
        max_conns_per_peer: 0,
        ..ServerOptions::default()
    }
}

fn client_options() -> ClientOptions {
    ClientOptions {
        credits: CREDITS,
        max_reconnects: 0,
        ..ClientOptions::default()
    }
}

/// Completions by call index, and how many were wrong.
struct Count {
    seen: Mutex<Vec<u32>>,
    bad: AtomicU64,
    done: AtomicU64,
}

impl Count {
    fn new(n: usize) -> Arc<Count> {
        Arc::new(Count {
            seen: Mutex::new(vec![0; n]),
            bad: AtomicU64::new(0),
            done: AtomicU64::new(0),
        })
    }

    fn record(&self, i: usize, ok: bool) {
        self.seen.lock().unwrap()[i] += 1;
        if !ok {
            // Relaxed: read after `done` says everything completed (SeqCst below).
            self.bad.fetch_add(1, Ordering::Relaxed);
        }
        // SeqCst: pairs with the loads in `wait`.
        self.done.fetch_add(1, Ordering::SeqCst);
    }

    fn wait(&self, n: u64) {
        let end = Instant::now() + Duration::from_secs(60);
        // SeqCst: pairs with the increments in `record`.
        while self.done.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < end,
                "only {} of {n} calls completed",
                self.done.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let seen = self.seen.lock().unwrap();
        assert!(
            seen.iter().all(|&c| c == 1),
            "a call completed twice or never"
        );
        assert_eq!(
            self.bad.load(Ordering::Relaxed),
            0,
            "wrong or failed replies"
        );
    }
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "resource never became free");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Starts call `i` on `c` (retrying while the client is busy): SUM inline when `i` is even,
/// LEN with a 12000-octet DDP argument (a Read chunk) when odd.
fn start_call(c: &Client, i: usize, count: &Arc<Count>) {
    let mut args = wait_for(|| c.args());
    let (proc_, want) = if i % 2 == 0 {
        args.put_u32(i as u32).unwrap();
        args.put_u32(7).unwrap();
        (SUM, (i as u32 + 7).to_be_bytes().to_vec())
    } else {
        let mut payload = wait_for(|| c.buffer());
        for (k, b) in payload[..DDP_LEN].iter_mut().enumerate() {
            *b = (k * 7 + i) as u8;
        }
        let mut want = (DDP_LEN as u32).to_be_bytes().to_vec();
        want.extend_from_slice(&checksum(&payload[..DDP_LEN]).to_be_bytes());
        args.put_u32(DDP_LEN as u32).unwrap();
        args.ddp(payload, DDP_LEN).unwrap();
        (LEN, want)
    };
    let want: Arc<[u8]> = want.into();
    loop {
        let (n, w) = (Arc::clone(count), Arc::clone(&want));
        let cb = move |r: Result<Reply, ClientError>| {
            n.record(i, matches!(&r, Ok(rep) if rep.results() == &w[..]));
        };
        match c.call(Proc::new(PROG, 3, proc_), args, cb) {
            Ok(()) => return,
            Err(r) => {
                assert_eq!(r.error, ClientError::Busy);
                args = r.args;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// `n` clients of one SRQ server node (depth `depth`), `per` calls each, all started before
/// any is awaited. Returns the server node's counters afterwards.
fn run(n: usize, depth: u32, per: usize) -> NodeSnapshot {
    let w = world(n);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(srq_options(depth, CREDITS))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let clients: Vec<Client> = (0..n)
        .map(|_| Client::connect(&w.client_ep, w.addr, client_options()).expect("client"))
        .collect();
    for c in &clients {
        assert!(c.wait_connected(Duration::from_secs(20)), "connected");
    }
    let count = Count::new(n * per);
    for j in 0..per {
        for (k, c) in clients.iter().enumerate() {
            start_call(c, k * per + j, &count);
        }
    }
    count.wait((n * per) as u64);
    for c in &clients {
        let s = c.stats().snapshot();
        assert_eq!(s.replies, per as u64);
        assert!(s.credits_granted <= u64::from(CREDITS));
    }
    assert_eq!(server.accepted(), n as u64);
    assert_eq!(server.rejected(), 0);
    let snap = w.server_ep.node_stats(0).expect("node 0");
    drop(clients);
    w.stop();
    snap
}

#[test]
fn srq_node_serves_many_clients_with_receive_memory_flat_in_the_connection_count() {
    // Depth for 64 clients of 4 credits plus the slack.
    let depth = 64 * CREDITS + 2;
    let few = run(8, depth, 16);
    let many = run(64, depth, 16);
    for s in [&few, &many] {
        assert_eq!(s.srq_depth, u64::from(depth), "{s:?}");
        assert!(s.srq_held_max > 0 && s.srq_held_max <= s.srq_depth, "{s:?}");
        assert!(s.srq_bytes >= u64::from(depth) * 4096, "{s:?}");
    }
    eprintln!(
        "SRQ depth {depth}: 8 clients: {} octets, {} held at most; 64 clients: {} octets, {} held at most, {} low-water events",
        few.srq_bytes, few.srq_held_max, many.srq_bytes, many.srq_held_max, many.srq_low_water
    );
    // The receive memory is the SRQ's: the same for 8 and 64 connections.
    assert_eq!(few.srq_bytes, many.srq_bytes);
    assert!(
        many.srq_held_max > few.srq_held_max,
        "more connections, more receives in use: {} vs {}",
        many.srq_held_max,
        few.srq_held_max
    );
}

/// The high-water gauge counts every receive a call held, however briefly: one client making
/// one call at a time, served by inline handlers, holds one receive per call while it is
/// served (the node takes the buffer back before it reposts, so a gauge sampled only when it
/// reposts would read 0).
#[test]
fn accepts_srq_held_high_water_with_inline_handlers_and_one_call_at_a_time() {
    let w = world(1);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(srq_options(4 * CREDITS + 2, CREDITS))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let c = Client::connect(&w.client_ep, w.addr, client_options()).expect("client");
    assert!(c.wait_connected(Duration::from_secs(20)), "connected");
    for i in 0..16 {
        assert_eq!(sum_call(&c, i, 1), Ok(i + 1));
    }
    let s = w.server_ep.node_stats(0).expect("node 0");
    assert_eq!(
        s.srq_held_max, 1,
        "one call at a time holds one receive: {s:?}"
    );
    drop(c);
    w.stop();
}

#[test]
fn srq_grants_shrink_and_then_connects_are_refused() {
    // 20 receives, 2 kept as slack: grants of 8, 8, then 2, then none.
    let w = world(8);
    let server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(srq_options(20, 8))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let opts = ClientOptions {
        credits: 8,
        ..client_options()
    };
    let mut clients = Vec::new();
    for _ in 0..3 {
        let c = Client::connect(&w.client_ep, w.addr, opts).expect("client");
        assert!(c.wait_connected(Duration::from_secs(20)));
        // The first reply carries the grant.
        assert_eq!(sum_call(&c, 2, 3), Ok(5));
        clients.push(c);
    }
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let grants: Vec<u64> = clients
            .iter()
            .map(|c| c.stats().snapshot().credits_granted)
            .collect();
        if grants == [8, 8, 2] {
            break;
        }
        assert!(Instant::now() < end, "grants {grants:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The server's gauge reports the grant the SRQ ledger gave each connection, not `credits`.
    server_grants_become(&server, &[8, 8, 2]);
    let refused = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    assert!(matches!(
        sum_call(&refused, 1, 2),
        Err(ClientError::Rejected(_))
    ));
    assert_eq!(server.rejected(), 1);
    // A connection that goes returns its share: a newcomer is admitted again.
    clients.pop().unwrap().close();
    let end = Instant::now() + Duration::from_secs(20);
    let again = loop {
        let c = Client::connect(&w.client_ep, w.addr, opts).expect("client");
        if sum_call(&c, 1, 2) == Ok(3) {
            break c;
        }
        assert!(Instant::now() < end, "the share never came back");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The gauge is sampled at the end of the reactor's round: wait for it.
    let end = Instant::now() + Duration::from_secs(20);
    while again.stats().snapshot().credits_granted != 2 {
        assert!(Instant::now() < end, "{:?}", again.stats().snapshot());
        std::thread::sleep(Duration::from_millis(2));
    }
    server_grants_become(&server, &[8, 8, 2]);
    drop((clients, again, refused));
    w.stop();
}

/// Waits until the server's live connections report `want` as their `credits_granted`
/// gauges (in accept order; each is sampled at the end of its connection's round).
fn server_grants_become(server: &Server, want: &[u64]) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let grants: Vec<u64> = server
            .live_connections()
            .iter()
            .map(|c| c.snapshot().credits_granted)
            .collect();
        if grants == want {
            return;
        }
        assert!(
            Instant::now() < end,
            "server grants {grants:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A blocking SUM of `a + b`.
fn sum_call(c: &Client, a: u32, b: u32) -> Result<u32, ClientError> {
    let mut args = wait_for(|| c.args());
    args.put_u32(a).unwrap();
    args.put_u32(b).unwrap();
    let r = c.call_blocking(Proc::new(PROG, 2, SUM), args)?;
    let w = r.results();
    Ok(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The program clients serve on their backchannel: CB_SUM.
const CB_PROG: u32 = 0x4000_0001;
const CB_SUM: u32 = 1;
/// Forward (i, v): the handler (on a worker) sends backward CB_SUM(i, v), waits for its reply
/// and returns its result.
const BOUNCE: u32 = 21;

fn bounce_program() -> Program {
    Program::new(PROG, 2..=3).procedure(SUM, sum).procedure(
        BOUNCE,
        |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let bc = req.backchannel().ok_or(Reject::SystemErr)?;
            bc.enable();
            let mut a = bc.args().ok_or(Reject::SystemErr)?;
            a.put(req.args.get(..8).ok_or(Reject::GarbageArgs)?)
                .map_err(|_| Reject::SystemErr)?;
            let r = bc
                .call_blocking(Proc::new(CB_PROG, 1, CB_SUM), a)
                .map_err(|_| Reject::SystemErr)?;
            out.put(r.results()).map_err(|_| Reject::SystemErr)
        },
    )
}

#[test]
fn srq_backward_replies_arrive_through_the_srq_in_worker_mode() {
    // RFC 8167: each server connection's backward replies land in the SRQ, backed by one
    // receive per backward call it may have outstanding (2 here) on top of its 4 credits.
    let n = 8;
    let depth = n as u32 * (CREDITS + 2) + 2;
    let w = world_with(n, 2);
    let _server = Server::builder()
        .program(bounce_program())
        .options(ServerOptions {
            mode: CallbackMode::Worker,
            backchannel_credits: 2,
            ..srq_options(depth, CREDITS)
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let cb = || {
        BackchannelService::new()
            .program(Program::new(CB_PROG, 1..=1).procedure(CB_SUM, sum))
            .credits(2)
    };
    let clients: Vec<Client> = (0..n)
        .map(|_| {
            Client::connect_serving(&w.client_ep, w.addr, client_options(), cb()).expect("client")
        })
        .collect();
    let per = 12;
    let count = Count::new(n * per);
    for j in 0..per {
        for (k, c) in clients.iter().enumerate() {
            let i = k * per + j;
            let proc_ = if j % 2 == 0 { BOUNCE } else { SUM };
            let mut args = wait_for(|| c.args());
            args.put_u32(i as u32).unwrap();
            args.put_u32(9).unwrap();
            let want = (i as u32 + 9).to_be_bytes();
            let n2 = Arc::clone(&count);
            let cb = move |r: Result<Reply, ClientError>| {
                n2.record(i, matches!(&r, Ok(rep) if rep.results() == want));
            };
            if let Err(r) = c.call(Proc::new(PROG, 2, proc_), args, cb) {
                panic!("call refused: {:?}", r.error);
            }
        }
    }
    count.wait((n * per) as u64);
    let s = w.server_ep.node_stats(0).expect("node 0");
    assert_eq!(s.srq_depth, u64::from(depth), "{s:?}");
    assert!(s.srq_held_max <= s.srq_depth, "{s:?}");
    drop(clients);
    w.stop();
}

/// Forward: 64 octets of arguments; the handler (on a worker) waits for the gate, then says
/// whether its arguments are still what it first read.
const GATED: u32 = 22;

#[test]
fn srq_lost_connection_keeps_a_running_handlers_arguments_until_it_returns() {
    // The arguments of an inline call live in an SRQ buffer. When its connection is lost while
    // a worker still reads them, the buffer must not go back to the SRQ (where another client's
    // call would overwrite it) until the handler returns; then it does, and so does the lost
    // connection's share of the grants.
    use std::sync::atomic::AtomicBool;
    let entered = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(AtomicBool::new(false));
    let intact = Arc::new(AtomicU64::new(0));
    let (e2, g2, i2) = (Arc::clone(&entered), Arc::clone(&gate), Arc::clone(&intact));
    let prog = Program::new(PROG, 2..=3).procedure(SUM, sum).procedure(
        GATED,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let first = req.args.to_vec();
            // SeqCst: the test thread waits for this, then for the loss, then opens the gate.
            e2.store(true, Ordering::SeqCst);
            while !g2.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let same = req.args == &first[..] && first.len() == 64;
            // SeqCst: read by the test thread after the handler returned.
            i2.store(1 + u64::from(same), Ordering::SeqCst);
            out.put_u32(u32::from(same)).map_err(|_| Reject::SystemErr)
        },
    );
    let depth = 2 * CREDITS + 2;
    // Two workers: each connection's handlers run on the worker of its slot (a: 0, b: 1), so
    // b's calls do not wait behind a's gated handler.
    let w = world_with(4, 2);
    let server = Server::builder()
        .program(prog)
        .options(ServerOptions {
            mode: CallbackMode::Worker,
            ..srq_options(depth, CREDITS)
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    let a = Client::connect(&w.client_ep, w.addr, client_options()).expect("client a");
    assert!(a.wait_connected(Duration::from_secs(20)));
    let b = Client::connect(&w.client_ep, w.addr, client_options()).expect("client b");
    assert_eq!(sum_call(&b, 1, 1), Ok(2));
    let mut args = wait_for(|| a.args());
    args.put(&[0xa5; 64]).unwrap();
    assert!(
        a.call(Proc::new(PROG, 2, GATED), args, |_| {}).is_ok(),
        "gated call"
    );
    let end = Instant::now() + Duration::from_secs(20);
    // SeqCst: pairs with the handler's store.
    while !entered.load(Ordering::SeqCst) {
        assert!(Instant::now() < end, "handler never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    // a's connection breaks (its QP was the client endpoint's first).
    let f = faults.lock().unwrap()[0].clone();
    f.drop_connection();
    while server.totals().connection_losses < 1 {
        assert!(Instant::now() < end, "loss never seen");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Client b cycles every posted SRQ buffer many times over.
    for i in 0..100 {
        assert_eq!(sum_call(&b, i, 1), Ok(i + 1));
    }
    // SeqCst: pairs with the handler's loads.
    gate.store(true, Ordering::SeqCst);
    while intact.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < end, "handler never returned");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(intact.load(Ordering::SeqCst), 2, "arguments overwritten");
    // The lost connection's receive and share came back: a newcomer gets the full grant.
    let c = loop {
        let c = Client::connect(&w.client_ep, w.addr, client_options()).expect("client c");
        if sum_call(&c, 1, 2) == Ok(3) && c.stats().snapshot().credits_granted <= 4 {
            break c;
        }
        assert!(Instant::now() < end, "the share never came back");
        std::thread::sleep(Duration::from_millis(20));
    };
    while c.stats().snapshot().credits_granted != u64::from(CREDITS) {
        assert!(Instant::now() < end, "{:?}", c.stats().snapshot());
        std::thread::sleep(Duration::from_millis(2));
    }
    drop((a, b, c));
    w.stop();
}
