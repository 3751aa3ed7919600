//! Sessions of backward calls (RFC 8167, as NFSv4.1 uses them) and the server side's shared
//! backchannel state: the server's session table and backward XID space ([`BackServer`]), a
//! session and the connection bound to it ([`SessionState`]), each connection's submission
//! ring and flags ([`ConnBackShared`]), the public handle handlers get ([`BackChannel`]), and
//! the grace period a lost connection holds its session for ([`Grace`]).
//!
//! Normal operation: the upper layer binds a connection to a session ([`BackChannel::bind`]);
//! a backward call for the session ([`SessionState::submit`]) goes to the connection bound
//! last, through its MPSC ring, to its reactor (the reactor side is
//! [`crate::backchannel`]'s `ServerBack`). Recovery: a lost connection stays the session's
//! holder and keeps its calls; its grace timer ([`Grace`], `ServerOptions::session_grace_ms`)
//! closes the session when no connection binds it in time ([`BackServer::expire`], under the
//! session's lock, so a racing bind either wins or finds the session gone). A bind before the
//! expiry makes the new connection the holder and the calls move to it with the same XIDs;
//! closing a session fails its calls with [`ClientError::SessionClosed`].

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#![allow(clippy::result_large_err)]

use crate::doorbell::Waker;
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rpcrdma_engine::conn::CallError;

use crate::api_stats::ConnStats;
use crate::call::{blocking, CallArgs, Callback, ClientError, OnReply, Proc, Refused, Reply};
use crate::config::{CallbackMode, EndpointConfig, ServerOptions};
use crate::memory::BufPool;
use crate::mpsc::{MpscConsumer, MpscProducer};
use crate::reactor::PollerCtx;
use crate::timer::TimerHandle;

// ---------------------------------------------------------------------------------------------
// Server side: shared state.

/// Times a call left in a removed connection's ring is offered to its session's full ring.
const ORPHAN_TRIES: u32 = 10_000;

/// When a backward call gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// This many nanoseconds after the connection's reactor takes the call.
    After(u64),
    /// At this reactor-clock time (a call moved from a lost connection).
    At(u64),
    Never,
}

impl Deadline {
    pub(crate) fn at(self, now: u64) -> u64 {
        match self {
            Deadline::After(ns) => now.saturating_add(ns),
            Deadline::At(t) => t,
            Deadline::Never => u64::MAX,
        }
    }
}

/// A backward call on its way to a connection's reactor.
pub(crate) struct BackSubmit {
    pub(crate) proc: Proc,
    pub(crate) args: CallArgs,
    pub(crate) cb: Callback,
    pub(crate) xid: u32,
    pub(crate) deadline: Deadline,
    /// Times the call was sent already (on earlier connections).
    pub(crate) sends: u32,
    /// Complete on the reactor even in worker mode (blocking wrappers).
    pub(crate) inline_cb: bool,
    /// The call's own credential (`None`: the server's).
    pub(crate) cred: Option<crate::cred::CredBody>,
}

/// Options of one backward call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackCallOptions {
    /// The XID to use. `None`: the next one of the server's backward XID space. The backward
    /// XID space is separate from the forward one, so an XID may equal the XID of a forward
    /// call in progress (RFC 8167 §2.4.1). It must not be the XID of another backward call in
    /// progress on the same connection, or the call fails with
    /// `BadCall(StartError::DuplicateXid)`.
    pub xid: Option<u32>,
    /// Fail with [`ClientError::TimedOut`] when there is no answer after this many
    /// milliseconds. `None`: `ServerOptions::backchannel_timeout_ms`. `Some(0)`: never.
    pub timeout_ms: Option<u64>,
    /// The credential the call carries. `None`: `ServerOptions::backchannel_credential`
    /// (an NFSv4.1 server passes the one its client gave in `csa_sec_parms`, RFC 8881
    /// §18.36.3).
    pub credential: Option<crate::cred::CredBody>,
}

/// Why [`BackChannel::bind`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindError {
    /// The connection is bound to another session, which is still open.
    AlreadyBound(u64),
    /// The connection is gone, or the session was closed meanwhile.
    Closed,
}

