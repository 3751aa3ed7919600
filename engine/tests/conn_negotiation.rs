//! Connection engine: RFC 8797 private data exchanged at connect / accept, in every
//! combination (both sides send it, only the client, only the server, neither, and foreign
//! private data carrying the message at an odd offset). Each case checks the negotiated values
//! on both ends (they must agree crosswise: what one may send is what the other expects) and
//! the behaviour that follows from them: inline versus long calls and replies, Reply chunks
//! offered, Send With Invalidate.

mod common;

use common::*;
use rpcrdma_engine::conn::{CallSpec, Config, Connection, Event, ReplyKind, ReplySpec, Role};
use rpcrdma_engine::proto::private_data::Negotiated;

const RDMA_MSG: u32 = 0;
const RDMA_NOMSG: u32 = 1;

fn neg(c: &Option<Connection>) -> Negotiated {
    c.as_ref().unwrap().negotiated()
}

/// Both ends agree: what the requester may send is what the responder expects to receive, and
/// the other way round; R is the same on both.
fn assert_agree(p: &Pair) {
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert_eq!(a.send_inline, b.recv_inline, "client→server threshold");
    assert_eq!(a.recv_inline, b.send_inline, "server→client threshold");
    assert_eq!(a.remote_invalidate, b.remote_invalidate, "R");
}

/// One round trip: a call of `call_len` octets (RPC message) and a reply of `reply_len` octets
/// into a reply buffer of exactly that size. Returns (call proc, reply proc, Send With
/// Invalidate used).
fn round_trip(p: &mut Pair, xid: u32, call_len: usize, reply_len: usize) -> (u32, u32, bool) {
    p.record = true;
    let mut call = rpc_call(xid, 1, &[]);
    call.resize(call_len, 0x5a);
    let msg = p.req.host.buf_with(&call, EXPOSE);
    let reply_buf = p.req.host.alloc(reply_len as u32, EXPOSE);
    let swi_before = p.stats.sends_with_inv;
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[],
        reply: reply_buf,
    });
    let call_proc = be32(p.last_sent(Dir::Req), 3);
    let inc = p.next_call().expect("CallReady");
    assert_eq!(p.resp.host.read(inc.stream), &call[..]);
    let mut reply = rpc_reply(xid, &[]);
    reply.resize(reply_len, 0xa5);
    let rb = p.resp.host.buf_with(&reply, LW);
    let kind = p.reply(
        inc.call,
        &ReplySpec {
            message: &[rb],
            results: &[],
        },
    );
    assert_ne!(kind, ReplyKind::ErrChunk);
    let reply_proc = be32(p.last_sent(Dir::Resp), 3);
    let r = p.next_reply();
    assert_eq!(
        p.req.host.read(reply_buf.sub(0, r.len).unwrap()),
        &reply[..]
    );
    assert_eq!(p.stats.errors, 0);
    (call_proc, reply_proc, p.stats.sends_with_inv > swi_before)
}

/// The largest RPC message that goes inline under `threshold` with an empty-list RDMA_MSG
/// header (28 octets).
fn fits(threshold: u32) -> usize {
    threshold as usize - 28
}

fn server_cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.inline_send = 8192;
    c.inline_recv = 2048;
    c
}

#[test]
fn accepts_private_data_from_both_sides() {
    // Client 4096/4096 with R, server 8192 send / 2048 receive with R.
    let mut p = Pair::new(Config::DEFAULT, server_cfg());
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert!(a.peer_recognised && b.peer_recognised);
    assert_eq!((a.send_inline, a.recv_inline), (2048, 4096));
    assert_eq!((b.send_inline, b.recv_inline), (4096, 2048));
    assert!(a.remote_invalidate);
    assert_agree(&p);
    // Calls: inline up to 2048, long beyond. Replies: inline up to 4096 (no Reply chunk
    // needed for a reply buffer that fits), long beyond.
    assert_eq!(
        round_trip(&mut p, 1, fits(2048), 100),
        (RDMA_MSG, RDMA_MSG, false)
    );
    assert_eq!(round_trip(&mut p, 2, fits(2048) + 4, 100).0, RDMA_NOMSG);
    assert_eq!(round_trip(&mut p, 3, 64, 4000).1, RDMA_MSG);
    // A reply too large for 4096: the client offered a Reply chunk (its only handle), the
    // server wrote into it and, both R bits being set, invalidated it remotely.
    assert_eq!(
        round_trip(&mut p, 4, 64, 6000),
        (RDMA_MSG, RDMA_NOMSG, true)
    );
}

