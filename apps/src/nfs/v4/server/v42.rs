//! The NFSv4.2 operations (RFC 7862) this server implements, in COMPOUNDs of minor version 2:
//! ALLOCATE and DEALLOCATE (§15.1, §15.4: reserve space, punch a hole), SEEK (§15.11: the
//! next data or hole), COPY within the server (§15.2, synchronous: from the saved file to
//! the current one, at most [`COPY_MAX`] octets a call, which the client continues) and CLONE
//! (§15.13: the source's storage shared, not copied), on the store's `fallocate`, `seek`,
//! `copy` and `clone_range`, as Linux nfsd answers them (`nfsd4_allocate`,
//! `nfsd4_deallocate`, `nfsd4_seek`, `nfsd4_copy`, `nfsd4_clone`). Every other minor version
//! 2 operation but the extended attribute ones (the `xattr` module) is NOTSUPP (a copy from
//! another server, OFFLOAD_*, READ_PLUS, ...), which makes the Linux client fall back to what
//! minor version 1 offers.
//!
//! Normal operation: ALLOCATE and DEALLOCATE take a stateid that allows writing (an open for
//! write, a write delegation, or the anonymous stateids outside the grace period) on a
//! writable export; SEEK one that allows reading; COPY and CLONE both, on regular files of
//! one export. Recovery: the store's refusals are the result (INVAL for anything but a
//! regular file or an empty range, NXIO for a SEEK at or past the end, FBIG, NOSPC; NOTSUPP
//! for a CLONE the store or its file system cannot make, which the Linux client answers by
//! copying; a SEEK for data that finds none before the end is NFS4_OK with `sr_eof`, as RFC
//! 7862 §15.11.3 says); malformed arguments are NFS4ERR_BADXDR.

use rpcrdma_engine::xdr::XdrReader;

use super::fileops::saved_same_export;
use super::open::check_stateid;
use super::stateid::{get_stateid, ACCESS_READ, ACCESS_WRITE};
use super::xdr::{bad_xdr, from_store, io_error, not_regular, st, Enc, Status};
use super::{Compound, Cur};
use crate::nfs::store::{clone_span, COPY_MAX};
use crate::nfs::types::{Ftype3, Nfsstat3, StableHow};

/// `data_content4` NFS4_CONTENT_DATA.
const CONTENT_DATA: u32 = 0;
/// `data_content4` NFS4_CONTENT_HOLE.
const CONTENT_HOLE: u32 = 1;

/// ALLOCATE (`punch` false) or DEALLOCATE: stateid, offset, length; the result is the status.
pub fn allocate(c: &mut Compound<'_>, r: &mut XdrReader<'_>, punch: bool) -> Result<(), Status> {
    let sid = get_stateid(r)?;
    let offset = r.get_u64().map_err(bad_xdr)?;
    let len = r.get_u64().map_err(bad_xdr)?;
    let cur = c.cur()?.clone();
    if cur.opts.read_only {
        return Err(st::ROFS);
    }
    check_stateid(c, &cur, &sid, ACCESS_WRITE)?;
    cur.share
        .store
        .fallocate(&cur.cred, &cur.fh, offset, len, punch)
        .map_err(from_store)
}

/// SEEK: stateid, offset, what to look for; `seek_res4` (`sr_eof`, `sr_offset`).
pub fn seek(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let sid = get_stateid(r)?;
    let offset = r.get_u64().map_err(bad_xdr)?;
    let hole = match r.get_u32().map_err(bad_xdr)? {
        CONTENT_DATA => false,
        CONTENT_HOLE => true,
        _ => return Err(st::BADXDR),
    };
    let cur = c.cur()?.clone();
    check_stateid(c, &cur, &sid, ACCESS_READ)?;
    let store = &*cur.share.store;
    let (at, eof) = match store.seek(&cur.cred, &cur.fh, offset, hole) {
        // No data between the offset and the end of the file: "the status will still be
        // NFS4_OK, but sr_eof would be TRUE" (RFC 7862 §15.11.3; Linux nfsd answers NXIO,
        // which its client takes the same way). NXIO only at or past the end.
        Err(Nfsstat3::NXIO) => match store.getattr(&cur.fh) {
            Ok(a) if !hole && offset < a.size => (a.size, true),
            _ => return Err(st::NXIO),
        },
        r => r.map_err(|e| io_error(store, &cur.fh, e))?,
    };
    out.u32(u32::from(eof));
    out.u64(at);
    Ok(())
}

