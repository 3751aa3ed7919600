//! NFSv4.1 open state (RFC 8881 §9, §18.16, §18.2, §18.48, §18.38): OPEN with its create modes
//! and the claim types CLAIM_NULL, CLAIM_FH, CLAIM_PREVIOUS, CLAIM_DELEGATE_CUR and
//! CLAIM_DELEG_CUR_FH (a delegation holder's opens made under it, turned into real ones),
//! OPEN_DOWNGRADE, CLOSE, TEST_STATEID, FREE_STATEID, and the
//! stateid checks of READ and WRITE.
//!
//! Normal operation: OPEN finds or creates the file (the store's UNCHECKED, GUARDED and
//! EXCLUSIVE creates; EXCLUSIVE4_1 as EXCLUSIVE4, then the `cva_attrs` it carries set on the
//! file it made, as `suppattr_exclcreat` announces), checks the caller may read / write it,
//! checks share reservations against the other opens of the file, and returns a stateid
//! whose `other` names an entry of the open table (one per open owner and file: a second
//! OPEN by the same owner upgrades it and bumps the seqid). CLOSE removes it. A read OPEN may
//! also get a read delegation, and a write OPEN may have to wait for another client's to be
//! returned ([`super::deleg`]).
//!
//! Recovery: a stateid that names nothing (another run, a closed or expired open) is
//! NFS4ERR_BAD_STATEID, an older seqid NFS4ERR_OLD_STATEID, a WRITE through a read-only open
//! NFS4ERR_OPENMODE; conflicting share reservations NFS4ERR_SHARE_DENIED; CLAIM_PREVIOUS
//! (the file is the current file handle, no delegation is granted again) and everything
//! else within or outside the grace period as [`super::grace`] says (NFS4ERR_GRACE,
//! NFS4ERR_NO_GRACE, NFS4ERR_RECLAIM_BAD); CLAIM_DELEGATE_PREV and CLAIM_DELEG_PREV_FH
//! NFS4ERR_NOTSUPP; a delegation claim that is not the caller's delegation of the file
//! NFS4ERR_BAD_STATEID (NFS4ERR_DELEG_REVOKED once revoked), one for write NFS4ERR_OPENMODE; a
//! client at its open bound, or whose address's clients are at theirs, NFS4ERR_DELAY.

use rpcrdma_engine::xdr::XdrReader;

use crate::nfs::store::NewObj;
use crate::nfs::types::{access, CreateHow, Fh, Ftype3, Sattr3, WccData};

use super::attrs::{get_sattr, set_mask, SetIn};
use super::state::OpenState;
use super::stateid::{get_stateid, resolve, split, ACCESS_READ, ACCESS_WRITE};
use super::xdr::{bad_xdr, from_store, get_name, not_regular, st, Enc, Status};
use super::{Compound, Cur};

/// NFS4ERR_OLD_STATEID.
pub const OLD_STATEID: u32 = 10024;
/// OPEN4_RESULT_LOCKTYPE_POSIX.
const RESULT_LOCKTYPE_POSIX: u32 = 4;

