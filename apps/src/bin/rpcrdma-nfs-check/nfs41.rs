//! The NFSv4.1 part of `rpcrdma-nfs-check`: a session whose backchannel (RFC 8167) our client
//! serves, against Linux nfsd over the same RPC-over-RDMA connection.
//!
//! Normal operation: the client connects with `Client::connect_serving`, serving the
//! callback program [`CB_PROGRAM`] version 1 with [`CB_CREDITS`] backward credits, handlers on
//! a worker. A control client first shows what a session without a backchannel looks like to
//! Linux (SEQUENCE reports SEQ4_STATUS_CB_PATH_DOWN). Then EXCHANGE_ID, CREATE_SESSION with
//! CREATE_SESSION4_FLAG_CONN_BACK_CHAN, the callback program and backchannel attributes that
//! fit the connection (inline sizes, `ca_maxrequests` = the backward credits), RECLAIM_COMPLETE
//! and SEQUENCE-prefixed COMPOUNDs (slot 0 for the main thread, slots 1 to
//! [`TRAFFIC_THREADS`] for background traffic, one thread each, the last slot for the
//! handler). With `--local-tree`, two files are created on the server's file system and
//! opened with OPEN4_SHARE_ACCESS_WANT_READ_DELEG; Linux grants read delegations (leases).
//! Local writers then break the leases (a non-blocking open first: EWOULDBLOCK, the lease is
//! there), so nfsd sends CB_COMPOUND {CB_SEQUENCE, CB_RECALL} on our connection. The handler
//! checks CB_SEQUENCE against the session's backchannel slot table, answers CB_RECALL NFS4_OK
//! for a delegation it holds, and holds each recall's reply for [`CB_HOLD`]: a server that
//! keeps to the one backward credit sends nothing else meanwhile. Forward calls go on during
//! the recalls (the traffic threads saturate the forward credits); DELEGRETURN then releases
//! the local writers. Then Linux is made to drop the connection (a READ whose reply exceeds
//! the offered Reply chunk, docs/interop-nfs.md 3.3): the client reconnects (posting its
//! backchannel receives again), SEQUENCE on the new connection, BIND_CONN_TO_SESSION
//! (CDFC4_FORE_OR_BOTH) moves the backchannel to it, and a third delegation is recalled over
//! the new connection. A fourth one the handler returns itself, with a blocking DELEGRETURN
//! from its worker, before it answers. CLOSE, a last SEQUENCE (no backchannel fault flags),
//! DESTROY_SESSION and DESTROY_CLIENTID end the part.
//!
//! Recovery: every wait has a deadline and fails its check instead of hanging; NFS4ERR_GRACE
//! and NFS4ERR_DELAY are waited out (`--grace-wait`). A local writer that stays blocked is left
//! behind (detached) and the check fails. Without `--local-tree` the recall checks are skipped
//! (a note says so).
//!
//! This file holds the session (EXCHANGE_ID, CREATE_SESSION, SEQUENCE, reconnection, the
//! control client, background traffic) and the part's order; the backchannel handler is in
//! `nfs41/callbacks.rs`, the delegation recalls and their checks in `nfs41/recall.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rpcrdma_apps::nfs::v4::cb::{self as nfs4cb, CbServer};
use rpcrdma_apps::nfs::v4::{
    self as nfs4, ChannelAttrs, CompoundReply, Op, OpReply, OpResult, SequenceRes, SessionId,
    StateId, CDFC4_FORE_OR_BOTH, CDFS4_BOTH, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    NFS4ERR_BADSESSION, NFS4ERR_DELAY, NFS4ERR_GRACE, NFS4_OK, SEQ4_STATUS_BACKCHANNEL_FAULT,
    SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_CB_PATH_DOWN_SESSION,
    SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
};

#[path = "nfs41/callbacks.rs"]
mod callbacks;
#[path = "nfs41/recall.rs"]
mod recall;

use super::{null_check, ok, print_negotiated, How, Link, Nfs, Tally};
pub(super) use callbacks::Callbacks;
use callbacks::Returner;
use recall::{make_files, open_delegated, recall, spawn_writer, try_local_open};

