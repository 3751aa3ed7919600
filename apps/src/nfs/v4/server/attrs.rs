//! NFSv4 attributes (RFC 8881 §5) from the store's [`Fattr3`]: GETATTR, the `fattr4` of
//! READDIR entries, and VERIFY / NVERIFY, which compare a client's `fattr4` with this encoding. The store keeps one set of attributes for both protocol versions; this is
//! the small mapping between them.
//!
//! Normal operation: the client's bitmap is intersected with [`SUPPORTED`] and the values are
//! written in bit order: type, change (from ctime), size, fsid, fileid, mode, numlinks, owner
//! and owner_group as numeric strings (as Linux nfsd sends them to AUTH_SYS clients), the
//! times, space used, file system counts and limits. Recovery: attributes this server does
//! not keep are left out of the reply's bitmap (RFC 8881 §15.1.15.1: not an error); a bitmap
//! that does not decode is NFS4ERR_BADXDR.

use rpcrdma_engine::xdr::XdrReader;

use crate::nfs::types::{Fattr3, FsStat, Time3, WccData};

use super::xdr::{bad_xdr, from_store, st, Enc, Status};
use super::Compound;

/// Attribute numbers this server returns.
#[allow(missing_docs)]
pub mod fa {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
    /// Minor version 2 (RFC 7862 §12.2.3): how the `change` attribute moves.
    pub const CHANGE_ATTR_TYPE: u32 = 79;
    /// Minor version 2 (RFC 8275): the mode of an object being created and the creating
    /// process's umask, which the server applies unless a default ACL is inherited.
    /// Write-only, and only in CREATE and OPEN.
    pub const MODE_UMASK: u32 = 81;
    /// Minor version 2 (RFC 8276 §8.2): whether the object's file system keeps extended
    /// attributes.
    pub const XATTR_SUPPORT: u32 = 82;
}

/// `change_attr_type4` NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR.
const CHANGE_MONOTONIC_INCR: u32 = 0;
/// `change_attr_type4` NFS4_CHANGE_TYPE_IS_TIME_METADATA.
const CHANGE_TIME_METADATA: u32 = 3;
/// `change_attr_type4` NFS4_CHANGE_TYPE_IS_UNDEFINED.
const CHANGE_UNDEFINED: u32 = 4;

/// The attributes supported in minor version `minor`: [`SUPPORTED`], and in minor version 2
/// `change_attr_type`, `mode_umask` and `xattr_support`.
pub fn supported_in(minor: u32) -> [u32; 3] {
    let mut w = SUPPORTED;
    if minor >= 2 {
        w[2] |= (1 << (fa::XATTR_SUPPORT - 64))
            | (1 << (fa::CHANGE_ATTR_TYPE - 64))
            | (1 << (fa::MODE_UMASK - 64));
    }
    w
}

/// `suppattr_exclcreat` in minor version `minor`: [`EXCLCREAT`] within what the version
/// supports (`mode_umask` from minor version 2; the Linux client sends an EXCLUSIVE4_1 create
/// its mode as `mode_umask` only when this lists it, and as a `mode` its umask has not cut
/// otherwise).
pub fn exclcreat_in(minor: u32) -> [u32; 3] {
    let s = supported_in(minor);
    [
        EXCLCREAT[0] & s[0],
        EXCLCREAT[1] & s[1],
        EXCLCREAT[2] & s[2],
    ]
}

/// The attributes supported (`supported_attrs`), as a three-word bitmap: what GETATTR returns
/// and the write-only [`WRITE_ONLY`] ones SETATTR takes. The Linux client drops from its
/// SETATTR every attribute this bitmap leaves out, silently: without `time_access_set` and
/// `time_modify_set` here, utimensat(2) on the mount did nothing.
pub const SUPPORTED: [u32; 3] = supported();

/// The write-only attributes (RFC 8881 §5.5): `time_access_set`, `time_modify_set`, and
/// `mode_umask` (RFC 8275) in minor version 2. Never returned; GETATTR asking for one the
/// minor version supports is NFS4ERR_INVAL (as Linux nfsd answers for the times).
pub const WRITE_ONLY: [u32; 3] = [
    0,
    (1 << (fa::TIME_ACCESS_SET - 32)) | (1 << (fa::TIME_MODIFY_SET - 32)),
    1 << (fa::MODE_UMASK - 64),
];

