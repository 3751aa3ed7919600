//! The NFSv3 wire codec (RFC 1813 section 3, XDR per RFC 4506), both directions: the server
//! decodes call arguments ([`decode_args`]) and encodes results ([`encode_res`], [`DirWriter`]
//! for streamed directory listings, [`encode_read_head`] for a READ whose data goes as a DDP
//! item); our test client encodes arguments ([`encode_args`], [`encode_write_head`]) and decodes
//! results ([`decode_res`], [`decode_readdir_res`]). This file holds the program constants, the
//! decode error and the shared XDR pieces (`nfs_fh3`, `fattr3`, `sattr3`, `wcc_data`, names);
//! the arguments, results and directory listings live in `args.rs`, `res.rs` and `dir.rs`.
//!
//! Normal operation: decoding borrows names and data from the input (no copies, no
//! allocation), encoding writes into the caller's [`XdrWriter`] and never grows it.
//!
//! Recovery: every read is bounds-checked by [`XdrReader`]; lengths from the wire are checked
//! against their bound (handles 64, names 4096, paths [`PATH_MAX`]) before anything is sized
//! from them. Any malformed call is a [`DecodeError`], which the server answers with
//! GARBAGE_ARGS, as Linux nfsd does for the same inputs. Trailing octets after a call's
//! arguments are ignored (Linux nfsd ignores them too). An encode that does not fit returns
//! [`XdrError::NoSpace`]; the caller answers with a bigger buffer or an error status.

mod args;
mod dir;
mod res;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dir;
#[cfg(test)]
mod tests_res;

pub use args::{decode_args, encode_args, encode_write_head, Args3};
pub use dir::{decode_readdir_res, DirWriter, OwnedDirEntry, ReaddirRes};
pub use res::{decode_res, encode_read_head, encode_res, fsf3, FsInfo, PathConf, Res3};

use crate::nfs::types::{
    Fattr3, Fh, Ftype3, Nfsstat3, Sattr3, SetTime, Time3, WccAttr, WccData, FHSIZE, PATH_MAX,
    VERFSIZE,
};
use rpcrdma_engine::xdr::{XdrError, XdrReader, XdrWriter};

/// The NFS RPC program number.
pub const NFS_PROGRAM: u32 = 100003;
/// The NFS protocol version this codec speaks.
pub const NFS_V3: u32 = 3;
/// Longest `filename3` accepted on the wire. Longer is GARBAGE_ARGS; 256..=4096 octets decode
/// and the handler answers NAMETOOLONG ([`types::check_name_len`](crate::nfs::types::check_name_len)).
pub const NAME_WIRE_MAX: u32 = 4096;

/// NFSv3 procedure numbers (RFC 1813 section 3).
#[allow(missing_docs)]
pub mod proc3 {
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const ACCESS: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const READDIR: u32 = 16;
    pub const READDIRPLUS: u32 = 17;
    pub const FSSTAT: u32 = 18;
    pub const FSINFO: u32 = 19;
    pub const PATHCONF: u32 = 20;
    pub const COMMIT: u32 = 21;
}

/// The procedure's name (`"GETATTR"`, ...), `"?"` for a number RFC 1813 does not define.
pub fn proc_name(p: u32) -> &'static str {
    const NAMES: [&str; 22] = [
        "NULL",
        "GETATTR",
        "SETATTR",
        "LOOKUP",
        "ACCESS",
        "READLINK",
        "READ",
        "WRITE",
        "CREATE",
        "MKDIR",
        "SYMLINK",
        "MKNOD",
        "REMOVE",
        "RMDIR",
        "RENAME",
        "LINK",
        "READDIR",
        "READDIRPLUS",
        "FSSTAT",
        "FSINFO",
        "PATHCONF",
        "COMMIT",
    ];
    NAMES.get(p as usize).copied().unwrap_or("?")
}

/// Why arguments or results did not decode (small, `Copy`). The server answers GARBAGE_ARGS
/// (UnknownProc: PROC_UNAVAIL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Truncated input, a boolean other than 0/1, or a length above its bound.
    Xdr(XdrError),
    /// An enum or union discriminant outside its range (`what` names the XDR type).
    BadValue {
        /// The XDR type (`"ftype3"`, `"time_how"`, ...).
        what: &'static str,
        /// The value found.
        value: u32,
    },
    /// A `filename3` that is empty or holds `/` or NUL.
    BadName,
    /// A procedure number this codec does not decode (for [`decode_res`]: also READDIR and
    /// READDIRPLUS OK results, which [`decode_readdir_res`] decodes).
    UnknownProc(u32),
}

