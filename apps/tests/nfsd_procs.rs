//! Every NFSv3 procedure (RFC 1813 section 3.3) through `rpcrdma-nfsd` on the software
//! provider, with our own NFSv3 client over RPC-over-RDMA, on both backends: each scenario is a
//! function of a [`Rig`] run by one test per backend.
//!
//! Normal operation: each test builds its own small tree under the export root and checks
//! results, attributes and weak cache consistency data against what RFC 1813 says. Recovery:
//! nothing to recover; a failed assertion leaves the rig running until the process exits.

mod nfsd_common;

use nfsd_common::{on_dir, on_memory, status, Rig};
use rpcrdma_apps::nfs::types::{
    access, CreateHow, Ftype3, Nfsstat3, Sattr3, SetTime, StableHow, Time3,
};

fn sattr_mode(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::default()
    }
}

fn new_file(r: &Rig, name: &[u8], data: &[u8]) -> rpcrdma_apps::nfs::types::Fh {
    let f = r
        .nfs
        .create(&r.root, name, CreateHow::Guarded(Sattr3::default()))
        .expect("create");
    if !data.is_empty() {
        r.nfs
            .write(&f, 0, data, StableHow::FileSync, false)
            .expect("write");
    }
    f
}

// ---------------------------------------------------------------------------------------------
// NULL, GETATTR, FSSTAT, FSINFO, PATHCONF

fn null_getattr_and_fs_info(r: &Rig) {
    r.nfs.null().expect("NULL");
    let a = r.nfs.getattr(&r.root).expect("GETATTR");
    assert_eq!(a.ftype, Ftype3::Dir);
    assert!(a.nlink >= 2, "{a:?}");
    let info = r.nfs.fsinfo(&r.root).expect("FSINFO");
    // The rig configures max_io = 256 KiB (and the DDP buffers are that size).
    assert_eq!(info.rtmax, 256 * 1024, "{info:?}");
    assert_eq!(info.wtmax, 256 * 1024, "{info:?}");
    assert!(info.rtpref <= info.rtmax && info.wtpref <= info.wtmax);
    assert!(info.maxfilesize > 1 << 40);
    let st = r.nfs.fsstat(&r.root).expect("FSSTAT");
    assert!(
        st.tbytes > 0 && st.fbytes <= st.tbytes && st.abytes <= st.fbytes,
        "{st:?}"
    );
    let pc = r.nfs.pathconf(&r.root).expect("PATHCONF");
    assert_eq!(pc.name_max, 255);
    assert!(pc.no_trunc && pc.case_preserving && !pc.case_insensitive);
}

#[test]
fn accepts_null_getattr_fsstat_fsinfo_pathconf_memory() {
    on_memory(|r| {
        null_getattr_and_fs_info(r);
        // The memory store's size is its configured capacity (256 MiB in the rig).
        let st = r.nfs.fsstat(&r.root).unwrap();
        assert_eq!(st.tbytes, 256 << 20);
    });
}

#[test]
fn accepts_null_getattr_fsstat_fsinfo_pathconf_dir() {
    on_dir("fsinfo", null_getattr_and_fs_info);
}

// ---------------------------------------------------------------------------------------------
// SETATTR

