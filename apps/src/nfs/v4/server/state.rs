//! NFSv4.1 server state (RFC 8881 §2.10, §8, §9): client records, sessions with their slot
//! tables (which are the reply cache), open states, and leases; every table bounded.
//!
//! Normal operation: EXCHANGE_ID makes an unconfirmed client record, the first CREATE_SESSION
//! confirms it and adds a session whose slot table has the negotiated number of slots, each
//! holding the last sequence id seen and the reply sent for it. Every SEQUENCE renews the
//! client's lease. OPEN adds an open state (its stateid's `other` names it), CLOSE removes it
//! with the lock states that came from it (LOCK adds them, one per lock owner and open). A read
//! OPEN may add a delegation ([`super::deleg`]); DELEGRETURN removes it. Every state is
//! also indexed by its file, every client by its address and owner ([`super::index`]), so
//! that no operation walks a whole table.
//!
//! Recovery: a client that sends nothing for a lease period is expired by [`State::expire`]
//! (run before every COMPOUND): its sessions, open and lock states are removed, so its session ids
//! answer NFS4ERR_BADSESSION and its stateids NFS4ERR_BAD_STATEID. A delegation recalled and not
//! returned within the lease is revoked by the same pass. A table at its bound
//! refuses the new entry (NFS4ERR_RESOURCE / NFS4ERR_DELAY) instead of growing; one address
//! holds at most `clients_per_peer` of the client records, so it cannot take them all, and
//! its clients together at most `opens_per_peer` open and `locks_per_peer` lock states.

use std::collections::HashMap;
use std::net::IpAddr;

use rpcrdma_poller::CredBody;

use crate::nfs::types::Fh;

use super::index::Index;
use super::xdr::{st, Status};

/// Bounds of the state tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client records (confirmed or not).
    pub clients: usize,
    /// Client records made from one address (so that no address takes every record).
    pub clients_per_peer: usize,
    /// Sessions per client.
    pub sessions_per_client: usize,
    /// Slots per session (`ca_maxrequests` is clamped to it).
    pub slots: u32,
    /// Largest reply kept in a slot (`ca_maxresponsesize_cached` is clamped to it).
    pub cached_reply: u32,
    /// Octets the slots of all sessions may keep together: CREATE_SESSION reserves its slots
    /// times its `ca_maxresponsesize_cached`, grants fewer slots when what is left does not
    /// cover them, and NFS4ERR_DELAY when not one fits (as Linux nfsd bounds its reply
    /// cache memory); DESTROY_SESSION and the client's removal give the reservation back.
    pub cached_replies: usize,
    /// Open states per client.
    pub opens_per_client: usize,
    /// Lock states (one per lock owner and open) per client.
    pub locks_per_client: usize,
    /// Open states of all the clients one address made (`clients_per_peer` times
    /// `opens_per_client` would let one address hold hundreds of thousands: memory, and
    /// the states an OPEN or LOCK of a file they all hold looks at under the state lock).
    pub opens_per_peer: usize,
    /// Lock states of all the clients one address made.
    pub locks_per_peer: usize,
    /// Byte ranges one lock state holds.
    pub ranges_per_lock: usize,
    /// Lease period in seconds (`lease_time`).
    pub lease_secs: u32,
    /// Delegations per client.
    pub delegs_per_client: usize,
    /// Delegations in all.
    pub delegs: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            clients: 1024,
            clients_per_peer: 64,
            sessions_per_client: 4,
            slots: 64,
            cached_reply: 8 << 10,
            cached_replies: 64 << 20,
            opens_per_client: 4096,
            locks_per_client: 4096,
            opens_per_peer: 16384,
            locks_per_peer: 16384,
            ranges_per_lock: 256,
            lease_secs: 90,
            delegs_per_client: 1024,
            delegs: 16384,
        }
    }
}

/// `channel_attrs4` as negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Channel {
    /// `ca_headerpadsize` (always 0 here).
    pub header_pad: u32,
    /// `ca_maxrequestsize`.
    pub max_request: u32,
    /// `ca_maxresponsesize`.
    pub max_response: u32,
    /// `ca_maxresponsesize_cached`.
    pub max_response_cached: u32,
    /// `ca_maxoperations`.
    pub max_ops: u32,
    /// `ca_maxrequests`.
    pub max_requests: u32,
}