const fn supported() -> [u32; 3] {
    let list = [
        fa::SUPPORTED_ATTRS,
        fa::TYPE,
        fa::FH_EXPIRE_TYPE,
        fa::CHANGE,
        fa::SIZE,
        fa::LINK_SUPPORT,
        fa::SYMLINK_SUPPORT,
        fa::NAMED_ATTR,
        fa::FSID,
        fa::UNIQUE_HANDLES,
        fa::LEASE_TIME,
        fa::RDATTR_ERROR,
        fa::CANSETTIME,
        fa::CASE_INSENSITIVE,
        fa::CASE_PRESERVING,
        fa::CHOWN_RESTRICTED,
        fa::FILEHANDLE,
        fa::FILEID,
        fa::FILES_AVAIL,
        fa::FILES_FREE,
        fa::FILES_TOTAL,
        fa::HOMOGENEOUS,
        fa::MAXFILESIZE,
        fa::MAXLINK,
        fa::MAXNAME,
        fa::MAXREAD,
        fa::MAXWRITE,
        fa::MODE,
        fa::NO_TRUNC,
        fa::NUMLINKS,
        fa::OWNER,
        fa::OWNER_GROUP,
        fa::RAWDEV,
        fa::SPACE_AVAIL,
        fa::SPACE_FREE,
        fa::SPACE_TOTAL,
        fa::SPACE_USED,
        fa::TIME_ACCESS,
        fa::TIME_ACCESS_SET,
        fa::TIME_DELTA,
        fa::TIME_METADATA,
        fa::TIME_MODIFY,
        fa::TIME_MODIFY_SET,
        fa::MOUNTED_ON_FILEID,
        fa::SUPPATTR_EXCLCREAT,
    ];
    let mut w = [0u32; 3];
    let mut i = 0;
    while i < list.len() {
        w[(list[i] / 32) as usize] |= 1 << (list[i] % 32);
        i += 1;
    }
    w
}

/// Reads a `bitmap4` (words past the third are ignored; at most 8 words).
pub fn get_bitmap(r: &mut XdrReader<'_>) -> Result<[u32; 3], Status> {
    let n = r.get_count(8).map_err(bad_xdr)?;
    let mut w = [0u32; 3];
    for i in 0..n as usize {
        let v = r.get_u32().map_err(bad_xdr)?;
        if let Some(x) = w.get_mut(i) {
            *x = v;
        }
    }
    Ok(w)
}

fn has(w: &[u32; 3], bit: u32) -> bool {
    w[(bit / 32) as usize] & (1 << (bit % 32)) != 0
}

/// Writes `nfstime4`: signed 64-bit seconds, nanoseconds.
fn time(v: &mut Enc, t: Time3) {
    v.u64(t.seconds as u64);
    v.u32(t.nseconds);
}

/// The `change` attribute: the ctime as one number that grows with every change.
pub fn change(a: &Fattr3) -> u64 {
    change_of(a.ctime)
}

/// The `change` attribute of an object whose ctime is `t`.
fn change_of(t: Time3) -> u64 {
    (t.seconds as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(t.nseconds))
}

/// Writes the `change_info4` of a directory (RFC 8881 §3.3.6) from the weak cache consistency
/// data the store answered with the operation (`Store::*_wcc`); `changed`: the operation
/// changed the directory (an entry made, removed or renamed). Normally the two `change`
/// values, marked `atomic`: both stores take them atomically with the change with respect to
/// every other change made through this server (the memory store under its lock, the `dir:`
/// store under the directory's mutex, `store::dir::serial`), as Linux nfsd takes them under
/// the directory's lock; the Linux client then keeps its cached names of the directory
/// (`nfs4_update_changeattr_locked`).
///
/// Reported as not atomic, so the client revalidates the directory: a change whose values
/// came out equal, with `after` one past `before` (a file system with a coarse clock: the
/// `dir:` store on a host whose kernel stamps times in timer ticks, Linux before multigrain
/// timestamps, 6.13, can show the same ctime after a change made in the tick of the one
/// before; equal values would tell the client nothing changed, and the Linux client takes an
/// OPEN that created a file for an open of an existing one, `_nfs4_proc_open` comparing
/// `before` and `after`, then asks for read access the new file's mode may refuse its owner:
/// open(O_CREAT) of a file of mode 0 failed with EACCES); and a change whose attributes the
/// store could not take before or after it (the directory removed meanwhile).
pub fn put_cinfo(out: &mut Enc, w: &WccData, changed: bool) {
    let before = w.before.map(|b| change_of(b.ctime));
    let after = w.after.as_ref().map(change);
    let step = u64::from(changed);
    let (atomic, b, a) = match (before, after) {
        (Some(b), Some(a)) if !changed || a != b => (1, b, a),
        (Some(b), _) => (0, b, b.wrapping_add(step)),
        (None, Some(a)) => (0, a.wrapping_sub(step), a),
        (None, None) => (0, 0, step),
    };
    out.u32(atomic);
    out.u64(b);
    out.u64(a);
}