/// Checks `sid` for an I/O of `want` (ACCESS_READ / ACCESS_WRITE) on `cur`: an open stateid
/// must be this client's open of this file. The anonymous and bypass stateids pass (outside
/// the grace period, but for a READ with the bypass one) once the delegations of other
/// clients the I/O conflicts with are returned: no OPEN stands behind them to have recalled
/// those (a write recalls every delegation, a read the write delegations; NFS4ERR_DELAY
/// meanwhile, as Linux nfsd's open for the I/O breaks the lease).
pub fn check_stateid(c: &Compound<'_>, cur: &Cur, sid: &[u8; 16], want: u32) -> Result<(), Status> {
    if *sid == [0; 16] || *sid == [0xff; 16] {
        if !(*sid == [0xff; 16] && want == ACCESS_READ) {
            c.srv.grace_io()?;
        }
        let client = c.client.unwrap_or(0);
        let only_write = want == ACCESS_READ;
        return super::deleg::recall_matching(c, cur.share.id, &cur.fh, client, only_write);
    }
    let sid = resolve(c, sid)?;
    let (seq, other) = split(&sid);
    let s = c.srv.state();
    if let Some(d) = s.delegs.get(&other) {
        if Some(d.client) != c.client || d.export != cur.share.id || d.fh != cur.fh {
            return Err(st::BAD_STATEID);
        }
        return match want {
            ACCESS_WRITE if !d.write => Err(st::OPENMODE),
            _ => Ok(()),
        };
    }
    if c.client
        .is_some_and(|cl| super::deleg::is_revoked(&s, cl, &other))
    {
        return Err(super::deleg::DELEG_REVOKED);
    }
    // A lock stateid stands for the open it came from (RFC 8881 §8.2.2).
    let (o, held) = match s.locks.get(&other) {
        Some(l) => (s.open(&l.open).ok_or(st::BAD_STATEID)?, l.seqid),
        None => {
            let o = s.open(&other).ok_or(st::BAD_STATEID)?;
            (o, o.seqid)
        }
    };
    if Some(o.client) != c.client || o.export != cur.share.id || o.fh != cur.fh {
        return Err(st::BAD_STATEID);
    }
    if seq != 0 && seq > held {
        return Err(st::BAD_STATEID);
    }
    if seq != 0 && seq < held {
        return Err(OLD_STATEID);
    }
    if want == ACCESS_WRITE && o.access & ACCESS_WRITE == 0 {
        return Err(st::OPENMODE);
    }
    Ok(())
}

/// The parsed OPEN arguments (after the owner).
struct OpenArgs {
    access: u32,
    deny: u32,
    owner: Vec<u8>,
    how: Option<CreateHow>,
    /// EXCLUSIVE4_1's `cva_attrs` (within [`super::attrs::EXCLCREAT`]), set once the file is
    /// made.
    excl_attrs: Sattr3,
    name: Option<Vec<u8>>,
    /// CLAIM_PREVIOUS.
    reclaim: bool,
    /// The delegation stateid of CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH.
    deleg: Option<[u8; 16]>,
}

fn get_open_args(r: &mut XdrReader<'_>, minor: u32) -> Result<OpenArgs, Status> {
    let sattr = |r: &mut XdrReader<'_>| get_sattr(r, minor, SetIn::Creation);
    r.get_u32().map_err(bad_xdr)?; // seqid: unused in minor version 1
    let access = r.get_u32().map_err(bad_xdr)?;
    let deny = r.get_u32().map_err(bad_xdr)?;
    // The owner's client id: ignored in minor version 1, where the owner belongs to the
    // session's client (RFC 8881 §18.16.3; Linux nfsd's `nfsd4_open` takes the session's).
    r.get_u64().map_err(bad_xdr)?;
    let owner = r.get_opaque(1024).map_err(bad_xdr)?.to_vec();
    let mut excl_attrs = Sattr3::default();
    let how = match r.get_u32().map_err(bad_xdr)? {
        0 => None,
        1 => Some(match r.get_u32().map_err(bad_xdr)? {
            0 => CreateHow::Unchecked(sattr(r)?),
            1 => CreateHow::Guarded(sattr(r)?),
            2 => CreateHow::Exclusive(verifier(r)?),
            3 => {
                let v = verifier(r)?;
                excl_attrs = sattr(r)?;
                // The times hold the verifier: not in `suppattr_exclcreat` (as Linux nfsd).
                if set_mask(&excl_attrs)[1] & !super::attrs::EXCLCREAT[1] != 0 {
                    return Err(st::ATTRNOTSUPP);
                }
                // The mode (and umask) at creation, as the other kinds have it.
                let made = Sattr3 {
                    mode: excl_attrs.mode,
                    umask: excl_attrs.umask,
                    ..Sattr3::default()
                };
                CreateHow::Exclusive41(v, made)
            }
            _ => return Err(st::INVAL),
        }),
        _ => return Err(st::INVAL),
    };
    let claim = r.get_u32().map_err(bad_xdr)?;
    let (name, deleg) = match claim {
        0 => (Some(get_name(r)?.to_vec()), None),
        4 => (None, None),
        1 => {
            // delegate_type: what the client held (none is granted again).
            if r.get_u32().map_err(bad_xdr)? > 3 {
                return Err(st::INVAL);
            }
            (None, None)
        }
        2 => {
            let d = get_stateid(r)?;
            (Some(get_name(r)?.to_vec()), Some(d))
        }
        5 => (None, Some(get_stateid(r)?)),
        3 | 6 => return Err(st::NOTSUPP),
        _ => return Err(st::INVAL),
    };
    let a = access & 0xff;
    if !(1..=3).contains(&a) || deny > 3 {
        return Err(st::INVAL);
    }
    Ok(OpenArgs {
        access: a,
        deny,
        owner,
        how,
        excl_attrs,
        name,
        reclaim: claim == 1,
        deleg,
    })
}

