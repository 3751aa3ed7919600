//! The checked-in `nfs3_server` fuzz seeds (`fuzz/seeds/nfs3_server/`, arguments laid out by
//! hand from RFC 1813 in `fuzz/seeds/make.py`, handles written as the markers
//! `nfs::v3::harness` replaces) get the answers their names say from the NFSv3 server over
//! the harness's fixture: each reaches the procedure it names and the part of it the name
//! says (a change made, an error for a stale, forged or unsealed handle, a permission
//! refused), and its results decode as that procedure's. So the seeds start the fuzzer deep
//! inside each procedure and serve as golden vectors of the server.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use rpcrdma_apps::nfs::v3::harness::{self, Beside, Harness};
use rpcrdma_apps::nfs::v3::proto::{self, Res3};
use rpcrdma_poller::Reject;

/// The seed `name`'s procedure and status (NFS3_OK 0, NFS3ERR_* otherwise; NULL: 0) or the
/// RPC-level refusal, on the memory store or (the first octet's top bit) the `dir:` store,
/// whose surroundings it checks.
fn status(name: &str) -> (u32, Result<u32, Reject>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs3_server");
    let seed = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (&first, args) = seed.split_first().expect(name);
    let beside = (first & 0x80 != 0).then(|| {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("nfs3-seeds-{}-{n}", std::process::id()));
        Beside::new(base).unwrap()
    });
    let h = Harness::fresh(beside.as_ref());
    let (p, r) = h.call(first & 0x7f, args);
    let results = r.as_deref().unwrap_or_default();
    if let Some(b) = &beside {
        b.check(args, results)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let st = r.map(|results| {
        let st = harness::status_of(p, &results).unwrap_or_else(|e| panic!("{name}: {e}"));
        st.0
    });
    (p, st)
}

/// NFS3_OK.
const OK: u32 = 0;

/// Each seed of one call on the fixture, with its procedure and status, the same on both
/// stores (the `dir_` seeds are these calls on the `dir:` store).
const CALLS: [(&str, u32, u32); 29] = [
    ("proc00_null", 0, OK),
    ("proc01_getattr_f", 1, OK),
    ("proc02_setattr_f_mode_guarded", 2, 10_002), // NOT_SYNC: the guard's ctime is 0
    ("proc03_lookup_f", 3, OK),
    ("proc04_access_d", 4, OK),
    ("proc05_readlink_l", 5, OK),
    ("proc06_read_f", 6, OK),
    ("proc07_write_f_unstable", 7, OK),
    ("proc08_create_guarded", 8, OK),
    ("proc08_create_exclusive", 8, OK),
    ("proc09_mkdir", 9, OK),
    ("proc10_symlink", 10, OK),
    ("proc11_mknod_chr", 11, OK),
    ("proc12_remove_f", 12, OK),
    ("proc13_rmdir_d", 13, OK),
    ("proc14_rename_f_into_d", 14, OK),
    ("proc15_link_f_into_d", 15, OK),
    ("proc16_readdir_root", 16, OK),
    ("proc17_readdirplus_root", 17, OK),
    ("proc18_fsstat", 18, OK),
    ("proc19_fsinfo", 19, OK),
    ("proc20_pathconf", 20, OK),
    ("proc21_commit_f", 21, OK),
    // STALE for a removed file's handle and for one this server did not seal (a forged MAC,
    // the store's own handle): nothing tells a guess from a handle of the past.
    ("proc01_getattr_stale", 1, 70),
    ("proc01_getattr_bad_mac", 1, 70),
    ("proc01_getattr_unsealed", 1, 70),
    // READ of a FIFO: INVAL, the type checked before the caller's rights (as Linux nfsd's
    // `fh_verify`).
    ("proc06_read_p_uid1000", 6, 22),
    ("proc12_remove_f_groups", 12, 13), // ACCES: uid 1000 in root's 0755 directory
    ("proc03_lookup_auth_none", 3, OK),
];

