//! The directory backend's cost per call, counted: file system system calls per GETATTR,
//! ACCESS, GETACL (of a file and of a directory), LOOKUP (with the descriptor cache warm and cold), READDIRPLUS entry, CREATE
//! (GUARDED and EXCLUSIVE), SETATTR, WRITE, READ, MKDIR, LINK, RENAME and REMOVE, made by the
//! whole server (every reactor and worker thread), counted exactly by a seccomp filter
//! (`syscount`), never timed.
//!
//! Normal operation: `accepts_metadata_calls_within_their_system_call_budget` fails when any
//! of these calls costs more system calls than its budget, when a call of the daemon's own
//! identity (the rig acts as root) reaches a worker or switches identity on the reactor, or
//! when with `--dir-calls workers --getattr-in-worker` one does not reach a worker. The measurement behind
//! the budgets (`measure_dir_metadata_calls`, ignored by default: `cargo test -p rpcrdma-apps
//! --test nfsd_dircost -- --ignored --nocapture`) prints every call type's system calls,
//! wall and CPU time per call over a tree of a few thousand files. Both need root (the
//! directory backend and the filter) and skip with a message otherwise. Recovery: none; the
//! scratch directory is removed at the end.

mod nfsd_common;
mod syscount;

use std::time::Instant;

use nfsd_common::{options, scratch_dir, Rig};
use rpcrdma_apps::nfs::daemon::{Backend, DaemonOptions};
use rpcrdma_apps::nfs::types::{access, CreateHow, Fh, Nfsstat3, Sattr3, StableHow};
use rpcrdma_apps::nfs::v3::nfsacl::{
    decode_getacl_res, encode_getacl_args, GETACL, PROGRAM, VERSION,
};
use rpcrdma_engine::xdr::XdrWriter;
use syscount::{Counter, RoleCalls, Snapshot, FS, SCHED};

