//! Unit tests of the `change_info4` that OPEN, CREATE, REMOVE, RENAME and LINK return for a
//! directory (RFC 8881 §3.3.6) on a store whose clock did not tick during the operation, as a
//! host file system stamping times in timer ticks shows it to the `dir:` store: the change
//! must still read as a change (the Linux client decides from `before` != `after` whether its
//! OPEN created the file), and an operation that changed nothing must not read as one.
//!
//! Normal operation: `cargo test -p rpcrdma-apps --lib nfs::v4::server::tests_cinfo`.
//! Recovery: a failure names the operation and the values seen.

use std::sync::Arc;

use rpcrdma_engine::xdr::XdrReader;

use super::state::Limits;
use super::tests::{auth_sys, open_create, server_on, A, H};
use super::xdr::st;
use crate::nfs::identity::Cred;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::{DirListing, Special, Store};
use crate::nfs::types::{
    CreateHow, DirEntry, Fattr3, Fh, FsStat, NfsResult, Sattr3, StableHow, Time3,
};
use crate::nfs::v4::op;

/// A memory store seen through a clock that does not tick while a test runs: every object's
/// ctime and mtime read as one instant, as on a file system whose times move in timer ticks
/// longer than the calls.
struct Coarse(MemoryStore);

/// The one instant [`Coarse`] shows.
const TICK: Time3 = Time3 {
    seconds: 1_000_000,
    nseconds: 4_000_000,
};

impl Store for Coarse {
    fn kind(&self) -> &'static str {
        "coarse"
    }
    fn root(&self) -> Fh {
        self.0.root()
    }
    fn getattr(&self, fh: &Fh) -> NfsResult<Fattr3> {
        self.0.getattr(fh).map(|a| Fattr3 {
            mtime: TICK,
            ctime: TICK,
            ..a
        })
    }
    fn setattr(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> NfsResult<()> {
        self.0.setattr(cx, fh, set, guard)
    }
    fn lookup(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<Fh> {
        self.0.lookup(cx, dir, name)
    }
    fn readlink(&self, cx: &Cred, fh: &Fh, out: &mut [u8]) -> NfsResult<usize> {
        self.0.readlink(cx, fh, out)
    }
    fn read(&self, cx: &Cred, fh: &Fh, offset: u64, out: &mut [u8]) -> NfsResult<(usize, bool)> {
        self.0.read(cx, fh, offset, out)
    }
    fn write(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<StableHow> {
        self.0.write(cx, fh, offset, data, stable)
    }
    fn commit(&self, cx: &Cred, fh: &Fh) -> NfsResult<()> {
        self.0.commit(cx, fh)
    }
    fn create(&self, cx: &Cred, dir: &Fh, name: &[u8], how: &CreateHow) -> NfsResult<Fh> {
        self.0.create(cx, dir, name, how)
    }
    fn mkdir(&self, cx: &Cred, dir: &Fh, name: &[u8], attr: &Sattr3) -> NfsResult<Fh> {
        self.0.mkdir(cx, dir, name, attr)
    }
    fn symlink(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        self.0.symlink(cx, dir, name, target, attr)
    }
    fn mknod(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        self.0.mknod(cx, dir, name, node, attr)
    }
    fn remove(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.0.remove(cx, dir, name)
    }
    fn rmdir(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.0.rmdir(cx, dir, name)
    }
    fn rename(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> NfsResult<()> {
        self.0.rename(cx, from_dir, from_name, to_dir, to_name)
    }
    fn link(&self, cx: &Cred, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.0.link(cx, fh, dir, name)
    }
    fn readdir(
        &self,
        cx: &Cred,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        plus: bool,
        emit: &mut dyn FnMut(&DirEntry<'_>) -> bool,
    ) -> NfsResult<DirListing> {
        self.0.readdir(cx, dir, cookie, verf, plus, emit)
    }
    fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat> {
        self.0.fsstat(fh)
    }
    fn write_verifier(&self) -> [u8; 8] {
        self.0.write_verifier()
    }
}

/// A client with a session on a server exporting a [`Coarse`] store.
fn coarse() -> H {
    let store: Arc<dyn Store> = Arc::new(Coarse(MemoryStore::new(MemoryOptions::default())));
    let (srv, now, store) = server_on("rw,no_root_squash", Limits::default(), None, store);
    H::on(srv, now, store, b"client-a", auth_sys(0, 0))
}

/// `change_info4` (atomic, before, after) at the start of `b`.
fn cinfo(b: &[u8]) -> (bool, u64, u64) {
    let mut r = XdrReader::new(b);
    let atomic = r.get_u32().expect("atomic") != 0;
    (
        atomic,
        r.get_u64().expect("before"),
        r.get_u64().expect("after"),
    )
}

/// The `change_info4` of an OPEN of `name` (created unless it exists) in the export's root.
fn open_cinfo(h: &mut H, name: &[u8]) -> (bool, u64, u64) {
    let root = h.root();
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        open_create(h.clientid, name),
    ]);
    assert_eq!(r.status, st::OK, "OPEN of {name:?}: {:?}", r.results);
    cinfo(&r.last[16..])
}

#[test]
fn accepts_an_open_that_created_a_file_as_a_change_of_its_directory_on_a_coarse_clock() {
    let mut h = coarse();
    let (atomic, before, after) = open_cinfo(&mut h, b"new");
    assert_ne!(
        before, after,
        "the OPEN created the file: the directory changed"
    );
    assert!(
        !atomic,
        "the change values are not the directory's own: not atomic"
    );
}

#[test]
fn accepts_an_open_of_an_existing_file_as_no_change_of_its_directory() {
    let mut h = coarse();
    open_cinfo(&mut h, b"f");
    let (atomic, before, after) = open_cinfo(&mut h, b"f");
    assert_eq!(before, after, "the second OPEN created nothing");
    assert!(atomic);
}

#[test]
fn accepts_create_and_remove_as_changes_of_their_directory_on_a_coarse_clock() {
    let mut h = coarse();
    let root = h.root();
    let mkdir = A::op(op::CREATE).u32(2).opaque(b"d").u32(0).u32(0);
    let r = h.raw(&[A::op(op::PUTFH).opaque(&root), mkdir]);
    assert_eq!(r.status, st::OK, "CREATE");
    let (atomic, before, after) = cinfo(&r.last);
    assert!(before != after && !atomic, "CREATE: {before} {after}");
    let r = h.raw(&[
        A::op(op::PUTFH).opaque(&root),
        A::op(op::REMOVE).opaque(b"d"),
    ]);
    assert_eq!(r.status, st::OK, "REMOVE");
    let (atomic, before, after) = cinfo(&r.last);
    assert!(before != after && !atomic, "REMOVE: {before} {after}");
}

#[test]
fn accepts_a_clock_that_ticked_as_it_is() {
    // The memory store's own clock never repeats a stamp: its values go out unchanged, atomic.
    let mut h = H::new("rw,no_root_squash");
    let (atomic, before, after) = open_cinfo(&mut h, b"new");
    assert!(atomic && after > before, "{before} {after}");
}
