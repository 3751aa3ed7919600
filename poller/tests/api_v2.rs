//! RPC-over-RDMA Version Two through the public API over the soft provider: a Version Two
//! client with a Version Two server and with a Version One-only server (fallback, remembered
//! across a forced reconnect), a Version One client with a Version Two server,
//! [`Client::negotiated`] for every R-bit combination and for larger inline thresholds, and the
//! RDMA2_ERR_CANT_REPLY retry (same XID, larger reply resources) end to end — and its Version
//! One counterpart, the ERR_CHUNK retry of a call with a reply size hint.

mod api_common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_common::*;
use rpcrdma_engine::conn::CallError;
use rpcrdma_engine::verbs::soft::SoftFaults;
use rpcrdma_poller::Proc;
use rpcrdma_poller::{
    CallArgs, Client, ClientError, ClientOptions, ClientState, Negotiated, Program,
    ProtocolVersion, Reject, ReplyBuilder, Request, Server, ServerOptions,
};

/// Procedure BIG: argument n; result: opaque of n octets (all inline, no DDP).
const BIG: u32 = 9;

fn v2() -> ClientOptions {
    ClientOptions {
        version: ProtocolVersion::V2,
        ..ClientOptions::default()
    }
}

fn v1_only() -> ServerOptions {
    ServerOptions {
        version: ProtocolVersion::V1,
        ..ServerOptions::default()
    }
}

fn start(w: &World, addr: SocketAddr, o: ServerOptions) -> Server {
    Server::builder()
        .program(program(w.server_ep.buffers().clone()))
        .options(o)
        .start(&w.server_ep, addr)
        .expect("server")
}

fn sum_call(c: &Client, a: u32, b: u32) -> Result<u32, ClientError> {
    let mut args = c.args().unwrap();
    args.put_u32(a).unwrap();
    args.put_u32(b).unwrap();
    let r = c.call_blocking(Proc::new(PROG, 2, SUM), args)?;
    Ok(u32::from_be_bytes(r.results().try_into().unwrap()))
}

fn neg(c: &Client) -> Negotiated {
    c.negotiated().expect("negotiated once connected")
}

/// Waits until `f` holds (the test fails after 10 s).
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Collects the fault handles of the client endpoint's QPs (one per connection, in order).
fn hook_faults(w: &World) -> Arc<Mutex<Vec<SoftFaults>>> {
    let faults: Arc<Mutex<Vec<SoftFaults>>> = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&faults);
    assert!(w
        .client_ep
        .set_qp_hook(Box::new(move |qp| f2.lock().unwrap().push(qp.faults()))));
    faults
}

/// Drops the client's current connection and waits until it is connected again.
fn force_reconnect(c: &Client, faults: &Arc<Mutex<Vec<SoftFaults>>>) {
    let before = c.stats().snapshot();
    let f = faults.lock().unwrap().last().cloned().expect("a QP");
    f.drop_connection();
    wait_until("the loss", || {
        c.stats().snapshot().connection_losses > before.connection_losses
    });
    wait_until("the reconnection", || {
        c.stats().snapshot().reconnects > before.reconnects && c.state() == ClientState::Connected
    });
}

