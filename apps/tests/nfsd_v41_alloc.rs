//! The NFSv4.1 server's steady state allocates nothing on the heap: COMPOUNDs of SEQUENCE +
//! PUTFH + GETATTR (the attributes the Linux client asks for a regular file), SEQUENCE +
//! PUTFH + READ and SEQUENCE + PUTFH + WRITE (both under an open stateid, 4 KiB, replies kept
//! in the slot) on the memory backend, answered through [`Nfs41::compound_into`] into one
//! reply buffer the caller reuses, as the NFS program's handler does per worker thread.
//!
//! Normal operation: the allocator counts, per thread, the allocations and the octets
//! allocated; the server runs on the test's own thread. After a warm-up (the reply buffer and
//! the slot's cached reply have grown to the largest reply), the calls are interleaved and
//! must allocate nothing. Recovery: a call that allocates fails the test with the count; a
//! reply that is not NFS4_OK fails it with the status.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_apps::nfs::admit::ExportTable;
use rpcrdma_apps::nfs::exports::Exports;
use rpcrdma_apps::nfs::handle_mac::HandleKey;
use rpcrdma_apps::nfs::identity::Cred;
use rpcrdma_apps::nfs::store::memory::{MemoryOptions, MemoryStore};
use rpcrdma_apps::nfs::store::Store;
use rpcrdma_apps::nfs::types::{CreateHow, Sattr3};
use rpcrdma_apps::nfs::v4::server::deleg::{Callbacks, Done};
use rpcrdma_apps::nfs::v4::server::state::Limits;
use rpcrdma_apps::nfs::v4::server::{CallCx, Config, Nfs41};
use rpcrdma_apps::nfs::v4::{
    decode_compound, encode_compound_minor, op, ChannelAttrs, CompoundReply, Op, OpResult,
    ReadPlacement, Stable, StateId, WriteData, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, NFS4_OK,
};
use rpcrdma_engine::rpc::{AuthFlavor, AuthSysParams, OpaqueAuth};
use rpcrdma_poller::CredBody;

/// The system allocator, counting allocations and octets allocated per thread.
struct Counting;

