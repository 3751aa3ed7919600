//! The NFSACL protocol (program 100227, version 3), the side protocol through which NFSv3
//! clients read and set POSIX ACLs (`getfacl` / `setfacl` on a Linux NFSv3 mount), served
//! beside NFSv3 on the same transport: GETACL and SETACL against the export's
//! [`Store`](crate::nfs::store::Store), with the wire form and the answers of Linux nfsd
//! (`fs/nfsd/nfs3acl.c`, `fs/nfs_common/nfsacl.c`).
//!
//! Wire form: an ACL is its entry count, then an XDR array of entries (tag, id, `rwx`). A
//! three-entry ACL (what a mode stands for) goes out as four, with a mask equal to the owning
//! group's entry; the owner's and owning group's entries carry the object's uid and gid,
//! mask and other entries 0, default entries' tags the 0x1000 flag. Coming in, entries are
//! sorted, their unnamed ids ignored, and a four-entry ACL whose mask equals its owning
//! group's entry taken as the three-entry one ([`Acl::from_entries`]).
//!
//! Normal operation: GETACL needs no permission (Linux nfsd asks none); an object without an
//! access ACL is shown the one its mode stands for. SETACL sets the access ACL, then the
//! default ACL, each removed when absent from the call's mask or empty; it needs ownership
//! ([`Store::setacl`](crate::nfs::store::Store::setacl)) and a writable export (ROFS). Neither
//! goes through the duplicate request cache (as Linux nfsd, `RC_NOCACHE`).
//!
//! Recovery: undecodable arguments (a truncated call, more than 1 024 entries, an array longer
//! than its count, an unknown tag, permission bits past `rwx` but on the mask, SETACL mask bits
//! past the four defined) are GARBAGE_ARGS; a GETACL mask with other bits is NFS3ERR_INVAL, as
//! Linux nfsd answers. Nothing is sized from a wire count before it is checked against 1 024.

use std::sync::Arc;

use rpcrdma_engine::xdr::{XdrError, XdrReader, XdrWriter};
use rpcrdma_poller::{Program, Reject, ReplyBuilder, Request};

use super::proto::{get_fh3, get_post_op_attr, put_fh3, put_post_op_attr, DecodeError};
use super::server::{Nfs3, OnReactor, ServeNow};
use crate::nfs::acl::{tag, Ace, Acl, Acls, MAX_ENTRIES};
use crate::nfs::admit::Refusal;
use crate::nfs::types::{Fattr3, Fh, Nfsstat3};

/// The NFSACL program number.
pub const PROGRAM: u32 = 100227;
/// The version served (the one NFSv3 clients use).
pub const VERSION: u32 = 3;
/// GETACL.
pub const GETACL: u32 = 1;
/// SETACL.
pub const SETACL: u32 = 2;

/// Mask bits of GETACL and SETACL.
pub mod mask {
    /// The access ACL's entries.
    pub const ACL: u32 = 0x1;
    /// The access ACL's entry count.
    pub const ACLCNT: u32 = 0x2;
    /// The default ACL's entries.
    pub const DFACL: u32 = 0x4;
    /// The default ACL's entry count.
    pub const DFACLCNT: u32 = 0x8;
    /// Every defined bit.
    pub const ALL: u32 = 0xf;
}

/// The flag a default ACL's entries carry in their tag.
pub const DEFAULT_FLAG: u32 = 0x1000;

/// Octets of one entry on the wire.
const ENTRY_LEN: usize = 12;

/// SETACL arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAclArgs {
    /// The object.
    pub fh: Fh,
    /// Which ACLs the call carries ([`mask`]).
    pub mask: u32,
    /// The access ACL (`None`: removed).
    pub access: Option<Acl>,
    /// The default ACL (`None`: removed).
    pub default: Option<Acl>,
}

/// GETACL arguments: the object and which ACLs to return ([`mask`]).
pub fn decode_getacl_args(b: &[u8]) -> Result<(Fh, u32), DecodeError> {
    let mut r = XdrReader::new(b);
    Ok((get_fh3(&mut r)?, r.get_u32()?))
}