fn setattr_mode_size_times_guard(r: &Rig) {
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8 + 1).collect();
    let f = new_file(r, b"sa", &data);
    let w = r.nfs.setattr(&f, &sattr_mode(0o600), None).expect("mode");
    assert_eq!(w.after.expect("post-op attributes").mode & 0o7777, 0o600);
    assert!(w.before.is_some(), "pre-op attributes");
    assert_eq!(r.nfs.getattr(&f).unwrap().mode & 0o7777, 0o600);
    // Truncate, then extend: the extension reads as zeros.
    let trunc = Sattr3 {
        size: Some(10),
        ..Sattr3::default()
    };
    let w = r.nfs.setattr(&f, &trunc, None).expect("truncate");
    assert_eq!(w.before.unwrap().size, 1000);
    assert_eq!(w.after.unwrap().size, 10);
    let (back, eof) = r.nfs.read(&f, 0, 4096, false).unwrap();
    assert!(eof);
    assert_eq!(back, &data[..10]);
    let extend = Sattr3 {
        size: Some(5000),
        ..Sattr3::default()
    };
    r.nfs.setattr(&f, &extend, None).expect("extend");
    let (back, _) = r.nfs.read(&f, 0, 5000, true).unwrap();
    assert_eq!(back.len(), 5000);
    assert_eq!(&back[..10], &data[..10]);
    assert!(back[10..].iter().all(|&b| b == 0));
    // Client times, then server time.
    let (at, mt) = (
        Time3 {
            seconds: 1_000_000,
            nseconds: 5,
        },
        Time3 {
            seconds: 2_000_000,
            nseconds: 7,
        },
    );
    let times = Sattr3 {
        atime: SetTime::ClientTime(at),
        mtime: SetTime::ClientTime(mt),
        ..Sattr3::default()
    };
    r.nfs.setattr(&f, &times, None).expect("times");
    let a = r.nfs.getattr(&f).unwrap();
    assert_eq!((a.atime, a.mtime), (at, mt));
    let now = Time3::now().seconds;
    let server = Sattr3 {
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    };
    r.nfs.setattr(&f, &server, None).expect("server time");
    let a = r.nfs.getattr(&f).unwrap();
    assert!(a.mtime.seconds.abs_diff(now) <= 5, "{a:?}");
    assert_eq!(a.atime, at, "atime untouched");
    // Guard: another ctime is NOT_SYNC and changes nothing; the current ctime passes.
    let wrong = Time3 {
        seconds: 1,
        nseconds: 1,
    };
    let s = status(r.nfs.setattr(&f, &sattr_mode(0o644), Some(wrong)));
    assert_eq!(s, Nfsstat3::NOT_SYNC);
    assert_eq!(r.nfs.getattr(&f).unwrap().mode & 0o7777, 0o600);
    let ctime = r.nfs.getattr(&f).unwrap().ctime;
    r.nfs
        .setattr(&f, &sattr_mode(0o644), Some(ctime))
        .expect("guard OK");
    assert_eq!(r.nfs.getattr(&f).unwrap().mode & 0o7777, 0o644);
}

#[test]
fn accepts_setattr_mode_size_times_and_guard_memory() {
    on_memory(setattr_mode_size_times_guard);
}

#[test]
fn accepts_setattr_mode_size_times_and_guard_dir() {
    on_dir("setattr", setattr_mode_size_times_guard);
}

// ---------------------------------------------------------------------------------------------
// LOOKUP

fn lookup_dot_and_dotdot(r: &Rig) {
    let d = r.nfs.mkdir(&r.root, b"ld", Sattr3::default()).unwrap();
    let sub = r.nfs.mkdir(&d, b"sub", Sattr3::default()).unwrap();
    let f = r
        .nfs
        .create(&d, b"f", CreateHow::Unchecked(Sattr3::default()))
        .unwrap();
    assert_eq!(r.nfs.lookup(&d, b".").unwrap(), d);
    assert_eq!(r.nfs.lookup(&d, b"..").unwrap(), r.root);
    assert_eq!(r.nfs.lookup(&sub, b"..").unwrap(), d);
    // The export root's parent is the root: no walking out of the export.
    assert_eq!(r.nfs.lookup(&r.root, b"..").unwrap(), r.root);
    assert_eq!(r.nfs.lookup(&r.root, b".").unwrap(), r.root);
    let (fh, obj, dir) = r.nfs.lookup_attr(&d, b"f").unwrap();
    assert_eq!(fh, f);
    let fa = r.nfs.getattr(&f).unwrap();
    assert_eq!(obj.expect("object attributes").fileid, fa.fileid);
    assert_eq!(
        dir.expect("dir attributes").fileid,
        r.nfs.getattr(&d).unwrap().fileid
    );
    assert_eq!(status(r.nfs.lookup(&d, b"nope")), Nfsstat3::NOENT);
}