#[test]
fn accepts_private_data_from_client_only() {
    // The server sends none: the client assumes the v1 defaults of it, and the server
    // negotiates as a peer that sent none (1024 both ways, no R) so both ends agree.
    let mut sc = server_cfg();
    sc.send_private_data = false;
    let mut p = Pair::new(Config::DEFAULT, sc);
    assert!(p.resp.conn.as_ref().unwrap().private_data_opt().is_none());
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert!(!a.peer_recognised && b.peer_recognised);
    assert_eq!((a.send_inline, a.recv_inline), (1024, 1024));
    assert_eq!((b.send_inline, b.recv_inline), (1024, 1024));
    assert!(!a.remote_invalidate && !b.remote_invalidate);
    assert_agree(&p);
    assert_eq!(round_trip(&mut p, 1, fits(1024), 64).0, RDMA_MSG);
    assert_eq!(round_trip(&mut p, 2, fits(1024) + 4, 64).0, RDMA_NOMSG);
    // A 2000-octet reply goes through the Reply chunk; no remote invalidation without R.
    assert_eq!(
        round_trip(&mut p, 3, 64, 2000),
        (RDMA_MSG, RDMA_NOMSG, false)
    );
}

#[test]
fn accepts_private_data_from_server_only() {
    let mut cc = Config::DEFAULT;
    cc.send_private_data = false;
    let mut p = Pair::new(cc, server_cfg());
    assert!(p.req.conn.as_ref().unwrap().private_data_opt().is_none());
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert!(a.peer_recognised && !b.peer_recognised);
    assert_eq!((a.send_inline, a.recv_inline), (1024, 1024));
    assert_eq!((b.send_inline, b.recv_inline), (1024, 1024));
    assert!(!a.remote_invalidate && !b.remote_invalidate);
    assert_agree(&p);
    assert_eq!(round_trip(&mut p, 1, fits(1024) + 4, 64).0, RDMA_NOMSG);
    assert_eq!(
        round_trip(&mut p, 2, 64, 1100),
        (RDMA_MSG, RDMA_NOMSG, false)
    );
}

#[test]
fn accepts_private_data_from_neither_side() {
    let mut cc = Config::DEFAULT;
    cc.send_private_data = false;
    let mut sc = server_cfg();
    sc.send_private_data = false;
    let mut p = Pair::new(cc, sc);
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert!(!a.peer_recognised && !b.peer_recognised);
    assert_eq!((a.send_inline, a.recv_inline), (1024, 1024));
    assert_eq!((b.send_inline, b.recv_inline), (1024, 1024));
    assert_agree(&p);
    assert_eq!(round_trip(&mut p, 1, fits(1024), 64).0, RDMA_MSG);
    assert_eq!(
        round_trip(&mut p, 2, fits(1024) + 4, 1100),
        (RDMA_NOMSG, RDMA_NOMSG, false)
    );
}

#[test]
fn accepts_foreign_private_data_with_the_message_at_an_odd_offset() {
    // Each side's message is buried in foreign private data: a 5-octet prefix holding a
    // truncated identifier (f6 ab 0e), the message at offset 5, then trailing octets (as an
    // MPA v2 IRD/ORD word or another layer's data would be).
    let mut p = Pair::from_sides(
        make_side(
            "requester",
            0x1000_0000,
            0x10,
            Role::Requester,
            Config::DEFAULT,
            Sizing::for_config(Role::Requester, &Config::DEFAULT),
        ),
        make_side(
            "responder",
            0x9000_0000,
            0x20,
            Role::Responder,
            server_cfg(),
            Sizing::for_config(Role::Responder, &server_cfg()),
        ),
    );
    let bury = |m: [u8; 8]| {
        let mut v = vec![0x01, 0xf6, 0xab, 0x0e, 0x77];
        v.extend_from_slice(&m);
        v.extend_from_slice(&[0xf6, 0xab, 0x0e, 0x18, 0x02, 0, 0, 0]);
        v
    };
    let to_req = bury(p.resp.conn.as_ref().unwrap().private_data());
    let to_resp = bury(p.req.conn.as_ref().unwrap().private_data());
    // The real identifier sits at offset 5 (odd).
    assert_eq!(&to_resp[5..9], &[0xf6, 0xab, 0x0e, 0x18]);
    p.connect_with(&to_req, &to_resp);
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert!(a.peer_recognised && b.peer_recognised);
    assert_eq!((a.send_inline, a.recv_inline), (2048, 4096));
    assert_eq!((b.send_inline, b.recv_inline), (4096, 2048));
    assert!(a.remote_invalidate && b.remote_invalidate);
    assert_agree(&p);
    assert_eq!(
        round_trip(&mut p, 1, fits(2048) + 4, 6000),
        (RDMA_NOMSG, RDMA_NOMSG, false)
    );
}

