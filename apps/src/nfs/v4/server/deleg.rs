//! NFSv4.1 read delegations and the callback path (RFC 8881 §10.2, §10.4, §18.49, §20,
//! §2.10.13): granting (write delegations too, when [`super::deleg_write`]'s policy allows), DELEGRETURN, CB_RECALL over the holder's back channel, revocation, and
//! the SEQUENCE status flags that report the callback path.
//!
//! Normal operation: a session whose CREATE_SESSION (or BIND_CONN_TO_SESSION) bound a back
//! channel is probed with CB_NULL through the configured [`Callbacks`] (RFC 8167 backward
//! calls on the client's own connection). An OPEN for read only, denying nothing, of a file
//! no one has open for write and no delegation of which is being recalled, by a client with
//! a usable back channel, is granted OPEN_DELEGATE_READ with a delegation stateid of its own.
//! Another client's OPEN for write of that file sends CB_RECALL (in a CB_COMPOUND of the
//! program the client named, CB_SEQUENCE first on back channel slot 0) and is answered
//! NFS4ERR_DELAY until the holder's DELEGRETURN removes the delegation; so does another
//! client's REMOVE or RENAME of the file (or RENAME onto it), SETATTR of any attribute and I/O
//! with a special stateid that conflicts with it ([`super::open::check_stateid`]), and an
//! NFSv3 or NLM access that conflicts with it ([`super::deleg_foreign`]). No delegation is
//! granted on a file recalled, changed from outside NFSv4.1 or locked over NLM in a way it
//! would conflict with, for the time [`super::deleg_foreign`] says.
//!
//! Recovery: a callback (or the CB_NULL probe) that gets no answer marks the session's back
//! channel down: SEQUENCE then carries SEQ4_STATUS_CB_PATH_DOWN_SESSION, and
//! SEQ4_STATUS_CB_PATH_DOWN while none of the client's sessions has a usable one; a
//! BIND_CONN_TO_SESSION for the back channel brings it up again (and probes it). No delegation
//! is granted without a usable back channel. A delegation not returned within the lease after
//! its recall is revoked ([`State::expire`](super::state::State::expire)): its holder sees
//! SEQ4_STATUS_RECALLABLE_STATE_REVOKED and NFS4ERR_DELEG_REVOKED for the stateid until it
//! frees it with FREE_STATEID. Delegations are bounded per client and in all; at a bound none
//! is granted (the OPEN itself succeeds).

use std::sync::Weak;

use rpcrdma_engine::xdr::XdrReader;
use rpcrdma_poller::CredBody;

use crate::nfs::admit::seal_or_fault;
use crate::nfs::types::Fh;
use crate::nfs::v4::cb::{self, CbOp, CbRecall, CbSequence};

use super::state::{Deleg, State};
use super::stateid::{get_stateid, resolve, split, ACCESS_WRITE};
use super::xdr::{st, Enc, Status};
use super::{Compound, Cur, Nfs41};

/// NFS4ERR_DELEG_REVOKED.
pub const DELEG_REVOKED: u32 = 10087;
/// SEQ4_STATUS_CB_PATH_DOWN.
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;
/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED.
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x40;
/// SEQ4_STATUS_CB_PATH_DOWN_SESSION.
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x200;
/// OPEN_DELEGATE_READ.
const OPEN_DELEGATE_READ: u32 = 1;
/// ACE4_ACCESS_ALLOWED_ACE_TYPE.
const ACE_ALLOWED: u32 = 0;

/// Where a callback done function reports to: whether the call got an answer.
pub type Done = Box<dyn FnOnce(bool) + Send>;

/// Sends backward calls (RFC 8167) on a client's connection.
pub trait Callbacks: Send + Sync {
    /// Sends procedure `proc_` (CB_NULL 0, CB_COMPOUND 1) of program `program` version 1 with
    /// credential `cred` (the client's, from `csa_sec_parms`) and `args` on connection
    /// `conn`; `done` runs exactly once with whether an RPC reply came back (it may run
    /// before `call` returns).
    fn call(&self, conn: u64, program: u32, proc_: u32, cred: &CredBody, args: Vec<u8>, done: Done);

