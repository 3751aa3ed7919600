//! `rpcrdma-nfsd` with `--nfs4` on the software provider: NFSv4.1 COMPOUNDs (program 100003
//! version 4) over RPC-over-RDMA on the NFSv3 port, from our own client codec; the session,
//! the mount walk by export path through the pseudo root, a slot retry answered from the
//! slot, files written over NFSv3 read over NFSv4.1 (READ data through a Write chunk), WRITE
//! data through a Read chunk read back over NFSv3, and version 4 refused when the option
//! is off.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --test nfsd_v41`. Recovery: a failure names
//! the operation and the reply seen.

mod nfsd_common;
/// Restart with reclaim in the grace period, and reconnection.
#[path = "nfsd_v41_parts/recovery.rs"]
mod recovery;
/// READ data through the Write chunk from the memory backend's registered blocks.
#[path = "nfsd_v41_parts/zero_copy.rs"]
mod zero_copy;

use nfsd_common::{options, v41::channel_attrs_mib, Rig};
use rpcrdma_apps::nfs::daemon::Backend;
use rpcrdma_apps::nfs::types::{CreateHow, Sattr3, StableHow};
use rpcrdma_apps::nfs::v4::{
    decode_compound, encode_compound_minor, op, CompoundReply, Op, OpResult, ReadPlacement, Stable,
    WriteData, NFS4_OK,
};
use rpcrdma_poller::Proc;

fn send(rig: &Rig, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let c = rig.nfs.rpc();
    let mut a = c.args().ok_or("no call buffer")?;
    a.put(bytes).map_err(|e| format!("{e:?}"))?;
    let r = c
        .call_blocking(Proc::new(100_003, 4, 1), a)
        .map_err(|e| format!("{e:?}"))?;
    Ok(r.results().to_vec())
}

fn call(rig: &Rig, ops: &[Op<'_>]) -> CompoundReply {
    let e = encode_compound_minor("v41", 1, ops);
    let b = send(rig, &e.bytes).expect("COMPOUND answered");
    decode_compound(&b, ops, ReadPlacement::Inline).expect("reply decodes")
}

/// EXCHANGE_ID and CREATE_SESSION: the session id and client id.
fn session(rig: &Rig) -> ([u8; 16], u64) {
    let r = call(
        rig,
        &[Op::ExchangeId {
            verifier: [3; 8],
            owner: b"rig",
            flags: 0,
        }],
    );
    let Some(OpResult::ExchangeId(x)) = r.find(op::EXCHANGE_ID).map(|o| o.result.clone()) else {
        panic!("EXCHANGE_ID: {r:?}");
    };
    let cs = Op::CreateSession {
        clientid: x.clientid,
        sequence: x.sequence,
        flags: 0,
        fore: channel_attrs_mib(),
        back: channel_attrs_mib(),
        cb_program: 0x4000_0000,
    };
    let r = call(rig, &[cs]);
    let Some(OpResult::CreateSession(s)) = r.find(op::CREATE_SESSION).map(|o| o.result.clone())
    else {
        panic!("CREATE_SESSION: {r:?}");
    };
    assert_eq!(s.fore.max_requests, 8);
    (s.session, x.clientid)
}

fn seq(session: [u8; 16], sequence: u32) -> Op<'static> {
    Op::Sequence {
        session,
        sequence,
        slot: 0,
        highest_slot: 0,
        cache_this: true,
    }
}

/// [`seq`] without `sa_cachethis`, as clients send READs: a READ whose reply asked to be kept
/// would be larger than a slot keeps (`ca_maxresponsesize_cached`) is shortened to it.
fn seq_uncached(session: [u8; 16], sequence: u32) -> Op<'static> {
    Op::Sequence {
        session,
        sequence,
        slot: 0,
        highest_slot: 0,
        cache_this: false,
    }
}