/// Buffers of the NFSv4.1 client (no READ through chunks here: everything is small).
pub(super) const BUF: usize = 16 * 1024;
/// The callback program our client serves (`csa_cb_program`).
const CB_PROGRAM: u32 = 0x4000_0000;
/// Backward credits our client grants, and the backchannel's `ca_maxrequests`.
const CB_CREDITS: u32 = 1;
/// How long the handler holds the reply to a CB_RECALL (well below nfsd's callback timeout of
/// max(lease / 10, 1 s)).
const CB_HOLD: Duration = Duration::from_millis(200);
/// Reply size hint of every call: no Reply chunk (all replies here fit inline).
const HINT41: Option<usize> = Some(1024);
/// An RPC-over-RDMA Version One RDMA_MSG header with three empty chunk lists.
const RDMA_HDR: u32 = 28;
/// Threads making forward calls (each on its own slot) while the recalls go on.
const TRAFFIC_THREADS: u32 = 20;
/// Fore channel slots asked for: slot 0 for the main thread, 1 to [`TRAFFIC_THREADS`] for the
/// traffic, the last one for the CB_RECALL handler's own DELEGRETURN.
const FORE_SLOTS: u32 = 2 + TRAFFIC_THREADS;
/// The anonymous uid and gid nfsd maps AUTH_NONE to (the test files are theirs).
const ANON_ID: u32 = 65_534;
/// Size of each delegated test file.
const FILE_LEN: usize = 1000;
/// What the local writers append.
const APPENDED: &[u8] =
    b"rpcrdma-nfs-check: written on the server while the client held a read delegation\n";
/// SEQUENCE status flags that say the backchannel is not usable or state was lost.
const BAD_FLAGS: u32 = SEQ4_STATUS_CB_PATH_DOWN
    | SEQ4_STATUS_CB_PATH_DOWN_SESSION
    | SEQ4_STATUS_BACKCHANNEL_FAULT
    | SEQ4_STATUS_RECALLABLE_STATE_REVOKED;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A fore channel slot and its next sequence id.
struct Slot {
    id: u32,
    seq: u32,
}

impl Slot {
    fn new(id: u32) -> Slot {
        Slot { id, seq: 1 }
    }
}

/// The session.
struct Session {
    id: SessionId,
    clientid: u64,
    /// Fore channel slots the server granted.
    fore_slots: u32,
    /// The next sequence id of each traffic slot (kept from one round to the next).
    traffic_seq: Mutex<Vec<u32>>,
}

impl Session {
    fn new(id: SessionId, clientid: u64, fore_slots: u32) -> Session {
        Session {
            id,
            clientid,
            fore_slots,
            traffic_seq: Mutex::new(vec![1; fore_slots as usize]),
        }
    }
}

fn how() -> How<'static> {
    How {
        hint: HINT41,
        ..How::default()
    }
}

impl Nfs<'_> {
    /// SEQUENCE on `slot`, then `ops`; waits out NFS4ERR_GRACE and NFS4ERR_DELAY (each try
    /// with the slot's next sequence id).
    fn seq_compound(
        &self,
        s: &Session,
        slot: &mut Slot,
        ops: &[Op<'_>],
    ) -> Result<(CompoundReply, SequenceRes), String> {
        let deadline = Instant::now() + self.a.grace_wait;
        loop {
            let mut all = Vec::with_capacity(ops.len() + 1);
            all.push(Op::Sequence {
                session: s.id,
                sequence: slot.seq,
                slot: slot.id,
                highest_slot: s.fore_slots.saturating_sub(1),
                cache_this: false,
            });
            all.extend_from_slice(ops);
            let (r, _) = self.compound_once(&all, how())?;
            let seq = match r.ops.first() {
                Some(OpReply {
                    status: NFS4_OK,
                    result: OpResult::Sequence(q),
                    ..
                }) => *q,
                Some(o) => {
                    return Err(format!(
                        "SEQUENCE (slot {}, sequence id {}) failed: status {}",
                        slot.id, slot.seq, o.status
                    ))
                }
                None => return Err(format!("no SEQUENCE result (status {})", r.status)),
            };
            slot.seq = slot.seq.wrapping_add(1);
            if (r.status == NFS4ERR_GRACE || r.status == NFS4ERR_DELAY) && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            return Ok((r, seq));
        }
    }
}

