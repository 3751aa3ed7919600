//! Bad input from a client, through `rpcrdma-nfsd`'s RPC-over-RDMA server on the software
//! provider: an unknown procedure, version or program gets the RPC error RFC 5531 names
//! (PROC_UNAVAIL, PROG_MISMATCH 3..3, PROG_UNAVAIL); malformed arguments (truncated, bad
//! booleans and enums, names with `/` or NUL or empty, handles longer than 64 octets, a WRITE
//! count other than its data's length) get GARBAGE_ARGS, as Linux nfsd answers them; random
//! and mutated arguments for every procedure never stop the server, and the GARBAGE_ARGS
//! counter counts them.
//!
//! Normal operation: calls go through [`NfsClient::call_as`] with hand-built XDR. Recovery:
//! nothing to recover; after every hostile batch an ordinary GETATTR must still work.

mod nfsd_common;

use nfsd_common::{on_dir, on_memory, Rig, Rng};
use rpcrdma_apps::nfs::types::{CreateHow, Fh, Ftype3, Sattr3, StableHow, Time3};
use rpcrdma_apps::nfs::v3::client::NfsClient;
use rpcrdma_apps::nfs::v3::proto::{encode_args, proc3, Args3, NFS_PROGRAM};
use rpcrdma_engine::rpc::AcceptStat;
use rpcrdma_engine::xdr::XdrWriter;
use rpcrdma_poller::ClientError;