/// SETACL arguments; an ACL whose bit is not in the mask is read past and taken as `None`.
pub fn decode_setacl_args(b: &[u8]) -> Result<SetAclArgs, DecodeError> {
    let mut r = XdrReader::new(b);
    let fh = get_fh3(&mut r)?;
    let m = r.get_u32()?;
    if m & !mask::ALL != 0 {
        return Err(DecodeError::BadValue {
            what: "nfsacl mask",
            value: m,
        });
    }
    let access = get_acl(&mut r, m & mask::ACL != 0)?;
    let default = get_acl(&mut r, m & mask::DFACL != 0)?;
    Ok(SetAclArgs {
        fh,
        mask: m,
        access,
        default,
    })
}

/// One ACL (count, then the entry array), parsed when `want`: the array may not be longer
/// than the count, nor the count above [`MAX_ENTRIES`]; a parsed one must hold exactly its
/// count (Linux's `nfsacl_decode`).
fn get_acl(r: &mut XdrReader<'_>, want: bool) -> Result<Option<Acl>, DecodeError> {
    let count = r.get_u32()?;
    if count as usize > MAX_ENTRIES {
        return Err(DecodeError::BadValue {
            what: "nfsacl count",
            value: count,
        });
    }
    let len = r.get_u32()?;
    if len > count || (want && len != count) {
        return Err(DecodeError::BadValue {
            what: "nfsacl array length",
            value: len,
        });
    }
    let raw = r.take(len as usize * ENTRY_LEN)?;
    if !want {
        return Ok(None);
    }
    let word = |c: &[u8], i: usize| u32::from_be_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
    let entries = raw
        .chunks_exact(ENTRY_LEN)
        .map(|c| Ace::new(word(c, 0) & !DEFAULT_FLAG, word(c, 4), word(c, 8)))
        .collect();
    Acl::from_entries(entries).map_err(|e| DecodeError::BadValue {
        what: "nfsacl entry",
        value: match e {
            crate::nfs::acl::AclError::BadTag(v) | crate::nfs::acl::AclError::BadPerm(v) => v,
            _ => 0,
        },
    })
}

/// What one ACL of a GETACL reply is made of: the object's ACL, the one its mode stands for
/// (made as it is written: no allocation), or none.
#[derive(Clone, Copy)]
enum Shown<'a> {
    Acl(&'a Acl),
    Mode(u32),
    None,
}

/// Encodes one ACL as Linux nfsd does: its count (a three-entry ACL, the mode's included,
/// counts four: the mask equal to the owning group's entry is added), then the entries when
/// `entries`, each tag with `flag`, the owner's and owning group's ids from `a`.
fn put_acl(
    w: &mut XdrWriter<'_>,
    a: &Fattr3,
    acl: Shown<'_>,
    entries: bool,
    flag: u32,
) -> Result<(), XdrError> {
    let n = match acl {
        Shown::Acl(x) => x.entries().len().max(4),
        Shown::Mode(_) => 4,
        Shown::None => 0,
    };
    w.put_u32(n as u32)?;
    if !entries || n == 0 {
        return w.put_u32(0);
    }
    w.put_u32(n as u32)?;
    let put = |e: &Ace| {
        let id = match e.tag {
            tag::USER_OBJ => a.uid,
            tag::GROUP_OBJ => a.gid,
            tag::USER | tag::GROUP => e.id,
            _ => 0,
        };
        w.put_u32(e.tag | flag)?;
        w.put_u32(id)?;
        w.put_u32(e.perm & 7)
    };
    let minimal = |owner: u32, group: u32, other: u32| {
        [
            Ace::new(tag::USER_OBJ, 0, owner),
            Ace::new(tag::GROUP_OBJ, 0, group),
            Ace::new(tag::MASK, 0, group),
            Ace::new(tag::OTHER, 0, other),
        ]
    };
    match acl {
        Shown::Mode(m) => minimal((m >> 6) & 7, (m >> 3) & 7, m & 7)
            .iter()
            .try_for_each(put),
        Shown::Acl(x) => match x.entries() {
            [owner, group, other] => minimal(owner.perm, group.perm, other.perm)
                .iter()
                .try_for_each(put),
            list => list.iter().try_for_each(put),
        },
        Shown::None => Ok(()),
    }
}

