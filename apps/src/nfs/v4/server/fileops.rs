//! The NFSv4.1 file operations on the current and saved file handles (RFC 8881 §18):
//! SECINFO, SECINFO_NO_NAME, PUTROOTFH, PUTFH, GETFH, SAVEFH, RESTOREFH, LOOKUP, LOOKUPP, ACCESS,
//! READDIR, READLINK, READ, WRITE, COMMIT, REMOVE, RENAME, LINK, CREATE, SETATTR.
//!
//! Normal operation: each operation calls the export's [`Store`](crate::nfs::store::Store)
//! with the caller's squashed identity, as the NFSv3 handlers do, and writes its result.
//! Handles leave the server sealed with the export's key ([`crate::nfs::admit::seal_or_fault`]).
//! READ and WRITE take the anonymous or the bypass stateid, or an open stateid of the same
//! file ([`super::open::check_stateid`]).
//!
//! Recovery: what the store refuses is its status in NFSv4 numbering; no current file handle
//! is NFS4ERR_NOFILEHANDLE; a name that is empty is NFS4ERR_INVAL, `.`, `..` or one holding
//! `/` or NUL NFS4ERR_BADNAME, a longer one than 255 octets NFS4ERR_NAMETOOLONG; LOOKUP in a
//! symbolic link is NFS4ERR_SYMLINK; changes on a read-only export are NFS4ERR_ROFS; REMOVE
//! and RENAME within the grace period after a restart NFS4ERR_GRACE ([`super::grace`]).

use rpcrdma_engine::xdr::XdrReader;

use crate::nfs::admit::seal_or_fault;
use crate::nfs::store::NewObj;
use crate::nfs::types::{access, DirEntry, Fattr3, Fh, Ftype3, Nfsstat3, StableHow, PATH_MAX};

use super::attrs::{get_bitmap, put_cinfo, put_fattr, Source};
use super::open::check_stateid;
use super::xdr::{bad_xdr, from_store, get_name, io_error, st, Enc, Status};
use super::{Compound, Cur};

/// Largest wire handle (`NFS4_FHSIZE`).
pub const FHSIZE4: u32 = 128;
/// Most directory entries one READDIR returns.
const READDIR_MAX_ENTRIES: usize = 4096;

/// The current file handle, which must be a directory (NFS4ERR_SYMLINK for a link,
/// NFS4ERR_NOTDIR for anything else).
fn cur_dir(c: &Compound<'_>) -> Result<(Cur, Fattr3), Status> {
    let cur = c.cur()?.clone();
    let a = cur.share.store.getattr(&cur.fh).map_err(from_store)?;
    match a.ftype {
        Ftype3::Dir => Ok((cur, a)),
        Ftype3::Lnk => Err(st::SYMLINK),
        _ => Err(st::NOTDIR),
    }
}

/// NFS4ERR_ROFS on a read-only export.
fn writable(cur: &Cur) -> Result<(), Status> {
    if cur.opts.read_only {
        return Err(st::ROFS);
    }
    Ok(())
}

/// SECINFO (RFC 8881 §18.29): the flavors of the export `name` in the current directory is
/// in, if it exists (names checked as LOOKUP checks them); the current file handle is
/// consumed. In a pseudo directory, the pseudo file system answers (`pseudo::secinfo`).
pub fn secinfo(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let name = get_name(r)?;
    let (cur, _) = cur_dir(c)?;
    cur.share
        .store
        .lookup(&cur.cred, &cur.fh, name)
        .map_err(from_store)?;
    super::pseudo::put_secinfo(c, &cur.opts.sec.numbers(), out);
    Ok(())
}

/// SECINFO_NO_NAME (RFC 8881 §18.45): the flavors of the current file handle's export
/// (SECINFO_STYLE4_CURRENT_FH) or of its parent's (SECINFO_STYLE4_PARENT: LOOKUPP first, as
/// Linux nfsd does, so that an export's root answers for the pseudo directory or export
/// above it); the current file handle is consumed.
pub fn secinfo_no_name(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let style = r.get_u32().map_err(bad_xdr)?;
    if style > 1 {
        return Err(st::INVAL);
    }
    if style == 1 {
        // The parent's export is asked about, not entered: its flavor is not enforced.
        c.secinfo_next = true;
        match c.pseudo.clone() {
            Some(p) => super::pseudo::lookupp(c, &p)?,
            None => lookupp(c)?,
        }
    }
    if c.pseudo.is_some() {
        let flavors = super::pseudo::flavors(c);
        super::pseudo::put_secinfo(c, &flavors, out);
        return Ok(());
    }
    let flavors = c.cur()?.opts.sec.numbers();
    super::pseudo::put_secinfo(c, &flavors, out);
    Ok(())
}

