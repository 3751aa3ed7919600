//! The NFSv3 server's steady state allocates nothing on the heap: the calls a Linux client
//! sends most (GETATTR, LOOKUP, ACCESS, READ inline and through a Write chunk, WRITE,
//! COMMIT, READDIRPLUS, READLINK, FSSTAT, SETATTR, and NFSACL's GETACL) through `rpcrdma-nfsd` on the software provider,
//! its handlers on the daemon's reactor and worker threads, on the memory backend and on the
//! `dir:` backend.
//!
//! Normal operation: the counting allocator (`counting`) counts allocations in every thread
//! and on each thread; after a warm-up (reply buffers and caches grown, the duplicate request
//! cache full, so that each reply it keeps reuses the buffer of one it evicts), the rounds of
//! calls must allocate nothing on any thread but the test's own, which runs the RPC client
//! and decodes the replies. No other test may run in
//! this binary meanwhile: everything in the process counts. Recovery: a round that allocates
//! fails the test with the count; a call that fails fails it with its error.

mod counting;
mod nfsd_common;

use rpcrdma_apps::nfs::daemon::Backend;
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::nfsacl;
use rpcrdma_engine::xdr::XdrWriter;

use counting::{all_allocs, allocs};
use nfsd_common::{options, scratch_dir, Rig};

/// Rounds measured.
const N: usize = 64;
/// Rounds before measuring.
const WARM: usize = 16;
/// WRITEs that fill the duplicate request cache before measuring (its default 8 192 entries
/// and a margin for the shards' spread).
const DRC_FILL: usize = 10_000;
/// Octets each READ and WRITE moves (inline: under the 4 KiB inline threshold).
const IO: usize = 1024;

/// The calls of one round: their names, then each call on file `f`, symbolic link `l` and
/// the export's root, `i` naming the round (the WRITE's data and the block it goes to).
const CALLS: [&str; 13] = [
    "GETATTR",
    "LOOKUP",
    "ACCESS",
    "WRITE",
    "COMMIT",
    "READ",
    "READ via Write chunk",
    "READDIRPLUS",
    "READLINK",
    "FSSTAT",
    "GETATTR of the root",
    "NFSACL GETACL of the root",
    "SETATTR",
];

fn call(r: &Rig, f: &Fh, l: &Fh, i: usize, which: usize) {
    let n = &r.nfs;
    let at = (i % 4 * IO) as u64;
    let fill = [i as u8; IO];
    match which {
        0 => drop(n.getattr(f).expect("GETATTR")),
        1 => assert_eq!(n.lookup(&r.root, b"f").expect("LOOKUP"), *f),
        2 => drop(n.access(f, 0x3f).expect("ACCESS")),
        3 => {
            let (count, ..) = n
                .write(f, at, &fill, StableHow::Unstable, false)
                .expect("WRITE");
            assert_eq!(count as usize, IO);
        }
        4 => drop(n.commit(f, 0, 0).expect("COMMIT")),
        5 => {
            n.write(f, at, &fill, StableHow::Unstable, false)
                .expect("WRITE");
            let (data, _) = n.read(f, at, IO as u32, false).expect("READ");
            assert!(data == fill, "READ returns what the WRITE wrote");
        }
        6 => {
            let (data, _) = n
                .read(f, 0, (4 * IO) as u32, true)
                .expect("READ via Write chunk");
            assert_eq!(data.len(), 4 * IO);
        }
        7 => {
            let page = n
                .readdir_page(&r.root, 0, [0; 8], 8192, true)
                .expect("READDIRPLUS");
            assert!(page.entries.len() >= 5, "{} entries", page.entries.len());
        }
        8 => assert_eq!(n.readlink(l).expect("READLINK"), b"f"),
        9 => drop(n.fsstat(&r.root).expect("FSSTAT")),
        10 => drop(n.getattr(&r.root).expect("GETATTR of the root")),
        11 => {
            // What the Linux client asks of a directory before each create in it: both ACLs.
            let mut args = [0u8; 128];
            let mut w = XdrWriter::new(&mut args);
            nfsacl::encode_getacl_args(&mut w, &r.root, 0xf).expect("encode");
            let len = w.finish();
            let reply = n
                .call_as(
                    nfsacl::PROGRAM,
                    nfsacl::VERSION,
                    nfsacl::GETACL,
                    &args[..len],
                )
                .expect("GETACL");
            assert_eq!(&reply.results()[..4], &[0, 0, 0, 0], "NFS3_OK");
        }
        _ => {
            let mode = Sattr3 {
                mode: Some(0o640 | (i as u32 & 1) << 2),
                ..Sattr3::default()
            };
            n.setattr(f, &mode, None).expect("SETATTR");
        }
    }
}

/// Allocations outside this thread while `f` runs.
fn elsewhere(f: impl FnOnce()) -> u64 {
    let (all, own) = (all_allocs(), allocs().0);
    f();
    (all_allocs() - all) - (allocs().0 - own)
}

fn steady_state(backend: Backend, dir: Option<std::path::PathBuf>) {
    let r = Rig::with(options(backend), dir);
    let n = &r.nfs;
    let how = CreateHow::Unchecked(Sattr3 {
        mode: Some(0o666),
        ..Sattr3::default()
    });
    let f = n.create(&r.root, b"f", how).expect("CREATE f");
    n.write(&f, 0, &[0u8; 4 * IO], StableHow::FileSync, false)
        .expect("WRITE f");
    for name in [&b"g"[..], b"h"] {
        n.create(&r.root, name, how).expect("CREATE");
    }
    n.mkdir(&r.root, b"d", Sattr3::default()).expect("MKDIR d");
    let l = n.symlink(&r.root, b"l", b"f").expect("SYMLINK l");
    for i in 0..WARM {
        for k in 0..CALLS.len() {
            call(&r, &f, &l, i, k);
        }
    }
    // The duplicate request cache filled (8 192 entries in 16 shards): from then on each
    // WRITE's reply is kept in the buffer of the entry it evicts.
    for i in 0..DRC_FILL {
        n.write(&f, (i % 4 * IO) as u64, &[1; 8], StableHow::Unstable, false)
            .expect("WRITE");
    }
    let mut per_call = [0u64; CALLS.len()];
    for i in WARM..WARM + N {
        for (k, n) in per_call.iter_mut().enumerate() {
            *n += elsewhere(|| call(&r, &f, &l, i, k));
        }
    }
    let made: Vec<(&str, u64)> = CALLS
        .iter()
        .copied()
        .zip(per_call)
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(
        made.is_empty(),
        "{N} rounds: allocations outside the test's thread, per call: {made:?}"
    );
    r.stop();
}

#[test]
fn accepts_steady_state_nfs3_calls_without_allocating_on_either_backend() {
    steady_state(Backend::Memory, None);
    let d = scratch_dir("v3alloc");
    steady_state(Backend::Dir(d.clone()), Some(d));
}
