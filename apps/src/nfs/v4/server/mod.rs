//! An NFSv4.1 server (RFC 8881) over the same stores, exports, identities and sealed handles as
//! the NFSv3 server: COMPOUND with sessions, the slot table as reply cache, open state and
//! leases.
//!
//! Normal operation: [`Nfs41::compound`] reads COMPOUND4args, runs the operations in order
//! against a current and a saved file handle, and stops at the first that fails; the reply
//! carries each result run and the last status. A COMPOUND in a session starts with SEQUENCE
//! ([`session`]), whose slot keeps the whole reply: a retransmission with the slot's sequence
//! id gets those octets again without anything running a second time. Handles come from
//! PUTROOTFH (the export mounted as `/`, or the [`pseudo`] file system's root leading to the
//! exports the caller may see) or PUTFH (opened with the
//! handle key and admitted like an NFSv3 call: the export's client rules, squashing, `ro`);
//! the file operations ([`fileops`], [`open`]) call the [`Store`](crate::nfs::store::Store)
//! as the NFSv3 handlers do, attributes are mapped by [`attrs`].
//!
//! Recovery: a header that does not decode is GARBAGE_ARGS; a minor version other than 1 is
//! NFS4ERR_MINOR_VERS_MISMATCH with no results (RFC 8881 §16.2.3: the Linux client then
//! settles on 4.1); an operation whose arguments do not decode is NFS4ERR_BADXDR, an unknown
//! operation number NFS4ERR_OP_ILLEGAL, an operation this server does not implement
//! NFS4ERR_NOTSUPP; the first operation outside a session must be one that may be
//! (NFS4ERR_OP_NOT_IN_SESSION otherwise); the operation that would take a reply past the
//! session's bounds NFS4ERR_REP_TOO_BIG or NFS4ERR_REP_TOO_BIG_TO_CACHE
//! ([`session::ReplyMax`]). Leases expire ([`state::State::expire`]). After a
//! restart the clients of the previous run reclaim their state in a grace period
//! ([`grace`], [`clientdb`]); a client that lost its connection resumes its session on a new
//! one ([`reconnect`]).

pub mod attrs;
pub mod backchan;
pub mod clientdb;
pub mod deleg;
pub mod deleg_foreign;
pub mod deleg_local;
pub mod deleg_slots;
pub mod deleg_write;
pub mod fileops;
pub mod grace;
pub mod index;
pub mod laundromat;
pub mod lock;
pub mod open;
pub mod placed;
pub mod pseudo;
pub mod reconnect;
pub mod session;
pub mod state;
pub mod state_index;
pub mod stateid;
pub mod v42;
pub mod xattr;
pub mod xdr;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Instant;

use rpcrdma_engine::rpc::OpaqueAuth;
use rpcrdma_engine::xdr::{XdrError, XdrReader};
use rpcrdma_poller::metrics::{Collector, Exposition, Kind};
use rpcrdma_poller::{BufPool, Program, Reject, ReplyBuilder, Request};

use crate::nfs::admit::{ExportTable, Refusal, Share};
use crate::nfs::cross_locks::CrossLocks;
use crate::nfs::exports::ExportOptions;
use crate::nfs::handle_mac::siphash24;
use crate::nfs::identity::Cred;
use crate::nfs::store::memory::random8;
use crate::nfs::types::Fh;

use self::state::{Limits, State};
use self::xdr::{st, Enc, Status};
use super::op;

/// Longest COMPOUND tag accepted (Linux nfsd's NFSD4_MAX_TAGLEN).
pub const MAX_TAG: u32 = 128;
/// Most operations in a COMPOUND outside a session (a session has its `ca_maxoperations`).
pub const MAX_OPS: u32 = 16;

/// A clock in milliseconds (leases); tests pass their own.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Settings of the NFSv4.1 service.
#[derive(Clone)]
pub struct Config {
    /// Bounds of the state tables and the lease.
    pub limits: Limits,
    /// Largest READ or WRITE (`maxread` / `maxwrite`).
    pub max_io: u32,
    /// The clock leases are measured with.
    pub clock: Clock,
    /// Registered buffers READ data is placed from when the client offered a Write chunk
    /// (the server endpoint's, `Endpoint::buffers`); `None`: READ data goes inline.
    pub pool: Option<BufPool>,
    /// Sends callbacks (CB_NULL, CB_COMPOUND) on clients' back channels; `None`: as RFC 8167
    /// backward calls on the connection each session's back channel is bound to (a server
    /// without backchannel credits has none: every back channel is down and no delegation is
    /// granted).
    pub callbacks: Option<Arc<dyn deleg::Callbacks>>,
}

impl Default for Config {
    fn default() -> Self {
        let start = Instant::now();
        Config {
            limits: Limits::default(),
            max_io: 1 << 20,
            clock: Arc::new(move || start.elapsed().as_millis() as u64),
            pool: None,
            callbacks: None,
        }
    }
}

