//! Unit tests of the NFSv4.1 server's file operations: each operation's success and its main
//! error paths (NOENT, NOTDIR, ISDIR, SYMLINK, BADNAME, STALE / BADHANDLE, NOFILEHANDLE,
//! ACCESS, ROFS, BAD_STATEID, OPENMODE, SHARE_DENIED), through the harness of `tests.rs`.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server`. Recovery: a failure
//! names the operation and the status seen.

use std::sync::Arc;

use rpcrdma_engine::xdr::XdrReader;

use super::attrs::fa;
use super::tests::{auth_sys, open_create, A, H};
use super::xdr::st;
use crate::nfs::v4::{op, Op, OpResult, Stable, WriteData};

fn putfh(fh: &[u8]) -> A {
    A::op(op::PUTFH).opaque(fh)
}

fn lookup(name: &[u8]) -> A {
    A::op(op::LOOKUP).opaque(name)
}

fn getattr(bits: &[u32]) -> A {
    let mut w = [0u32; 3];
    for b in bits {
        w[(*b / 32) as usize] |= 1 << (b % 32);
    }
    A::op(op::GETATTR).u32(3).u32(w[0]).u32(w[1]).u32(w[2])
}

fn mkdir(name: &[u8]) -> A {
    A::op(op::CREATE).u32(2).opaque(name).u32(0).u32(0)
}

/// CREATE of a symbolic link `name` to `target`.
fn symlink(name: &[u8], target: &[u8]) -> A {
    A::op(op::CREATE)
        .u32(5)
        .opaque(target)
        .opaque(name)
        .u32(0)
        .u32(0)
}

/// A client with a session, the root's handle, and a file `f` holding `hello`.
fn setup() -> (H, Vec<u8>) {
    let mut h = H::new("rw,no_root_squash");
    let root = h.root();
    let r = h.raw(&[putfh(&root), open_create(h.clientid, b"f")]);
    assert_eq!(r.status, st::OK);
    let sid: [u8; 16] = r.last[..16].try_into().unwrap();
    let r = h.raw(&[
        putfh(&root),
        lookup(b"f"),
        A::op(op::WRITE).fixed(&sid).u64(0).u32(2).opaque(b"hello"),
    ]);
    assert_eq!(r.status, st::OK);
    (h, root)
}

#[test]
fn accepts_getattr_of_what_the_linux_client_asks_at_mount() {
    let (mut h, root) = setup();
    let want = [
        fa::SUPPORTED_ATTRS,
        fa::TYPE,
        fa::CHANGE,
        fa::SIZE,
        fa::FSID,
        fa::LEASE_TIME,
        fa::FILEID,
        fa::MODE,
        fa::NUMLINKS,
        fa::OWNER,
        fa::OWNER_GROUP,
        fa::SPACE_USED,
        fa::TIME_MODIFY,
        fa::MAXREAD,
        75,
    ];
    let r = h.raw(&[putfh(&root), lookup(b"f"), getattr(&want)]);
    assert_eq!(r.status, st::OK);
    let mut x = XdrReader::new(&r.last);
    let n = x.get_u32().unwrap();
    let mask: Vec<u32> = (0..n).map(|_| x.get_u32().unwrap()).collect();
    assert_eq!(
        mask[0] & (1 << 11),
        0,
        "rdattr_error is not returned by GETATTR"
    );
    assert!(
        mask.len() == 3 && mask[2] & (1 << 11) != 0,
        "suppattr_exclcreat (75, REQUIRED in NFSv4.1) returned"
    );
    let vals = x.get_opaque(4096).unwrap();
    let mut v = XdrReader::new(vals);
    let sup_n = v.get_u32().unwrap();
    let sup: Vec<u32> = (0..sup_n).map(|_| v.get_u32().unwrap()).collect();
    assert_eq!(sup, super::attrs::SUPPORTED[..sup_n as usize].to_vec());
    assert_eq!(v.get_u32().unwrap(), 1, "type NF4REG");
    let _change = v.get_u64().unwrap();
    assert_eq!(v.get_u64().unwrap(), 5, "size");
    v.skip(16).unwrap(); // fsid
    assert_eq!(v.get_u32().unwrap(), 90, "lease_time");
    v.skip(8).unwrap(); // fileid
    v.skip(8).unwrap(); // maxread
    assert_eq!(v.get_u32().unwrap() & 0o777, 0o644, "mode");
    assert_eq!(v.get_u32().unwrap(), 1, "numlinks");
    assert_eq!(v.get_opaque(64).unwrap(), b"0", "owner as a numeric string");
    assert_eq!(v.get_opaque(64).unwrap(), b"0", "owner_group");
    v.skip(8 + 12).unwrap(); // space_used, time_modify
    let n = v.get_u32().unwrap();
    let excl: Vec<u32> = (0..n).map(|_| v.get_u32().unwrap()).collect();
    assert_eq!(excl, super::attrs::EXCLCREAT[..2], "suppattr_exclcreat");
}