impl core::fmt::Display for BindError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BindError::AlreadyBound(s) => write!(f, "connection already bound to session {s}"),
            BindError::Closed => write!(f, "connection or session closed"),
        }
    }
}

impl std::error::Error for BindError {}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A session: the connection whose backchannel carries its backward calls.
pub(crate) struct SessionState {
    id: u64,
    /// Bumped on every bind and on close (Release); a lost holder compares it (Acquire) to
    /// notice a change without taking `cur`.
    pub(crate) epoch: AtomicU64,
    /// Set once, under `cur`'s lock, by [`BackServer::close`].
    closed: AtomicBool,
    /// The connection bound now (live, or lost and holding the session's calls). Never a
    /// removed connection: a connection marks itself removed only under this lock, after
    /// finding it no longer here (or taking itself out when its reactor stops).
    pub(crate) cur: Mutex<Option<Arc<ConnBackShared>>>,
}

impl SessionState {
    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release store in `BackServer::close`.
        self.closed.load(Ordering::Acquire)
    }

    /// Hands `sub` to the connection bound now.
    pub(crate) fn submit(&self, sub: BackSubmit) -> Result<(), (ClientError, BackSubmit)> {
        let cur = lock(&self.cur);
        if self.is_closed() {
            return Err((ClientError::SessionClosed, sub));
        }
        match cur.as_ref() {
            None => Err((ClientError::SessionClosed, sub)),
            Some(c) => match c.submit(sub) {
                Ok(()) => Ok(()),
                Err(SubmitError::Full(s)) => Err((ClientError::Busy, s)),
                Err(SubmitError::Dead(s)) => Err((ClientError::Closed, s)),
            },
        }
    }
}

/// Where a backward call goes: a connection (or its session, when the connection is gone), or
/// a session (the connection bound to it last).
#[derive(Clone, Copy)]
pub(crate) enum BackRoute<'a> {
    /// [`BackChannel`]'s connection.
    Conn(&'a ConnBackShared),
    /// A session, by id (`Server::back_call`).
    Session(u64),
}

/// A server's sessions and backward-call settings.
pub(crate) struct BackServer {
    sessions: Mutex<HashMap<u64, Arc<SessionState>>>,
    /// The backward XID space (server-wide, so calls moved between connections never collide
    /// with calls already there).
    next_xid: AtomicU32,
    pub(crate) bufs: BufPool,
    timeout_ns: u64,
    /// How long a lost connection holds its session for the client to bind again (0: until
    /// the session is closed).
    pub(crate) grace_ns: u64,
    pub(crate) credits: u32,
    pub(crate) queue: usize,
    pub(crate) mode: CallbackMode,
    /// The credential every backward call carries (`ServerOptions::backchannel_credential`).
    pub(crate) cred: crate::cred::CredBody,
}

impl BackServer {
    pub(crate) fn new(bufs: BufPool, o: &ServerOptions, ep: &EndpointConfig) -> BackServer {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let seed = (now.subsec_nanos() ^ now.as_secs() as u32)
            ^ std::process::id().rotate_left(11)
            ^ (&bufs as *const BufPool as usize as u32).rotate_left(23);
        BackServer {
            sessions: Mutex::new(HashMap::new()),
            next_xid: AtomicU32::new(seed.wrapping_mul(0x85eb_ca6b) | 1),
            bufs,
            timeout_ns: o.backchannel_timeout_ms.saturating_mul(1_000_000),
            grace_ns: o.session_grace_ms.saturating_mul(1_000_000),
            credits: rpcrdma_engine::conn::credits::clamp(o.backchannel_credits, ep.max_credits),
            queue: o.backchannel_queue.clamp(2, 1 << 16),
            mode: o.mode,
            cred: crate::cred::CredBody::of(o.backchannel_credential),
        }
    }