fn verifier(r: &mut XdrReader<'_>) -> Result<[u8; 8], Status> {
    Ok(r.get_fixed_opaque(8)
        .map_err(bad_xdr)?
        .try_into()
        .unwrap_or([0; 8]))
}

/// Finds or creates the file of an OPEN: its handle, whether it was created, and the
/// directory's weak cache consistency data (unchanged when nothing was created).
fn target(cur: &Cur, a: &OpenArgs) -> Result<(Fh, bool, WccData), Status> {
    let store = &cur.share.store;
    let dir = store.getattr(&cur.fh).map_err(from_store)?;
    let unchanged = WccData {
        before: Some(dir.wcc()),
        after: Some(dir),
    };
    let Some(name) = &a.name else {
        return Ok((cur.fh, false, unchanged));
    };
    match dir.ftype {
        Ftype3::Dir => {}
        Ftype3::Lnk => return Err(st::SYMLINK),
        _ => return Err(st::NOTDIR),
    }
    let Some(how) = &a.how else {
        let fh = store.lookup(&cur.cred, &cur.fh, name).map_err(from_store)?;
        return Ok((fh, false, unchanged));
    };
    if cur.opts.read_only {
        return Err(st::ROFS);
    }
    let existed = store.lookup(&cur.cred, &cur.fh, name).is_ok();
    let (r, w) = store.create_wcc(&cur.cred, &cur.fh, name, NewObj::File(how));
    let (fh, _) = r.map_err(from_store)?;
    Ok((fh, !existed, w))
}

/// OPEN.
pub fn open(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    let a = get_open_args(r, c.minor)?;
    let client = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    c.srv.grace_check(client, a.reclaim)?;
    let cur = c.cur()?.clone();
    let (fh, created, dir_wcc) = target(&cur, &a)?;
    let store = &cur.share.store;
    // EXCLUSIVE4_1's other attributes; its mode was the creation's.
    let rest = Sattr3 {
        mode: None,
        umask: None,
        ..a.excl_attrs
    };
    if created && rest != Sattr3::default() {
        store
            .setattr(&cur.cred, &fh, &rest, None)
            .map_err(from_store)?;
    }
    let attr = store.getattr(&fh).map_err(from_store)?;
    match attr.ftype {
        Ftype3::Reg => {}
        t => return Err(not_regular(t)),
    }
    if a.access & ACCESS_WRITE != 0 && cur.opts.read_only {
        return Err(st::ROFS);
    }
    // A file this OPEN made is opened whatever its mode says, for its owner (Linux nfsd's
    // NFSD_MAY_OWNER_OVERRIDE when `op_created`): a file of mode 0 made with O_CREAT|O_RDWR.
    // `created` comes from a LOOKUP before the create, so a file another user made in between
    // is taken for a new one: only its owner skips the check.
    if !(created && attr.uid == cur.cred.uid) {
        let mut need = 0;
        if a.access & ACCESS_READ != 0 {
            need |= access::READ;
        }
        if a.access & ACCESS_WRITE != 0 {
            need |= access::MODIFY;
        }
        let (_, got) = store.access(&cur.cred, &fh, need).map_err(from_store)?;
        if got & need != need {
            return Err(st::ACCESS);
        }
    }
    if let Some(d) = &a.deleg {
        super::deleg::check_claim(c, cur.share.id, &fh, d, a.access, client)?;
    }
    if a.access & ACCESS_WRITE != 0 {
        super::deleg::recall_conflicts(c, cur.share.id, &fh, client)?;
    } else {
        super::deleg::recall_matching(c, cur.share.id, &fh, client, true)?;
    }
    let sid = record_open(c, &cur, fh, &a, client)?;
    out.fixed(&sid);
    super::attrs::put_cinfo(out, &dir_wcc, created);
    out.u32(RESULT_LOCKTYPE_POSIX);
    out.bitmap(&attrset(&a, created));
    if a.reclaim {
        out.u32(0); // OPEN_DELEGATE_NONE
    } else {
        super::deleg::grant(c, &cur, fh, (a.access, a.deny), client, out);
    }
    c.cur = Some(Cur { fh, ..cur });
    c.stateid = Some(sid);
    Ok(())
}