fn exchange_id(nfs: &Nfs<'_>, owner: &str) -> Result<nfs4::ExchangeIdRes, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let (r, _) = nfs.compound(
        &[Op::ExchangeId {
            verifier: nanos.to_be_bytes(),
            owner: owner.as_bytes(),
            flags: 0,
        }],
        how(),
    )?;
    ok(&r).map_err(|e| format!("EXCHANGE_ID: {e}"))?;
    match r.find(nfs4::op::EXCHANGE_ID).map(|o| &o.result) {
        Some(OpResult::ExchangeId(x)) => Ok(x.clone()),
        _ => Err("no EXCHANGE_ID result".into()),
    }
}

fn create_session(
    nfs: &Nfs<'_>,
    x: &nfs4::ExchangeIdRes,
    flags: u32,
    back: ChannelAttrs,
) -> Result<nfs4::CreateSessionRes, String> {
    let fore = ChannelAttrs {
        header_pad: 0,
        max_request: BUF as u32,
        max_response: BUF as u32,
        max_response_cached: 2048,
        max_ops: 16,
        max_requests: FORE_SLOTS,
        rdma_ird: None,
    };
    let (r, _) = nfs.compound(
        &[Op::CreateSession {
            clientid: x.clientid,
            sequence: x.sequence,
            flags,
            fore,
            back,
            cb_program: CB_PROGRAM,
        }],
        how(),
    )?;
    ok(&r).map_err(|e| format!("CREATE_SESSION: {e}"))?;
    match r.find(nfs4::op::CREATE_SESSION).map(|o| &o.result) {
        Some(OpResult::CreateSession(c)) => Ok(*c),
        _ => Err("no CREATE_SESSION result".into()),
    }
}

fn destroy(nfs: &Nfs<'_>, s: &Session) -> Result<(), String> {
    let (r, _) = nfs.compound(&[Op::DestroySession(s.id)], how())?;
    ok(&r).map_err(|e| format!("DESTROY_SESSION: {e}"))?;
    let (r, _) = nfs.compound(&[Op::DestroyClientId(s.clientid)], how())?;
    ok(&r).map_err(|e| format!("DESTROY_CLIENTID: {e}"))
}

fn attrs_str(a: &ChannelAttrs) -> String {
    format!(
        "maxrequestsize {}, maxresponsesize {} (cached {}), maxoperations {}, maxrequests {}",
        a.max_request, a.max_response, a.max_response_cached, a.max_ops, a.max_requests
    )
}

/// A second client whose session has no backchannel: Linux marks its callback path down.
fn control(nfs: &Nfs<'_>) -> Result<String, String> {
    let owner = format!("rpcrdma-nfs-check/{}/no-backchannel", std::process::id());
    let x = exchange_id(nfs, &owner)?;
    let back = ChannelAttrs {
        header_pad: 0,
        max_request: 1024,
        max_response: 1024,
        max_response_cached: 0,
        max_ops: 4,
        max_requests: 1,
        rdma_ird: None,
    };
    let c = create_session(nfs, &x, 0, back)?;
    let s = Session::new(c.session, x.clientid, c.fore.max_requests);
    let res = nfs.seq_compound(&s, &mut Slot::new(0), &[]);
    let destroyed = destroy(nfs, &s);
    let (_, q) = res?;
    destroyed?;
    if q.status_flags & SEQ4_STATUS_CB_PATH_DOWN == 0 {
        return Err(format!(
            "a session without CONN_BACK_CHAN: SEQUENCE status flags {:#x}, expected \
             SEQ4_STATUS_CB_PATH_DOWN",
            q.status_flags
        ));
    }
    Ok(format!(
        "a session without CONN_BACK_CHAN: SEQUENCE reports status flags {:#x} \
         (SEQ4_STATUS_CB_PATH_DOWN); session and client id destroyed",
        q.status_flags
    ))
}