/// Who sent a COMPOUND and over which connection.
#[derive(Debug, Clone, Copy)]
pub struct CallCx<'a> {
    /// The client's address (export client rules).
    pub peer: IpAddr,
    /// The call's credential.
    pub cred: OpaqueAuth<'a>,
    /// The connection (a CREATE_SESSION asking for the backchannel binds it).
    pub conn: u64,
}

/// A file handle in a COMPOUND: its export, the caller's identity there, the store's handle.
#[derive(Clone)]
pub struct Cur {
    /// The export.
    pub share: Arc<Share>,
    /// Who the caller acts as in it.
    pub cred: Cred,
    /// The caller's options there (`ro`, `sec=`).
    pub opts: ExportOptions,
    /// The store's handle.
    pub fh: Fh,
}

/// The state of one COMPOUND being served.
pub struct Compound<'a> {
    /// The server.
    pub srv: &'a Nfs41,
    /// The COMPOUND's minor version (1 or 2).
    pub minor: u32,
    /// The caller.
    pub cx: CallCx<'a>,
    /// The export table the COMPOUND started with.
    pub table: Arc<ExportTable>,
    /// The current file handle.
    pub cur: Option<Cur>,
    /// The saved file handle.
    pub saved: Option<Cur>,
    /// The current file handle when it is a pseudo directory (its path; `cur` is `None`).
    pub pseudo: Option<String>,
    /// The saved file handle when it is a pseudo directory (`saved` is `None`).
    pub saved_pseudo: Option<String>,
    /// The session and slot of the SEQUENCE, and whether to cache the reply.
    pub slot: Option<([u8; 16], u32, bool)>,
    /// The client the session belongs to.
    pub client: Option<u64>,
    /// The current stateid (RFC 8881 §16.2.3.1.2).
    pub stateid: Option<[u8; 16]>,
    /// Operations in the COMPOUND.
    pub nops: u32,
    /// Octets of the arguments.
    pub args_len: usize,
    /// The request's digest ([`request_digest`]), kept in the slot it takes.
    pub digest: u64,
    /// Capacity of the Write chunk the client offered for a READ's data, if any.
    pub ddp_cap: Option<u32>,
    /// Where the first READ's data is in the reply (after its length word) and its length,
    /// when it goes through the Write chunk.
    pub read_at: Option<DdpAt>,
    /// The caller sends READ data from registered memory (the NFS program's handler): the
    /// first READ through the Write chunk leaves its data out of the reply, in `placed`.
    pub lend: bool,
    /// The first READ's data through the Write chunk, when it is not in the reply
    /// ([`placed`]).
    pub placed: Option<placed::Placed>,
    /// The LOCK4denied body of a LOCK or LOCKT that failed with NFS4ERR_DENIED.
    pub denied: Option<Vec<u8>>,
    /// A session whose back channel was just bound: probed with CB_NULL after the COMPOUND.
    pub probe: Option<[u8; 16]>,
    /// The reply bounds of the session (set by SEQUENCE; none outside a session).
    pub reply_max: Option<session::ReplyMax>,
    /// The operation running is a put-filehandle operation and SECINFO or SECINFO_NO_NAME
    /// follows it, or is SECINFO_NO_NAME looking up the parent: an export's flavor is not
    /// enforced (RFC 8881 §2.6.3.1.1.5).
    pub secinfo_next: bool,
    /// The operation running is PUTFH and LOOKUP or LOOKUPP follows it: a flavor the export
    /// does not take is left for that operation to refuse (RFC 8881 §2.6.3.1.1.3).
    pub lookup_next: bool,
    /// The current file handle was put with a flavor its export does not take, for the
    /// LOOKUP or LOOKUPP that follows to answer NFS4ERR_WRONGSEC ([`Compound::lookup_next`]).
    pub wrongsec_held: bool,
}

/// Where READ data sits in a COMPOUND reply (the offset after its length word) and its length.
pub type DdpAt = (usize, usize);

/// How a COMPOUND's first READ may use the call's Write chunk.
#[derive(Debug, Clone, Copy)]
struct Ddp {
    /// Capacity of the Write chunk, if one was offered.
    cap: Option<u32>,
    /// The caller places READ data from registered memory ([`Compound::lend`]).
    lend: bool,
}

/// What serving a COMPOUND left besides the reply.
#[derive(Debug, Default)]
struct Served {
    /// Where the first READ's data is in the reply, when it goes through the Write chunk.
    read_at: Option<DdpAt>,
    /// The first READ's data through the Write chunk, when the reply does not hold it.
    placed: Option<placed::Placed>,
    /// A slot kept the reply.
    kept: bool,
}

