//! A device may give a new QP the number of one just destroyed (siw hands out the lowest free
//! number; the soft device does with `SoftConfig::reuse_qp_numbers`), while the completions
//! the old QP's flush produced still wait in the node's CQ. Completions are routed by QP
//! number, so those must never reach the connection that now has the number: a server closes
//! a connection (here a handler answers by disconnecting, as `rpcrdma-nfsd --drop-every`
//! does), a client's reconnection arrives at once and takes the number, and it must be served
//! rather than torn down by its predecessor's flushes (which made the Linux client reconnect
//! once more over siw).

mod api_common;
mod hostile_raw;
mod hostile_rig;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use api_common::*;
use hostile_raw::*;
use hostile_rig::*;
use rpcrdma_engine::proto::chunks::ChunkListsRef;
use rpcrdma_engine::verbs::soft::SoftConfig;
use rpcrdma_poller::{CallbackMode, Reject, ReplyBuilder, Request, Server, ServerOptions};

/// Procedure that waits for the test's go, then answers by closing the connection.
const HOLD: u32 = 40;

/// Devices that reuse QP numbers (siw's rule), one reactor (one CQ for every connection).
fn siw_like_world() -> World {
    let dev = SoftConfig {
        reuse_qp_numbers: true,
        ..SoftConfig::default()
    };
    World::with_devices(0, &reactor_config(1), &dev)
}

#[test]
fn accepts_a_newcomer_on_the_qp_number_of_a_connection_just_closed() {
    let w = siw_like_world();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let prog = program(w.server_ep.buffers().clone()).procedure(
        HOLD,
        move |_: &Request<'_>, _: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let _ = entered_tx.send(());
            let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
            Err(Reject::Disconnect)
        },
    );
    let server = Server::builder()
        .program(prog)
        .options(ServerOptions {
            mode: CallbackMode::Inline,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let raw = w.fabric.open_with(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
        SoftConfig::default(),
    );
    let pd = pd_v1(4096, 4096);
    let mut first = RawPeer::connect(&raw, w.addr, &pd, RawOpts::default()).expect("first");
    first.send(&sum_v1(1, 2, 3));
    assert_sum_reply(&first.recv_msg("first call"), 1, 1, 5, "first call");
    // The reactor runs HOLD inline: while it waits, the next connect request is queued, so
    // the reactor accepts it in the round right after it closed the first connection.
    let hold = rpc_call(2, PROG, 2, HOLD, &[]);
    first.send(&v1_msg(2, 1, ChunkListsRef::EMPTY, &hold));
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("HOLD running");
    let next = RawPeer::start_connect(&raw, w.addr, &pd, RawOpts::default());
    go_tx.send(()).unwrap();
    assert!(first.wait_down(), "the first connection was closed");
    let mut next = next.established().expect("the newcomer is accepted");
    next.send(&sum_v1(3, 20, 22));
    match next.recv(Duration::from_secs(10)) {
        Ok(m) => assert_sum_reply(&m, 3, 1, 42, "the newcomer's call"),
        Err(e) => panic!(
            "the newcomer's connection was torn down ({e:?}): accepted {}, totals {:?}",
            server.accepted(),
            server.totals()
        ),
    }
    let t = server.totals();
    assert_eq!(server.accepted(), 2, "{t:?}");
    assert_eq!((t.kicked, t.connection_losses), (1, 1), "{t:?}");
    drop((first, next));
    drop(server);
    w.stop();
}