/// File system calls the server may make per GETATTR with the descriptor cached: one `fstat`.
const BUDGET_GETATTR: u64 = 1;
/// Per ACCESS asking read, modify, extend and execute of a file (mode `rw-`) the caller may
/// read and write: `fstat`, then the kernel's check of all but execute (granted); execute is
/// refused by the mode, which has no execute bit (as the host file system decides).
const BUDGET_ACCESS: u64 = 2;
/// Per LOOKUP with the object's descriptor cached: the directory's `fstat`, the name's
/// attributes and mount (`statx`, as the caller), the handle from the descriptor cache by
/// inode number.
const BUDGET_LOOKUP: u64 = 2;
/// Per LOOKUP of a name whose object has no descriptor open (a walk of a tree the server has
/// not seen): the same, the object opened by name (`openat`, `O_PATH`, as the caller), the
/// handle of what was opened and its `fstat`.
const BUDGET_LOOKUP_COLD: u64 = 5;
/// Per CREATE (GUARDED) of a new file: the directory's `fstat` (its check and the `wcc_data`
/// before), `openat` (`O_CREAT | O_EXCL`, as the caller), the new file's `fstat` (its
/// attributes in the reply), its handle (`name_to_handle_at`), the directory's `fstat` after.
/// Linux nfsd: `fh_fill_pre_attrs`, the creation, `fh_compose`, `fh_fill_post_attrs` and the
/// new file's getattr.
const BUDGET_CREATE: u64 = 5;
/// Per CREATE EXCLUSIVE of a new file (what the Linux client sends for `open(O_CREAT |
/// O_EXCL)`, as `tar -x` opens each file): as CREATE, the verifier stored as the file's times
/// (`utimensat`) before the new file's one `fstat`.
const BUDGET_CREATE_EXCLUSIVE: u64 = 6;
/// Per MKDIR: as CREATE, the directory made by `mkdirat` and then opened (`openat`, `O_PATH`).
const BUDGET_MKDIR: u64 = 6;
/// Per GETACL of a file open for I/O (since its CREATE): `fstat`, the access ACL of the
/// descriptor (`fgetxattr`).
const BUDGET_GETACL_FILE: u64 = 2;
/// Per GETACL of a directory (the Linux client sends one after each creation in it): `fstat`,
/// the access and default ACLs of the descriptor (`fgetxattr`, the directory opened read-only
/// by the first GETACL and kept so: one `openat` and the `close` of the `O_PATH` descriptor it
/// replaces among the phase's calls).
const BUDGET_GETACL_DIR: u64 = 3;
/// Per GETACL of a file only looked up (its descriptor `O_PATH`): `fstat`, the access ACL
/// through the descriptor's /proc link (`getxattr`).
const BUDGET_GETACL_COLD: u64 = 2;
/// Per SETATTR of the mode: `fstat` (the guard and the `wcc_data` before), `fchmod` (the
/// file is open for I/O since its CREATE), `fstat` after.
const BUDGET_SETATTR: u64 = 3;
/// Per WRITE (unstable) by its owner to a file open for writing: `fstat` (the object still
/// linked), `FS_IOC_GETFLAGS` (not immutable: then the owner needs no permission check, as in
/// Linux nfsd), `pwrite`, `fstat` after (a WRITE's `wcc_data` carries no attributes before):
/// all four asked of the descriptor, no path walked.
const BUDGET_WRITE: u64 = 4;
/// Per READ by the file's owner of a whole small file: `fstat` (the object still linked), one
/// `pread` (short: the end of the file), `fstat` after (the attributes in the reply); the owner
/// reads without a permission check, as in Linux nfsd.
const BUDGET_READ: u64 = 3;
/// Per LINK: the object's and the directory's `fstat`, the caller's write and search
/// permission on the directory (`faccessat2`), `linkat`, the directory's and the object's
/// `fstat` after.
const BUDGET_LINK: u64 = 6;
/// Per RENAME within one directory to a new name: the directory's `fstat` once for both
/// `wcc_data`, the target name's handle (none here; a replaced object's cached descriptor is
/// dropped), `renameat`, the directory's `fstat` after.
const BUDGET_RENAME: u64 = 4;
/// Per READDIRPLUS of one page whose entries' descriptors the server holds (it made or looked
/// them up): one `statx` per entry but `.`, its handle from the descriptor cache; beyond that
/// the listing's own calls: the directory's `fstat` before, in the store and after, `openat`,
/// `lseek`, two `getdents64`, `close`, the handle of `..`.
const BUDGET_READDIRPLUS_PAGE: u64 = 8;
/// Per REMOVE: the directory's `fstat` before, the name's handle (its cached descriptor is
/// dropped: `close`), `unlinkat`, the directory's `fstat` after.
const BUDGET_REMOVE: u64 = 5;

/// Whether the test can run (root); says why not otherwise.
fn runnable() -> bool {
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: the directory backend and the seccomp counter need root");
    }
    root
}

/// A daemon over `dir` (a fresh one keeps no descriptor of what an earlier one opened);
/// `on_reactor`: `DaemonOptions::getattr_on_reactor` and `dir_calls_on_reactor` both.
fn rig_with(dir: &std::path::Path, on_reactor: bool) -> Rig {
    let o = DaemonOptions {
        dir_cache: 1 << 16,
        getattr_on_reactor: on_reactor,
        dir_calls_on_reactor: on_reactor,
        ..options(Backend::Dir(dir.to_path_buf()))
    };
    Rig::with(o, None)
}

/// A daemon over `dir` with the default options: the rig's calls act as root, the daemon's
/// own identity, so they are served on the reactor.
fn rig(dir: &std::path::Path) -> Rig {
    let d = DaemonOptions::default();
    assert!(d.getattr_on_reactor && d.dir_calls_on_reactor);
    rig_with(dir, true)
}