thread_local! {
    static ALLOCS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn count(octets: usize) {
    // A thread being torn down has no counter any more; nothing to count then.
    let _ = ALLOCS.try_with(|a| {
        let (n, b) = a.get();
        a.set((n + 1, b + octets as u64));
    });
}

// SAFETY: every call forwards to `System` with the same arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new.saturating_sub(l.size()));
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations and octets allocated by this thread so far.
fn allocs() -> (u64, u64) {
    ALLOCS.with(|a| a.get())
}

/// Octets each READ and WRITE moves.
const IO: usize = 4096;
/// Calls of each kind measured.
const N: usize = 64;

/// A back channel that stands and answers every callback (the session's CB_NULL probe).
struct Answering;

impl Callbacks for Answering {
    fn call(&self, _: u64, _: u32, _: u32, _: &CredBody, _: Vec<u8>, done: Done) {
        done(true);
    }
}

/// A server exporting one memory store read-write, a session on it with its back channel
/// bound (as the Linux client asks), the file `f` opened for reading and writing.
struct Rig {
    srv: Arc<Nfs41>,
    auth: Vec<u8>,
    sid: [u8; 16],
    seq: u32,
    clientid: u64,
    fh: Vec<u8>,
    open: StateId,
}

fn auth_sys() -> Vec<u8> {
    let p = AuthSysParams {
        stamp: 1,
        machinename: b"client",
        uid: 1000,
        gid: 100,
        gids: &[100, 10],
    };
    let mut b = vec![0u8; p.encoded_len()];
    let n = p.encode_into(&mut b).expect("AUTH_SYS encodes");
    b.truncate(n);
    b
}

fn channel() -> ChannelAttrs {
    ChannelAttrs {
        header_pad: 0,
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 64 << 10,
        max_ops: 16,
        max_requests: 8,
        rdma_ird: None,
    }
}

impl Rig {
    fn new() -> Rig {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryOptions::default()));
        let how = CreateHow::Unchecked(Sattr3 {
            mode: Some(0o666),
            ..Sattr3::default()
        });
        store
            .create(&Cred::ROOT, &store.root(), b"f", &how)
            .expect("create f");
        let ex = Exports::parse("/ *(rw)").expect("exports parse");
        let table = ExportTable::new(
            HandleKey::from_bytes([7; 16]),
            vec![(ex.list()[0].clone(), Arc::clone(&store))],
        )
        .expect("export table");
        let now = Arc::new(AtomicU64::new(1_000));
        let cfg = Config {
            limits: Limits::default(),
            max_io: 64 << 10,
            clock: Arc::new(move || now.load(Ordering::SeqCst)),
            pool: None,
            callbacks: Some(Arc::new(Answering)),
        };
        let mut rig = Rig {
            srv: Nfs41::new(Arc::new(table), cfg),
            auth: auth_sys(),
            sid: [0; 16],
            seq: 0,
            clientid: 0,
            fh: Vec::new(),
            open: [0; 16],
        };
        rig.session();
        let r = rig.call(&[
            Op::PutRootFh,
            Op::Open {
                clientid: rig.clientid,
                owner: b"owner",
                access: 3,
                name: "f",
            },
            Op::GetFh,
        ]);
        match (&r.ops[2].result, &r.ops[3].result) {
            (OpResult::Open(o), OpResult::Fh(fh)) => {
                rig.open = o.stateid;
                rig.fh = fh.clone();
            }
            other => panic!("OPEN, GETFH: {other:?}"),
        }
        rig
    }

    fn cx(&self) -> CallCx<'_> {
        CallCx {
            peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            cred: OpaqueAuth {
                flavor: AuthFlavor::Sys,
                body: &self.auth,
            },
            conn: 7,
        }
    }

    fn plain(&self, ops: &[Op<'_>]) -> CompoundReply {
        let e = encode_compound_minor("t", 1, ops);
        let b = self.srv.compound(&self.cx(), &e.bytes).expect("decodes");
        decode_compound(&b, ops, ReadPlacement::Inline).expect("reply decodes")
    }

    fn session(&mut self) {
        let r = self.plain(&[Op::ExchangeId {
            verifier: [1; 8],
            owner: b"client-a",
            flags: 0,
        }]);
        let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone())
        else {
            panic!("EXCHANGE_ID: {r:?}");
        };
        let r = self.plain(&[Op::CreateSession {
            clientid: x.clientid,
            sequence: x.sequence,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore: channel(),
            back: channel(),
            cb_program: 0x4000_0000,
        }]);
        let Some(OpResult::CreateSession(cs)) =
            r.find(op::CREATE_SESSION).map(|o| o.result.clone())
        else {
            panic!("CREATE_SESSION: {r:?}");
        };
        self.sid = cs.session;
        self.clientid = x.clientid;
    }

    /// The next SEQUENCE of slot 0, asking for the reply to be kept.
    fn sequence(&mut self) -> Op<'static> {
        self.seq += 1;
        Op::Sequence {
            session: self.sid,
            sequence: self.seq,
            slot: 0,
            highest_slot: 0,
            cache_this: true,
        }
    }

    /// SEQUENCE and `ops`, decoded.
    fn call(&mut self, ops: &[Op<'_>]) -> CompoundReply {
        let mut all = vec![self.sequence()];
        all.extend_from_slice(ops);
        let r = self.plain(&all);
        assert_eq!(r.status, NFS4_OK, "{r:?}");
        r
    }

    /// COMPOUND4args of SEQUENCE, PUTFH of `f` and `last`, whose arguments replace those the
    /// codec wrote for it when `raw` holds some (the codec has no GETATTR of a full bitmap
    /// and no WRITE under an open stateid).
    fn args(&mut self, last: Op<'_>, raw: Option<&[u8]>) -> Vec<u8> {
        let fh = self.fh.clone();
        let ops = [self.sequence(), Op::PutFh(&fh), last];
        let mut b = encode_compound_minor("t", 1, &ops).bytes;
        if let Some(raw) = raw {
            let head = encode_compound_minor("t", 1, &ops[..2]).bytes.len();
            b.truncate(head + 4); // the last operation's number
            b.extend_from_slice(raw);
        }
        b
    }

    /// SEQUENCE + PUTFH + GETATTR of what the Linux client asks for a regular file
    /// (`nfs4_fattr_bitmap`): TYPE, CHANGE, SIZE, FSID, FILEID; MODE, NUMLINKS, OWNER,
    /// OWNER_GROUP, RAWDEV, SPACE_USED, TIME_ACCESS, TIME_METADATA, TIME_MODIFY,
    /// MOUNTED_ON_FILEID.
    fn getattr(&mut self) -> Vec<u8> {
        let w0: u32 = (1 << 1) | (1 << 3) | (1 << 4) | (1 << 8) | (1 << 20);
        let w1: u32 = [33, 35, 36, 37, 41, 45, 47, 52, 53, 55]
            .iter()
            .fold(0, |w, a| w | 1 << (a - 32));
        let raw: Vec<u8> = [2, w0, w1].iter().flat_map(|w| w.to_be_bytes()).collect();
        self.args(Op::GetAttrTypeSize, Some(&raw))
    }

    /// SEQUENCE + PUTFH + READ of [`IO`] octets at `offset` under the open stateid.
    fn read(&mut self, offset: u64) -> Vec<u8> {
        let read = Op::ReadStateid {
            stateid: self.open,
            offset,
            count: IO as u32,
        };
        self.args(read, None)
    }

    /// SEQUENCE + PUTFH + WRITE (FILE_SYNC) of [`IO`] octets of `fill` at `offset` under the
    /// open stateid.
    fn write(&mut self, offset: u64, fill: u8) -> Vec<u8> {
        let mut raw = self.open.to_vec();
        raw.extend_from_slice(&offset.to_be_bytes());
        raw.extend_from_slice(&2u32.to_be_bytes()); // FILE_SYNC4
        raw.extend_from_slice(&(IO as u32).to_be_bytes());
        raw.extend_from_slice(&[fill; IO]);
        let write = Op::Write {
            offset,
            stable: Stable::FileSync,
            data: WriteData::Inline(&[]),
        };
        self.args(write, Some(&raw))
    }
}

