//! End to end over the soft provider: one server, one client, inline mode (and worker mode with
//! calls a handler answers on the reactor); NULL, a handler,
//! RFC 5531 errors.

mod api_common;

use std::time::Duration;

use api_common::*;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{CallbackMode, Client, ClientError, ClientOptions, Server};

#[test]
fn accepts_null_and_echo_inline() {
    let w = World::new(0);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .mode(CallbackMode::Inline)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)), "connect");
    let r = client
        .call_blocking(Proc::new(PROG, 2, 0), client.args().unwrap())
        .expect("NULL");
    assert!(r.results().is_empty());
    let mut a = client.args().unwrap();
    a.put_opaque(b"hello, rdma").unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 3, ECHO), a)
        .expect("echo");
    assert_eq!(&r.results()[..4], &11u32.to_be_bytes());
    assert_eq!(&r.results()[4..15], b"hello, rdma");
    w.stop();
}

#[test]
fn rejects_unknown_program_version_procedure() {
    let w = World::new(0);
    let _server = Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    rejects_round(&client);
    w.stop();
}

#[test]
fn rejects_calls_when_reconnects_are_exhausted() {
    let w = World::new(0);
    // Nobody listens at w.addr.
    let opts = ClientOptions {
        max_reconnects: 3,
        reconnect_min_ms: 1,
        reconnect_max_ms: 4,
        ..ClientOptions::default()
    };
    let client = Client::connect(&w.client_ep, w.addr, opts).expect("client");
    let mut a = client.args().unwrap();
    a.put_u32(1).unwrap();
    let e = client.call_blocking(Proc::new(PROG, 2, SUM), a);
    assert_eq!(e.unwrap_err(), ClientError::ReconnectFailed);
    assert!(!client.wait_connected(Duration::from_millis(10)));
    assert_eq!(client.stats().snapshot().reconnects, 3);
    let e = client
        .call(Proc::new(PROG, 2, 0), client.args().unwrap(), |_| {})
        .unwrap_err();
    assert_eq!(e.error, ClientError::ReconnectFailed);
    w.stop();
}

/// Worker mode with a handler that answers even arguments on the reactor and hands odd ones to
/// a worker; each reply says which thread kind ran it (1: a worker thread).
struct Split;

impl rpcrdma_poller::Handler for Split {
    fn handle(
        &self,
        _req: &rpcrdma_poller::Request<'_>,
        out: &mut rpcrdma_poller::ReplyBuilder<'_>,
    ) -> Result<(), rpcrdma_poller::Reject> {
        let worker = std::thread::current()
            .name()
            .is_some_and(|n| n.contains("worker"));
        out.put_u32(u32::from(worker))
            .map_err(|_| rpcrdma_poller::Reject::SystemErr)
    }

    fn handle_on_reactor(
        &self,
        req: &rpcrdma_poller::Request<'_>,
        out: &mut rpcrdma_poller::ReplyBuilder<'_>,
    ) -> Option<Result<(), rpcrdma_poller::Reject>> {
        let even = req.args.get(..4).is_some_and(|a| a[3] % 2 == 0);
        even.then(|| self.handle(req, out))
    }
}

#[test]
fn accepts_calls_answered_on_the_reactor_in_worker_mode() {
    let w = World::new(1);
    let prog = rpcrdma_poller::Program::new(PROG, 2..=3).procedure(ECHO, Split);
    let _server = Server::builder()
        .program(prog)
        .mode(CallbackMode::Worker)
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert!(client.wait_connected(Duration::from_secs(5)), "connect");
    for n in 0..8u32 {
        let mut a = client.args().unwrap();
        a.put_u32(n).unwrap();
        let r = client
            .call_blocking(Proc::new(PROG, 3, ECHO), a)
            .expect("call");
        let on_worker = u32::from(n % 2 == 1);
        assert_eq!(r.results(), &on_worker.to_be_bytes(), "argument {n}");
    }
    w.stop();
}
