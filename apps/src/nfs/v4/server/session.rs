//! The NFSv4.1 session operations (RFC 8881 §18.35, §18.36, §18.46, §18.37, §18.50, §18.51,
//! §18.34, §18.33): EXCHANGE_ID, CREATE_SESSION, SEQUENCE, DESTROY_SESSION, DESTROY_CLIENTID,
//! RECLAIM_COMPLETE, BIND_CONN_TO_SESSION and BACKCHANNEL_CTL, on the tables of
//! [`super::state`].
//!
//! Normal operation: EXCHANGE_ID gives a client owner its client id (a new one when the
//! owner's verifier changed: the client rebooted, its old state goes); CREATE_SESSION confirms
//! it and negotiates the channels, each attribute clamped to what the server keeps, and keeps
//! the callback credential the client offered ([`get_sec_parms`]; BACKCHANNEL_CTL replaces
//! it); SEQUENCE
//! checks the slot, renews the lease and reports the callback path and revoked delegations in
//! `sr_status_flags` ([`super::deleg::status_flags`]) and sets the reply's bounds
//! ([`ReplyMax`]: NFS4ERR_REP_TOO_BIG, NFS4ERR_REP_TOO_BIG_TO_CACHE), and [`keep_reply`] stores
//! the finished reply in the slot. Recovery: a retransmitted SEQUENCE gets the slot's reply as sent; one
//! whose request differs from the one the slot served (its first octets, its length or its
//! credential: [`super::request_digest`]) is a false retry, NFS4ERR_SEQ_FALSE_RETRY
//! (RFC 8881 §2.10.6.1.3.1), so a cached reply goes to no other principal; a sequence id
//! neither the slot's nor one above is NFS4ERR_SEQ_MISORDERED; a retry whose reply was not
//! kept is NFS4ERR_RETRY_UNCACHED_REP; one still being served NFS4ERR_DELAY. CREATE_SESSION
//! keeps its own one-entry reply cache (`csa_sequence`).

use rpcrdma_engine::xdr::XdrReader;
use rpcrdma_poller::CredBody;

use super::state::{Cached, Channel, Client, Session, Slot};
use super::xdr::{bad_xdr, st, Enc, Status};
use super::{op, Compound, Seq};

/// `eir_flags` EXCHGID4_FLAG_USE_NON_PNFS.
const FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
/// `eir_flags` EXCHGID4_FLAG_CONFIRMED_R.
const FLAG_CONFIRMED_R: u32 = 0x8000_0000;
/// `csa_flags` CREATE_SESSION4_FLAG_CONN_BACK_CHAN.
const FLAG_CONN_BACK_CHAN: u32 = 0x2;
/// Longest client owner (`NFS4_OPAQUE_LIMIT`).
const OPAQUE_LIMIT: u32 = 1024;
/// Most operations per COMPOUND a session allows.
const SESSION_MAX_OPS: u32 = 32;
/// Most backchannel slots.
const BACK_SLOTS: u32 = 16;
/// Octets a request or reply may have beyond its READ / WRITE data.
pub const HEADROOM: u32 = 8 << 10;
/// Operations in the largest CB_COMPOUND sent (CB_SEQUENCE, CB_RECALL).
pub const CB_OPS: u32 = 2;
/// Octets of the largest CB_COMPOUND call sent, RPC header included (RFC 8881 §18.36.3): the
/// call header with a credential of up to 120 octets and an AUTH_NONE verifier (160), the
/// CB_COMPOUND header (16), CB_SEQUENCE (40), CB_RECALL with a 128-octet handle (156).
pub const CB_MAX_REQUEST: u32 = 160 + 16 + 40 + 156;
/// Octets of the largest CB_COMPOUND reply expected: the accepted reply header (24), status,
/// empty tag and result count (12), CB_SEQUENCE's result (40), CB_RECALL's (8).
pub const CB_MAX_RESPONSE: u32 = 24 + 12 + 40 + 8;