#[test]
fn accepts_open_write_read_commit_close_through_the_client_codec() {
    let (mut h, root) = setup();
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: h.clientid,
            owner: b"o2",
            access: 3,
            name: "f",
        },
    ]);
    let Some(OpResult::Open(o)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("{r:?}")
    };
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Lookup("f"),
        Op::Write {
            offset: 5,
            stable: Stable::FileSync,
            data: WriteData::Inline(b" world"),
        },
    ]);
    assert_eq!(r.status, st::OK);
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Lookup("f"),
        Op::ReadStateid {
            stateid: o.stateid,
            offset: 0,
            count: 100,
        },
        Op::Commit {
            offset: 0,
            count: 0,
        },
    ]);
    let Some(OpResult::Read { eof, data, .. }) = r.find(op::READ).map(|o| o.result.clone()) else {
        panic!("{r:?}")
    };
    assert_eq!((eof, data.as_slice()), (true, &b"hello world"[..]));
    assert_eq!(r.status, st::OK);
    let r = h.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::Close(o.stateid)]);
    assert_eq!(r.status, st::OK);
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Lookup("f"),
        Op::ReadStateid {
            stateid: o.stateid,
            offset: 0,
            count: 1,
        },
    ]);
    assert_eq!(r.status, st::BAD_STATEID, "a closed stateid");
    let r = h.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::Close([0; 16])]);
    assert_eq!(r.status, st::BAD_STATEID, "CLOSE of the anonymous stateid");
}

#[test]
fn rejects_bad_stateids_and_writes_through_read_opens() {
    let (mut h, root) = setup();
    let made_up = [0, 0, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9];
    let r = h.raw(&[
        putfh(&root),
        lookup(b"f"),
        A::op(op::READ).fixed(&made_up).u64(0).u32(1),
    ]);
    assert_eq!(r.status, st::BAD_STATEID);
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: h.clientid,
            owner: b"reader",
            access: 1,
            name: "f",
        },
    ]);
    let Some(OpResult::Open(o)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("{r:?}")
    };
    let r = h.raw(&[
        putfh(&root),
        lookup(b"f"),
        A::op(op::WRITE)
            .fixed(&o.stateid)
            .u64(0)
            .u32(0)
            .opaque(b"x"),
    ]);
    assert_eq!(r.status, st::OPENMODE);
    // The stateid of `f` on another file.
    let r = h.raw(&[putfh(&root), open_create(h.clientid, b"g")]);
    assert_eq!(r.status, st::OK);
    let r = h.raw(&[
        putfh(&root),
        lookup(b"g"),
        A::op(op::READ).fixed(&o.stateid).u64(0).u32(1),
    ]);
    assert_eq!(r.status, st::BAD_STATEID);
}

