//! A small NFSv3 client on the engine's public [`Client`] API: what the in-process tests and
//! tools use to drive [`super::server`] over the software provider (our own requester, with
//! the same chunk shapes the Linux client uses: WRITE data as a Read chunk, READ data into a
//! Write chunk, large listings through the Reply chunk).
//!
//! Normal operation: each method encodes its arguments with [`super::proto`], calls, and
//! decodes the results; a non-OK status comes back as [`NfsError::Status`]. Recovery: the
//! transport errors of [`Client`] ([`NfsError::Rpc`]) and undecodable replies
//! ([`NfsError::Decode`]) are returned, never panicked on.

use rpcrdma_engine::xdr::{XdrReader, XdrWriter};
use rpcrdma_poller::{CallArgs, Client, ClientError, Reply};

use super::proto::{
    self, decode_readdir_res, decode_res, encode_args, encode_write_head, proc3, Args3,
    DecodeError, FsInfo, OwnedDirEntry, PathConf, Res3,
};
use crate::nfs::types::{
    CreateHow, Fattr3, Fh, FsStat, Ftype3, Nfsstat3, Sattr3, StableHow, Time3, WccData,
};
use rpcrdma_poller::Proc;

/// READ3res up to the data's length word (the data went by DDP): count, eof, length.
fn read_head(b: &[u8]) -> NfsResult<(u32, bool, u32)> {
    let mut r = XdrReader::new(b);
    let st = Nfsstat3(r.get_u32().map_err(DecodeError::from)?);
    proto::get_post_op_attr(&mut r)?;
    if st != Nfsstat3::OK {
        return Err(NfsError::Status(st));
    }
    let cnt = r.get_u32().map_err(DecodeError::from)?;
    let eof = r.get_bool().map_err(DecodeError::from)?;
    let len = r.get_u32().map_err(DecodeError::from)?;
    Ok((cnt, eof, len))
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum NfsError {
    /// The RPC failed (transport, RPC-level reject).
    Rpc(ClientError),
    /// The reply did not decode.
    Decode(DecodeError),
    /// The server answered this NFS3ERR_* status.
    Status(Nfsstat3),
    /// No buffer was free.
    NoBuffer,
}

impl From<ClientError> for NfsError {
    fn from(e: ClientError) -> NfsError {
        NfsError::Rpc(e)
    }
}

impl From<DecodeError> for NfsError {
    fn from(e: DecodeError) -> NfsError {
        NfsError::Decode(e)
    }
}

/// Result of a client call.
pub type NfsResult<T> = Result<T, NfsError>;

/// An NFSv3 client over one RPC-over-RDMA connection.
pub struct NfsClient {
    c: Client,
}

fn fail<T, U>(r: Result<T, (Nfsstat3, U)>) -> NfsResult<T> {
    r.map_err(|(s, _)| NfsError::Status(s))
}

impl NfsClient {
    /// Wraps a connected client.
    pub fn new(c: Client) -> NfsClient {
        NfsClient { c }
    }

    /// The underlying RPC client.
    pub fn rpc(&self) -> &Client {
        &self.c
    }

    fn args(&self) -> NfsResult<CallArgs> {
        self.c.args().ok_or(NfsError::NoBuffer)
    }

    /// Calls `proc_num` with already-encoded arguments.
    pub fn call_raw(&self, proc_num: u32, bytes: &[u8]) -> NfsResult<Reply> {
        let mut a = self.args()?;
        a.put(bytes).map_err(|_| NfsError::NoBuffer)?;
        Ok(self
            .c
            .call_blocking(Proc::new(proto::NFS_PROGRAM, proto::NFS_V3, proc_num), a)?)
    }

    /// Calls with `args` encoded inline.
    pub fn call(&self, proc_num: u32, args: &Args3<'_>) -> NfsResult<Reply> {
        let mut a = self.args()?;
        let n = {
            let mut w = XdrWriter::new(a.space());
            encode_args(&mut w, args).map_err(|_| NfsError::NoBuffer)?;
            w.finish()
        };
        a.advance(n).map_err(|_| NfsError::NoBuffer)?;
        Ok(self
            .c
            .call_blocking(Proc::new(proto::NFS_PROGRAM, proto::NFS_V3, proc_num), a)?)
    }

    /// GETATTR.
    pub fn getattr(&self, fh: &Fh) -> NfsResult<Fattr3> {
        let r = self.call(proc3::GETATTR, &Args3::Getattr { fh: *fh })?;
        match decode_res(proc3::GETATTR, r.results())? {
            Res3::Getattr(a) => a.map_err(NfsError::Status),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::GETATTR))),
        }
    }

    /// LOOKUP: the handle of `name` in `dir`.
    pub fn lookup(&self, dir: &Fh, name: &[u8]) -> NfsResult<Fh> {
        let r = self.call(proc3::LOOKUP, &Args3::Lookup { dir: *dir, name })?;
        match decode_res(proc3::LOOKUP, r.results())? {
            Res3::Lookup(x) => fail(x).map(|(fh, _, _)| fh),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::LOOKUP))),
        }
    }

    /// CREATE, MKDIR, SYMLINK: the new object's handle.
    fn made(&self, proc_num: u32, args: &Args3<'_>) -> NfsResult<Fh> {
        let r = self.call(proc_num, args)?;
        match decode_res(proc_num, r.results())? {
            Res3::Create(x) => {
                fail(x).and_then(|(fh, _, _)| fh.ok_or(NfsError::Status(Nfsstat3::SERVERFAULT)))
            }
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc_num))),
        }
    }

    /// CREATE.
    pub fn create(&self, dir: &Fh, name: &[u8], how: CreateHow) -> NfsResult<Fh> {
        self.made(
            proc3::CREATE,
            &Args3::Create {
                dir: *dir,
                name,
                how,
            },
        )
    }

    /// MKDIR.
    pub fn mkdir(&self, dir: &Fh, name: &[u8], attr: Sattr3) -> NfsResult<Fh> {
        self.made(
            proc3::MKDIR,
            &Args3::Mkdir {
                dir: *dir,
                name,
                attr,
            },
        )
    }

    /// SYMLINK.
    pub fn symlink(&self, dir: &Fh, name: &[u8], target: &[u8]) -> NfsResult<Fh> {
        self.made(
            proc3::SYMLINK,
            &Args3::Symlink {
                dir: *dir,
                name,
                attr: Sattr3::default(),
                target,
            },
        )
    }

    /// The status of a call whose result is only a status and wcc data (REMOVE, RMDIR,
    /// RENAME, LINK, SETATTR).
    pub fn status(&self, proc_num: u32, args: &Args3<'_>) -> NfsResult<()> {
        let r = self.call(proc_num, args)?;
        let s = match decode_res(proc_num, r.results())? {
            Res3::Setattr(s, _) | Res3::Remove(s, _) | Res3::Rename(s, _, _) => s,
            Res3::Link(s, _, _) => s,
            _ => return Err(NfsError::Decode(DecodeError::UnknownProc(proc_num))),
        };
        if s == Nfsstat3::OK {
            Ok(())
        } else {
            Err(NfsError::Status(s))
        }
    }

    /// WRITE: the data goes as a Read chunk (DDP) when `ddp`, inline otherwise. Returns the
    /// count written, how stable it is and the write verifier.
    pub fn write(
        &self,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        ddp: bool,
    ) -> NfsResult<(u32, StableHow, [u8; 8])> {
        self.write_wcc(fh, offset, data, stable, ddp)
            .map(|(_, n, s, v)| (n, s, v))
    }

    /// WRITE as [`NfsClient::write`], with the file's weak cache consistency data first.
    pub fn write_wcc(
        &self,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        ddp: bool,
    ) -> NfsResult<(WccData, u32, StableHow, [u8; 8])> {
        let r = if ddp {
            let mut a = self.args()?;
            let mut b = self.c.buffer().ok_or(NfsError::NoBuffer)?;
            let buf = b.get_mut(..data.len()).ok_or(NfsError::NoBuffer)?;
            buf.copy_from_slice(data);
            let n = {
                let mut w = XdrWriter::new(a.space());
                encode_write_head(
                    &mut w,
                    fh,
                    offset,
                    data.len() as u32,
                    stable,
                    data.len() as u32,
                )
                .map_err(|_| NfsError::NoBuffer)?;
                w.finish()
            };
            a.advance(n).map_err(|_| NfsError::NoBuffer)?;
            a.ddp(b, data.len()).map_err(|_| NfsError::NoBuffer)?;
            self.c.call_blocking(
                Proc::new(proto::NFS_PROGRAM, proto::NFS_V3, proc3::WRITE),
                a,
            )?
        } else {
            self.call(
                proc3::WRITE,
                &Args3::Write {
                    fh: *fh,
                    offset,
                    count: data.len() as u32,
                    stable,
                    data,
                },
            )?
        };
        match decode_res(proc3::WRITE, r.results())? {
            Res3::Write(x) => fail(x),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::WRITE))),
        }
    }

    /// READ: into a Write chunk (DDP) when `ddp`, inline otherwise. Returns the data and eof.
    pub fn read(&self, fh: &Fh, offset: u64, count: u32, ddp: bool) -> NfsResult<(Vec<u8>, bool)> {
        let mut a = self.args()?;
        let n = {
            let mut w = XdrWriter::new(a.space());
            encode_args(
                &mut w,
                &Args3::Read {
                    fh: *fh,
                    offset,
                    count,
                },
            )
            .map_err(|_| NfsError::NoBuffer)?;
            w.finish()
        };
        a.advance(n).map_err(|_| NfsError::NoBuffer)?;
        if ddp {
            let b = self.c.buffer().ok_or(NfsError::NoBuffer)?;
            a.receptacle(b).map_err(|_| NfsError::NoBuffer)?;
        } else {
            a.expect_reply(count as usize + 256);
        }
        let r = self
            .c
            .call_blocking(Proc::new(proto::NFS_PROGRAM, proto::NFS_V3, proc3::READ), a)?;
        if let Some(d) = r.receptacle(0).filter(|_| ddp) {
            // The data went to the Write chunk: the inline results end with its length word.
            let (cnt, eof, len) = read_head(r.results())?;
            if len as usize != d.len() || cnt != len {
                return Err(NfsError::Status(Nfsstat3::SERVERFAULT));
            }
            return Ok((d.to_vec(), eof));
        }
        match decode_res(proc3::READ, r.results())? {
            Res3::Read(x) => {
                let (_, cnt, eof, inline) = fail(x)?;
                if inline.len() != cnt as usize {
                    return Err(NfsError::Status(Nfsstat3::SERVERFAULT));
                }
                Ok((inline.to_vec(), eof))
            }
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::READ))),
        }
    }

    /// READDIR or READDIRPLUS of one page.
    pub fn readdir_page(
        &self,
        dir: &Fh,
        cookie: u64,
        verf: [u8; 8],
        count: u32,
        plus: bool,
    ) -> NfsResult<proto::ReaddirRes> {
        let (p, args) = if plus {
            (
                proc3::READDIRPLUS,
                Args3::Readdirplus {
                    dir: *dir,
                    cookie,
                    verf,
                    dircount: count,
                    maxcount: count,
                },
            )
        } else {
            (
                proc3::READDIR,
                Args3::Readdir {
                    dir: *dir,
                    cookie,
                    verf,
                    count,
                },
            )
        };
        let r = self.call(p, &args)?;
        let d = decode_readdir_res(r.results(), plus)?;
        if d.status != Nfsstat3::OK {
            return Err(NfsError::Status(d.status));
        }
        Ok(d)
    }

    /// Every entry of `dir`, page by page (`count` octets each).
    pub fn readdir_all(&self, dir: &Fh, count: u32, plus: bool) -> NfsResult<Vec<OwnedDirEntry>> {
        let (mut cookie, mut verf, mut all) = (0u64, [0u8; 8], Vec::new());
        loop {
            let page = self.readdir_page(dir, cookie, verf, count, plus)?;
            verf = page.verf;
            if let Some(last) = page.entries.last() {
                cookie = last.cookie;
            }
            let empty = page.entries.is_empty();
            all.extend(page.entries);
            if page.eof {
                return Ok(all);
            }
            if empty {
                return Err(NfsError::Status(Nfsstat3::SERVERFAULT));
            }
        }
    }

    /// FSINFO.
    pub fn fsinfo(&self, fh: &Fh) -> NfsResult<FsInfo> {
        let r = self.call(proc3::FSINFO, &Args3::Fsinfo { fh: *fh })?;
        match decode_res(proc3::FSINFO, r.results())? {
            Res3::Fsinfo(x) => fail(x).map(|(_, f)| f),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::FSINFO))),
        }
    }
}

