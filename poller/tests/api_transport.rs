//! What a handler learns of the transport ([`CallTransport`]: the peer, the connection, the
//! call's chunks), the server's chunk counters, and [`Reject::Disconnect`]: a handler that
//! answers by closing the connection makes the client reconnect and send the call again with
//! the same XID (what a duplicate request cache relies on).

mod api_common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api_common::*;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallTransport, CallbackMode, Client, ClientOptions, Program, Reject, ReplyBuilder, Request,
    Server, ServerOptions,
};

const SEEN: u32 = 9;

type Log = Arc<Mutex<Vec<(u32, CallTransport, usize)>>>;

/// A program whose procedure SEEN records (xid, transport, write chunks) and answers the
/// argument length; with `kick_first`, the first call of each XID is answered by closing the
/// connection.
fn recording_program(log: &Log, kick_first: bool) -> Program {
    let log = Arc::clone(log);
    Program::new(PROG, 2..=3).procedure(
        SEEN,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let mut l = log.lock().unwrap();
            let again = l.iter().any(|(x, _, _)| *x == req.xid);
            l.push((req.xid, req.transport, req.write_chunks.len()));
            if kick_first && !again {
                return Err(Reject::Disconnect);
            }
            out.put_u32(req.args.len() as u32)
                .map_err(|_| Reject::SystemErr)?;
            // A large result when asked, so that it needs the Reply chunk.
            if req.args.first() == Some(&0xbb) {
                let big = vec![0x5a; 6000];
                out.put_opaque(&big).map_err(|_| Reject::SystemErr)?;
            }
            Ok(())
        },
    )
}

#[test]
fn handlers_see_the_peer_the_connection_and_the_chunks() {
    let w = World::new(0);
    let log: Log = Arc::default();
    let server = Server::builder()
        .program(recording_program(&log, false))
        .options(ServerOptions::default())
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("c");
    assert!(client.wait_connected(Duration::from_secs(5)));

    // 1. Inline: no chunks.
    let mut a = client.args().unwrap();
    a.put_u32(1).unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, SEEN), a)
        .expect("inline");
    // 2. A DDP argument: a Read chunk.
    let mut a = client.args().unwrap();
    let mut b = client.buffer().unwrap();
    b[..8000].fill(7);
    a.put_u32(8000).unwrap();
    a.ddp(b, 8000).map_err(|e| e.0).unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, SEEN), a)
        .expect("read chunk");
    // 3. A receptacle: a Write chunk.
    let mut a = client.args().unwrap();
    a.put_u32(3).unwrap();
    a.receptacle(client.buffer().unwrap())
        .map_err(|e| e.0)
        .unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, SEEN), a)
        .expect("write chunk");
    // 4. Arguments larger than the inline threshold: a Position-Zero long call.
    let mut a = client.args().unwrap();
    a.put(&[1u8; 6000]).unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, SEEN), a)
        .expect("long call");
    // 5. A large result: the client offers a Reply chunk.
    let mut a = client.args().unwrap();
    a.put(&[0xbb, 0, 0, 0]).unwrap();
    client
        .call_blocking(Proc::new(PROG, 2, SEEN), a)
        .expect("reply chunk");

    let l = log.lock().unwrap().clone();
    assert_eq!(l.len(), 5);
    let conn = l[0].1.conn_id;
    for (_, t, _) in &l {
        assert_eq!(t.peer.ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(t.conn_id, conn, "one connection");
    }
    let t: Vec<_> = l.iter().map(|(_, t, nw)| (*t, *nw)).collect();
    assert_eq!(
        (t[0].0.read_segments, t[0].0.position_zero, t[0].1),
        (0, false, 0)
    );
    assert!(t[1].0.read_segments > 0 && !t[1].0.position_zero);
    assert_eq!((t[2].0.read_segments, t[2].1), (0, 1));
    assert!(t[3].0.read_segments > 0 && t[3].0.position_zero);
    assert!(t[4].0.reply_chunk.is_some());
    // The server's counters agree (sampled after the replies went out).
    let tot = server.totals();
    assert_eq!(tot.read_chunk_calls, 2, "{tot:?}");
    assert_eq!(tot.long_calls, 1, "{tot:?}");
    assert_eq!(tot.write_chunk_calls, 1, "{tot:?}");
    assert!(tot.reply_chunk_calls >= 1, "{tot:?}");
    client.close();
    drop(server);
    w.stop();
}

