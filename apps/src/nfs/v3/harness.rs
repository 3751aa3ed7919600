//! The NFSv3 server driven one call at a time outside any connection (through
//! [`serve_detached`]): a store exported read-write to everyone (a fresh memory store, or a
//! directory: [`Harness::with_store`]), holding a directory `d`, a file `f` of 100 octets, a
//! symbolic link `l` whose target leads out of the export (`../outside/secret`) and a FIFO
//! `p`, and the wire handles of those and of a few handles a client could send but the
//! server must refuse. The `nfs3_server` fuzz target runs every input against a new
//! [`Harness`], and `apps/tests/nfs3_server_fuzz_seeds.rs` checks its seeds' answers.
//!
//! Normal operation: [`Harness::call`] takes a call as the fuzz target's input lays it out
//! (a first octet choosing the procedure and the credential, then the arguments, with handle
//! markers) and returns the results the server wrote. Recovery: none needed; a call the
//! server refuses returns the [`Reject`] a connection would have answered with.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use rpcrdma_engine::rpc::{AuthFlavor, OpaqueAuth};
use rpcrdma_poller::program::{serve_detached, ReplyBuilder, Request};
use rpcrdma_poller::{CallTransport, Handler, Reject};

use super::nfsacl::{self, NfsAcl};
use super::proto::{self, proc3, DecodeError};
use super::server::{Nfs3, NfsConfig};
use crate::nfs::admit::ExportTable;
use crate::nfs::exports::Exports;
use crate::nfs::handle_mac::HandleKey;
use crate::nfs::identity::Cred;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::{Special, Store};
use crate::nfs::types::{CreateHow, Fh, Nfsstat3, Sattr3, StableHow};

/// How a handle argument is written in a call's arguments: an opaque of four octets
/// `FE FE FE n`, replaced by fixture handle `n % 8` ([`Harness::handle`]).
pub const MARK: [u8; 7] = [0, 0, 0, 4, 0xFE, 0xFE, 0xFE];

/// Where the fixture's symbolic link `l` points: out of the export, to what a test keeps
/// beside it.
pub const LINK_TARGET: &[u8] = b"../outside/secret";

/// Room for a call's results (a READ or READDIR of at most this much is answered whole).
const RESULTS: usize = 64 << 10;

/// A server and its fixture.
pub struct Harness {
    srv: Arc<Nfs3>,
    acl: Arc<NfsAcl>,
    handles: [Fh; 8],
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    /// A new memory store with the fixture, and the server over it.
    pub fn new() -> Harness {
        let opts = MemoryOptions {
            capacity: 8 << 20,
            max_files: 1_000,
            ..MemoryOptions::default()
        };
        Harness::with_store(Arc::new(MemoryStore::new(opts)))
    }

    /// The fixture made in `store` (an empty export), and the server over it.
    ///
    /// # Panics
    ///
    /// When the store refuses to make the fixture (a harness for tests and fuzz targets).
    pub fn with_store(store: Arc<dyn Store>) -> Harness {
        let ex = Exports::parse("/ *(rw,no_root_squash,sec=sys:none)").expect("exports");
        let list = vec![(ex.list()[0].clone(), Arc::clone(&store))];
        let table = ExportTable::new(HandleKey::from_bytes([3; 16]), list).expect("table");
        let share = Arc::clone(&table.shares()[0]);
        let [root, d, f, l, p, gone] = fixture(&*store);
        let seal = |fh: &Fh| share.seal(fh).expect("sealed");
        let mut broken = seal(&root).as_bytes().to_vec();
        if let Some(last) = broken.last_mut() {
            *last ^= 1;
        }
        let handles = [
            seal(&root),
            seal(&d),
            seal(&f),
            seal(&l),
            seal(&p),
            seal(&gone),
            Fh::new(&broken).expect("broken"),
            root,
        ];
        let srv = Nfs3::new(table, None, NfsConfig::default());
        let acl = NfsAcl::new(Arc::clone(&srv));
        Harness { srv, acl, handles }
    }

    /// A fresh world for one fuzz input: a new memory store, or with `beside` the `dir:` store
    /// over its export, emptied first ([`Beside::reset_export`]).
    ///
    /// # Panics
    ///
    /// When the export cannot be emptied or opened (a harness for tests and fuzz targets).
    pub fn fresh(beside: Option<&Beside>) -> Harness {
        let Some(b) = beside else {
            return Harness::new();
        };
        b.reset_export().expect("export");
        let store = crate::nfs::store::dir::DirStore::open(&b.exp()).expect("dir store");
        Harness::with_store(Arc::new(store))
    }

    /// The export table the server serves (for the other services of the same exports: the
    /// lock manager's fuzz target).
    pub fn exports(&self) -> Arc<ExportTable> {
        self.srv.exports()
    }

    /// Makes the server's calls recall the NFSv4.1 delegations registered with `cross`
    /// ([`Nfs3::set_cross`]).
    pub fn set_cross(&self, cross: Arc<crate::nfs::cross_locks::CrossLocks>) {
        self.srv.set_cross(cross);
    }

