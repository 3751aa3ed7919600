//! NFSv4.2 extended attributes (RFC 8276): GETXATTR, SETXATTR, LISTXATTRS and REMOVEXATTR of
//! the `user.` namespace, on the store's `getxattr`, `setxattr_wcc`, `listxattrs` and
//! `removexattr_wcc`, as Linux nfsd answers them (`nfsd4_getxattr` and its kin,
//! `nfsd_xattr_errno`); the `xattr_support` attribute says whether the export's store keeps
//! them, and ACCESS answers the XAREAD, XAWRITE and XALIST bits in minor version 2 ([`access_bits`]).
//!
//! Normal operation: names travel without the `user.` prefix (the store adds it where it keeps
//! them); a name is 1 to [`XATTR_NAME_MAX`](crate::nfs::store::XATTR_NAME_MAX) octets without NUL (INVAL, NAMETOOLONG); a value
//! at most [`XATTR_SIZE_MAX`] octets (XATTR2BIG). GETXATTR answers the value inline (a long
//! reply goes in the Reply chunk); LISTXATTRS answers the names from the cookie on (the index
//! of the next name, as Linux nfsd counts it) within `lxa_maxcount`, the octets of the whole
//! `LISTXATTRS4resok` (RFC 8276 §8.4.3.1): cookie, count and `eof` take 16 of them. SETXATTR
//! and REMOVEXATTR return the object's `change_info4` and recall the write delegations other
//! clients hold on it, as SETATTR does. Recovery: the store's refusals are the result
//! (NOXATTR, EXIST, TOOSMALL, ACCESS, PERM, NOSPC); a cookie past the names is
//! NFS4ERR_BAD_COOKIE; a store without extended attributes answers NOTSUPP, and so does the
//! pseudo file system; malformed arguments are NFS4ERR_BADXDR.

use rpcrdma_engine::xdr::XdrReader;

use super::attrs::put_cinfo;
use super::xdr::{bad_xdr, from_store, st, Enc, Status};
use super::Compound;
use crate::nfs::store::{check_xattr_name, XattrSet, XATTR_SIZE_MAX};
use crate::nfs::types::Nfsstat3;

/// ACCESS4_XAREAD: read an extended attribute (RFC 8276 §8.4.1).
pub const ACCESS_XAREAD: u32 = 0x40;
/// ACCESS4_XAWRITE: set or remove one.
pub const ACCESS_XAWRITE: u32 = 0x80;
/// ACCESS4_XALIST: list them.
pub const ACCESS_XALIST: u32 = 0x100;

/// `LISTXATTRS4resok`'s octets besides the names: cookie, array count, `eof`.
const LIST_FIXED: usize = 16;

/// Reads an `xattrkey4` (a `component4`) and checks it ([`check_xattr_name`]).
fn get_key<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], Status> {
    let n = r
        .get_opaque(crate::nfs::types::PATH_MAX as u32)
        .map_err(bad_xdr)?;
    check_xattr_name(n).map_err(from_store)?;
    Ok(n)
}

/// GETXATTR: the value of the named attribute of the current object, inline.
pub fn getxattr(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let name = get_key(r)?;
    let cur = c.cur()?.clone();
    // At most what the session's reply bound leaves after the value's length word.
    let bound =
        super::session::room(c, out.len()).map(|(room, full)| (room.saturating_sub(4), full));
    let room = bound.map_or(XATTR_SIZE_MAX, |(b, _)| b.min(XATTR_SIZE_MAX));
    let store = &cur.share.store;
    match out.opaque_with(room, |dst| store.getxattr(&cur.cred, &cur.fh, name, dst)) {
        Ok(_) => Ok(()),
        // Longer than the session's replies may be: the reply is too big, not the value.
        Err(Nfsstat3::TOOSMALL) if room < XATTR_SIZE_MAX => {
            Err(bound.map_or(st::TOOSMALL, |b| b.1))
        }
        Err(e) => Err(from_store(e)),
    }
}

