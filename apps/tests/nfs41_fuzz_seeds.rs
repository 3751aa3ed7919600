//! The checked-in `nfs41_compound` fuzz seeds (`fuzz/seeds/nfs41_compound/`, laid out from
//! RFC 8881 in `fuzz/seeds/make.py`) framed as the target frames them: the operation seeds
//! after a valid SEQUENCE pass SEQUENCE and their first operation, so the fuzzer starts
//! inside the operations; the header seeds are answered (not GARBAGE_ARGS). The
//! `nfs4_clientdb` seeds (`fuzz/seeds/nfs4_clientdb/`) decode, framed as that target frames
//! them, to what their names say.

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

#[test]
fn accepts_every_clientdb_seed_as_its_name_says() {
    use rpcrdma_apps::nfs::v4::server::clientdb::{checksum, decode, encode, DbError, Record};
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs4_clientdb");
    let want: &[(&str, Result<usize, DbError>)] = &[
        ("raw_bad_checksum", Err(DbError::Checksum)),
        ("raw_bad_magic", Err(DbError::Magic)),
        ("records_empty_owner", Err(DbError::Length)),
        ("records_two", Ok(2)),
        ("sealed_count_too_large", Err(DbError::Count)),
        ("sealed_duplicate", Err(DbError::Duplicate)),
        ("sealed_empty", Ok(0)),
        ("sealed_owner_too_long", Err(DbError::Length)),
        ("sealed_short", Err(DbError::Short)),
        ("sealed_trailing", Err(DbError::Trailing)),
        ("sealed_two", Ok(2)),
    ];
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), want.len());
    for (name, expect) in want {
        let data = std::fs::read(dir.join(name)).unwrap();
        let (&mode, rest) = data.split_first().unwrap();
        let file = if mode & 0x80 != 0 {
            rest.to_vec()
        } else if mode & 0x40 != 0 {
            let mut f = b"RNFS4CL1".to_vec();
            f.extend_from_slice(rest);
            let sum = checksum(&f);
            f.extend_from_slice(&sum);
            f
        } else {
            // (16-bit owner length, 8-bit principal length, owner, principal) per record.
            let (mut recs, mut b) = (Vec::new(), rest);
            while b.len() >= 3 {
                let (o, p) = (
                    usize::from(u16::from_be_bytes([b[0], b[1]])),
                    usize::from(b[2]),
                );
                let owner = b[3..3 + o].to_vec();
                let principal = b[3 + o..3 + o + p].to_vec();
                b = &b[3 + o + p..];
                recs.push(Record { owner, principal });
            }
            encode(&recs)
        };
        let got = decode(&file).map(|r| r.len());
        assert_eq!(&got, expect, "{name}");
    }
}
