//! Unit tests of the reply size bounds of a session (RFC 8881 §2.10.6.4, §15.1.3, §18.46):
//! the operation that would take the reply past `ca_maxresponsesize` is NFS4ERR_REP_TOO_BIG,
//! past `ca_maxresponsesize_cached` when `sa_cachethis` is set NFS4ERR_REP_TOO_BIG_TO_CACHE,
//! and the COMPOUND stops there; an operation that changes something is refused before it
//! runs when its reply could not fit (as Linux nfsd's `nfsd4_check_resp_size` decides it).
//!
//! Sizes count the RPC reply header (24 octets with an empty verifier), as Linux nfsd counts
//! them. The COMPOUND4res of the harness starts with 16 octets (status, tag "t", count) and
//! SEQUENCE's result takes 44: 84 octets before the first operation after SEQUENCE.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_reply`.
//! Recovery: a failure names the operations and the status seen.

use super::tests::{fore, walk, Raw, A, H};
use super::xdr::st;
use crate::nfs::v4::{
    decode_compound, encode_compound_minor, op, ChannelAttrs, Op, OpResult, ReadPlacement,
};

/// The octets of a reply up to the end of SEQUENCE's result, with the RPC header.
const AFTER_SEQUENCE: u32 = 24 + 16 + 44;

fn putfh(fh: &[u8]) -> A {
    A::op(op::PUTFH).opaque(fh)
}

fn lookup(name: &[u8]) -> A {
    A::op(op::LOOKUP).opaque(name)
}

fn read(sid: &[u8; 16], count: u32) -> A {
    A::op(op::READ).fixed(sid).u64(0).u32(count)
}

/// A new session of `h`'s client with the fore channel asked as `fore_asked` (its `n`th
/// CREATE_SESSION), made `h`'s session.
fn new_session(h: &mut H, fore_asked: ChannelAttrs, n: u32) {
    let r = h.plain(&[Op::CreateSession {
        clientid: h.clientid,
        sequence: n,
        flags: 0,
        fore: fore_asked,
        back: fore(),
        cb_program: 1,
    }]);
    let Some(OpResult::CreateSession(cs)) = r.find(op::CREATE_SESSION).map(|o| o.result.clone())
    else {
        panic!("CREATE_SESSION: {r:?}");
    };
    (h.sid, h.seq) = (cs.session, 0);
}

/// SEQUENCE (with `cache_this`) and `ops`.
fn send(h: &mut H, ops: &[A], cache_this: bool) -> (Vec<u8>, Raw) {
    let b = h.raw_bytes(ops, cache_this);
    let out = h.send(&b);
    let r = walk(&out);
    (b, r)
}

/// A client whose root holds `f` of 12 KiB, its open stateid, the root's handle; then a
/// session of its own with `fore` as asked.
fn setup(fore_asked: Option<ChannelAttrs>) -> (H, [u8; 16], Vec<u8>) {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let sid = h.create_in_root(b"f");
    let write = A::op(op::WRITE)
        .fixed(&sid)
        .u64(0)
        .u32(2)
        .opaque(&[0x5a; 12 << 10]);
    assert_eq!(h.status(&[putfh(&root), lookup(b"f"), write]), st::OK);
    if let Some(f) = fore_asked {
        new_session(&mut h, f, 2);
    }
    (h, sid, root)
}

#[test]
fn rejects_a_reply_past_the_cached_size_as_rep_too_big_to_cache() {
    let (mut h, sid, root) = setup(None);
    // 12 KiB of READ data, `sa_cachethis` set: more than the 8 KiB a slot keeps
    // (`ca_maxresponsesize_cached` was asked as 1 MiB and clamped).
    let ops = [putfh(&root), lookup(b"f"), read(&sid, 12 << 10)];
    let (b, r) = send(&mut h, &ops, true);
    assert_eq!(r.status, st::REP_TOO_BIG_TO_CACHE);
    let want = [
        (op::SEQUENCE, st::OK),
        (op::PUTFH, st::OK),
        (op::LOOKUP, st::OK),
        (op::READ, st::REP_TOO_BIG_TO_CACHE),
    ];
    assert_eq!(r.results, want);
    assert!(r.last.is_empty(), "no READ4resok");
    // The error reply is what the slot keeps: the retry gets it again, octet for octet.
    let first = h.send(&b);
    assert_eq!(walk(&first).results, want);
    assert_eq!(h.srv.state().counters.replays, 1);
    // What fits is answered: 4 KiB with `sa_cachethis`, 12 KiB without.
    let (_, r) = send(
        &mut h,
        &[putfh(&root), lookup(b"f"), read(&sid, 4096)],
        true,
    );
    assert_eq!(r.status, st::OK);
    let (b, r) = send(&mut h, &ops, false);
    assert_eq!((r.status, r.last.len()), (st::OK, 8 + (12 << 10)));
    // Not kept: its retry is NFS4ERR_RETRY_UNCACHED_REP.
    assert_eq!(walk(&h.send(&b)).status, st::RETRY_UNCACHED_REP);
}

