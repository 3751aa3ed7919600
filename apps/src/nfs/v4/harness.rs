//! The NFSv4.1 server driven one COMPOUND at a time outside any connection, over one
//! established session: what the `nfs41_compound` fuzz target and
//! `apps/tests/nfs41_fuzz_seeds.rs` run, on a fresh memory store ([`Harness41::memory`]) or
//! any store ([`Harness41::new`]; `nfs::v3::harness::fixture` makes the objects the
//! `dir:` seeds use: `d`, `f`, a link `l` out of the export, `p`).
//!
//! Normal operation: [`Harness41::after_sequence`] sends operations after a valid SEQUENCE
//! (the next sequence id of slot 0, cached), as a client of address 10.0.0.1 with AUTH_NONE
//! (squashed to uid 0 by the export's `anonuid`); [`Harness41::compound`] sends a whole
//! COMPOUND4args. Recovery: none needed.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rpcrdma_engine::rpc::OpaqueAuth;
use rpcrdma_engine::xdr::XdrError;

use super::server::{CallCx, Config, Nfs41};
use super::{decode_compound, encode_compound_minor, ChannelAttrs, Op, OpResult, ReadPlacement};
use crate::nfs::admit::ExportTable;
use crate::nfs::exports::Exports;
use crate::nfs::handle_mac::HandleKey;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::Store;

/// A server with one client and one session.
pub struct Harness41 {
    srv: Arc<Nfs41>,
    session: [u8; 16],
    seq: AtomicU32,
}

fn cx() -> CallCx<'static> {
    CallCx {
        peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        cred: OpaqueAuth::NONE,
        conn: 1,
    }
}

/// The result of the one operation `op` sent alone (set-up: EXCHANGE_ID, CREATE_SESSION).
fn one(srv: &Nfs41, op: Op<'_>) -> OpResult {
    let e = encode_compound_minor("s", 1, &[op]);
    let r = srv
        .compound(&cx(), &e.bytes)
        .expect("set-up COMPOUND decodes");
    let r = decode_compound(&r, &[op], ReadPlacement::Inline).expect("set-up reply decodes");
    r.ops[0].result.clone()
}

impl Harness41 {
    /// A fresh memory store (64 MiB, 10 000 files) behind the server.
    pub fn memory() -> Harness41 {
        let opts = MemoryOptions {
            capacity: 64 << 20,
            max_files: 10_000,
            ..MemoryOptions::default()
        };
        Harness41::new(Arc::new(MemoryStore::new(opts)))
    }

    /// `store` exported as `/` to everyone (AUTH_NONE squashed to uid 0), a client id and a
    /// session of four slots.
    ///
    /// # Panics
    ///
    /// When the server refuses the client id or the session (a harness for tests and fuzz
    /// targets).
    pub fn new(store: Arc<dyn Store>) -> Harness41 {
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
        let exchange = Op::ExchangeId {
            verifier: [1; 8],
            owner,
            flags: 0,
        };
        let OpResult::ExchangeId(x) = one(&srv, exchange) else {
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
        Harness41 {
            srv,
            session: s.session,
            seq: AtomicU32::new(0),
        }
    }

    /// A whole COMPOUND4args: the reply, or why its header does not decode.
    pub fn compound(&self, args: &[u8]) -> Result<Vec<u8>, XdrError> {
        self.srv.compound(&cx(), args)
    }

    /// `ops`, announced as `(first & 0x1f) + 1` operations, after a valid SEQUENCE, in a
    /// COMPOUND of minor version 2 when `first & 0x20` is set (else 1): the reply and the
    /// number of operations announced, or why the COMPOUND did not decode (which the header
    /// this harness writes never causes: the fuzz target checks that).
    pub fn after_sequence(&self, first: u8, ops: &[u8]) -> Result<(Vec<u8>, u32), XdrError> {
        let nops = u32::from(first & 0x1f) + 1;
        let minor = if first & 0x20 != 0 { 2 } else { 1 };
        // Relaxed: one caller at a time numbers its requests.
        let sequence = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let seq = Op::Sequence {
            session: self.session,
            sequence,
            slot: 0,
            highest_slot: 0,
            cache_this: true,
        };
        // "s" as the tag: length word and one padded word, then minor version, then the count.
        let mut b = encode_compound_minor("s", minor, &[seq]).bytes;
        b[12..16].copy_from_slice(&nops.to_be_bytes());
        b.extend_from_slice(ops);
        Ok((self.srv.compound(&cx(), &b)?, nops))
    }
}