#[test]
fn accepts_nfs41_on_the_nfs3_port_over_the_same_store() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    // A file written over NFSv3.
    let fh = rig
        .nfs
        .create(&rig.root, b"both", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    rig.nfs
        .write(&fh, 0, b"seen by both", StableHow::FileSync, false)
        .expect("v3 WRITE");
    let (sid, clientid) = session(&rig);
    // The mount walk by export path, as the Linux client does it: the pseudo root is a
    // directory, "export" in it is the export's root: the handle MOUNT gave NFSv3.
    let walk = [
        seq(sid, 1),
        Op::PutRootFh,
        Op::GetAttrTypeSize,
        Op::Lookup("export"),
        Op::GetFh,
    ];
    let r = call(&rig, &walk);
    assert_eq!(r.status, NFS4_OK, "{r:?}");
    let Some(OpResult::Attrs { ftype: Some(2), .. }) =
        r.find(op::GETATTR).map(|o| o.result.clone())
    else {
        panic!("the pseudo root is a directory: {r:?}");
    };
    let Some(OpResult::Fh(root)) = r.find(op::GETFH).map(|o| o.result.clone()) else {
        panic!("{r:?}");
    };
    assert_eq!(root, rig.root.as_bytes());
    let open = Op::Open {
        clientid,
        owner: b"o",
        access: 1,
        name: "both",
    };
    let ops = [seq(sid, 2), Op::PutFh(&root), open];
    let r = call(&rig, &ops);
    let Some(OpResult::Open(st)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("OPEN: {r:?}");
    };
    let read = Op::ReadStateid {
        stateid: st.stateid,
        offset: 0,
        count: 4096,
    };
    let r = call(
        &rig,
        &[seq(sid, 3), Op::PutFh(&root), Op::Lookup("both"), read],
    );
    let Some(OpResult::Read { data, eof, .. }) = r.find(op::READ).map(|o| o.result.clone()) else {
        panic!("READ: {r:?}");
    };
    assert_eq!((data.as_slice(), eof), (&b"seen by both"[..], true));
    // A retry on the slot: the same octets, and OPEN ran once (one open state).
    let e = encode_compound_minor("v41", 1, &ops);
    let b = send(&rig, &e.bytes).expect("answered");
    let r = decode_compound(&b, &ops, ReadPlacement::Inline).expect("decodes");
    assert_eq!(
        r.status, 10063,
        "seqid 2 is no longer the slot's: SEQ_MISORDERED"
    );
    let nfs4 = rig.daemon.nfs4().expect("NFSv4.1 served");
    assert_eq!(nfs4.state().opens.len(), 1);
    assert_eq!(rig.counter("nfs4_sessions"), 1);
    let e = encode_compound_minor("v41", 1, &[seq(sid, 4), Op::PutRootFh]);
    let first = send(&rig, &e.bytes).expect("answered");
    let again = send(&rig, &e.bytes).expect("answered");
    assert_eq!(first, again);
    assert_eq!(rig.counter("nfs4_slot_replays"), 1);
    rig.stop();
}

#[test]
fn accepts_read_data_through_the_write_chunk() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let fh = rig
        .nfs
        .create(&rig.root, b"big", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    rig.nfs
        .write(&fh, 0, &data, StableHow::FileSync, true)
        .expect("v3 WRITE");
    let (sid, _) = session(&rig);
    let root = rig.root.as_bytes().to_vec();
    let ops = [
        seq_uncached(sid, 1),
        Op::PutFh(&root),
        Op::Lookup("big"),
        Op::Read {
            offset: 0,
            count: 20_000,
        },
        Op::GetAttrTypeSize,
    ];
    let e = encode_compound_minor("v41", 1, &ops);
    let c = rig.nfs.rpc();
    let mut a = c.args().expect("call buffer");
    a.put(&e.bytes).expect("arguments fit");
    a.receptacle(c.buffer().expect("receive buffer"))
        .expect("Write chunk");
    let r = c
        .call_blocking(Proc::new(100_003, 4, 1), a)
        .expect("COMPOUND answered");
    let placed = r
        .receptacle(0)
        .expect("the data came through the Write chunk");
    assert_eq!(placed, data.as_slice());
    let d = decode_compound(r.results(), &ops, ReadPlacement::FirstDirect).expect("decodes");
    assert_eq!(d.status, NFS4_OK, "{d:?}");
    let Some(OpResult::Read {
        len,
        eof,
        data: inline,
    }) = d.find(op::READ).map(|o| o.result.clone())
    else {
        panic!("{d:?}");
    };
    assert_eq!((len, eof, inline.len()), (20_000, true, 0));
    // The operation after READ is still in the reply.
    assert_eq!(
        d.find(op::GETATTR).map(|o| o.result.clone()),
        Some(OpResult::Attrs {
            ftype: Some(1),
            size: Some(20_000)
        })
    );
    rig.stop();
}