#[test]
fn accepts_v2_client_v2_server() {
    let w = World::new(0);
    let faults = hook_faults(&w);
    let _s = start(
        &w,
        w.addr,
        ServerOptions {
            credits: 8,
            ..ServerOptions::default()
        },
    );
    let c = Client::connect(&w.client_ep, w.addr, v2()).expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    // Established, the first call not sent yet: probing (1024 octets, one credit).
    let n = neg(&c);
    assert_eq!(
        (n.version, n.send_inline, n.credits),
        (ProtocolVersion::V2, 1024, 1)
    );
    assert_eq!(sum_call(&c, 40, 2), Ok(42));
    let n = neg(&c);
    assert_eq!(n.version, ProtocolVersion::V2, "confirmed by the reply");
    assert_eq!((n.send_inline, n.recv_inline), (4096, 4096), "v2 defaults");
    assert_eq!(n.credits, 8, "the server's grant");
    assert!(n.remote_invalidate);
    let pd = n
        .peer_private_data
        .expect("the server sends RFC 8797 private data");
    assert_eq!(
        (
            pd.version,
            pd.remote_invalidate,
            pd.max_send_size,
            pd.max_recv_size
        ),
        (1, true, 4096, 4096)
    );
    assert_eq!(&pd.raw[..4], &[0xf6, 0xab, 0x0e, 0x18]);
    assert_eq!(c.stats().snapshot().rdma_version, 2);
    // Long calls and replies in Version Two (Read chunk, Reply chunk) and DDP.
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 7) as u8).collect();
    let mut a = c.args().unwrap();
    a.put_opaque(&data).unwrap();
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("long echo");
    assert_eq!(&r.results()[4..6004], &data[..]);
    let mut a = c.args().unwrap();
    a.put_u32(3000).unwrap();
    a.put_u32(0x5a).unwrap();
    let rec = c.buffer().unwrap();
    a.receptacle(rec).unwrap();
    let mut r = c.call_blocking(Proc::new(PROG, 2, FILL), a).expect("fill");
    let (b, n) = r.take_receptacle(0).expect("DDP result");
    assert_eq!(n, 3000);
    assert!(b[..3000].iter().all(|&x| x == 0x5a));
    // A lost connection: the next one probes Version Two again (it was confirmed).
    force_reconnect(&c, &faults);
    assert_eq!(sum_call(&c, 1, 2), Ok(3));
    let n = neg(&c);
    assert_eq!((n.version, n.send_inline), (ProtocolVersion::V2, 4096));
    w.stop();
}

#[test]
fn accepts_v2_client_falls_back_to_v1_only_server() {
    let w = World::new(0);
    let faults = hook_faults(&w);
    let mut so = v1_only();
    so.inline_recv = 8192;
    let _s = start(&w, w.addr, so);
    let c = Client::connect(&w.client_ep, w.addr, v2()).expect("client");
    assert!(c.wait_connected(Duration::from_secs(5)));
    assert_eq!(neg(&c).version, ProtocolVersion::V2, "probing");
    // The call is answered ERR_VERS, sent again in Version One, and succeeds.
    assert_eq!(sum_call(&c, 20, 22), Ok(42));
    let n = neg(&c);
    assert_eq!(n.version, ProtocolVersion::V1, "fell back");
    // Version One thresholds (RFC 8797: min(4096 we send, 8192 it receives)).
    assert_eq!((n.send_inline, n.recv_inline), (4096, 4096));
    assert_eq!(n.peer_private_data.unwrap().max_recv_size, 8192);
    assert_eq!(c.stats().snapshot().rdma_version, 1);
    for i in 0..20 {
        assert_eq!(sum_call(&c, i, 1), Ok(i + 1));
    }
    // The fallback is remembered: the next connection starts in Version One (no probe, which
    // would show Version Two until its first reply).
    force_reconnect(&c, &faults);
    let n = neg(&c);
    assert_eq!(n.version, ProtocolVersion::V1, "not probed again");
    assert_eq!(n.send_inline, 4096, "no 1024-octet probe limit");
    assert_eq!(sum_call(&c, 2, 3), Ok(5));
    assert_eq!(neg(&c).version, ProtocolVersion::V1);
    // And again.
    force_reconnect(&c, &faults);
    assert_eq!(neg(&c).version, ProtocolVersion::V1);
    assert_eq!(sum_call(&c, 3, 3), Ok(6));
    assert_eq!(c.stats().snapshot().errors, 0);
    w.stop();
}