#[test]
fn rejects_open_of_a_directory_and_conflicting_share_reservations() {
    let (mut h, root) = setup();
    assert_eq!(h.status(&[putfh(&root), mkdir(b"d")]), st::OK);
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: h.clientid,
            owner: b"o",
            access: 1,
            name: "d",
        },
    ]);
    assert_eq!(r.status, st::ISDIR);
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: h.clientid,
            owner: b"o",
            access: 1,
            name: "none",
        },
    ]);
    assert_eq!(r.status, st::NOENT);
    // The owner of the open made by `setup` adds a deny of writes (an upgrade of its own
    // open: no conflict with itself); another owner's write open is then refused, and so is
    // a third owner's open denying reads while reads are open.
    let cid = h.clientid;
    let deny = |owner: &[u8], d: u32| {
        A::op(op::OPEN)
            .u32(0)
            .u32(1)
            .u32(d)
            .u64(cid)
            .opaque(owner)
            .u32(0)
            .u32(0)
            .opaque(b"f")
    };
    assert_eq!(h.status(&[putfh(&root), deny(b"owner", 2)]), st::OK);
    assert_eq!(
        h.srv.state().opens.len(),
        1,
        "an upgrade, not a second open"
    );
    assert_eq!(h.status(&[putfh(&root), deny(b"o3", 1)]), st::SHARE_DENIED);
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: h.clientid,
            owner: b"o2",
            access: 2,
            name: "f",
        },
    ]);
    assert_eq!(r.status, st::SHARE_DENIED);
}

#[test]
fn rejects_lookups_that_fail() {
    let (mut h, root) = setup();
    assert_eq!(h.status(&[putfh(&root), lookup(b"missing")]), st::NOENT);
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), lookup(b"x")]),
        st::NOTDIR
    );
    assert_eq!(h.status(&[putfh(&root), lookup(b".")]), st::BADNAME);
    assert_eq!(h.status(&[putfh(&root), lookup(b"a/b")]), st::BADNAME);
    assert_eq!(h.status(&[putfh(&root), lookup(b"")]), st::INVAL);
    assert_eq!(
        h.status(&[putfh(&root), lookup(&[b'n'; 256])]),
        st::NAMETOOLONG
    );
    let link = symlink(b"l", b"f");
    assert_eq!(h.status(&[putfh(&root), link]), st::OK);
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"l"), lookup(b"x")]),
        st::SYMLINK
    );
    assert_eq!(h.status(&[lookup(b"f")]), st::NOFILEHANDLE);
    assert_eq!(h.status(&[A::op(op::GETFH)]), st::NOFILEHANDLE);
}

#[test]
fn rejects_handles_that_do_not_open() {
    let (mut h, root) = setup();
    assert_eq!(h.status(&[putfh(&[1, 2, 3])]), st::BADHANDLE);
    let mut forged = root.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(h.status(&[putfh(&forged)]), st::STALE);
    assert_eq!(h.status(&[putfh(&[0; 65])]), st::BADHANDLE);
    // A handle of a removed file.
    let r = h.raw(&[putfh(&root), lookup(b"f"), A::op(op::GETFH)]);
    let mut x = XdrReader::new(&r.last);
    let fh = x.get_opaque(128).unwrap().to_vec();
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::REMOVE).opaque(b"f")]),
        st::OK
    );
    assert_eq!(h.status(&[putfh(&fh), getattr(&[fa::SIZE])]), st::STALE);
}