    /// Fixture handle `n % 8`: the root, `d`, `f`, `l`, `p`, a removed file's (stale), the
    /// root's with its MAC broken, the root's unsealed (as the store made it).
    pub fn handle(&self, n: u8) -> &Fh {
        &self.handles[usize::from(n) % self.handles.len()]
    }

    /// `args` with every [`MARK`] run replaced by the handle it names.
    pub fn with_handles(&self, args: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(args.len() + 64);
        let mut i = 0;
        while i < args.len() {
            match args.get(i..i + 8) {
                Some(run) if run[..7] == MARK => {
                    let b = self.handle(run[7]).as_bytes();
                    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                    out.extend_from_slice(b);
                    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
                    i += 8;
                }
                _ => {
                    out.push(args[i]);
                    i += 1;
                }
            }
        }
        out
    }

    /// Serves one call from `10.0.0.1` on a new thread: procedure `first & 0x1f` modulo 22, as AUTH_SYS
    /// root, uid 1000, uid 1000 with 16 groups or AUTH_NONE (`first >> 5 & 3`), with
    /// arguments `args` (handle markers replaced). The procedure number and the results the
    /// server wrote, or why it refused the call.
    pub fn call(&self, first: u8, args: &[u8]) -> (u32, Result<Vec<u8>, Reject>) {
        let proc_num = u32::from(first & 0x1f) % 22;
        let s = Arc::clone(&self.srv);
        let handler = move |r: &Request<'_>, out: &mut ReplyBuilder<'_>| s.handle(r, out);
        let prog = (proto::NFS_PROGRAM, proto::NFS_V3, proc_num);
        (proc_num, self.serve(prog, first, args, &handler))
    }

    /// As [`Harness::call`], an NFSACL call (program 100227 version 3): procedure GETACL
    /// when `first & 1` is 0, else SETACL.
    pub fn call_acl(&self, first: u8, args: &[u8]) -> (u32, Result<Vec<u8>, Reject>) {
        let proc_num = [nfsacl::GETACL, nfsacl::SETACL][usize::from(first & 1)];
        let s = Arc::clone(&self.acl);
        let handler = move |r: &Request<'_>, out: &mut ReplyBuilder<'_>| s.handle(r, out);
        let prog = (nfsacl::PROGRAM, nfsacl::VERSION, proc_num);
        (proc_num, self.serve(prog, first, args, &handler))
    }

    /// Serves call `(program, version, procedure)` with credential `first >> 5 & 3` and
    /// arguments `args` through `handler`, on a thread of its own.
    fn serve(
        &self,
        (prog, vers, proc_num): (u32, u32, u32),
        first: u8,
        args: &[u8],
        handler: &dyn Handler,
    ) -> Result<Vec<u8>, Reject> {
        let args = self.with_handles(args);
        let body = match (first >> 5) & 3 {
            0 => sys_body(0, 0),
            1 => sys_body(1000, 0),
            2 => sys_body(1000, 16),
            _ => Vec::new(),
        };
        let cred = match body.is_empty() {
            true => OpaqueAuth::NONE,
            false => OpaqueAuth {
                flavor: AuthFlavor::Sys,
                body: &body,
            },
        };
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 700);
        let mut req = Request::detached(proc_num, &args, CallTransport::plain(peer, 1));
        (req.xid, req.prog, req.vers, req.cred) = (1, prog, vers, cred);
        let mut results = vec![0u8; RESULTS];
        // On a thread of its own, as the daemon's reactors and workers serve calls: the
        // `dir:` store leaves a thread acting as the last caller (file system ids, umask),
        // which the caller's thread must not inherit.
        let r = std::thread::scope(|t| {
            t.spawn(|| serve_detached(handler, &req, &mut results))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        });
        r.map(|n| {
            results.truncate(n);
            results
        })
    }
}

/// Makes the fixture in `store`'s (empty) root as root: directory `d`, file `f` of 100
/// octets, symbolic link `l` to [`LINK_TARGET`], FIFO `p`, and a file made and removed; the
/// store's handles of the root and of those, in that order.
///
/// # Panics
///
/// When the store refuses one of them (a harness for tests and fuzz targets).
pub fn fixture(store: &dyn Store) -> [Fh; 6] {
    let (root, cx, none) = (store.root(), Cred::ROOT, Sattr3::default());
    let how = CreateHow::Unchecked(Sattr3::default());
    let d = store.mkdir(&cx, &root, b"d", &none).expect("d");
    let f = store.create(&cx, &root, b"f", &how).expect("f");
    store
        .write(&cx, &f, 0, &[b'x'; 100], StableHow::Unstable)
        .expect("f's data");
    let l = store.symlink(&cx, &root, b"l", LINK_TARGET, &none);
    let p = store.mknod(&cx, &root, b"p", Special::Fifo, &none);
    let gone = store.create(&cx, &root, b"gone", &how).expect("gone");
    store.remove(&cx, &root, b"gone").expect("remove gone");
    [root, d, f, l.expect("l"), p.expect("p"), gone]
}

