//! NFSv4.1 byte-range locks (RFC 8881 §9, §18.10–18.12): LOCK, LOCKT and LOCKU with POSIX
//! semantics.
//!
//! Normal operation: the first LOCK of a lock owner on a file comes with the open stateid it
//! locks under (open-to-lock-owner) and makes a lock state, one per lock owner and open,
//! whose stateid later LOCKs and LOCKUs name (exist-lock-owner). Ranges of one owner never
//! overlap: a new lock replaces what the owner held in its range (splitting ranges at its
//! edges, as POSIX `fcntl` does) and LOCKU removes the range. Every LOCK and LOCKU that
//! succeeds bumps the lock stateid's seqid and makes it the current stateid. READ and WRITE
//! take a lock stateid for the open it came from ([`super::open::check_stateid`]).
//!
//! Recovery: a range that overlaps another owner's, where either lock is a write lock, is
//! NFS4ERR_DENIED with that lock's offset, length, type and owner; a length of 0 or a range
//! past 2^64 NFS4ERR_INVAL; a write lock under an open without write access
//! NFS4ERR_OPENMODE; a stateid that names nothing NFS4ERR_BAD_STATEID, an older seqid
//! NFS4ERR_OLD_STATEID; `reclaim`, a LOCK without it and LOCKT as the grace period says
//! ([`super::grace`]: NFS4ERR_GRACE, NFS4ERR_NO_GRACE, NFS4ERR_RECLAIM_BAD); a client at
//! its lock-state bound (or whose address's clients are at theirs), or an owner at its range
//! bound, NFS4ERR_DELAY (counted). Locks go
//! with their open (CLOSE) and with their client's lease.

use rpcrdma_engine::xdr::XdrReader;

use super::open::OLD_STATEID;
use super::state::{LockState, Range, State};
use super::stateid::{get_stateid, resolve, split, ACCESS_READ, ACCESS_WRITE};
use super::xdr::{bad_xdr, not_regular, st, Enc, Status};
use super::{Compound, Cur};
use crate::nfs::cross_locks::{CrossLocks, Foreign, LockView};
use crate::nfs::types::Fh;

/// NFS4ERR_DENIED.
pub const DENIED: u32 = 10010;
/// Longest lock owner (`NFS4_OPAQUE_LIMIT`).
const OWNER_MAX: u32 = 1024;

/// `nfs_lock_type4`: true for WRITE_LT / WRITEW_LT; NFS4ERR_INVAL for a value outside 1..=4.
fn get_type(r: &mut XdrReader<'_>) -> Result<bool, Status> {
    match r.get_u32().map_err(bad_xdr)? {
        1 | 3 => Ok(false),
        2 | 4 => Ok(true),
        _ => Err(st::INVAL),
    }
}

/// Reads offset and length: the range, NFS4ERR_INVAL for a zero length or one past 2^64.
fn get_range(r: &mut XdrReader<'_>, write: bool) -> Result<Range, Status> {
    let offset = r.get_u64().map_err(bad_xdr)?;
    let length = r.get_u64().map_err(bad_xdr)?;
    let end = match length {
        0 => return Err(st::INVAL),
        u64::MAX => u64::MAX,
        n => offset.checked_add(n).ok_or(st::INVAL)?,
    };
    Ok(Range { offset, end, write })
}

/// Reads a `lock_owner4`: its owner octets. Its client id is ignored in minor version 1, where
/// the owner belongs to the session's client (RFC 8881 §18.10.3; Linux nfsd's `nfsd4_lock`
/// and `nfsd4_lockt` take the session's).
fn get_owner(r: &mut XdrReader<'_>) -> Result<Vec<u8>, Status> {
    r.get_u64().map_err(bad_xdr)?;
    Ok(r.get_opaque(OWNER_MAX).map_err(bad_xdr)?.to_vec())
}

fn overlaps(a: &Range, b: &Range) -> bool {
    a.offset < b.end && b.offset < a.end
}

/// The first lock of another owner on `cur`'s file that `want` conflicts with, as a
/// LOCK4denied body: this server's, else the NLM lock manager's (`cross`; its owner is
/// reported empty with client id 0, as Linux nfsd reports a lock not its own).
fn conflict(
    s: &State,
    cross: Option<&CrossLocks>,
    cur: &Cur,
    client: u64,
    owner: &[u8],
    want: &Range,
) -> Option<Vec<u8>> {
    if let Some(d) = own_conflict(s, cur, client, owner, want) {
        return Some(d);
    }
    let end = want.end.saturating_sub(1).max(want.offset);
    let end = if want.end == u64::MAX { u64::MAX } else { end };
    let f = cross?.nlm_conflict(
        cur.share.id,
        cur.fh.as_bytes(),
        want.offset,
        end,
        want.write,
    )?;
    let mut d = Enc::default();
    d.u64(f.start);
    d.u64(match f.end {
        u64::MAX => u64::MAX,
        e => e - f.start + 1,
    });
    d.u32(if f.exclusive { 2 } else { 1 });
    d.u64(0);
    d.opaque(&[]);
    Some(d.b)
}

