//! The NFSv3 procedures (RFC 1813 section 3.3) served on the engine's public
//! [`Server`](rpcrdma_poller::Server) API: one [`Nfs3`] per export, whose [`Nfs3::program`]
//! the server registers.
//!
//! Normal operation: each call is decoded once ([`proto::decode_args`]), served against the
//! [`Store`], and its results encoded straight into the registered reply buffer. READ data goes
//! into the client's Write chunk as a DDP item taken from the endpoint's pool (the store reads
//! into it; no further copy), or, when the client offered no Write chunk, is read by the store
//! straight into the reply after its header. WRITE data is the call's stream: inline, or
//! already placed by the engine's RDMA Reads of the Read chunk. Directory listings are written
//! entry by entry while the store walks the directory, bounded by the client's count and by
//! what the client can receive (the Reply chunk it offered, or the inline threshold).
//! Non-idempotent procedures go through the duplicate request cache ([`Drc`]). In worker mode
//! (the `dir:` store) a call is first offered on the reactor: a GETATTR
//! the store answers from an open descriptor, and with [`NfsConfig::calls_on_reactor`] any
//! call the store serves there ([`Store::run_on_reactor`]); the rest go to a worker.
//!
//! Recovery: undecodable arguments are GARBAGE_ARGS; everything else is an NFS3ERR_* result
//! with the weak cache consistency data RFC 1813 asks for (a retransmission of a call still
//! running gets NFS3ERR_JUKEBOX). With [`NfsConfig::drop_every`], every Nth non-idempotent call
//! is executed, its reply cached, and the connection closed instead of answering (fault
//! injection: the client reconnects, retransmits, and the cache answers).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use rpcrdma_engine::xdr::{XdrError, XdrWriter};
use rpcrdma_poller::program::SUCCESS_HEADER_LEN;
use rpcrdma_poller::{BufPool, Handler, Program, Reject, ReplyBuilder, Request};

use super::ops::Call;
use super::proto::{
    self, encode_read_head, encode_res, fsf3, proc3, Args3, DirWriter, FsInfo, PathConf, Res3,
};
use super::stats::NfsStats;
use crate::nfs::admit::{modifies, Admitted, ExportTable, Refusal};
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::drc::{Drc, DrcConfig, DrcKey, Lookup};
use crate::nfs::store::{NewObj, Special, Store};
use crate::nfs::types::{
    access, DirEntry, Fh, Ftype3, Nfsstat3, StableHow, Time3, WccData, PATH_MAX,
};

/// Octets kept for the RPC-over-RDMA transport header (with its Write list) when a reply
/// must go inline.
const TRANSPORT_HEADER_RESERVE: usize = 256;
/// Largest result encoded aside when it exceeds what the client can receive (a READLINK of a
/// `PATH_MAX` target with attributes fits easily, so does an NFSACL GETACL of two ACLs of
/// 1 024 entries: 24 592 octets).
const OVERSIZED_RESULT_MAX: usize = 32 * 1024;
/// Largest READ3resok header (status, post_op_attr with attributes, count, eof, length).
const READ_HEAD_MAX: usize = 4 + 4 + 84 + 4 + 4 + 4;

/// Settings of the NFS service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfsConfig {
    /// Largest READ and WRITE (FSINFO rtmax / wtmax; at most the DDP buffer size).
    pub max_io: u32,
    /// Preferred READDIR size (FSINFO dtpref).
    pub dtpref: u32,
    /// The server's inline threshold for replies (`ServerOptions::inline_send`): a reply
    /// without a Reply chunk must fit in it.
    pub inline_send: u32,
    /// Drop the connection instead of answering every Nth non-idempotent call (0: never).
    pub drop_every: u64,
    /// Bounds of the duplicate request cache.
    pub drc: DrcConfig,
    /// Worker mode: a GETATTR the store answers at once ([`Store::getattr_now`]) is served
    /// on the reactor.
    pub getattr_on_reactor: bool,
    /// Worker mode: every call the store can serve on the reactor ([`Store::run_on_reactor`];
    /// COMMIT and WRITEs asking for stable storage only when they wait for no device) is
    /// served there, but calls refused before the store (their counts and logs are the
    /// worker's).
    pub calls_on_reactor: bool,
}

