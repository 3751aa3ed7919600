//! Unit tests of the reply size bounds of a session (RFC 8881 §2.10.6.4, §15.1.3, §18.46):
//! the operation that would take the reply past `ca_maxresponsesize` is NFS4ERR_REP_TOO_BIG,
//! past `ca_maxresponsesize_cached` when `sa_cachethis` is set NFS4ERR_REP_TOO_BIG_TO_CACHE,
//! and the COMPOUND stops there; an operation that changes something is refused before it
//! runs when its reply could not fit (as Linux nfsd's `nfsd4_check_resp_size` decides it);
//! READ and READDIR return what fits instead (a short READ, fewer entries), as Linux nfsd's
//! do, and are refused only when nothing fits.
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
fn accepts_a_read_past_the_cached_size_shortened_to_it() {
    let (mut h, sid, root) = setup(None);
    // 12 KiB of READ data asked, `sa_cachethis` set: the slot keeps 8 KiB
    // (`ca_maxresponsesize_cached` was asked as 1 MiB and clamped), so the READ returns what
    // fits in them, as Linux nfsd's: after SEQUENCE, PUTFH, LOOKUP, READ's number and status,
    // `eof` and the length.
    let ops = [putfh(&root), lookup(b"f"), read(&sid, 12 << 10)];
    let (b, r) = send(&mut h, &ops, true);
    assert_eq!(r.status, st::OK);
    let fits = 8192 - AFTER_SEQUENCE as usize - 8 - 8 - 8 - 8;
    assert_eq!(r.last.len(), 8 + fits);
    assert_eq!(
        &r.last[..8],
        &[0, 0, 0, 0, 0, 0, 0x1f, 0x8c],
        "not eof, 8 076 octets"
    );
    // The slot kept it: the retry gets it again, octet for octet.
    let first = h.send(&b);
    assert_eq!(walk(&first).last, r.last);
    assert_eq!(h.srv.state().counters.replays, 1);
    // Not kept: the whole 12 KiB.
    let (b, r) = send(&mut h, &ops, false);
    assert_eq!((r.status, r.last.len()), (st::OK, 8 + (12 << 10)));
    // Its retry is NFS4ERR_RETRY_UNCACHED_REP.
    assert_eq!(walk(&h.send(&b)).status, st::RETRY_UNCACHED_REP);
}

#[test]
fn rejects_a_reply_past_the_cached_size_as_rep_too_big_to_cache() {
    // Room after SEQUENCE and PUTFH for GETFH's number and status, not for the handle.
    let cached = ChannelAttrs {
        max_response_cached: AFTER_SEQUENCE + 8 + 8 + 8,
        ..fore()
    };
    let (mut h, _, root) = setup(Some(cached));
    let ops = [putfh(&root), A::op(op::GETFH)];
    let (b, r) = send(&mut h, &ops, true);
    assert_eq!(r.status, st::REP_TOO_BIG_TO_CACHE);
    let want = [
        (op::SEQUENCE, st::OK),
        (op::PUTFH, st::OK),
        (op::GETFH, st::REP_TOO_BIG_TO_CACHE),
    ];
    assert_eq!(r.results, want);
    assert!(r.last.is_empty(), "no GETFH4resok");
    // The error reply is what the slot keeps: the retry gets it again.
    assert_eq!(walk(&h.send(&b)).results, want);
    assert_eq!(h.srv.state().counters.replays, 1);
    // Without `sa_cachethis` the response bound (1 MiB) holds it.
    assert_eq!(send(&mut h, &ops, false).1.status, st::OK);
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
        // Past `ca_maxresponsesize` (4 KiB, under the 8 KiB cached bound): the READ is
        // shortened to it whether or not the reply is to be kept.
        let mut ops = file().to_vec();
        ops.push(read(&sid, 6000));
        let r = send(&mut h, &ops, cache_this).1;
        assert_eq!(r.status, st::OK, "cache_this {cache_this}");
        assert_eq!(
            r.last.len(),
            8 + 4096 - AFTER_SEQUENCE as usize - 8 - 8 - 8 - 8
        );
        // Two READs of 2 500 octets: the second one gets what is left (1 464 octets), and
        // the GETFH after them is NFS4ERR_REP_TOO_BIG.
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
        assert_eq!(
            got,
            [st::OK, st::OK, st::OK, st::OK, st::OK, st::REP_TOO_BIG]
        );
        assert!(matches!(r.ops[3].result, OpResult::Read { len: 2500, .. }));
        assert!(matches!(r.ops[4].result, OpResult::Read { len: 1464, .. }));
    }
}