/// [`conflict`] among this server's own locks.
fn own_conflict(s: &State, cur: &Cur, client: u64, owner: &[u8], want: &Range) -> Option<Vec<u8>> {
    for (_, l) in s.locks_on(cur.share.id, &cur.fh) {
        if l.client == client && l.owner == owner {
            continue;
        }
        if let Some(h) = l
            .ranges
            .iter()
            .find(|h| overlaps(h, want) && (h.write || want.write))
        {
            let mut d = Enc::default();
            d.u64(h.offset);
            d.u64(if h.end == u64::MAX {
                u64::MAX
            } else {
                h.end - h.offset
            });
            d.u32(if h.write { 2 } else { 1 });
            d.u64(l.client);
            d.opaque(&l.owner);
            return Some(d.b);
        }
    }
    None
}

/// `held` without `[cut.offset, cut.end)` (ranges split at its edges).
fn carve(held: &[Range], cut: &Range) -> Vec<Range> {
    let mut out = Vec::with_capacity(held.len() + 1);
    for h in held {
        if !overlaps(h, cut) {
            out.push(*h);
            continue;
        }
        if h.offset < cut.offset {
            out.push(Range {
                end: cut.offset,
                ..*h
            });
        }
        if cut.end < h.end {
            out.push(Range {
                offset: cut.end,
                ..*h
            });
        }
    }
    out
}

/// The stateid of lock state `other` at `seqid`.
fn stateid(seqid: u32, other: &[u8; 12]) -> [u8; 16] {
    let mut sid = [0u8; 16];
    sid[..4].copy_from_slice(&seqid.to_be_bytes());
    sid[4..].copy_from_slice(other);
    sid
}

/// The lock state `sid` names, this client's and of `cur`'s file, with its seqid checked.
fn existing(c: &Compound<'_>, s: &State, cur: &Cur, sid: &[u8; 16]) -> Result<[u8; 12], Status> {
    let sid = resolve(c, sid)?;
    let (seq, other) = split(&sid);
    let l = s.locks.get(&other).ok_or(st::BAD_STATEID)?;
    if Some(l.client) != c.client || l.export != cur.share.id || l.fh != cur.fh {
        return Err(st::BAD_STATEID);
    }
    if seq != 0 && seq > l.seqid {
        return Err(st::BAD_STATEID);
    }
    if seq != 0 && seq < l.seqid {
        return Err(OLD_STATEID);
    }
    Ok(other)
}

/// The lock state of `owner` under open stateid `open_sid` (made when there is none).
fn from_open(
    c: &Compound<'_>,
    s: &mut State,
    cur: &Cur,
    open_sid: &[u8; 16],
    owner: Vec<u8>,
) -> Result<([u8; 12], bool), Status> {
    let client = c.client.ok_or(st::BAD_STATEID)?;
    let (_, open) = split(&resolve(c, open_sid)?);
    if !s.opens.contains_key(&open) {
        return Err(st::BAD_STATEID); // a lock stateid where the open's belongs
    }
    let found = s
        .locks_on(cur.share.id, &cur.fh)
        .find(|(_, l)| l.open == open && l.client == client && l.owner == owner)
        .map(|(k, _)| k);
    if let Some(k) = found {
        return Ok((k, false));
    }
    let held = s.clients.get(&client).map_or(0, |cl| cl.locks.len());
    let lim = c.srv.config().limits;
    if held >= lim.locks_per_client || s.peer_load(client).1 >= lim.locks_per_peer {
        s.counters.refused_full += 1;
        return Err(st::DELAY);
    }
    let other = c.srv.new_other(s);
    s.insert_lock(
        other,
        LockState {
            client,
            owner,
            open,
            export: cur.share.id,
            fh: cur.fh,
            seqid: 0,
            ranges: Vec::new(),
        },
    );
    Ok((other, true))
}

/// Drops lock state `other`, made by a LOCK that then failed.
fn unmake(s: &mut State, other: &[u8; 12]) {
    s.remove_lock(other);
}

/// NFS4ERR_ISDIR for a directory, NFS4ERR_INVAL for anything else not a regular file.
fn regular(cur: &Cur) -> Result<(), Status> {
    let a = cur
        .share
        .store
        .getattr(&cur.fh)
        .map_err(super::xdr::from_store)?;
    match a.ftype {
        crate::nfs::types::Ftype3::Reg => Ok(()),
        t => Err(not_regular(t)),
    }
}