impl Compound<'_> {
    /// The current file handle, or NFS4ERR_NOFILEHANDLE.
    pub fn cur(&self) -> Result<&Cur, Status> {
        self.cur.as_ref().ok_or(st::NOFILEHANDLE)
    }

    /// Makes `fh` (a store handle of the current export) the current file handle.
    pub fn set_cur_fh(&mut self, fh: Fh) -> Result<(), Status> {
        let c = self.cur.as_mut().ok_or(st::NOFILEHANDLE)?;
        c.fh = fh;
        Ok(())
    }

    /// Admits the wire handle `fh` as the current file handle (a pseudo directory's or an
    /// export's).
    pub fn put_fh(&mut self, fh: &Fh) -> Result<(), Status> {
        let (id, inner) = self
            .table
            .key()
            .open(fh)
            .map_err(|s| refusal(Refusal::Status(s)))?;
        if id == self.table.pseudo_id() {
            return pseudo::put(self, &inner);
        }
        let (a, held) = match self.admit(id) {
            Err(st::WRONGSEC) if self.lookup_next => {
                let t = &self.table;
                (
                    t.admit_for_secinfo(id, self.cx.peer).map_err(refusal)?,
                    true,
                )
            }
            other => (other?, false),
        };
        self.set_real(Cur {
            opts: a.opts,
            share: a.share,
            cred: a.cred,
            fh: inner,
        });
        self.wrongsec_held = held;
        Ok(())
    }

    /// Admits the caller to the export whose handles carry `id`. A flavor the export does not
    /// take is NFS4ERR_WRONGSEC, except right before SECINFO or SECINFO_NO_NAME
    /// (`secinfo_next`), which then learns the export's flavors (RFC 8881 §2.6.3.1.1.5) under
    /// the anonymous identity; both consume the handle (§2.6.3.1.1.8), so nothing else runs
    /// with it.
    pub fn admit(&self, id: [u8; 4]) -> Result<crate::nfs::admit::Admitted, Status> {
        let t = &self.table;
        match t.admit_export(id, self.cx.peer, &self.cx.cred) {
            Err(Refusal::Auth(rpcrdma_engine::rpc::AuthStat::TooWeak)) if self.secinfo_next => {
                t.admit_for_secinfo(id, self.cx.peer).map_err(refusal)
            }
            other => other.map_err(refusal),
        }
    }

    /// Makes `cur` (in an export) the current file handle.
    pub fn set_real(&mut self, cur: Cur) {
        self.cur = Some(cur);
        self.pseudo = None;
        self.wrongsec_held = false;
    }

    /// Makes pseudo directory `path` the current file handle.
    pub fn set_pseudo(&mut self, path: String) {
        self.cur = None;
        self.pseudo = Some(path);
        self.wrongsec_held = false;
    }
}

/// The `nfsstat4` of an admission refusal: a flavor the export does not take is
/// NFS4ERR_WRONGSEC (the client then asks SECINFO_NO_NAME), a credential that does not
/// decode NFS4ERR_ACCESS.
pub fn refusal(r: Refusal) -> Status {
    match r {
        Refusal::Status(s) => xdr::from_store(s),
        Refusal::Auth(rpcrdma_engine::rpc::AuthStat::TooWeak) => st::WRONGSEC,
        Refusal::Auth(_) => st::ACCESS,
    }
}

/// The NFSv4.1 service of a set of exports.
pub struct Nfs41 {
    table: RwLock<Arc<ExportTable>>,
    state: Mutex<State>,
    cfg: Config,
    /// Tells this server's stateids and client ids from another run's.
    boot: [u8; 4],
    /// Keys the ids handed out, so that no client can guess another's session, client id or
    /// stateid.
    secret: (u64, u64),
    /// This server (the callbacks' done functions reach it through it).
    me: Weak<Nfs41>,
    /// The connections' backchannel handles.
    backs: backchan::Backs,
    /// The client records on stable storage and the grace period.
    recovery: grace::Recovery,
    /// Connections dropped instead of answering (fault injection).
    drops: reconnect::Drops,
    /// Grant write delegations ([`deleg_write`]).
    write_delegs: std::sync::atomic::AtomicBool,
    /// Grant no delegation at all ([`Nfs41::set_delegations`]).
    no_delegs: std::sync::atomic::AtomicBool,
    /// READs through a Write chunk ([`placed`]).
    reads: placed::ReadCounters,
    /// The NLM lock manager beside this server ([`lock::View`]).
    cross: std::sync::OnceLock<Arc<CrossLocks>>,
    /// Where NFSv3 and NLM accesses recall delegations ([`deleg_foreign`]).
    deleg_gate: Arc<deleg_foreign::Gate>,
    /// The watch of delegated files for processes on the host ([`deleg_local`]).
    local: std::sync::OnceLock<Arc<deleg_local::LocalWatch>>,
}