    /// Submits a backward call along `route`: the one path of [`BackChannel::call_with`] and
    /// `Server::back_call_with` (and their blocking forms, with `inline_cb`). `Err`: refused,
    /// the arguments handed back.
    #[allow(clippy::result_large_err)] // hands the arguments back without allocating
    pub(crate) fn start(
        &self,
        route: BackRoute<'_>,
        proc: Proc,
        args: CallArgs,
        opts: &BackCallOptions,
        cb: Callback,
        inline_cb: bool,
    ) -> Result<(), Refused> {
        let xid = opts.xid.unwrap_or_else(|| {
            // Relaxed: only the counter's atomicity matters (unique values).
            self.next_xid.fetch_add(1, Ordering::Relaxed)
        });
        let deadline = match opts.timeout_ms {
            Some(0) => Deadline::Never,
            Some(ms) => Deadline::After(ms.saturating_mul(1_000_000)),
            None if self.timeout_ns == 0 => Deadline::Never,
            None => Deadline::After(self.timeout_ns),
        };
        let sub = BackSubmit {
            proc,
            args,
            cb,
            xid,
            deadline,
            sends: 0,
            inline_cb,
            cred: opts.credential,
        };
        let conn = match route {
            BackRoute::Session(id) => {
                return match self.session(id) {
                    Some(st) => st.submit(sub).map_err(|(e, s)| refuse(e, s)),
                    None => Err(refuse(ClientError::SessionClosed, sub)),
                };
            }
            BackRoute::Conn(c) => c,
        };
        match conn.submit(sub) {
            Ok(()) => Ok(()),
            Err(SubmitError::Full(sub)) => Err(refuse(ClientError::Busy, sub)),
            Err(SubmitError::Dead(sub)) => {
                // The connection is gone: its session (if still open) takes the call.
                let route = lock(&conn.session).clone();
                match route {
                    Some(st) => st.submit(sub).map_err(|(e, s)| refuse(e, s)),
                    None => Err(refuse(ClientError::Closed, sub)),
                }
            }
        }
    }

    /// Sends a backward call along `route` and waits for its outcome (retrying while the ring
    /// is full); [`ClientError::WouldBlock`] on the reactor thread of the connection it would
    /// go to, [`ClientError::SessionClosed`] for an unknown session.
    pub(crate) fn call_blocking(
        &self,
        route: BackRoute<'_>,
        proc: Proc,
        args: CallArgs,
        opts: BackCallOptions,
    ) -> Result<Reply, ClientError> {
        let on_node_thread = match route {
            BackRoute::Conn(c) => c.on_node_thread(),
            BackRoute::Session(id) => {
                let Some(st) = self.session(id) else {
                    return Err(ClientError::SessionClosed);
                };
                let cur = lock(&st.cur);
                cur.as_ref().is_some_and(|c| c.on_node_thread())
            }
        };
        if on_node_thread {
            return Err(ClientError::WouldBlock);
        }
        blocking(args, |a, cb| self.start(route, proc, a, &opts, cb, true))
    }

    pub(crate) fn session(&self, id: u64) -> Option<Arc<SessionState>> {
        lock(&self.sessions).get(&id).cloned()
    }

    fn bind(&self, conn: &Arc<ConnBackShared>, id: u64) -> Result<(), BindError> {
        // A session closed (by `close` or `expire`) between the lookup and the bind is no
        // longer in the map by then: look again, so that the bind starts a fresh session.
        for _ in 0..4 {
            match self.bind_once(conn, id) {
                // SeqCst: see `ConnBackShared::submit` (a removed connection is never bound).
                Err(BindError::Closed) if !conn.dead.load(Ordering::SeqCst) => continue,
                r => return r,
            }
        }
        Err(BindError::Closed)
    }

    fn bind_once(&self, conn: &Arc<ConnBackShared>, id: u64) -> Result<(), BindError> {
        let st = {
            let mut m = lock(&self.sessions);
            Arc::clone(m.entry(id).or_insert_with(|| {
                Arc::new(SessionState {
                    id,
                    epoch: AtomicU64::new(1),
                    closed: AtomicBool::new(false),
                    cur: Mutex::new(None),
                })
            }))
        };
        // Lock order: the connection's session, then the session's `cur`.
        let mut mine = lock(&conn.session);
        if let Some(b) = mine.as_ref() {
            if !Arc::ptr_eq(b, &st) && !b.is_closed() {
                return Err(BindError::AlreadyBound(b.id));
            }
        }
        let old = {
            let mut cur = lock(&st.cur);
            // SeqCst: see `ConnBackShared::submit` (a removed connection is never bound).
            if conn.dead.load(Ordering::SeqCst) || st.is_closed() {
                return Err(BindError::Closed);
            }
            cur.replace(Arc::clone(conn))
        };
        *mine = Some(Arc::clone(&st));
        drop(mine);
        // Release (both): pair with the Acquire loads in `ServerBack::sync_binding` and
        // `ServerBack::service_lost`, which then read the session under its locks.
        conn.bind_gen.fetch_add(1, Ordering::Release);
        st.epoch.fetch_add(1, Ordering::Release);
        if let Some(o) = old {
            if !Arc::ptr_eq(&o, conn) {
                o.wake();
            }
        }
        conn.wake();
        Ok(())
    }