/// What the `fattr4` of one object is made from.
pub struct Source<'a> {
    /// The object's attributes.
    pub attr: &'a Fattr3,
    /// Its file system's counts (when asked for).
    pub fs: Option<FsStat>,
    /// Its wire handle (when asked for).
    pub fh: Option<&'a [u8]>,
}

/// Writes `fattr4` for `want` (intersected with what this server returns: the supported
/// attributes but the write-only ones).
///
/// `max_file_size` is the `maxfilesize` of the object's file system.
pub fn put_fattr(
    c: &Compound<'_>,
    max_file_size: u64,
    want: &[u32; 3],
    s: &Source<'_>,
    out: &mut Enc,
) {
    let mut mask = [0u32; 3];
    let supported = supported_in(c.minor);
    for i in 0..3 {
        mask[i] = want[i] & supported[i] & !WRITE_ONLY[i];
    }
    if s.fs.is_none() {
        for b in [
            fa::FILES_AVAIL,
            fa::FILES_FREE,
            fa::FILES_TOTAL,
            fa::SPACE_AVAIL,
            fa::SPACE_FREE,
            fa::SPACE_TOTAL,
        ] {
            mask[(b / 32) as usize] &= !(1 << (b % 32));
        }
    }
    if s.fh.is_none() {
        mask[0] &= !(1 << fa::FILEHANDLE);
    }
    mask[0] &= !(1 << fa::RDATTR_ERROR);
    let a = s.attr;
    out.bitmap(&mask);
    // `attr_vals`, written in place: every value is a whole number of XDR words, so the
    // opaque needs no pad after them.
    let at = out.len();
    out.u32(0);
    for bit in 0..96 {
        if has(&mask, bit) {
            put_one(c, max_file_size, bit, s, a, out);
        }
    }
    let n = (out.len() - at - 4) as u32;
    out.b[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

fn put_one(
    c: &Compound<'_>,
    max_file_size: u64,
    bit: u32,
    s: &Source<'_>,
    a: &Fattr3,
    v: &mut Enc,
) {
    let fs = s.fs.unwrap_or_default();
    let cfg = c.srv.config();
    match bit {
        fa::SUPPORTED_ATTRS => v.bitmap(&supported_in(c.minor)),
        fa::XATTR_SUPPORT => v.u32(u32::from(
            export_store(c).is_some_and(|s| s.xattr_support()),
        )),
        // The memory store's stamps only grow; the `dir:` store's are the host's ctime (as
        // Linux nfsd answers for a file system without `i_version`); the pseudo file system's
        // `change` is no object's.
        fa::CHANGE_ATTR_TYPE => v.u32(match export_store(c) {
            Some(s) if s.change_monotonic() => CHANGE_MONOTONIC_INCR,
            Some(_) => CHANGE_TIME_METADATA,
            None => CHANGE_UNDEFINED,
        }),
        fa::SUPPATTR_EXCLCREAT => v.bitmap(&exclcreat_in(c.minor)),
        fa::TYPE => v.u32(a.ftype as u32),
        fa::FH_EXPIRE_TYPE => v.u32(0), // FH4_PERSISTENT
        fa::CHANGE => v.u64(change(a)),
        fa::SIZE => v.u64(a.size),
        fa::LINK_SUPPORT | fa::SYMLINK_SUPPORT | fa::UNIQUE_HANDLES | fa::CANSETTIME => v.u32(1),
        fa::CASE_PRESERVING | fa::CHOWN_RESTRICTED | fa::HOMOGENEOUS | fa::NO_TRUNC => v.u32(1),
        fa::NAMED_ATTR | fa::CASE_INSENSITIVE => v.u32(0),
        fa::FSID => {
            v.u64(a.fsid);
            v.u64(0);
        }
        fa::LEASE_TIME => v.u32(cfg.limits.lease_secs),
        fa::FILEHANDLE => v.opaque(s.fh.unwrap_or(&[])),
        fa::FILEID | fa::MOUNTED_ON_FILEID => v.u64(a.fileid),
        fa::FILES_AVAIL => v.u64(fs.afiles),
        fa::FILES_FREE => v.u64(fs.ffiles),
        fa::FILES_TOTAL => v.u64(fs.tfiles),
        fa::MAXFILESIZE => v.u64(max_file_size),
        fa::MAXLINK => v.u32(u32::from(u16::MAX)),
        fa::MAXNAME => v.u32(crate::nfs::types::NAME_MAX as u32),
        fa::MAXREAD | fa::MAXWRITE => v.u64(u64::from(cfg.max_io)),
        fa::MODE => v.u32(a.mode & 0o7777),
        fa::NUMLINKS => v.u32(a.nlink),
        fa::OWNER => v.decimal(a.uid),
        fa::OWNER_GROUP => v.decimal(a.gid),
        fa::RAWDEV => {
            v.u32(a.rdev.0);
            v.u32(a.rdev.1);
        }
        fa::SPACE_AVAIL => v.u64(fs.abytes),
        fa::SPACE_FREE => v.u64(fs.fbytes),
        fa::SPACE_TOTAL => v.u64(fs.tbytes),
        fa::SPACE_USED => v.u64(a.used),
        fa::TIME_ACCESS => time(v, a.atime),
        fa::TIME_DELTA => time(
            v,
            Time3 {
                seconds: 0,
                nseconds: 1,
            },
        ),
        fa::TIME_METADATA => time(v, a.ctime),
        fa::TIME_MODIFY => time(v, a.mtime),
        _ => {}
    }
}

/// The store of the export the current file handle is in; none in the pseudo file system.
fn export_store<'c>(c: &'c Compound<'_>) -> Option<&'c dyn crate::nfs::store::Store> {
    let cur = c.pseudo.is_none().then(|| c.cur().ok()).flatten()?;
    Some(&*cur.share.store)
}

/// True when `want` asks for a file-system count (FSSTAT needed).
pub fn wants_fs(want: &[u32; 3]) -> bool {
    [
        fa::FILES_AVAIL,
        fa::FILES_FREE,
        fa::FILES_TOTAL,
        fa::SPACE_AVAIL,
        fa::SPACE_FREE,
        fa::SPACE_TOTAL,
    ]
    .iter()
    .any(|b| has(want, *b))
}

/// GETATTR of the current file handle.
pub fn getattr(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let want = get_bitmap(r)?;
    let supported = supported_in(c.minor);
    if (0..3).any(|i| want[i] & WRITE_ONLY[i] & supported[i] != 0) {
        return Err(st::INVAL);
    }
    with_source(c, &want, |c, max, src| put_fattr(c, max, &want, src, out))
}

/// Runs `f` with the current file handle's [`Source`] for `want` (its file system's counts
/// and its sealed handle only when asked for) and its `maxfilesize`.
fn with_source<R>(
    c: &Compound<'_>,
    want: &[u32; 3],
    f: impl FnOnce(&Compound<'_>, u64, &Source<'_>) -> R,
) -> Result<R, Status> {
    let cur = c.cur()?;
    let store = &cur.share.store;
    let a = store.getattr(&cur.fh).map_err(from_store)?;
    let fs = if wants_fs(want) {
        Some(store.fsstat(&cur.fh).map_err(from_store)?)
    } else {
        None
    };
    let sealed = if has(want, fa::FILEHANDLE) {
        Some(crate::nfs::admit::seal_or_fault(&cur.share, &cur.fh).map_err(from_store)?)
    } else {
        None
    };
    let src = Source {
        attr: &a,
        fs,
        fh: sealed.as_ref().map(|f| f.as_bytes()),
    };
    Ok(f(c, store.max_file_size(), &src))
}

/// The `fattr4` of VERIFY4args / NVERIFY4args (RFC 8881 §18.31, §18.15): its bitmap and its
/// values. Arguments that do not decode are NFS4ERR_BADXDR.
pub struct Verify<'a> {
    /// `attrmask`, its first three words.
    pub want: [u32; 3],
    /// A bit was set past the third word.
    beyond: bool,
    /// `attr_vals`.
    pub vals: &'a [u8],
}

/// Reads VERIFY4args / NVERIFY4args.
pub fn get_verify<'a>(r: &mut XdrReader<'a>) -> Result<Verify<'a>, Status> {
    let n = r.get_count(8).map_err(bad_xdr)?;
    let mut want = [0u32; 3];
    let mut beyond = false;
    for i in 0..n as usize {
        let v = r.get_u32().map_err(bad_xdr)?;
        match want.get_mut(i) {
            Some(w) => *w = v,
            None => beyond |= v != 0,
        }
    }
    let vals = r.get_opaque(1 << 16).map_err(bad_xdr)?;
    Ok(Verify { want, beyond, vals })
}