/// OPEN4resok's `attrset`: the attributes a create set, as Linux nfsd reports them: all it
/// was given when it made the file (an EXCLUSIVE4_1 retransmission finds the file its first
/// call made, with them); of an existing file UNCHECKED4 sets only the size.
fn attrset(a: &OpenArgs, created: bool) -> [u32; 3] {
    match &a.how {
        Some(CreateHow::Unchecked(s) | CreateHow::Guarded(s)) if created => set_mask(s),
        Some(CreateHow::Unchecked(s)) => set_mask(&Sattr3 {
            size: s.size,
            ..Sattr3::default()
        }),
        Some(CreateHow::Exclusive(_) | CreateHow::Exclusive41(..)) => set_mask(&a.excl_attrs),
        _ => [0; 3],
    }
}

/// Adds (or upgrades) the open state of `a.owner` on `fh`; returns its stateid.
fn record_open(
    c: &Compound<'_>,
    cur: &Cur,
    fh: crate::nfs::types::Fh,
    a: &OpenArgs,
    client: u64,
) -> Result<[u8; 16], Status> {
    let srv = c.srv;
    let mut s = srv.state();
    let mut mine = None;
    for (other, o) in s.opens_on(cur.share.id, &fh) {
        if o.client == client && o.owner == a.owner {
            mine = Some(other);
            continue;
        }
        if o.deny & a.access != 0 || a.deny & o.access != 0 {
            return Err(st::SHARE_DENIED);
        }
    }
    let (other, seqid) = match mine {
        Some(other) => {
            let Some(o) = s.opens.get_mut(&other) else {
                return Err(st::SERVERFAULT);
            };
            o.access |= a.access;
            o.deny |= a.deny;
            o.seqid = o.seqid.wrapping_add(1).max(1);
            (other, o.seqid)
        }
        None => {
            let held = s.clients.get(&client).map_or(0, |cl| cl.opens.len());
            let lim = srv.config().limits;
            if held >= lim.opens_per_client || s.peer_load(client).0 >= lim.opens_per_peer {
                s.counters.refused_full += 1;
                return Err(st::DELAY);
            }
            let other = srv.new_other(&mut s);
            s.insert_open(
                other,
                OpenState {
                    client,
                    owner: a.owner.clone(),
                    export: cur.share.id,
                    fh,
                    access: a.access,
                    deny: a.deny,
                    seqid: 1,
                },
            );
            (other, 1)
        }
    };
    let mut sid = [0u8; 16];
    sid[..4].copy_from_slice(&seqid.to_be_bytes());
    sid[4..].copy_from_slice(&other);
    Ok(sid)
}

