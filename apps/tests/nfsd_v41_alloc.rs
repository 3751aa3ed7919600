//! The NFSv4.1 server's steady state allocates nothing on the heap: COMPOUNDs of SEQUENCE +
//! PUTFH + GETATTR (the attributes the Linux client asks for a regular file), SEQUENCE +
//! PUTFH + READ and SEQUENCE + PUTFH + WRITE (both under an open stateid), SEQUENCE + PUTFH +
//! READDIR (the attributes the Linux client asks for a listing), READLINK, LOOKUP and ACCESS,
//! replies kept in the slot, the session's back channel bound. In process on the memory
//! backend, through [`Nfs41::compound_into`] with one reply buffer the caller reuses; and
//! through `rpcrdma-nfsd` on the software provider, on the memory and the `dir:` backends,
//! where the NFS program's handler runs them on the daemon's threads with each thread's own
//! reply buffer; there also READs through a Write chunk, copied into a registered buffer (a
//! small block on the heap) or, on the memory backend, sent from the store's registered block
//! (zero copy, `nfs4_read_zero_copy`), a reply the slot keeps holding that data inline.
//!
//! Normal operation: the allocator counts allocations and octets per thread and allocations
//! in all threads. After a warm-up (reply buffers and the slot's cached reply grown to the
//! largest reply), the calls are interleaved and must allocate nothing: on the test's thread
//! in process; on every thread but the test's (which runs the RPC client) over RDMA.
//! Recovery: a call that allocates fails the test with the count; a reply that is not
//! NFS4_OK fails it with the status.

mod counting;
mod nfsd_common;

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
    decode_compound, encode_compound_minor, op, CompoundReply, Op, OpResult, ReadPlacement, Stable,
    StateId, WriteData, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, NFS4_OK,
};
use rpcrdma_engine::rpc::{AuthFlavor, AuthSysParams, OpaqueAuth};
use rpcrdma_poller::{CredBody, Proc};

use counting::{all_allocs, allocs};
use nfsd_common::{options, scratch_dir, v41, v41::compound, Rig as Daemon};
use rpcrdma_apps::nfs::daemon::Backend;

/// Calls of each kind measured.
const N: usize = 64;
/// Calls of each kind before measuring.
const WARM: usize = 8;
/// Calls in one round of [`Calls::rounds`].
const PER_ROUND: usize = 7;

/// A back channel that stands and answers every callback (the session's CB_NULL probe).
struct Answering;

impl Callbacks for Answering {
    fn call(&self, _: u64, _: u32, _: u32, _: &CredBody, _: Vec<u8>, done: Done) {
        done(true);
    }
}

/// The COMPOUNDs of one session on the file `f` opened for reading and writing.
struct Calls {
    sid: [u8; 16],
    seq: u32,
    fh: Vec<u8>,
    /// The directory holding `f`.
    dir: Vec<u8>,
    /// The symbolic link `l` beside it.
    link: Vec<u8>,
    open: StateId,
    /// Octets each READ and WRITE moves.
    io: usize,
    /// `sa_cachethis` of the SEQUENCEs (a reply larger than the slot keeps, READ data placed
    /// through the Write chunk included, is NFS4ERR_REP_TOO_BIG_TO_CACHE with it set).
    cache_this: bool,
}

