//! NFSv4.1 COMPOUND server (rpcrdma-apps `nfs::v4::server`) on arbitrary bytes, over a memory
//! store and one established session. An input whose first octet has its top bit set is a
//! whole COMPOUND4args (header fuzzing); otherwise the first octet's low five bits give the
//! number of operations after a valid SEQUENCE (the next sequence id of slot 0), and the rest
//! is those operations' octets. Nothing may panic; every answered COMPOUND carries at most as
//! many results as operations it announced.
#![no_main]
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
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

struct World {
    srv: Arc<Nfs41>,
    sid: [u8; 16],
    seq: AtomicU32,
}

fn cx() -> CallCx<'static> {
    CallCx {
        peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        cred: OpaqueAuth::NONE,
        conn: 1,
    }
}

fn one(srv: &Nfs41, op: Op<'_>) -> OpResult {
    let e = encode_compound_minor("s", 1, &[op]);
    let r = srv.compound(&cx(), &e.bytes).expect("set-up COMPOUND decodes");
    let r = decode_compound(&r, &[op], ReadPlacement::Inline).expect("set-up reply decodes");
    r.ops[0].result.clone()
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let opts = MemoryOptions {
            capacity: 64 << 20,
            max_files: 10_000,
            ..MemoryOptions::default()
        };
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(opts));
        let ex = Exports::parse("/ *(rw,no_root_squash,sec=sys:none,anonuid=0,anongid=0)")
            .expect("exports");
        let list = vec![(ex.list()[0].clone(), store)];
        let table = ExportTable::new(HandleKey::from_bytes([5; 16]), list).expect("table");
        let srv = Nfs41::new(Arc::new(table), Config::default());
        let ca = ChannelAttrs {
            max_request: 1 << 20,
            max_response: 1 << 20,
            max_response_cached: 8 << 10,
            max_ops: 32,
            max_requests: 4,
            ..ChannelAttrs::default()
        };
        let owner = b"fuzz";
        let OpResult::ExchangeId(x) = one(&srv, Op::ExchangeId { verifier: [1; 8], owner, flags: 0 })
        else {
            panic!("EXCHANGE_ID");
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
            panic!("CREATE_SESSION");
        };
        World {
            srv,
            sid: s.session,
            seq: AtomicU32::new(0),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let Some((&first, ops)) = data.split_first() else {
        return;
    };
    if first & 0x80 != 0 {
        let _ = w.srv.compound(&cx(), ops);
        return;
    }
    let nops = u32::from(first & 0x1f) + 1;
    let sequence = w.seq.fetch_add(1, Ordering::Relaxed) + 1;
    let seq = Op::Sequence {
        session: w.sid,
        sequence,
        slot: 0,
        highest_slot: 0,
        cache_this: true,
    };
    // "s" as the tag: length word and one padded word, then minor version, then the count.
    let mut b = encode_compound_minor("s", 1, &[seq]).bytes;
    b[12..16].copy_from_slice(&nops.to_be_bytes());
    b.extend_from_slice(ops);
    let r = w.srv.compound(&cx(), &b).expect("the header is valid");
    let n = u32::from_be_bytes([r[12], r[13], r[14], r[15]]);
    assert!(n <= nops, "{n} results for {nops} operations");
});