/// LOCK: a shared or exclusive lock on a range, for a new lock owner (with the open it locks
/// under) or an existing lock stateid.
pub fn lock(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let write = get_type(r)?;
    let reclaim = r.get_u32().map_err(bad_xdr)? != 0;
    let want = get_range(r, write)?;
    let new_owner = r.get_u32().map_err(bad_xdr)? != 0;
    let (open_sid, owner, lock_sid) = if new_owner {
        r.get_u32().map_err(bad_xdr)?; // open_seqid: unused in minor version 1
        let open_sid = get_stateid(r)?;
        r.get_u32().map_err(bad_xdr)?; // lock_seqid
        (Some(open_sid), Some(get_owner(r)?), None)
    } else {
        let sid = get_stateid(r)?;
        r.get_u32().map_err(bad_xdr)?; // lock_seqid
        (None, None, Some(sid))
    };
    let client = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    c.srv.grace_check(client, reclaim)?;
    let cur = c.cur()?.clone();
    regular(&cur)?;
    let need = if write { ACCESS_WRITE } else { ACCESS_READ };
    if let Some(o) = &open_sid {
        super::open::check_stateid(c, &cur, o, ACCESS_READ)?;
    }
    let srv = c.srv;
    // Before the state: a decision that asks the NLM lock manager (crate::nfs::cross_locks).
    let _order = srv.cross().map(CrossLocks::order);
    let mut s = srv.state();
    let (other, made) = match (open_sid, owner, lock_sid) {
        (Some(o), Some(w), _) => from_open(c, &mut s, &cur, &o, w)?,
        (_, _, Some(l)) => (existing(c, &s, &cur, &l)?, false),
        _ => return Err(st::SERVERFAULT),
    };
    let l = s.locks.get(&other).ok_or(st::BAD_STATEID)?.clone();
    let access = s.open(&l.open).map_or(0, |o| o.access);
    let mut ranges = carve(&l.ranges, &want);
    ranges.push(want);
    let refused = if access & need == 0 {
        Some(st::OPENMODE)
    } else if let Some(d) = conflict(&s, srv.cross(), &cur, l.client, &l.owner, &want) {
        c.denied = Some(d);
        Some(DENIED)
    } else if ranges.len() > srv.config().limits.ranges_per_lock {
        s.counters.refused_full += 1;
        Some(st::DELAY)
    } else {
        None
    };
    if let Some(e) = refused {
        if made {
            unmake(&mut s, &other);
        }
        return Err(e);
    }
    let l = s.locks.get_mut(&other).ok_or(st::BAD_STATEID)?;
    l.ranges = ranges;
    l.seqid = l.seqid.wrapping_add(1).max(1);
    let sid = stateid(l.seqid, &other);
    out.fixed(&sid);
    c.stateid = Some(sid);
    Ok(())
}

/// LOCKT: whether a lock of the owner named would be granted (NFS4ERR_DENIED with the
/// conflicting lock otherwise); nothing is kept.
pub fn lockt(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let write = get_type(r)?;
    let want = get_range(r, write)?;
    let owner = get_owner(r)?;
    let client = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    c.srv.grace_io()?;
    let cur = c.cur()?.clone();
    regular(&cur)?;
    let _order = c.srv.cross().map(CrossLocks::order);
    let s = c.srv.state();
    if let Some(d) = conflict(&s, c.srv.cross(), &cur, client, &owner, &want) {
        drop(s);
        c.denied = Some(d);
        return Err(DENIED);
    }
    Ok(())
}

/// LOCKU: the owner's locks in the range go (unlocking what is not held is not an error).
pub fn locku(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    get_type(r)?;
    r.get_u32().map_err(bad_xdr)?; // seqid: unused in minor version 1
    let sid = get_stateid(r)?;
    let cut = get_range(r, false)?;
    let cur = c.cur()?.clone();
    let mut s = c.srv.state();
    let other = existing(c, &s, &cur, &sid)?;
    let l = s.locks.get_mut(&other).ok_or(st::BAD_STATEID)?;
    l.ranges = carve(&l.ranges, &cut);
    l.seqid = l.seqid.wrapping_add(1).max(1);
    let sid = stateid(l.seqid, &other);
    drop(s);
    out.fixed(&sid);
    c.stateid = Some(sid);
    // After the state is let go: NLM requests waiting for the range may now be granted.
    if let Some(x) = c.srv.cross() {
        x.v4_released(cur.share.id, cur.fh.as_bytes());
    }
    Ok(())
}

/// This server's locks as the NLM lock manager asks about them ([`CrossLocks`]).
pub(super) struct View(pub(super) std::sync::Weak<super::Nfs41>);

impl LockView for View {
    fn conflict(
        &self,
        export: [u8; 4],
        fh: &[u8],
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Option<Foreign> {
        let srv = self.0.upgrade()?;
        let fh = Fh::new(fh)?;
        let s = srv.state();
        let want = Range {
            offset: start,
            end: if end == u64::MAX { u64::MAX } else { end + 1 },
            write: exclusive,
        };
        let found = s.locks_on(export, &fh).find_map(|(_, l)| {
            let h = l
                .ranges
                .iter()
                .find(|h| overlaps(h, &want) && (h.write || exclusive))?;
            Some(Foreign {
                start: h.offset,
                end: if h.end == u64::MAX {
                    u64::MAX
                } else {
                    h.end - 1
                },
                exclusive: h.write,
            })
        });
        found
    }

    /// NFSv4.1 clients poll for a lock (they are never queued here): nothing to do.
    fn released(&self, _: [u8; 4], _: &[u8]) {}
}
