//! Connection engine property tests for Version Two and the backward direction: mutated
//! Version Two calls fed to a bidirectional Version Two responder, mutated Version Two replies
//! and mutated backward calls (both versions) fed to a bidirectional requester never panic,
//! never get more than one answer, and leave a connection that still works.

mod common;

use common::*;
use proptest::prelude::*;
use rpcrdma_engine::conn::{CallSpec, Config, ConnState, Event, LocalBuf, ReplySpec, Role};
use rpcrdma_engine::verbs::Access;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Word(usize, u32),
    Flip(usize, u8),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (
            0usize..40,
            prop_oneof![
                Just(0u32),
                Just(1),
                Just(2),
                Just(4),
                Just(5),
                Just(u32::MAX),
                any::<u32>()
            ]
        )
            .prop_map(|(i, v)| Mutation::Word(i, v)),
        (0usize..200, any::<u8>()).prop_map(|(i, v)| Mutation::Flip(i, v)),
        (0usize..200).prop_map(Mutation::Truncate),
    ]
}

fn apply(msg: &mut Vec<u8>, muts: &[Mutation]) {
    for m in muts {
        match *m {
            Mutation::Word(i, v) => {
                if i * 4 + 4 <= msg.len() {
                    msg[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
                }
            }
            Mutation::Flip(i, v) => {
                if i < msg.len() {
                    msg[i] ^= v;
                }
            }
            Mutation::Truncate(n) => msg.truncate(n),
        }
    }
}

fn v2cfg() -> Config {
    let mut c = Config::DEFAULT;
    c.max_version = 2;
    c
}

/// A raw requester facing a bidirectional Version Two responder (backchannel enabled).
fn raw_client() -> Pair {
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let cfg = v2cfg();
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        cfg,
        Sizing::with_backchannel(Role::Responder, &cfg),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.resp.conn().enable_backchannel().unwrap();
    p.raw_post_recvs(Dir::Req, 64, 8192);
    p
}

/// A valid Version Two call: Read chunk at 44, Write chunk, Reply chunk (persistent keys of
/// the raw host, so rdma_inv_handle is 0).
fn valid_call(p: &mut Pair, xid: u32) -> Vec<u8> {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let b = p.req.host.alloc(4096, rw);
    let rkey = p.req.host.regions.last().unwrap().rkey;
    let (hi, lo) = ((b.addr >> 32) as u32, b.addr as u32);
    let mut m = words(&[
        xid,
        2,
        8,
        0, // xid, vers 2, credits, RDMA2_MSG
        0, // rdma_direction: CALL
        0, // rdma_inv_handle: none
        1,
        44,
        rkey,
        13,
        hi,
        lo,
        0, // Read list: one segment at 44
        1,
        1,
        rkey,
        100,
        hi,
        lo + 1024,
        0, // Write list: one chunk
        1,
        1,
        rkey,
        2048,
        hi,
        lo + 2048, // Reply chunk
    ]);
    m.extend_from_slice(&rpc_call(xid, 1, &[0, 0, 0, 13, 0xa, 0xb, 0xc, 0xd]));
    m
}

fn serve_all(p: &mut Pair) {
    while let Some(inc) = p.next_call() {
        let r = p.resp.host.buf_with(&rpc_reply(inc.xid, &[]), LW);
        let _ = p.resp.conn.as_mut().unwrap().send_reply(
            p.now,
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            },
            &mut p.resp.host,
        );
        p.pump();
    }
}

/// A bidirectional Version Two requester (backchannel enabled, v2 confirmed) facing a raw
/// responder, with one call outstanding (a Write chunk and a large reply buffer).
fn raw_server() -> (Pair, Vec<u8>) {
    let cfg = v2cfg();
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cfg,
        Sizing::with_backchannel(Role::Requester, &cfg),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.check_stags = true;
    p.connect();
    p.req.conn().enable_backchannel().unwrap();
    p.raw_post_recvs(Dir::Resp, 64, 8192);
    let msg = p.req.host.buf_with(&rpc_call(0x42, 1, &[]), LW);
    let rec = p.req.host.alloc(64, EXPOSE);
    let reply: LocalBuf = p.req.host.alloc(8192, EXPOSE);
    p.call(&CallSpec {
        message: &[msg],
        ddp: &[],
        receptacles: &[rec],
        reply,
    });
    let call = p.raw_take(Dir::Resp).pop().unwrap();
    (p, call)
}

