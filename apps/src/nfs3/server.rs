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
//! Non-idempotent procedures go through the duplicate request cache ([`Drc`]).
//!
//! Recovery: undecodable arguments are GARBAGE_ARGS; everything else is an NFS3ERR_* result
//! with the weak cache consistency data RFC 1813 asks for (a retransmission of a call still
//! running gets NFS3ERR_JUKEBOX). With [`NfsConfig::drop_every`], every Nth non-idempotent call
//! is executed, its reply cached, and the connection closed instead of answering (fault
//! injection: the client reconnects, retransmits, and the cache answers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_engine::rpc::{AuthFlavor, AuthSys, OpaqueAuth};
use rpcrdma_engine::xdr::{XdrError, XdrWriter};
use rpcrdma_poller::program::SUCCESS_HEADER_LEN;
use rpcrdma_poller::{BufPool, Program, Reject, ReplyBuilder, Request};

use super::drc::{Drc, DrcConfig, DrcKey, Lookup};
use super::fs::Store;
use super::proto::{
    self, encode_read_head, encode_res, fsf3, proc3, Args3, DirWriter, FsInfo, PathConf, Res3,
};
use super::stats::NfsStats;
use super::types::{
    access, check_name_len, is_dot_entry, Caller, CreateHow, Fattr3, Fh, Ftype3, Nfsstat3, Sattr3,
    StableHow, Time3, WccData, PATH_MAX,
};

/// Octets kept for the RPC-over-RDMA transport header (with its Write list) when a reply
/// must go inline.
const TRANSPORT_HEADER_RESERVE: usize = 256;
/// Largest result encoded aside when it exceeds what the client can receive (a READLINK of a
/// `PATH_MAX` target with attributes fits easily).
const OVERSIZED_RESULT_MAX: usize = 16 * 1024;
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
}

impl Default for NfsConfig {
    fn default() -> Self {
        NfsConfig {
            max_io: 1 << 20,
            dtpref: 32 << 10,
            inline_send: 4096,
            drop_every: 0,
            drc: DrcConfig::default(),
        }
    }
}

/// True for the procedures whose retransmission must not run twice.
pub fn is_non_idempotent(p: u32) -> bool {
    matches!(
        p,
        proc3::SETATTR
            | proc3::WRITE
            | proc3::CREATE
            | proc3::MKDIR
            | proc3::SYMLINK
            | proc3::MKNOD
            | proc3::REMOVE
            | proc3::RMDIR
            | proc3::RENAME
            | proc3::LINK
    )
}

/// One export served over NFSv3.
pub struct Nfs3 {
    store: Arc<dyn Store>,
    pool: Option<BufPool>,
    drc: Drc,
    stats: Arc<NfsStats>,
    cfg: NfsConfig,
    /// Non-idempotent calls executed (drives `drop_every`).
    mutations: AtomicU64,
}