#[test]
fn accepts_every_nfs3_server_seed_with_the_answer_its_name_gives() {
    let mut wrong = Vec::new();
    let mut check = |name: String, want: (u32, Result<u32, Reject>)| {
        let got = status(&name);
        if got != want {
            wrong.push(format!("{name}: {got:?}, want {want:?}"));
        }
    };
    for (name, p, st) in CALLS {
        check(name.to_string(), (p, Ok(st)));
        check(format!("dir_{name}"), (p, Ok(st)));
    }
    // Calls that try to leave the export (`status` checks that nothing beside it changed and
    // that no result carries the secret), answered as Linux nfsd answers them.
    let escapes = [
        ("dir_escape_read_link", 6, Ok(22)),  // INVAL: a link is not read
        ("dir_escape_write_link", 7, Ok(22)), // nor written
        ("dir_escape_truncate_link", 2, Ok(22)), // nor truncated
        ("dir_escape_setattr_mode_link", 2, Ok(OK)), // a link's mode ignored (`nfsd_setattr`)
        ("dir_escape_lookup_through_link", 3, Ok(20)), // NOTDIR: a link is not followed
        ("dir_escape_lookup_dotdot", 3, Ok(OK)), // the root's parent is the root
        ("dir_escape_remove_link", 12, Ok(OK)), // the link goes, not its target
        // A name holding '/' does not decode, as Linux nfsd's `svcxdr_decode_filename`.
        ("dir_escape_create_slash", 8, Err(Reject::GarbageArgs)),
        ("dir_escape_rename_slash", 14, Err(Reject::GarbageArgs)),
        ("dir_escape_link_slash", 15, Err(Reject::GarbageArgs)),
    ];
    for (name, p, want) in escapes {
        check(name.to_string(), (p, want));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs3_server");
    let seeds = std::fs::read_dir(dir).unwrap().count();
    assert_eq!(seeds, 2 * CALLS.len() + escapes.len(), "every seed checked");
}

/// LOOKUP of `..` in the export's root answers the root's own handle and attributes on both
/// stores, not the directory above (whose handle would reach outside the export).
#[test]
fn accepts_dotdot_of_the_root_as_the_root() {
    let base = std::env::temp_dir().join(format!("nfs3-dotdot-{}", std::process::id()));
    let b = Beside::new(base).unwrap();
    let stores = [Harness::fresh(None), Harness::fresh(Some(&b))];
    for h in stores {
        let mut args = vec![0, 0, 0, 4, 0xFE, 0xFE, 0xFE, 0];
        args.extend_from_slice(&[0, 0, 0, 2, b'.', b'.', 0, 0]);
        let (p, r) = h.call(3, &args);
        let results = r.expect("answered");
        let Ok(Res3::Lookup(Ok((fh, Some(obj), Some(dir))))) = proto::decode_res(p, &results)
        else {
            panic!("{:?}", proto::decode_res(p, &results))
        };
        assert_eq!(&fh, h.handle(0));
        assert_eq!(obj.fileid, dir.fileid);
    }
    b.check(&[], &[]).unwrap();
}

/// The check the fuzz targets and these seeds rely on fails when it should: a reply carrying
/// the secret its request did not, a file made beside the export, the secret's mode changed.
#[test]
fn rejects_a_reply_carrying_the_secret_or_a_change_beside_the_export() {
    let base = std::env::temp_dir().join(format!("nfs3-beside-{}", std::process::id()));
    let b = Beside::new(base.clone()).unwrap();
    let mut reply = b"\0\0\0\0".to_vec();
    reply.extend_from_slice(harness::SECRET);
    assert!(b.check(&[], &reply).is_err());
    assert!(
        b.check(harness::SECRET, &reply).is_ok(),
        "an echo of the request"
    );
    std::fs::write(base.join("outside/new"), b"x").unwrap();
    assert!(b.check(&[], &[]).is_err());
    std::fs::remove_file(base.join("outside/new")).unwrap();
    assert!(b.check(&[], &[]).is_ok());
    use std::os::unix::fs::PermissionsExt;
    let p = std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(base.join("outside/secret"), p).unwrap();
    assert!(b.check(&[], &[]).is_err());
}