/// What a slot remembers of its last request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached {
    /// No request yet.
    Empty,
    /// The request is being served: a retry gets NFS4ERR_DELAY.
    InProgress,
    /// The whole COMPOUND4res sent for the slot's sequence id is in [`Slot::kept`].
    Reply,
    /// The reply was not kept (`sa_cachethis` false or too big): a retry gets
    /// NFS4ERR_RETRY_UNCACHED_REP.
    Uncached,
}

/// One slot of a session's fore channel.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The last sequence id accepted.
    pub seq: u32,
    /// The digest of that request ([`super::request_digest`]): a retry with another one is a
    /// false retry.
    pub digest: u64,
    /// Its reply.
    pub reply: Cached,
    /// The octets of the reply when `reply` is [`Cached::Reply`]; the buffer stays with the
    /// slot (at most `ca_maxresponsesize_cached` octets), so keeping a reply does not
    /// allocate once it has grown.
    pub kept: Vec<u8>,
}

/// A session.
#[derive(Debug)]
pub struct Session {
    /// The owning client.
    pub client: u64,
    /// Fore channel attributes.
    pub fore: Channel,
    /// Backchannel attributes.
    pub back: Channel,
    /// The callback program the client named.
    pub cb_program: u32,
    /// The connection bound to the backchannel (CREATE_SESSION4_FLAG_CONN_BACK_CHAN), if any.
    pub back_conn: Option<u64>,
    /// The slot table.
    pub slots: Vec<Slot>,
    /// The sequence id of the backchannel's slot 0 (CB_SEQUENCE) last sent.
    pub cb_seq: u32,
    /// The back channel failed (CB_NULL or a callback got no answer) and no connection was
    /// bound to it since.
    pub cb_down: bool,
    /// The credential callbacks carry: the one the client gave in `csa_sec_parms` (or
    /// BACKCHANNEL_CTL's `bca_sec_parms`) that this server can use (RFC 8881 §18.36.3);
    /// `None` when it offered none (RPCSEC_GSS only): no callbacks, the path is down.
    pub cb_cred: Option<CredBody>,
}

impl Session {
    /// The octets its slots may keep (reserved against `cached_replies`).
    pub fn reserved(&self) -> usize {
        self.fore.max_requests as usize * self.fore.max_response_cached as usize
    }

    /// The connection callbacks go on, when the back channel is usable.
    pub fn cb_conn(&self) -> Option<u64> {
        self.back_conn
            .filter(|_| !self.cb_down && self.cb_cred.is_some())
    }
}

/// A read or write delegation (RFC 8881 §10.2).
#[derive(Debug, Clone)]
pub struct Deleg {
    /// The holder.
    pub client: u64,
    /// The export (its handle id).
    pub export: [u8; 4],
    /// The store's handle of the file.
    pub fh: Fh,
    /// The wire handle of the file (CB_RECALL names it).
    pub wire_fh: Vec<u8>,
    /// The stateid's seqid.
    pub seqid: u32,
    /// When CB_RECALL was sent (milliseconds of the server's clock), if it was.
    pub recalled_ms: Option<u64>,
    /// A write delegation (OPEN_DELEGATE_WRITE); a read delegation otherwise.
    pub write: bool,
}

/// A client record.
#[derive(Debug)]
pub struct Client {
    /// `co_ownerid`.
    pub owner: Vec<u8>,
    /// `co_verifier`.
    pub verifier: [u8; 8],
    /// The minor version of its EXCHANGE_ID's COMPOUND, which its CB_COMPOUNDs carry (the
    /// Linux client finds a callback's session only among its clients of that minor version).
    pub minor: u32,
    /// The address its EXCHANGE_ID came from (counted against `clients_per_peer`).
    pub peer: IpAddr,
    /// The principal of its EXCHANGE_ID ([`super::clientdb::principal`]).
    pub principal: Vec<u8>,
    /// Confirmed by a CREATE_SESSION.
    pub confirmed: bool,
    /// The next CREATE_SESSION's `csa_sequence`.
    pub cs_seq: u32,
    /// The last CREATE_SESSION reply (its replay answer).
    pub cs_reply: Option<Vec<u8>>,
    /// When the lease was last renewed (milliseconds of the server's clock).
    pub renewed_ms: u64,
    /// RECLAIM_COMPLETE seen.
    pub reclaim_done: bool,
    /// Its sessions.
    pub sessions: Vec<[u8; 16]>,
    /// Its open states (`other` of their stateids).
    pub opens: Vec<[u8; 12]>,
    /// Its lock states (`other` of their stateids).
    pub locks: Vec<[u8; 12]>,
    /// Its delegations (`other` of their stateids).
    pub delegs: Vec<[u8; 12]>,
    /// Its delegations revoked and not yet freed by FREE_STATEID (bounded by
    /// `delegs_per_client`).
    pub revoked: Vec<[u8; 12]>,
}