#[test]
fn accepts_savefh_restorefh_lookupp_and_rejects_their_misuse() {
    let (mut h, root) = setup();
    assert_eq!(h.status(&[putfh(&root), mkdir(b"d")]), st::OK);
    let r = h.raw(&[
        putfh(&root),
        lookup(b"d"),
        A::op(op::LOOKUPP),
        A::op(op::GETFH),
    ]);
    let mut x = XdrReader::new(&r.last);
    assert_eq!(x.get_opaque(128).unwrap(), root.as_slice());
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::LOOKUPP)]),
        st::NOENT,
        "the root has no parent"
    );
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::RESTOREFH)]),
        st::RESTOREFH
    );
    let r = h.raw(&[
        putfh(&root),
        A::op(op::SAVEFH),
        lookup(b"d"),
        A::op(op::RESTOREFH),
        A::op(op::GETFH),
    ]);
    let mut x = XdrReader::new(&r.last);
    assert_eq!(x.get_opaque(128).unwrap(), root.as_slice());
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), A::op(op::LOOKUPP)]),
        st::NOTDIR
    );
}

#[test]
fn accepts_create_readdir_readlink_rename_link_remove() {
    let (mut h, root) = setup();
    assert_eq!(h.status(&[putfh(&root), mkdir(b"d")]), st::OK);
    let link = A::op(op::CREATE)
        .u32(5)
        .opaque(b"target")
        .opaque(b"l")
        .u32(0)
        .u32(0);
    assert_eq!(h.status(&[putfh(&root), link]), st::OK);
    let r = h.raw(&[putfh(&root), lookup(b"l"), A::op(op::READLINK)]);
    assert_eq!(XdrReader::new(&r.last).get_opaque(64).unwrap(), b"target");
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), A::op(op::READLINK)]),
        st::INVAL
    );
    assert_eq!(
        h.status(&[
            putfh(&root),
            A::op(op::CREATE).u32(1).opaque(b"r").u32(0).u32(0)
        ]),
        st::BADTYPE
    );
    // RENAME f -> d/g, LINK d/g as h.
    let r = h.raw(&[
        putfh(&root),
        A::op(op::SAVEFH),
        lookup(b"d"),
        A::op(op::RENAME).opaque(b"f").opaque(b"g"),
    ]);
    assert_eq!(r.status, st::OK);
    let r = h.raw(&[
        putfh(&root),
        lookup(b"d"),
        lookup(b"g"),
        A::op(op::SAVEFH),
        putfh(&root),
        A::op(op::LINK).opaque(b"h"),
    ]);
    assert_eq!(r.status, st::OK);
    assert_eq!(h.status(&[putfh(&root), lookup(b"f")]), st::NOENT);
    let names = readdir_names(&mut h, &root);
    assert_eq!(names, vec!["d".to_string(), "h".into(), "l".into()]);
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::REMOVE).opaque(b"d")]),
        66,
        "NOTEMPTY"
    );
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"d"), A::op(op::REMOVE).opaque(b"g")]),
        st::OK
    );
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::REMOVE).opaque(b"d")]),
        st::OK
    );
    assert_eq!(
        h.status(&[putfh(&root), A::op(op::REMOVE).opaque(b"d")]),
        st::NOENT
    );
    let r = h.raw(&[
        putfh(&root),
        lookup(b"h"),
        A::op(op::READDIR)
            .u64(0)
            .fixed(&[0; 8])
            .u32(100)
            .u32(1000)
            .u32(0),
    ]);
    assert_eq!(r.status, st::NOTDIR);
    let r = h.raw(&[
        putfh(&root),
        A::op(op::READDIR)
            .u64(1)
            .fixed(&[0; 8])
            .u32(100)
            .u32(1000)
            .u32(0),
    ]);
    assert_eq!(r.status, st::BAD_COOKIE);
}