#[test]
fn accepts_lookup_including_dot_and_dotdot_memory() {
    on_memory(lookup_dot_and_dotdot);
}

#[test]
fn accepts_lookup_including_dot_and_dotdot_dir() {
    on_dir("lookup", lookup_dot_and_dotdot);
}

// ---------------------------------------------------------------------------------------------
// ACCESS: our client calls with AUTH_NONE, which the server treats as nobody (65534).

const ALL: u32 = access::READ
    | access::LOOKUP
    | access::MODIFY
    | access::EXTEND
    | access::DELETE
    | access::EXECUTE;
const RWX_FILE: u32 = access::READ | access::MODIFY | access::EXTEND | access::EXECUTE;

fn owner(uid: u32, mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        uid: Some(uid),
        gid: Some(uid),
        ..Sattr3::default()
    }
}

/// ACCESS as root (our client's AUTH_NONE identity here): read and write on anything,
/// execute only on a file with some execute bit, everything on a directory (Linux
/// `generic_permission`); only the bits asked for come back. What other identities get is
/// checked against every procedure in the stores' permission matrix.
fn access_as_root(r: &Rig) {
    let f = new_file(r, b"acc", b"x");
    let nobody = 65534;
    let rw = access::READ | access::MODIFY | access::EXTEND;
    for (uid, mode, want) in [
        (nobody, 0o640, rw),
        (nobody, 0o750, RWX_FILE),
        (nobody, 0o000, rw),
        (nobody, 0o001, RWX_FILE),
        (0, 0o604, rw),
        (0, 0o777, RWX_FILE),
    ] {
        r.nfs.setattr(&f, &owner(uid, mode), None).unwrap();
        assert_eq!(r.nfs.getattr(&f).unwrap().uid, uid);
        assert_eq!(r.nfs.access(&f, ALL).unwrap(), want, "{uid} {mode:o}");
    }
    assert_eq!(r.nfs.access(&f, access::READ).unwrap(), access::READ);
    assert_eq!(r.nfs.access(&f, 0).unwrap(), 0);
    let d = r.nfs.mkdir(&r.root, b"accd", Sattr3::default()).unwrap();
    for mode in [0o700, 0o000] {
        r.nfs.setattr(&d, &owner(nobody, mode), None).unwrap();
        assert_eq!(
            r.nfs.access(&d, ALL).unwrap(),
            access::READ | access::LOOKUP | access::MODIFY | access::EXTEND | access::DELETE
        );
    }
}

/// ACCESS over the wire for an AUTH_SYS user (uid 1000, gid 100, supplementary 200): what
/// its class of the mode bits grants, nothing more.
fn access_as_a_user(r: &Rig) {
    let (_ep, u) = r.client_as(
        std::net::Ipv4Addr::new(10, 0, 0, 3),
        Some(rpcrdma_poller::AuthSysCred::new(1000, 100, &[200])),
    );
    let f = new_file(r, b"uacc", b"x");
    let rw = access::READ | access::MODIFY | access::EXTEND;
    for (uid, gid, mode, want) in [
        (1000, 0, 0o640, rw),
        (1000, 0, 0o440, access::READ),
        (2000, 200, 0o640, access::READ),
        (2000, 100, 0o460, rw),
        (2000, 300, 0o640, 0),
        (2000, 300, 0o647, RWX_FILE),
    ] {
        let set = Sattr3 {
            gid: Some(gid),
            ..owner(uid, mode)
        };
        r.nfs.setattr(&f, &set, None).unwrap();
        assert_eq!(u.access(&f, ALL).unwrap(), want, "{uid}:{gid} {mode:o}");
    }
    // The root directory is root's 0755: the user may list and search it, not change it.
    assert_eq!(
        u.access(&r.root, ALL).unwrap(),
        access::READ | access::LOOKUP
    );
}

#[test]
fn accepts_access_as_an_auth_sys_user_memory() {
    on_memory(access_as_a_user);
}