/// An open state.
#[derive(Debug, Clone)]
pub struct OpenState {
    /// The owning client.
    pub client: u64,
    /// The open owner.
    pub owner: Vec<u8>,
    /// The export (its handle id) and the store's handle of the file.
    pub export: [u8; 4],
    /// The store's handle.
    pub fh: Fh,
    /// OPEN4_SHARE_ACCESS_* bits.
    pub access: u32,
    /// OPEN4_SHARE_DENY_* bits.
    pub deny: u32,
    /// The stateid's current seqid.
    pub seqid: u32,
}

/// One locked byte range: `[offset, end)`, `end` `u64::MAX` meaning to the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// First octet.
    pub offset: u64,
    /// One past the last octet (`u64::MAX`: no end).
    pub end: u64,
    /// An exclusive (write) lock; shared (read) otherwise.
    pub write: bool,
}

/// A lock state: one lock owner's byte-range locks on the file of one open.
#[derive(Debug, Clone)]
pub struct LockState {
    /// The owning client.
    pub client: u64,
    /// The lock owner.
    pub owner: Vec<u8>,
    /// The open state it came from (`other`).
    pub open: [u8; 12],
    /// The export (its handle id).
    pub export: [u8; 4],
    /// The store's handle of the file.
    pub fh: Fh,
    /// The stateid's current seqid.
    pub seqid: u32,
    /// The ranges held, not overlapping one another.
    pub ranges: Vec<Range>,
}

/// Every table of the server.
#[derive(Debug, Default)]
pub struct State {
    /// Clients by id.
    pub clients: HashMap<u64, Client>,
    /// Sessions by id.
    pub sessions: HashMap<[u8; 16], Session>,
    /// Open states by `other` (added and removed only through the methods that keep
    /// [`State::index`], as are the lock states, delegations and clients).
    pub opens: HashMap<[u8; 12], OpenState>,
    /// Lock states by `other`.
    pub locks: HashMap<[u8; 12], LockState>,
    /// Delegations by `other`.
    pub delegs: HashMap<[u8; 12], Deleg>,
    /// Numbers clients, sessions and stateids.
    pub next: u64,
    /// Octets the sessions' slots may keep, together ([`Session::reserved`]).
    pub replies_reserved: usize,
    /// Clients expired, sessions destroyed, etc. (counters).
    pub counters: Counters,
    /// The tables indexed by file, address, owner and recall time.
    pub index: Index,
    /// Delegations held per slot of files, read without this state's mutex by NFSv3 and NLM
    /// accesses ([`super::deleg_foreign`]).
    pub deleg_slots: std::sync::Arc<super::deleg_slots::Slots>,
    /// Owners of the clients removed since [`super::Nfs41::settle`] last took them (their
    /// stable-storage records go; drained after every COMPOUND and every sweep).
    pub gone: Vec<Vec<u8>>,
    /// Files whose lock states went with their client since [`super::Nfs41::settle`] last
    /// took them (the NLM lock manager is told: its requests waiting for them may go on).
    pub released: Vec<super::index::FileKey>,
}

/// What the state tables counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Client records expired with their lease.
    pub clients_expired: u64,
    /// Entries refused because a table was full.
    pub refused_full: u64,
    /// SEQUENCE retransmissions answered from a slot.
    pub replays: u64,
    /// CB_RECALLs sent.
    pub recalls: u64,
    /// Delegations returned by DELEGRETURN.
    pub delegreturns: u64,
    /// Delegations revoked (not returned within the lease after a recall).
    pub revoked: u64,
    /// Connections bound to a session by BIND_CONN_TO_SESSION.
    pub binds: u64,
}