/// The names READDIR lists in `dir`, sorted, asking for type and fileid.
fn readdir_names(h: &mut H, dir: &[u8]) -> Vec<String> {
    let ga = (1u32 << fa::TYPE) | (1 << fa::FILEID);
    let r = h.raw(&[
        putfh(dir),
        A::op(op::READDIR)
            .u64(0)
            .fixed(&[0; 8])
            .u32(1000)
            .u32(8000)
            .u32(1)
            .u32(ga),
    ]);
    assert_eq!(r.status, st::OK);
    let mut x = XdrReader::new(&r.last);
    x.skip(8).unwrap();
    let mut names = Vec::new();
    while x.get_u32().unwrap() == 1 {
        let cookie = x.get_u64().unwrap();
        assert!(cookie > 2, "cookies 0..=2 are reserved");
        names.push(String::from_utf8(x.get_opaque(255).unwrap().to_vec()).unwrap());
        let n = x.get_u32().unwrap();
        x.skip(4 * n as usize).unwrap();
        assert_eq!(x.get_opaque(100).unwrap().len(), 12, "type and fileid");
    }
    assert_eq!(x.get_u32().unwrap(), 1, "eof");
    names.sort();
    names
}

#[test]
fn rejects_other_users_without_permission() {
    let (mut h, root) = setup();
    // f is 0644 root's: uid 1000 may read it, not write it.
    let mut u = H::on(
        Arc::clone(&h.srv),
        Arc::clone(&h.now),
        Arc::clone(&h.store),
        b"user",
        auth_sys(1000, 1000),
    );
    let r = u.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: u.clientid,
            owner: b"u",
            access: 2,
            name: "f",
        },
    ]);
    assert_eq!(r.status, st::ACCESS);
    let r = u.raw(&[putfh(&root), lookup(b"f"), A::op(op::ACCESS).u32(0x3f)]);
    assert_eq!(r.status, st::OK);
    let mut x = XdrReader::new(&r.last);
    assert_eq!(
        (x.get_u32().unwrap(), x.get_u32().unwrap()),
        (0x3f, 0x01),
        "READ only"
    );
    assert_eq!(
        u.status(&[putfh(&root), mkdir(b"mine")]),
        st::ACCESS,
        "the root is 0755 root's"
    );
    assert_eq!(
        u.status(&[
            putfh(&root),
            lookup(b"f"),
            A::op(op::SETATTR)
                .fixed(&[0; 16])
                .u32(2)
                .u32(0)
                .u32(2)
                .opaque(&0o777u32.to_be_bytes())
        ]),
        st::PERM
    );
    let _ = &mut h;
}

#[test]
fn rejects_changes_on_a_read_only_export() {
    let (srv, now, store) =
        super::tests::server("ro,no_root_squash", super::state::Limits::default());
    let mut h = H::on(srv, now, store, b"ro", auth_sys(0, 0));
    let root = h.root();
    assert_eq!(h.status(&[putfh(&root), mkdir(b"d")]), st::ROFS);
    assert_eq!(
        h.status(&[putfh(&root), open_create(h.clientid, b"f")]),
        st::ROFS
    );
    let r = h.raw(&[putfh(&root), A::op(op::ACCESS).u32(0x3f)]);
    let mut x = XdrReader::new(&r.last);
    x.get_u32().unwrap();
    assert_eq!(
        x.get_u32().unwrap() & 0x1c,
        0,
        "no MODIFY, EXTEND or DELETE"
    );
}

#[test]
fn accepts_setattr_and_rejects_attributes_it_cannot_set() {
    let (mut h, root) = setup();
    let mode = A::op(op::SETATTR)
        .fixed(&[0; 16])
        .u32(2)
        .u32(0)
        .u32(2)
        .opaque(&0o600u32.to_be_bytes());
    let r = h.raw(&[putfh(&root), lookup(b"f"), mode]);
    assert_eq!(r.status, st::OK);
    assert_eq!(
        r.last,
        vec![0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2],
        "attrsset: mode"
    );
    let size = A::op(op::SETATTR)
        .fixed(&[0; 16])
        .u32(1)
        .u32(1 << fa::SIZE)
        .opaque(&2u64.to_be_bytes());
    assert_eq!(h.status(&[putfh(&root), lookup(b"f"), size]), st::OK);
    let r = h.call(&[Op::PutFh(&root), Op::Lookup("f"), Op::GetAttrTypeSize]);
    assert_eq!(
        r.find(op::GETATTR).map(|o| o.result.clone()),
        Some(OpResult::Attrs {
            ftype: Some(1),
            size: Some(2)
        })
    );
    let ty = A::op(op::SETATTR)
        .fixed(&[0; 16])
        .u32(1)
        .u32(1 << fa::TYPE)
        .opaque(&1u32.to_be_bytes());
    let r = h.raw(&[putfh(&root), lookup(b"f"), ty]);
    assert_eq!(
        (r.status, r.last.as_slice()),
        (st::INVAL, &[0u8, 0, 0, 0][..]),
        "SETATTR4res keeps attrsset on failure"
    );
    let owner = A::op(op::SETATTR)
        .fixed(&[0; 16])
        .u32(2)
        .u32(0)
        .u32(1 << (fa::OWNER - 32))
        .opaque(&A::default().opaque(b"bob@x").0);
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), owner]),
        10039,
        "BADOWNER"
    );
}