/// Decodes `results` as procedure `proc_num`'s (READDIR and READDIRPLUS with their listing
/// decoder) and returns the status they carry (NFS3_OK for NULL).
pub fn status_of(proc_num: u32, results: &[u8]) -> Result<Nfsstat3, DecodeError> {
    match proc_num {
        proc3::NULL => Ok(Nfsstat3::OK),
        proc3::READDIR | proc3::READDIRPLUS => {
            proto::decode_readdir_res(results, proc_num == proc3::READDIRPLUS).map(|r| r.status)
        }
        _ => {
            proto::decode_res(proc_num, results)?;
            let word = results.get(..4).and_then(|w| <[u8; 4]>::try_from(w).ok());
            Ok(Nfsstat3(u32::from_be_bytes(word.unwrap_or_default())))
        }
    }
}

/// An AUTH_SYS body (RFC 5531 `authsys_parms`): stamp, machine name "fz", uid, gid = uid,
/// `groups` supplementary groups from 100.
fn sys_body(uid: u32, groups: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [1u32, 2] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b.extend_from_slice(b"fz\0\0");
    for w in [uid, uid, groups] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    for g in 0..groups {
        b.extend_from_slice(&(100 + g).to_be_bytes());
    }
    b
}

/// What the file beside a [`Beside`] export holds: no reply may carry it.
pub const SECRET: &[u8] = b"SECRET-6c1d-not-for-clients";

/// A directory holding an export `exp` (root's, mode 0755) and, beside it, `outside/secret`
/// holding [`SECRET`], where the fixture's link `l` ([`LINK_TARGET`]) points from the
/// export's root: what the fuzz targets and their seed tests serve a `dir:` export from, and
/// check nothing leaves ([`Beside::check`]). Removed on drop.
pub struct Beside {
    base: std::path::PathBuf,
    /// The secret's inode, link count, mode, owner and ctime as made.
    was: (u64, u64, u32, u32, i64),
}

impl Beside {
    /// Makes `base` (emptied first) with `exp` and `outside/secret`.
    pub fn new(base: std::path::PathBuf) -> std::io::Result<Beside> {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("outside"))?;
        std::fs::create_dir(base.join("exp"))?;
        std::fs::set_permissions(base.join("exp"), std::fs::Permissions::from_mode(0o755))?;
        std::fs::write(base.join("outside/secret"), SECRET)?;
        let was = Beside::meta(&base)?;
        Ok(Beside { base, was })
    }

    fn meta(base: &std::path::Path) -> std::io::Result<(u64, u64, u32, u32, i64)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(base.join("outside/secret"))?;
        Ok((m.ino(), m.nlink(), m.mode(), m.uid(), m.ctime_nsec()))
    }

    /// The export's directory.
    pub fn exp(&self) -> std::path::PathBuf {
        self.base.join("exp")
    }

    /// Empties the export (a new one for the next fixture).
    pub fn reset_export(&self) -> std::io::Result<()> {
        let _ = std::fs::remove_dir_all(self.exp());
        std::fs::create_dir(self.exp())?;
        std::fs::set_permissions(
            self.exp(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
    }

    /// Nothing beside the export changed (the two directories' names; the secret's content,
    /// inode, links, mode, owner and ctime) and `reply` does not carry the secret unless its
    /// `request` did (a reply may echo what it was sent: a COMPOUND's tag, a name): why not.
    pub fn check(&self, request: &[u8], reply: &[u8]) -> Result<(), String> {
        let names = |p: &std::path::Path| -> Result<Vec<String>, String> {
            let mut v = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            v.sort();
            Ok(v)
        };
        let (top, out) = (names(&self.base)?, names(&self.base.join("outside"))?);
        if top != ["exp", "outside"] || out != ["secret"] {
            return Err(format!("beside the export: {top:?}, outside: {out:?}"));
        }
        let now = Beside::meta(&self.base).map_err(|e| e.to_string())?;
        if now != self.was {
            return Err(format!("the secret changed: {:?} -> {now:?}", self.was));
        }
        // Compared by a hash, not octet by octet: a fuzzer that watches comparisons would
        // learn the secret from one and send it, and a reply may echo what it was sent.
        let data = std::fs::read(self.base.join("outside/secret")).map_err(|e| e.to_string())?;
        let secret = fnv1a(SECRET);
        if data.len() != SECRET.len() || fnv1a(&data) != secret {
            return Err("the secret's content changed".into());
        }
        let carries = |b: &[u8]| b.windows(SECRET.len()).any(|w| fnv1a(w) == secret);
        if carries(reply) && !carries(request) {
            return Err("a reply carries the secret".into());
        }
        Ok(())
    }
}

/// FNV-1a of `b`.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &o| {
        (h ^ u64::from(o)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Drop for Beside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