impl Default for NfsConfig {
    fn default() -> Self {
        NfsConfig {
            max_io: 1 << 20,
            dtpref: 32 << 10,
            inline_send: 4096,
            drop_every: 0,
            drc: DrcConfig::default(),
            getattr_on_reactor: true,
            calls_on_reactor: false,
        }
    }
}

/// True for the procedures whose retransmission must not run twice: those that change the
/// file system ([`modifies`]) but COMMIT, which may run again harmlessly.
pub fn is_non_idempotent(p: u32) -> bool {
    modifies(p) && p != proc3::COMMIT
}

/// Numbers [`Nfs3`] instances (several run in one process in the tests).
static INSTANCES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The export table this thread last read, with the instance and generation it belongs
    /// to (the table is replaced only on reload, so a call normally finds it here).
    static CACHED: RefCell<Option<(u64, u64, Arc<ExportTable>)>> = const { RefCell::new(None) };
}

/// The exports served over NFSv3.
pub struct Nfs3 {
    /// Replaced whole on reload; each call clones the `Arc` it starts with.
    table: RwLock<Arc<ExportTable>>,
    /// Bumped by each [`Nfs3::set_exports`] after the table is replaced; a thread that
    /// served a call of this instance keeps the table it read beside the generation it read
    /// it at (`CACHED`), so a call takes the lock only after a reload.
    generation: AtomicU64,
    /// Tells this instance's entry in `CACHED` from another instance's.
    instance: u64,
    pool: Option<BufPool>,
    drc: Drc,
    stats: Arc<NfsStats>,
    cfg: NfsConfig,
    /// Non-idempotent calls executed (drives `drop_every`).
    mutations: AtomicU64,
    /// The NFSv4.1 service beside this one, whose delegations NFSv3 calls recall
    /// ([`super::deleg`]).
    cross: OnceLock<Arc<CrossLocks>>,
}

impl Nfs3 {
    /// Serves the exports of `table`; READ results are placed by DDP from buffers of `pool`
    /// (the server endpoint's, `Endpoint::buffers`), or inline when `None`.
    pub fn new(table: ExportTable, pool: Option<BufPool>, cfg: NfsConfig) -> Arc<Nfs3> {
        let max_io = match &pool {
            Some(p) => cfg.max_io.min(p.buf_size() as u32),
            None => cfg.max_io,
        };
        Arc::new(Nfs3 {
            table: RwLock::new(Arc::new(table)),
            generation: AtomicU64::new(0),
            // Relaxed: only uniqueness matters.
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            pool,
            drc: Drc::new(cfg.drc),
            stats: Arc::new(NfsStats::default()),
            cfg: NfsConfig { max_io, ..cfg },
            mutations: AtomicU64::new(0),
            cross: OnceLock::new(),
        })
    }

    /// Makes every call that reads or changes a file recall the NFSv4.1 delegations
    /// registered with `cross` that it conflicts with (once; a later registry is ignored).
    pub fn set_cross(&self, cross: Arc<CrossLocks>) {
        let _ = self.cross.set(cross);
    }