/// CLOSE: the open state goes; the reply carries the invalid special stateid.
pub fn close(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<(), Status> {
    r.get_u32().map_err(bad_xdr)?; // seqid: unused in minor version 1
    let sid = get_stateid(r)?;
    if sid == [0; 16] || sid == [0xff; 16] {
        return Err(st::BAD_STATEID);
    }
    let cur = c.cur()?.clone();
    let sid = resolve(c, &sid)?;
    check_stateid(c, &cur, &sid, ACCESS_READ)?;
    let (_, other) = split(&sid);
    c.srv.state().remove_open(&other);
    // The open's locks went with it: NLM requests waiting for them may now be granted.
    if let Some(x) = c.srv.cross() {
        x.v4_released(cur.share.id, cur.fh.as_bytes());
    }
    let mut invalid = [0u8; 16];
    invalid[..4].copy_from_slice(&u32::MAX.to_be_bytes());
    out.fixed(&invalid);
    c.stateid = None;
    Ok(())
}

/// Most stateids one TEST_STATEID checks.
const TEST_STATEID_MAX: u32 = 1024;

/// The status TEST_STATEID gives `sid` for client `client`.
fn test_one(c: &Compound<'_>, client: u64, sid: &[u8; 16]) -> Status {
    let (seq, other) = split(sid);
    let s = c.srv.state();
    if super::deleg::is_revoked(&s, client, &other) {
        return super::deleg::DELEG_REVOKED;
    }
    let held = match (s.open(&other), s.locks.get(&other), s.delegs.get(&other)) {
        (Some(o), _, _) => Some((o.client, o.seqid)),
        (None, Some(l), _) => Some((l.client, l.seqid)),
        (None, None, Some(d)) => Some((d.client, d.seqid)),
        _ => None,
    };
    match held {
        Some((cl, now)) if cl == client && (seq == 0 || seq == now) => st::OK,
        Some((cl, now)) if cl == client && seq < now => OLD_STATEID,
        _ => st::BAD_STATEID,
    }
}

/// TEST_STATEID (RFC 8881 §18.48): one status per stateid, this client's only.
pub fn test_stateid(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let n = r.get_count(TEST_STATEID_MAX).map_err(bad_xdr)?;
    let client = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    let mut sids = Vec::with_capacity(n as usize);
    for _ in 0..n {
        sids.push(get_stateid(r)?);
    }
    out.u32(n);
    for sid in &sids {
        out.u32(test_one(c, client, sid));
    }
    Ok(())
}

/// FREE_STATEID (RFC 8881 §18.38): a revoked delegation's stateid is freed (which clears
/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED once none is left); a lock stateid holding no range is freed; an open
/// stateid still open, or a lock stateid still holding a range, is NFS4ERR_LOCKS_HELD (CLOSE
/// and LOCKU free them); one that names nothing (closed, expired) NFS4ERR_BAD_STATEID.
pub fn free_stateid(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let sid = get_stateid(r)?;
    let client = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    let (_, other) = split(&sid);
    if super::deleg::free_revoked(&mut c.srv.state(), client, &other) {
        return Ok(());
    }
    if test_one(c, client, &sid) == st::BAD_STATEID {
        return Err(st::BAD_STATEID);
    }
    let (_, other) = split(&sid);
    let mut s = c.srv.state();
    match s.locks.get(&other) {
        Some(l) if l.ranges.is_empty() => {
            s.remove_lock(&other);
            Ok(())
        }
        _ => Err(LOCKS_HELD),
    }
}

/// NFS4ERR_LOCKS_HELD.
const LOCKS_HELD: u32 = 10037;

/// OPEN_DOWNGRADE (RFC 8881 §18.18): the open keeps only the access and deny asked for, each
/// a subset of what it holds (NFS4ERR_INVAL otherwise); the stateid's seqid moves on.
pub fn open_downgrade(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let sid = get_stateid(r)?;
    r.get_u32().map_err(bad_xdr)?; // seqid: unused in minor version 1
    let access = r.get_u32().map_err(bad_xdr)? & 0xff;
    let deny = r.get_u32().map_err(bad_xdr)?;
    let cur = c.cur()?.clone();
    let sid = resolve(c, &sid)?;
    check_stateid(c, &cur, &sid, ACCESS_READ)?;
    let (_, other) = split(&sid);
    let mut s = c.srv.state();
    let o = s.opens.get_mut(&other).ok_or(st::BAD_STATEID)?;
    if !(1..=3).contains(&access) || access & !o.access != 0 || deny & !o.deny != 0 {
        return Err(st::INVAL);
    }
    o.access = access;
    o.deny = deny;
    o.seqid = o.seqid.wrapping_add(1).max(1);
    let mut new = [0u8; 16];
    new[..4].copy_from_slice(&o.seqid.to_be_bytes());
    new[4..].copy_from_slice(&other);
    out.fixed(&new);
    c.stateid = Some(new);
    Ok(())
}
