//! NFSv3 results (RFC 1813 `*3res`): [`Res3`], built by the server's handlers and encoded by
//! [`encode_res`] (or [`encode_read_head`] for a READ whose data goes as a DDP item), and
//! decoded by our client with [`decode_res`].
//!
//! Normal operation: a result is a plain value borrowing READ data and READLINK targets;
//! encoding writes straight into the reply buffer. Recovery: an encode that does not fit
//! returns [`XdrError::NoSpace`] (the handler answers an error status instead); a failure arm
//! that carries `NFS3_OK` goes out as SERVERFAULT so the reply stays decodable; malformed
//! results are a [`DecodeError`] for the client.

use super::{
    get_fattr3, get_fh3, get_nfspath3, get_post_op_attr, get_post_op_fh3, get_stable_how,
    get_time3, get_verf, get_wcc_data, proc3, put_fail_status, put_fattr3, put_fh3,
    put_post_op_attr, put_post_op_fh3, put_time3, put_wcc_data, DecodeError,
};
use crate::nfs::types::{Fattr3, Fh, FsStat, Nfsstat3, StableHow, Time3, WccData};
use rpcrdma_engine::xdr::{XdrError, XdrReader, XdrWriter};

/// `FSINFO3resok` values (after the attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsInfo {
    /// Largest READ.
    pub rtmax: u32,
    /// Preferred READ size.
    pub rtpref: u32,
    /// Suggested READ multiple.
    pub rtmult: u32,
    /// Largest WRITE.
    pub wtmax: u32,
    /// Preferred WRITE size.
    pub wtpref: u32,
    /// Suggested WRITE multiple.
    pub wtmult: u32,
    /// Preferred READDIR size.
    pub dtpref: u32,
    /// Largest file size.
    pub maxfilesize: u64,
    /// Time granularity the server keeps.
    pub time_delta: Time3,
    /// `FSF3_*` bits ([`fsf3`]).
    pub properties: u32,
}

/// FSINFO `properties` bits.
#[allow(missing_docs)]
pub mod fsf3 {
    pub const LINK: u32 = 0x0001;
    pub const SYMLINK: u32 = 0x0002;
    pub const HOMOGENEOUS: u32 = 0x0008;
    pub const CANSETTIME: u32 = 0x0010;
}

/// `PATHCONF3resok` values (after the attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathConf {
    /// Largest link count.
    pub linkmax: u32,
    /// Longest name component.
    pub name_max: u32,
    /// True when longer names are refused (not truncated).
    pub no_trunc: bool,
    /// True when only root may change an owner.
    pub chown_restricted: bool,
    /// True when names compare case-insensitively.
    pub case_insensitive: bool,
    /// True when the case of names is kept.
    pub case_preserving: bool,
}