/// EXCHANGE_ID + CREATE_SESSION with the backchannel on this connection.
fn establish(nfs: &Nfs<'_>, cb: &Callbacks) -> Result<(Session, String), String> {
    let owner = format!("rpcrdma-nfs-check/{}", std::process::id());
    let x = exchange_id(nfs, &owner)?;
    let neg = nfs
        .client
        .negotiated()
        .ok_or("the connection published no negotiated values")?;
    // Backward calls arrive inline in our receives, our replies go inline in our Sends.
    let back = ChannelAttrs {
        header_pad: 0,
        max_request: neg.recv_inline.saturating_sub(RDMA_HDR),
        max_response: neg.send_inline.saturating_sub(RDMA_HDR),
        max_response_cached: 0,
        max_ops: 4,
        max_requests: CB_CREDITS,
        rdma_ird: None,
    };
    let c = create_session(nfs, &x, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, back)?;
    if c.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN == 0 {
        return Err(format!(
            "CREATE_SESSION granted flags {:#x}: no CONN_BACK_CHAN",
            c.flags
        ));
    }
    if c.back.max_requests == 0 || c.back.max_requests > CB_CREDITS {
        return Err(format!(
            "backchannel maxrequests {} (asked {CB_CREDITS}: our backward credits)",
            c.back.max_requests
        ));
    }
    lock(&cb.log).server = Some(CbServer::new(c.session, c.back.max_requests));
    let s = Session::new(c.session, x.clientid, c.fore.max_requests.min(FORE_SLOTS));
    let msg = format!(
        "client id {:#x} (server {:?}, scope {:?}{}), session {}: CONN_BACK_CHAN granted, \
         callback program {CB_PROGRAM:#x} v{} AUTH_NONE; fore channel {}; backchannel {} \
         (asked: {})",
        x.clientid,
        String::from_utf8_lossy(&x.server_major_id),
        String::from_utf8_lossy(&x.server_scope),
        x.impl_id
            .as_ref()
            .map(|(d, n)| format!(", implementation {d} {n}"))
            .unwrap_or_default(),
        hex(&c.session),
        nfs4cb::VERSION,
        attrs_str(&c.fore),
        attrs_str(&c.back),
        attrs_str(&back),
    );
    Ok((s, msg))
}

/// Runs the NFSv4.1 checks on `nfs` (a client connected with `cb`'s service).
pub(super) fn run(nfs: &Nfs<'_>, cb: &Arc<Callbacks>, t: &mut Tally) {
    let c = nfs.client;
    let _ = cb.stats.set(c.stats());
    t.check("nfs41/null", null_check(nfs));
    print_negotiated(c);
    t.check("nfs41/no-backchannel-control", control(nfs));
    let s = match establish(nfs, cb) {
        Ok((s, msg)) => {
            t.check("nfs41/create-session", Ok(msg));
            s
        }
        Err(e) => {
            t.check("nfs41/create-session", Err(e));
            return;
        }
    };
    let mut slot = Slot::new(0);
    let res = nfs
        .seq_compound(&s, &mut slot, &[Op::ReclaimComplete])
        .and_then(|(r, q)| {
            ok(&r).map_err(|e| format!("RECLAIM_COMPLETE: {e}"))?;
            let mut ops = vec![Op::PutRootFh];
            ops.extend(nfs.a.dir.split('/').map(Op::Lookup));
            ops.push(Op::GetFh);
            ops.push(Op::GetAttrTypeSize);
            let (r2, q2) = nfs.seq_compound(&s, &mut slot, &ops)?;
            ok(&r2)?;
            let flags = q.status_flags | q2.status_flags;
            if flags & BAD_FLAGS != 0 {
                return Err(format!(
                    "SEQUENCE status flags {flags:#x}: the server has no usable backchannel"
                ));
            }
            Ok(format!(
                "SEQUENCE + RECLAIM_COMPLETE, SEQUENCE + PUTROOTFH + LOOKUP {} + GETFH + \
                 GETATTR: status flags {flags:#x} (backchannel up); slot {} now at sequence id \
                 {}, highest slot {} / target {}",
                nfs.a.dir, q2.slot, q2.sequence, q2.highest_slot, q2.target_highest_slot
            ))
        });
    t.check("nfs41/sequence", res);
    match &nfs.a.local_tree {
        Some(dir) => recall(nfs, cb, &s, &mut slot, t, dir, &["a", "b"], "nfs41"),
        None => println!(
            "   note nfs41: no --local-tree: no delegation, no CB_RECALL (the backchannel \
             stays idle)"
        ),
    }
    let res = reconnect(nfs, cb, &s, &mut slot);
    let again = res.is_ok();
    t.check("nfs41/reconnect-bind-backchannel", res);
    if again {
        if let Some(dir) = &nfs.a.local_tree {
            recall(nfs, cb, &s, &mut slot, t, dir, &["c"], "nfs41/reconnected");
            t.check(
                "nfs41/return-in-handler",
                return_in_handler(nfs, cb, &s, &mut slot, dir),
            );
        }
    }
    // What came on the backchannel besides the CB_COMPOUNDs: CB_NULL (answered by the
    // dispatch, never seen by the handler). A backward call counted on arrival may still be
    // in its handler or its reply on the way: the counts are read once every call received
    // was answered (or after --timeout).
    let end = Instant::now() + nfs.a.timeout;
    let mut snap = c.stats().snapshot();
    while snap.back_replies < snap.back_calls && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
        snap = c.stats().snapshot();
    }
    let (handled, rejected) = {
        let g = lock(&cb.log);
        (g.calls.len() as u64, u64::from(g.rejected))
    };
    let nulls = snap.back_calls.saturating_sub(handled + rejected);
    t.check(
        "nfs41/cb-null",
        if snap.back_replies != snap.back_calls || snap.back_errors != rejected {
            Err(format!(
                "backward calls {}, replies {}, errors {} (handler rejections {rejected})",
                snap.back_calls, snap.back_replies, snap.back_errors
            ))
        } else if nulls == 0 {
            Ok(format!(
                "no CB_NULL came ({} backward calls, all CB_COMPOUND): Linux 6.1 does not probe \
                 the backchannel of a minor version 1 client (nfsd4_run_cb_work)",
                snap.back_calls
            ))
        } else {
            Ok(format!(
                "{nulls} CB_NULL answered by the dispatch (of {} backward calls)",
                snap.back_calls
            ))
        },
    );
    let res = nfs.seq_compound(&s, &mut slot, &[]).and_then(|(_, q)| {
        if q.status_flags & BAD_FLAGS != 0 {
            Err(format!("SEQUENCE status flags {:#x}", q.status_flags))
        } else {
            Ok(format!(
                "last SEQUENCE: status flags {:#x} (no CB_PATH_DOWN, no BACKCHANNEL_FAULT, \
                 nothing revoked)",
                q.status_flags
            ))
        }
    });
    t.check("nfs41/backchannel-healthy", res);
    let res = destroy(nfs, &s).and_then(|()| {
        // The session is gone: a SEQUENCE on it must fail.
        let (r, _) = nfs.compound_once(
            &[Op::Sequence {
                session: s.id,
                sequence: slot.seq,
                slot: 0,
                highest_slot: 0,
                cache_this: false,
            }],
            how(),
        )?;
        if r.status != NFS4ERR_BADSESSION {
            return Err(format!(
                "SEQUENCE after DESTROY_SESSION: status {}, expected NFS4ERR_BADSESSION",
                r.status
            ));
        }
        Ok(
            "DESTROY_SESSION, DESTROY_CLIENTID (the client holds no state); SEQUENCE on the \
            session then gets NFS4ERR_BADSESSION"
                .into(),
        )
    });
    t.check("nfs41/destroy", res);
}