/// Encodes with `f` into a fresh buffer.
fn enc(f: impl FnOnce(&mut XdrWriter<'_>)) -> Vec<u8> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut w = XdrWriter::new(&mut buf);
    f(&mut w);
    let n = w.finish();
    buf.truncate(n);
    buf
}

fn args(a: &Args3<'_>) -> Vec<u8> {
    enc(|w| encode_args(w, a).expect("encode"))
}

/// The outcome of an NFSv3 call with raw arguments: `Ok(())` when the server ran it (any
/// NFS status), the RPC error otherwise.
fn raw(c: &NfsClient, p: u32, bytes: &[u8]) -> Result<(), ClientError> {
    c.call_as(NFS_PROGRAM, 3, p, bytes).map(drop)
}

const GARBAGE: Result<(), ClientError> = Err(ClientError::Rpc(AcceptStat::GarbageArgs));

// ---------------------------------------------------------------------------------------------
// RPC-level dispatch errors

fn dispatch_errors(r: &Rig) {
    let fh = args(&Args3::Getattr { fh: r.root });
    for p in [22, 23, 1000, u32::MAX] {
        assert_eq!(
            raw(&r.nfs, p, &fh),
            Err(ClientError::Rpc(AcceptStat::ProcUnavail)),
            "procedure {p}"
        );
    }
    for vers in [0, 1, 2, 4, u32::MAX] {
        for p in [proc3::NULL, proc3::GETATTR, 99] {
            assert_eq!(
                r.nfs.call_as(NFS_PROGRAM, vers, p, &fh).map(drop),
                Err(ClientError::Rpc(AcceptStat::ProgMismatch {
                    low: 3,
                    high: 3
                })),
                "version {vers} procedure {p}"
            );
        }
    }
    // MOUNT is served over TCP, not here; anything but NFS and NFSACL (nfsd_acl.rs) unknown.
    for prog in [0, 100_004, 100_005, 100_228, u32::MAX] {
        assert_eq!(
            r.nfs.call_as(prog, 3, proc3::GETATTR, &fh).map(drop),
            Err(ClientError::Rpc(AcceptStat::ProgUnavail)),
            "program {prog}"
        );
    }
    // NULL of version 3 is answered whatever its arguments.
    assert_eq!(raw(&r.nfs, proc3::NULL, &[1, 2, 3, 4, 5, 6, 7, 8]), Ok(()));
    assert!(r.nfs.getattr(&r.root).is_ok());
}

#[test]
fn rejects_unknown_procedure_version_and_program_memory() {
    on_memory(dispatch_errors);
}

#[test]
fn rejects_unknown_procedure_version_and_program_dir() {
    on_dir("hdispatch", dispatch_errors);
}

// ---------------------------------------------------------------------------------------------
// Hand-built malformed arguments

/// Every procedure's arguments, well-formed, naming objects under `root` (ordinary results
/// whatever they are: the point is that they decode).
fn valid_args(root: &Fh) -> Vec<(u32, Vec<u8>)> {
    let fh = *root;
    let s = Sattr3 {
        mode: Some(0o644),
        atime: rpcrdma_apps::nfs::types::SetTime::ServerTime,
        ..Sattr3::default()
    };
    let t = Time3 {
        seconds: 1,
        nseconds: 2,
    };
    let all = [
        Args3::Getattr { fh },
        Args3::Setattr {
            fh,
            attr: s,
            guard: Some(t),
        },
        Args3::Lookup {
            dir: fh,
            name: b"v",
        },
        Args3::Access { fh, access: 0x3f },
        Args3::Readlink { fh },
        Args3::Read {
            fh,
            offset: 0,
            count: 16,
        },
        Args3::Write {
            fh,
            offset: 0,
            count: 8,
            stable: StableHow::Unstable,
            data: b"8 octets",
        },
        Args3::Create {
            dir: fh,
            name: b"v",
            how: CreateHow::Unchecked(s),
        },
        Args3::Mkdir {
            dir: fh,
            name: b"vd",
            attr: s,
        },
        Args3::Symlink {
            dir: fh,
            name: b"vl",
            attr: s,
            target: b"tgt",
        },
        Args3::Mknod {
            dir: fh,
            name: b"vn",
            ftype: Ftype3::Chr,
            attr: s,
            rdev: (1, 2),
        },
        Args3::Remove {
            dir: fh,
            name: b"none",
        },
        Args3::Rmdir {
            dir: fh,
            name: b"none",
        },
        Args3::Rename {
            from_dir: fh,
            from_name: b"none",
            to_dir: fh,
            to_name: b"other",
        },
        Args3::Link {
            fh,
            dir: fh,
            name: b"vk",
        },
        Args3::Readdir {
            dir: fh,
            cookie: 0,
            verf: [0; 8],
            count: 1024,
        },
        Args3::Readdirplus {
            dir: fh,
            cookie: 0,
            verf: [0; 8],
            dircount: 512,
            maxcount: 2048,
        },
        Args3::Fsstat { fh },
        Args3::Fsinfo { fh },
        Args3::Pathconf { fh },
        Args3::Commit {
            fh,
            offset: 0,
            count: 0,
        },
    ];
    all.iter().map(|a| (a.proc_num(), args(a))).collect()
}

fn truncated_args(r: &Rig) {
    for (p, full) in valid_args(&r.root) {
        assert_eq!(raw(&r.nfs, p, &full), Ok(()), "procedure {p} well-formed");
        for n in 0..full.len() {
            assert_eq!(
                raw(&r.nfs, p, &full[..n]),
                GARBAGE,
                "procedure {p} cut to {n} of {} octets",
                full.len()
            );
        }
        // Octets after the arguments are ignored (as Linux nfsd ignores them).
        let mut longer = full.clone();
        longer.extend_from_slice(&[0xff; 12]);
        assert_eq!(raw(&r.nfs, p, &longer), Ok(()), "procedure {p} with a tail");
    }
    assert!(r.nfs.getattr(&r.root).is_ok());
}

#[test]
fn rejects_truncated_arguments_of_every_procedure_memory() {
    on_memory(truncated_args);
}

#[test]
fn rejects_truncated_arguments_of_every_procedure_dir() {
    on_dir("htrunc", truncated_args);
}

fn put_fh(w: &mut XdrWriter<'_>, fh: &Fh) {
    w.put_opaque(fh.as_bytes()).unwrap();
}

/// `sattr3` with every field absent.
fn no_sattr(w: &mut XdrWriter<'_>) {
    for _ in 0..6 {
        w.put_u32(0).unwrap();
    }
}

/// Malformed arguments, each with what it is.
fn malformed(root: &Fh) -> Vec<(&'static str, u32, Vec<u8>)> {
    let fh = *root;
    let mut v = vec![
        (
            "handle of 65 octets",
            proc3::GETATTR,
            enc(|w| w.put_opaque(&[7; 65]).unwrap()),
        ),
        (
            "handle length 2^32-1",
            proc3::GETATTR,
            enc(|w| w.put_u32(u32::MAX).unwrap()),
        ),
        (
            "SETATTR set_mode = 2",
            proc3::SETATTR,
            enc(|w| {
                put_fh(w, &fh);
                w.put_u32(2).unwrap();
                w.put_u32(0o644).unwrap();
                for _ in 0..5 {
                    w.put_u32(0).unwrap();
                }
                w.put_u32(0).unwrap();
            }),
        ),
        (
            "SETATTR time_how = 3",
            proc3::SETATTR,
            enc(|w| {
                put_fh(w, &fh);
                for _ in 0..4 {
                    w.put_u32(0).unwrap();
                }
                w.put_u32(3).unwrap();
                w.put_u32(0).unwrap();
                w.put_u32(0).unwrap();
            }),
        ),
        (
            "SETATTR guard check = 7",
            proc3::SETATTR,
            enc(|w| {
                put_fh(w, &fh);
                no_sattr(w);
                w.put_u32(7).unwrap();
                w.put_u64(0).unwrap();
            }),
        ),
        (
            "LOOKUP name of 4097 octets",
            proc3::LOOKUP,
            enc(|w| {
                put_fh(w, &fh);
                w.put_opaque(&[b'a'; 4097]).unwrap();
            }),
        ),
        (
            "CREATE createmode = 3",
            proc3::CREATE,
            enc(|w| {
                put_fh(w, &fh);
                w.put_opaque(b"c").unwrap();
                w.put_u32(3).unwrap();
                no_sattr(w);
            }),
        ),
        (
            "MKNOD ftype = 0",
            proc3::MKNOD,
            enc(|w| {
                put_fh(w, &fh);
                w.put_opaque(b"n").unwrap();
                w.put_u32(0).unwrap();
            }),
        ),
        (
            "MKNOD ftype = 8",
            proc3::MKNOD,
            enc(|w| {
                put_fh(w, &fh);
                w.put_opaque(b"n").unwrap();
                w.put_u32(8).unwrap();
                no_sattr(w);
            }),
        ),
        (
            "WRITE stable_how = 3",
            proc3::WRITE,
            enc(|w| {
                put_fh(w, &fh);
                w.put_u64(0).unwrap();
                w.put_u32(4).unwrap();
                w.put_u32(3).unwrap();
                w.put_opaque(b"data").unwrap();
            }),
        ),
        (
            "SYMLINK target of 4097 octets",
            proc3::SYMLINK,
            enc(|w| {
                put_fh(w, &fh);
                w.put_opaque(b"s").unwrap();
                no_sattr(w);
                w.put_opaque(&[b't'; 4097]).unwrap();
            }),
        ),
        (
            "READDIR verifier cut short",
            proc3::READDIR,
            enc(|w| {
                put_fh(w, &fh);
                w.put_u64(0).unwrap();
                w.put_u32(0).unwrap();
            }),
        ),
    ];
    // WRITE count other than the data's length, and data longer than what follows.
    for (count, len, data) in [(10u32, 4u32, 4usize), (4, 8, 8), (0, 4, 4), (1000, 1000, 4)] {
        v.push((
            "WRITE count / length mismatch",
            proc3::WRITE,
            enc(|w| {
                put_fh(w, &fh);
                w.put_u64(0).unwrap();
                w.put_u32(count).unwrap();
                w.put_u32(2).unwrap();
                w.put_u32(len).unwrap();
                w.put_fixed_opaque(&vec![b'd'; data]).unwrap();
            }),
        ));
    }
    v
}

/// Names no `filename3` may be (Linux nfsd's `svcxdr_decode_filename3`).
const BAD_NAMES: [&[u8]; 6] = [b"", b"a/b", b"/", b"a\0b", b"\0", b"dir/"];

/// Every name-taking procedure with `name` in each of its name positions.
fn with_bad_name(root: &Fh, name: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let (fh, ok) = (*root, &b"ok"[..]);
    let s = Sattr3::default();
    let all = [
        Args3::Lookup { dir: fh, name },
        Args3::Create {
            dir: fh,
            name,
            how: CreateHow::Guarded(s),
        },
        Args3::Mkdir {
            dir: fh,
            name,
            attr: s,
        },
        Args3::Symlink {
            dir: fh,
            name,
            attr: s,
            target: b"t",
        },
        Args3::Mknod {
            dir: fh,
            name,
            ftype: Ftype3::Fifo,
            attr: s,
            rdev: (0, 0),
        },
        Args3::Remove { dir: fh, name },
        Args3::Rmdir { dir: fh, name },
        Args3::Rename {
            from_dir: fh,
            from_name: name,
            to_dir: fh,
            to_name: ok,
        },
        Args3::Rename {
            from_dir: fh,
            from_name: ok,
            to_dir: fh,
            to_name: name,
        },
        Args3::Link { fh, dir: fh, name },
    ];
    all.iter().map(|a| (a.proc_num(), args(a))).collect()
}

fn malformed_args(r: &Rig) {
    let before = r.counter("errors.GARBAGE_ARGS");
    let mut sent = 0;
    for (what, p, bytes) in malformed(&r.root) {
        assert_eq!(raw(&r.nfs, p, &bytes), GARBAGE, "{what}");
        sent += 1;
    }
    for name in BAD_NAMES {
        for (p, bytes) in with_bad_name(&r.root, name) {
            assert_eq!(
                raw(&r.nfs, p, &bytes),
                GARBAGE,
                "procedure {p} name {name:?}"
            );
            sent += 1;
        }
    }
    assert_eq!(r.counter("errors.GARBAGE_ARGS") - before, sent);
    // Nothing was created by any of them.
    let all = r.nfs.readdir_all(&r.root, 4096, false).unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|e| e.name.clone())
        .filter(|n| n != b"." && n != b"..")
        .collect();
    assert!(names.is_empty(), "{names:?}");
    assert!(r.nfs.getattr(&r.root).is_ok());
}

