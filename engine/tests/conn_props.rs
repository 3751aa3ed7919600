//! Connection engine property tests: mutated transport headers (random words replaced, octets
//! flipped, truncation) fed to a responder and to a requester never panic, never produce more
//! than one answer per message, and leave a connection that is either closed (an RDMA access
//! failed, as on hardware) or fully working.

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
                Just(u32::MAX),
                any::<u32>()
            ]
        )
            .prop_map(|(i, v)| Mutation::Word(i, v)),
        (0usize..160, any::<u8>()).prop_map(|(i, v)| Mutation::Flip(i, v)),
        (0usize..160).prop_map(Mutation::Truncate),
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

fn raw_requester() -> Pair {
    let req = make_raw_side("raw-requester", 0x1000_0000, 0x10);
    let resp = make_side(
        "responder",
        0x9000_0000,
        0x20,
        Role::Responder,
        Config::DEFAULT,
        Sizing::for_config(Role::Responder, &Config::DEFAULT),
    );
    let mut p = Pair::from_sides(req, resp);
    p.connect();
    p.raw_post_recvs(Dir::Req, 64, 4096);
    p
}

/// A valid call with a Read chunk (at position 44), a Write chunk and a Reply chunk, all in
/// raw-host memory with persistent keys.
fn valid_call(p: &mut Pair, xid: u32) -> Vec<u8> {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let b = p.req.host.alloc(4096, rw);
    let rkey = p
        .req
        .host
        .regions
        .iter()
        .find(|r| r.lkey == b.lkey)
        .unwrap()
        .rkey;
    let hi = (b.addr >> 32) as u32;
    let lo = b.addr as u32;
    let mut m = words(&[
        xid,
        1,
        8,
        0, // xid, vers, credits, RDMA_MSG
        1,
        44,
        rkey,
        13,
        hi,
        lo,
        0, // Read list: one segment at 44, 13 octets
        1,
        1,
        rkey,
        100,
        hi,
        lo + 1024,
        0, // Write list: one chunk of one segment
        1,
        1,
        rkey,
        2048,
        hi,
        lo + 2048, // Reply chunk: one segment
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn accepts_any_mutated_call_without_panic(muts in proptest::collection::vec(mutation(), 1..4)) {
        let mut p = raw_requester();
        let mut m = valid_call(&mut p, 0x42);
        apply(&mut m, &muts);
        p.raw_send(Dir::Req, &m, None);
        serve_all(&mut p);
        let answers = p.raw_take(Dir::Req);
        prop_assert!(answers.len() <= 1);
        let c = p.resp.conn.as_ref().unwrap();
        if c.state() == ConnState::Connected {
            prop_assert_eq!(c.receives_posted(), Config::DEFAULT.credits);
            // Still serves a good call.
            let good = valid_call(&mut p, 0x43);
            p.raw_send(Dir::Req, &good, None);
            serve_all(&mut p);
            let a = p.raw_take(Dir::Req);
            prop_assert_eq!(a.len(), 1);
            prop_assert_eq!(be32(&a[0], 0), 0x43);
        }
    }

    #[test]
    fn accepts_any_mutated_reply_without_panic(muts in proptest::collection::vec(mutation(), 1..4)) {
        let (state, outstanding, done) = reply_case(&muts);
        prop_assert_eq!(state, ConnState::Connected);
        // Either the call finished (reply or failure) or it is still waiting.
        match done {
            Some(Event::ReplyReady(r)) => prop_assert!(r.written()[0] <= 64),
            Some(Event::CallFailed { .. }) => {}
            None => prop_assert_eq!(outstanding, 1),
            Some(other) => prop_assert!(false, "{:?}", other),
        }
    }
}

fn reply_case(muts: &[Mutation]) -> (ConnState, u32, Option<Event>) {
    let cfg = Config::DEFAULT;
    let req = make_side(
        "requester",
        0x1000_0000,
        0x10,
        Role::Requester,
        cfg,
        Sizing::for_config(Role::Requester, &cfg),
    );
    let resp = make_raw_side("raw-responder", 0x9000_0000, 0x20);
    let mut p = Pair::from_sides(req, resp);
    p.check_stags = true;
    p.connect();
    p.raw_post_recvs(Dir::Resp, 8, 4096);
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
    // A valid reply: the call's fixed words with RDMA_MSG, the Write chunk echoed with 10
    // octets written, no Reply chunk, an RPC reply. Then mutated.
    let mut m = call[..16].to_vec();
    m[12..16].copy_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&call[16..16 + 4 + 4 + 4 + 16 + 4]);
    m[8 * 4..8 * 4 + 4].copy_from_slice(&10u32.to_be_bytes());
    m.extend_from_slice(&words(&[0]));
    m.extend_from_slice(&rpc_reply(0x42, &[]));
    apply(&mut m, muts);
    p.raw_send(Dir::Resp, &m, None);
    p.pump();
    let c = p.req.conn.as_ref().unwrap();
    let (state, outstanding) = (c.state(), c.outstanding());
    (state, outstanding, p.next_done())
}

#[test]
fn accepts_unmutated_reply_case() {
    let (state, _, done) = reply_case(&[]);
    assert_eq!(state, ConnState::Connected);
    match done {
        Some(Event::ReplyReady(r)) => assert_eq!(r.written(), &[10]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn accepts_unmutated_call_case() {
    let mut p = raw_requester();
    let m = valid_call(&mut p, 0x44);
    p.raw_send(Dir::Req, &m, None);
    let inc = p.next_call().expect("delivered");
    assert_eq!(inc.write_chunks, 1);
    assert_eq!(inc.reply_capacity, Some(2048));
    // 40-octet RPC header + length word, then 13 octets from the Read chunk, pad, then 4 more.
    assert_eq!(inc.stream.len, 44 + 16 + 4);
}