    pub(crate) fn close(&self, id: u64) -> bool {
        let Some(st) = lock(&self.sessions).remove(&id) else {
            return false;
        };
        let old = {
            let mut cur = lock(&st.cur);
            // Release: pairs with the Acquire loads in `SessionState::is_closed`.
            st.closed.store(true, Ordering::Release);
            cur.take()
        };
        // Release: see `bind`.
        st.epoch.fetch_add(1, Ordering::Release);
        if let Some(c) = old {
            c.wake();
        }
        true
    }

    /// Closes `st` as [`BackServer::close`] does, if `holder` (a lost connection whose grace
    /// period ended) is still the connection bound to it. `false` when another connection was
    /// bound meanwhile or the session is already closed.
    pub(crate) fn expire(&self, st: &Arc<SessionState>, holder: &Arc<ConnBackShared>) -> bool {
        {
            // Lock order: the session map, then the session's `cur` (nobody takes the map
            // while holding a `cur`). The map is held across the check and the removal, so a
            // bind either binds before (and the check fails) or finds no session and creates
            // a fresh one.
            let mut m = lock(&self.sessions);
            let mut cur = lock(&st.cur);
            let mine = cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, holder));
            if !mine || st.is_closed() {
                return false;
            }
            // Release: pairs with the Acquire loads in `SessionState::is_closed`.
            st.closed.store(true, Ordering::Release);
            *cur = None;
            if m.get(&st.id).is_some_and(|s| Arc::ptr_eq(s, st)) {
                m.remove(&st.id);
            }
        }
        // Release: see `bind`.
        st.epoch.fetch_add(1, Ordering::Release);
        true
    }
}

pub(crate) enum SubmitError {
    /// The ring is full.
    Full(BackSubmit),
    /// The connection was removed.
    Dead(BackSubmit),
}

/// What the handles of one connection share with its reactor.
pub(crate) struct ConnBackShared {
    pub(crate) tx: MpscProducer<BackSubmit>,
    /// The ring's consumer once the connection is removed: whoever finds calls left in it
    /// (the reactor, or a late submitter) reroutes or fails them.
    pub(crate) orphan: Mutex<Option<MpscConsumer<BackSubmit>>>,
    /// Set once when the connection is removed.
    pub(crate) dead: AtomicBool,
    /// The upper layer said the client serves backward calls.
    pub(crate) enable_req: AtomicBool,
    /// The session this connection is bound to.
    pub(crate) session: Mutex<Option<Arc<SessionState>>>,
    /// Bumped (Release) whenever `session` changes.
    pub(crate) bind_gen: AtomicU64,
    pub(crate) node_thread: Arc<OnceLock<Waker>>,
    pub(crate) server: Arc<BackServer>,
    pub(crate) stats: ConnStats,
}

impl ConnBackShared {
    fn wake(&self) {
        if let Some(t) = self.node_thread.get() {
            t.wake();
        }
    }

    pub(crate) fn on_node_thread(&self) -> bool {
        self.node_thread.get().is_some_and(Waker::is_current)
    }

    /// Puts `sub` in the ring (no lock, no allocation).
    pub(crate) fn submit(&self, sub: BackSubmit) -> Result<(), SubmitError> {
        // SeqCst (this load, the fence and the load below): the handshake with
        // `ServerBack::mark_dead` (which stores `dead`, fences, then drains the ring). Either
        // its drain finds our item, or our second load sees `dead` and we drain the ring
        // ourselves.
        if self.dead.load(Ordering::SeqCst) {
            return Err(SubmitError::Dead(sub));
        }
        if let Err(sub) = self.tx.enqueue(sub) {
            return Err(SubmitError::Full(sub));
        }
        fence(Ordering::SeqCst);
        if self.dead.load(Ordering::SeqCst) {
            self.drain_orphans();
            return Ok(());
        }
        self.wake();
        Ok(())
    }