/// EXCHANGE_ID (SP4_NONE only; other state protection is NFS4ERR_NOTSUPP). A new client
/// record past the table's bound, or past the caller's address's share of it
/// (`clients_per_peer`), is NFS4ERR_DELAY. An owner whose
/// confirmed client id another principal made, and which holds sessions or state, is
/// NFS4ERR_CLID_INUSE (RFC 8881 §18.35.5, as Linux nfsd's `same_creds` check): no client
/// takes over another's state by naming its owner.
pub fn exchange_id(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let verifier: [u8; 8] = r
        .get_fixed_opaque(8)
        .map_err(bad_xdr)?
        .try_into()
        .unwrap_or([0; 8]);
    let owner = r.get_opaque(OPAQUE_LIMIT).map_err(bad_xdr)?.to_vec();
    let _flags = r.get_u32().map_err(bad_xdr)?;
    let protect = r.get_u32().map_err(bad_xdr)?;
    if protect != 0 {
        return Err(st::NOTSUPP);
    }
    if r.get_count(1).map_err(bad_xdr)? == 1 {
        r.get_opaque(OPAQUE_LIMIT).map_err(bad_xdr)?; // nii_domain
        r.get_opaque(OPAQUE_LIMIT).map_err(bad_xdr)?; // nii_name
        r.skip(12).map_err(bad_xdr)?; // nii_date
    }
    let srv = c.srv;
    let now = srv.now_ms();
    let principal = super::clientdb::principal(&c.cx.cred);
    let mut s = srv.state();
    let found = s
        .index
        .owner(&owner)
        .and_then(|id| Some((id, s.clients.get(&id)?)));
    if let Some((_, cl)) = found {
        let has_state = !(cl.sessions.is_empty()
            && cl.opens.is_empty()
            && cl.locks.is_empty()
            && cl.delegs.is_empty());
        if cl.confirmed && cl.principal != principal && has_state {
            return Err(st::CLID_INUSE);
        }
    }
    let found = found.map(|(id, cl)| (id, cl.confirmed && cl.principal == principal, cl.verifier));
    let (id, confirmed) = match found {
        Some((id, true, v)) if v == verifier => (id, true),
        other => {
            if let Some((old, ..)) = other {
                s.remove_client(old);
            }
            let lim = srv.config().limits;
            let peer = c.cx.peer;
            let from_peer = s.index.peer_clients(&peer).len();
            if s.clients.len() >= lim.clients || from_peer >= lim.clients_per_peer {
                s.counters.refused_full += 1;
                return Err(st::DELAY);
            }
            let id = srv.new_client_id(&mut s);
            s.insert_client(
                id,
                Client {
                    owner,
                    verifier,
                    minor: c.minor,
                    peer,
                    principal,
                    confirmed: false,
                    cs_seq: 1,
                    cs_reply: None,
                    renewed_ms: now,
                    reclaim_done: false,
                    sessions: Vec::new(),
                    opens: Vec::new(),
                    locks: Vec::new(),
                    delegs: Vec::new(),
                    revoked: Vec::new(),
                },
            );
            (id, false)
        }
    };
    if let Some(cl) = s.clients.get_mut(&id) {
        cl.minor = c.minor;
    }
    let cl = &s.clients[&id];
    out.u64(id);
    out.u32(cl.cs_seq);
    out.u32(FLAG_USE_NON_PNFS | if confirmed { FLAG_CONFIRMED_R } else { 0 });
    out.u32(0); // state_protect4_r: SP4_NONE
    out.u64(0); // so_minor_id
    out.opaque(b"rpcrdma-nfsd");
    out.opaque(b"rpcrdma-nfsd");
    out.u32(0); // eir_server_impl_id: none
    Ok(())
}

/// Reads a `channel_attrs4`.
fn get_channel(r: &mut XdrReader<'_>) -> Result<Channel, Status> {
    let mut v = [0u32; 6];
    for x in &mut v {
        *x = r.get_u32().map_err(bad_xdr)?;
    }
    if r.get_count(1).map_err(bad_xdr)? == 1 {
        r.get_u32().map_err(bad_xdr)?; // ca_rdma_ird
    }
    Ok(Channel {
        header_pad: v[0],
        max_request: v[1],
        max_response: v[2],
        max_response_cached: v[3],
        max_ops: v[4],
        max_requests: v[5],
    })
}

fn put_channel(out: &mut Enc, ch: &Channel) {
    for v in [
        ch.header_pad,
        ch.max_request,
        ch.max_response,
        ch.max_response_cached,
        ch.max_ops,
        ch.max_requests,
    ] {
        out.u32(v);
    }
    out.u32(0); // ca_rdma_ird: none
}