#[test]
fn rejects_malformed_arguments_and_bad_names_with_garbage_args_memory() {
    on_memory(malformed_args);
}

#[test]
fn rejects_malformed_arguments_and_bad_names_with_garbage_args_dir() {
    on_dir("hmalformed", malformed_args);
}

// ---------------------------------------------------------------------------------------------
// Random and mutated arguments

/// `calls` random calls: random octets (any length, aligned or not) for a random procedure,
/// or (with `mutate`) a valid encoding with a few octets changed or cut. Returns the GARBAGE_ARGS answers seen.
fn storm(r: &Rig, seed: u64, calls: usize, mutate: bool) -> u64 {
    let valid = valid_args(&r.root);
    let mut rng = Rng(seed);
    let mut garbage = 0;
    for i in 0..calls {
        let p = rng.below(22) as u32;
        let bytes = if mutate && rng.below(3) != 0 {
            let mut b = valid[(p as usize).saturating_sub(1) % valid.len()]
                .1
                .clone();
            for _ in 0..=rng.below(3) {
                let at = rng.below(b.len() as u64) as usize;
                b[at] = rng.next() as u8;
            }
            if rng.below(4) == 0 {
                b.truncate(rng.below(b.len() as u64 + 1) as usize);
            }
            b
        } else {
            // Now and then longer than the inline threshold (a Position-Zero long call).
            let n = match rng.below(16) {
                0 => 4096 + rng.below(8192) as usize,
                _ => rng.below(400) as usize,
            };
            rng.bytes(n)
        };
        match raw(&r.nfs, p, &bytes) {
            Ok(()) => {}
            Err(ClientError::Rpc(AcceptStat::GarbageArgs)) => garbage += 1,
            Err(e) => panic!("call {i} (procedure {p}, {} octets): {e:?}", bytes.len()),
        }
    }
    garbage
}

#[test]
fn survives_random_and_mutated_arguments_for_every_procedure_memory() {
    on_memory(|r| {
        let before = r.counter("errors.GARBAGE_ARGS");
        let g = storm(r, 0x9e37_79b9_7f4a_7c15, 300, false) + storm(r, 7, 400, true);
        assert!(g >= 250, "most random arguments are garbage: {g}");
        assert_eq!(r.counter("errors.GARBAGE_ARGS") - before, g);
        assert!(r.nfs.getattr(&r.root).is_ok(), "still serving");
        assert!(r.nfs.null().is_ok());
        assert!(
            r.counter("transport.long_calls") > 0,
            "some went as long calls"
        );
    });
}

#[test]
fn survives_random_arguments_for_every_procedure_dir() {
    // Random octets only: mutating a valid kernel handle could name another file of the
    // file system holding the scratch directory.
    on_dir("hrandom", |r| {
        let before = r.counter("errors.GARBAGE_ARGS");
        let g = storm(r, 0x1234_5678, 300, false);
        assert!(g >= 150, "{g}");
        assert_eq!(r.counter("errors.GARBAGE_ARGS") - before, g);
        assert!(r.nfs.getattr(&r.root).is_ok(), "still serving");
    });
}