impl Verify<'_> {
    /// The checks of Linux nfsd's `_nfsd4_verify`, in its order: an attribute not supported
    /// in minor version `minor` is NFS4ERR_ATTRNOTSUPP; a write-only one or `rdattr_error`
    /// NFS4ERR_INVAL, as are values that are not whole XDR words.
    pub fn check(&self, minor: u32) -> Result<(), Status> {
        let supported = supported_in(minor);
        if self.beyond || (0..3).any(|i| self.want[i] & !supported[i] != 0) {
            return Err(st::ATTRNOTSUPP);
        }
        let write_only = (0..3).any(|i| self.want[i] & WRITE_ONLY[i] != 0);
        if write_only || has(&self.want, fa::RDATTR_ERROR) || self.vals.len() % 4 != 0 {
            return Err(st::INVAL);
        }
        Ok(())
    }

    /// Whether `src`'s attributes for this bitmap encode to exactly these values: they are
    /// encoded at the end of `out` (the reply buffer: nothing is allocated), compared, and
    /// taken off again.
    pub fn same(
        &self,
        c: &Compound<'_>,
        max_file_size: u64,
        src: &Source<'_>,
        out: &mut Enc,
    ) -> bool {
        let at = out.len();
        put_fattr(c, max_file_size, &self.want, src, out);
        let mut r = XdrReader::new(&out.b[at..]);
        let same = get_bitmap(&mut r).ok() == Some(self.want)
            && r.get_opaque(u32::MAX).ok() == Some(self.vals);
        out.b.truncate(at);
        same
    }
}

