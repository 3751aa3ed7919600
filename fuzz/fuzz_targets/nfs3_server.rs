//! The NFSv3 server (rpcrdma-apps `nfs::v3::server::Nfs3`, what a client reaches past the
//! RPC layer) on arbitrary calls, each against a fresh `nfs::v3::harness::Harness`: a
//! directory, a file, a symbolic link leading out of the export and a FIFO, served through
//! `rpcrdma_poller::program::serve_detached`. The first octet picks the procedure (low five
//! bits, modulo 22: NULL and every NFSv3 procedure), the credential (bits 5-6: AUTH_SYS as
//! root, as uid 1000, as uid 1000 with 16 groups, or AUTH_NONE) and the store (bit 7: the
//! memory store, or the `dir:` store over a directory of the host); the rest is the
//! arguments, where each run `00 00 00 04 FE FE FE n` becomes fixture handle `n % 8` (a handle
//! the server recognises cannot be guessed: handles are sealed with a keyed MAC). Checks: no
//! panic; the results of a call the server answers decode as that procedure's
//! (`nfs::v3::harness::status_of`); and on the `dir:` store nothing outside the export
//! changed (beside it: `outside/secret`, where the fixture's link points) and no result
//! carries the secret's content.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::v3::harness::{status_of, Beside, Harness};

/// The export and the secret beside it, made once per process.
fn beside() -> &'static Beside {
    static B: OnceLock<Beside> = OnceLock::new();
    B.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("rpcrdma-fuzz-nfs3-{}", std::process::id()));
        Beside::new(base).expect("beside")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, args)) = data.split_first() else {
        return;
    };
    let dir = first & 0x80 != 0;
    let h = Harness::fresh(dir.then(beside));
    let (proc_num, r) = h.call(first & 0x7f, args);
    if let Ok(results) = &r {
        let d = status_of(proc_num, results);
        assert!(d.is_ok(), "procedure {proc_num}: {d:?}");
    }
    if dir {
        let reply = r.as_deref().unwrap_or_default();
        beside()
            .check(args, reply)
            .expect("nothing beside the export changes");
    }
});