    /// Calls left in the ring of a removed connection go to its session (if it is open) or
    /// fail. Their callbacks may run on this thread.
    pub(crate) fn drain_orphans(&self) {
        let route = lock(&self.session).clone();
        loop {
            // The consumer's lock is not held while rerouting (no lock order with `cur`).
            let next = lock(&self.orphan).as_mut().and_then(|rx| rx.dequeue());
            let Some(mut sub) = next else { break };
            let mut tries = 0;
            let r = loop {
                let r = match &route {
                    Some(st) => st.submit(sub),
                    None => Err((ClientError::Transport(CallError::ConnectionLost), sub)),
                };
                match r {
                    // The session's connection is busy: give its reactor a moment.
                    Err((ClientError::Busy, s)) if tries < ORPHAN_TRIES => {
                        sub = s;
                        tries += 1;
                        std::thread::yield_now();
                    }
                    r => break r,
                }
            };
            if let Err((e, sub)) = r {
                sub.cb.call(Err(e));
            }
        }
    }
}

pub(crate) fn refuse(error: ClientError, sub: BackSubmit) -> Refused {
    sub.cb.disarm();
    Refused {
        error,
        args: sub.args,
    }
}

// ---------------------------------------------------------------------------------------------
// Server side: the public handles.

/// The backchannel of one server connection (RFC 8167). `Send + Clone`; usable from any
/// thread. Handlers get it from [`Request::backchannel`](crate::Request::backchannel);
/// [`Server::session_backchannel`](crate::Server::session_backchannel) gives the one bound to
/// a session.
#[derive(Clone)]
pub struct BackChannel {
    pub(crate) inner: Arc<ConnBackShared>,
}