/// PUTFH.
pub fn putfh(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let b = r.get_opaque(FHSIZE4).map_err(bad_xdr)?;
    let fh = Fh::new(b).ok_or(st::BADHANDLE)?;
    c.put_fh(&fh)
}

/// GETFH.
pub fn getfh(c: &mut Compound<'_>, out: &mut Enc) -> Result<(), Status> {
    let cur = c.cur()?;
    let fh = seal_or_fault(&cur.share, &cur.fh).map_err(from_store)?;
    out.opaque(fh.as_bytes());
    Ok(())
}

/// SAVEFH.
pub fn savefh(c: &mut Compound<'_>) -> Result<(), Status> {
    c.saved = Some(c.cur()?.clone());
    c.saved_pseudo = None;
    Ok(())
}

/// RESTOREFH.
pub fn restorefh(c: &mut Compound<'_>) -> Result<(), Status> {
    if let Some(p) = c.saved_pseudo.clone() {
        c.set_pseudo(p);
        return Ok(());
    }
    let saved = c.saved.clone().ok_or(st::RESTOREFH)?;
    c.set_real(saved);
    Ok(())
}

/// LOOKUP of one component.
pub fn lookup(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let name = get_name(r)?;
    let (cur, _) = cur_dir(c)?;
    if c.wrongsec_held {
        return Err(st::WRONGSEC); // the flavor PUTFH left to LOOKUP (RFC 8881 §2.6.3.1.1.3)
    }
    let fh = cur
        .share
        .store
        .lookup(&cur.cred, &cur.fh, name)
        .map_err(from_store)?;
    c.set_cur_fh(fh)
}

/// LOOKUPP: the parent; from the export's root, what is above it
/// ([`super::pseudo::above_export`]).
pub fn lookupp(c: &mut Compound<'_>) -> Result<(), Status> {
    let (cur, _) = cur_dir(c)?;
    if cur.fh == cur.share.store.root() {
        return super::pseudo::above_export(c, &cur.share);
    }
    if c.wrongsec_held {
        return Err(st::WRONGSEC); // the parent is in the export PUTFH's flavor was refused by
    }
    let fh = cur
        .share
        .store
        .lookup(&cur.cred, &cur.fh, b"..")
        .map_err(from_store)?;
    c.set_cur_fh(fh)
}

/// ACCESS: the bits asked for that the caller holds (no changes on a read-only export).
pub fn access(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let asked = r.get_u32().map_err(bad_xdr)?;
    let want = asked & 0x3f;
    let cur = c.cur()?;
    let store = &cur.share.store;
    // Minor version 2's extended attribute bits (RFC 8276) are asked of the store as READ
    // and MODIFY (`xattr::access_bits`).
    let xattrs = c.minor >= 2 && store.xattr_support();
    let extra = match xattrs {
        true => access::READ | access::MODIFY,
        false => 0,
    };
    let (_, mut got) = store
        .access(&cur.cred, &cur.fh, want | extra)
        .map_err(from_store)?;
    if cur.opts.read_only {
        got &= !(0x04 | 0x08 | 0x10);
    }
    let (x_supported, x_granted) = super::xattr::access_bits(xattrs, asked, got);
    out.u32(want | x_supported);
    out.u32((got & want) | x_granted);
    Ok(())
}

/// READLINK: of anything but a symbolic link NFS4ERR_INVAL, a directory included (the store
/// answers NFSv3's ISDIR there; Linux nfsd's `nfsd4_encode_readlink` answers INVAL).
pub fn readlink(c: &mut Compound<'_>, out: &mut Enc) -> Result<(), Status> {
    let cur = c.cur()?;
    // The target, read by the store straight into the reply.
    out.opaque_with(PATH_MAX, |dst| {
        cur.share.store.readlink(&cur.cred, &cur.fh, dst)
    })
    .map_err(|e| match e {
        Nfsstat3::ISDIR => st::INVAL,
        e => from_store(e),
    })?;
    Ok(())
}