#[test]
fn accepts_a_readdir_within_the_response_size_and_rejects_one_where_no_entry_fits() {
    // Room after SEQUENCE and PUTFH for READDIR's number and status and 300 octets.
    let small = ChannelAttrs {
        max_response: AFTER_SEQUENCE + 8 + 8 + 300,
        ..fore()
    };
    let (mut h, _, root) = setup(Some(small));
    let mkdir = |name: &[u8]| A::op(op::CREATE).u32(2).opaque(name).u32(0).u32(0);
    for i in 0..20 {
        let name = format!("directory-with-a-long-name-{i:02}");
        assert_eq!(h.status(&[putfh(&root), mkdir(name.as_bytes())]), st::OK);
    }
    let list = |maxcount: u32, words: &[u32]| {
        let mut a = A::op(op::READDIR)
            .u64(0)
            .fixed(&[0; 8])
            .u32(maxcount)
            .u32(maxcount);
        a = a.u32(words.len() as u32);
        for w in words {
            a = a.u32(*w);
        }
        a
    };
    // The type and file id of each: a few entries fit in 300 octets, the listing goes on.
    let type_fileid = (1u32 << 1) | (1 << 20);
    let r = send(&mut h, &[putfh(&root), list(8192, &[type_fileid])], false).1;
    assert_eq!(r.status, st::OK);
    assert!(r.last.len() <= 300, "{} octets", r.last.len());
    let mut x = rpcrdma_engine::xdr::XdrReader::new(&r.last);
    x.skip(8).unwrap();
    let mut n = 0;
    while x.get_u32().unwrap() == 1 {
        x.skip(8).unwrap();
        x.get_opaque(255).unwrap();
        let words = x.get_u32().unwrap() as usize;
        x.skip(4 * words).unwrap();
        x.get_opaque(100).unwrap();
        n += 1;
    }
    assert_eq!(x.get_u32().unwrap(), 0, "not eof");
    assert!(n >= 2, "{n} entries");
    // With every attribute the Linux client asks for a listing, owner strings and the
    // handle included, not one entry fits: NFS4ERR_REP_TOO_BIG (a small `maxcount` would be
    // NFS4ERR_TOOSMALL).
    let w0: u32 = [1, 3, 4, 8, 11, 19, 20].iter().fold(0, |w, a| w | 1 << a);
    let w1: u32 = [33, 35, 36, 37, 41, 45, 47, 52, 53, 55]
        .iter()
        .fold(0, |w, a| w | 1 << (a - 32));
    let tight = ChannelAttrs {
        max_response: AFTER_SEQUENCE + 8 + 8 + 120,
        ..fore()
    };
    new_session(&mut h, tight, 3);
    let r = send(&mut h, &[putfh(&root), list(8192, &[w0, w1])], false).1;
    assert_eq!(r.status, st::REP_TOO_BIG);
    let r = send(&mut h, &[putfh(&root), list(100, &[w0, w1])], false).1;
    assert_eq!(r.status, st::TOOSMALL);
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
    // A READ there: no room for data, a READ of none (as Linux nfsd answers it).
    let r = send(&mut h, &[putfh(&root), lookup(b"f"), read(&anon, 4)], false).1;
    assert_eq!((r.status, r.last.as_slice()), (st::OK, &[0u8; 8][..]));
    // With a SAVEFH before it, not even `eof` and the length fit: NFS4ERR_REP_TOO_BIG.
    let ops = [
        putfh(&root),
        lookup(b"f"),
        A::op(op::SAVEFH),
        read(&anon, 4),
    ];
    let r = send(&mut h, &ops, false).1;
    assert_eq!(r.status, st::REP_TOO_BIG, "READ4resok: 8 octets at least");
    assert_eq!(r.results.len(), 5);
    (h.sid, h.seq) = roomy;
    let r = send(&mut h, &[putfh(&root), lookup(b"f"), read(&anon, 4)], false).1;
    assert_eq!(r.status, st::OK);
    assert_eq!(&r.last[8..12], &[0x5a; 4], "not written");
}