impl core::fmt::Debug for BackChannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BackChannel")
            .field("enabled", &self.is_enabled())
            .field("session", &self.session())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl BackChannel {
    /// Enables backward calls on this connection. Call it once the client has said that it
    /// serves them (RFC 8167 §6), e.g. in the handler of the client's CREATE_SESSION. Until
    /// then every backward call fails with [`ClientError::NotServed`] and nothing is sent.
    pub fn enable(&self) {
        // Release: pairs with the Acquire load on the reactor (`ServerBack::service`); calls
        // submitted after this see the backchannel enabled.
        self.inner.enable_req.store(true, Ordering::Release);
        self.inner.wake();
    }

    /// Whether [`BackChannel::enable`] was called.
    pub fn is_enabled(&self) -> bool {
        // Acquire: pairs with the Release store in `enable`.
        self.inner.enable_req.load(Ordering::Acquire)
    }

    /// Binds this connection to `session` (as NFSv4.1 BIND_CONN_TO_SESSION does; creates the
    /// session on first use, and a fresh one after the session was closed or expired, see
    /// `ServerOptions::session_grace_ms`). The session's backward calls go to the connection
    /// bound last.
    /// The calls that were pending on an earlier connection of the session, when it was
    /// lost, move to this one and are sent again with the same XIDs.
    pub fn bind(&self, session: u64) -> Result<(), BindError> {
        self.inner.server.bind(&self.inner, session)
    }

    /// The open session this connection is bound to.
    pub fn session(&self) -> Option<u64> {
        lock(&self.inner.session)
            .as_ref()
            .filter(|s| !s.is_closed())
            .map(|s| s.id)
    }

    /// True once the connection is gone and holds no calls any more.
    pub fn is_closed(&self) -> bool {
        // SeqCst: see `ConnBackShared::submit`.
        self.inner.dead.load(Ordering::SeqCst)
    }

    /// Fresh, empty arguments in a registered buffer of the server's endpoint pool (`None`
    /// when the pool is exhausted).
    pub fn args(&self) -> Option<CallArgs> {
        self.inner.server.bufs.get().map(CallArgs::new)
    }

    /// The connection's counters (the `back_*` fields count backward calls).
    pub fn stats(&self) -> ConnStats {
        self.inner.stats.clone()
    }

    /// Sends a backward call on this connection. `cb` runs exactly once with the outcome: the
    /// reply, [`ClientError::NotServed`], [`ClientError::TimedOut`],
    /// [`ClientError::SessionClosed`], an RPC error from the client, or a transport error.
    /// It runs on the reactor or a worker, per the server's mode, and must not block in
    /// inline mode. `Err` means that the call was not accepted (the ring is full, or the
    /// connection is gone and has no open session); the arguments come back and `cb` does
    /// not run. Arguments travel inline: they must fit the inline threshold, and DDP items
    /// are sent inline too (receptacles are refused).
    #[allow(clippy::result_large_err)] // hands the arguments back without allocating
    pub fn call<F: OnReply>(&self, proc: Proc, args: CallArgs, cb: F) -> Result<(), Refused> {
        self.call_with(proc, args, BackCallOptions::default(), cb)
    }

    /// [`BackChannel::call`] with options (XID, timeout).
    #[allow(clippy::result_large_err)] // hands the arguments back without allocating
    pub fn call_with<F: OnReply>(
        &self,
        proc: Proc,
        args: CallArgs,
        opts: BackCallOptions,
        cb: F,
    ) -> Result<(), Refused> {
        let cb = Callback::new(cb);
        self.inner
            .server
            .start(self.route(), proc, args, &opts, cb, false)
    }

    /// Sends a backward call and waits for its outcome (retrying while the ring is full). It
    /// allocates a rendezvous per call. It may be called from a handler that runs on a worker.
    /// On the connection's own reactor thread it returns [`ClientError::WouldBlock`].
    pub fn call_blocking(&self, proc: Proc, args: CallArgs) -> Result<Reply, ClientError> {
        self.call_blocking_with(proc, args, BackCallOptions::default())
    }

    /// [`BackChannel::call_blocking`] with options (XID, timeout).
    pub fn call_blocking_with(
        &self,
        proc: Proc,
        args: CallArgs,
        opts: BackCallOptions,
    ) -> Result<Reply, ClientError> {
        self.inner
            .server
            .call_blocking(self.route(), proc, args, opts)
    }

    /// Where this handle's calls go.
    fn route(&self) -> BackRoute<'_> {
        BackRoute::Conn(&self.inner)
    }
}

// ---------------------------------------------------------------------------------------------
// The grace period of a lost connection that holds its session.

/// A lost connection's hold on its session (`ServerOptions::session_grace_ms`, like an NFSv4
/// lease): how long it lasts (0: until the session is closed), when it ends (`u64::MAX`: not
/// running) and its timer on the reactor's wheel.
pub(crate) struct Grace {
    ns: u64,
    at: u64,
    timer: Option<TimerHandle>,
}

impl Grace {
    /// A grace period of `ns` nanoseconds (0: none), not running.
    pub(crate) fn new(ns: u64) -> Grace {
        Grace {
            ns,
            at: u64::MAX,
            timer: None,
        }
    }

    /// Whether a lost holder's session ends by itself (a grace period is configured).
    pub(crate) fn applies(&self) -> bool {
        self.ns > 0
    }

    /// Whether the running grace period has ended at `now`.
    pub(crate) fn ended(&self, now: u64) -> bool {
        self.at <= now
    }

    /// Runs the grace period: started once (from `now`, the first round after the loss), its
    /// timer armed with `token` when not armed. A full wheel: tried again next round (the
    /// [`Grace::ended`] check still expires it).
    pub(crate) fn run(&mut self, cx: &mut PollerCtx<'_>, now: u64, token: impl FnOnce() -> u64) {
        if self.at == u64::MAX {
            self.at = now.saturating_add(self.ns);
        }
        if self.timer.is_none() {
            self.timer = cx.arm_timer(self.at, token()).ok();
        }
    }

    /// Stops the grace period (the session was bound elsewhere, or the connection leaves).
    pub(crate) fn cancel(&mut self, cx: &mut PollerCtx<'_>) {
        self.at = u64::MAX;
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
    }

    /// The timer fired (the wheel dropped it).
    pub(crate) fn timer_fired(&mut self) {
        self.timer = None;
    }
}
