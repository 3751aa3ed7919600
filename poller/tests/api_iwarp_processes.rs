//! The poller's `Client` and `Server` end to end with server and client in two processes, over
//! the user-space iWARP provider (RDMAP/DDP/MPA on loopback TCP): this test binary runs itself
//! again as the server (`procs`, the engine tests' one helper for it), in the callback mode,
//! reactor idle mode and program each test names.
//!
//! Forward calls (the calls of the in-process API tests, from the client's process): NULL and
//! ECHO inline; the RFC 5531 rejections (PROG_UNAVAIL, PROG_MISMATCH with the versions served,
//! PROC_UNAVAIL, GARBAGE_ARGS) and SUM (`api_common::rejects_round`); DDP both ways, a long
//! call and a long reply (`api_common::ddp_round`), with handlers inline, on worker threads,
//! and with both processes' reactors in interrupt mode (sleeping in `poll(2)` when idle: the
//! iWARP CQ has no descriptor, so remote completions reach a sleeping reactor at its bounded
//! sleep). The client exposes its chunks through memory windows bound per call, and both
//! sides offer remote invalidation.
//!
//! Backward calls (RFC 8167, the body of `api_backchannel`'s colliding-XID tests): clients
//! that serve a program on their backchannel bind sessions, then each forward BOUNCE makes the
//! server's handler send a backward call with the forward call's XID (in worker mode every
//! other one waits for the backward reply in the handler), in Version One and Two, while the
//! server sends backward calls of its own to each bound session. The server process checks
//! what it served: its call count, every backward call answered once.

mod api_common;
#[path = "../../engine/tests/common/procs.rs"]
mod procs;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api_common::back::{
    back_fire, bounce_proc, bound_clients, check_back_totals, check_forward_xids_used_backward,
    forward_fire, server_opts, server_program, sum_args, wait_for, ClientLog,
};
use api_common::{
    ddp_round, endpoint_config, program, reactor_config, rejects_round, Tally, ECHO, PROG, SUM,
};
use procs::Peer;
use rpcrdma_engine::verbs::iwarp::IwarpProvider;
use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::{
    BackoffConfig, CallbackMode, Client, ClientOptions, Endpoint, Proc, ProtocolVersion,
    ReactorConfig, ReactorSet, Server, ServerOptions,
};

/// Calls the client makes in a forward round: NULL, ECHO, `rejects_round`, `ddp_round`.
const CALLS: u64 = 2 + api_common::REJECTS_ROUND_CALLS + api_common::DDP_ROUND_CALLS;
/// Clients of a backward round, and forward BOUNCE calls each makes.
const BACK_CLIENTS: usize = 2;
const PER_CLIENT: usize = 50;
/// Forward BOUNCE calls of a backward round (each sends one backward call).
const BOUNCES: usize = BACK_CLIENTS * PER_CLIENT;
/// Backward calls the server sends on its own to each client's session.
const PER_SESSION: usize = 50;
/// The first client's session (the others follow).
const FIRST_SESSION: u64 = 100;

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// How a process runs: its handlers' mode (workers for worker mode) and its reactors.
#[derive(Clone, Copy)]
struct Mode {
    mode: CallbackMode,
    workers: usize,
    interrupt: bool,
}

const INLINE: Mode = Mode {
    mode: CallbackMode::Inline,
    workers: 0,
    interrupt: false,
};
const WORKER: Mode = Mode {
    mode: CallbackMode::Worker,
    workers: 2,
    interrupt: false,
};
const INTERRUPT: Mode = Mode {
    interrupt: true,
    ..INLINE
};

impl Mode {
    fn reactors(self) -> ReactorConfig {
        let mut c = reactor_config(1);
        if self.interrupt {
            c.backoff = BackoffConfig::interrupt();
        }
        c
    }

    /// Reactors and an iWARP endpoint on loopback.
    fn endpoint(self) -> (ReactorSet, Endpoint<IwarpProvider>) {
        let set = ReactorSet::start(&self.reactors()).expect("reactors");
        let dev = IwarpProvider::open(lo()).expect("iwarp device");
        let ep = Endpoint::<IwarpProvider>::new(&set, dev, endpoint_config(self.workers))
            .expect("endpoint");
        (set, ep)
    }
}