/// A delegation the CB_RECALL handler returns itself: DELEGRETURN with `call_blocking` from
/// the worker that runs the handler, before the handler answers NFS4_OK. The local writer
/// must go on without any DELEGRETURN from the main thread.
fn return_in_handler(
    nfs: &Nfs<'_>,
    cb: &Callbacks,
    s: &Session,
    slot: &mut Slot,
    dir: &Path,
) -> Result<String, String> {
    if s.fore_slots < FORE_SLOTS {
        return Err(format!(
            "the server granted {} fore channel slots: none left for the handler",
            s.fore_slots
        ));
    }
    let made = make_files(dir, nfs.a.seed, &["d"])?;
    let mut dops = vec![Op::PutRootFh];
    dops.extend(nfs.a.dir.split('/').map(Op::Lookup));
    dops.push(Op::GetFh);
    let (r, _) = nfs.seq_compound(s, slot, &dops)?;
    ok(&r)?;
    let Some(OpResult::Fh(dir_fh)) = r.find(nfs4::op::GETFH).map(|o| o.result.clone()) else {
        return Err("no GETFH result".into());
    };
    let (files, notes, failed, _) = open_delegated(nfs, s, slot, &dir_fh, &made);
    if let Some(e) = failed {
        return Err(e);
    }
    let f = files.first().ok_or("no file opened")?;
    let res = (|| {
        let d = f
            .deleg
            .ok_or_else(|| format!("no read delegation: {}", notes.join("; ")))?;
        lock(&cb.log).delegations = vec![(d, f.fh.clone())];
        let hslot = s.fore_slots - 1;
        *lock(&cb.returner) = Some(Returner {
            client: nfs.client.clone(),
            session: s.id,
            slot: Slot {
                id: hslot,
                seq: lock(&s.traffic_seq)[hslot as usize],
            },
            highest: s.fore_slots - 1,
            results: Vec::new(),
        });
        let before = cb.recalls();
        let (tx, rx) = mpsc::channel();
        match try_local_open(&f.path) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => return Err(format!("local open: {other:?}, expected EWOULDBLOCK")),
        }
        let breaking = Instant::now();
        spawn_writer(f.path.clone(), tx);
        let got = cb.wait_recalls(before + 1, Duration::from_secs(30)) - before;
        if got != 1 {
            return Err(format!("{got} CB_RECALLs within 30 s"));
        }
        let written = rx
            .recv_timeout(Duration::from_secs(20))
            .map_err(|_| "the local writer still blocked 20 s after the recall".to_string())?
            .1?;
        let ret = lock(&cb.returner).take().ok_or("no returner")?;
        lock(&s.traffic_seq)[hslot as usize] = ret.slot.seq;
        let outcome = ret.results.first().cloned().ok_or(
            "the handler made no DELEGRETURN (the recall was not answered NFS4_OK?)".to_string(),
        )??;
        let g = lock(&cb.log);
        let st = g
            .calls
            .iter()
            .flat_map(|c| &c.served.recalls)
            .find(|(r, _)| r.stateid == d)
            .map(|(_, st)| *st);
        if st != Some(NFS4_OK) {
            return Err(format!("CB_RECALL answered {st:?}"));
        }
        Ok(format!(
            "CB_RECALL of the delegation of {}: {outcome}, with call_blocking on the worker \
             running the handler, then CB_RECALL answered NFS4_OK; the local writer finished \
             {} ms after the lease break, with no DELEGRETURN from the main thread",
            f.path.display(),
            written.saturating_duration_since(breaking).as_millis()
        ))
    })();
    *lock(&cb.returner) = None;
    let closed = nfs
        .seq_compound(s, slot, &[Op::PutFh(&f.fh), Op::Close(f.open)])
        .and_then(|(r, _)| ok(&r));
    let msg = res?;
    closed.map_err(|e| format!("{msg}; CLOSE: {e}"))?;
    Ok(format!("{msg}; closed"))
}

