//! The poller's `Client` and `Server` end to end with server and client in two processes, over
//! the user-space iWARP provider (RDMAP/DDP/MPA on loopback TCP): this test binary runs itself
//! again as the server (`procs`, the engine tests' one helper for it). The calls of the
//! in-process API tests, from the client's process: NULL and ECHO inline; the RFC 5531
//! rejections (PROG_UNAVAIL, PROG_MISMATCH with the versions served, PROC_UNAVAIL,
//! GARBAGE_ARGS) and SUM (`api_common::rejects_round`); DDP both ways, a long call and a long
//! reply (`api_common::ddp_round`). The client exposes its chunks through memory windows
//! bound per call, and both sides offer remote invalidation. The server process counts the
//! calls it was sent.

mod api_common;
#[path = "../../engine/tests/common/procs.rs"]
mod procs;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use api_common::{ddp_round, endpoint_config, program, reactor_config, rejects_round, ECHO, PROG};
use procs::Peer;
use rpcrdma_engine::verbs::iwarp::IwarpProvider;
use rpcrdma_engine::verbs::Provider;
use rpcrdma_poller::{CallbackMode, Client, ClientOptions, Endpoint, Proc, ReactorSet, Server};

/// Calls the client makes: NULL, ECHO, those of `rejects_round` and of `ddp_round`.
const CALLS: u64 = 2 + api_common::REJECTS_ROUND_CALLS + api_common::DDP_ROUND_CALLS;

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// The server role: serves the test program until the parent closes its standard input.
#[test]
#[ignore = "the other process of a two-process test: run by accepts_calls_between_two_processes_over_iwarp"]
fn server_process() {
    procs::expect_role("server_process");
    let mut set = ReactorSet::start(&reactor_config(1)).expect("reactors");
    let dev = IwarpProvider::open(lo()).expect("iwarp device");
    let ep = Endpoint::<IwarpProvider>::new(&set, dev, endpoint_config(0)).expect("endpoint");
    let port = {
        let l = TcpListener::bind((lo(), 0)).expect("an ephemeral port");
        l.local_addr().expect("address").port()
    };
    let server = Server::builder()
        .program(program(ep.buffers().clone()))
        .mode(CallbackMode::Inline)
        .start(&ep, SocketAddr::new(lo(), port))
        .expect("server");
    procs::announce(port);
    procs::wait_for_parent();
    let t = server.totals();
    assert_eq!(t.calls, CALLS, "calls served");
    assert_eq!(server.accepted(), 1, "connections");
    set.stop().expect("stop");
    println!("SERVER OK");
}

/// The client in this process against the server process.
#[test]
fn accepts_calls_between_two_processes_over_iwarp() {
    if procs::is_child() {
        return;
    }
    let peer = Peer::spawn("server_process");
    let mut set = ReactorSet::start(&reactor_config(1)).expect("reactors");
    let dev = IwarpProvider::open(lo()).expect("iwarp device");
    let ep = Endpoint::<IwarpProvider>::new(&set, dev, endpoint_config(0)).expect("endpoint");
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