/// READ: the first one with data, when the call offered a Write chunk, leaves its data in
/// registered memory for the Write chunk ([`super::placed`]) or notes where it is in the reply
/// (`read_at`); the others carry it inline.
pub fn read(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let sid = super::stateid::get_stateid(r)?;
    let offset = r.get_u64().map_err(bad_xdr)?;
    let mut count = r.get_u32().map_err(bad_xdr)?.min(c.srv.config().max_io);
    let cur = c.cur()?.clone();
    check_stateid(c, &cur, &sid, super::stateid::ACCESS_READ)?;
    // No more data than the session's reply bound leaves room for after READ4resok's `eof`
    // and length, with the data's pad (a short READ, as Linux nfsd answers; with no room at
    // all the reply check after the operation refuses it).
    if let Some((room, _)) = super::session::room(c, out.len()) {
        count = count.min((room.saturating_sub(8) & !3).min(u32::MAX as usize) as u32);
    }
    let ddp = c
        .ddp_cap
        .filter(|_| c.read_at.is_none() && c.placed.is_none());
    if let Some(cap) = ddp {
        count = count.min(cap);
        if c.lend {
            if let Some(done) = super::placed::read(c, &cur, offset, count, out) {
                return done;
            }
        }
    }
    // READ4resok: eof, then the data, read by the store straight into the reply.
    let eof_at = out.len();
    out.u32(0);
    let data_at = out.len() + 4;
    let mut eof = false;
    let n = out
        .opaque_with(count as usize, |dst| {
            let (n, e) = cur.share.store.read(&cur.cred, &cur.fh, offset, dst)?;
            eof = e;
            Ok(n)
        })
        .map_err(|e| {
            out.b.truncate(eof_at);
            io_error(&*cur.share.store, &cur.fh, e)
        })?;
    out.b[eof_at..eof_at + 4].copy_from_slice(&u32::from(eof).to_be_bytes());
    if ddp.is_some() && n > 0 {
        c.read_at = Some((data_at, n));
    }
    Ok(())
}

/// WRITE.
pub fn write(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let sid = super::stateid::get_stateid(r)?;
    let offset = r.get_u64().map_err(bad_xdr)?;
    let stable = StableHow::from_u32(r.get_u32().map_err(bad_xdr)?).ok_or(st::BADXDR)?;
    let data = r.get_opaque(c.srv.config().max_io).map_err(bad_xdr)?;
    let cur = c.cur()?.clone();
    writable(&cur)?;
    check_stateid(c, &cur, &sid, super::stateid::ACCESS_WRITE)?;
    let got = cur
        .share
        .store
        .write(&cur.cred, &cur.fh, offset, data, stable)
        .map_err(|e| io_error(&*cur.share.store, &cur.fh, e))?;
    out.u32(data.len() as u32);
    out.u32(got as u32);
    out.fixed(&cur.share.store.write_verifier());
    Ok(())
}

/// COMMIT.
pub fn commit(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    r.get_u64().map_err(bad_xdr)?;
    r.get_u32().map_err(bad_xdr)?;
    let cur = c.cur()?;
    cur.share
        .store
        .commit(&cur.cred, &cur.fh)
        .map_err(from_store)?;
    out.fixed(&cur.share.store.write_verifier());
    Ok(())
}

/// REMOVE of a file or an empty directory.
pub fn remove(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let name = get_name(r)?;
    let (cur, _) = cur_dir(c)?;
    writable(&cur)?;
    c.srv.grace_io()?;
    super::deleg::recall_named(c, &cur, name)?;
    let store = &cur.share.store;
    let (r, w) = match store.remove_wcc(&cur.cred, &cur.fh, name, false) {
        (Err(Nfsstat3::ISDIR), _) => store.remove_wcc(&cur.cred, &cur.fh, name, true),
        other => other,
    };
    r.map_err(from_store)?;
    put_cinfo(out, &w, true);
    Ok(())
}

/// The saved file handle, in the same export as the current one (NFS4ERR_XDEV otherwise).
pub(super) fn saved_same_export(c: &Compound<'_>) -> Result<Cur, Status> {
    if c.saved_pseudo.is_some() {
        return Err(18); // NFS4ERR_XDEV: the pseudo file system is not the export
    }
    let saved = c.saved.clone().ok_or(st::NOFILEHANDLE)?;
    if saved.share.id != c.cur()?.share.id {
        return Err(18); // NFS4ERR_XDEV
    }
    Ok(saved)
}