impl Collector for Nfs41 {
    fn collect(&self, e: &mut Exposition) {
        let s = self.state();
        let name = "rpcrdma_nfsd_nfs4_state";
        e.family(
            name,
            "NFSv4.1 state table sizes (RFC 8881): clients, sessions, opens, lock states, delegations.",
            Kind::Gauge,
        );
        e.sample(name, &[("table", "clients")], s.clients.len() as u64);
        e.sample(name, &[("table", "sessions")], s.sessions.len() as u64);
        e.sample(name, &[("table", "opens")], s.opens.len() as u64);
        e.sample(name, &[("table", "locks")], s.locks.len() as u64);
        e.sample(name, &[("table", "delegations")], s.delegs.len() as u64);
        let name = "rpcrdma_nfsd_nfs4_events_total";
        e.family(
            name,
            "NFSv4.1 state events: clients expired with their lease, entries refused at a table's bound, SEQUENCE retries answered from the slot, CB_RECALLs sent, DELEGRETURNs, delegations revoked, connections bound by BIND_CONN_TO_SESSION, reclaims accepted and refused, calls refused for the grace period, client records not kept (file full), record writes failed, connections dropped by fault injection.",
            Kind::Counter,
        );
        e.sample(
            name,
            &[("event", "clients_expired")],
            s.counters.clients_expired,
        );
        e.sample(name, &[("event", "refused_full")], s.counters.refused_full);
        e.sample(name, &[("event", "slot_replays")], s.counters.replays);
        e.sample(name, &[("event", "recalls")], s.counters.recalls);
        e.sample(name, &[("event", "delegreturns")], s.counters.delegreturns);
        e.sample(name, &[("event", "revoked")], s.counters.revoked);
        e.sample(name, &[("event", "binds")], s.counters.binds);
        drop(s);
        let rec = self.recovery_counters();
        let gauges = ["nfs4_grace", "nfs4_client_records"];
        for (k, v) in rec.iter().filter(|(k, _)| !gauges.contains(k)) {
            e.sample(name, &[("event", k.trim_start_matches("nfs4_"))], *v);
        }
        e.sample(name, &[("event", "dropped")], self.drops.dropped());
        for (k, v) in self.reads.get() {
            e.sample(name, &[("event", k.trim_start_matches("nfs4_"))], v);
        }
        let name = "rpcrdma_nfsd_nfs4_recovery";
        e.family(
            name,
            "NFSv4.1 restart recovery (RFC 8881 section 8.4): 1 within the grace period, client records on stable storage.",
            Kind::Gauge,
        );
        for (k, v) in rec.iter().filter(|(k, _)| gauges.contains(k)) {
            e.sample(name, &[("value", k.trim_start_matches("nfs4_"))], *v);
        }
    }
}

/// What SEQUENCE decided.
pub enum Seq {
    /// Run the rest of the COMPOUND.
    Go,
    /// A retransmission: the reply under construction was replaced by the slot's cached
    /// COMPOUND4res, to be sent as it is.
    Replay,
}

impl Nfs41 {
    /// Serves the exports of `table`.
    pub fn new(table: Arc<ExportTable>, cfg: Config) -> Arc<Nfs41> {
        let r = || u64::from_be_bytes(random8());
        let (boot, secret) = ((r() as u32).to_be_bytes(), (r(), r()));
        let state = State::default();
        let (slots, clock) = (Arc::clone(&state.deleg_slots), Arc::clone(&cfg.clock));
        Arc::new_cyclic(|me| Nfs41 {
            table: RwLock::new(table),
            state: Mutex::new(state),
            cfg,
            boot,
            secret,
            me: me.clone(),
            backs: backchan::Backs::default(),
            recovery: grace::Recovery::default(),
            drops: reconnect::Drops::default(),
            write_delegs: std::sync::atomic::AtomicBool::new(false),
            no_delegs: std::sync::atomic::AtomicBool::new(false),
            reads: placed::ReadCounters::default(),
            cross: std::sync::OnceLock::new(),
            deleg_gate: Arc::new(deleg_foreign::Gate::new(me.clone(), slots, clock)),
            local: std::sync::OnceLock::new(),
        })
    }

    /// Makes this server's locks and the NLM lock manager's registered with `cross` conflict
    /// with each other, and NFSv3 and NLM accesses reported there recall this server's
    /// delegations (once; a later registry is ignored).
    pub fn set_cross(&self, cross: Arc<CrossLocks>) {
        cross.set_v4(Arc::new(lock::View(self.me.clone())));
        cross.set_delegs(Arc::clone(&self.deleg_gate) as Arc<dyn crate::nfs::cross_locks::DelegView>);
        let _ = self.cross.set(cross);
    }

    /// The lock registry shared with the NLM lock manager, if any.
    pub(crate) fn cross(&self) -> Option<&CrossLocks> {
        self.cross.get().map(|c| &**c)
    }

    /// Serves `table` from the next COMPOUND on.
    pub fn set_exports(&self, table: Arc<ExportTable>) {
        match self.table.write() {
            Ok(mut g) => *g = table,
            Err(p) => *p.into_inner() = table,
        }
    }