/// Reads `csa_sec_parms` / `bca_sec_parms` (`callback_sec_parms4<>`, at most 16) and picks
/// the credential callbacks carry (RFC 8881 §18.36.3: one of those the client gave): the
/// first AUTH_SYS entry, kept octet for octet, or else AUTH_NONE when offered (the Linux
/// client's callback service takes CB_COMPOUND only with AUTH_SYS). RPCSEC_GSS entries are
/// skipped (not supported), as is an AUTH_SYS body a call header has no room for; `None` when
/// nothing usable remains. A flavor outside the union is NFS4ERR_INVAL.
pub fn get_sec_parms(r: &mut XdrReader<'_>) -> Result<Option<CredBody>, Status> {
    let n = r.get_count(16).map_err(bad_xdr)?;
    let (mut sys, mut none) = (None, false);
    for _ in 0..n {
        match r.get_u32().map_err(bad_xdr)? {
            0 => none = true,
            1 => {
                let start = r.rest();
                r.get_u32().map_err(bad_xdr)?; // stamp
                r.get_opaque(255).map_err(bad_xdr)?; // machine name
                r.skip(8).map_err(bad_xdr)?; // uid, gid
                let g = r.get_count(16).map_err(bad_xdr)?;
                r.skip(4 * g as usize).map_err(bad_xdr)?;
                let body = &start[..start.len() - r.rest().len()];
                sys = sys.or_else(|| CredBody::sys_body(body));
            }
            6 => {
                r.get_u32().map_err(bad_xdr)?; // gcbp_service
                r.get_opaque(OPAQUE_LIMIT).map_err(bad_xdr)?; // gcbp_handle_from_server
                r.get_opaque(OPAQUE_LIMIT).map_err(bad_xdr)?; // gcbp_handle_from_client
            }
            _ => return Err(st::INVAL),
        }
    }
    Ok(sys.or(none.then_some(CredBody::NONE)))
}