#[test]
fn accepts_v1_client_v2_server() {
    let w = World::new(0);
    let _s = start(&w, w.addr, ServerOptions::default());
    let c = Client::connect(&w.client_ep, w.addr, ClientOptions::default()).expect("client");
    assert_eq!(c.negotiated(), None, "nothing before the first connection");
    assert!(c.wait_connected(Duration::from_secs(5)));
    let n = neg(&c);
    assert_eq!(n.version, ProtocolVersion::V1);
    assert_eq!((n.send_inline, n.recv_inline), (4096, 4096));
    for i in 0..10 {
        assert_eq!(sum_call(&c, i, i), Ok(2 * i));
    }
    // A long reply in Version One.
    let data = vec![0x33u8; 9000];
    let mut a = c.args().unwrap();
    a.put_opaque(&data).unwrap();
    let r = c.call_blocking(Proc::new(PROG, 2, ECHO), a).expect("echo");
    assert_eq!(&r.results()[4..9004], &data[..]);
    assert_eq!(neg(&c).version, ProtocolVersion::V1);
    assert_eq!(c.stats().snapshot().rdma_version, 1);
    w.stop();
}

#[test]
fn accepts_negotiated_values_for_r_bit_combinations() {
    let w = World::new(0);
    let mut port = w.addr.port();
    for version in [ProtocolVersion::V1, ProtocolVersion::V2] {
        for (client_r, server_r) in [(true, true), (true, false), (false, true), (false, false)] {
            port += 1;
            let addr = SocketAddr::new(w.addr.ip(), port);
            let _s = start(
                &w,
                addr,
                ServerOptions {
                    remote_invalidate: server_r,
                    ..ServerOptions::default()
                },
            );
            let c = Client::connect(
                &w.client_ep,
                addr,
                ClientOptions {
                    version,
                    remote_invalidate: client_r,
                    ..ClientOptions::default()
                },
            )
            .expect("client");
            assert!(c.wait_connected(Duration::from_secs(5)));
            // A call with a Write chunk and a Reply chunk (what may be invalidated remotely).
            let mut a = c.args().unwrap();
            a.put_u32(100).unwrap();
            a.put_u32(7).unwrap();
            a.receptacle(c.buffer().unwrap()).unwrap();
            let r = c.call_blocking(Proc::new(PROG, 2, FILL), a).expect("fill");
            assert_eq!(r.receptacle(0).unwrap(), &[7u8; 100][..]);
            let n = neg(&c);
            let what = format!("{version:?} client R {client_r} server R {server_r}");
            assert_eq!(n.version, version, "{what}");
            assert_eq!(n.remote_invalidate, client_r && server_r, "{what}");
            let pd = n.peer_private_data.expect("private data");
            assert_eq!(pd.remote_invalidate, server_r, "{what}");
            assert_eq!(pd.raw[5] & 1 == 1, server_r, "{what}: the raw flags octet");
            c.close();
            wait_until("close", || c.state() == ClientState::Closed);
        }
    }
    // Larger thresholds from the private data: used by Version One only.
    for version in [ProtocolVersion::V1, ProtocolVersion::V2] {
        port += 1;
        let addr = SocketAddr::new(w.addr.ip(), port);
        let _s = start(
            &w,
            addr,
            ServerOptions {
                inline_send: 8192,
                inline_recv: 16384,
                ..ServerOptions::default()
            },
        );
        let c = Client::connect(
            &w.client_ep,
            addr,
            ClientOptions {
                version,
                inline_send: 12288,
                inline_recv: 8192,
                ..ClientOptions::default()
            },
        )
        .expect("client");
        assert!(c.wait_connected(Duration::from_secs(5)));
        assert_eq!(sum_call(&c, 1, 1), Ok(2));
        let n = neg(&c);
        assert_eq!(n.version, version);
        // Version One: send min(12288 we send, 16384 it receives), recv min(8192 we receive,
        // 8192 it sends). Version Two ignores the RFC 8797 sizes: 4096 both ways (draft,
        // "Default Values": without a Version Two discovery mechanism "senders MUST assume a
        // receiver's inline threshold is 4096 bytes").
        let want = match version {
            ProtocolVersion::V1 => (12288, 8192),
            _ => (4096, 4096),
        };
        assert_eq!((n.send_inline, n.recv_inline), want, "{version:?}");
        let pd = n.peer_private_data.unwrap();
        assert_eq!((pd.max_send_size, pd.max_recv_size), (8192, 16384));
        c.close();
        wait_until("close", || c.state() == ClientState::Closed);
    }
    w.stop();
}