#[test]
fn accepts_secinfo_no_name_consuming_the_handle() {
    let (mut h, root) = setup();
    let r = h.raw(&[putfh(&root), A::op(op::SECINFO_NO_NAME).u32(0)]);
    assert_eq!(r.status, st::OK);
    assert_eq!(r.last, vec![0, 0, 0, 1, 0, 0, 0, 1], "AUTH_SYS");
    assert_eq!(
        h.status(&[
            putfh(&root),
            A::op(op::SECINFO_NO_NAME).u32(0),
            A::op(op::GETFH)
        ]),
        st::NOFILEHANDLE
    );
}

#[test]
fn accepts_open_downgrade_to_a_subset_only() {
    let (mut h, root) = setup();
    let r = h.call(&[
        Op::PutFh(&root),
        Op::Open {
            clientid: h.clientid,
            owner: b"owner",
            access: 3,
            name: "f",
        },
    ]);
    let Some(OpResult::Open(o)) = r.find(op::OPEN).map(|o| o.result.clone()) else {
        panic!("{r:?}")
    };
    let down = |sid: &[u8; 16], access: u32| {
        A::op(op::OPEN_DOWNGRADE)
            .fixed(sid)
            .u32(0)
            .u32(access)
            .u32(0)
    };
    let r = h.raw(&[putfh(&root), lookup(b"f"), down(&o.stateid, 1)]);
    assert_eq!(r.status, st::OK);
    let new: [u8; 16] = r.last[..16].try_into().unwrap();
    assert_eq!(&new[4..], &o.stateid[4..]);
    assert_eq!(
        u32::from_be_bytes(new[..4].try_into().unwrap()),
        u32::from_be_bytes(o.stateid[..4].try_into().unwrap()) + 1
    );
    let w = A::op(op::WRITE).fixed(&new).u64(0).u32(0).opaque(b"x");
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), w]),
        st::OPENMODE,
        "now read-only"
    );
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), down(&new, 3)]),
        st::INVAL,
        "not a subset"
    );
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), down(&o.stateid, 1)]),
        10024,
        "OLD_STATEID"
    );
}

/// The `time_access_set` and `time_modify_set` bits of an attribute mask's second word.
const TIMES: u32 = (1 << (fa::TIME_ACCESS_SET - 32)) | (1 << (fa::TIME_MODIFY_SET - 32));

/// SETATTR (anonymous stateid) of the two settable times, `vals` their `settime4` values.
fn set_times(vals: A) -> A {
    A::op(op::SETATTR)
        .fixed(&[0; 16])
        .u32(2)
        .u32(0)
        .u32(TIMES)
        .opaque(&vals.0)
}

