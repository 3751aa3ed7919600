//! `rpcrdma-nfsd --nfs4` on the software provider: NFSv4.2 user extended attributes (RFC
//! 8276) through the whole server, on both backends: a minor version 2 session, SETXATTR of a
//! 60 000-octet value (a long call: RDMA_NOMSG with a Position-Zero Read chunk), GETXATTR of
//! it (its reply through a Reply chunk), LISTXATTRS and REMOVEXATTR, the values the same
//! octets, and a file written over NFSv3 carrying them.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --test nfsd_v42_xattr`. Recovery: a failure
//! names the operation and the status seen; the dir backend's test is skipped (with a
//! message) where the scratch directory's file system keeps no `user.` attributes.

mod nfsd_common;

use nfsd_common::{options, v41, Rig};
use rpcrdma_apps::nfs::daemon::Backend;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Sattr3};
use rpcrdma_apps::nfs::v4::{op, Op};
use rpcrdma_engine::xdr::{XdrReader, XdrWriter};
use rpcrdma_poller::Proc;

/// Sends COMPOUND octets; the reply's results.
fn send(rig: &Rig, bytes: &[u8]) -> Vec<u8> {
    let c = rig.nfs.rpc();
    let mut a = c.args().expect("a call buffer");
    a.put(bytes).expect("fits");
    let r = c.call_blocking(Proc::new(100_003, 4, 1), a);
    r.expect("COMPOUND answered").results().to_vec()
}

/// EXCHANGE_ID and CREATE_SESSION in minor version 2: the session id.
fn session(rig: &Rig) -> [u8; 16] {
    let call = |ops: &[Op<'_>]| v41::compound_minor(&rig.nfs, "v42", 2, ops);
    v41::session(call, b"xattr-rig", 0).0
}

/// SEQUENCE, PUTFH `fh`, then `op` (its number and encoded arguments) in minor version 2:
/// the last operation's status and result body.
fn on(rig: &Rig, sid: [u8; 16], seq: u32, fh: &Fh, opnum: u32, args: &[u8]) -> (u32, Vec<u8>) {
    let mut buf = vec![0u8; args.len() + 256];
    let mut w = XdrWriter::new(&mut buf);
    w.put_opaque(b"v42").unwrap();
    for v in [2, 3, op::SEQUENCE] {
        w.put_u32(v).unwrap();
    }
    w.put_fixed_opaque(&sid).unwrap();
    for v in [seq, 0, 0, 0, op::PUTFH] {
        w.put_u32(v).unwrap();
    }
    w.put_opaque(fh.as_bytes()).unwrap();
    w.put_u32(opnum).unwrap();
    w.put_fixed_opaque(args).unwrap();
    let n = w.finish();
    let b = send(rig, &buf[..n]);
    let mut r = XdrReader::new(&b);
    let status = r.get_u32().unwrap();
    r.get_opaque(64).unwrap();
    let count = r.get_u32().unwrap();
    assert_eq!(
        (r.get_u32().unwrap(), r.get_u32().unwrap()),
        (op::SEQUENCE, 0)
    );
    r.skip(36).unwrap();
    assert_eq!((r.get_u32().unwrap(), r.get_u32().unwrap()), (op::PUTFH, 0));
    assert_eq!(count, 3, "status {status}");
    assert_eq!(r.get_u32().unwrap(), opnum);
    assert_eq!(r.get_u32().unwrap(), status);
    (status, r.rest().to_vec())
}

/// XDR of `f` into a fresh buffer.
fn enc(f: impl FnOnce(&mut XdrWriter<'_>)) -> Vec<u8> {
    let mut buf = vec![0u8; 70_000];
    let mut w = XdrWriter::new(&mut buf);
    f(&mut w);
    let n = w.finish();
    buf.truncate(n);
    buf
}

fn xattrs(rig: &Rig) {
    let sid = session(rig);
    let how = CreateHow::Unchecked(Sattr3::default());
    let f = rig.nfs.create(&rig.root, b"x", how).expect("v3 CREATE");
    let big: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let set = enc(|w| {
        w.put_u32(0).unwrap();
        w.put_opaque(b"big").unwrap();
        w.put_opaque(&big).unwrap();
    });
    let pz = rig.counter("transport.long_calls");
    let (st, body) = on(rig, sid, 1, &f, op::SETXATTR, &set);
    assert_eq!((st, body.len()), (0, 20), "SETXATTR");
    let get = enc(|w| w.put_opaque(b"big").unwrap());
    let reply = rig.counter("transport.reply_chunk_calls");
    let (st, body) = on(rig, sid, 2, &f, op::GETXATTR, &get);
    assert_eq!(st, 0, "GETXATTR");
    let got = XdrReader::new(&body).get_opaque(70_000).unwrap().to_vec();
    assert!(got == big, "the value read back is the value set");
    assert!(
        rig.counter("transport.long_calls") > pz,
        "SETXATTR was a long call"
    );
    assert!(
        rig.counter("transport.reply_chunk_calls") > reply,
        "GETXATTR answered in a Reply chunk"
    );
    let list = enc(|w| {
        w.put_u64(0).unwrap();
        w.put_u32(4096).unwrap();
    });
    let (st, body) = on(rig, sid, 3, &f, op::LISTXATTRS, &list);
    let mut r = XdrReader::new(&body);
    let (cookie, n) = (r.get_u64().unwrap(), r.get_u32().unwrap());
    let name = r.get_opaque(255).unwrap();
    assert_eq!((st, cookie, n, name), (0, 1, 1, &b"big"[..]));
    let (st, _) = on(rig, sid, 4, &f, op::REMOVEXATTR, &get);
    assert_eq!(st, 0, "REMOVEXATTR");
    assert_eq!(on(rig, sid, 5, &f, op::GETXATTR, &get).0, 10_095, "NOXATTR");
}

#[test]
fn accepts_user_xattrs_through_long_calls_and_reply_chunks_on_the_memory_backend() {
    let mut o = options(Backend::Memory);
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    xattrs(&rig);
    rig.stop();
}

#[test]
fn accepts_user_xattrs_through_long_calls_and_reply_chunks_on_the_dir_backend() {
    // On tmpfs (Linux 6.6 and later keep user.* attributes there, of any size up to 64 KiB;
    // ext4 keeps one block's worth without its ea_inode feature).
    let dir = std::path::Path::new("/dev/shm").join(format!("v42-xattr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let value = vec![7u8; 60_000];
    // SAFETY: NUL-terminated path and name; `value` is readable for its length.
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.p".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    // SAFETY: as above.
    unsafe { libc::removexattr(c.as_ptr(), c"user.p".as_ptr()) };
    if r != 0 {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "skipped: {} keeps no user.* attribute of 60 000 octets",
            dir.display()
        );
        return;
    }
    let mut o = options(Backend::Dir(dir.clone()));
    o.nfs4 = true;
    let rig = Rig::with(o, None);
    xattrs(&rig);
    rig.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