impl State {
    /// A fresh number (never 0).
    pub fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Removes every client whose lease ran out at `now_ms`, with its sessions and opens, and
    /// revokes the delegations recalled and not returned within the lease. Looks at the
    /// clients only when the oldest renewal may be that old, and at the recalled delegations
    /// only ([`Index`]).
    pub fn expire(&mut self, now_ms: u64, lease_secs: u32) {
        let lease = u64::from(lease_secs) * 1000;
        if self.index.lease_due(now_ms, lease) {
            self.index.visited(self.clients.len() as u64);
            let dead: Vec<u64> = self
                .clients
                .iter()
                .filter(|(_, c)| now_ms.saturating_sub(c.renewed_ms) > lease)
                .map(|(id, _)| *id)
                .collect();
            for id in dead {
                self.remove_client(id);
                self.counters.clients_expired += 1;
            }
            let floor = self.clients.values().map(|c| c.renewed_ms).min();
            self.index.set_renew_floor(floor);
        }
        while let Some(d) = self.index.take_late_recall(now_ms, lease) {
            self.revoke_deleg(&d);
        }
    }

    /// Revokes delegation `other`: its holder sees SEQ4_STATUS_RECALLABLE_STATE_REVOKED and
    /// NFS4ERR_DELEG_REVOKED for the stateid until it frees it.
    pub fn revoke_deleg(&mut self, other: &[u8; 12]) {
        let Some(d) = self.delegs.remove(other) else {
            return;
        };
        self.unfile_deleg(other, &d);
        self.counters.revoked += 1;
        if let Some(cl) = self.clients.get_mut(&d.client) {
            cl.delegs.retain(|x| x != other);
            cl.revoked.push(*other);
        }
    }

    /// Removes delegation `other` (returned or freed).
    pub fn remove_deleg(&mut self, other: &[u8; 12]) {
        if let Some(d) = self.delegs.remove(other) {
            self.unfile_deleg(other, &d);
            if let Some(cl) = self.clients.get_mut(&d.client) {
                cl.delegs.retain(|x| x != other);
            }
        }
    }

    /// Removes client `id` with everything it holds.
    pub fn remove_client(&mut self, id: u64) {
        if let Some(c) = self.clients.remove(&id) {
            self.gone.push(c.owner.clone());
            for s in &c.sessions {
                self.remove_session(s);
            }
            self.remove_client_states(id, &c);
        }
    }

    /// Removes session `sid` from the table (its client's list is the caller's), giving its
    /// reply cache reservation back.
    pub fn remove_session(&mut self, sid: &[u8; 16]) {
        if let Some(v) = self.sessions.remove(sid) {
            self.replies_reserved = self.replies_reserved.saturating_sub(v.reserved());
        }
    }

    /// The open and lock states held by the clients made from the address client `id` was
    /// made from (at most `clients_per_peer` records to add up).
    pub fn peer_load(&self, id: u64) -> (usize, usize) {
        let Some(peer) = self.clients.get(&id).map(|c| c.peer) else {
            return (0, 0);
        };
        self.index
            .peer_clients(&peer)
            .iter()
            .filter_map(|x| self.clients.get(x))
            .fold((0, 0), |(o, l), c| (o + c.opens.len(), l + c.locks.len()))
    }

    /// The session `sid` and a mutable view of its client's lease.
    pub fn session(&mut self, sid: &[u8; 16]) -> Result<&mut Session, Status> {
        self.sessions.get_mut(sid).ok_or(st::BADSESSION)
    }

    /// Renews the lease of `client` at `now_ms`.
    pub fn renew(&mut self, client: u64, now_ms: u64) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.renewed_ms = now_ms;
            self.index.renewed(now_ms);
        }
    }

    /// Removes open state `other` and the lock states that came from it.
    pub fn remove_open(&mut self, other: &[u8; 12]) {
        let Some(o) = self.opens.remove(other) else {
            return;
        };
        // Its lock states are on its file (and of its client).
        let gone = self.unfile_open(other, &(o.export, o.fh));
        if let Some(cl) = self.clients.get_mut(&o.client) {
            cl.opens.retain(|x| x != other);
            if gone > 0 {
                let locks = &self.locks;
                cl.locks.retain(|x| locks.contains_key(x));
            }
        }
    }

    /// The open state named by `other`.
    pub fn open(&self, other: &[u8; 12]) -> Option<&OpenState> {
        self.opens.get(other)
    }
}