/// CREATE_SESSION: channels clamped, the backchannel's connection recorded (and probed with
/// CB_NULL after the COMPOUND); a back channel too small for a recall ([`CB_OPS`],
/// [`CB_MAX_REQUEST`], [`CB_MAX_RESPONSE`]) is NFS4ERR_TOOSMALL, as Linux nfsd's
/// `check_backchannel_attrs` answers. An unconfirmed client id named by a principal or from
/// an address other than its EXCHANGE_ID's is NFS4ERR_CLID_INUSE (RFC 8881 §18.36.4).
pub fn create_session(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let clientid = r.get_u64().map_err(bad_xdr)?;
    let seq = r.get_u32().map_err(bad_xdr)?;
    let flags = r.get_u32().map_err(bad_xdr)?;
    let fore_asked = get_channel(r)?;
    let back_asked = get_channel(r)?;
    let cb_program = r.get_u32().map_err(bad_xdr)?;
    let cb_cred = get_sec_parms(r)?;
    if back_asked.max_ops < CB_OPS
        || back_asked.max_request < CB_MAX_REQUEST
        || back_asked.max_response < CB_MAX_RESPONSE
    {
        return Err(st::TOOSMALL); // a recall would not fit the client's back channel
    }
    let srv = c.srv;
    let lim = srv.config().limits;
    let now = srv.now_ms();
    let mut s = srv.state();
    let cl = s.clients.get(&clientid).ok_or(st::STALE_CLIENTID)?;
    // An unconfirmed client id is confirmed only by the principal, from the address, that made
    // it (RFC 8881 §18.36.4; Linux nfsd checks both).
    if !cl.confirmed
        && (cl.peer != c.cx.peer || cl.principal != super::clientdb::principal(&c.cx.cred))
    {
        return Err(st::CLID_INUSE);
    }
    if seq == cl.cs_seq.wrapping_sub(1) {
        if let Some(b) = &cl.cs_reply {
            out.b.extend_from_slice(b);
            return Ok(());
        }
    }
    if seq != cl.cs_seq {
        return Err(st::SEQ_MISORDERED);
    }
    if cl.sessions.len() >= lim.sessions_per_client {
        s.counters.refused_full += 1;
        return Err(st::DELAY);
    }
    let io = srv.config().max_io.saturating_add(HEADROOM);
    let mut fore = Channel {
        header_pad: 0,
        max_request: fore_asked.max_request.min(io),
        max_response: fore_asked.max_response.min(io),
        max_response_cached: fore_asked.max_response_cached.min(lim.cached_reply),
        max_ops: fore_asked.max_ops.clamp(1, SESSION_MAX_OPS),
        max_requests: fore_asked.max_requests.clamp(1, lim.slots),
    };
    let back = Channel {
        header_pad: 0,
        max_request: back_asked.max_request.min(HEADROOM),
        max_response: back_asked.max_response.min(HEADROOM),
        max_response_cached: 0,
        max_ops: back_asked.max_ops.clamp(1, SESSION_MAX_OPS),
        max_requests: back_asked.max_requests.clamp(1, BACK_SLOTS),
    };
    // The slots the server-wide reply cache bound leaves room for (Linux nfsd's
    // `nfsd4_get_drc_mem`): fewer than asked, or none (NFS4ERR_DELAY).
    let per_slot = fore.max_response_cached as usize;
    let room = lim.cached_replies.saturating_sub(s.replies_reserved);
    let fit = room.checked_div(per_slot).unwrap_or(usize::MAX);
    if fit == 0 {
        s.counters.refused_full += 1;
        return Err(st::DELAY);
    }
    fore.max_requests = fore
        .max_requests
        .min(u32::try_from(fit).unwrap_or(u32::MAX));
    s.replies_reserved += fore.max_requests as usize * per_slot;
    let sid = srv.new_session_id(&mut s);
    let granted = flags & FLAG_CONN_BACK_CHAN;
    s.sessions.insert(
        sid,
        Session {
            client: clientid,
            fore,
            back,
            cb_program,
            back_conn: (granted != 0).then_some(c.cx.conn),
            slots: vec![
                Slot {
                    seq: 0,
                    digest: 0,
                    reply: Cached::Empty,
                    kept: Vec::new(),
                };
                fore.max_requests as usize
            ],
            cb_seq: 0,
            cb_down: false,
            cb_cred,
        },
    );
    if granted != 0 {
        c.probe = Some(sid);
    }
    let start = out.len();
    out.fixed(&sid);
    out.u32(seq);
    out.u32(granted);
    put_channel(out, &fore);
    put_channel(out, &back);
    let Some(cl) = s.clients.get_mut(&clientid) else {
        return Err(st::SERVERFAULT);
    };
    cl.confirmed = true;
    cl.cs_seq = cl.cs_seq.wrapping_add(1);
    cl.cs_reply = Some(out.b[start..].to_vec());
    cl.sessions.push(sid);
    s.renew(clientid, now);
    Ok(())
}

/// SEQUENCE (first operation): checks the slot, renews the lease, or answers a retry.
pub fn sequence(c: &mut Compound<'_>, r: &mut XdrReader<'_>, out: &mut Enc) -> Result<Seq, Status> {
    let sid: [u8; 16] = r
        .get_fixed_opaque(16)
        .map_err(bad_xdr)?
        .try_into()
        .unwrap_or([0; 16]);
    let seq = r.get_u32().map_err(bad_xdr)?;
    let slot = r.get_u32().map_err(bad_xdr)?;
    let _highest = r.get_u32().map_err(bad_xdr)?;
    let cache_this = r.get_bool().map_err(bad_xdr)?;
    let srv = c.srv;
    srv.check_back_channels(&sid);
    let now = srv.now_ms();
    let mut s = srv.state();
    let sess = s.session(&sid)?;
    let nslots = sess.slots.len() as u32;
    let client = sess.client;
    let (max, max_cached) = (sess.fore.max_response, sess.fore.max_response_cached);
    if c.args_len > sess.fore.max_request as usize {
        return Err(st::REQ_TOO_BIG);
    }
    if c.nops > sess.fore.max_ops {
        return Err(st::TOO_MANY_OPS);
    }
    let sl = sess.slots.get_mut(slot as usize).ok_or(st::BADSLOT)?;
    if seq == sl.seq && sl.seq != 0 {
        if sl.digest != c.digest {
            return Err(st::SEQ_FALSE_RETRY);
        }
        match sl.reply {
            Cached::Reply => {
                out.b.clear();
                out.b.extend_from_slice(&sl.kept);
            }
            Cached::InProgress => return Err(st::DELAY),
            Cached::Uncached => return Err(st::RETRY_UNCACHED_REP),
            Cached::Empty => return Err(st::SEQ_MISORDERED),
        }
        s.counters.replays += 1;
        s.renew(client, now);
        return Ok(Seq::Replay);
    }
    if seq != sl.seq.wrapping_add(1) {
        return Err(st::SEQ_MISORDERED);
    }
    sl.seq = seq;
    sl.digest = c.digest;
    sl.reply = Cached::InProgress;
    s.renew(client, now);
    out.fixed(&sid);
    out.u32(seq);
    out.u32(slot);
    out.u32(nslots - 1);
    out.u32(nslots - 1);
    out.u32(super::deleg::status_flags(&s, client, &sid));
    c.slot = Some((sid, slot, cache_this));
    c.client = Some(client);
    c.reply_max = Some(ReplyMax {
        response: max as usize,
        cached: cache_this.then_some(max_cached as usize),
    });
    Ok(Seq::Go)
}