impl From<XdrError> for DecodeError {
    fn from(e: XdrError) -> Self {
        DecodeError::Xdr(e)
    }
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DecodeError::Xdr(e) => write!(f, "{e}"),
            DecodeError::BadValue { what, value } => write!(f, "bad {what} value {value}"),
            DecodeError::BadName => write!(f, "malformed filename3 (empty, '/' or NUL)"),
            DecodeError::UnknownProc(p) => write!(f, "NFSv3 procedure {p} not decoded here"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Writes `nfs_fh3`.
pub fn put_fh3(w: &mut XdrWriter<'_>, fh: &Fh) -> Result<(), XdrError> {
    w.put_opaque(fh.as_bytes())
}

/// Reads `nfs_fh3`: 0..=64 octets; longer is an error (GARBAGE_ARGS, as Linux nfsd).
pub fn get_fh3(r: &mut XdrReader<'_>) -> Result<Fh, DecodeError> {
    let b = r.get_opaque(FHSIZE as u32)?;
    Fh::new(b).ok_or(DecodeError::BadValue {
        what: "nfs_fh3 length",
        value: b.len() as u32,
    })
}

/// Writes `post_op_fh3`.
pub fn put_post_op_fh3(w: &mut XdrWriter<'_>, fh: Option<&Fh>) -> Result<(), XdrError> {
    match fh {
        Some(fh) => {
            w.put_bool(true)?;
            put_fh3(w, fh)
        }
        None => w.put_bool(false),
    }
}

/// Reads `post_op_fh3`.
pub fn get_post_op_fh3(r: &mut XdrReader<'_>) -> Result<Option<Fh>, DecodeError> {
    Ok(if r.get_optional()? {
        Some(get_fh3(r)?)
    } else {
        None
    })
}

/// Writes `nfstime3`: the low 32 bits of the seconds, as Linux nfsd sends a time outside
/// the unsigned 32-bit range NFSv3 has.
pub fn put_time3(w: &mut XdrWriter<'_>, t: &Time3) -> Result<(), XdrError> {
    w.put_u32(t.seconds as u32)?;
    w.put_u32(t.nseconds)
}

/// Reads `nfstime3`: unsigned seconds (any `nseconds` is accepted).
pub fn get_time3(r: &mut XdrReader<'_>) -> Result<Time3, DecodeError> {
    Ok(Time3 {
        seconds: i64::from(r.get_u32()?),
        nseconds: r.get_u32()?,
    })
}

/// Reads a fixed 8-octet verifier (`cookieverf3`, `createverf3`, `writeverf3`).
pub fn get_verf(r: &mut XdrReader<'_>) -> Result<[u8; VERFSIZE], DecodeError> {
    let b = r.get_fixed_opaque(VERFSIZE)?;
    let mut v = [0u8; VERFSIZE];
    v.copy_from_slice(b);
    Ok(v)
}

/// Writes `fattr3` (84 octets).
pub fn put_fattr3(w: &mut XdrWriter<'_>, a: &Fattr3) -> Result<(), XdrError> {
    w.put_u32(a.ftype as u32)?;
    w.put_u32(a.mode)?;
    w.put_u32(a.nlink)?;
    w.put_u32(a.uid)?;
    w.put_u32(a.gid)?;
    w.put_u64(a.size)?;
    w.put_u64(a.used)?;
    w.put_u32(a.rdev.0)?;
    w.put_u32(a.rdev.1)?;
    w.put_u64(a.fsid)?;
    w.put_u64(a.fileid)?;
    put_time3(w, &a.atime)?;
    put_time3(w, &a.mtime)?;
    put_time3(w, &a.ctime)
}

/// Reads `fattr3`; an `ftype3` outside 1..=7 is [`DecodeError::BadValue`].
pub fn get_fattr3(r: &mut XdrReader<'_>) -> Result<Fattr3, DecodeError> {
    Ok(Fattr3 {
        ftype: get_ftype3(r)?,
        mode: r.get_u32()?,
        nlink: r.get_u32()?,
        uid: r.get_u32()?,
        gid: r.get_u32()?,
        size: r.get_u64()?,
        used: r.get_u64()?,
        rdev: (r.get_u32()?, r.get_u32()?),
        fsid: r.get_u64()?,
        fileid: r.get_u64()?,
        atime: get_time3(r)?,
        mtime: get_time3(r)?,
        ctime: get_time3(r)?,
    })
}

/// Reads `ftype3`; outside 1..=7 is [`DecodeError::BadValue`].
pub fn get_ftype3(r: &mut XdrReader<'_>) -> Result<Ftype3, DecodeError> {
    let v = r.get_u32()?;
    Ftype3::from_u32(v).ok_or(DecodeError::BadValue {
        what: "ftype3",
        value: v,
    })
}

/// Writes `post_op_attr`.
pub fn put_post_op_attr(w: &mut XdrWriter<'_>, a: Option<&Fattr3>) -> Result<(), XdrError> {
    match a {
        Some(a) => {
            w.put_bool(true)?;
            put_fattr3(w, a)
        }
        None => w.put_bool(false),
    }
}

/// Reads `post_op_attr`.
pub fn get_post_op_attr(r: &mut XdrReader<'_>) -> Result<Option<Fattr3>, DecodeError> {
    Ok(if r.get_optional()? {
        Some(get_fattr3(r)?)
    } else {
        None
    })
}

/// Writes `wcc_data` (`pre_op_attr` then `post_op_attr`).
pub fn put_wcc_data(w: &mut XdrWriter<'_>, d: &WccData) -> Result<(), XdrError> {
    match &d.before {
        Some(b) => {
            w.put_bool(true)?;
            w.put_u64(b.size)?;
            put_time3(w, &b.mtime)?;
            put_time3(w, &b.ctime)?;
        }
        None => w.put_bool(false)?,
    }
    put_post_op_attr(w, d.after.as_ref())
}

/// Reads `wcc_data`.
pub fn get_wcc_data(r: &mut XdrReader<'_>) -> Result<WccData, DecodeError> {
    let before = if r.get_optional()? {
        Some(WccAttr {
            size: r.get_u64()?,
            mtime: get_time3(r)?,
            ctime: get_time3(r)?,
        })
    } else {
        None
    };
    Ok(WccData {
        before,
        after: get_post_op_attr(r)?,
    })
}

fn put_set_time(w: &mut XdrWriter<'_>, t: &SetTime) -> Result<(), XdrError> {
    match t {
        SetTime::DontChange => w.put_u32(0),
        SetTime::ServerTime => w.put_u32(1),
        SetTime::ClientTime(t) => {
            w.put_u32(2)?;
            put_time3(w, t)
        }
    }
}

fn get_set_time(r: &mut XdrReader<'_>) -> Result<SetTime, DecodeError> {
    match r.get_u32()? {
        0 => Ok(SetTime::DontChange),
        1 => Ok(SetTime::ServerTime),
        2 => Ok(SetTime::ClientTime(get_time3(r)?)),
        v => Err(DecodeError::BadValue {
            what: "time_how",
            value: v,
        }),
    }
}

fn put_opt_u32(w: &mut XdrWriter<'_>, v: Option<u32>) -> Result<(), XdrError> {
    w.put_bool(v.is_some())?;
    v.map_or(Ok(()), |v| w.put_u32(v))
}

fn get_opt_u32(r: &mut XdrReader<'_>) -> Result<Option<u32>, DecodeError> {
    Ok(if r.get_bool()? {
        Some(r.get_u32()?)
    } else {
        None
    })
}

/// Writes `sattr3`.
pub fn put_sattr3(w: &mut XdrWriter<'_>, s: &Sattr3) -> Result<(), XdrError> {
    put_opt_u32(w, s.mode)?;
    put_opt_u32(w, s.uid)?;
    put_opt_u32(w, s.gid)?;
    w.put_bool(s.size.is_some())?;
    if let Some(size) = s.size {
        w.put_u64(size)?;
    }
    put_set_time(w, &s.atime)?;
    put_set_time(w, &s.mtime)
}

/// Reads `sattr3`: `set_it` other than 0/1 is an XDR bad boolean, `time_how` outside 0..=2 is
/// [`DecodeError::BadValue`].
pub fn get_sattr3(r: &mut XdrReader<'_>) -> Result<Sattr3, DecodeError> {
    Ok(Sattr3 {
        mode: get_opt_u32(r)?,
        uid: get_opt_u32(r)?,
        gid: get_opt_u32(r)?,
        size: if r.get_bool()? {
            Some(r.get_u64()?)
        } else {
            None
        },
        atime: get_set_time(r)?,
        mtime: get_set_time(r)?,
        umask: None,
    })
}

/// Reads a `filename3`: at most [`NAME_WIRE_MAX`] octets, not empty, no `/`, no NUL
/// ([`DecodeError::BadName`] otherwise, as Linux nfsd's `svcxdr_decode_filename3`).
pub fn get_filename3<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], DecodeError> {
    let name = r.get_opaque(NAME_WIRE_MAX)?;
    if !crate::nfs::types::name_is_wellformed(name) {
        return Err(DecodeError::BadName);
    }
    Ok(name)
}

/// Reads an `nfspath3` (symbolic link target): at most [`PATH_MAX`] octets, content unchecked.
pub fn get_nfspath3<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], DecodeError> {
    Ok(r.get_opaque(PATH_MAX as u32)?)
}

/// Reads `stable_how`; outside 0..=2 is [`DecodeError::BadValue`].
pub fn get_stable_how(r: &mut XdrReader<'_>) -> Result<crate::nfs::types::StableHow, DecodeError> {
    let v = r.get_u32()?;
    crate::nfs::types::StableHow::from_u32(v).ok_or(DecodeError::BadValue {
        what: "stable_how",
        value: v,
    })
}

/// Writes an `nfsstat3` for a failure arm. A failure arm holding `NFS3_OK` (a handler bug)
/// goes out as SERVERFAULT, so the reply stays well-formed XDR.
fn put_fail_status(w: &mut XdrWriter<'_>, s: Nfsstat3) -> Result<(), XdrError> {
    let s = if s == Nfsstat3::OK {
        Nfsstat3::SERVERFAULT
    } else {
        s
    };
    w.put_u32(s.0)
}