/// The rest of the procedures, and calls with a chosen program, version or reply size.
impl NfsClient {
    /// Calls `proc_num` of any program and version with already-encoded arguments (RPC-level
    /// errors come back as [`ClientError::Rpc`] / [`ClientError::Denied`]).
    pub fn call_as(
        &self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        bytes: &[u8],
    ) -> Result<Reply, ClientError> {
        let mut a = self.c.args().ok_or(ClientError::Busy)?;
        a.put(bytes).map_err(|_| ClientError::Busy)?;
        self.c.call_blocking(Proc::new(prog, vers, proc_num), a)
    }

    /// Calls with `args` encoded inline, expecting a reply of at most `hint` octets (with a
    /// hint within the inline threshold no Reply chunk is offered; see
    /// [`CallArgs::expect_reply`]).
    pub fn call_hint(&self, proc_num: u32, args: &Args3<'_>, hint: usize) -> NfsResult<Reply> {
        let mut a = self.args()?;
        let n = {
            let mut w = XdrWriter::new(a.space());
            encode_args(&mut w, args).map_err(|_| NfsError::NoBuffer)?;
            w.finish()
        };
        a.advance(n).map_err(|_| NfsError::NoBuffer)?;
        a.expect_reply(hint);
        Ok(self
            .c
            .call_blocking(Proc::new(proto::NFS_PROGRAM, proto::NFS_V3, proc_num), a)?)
    }