/// A free port on loopback (bound, then released for the server), below the kernel's
/// ephemeral range (32768-60999 by default): no other socket (a connection's local port, a
/// listener on port 0) takes it before the server binds it, as can happen to a port 0
/// answer. The calls of one process walk through 24000-31999 from a place the process id
/// picks.
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    for _ in 0..8_000 {
        // Relaxed: a counter; only its distinct values matter.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 24_000 + (std::process::id().wrapping_add(n) % 8_000) as u16;
        if TcpListener::bind((lo(), port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in 24000-31999");
}

/// A server role: serves the forward test program in `m` until the parent is done, then
/// checks it served `CALLS` calls on one connection.
fn serve_forward(role: &str, m: Mode) {
    procs::expect_role(role);
    let (mut set, ep) = m.endpoint();
    let port = free_port();
    let server = Server::builder()
        .program(program(ep.buffers().clone()))
        .mode(m.mode)
        .start(&ep, SocketAddr::new(lo(), port))
        .expect("server");
    procs::announce(port);
    procs::wait_for_parent();
    assert_eq!(server.totals().calls, CALLS, "calls served");
    assert_eq!(server.accepted(), 1, "connections");
    set.stop().expect("stop");
    println!("SERVER OK");
}

/// A server role whose handlers send backward calls (`server_program`), in `m`, and which
/// sends `PER_SESSION` backward calls of its own to each client's session once bound; checks
/// every backward call was answered once.
fn serve_backward(role: &str, m: Mode) {
    procs::expect_role(role);
    let (mut set, ep) = m.endpoint();
    let port = free_port();
    let back = Tally::new(BOUNCES);
    let refused = Arc::new(Mutex::new(Vec::new()));
    let server = Server::builder()
        .program(server_program(Arc::clone(&back), refused))
        .options(ServerOptions {
            // Room for every call a connection may get at once (an inline handler cannot
            // wait for ring space).
            backchannel_queue: 512,
            ..server_opts(m.mode, 4)
        })
        .start(&ep, SocketAddr::new(lo(), port))
        .expect("server");
    procs::announce(port);
    let own = Tally::new(BACK_CLIENTS * PER_SESSION);
    let feeder = {
        let (server, own) = (server.clone(), Arc::clone(&own));
        std::thread::spawn(move || {
            for k in 0..BACK_CLIENTS {
                let session = FIRST_SESSION + k as u64;
                wait_for("the session bound", 30, || {
                    server.session_backchannel(session).is_some()
                });
                let base = k * PER_SESSION;
                back_fire(&server, session, base..base + PER_SESSION, &own);
            }
        })
    };
    procs::wait_for_parent();
    feeder.join().expect("feeder");
    back.wait(BOUNCES as u64, 30, "backward");
    back.all_ok_exactly_once(BOUNCES, "backward");
    own.wait(own_calls(), 30, "backward to the sessions");
    own.all_ok_exactly_once(BACK_CLIENTS * PER_SESSION, "backward to the sessions");
    check_back_totals(&server, BOUNCES as u64 + own_calls());
    // SESSION per client, the BOUNCEs, a SUM per client.
    let calls = (2 * BACK_CLIENTS + BOUNCES) as u64;
    assert_eq!(server.totals().calls, calls, "calls served");
    set.stop().expect("stop");
    println!("SERVER OK");
}

#[test]
#[ignore = "the other process of a two-process test: run by accepts_calls_between_two_processes_over_iwarp"]
fn server_process() {
    serve_forward("server_process", INLINE);
}

#[test]
#[ignore = "the other process of a two-process test: run by accepts_calls_in_worker_mode_between_two_processes_over_iwarp"]
fn server_worker_process() {
    serve_forward("server_worker_process", WORKER);
}

#[test]
#[ignore = "the other process of a two-process test: run by accepts_calls_with_reactors_in_interrupt_mode_between_two_processes_over_iwarp"]
fn server_interrupt_process() {
    serve_forward("server_interrupt_process", INTERRUPT);
}

#[test]
#[ignore = "the other process of a two-process test: run by the backward-call tests"]
fn server_back_process() {
    serve_backward("server_back_process", INLINE);
}

#[test]
#[ignore = "the other process of a two-process test: run by accepts_backward_calls_in_worker_mode_between_two_processes_over_iwarp"]
fn server_back_worker_process() {
    serve_backward("server_back_worker_process", WORKER);
}

/// The forward round from this process against the server process `role`, in `m`.
fn forward_round(role: &str, m: Mode) {
    if procs::is_child() {
        return;
    }
    let peer = Peer::spawn(role);
    let (mut set, ep) = m.endpoint();
    let addr = SocketAddr::new(lo(), peer.port());
    let client = Client::connect(&ep, addr, ClientOptions::default()).expect("client");
    assert!(client.wait_connected(Duration::from_secs(10)), "connect");
    let r = client
        .call_blocking(Proc::new(PROG, 2, 0), client.args().unwrap())
        .expect("NULL");
    assert!(r.results().is_empty());
    let mut a = client.args().unwrap();
    a.put_opaque(b"hello, iwarp").unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 3, ECHO), a)
        .expect("echo");
    assert_eq!(&r.results()[..4], &12u32.to_be_bytes());
    assert_eq!(&r.results()[4..16], b"hello, iwarp");
    rejects_round(&client);
    ddp_round(&client);
    let n = client.negotiated().expect("negotiated");
    assert!(
        n.remote_invalidate,
        "both sides offer remote invalidation: {n:?}"
    );
    assert_eq!(
        client.stats().snapshot().errors,
        4,
        "the four rejected calls"
    );
    drop(client);
    set.stop().expect("stop");
    peer.finish("SERVER OK");
}