/// The Linux client leaves out of its SETATTR every attribute `supported_attrs` does not list
/// (utimensat(2) on the mount did nothing while `time_access_set` and `time_modify_set` were
/// missing there): both are listed, SETATTR of them sets the times, GETATTR never returns them.
#[test]
fn accepts_setattr_of_the_times_that_supported_attrs_lists() {
    let (mut h, root) = setup();
    let r = h.raw(&[putfh(&root), getattr(&[fa::SUPPORTED_ATTRS])]);
    assert_eq!(r.status, st::OK);
    let mut x = XdrReader::new(&r.last);
    let n = x.get_u32().unwrap();
    x.skip(4 * n as usize).unwrap();
    let mut v = XdrReader::new(x.get_opaque(4096).unwrap());
    let sup: Vec<u32> = (0..v.get_u32().unwrap())
        .map(|_| v.get_u32().unwrap())
        .collect();
    assert_eq!(
        sup.get(1).copied().unwrap_or(0) & TIMES,
        TIMES,
        "supported_attrs lists time_access_set and time_modify_set"
    );
    let vals = A::default()
        .u32(1) // SET_TO_CLIENT_TIME4
        .u64(1_900_000_000)
        .u32(0)
        .u32(1)
        .u64(100_000_000)
        .u32(100_000_000);
    let r = h.raw(&[putfh(&root), lookup(b"f"), set_times(vals)]);
    assert_eq!(r.status, st::OK);
    assert_eq!(
        r.last,
        [&[0, 0, 0, 2, 0, 0, 0, 0][..], &TIMES.to_be_bytes()[..]].concat(),
        "attrsset: both times"
    );
    let r = h.raw(&[
        putfh(&root),
        lookup(b"f"),
        getattr(&[fa::TIME_ACCESS, fa::TIME_MODIFY]),
    ]);
    assert_eq!(r.status, st::OK);
    let mut x = XdrReader::new(&r.last);
    let n = x.get_u32().unwrap();
    x.skip(4 * n as usize).unwrap();
    let mut v = XdrReader::new(x.get_opaque(4096).unwrap());
    let mut t = || (v.get_u64().unwrap(), v.get_u32().unwrap());
    assert_eq!(t(), (1_900_000_000, 0), "time_access");
    assert_eq!(t(), (100_000_000, 100_000_000), "time_modify");
    assert_eq!(
        h.status(&[putfh(&root), getattr(&[fa::TIME_MODIFY_SET])]),
        st::INVAL,
        "GETATTR of a write-only attribute"
    );
}

/// `nfstime4` has signed 64-bit seconds: times past 2106 and before 1970 are set and read back
/// (pjdfstest's `utimensat::y2038` sets 2^31 and 2^32 s), and nanoseconds of 10^9 or more
/// are NFS4ERR_INVAL (RFC 8881 §3.3.1).
#[test]
fn accepts_times_past_2106_and_before_1970_and_rejects_bad_nanoseconds() {
    let (mut h, root) = setup();
    let set = |at: i64, mt: i64, ns: u32| {
        let client = |t: i64| A::default().u32(1).u64(t as u64).u32(ns);
        set_times(A(client(at).0.into_iter().chain(client(mt).0).collect()))
    };
    for (at, mt) in [(1i64 << 31, 1i64 << 32), (-1, -86_400)] {
        let r = h.raw(&[putfh(&root), lookup(b"f"), set(at, mt, 5)]);
        assert_eq!(r.status, st::OK, "SETATTR of {at} and {mt}");
        let r = h.raw(&[
            putfh(&root),
            lookup(b"f"),
            getattr(&[fa::TIME_ACCESS, fa::TIME_MODIFY]),
        ]);
        let mut x = XdrReader::new(&r.last);
        let n = x.get_u32().unwrap();
        x.skip(4 * n as usize).unwrap();
        let mut v = XdrReader::new(x.get_opaque(4096).unwrap());
        let mut t = || (v.get_u64().unwrap() as i64, v.get_u32().unwrap());
        assert_eq!((t(), t()), ((at, 5), (mt, 5)), "read back");
    }
    assert_eq!(
        h.status(&[putfh(&root), lookup(b"f"), set(7, 7, 1_000_000_000)]),
        st::INVAL
    );
}