/// The outcome of VERIFY (`opnum` [`op::VERIFY`](super::op::VERIFY)) or NVERIFY whose
/// attributes were `same`: VERIFY holds when they are (NFS4ERR_NOT_SAME otherwise), NVERIFY
/// when they are not (NFS4ERR_SAME otherwise).
pub fn verdict(opnum: u32, same: bool) -> Result<(), Status> {
    match (opnum == super::op::VERIFY, same) {
        (true, true) | (false, false) => Ok(()),
        (true, false) => Err(st::NOT_SAME),
        (false, true) => Err(st::SAME),
    }
}

/// VERIFY or NVERIFY (`opnum`) of the current file handle: its attributes encoded for the
/// client's bitmap are compared octet for octet with the client's (as Linux nfsd's
/// `_nfsd4_verify` compares them).
pub fn verify(
    c: &mut Compound<'_>,
    opnum: u32,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let v = get_verify(r)?;
    c.cur()?;
    v.check(c.minor)?;
    let same = with_source(c, &v.want, |c, max, src| v.same(c, max, src, out))?;
    verdict(opnum, same)
}

/// NFS4ERR_BADOWNER.
const BADOWNER: u32 = 10039;

/// A numeric owner or group string (what an AUTH_SYS client sends with idmapping off);
/// anything else is NFS4ERR_BADOWNER.
fn numeric_id(s: &[u8]) -> Result<u32, Status> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse::<u32>().ok())
        .ok_or(BADOWNER)
}

fn get_settime(v: &mut XdrReader<'_>) -> Result<crate::nfs::types::SetTime, Status> {
    use crate::nfs::types::SetTime;
    match v.get_u32().map_err(bad_xdr)? {
        0 => Ok(SetTime::ServerTime),
        1 => {
            // nfstime4: any signed seconds; nanoseconds below 10^9 (NFS4ERR_INVAL, RFC 8881
            // §3.3.1, as Linux nfsd's `nfsd4_decode_nfstime4`).
            let seconds = v.get_u64().map_err(bad_xdr)? as i64;
            let nsec = v.get_u32().map_err(bad_xdr)?;
            if nsec >= 1_000_000_000 {
                return Err(st::INVAL);
            }
            Ok(SetTime::ClientTime(Time3 {
                seconds,
                nseconds: nsec,
            }))
        }
        _ => Err(st::INVAL),
    }
}

/// Attributes a client may set: size, mode, owner, owner_group, time_access_set,
/// time_modify_set, and in a creation of minor version 2 `mode_umask`.
const SETTABLE: [u32; 3] = [
    1 << fa::SIZE,
    (1 << (fa::MODE - 32))
        | (1 << (fa::OWNER - 32))
        | (1 << (fa::OWNER_GROUP - 32))
        | WRITE_ONLY[1],
    1 << (fa::MODE_UMASK - 64),
];