/// Octets of the RPC reply header before COMPOUND4res (xid, REPLY, MSG_ACCEPTED, an empty
/// verifier, SUCCESS): the reply bounds count them (RFC 8881 §18.36.3: "including RPC
/// headers"), as Linux nfsd's `nfsd4_check_resp_size` counts the whole RPC reply.
pub const RPC_REPLY_HEAD: usize = 24;

/// Room kept for the error of the operation after one that changes something (Linux nfsd's
/// `COMPOUND_ERR_SLACK_SPACE`).
pub const ERR_SLACK: usize = 16;

/// The reply bounds of a COMPOUND in a session (RFC 8881 §2.10.6.4, §18.46.3): the fore
/// channel's `ca_maxresponsesize`, and its `ca_maxresponsesize_cached` when `sa_cachethis`
/// asks for the reply to be kept.
#[derive(Debug, Clone, Copy)]
pub struct ReplyMax {
    /// `ca_maxresponsesize`.
    pub response: usize,
    /// `ca_maxresponsesize_cached`, when `sa_cachethis` is set.
    pub cached: Option<usize>,
}

impl ReplyMax {
    /// Whether a COMPOUND4res of `len` octets may be sent: NFS4ERR_REP_TOO_BIG past
    /// `ca_maxresponsesize`, NFS4ERR_REP_TOO_BIG_TO_CACHE past `ca_maxresponsesize_cached`
    /// when the reply is to be kept.
    pub fn check(&self, len: usize) -> Result<(), Status> {
        let n = len.saturating_add(RPC_REPLY_HEAD);
        if n > self.response {
            return Err(st::REP_TOO_BIG);
        }
        if self.cached.is_some_and(|m| n > m) {
            return Err(st::REP_TOO_BIG_TO_CACHE);
        }
        Ok(())
    }
}

/// The most octets the result body of operation `opnum` takes when it succeeds, for the
/// operations that change something (Linux nfsd's `OP_MODIFIES_SOMETHING`, whose replies it
/// sizes before running them, `op_rsize_bop`): such an operation is refused before it runs
/// when its reply could not be sent or kept, rather than done and then not answered. `None`
/// for the others, checked after they run.
pub fn change_reply_max(opnum: u32) -> Option<usize> {
    Some(match opnum {
        op::WRITE => 16,                                  // count, committed, verifier
        op::COMMIT => 8,                                  // verifier
        op::CREATE => 36,                                 // change_info4, a three-word bitmap
        op::REMOVE | op::LINK => 20,                      // change_info4
        op::RENAME => 40,                                 // two change_info4
        op::SETATTR => 16,                                // a three-word bitmap
        op::OPEN => 120,                                  // 96 with a write delegation, the largest
        op::CLOSE | op::OPEN_DOWNGRADE | op::LOCKU => 16, // a stateid
        op::LOCK => 1068, // LOCK4denied with an owner of 1024 octets (Linux's estimate)
        op::DELEGRETURN
        | op::FREE_STATEID
        | op::RECLAIM_COMPLETE
        | op::DESTROY_SESSION
        | op::DESTROY_CLIENTID
        | op::BACKCHANNEL_CTL => 0,
        _ => return None,
    })
}