#[test]
fn accepts_access_as_an_auth_sys_user_dir() {
    on_dir("uaccess", access_as_a_user);
}

#[test]
fn accepts_access_for_a_file_and_a_dir_as_root_memory() {
    on_memory(access_as_root);
}

#[test]
fn accepts_access_for_a_file_and_a_dir_as_root_dir() {
    on_dir("access", access_as_root);
}

// ---------------------------------------------------------------------------------------------
// WRITE and COMMIT

fn write_stability_and_commit(r: &Rig) {
    let f = new_file(r, b"w", b"");
    let mut model = vec![0u8; 0];
    let mut verf = None;
    let hows = [
        StableHow::Unstable,
        StableHow::DataSync,
        StableHow::FileSync,
    ];
    // Odd lengths at unaligned offsets, alternately inline and by DDP.
    let pieces: [(u64, usize); 8] = [
        (0, 1),
        (1, 3),
        (7, 5),
        (13, 4097),
        (5001, 3),
        (4999, 9999),
        (70_001, 65_537),
        (2, 1),
    ];
    for (i, &(off, len)) in pieces.iter().enumerate() {
        let data: Vec<u8> = (0..len)
            .map(|j| (j as u64 * 31 + off + i as u64) as u8)
            .collect();
        let how = hows[i % 3];
        let ddp = i % 2 == 1;
        let (n, committed, v) = r
            .nfs
            .write(&f, off, &data, how, ddp)
            .unwrap_or_else(|e| panic!("write {i}: {e:?}"));
        assert_eq!(n as usize, len);
        assert!(committed >= how, "asked {how:?}, got {committed:?}");
        assert_eq!(*verf.get_or_insert(v), v, "one write verifier");
        let end = off as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data);
    }
    let c = r.nfs.commit(&f, 0, 0).expect("COMMIT");
    assert_eq!(Some(c), verf, "COMMIT's verifier is WRITE's");
    assert_eq!(r.nfs.commit(&f, 100, 10).unwrap(), c);
    assert_eq!(r.nfs.getattr(&f).unwrap().size, model.len() as u64);
    let (back, eof) = r.nfs.read(&f, 0, 256 * 1024, true).unwrap();
    assert!(eof);
    assert_eq!(back, model);
    // An empty WRITE writes nothing and succeeds.
    let (n, _, _) = r.nfs.write(&f, 3, &[], StableHow::FileSync, false).unwrap();
    assert_eq!(n, 0);
    assert_eq!(r.nfs.getattr(&f).unwrap().size, model.len() as u64);
}

#[test]
fn accepts_write_every_stability_odd_lengths_and_commit_memory() {
    on_memory(write_stability_and_commit);
}

#[test]
fn accepts_write_every_stability_odd_lengths_and_commit_dir() {
    on_dir("write", write_stability_and_commit);
}

// ---------------------------------------------------------------------------------------------
// CREATE