/// `suppattr_exclcreat` (RFC 8881 §5.8.1.14, a REQUIRED attribute): what an EXCLUSIVE4_1
/// OPEN sets from its `cva_attrs`: the settable attributes but the times, which hold the
/// verifier (as Linux nfsd's `nfsd41_ex_attrmask`); per minor version: [`exclcreat_in`].
pub const EXCLCREAT: [u32; 3] = [SETTABLE[0], SETTABLE[1] & !WRITE_ONLY[1], SETTABLE[2]];

/// Where a `fattr4` to set comes from: SETATTR, or an operation that creates an object
/// (CREATE, OPEN), the only ones that may carry `mode_umask` (RFC 8275).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetIn {
    /// SETATTR.
    Setattr,
    /// CREATE or OPEN creating a file.
    Creation,
}

/// Reads a `fattr4` to set in minor version `minor`. Attributes this server returns but does
/// not set are NFS4ERR_INVAL, attributes it does not know (in this minor version)
/// NFS4ERR_ATTRNOTSUPP; values that do not decode NFS4ERR_BADXDR. `mode_umask` outside a
/// creation, or with `mode`, is NFS4ERR_INVAL (RFC 8275); its mode keeps the permission bits
/// and its umask the nine access bits (as Linux nfsd takes them).
pub fn get_sattr(
    r: &mut XdrReader<'_>,
    minor: u32,
    within: SetIn,
) -> Result<crate::nfs::types::Sattr3, Status> {
    let mask = get_bitmap(r)?;
    let vals = r.get_opaque(4096).map_err(bad_xdr)?;
    let supported = supported_in(minor);
    for i in 0..3 {
        let extra = mask[i] & !(SETTABLE[i] & supported[i]);
        if extra & supported[i] != 0 {
            return Err(st::INVAL);
        }
        if extra != 0 {
            return Err(st::ATTRNOTSUPP);
        }
    }
    if has(&mask, fa::MODE_UMASK) && (within == SetIn::Setattr || has(&mask, fa::MODE)) {
        return Err(st::INVAL);
    }
    let mut v = XdrReader::new(vals);
    let mut set = crate::nfs::types::Sattr3::default();
    if has(&mask, fa::SIZE) {
        set.size = Some(v.get_u64().map_err(bad_xdr)?);
    }
    if has(&mask, fa::MODE) {
        set.mode = Some(v.get_u32().map_err(bad_xdr)? & 0o7777);
    }
    if has(&mask, fa::OWNER) {
        set.uid = Some(numeric_id(v.get_opaque(1024).map_err(bad_xdr)?)?);
    }
    if has(&mask, fa::OWNER_GROUP) {
        set.gid = Some(numeric_id(v.get_opaque(1024).map_err(bad_xdr)?)?);
    }
    if has(&mask, fa::TIME_ACCESS_SET) {
        set.atime = get_settime(&mut v)?;
    }
    if has(&mask, fa::TIME_MODIFY_SET) {
        set.mtime = get_settime(&mut v)?;
    }
    if has(&mask, fa::MODE_UMASK) {
        set.mode = Some(v.get_u32().map_err(bad_xdr)? & 0o7777);
        set.umask = Some(v.get_u32().map_err(bad_xdr)? & 0o777);
    }
    if !v.rest().is_empty() {
        return Err(st::BADXDR);
    }
    Ok(set)
}

/// The bitmap of what `set` changes.
pub fn set_mask(set: &crate::nfs::types::Sattr3) -> [u32; 3] {
    use crate::nfs::types::SetTime;
    let mut m = [0u32; 3];
    let mut on = |b: u32| m[(b / 32) as usize] |= 1 << (b % 32);
    if set.size.is_some() {
        on(fa::SIZE);
    }
    match (set.mode, set.umask) {
        (Some(_), Some(_)) => on(fa::MODE_UMASK),
        (Some(_), None) => on(fa::MODE),
        _ => {}
    }
    if set.uid.is_some() {
        on(fa::OWNER);
    }
    if set.gid.is_some() {
        on(fa::OWNER_GROUP);
    }
    if set.atime != SetTime::DontChange {
        on(fa::TIME_ACCESS_SET);
    }
    if set.mtime != SetTime::DontChange {
        on(fa::TIME_MODIFY_SET);
    }
    m
}
