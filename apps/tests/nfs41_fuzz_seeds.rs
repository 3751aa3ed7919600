//! The checked-in `nfs41_compound` fuzz seeds (`fuzz/seeds/nfs41_compound/`, laid out from
//! RFC 8881 in `fuzz/seeds/make.py`) framed as the target frames them: the operation seeds
//! after a valid SEQUENCE pass SEQUENCE and their first operation, so the fuzzer starts
//! inside the operations; the header seeds are answered (not GARBAGE_ARGS).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use rpcrdma_apps::nfs::admit::ExportTable;
use rpcrdma_apps::nfs::exports::Exports;
use rpcrdma_apps::nfs::handle_mac::HandleKey;
use rpcrdma_apps::nfs::store::memory::{MemoryOptions, MemoryStore};
use rpcrdma_apps::nfs::store::Store;
use rpcrdma_apps::nfs::v4::server::{CallCx, Config, Nfs41};
use rpcrdma_apps::nfs::v4::{
    decode_compound, encode_compound_minor, ChannelAttrs, Op, OpResult, ReadPlacement,
};
use rpcrdma_engine::rpc::OpaqueAuth;

fn cx() -> CallCx<'static> {
    CallCx {
        peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        cred: OpaqueAuth::NONE,
        conn: 1,
    }
}

fn one(srv: &Nfs41, op: Op<'_>) -> OpResult {
    let e = encode_compound_minor("s", 1, &[op]);
    let r = srv.compound(&cx(), &e.bytes).unwrap();
    decode_compound(&r, &[op], ReadPlacement::Inline)
        .unwrap()
        .ops[0]
        .result
        .clone()
}

#[test]
fn accepts_every_nfs41_seed_past_sequence() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryOptions::default()));
    let ex = Exports::parse("/ *(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0)").unwrap();
    let list = vec![(ex.list()[0].clone(), store)];
    let table = ExportTable::new(HandleKey::from_bytes([5; 16]), list).unwrap();
    let srv = Nfs41::new(Arc::new(table), Config::default());
    let ca = ChannelAttrs {
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 8 << 10,
        max_ops: 32,
        max_requests: 4,
        ..ChannelAttrs::default()
    };
    let ex = Op::ExchangeId {
        verifier: [1; 8],
        owner: b"fuzz",
        flags: 0,
    };
    let OpResult::ExchangeId(x) = one(&srv, ex) else {
        panic!("EXCHANGE_ID")
    };
    let cs = Op::CreateSession {
        clientid: x.clientid,
        sequence: x.sequence,
        flags: 0,
        fore: ca,
        back: ca,
        cb_program: 1,
    };
    let OpResult::CreateSession(s) = one(&srv, cs) else {
        panic!("CREATE_SESSION")
    };
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs41_compound");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert_eq!(names.len(), 6);
    let mut sequence = 0;
    for path in &names {
        let data = std::fs::read(path).unwrap();
        let (&first, ops) = data.split_first().unwrap();
        if first & 0x80 != 0 {
            assert!(srv.compound(&cx(), ops).is_ok(), "{path:?}: header decodes");
            continue;
        }
        let nops = u32::from(first & 0x1f) + 1;
        sequence += 1;
        let seq = Op::Sequence {
            session: s.session,
            sequence,
            slot: 0,
            highest_slot: 0,
            cache_this: true,
        };
        let mut b = encode_compound_minor("s", 1, &[seq]).bytes;
        b[12..16].copy_from_slice(&nops.to_be_bytes());
        b.extend_from_slice(ops);
        let r = srv.compound(&cx(), &b).unwrap();
        let n = u32::from_be_bytes([r[12], r[13], r[14], r[15]]);
        assert!(n >= 2 && n <= nops, "{path:?}: {n} results of {nops}");
        // SEQUENCE's status, then the first operation's (PUTROOTFH) status.
        assert_eq!(&r[20..24], &[0, 0, 0, 0], "{path:?}: SEQUENCE");
        let at = 24 + 36;
        assert_eq!(
            &r[at + 4..at + 8],
            &[0, 0, 0, 0],
            "{path:?}: first operation"
        );
    }
}
