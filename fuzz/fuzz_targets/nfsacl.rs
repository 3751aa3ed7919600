//! The NFSACL service (rpcrdma-apps `nfs::v3::nfsacl::NfsAcl`: GETACL and SETACL of POSIX
//! ACLs, program 100227 version 3) on arbitrary calls, each against a fresh
//! `nfs::v3::harness::Harness` (a directory, a file, a symbolic link leading out of the export
//! and a FIFO). The first octet picks the procedure (bit 0: GETACL, SETACL), the credential
//! (bits 5-6, as `nfs3_server`) and the store (bit 7: the memory store, or the `dir:` store
//! over a directory of the host, whose ACLs the kernel keeps); the rest is the arguments, with
//! handle markers `00 00 00 04 FE FE FE n`. Checks: no panic; a GETACL answer decodes, its
//! counts within 1 024 and its entries as many as their count; a SETACL the memory store
//! answers NFS3_OK with an access ACL that says more than a mode is what a GETACL then
//! returns; on the `dir:` store nothing outside the export changes (beside it:
//! `outside/secret`, where the fixture's link points) and no result carries the secret.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::acl::Acl;
use rpcrdma_apps::nfs::v3::harness::{Beside, Harness};
use rpcrdma_apps::nfs::v3::nfsacl::{
    decode_getacl_res, decode_setacl_args, encode_getacl_args, GETACL, SETACL,
};
use rpcrdma_engine::xdr::XdrWriter;

/// The export and the secret beside it, made once per process.
fn beside() -> &'static Beside {
    static B: OnceLock<Beside> = OnceLock::new();
    B.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("rpcrdma-fuzz-nfsacl-{}", std::process::id()));
        Beside::new(base).expect("beside")
    })
}

/// The access ACL a GETACL answer carries, as the server would take it back.
fn access_of(results: &[u8]) -> Option<Acl> {
    let (st, _, acls) = decode_getacl_res(results).expect("GETACL results decode");
    let (mask, [(count, entries), (dcount, dentries)]) = acls?;
    assert!(count <= 1024 && dcount <= 1024, "counts {count} {dcount}");
    if mask & 1 != 0 {
        assert_eq!(entries.len(), count as usize, "access entries");
    }
    if mask & 4 != 0 {
        assert_eq!(dentries.len(), dcount as usize, "default entries");
    }
    assert_eq!(st.0, 0);
    Acl::from_entries(entries).expect("entries the server sent")
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, args)) = data.split_first() else {
        return;
    };
    let dir = first & 0x80 != 0;
    let h = Harness::fresh(dir.then(beside));
    let (proc_num, r) = h.call_acl(first & 0x7f, args);
    if let Ok(results) = &r {
        if proc_num == GETACL {
            let (st, ..) = decode_getacl_res(results).expect("GETACL results decode");
            if st.0 == 0 {
                access_of(results);
            }
        }
        let ok = results.get(..4) == Some(&[0, 0, 0, 0][..]);
        if proc_num == SETACL && ok && !dir {
            let set = decode_setacl_args(&h.with_handles(args)).expect("answered, so it decoded");
            if let Some(a) = set.access.filter(|a| a.equiv_mode(0).1) {
                let mut buf = [0u8; 128];
                let mut w = XdrWriter::new(&mut buf);
                encode_getacl_args(&mut w, &set.fh, 1).expect("a handle fits");
                let n = w.finish();
                let (_, back) = h.call_acl(0, &buf[..n]);
                let back = back.expect("GETACL answered");
                assert_eq!(access_of(&back), Some(a), "what SETACL set, GETACL returns");
            }
        }
    }
    if dir {
        let reply = r.as_deref().unwrap_or_default();
        beside()
            .check(args, reply)
            .expect("nothing beside the export changes");
    }
});