    /// Whether calls the store serves on the reactor are answered there
    /// ([`NfsConfig::calls_on_reactor`]).
    pub fn calls_on_reactor(&self) -> bool {
        self.cfg.calls_on_reactor
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<NfsStats> {
        &self.stats
    }

    /// The exports served now.
    pub fn exports(&self) -> Arc<ExportTable> {
        // Acquire: pairs with the Release increment in `set_exports`, made after the new
        // table is in place: a thread that sees the new generation reads the new table.
        let generation = self.generation.load(Ordering::Acquire);
        CACHED.with(|c| {
            let mut c = c.borrow_mut();
            if let Some((inst, g, t)) = &*c {
                if *inst == self.instance && *g == generation {
                    return Arc::clone(t);
                }
            }
            let t = match self.table.read() {
                Ok(t) => Arc::clone(&t),
                Err(p) => Arc::clone(&p.into_inner()),
            };
            *c = Some((self.instance, generation, Arc::clone(&t)));
            t
        })
    }

    /// Serves `table` from the next call on (a reload); calls in progress finish with the
    /// table they started with. Connections are not touched.
    pub fn set_exports(&self, table: ExportTable) {
        let t = Arc::new(table);
        match self.table.write() {
            Ok(mut g) => *g = t,
            Err(p) => *p.into_inner() = t,
        }
        // Release: pairs with the Acquire load in `exports`.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The store behind the export mounted as `path`.
    pub fn store_of(&self, path: &str) -> Option<Arc<dyn Store>> {
        self.exports().find(path).map(|s| Arc::clone(&s.store))
    }

    /// The duplicate request cache.
    pub fn drc(&self) -> &Drc {
        &self.drc
    }

    /// NFS program 100003 version 3 with every procedure (NULL is the server's own).
    pub fn program(self: &Arc<Self>) -> Program {
        let mut p = Program::new(proto::NFS_PROGRAM, proto::NFS_V3..=proto::NFS_V3);
        for n in 1..=proc3::COMMIT {
            let me = Arc::clone(self);
            p = p.procedure(n, move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
                me.handle(req, out)
            });
        }
        if self.cfg.calls_on_reactor {
            for n in 1..=proc3::COMMIT {
                p = p.procedure(n, OnReactor(Arc::clone(self)));
            }
        } else if self.cfg.getattr_on_reactor {
            p = p.procedure(proc3::GETATTR, OnReactor(Arc::clone(self)));
        }
        p
    }

    /// A call on the reactor (worker mode): a GETATTR the store answers at once
    /// ([`Nfs3::getattr_now`]), else with `calls_on_reactor` the call when the store serves
    /// its caller there ([`Store::run_on_reactor`]); `None` leaves it to [`Nfs3::handle`] on
    /// a worker, with `out` untouched.
    fn serve_now(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>> {
        let p = req.proc_num;
        if p == proc3::GETATTR && self.cfg.getattr_on_reactor {
            if let Some(r) = self.getattr_now(req, out) {
                return Some(r);
            }
        }
        if !self.cfg.calls_on_reactor {
            return None;
        }
        let mut args = proto::decode_args(p, req.args).ok()?;
        let syncs = match args {
            Args3::Write { stable, .. } => stable != StableHow::Unstable,
            Args3::Commit { .. } => true,
            _ => false,
        };
        let adm = self
            .exports()
            .admit(p, &mut args, req.transport.peer.ip(), &req.cred)
            .ok()?;
        let store = Arc::clone(&adm.share.store);
        let mut r = None;
        let ran = store.run_on_reactor(&adm.cred, syncs, &mut || {
            self.stats.call(p, &req.transport, req.write_chunks.len());
            self.stats.bump(&self.stats.on_reactor);
            r = Some(self.admitted(req, out, &args, &adm));
        });
        debug_assert!(ran || r.is_none());
        r
    }

    /// GETATTR on the reactor (worker mode): answered when the arguments decode, the call is
    /// admitted and the store has the attributes at hand; `None` leaves the call (and all its
    /// checks and counts) to [`Nfs3::handle`] on a worker.
    fn getattr_now(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>> {
        let p = req.proc_num;
        let mut args = proto::decode_args(p, req.args).ok()?;
        let adm = self
            .exports()
            .admit(p, &mut args, req.transport.peer.ip(), &req.cred)
            .ok()?;
        let Args3::Getattr { fh } = args else {
            return None;
        };
        let r = adm.share.store.getattr_now(&fh)?;
        self.stats.call(p, &req.transport, req.write_chunks.len());
        Some(self.put(out, &Res3::Getattr(r)))
    }

    /// Serves one call.
    pub fn handle(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        let p = req.proc_num;
        self.stats.call(p, &req.transport, req.write_chunks.len());
        let args = match proto::decode_args(p, req.args) {
            Ok(a) => a,
            Err(_) => {
                self.stats.bump(&self.stats.garbage_args);
                tracing::debug!(client = %req.transport.peer, proc = p, "GARBAGE_ARGS");
                return Err(Reject::GarbageArgs);
            }
        };
        let mut args = args;
        if let Args3::Null = args {
            return self.put(out, &Res3::Null);
        }
        let adm = match self
            .exports()
            .admit(p, &mut args, req.transport.peer.ip(), &req.cred)
        {
            Ok(a) => a,
            Err(Refusal::Status(st)) => {
                // Stale handles, export permissions: a client can cause one per call.
                tracing::debug!(client = %req.transport.peer, proc = p, status = ?st, "call refused");
                return self.put(out, &failure(p, st));
            }
            Err(Refusal::Auth(why)) => {
                self.stats.bump(&self.stats.auth_errors);
                rpcrdma_poller::log_limited!(
                    peer: &req.transport.peer;
                    WARN,
                    client = %req.transport.peer,
                    proc = p,
                    auth = ?why,
                    "call refused: AUTH_ERROR"
                );
                return Err(Reject::Auth(why));
            }
        };
        self.admitted(req, out, &args, &adm)
    }

    /// Serves admitted call `req` (arguments `args`): through the duplicate request cache
    /// when it changes something.
    fn admitted(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        args: &Args3<'_>,
        adm: &Admitted,
    ) -> Result<(), Reject> {
        let p = req.proc_num;
        if !is_non_idempotent(p) {
            if self.recalling(args, adm) {
                return self.put(out, &failure(p, Nfsstat3::JUKEBOX));
            }
            return self.execute(req, out, args, adm);
        }
        let key = DrcKey::new(req.transport.peer.ip(), req.xid, req.vers, p, req.args);
        let (found, evicted) = self.drc.begin(key);
        self.add(&self.stats.drc_evicted, evicted);
        match found {
            Lookup::Replay(r) => {
                self.stats.bump(&self.stats.drc_hits);
                return out.put(&r).map_err(|_| Reject::SystemErr);
            }
            Lookup::InProgress => {
                self.stats.bump(&self.stats.drc_inprogress);
                return self.put(out, &failure(p, Nfsstat3::JUKEBOX));
            }
            Lookup::New => {}
        }
        // Not run, so not cached: the client's next try (a new XID) runs it.
        if self.recalling(args, adm) {
            self.drc.abandon(key);
            return self.put(out, &failure(p, Nfsstat3::JUKEBOX));
        }
        if let Err(e) = self.execute(req, out, args, adm) {
            self.drc.abandon(key);
            return Err(e);
        }
        self.stats.bump(&self.stats.drc_stored);
        let evicted = self.drc.finish(key, out.results());
        self.add(&self.stats.drc_evicted, evicted);
        let n = self.mutations.fetch_add(1, Ordering::Relaxed) + 1;
        if self.cfg.drop_every > 0 && n % self.cfg.drop_every == 0 {
            self.stats.bump(&self.stats.dropped);
            return Err(Reject::Disconnect);
        }
        Ok(())
    }

    /// Whether call `args` must wait (NFS3ERR_JUKEBOX) for an NFSv4.1 delegation of a file
    /// it reads or changes, now being recalled ([`super::deleg`]).
    fn recalling(&self, args: &Args3<'_>, adm: &Admitted) -> bool {
        let Some(cross) = self.cross.get() else {
            return false;
        };
        let waits = super::deleg::held_off(cross, &Call::new(adm), args);
        if waits {
            self.stats.bump(&self.stats.deleg_waits);
        }
        waits
    }

    fn add(&self, c: &AtomicU64, n: u64) {
        if n > 0 {
            // Relaxed: a statistic.
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Encodes `r` after what `out` holds, counting its status.
    fn put(&self, out: &mut ReplyBuilder<'_>, r: &Res3<'_>) -> Result<(), Reject> {
        self.put_with(out, status_of(r), &|w| encode_res(w, r))
    }

    /// Encodes results with `enc` after what `out` holds, counting `status`.
    pub(super) fn put_with(
        &self,
        out: &mut ReplyBuilder<'_>,
        status: Nfsstat3,
        enc: &dyn Fn(&mut XdrWriter<'_>) -> Result<(), XdrError>,
    ) -> Result<(), Reject> {
        self.stats.status(status);
        let mut w = XdrWriter::new(out.space());
        match enc(&mut w) {
            Ok(()) => {
                let n = w.finish();
                out.advance(n).map_err(|_| Reject::SystemErr)
            }
            // More than the client can receive (`space()` is what the inline threshold or
            // its Reply chunk carries): encode it aside and append it, so that the transport
            // answers ERR_CHUNK (Version One) / RDMA2_ERR_CANT_REPLY and the client sends the
            // call again offering a larger Reply chunk. Rare: results that big are READLINK
            // of a long target, READ/READDIR, which size themselves to the limit, and NFSACL
            // GETACL of a long ACL.
            Err(XdrError::NoSpace { .. }) => {
                let mut big = vec![0u8; OVERSIZED_RESULT_MAX];
                let mut w = XdrWriter::new(&mut big);
                if enc(&mut w).is_err() {
                    self.stats.bump(&self.stats.system_err);
                    return Err(Reject::SystemErr);
                }
                let n = w.finish();
                out.put(&big[..n]).map_err(|_| Reject::SystemErr)
            }
            Err(_) => {
                self.stats.bump(&self.stats.system_err);
                Err(Reject::SystemErr)
            }
        }
    }

    /// Octets of results the client can receive for this call: the Reply chunk it offered,
    /// or the inline threshold less the headers.
    fn reply_limit(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> usize {
        let cap = match req.transport.reply_chunk {
            Some(c) => (c as usize).saturating_sub(SUCCESS_HEADER_LEN),
            None => (self.cfg.inline_send as usize)
                .saturating_sub(SUCCESS_HEADER_LEN + TRANSPORT_HEADER_RESERVE),
        };
        cap.min(out.space().len())
    }

    fn fsinfo(&self, s: &dyn Store) -> FsInfo {
        FsInfo {
            rtmax: self.cfg.max_io,
            rtpref: self.cfg.max_io,
            rtmult: 4096,
            wtmax: self.cfg.max_io,
            wtpref: self.cfg.max_io,
            wtmult: 4096,
            dtpref: self.cfg.dtpref,
            maxfilesize: s.max_file_size(),
            time_delta: Time3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: fsf3::LINK | fsf3::SYMLINK | fsf3::HOMOGENEOUS | fsf3::CANSETTIME,
        }
    }

    fn execute(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        args: &Args3<'_>,
        adm: &Admitted,
    ) -> Result<(), Reject> {
        let c = Call::new(adm);
        let (s, cx) = (c.s, &adm.cred);
        let res = match *args {
            Args3::Null => Res3::Null,
            Args3::Getattr { fh } => Res3::Getattr(s.getattr(&fh)),
            Args3::Setattr { fh, attr, guard } => c.setattr(&fh, &attr, guard),
            Args3::Lookup { dir, name } => c.lookup(&dir, name),
            Args3::Access { fh, access } => match s.access(cx, &fh, access) {
                Ok((a, mut granted)) => {
                    if adm.opts.read_only {
                        // Linux nfsd: writes to a read-only export are EROFS, so not granted.
                        granted &= !(access::MODIFY | access::EXTEND | access::DELETE);
                    }
                    Res3::Access(Ok((Some(a), granted)))
                }
                Err(e) => Res3::Access(Err((e, c.attr(&fh)))),
            },
            Args3::Readlink { fh } => {
                let mut buf = [0u8; PATH_MAX];
                let r = s.readlink(cx, &fh, &mut buf);
                let a = c.attr(&fh);
                return self.put(
                    out,
                    &Res3::Readlink(match r {
                        Ok(n) => Ok((a, &buf[..n.min(PATH_MAX)])),
                        Err(e) => Err((e, a)),
                    }),
                );
            }
            Args3::Read { fh, offset, count } => {
                return self.read(req, out, &c, &fh, offset, count)
            }
            Args3::Write {
                fh,
                offset,
                count,
                stable,
                data,
            } => c.write(&fh, offset, count, stable, data),
            Args3::Create { dir, name, how } => c.create(&dir, name, Ok(NewObj::File(&how))),
            Args3::Mkdir { dir, name, attr } => c.create(&dir, name, Ok(NewObj::Dir(&attr))),
            Args3::Symlink {
                dir,
                name,
                attr,
                target,
            } => {
                let new = match target.is_empty() || target.len() > PATH_MAX {
                    true => Err(Nfsstat3::INVAL),
                    false => Ok(NewObj::Symlink(target, &attr)),
                };
                c.create(&dir, name, new)
            }
            Args3::Mknod {
                dir,
                name,
                ftype,
                attr,
                rdev,
            } => {
                let node = match ftype {
                    Ftype3::Fifo => Ok(Special::Fifo),
                    Ftype3::Sock => Ok(Special::Sock),
                    Ftype3::Chr => Ok(Special::Chr(rdev.0, rdev.1)),
                    Ftype3::Blk => Ok(Special::Blk(rdev.0, rdev.1)),
                    // RFC 1813 MKNOD: BADTYPE for the types MKNOD does not create.
                    Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk => Err(Nfsstat3::BADTYPE),
                };
                c.create(&dir, name, node.map(|n| NewObj::Node(n, &attr)))
            }
            Args3::Remove { dir, name } => c.remove(&dir, name, false),
            Args3::Rmdir { dir, name } => c.remove(&dir, name, true),
            Args3::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => c.rename(&from_dir, from_name, &to_dir, to_name),
            Args3::Link { fh, dir, name } => c.link(&fh, &dir, name),
            Args3::Readdir {
                dir,
                cookie,
                verf,
                count,
            } => return self.readdir(req, out, &c, &dir, cookie, verf, (count, count), false),
            Args3::Readdirplus {
                dir,
                cookie,
                verf,
                dircount,
                maxcount,
            } => {
                let counts = (dircount, maxcount);
                return self.readdir(req, out, &c, &dir, cookie, verf, counts, true);
            }
            Args3::Fsstat { fh } => match s.fsstat(&fh) {
                Ok(f) => Res3::Fsstat(Ok((c.attr(&fh), f, 0))),
                Err(e) => Res3::Fsstat(Err((e, None))),
            },
            Args3::Fsinfo { fh } => match s.getattr(&fh) {
                Ok(a) => Res3::Fsinfo(Ok((Some(a), self.fsinfo(s)))),
                Err(e) => Res3::Fsinfo(Err((e, None))),
            },
            Args3::Pathconf { fh } => match s.getattr(&fh) {
                Ok(a) => Res3::Pathconf(Ok((Some(a), PATHCONF))),
                Err(e) => Res3::Pathconf(Err((e, None))),
            },
            Args3::Commit { fh, .. } => {
                let r = s.commit(cx, &fh);
                let wcc = c.wcc_after_only(&fh);
                match r {
                    Ok(()) => Res3::Commit(Ok((wcc, s.write_verifier()))),
                    Err(e) => Res3::Commit(Err((e, wcc))),
                }
            }
        };
        self.put(out, &res)
    }

    /// READ: into a DDP buffer for the client's Write chunk, or inline after the header.
    fn read(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        c: &Call<'_>,
        fh: &Fh,
        offset: u64,
        count: u32,
    ) -> Result<(), Reject> {
        // Linux nfsd (nfsd3_proc_read) clamps the offset to OFFSET_MAX and the count so the
        // read ends there: nothing is past it, and no store sees offset + count overflow.
        let room = (i64::MAX as u64).saturating_sub(offset);
        let count = u64::from(count.min(self.cfg.max_io)).min(room) as usize;
        if count == 0 {
            return match c.s.getattr(fh) {
                Ok(a) => self.put(out, &Res3::Read(Ok((Some(a), 0, offset >= a.size, &[])))),
                Err(e) => self.put(out, &Res3::Read(Err((e, None)))),
            };
        }
        // The attributes go out as they are after the read (RFC 1813 READ3resok
        // `file_attributes`, as Linux nfsd answers): a store that keeps access times has
        // moved it by then, and a client given the time from before would cache a stale one.
        if let Some(&cap) = req.write_chunks.first() {
            // Zero copy: the store's registered block itself becomes the DDP item.
            match c
                .s
                .read_registered(c.cx, fh, offset, count.min(cap as usize))
            {
                Some(Ok(r)) => {
                    self.stats.status(Nfsstat3::OK);
                    self.stats.bump(&self.stats.read_ddp);
                    self.stats.bump(&self.stats.read_zero_copy);
                    let attr = c.attr(fh);
                    let mut w = XdrWriter::new(out.space());
                    encode_read_head(&mut w, attr.as_ref(), r.len as u32, r.eof)
                        .map_err(|_| Reject::SystemErr)?;
                    let hl = w.finish();
                    out.advance(hl).map_err(|_| Reject::SystemErr)?;
                    return out
                        .ddp_shared(r.buf, r.off, r.len)
                        .map_err(|_| Reject::SystemErr);
                }
                Some(Err(e)) => return self.put(out, &Res3::Read(Err((e, c.attr(fh))))),
                None => {}
            }
        }
        if let (Some(&cap), Some(pool)) = (req.write_chunks.first(), self.pool.as_ref()) {
            let Some(mut buf) = pool.get() else {
                return self.put(out, &Res3::Read(Err((Nfsstat3::JUKEBOX, c.attr(fh)))));
            };
            let n = count.min(cap as usize).min(buf.len());
            let (got, eof) = match c.s.read(c.cx, fh, offset, &mut buf[..n]) {
                Ok(r) => r,
                Err(e) => return self.put(out, &Res3::Read(Err((e, c.attr(fh))))),
            };
            self.stats.status(Nfsstat3::OK);
            self.stats.bump(&self.stats.read_ddp);
            let attr = c.attr(fh);
            let mut w = XdrWriter::new(out.space());
            encode_read_head(&mut w, attr.as_ref(), got as u32, eof)
                .map_err(|_| Reject::SystemErr)?;
            let hl = w.finish();
            out.advance(hl).map_err(|_| Reject::SystemErr)?;
            return out.ddp(buf, got).map_err(|_| Reject::SystemErr);
        }
        // Inline (or in the Reply chunk): the store reads straight into the reply.
        let room = self.reply_limit(req, out).saturating_sub(READ_HEAD_MAX + 3);
        let n = count.min(room);
        let space = out.space();
        let Some(dst) = space.get_mut(READ_HEAD_MAX..READ_HEAD_MAX + n) else {
            return Err(Reject::SystemErr);
        };
        let (got, eof) = match c.s.read(c.cx, fh, offset, dst) {
            Ok(r) => r,
            Err(e) => return self.put(out, &Res3::Read(Err((e, c.attr(fh))))),
        };
        self.stats.status(Nfsstat3::OK);
        self.stats.bump(&self.stats.read_inline);
        let attr = c.attr(fh);
        let mut w = XdrWriter::new(&mut space[..READ_HEAD_MAX]);
        encode_read_head(&mut w, attr.as_ref(), got as u32, eof).map_err(|_| Reject::SystemErr)?;
        let hl = w.finish();
        // The header with attributes is exactly READ_HEAD_MAX long; be exact anyway.
        if hl != READ_HEAD_MAX {
            space.copy_within(READ_HEAD_MAX..READ_HEAD_MAX + got, hl);
        }
        let pad = (4 - got % 4) % 4;
        space[hl + got..hl + got + pad].fill(0);
        out.advance(hl + got + pad).map_err(|_| Reject::SystemErr)
    }

    /// READDIR and READDIRPLUS (`counts`: dircount and maxcount; READDIR's count twice).
    #[allow(clippy::too_many_arguments)]
    fn readdir(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        c: &Call<'_>,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        (dircount, maxcount): (u32, u32),
        plus: bool,
    ) -> Result<(), Reject> {
        let attr = match c.s.getattr(dir) {
            Ok(a) => a,
            Err(e) => return self.put(out, &Res3::ReaddirFail(e, None)),
        };
        let limit = self.reply_limit(req, out).min(maxcount as usize);
        let (listed, n, entries) = {
            let space = out.space();
            let mut w = XdrWriter::new(&mut space[..limit]);
            let Ok(mut dw) = DirWriter::begin(&mut w, plus, Some(&attr), verf, dircount, maxcount)
            else {
                return self.put(out, &Res3::ReaddirFail(Nfsstat3::TOOSMALL, Some(attr)));
            };
            // Entries' handles go out sealed; one the store cannot seal goes without one.
            let r = c.s.readdir(c.cx, dir, cookie, verf, plus, &mut |e| {
                let plus = e.plus.and_then(|(fh, a)| Some((c.seal(&fh).ok()?, a)));
                dw.push(&DirEntry { plus, ..*e })
            });
            let entries = dw.entries();
            let ok = match &r {
                Ok(l) => dw.finish(l.eof).is_ok(),
                Err(_) => false,
            };
            let n = w.finish();
            (r.map(|l| (l, ok)), n, entries)
        };
        let listing = match listed {
            Ok((l, true)) if entries > 0 || l.eof => l,
            Ok(_) => return self.put(out, &Res3::ReaddirFail(Nfsstat3::TOOSMALL, Some(attr))),
            Err(e) => return self.put(out, &Res3::ReaddirFail(e, Some(attr))),
        };
        // The directory's attributes as they are after the listing (which moved its access
        // time on a store that keeps one; Linux nfsd answers them so), written over the ones
        // `begin` wrote (the same length: both are present); then the verifier the store hands
        // out, where `begin` wrote the client's: after the status and the post_op_attr.
        if let Some(a) = c.attr(dir) {
            let mut w = XdrWriter::new(&mut out.space()[8..8 + 84]);
            proto::put_fattr3(&mut w, &a).map_err(|_| Reject::SystemErr)?;
        }
        let at = 4 + 4 + 84;
        out.space()[at..at + 8].copy_from_slice(&listing.verf);
        self.stats.status(Nfsstat3::OK);
        out.advance(n).map_err(|_| Reject::SystemErr)
    }
}

/// A service whose calls worker mode offers on the reactor first ([`Nfs3`], and the NFSACL
/// service beside it).
pub(super) trait ServeNow: Send + Sync + 'static {
    /// Serves one call (on a worker).
    fn serve_call(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject>;

    /// Serves the call on the reactor when it can; `None` leaves it to a worker, with `out`
    /// untouched.
    fn serve_on_reactor(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>>;
}

impl ServeNow for Nfs3 {
    fn serve_call(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        self.handle(req, out)
    }

    fn serve_on_reactor(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>> {
        self.serve_now(req, out)
    }
}

/// A handler of worker mode that answers on the reactor what its service can
/// ([`ServeNow::serve_on_reactor`]) and hands the rest to a worker.
pub(super) struct OnReactor<T>(pub(super) Arc<T>);

impl<T: ServeNow> Handler for OnReactor<T> {
    fn handle(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        self.0.serve_call(req, out)
    }

    fn handle_on_reactor(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>> {
        self.0.serve_on_reactor(req, out)
    }
}

/// The failure result of procedure `p` with status `st` and no attributes.
fn failure(p: u32, st: Nfsstat3) -> Res3<'static> {
    let w = WccData::default();
    match p {
        proc3::SETATTR => Res3::Setattr(st, w),
        proc3::WRITE => Res3::Write(Err((st, w))),
        proc3::CREATE | proc3::MKDIR | proc3::SYMLINK | proc3::MKNOD => Res3::Create(Err((st, w))),
        proc3::REMOVE | proc3::RMDIR => Res3::Remove(st, w),
        proc3::RENAME => Res3::Rename(st, w, w),
        proc3::LINK => Res3::Link(st, None, w),
        proc3::GETATTR => Res3::Getattr(Err(st)),
        proc3::LOOKUP => Res3::Lookup(Err((st, None))),
        proc3::ACCESS => Res3::Access(Err((st, None))),
        proc3::READLINK => Res3::Readlink(Err((st, None))),
        proc3::READ => Res3::Read(Err((st, None))),
        proc3::FSSTAT => Res3::Fsstat(Err((st, None))),
        proc3::FSINFO => Res3::Fsinfo(Err((st, None))),
        proc3::PATHCONF => Res3::Pathconf(Err((st, None))),
        proc3::COMMIT => Res3::Commit(Err((st, w))),
        _ => Res3::ReaddirFail(st, None),
    }
}

/// The status a result carries.
fn status_of(r: &Res3<'_>) -> Nfsstat3 {
    fn st<T, U>(r: &Result<T, (Nfsstat3, U)>) -> Nfsstat3 {
        r.as_ref().err().map_or(Nfsstat3::OK, |e| e.0)
    }
    match r {
        Res3::Null => Nfsstat3::OK,
        Res3::Getattr(r) => r.as_ref().err().copied().unwrap_or(Nfsstat3::OK),
        Res3::Setattr(s, _) | Res3::Remove(s, _) | Res3::Rename(s, _, _) | Res3::Link(s, _, _) => {
            *s
        }
        Res3::ReaddirFail(s, _) => *s,
        Res3::Lookup(r) => st(r),
        Res3::Access(r) => st(r),
        Res3::Readlink(r) => st(r),
        Res3::Read(r) => st(r),
        Res3::Write(r) => st(r),
        Res3::Create(r) => st(r),
        Res3::Fsstat(r) => st(r),
        Res3::Fsinfo(r) => st(r),
        Res3::Pathconf(r) => st(r),
        Res3::Commit(r) => st(r),
    }
}

/// PATHCONF: what Linux reports for ext4/tmpfs.
const PATHCONF: PathConf = PathConf {
    linkmax: 32_000,
    name_max: crate::nfs::types::NAME_MAX as u32,
    no_trunc: true,
    chown_restricted: true,
    case_insensitive: false,
    case_preserving: true,
};