/// RENAME from the saved directory to the current one.
pub fn rename(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let old = get_name(r)?;
    let new = get_name(r)?;
    let (to, _) = cur_dir(c)?;
    let from = saved_same_export(c)?;
    writable(&to)?;
    c.srv.grace_io()?;
    let store = &to.share.store;
    if store.getattr(&from.fh).map_err(from_store)?.ftype != Ftype3::Dir {
        return Err(st::NOTDIR);
    }
    super::deleg::recall_named(c, &from, old)?;
    super::deleg::recall_named(c, &to, new)?;
    let (r, from_w, to_w) = store.rename_wcc(&to.cred, &from.fh, old, &to.fh, new);
    r.map_err(from_store)?;
    put_cinfo(out, &from_w, true);
    put_cinfo(out, &to_w, true);
    Ok(())
}

/// LINK: a new name in the current directory for the saved object.
pub fn link(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let name = get_name(r)?;
    let (dir, _) = cur_dir(c)?;
    let obj = saved_same_export(c)?;
    writable(&dir)?;
    let (r, _, w) = dir.share.store.link_wcc(&dir.cred, &obj.fh, &dir.fh, name);
    r.map_err(from_store)?;
    put_cinfo(out, &w, true);
    Ok(())
}

/// READDIR: entries after `cookie` with the attributes asked for, within `maxcount`. Wire
/// cookies are the store's plus 2 (RFC 8881 §18.23.3 keeps 1 and 2 for `.` and `..`, which
/// are never listed).
///
/// Each entry is written into `out` while the store walks the directory (nothing is
/// collected on the heap), and the one that would pass `maxcount` or the session's reply
/// bound is taken back. An entry
/// the store lists without attributes (a mount point inside the export on the `dir:` store,
/// whose LOOKUP is refused) carries `rdattr_error` NFS4ERR_ACCESS when the client asked for
/// it, as the Linux client always does; otherwise the READDIR is NFS4ERR_ACCESS.
pub fn readdir(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let cookie = r.get_u64().map_err(bad_xdr)?;
    let verf: [u8; 8] = r
        .get_fixed_opaque(8)
        .map_err(bad_xdr)?
        .try_into()
        .unwrap_or([0; 8]);
    let _dircount = r.get_u32().map_err(bad_xdr)?;
    let maxcount = r.get_u32().map_err(bad_xdr)?.min(c.srv.config().max_io) as usize;
    let want = get_bitmap(r)?;
    if cookie == 1 || cookie == 2 {
        return Err(st::BAD_COOKIE);
    }
    if maxcount < 16 {
        return Err(st::TOOSMALL); // not even the verifier, the list's end and `eof`
    }
    let (cur, _) = cur_dir(c)?;
    let c: &Compound<'_> = c;
    let start = out.len();
    // Within the session's reply bound too, as Linux nfsd's `nfsd4_encode_readdir`: an entry
    // past it is left for the next READDIR; when not even one fits, the bound's error.
    let (limit, full_status) = match super::session::room(c, start) {
        Some((room, s)) if room < maxcount => (room, s),
        _ => (maxcount, st::TOOSMALL),
    };
    out.fixed(&[0; 8]); // the cookie verifier, written once the store answered
    let (mut listed, mut full, mut failed) = (0usize, false, None);
    let listing = cur.share.store.readdir(
        &cur.cred,
        &cur.fh,
        cookie.saturating_sub(2),
        verf,
        true,
        &mut |e| {
            if e.name == b"." || e.name == b".." {
                return true;
            }
            if listed == READDIR_MAX_ENTRIES {
                full = true;
                return false;
            }
            let mark = out.len();
            if let Err(s) = put_entry(c, &cur, &want, e, out) {
                failed = Some(s);
                return false;
            }
            // The entry, then the list's end and `eof`.
            if out.len() - start + 8 > limit {
                out.b.truncate(mark);
                full = true;
                return false;
            }
            listed += 1;
            true
        },
    );
    let listing = match (listing, failed) {
        (Ok(l), None) => l,
        (r, f) => {
            out.b.truncate(start);
            return Err(f.unwrap_or_else(|| r.err().map_or(st::SERVERFAULT, from_store)));
        }
    };
    if listed == 0 && full {
        out.b.truncate(start);
        return Err(full_status);
    }
    out.b[start..start + 8].copy_from_slice(&listing.verf);
    out.u32(0);
    out.u32(u32::from(listing.eof && !full));
    Ok(())
}