    /// Calls with `args` and hands the decoded result to `f` (any status).
    pub fn with_res<T>(&self, args: &Args3<'_>, f: impl FnOnce(Res3<'_>) -> T) -> NfsResult<T> {
        let p = args.proc_num();
        let r = self.call(p, args)?;
        Ok(f(decode_res(p, r.results())?))
    }

    /// NULL.
    pub fn null(&self) -> NfsResult<()> {
        self.call(proc3::NULL, &Args3::Null).map(drop)
    }

    /// SETATTR: the object's weak cache consistency data.
    pub fn setattr(&self, fh: &Fh, attr: &Sattr3, guard: Option<Time3>) -> NfsResult<WccData> {
        let a = Args3::Setattr {
            fh: *fh,
            attr: *attr,
            guard,
        };
        match self.with_res(&a, |r| match r {
            Res3::Setattr(s, w) => Ok((s, w)),
            _ => Err(DecodeError::UnknownProc(proc3::SETATTR)),
        })?? {
            (Nfsstat3::OK, w) => Ok(w),
            (s, _) => Err(NfsError::Status(s)),
        }
    }

    /// LOOKUP: the handle, its attributes and the directory's.
    pub fn lookup_attr(
        &self,
        dir: &Fh,
        name: &[u8],
    ) -> NfsResult<(Fh, Option<Fattr3>, Option<Fattr3>)> {
        let a = Args3::Lookup { dir: *dir, name };
        self.with_res(&a, |r| match r {
            Res3::Lookup(x) => fail(x),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::LOOKUP))),
        })?
    }

    /// ACCESS: the bits granted of `want`.
    pub fn access(&self, fh: &Fh, want: u32) -> NfsResult<u32> {
        let a = Args3::Access {
            fh: *fh,
            access: want,
        };
        self.with_res(&a, |r| match r {
            Res3::Access(x) => fail(x).map(|(_, bits)| bits),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::ACCESS))),
        })?
    }

    /// READLINK: the target.
    pub fn readlink(&self, fh: &Fh) -> NfsResult<Vec<u8>> {
        self.with_res(&Args3::Readlink { fh: *fh }, |r| match r {
            Res3::Readlink(x) => fail(x).map(|(_, t)| t.to_vec()),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::READLINK))),
        })?
    }

    /// CREATE with the whole result: handle, attributes, the directory's wcc data.
    pub fn create_wcc(
        &self,
        dir: &Fh,
        name: &[u8],
        how: CreateHow,
    ) -> NfsResult<(Fh, Option<Fattr3>, WccData)> {
        let a = Args3::Create {
            dir: *dir,
            name,
            how,
        };
        self.with_res(&a, |r| match r {
            Res3::Create(x) => fail(x).and_then(|(fh, at, w)| {
                fh.map(|f| (f, at, w))
                    .ok_or(NfsError::Status(Nfsstat3::SERVERFAULT))
            }),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::CREATE))),
        })?
    }

    /// MKNOD of a FIFO, socket or device (`ftype`), or of a type MKNOD refuses.
    pub fn mknod(&self, dir: &Fh, name: &[u8], ftype: Ftype3) -> NfsResult<Fh> {
        self.made(
            proc3::MKNOD,
            &Args3::Mknod {
                dir: *dir,
                name,
                ftype,
                attr: Sattr3::default(),
                rdev: (1, 3),
            },
        )
    }

    /// REMOVE.
    pub fn remove(&self, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.status(proc3::REMOVE, &Args3::Remove { dir: *dir, name })
    }

    /// RMDIR.
    pub fn rmdir(&self, dir: &Fh, name: &[u8]) -> NfsResult<()> {
        self.status(proc3::RMDIR, &Args3::Rmdir { dir: *dir, name })
    }

    /// RENAME.
    pub fn rename(&self, from_dir: &Fh, from: &[u8], to_dir: &Fh, to: &[u8]) -> NfsResult<()> {
        let a = Args3::Rename {
            from_dir: *from_dir,
            from_name: from,
            to_dir: *to_dir,
            to_name: to,
        };
        self.status(proc3::RENAME, &a)
    }

    /// LINK: the file's attributes after the link.
    pub fn link(&self, fh: &Fh, dir: &Fh, name: &[u8]) -> NfsResult<Option<Fattr3>> {
        let a = Args3::Link {
            fh: *fh,
            dir: *dir,
            name,
        };
        match self.with_res(&a, |r| match r {
            Res3::Link(s, at, _) => Ok((s, at)),
            _ => Err(DecodeError::UnknownProc(proc3::LINK)),
        })?? {
            (Nfsstat3::OK, at) => Ok(at),
            (s, _) => Err(NfsError::Status(s)),
        }
    }

    /// COMMIT: the write verifier.
    pub fn commit(&self, fh: &Fh, offset: u64, count: u32) -> NfsResult<[u8; 8]> {
        let a = Args3::Commit {
            fh: *fh,
            offset,
            count,
        };
        self.with_res(&a, |r| match r {
            Res3::Commit(x) => fail(x).map(|(_, v)| v),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::COMMIT))),
        })?
    }

    /// FSSTAT.
    pub fn fsstat(&self, fh: &Fh) -> NfsResult<FsStat> {
        self.with_res(&Args3::Fsstat { fh: *fh }, |r| match r {
            Res3::Fsstat(x) => fail(x).map(|(_, s, _)| s),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::FSSTAT))),
        })?
    }

    /// PATHCONF.
    pub fn pathconf(&self, fh: &Fh) -> NfsResult<PathConf> {
        self.with_res(&Args3::Pathconf { fh: *fh }, |r| match r {
            Res3::Pathconf(x) => fail(x).map(|(_, p)| p),
            _ => Err(NfsError::Decode(DecodeError::UnknownProc(proc3::PATHCONF))),
        })?
    }
}