#[test]
fn rejects_a_reply_past_the_response_size_as_rep_too_big() {
    let small = ChannelAttrs {
        max_response: 4096,
        ..fore()
    };
    let (mut h, sid, root) = setup(Some(small));
    let file = || [putfh(&root), lookup(b"f")];
    for cache_this in [false, true] {
        let mut ops = file().to_vec();
        ops.push(read(&sid, 1000));
        assert_eq!(send(&mut h, &ops, cache_this).1.status, st::OK);
        // Past `ca_maxresponsesize` (4 KiB, under the 8 KiB cached bound): NFS4ERR_REP_TOO_BIG
        // whether or not the reply is to be kept.
        let mut ops = file().to_vec();
        ops.push(read(&sid, 6000));
        let r = send(&mut h, &ops, cache_this).1;
        assert_eq!(r.status, st::REP_TOO_BIG, "cache_this {cache_this}");
        assert_eq!(r.results.len(), 4);
        // Two READs of 2 500 octets: the second one takes the reply past the bound.
        let read = |offset| Op::ReadStateid {
            stateid: sid,
            offset,
            count: 2500,
        };
        let mut ops = vec![h.sequence(cache_this), Op::PutFh(&root), Op::Lookup("f")];
        ops.extend([read(0), read(2500), Op::GetFh]);
        let e = encode_compound_minor("t", 1, &ops);
        let r = decode_compound(&h.send(&e.bytes), &ops, ReadPlacement::Inline).unwrap();
        assert_eq!(r.status, st::REP_TOO_BIG);
        let got: Vec<u32> = r.ops.iter().map(|x| x.status).collect();
        assert_eq!(got, [st::OK, st::OK, st::OK, st::OK, st::REP_TOO_BIG]);
        assert!(matches!(r.ops[3].result, OpResult::Read { len: 2500, .. }));
    }
}

#[test]
fn rejects_a_change_whose_reply_could_not_fit_without_making_it() {
    // Room after SEQUENCE and PUTFH (8 octets) for CREATE's operation number and status (8)
    // and 20 octets more: not the 36 of a CREATE4resok (change_info4, a three-word bitmap).
    let tight = AFTER_SEQUENCE + 8 + 8 + 20;
    let cached = ChannelAttrs {
        max_response_cached: tight,
        ..fore()
    };
    let (mut h, _, root) = setup(Some(cached));
    let mkdir = |name: &[u8]| A::op(op::CREATE).u32(2).opaque(name).u32(0).u32(0);
    let r = send(&mut h, &[putfh(&root), mkdir(b"d")], true).1;
    assert_eq!(r.status, st::REP_TOO_BIG_TO_CACHE);
    assert_eq!(r.results.len(), 3);
    // Not made: without `sa_cachethis` the same CREATE runs (the response bound is 1 MiB).
    let r = send(&mut h, &[putfh(&root), lookup(b"d")], false).1;
    assert_eq!(r.status, st::NOENT);
    let r = send(&mut h, &[putfh(&root), mkdir(b"d")], false).1;
    assert_eq!(r.status, st::OK);
    // 16 octets more fit a CREATE alone, not one an operation follows (room for its error
    // is kept, as Linux nfsd keeps COMPOUND_ERR_SLACK_SPACE).
    let cached = ChannelAttrs {
        max_response_cached: tight + 16,
        ..fore()
    };
    new_session(&mut h, cached, 3);
    let r = send(&mut h, &[putfh(&root), mkdir(b"e"), A::op(op::GETFH)], true).1;
    assert_eq!(r.status, st::REP_TOO_BIG_TO_CACHE);
    assert_eq!(r.results.len(), 3);
    let r = send(&mut h, &[putfh(&root), mkdir(b"e")], true).1;
    assert_eq!(r.status, st::OK);
    // A WRITE past `ca_maxresponsesize`: NFS4ERR_REP_TOO_BIG, and the file keeps its data.
    let small = ChannelAttrs {
        max_response: AFTER_SEQUENCE + 8 + 8 + 8 + 8,
        ..fore()
    };
    let roomy = (h.sid, h.seq);
    new_session(&mut h, small, 4);
    let anon = [0u8; 16];
    let write = A::op(op::WRITE).fixed(&anon).u64(0).u32(2).opaque(b"gone");
    let r = send(&mut h, &[putfh(&root), lookup(b"f"), write], false).1;
    assert_eq!(r.status, st::REP_TOO_BIG);
    assert_eq!(r.results.len(), 4);
    let r = send(&mut h, &[putfh(&root), lookup(b"f"), read(&anon, 4)], false).1;
    assert_eq!(r.status, st::REP_TOO_BIG, "READ4resok of 4 octets: 12 more");
    (h.sid, h.seq) = roomy;
    let r = send(&mut h, &[putfh(&root), lookup(b"f"), read(&anon, 4)], false).1;
    assert_eq!(r.status, st::OK);
    assert_eq!(&r.last[8..12], &[0x5a; 4], "not written");
}