fn create_modes(r: &Rig) {
    let f = new_file(r, b"c", b"keep me");
    // UNCHECKED on an existing file opens it: same file, data kept.
    let again = r
        .nfs
        .create(&r.root, b"c", CreateHow::Unchecked(Sattr3::default()))
        .expect("unchecked again");
    assert_eq!(again, f);
    assert_eq!(r.nfs.read(&f, 0, 100, false).unwrap().0, b"keep me");
    // ... and applies the size asked for (RFC 1813 3.3.8: UNCHECKED sets the attributes).
    let zero = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    r.nfs
        .create(&r.root, b"c", CreateHow::Unchecked(zero))
        .expect("unchecked truncate");
    assert_eq!(r.nfs.getattr(&f).unwrap().size, 0);
    assert_eq!(
        status(
            r.nfs
                .create(&r.root, b"c", CreateHow::Guarded(Sattr3::default()))
        ),
        Nfsstat3::EXIST
    );
    // EXCLUSIVE: a retransmission (same verifier) succeeds with the same file; another
    // verifier is EXIST; so is an exclusive create over a file made otherwise.
    let v = *b"verf0001";
    let x = r
        .nfs
        .create(&r.root, b"x", CreateHow::Exclusive(v))
        .expect("exclusive");
    let x2 = r
        .nfs
        .create(&r.root, b"x", CreateHow::Exclusive(v))
        .expect("exclusive retransmission");
    assert_eq!(x, x2);
    assert_eq!(
        status(
            r.nfs
                .create(&r.root, b"x", CreateHow::Exclusive(*b"verf0002"))
        ),
        Nfsstat3::EXIST
    );
    assert_eq!(
        status(r.nfs.create(&r.root, b"c", CreateHow::Exclusive(v))),
        Nfsstat3::EXIST
    );
    // The client then sets the attributes with SETATTR (RFC 1813 3.3.8).
    r.nfs.setattr(&x, &sattr_mode(0o640), None).unwrap();
    assert_eq!(r.nfs.getattr(&x).unwrap().ftype, Ftype3::Reg);
    // Creating over a directory's name is EXIST whatever the mode.
    r.nfs.mkdir(&r.root, b"cd", Sattr3::default()).unwrap();
    for how in [
        CreateHow::Unchecked(Sattr3::default()),
        CreateHow::Guarded(Sattr3::default()),
        CreateHow::Exclusive(v),
    ] {
        assert_eq!(status(r.nfs.create(&r.root, b"cd", how)), Nfsstat3::EXIST);
    }
    // A mode asked for at creation is applied.
    let m = r
        .nfs
        .create(&r.root, b"m", CreateHow::Guarded(sattr_mode(0o604)))
        .unwrap();
    let a = r.nfs.getattr(&m).unwrap();
    assert_eq!(
        (a.ftype, a.mode & 0o7777, a.size, a.nlink),
        (Ftype3::Reg, 0o604, 0, 1)
    );
    // Our client calls with AUTH_NONE, root here: new objects belong to root, unless asked
    // otherwise.
    assert_eq!((a.uid, a.gid), (0, 0));
    let owned = Sattr3 {
        uid: Some(1234),
        gid: Some(5678),
        ..Sattr3::default()
    };
    let o = r
        .nfs
        .mkdir(&r.root, b"owned", owned)
        .expect("mkdir with an owner");
    let a = r.nfs.getattr(&o).unwrap();
    assert_eq!((a.uid, a.gid), (1234, 5678));
}

#[test]
fn accepts_create_unchecked_guarded_exclusive_memory() {
    on_memory(create_modes);
}

#[test]
fn accepts_create_unchecked_guarded_exclusive_dir() {
    on_dir("create", create_modes);
}

// ---------------------------------------------------------------------------------------------
// MKDIR, SYMLINK, READLINK, MKNOD

fn mkdir_symlink_mknod(r: &Rig) {
    let d = r
        .nfs
        .mkdir(&r.root, b"md", sattr_mode(0o750))
        .expect("MKDIR");
    let a = r.nfs.getattr(&d).unwrap();
    assert_eq!((a.ftype, a.mode & 0o7777, a.nlink), (Ftype3::Dir, 0o750, 2));
    assert_eq!(
        status(r.nfs.mkdir(&r.root, b"md", Sattr3::default())),
        Nfsstat3::EXIST
    );
    let l = r.nfs.symlink(&d, b"l", b"../some/target").expect("SYMLINK");
    let la = r.nfs.getattr(&l).unwrap();
    assert_eq!((la.ftype, la.size), (Ftype3::Lnk, 14));
    assert_eq!(r.nfs.readlink(&l).unwrap(), b"../some/target");
    assert_eq!(r.nfs.lookup(&d, b"l").unwrap(), l);
    assert_eq!(status(r.nfs.symlink(&d, b"l", b"other")), Nfsstat3::EXIST);
    // MKNOD: both stores make FIFOs, sockets and (for root) device nodes; the types MKNOD
    // never makes are BADTYPE.
    for t in [Ftype3::Fifo, Ftype3::Chr, Ftype3::Blk, Ftype3::Sock] {
        let n = r.nfs.mknod(&d, b"n", t).expect("MKNOD");
        let a = r.nfs.getattr(&n).unwrap();
        assert_eq!(a.ftype, t);
        if matches!(t, Ftype3::Chr | Ftype3::Blk) {
            assert_eq!(a.rdev, (1, 3), "{t:?}");
        }
        r.nfs.remove(&d, b"n").expect("REMOVE");
    }
    for (t, want) in [
        (Ftype3::Reg, Nfsstat3::BADTYPE),
        (Ftype3::Dir, Nfsstat3::BADTYPE),
        (Ftype3::Lnk, Nfsstat3::BADTYPE),
    ] {
        assert_eq!(status(r.nfs.mknod(&d, b"n", t)), want, "{t:?}");
        assert_eq!(status(r.nfs.lookup(&d, b"n")), Nfsstat3::NOENT);
    }
}

