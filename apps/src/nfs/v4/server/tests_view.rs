//! Test support: a memory store seen through a [`View`] that changes what the NFSv4.1 server
//! sees of it the way a real back end can: a clock that does not tick while a test runs (a
//! file system stamping times in timer ticks), or a name another client makes between the
//! server's LOOKUP and its CREATE (a race the server cannot prevent), or a name listed without
//! attributes (a mount point inside an export of the `dir:` store).
//!
//! Normal operation: `View::frozen_clock().serve()` or `View::made_meanwhile(..).serve()`
//! gives a client with a session on a server exporting the view. Recovery: none needed.

use std::sync::{Arc, Mutex};

use super::state::Limits;
use super::tests::{auth_sys, server_on, H};
use crate::nfs::identity::Cred;
use crate::nfs::store::memory::{MemoryOptions, MemoryStore};
use crate::nfs::store::{DirListing, Special, Store};
use crate::nfs::types::{
    CreateHow, DirEntry, Fattr3, Fh, FsStat, NfsResult, Sattr3, StableHow, Time3,
};

/// A memory store and how the server sees it.
pub struct View {
    inner: MemoryStore,
    /// Every object's ctime and mtime read as [`TICK`].
    frozen: bool,
    /// A name the next LOOKUP does not find although it is there (it was made meanwhile).
    hidden: Mutex<Option<Vec<u8>>>,
    /// A name READDIR lists without its handle and attributes.
    bare: Option<Vec<u8>>,
}

/// The one instant a frozen clock shows.
const TICK: Time3 = Time3 {
    seconds: 1_000_000,
    nseconds: 4_000_000,
};

impl View {
    fn new(frozen: bool, hidden: Option<&[u8]>) -> View {
        View {
            inner: MemoryStore::new(MemoryOptions::default()),
            frozen,
            hidden: Mutex::new(hidden.map(<[u8]>::to_vec)),
            bare: None,
        }
    }

    /// A store whose READDIR lists `name` without its handle and attributes.
    pub fn listed_bare(name: &[u8]) -> View {
        View {
            bare: Some(name.to_vec()),
            ..View::new(false, None)
        }
    }

    /// A store whose clock does not tick.
    pub fn frozen_clock() -> View {
        View::new(true, None)
    }

    /// A store whose next LOOKUP of `name` answers NOENT: whoever asks then finds the name
    /// made by someone else when it creates it.
    pub fn made_meanwhile(name: &[u8]) -> View {
        View::new(false, Some(name))
    }

    /// A client with a session (AUTH_SYS root, not squashed) on a server exporting `self`;
    /// `prepare` runs on the store first.
    pub fn serve_after(self, prepare: impl FnOnce(&MemoryStore)) -> H {
        prepare(&self.inner);
        let store: Arc<dyn Store> = Arc::new(self);
        let (srv, now, store) = server_on("rw,no_root_squash", Limits::default(), None, store);
        H::on(srv, now, store, b"client-a", auth_sys(0, 0))
    }

    /// [`View::serve_after`] with nothing to prepare.
    pub fn serve(self) -> H {
        self.serve_after(|_| {})
    }
}

impl Store for View {
    fn kind(&self) -> &'static str {
        "view"
    }
    fn root(&self) -> Fh {
        self.inner.root()
    }
    fn getattr(&self, fh: &Fh) -> NfsResult<Fattr3> {
        let a = self.inner.getattr(fh)?;
        Ok(match self.frozen {
            true => Fattr3 {
                mtime: TICK,
                ctime: TICK,
                ..a
            },
            false => a,
        })
    }
    fn setattr(&self, cx: &Cred, fh: &Fh, set: &Sattr3, guard: Option<Time3>) -> NfsResult<()> {
        self.inner.setattr(cx, fh, set, guard)
    }
    fn lookup(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<Fh> {
        let mut hidden = self.hidden.lock().unwrap_or_else(|e| e.into_inner());
        if hidden.as_deref() == Some(name) {
            *hidden = None;
            return Err(crate::nfs::types::Nfsstat3::NOENT);
        }
        drop(hidden);
        self.inner.lookup(cx, dir, name)
    }
    fn readlink(&self, cx: &Cred, fh: &Fh, out: &mut [u8]) -> NfsResult<usize> {
        self.inner.readlink(cx, fh, out)
    }
    fn read(&self, cx: &Cred, fh: &Fh, offset: u64, out: &mut [u8]) -> NfsResult<(usize, bool)> {
        self.inner.read(cx, fh, offset, out)
    }
    fn write(
        &self,
        cx: &Cred,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<StableHow> {
        self.inner.write(cx, fh, offset, data, stable)
    }
    fn commit(&self, cx: &Cred, fh: &Fh) -> NfsResult<()> {
        self.inner.commit(cx, fh)
    }
    fn create(&self, cx: &Cred, dir: &Fh, name: &[u8], how: &CreateHow) -> NfsResult<Fh> {
        self.inner.create(cx, dir, name, how)
    }
    fn mkdir(&self, cx: &Cred, dir: &Fh, name: &[u8], attr: &Sattr3) -> NfsResult<Fh> {
        self.inner.mkdir(cx, dir, name, attr)
    }
    fn symlink(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        target: &[u8],
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        self.inner.symlink(cx, dir, name, target, attr)
    }
    fn mknod(
        &self,
        cx: &Cred,
        dir: &Fh,
        name: &[u8],
        node: Special,
        attr: &Sattr3,
    ) -> NfsResult<Fh> {
        self.inner.mknod(cx, dir, name, node, attr)
    }
    fn remove(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.inner.remove(cx, dir, name)
    }
    fn rmdir(&self, cx: &Cred, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.inner.rmdir(cx, dir, name)
    }
    fn rename(
        &self,
        cx: &Cred,
        from_dir: &Fh,
        from_name: &[u8],
        to_dir: &Fh,
        to_name: &[u8],
    ) -> NfsResult<()> {
        self.inner.rename(cx, from_dir, from_name, to_dir, to_name)
    }
    fn link(&self, cx: &Cred, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.inner.link(cx, fh, dir, name)
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
        let bare = self.bare.as_deref();
        self.inner.readdir(
            cx,
            dir,
            cookie,
            verf,
            plus,
            &mut |e| match Some(e.name) == bare {
                true => emit(&DirEntry { plus: None, ..*e }),
                false => emit(e),
            },
        )
    }
    fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat> {
        self.inner.fsstat(fh)
    }
    fn write_verifier(&self) -> [u8; 8] {
        self.inner.write_verifier()
    }
}