/// One NFSv3 result. `Ok` arms are the `*3resok`, `Err` arms the `*3resfail` with their
/// status (which must not be `NFS3_OK`; see [`encode_res`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::type_complexity)] // the arms spell out RFC 1813's resok / resfail bodies
pub enum Res3<'a> {
    /// NULL (no result body).
    Null,
    /// GETATTR: the attributes.
    Getattr(Result<Fattr3, Nfsstat3>),
    /// SETATTR: status and `obj_wcc` (both arms).
    Setattr(Nfsstat3, WccData),
    /// LOOKUP: ok (object, object attributes, directory attributes); fail (status, directory
    /// attributes).
    Lookup(Result<(Fh, Option<Fattr3>, Option<Fattr3>), (Nfsstat3, Option<Fattr3>)>),
    /// ACCESS: ok (attributes, granted bits).
    Access(Result<(Option<Fattr3>, u32), (Nfsstat3, Option<Fattr3>)>),
    /// READLINK: ok (attributes, target).
    Readlink(Result<(Option<Fattr3>, &'a [u8]), (Nfsstat3, Option<Fattr3>)>),
    /// READ: ok (attributes, count, eof, data); `count` should be `data.len()`.
    Read(Result<(Option<Fattr3>, u32, bool, &'a [u8]), (Nfsstat3, Option<Fattr3>)>),
    /// WRITE: ok (file wcc, count, committed, verifier).
    Write(Result<(WccData, u32, StableHow, [u8; 8]), (Nfsstat3, WccData)>),
    /// CREATE, MKDIR, SYMLINK and MKNOD (one XDR shape): ok (handle, attributes, dir wcc).
    Create(Result<(Option<Fh>, Option<Fattr3>, WccData), (Nfsstat3, WccData)>),
    /// REMOVE and RMDIR: status and `dir_wcc`.
    Remove(Nfsstat3, WccData),
    /// RENAME: status, `fromdir_wcc`, `todir_wcc`.
    Rename(Nfsstat3, WccData, WccData),
    /// LINK: status, file attributes, `linkdir_wcc`.
    Link(Nfsstat3, Option<Fattr3>, WccData),
    /// FSSTAT: ok (attributes, counts, invarsec).
    Fsstat(Result<(Option<Fattr3>, FsStat, u32), (Nfsstat3, Option<Fattr3>)>),
    /// FSINFO: ok (attributes, values).
    Fsinfo(Result<(Option<Fattr3>, FsInfo), (Nfsstat3, Option<Fattr3>)>),
    /// PATHCONF: ok (attributes, values).
    Pathconf(Result<(Option<Fattr3>, PathConf), (Nfsstat3, Option<Fattr3>)>),
    /// COMMIT: ok (file wcc, write verifier).
    Commit(Result<(WccData, [u8; 8]), (Nfsstat3, WccData)>),
    /// READDIR and READDIRPLUS failure (status, directory attributes); success goes through
    /// [`DirWriter`](super::DirWriter).
    ReaddirFail(Nfsstat3, Option<Fattr3>),
}

fn ok(w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
    w.put_u32(Nfsstat3::OK.0)
}

/// A `*3resfail` made of a status and a `post_op_attr`.
fn fail_attr(w: &mut XdrWriter<'_>, s: Nfsstat3, a: &Option<Fattr3>) -> Result<(), XdrError> {
    put_fail_status(w, s)?;
    put_post_op_attr(w, a.as_ref())
}

/// A `*3resfail` made of a status and a `wcc_data`.
fn fail_wcc(w: &mut XdrWriter<'_>, s: Nfsstat3, d: &WccData) -> Result<(), XdrError> {
    put_fail_status(w, s)?;
    put_wcc_data(w, d)
}

/// Encodes a result (the octets after the RPC accepted-reply header). On
/// [`XdrError::NoSpace`] the writer may hold a partial result: start again on a fresh writer.
pub fn encode_res(w: &mut XdrWriter<'_>, r: &Res3<'_>) -> Result<(), XdrError> {
    match r {
        Res3::Null => Ok(()),
        Res3::Getattr(Ok(a)) => {
            ok(w)?;
            put_fattr3(w, a)
        }
        Res3::Getattr(Err(s)) => put_fail_status(w, *s),
        Res3::Setattr(s, d) | Res3::Remove(s, d) => {
            w.put_u32(s.0)?;
            put_wcc_data(w, d)
        }
        Res3::Lookup(Ok((fh, oa, da))) => {
            ok(w)?;
            put_fh3(w, fh)?;
            put_post_op_attr(w, oa.as_ref())?;
            put_post_op_attr(w, da.as_ref())
        }
        Res3::Access(Ok((a, bits))) => {
            ok(w)?;
            put_post_op_attr(w, a.as_ref())?;
            w.put_u32(*bits)
        }
        Res3::Readlink(Ok((a, target))) => {
            ok(w)?;
            put_post_op_attr(w, a.as_ref())?;
            w.put_opaque(target)
        }
        Res3::Read(Ok((a, count, eof, data))) => {
            ok(w)?;
            put_post_op_attr(w, a.as_ref())?;
            w.put_u32(*count)?;
            w.put_bool(*eof)?;
            w.put_opaque(data)
        }
        Res3::Lookup(Err((s, a)))
        | Res3::Access(Err((s, a)))
        | Res3::Readlink(Err((s, a)))
        | Res3::Read(Err((s, a)))
        | Res3::Fsstat(Err((s, a)))
        | Res3::Fsinfo(Err((s, a)))
        | Res3::Pathconf(Err((s, a)))
        | Res3::ReaddirFail(s, a) => fail_attr(w, *s, a),
        Res3::Write(Err((s, d))) | Res3::Create(Err((s, d))) | Res3::Commit(Err((s, d))) => {
            fail_wcc(w, *s, d)
        }
        _ => encode_res_more(w, r),
    }
}

fn encode_res_more(w: &mut XdrWriter<'_>, r: &Res3<'_>) -> Result<(), XdrError> {
    match r {
        Res3::Write(Ok((d, count, committed, verf))) => {
            ok(w)?;
            put_wcc_data(w, d)?;
            w.put_u32(*count)?;
            w.put_u32(*committed as u32)?;
            w.put_fixed_opaque(verf)
        }
        Res3::Create(Ok((fh, a, d))) => {
            ok(w)?;
            put_post_op_fh3(w, fh.as_ref())?;
            put_post_op_attr(w, a.as_ref())?;
            put_wcc_data(w, d)
        }
        Res3::Rename(s, from, to) => {
            w.put_u32(s.0)?;
            put_wcc_data(w, from)?;
            put_wcc_data(w, to)
        }
        Res3::Link(s, a, d) => {
            w.put_u32(s.0)?;
            put_post_op_attr(w, a.as_ref())?;
            put_wcc_data(w, d)
        }
        Res3::Fsstat(Ok((a, st, invarsec))) => {
            ok(w)?;
            put_post_op_attr(w, a.as_ref())?;
            for v in [
                st.tbytes, st.fbytes, st.abytes, st.tfiles, st.ffiles, st.afiles,
            ] {
                w.put_u64(v)?;
            }
            w.put_u32(*invarsec)
        }
        Res3::Fsinfo(Ok((a, i))) => {
            ok(w)?;
            put_post_op_attr(w, a.as_ref())?;
            for v in [
                i.rtmax, i.rtpref, i.rtmult, i.wtmax, i.wtpref, i.wtmult, i.dtpref,
            ] {
                w.put_u32(v)?;
            }
            w.put_u64(i.maxfilesize)?;
            put_time3(w, &i.time_delta)?;
            w.put_u32(i.properties)
        }
        Res3::Pathconf(Ok((a, p))) => {
            ok(w)?;
            put_post_op_attr(w, a.as_ref())?;
            w.put_u32(p.linkmax)?;
            w.put_u32(p.name_max)?;
            w.put_bool(p.no_trunc)?;
            w.put_bool(p.chown_restricted)?;
            w.put_bool(p.case_insensitive)?;
            w.put_bool(p.case_preserving)
        }
        Res3::Commit(Ok((d, verf))) => {
            ok(w)?;
            put_wcc_data(w, d)?;
            w.put_fixed_opaque(verf)
        }
        // Every other variant is encoded by `encode_res`.
        _ => Ok(()),
    }
}

/// Server side, DDP READ: READ3resok up to and including the data's length word (status OK,
/// `post_op_attr`, count, eof, data length = `count`); the data follows as a DDP item, no pad.
pub fn encode_read_head(
    w: &mut XdrWriter<'_>,
    attr: Option<&Fattr3>,
    count: u32,
    eof: bool,
) -> Result<(), XdrError> {
    ok(w)?;
    put_post_op_attr(w, attr)?;
    w.put_u32(count)?;
    w.put_bool(eof)?;
    w.put_u32(count)
}

/// Reads the status word: `Ok(())` for NFS3_OK, `Err(status)` otherwise.
fn get_status(r: &mut XdrReader<'_>) -> Result<Result<(), Nfsstat3>, DecodeError> {
    let s = Nfsstat3(r.get_u32()?);
    Ok(if s == Nfsstat3::OK { Ok(()) } else { Err(s) })
}

/// `Ok(body)` after an OK status, `Err((status, post_op_attr))` after a failure.
type AttrRes<T> = Result<T, (Nfsstat3, Option<Fattr3>)>;

fn attr_res<'a, T>(
    r: &mut XdrReader<'a>,
    body: impl FnOnce(&mut XdrReader<'a>) -> Result<T, DecodeError>,
) -> Result<AttrRes<T>, DecodeError> {
    Ok(match get_status(r)? {
        Ok(()) => Ok(body(r)?),
        Err(s) => Err((s, get_post_op_attr(r)?)),
    })
}

fn wcc_res<'a, T>(
    r: &mut XdrReader<'a>,
    body: impl FnOnce(&mut XdrReader<'a>) -> Result<T, DecodeError>,
) -> Result<Result<T, (Nfsstat3, WccData)>, DecodeError> {
    Ok(match get_status(r)? {
        Ok(()) => Ok(body(r)?),
        Err(s) => Err((s, get_wcc_data(r)?)),
    })
}

/// Decodes the result of procedure `proc_num` (client side). READDIR and READDIRPLUS failures
/// decode to [`Res3::ReaddirFail`]; their OK results are [`DecodeError::UnknownProc`] here
/// (use [`decode_readdir_res`](super::decode_readdir_res)). Trailing octets are ignored.
pub fn decode_res(proc_num: u32, res: &[u8]) -> Result<Res3<'_>, DecodeError> {
    let r = &mut XdrReader::new(res);
    Ok(match proc_num {
        proc3::NULL => Res3::Null,
        proc3::GETATTR => Res3::Getattr(match get_status(r)? {
            Ok(()) => Ok(get_fattr3(r)?),
            Err(s) => Err(s),
        }),
        proc3::SETATTR => Res3::Setattr(Nfsstat3(r.get_u32()?), get_wcc_data(r)?),
        proc3::LOOKUP => Res3::Lookup(attr_res(r, |r| {
            Ok((get_fh3(r)?, get_post_op_attr(r)?, get_post_op_attr(r)?))
        })?),
        proc3::ACCESS => Res3::Access(attr_res(r, |r| Ok((get_post_op_attr(r)?, r.get_u32()?)))?),
        proc3::READLINK => Res3::Readlink(attr_res(r, |r| {
            Ok((get_post_op_attr(r)?, get_nfspath3(r)?))
        })?),
        proc3::READ => Res3::Read(attr_res(r, |r| {
            Ok((
                get_post_op_attr(r)?,
                r.get_u32()?,
                r.get_bool()?,
                r.get_opaque(u32::MAX)?,
            ))
        })?),
        proc3::WRITE => Res3::Write(wcc_res(r, |r| {
            Ok((
                get_wcc_data(r)?,
                r.get_u32()?,
                get_stable_how(r)?,
                get_verf(r)?,
            ))
        })?),
        proc3::CREATE | proc3::MKDIR | proc3::SYMLINK | proc3::MKNOD => {
            Res3::Create(wcc_res(r, |r| {
                Ok((get_post_op_fh3(r)?, get_post_op_attr(r)?, get_wcc_data(r)?))
            })?)
        }
        proc3::REMOVE | proc3::RMDIR => Res3::Remove(Nfsstat3(r.get_u32()?), get_wcc_data(r)?),
        p => decode_res_rest(p, r)?,
    })
}

fn decode_res_rest<'a>(p: u32, r: &mut XdrReader<'a>) -> Result<Res3<'a>, DecodeError> {
    Ok(match p {
        proc3::RENAME => Res3::Rename(Nfsstat3(r.get_u32()?), get_wcc_data(r)?, get_wcc_data(r)?),
        proc3::LINK => Res3::Link(
            Nfsstat3(r.get_u32()?),
            get_post_op_attr(r)?,
            get_wcc_data(r)?,
        ),
        proc3::READDIR | proc3::READDIRPLUS => match get_status(r)? {
            Ok(()) => return Err(DecodeError::UnknownProc(p)),
            Err(s) => Res3::ReaddirFail(s, get_post_op_attr(r)?),
        },
        proc3::FSSTAT => Res3::Fsstat(attr_res(r, |r| {
            let a = get_post_op_attr(r)?;
            let st = FsStat {
                tbytes: r.get_u64()?,
                fbytes: r.get_u64()?,
                abytes: r.get_u64()?,
                tfiles: r.get_u64()?,
                ffiles: r.get_u64()?,
                afiles: r.get_u64()?,
            };
            Ok((a, st, r.get_u32()?))
        })?),
        proc3::FSINFO => Res3::Fsinfo(attr_res(r, |r| Ok((get_post_op_attr(r)?, get_fsinfo(r)?)))?),
        proc3::PATHCONF => Res3::Pathconf(attr_res(r, |r| {
            let a = get_post_op_attr(r)?;
            let p = PathConf {
                linkmax: r.get_u32()?,
                name_max: r.get_u32()?,
                no_trunc: r.get_bool()?,
                chown_restricted: r.get_bool()?,
                case_insensitive: r.get_bool()?,
                case_preserving: r.get_bool()?,
            };
            Ok((a, p))
        })?),
        proc3::COMMIT => Res3::Commit(wcc_res(r, |r| Ok((get_wcc_data(r)?, get_verf(r)?)))?),
        p => return Err(DecodeError::UnknownProc(p)),
    })
}

fn get_fsinfo(r: &mut XdrReader<'_>) -> Result<FsInfo, DecodeError> {
    Ok(FsInfo {
        rtmax: r.get_u32()?,
        rtpref: r.get_u32()?,
        rtmult: r.get_u32()?,
        wtmax: r.get_u32()?,
        wtpref: r.get_u32()?,
        wtmult: r.get_u32()?,
        dtpref: r.get_u32()?,
        maxfilesize: r.get_u64()?,
        time_delta: get_time3(r)?,
        properties: r.get_u32()?,
    })
}