/// Before operation `opnum` runs with `len` octets of reply written (its number and status
/// included): an operation that changes something must have room for its result, and for
/// the error of the next one when one follows (`more`).
pub fn fits_before(c: &Compound<'_>, opnum: u32, more: bool, len: usize) -> Result<(), Status> {
    match (c.reply_max, change_reply_max(opnum)) {
        (Some(m), Some(body)) => {
            m.check(len + placed_len(c) + body + if more { ERR_SLACK } else { 0 })
        }
        _ => Ok(()),
    }
}

/// After an operation succeeded with `len` octets of reply written: within the bounds.
pub fn fits_after(c: &Compound<'_>, len: usize) -> Result<(), Status> {
    c.reply_max.map_or(Ok(()), |m| m.check(len + placed_len(c)))
}

/// How many octets the reply may still grow by after `len` octets written, and the status
/// when an operation's result cannot fit at all (NFS4ERR_REP_TOO_BIG, or
/// NFS4ERR_REP_TOO_BIG_TO_CACHE when the cached bound is the lower one); `None` outside a
/// session. READ and READDIR shorten their results to it, as Linux nfsd's do (the reply
/// buffer `nfsd4_sequence` bounds, `nfsd4_encode_read`, `nfsd4_encode_readdir`).
pub fn room(c: &Compound<'_>, len: usize) -> Option<(usize, Status)> {
    let m = c.reply_max?;
    let (bound, full) = match m.cached {
        Some(k) if k < m.response => (k, st::REP_TOO_BIG_TO_CACHE),
        _ => (m.response, st::REP_TOO_BIG),
    };
    let used = len + placed_len(c) + RPC_REPLY_HEAD;
    Some((bound.saturating_sub(used), full))
}

/// The octets of READ data the reply leaves out because they go through the Write chunk
/// ([`super::placed`]): they are part of the RPC reply all the same, and count against the
/// session's bounds as Linux nfsd counts a READ's pages, with their XDR roundup as the
/// inline encoding has it.
fn placed_len(c: &Compound<'_>) -> usize {
    c.placed
        .as_ref()
        .map_or(0, |p| p.bytes().len().next_multiple_of(4))
}

/// Stores the finished reply of a COMPOUND in its slot: the octets when the client asked for
/// caching and they fit `ca_maxresponsesize_cached` (copied into the buffer the slot keeps,
/// which grows to that bound at most and is not given back), a note that they were not kept
/// otherwise. `data` is READ data the reply leaves out (it goes through the Write chunk from
/// registered memory) and the offset it belongs at: the slot keeps it inline, with its pad.
/// True when the octets were kept.
pub fn keep_reply(c: &Compound<'_>, reply: &[u8], data: Option<(usize, &[u8])>) -> bool {
    let Some((sid, slot, cache_this)) = c.slot else {
        return false;
    };
    let mut s = c.srv.state();
    let Some(sess) = s.sessions.get_mut(&sid) else {
        return false; // destroyed by this COMPOUND
    };
    let (at, data) = data
        .filter(|(at, _)| *at <= reply.len())
        .unwrap_or((reply.len(), &[]));
    let pad = data.len().next_multiple_of(4) - data.len();
    let len = reply.len() + data.len() + pad;
    let fits = len <= sess.fore.max_response_cached as usize;
    let kept = cache_this && fits;
    if let Some(sl) = sess.slots.get_mut(slot as usize) {
        sl.reply = if kept {
            sl.kept.clear();
            sl.kept.reserve_exact(len); // no growth past the largest reply kept
            sl.kept.extend_from_slice(&reply[..at]);
            sl.kept.extend_from_slice(data);
            sl.kept.extend_from_slice(&[0; 3][..pad]);
            sl.kept.extend_from_slice(&reply[at..]);
            Cached::Reply
        } else {
            Cached::Uncached
        };
    }
    kept
}