#[test]
fn rejects_v2_with_a_receive_size_below_4096() {
    let w = World::new(0);
    let o = ClientOptions {
        inline_recv: 2048,
        ..v2()
    };
    assert_eq!(
        Client::connect(&w.client_ep, w.addr, o).unwrap_err(),
        ClientError::Unsupported
    );
    // A Version Two server with 2048-octet receives serves Version One only: the client falls
    // back.
    let _s = start(
        &w,
        w.addr,
        ServerOptions {
            inline_recv: 2048,
            ..ServerOptions::default()
        },
    );
    let c = Client::connect(&w.client_ep, w.addr, v2()).expect("client");
    assert_eq!(sum_call(&c, 1, 2), Ok(3));
    let n = neg(&c);
    assert_eq!((n.version, n.send_inline), (ProtocolVersion::V1, 2048));
    w.stop();
}

fn big(req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
    let n = req
        .args
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or(Reject::GarbageArgs)?;
    out.put_u32(n as u32).map_err(|_| Reject::SystemErr)?;
    for i in 0..n.div_ceil(4) {
        out.put_u32(0x0101_0101u32.wrapping_mul(i as u32 & 0xff))
            .map_err(|_| Reject::SystemErr)?;
    }
    Ok(())
}

/// A server whose handlers log the XID of every call they run, on an endpoint with 64 KiB
/// buffers (so it can build replies larger than the client's 16 KiB reply buffers).
struct CantReplyWorld {
    w: World,
    _server_ep2: Endpoint,
    _server: Server,
    ran: Arc<Mutex<Vec<u32>>>,
}

fn cant_reply_world(version: ProtocolVersion) -> CantReplyWorld {
    let w = World::new(0);
    let dev = w.fabric.open(std::net::IpAddr::from([10, 0, 0, 3]));
    let mut ec = endpoint_config(0);
    ec.buffer_size = 64 * 1024;
    ec.buffers = 64;
    ec.reply_buffers = 64;
    let ep2 = Endpoint::new(&w.set, dev, ec).expect("endpoint");
    let ran: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(Vec::new()));
    let (r1, r2) = (Arc::clone(&ran), Arc::clone(&ran));
    let prog = Program::new(PROG, 2..=3)
        .procedure(
            ECHO,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
                r1.lock().unwrap().push(req.xid);
                echo(req, out)
            },
        )
        .procedure(BIG, move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
            r2.lock().unwrap().push(req.xid);
            big(req, out)
        });
    let server = Server::builder()
        .program(prog)
        .options(ServerOptions {
            version,
            ..ServerOptions::default()
        })
        .start(&ep2, "10.0.0.3:2049".parse().unwrap())
        .expect("server");
    CantReplyWorld {
        w,
        _server_ep2: ep2,
        _server: server,
        ran,
    }
}

fn echo_args(c: &Client, data: &[u8]) -> CallArgs {
    let mut a = c.args().unwrap();
    a.put_opaque(data).unwrap();
    a
}

