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
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::store::dir::DirStore;
use rpcrdma_apps::nfs::v3::harness::{status_of, Harness};

/// What `outside/secret` holds.
const SECRET: &[u8] = b"SECRET-6c1d-not-for-clients";

/// The directory holding `exp` (the export) and `outside/secret`, made once per process.
fn base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let b = std::env::temp_dir().join(format!("rpcrdma-fuzz-nfs3-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&b);
        std::fs::create_dir_all(b.join("outside")).expect("outside");
        std::fs::write(b.join("outside/secret"), SECRET).expect("secret");
        b
    })
}

/// The names in directory `p`, sorted.
fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .expect("listing")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A harness over a fresh, empty `exp`.
fn on_dir() -> Harness {
    let exp = base().join("exp");
    let _ = std::fs::remove_dir_all(&exp);
    std::fs::create_dir(&exp).expect("exp");
    Harness::with_store(Arc::new(DirStore::open(&exp).expect("dir store")))
}

/// Nothing beside the export changed.
fn outside_untouched() {
    let b = base();
    assert_eq!(names(b), ["exp", "outside"]);
    assert_eq!(names(&b.join("outside")), ["secret"]);
    let secret = b.join("outside/secret");
    let m = std::fs::symlink_metadata(&secret).expect("secret");
    assert!(m.is_file() && m.nlink() == 1, "{m:?}");
    assert_eq!(std::fs::read(&secret).expect("secret"), SECRET);
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, args)) = data.split_first() else {
        return;
    };
    let dir = first & 0x80 != 0;
    let h = if dir { on_dir() } else { Harness::new() };
    let (proc_num, r) = h.call(first & 0x7f, args);
    if let Ok(results) = &r {
        let d = status_of(proc_num, results);
        assert!(d.is_ok(), "procedure {proc_num}: {d:?}");
        let leak = results.windows(SECRET.len()).any(|w| w == SECRET);
        assert!(!leak, "procedure {proc_num} answered the secret");
    }
    if dir {
        outside_untouched();
    }
});
