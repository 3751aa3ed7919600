//! The NFSv4.2 operations (RFC 7862) this server implements, in COMPOUNDs of minor version 2:
//! ALLOCATE and DEALLOCATE (§15.1, §15.4: reserve space, punch a hole) and SEEK (§15.11:
//! the next data or hole), on the store's `fallocate` and `seek`, as Linux nfsd answers them
//! (`nfsd4_allocate`, `nfsd4_deallocate`, `nfsd4_seek`). Every other minor version 2
//! operation (COPY, CLONE, READ_PLUS, the extended attribute operations, ...) is NOTSUPP,
//! which makes the Linux client fall back to what minor version 1 offers.
//!
//! Normal operation: ALLOCATE and DEALLOCATE take a stateid that allows writing (an open for
//! write, a write delegation, or the anonymous stateids outside the grace period) on a
//! writable export; SEEK one that allows reading. Recovery: the store's refusals are the
//! result (INVAL for anything but a regular file or an empty range, NXIO for a SEEK at or past
//! the end or with no data after it, FBIG, NOSPC); malformed arguments are NFS4ERR_BADXDR.

use rpcrdma_engine::xdr::XdrReader;

use super::open::check_stateid;
use super::stateid::{get_stateid, ACCESS_READ, ACCESS_WRITE};
use super::xdr::{bad_xdr, from_store, io_error, st, Enc, Status};
use super::Compound;

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
    let (at, eof) = cur
        .share
        .store
        .seek(&cur.cred, &cur.fh, offset, hole)
        .map_err(|e| io_error(&*cur.share.store, &cur.fh, e))?;
    out.u32(u32::from(eof));
    out.u64(at);
    Ok(())
}