#[test]
fn accepts_mkdir_symlink_readlink_and_answers_mknod_memory() {
    on_memory(mkdir_symlink_mknod);
}

#[test]
fn accepts_mkdir_symlink_readlink_and_answers_mknod_dir() {
    on_dir("mkdir", mkdir_symlink_mknod);
}

// ---------------------------------------------------------------------------------------------
// REMOVE, RMDIR, RENAME, LINK

fn remove_rename_link(r: &Rig) {
    // LINK: a second name, one file, nlink counts both.
    let f = new_file(r, b"lf", b"linked");
    assert_eq!(r.nfs.getattr(&f).unwrap().nlink, 1);
    let after = r.nfs.link(&f, &r.root, b"lg").expect("LINK");
    assert_eq!(after.expect("file attributes").nlink, 2);
    let g = r.nfs.lookup(&r.root, b"lg").unwrap();
    assert_eq!(
        r.nfs.getattr(&g).unwrap().fileid,
        r.nfs.getattr(&f).unwrap().fileid
    );
    assert_eq!(r.nfs.read(&g, 0, 100, false).unwrap().0, b"linked");
    r.nfs.remove(&r.root, b"lf").expect("REMOVE one name");
    assert_eq!(r.nfs.getattr(&g).unwrap().nlink, 1);
    assert_eq!(status(r.nfs.lookup(&r.root, b"lf")), Nfsstat3::NOENT);
    // RENAME over an existing file replaces it.
    let a = new_file(r, b"ra", b"AAA");
    let a_id = r.nfs.getattr(&a).unwrap().fileid;
    new_file(r, b"rb", b"B");
    r.nfs
        .rename(&r.root, b"ra", &r.root, b"rb")
        .expect("RENAME");
    assert_eq!(status(r.nfs.lookup(&r.root, b"ra")), Nfsstat3::NOENT);
    let b = r.nfs.lookup(&r.root, b"rb").unwrap();
    assert_eq!(r.nfs.getattr(&b).unwrap().fileid, a_id);
    assert_eq!(r.nfs.read(&b, 0, 100, false).unwrap().0, b"AAA");
    // RENAME into another directory, then a directory onto a non-empty / an empty one.
    let d1 = r.nfs.mkdir(&r.root, b"d1", Sattr3::default()).unwrap();
    let d2 = r.nfs.mkdir(&r.root, b"d2", Sattr3::default()).unwrap();
    r.nfs.rename(&r.root, b"rb", &d1, b"moved").unwrap();
    assert_eq!(r.nfs.lookup(&d1, b"moved").unwrap(), b);
    r.nfs.mkdir(&r.root, b"d3", Sattr3::default()).unwrap();
    assert_eq!(
        status(r.nfs.rename(&r.root, b"d2", &r.root, b"d1")),
        Nfsstat3::NOTEMPTY
    );
    r.nfs
        .rename(&r.root, b"d2", &r.root, b"d3")
        .expect("onto an empty dir");
    assert_eq!(r.nfs.lookup(&r.root, b"d3").unwrap(), d2);
    // RMDIR: NOTEMPTY while something is inside, then fine.
    assert_eq!(status(r.nfs.rmdir(&r.root, b"d1")), Nfsstat3::NOTEMPTY);
    r.nfs.remove(&d1, b"moved").unwrap();
    r.nfs.rmdir(&r.root, b"d1").expect("RMDIR");
    assert_eq!(status(r.nfs.lookup(&r.root, b"d1")), Nfsstat3::NOENT);
    // The wrong one of the two: REMOVE of a directory, RMDIR of a file.
    assert_eq!(status(r.nfs.remove(&r.root, b"d3")), Nfsstat3::ISDIR);
    assert_eq!(status(r.nfs.rmdir(&r.root, b"lg")), Nfsstat3::NOTDIR);
    // REMOVE and RMDIR of "." and "..": refused (as Linux nfsd).
    assert_ne!(r.nfs.remove(&d2, b"."), Ok(()));
    assert_ne!(r.nfs.rmdir(&d2, b".."), Ok(()));
    assert!(r.nfs.getattr(&d2).is_ok());
}

