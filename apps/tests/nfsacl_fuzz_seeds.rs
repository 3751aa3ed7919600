//! The checked-in `nfsacl` fuzz seeds (`fuzz/seeds/nfsacl/`, NFSACL arguments laid out by hand
//! in `fuzz/seeds/make.py` from Linux's wire form, handles written as the markers
//! `nfs::v3::harness` replaces) get the answers their names say from the NFSACL service over
//! the harness's fixture, on both stores: the `dir:` store's ACLs are the host file system's,
//! checked by the kernel, so every status the memory store gives is also the kernel's. So the
//! seeds start the fuzzer inside each procedure and serve as golden vectors of the service.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use rpcrdma_apps::nfs::v3::harness::{Beside, Harness};
use rpcrdma_apps::nfs::v3::nfsacl::{decode_getacl_res, GETACL};
use rpcrdma_poller::Reject;

/// The seed `name`'s status (the first word of its results) or the RPC-level refusal, on the
/// memory store or (the first octet's top bit) the `dir:` store, whose surroundings it checks;
/// a GETACL answer must decode.
fn status(name: &str) -> Result<u32, Reject> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/nfsacl");
    let seed = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (&first, args) = seed.split_first().expect(name);
    let beside = (first & 0x80 != 0).then(|| {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("nfsacl-seeds-{}-{n}", std::process::id()));
        Beside::new(base).unwrap()
    });
    let h = Harness::fresh(beside.as_ref());
    let (p, r) = h.call_acl(first & 0x7f, args);
    let results = r.as_deref().unwrap_or_default();
    if let Some(b) = &beside {
        b.check(args, results)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    if p == GETACL && r.is_ok() {
        decode_getacl_res(results).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    r.map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Each seed answered with an NFS status, the same on both stores.
const ANSWERED: [(&str, u32); 14] = [
    ("getacl_f_all", 0),
    ("getacl_d_counts", 0),
    ("getacl_l_all", 0),
    ("getacl_bad_mask", 22), // NFS3ERR_INVAL, as Linux nfsd
    ("getacl_stale", 70),    // NFS3ERR_STALE
    ("getacl_bad_mac", 70),  // NFS3ERR_STALE, as for NFSv3 calls
    ("setacl_f_named_user", 0),
    ("setacl_d_access_and_default", 0),
    ("setacl_f_unsorted", 0),
    ("setacl_f_no_mask", 22),  // NFS3ERR_INVAL (posix_acl_valid)
    ("setacl_f_default", 13),  // NFS3ERR_ACCES: no default ACL on a file
    ("setacl_f_uid1000", 1),   // NFS3ERR_PERM: not the owner
    ("setacl_l_link", 10_004), // NFS3ERR_NOTSUPP
    ("setacl_f_remove", 0),
];

#[test]
fn accepts_each_seed_with_the_status_its_name_says_on_both_stores() {
    for (name, want) in ANSWERED {
        assert_eq!(status(name), Ok(want), "{name}");
        assert_eq!(status(&format!("dir_{name}")), Ok(want), "dir_{name}");
    }
}

#[test]
fn rejects_undecodable_seeds_with_garbage_args_on_both_stores() {
    for name in ["setacl_too_many", "setacl_bad_tag", "setacl_bad_mask_bits"] {
        assert_eq!(status(name), Err(Reject::GarbageArgs), "{name}");
        assert_eq!(
            status(&format!("dir_{name}")),
            Err(Reject::GarbageArgs),
            "dir_{name}"
        );
    }
}