/// utimensat(2) with UTIME_NOW by a user who may write the file but does not own it: the
/// Linux client sends SET_TO_SERVER_TIME4 for both times, which POSIX admits; times of the
/// client's choosing stay the owner's (NFS4ERR_PERM).
#[test]
fn accepts_server_times_from_a_writer_and_rejects_client_times_from_a_non_owner() {
    let (mut h, root) = setup();
    let chmod = A::op(op::SETATTR)
        .fixed(&[0; 16])
        .u32(2)
        .u32(0)
        .u32(2)
        .opaque(&0o666u32.to_be_bytes());
    assert_eq!(h.status(&[putfh(&root), lookup(b"f"), chmod]), st::OK);
    let mut u = H::on(
        Arc::clone(&h.srv),
        Arc::clone(&h.now),
        Arc::clone(&h.store),
        b"user",
        auth_sys(1000, 1000),
    );
    let server = A::default().u32(0).u32(0); // SET_TO_SERVER_TIME4, twice
    assert_eq!(
        u.status(&[putfh(&root), lookup(b"f"), set_times(server)]),
        st::OK
    );
    let client = A::default().u32(1).u64(7).u32(0).u32(1).u64(7).u32(0);
    assert_eq!(
        u.status(&[putfh(&root), lookup(b"f"), set_times(client)]),
        st::PERM
    );
}

/// READ, WRITE and LOCKT, which need a regular file, answer for another type the error
/// RFC 8881 names for it (§18.22.3 READ, §18.32.3 WRITE: a directory NFS4ERR_ISDIR, a
/// symbolic link NFS4ERR_SYMLINK, anything else NFS4ERR_WRONG_TYPE), as OPEN does.
#[test]
fn rejects_io_and_locks_on_what_is_not_a_regular_file_by_its_type() {
    let (mut h, root) = setup();
    let link = symlink(b"l", b"f");
    let fifo = A::op(op::CREATE).u32(7).opaque(b"p").u32(0).u32(0);
    for make in [mkdir(b"d"), link, fifo] {
        assert_eq!(h.status(&[putfh(&root), make]), st::OK);
    }
    let anon = [0u8; 16];
    let read = || A::op(op::READ).fixed(&anon).u64(0).u32(10);
    let write = || A::op(op::WRITE).fixed(&anon).u64(0).u32(0).opaque(b"x");
    let lockt = |c| A::op(op::LOCKT).u32(1).u64(0).u64(1).u64(c).opaque(b"o");
    let c = h.clientid;
    for (name, want) in [
        (&b"d"[..], st::ISDIR),
        (b"l", st::SYMLINK),
        (b"p", st::WRONG_TYPE),
    ] {
        for (what, op) in [("READ", read()), ("WRITE", write()), ("LOCKT", lockt(c))] {
            let got = h.status(&[putfh(&root), lookup(name), op]);
            assert_eq!(got, want, "{what} of {:?}", String::from_utf8_lossy(name));
        }
    }
    // A regular file still reads.
    assert_eq!(h.status(&[putfh(&root), lookup(b"f"), read()]), st::OK);
}

/// READLINK of what is not a symbolic link is NFS4ERR_INVAL, a directory included (Linux
/// nfsd's `nfsd4_encode_readlink` turns the directory's NFS4ERR_ISDIR into it; NFSv3's
/// READLINK of a directory is NFS3ERR_ISDIR, as Linux nfsd's).
#[test]
fn rejects_readlink_of_what_is_not_a_link_as_invalid() {
    let (mut h, root) = setup();
    assert_eq!(h.status(&[putfh(&root), mkdir(b"d")]), st::OK);
    for name in [&b"d"[..], b"f"] {
        let r = h.status(&[putfh(&root), lookup(name), A::op(op::READLINK)]);
        assert_eq!(r, st::INVAL, "{:?}", String::from_utf8_lossy(name));
    }
}