impl Calls {
    /// The next SEQUENCE of slot 0, asking for the reply to be kept unless `cache_this` is
    /// off.
    fn sequence(&mut self) -> Op<'static> {
        self.seq += 1;
        Op::Sequence {
            session: self.sid,
            sequence: self.seq,
            slot: 0,
            highest_slot: 0,
            cache_this: self.cache_this,
        }
    }

    /// COMPOUND4args of SEQUENCE, PUTFH of `f` and `last`, whose arguments replace those the
    /// codec wrote for it when `raw` holds some (the codec has no GETATTR of a full bitmap
    /// and no WRITE under an open stateid).
    fn args(&mut self, last: Op<'_>, raw: Option<&[u8]>) -> Vec<u8> {
        let fh = self.fh.clone();
        self.args_on(&fh, last, raw)
    }

    /// As [`Calls::args`], with PUTFH of `fh`.
    fn args_on(&mut self, fh: &[u8], last: Op<'_>, raw: Option<&[u8]>) -> Vec<u8> {
        let ops = [self.sequence(), Op::PutFh(fh), last];
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

    /// SEQUENCE + PUTFH of `fh` + operation `opnum` with the arguments `raw` (operations the
    /// codec has no variant for).
    fn args_num(&mut self, fh: &[u8], opnum: u32, raw: &[u8]) -> Vec<u8> {
        let mut b = self.args_on(fh, Op::GetFh, None);
        let n = b.len();
        b[n - 4..].copy_from_slice(&opnum.to_be_bytes()); // GETFH has no arguments: it ends
        b.extend_from_slice(raw);
        b
    }

    /// SEQUENCE + PUTFH of the link + READLINK; SEQUENCE + PUTFH of the directory + LOOKUP
    /// of `f`; SEQUENCE + PUTFH of `f` + ACCESS of every bit.
    fn names(&mut self) -> [Vec<u8>; 3] {
        let (link, dir, fh) = (self.link.clone(), self.dir.clone(), self.fh.clone());
        [
            self.args_num(&link, op::READLINK, &[]),
            self.args_on(&dir, Op::Lookup("f"), None),
            self.args_num(&fh, op::ACCESS, &0x3fu32.to_be_bytes()),
        ]
    }

    /// SEQUENCE + PUTFH of the directory + READDIR from its start, of the attributes the
    /// Linux client asks for a listing (`nfs4_readdir`, READDIRPLUS): RDATTR_ERROR, TYPE,
    /// CHANGE, SIZE, FSID, FILEHANDLE, FILEID; MODE, NUMLINKS, OWNER, OWNER_GROUP, RAWDEV,
    /// SPACE_USED, TIME_ACCESS, TIME_METADATA, TIME_MODIFY, MOUNTED_ON_FILEID.
    fn readdir(&mut self) -> Vec<u8> {
        let w0: u32 = [1, 3, 4, 8, 11, 19, 20].iter().fold(0, |w, a| w | 1 << a);
        let w1: u32 = [33, 35, 36, 37, 41, 45, 47, 52, 53, 55]
            .iter()
            .fold(0, |w, a| w | 1 << (a - 32));
        let mut raw = vec![0u8; 8 + 8]; // cookie 0, verifier 0
        for w in [8192, 32768, 2, w0, w1] {
            raw.extend_from_slice(&u32::to_be_bytes(w)); // dircount, maxcount, bitmap
        }
        let list = Op::ReadDir {
            cookie: 0,
            verifier: [0; 8],
            dircount: 0,
            maxcount: 0,
        };
        let dir = self.dir.clone();
        self.args_on(&dir, list, Some(&raw))
    }

    /// SEQUENCE + PUTFH + READ of `io` octets at `offset` under the open stateid.
    fn read(&mut self, offset: u64) -> Vec<u8> {
        self.read_n(offset, self.io as u32)
    }

    /// SEQUENCE + PUTFH + READ of `count` octets at `offset` under the open stateid.
    fn read_n(&mut self, offset: u64, count: u32) -> Vec<u8> {
        let read = Op::ReadStateid {
            stateid: self.open,
            offset,
            count,
        };
        self.args(read, None)
    }

    /// SEQUENCE + PUTFH + WRITE (FILE_SYNC) of `io` octets of `fill` at `offset` under the
    /// open stateid.
    fn write(&mut self, offset: u64, fill: u8) -> Vec<u8> {
        let mut raw = self.open.to_vec();
        raw.extend_from_slice(&offset.to_be_bytes());
        raw.extend_from_slice(&2u32.to_be_bytes()); // FILE_SYNC4
        raw.extend_from_slice(&(self.io as u32).to_be_bytes());
        raw.extend_from_slice(&vec![fill; self.io]);
        let write = Op::Write {
            offset,
            stable: Stable::FileSync,
            data: WriteData::Inline(&[]),
        };
        self.args(write, Some(&raw))
    }

    /// `n` rounds of GETATTR, WRITE of the round's number, READ of what was just written,
    /// over the first four blocks of the file, with a READDIR of its directory, READLINK,
    /// LOOKUP and ACCESS ([`Calls::names`]) before the READ ([`PER_ROUND`] calls a round).
    fn rounds(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut calls = Vec::new();
        for i in 0..n {
            let at = (i % 4 * self.io) as u64;
            calls.push(self.getattr());
            calls.push(self.write(at, i as u8));
            calls.push(self.readdir());
            calls.extend(self.names());
            calls.push(self.read(at));
        }
        calls
    }

    /// Checks that the READ reply `reply` returned `io` octets of `fill`.
    fn check_read(&self, reply: &[u8], fill: u8) {
        let sent = [
            Op::Sequence {
                session: self.sid,
                sequence: 0,
                slot: 0,
                highest_slot: 0,
                cache_this: true,
            },
            Op::PutFh(&self.fh),
            Op::Read {
                offset: 0,
                count: self.io as u32,
            },
        ];
        let r = decode_compound(reply, &sent, ReadPlacement::Inline).expect("READ decodes");
        match &r.ops[2].result {
            OpResult::Read { data, len, eof } => assert!(
                data.len() == self.io && data.iter().all(|b| *b == fill),
                "READ of {len} octets (eof {eof}): {:?}",
                &data[..data.len().min(16)]
            ),
            other => panic!("READ: {other:?}"),
        }
    }
}