/// GETACL results: status, the object's attributes, then on success the mask and both ACLs
/// as `m` asks for them (the access ACL from the mode when the object has none).
pub fn encode_getacl_res(
    w: &mut XdrWriter<'_>,
    r: &Result<(Fattr3, u32, Acls), (Nfsstat3, Option<Fattr3>)>,
) -> Result<(), XdrError> {
    match r {
        Ok((a, m, acls)) => {
            w.put_u32(Nfsstat3::OK.0)?;
            put_post_op_attr(w, Some(a))?;
            w.put_u32(*m)?;
            let access = match (&acls.access, m & (mask::ACL | mask::ACLCNT) != 0) {
                (_, false) => Shown::None,
                (Some(x), true) => Shown::Acl(x),
                (None, true) => Shown::Mode(a.mode),
            };
            put_acl(w, a, access, m & mask::ACL != 0, 0)?;
            let default = match (&acls.default, m & (mask::DFACL | mask::DFACLCNT) != 0) {
                (Some(x), true) => Shown::Acl(x),
                _ => Shown::None,
            };
            put_acl(w, a, default, m & mask::DFACL != 0, DEFAULT_FLAG)
        }
        Err((st, a)) => {
            w.put_u32(st.0)?;
            put_post_op_attr(w, a.as_ref())
        }
    }
}

/// SETACL results: status and the object's attributes.
pub fn encode_setacl_res(
    w: &mut XdrWriter<'_>,
    st: Nfsstat3,
    a: Option<&Fattr3>,
) -> Result<(), XdrError> {
    w.put_u32(st.0)?;
    put_post_op_attr(w, a)
}

/// GETACL arguments (a client's side).
pub fn encode_getacl_args(w: &mut XdrWriter<'_>, fh: &Fh, m: u32) -> Result<(), XdrError> {
    put_fh3(w, fh)?;
    w.put_u32(m)
}

/// SETACL arguments (a client's side): entries as given, with their count.
pub fn encode_setacl_args(
    w: &mut XdrWriter<'_>,
    fh: &Fh,
    m: u32,
    access: &[Ace],
    default: &[Ace],
) -> Result<(), XdrError> {
    put_fh3(w, fh)?;
    w.put_u32(m)?;
    for (list, flag) in [(access, 0), (default, DEFAULT_FLAG)] {
        w.put_u32(list.len() as u32)?;
        w.put_u32(list.len() as u32)?;
        for e in list {
            w.put_u32(e.tag | flag)?;
            w.put_u32(e.id)?;
            w.put_u32(e.perm)?;
        }
    }
    Ok(())
}

/// GETACL results as a client reads them: status, attributes, and on success the mask and
/// each ACL's count and entries as sent (default tags without their flag).
pub type GetAclRes = (
    Nfsstat3,
    Option<Fattr3>,
    Option<(u32, [(u32, Vec<Ace>); 2])>,
);

/// Decodes GETACL results (a client's side).
pub fn decode_getacl_res(b: &[u8]) -> Result<GetAclRes, DecodeError> {
    let mut r = XdrReader::new(b);
    let st = Nfsstat3(r.get_u32()?);
    let a = get_post_op_attr(&mut r)?;
    if st != Nfsstat3::OK {
        return Ok((st, a, None));
    }
    let m = r.get_u32()?;
    let mut one = || -> Result<(u32, Vec<Ace>), DecodeError> {
        let count = r.get_u32()?;
        let len = r.get_count(MAX_ENTRIES as u32)?;
        let mut v = Vec::with_capacity(len as usize);
        for _ in 0..len {
            let t = r.get_u32()? & !DEFAULT_FLAG;
            v.push(Ace::new(t, r.get_u32()?, r.get_u32()?));
        }
        Ok((count, v))
    };
    let access = one()?;
    let default = one()?;
    Ok((st, a, Some((m, [access, default]))))
}

/// The NFSACL service beside an NFSv3 server: its exports, counters and reply encoding.
pub struct NfsAcl {
    nfs: Arc<Nfs3>,
}

impl NfsAcl {
    /// Serves NFSACL for the exports of `nfs`.
    pub fn new(nfs: Arc<Nfs3>) -> Arc<NfsAcl> {
        Arc::new(NfsAcl { nfs })
    }

    /// Program 100227 version 3: GETACL and SETACL (NULL is the server's own). In worker
    /// mode, with the NFSv3 server's `calls_on_reactor`, a call the store serves on the reactor
    /// is answered there, as the NFSv3 calls are ([`Store::run_on_reactor`]).
    ///
    /// [`Store::run_on_reactor`]: crate::nfs::store::Store::run_on_reactor
    pub fn program(self: &Arc<Self>) -> Program {
        let mut p = Program::new(PROGRAM, VERSION..=VERSION);
        for n in [GETACL, SETACL] {
            p = match self.nfs.calls_on_reactor() {
                true => p.procedure(n, OnReactor(Arc::clone(self))),
                false => {
                    let me = Arc::clone(self);
                    p.procedure(n, move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| {
                        me.handle(req, out)
                    })
                }
            };
        }
        p
    }