/// Backward calls the server sends to the sessions on its own.
fn own_calls() -> u64 {
    (BACK_CLIENTS * PER_SESSION) as u64
}

/// The backward round from this process against the server process `role`: clients serving
/// the backchannel bind sessions, then fire BOUNCE (and in worker mode BOUNCE_WAIT) calls
/// while the server sends backward calls of its own to their sessions.
fn backward_round(role: &str, m: Mode, version: ProtocolVersion) {
    if procs::is_child() {
        return;
    }
    let peer = Peer::spawn(role);
    let (mut set, ep) = m.endpoint();
    let addr = SocketAddr::new(lo(), peer.port());
    let log = ClientLog::new();
    let opts = ClientOptions {
        credits: 8,
        mode: m.mode,
        version,
        ..ClientOptions::default()
    };
    let clients = bound_clients(&ep, addr, opts, &log, BACK_CLIENTS, FIRST_SESSION);
    let fwd = Tally::new(BOUNCES);
    forward_fire(&clients, PER_CLIENT, &fwd, bounce_proc(m.mode));
    fwd.wait(BOUNCES as u64, 30, "forward");
    // A forward reply may overtake the backward call its handler queued, and the server's own
    // backward calls come when they come: wait for them all.
    let all = BOUNCES + own_calls() as usize;
    wait_for("the backward calls", 30, || {
        log.xids.lock().unwrap().len() >= all
    });
    check_forward_xids_used_backward(&fwd, &log, BOUNCES);
    for c in &clients {
        let n = c.negotiated().expect("negotiated");
        assert_eq!(n.version, version, "{n:?}");
        let s = c.stats().snapshot();
        assert_eq!(s.back_calls, (PER_CLIENT + PER_SESSION) as u64, "{s:?}");
        assert_eq!(s.back_replies, s.back_calls, "{s:?}");
        // A forward call after the backward replies, on the same connection: once answered,
        // the server has taken those replies (a connection closed earlier could lose the
        // last of them, which the server would wait for until the call timed out).
        let r = c
            .call_blocking(Proc::new(PROG, 2, SUM), sum_args(c.args(), 40, 2))
            .expect("SUM");
        assert_eq!(r.results(), 42u32.to_be_bytes());
    }
    drop(clients);
    set.stop().expect("stop");
    peer.finish("SERVER OK");
}

#[test]
fn accepts_calls_between_two_processes_over_iwarp() {
    forward_round("server_process", INLINE);
}

#[test]
fn accepts_calls_in_worker_mode_between_two_processes_over_iwarp() {
    forward_round("server_worker_process", WORKER);
}

#[test]
fn accepts_calls_with_reactors_in_interrupt_mode_between_two_processes_over_iwarp() {
    forward_round("server_interrupt_process", INTERRUPT);
}

#[test]
fn accepts_backward_calls_between_two_processes_over_iwarp() {
    backward_round("server_back_process", INLINE, ProtocolVersion::V1);
}

#[test]
fn accepts_backward_calls_in_version_two_between_two_processes_over_iwarp() {
    backward_round("server_back_process", INLINE, ProtocolVersion::V2);
}

#[test]
fn accepts_backward_calls_in_worker_mode_between_two_processes_over_iwarp() {
    backward_round("server_back_worker_process", WORKER, ProtocolVersion::V1);
}