#[test]
fn rejects_foreign_private_data_without_a_usable_message() {
    // Identifier present but version 2, or cut off: treated as no private data (defaults).
    for foreign in [
        vec![0, 0, 0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x03],
        vec![0, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01],
        vec![0x12, 0x34, 0x56, 0x78],
    ] {
        let mut p = Pair::from_sides(
            make_side(
                "requester",
                0x1000_0000,
                0x10,
                Role::Requester,
                Config::DEFAULT,
                Sizing::for_config(Role::Requester, &Config::DEFAULT),
            ),
            make_side(
                "responder",
                0x9000_0000,
                0x20,
                Role::Responder,
                Config::DEFAULT,
                Sizing::for_config(Role::Responder, &Config::DEFAULT),
            ),
        );
        p.connect_with(&foreign, &foreign);
        for c in [&p.req.conn, &p.resp.conn] {
            let n = neg(c);
            assert!(!n.peer_recognised, "{foreign:x?}");
            assert_eq!((n.send_inline, n.recv_inline), (1024, 1024));
            assert!(!n.remote_invalidate);
        }
        // The engine still works with the defaults.
        assert_eq!(round_trip(&mut p, 9, fits(1024) + 4, 64).0, RDMA_NOMSG);
    }
}

#[test]
fn accepts_rounded_advertised_sizes_on_both_ends() {
    // 5000 and 3000 are not representable: they are advertised as 4096 and 2048 and both ends
    // negotiate from the advertised values, so they agree.
    let mut cc = Config::DEFAULT;
    cc.inline_send = 5000;
    cc.inline_recv = 3000;
    let mut sc = Config::DEFAULT;
    sc.inline_send = 9000;
    sc.inline_recv = 8192;
    let mut p = Pair::new(cc, sc);
    assert_eq!(
        p.req.conn.as_ref().unwrap().private_data()[6..],
        [3, 1],
        "4096 → 3, 2048 → 1"
    );
    let (a, b) = (neg(&p.req.conn), neg(&p.resp.conn));
    assert_eq!((a.send_inline, a.recv_inline), (4096, 2048));
    assert_eq!((b.send_inline, b.recv_inline), (2048, 4096));
    assert_agree(&p);
    // Exactly at the client's threshold: inline; one word more: long.
    assert_eq!(round_trip(&mut p, 1, fits(4096), 64).0, RDMA_MSG);
    assert_eq!(round_trip(&mut p, 2, fits(4096) + 4, 64).0, RDMA_NOMSG);
    assert_eq!(round_trip(&mut p, 3, 64, 2000).1, RDMA_MSG);
    assert_eq!(round_trip(&mut p, 4, 64, 2100).1, RDMA_NOMSG);
}

#[test]
fn accepts_new_values_on_every_reconnection() {
    // The same client reconnects to servers advertising different sizes: each connection
    // negotiates afresh (values are per connection, never carried over).
    let mut seen = Vec::new();
    for (send, recv) in [(8192, 2048), (1024, 1024), (16384, 16384)] {
        let mut sc = Config::DEFAULT;
        sc.inline_send = send;
        sc.inline_recv = recv;
        let mut p = Pair::new(Config::DEFAULT, sc);
        assert_agree(&p);
        let a = neg(&p.req.conn);
        assert_eq!(a.send_inline, recv.min(4096));
        assert_eq!(a.recv_inline, send.min(4096));
        assert!(matches!(p.req.events[0], Event::Connected(n) if n == a));
        round_trip(&mut p, 1, fits(a.send_inline), 64);
        seen.push((a.send_inline, a.recv_inline));
    }
    assert_eq!(seen, [(2048, 4096), (1024, 1024), (4096, 4096)]);
}