/// One phase's counts and times.
struct Phase {
    name: &'static str,
    calls: u64,
    fs: Vec<(&'static str, u64)>,
    fs_total: u64,
    sched_total: u64,
    threads: Vec<RoleCalls>,
    /// File system calls per thread role.
    fs_threads: Vec<RoleCalls>,
    wall_us: f64,
    cpu_us: f64,
}

/// Process CPU time (user + system) in microseconds.
fn cpu_us() -> f64 {
    // SAFETY: an all-zero rusage is valid; the kernel fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is writable.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 * 1e6 + v.tv_usec as f64;
    t(r.ru_utime) + t(r.ru_stime)
}

/// Runs `f` (which makes `calls` calls), counting with `c` when given.
fn phase(c: Option<&Counter>, name: &'static str, calls: u64, f: impl FnOnce()) -> Phase {
    let before: Option<Snapshot> = c.map(Counter::snapshot);
    let (t0, c0) = (Instant::now(), cpu_us());
    f();
    let (wall, cpu) = (t0.elapsed().as_secs_f64() * 1e6, cpu_us() - c0);
    let (fs, fs_total, sched_total, threads, fs_threads) = match (c, before) {
        (Some(c), Some(b)) => {
            let now = c.snapshot();
            let fs = now
                .since(&b)
                .into_iter()
                .filter(|(n, _)| FS.iter().any(|(m, _)| m == n))
                .collect();
            let threads = now.by_thread_since(&b, SCHED);
            let fs_threads = now.by_thread_since(&b, FS);
            let totals = (now.total_since(&b, FS), now.total_since(&b, SCHED));
            (fs, totals.0, totals.1, threads, fs_threads)
        }
        _ => (Vec::new(), 0, 0, Vec::new(), Vec::new()),
    };
    Phase {
        name,
        calls: calls.max(1),
        fs,
        fs_total,
        sched_total,
        threads,
        fs_threads,
        wall_us: wall / calls.max(1) as f64,
        cpu_us: cpu / calls.max(1) as f64,
    }
}

/// GETACL (NFSACL) of `fh`, both ACLs and their counts asked, as the Linux client asks; the
/// call must succeed.
fn getacl(r: &Rig, fh: &Fh) {
    let mut buf = [0u8; 256];
    let mut w = XdrWriter::new(&mut buf);
    encode_getacl_args(&mut w, fh, 0xf).expect("encode");
    let n = w.finish();
    let reply = r.nfs.call_as(PROGRAM, VERSION, GETACL, &buf[..n]);
    let reply = reply.expect("GETACL");
    let (st, _, _) = decode_getacl_res(reply.results()).expect("decode");
    assert_eq!(st, Nfsstat3::OK);
}

/// Creates `n` files in directory `d`; their handles.
fn make_files(r: &Rig, d: &Fh, n: usize) -> Vec<Fh> {
    (0..n)
        .map(|i| {
            let how = CreateHow::Guarded(Sattr3::default());
            r.nfs.create(d, format!("f{i}").as_bytes(), how).unwrap()
        })
        .collect()
}

/// The phases of one run over `n` files (counted when `c`).
fn run(c: Option<&Counter>, n: usize) -> Vec<Phase> {
    let dir = scratch_dir("dircost");
    let r = rig(&dir);
    let mut out = Vec::new();
    let n64 = n as u64;
    let d = r.nfs.mkdir(&r.root, b"tree", Sattr3::default()).unwrap();
    let mut fhs = Vec::new();
    out.push(phase(c, "CREATE", n64, || fhs = make_files(&r, &d, n)));
    let x = r.nfs.mkdir(&r.root, b"excl", Sattr3::default()).unwrap();
    out.push(phase(c, "CREATE exclusive", n64, || {
        for i in 0..n {
            let how = CreateHow::Exclusive((i as u64).to_be_bytes());
            r.nfs.create(&x, format!("x{i}").as_bytes(), how).unwrap();
        }
    }));
    let name = |i: usize| format!("f{i}");
    out.push(phase(c, "LOOKUP", n64, || {
        for i in 0..n {
            r.nfs.lookup(&d, name(i).as_bytes()).unwrap();
        }
    }));
    out.push(phase(c, "GETATTR", n64, || {
        fhs.iter().for_each(|f| _ = r.nfs.getattr(f).unwrap())
    }));
    out.push(phase(c, "ACCESS", n64, || {
        let want = access::READ | access::MODIFY | access::EXTEND | access::EXECUTE;
        fhs.iter().for_each(|f| _ = r.nfs.access(f, want).unwrap())
    }));
    out.push(phase(c, "GETACL of a file", n64, || {
        fhs.iter().for_each(|f| getacl(&r, f))
    }));
    out.push(phase(c, "GETACL of a directory", n64, || {
        (0..n).for_each(|_| getacl(&r, &d))
    }));
    let mut entries = 0u64;
    out.push(phase(c, "READDIRPLUS entry", n64 + 2, || {
        entries = r.nfs.readdir_all(&d, 32 * 1024, true).unwrap().len() as u64;
    }));
    assert_eq!(entries, n64 + 2);
    out.push(phase(c, "SETATTR mode", n64, || {
        let set = Sattr3 {
            mode: Some(0o600),
            ..Sattr3::default()
        };
        fhs.iter()
            .for_each(|f| _ = r.nfs.setattr(f, &set, None).unwrap())
    }));
    out.push(phase(c, "WRITE append", n64, || {
        for f in &fhs {
            r.nfs
                .write(f, 0, b"appended", StableHow::Unstable, false)
                .unwrap();
        }
    }));
    out.push(phase(c, "READ by the owner", n64, || {
        for f in &fhs {
            assert_eq!(r.nfs.read(f, 0, 64, false).unwrap().0, b"appended");
        }
    }));
    // A second server over the same tree: nothing open yet, as after a restart or a walk of
    // a tree larger than the cache.
    let r2 = rig(&dir);
    let d2 = r2.nfs.lookup(&r2.root, b"tree").unwrap();
    let mut fhs2 = Vec::new();
    out.push(phase(c, "LOOKUP cold", n64, || {
        for i in 0..n {
            fhs2.push(r2.nfs.lookup(&d2, name(i).as_bytes()).unwrap());
        }
    }));
    out.push(phase(c, "GETATTR after cold LOOKUP", n64, || {
        fhs2.iter().for_each(|f| _ = r2.nfs.getattr(f).unwrap())
    }));
    out.push(phase(c, "GETACL after cold LOOKUP", n64, || {
        fhs2.iter().for_each(|f| getacl(&r2, f))
    }));
    r2.stop_keep();
    // Every call handed to a worker (`--getattr-in-worker --dir-calls workers`), for
    // comparison.
    let r3 = rig_with(&dir, false);
    let d3 = r3.nfs.lookup(&r3.root, b"tree").unwrap();
    let fhs3: Vec<Fh> = (0..n)
        .map(|i| r3.nfs.lookup(&d3, name(i).as_bytes()).unwrap())
        .collect();
    out.push(phase(c, "GETATTR in worker", n64, || {
        fhs3.iter().for_each(|f| _ = r3.nfs.getattr(f).unwrap())
    }));
    let w = r3.nfs.mkdir(&r3.root, b"w", Sattr3::default()).unwrap();
    out.push(phase(c, "CREATE in worker", n64, || {
        _ = make_files(&r3, &w, n)
    }));
    r3.stop_keep();
    out.extend(names_phases(c, &r, &d, &fhs));
    out.push(phase(c, "REMOVE", n64, || {
        for i in 0..n {
            r.nfs.remove(&d, format!("g{i}").as_bytes()).unwrap();
        }
    }));
    r.stop_keep();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// MKDIR of one directory per file in a directory of its own, LINK of each file `f{i}` of
/// `d` (`fhs`) as `l{i}`, RENAME of each to `g{i}`.
fn names_phases(c: Option<&Counter>, r: &Rig, d: &Fh, fhs: &[Fh]) -> Vec<Phase> {
    let n = fhs.len();
    let m = r.nfs.mkdir(&r.root, b"dirs", Sattr3::default()).unwrap();
    let mut out = vec![phase(c, "MKDIR", n as u64, || {
        for i in 0..n {
            let name = format!("m{i}");
            r.nfs.mkdir(&m, name.as_bytes(), Sattr3::default()).unwrap();
        }
    })];
    out.push(phase(c, "LINK", n as u64, || {
        for (i, f) in fhs.iter().enumerate() {
            r.nfs.link(f, d, format!("l{i}").as_bytes()).unwrap();
        }
    }));
    out.push(phase(c, "RENAME", n as u64, || {
        for i in 0..n {
            let (from, to) = (format!("f{i}"), format!("g{i}"));
            r.nfs.rename(d, from.as_bytes(), d, to.as_bytes()).unwrap();
        }
    }));
    out
}

/// Runs `f` on a thread of its own with a counter installed (the filter stays with that
/// thread and the server threads it starts); `None` when the filter cannot be installed.
fn counted<T: Send + 'static>(
    watch: &'static [(&'static str, libc::c_long)],
    f: impl FnOnce(&Counter) -> T + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || match Counter::install(watch) {
        Ok(c) => Some(f(&c)),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    })
    .join()
    .expect("counted thread")
}