fn check_client(p: &mut Pair) -> Result<(), TestCaseError> {
    let c = p.req.conn.as_ref().unwrap();
    prop_assert_eq!(c.state(), ConnState::Connected);
    prop_assert!(p.raw_take(Dir::Resp).len() <= 1);
    // Whatever came, answer any backward call it turned into; then a clean backward call
    // still works.
    while let Some(inc) = p.next_back_call() {
        let r = p.req.host.buf_with(&rpc_reply(inc.xid, &[]), LW);
        let now = p.now;
        let side = &mut p.req;
        let _ = side.conn.as_mut().unwrap().send_reply(
            now,
            inc.call,
            &ReplySpec {
                message: &[r],
                results: &[],
            },
            &mut side.host,
        );
        p.pump();
    }
    let _ = p.raw_take(Dir::Resp);
    let mut m = words(&[0x99, 2, 2, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&rpc_call(0x99, 0, &[]));
    p.raw_send(Dir::Resp, &m, None);
    let inc = p.next_back_call();
    prop_assert!(inc.is_some_and(|c| c.xid == 0x99));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn accepts_any_mutated_v2_call_without_panic(muts in proptest::collection::vec(mutation(), 1..4)) {
        let mut p = raw_client();
        let mut m = valid_call(&mut p, 0x42);
        apply(&mut m, &muts);
        p.raw_send(Dir::Req, &m, None);
        serve_all(&mut p);
        prop_assert!(p.raw_take(Dir::Req).len() <= 1);
        prop_assert!(p.next_back_done().is_none());
        let c = p.resp.conn.as_ref().unwrap();
        if c.state() == ConnState::Connected {
            prop_assert_eq!(c.receives_posted(), 64);
            let good = valid_call(&mut p, 0x43);
            p.raw_send(Dir::Req, &good, None);
            serve_all(&mut p);
            let a = p.raw_take(Dir::Req);
            prop_assert_eq!(a.len(), 1);
            prop_assert_eq!(be32(&a[0], 0), 0x43);
        }
    }

    #[test]
    fn accepts_any_mutated_v2_reply_without_panic(muts in proptest::collection::vec(mutation(), 1..4)) {
        let (mut p, call) = raw_server();
        // A valid reply: fixed words, RDMA2_MSG, REPLY, inv handle copied, the Write chunk
        // echoed with 10 octets written, no Reply chunk, an RPC reply. Then mutated.
        let h = rpcrdma_engine::proto::v2::decode(&call, &Default::default()).unwrap();
        let w = h.chunks().unwrap().lists.writes.get(0).unwrap().get(0).unwrap();
        let mut m = words(&[0x42, 2, 8, 0, 1, h.chunks().unwrap().inv_handle, 0, 1, 1, w.handle, 10]);
        m.extend_from_slice(&w.offset.to_be_bytes());
        m.extend_from_slice(&words(&[0, 0]));
        m.extend_from_slice(&rpc_reply(0x42, &[]));
        apply(&mut m, &muts);
        p.raw_send(Dir::Resp, &m, None);
        p.pump();
        match p.next_done() {
            Some(Event::ReplyReady(r)) => prop_assert!(r.written()[0] <= 64),
            Some(Event::CallFailed { .. }) => {}
            None => prop_assert_eq!(p.req.conn.as_ref().unwrap().outstanding(), 1),
            Some(other) => prop_assert!(false, "{:?}", other),
        }
        check_client(&mut p)?;
    }

    #[test]
    fn accepts_any_mutated_backward_call_without_panic(
        v2 in any::<bool>(),
        muts in proptest::collection::vec(mutation(), 1..4),
    ) {
        let (mut p, _) = raw_server();
        let mut m = if v2 {
            words(&[0x77, 2, 2, 0, 0, 0, 0, 0, 0])
        } else {
            words(&[0x77, 1, 2, 0, 0, 0, 0])
        };
        m.extend_from_slice(&rpc_call(0x77, 1, &[0, 0, 0, 4, 1, 2, 3, 4]));
        apply(&mut m, &muts);
        p.raw_send(Dir::Resp, &m, None);
        check_client(&mut p)?;
    }
}