/// WRITE data as a DDP item (RFC 8267 §4.2: WRITE data is DDP-eligible, so it travels in a
/// Read chunk the server pulls), then COMMIT, and the file read back over NFSv3.
#[test]
fn accepts_write_data_through_a_read_chunk() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    let data: Vec<u8> = (0..12_000u32).map(|i| (i * 13 + 5) as u8).collect();
    let fh = rig
        .nfs
        .create(&rig.root, b"w", CreateHow::Unchecked(Sattr3::default()))
        .expect("v3 CREATE");
    let (sid, _) = session(&rig);
    let root = rig.root.as_bytes().to_vec();
    let ops = [
        seq(sid, 1),
        Op::PutFh(&root),
        Op::Lookup("w"),
        Op::Write {
            offset: 0,
            stable: Stable::Unstable,
            data: WriteData::Ddp(data.len() as u32),
        },
        Op::Commit {
            offset: 0,
            count: 0,
        },
        Op::GetAttrTypeSize,
    ];
    let e = encode_compound_minor("v41", 1, &ops);
    let at = e.ddp_at.expect("the WRITE data's place");
    let c = rig.nfs.rpc();
    let mut a = c.args().expect("call buffer");
    a.put(&e.bytes[..at]).expect("arguments fit");
    let mut item = c.buffer().expect("a registered buffer");
    item[..data.len()].copy_from_slice(&data);
    a.ddp(item, data.len()).expect("Read chunk");
    a.put(&e.bytes[at..]).expect("arguments fit");
    let r = c
        .call_blocking(Proc::new(100_003, 4, 1), a)
        .expect("COMPOUND answered");
    let d = decode_compound(r.results(), &ops, ReadPlacement::Inline).expect("decodes");
    assert_eq!(d.status, NFS4_OK, "{d:?}");
    let Some(OpResult::Write { count, .. }) = d.find(op::WRITE).map(|o| o.result.clone()) else {
        panic!("{d:?}");
    };
    assert_eq!(count as usize, data.len());
    assert_eq!(
        d.find(op::GETATTR).map(|o| o.result.clone()),
        Some(OpResult::Attrs {
            ftype: Some(1),
            size: Some(data.len() as u64)
        })
    );
    let back = rig
        .nfs
        .read(&fh, 0, data.len() as u32, false)
        .expect("v3 READ");
    assert_eq!(back.0, data);
    rig.stop();
}

#[test]
fn accepts_the_pseudo_root_listing_only_the_export() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    let (sid, _) = session(&rig);
    let list = Op::ReadDir {
        cookie: 0,
        verifier: [0; 8],
        dircount: 4096,
        maxcount: 8192,
    };
    let r = call(&rig, &[seq(sid, 1), Op::PutRootFh, list]);
    let Some(OpResult::ReadDir { entries, eof, .. }) =
        r.find(op::READDIR).map(|o| o.result.clone())
    else {
        panic!("READDIR: {r:?}");
    };
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!((names, eof), (vec!["export"], true));
    let r = call(&rig, &[seq(sid, 2), Op::PutRootFh, Op::Lookup("srv")]);
    assert_eq!(r.status, 2, "NFS4ERR_NOENT: {r:?}");
    rig.stop();
}

#[test]
fn rejects_version_4_when_the_option_is_off() {
    let rig = Rig::memory();
    let e = encode_compound_minor("v41", 1, &[Op::PutRootFh]);
    assert!(send(&rig, &e.bytes).is_err(), "PROG_MISMATCH");
    assert!(rig.daemon.nfs4().is_none());
    rig.stop();
}