#[test]
fn accepts_metadata_calls_within_their_system_call_budget() {
    if !runnable() {
        return;
    }
    let Some(phases) = counted(FS, |c| run(Some(c), 100)) else {
        return;
    };
    let per = |name: &str| {
        let p = phases.iter().find(|p| p.name == name).expect("phase");
        (p.fs_total as f64 / p.calls as f64, p.fs.clone())
    };
    for (name, budget) in [
        ("GETATTR", BUDGET_GETATTR),
        ("ACCESS", BUDGET_ACCESS),
        ("GETACL of a file", BUDGET_GETACL_FILE),
        ("GETACL after cold LOOKUP", BUDGET_GETACL_COLD),
        ("LOOKUP", BUDGET_LOOKUP),
        ("LOOKUP cold", BUDGET_LOOKUP_COLD),
        ("GETATTR after cold LOOKUP", BUDGET_GETATTR),
        ("CREATE", BUDGET_CREATE),
        ("CREATE exclusive", BUDGET_CREATE_EXCLUSIVE),
        ("SETATTR mode", BUDGET_SETATTR),
        ("WRITE append", BUDGET_WRITE),
        ("READ by the owner", BUDGET_READ),
        ("MKDIR", BUDGET_MKDIR),
        ("LINK", BUDGET_LINK),
        ("RENAME", BUDGET_RENAME),
        ("REMOVE", BUDGET_REMOVE),
    ] {
        let (got, which) = per(name);
        assert!(
            got <= budget as f64,
            "{name}: {got} file system calls per call, budget {budget}: {which:?}"
        );
    }
    let dir = phases.iter().find(|p| p.name == "GETACL of a directory");
    let dir = dir.expect("phase");
    assert!(
        dir.fs_total <= dir.calls * BUDGET_GETACL_DIR + 2,
        "GETACL of a directory: {} file system calls for {} calls: {:?}",
        dir.fs_total,
        dir.calls,
        dir.fs
    );
    // Descriptors are asked directly, never through a path walk (but the ACL of an `O_PATH`
    // file); the owner's READ and WRITE ask no permission check (`faccessat2`), as Linux
    // nfsd's owner override.
    for p in &phases {
        let walks = p.fs.iter().filter(|(n, _)| PATH_WALKS.contains(n));
        let walks: Vec<_> = walks.collect();
        let allowed = p.name == "GETACL after cold LOOKUP";
        assert!(walks.is_empty() || allowed, "{}: {:?}", p.name, p.fs);
    }
    for name in ["WRITE append", "READ by the owner"] {
        let (_, which) = per(name);
        let checks = which.iter().find(|(n, _)| *n == "faccessat2");
        assert_eq!(checks, None, "{name}: {which:?}");
    }
    let plus = phases.iter().find(|p| p.name == "READDIRPLUS entry");
    let plus = plus.expect("phase");
    assert!(
        plus.fs_total <= plus.calls + BUDGET_READDIRPLUS_PAGE,
        "READDIRPLUS: {} file system calls for {} entries: {:?}",
        plus.fs_total,
        plus.calls,
        plus.fs
    );
    // The rig's calls (root, the daemon's own identity) are served on the reactor, with no
    // identity switch: no worker touches them, and no phase switches (`setgroups`,
    // `setfsgid`, `setfsuid`) but those of a worker's first call as a caller.
    let on = |name: &str, role: &str| {
        let p = phases.iter().find(|p| p.name == name).expect("phase");
        let t = p.fs_threads.iter().filter(|(r, _, _)| r.contains(role));
        t.map(|(_, n, _)| n).sum::<u64>()
    };
    for p in &phases {
        let switches = p.fs.iter().filter(|(n, _)| SWITCH.contains(n));
        let switches: u64 = switches.map(|(_, k)| k).sum();
        if p.name.ends_with("in worker") {
            assert!(
                switches <= 3 * 2,
                "{}: {switches} identity switches",
                p.name
            );
            continue;
        }
        assert_eq!(on(p.name, "worker"), 0, "{} ran on a worker", p.name);
        assert_eq!(switches, 0, "{}: identity switched on the reactor", p.name);
    }
    assert_eq!(on("GETATTR in worker", "worker"), 100);
    assert_eq!(on("GETATTR in worker", "nfsd"), 0);
    assert_eq!(on("CREATE in worker", "nfsd"), 0);
    assert!(on("CREATE in worker", "worker") >= 100 * BUDGET_CREATE - 100);
}