/// COPY (§15.2) from the saved file handle to the current one, within the server: source and
/// destination stateids, offsets, count (0: to the end of the source), `ca_consecutive`,
/// `ca_synchronous`, `ca_source_server<>` (a source server named: a copy from another server,
/// NFS4ERR_NOTSUPP). Done before the reply, at most [`COPY_MAX`] octets (the client asks for
/// the rest); `write_response4` with no callback id, UNSTABLE and the write verifier, then
/// `copy_requirements4` (consecutive, synchronous).
pub fn copy(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let src_sid = get_stateid(r)?;
    let dst_sid = get_stateid(r)?;
    let src_offset = r.get_u64().map_err(bad_xdr)?;
    let dst_offset = r.get_u64().map_err(bad_xdr)?;
    let count = r.get_u64().map_err(bad_xdr)?;
    r.get_bool().map_err(bad_xdr)?; // ca_consecutive: a synchronous copy is
    r.get_bool().map_err(bad_xdr)?; // ca_synchronous: done before the reply either way
    if r.get_u32().map_err(bad_xdr)? != 0 {
        return Err(st::NOTSUPP);
    }
    let (src, dst, size) = source_and_destination(c, &src_sid, &dst_sid)?;
    let store = &dst.share.store;
    // As Linux's `generic_copy_file_checks`: no more than the source holds past the offset,
    // and one file copied onto itself only between ranges that do not overlap.
    let want = if count == 0 { u64::MAX } else { count };
    let want = want.min(size.saturating_sub(src_offset));
    let overlap = src_offset < dst_offset.saturating_add(want)
        && dst_offset < src_offset.saturating_add(want);
    if src.fh == dst.fh && overlap {
        return Err(st::INVAL);
    }
    let (from, to) = ((&src.fh, src_offset), (&dst.fh, dst_offset));
    let n = store
        .copy(&dst.cred, from, to, want.min(COPY_MAX))
        .map_err(from_store)?;
    out.u32(0); // wr_callback_id: none, done
    out.u64(n);
    out.u32(StableHow::Unstable as u32);
    out.fixed(&store.write_verifier());
    out.u32(1); // cr_consecutive
    out.u32(1); // cr_synchronous
    Ok(())
}

/// CLONE (§15.13) from the saved file handle to the current one: source and destination
/// stateids, offsets, count (0: to the end of the source); the result is the status. The
/// range as [`clone_span`] decides it (INVAL past the source's end or overlapping within one
/// file), then the store's `clone_range`, which shares the source's storage (NOTSUPP where
/// the store or its file system cannot: the Linux client then copies).
pub fn clone(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let src_sid = get_stateid(r)?;
    let dst_sid = get_stateid(r)?;
    let src_offset = r.get_u64().map_err(bad_xdr)?;
    let dst_offset = r.get_u64().map_err(bad_xdr)?;
    let count = r.get_u64().map_err(bad_xdr)?;
    let (src, dst, size) = source_and_destination(c, &src_sid, &dst_sid)?;
    let store = &dst.share.store;
    let same = src.fh == dst.fh;
    let at = (src_offset, dst_offset);
    let n = clone_span(size, at, count, same, store.max_file_size()).map_err(from_store)?;
    if n == 0 {
        return Ok(());
    }
    store
        .clone_range(&dst.cred, (&src.fh, src_offset), (&dst.fh, dst_offset), n)
        .map_err(from_store)
}

/// The source (saved file handle) and destination (current) of a COPY or CLONE: one export,
/// a writable one, `src_sid` allowing reads of the source and `dst_sid` writes to the
/// destination, both regular files; with the source's size.
fn source_and_destination(
    c: &mut Compound<'_>,
    src_sid: &[u8; 16],
    dst_sid: &[u8; 16],
) -> Result<(Cur, Cur, u64), Status> {
    let dst = c.cur()?.clone();
    let src = saved_same_export(c)?;
    if dst.opts.read_only {
        return Err(st::ROFS);
    }
    check_stateid(c, &src, src_sid, ACCESS_READ)?;
    check_stateid(c, &dst, dst_sid, ACCESS_WRITE)?;
    let store = &dst.share.store;
    let mut size = 0;
    for fh in [&dst.fh, &src.fh] {
        let a = store.getattr(fh).map_err(from_store)?;
        if a.ftype != Ftype3::Reg {
            return Err(not_regular(a.ftype));
        }
        size = a.size;
    }
    Ok((src, dst, size))
}
