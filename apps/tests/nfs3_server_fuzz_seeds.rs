//! The checked-in `nfs3_server` fuzz seeds (`fuzz/seeds/nfs3_server/`, arguments laid out by
//! hand from RFC 1813 in `fuzz/seeds/make.py`, handles written as the markers
//! `nfs::v3::harness` replaces) get the answers their names say from the NFSv3 server over
//! the harness's fixture: each reaches the procedure it names and the part of it the name
//! says (a change made, an error for a stale, forged or unsealed handle, a permission
//! refused), and its results decode as that procedure's. So the seeds start the fuzzer deep
//! inside each procedure and serve as golden vectors of the server.

use std::path::PathBuf;

use rpcrdma_apps::nfs::v3::harness::{self, Harness};

/// The seed `name`'s procedure and status (NFS3_OK 0, NFS3ERR_* otherwise; NULL: 0).
fn status(name: &str) -> (u32, u32) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs3_server");
    let seed = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (&first, args) = seed.split_first().expect(name);
    let (p, r) = Harness::new().call(first, args);
    let results = r.unwrap_or_else(|e| panic!("{name}: refused {e:?}"));
    let st = harness::status_of(p, &results).unwrap_or_else(|e| panic!("{name}: {e}"));
    (p, st.0)
}

#[test]
fn accepts_every_nfs3_server_seed_with_the_answer_its_name_gives() {
    const OK: u32 = 0;
    let want = [
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
        // STALE for a removed file's handle and for one this server did not seal (a forged
        // MAC, the store's own handle): nothing tells a guess from a handle of the past.
        ("proc01_getattr_stale", 1, 70),
        ("proc01_getattr_bad_mac", 1, 70),
        ("proc01_getattr_unsealed", 1, 70),
        // READ of a FIFO: INVAL, the type checked before the caller's rights (as Linux
        // nfsd's `fh_verify`).
        ("proc06_read_p_uid1000", 6, 22),
        ("proc12_remove_f_groups", 12, 13), // ACCES: uid 1000 in a root-owned directory
        ("proc03_lookup_auth_none", 3, OK),
    ];
    let mut wrong = Vec::new();
    for (name, p, st) in want {
        let got = status(name);
        if got != (p, st) {
            wrong.push(format!("{name}: {got:?}, want {:?}", (p, st)));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfs3_server");
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), want.len());
}