/// The status of COMPOUND4res `b`, SEQUENCE's `sr_status_flags` (0: the back channel is up)
/// and the status of the last result.
fn statuses(b: &[u8]) -> (u32, u32, u32) {
    let word = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().expect("4 octets"));
    let tag = word(4) as usize;
    let results = 8 + tag.div_ceil(4) * 4;
    // SEQUENCE4resok is 36 octets, the flags last; PUTFH has no result body.
    let flags = results + 4 + 8 + 32;
    let last = results + 4 + 8 + 36 + 8;
    (word(0), word(flags), word(last + 4))
}

#[test]
fn accepts_steady_state_getattr_read_and_write_compounds_without_allocating() {
    let mut rig = Rig::new();
    let mut reply = Vec::new();
    // Calls of each kind, interleaved: GETATTR, WRITE, READ of the octets just written.
    let mut calls = Vec::new();
    for i in 0..N + 8 {
        let at = (i % 4 * IO) as u64;
        calls.push(rig.getattr());
        calls.push(rig.write(at, i as u8));
        calls.push(rig.read(at));
    }
    let srv = Arc::clone(&rig.srv);
    let cx = rig.cx();
    let (warm, measured) = calls.split_at(8 * 3);
    for a in warm {
        srv.compound_into(&cx, a, None, &mut reply)
            .expect("decodes");
        assert_eq!(statuses(&reply), (NFS4_OK, 0, NFS4_OK));
    }
    let before = allocs();
    let mut failed = None;
    for (i, a) in measured.iter().enumerate() {
        srv.compound_into(&cx, a, None, &mut reply)
            .expect("decodes");
        let s = statuses(&reply);
        if s != (NFS4_OK, 0, NFS4_OK) && failed.is_none() {
            failed = Some((i, s));
        }
    }
    let (n, octets) = {
        let after = allocs();
        (after.0 - before.0, after.1 - before.1)
    };
    assert_eq!(failed, None, "call (index, (status, flags, last status))");
    assert_eq!(
        (n, octets),
        (0, 0),
        "{} COMPOUNDs made {n} allocations of {octets} octets",
        measured.len()
    );
    // The last READ returned what the WRITE before it wrote.
    let sent = [
        Op::Sequence {
            session: rig.sid,
            sequence: 0,
            slot: 0,
            highest_slot: 0,
            cache_this: true,
        },
        Op::PutFh(&rig.fh),
        Op::Read {
            offset: 0,
            count: IO as u32,
        },
    ];
    let r = decode_compound(&reply, &sent, ReadPlacement::Inline).expect("READ decodes");
    match &r.ops[2].result {
        OpResult::Read { data, len, eof } => assert!(
            data.len() == IO && data.iter().all(|b| *b == (N + 7) as u8),
            "READ of {len} octets (eof {eof}): {:?}",
            &data[..data.len().min(16)]
        ),
        other => panic!("READ: {other:?}"),
    }
}