/// One READDIR entry: `entry4` with its cookie, name and attributes (see [`readdir`] for an
/// entry the store lists without them).
fn put_entry(
    c: &Compound<'_>,
    cur: &Cur,
    want: &[u32; 3],
    e: &DirEntry<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    out.u32(1);
    out.u64(e.cookie.wrapping_add(2));
    out.opaque(e.name);
    let Some((fh, a)) = &e.plus else {
        return put_rdattr_error(want, e.fileid, st::ACCESS, out);
    };
    let store = &cur.share.store;
    let sealed = seal_or_fault(&cur.share, fh).map_err(from_store)?;
    let src = Source {
        attr: a,
        fs: None,
        fh: Some(sealed.as_bytes()),
    };
    put_fattr(c, store.max_file_size(), want, &src, out);
    Ok(())
}

/// `fattr4` of an entry whose attributes could not be had: `rdattr_error` holding `err`, and
/// `mounted_on_fileid` when asked for (RFC 8881 §5.8.1.12: the file id of the name in this
/// directory); `err` itself when `rdattr_error` was not asked for.
fn put_rdattr_error(
    want: &[u32; 3],
    fileid: u64,
    err: Status,
    out: &mut Enc,
) -> Result<(), Status> {
    use super::attrs::fa;
    let asked = |b: u32| want[(b / 32) as usize] & (1 << (b % 32)) != 0;
    if !asked(fa::RDATTR_ERROR) {
        return Err(err);
    }
    let mut mask = [1u32 << fa::RDATTR_ERROR, 0, 0];
    let on = asked(fa::MOUNTED_ON_FILEID);
    if on {
        mask[1] |= 1 << (fa::MOUNTED_ON_FILEID - 32);
    }
    out.bitmap(&mask);
    out.u32(if on { 12 } else { 4 });
    out.u32(err);
    if on {
        out.u64(fileid);
    }
    Ok(())
}

/// CREATE of a directory, symbolic link or special file (a regular file is OPEN's:
/// NFS4ERR_BADTYPE).
pub fn create(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    use crate::nfs::store::Special;
    enum Kind<'a> {
        Dir,
        Link(&'a [u8]),
        Node(Special),
    }
    let kind = match r.get_u32().map_err(bad_xdr)? {
        2 => Kind::Dir,
        5 => Kind::Link(r.get_opaque(PATH_MAX as u32).map_err(bad_xdr)?),
        t @ (3 | 4) => {
            let (ma, mi) = (r.get_u32().map_err(bad_xdr)?, r.get_u32().map_err(bad_xdr)?);
            Kind::Node(if t == 3 {
                Special::Blk(ma, mi)
            } else {
                Special::Chr(ma, mi)
            })
        }
        6 => Kind::Node(Special::Sock),
        7 => Kind::Node(Special::Fifo),
        _ => return Err(st::BADTYPE),
    };
    let name = get_name(r)?;
    let set = super::attrs::get_sattr(r, c.minor, super::attrs::SetIn::Creation)?;
    let (dir, _) = cur_dir(c)?;
    writable(&dir)?;
    let new = match kind {
        Kind::Dir => NewObj::Dir(&set),
        Kind::Link(t) => NewObj::Symlink(t, &set),
        Kind::Node(n) => NewObj::Node(n, &set),
    };
    let (r, w) = dir.share.store.create_wcc(&dir.cred, &dir.fh, name, new);
    let (fh, _) = r.map_err(from_store)?;
    put_cinfo(out, &w, true);
    out.bitmap(&super::attrs::set_mask(&set));
    c.set_cur_fh(fh)
}

/// SETATTR (a size change checks the stateid for writing). Any change recalls other clients'
/// delegations of the file, which let them cache its attributes (Linux nfsd's
/// `notify_change` breaks the lease behind them for every attribute).
pub fn setattr(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let sid = super::stateid::get_stateid(r)?;
    let set = super::attrs::get_sattr(r, c.minor, super::attrs::SetIn::Setattr)?;
    let cur = c.cur()?.clone();
    if cur.opts.read_only {
        return Err(st::ROFS);
    }
    if set.size.is_some() {
        super::open::check_stateid(c, &cur, &sid, super::stateid::ACCESS_WRITE)?;
    }
    let client = c.client.unwrap_or(0);
    super::deleg::recall_conflicts(c, cur.share.id, &cur.fh, client)?;
    cur.share
        .store
        .setattr(&cur.cred, &cur.fh, &set, None)
        .map_err(from_store)?;
    out.bitmap(&super::attrs::set_mask(&set));
    Ok(())
}