/// A server exporting one memory store read-write, a session on it with its back channel
/// bound (as the Linux client asks), the file `f` opened for reading and writing.
struct Rig {
    srv: Arc<Nfs41>,
    auth: Vec<u8>,
    calls: Calls,
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

/// OPEN of `f` in the directory `dir` (`None`: the root) through `send`, with SEQUENCE 1:
/// the calls of the session on it, `io` octets per READ and WRITE.
fn open_f(
    send: impl Fn(&[Op<'_>]) -> CompoundReply,
    (sid, clientid): ([u8; 16], u64),
    dir: Option<&[u8]>,
    io: usize,
) -> Calls {
    let mut calls = Calls {
        sid,
        seq: 0,
        fh: Vec::new(),
        dir: Vec::new(),
        link: Vec::new(),
        open: [0; 16],
        io,
        cache_this: true,
    };
    let put = dir.map_or(Op::PutRootFh, Op::PutFh);
    let open = Op::Open {
        clientid,
        owner: b"owner",
        access: 3,
        name: "f",
    };
    let r = send(&[calls.sequence(), put, Op::GetFh, open, Op::GetFh]);
    match (
        r.status,
        &r.ops[2].result,
        &r.ops[3].result,
        &r.ops[4].result,
    ) {
        (NFS4_OK, OpResult::Fh(dir), OpResult::Open(o), OpResult::Fh(fh)) => {
            calls.open = o.stateid;
            calls.fh = fh.clone();
            calls.dir = dir.clone();
        }
        other => panic!("GETFH, OPEN, GETFH: {other:?}"),
    }
    let dir = calls.dir.clone();
    let r = send(&[
        calls.sequence(),
        Op::PutFh(&dir),
        Op::Lookup("l"),
        Op::GetFh,
    ]);
    match (r.status, &r.ops[3].result) {
        (NFS4_OK, OpResult::Fh(fh)) => calls.link = fh.clone(),
        other => panic!("LOOKUP l, GETFH: {other:?}"),
    }
    calls
}

impl Rig {
    fn new() -> Rig {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryOptions::default()));
        let how = CreateHow::Unchecked(Sattr3 {
            mode: Some(0o666),
            ..Sattr3::default()
        });
        for name in [&b"f"[..], b"g", b"h"] {
            store
                .create(&Cred::ROOT, &store.root(), name, &how)
                .expect("create");
        }
        store
            .mkdir(&Cred::ROOT, &store.root(), b"d", &Sattr3::default())
            .expect("mkdir d");
        store
            .symlink(&Cred::ROOT, &store.root(), b"l", b"f", &Sattr3::default())
            .expect("symlink l");
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
        let srv = Nfs41::new(Arc::new(table), cfg);
        let auth = auth_sys();
        let send = |ops: &[Op<'_>]| plain(&srv, &auth, ops);
        let calls = open_f(
            send,
            v41::session(send, b"client-a", CREATE_SESSION4_FLAG_CONN_BACK_CHAN),
            None,
            4096,
        );
        Rig { srv, auth, calls }
    }
}

fn cx(auth: &[u8]) -> CallCx<'_> {
    CallCx {
        peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        cred: OpaqueAuth {
            flavor: AuthFlavor::Sys,
            body: auth,
        },
        conn: 7,
    }
}

/// `ops` through [`Nfs41::compound`], decoded.
fn plain(srv: &Nfs41, auth: &[u8], ops: &[Op<'_>]) -> CompoundReply {
    let e = encode_compound_minor("t", 1, ops);
    let b = srv.compound(&cx(auth), &e.bytes).expect("decodes");
    decode_compound(&b, ops, ReadPlacement::Inline).expect("reply decodes")
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

/// Runs `calls` through `call`, which answers with the reply's octets: the first call (by
/// index) whose statuses are not all NFS4_OK, if any.
fn run(
    calls: &[Vec<u8>],
    mut call: impl FnMut(&[u8], &mut dyn FnMut(&[u8])),
) -> Option<(usize, (u32, u32, u32))> {
    let mut failed = None;
    for (i, a) in calls.iter().enumerate() {
        call(a, &mut |reply| {
            let s = statuses(reply);
            if s != (NFS4_OK, 0, NFS4_OK) && failed.is_none() {
                failed = Some((i, s));
            }
        });
    }
    failed
}

/// The calls through [`Nfs41::compound_into`] on this thread allocate nothing on it.
fn in_process() {
    let mut rig = Rig::new();
    let calls = rig.calls.rounds(WARM + N);
    let (warm, measured) = calls.split_at(WARM * PER_ROUND);
    let (srv, cx) = (&rig.srv, cx(&rig.auth));
    let mut reply = Vec::new();
    let mut call = |a: &[u8], seen: &mut dyn FnMut(&[u8])| {
        srv.compound_into(&cx, a, None, &mut reply)
            .expect("decodes");
        seen(&reply);
    };
    assert_eq!(run(warm, &mut call), None, "warm-up (index, statuses)");
    let before = allocs();
    let failed = run(measured, &mut call);
    let after = allocs();
    let (n, octets) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(failed, None, "call (index, (status, flags, last status))");
    assert_eq!(
        (n, octets),
        (0, 0),
        "{} COMPOUNDs made {n} allocations of {octets} octets",
        measured.len()
    );
    rig.calls.check_read(&reply, (WARM + N - 1) as u8);
}

/// The calls through the daemon allocate nothing on any thread but this one (which runs the
/// RPC client). No other test may run meanwhile: everything else in the process counts.
fn over_rdma(backend: Backend) {
    let dir = match &backend {
        Backend::Dir(p) => Some(p.clone()),
        _ => None,
    };
    let memory = dir.is_none();
    let mut o = options(backend);
    o.nfs4 = true;
    let d = Daemon::with(o, dir);
    let how = CreateHow::Unchecked(Sattr3 {
        mode: Some(0o666),
        ..Sattr3::default()
    });
    let f = d.nfs.create(&d.root, b"f", how).expect("v3 CREATE f");
    d.nfs.symlink(&d.root, b"l", b"f").expect("v3 SYMLINK l");
    let send = |ops: &[Op<'_>]| compound(&d.nfs, "t", ops);
    // 1 KiB: calls and replies stay inline.
    let mut c = open_f(
        send,
        v41::session(send, b"client-a", CREATE_SESSION4_FLAG_CONN_BACK_CHAN),
        Some(d.root.as_bytes()),
        1024,
    );
    let calls = c.rounds(WARM + N);
    let (warm, measured) = calls.split_at(WARM * PER_ROUND);
    let rpc = d.nfs.rpc();
    let mut last = Vec::new();
    let mut call = |a: &[u8], seen: &mut dyn FnMut(&[u8])| {
        let mut args = rpc.args().expect("a call buffer");
        args.put(a).expect("the call fits");
        let r = rpc
            .call_blocking(Proc::new(100_003, 4, 1), args)
            .expect("COMPOUND answered");
        seen(r.results());
        last.clear();
        last.extend_from_slice(r.results());
    };
    assert_eq!(run(warm, &mut call), None, "warm-up (index, statuses)");
    // The test's own thread (the RPC client's caller) is not counted.
    let (all, own) = (all_allocs(), allocs().0);
    let failed = run(measured, &mut call);
    let daemon = (all_allocs() - all) - (allocs().0 - own);
    assert_eq!(failed, None, "call (index, (status, flags, last status))");
    assert_eq!(
        daemon,
        0,
        "{} COMPOUNDs made {daemon} allocations outside the test's thread",
        measured.len()
    );
    c.check_read(&last, (WARM + N - 1) as u8);
    // READs of the four blocks through a Write chunk (RFC 8267 §5.3): the data goes as a DDP
    // item from a registered buffer of the daemon's pool.
    let whole = (4 * c.io) as u32;
    let reads: Vec<Vec<u8>> = (0..WARM + N).map(|_| c.read_n(0, whole)).collect();
    let (warm, measured) = reads.split_at(WARM);
    let mut placed = 0;
    let mut ddp = |a: &[u8], seen: &mut dyn FnMut(&[u8])| {
        let mut args = rpc.args().expect("a call buffer");
        args.put(a).expect("the call fits");
        let chunk = rpc.buffer().expect("a receive buffer");
        args.receptacle(chunk).expect("a Write chunk");
        let r = rpc
            .call_blocking(Proc::new(100_003, 4, 1), args)
            .expect("COMPOUND answered");
        seen(r.results());
        placed = r.receptacle(0).map_or(0, |b| b.len());
    };
    assert_eq!(run(warm, &mut ddp), None, "DDP warm-up (index, statuses)");
    let (all, own) = (all_allocs(), allocs().0);
    let failed = run(measured, &mut ddp);
    let daemon = (all_allocs() - all) - (allocs().0 - own);
    assert_eq!(
        failed, None,
        "DDP READ (index, (status, flags, last status))"
    );
    assert_eq!(
        placed, whole as usize,
        "the data came through the Write chunk"
    );
    assert_eq!(
        daemon,
        0,
        "{} DDP READs made {daemon} allocations outside the test's thread",
        measured.len()
    );
    if memory {
        zero_copy(&d, &mut c, &f); // the memory store's registered blocks
    }
    d.stop();
}

/// READs through a Write chunk of a block the store keeps in registered memory: the data goes
/// from the block (zero copy), a small one's reply kept by the slot with the data in it, a
/// large one's not; neither allocates on the daemon's threads.
fn zero_copy(d: &Daemon, c: &mut Calls, f: &rpcrdma_apps::nfs::types::Fh) {
    const BIG: usize = 128 << 10;
    let data: Vec<u8> = (0..BIG).map(|i| (i * 7 + 1) as u8).collect();
    d.nfs
        .write(
            f,
            0,
            &data,
            rpcrdma_apps::nfs::types::StableHow::FileSync,
            true,
        )
        .expect("v3 WRITE of a registered block");
    let ranges = [(0u64, 6_000u32), (1, BIG as u32 - 1)];
    let reads: Vec<Vec<u8>> = (0..WARM + N)
        .map(|i| {
            let (off, n) = ranges[i % 2];
            // The large READ's reply is not to be kept (the Linux client never asks).
            c.cache_this = n <= 6_000;
            c.read_n(off, n)
        })
        .collect();
    let (warm, measured) = reads.split_at(WARM);
    let rpc = d.nfs.rpc();
    let mut wrong = 0;
    let mut i = 0;
    let mut ddp = |a: &[u8], seen: &mut dyn FnMut(&[u8])| {
        let mut args = rpc.args().expect("a call buffer");
        args.put(a).expect("the call fits");
        args.receptacle(rpc.buffer().expect("a receive buffer"))
            .expect("a Write chunk");
        let r = rpc
            .call_blocking(Proc::new(100_003, 4, 1), args)
            .expect("COMPOUND answered");
        seen(r.results());
        let (off, n) = ranges[i % 2];
        let want = &data[off as usize..off as usize + n as usize];
        wrong += usize::from(r.receptacle(0) != Some(want));
        i += 1;
    };
    assert_eq!(run(warm, &mut ddp), None, "zero-copy warm-up");
    let zc = d.counter("nfs4_read_zero_copy");
    let (all, own) = (all_allocs(), allocs().0);
    let failed = run(measured, &mut ddp);
    let daemon = (all_allocs() - all) - (allocs().0 - own);
    assert_eq!(failed, None, "zero-copy READ (index, statuses)");
    assert_eq!(wrong, 0, "READs whose placed data differs");
    assert_eq!(
        d.counter("nfs4_read_zero_copy") - zc,
        N as u64,
        "every READ sent from the block"
    );
    assert_eq!(
        daemon, 0,
        "{N} zero-copy READs made {daemon} allocations outside the test's thread"
    );
}

/// One test, so that no other test's thread allocates while [`over_rdma`] counts every thread.
#[test]
fn accepts_steady_state_getattr_read_write_readdir_and_name_compounds_without_allocating() {
    in_process();
    over_rdma(Backend::Memory);
    over_rdma(Backend::Dir(scratch_dir("v41alloc")));
}