#[test]
fn accepts_cant_reply_retry_with_the_same_xid() {
    let cw = cant_reply_world(ProtocolVersion::V2);
    let c =
        Client::connect(&cw.w.client_ep, "10.0.0.3:2049".parse().unwrap(), v2()).expect("client");
    // Confirm Version Two first (the probing call never uses the hint).
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), echo_args(&c, b"probe"))
        .expect("probe");
    assert_eq!(&r.results()[4..9], b"probe");
    assert_eq!(neg(&c).version, ProtocolVersion::V2);
    cw.ran.lock().unwrap().clear();
    // A 6000-octet reply, 256 octets offered: RDMA2_ERR_CANT_REPLY, then the same call (same
    // XID) offering the whole reply buffer, run again by the server; the callback sees the
    // reply.
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    let mut a = echo_args(&c, &data);
    a.expect_reply(256);
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("retried");
    assert_eq!(&r.results()[..4], &6000u32.to_be_bytes());
    assert_eq!(&r.results()[4..6004], &data[..]);
    assert_eq!(
        *cw.ran.lock().unwrap(),
        [r.xid(), r.xid()],
        "run twice, one XID"
    );
    // A reply within the hint: once, no retry.
    cw.ran.lock().unwrap().clear();
    let mut a = echo_args(&c, b"small");
    a.expect_reply(256);
    let r = c.call_blocking(Proc::new(PROG, 2, ECHO), a).expect("small");
    assert_eq!(&r.results()[4..9], b"small");
    assert_eq!(*cw.ran.lock().unwrap(), [r.xid()]);
    // Larger than the hint but inline: the call always offers room for any inline reply.
    cw.ran.lock().unwrap().clear();
    let mut a = echo_args(&c, &data[..1500]);
    a.expect_reply(256);
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("inline above the hint");
    assert_eq!(&r.results()[4..1504], &data[..1500]);
    assert_eq!(*cw.ran.lock().unwrap(), [r.xid()]);
    // Without a hint the whole buffer is offered from the start: once.
    cw.ran.lock().unwrap().clear();
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), echo_args(&c, &data))
        .expect("no hint");
    assert_eq!(&r.results()[4..6004], &data[..]);
    assert_eq!(*cw.ran.lock().unwrap(), [r.xid()]);
    // Many in flight at once, hinted, every other one too large for its hint.
    let done = Arc::new(Mutex::new(Vec::new()));
    for i in 0..64u32 {
        let len = if i % 2 == 0 { 5000 } else { 40 };
        let mut a = echo_args(&c, &vec![i as u8; len]);
        a.expect_reply(128);
        let d = Arc::clone(&done);
        c.call(Proc::new(PROG, 2, ECHO), a, move |r| {
            let ok = r.is_ok_and(|r| {
                r.results().len() >= 4 + len
                    && r.results()[4..4 + len].iter().all(|&b| b == i as u8)
            });
            d.lock().unwrap().push(ok);
        })
        .unwrap();
    }
    wait_until("64 calls", || done.lock().unwrap().len() == 64);
    assert!(done.lock().unwrap().iter().all(|&ok| ok));
    assert_eq!(c.stats().snapshot().errors, 0);
    cw.w.stop();
}

#[test]
fn rejects_reply_larger_than_every_reply_resource() {
    for version in [ProtocolVersion::V2, ProtocolVersion::V1] {
        let cw = cant_reply_world(version);
        let c = Client::connect(&cw.w.client_ep, "10.0.0.3:2049".parse().unwrap(), v2())
            .expect("client");
        let mut a = c.args().unwrap();
        a.put_u32(8).unwrap();
        c.call_blocking(Proc::new(PROG, 2, BIG), a).expect("small");
        assert_eq!(neg(&c).version, version);
        // 20000 octets of results: more than the client's 16 KiB reply buffer.
        let mut a = c.args().unwrap();
        a.put_u32(20_000).unwrap();
        a.expect_reply(512);
        let e = c.call_blocking(Proc::new(PROG, 2, BIG), a).unwrap_err();
        match version {
            // The retry with the whole buffer is too small as well.
            ProtocolVersion::V2 => match e {
                ClientError::CantReply { segment, needed } => {
                    assert_eq!(segment, 1, "the Reply chunk's segment");
                    assert_eq!(needed, 24 + 4 + 20_000, "the whole reply");
                }
                other => panic!("{other:?}"),
            },
            ProtocolVersion::V1 => {
                assert_eq!(e, ClientError::Transport(CallError::ErrChunk))
            }
        }
        // Version Two: probe, CANT_REPLY, retry; Version One: ERR_CHUNK, retry (ERR_CHUNK).
        assert_eq!(cw.ran.lock().unwrap().len(), 3);
        // The connection carries on.
        let mut a = c.args().unwrap();
        a.put_u32(100).unwrap();
        let r = c.call_blocking(Proc::new(PROG, 2, BIG), a).expect("after");
        assert_eq!(&r.results()[..4], &100u32.to_be_bytes());
        cw.w.stop();
    }
}