impl Nfs3 {
    /// Serves `store`; READ results are placed by DDP from buffers of `pool` (the server
    /// endpoint's, `Endpoint::buffers`), or inline when `None`.
    pub fn new(store: Arc<dyn Store>, pool: Option<BufPool>, cfg: NfsConfig) -> Arc<Nfs3> {
        let max_io = match &pool {
            Some(p) => cfg.max_io.min(p.buf_size() as u32),
            None => cfg.max_io,
        };
        Arc::new(Nfs3 {
            store,
            pool,
            drc: Drc::new(cfg.drc),
            stats: Arc::new(NfsStats::default()),
            cfg: NfsConfig { max_io, ..cfg },
            mutations: AtomicU64::new(0),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<NfsStats> {
        &self.stats
    }

    /// The store served.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
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
        p
    }

    /// Serves one call.
    pub fn handle(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        let p = req.proc_num;
        self.stats.call(p, &req.transport, req.write_chunks.len());
        let args = match proto::decode_args(p, req.args) {
            Ok(a) => a,
            Err(_) => {
                self.stats.bump(&self.stats.garbage_args);
                return Err(Reject::GarbageArgs);
            }
        };
        let caller = caller_of(&req.cred);
        if !is_non_idempotent(p) {
            return self.execute(req, out, &args, caller);
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
        if let Err(e) = self.execute(req, out, &args, caller) {
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

    fn add(&self, c: &AtomicU64, n: u64) {
        if n > 0 {
            // Relaxed: a statistic.
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Encodes `r` after what `out` holds, counting its status.
    fn put(&self, out: &mut ReplyBuilder<'_>, r: &Res3<'_>) -> Result<(), Reject> {
        self.stats.status(status_of(r));
        let mut w = XdrWriter::new(out.space());
        match encode_res(&mut w, r) {
            Ok(()) => {
                let n = w.finish();
                out.advance(n).map_err(|_| Reject::SystemErr)
            }
            // More than the client can receive (`space()` is what the inline threshold or
            // its Reply chunk carries): encode it aside and append it, so that the transport
            // answers ERR_CHUNK (Version One) / RDMA2_ERR_CANT_REPLY and the client sends the
            // call again offering a larger Reply chunk. Rare: results that big are READLINK
            // of a long target or READ/READDIR, which size themselves to the limit.
            Err(XdrError::NoSpace { .. }) => {
                let mut big = vec![0u8; OVERSIZED_RESULT_MAX];
                let mut w = XdrWriter::new(&mut big);
                if encode_res(&mut w, r).is_err() {
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

    fn attr(&self, fh: &Fh) -> Option<Fattr3> {
        self.store.getattr(fh).ok()
    }

    fn wcc_before(&self, fh: &Fh) -> WccData {
        WccData {
            before: self.attr(fh).map(|a| a.wcc()),
            after: None,
        }
    }

    fn wcc_after(&self, fh: &Fh, mut w: WccData) -> WccData {
        w.after = self.attr(fh);
        w
    }

    fn execute(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        args: &Args3<'_>,
        caller: Caller,
    ) -> Result<(), Reject> {
        let s = &*self.store;
        let res = match *args {
            Args3::Null => Res3::Null,
            Args3::Getattr { fh } => Res3::Getattr(s.getattr(&fh)),
            Args3::Setattr { fh, attr, guard } => self.setattr(&fh, &attr, guard),
            Args3::Lookup { dir, name } => self.lookup(&dir, name),
            Args3::Access { fh, access } => match s.getattr(&fh) {
                Ok(a) => Res3::Access(Ok((Some(a), access_bits(&a, caller, access)))),
                Err(e) => Res3::Access(Err((e, None))),
            },
            Args3::Readlink { fh } => {
                let mut buf = [0u8; PATH_MAX];
                let r = s.readlink(&fh, &mut buf);
                let a = self.attr(&fh);
                return self.put(
                    out,
                    &Res3::Readlink(match r {
                        Ok(n) => Ok((a, &buf[..n.min(PATH_MAX)])),
                        Err(e) => Err((e, a)),
                    }),
                );
            }
            Args3::Read { fh, offset, count } => return self.read(req, out, &fh, offset, count),
            Args3::Write {
                fh,
                offset,
                count,
                stable,
                data,
            } => self.write(&fh, offset, count, stable, data),
            Args3::Create { dir, name, how } => {
                let how = match how {
                    CreateHow::Unchecked(a) => CreateHow::Unchecked(owned_by(a, caller)),
                    CreateHow::Guarded(a) => CreateHow::Guarded(owned_by(a, caller)),
                    h @ CreateHow::Exclusive(_) => h,
                };
                self.create(&dir, name, |d, n| s.create(d, n, &how))
            }
            Args3::Mkdir { dir, name, attr } => {
                let a = owned_by(attr, caller);
                self.create(&dir, name, |d, n| s.mkdir(d, n, &a))
            }
            Args3::Symlink {
                dir,
                name,
                attr,
                target,
            } => {
                let a = owned_by(attr, caller);
                if target.is_empty() || target.len() > PATH_MAX {
                    self.create(&dir, name, |_, _| Err(Nfsstat3::INVAL))
                } else {
                    self.create(&dir, name, |d, n| s.symlink(d, n, target, &a))
                }
            }
            Args3::Mknod {
                dir, name, ftype, ..
            } => {
                let st = match ftype {
                    // RFC 1813 MKNOD: BADTYPE for the types MKNOD does not create.
                    Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk => Nfsstat3::BADTYPE,
                    _ => Nfsstat3::NOTSUPP,
                };
                self.create(&dir, name, |_, _| Err(st))
            }
            Args3::Remove { dir, name } => self.remove(&dir, name, false),
            Args3::Rmdir { dir, name } => self.remove(&dir, name, true),
            Args3::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => self.rename(&from_dir, from_name, &to_dir, to_name),
            Args3::Link { fh, dir, name } => {
                let wcc = self.wcc_before(&dir);
                let r = check_name_len(name).and_then(|()| {
                    if is_dot_entry(name) {
                        Err(Nfsstat3::EXIST)
                    } else {
                        s.link(&fh, &dir, name)
                    }
                });
                let wcc = self.wcc_after(&dir, wcc);
                Res3::Link(r.err().unwrap_or(Nfsstat3::OK), self.attr(&fh), wcc)
            }
            Args3::Readdir {
                dir,
                cookie,
                verf,
                count,
            } => return self.readdir(req, out, &dir, cookie, verf, count, count, false),
            Args3::Readdirplus {
                dir,
                cookie,
                verf,
                dircount,
                maxcount,
            } => return self.readdir(req, out, &dir, cookie, verf, dircount, maxcount, true),
            Args3::Fsstat { fh } => match s.fsstat(&fh) {
                Ok(f) => Res3::Fsstat(Ok((self.attr(&fh), f, 0))),
                Err(e) => Res3::Fsstat(Err((e, None))),
            },
            Args3::Fsinfo { fh } => match s.getattr(&fh) {
                Ok(a) => Res3::Fsinfo(Ok((Some(a), self.fsinfo()))),
                Err(e) => Res3::Fsinfo(Err((e, None))),
            },
            Args3::Pathconf { fh } => match s.getattr(&fh) {
                Ok(a) => Res3::Pathconf(Ok((Some(a), PATHCONF))),
                Err(e) => Res3::Pathconf(Err((e, None))),
            },
            Args3::Commit { fh, .. } => {
                let wcc = self.wcc_before(&fh);
                let r = s.commit(&fh);
                let wcc = self.wcc_after(&fh, wcc);
                match r {
                    Ok(()) => Res3::Commit(Ok((wcc, s.write_verifier()))),
                    Err(e) => Res3::Commit(Err((e, wcc))),
                }
            }
        };
        self.put(out, &res)
    }

    fn fsinfo(&self) -> FsInfo {
        FsInfo {
            rtmax: self.cfg.max_io,
            rtpref: self.cfg.max_io,
            rtmult: 4096,
            wtmax: self.cfg.max_io,
            wtpref: self.cfg.max_io,
            wtmult: 4096,
            dtpref: self.cfg.dtpref,
            maxfilesize: self.store.max_file_size(),
            time_delta: Time3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: fsf3::LINK | fsf3::SYMLINK | fsf3::HOMOGENEOUS | fsf3::CANSETTIME,
        }
    }

    /// WRITE: FBIG past 2^63 - 1 (Linux nfsd: OFFSET_MAX); the data is the call's stream.
    fn write(
        &self,
        fh: &Fh,
        offset: u64,
        count: u32,
        stable: StableHow,
        data: &[u8],
    ) -> Res3<'static> {
        let wcc = self.wcc_before(fh);
        let n = (count as usize).min(data.len());
        let end = offset.checked_add(n as u64);
        let r = if end.map_or(true, |e| e > i64::MAX as u64) {
            Err(Nfsstat3::FBIG)
        } else {
            self.store.write(fh, offset, &data[..n], stable)
        };
        let wcc = self.wcc_after(fh, wcc);
        match r {
            Ok(c) => Res3::Write(Ok((wcc, n as u32, c, self.store.write_verifier()))),
            Err(e) => Res3::Write(Err((e, wcc))),
        }
    }

    fn setattr(&self, fh: &Fh, attr: &Sattr3, guard: Option<Time3>) -> Res3<'static> {
        let wcc = self.wcc_before(fh);
        let r = match attr.size {
            Some(sz) if sz > i64::MAX as u64 => Err(Nfsstat3::FBIG),
            _ => self.store.setattr(fh, attr, guard),
        };
        let wcc = self.wcc_after(fh, wcc);
        Res3::Setattr(r.err().unwrap_or(Nfsstat3::OK), wcc)
    }

    fn lookup(&self, dir: &Fh, name: &[u8]) -> Res3<'static> {
        let dir_attr = self.attr(dir);
        let r = check_name_len(name).and_then(|()| self.store.lookup(dir, name));
        match r {
            Ok(fh) => Res3::Lookup(Ok((fh, self.attr(&fh), dir_attr))),
            Err(e) => Res3::Lookup(Err((e, dir_attr))),
        }
    }

    /// CREATE, MKDIR, SYMLINK, MKNOD: the same result shape.
    fn create(
        &self,
        dir: &Fh,
        name: &[u8],
        make: impl FnOnce(&Fh, &[u8]) -> Result<Fh, Nfsstat3>,
    ) -> Res3<'static> {
        let wcc = self.wcc_before(dir);
        let r = check_name_len(name).and_then(|()| {
            if is_dot_entry(name) {
                Err(Nfsstat3::EXIST)
            } else {
                make(dir, name)
            }
        });
        let wcc = self.wcc_after(dir, wcc);
        match r {
            Ok(fh) => Res3::Create(Ok((Some(fh), self.attr(&fh), wcc))),
            Err(e) => Res3::Create(Err((e, wcc))),
        }
    }

    fn remove(&self, dir: &Fh, name: &[u8], rmdir: bool) -> Res3<'static> {
        let wcc = self.wcc_before(dir);
        let r = check_name_len(name).and_then(|()| {
            if is_dot_entry(name) {
                // Linux nfsd (nfsd_unlink): ACCES for "." and "..".
                Err(Nfsstat3::ACCES)
            } else if rmdir {
                self.store.rmdir(dir, name)
            } else {
                self.store.remove(dir, name)
            }
        });
        let wcc = self.wcc_after(dir, wcc);
        Res3::Remove(r.err().unwrap_or(Nfsstat3::OK), wcc)
    }

    fn rename(&self, fd: &Fh, fname: &[u8], td: &Fh, tname: &[u8]) -> Res3<'static> {
        let (fw, tw) = (self.wcc_before(fd), self.wcc_before(td));
        let r = check_name_len(fname)
            .and_then(|()| check_name_len(tname))
            .and_then(|()| {
                if is_dot_entry(fname) || is_dot_entry(tname) {
                    Err(Nfsstat3::INVAL)
                } else {
                    self.store.rename(fd, fname, td, tname)
                }
            });
        let (fw, tw) = (self.wcc_after(fd, fw), self.wcc_after(td, tw));
        Res3::Rename(r.err().unwrap_or(Nfsstat3::OK), fw, tw)
    }

    /// READ: into a DDP buffer for the client's Write chunk, or inline after the header.
    fn read(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        fh: &Fh,
        offset: u64,
        count: u32,
    ) -> Result<(), Reject> {
        let attr = match self.store.getattr(fh) {
            Ok(a) => a,
            Err(e) => return self.put(out, &Res3::Read(Err((e, None)))),
        };
        // Linux nfsd (nfsd3_proc_read) clamps the offset to OFFSET_MAX and the count so the
        // read ends there: nothing is past it, and no store sees offset + count overflow.
        let room = (i64::MAX as u64).saturating_sub(offset);
        let count = u64::from(count.min(self.cfg.max_io)).min(room) as usize;
        if count == 0 {
            let eof = offset >= attr.size;
            return self.put(out, &Res3::Read(Ok((Some(attr), 0, eof, &[]))));
        }
        if let Some(&cap) = req.write_chunks.first() {
            // Zero copy: the store's registered block itself becomes the DDP item.
            match self
                .store
                .read_registered(fh, offset, count.min(cap as usize))
            {
                Some(Ok(r)) => {
                    self.stats.status(Nfsstat3::OK);
                    self.stats.bump(&self.stats.read_ddp);
                    self.stats.bump(&self.stats.read_zero_copy);
                    let mut w = XdrWriter::new(out.space());
                    encode_read_head(&mut w, Some(&attr), r.len as u32, r.eof)
                        .map_err(|_| Reject::SystemErr)?;
                    let hl = w.finish();
                    out.advance(hl).map_err(|_| Reject::SystemErr)?;
                    return out
                        .ddp_shared(r.buf, r.off, r.len)
                        .map_err(|_| Reject::SystemErr);
                }
                Some(Err(e)) => return self.put(out, &Res3::Read(Err((e, Some(attr))))),
                None => {}
            }
        }
        if let (Some(&cap), Some(pool)) = (req.write_chunks.first(), self.pool.as_ref()) {
            let Some(mut buf) = pool.get() else {
                return self.put(out, &Res3::Read(Err((Nfsstat3::JUKEBOX, Some(attr)))));
            };
            let n = count.min(cap as usize).min(buf.len());
            let (got, eof) = match self.store.read(fh, offset, &mut buf[..n]) {
                Ok(r) => r,
                Err(e) => return self.put(out, &Res3::Read(Err((e, Some(attr))))),
            };
            self.stats.status(Nfsstat3::OK);
            self.stats.bump(&self.stats.read_ddp);
            let mut w = XdrWriter::new(out.space());
            encode_read_head(&mut w, Some(&attr), got as u32, eof)
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
        let (got, eof) = match self.store.read(fh, offset, dst) {
            Ok(r) => r,
            Err(e) => return self.put(out, &Res3::Read(Err((e, Some(attr))))),
        };
        self.stats.status(Nfsstat3::OK);
        self.stats.bump(&self.stats.read_inline);
        let mut w = XdrWriter::new(&mut space[..READ_HEAD_MAX]);
        encode_read_head(&mut w, Some(&attr), got as u32, eof).map_err(|_| Reject::SystemErr)?;
        let hl = w.finish();
        // The header with attributes is exactly READ_HEAD_MAX long; be exact anyway.
        if hl != READ_HEAD_MAX {
            space.copy_within(READ_HEAD_MAX..READ_HEAD_MAX + got, hl);
        }
        let pad = (4 - got % 4) % 4;
        space[hl + got..hl + got + pad].fill(0);
        out.advance(hl + got + pad).map_err(|_| Reject::SystemErr)
    }

    /// READDIR and READDIRPLUS.
    #[allow(clippy::too_many_arguments)]
    fn readdir(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        dircount: u32,
        maxcount: u32,
        plus: bool,
    ) -> Result<(), Reject> {
        let attr = match self.store.getattr(dir) {
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
            let r = self
                .store
                .readdir(dir, cookie, verf, plus, &mut |e| dw.push(e));
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
        // The verifier the store hands out goes where `begin` wrote the client's: after the
        // status and the directory's post_op_attr (with attributes).
        let at = 4 + 4 + 84;
        out.space()[at..at + 8].copy_from_slice(&listing.verf);
        self.stats.status(Nfsstat3::OK);
        out.advance(n).map_err(|_| Reject::SystemErr)
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
    name_max: super::types::NAME_MAX as u32,
    no_trunc: true,
    chown_restricted: true,
    case_insensitive: false,
    case_preserving: true,
};

/// The caller of a call: AUTH_SYS uid/gid, anything else `nobody`.
pub fn caller_of(cred: &OpaqueAuth<'_>) -> Caller {
    if cred.flavor == AuthFlavor::Sys {
        if let Ok(a) = AuthSys::parse(cred.body) {
            return Caller {
                uid: a.uid,
                gid: a.gid,
            };
        }
    }
    Caller::NOBODY
}

/// New objects belong to the caller unless the client said otherwise (as nfsd's fsuid).
fn owned_by(mut a: Sattr3, c: Caller) -> Sattr3 {
    a.uid.get_or_insert(c.uid);
    a.gid.get_or_insert(c.gid);
    a
}

/// ACCESS3 bits the caller has on an object with attributes `a`, of those asked for: root
/// everything (but EXECUTE on a file without any execute bit, as Linux); others by the owner,
/// group or other permission bits.
pub fn access_bits(a: &Fattr3, c: Caller, want: u32) -> u32 {
    let dir = a.ftype == Ftype3::Dir;
    let (r, w, x) = if c.uid == 0 {
        (true, true, dir || a.mode & 0o111 != 0)
    } else {
        let bits = if c.uid == a.uid {
            (a.mode >> 6) & 7
        } else if c.gid == a.gid {
            (a.mode >> 3) & 7
        } else {
            a.mode & 7
        };
        (bits & 4 != 0, bits & 2 != 0, bits & 1 != 0)
    };
    let mut g = 0;
    if r {
        g |= access::READ;
    }
    if w {
        g |= access::MODIFY | access::EXTEND;
        if dir {
            g |= access::DELETE;
        }
    }
    if x {
        g |= if dir { access::LOOKUP } else { access::EXECUTE };
    }
    want & g
}