#[test]
fn disconnect_answer_makes_the_client_retransmit_with_the_same_xid() {
    disconnect_answer(CallbackMode::Inline);
}

#[test]
fn disconnect_answer_from_a_worker_makes_the_client_retransmit_with_the_same_xid() {
    disconnect_answer(CallbackMode::Worker);
}

fn disconnect_answer(mode: CallbackMode) {
    let w = World::new(if mode == CallbackMode::Worker { 1 } else { 0 });
    let log: Log = Arc::default();
    let server = Server::builder()
        .program(recording_program(&log, true))
        .options(ServerOptions {
            mode,
            ..ServerOptions::default()
        })
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("c");
    assert!(client.wait_connected(Duration::from_secs(5)));
    for n in 0..3u32 {
        let mut a = client.args().unwrap();
        a.put_u32(n).unwrap();
        let r = client
            .call_blocking(Proc::new(PROG, 2, SEEN), a)
            .expect("answered after reconnect");
        assert_eq!(r.results(), &4u32.to_be_bytes());
    }
    let l = log.lock().unwrap().clone();
    assert_eq!(l.len(), 6, "each call ran twice: {l:?}");
    for pair in l.chunks(2) {
        assert_eq!(pair[0].0, pair[1].0, "same XID");
        assert_ne!(pair[0].1.conn_id, pair[1].1.conn_id, "on a new connection");
    }
    let tot = server.totals();
    assert_eq!(tot.kicked, 3, "{tot:?}");
    assert!(client.stats().snapshot().retransmits >= 3);
    client.close();
    drop(server);
    w.stop();
}

const SHARED: u32 = 10;

/// A result placed from a buffer the program keeps (`ddp_shared`): into the client's Write
/// chunk when it offered one, inline (with the data intact) when not; the buffer's reference
/// is released once the reply went out.
#[test]
fn shared_ddp_items_come_from_the_owners_buffer() {
    let w = World::new(0);
    let mut b = w.server_ep.buffers().get().expect("buffer");
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }
    let kept = Arc::new(b);
    let k2 = Arc::clone(&kept);
    let prog = Program::new(PROG, 2..=3).procedure(
        SHARED,
        move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| -> Result<(), Reject> {
            let off = u32::from_be_bytes(req.args[..4].try_into().unwrap()) as usize;
            let len = u32::from_be_bytes(req.args[4..8].try_into().unwrap()) as usize;
            out.put_u32(len as u32).map_err(|_| Reject::SystemErr)?;
            out.ddp_shared(Arc::clone(&k2), off, len)
                .map_err(|_| Reject::SystemErr)
        },
    );
    let server = Server::builder()
        .program(prog)
        .options(ServerOptions::default())
        .start(&w.server_ep, w.addr)
        .expect("server");
    let client = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("c");
    assert!(client.wait_connected(Duration::from_secs(5)));
    let want =
        |off: usize, len: usize| -> Vec<u8> { (off..off + len).map(|i| (i % 251) as u8).collect() };
    // Into a Write chunk.
    let mut a = client.args().unwrap();
    a.put_u32(1000).unwrap();
    a.put_u32(5000).unwrap();
    a.receptacle(client.buffer().unwrap())
        .map_err(|e| e.0)
        .unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 2, SHARED), a)
        .expect("ddp");
    assert_eq!(r.receptacle(0).expect("written"), &want(1000, 5000)[..]);
    // Inline, odd length: the data arrives intact after its length word.
    let mut a = client.args().unwrap();
    a.put_u32(7).unwrap();
    a.put_u32(33).unwrap();
    let r = client
        .call_blocking(Proc::new(PROG, 2, SHARED), a)
        .expect("inline");
    assert_eq!(&r.results()[..4], &33u32.to_be_bytes());
    assert_eq!(&r.results()[4..37], &want(7, 33)[..]);
    drop(r);
    // The replies' references are gone once their Sends completed.
    let t0 = std::time::Instant::now();
    while Arc::strong_count(&kept) > 2 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(Arc::strong_count(&kept), 2, "program + test");
    client.close();
    drop(server);
    w.stop();
}