/// DESTROY_SESSION: in a session, only a session of the same client.
pub fn destroy_session(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let sid: [u8; 16] = r
        .get_fixed_opaque(16)
        .map_err(bad_xdr)?
        .try_into()
        .unwrap_or([0; 16]);
    let mut s = c.srv.state();
    let owner = s.session(&sid)?.client;
    if c.client.is_some_and(|me| me != owner) {
        return Err(st::BADSESSION);
    }
    s.remove_session(&sid);
    if let Some(cl) = s.clients.get_mut(&owner) {
        cl.sessions.retain(|x| *x != sid);
    }
    Ok(())
}

/// DESTROY_CLIENTID: NFS4ERR_CLIENTID_BUSY while it has sessions.
pub fn destroy_clientid(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let id = r.get_u64().map_err(bad_xdr)?;
    let mut s = c.srv.state();
    let cl = s.clients.get(&id).ok_or(st::STALE_CLIENTID)?;
    if !cl.sessions.is_empty() {
        return Err(st::CLIENTID_BUSY);
    }
    s.remove_client(id);
    Ok(())
}

/// RECLAIM_COMPLETE: the client is done reclaiming (its reclaims are NFS4ERR_NO_GRACE from
/// now on, it is recorded on stable storage and may end the grace period: [`super::grace`]);
/// a second one for the whole server is NFS4ERR_COMPLETE_ALREADY.
pub fn reclaim_complete(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let one_fs = r.get_bool().map_err(bad_xdr)?;
    if one_fs {
        return Ok(());
    }
    let id = c.client.ok_or(st::OP_NOT_IN_SESSION)?;
    {
        let mut s = c.srv.state();
        let cl = s.clients.get_mut(&id).ok_or(st::STALE_CLIENTID)?;
        if cl.reclaim_done {
            return Err(st::COMPLETE_ALREADY);
        }
        cl.reclaim_done = true;
    }
    c.srv.reclaim_completed(id)
}

/// BIND_CONN_TO_SESSION (alone in its COMPOUND): binds the calling connection to the session's
/// fore channel, backchannel or both (RFC 8881 §18.34); binding the backchannel records the
/// connection as the session's callback path, brings it up again and probes it. RDMA mode is
/// never granted (the connection is already RPC-over-RDMA).
pub fn bind_conn_to_session(
    c: &mut Compound<'_>,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    let sid: [u8; 16] = r
        .get_fixed_opaque(16)
        .map_err(bad_xdr)?
        .try_into()
        .unwrap_or([0; 16]);
    let dir = r.get_u32().map_err(bad_xdr)?;
    r.get_bool().map_err(bad_xdr)?; // bctsa_use_conn_in_rdma_mode
                                    // CDFC4_FORE, CDFC4_BACK, CDFC4_FORE_OR_BOTH, CDFC4_BACK_OR_BOTH -> CDFS4_*.
    let granted = match dir {
        1 => 1,
        2 | 3 | 7 => dir.min(3),
        _ => return Err(st::INVAL),
    };
    let now = c.srv.now_ms();
    let mut s = c.srv.state();
    let sess = s.session(&sid)?;
    if granted & 2 != 0 {
        sess.back_conn = Some(c.cx.conn);
        sess.cb_down = false;
        c.probe = Some(sid);
    }
    let client = sess.client;
    s.counters.binds += 1;
    s.renew(client, now);
    out.fixed(&sid);
    out.u32(granted);
    out.u32(0); // bctsr_use_conn_in_rdma_mode
    Ok(())
}

/// BACKCHANNEL_CTL (RFC 8881 §18.33): the session of the SEQUENCE takes a new callback
/// program and credential ([`get_sec_parms`]); with no usable credential its callbacks stop
/// and SEQUENCE reports the path down. A back channel in use is probed again with CB_NULL.
pub fn backchannel_ctl(c: &mut Compound<'_>, r: &mut XdrReader<'_>) -> Result<(), Status> {
    let program = r.get_u32().map_err(bad_xdr)?;
    let cred = get_sec_parms(r)?;
    let (sid, ..) = c.slot.ok_or(st::OP_NOT_IN_SESSION)?;
    let mut s = c.srv.state();
    let sess = s.session(&sid)?;
    sess.cb_program = program;
    sess.cb_cred = cred;
    if sess.back_conn.is_some() && cred.is_some() {
        c.probe = Some(sid);
    }
    Ok(())
}