    /// Whether connection `conn` still stands (a back channel bound to one that does not is
    /// reported down); true unless the sender knows better.
    fn alive(&self, _conn: u64) -> bool {
        true
    }
}

/// The status flags SEQUENCE reports to `client` on session `sid`.
pub fn status_flags(s: &State, client: u64, sid: &[u8; 16]) -> u32 {
    let mut f = 0;
    let usable = |x: &[u8; 16]| s.sessions.get(x).and_then(|v| v.cb_conn()).is_some();
    if !usable(sid) {
        f |= SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    }
    if let Some(cl) = s.clients.get(&client) {
        if !cl.sessions.iter().any(usable) {
            f |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if !cl.revoked.is_empty() {
            f |= SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
    }
    f
}

/// The session of `client` callbacks go on: its connection, program and id.
fn cb_session(s: &State, client: u64) -> Option<(u64, u32, [u8; 16])> {
    let cl = s.clients.get(&client)?;
    cl.sessions.iter().find_map(|sid| {
        let v = s.sessions.get(sid)?;
        Some((v.cb_conn()?, v.cb_program, *sid))
    })
}

impl Nfs41 {
    /// Probes the back channel of session `sid` with CB_NULL (after CREATE_SESSION or
    /// BIND_CONN_TO_SESSION bound one); no answer marks it down.
    pub fn probe_back_channel(&self, sid: [u8; 16]) {
        let target = {
            let s = self.state();
            s.sessions
                .get(&sid)
                .and_then(|v| Some((v.cb_conn()?, v.cb_program)))
        };
        if let Some((conn, program)) = target {
            self.cb_send(sid, conn, program, cb::PROC_NULL, Vec::new());
        }
    }

    /// Sends one backward call for session `sid`, with the credential its client gave
    /// (none left: not sent); a failure marks its back channel down.
    fn cb_send(&self, sid: [u8; 16], conn: u64, program: u32, proc_: u32, args: Vec<u8>) {
        let cred = self.state().sessions.get(&sid).and_then(|v| v.cb_cred);
        let me: Weak<Nfs41> = self.me.clone();
        let done: Done = Box::new(move |ok| {
            if let (false, Some(srv)) = (ok, me.upgrade()) {
                if let Some(v) = srv.state().sessions.get_mut(&sid) {
                    if v.back_conn == Some(conn) {
                        v.cb_down = true;
                    }
                }
            }
        });
        let Some(cred) = cred else {
            return done(false);
        };
        match &self.cfg.callbacks {
            Some(cbs) => cbs.call(conn, program, proc_, &cred, args, done),
            None => self.backs.call(conn, program, proc_, &cred, &args, done),
        }
    }
}

/// The CB_COMPOUND of minor version `minor` (its holder's) recalling delegation `sid` (of
/// `fh`) on session `session`, slot 0 at sequence `seq`.
pub fn recall_args(minor: u32, session: [u8; 16], seq: u32, sid: [u8; 16], fh: Vec<u8>) -> Vec<u8> {
    let ops = [
        CbOp::Sequence(CbSequence {
            session,
            sequence: seq,
            slot: 0,
            highest_slot: 0,
            cache_this: false,
            referring_lists: 0,
        }),
        CbOp::Recall(CbRecall {
            stateid: sid,
            truncate: false,
            fh,
        }),
    ];
    cb::encode_cb_compound(&[], minor, 0, &ops)
}

/// Recalls the delegations other clients than `client` hold on `fh` of `export`: each not
/// yet recalled gets CB_RECALL. NFS4ERR_DELAY while any is held, Ok when none is.
pub fn recall_conflicts(
    c: &Compound<'_>,
    export: [u8; 4],
    fh: &Fh,
    client: u64,
) -> Result<(), Status> {
    recall_matching(c, export, fh, client, false)
}

/// [`recall_conflicts`] of the write delegations only (`only_write`), or of all.
pub fn recall_matching(
    c: &Compound<'_>,
    export: [u8; 4],
    fh: &Fh,
    client: u64,
    only_write: bool,
) -> Result<(), Status> {
    match c.srv.recall_held(export, fh, Some(client), only_write) {
        true => Err(st::DELAY),
        false => Ok(()),
    }
}

impl Nfs41 {
    /// Recalls the delegations of `fh` of `export` held by other clients than `except` (by
    /// any client: `None`, an access from outside NFSv4.1), write delegations only when
    /// `only_write`: each not yet recalled gets CB_RECALL. True while any is held.
    pub(super) fn recall_held(
        &self,
        export: [u8; 4],
        fh: &Fh,
        except: Option<u64>,
        only_write: bool,
    ) -> bool {
        let now = self.now_ms();
        let mut sends = Vec::new();
        {
            let mut s = self.state();
            let held: Vec<[u8; 12]> = s
                .delegs_on(export, fh)
                .filter(|(_, d)| Some(d.client) != except)
                .filter(|(_, d)| d.write || !only_write)
                .map(|(k, _)| k)
                .collect();
            if held.is_empty() {
                return false;
            }
            for other in held {
                if !s.mark_recalled(&other, now) {
                    continue;
                }
                s.counters.recalls += 1;
                // Without a usable back channel: sent when the client binds one, revoked
                // after the lease otherwise.
                sends.extend(recall_call(&mut s, &other));
            }
        }
        self.deleg_gate.recalled(export, fh);
        self.send_recalls(sends);
        true
    }
}

/// A CB_RECALL ready to send: the session, connection, callback program and CB_COMPOUND
/// arguments.
pub type Recall = ([u8; 16], u64, u32, Vec<u8>);

/// The CB_RECALL of delegation `other` on a usable back channel of its holder (the session's
/// callback sequence id moves on); `None` when the holder has none.
pub fn recall_call(s: &mut State, other: &[u8; 12]) -> Option<Recall> {
    let d = s.delegs.get(other)?;
    let (holder, seqid, wire) = (d.client, d.seqid, d.wire_fh.clone());
    let (conn, program, session) = cb_session(s, holder)?;
    let minor = s.clients.get(&holder).map_or(1, |cl| cl.minor);
    let v = s.sessions.get_mut(&session)?;
    v.cb_seq = v.cb_seq.wrapping_add(1);
    let mut sid = [0u8; 16];
    sid[..4].copy_from_slice(&seqid.to_be_bytes());
    sid[4..].copy_from_slice(other);
    Some((
        session,
        conn,
        program,
        recall_args(minor, session, v.cb_seq, sid, wire),
    ))
}

impl Nfs41 {
    /// Sends the CB_RECALLs `sends` (no state lock held).
    pub fn send_recalls(&self, sends: Vec<Recall>) {
        for (session, conn, program, args) in sends {
            self.cb_send(session, conn, program, cb::PROC_COMPOUND, args);
        }
    }
}

/// Recalls other clients' delegations of the file `name` in directory `dir` (the object of
/// a REMOVE or RENAME): NFS4ERR_DELAY while any is held; Ok when the name is not there.
pub fn recall_named(c: &Compound<'_>, dir: &Cur, name: &[u8]) -> Result<(), Status> {
    match dir.share.store.lookup(&dir.cred, &dir.fh, name) {
        Ok(fh) => recall_conflicts(c, dir.share.id, &fh, c.client.unwrap_or(0)),
        Err(_) => Ok(()),
    }
}

/// Grants a read delegation of `fh` to `client` after its OPEN (or a write delegation,
/// [`super::deleg_write`]), when RFC 8881 §10.4 and this server's bounds allow: writes
/// `open_delegation4` either way.
pub fn grant(
    c: &Compound<'_>,
    cur: &Cur,
    fh: Fh,
    (access, deny): (u32, u32),
    client: u64,
    out: &mut Enc,
) {
    match try_grant(c, cur, fh, access, deny, client) {
        Some((sid, true)) => put_write(out, &sid),
        Some((sid, false)) => {
            out.u32(OPEN_DELEGATE_READ);
            out.fixed(&sid);
            out.u32(0); // recall: false
            out.u32(ACE_ALLOWED);
            out.u32(0); // flag
            out.u32(0); // access_mask: the client checks with ACCESS
            out.opaque(b"");
        }
        None => out.u32(0), // OPEN_DELEGATE_NONE
    }
}

fn try_grant(
    c: &Compound<'_>,
    cur: &Cur,
    fh: Fh,
    access: u32,
    deny: u32,
    client: u64,
) -> Option<([u8; 16], bool)> {
    let write = access & ACCESS_WRITE != 0;
    if deny != 0 || !c.srv.delegations() || (write && !c.srv.write_delegations()) {
        return None;
    }
    let (sid, _, _) = c.slot?;
    let wire = seal_or_fault(&cur.share, &fh).ok()?.as_bytes().to_vec();
    let (srv, export) = (c.srv, cur.share.id);
    // Before the state mutex: the NLM side asks this server's view under its own.
    if nlm_in_the_way(c, export, &fh, write) {
        return None;
    }
    let mut s = srv.state();
    s.sessions.get(&sid)?.cb_conn()?;
    let lim = srv.config().limits;
    let blocked = if write {
        blocks_write(&s, export, &fh, client)
    } else {
        s.opens_on(export, &fh)
            .any(|(_, o)| o.access & ACCESS_WRITE != 0)
            || s.delegs_on(export, &fh)
                .any(|(_, d)| d.client == client || d.recalled_ms.is_some())
    };
    if blocked {
        return None;
    }
    let mine = s
        .clients
        .get(&client)
        .map(|cl| cl.delegs.len() + cl.revoked.len())?;
    if mine >= lim.delegs_per_client || s.delegs.len() >= lim.delegs {
        s.counters.refused_full += 1;
        return None;
    }
    let other = srv.new_other(&mut s);
    s.clients.get(&client)?;
    s.insert_deleg(
        other,
        Deleg {
            client,
            export,
            fh,
            wire_fh: wire,
            seqid: 1,
            recalled_ms: None,
            write,
        },
    );
    // After the count rose: an NFSv3 or NLM access at once sees it or is seen here.
    if !srv.deleg_gate.grant_allowed(export, &fh, write) {
        s.remove_deleg(&other);
        return None;
    }
    drop(s);
    // Processes on the host recall it too ([`super::deleg_local`]); a file not watched is
    // not delegated.
    if let Some(w) = srv.local_watch() {
        if !w.mark(&*cur.share.store, export, &fh) {
            srv.state().remove_deleg(&other);
            return None;
        }
    }
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&1u32.to_be_bytes());
    out[4..].copy_from_slice(&other);
    Some((out, write))
}

/// Whether an NLM lock keeps a delegation (a write delegation: `write`) of (`export`, `fh`)
/// from being granted: any lock a write delegation, an exclusive one a read delegation (Linux
/// lockd holds the file open for as long, for writing under an exclusive lock, and an open
/// file gets no lease that conflicts with it). Asked with no mutex held: a lock granted
/// after this look stamped the file first ([`super::deleg_foreign`]).
fn nlm_in_the_way(c: &Compound<'_>, export: [u8; 4], fh: &Fh, write: bool) -> bool {
    c.srv
        .cross()
        .and_then(|x| x.nlm_conflict(export, fh.as_bytes(), 0, u64::MAX, write))
        .is_some()
}

/// DELEGRETURN (RFC 8881 §18.6): the caller's delegation of the current file goes.
pub fn delegreturn(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let sid = get_stateid(r)?;
    let client = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    let cur = c.cur()?.clone();
    let sid = resolve(c, &sid)?;
    let (_, other) = split(&sid);
    let mut s = c.srv.state();
    match s.delegs.get(&other) {
        Some(d) if d.client == client && d.export == cur.share.id && d.fh == cur.fh => {
            s.remove_deleg(&other);
            s.counters.delegreturns += 1;
            Ok(())
        }
        Some(_) => Err(st::BAD_STATEID),
        None if is_revoked(&s, client, &other) => Err(DELEG_REVOKED),
        None => Err(st::BAD_STATEID),
    }
}

/// The delegation stateid `sid` of an OPEN with CLAIM_DELEGATE_CUR or CLAIM_DELEG_CUR_FH
/// (RFC 8881 §18.16.3: the holder turns the opens it made under the delegation into real ones,
/// typically while it is being recalled): it must name `client`'s delegation of `fh` in
/// `export` (NFS4ERR_BAD_STATEID; NFS4ERR_DELEG_REVOKED once revoked), and a read delegation
/// covers no open for write (NFS4ERR_OPENMODE).
pub fn check_claim(
    c: &Compound<'_>,
    export: [u8; 4],
    fh: &Fh,
    sid: &[u8; 16],
    access: u32,
    client: u64,
) -> Result<(), Status> {
    let sid = resolve(c, sid)?;
    let (_, other) = split(&sid);
    let s = c.srv.state();
    match s.delegs.get(&other) {
        Some(d) if d.client == client && d.export == export && d.fh == *fh => {
            if access & ACCESS_WRITE != 0 {
                Err(st::OPENMODE)
            } else {
                Ok(())
            }
        }
        Some(_) => Err(st::BAD_STATEID),
        None if is_revoked(&s, client, &other) => Err(DELEG_REVOKED),
        None => Err(st::BAD_STATEID),
    }
}

/// Whether `other` is a delegation of `client` that was revoked and not yet freed.
pub fn is_revoked(s: &State, client: u64, other: &[u8; 12]) -> bool {
    s.clients
        .get(&client)
        .is_some_and(|cl| cl.revoked.contains(other))
}

/// Frees revoked delegation `other` of `client` (FREE_STATEID); false when it is not one.
pub fn free_revoked(s: &mut State, client: u64, other: &[u8; 12]) -> bool {
    let Some(cl) = s.clients.get_mut(&client) else {
        return false;
    };
    let before = cl.revoked.len();
    cl.revoked.retain(|x| x != other);
    cl.revoked.len() != before
}

/// OPEN_DELEGATE_WRITE.
pub const OPEN_DELEGATE_WRITE: u32 = 2;
/// `limitby4` NFS_LIMIT_SIZE.
const LIMIT_SIZE: u32 = 1;
/// Whether `client` may not have a write delegation of `fh` of `export`: another client has
/// it open, or someone holds a delegation of it.
pub fn blocks_write(s: &State, export: [u8; 4], fh: &Fh, client: u64) -> bool {
    s.opens_on(export, fh).any(|(_, o)| o.client != client)
        || s.delegs_on(export, fh).next().is_some()
}

/// Writes `open_delegation4` OPEN_DELEGATE_WRITE with stateid `sid`.
pub fn put_write(out: &mut Enc, sid: &[u8; 16]) {
    out.u32(OPEN_DELEGATE_WRITE);
    out.fixed(sid);
    out.u32(0); // recall: false
    out.u32(LIMIT_SIZE);
    out.u64(u64::MAX); // no space limit
    out.u32(0); // nfsace4: ACE4_ACCESS_ALLOWED_ACE_TYPE
    out.u32(0); // flag
    out.u32(0); // access_mask: the client checks with ACCESS
    out.opaque(b"");
}