#[test]
fn accepts_remove_rmdir_rename_and_link_memory() {
    on_memory(remove_rename_link);
}

#[test]
fn accepts_remove_rmdir_rename_and_link_dir() {
    on_dir("rename", remove_rename_link);
}

// ---------------------------------------------------------------------------------------------
// Weak cache consistency data

fn wcc_data(r: &Rig) {
    let d = r.nfs.mkdir(&r.root, b"wcc", Sattr3::default()).unwrap();
    // An mtime well in the past, so the change is visible at any time granularity.
    let past = Time3 {
        seconds: 1_000_000,
        nseconds: 0,
    };
    let set_past = Sattr3 {
        mtime: SetTime::ClientTime(past),
        ..Sattr3::default()
    };
    r.nfs.setattr(&d, &set_past, None).unwrap();
    let (f, fattr, w) = r
        .nfs
        .create_wcc(&d, b"f", CreateHow::Guarded(Sattr3::default()))
        .expect("create");
    let before = w.before.expect("pre-op attributes of the directory");
    let after = w.after.expect("post-op attributes of the directory");
    assert_eq!(before.mtime, past);
    assert!(after.mtime > before.mtime, "{w:?}");
    assert_eq!(fattr.expect("new file's attributes").ftype, Ftype3::Reg);
    // A WRITE that extends the file: the size after it; no attributes before (as the Linux
    // nfsd: they would not be atomic with the write, docs/nfs-server.md section 9).
    let data = vec![7u8; 3000];
    let (w, n, _, _) = r
        .nfs
        .write_wcc(&f, 0, &data, StableHow::FileSync, true)
        .unwrap();
    assert_eq!(n, 3000);
    assert_eq!(w.before, None);
    assert_eq!(w.after.expect("post-op").size, 3000);
    let (w, _, _, _) = r
        .nfs
        .write_wcc(&f, 2000, &data, StableHow::Unstable, false)
        .unwrap();
    assert_eq!(w.before, None);
    let post = w.after.unwrap();
    assert_eq!(post.size, 5000);
    assert_eq!(
        post,
        r.nfs.getattr(&f).unwrap(),
        "post-op is the current state"
    );
    // REMOVE's directory wcc.
    r.nfs.setattr(&d, &set_past, None).unwrap();
    let w = r
        .nfs
        .with_res(
            &rpcrdma_apps::nfs::v3::proto::Args3::Remove { dir: d, name: b"f" },
            |res| match res {
                rpcrdma_apps::nfs::v3::proto::Res3::Remove(s, w) => (s, w),
                other => panic!("{other:?}"),
            },
        )
        .unwrap();
    assert_eq!(w.0, Nfsstat3::OK);
    assert_eq!(w.1.before.unwrap().mtime, past);
    assert!(w.1.after.unwrap().mtime > past);
}

#[test]
fn accepts_wcc_data_around_create_write_and_remove_memory() {
    on_memory(wcc_data);
}

#[test]
fn accepts_wcc_data_around_create_write_and_remove_dir() {
    on_dir("wcc", wcc_data);
}
