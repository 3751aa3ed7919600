//! NFSACL (program 100227 version 3: POSIX ACLs of NFSv3 clients) through `rpcrdma-nfsd`'s
//! RPC-over-RDMA server on the software provider, on both stores: GETACL and SETACL beside NFS
//! on the same connection, the ACL enforced on NFS READ, WRITE and ACCESS of other users, only
//! the owner allowed to set it, an ACL of 405 entries sent as a long call and returned
//! through a Reply chunk, and the program's dispatch errors.
//!
//! Normal operation: each identity is its own client connection carrying AUTH_SYS
//! ([`Rig::client_as`]). Recovery: nothing to recover; the rig is stopped at the end.

mod nfsd_common;

use std::net::Ipv4Addr;

use nfsd_common::{on_dir, on_memory, status, Rig};
use rpcrdma_apps::nfs::acl::{tag, Ace};
use rpcrdma_apps::nfs::types::{access, CreateHow, Fattr3, Fh, Nfsstat3, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v3::nfsacl::{
    decode_getacl_res, encode_getacl_args, encode_setacl_args, GETACL, PROGRAM, SETACL, VERSION,
};
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::xdr::XdrWriter;
use rpcrdma_poller::{AuthSysCred, ClientError};

/// Encodes with `f` into a fresh buffer.
fn enc(f: impl FnOnce(&mut XdrWriter<'_>)) -> Vec<u8> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut w = XdrWriter::new(&mut buf);
    f(&mut w);
    let n = w.finish();
    buf.truncate(n);
    buf
}

/// GETACL of `fh` (every mask bit): status, attributes, and each ACL's count and entries.
fn getacl(c: &NfsClient, fh: &Fh) -> (Nfsstat3, Option<Fattr3>, Vec<Ace>, Vec<Ace>) {
    let args = enc(|w| encode_getacl_args(w, fh, 0xf).expect("encode"));
    let reply = c.call_as(PROGRAM, VERSION, GETACL, &args).expect("GETACL");
    let (st, a, acls) = decode_getacl_res(reply.results()).expect("decode");
    let [(_, access), (_, default)] = acls.map(|(_, l)| l).unwrap_or_default();
    (st, a, access, default)
}

/// SETACL of `fh` with both ACLs (mask ACL | DFACL).
fn setacl(c: &NfsClient, fh: &Fh, access: &[Ace], default: &[Ace]) -> Nfsstat3 {
    let args = enc(|w| encode_setacl_args(w, fh, 0x5, access, default).expect("encode"));
    let reply = c.call_as(PROGRAM, VERSION, SETACL, &args).expect("SETACL");
    let b = reply.results();
    Nfsstat3(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn client(r: &Rig, last: u8, uid: u32, gid: u32) -> (impl Sized, NfsClient) {
    r.client_as(
        Ipv4Addr::new(10, 0, 0, last),
        Some(AuthSysCred::new(uid, gid, &[])),
    )
}

/// `user::rw-, user:2000:r--, group::r--, mask::r--, other::---` with `extra` more named users.
fn named_read(extra: u32) -> Vec<Ace> {
    let mut v = vec![Ace::new(tag::USER_OBJ, 0, 6), Ace::new(tag::USER, 2000, 4)];
    v.extend((0..extra).map(|i| Ace::new(tag::USER, 10_000 + i, 4)));
    v.extend([
        Ace::new(tag::GROUP_OBJ, 0, 4),
        Ace::new(tag::MASK, 0, 4),
        Ace::new(tag::OTHER, 0, 0),
    ]);
    v
}

fn acls(r: &Rig) {
    let how = CreateHow::Guarded(Sattr3::default());
    let f = r.nfs.create(&r.root, b"f", how).expect("create");
    r.nfs
        .write(&f, 0, b"secret", StableHow::FileSync, false)
        .expect("write");
    let own = Sattr3 {
        uid: Some(1000),
        gid: Some(100),
        mode: Some(0o640),
        ..Sattr3::default()
    };
    r.nfs.setattr(&f, &own, None).expect("chown");
    let (_e1, owner) = client(r, 11, 1000, 100);
    let (_e2, named) = client(r, 12, 2000, 400);
    let (_e3, stranger) = client(r, 13, 4000, 400);
    // Before: user 2000 is other (---).
    assert_eq!(status(named.read(&f, 0, 10, true)), Nfsstat3::ACCES);
    let (st, a, acl, def) = getacl(&stranger, &f);
    assert_eq!((st, acl.len(), def.len()), (Nfsstat3::OK, 4, 0));
    assert_eq!(a.expect("attributes").mode & 0o777, 0o640);
    // Only the owner may set it.
    assert_eq!(setacl(&named, &f, &named_read(0), &[]), Nfsstat3::PERM);
    assert_eq!(setacl(&owner, &f, &named_read(0), &[]), Nfsstat3::OK);
    assert_eq!(named.read(&f, 0, 10, true).expect("read").0, b"secret");
    assert_eq!(
        named
            .access(&f, access::READ | access::MODIFY)
            .expect("access"),
        access::READ
    );
    let w = named.write(&f, 0, b"x", StableHow::FileSync, false);
    assert_eq!(status(w), Nfsstat3::ACCES);
    assert_eq!(status(stranger.read(&f, 0, 10, true)), Nfsstat3::ACCES);
    let (_, _, acl, _) = getacl(&stranger, &f);
    assert_eq!(acl[1], Ace::new(tag::USER, 2000, 4));
    // 400 more named users: a SETACL of 4.9 KiB (a long call) and a GETACL reply as long (a
    // Reply chunk); within what ext4 keeps in its one extended attribute block.
    let big = named_read(400);
    assert_eq!(setacl(&owner, &f, &big, &[]), Nfsstat3::OK);
    let (st, _, acl, _) = getacl(&owner, &f);
    assert_eq!((st, acl.len()), (Nfsstat3::OK, 405));
    assert_eq!(acl[400], Ace::new(tag::USER, 10_398, 4));
    assert!(r.counter("chunks.reply") > 0 && r.counter("chunks.pz") > 0);
    // Removed: the mode alone again.
    assert_eq!(setacl(&owner, &f, &[], &[]), Nfsstat3::OK);
    assert_eq!(status(named.read(&f, 0, 10, true)), Nfsstat3::ACCES);
    assert_eq!(r.counter("nfsacl.GETACL"), 3);
    assert_eq!(r.counter("nfsacl.SETACL"), 4);
}

#[test]
fn accepts_acls_set_read_and_enforced_on_the_memory_store() {
    on_memory(acls);
}

#[test]
fn accepts_acls_set_read_and_enforced_on_the_dir_store() {
    on_dir("acl", |r| {
        acls(r);
        // Root's calls (the rig's AUTH_NONE acts as root) are served on the reactor, as the
        // NFSv3 calls are; other users' on workers.
        let before = r.counter("reactor.calls");
        assert_eq!(getacl(&r.nfs, &r.root).0, Nfsstat3::OK);
        assert_eq!(r.counter("reactor.calls"), before + 1);
        let (_e, user) = client(r, 14, 1000, 100);
        assert_eq!(getacl(&user, &r.root).0, Nfsstat3::OK);
        assert_eq!(r.counter("reactor.calls"), before + 1);
    });
}

#[test]
fn rejects_other_versions_and_procedures_of_nfsacl() {
    on_memory(|r| {
        let args = enc(|w| encode_getacl_args(w, &r.root, 0xf).expect("encode"));
        for vers in [2, 4] {
            assert_eq!(
                r.nfs.call_as(PROGRAM, vers, GETACL, &args).map(drop),
                Err(ClientError::Rpc(AcceptStat::ProgMismatch {
                    low: 3,
                    high: 3
                }))
            );
        }
        assert_eq!(
            r.nfs.call_as(PROGRAM, VERSION, 3, &args).map(drop),
            Err(ClientError::Rpc(AcceptStat::ProcUnavail))
        );
        assert_eq!(
            r.nfs.call_as(PROGRAM, VERSION, GETACL, &[0, 0]).map(drop),
            Err(ClientError::Rpc(AcceptStat::GarbageArgs))
        );
        assert!(r.nfs.call_as(PROGRAM, VERSION, 0, &[]).is_ok());
        assert_eq!(getacl(&r.nfs, &r.root).0, Nfsstat3::OK);
    });
}