/// Calls that walk a path where a descriptor would do: `newfstatat` (the C library's `fstat`
/// asks it with an empty name, copied in and looked up; the `fstat` system call reads the
/// descriptor's inode directly), the extended attribute calls by path (through an object's
/// /proc link: `fgetxattr` and its kin ask the descriptor).
const PATH_WALKS: [&str; 4] = ["newfstatat", "getxattr", "setxattr", "removexattr"];

/// The system calls of an identity switch.
const SWITCH: [&str; 3] = ["setgroups", "setfsgid", "setfsuid"];

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn measure_dir_metadata_calls() {
    if !runnable() {
        return;
    }
    let n: usize = std::env::var("RPCRDMA_DIRCOST_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let watch: Vec<_> = FS.iter().chain(SCHED).copied().collect();
    let watch: &'static [_] = Box::leak(watch.into_boxed_slice());
    let Some(counts) = counted(watch, move |c| run(Some(c), n)) else {
        return;
    };
    let times = run(None, n);
    println!("dir backend, {n} files: per call");
    println!(
        "{:<28} {:>8} {:>8} {:>9} {:>9}  file system calls",
        "call", "fs", "sched", "wall µs", "cpu µs"
    );
    for (p, t) in counts.iter().zip(&times) {
        let each: Vec<String> =
            p.fs.iter()
                .map(|(k, v)| format!("{k} {:.2}", *v as f64 / p.calls as f64))
                .collect();
        println!(
            "{:<28} {:>8.2} {:>8.2} {:>9.1} {:>9.1}  {}",
            p.name,
            p.fs_total as f64 / p.calls as f64,
            p.sched_total as f64 / p.calls as f64,
            t.wall_us,
            t.cpu_us,
            each.join(", ")
        );
        for (role, total, by) in &p.threads {
            let by: Vec<String> = by
                .iter()
                .map(|(k, v)| format!("{k} {:.2}", *v as f64 / p.calls as f64))
                .collect();
            let per = *total as f64 / p.calls as f64;
            println!("{:>30} {role}: {per:.2} ({})", "", by.join(", "));
        }
    }
}
