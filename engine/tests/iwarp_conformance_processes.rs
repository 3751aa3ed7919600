//! The provider conformance suite on the iWARP provider with its two ends in two processes,
//! one `#[test]` per check (the list shared with `iwarp_conformance.rs`): each test starts two
//! device processes (this binary again, `xproc_host`), one owning the client's device and one
//! the server's, connected by real TCP on loopback; the check runs here, unchanged, through a
//! provider that forwards each verbs call to the process owning the object
//! (`common/xproc/mod.rs` says why the suite is driven this way rather than split in two).
//! The expectations are those of the in-process run (the generic iWARP profile; RNR retry
//! checks skipped), so each check holds with the provider's progress split between two
//! processes. No check needs both ends in one address space: the buffers a check fills and
//! reads are in memory mapped at the same address in all three processes.

#[path = "common/xproc/mod.rs"]
mod xproc;

use rpcrdma_engine::verbs::conformance::{self as c, Env};
use xproc::ProcEnv;

fn run(name: &str) {
    if xproc::is_host() {
        return;
    }
    let mut env = ProcEnv::new();
    run_named(&mut env, name);
}

/// A device process of the tests above (started by them; does nothing when run directly).
#[test]
#[ignore = "a device process of the two-process conformance tests"]
fn xproc_host() {
    xproc::host_main();
}

include!("common/iwarp_checks.rs");