    fn exports(&self) -> Arc<ExportTable> {
        match self.table.read() {
            Ok(t) => Arc::clone(&t),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// The state tables (locked).
    pub fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Now, in milliseconds of the configured clock.
    pub fn now_ms(&self) -> u64 {
        (self.cfg.clock)()
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters: table sizes and events, as `nfsd-stat` names.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.state();
        let mut v = vec![
            ("nfs4_clients", s.clients.len() as u64),
            ("nfs4_sessions", s.sessions.len() as u64),
            ("nfs4_opens", s.opens.len() as u64),
            ("nfs4_locks", s.locks.len() as u64),
            ("nfs4_delegations", s.delegs.len() as u64),
            ("nfs4_clients_expired", s.counters.clients_expired),
            ("nfs4_refused_full", s.counters.refused_full),
            ("nfs4_slot_replays", s.counters.replays),
            ("nfs4_recalls", s.counters.recalls),
            ("nfs4_delegreturns", s.counters.delegreturns),
            ("nfs4_revoked", s.counters.revoked),
            ("nfs4_binds", s.counters.binds),
        ];
        drop(s);
        v.extend(self.recovery_counters());
        v.push(("nfs4_dropped", self.drops.dropped()));
        v.extend(self.reads.get());
        v
    }

    /// Serves one COMPOUND: its reply (COMPOUND4res), or the XDR error that makes the call
    /// GARBAGE_ARGS (a header that does not decode).
    pub fn compound(&self, cx: &CallCx<'_>, args: &[u8]) -> Result<Vec<u8>, XdrError> {
        self.compound_ddp(cx, args, None).map(|(b, _)| b)
    }

    /// [`Nfs41::compound`] for a call that offered a Write chunk of `ddp_cap` octets: also
    /// where the first READ's data is in the reply (after its length word) and its length, so
    /// the caller sends it as a DDP item (RFC 8267 §5.3: READ data is DDP-eligible). A retry
    /// answered from a slot has its data inline.
    pub fn compound_ddp(
        &self,
        cx: &CallCx<'_>,
        args: &[u8],
        ddp_cap: Option<u32>,
    ) -> Result<(Vec<u8>, Option<DdpAt>), XdrError> {
        let mut reply = Vec::new();
        let at = self.compound_into(cx, args, ddp_cap, &mut reply)?;
        Ok((reply, at))
    }

    /// [`Nfs41::compound_ddp`] writing the reply into `reply`, which is cleared first and keeps
    /// its capacity: a caller that hands in the same buffer for every call (the NFS program's
    /// handler keeps one per thread) allocates nothing for replies once the buffer has grown
    /// to the largest. Returns where the first READ's data is, as [`Nfs41::compound_ddp`]
    /// does; after an error `reply` holds nothing of use.
    pub fn compound_into(
        &self,
        cx: &CallCx<'_>,
        args: &[u8],
        ddp_cap: Option<u32>,
        reply: &mut Vec<u8>,
    ) -> Result<Option<DdpAt>, XdrError> {
        let ddp = Ddp {
            cap: ddp_cap,
            lend: false,
        };
        self.serve(cx, args, ddp, reply).map(|s| s.read_at)
    }

    /// [`Nfs41::compound_into`], also saying whether a slot kept the reply (a retry answered
    /// from the slot is not such a reply) and, when `ddp.lend`, the READ data left out of it.
    fn serve(
        &self,
        cx: &CallCx<'_>,
        args: &[u8],
        ddp: Ddp,
        reply: &mut Vec<u8>,
    ) -> Result<Served, XdrError> {
        let mut out = Enc {
            b: std::mem::take(reply),
        };
        out.b.clear();
        let served = self.serve_enc(cx, args, ddp, &mut out);
        *reply = out.b;
        served
    }

    /// [`Nfs41::serve`] into the empty `out`.
    fn serve_enc(
        &self,
        cx: &CallCx<'_>,
        args: &[u8],
        ddp: Ddp,
        out: &mut Enc,
    ) -> Result<Served, XdrError> {
        let mut r = XdrReader::new(args);
        let tag = r.get_opaque(MAX_TAG)?;
        let minor = r.get_u32()?;
        let nops = r.get_u32()?;
        out.u32(0); // status, set at the end
        out.opaque(tag);
        let count_at = out.len();
        out.u32(0); // results, set at the end
        if !(1..=2).contains(&minor) {
            out.b[..4].copy_from_slice(&st::MINOR_VERS_MISMATCH.to_be_bytes());
            return Ok(Served::default());
        }
        self.sweep();
        let mut c = Compound {
            srv: self,
            minor,
            cx: *cx,
            table: self.exports(),
            cur: None,
            saved: None,
            pseudo: None,
            saved_pseudo: None,
            slot: None,
            client: None,
            stateid: None,
            nops,
            args_len: args.len(),
            digest: request_digest(self.secret, args, &cx.cred),
            ddp_cap: ddp.cap,
            read_at: None,
            lend: ddp.lend,
            placed: None,
            denied: None,
            probe: None,
            secinfo_next: false,
            lookup_next: false,
            wrongsec_held: false,
            reply_max: None,
        };
        let mut status = st::OK;
        let mut done = 0u32;
        for i in 0..nops {
            let opnum = r.get_u32().unwrap_or(op::ILLEGAL);
            let opnum = if opnum == op::ILLEGAL || !known(opnum, minor) {
                op::ILLEGAL
            } else {
                opnum
            };
            out.u32(opnum);
            let at = out.len();
            out.u32(st::OK);
            let s = if i == 0 && opnum == op::SEQUENCE {
                match session::sequence(&mut c, &mut r, out) {
                    Ok(Seq::Replay) => return Ok(Served::default()),
                    Ok(Seq::Go) => st::OK,
                    Err(s) => s,
                }
            } else if i >= MAX_OPS && c.slot.is_none() {
                st::TOO_MANY_OPS
            } else {
                let more = i + 1 < nops;
                match gate(&c, i, opnum, nops)
                    .and_then(|()| session::fits_before(&c, opnum, more, out.len()))
                    .and_then(|()| run(&mut c, opnum, &mut r, out))
                    .and_then(|()| session::fits_after(&c, out.len()))
                {
                    Ok(()) => st::OK,
                    Err(s) => s,
                }
            };
            done += 1;
            if s != st::OK {
                out.b.truncate(at);
                if c.read_at.is_some_and(|(p, _)| p >= at) {
                    c.read_at = None; // a READ the reply had no room for
                }
                if c.placed.as_ref().is_some_and(|p| p.at >= at) {
                    c.placed = None; // likewise, its data left in registered memory
                }
                out.u32(s);
                if opnum == op::SETATTR {
                    out.u32(0); // SETATTR4res carries `attrsset` whatever the status
                }
                if let (lock::DENIED, Some(d)) = (s, c.denied.take()) {
                    out.fixed(&d); // LOCK4res / LOCKT4res carry LOCK4denied
                }
                status = s;
                break;
            }
        }
        out.b[..4].copy_from_slice(&status.to_be_bytes());
        out.b[count_at..count_at + 4].copy_from_slice(&done.to_be_bytes());
        let data = c.placed.as_ref().map(|p| (p.at, p.bytes()));
        let kept = session::keep_reply(&c, &out.b, data);
        self.settle();
        if let Some(sid) = c.probe {
            self.probe_back_channel(sid);
            self.resend_recalls(sid);
        }
        Ok(Served {
            read_at: c.read_at,
            placed: c.placed,
            kept,
        })
    }

    /// NFS program 100003 version 4 with COMPOUND (NULL is the server's own): a header that
    /// does not decode is GARBAGE_ARGS; the reply is written as one piece (a reply larger than
    /// the client can receive is the transport's to refuse, RFC 8166 §3.5.3).
    pub fn program(self: &Arc<Self>) -> Program {
        let me = Arc::clone(self);
        Program::new(super::PROGRAM, super::VERSION..=super::VERSION).procedure(
            super::PROC_COMPOUND,
            move |req: &Request<'_>, out: &mut ReplyBuilder<'_>| me.answer(req, out),
        )
    }

    /// Serves one COMPOUND call of the NFS program into `out`, building the reply in this
    /// thread's reply buffer ([`REPLY`]).
    fn answer(&self, req: &Request<'_>, out: &mut ReplyBuilder<'_>) -> Result<(), Reject> {
        if let Some(b) = req.backchannel() {
            self.backs.note(req.transport.conn_id, b);
        }
        let cx = CallCx {
            peer: req.transport.peer.ip(),
            cred: req.cred,
            conn: req.transport.conn_id,
        };
        let ddp = Ddp {
            cap: req
                .write_chunks
                .first()
                .copied()
                .filter(|_| self.cfg.pool.is_some()),
            lend: true,
        };
        REPLY.with(|reply| {
            // A handler that re-entered on this thread (none does) would get a buffer of its
            // own instead of this one.
            let mut own = Vec::new();
            let mut kept_buf = reply.try_borrow_mut();
            let reply = kept_buf.as_deref_mut().unwrap_or(&mut own);
            let s = self
                .serve(&cx, req.args, ddp, reply)
                .map_err(|_| Reject::GarbageArgs)?;
            let sent = if s.kept && self.drops.after_cached() {
                Err(Reject::Disconnect)
            } else {
                let pool = self.cfg.pool.as_ref();
                placed::send(&self.reads, pool, out, reply, s.read_at, s.placed)
            };
            // A reply larger than one READ's worth (several READs in one COMPOUND)
            // does not keep its memory with the thread.
            let keep = self.cfg.max_io.saturating_add(session::HEADROOM) as usize;
            if reply.capacity() > keep {
                *reply = Vec::new();
            }
            sent
        })
    }

    /// 64 unpredictable bits for id number `n` of kind `lane` (SipHash under this run's
    /// secret: distinct for distinct inputs, unguessable without the secret).
    pub fn mint(&self, n: u64, lane: u8) -> u64 {
        let mut m = [0u8; 9];
        m[..8].copy_from_slice(&n.to_be_bytes());
        m[8] = lane;
        siphash24(self.secret.0, self.secret.1, &m)
    }

    /// A new stateid `other`: this run's verifier and 64 unpredictable bits.
    pub fn new_other(&self, s: &mut State) -> [u8; 12] {
        loop {
            let mut o = [0u8; 12];
            o[..4].copy_from_slice(&self.boot);
            let n = s.fresh();
            o[4..].copy_from_slice(&self.mint(n, 2).to_be_bytes());
            if !s.opens.contains_key(&o) && !s.locks.contains_key(&o) && !s.delegs.contains_key(&o)
            {
                return o;
            }
        }
    }

    /// A new session id: this run's verifier and 96 unpredictable bits.
    pub fn new_session_id(&self, s: &mut State) -> [u8; 16] {
        loop {
            let n = s.fresh();
            let mut sid = [0u8; 16];
            sid[..4].copy_from_slice(&self.boot);
            sid[4..8].copy_from_slice(&(self.mint(n, 1) as u32).to_be_bytes());
            sid[8..].copy_from_slice(&self.mint(n, 0).to_be_bytes());
            if !s.sessions.contains_key(&sid) {
                return sid;
            }
        }
    }

    /// A new client id: this run's verifier in the high half, 32 unpredictable bits below.
    pub fn new_client_id(&self, s: &mut State) -> u64 {
        loop {
            let n = s.fresh();
            let id = (u64::from(u32::from_be_bytes(self.boot)) << 32) | (self.mint(n, 3) >> 32);
            if !s.clients.contains_key(&id) {
                return id;
            }
        }
    }

    /// This run's verifier (in client ids, stateids and the server owner).
    pub fn boot(&self) -> [u8; 4] {
        self.boot
    }
}

thread_local! {
    /// The COMPOUND reply buffer of this thread (a reactor or a worker): reused by every call
    /// the thread serves, so that a reply is built without allocating once the buffer has
    /// grown to the largest reply the thread built; a capacity above `max_io` + 8 KiB is
    /// given back after the call.
    static REPLY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether operation `opnum` may run at position `i`: SEQUENCE only first; outside a
/// session only the operations RFC 8881 §2.10.6.4 allows, alone.
fn gate(c: &Compound<'_>, i: u32, opnum: u32, nops: u32) -> Result<(), Status> {
    if opnum == op::SEQUENCE {
        return Err(st::SEQUENCE_POS);
    }
    if c.slot.is_some() || opnum == op::ILLEGAL {
        return Ok(());
    }
    let sessionless = matches!(
        opnum,
        op::EXCHANGE_ID
            | op::CREATE_SESSION
            | op::DESTROY_SESSION
            | op::DESTROY_CLIENTID
            | op::BIND_CONN_TO_SESSION
    );
    if i == 0 && sessionless {
        if nops > 1 {
            return Err(st::NOT_ONLY_OP);
        }
        return Ok(());
    }
    Err(st::OP_NOT_IN_SESSION)
}

/// Octets of a request's arguments [`request_digest`] reads: enough for the operations of any
/// COMPOUND a session allows, not the data of a WRITE.
pub const DIGEST_PREFIX: usize = 1024;

/// What tells a retransmission from a false retry (RFC 8881 §2.10.6.1.3.1): SipHash under
/// `key` of the arguments' length, their first [`DIGEST_PREFIX`] octets and the call's
/// credential (Linux nfsd's `replay_matches_cache` also requires the same credential). A
/// retransmission repeats all of it; another request on the slot almost always differs
/// (two that differ only in WRITE data past the prefix are not told apart, which the RFC
/// allows).
///
/// The message is put together on the stack (a credential body is at most
/// [`MAX_AUTH_BYTES`](rpcrdma_engine::rpc::MAX_AUTH_BYTES) octets, RFC 5531 §8.2; a longer one,
/// which the RPC decoder never passes, counts with its length and first octets).
pub fn request_digest(key: (u64, u64), args: &[u8], cred: &OpaqueAuth<'_>) -> u64 {
    const AUTH: usize = rpcrdma_engine::rpc::MAX_AUTH_BYTES as usize;
    let head = &args[..args.len().min(DIGEST_PREFIX)];
    let body = &cred.body[..cred.body.len().min(AUTH)];
    let mut m = [0u8; 16 + AUTH + DIGEST_PREFIX];
    m[..8].copy_from_slice(&(args.len() as u64).to_be_bytes());
    m[8..12].copy_from_slice(&cred.flavor.to_u32().to_be_bytes());
    m[12..16].copy_from_slice(&(cred.body.len() as u32).to_be_bytes());
    m[16..16 + body.len()].copy_from_slice(body);
    let end = 16 + body.len() + head.len();
    m[16 + body.len()..end].copy_from_slice(head);
    siphash24(key.0, key.1, &m[..end])
}

/// True for the operation numbers of minor version `minor`: RFC 8881 §18 (3..=58), and in
/// minor version 2 those of RFC 7862 and RFC 8276 (up to 75); everything else is ILLEGAL.
/// Minor version 2's operations this server does not implement are NOTSUPP ([`run`]).
fn known(opnum: u32, minor: u32) -> bool {
    (3..=58).contains(&opnum) || (minor >= 2 && (59..=op::LAST_V42).contains(&opnum))
}

/// Whether operation `opnum`, whose arguments `r` starts at, is PUTFH or PUTROOTFH and the
/// next operation is SECINFO or SECINFO_NO_NAME (looked ahead on a copy of the reader).
fn secinfo_next(opnum: u32, r: &XdrReader<'_>) -> bool {
    matches!(next_op(opnum, r), Some(op::SECINFO_NO_NAME | op::SECINFO))
}

/// The number of the operation after PUTFH or PUTROOTFH (`opnum`, whose arguments `r` starts
/// at), when there is one.
fn next_op(opnum: u32, r: &XdrReader<'_>) -> Option<u32> {
    let mut ahead = *r;
    match opnum {
        op::PUTROOTFH => {}
        op::PUTFH => {
            ahead.get_opaque(fileops::FHSIZE4).ok()?;
        }
        _ => return None,
    }
    ahead.get_u32().ok()
}

/// Runs one operation (not SEQUENCE) and writes its result body.
fn run(
    c: &mut Compound<'_>,
    opnum: u32,
    r: &mut XdrReader<'_>,
    out: &mut Enc,
) -> Result<(), Status> {
    c.secinfo_next = secinfo_next(opnum, r);
    c.lookup_next =
        opnum == op::PUTFH && matches!(next_op(opnum, r), Some(op::LOOKUP | op::LOOKUPP));
    if let Some(p) = c.pseudo.clone() {
        if let Some(done) = pseudo::run(c, &p, opnum, r, out) {
            return done;
        }
    }
    match opnum {
        op::ILLEGAL => Err(st::OP_ILLEGAL),
        op::EXCHANGE_ID => session::exchange_id(c, r, out),
        op::CREATE_SESSION => session::create_session(c, r, out),
        op::DESTROY_SESSION => session::destroy_session(c, r),
        op::DESTROY_CLIENTID => session::destroy_clientid(c, r),
        op::RECLAIM_COMPLETE => session::reclaim_complete(c, r),
        op::BIND_CONN_TO_SESSION => session::bind_conn_to_session(c, r, out),
        op::BACKCHANNEL_CTL => session::backchannel_ctl(c, r),
        op::TEST_STATEID => open::test_stateid(c, r, out),
        op::FREE_STATEID => open::free_stateid(c, r),
        op::SECINFO => fileops::secinfo(c, r, out),
        op::SECINFO_NO_NAME => fileops::secinfo_no_name(c, r, out),
        op::PUTROOTFH => pseudo::putrootfh(c),
        op::PUTFH => fileops::putfh(c, r),
        op::GETFH => fileops::getfh(c, out),
        op::SAVEFH => fileops::savefh(c),
        op::RESTOREFH => fileops::restorefh(c),
        op::LOOKUP => fileops::lookup(c, r),
        op::LOOKUPP => fileops::lookupp(c),
        op::GETATTR => deleg_write::getattr_conflict(c, r).and_then(|()| attrs::getattr(c, r, out)),
        op::VERIFY | op::NVERIFY => {
            deleg_write::getattr_conflict(c, r).and_then(|()| attrs::verify(c, opnum, r, out))
        }
        op::ACCESS => fileops::access(c, r, out),
        op::READDIR => fileops::readdir(c, r, out),
        op::READLINK => fileops::readlink(c, out),
        op::READ => fileops::read(c, r, out),
        op::WRITE => fileops::write(c, r, out),
        op::COMMIT => fileops::commit(c, r, out),
        op::REMOVE => fileops::remove(c, r, out),
        op::RENAME => fileops::rename(c, r, out),
        op::LINK => fileops::link(c, r, out),
        op::SETATTR => fileops::setattr(c, r, out),
        op::CREATE => fileops::create(c, r, out),
        op::OPEN => open::open(c, r, out),
        op::CLOSE => open::close(c, r, out),
        op::OPEN_DOWNGRADE => open::open_downgrade(c, r, out),
        op::LOCK => lock::lock(c, r, out),
        op::LOCKT => lock::lockt(c, r),
        op::LOCKU => lock::locku(c, r, out),
        op::DELEGRETURN => deleg::delegreturn(c, r),
        op::ALLOCATE => v42::allocate(c, r, false),
        op::DEALLOCATE => v42::allocate(c, r, true),
        op::SEEK => v42::seek(c, r, out),
        op::COPY => v42::copy(c, r, out),
        op::CLONE => v42::clone(c, r),
        op::GETXATTR => xattr::getxattr(c, r, out),
        op::SETXATTR => xattr::setxattr(c, r, out),
        op::LISTXATTRS => xattr::listxattrs(c, r, out),
        op::REMOVEXATTR => xattr::removexattr(c, r, out),
        _ => Err(st::NOTSUPP),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cbsec;
#[cfg(test)]
mod tests_cinfo;
#[cfg(test)]
mod tests_clone;
#[cfg(test)]
mod tests_cross;
#[cfg(test)]
mod tests_deleg;
#[cfg(test)]
mod tests_foreign;
#[cfg(test)]
mod tests_grace;
#[cfg(test)]
mod tests_index;
#[cfg(test)]
mod tests_local;
#[cfg(test)]
mod tests_lock;
#[cfg(test)]
mod tests_open;
#[cfg(test)]
mod tests_ops;
#[cfg(test)]
mod tests_pseudo;
#[cfg(test)]
mod tests_readdir;
#[cfg(test)]
mod tests_reply;
#[cfg(test)]
mod tests_sec;
#[cfg(test)]
mod tests_secinfo;
#[cfg(test)]
mod tests_seq;
#[cfg(test)]
mod tests_umask;
#[cfg(test)]
mod tests_v42;
#[cfg(test)]
mod tests_verify;
#[cfg(test)]
mod tests_view;
#[cfg(test)]
mod tests_wdeleg;
#[cfg(test)]
mod tests_xattr;