/// SETXATTR: option, name, value; `change_info4` of the object.
pub fn setxattr(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let how = match r.get_u32().map_err(bad_xdr)? {
        0 => XattrSet::Either,
        1 => XattrSet::Create,
        2 => XattrSet::Replace,
        _ => return Err(st::INVAL),
    };
    let name = get_key(r)?;
    let value = r.get_opaque(u32::MAX).map_err(bad_xdr)?;
    if value.len() > XATTR_SIZE_MAX {
        return Err(from_store(Nfsstat3::XATTR2BIG));
    }
    let cur = writable_cur(c)?;
    let store = &cur.share.store;
    let (res, w) = store.setxattr_wcc(&cur.cred, &cur.fh, name, value, how);
    res.map_err(from_store)?;
    put_cinfo(out, &w, true);
    Ok(())
}

/// REMOVEXATTR: name; `change_info4` of the object.
pub fn removexattr(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let name = get_key(r)?;
    let cur = writable_cur(c)?;
    let (res, w) = cur.share.store.removexattr_wcc(&cur.cred, &cur.fh, name);
    res.map_err(from_store)?;
    put_cinfo(out, &w, true);
    Ok(())
}

/// The current object for a change of its extended attributes: ROFS on a read-only export
/// (for a store that keeps them), the write delegations of other clients recalled.
fn writable_cur(c: &mut Compound<'_>) -> Result<super::Cur, Status> {
    let cur = c.cur()?.clone();
    if !cur.share.store.xattr_support() {
        return Err(st::NOTSUPP);
    }
    if cur.opts.read_only {
        return Err(st::ROFS);
    }
    let client = c.client.unwrap_or(0);
    super::deleg::recall_conflicts(c, cur.share.id, &cur.fh, client)?;
    Ok(cur)
}

/// LISTXATTRS: cookie, maxcount; `LISTXATTRS4resok` (cookie, names, `eof`).
pub fn listxattrs(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let cookie = r.get_u64().map_err(bad_xdr)?;
    let maxcount = r.get_u32().map_err(bad_xdr)? as usize;
    let cur = c.cur()?.clone();
    let maxcount = match super::session::room(c, out.len()) {
        Some((room, _)) => maxcount.min(room),
        None => maxcount,
    };
    let mut budget = maxcount.checked_sub(LIST_FIXED).ok_or(st::TOOSMALL)?;
    let at = out.len();
    out.u64(0);
    out.u32(0);
    let (mut seen, mut sent, mut full) = (0u64, 0u32, false);
    let listed = cur.share.store.listxattrs(&cur.cred, &cur.fh, &mut |name| {
        seen += 1;
        if seen <= cookie || full {
            return;
        }
        let len = 4 + name.len().next_multiple_of(4);
        if len > budget {
            full = true;
            return;
        }
        budget -= len;
        out.opaque(name);
        sent += 1;
    });
    let names = match (seen, sent) {
        // Linux nfsd: a cookie past every name (or at the end of a non-empty list) is bad.
        (n, 0) if cookie > n || (cookie == n && n > 0) => Err(st::BAD_COOKIE),
        (_, 0) if full => Err(st::TOOSMALL),
        _ => Ok(()),
    };
    let done = listed.map_err(from_store).and(names);
    if let Err(e) = done {
        out.b.truncate(at);
        return Err(e);
    }
    out.u32(u32::from(!full));
    let next = cookie + u64::from(sent);
    out.b[at..at + 8].copy_from_slice(&next.to_be_bytes());
    out.b[at + 8..at + 12].copy_from_slice(&sent.to_be_bytes());
    Ok(())
}

/// The extended attribute bits of an ACCESS of minor version 2 (`want`, the client's), from
/// what the store granted of NFSv3's (`got`): XAREAD and XALIST as READ, XAWRITE as MODIFY,
/// as Linux nfsd's access tables map them (`NFSD_MAY_READ`, `NFSD_MAY_WRITE`). Returns the
/// supported and the granted extended attribute bits (none supported for a store without
/// them).
pub fn access_bits(xattrs: bool, want: u32, got: u32) -> (u32, u32) {
    if !xattrs {
        return (0, 0);
    }
    let supported = want & (ACCESS_XAREAD | ACCESS_XAWRITE | ACCESS_XALIST);
    let mut granted = 0;
    if got & crate::nfs::types::access::READ != 0 {
        granted |= ACCESS_XAREAD | ACCESS_XALIST;
    }
    if got & crate::nfs::types::access::MODIFY != 0 {
        granted |= ACCESS_XAWRITE;
    }
    (supported, supported & granted)
}
