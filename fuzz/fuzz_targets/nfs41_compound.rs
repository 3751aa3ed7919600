//! NFSv4.1 COMPOUND server (rpcrdma-apps `nfs::v4::server`) on arbitrary bytes, over one
//! established session (`nfs::v4::harness::Harness41`) on a memory store, or (bit 6 of the
//! first octet) on the `dir:` store over a host directory holding the fixture of
//! `nfs::v3::harness::fixture` (a directory, a file, a symbolic link out of the export to
//! `../outside/secret`, a FIFO), made anew every 1 000 inputs. An input whose first octet has
//! its top bit set is a whole COMPOUND4args (header fuzzing); otherwise the first octet's low
//! five bits give the number of operations after a valid SEQUENCE (the next sequence id of
//! slot 0), bit 5 makes the COMPOUND one of minor version 2 (RFC 7862: ALLOCATE, DEALLOCATE,
//! SEEK), and the rest is those operations' octets. Nothing may panic; every answered
//! COMPOUND carries at most as many results as operations it announced; on the `dir:` store
//! nothing beside the export changes and no reply carries the secret's content. The process
//! makes no file over 256 MiB (`RLIMIT_FSIZE`): ALLOCATE on the `dir:` store reserves real
//! blocks of the host's disk.
#![no_main]
use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use rpcrdma_apps::nfs::store::dir::DirStore;
use rpcrdma_apps::nfs::v3::harness::{fixture, Beside};
use rpcrdma_apps::nfs::v4::harness::Harness41;

/// Inputs one `dir:` world serves before it is made anew (its tree only grows).
const DIR_ROUNDS: u32 = 1_000;

/// Largest file the process may make (`RLIMIT_FSIZE`): an ALLOCATE on the `dir:` store asks
/// the host file system for real blocks, and an input asking for terabytes would fill the
/// disk; past the limit `fallocate` answers EFBIG (SIGXFSZ ignored).
const FILE_SIZE_MAX: u64 = 256 << 20;

/// The export and the secret beside it, made once per process (with the file size limit).
fn beside() -> &'static Beside {
    static B: OnceLock<Beside> = OnceLock::new();
    B.get_or_init(|| {
        let lim = libc::rlimit {
            rlim_cur: FILE_SIZE_MAX,
            rlim_max: FILE_SIZE_MAX,
        };
        // SAFETY: plain system calls with valid arguments.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0, "RLIMIT_FSIZE");
        }
        let base = std::env::temp_dir().join(format!("rpcrdma-fuzz-nfs41-{}", std::process::id()));
        Beside::new(base).expect("beside")
    })
}

/// The `dir:` world: made anew every [`DIR_ROUNDS`] inputs.
fn dir_world() -> Arc<Harness41> {
    static W: Mutex<Option<(Arc<Harness41>, u32)>> = Mutex::new(None);
    let mut w = W.lock().unwrap_or_else(|p| p.into_inner());
    match &mut *w {
        Some((h, n)) if *n < DIR_ROUNDS => {
            *n += 1;
            Arc::clone(h)
        }
        _ => {
            let b = beside();
            b.reset_export().expect("export");
            let store = Arc::new(DirStore::open(&b.exp()).expect("dir store"));
            fixture(&*store);
            let h = Arc::new(Harness41::new(store));
            *w = Some((Arc::clone(&h), 1));
            h
        }
    }
}

fn memory_world() -> &'static Harness41 {
    static W: OnceLock<Harness41> = OnceLock::new();
    W.get_or_init(Harness41::memory)
}

/// Nothing beside the export changed; `reply` does not carry the secret (unless `request` did).
fn contained(request: &[u8], reply: &[u8]) {
    beside()
        .check(request, reply)
        .expect("nothing beside the export changes");
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, ops)) = data.split_first() else {
        return;
    };
    let dir = first & 0x40 != 0;
    let dw = dir.then(dir_world);
    let h: &Harness41 = dw.as_deref().unwrap_or_else(|| memory_world());
    if first & 0x80 != 0 {
        let r = h.compound(ops).unwrap_or_default();
        if dir {
            contained(ops, &r);
        }
        return;
    }
    let (r, nops) = h.after_sequence(first, ops).expect("the header is valid");
    let n = u32::from_be_bytes([r[12], r[13], r[14], r[15]]);
    assert!(n <= nops, "{n} results for {nops} operations");
    if dir {
        contained(ops, &r);
    }
});