    /// A call on the reactor (worker mode): served when its handle is admitted and the store
    /// serves its caller there; `None` leaves it to a worker, with `out` untouched.
    fn serve_now(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuilder<'_>,
    ) -> Option<Result<(), Reject>> {
        let fh = match req.proc_num {
            GETACL => decode_getacl_args(req.args).ok()?.0,
            _ => decode_setacl_args(req.args).ok()?.fh,
        };
        let table = self.nfs.exports();
        let (adm, _) = table
            .admit_handle(&fh, req.transport.peer.ip(), &req.cred)
            .ok()?;
        let mut r = None;
        let store = Arc::clone(&adm.share.store);
        store.run_on_reactor(&adm.cred, false, &mut || {
            let stats = self.nfs.stats();
            stats.bump(&stats.on_reactor);
            r = Some(self.handle(req, out));
        });
        r
    }

    /// Serves one call.
    pub fn handle(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        let stats = self.nfs.stats();
        let garbage = |_| {
            stats.bump(&stats.garbage_args);
            Reject::GarbageArgs
        };
        let get = req.proc_num == GETACL;
        stats.acl_call(get, &req.transport, req.write_chunks.len());
        if get {
            let (fh, m) = decode_getacl_args(req.args).map_err(garbage)?;
            let r = self.getacl(req, &fh, m)?;
            let st = r.as_ref().err().map_or(Nfsstat3::OK, |e| e.0);
            return self.nfs.put_with(out, st, &|w| encode_getacl_res(w, &r));
        }
        let args = decode_setacl_args(req.args).map_err(garbage)?;
        let (st, a) = self.setacl(req, &args)?;
        self.nfs
            .put_with(out, st, &|w| encode_setacl_res(w, st, a.as_ref()))
    }

    /// GETACL: the object's attributes, the mask and its ACLs; INVAL for a mask with bits
    /// past the four defined.
    #[allow(clippy::type_complexity)]
    fn getacl(
        &self,
        req: &Request<'_>,
        fh: &Fh,
        m: u32,
    ) -> Result<Result<(Fattr3, u32, Acls), (Nfsstat3, Option<Fattr3>)>, Reject> {
        let table = self.nfs.exports();
        let (adm, inner) = match table.admit_handle(fh, req.transport.peer.ip(), &req.cred) {
            Ok(a) => a,
            Err(Refusal::Status(st)) => return Ok(Err((st, None))),
            Err(Refusal::Auth(why)) => return Err(self.auth_error(why)),
        };
        let store = &adm.share.store;
        if m & !mask::ALL != 0 {
            return Ok(Err((Nfsstat3::INVAL, store.getattr(&inner).ok())));
        }
        Ok(match store.getacl(&adm.cred, &inner) {
            Ok((a, acls)) => Ok((a, m, acls)),
            Err(st) => Err((st, store.getattr(&inner).ok())),
        })
    }

    /// SETACL: the status and the object's attributes after it; ROFS on a read-only export.
    fn setacl(
        &self,
        req: &Request<'_>,
        args: &SetAclArgs,
    ) -> Result<(Nfsstat3, Option<Fattr3>), Reject> {
        let table = self.nfs.exports();
        let (adm, inner) = match table.admit_handle(&args.fh, req.transport.peer.ip(), &req.cred) {
            Ok(a) => a,
            Err(Refusal::Status(st)) => return Ok((st, None)),
            Err(Refusal::Auth(why)) => return Err(self.auth_error(why)),
        };
        let store = &adm.share.store;
        let st = if adm.opts.read_only {
            Nfsstat3::ROFS
        } else {
            let r = store.setacl(
                &adm.cred,
                &inner,
                args.access.as_ref(),
                args.default.as_ref(),
            );
            r.err().unwrap_or(Nfsstat3::OK)
        };
        Ok((st, store.getattr(&inner).ok()))
    }

    fn auth_error(&self, why: rpcrdma_engine::rpc::AuthStat) -> Reject {
        let stats = self.nfs.stats();
        stats.bump(&stats.auth_errors);
        Reject::Auth(why)
    }
}

impl ServeNow for NfsAcl {
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

#[cfg(test)]
#[path = "nfsacl_tests.rs"]
mod tests;