/// Version One with a reply size hint ([`CallArgs::expect_reply`]): a hint within the inline
/// threshold offers no Reply chunk (the client's 16 KiB reply buffer would otherwise always
/// offer one); a reply larger than that is answered ERR_CHUNK and the call is sent again with
/// the same XID offering the whole buffer, and succeeds. Without a hint every call offers a
/// Reply chunk.
#[test]
fn accepts_err_chunk_retry_with_the_same_xid_in_version_one() {
    use rpcrdma_engine::proto::chunks::ChunkLimits;
    use rpcrdma_engine::proto::v1::{self, Body};
    use rpcrdma_engine::verbs::soft::TraceOp;
    let cw = cant_reply_world(ProtocolVersion::V1);
    // (XID, Reply chunk offered) of every call the client sends.
    let sent: Arc<Mutex<Vec<(u32, bool)>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&sent);
    assert!(cw.w.fabric.set_trace(Box::new(move |ev| {
        if ev.op != TraceOp::Send || ev.src.ip() != std::net::IpAddr::from([10, 0, 0, 1]) {
            return;
        }
        let msg: Vec<u8> = ev.payload.concat();
        if let Ok(h) = v1::decode(&msg, &ChunkLimits::DEFAULT) {
            if let Body::Msg(l) | Body::Nomsg(l) = h.body {
                s2.lock().unwrap().push((h.xid, l.reply.is_some()));
            }
        }
    })));
    let c = Client::connect(
        &cw.w.client_ep,
        "10.0.0.3:2049".parse().unwrap(),
        ClientOptions::default(),
    )
    .expect("client");
    let offered = |xid: u32| -> Vec<bool> {
        sent.lock()
            .unwrap()
            .iter()
            .filter(|(x, _)| *x == xid)
            .map(|(_, r)| *r)
            .collect()
    };
    // Small reply, hinted: once, no Reply chunk.
    let mut a = echo_args(&c, b"small");
    a.expect_reply(256);
    let r = c.call_blocking(Proc::new(PROG, 2, ECHO), a).expect("small");
    assert_eq!(&r.results()[4..9], b"small");
    assert_eq!(*cw.ran.lock().unwrap(), [r.xid()]);
    assert_eq!(offered(r.xid()), [false]);
    // Larger than the hint but inline: room for any inline reply is always offered.
    cw.ran.lock().unwrap().clear();
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8).collect();
    let mut a = echo_args(&c, &data[..3000]);
    a.expect_reply(256);
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("inline");
    assert_eq!(&r.results()[4..3004], &data[..3000]);
    assert_eq!(*cw.ran.lock().unwrap(), [r.xid()]);
    assert_eq!(offered(r.xid()), [false]);
    // Too large for inline: ERR_CHUNK, then the same XID with a Reply chunk.
    cw.ran.lock().unwrap().clear();
    let mut a = echo_args(&c, &data);
    a.expect_reply(256);
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), a)
        .expect("retried");
    assert_eq!(&r.results()[..4], &6000u32.to_be_bytes());
    assert_eq!(&r.results()[4..6004], &data[..]);
    assert_eq!(
        *cw.ran.lock().unwrap(),
        [r.xid(), r.xid()],
        "run twice, one XID"
    );
    assert_eq!(offered(r.xid()), [false, true]);
    // No hint: the Reply chunk is offered from the start.
    let r = c
        .call_blocking(Proc::new(PROG, 2, ECHO), echo_args(&c, b"nohint"))
        .expect("no hint");
    assert_eq!(offered(r.xid()), [true]);
    let st = c.stats().snapshot();
    assert_eq!(st.errors, 0);
    assert_eq!(st.reply_chunk_replies, 1, "only the retried reply was long");
    assert_eq!(neg(&c).version, ProtocolVersion::V1);
    cw.w.stop();
}