/// Makes Linux drop the connection (a READ whose whole reply does not fit the offered Reply
/// chunk although its data goes to a Write chunk: docs/interop-nfs.md 3.3), waits for the
/// client to reconnect, then binds the new connection to the session for both channels.
fn reconnect(
    nfs: &Nfs<'_>,
    cb: &Callbacks,
    s: &Session,
    slot: &mut Slot,
) -> Result<String, String> {
    let c = nfs.client;
    let mut ops = vec![Op::PutRootFh];
    ops.extend(nfs.a.dir.split('/').map(Op::Lookup));
    ops.push(Op::Lookup("data.bin"));
    ops.push(Op::GetFh);
    let (r, _) = nfs.seq_compound(s, slot, &ops)?;
    ok(&r)?;
    let Some(OpResult::Fh(fh)) = r.find(nfs4::op::GETFH).map(|o| o.result.clone()) else {
        return Err("no GETFH result".into());
    };
    let losses = c.stats().snapshot().connection_losses;
    let reconnects = c.stats().snapshot().reconnects;
    // Minor version 0 (no session slot is spent on a call that never completes).
    let nfs0 = Nfs {
        client: c,
        a: nfs.a,
        tag: nfs.tag,
        r_bit: nfs.r_bit,
        minor: 0,
        link: Link::default(),
    };
    let read = [
        Op::PutFh(&fh),
        Op::Read {
            offset: 0,
            count: BUF as u32,
        },
    ];
    let unhinted = How {
        receptacle: true,
        ..How::default()
    };
    let failed = match nfs0.compound_once(&read, unhinted) {
        Ok((r, _)) => {
            return Err(format!(
                "a READ of {BUF} octets with a {BUF}-octet Reply chunk was served (status {}): \
                 this server does not drop the connection, the round cannot run",
                r.status
            ))
        }
        Err(e) => e,
    };
    let end = Instant::now() + Duration::from_secs(5);
    while c.stats().snapshot().connection_losses == losses && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let lost = c.stats().snapshot().connection_losses - losses;
    *lock(&cb.losses_caused) += lost;
    if lost == 0 {
        return Err(format!(
            "the READ failed ({failed}) without a connection loss"
        ));
    }
    if !c.wait_connected(nfs.a.timeout) {
        return Err(format!(
            "no new connection within {:?} (state {:?})",
            nfs.a.timeout,
            c.state()
        ));
    }
    let reconnected = c.stats().snapshot().reconnects - reconnects;
    // The new connection: SEQUENCE binds it to the fore channel; Linux's backchannel went
    // with the old one.
    let (_, q1) = nfs.seq_compound(s, slot, &[])?;
    let (r, _) = nfs.compound(
        &[Op::BindConnToSession {
            session: s.id,
            dir: CDFC4_FORE_OR_BOTH,
        }],
        how(),
    )?;
    ok(&r).map_err(|e| format!("BIND_CONN_TO_SESSION: {e}"))?;
    let dir = match r.find(nfs4::op::BIND_CONN_TO_SESSION).map(|o| &o.result) {
        Some(OpResult::BindConn { session, dir, .. }) if *session == s.id => *dir,
        other => return Err(format!("BIND_CONN_TO_SESSION returned {other:?}")),
    };
    if dir != CDFS4_BOTH {
        return Err(format!(
            "BIND_CONN_TO_SESSION(CDFC4_FORE_OR_BOTH) bound direction {dir}, not CDFS4_BOTH"
        ));
    }
    // Linux probes the new backchannel asynchronously: SEQUENCE until no fault is reported.
    let t0 = Instant::now();
    let q2 = loop {
        let (_, q) = nfs.seq_compound(s, slot, &[])?;
        if q.status_flags & BAD_FLAGS == 0 || t0.elapsed() > Duration::from_secs(10) {
            break q;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if q2.status_flags & BAD_FLAGS != 0 {
        return Err(format!(
            "SEQUENCE status flags still {:#x} 10 s after BIND_CONN_TO_SESSION",
            q2.status_flags
        ));
    }
    Ok(format!(
        "Linux dropped the connection on a READ of {BUF} octets with a {BUF}-octet Reply chunk \
         ({failed}); the client reconnected ({reconnected} reconnect(s), backchannel receives \
         posted again); first SEQUENCE on the new connection: status flags {:#x}{}; \
         BIND_CONN_TO_SESSION(CDFC4_FORE_OR_BOTH) -> CDFS4_BOTH; SEQUENCE status flags {:#x} \
         {} ms later",
        q1.status_flags,
        if q1.status_flags & SEQ4_STATUS_CB_PATH_DOWN != 0 {
            " (SEQ4_STATUS_CB_PATH_DOWN: the backchannel went with the old connection)"
        } else {
            ""
        },
        q2.status_flags,
        t0.elapsed().as_millis()
    ))
}

/// Background forward traffic on one slot: READ of a delegated file with its open stateid.
#[derive(Default)]
struct Traffic {
    ok: u32,
    errors: Vec<String>,
    /// When each call completed.
    done: Vec<Instant>,
    /// The slowest call.
    slowest: Duration,
}

fn traffic(
    nfs: &Nfs<'_>,
    s: &Session,
    slot: u32,
    fh: &[u8],
    stateid: StateId,
    want: &[u8],
    stop: &AtomicBool,
) -> Traffic {
    let mut slot = Slot {
        id: slot,
        seq: lock(&s.traffic_seq)
            .get(slot as usize)
            .copied()
            .unwrap_or(1),
    };
    let mut out = Traffic::default();
    // Relaxed: a stop request; the results go back through the thread's join.
    while !stop.load(Ordering::Relaxed) {
        let ops = [
            Op::PutFh(fh),
            Op::ReadStateid {
                stateid,
                offset: 0,
                count: want.len() as u32,
            },
        ];
        let t0 = Instant::now();
        let r = nfs.seq_compound(s, &mut slot, &ops).and_then(|(r, _)| {
            ok(&r)?;
            match r.find(nfs4::op::READ).map(|o| &o.result) {
                Some(OpResult::Read { data, .. }) if data.as_slice() == want => Ok(()),
                other => Err(format!("READ returned {other:?}")),
            }
        });
        match r {
            Ok(()) => {
                out.ok += 1;
                out.done.push(Instant::now());
                out.slowest = out.slowest.max(t0.elapsed());
            }
            Err(e) => {
                out.errors.push(e);
                if out.errors.len() > 3 {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(q) = lock(&s.traffic_seq).get_mut(slot.id as usize) {
        *q = slot.seq;
    }
    out
}
