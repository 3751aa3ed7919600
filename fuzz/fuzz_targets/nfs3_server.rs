//! The NFSv3 server (rpcrdma-apps `nfs::v3::server::Nfs3`, what a client reaches past the
//! RPC layer) on arbitrary calls, each against a fresh `nfs::v3::harness::Harness`: a memory
//! store with a directory, a file, a symbolic link and a FIFO, served through
//! `rpcrdma_poller::program::serve_detached`. The first octet picks the procedure (low five
//! bits, modulo 22: NULL and every NFSv3 procedure) and the credential (bits 5-6: AUTH_SYS as
//! root, as uid 1000, as uid 1000 with 16 groups, or AUTH_NONE); the rest is the arguments,
//! where each run `00 00 00 04 FE FE FE n` becomes fixture handle `n % 8` (a handle the
//! server recognises cannot be guessed: handles are sealed with a keyed MAC). Checks: no
//! panic, and the results of a call the server answers decode as that procedure's
//! (`nfs::v3::harness::status_of`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::v3::harness::{status_of, Harness};

fuzz_target!(|data: &[u8]| {
    let Some((&first, args)) = data.split_first() else {
        return;
    };
    let (proc_num, r) = Harness::new().call(first, args);
    if let Ok(results) = r {
        let d = status_of(proc_num, &results);
        assert!(d.is_ok(), "procedure {proc_num}: {d:?}");
    }
});
