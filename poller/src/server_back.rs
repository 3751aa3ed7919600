//! The server side of backward-direction RPC (RFC 8167) on the reactor (`ServerBack`): each
//! server connection's backward calls (in a [`CallTable`], `call_table.rs`, shared with the
//! client's forward calls), sending them while the client's backward credits allow, their
//! deadlines (one timer-wheel entry, for the earliest call), and a lost connection's part in
//! its session (holding the session's calls during its grace period, handing them to the
//! session's new connection).
//!
//! Normal operation and recovery: as described in [`crate::backchannel`] (the shared state
//! and sessions are in `session.rs`); every call completes exactly once (the call table's
//! rule), a call completed while the engine still has it keeps its buffers until the engine
//! reports it.

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#![allow(clippy::result_large_err)]

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_engine::conn::{
    self, BackchannelError, BackchannelPools, CallError, CallId, CallOptions, CallSpec, StartError,
};
use rpcrdma_engine::rpc::{self, AcceptStat, ReplyBody};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::Region;

use crate::api_stats::{ConnStats, ConnStatsWriter};
use crate::call::{ClientError, Reply};
use crate::call_table::{
    requester_layout, CallRec, CallSink, CallTable, Direction, NewCall, NodeSink, Start,
};
use crate::config::CallbackMode;
use crate::driver::ConnDriver;
use crate::memory::{local_buf, MemError, Slab};
use crate::mpsc::{self, MpscConsumer};
use crate::session::{
    lock, BackServer, BackSubmit, ConnBackShared, Deadline, Grace, SessionState, SubmitError,
};

use crate::node::{NodeEnv, Round, TIMER_BACK, TIMER_GRACE};
use crate::reactor::PollerCtx;
use crate::timer::TimerHandle;
use crate::worker::NodeLinks;

use crate::session::BackChannel;

// ---------------------------------------------------------------------------------------------
// Server side: the reactor's part.

/// The connection's [`NodeSink`] for backward calls.
macro_rules! sink {
    ($s:ident, $env:expr, $links:expr, $stats:expr) => {
        NodeSink {
            env: $env,
            links: $links,
            mode: $s.mode,
            worker: $s.worker,
            stats: $stats,
            dir: Direction::Backward,
            completed: None,
        }
    };
}

/// A submitted backward call as a call-table entry (its deadline from now on).
fn new_call(sub: BackSubmit, now: u64) -> NewCall {
    NewCall {
        xid: sub.xid,
        proc: sub.proc,
        args: sub.args,
        reply: None,
        cb: sub.cb,
        inline_cb: sub.inline_cb,
        deadline: sub.deadline.at(now),
        sends: sub.sends,
        cred: sub.cred,
    }
}

/// What a lost connection does with its session's calls.
enum Holder {
    /// Nothing known yet (re-read the session).
    Unknown,
    /// This connection holds them.
    Me,
    /// Move them to this connection.
    Other(Arc<ConnBackShared>),
}

/// One server connection's backward requester (on its reactor). See the module documentation.
pub(crate) struct ServerBack {
    pub(crate) handle: BackChannel,
    rx: Option<MpscConsumer<BackSubmit>>,
    slab: Slab,
    /// The backward calls (records, ready queue, engine backward slots).
    calls: CallTable,
    session: Option<Arc<SessionState>>,
    seen_bind: u64,
    seen_epoch: u64,
    holder: Holder,
    /// The engine's backchannel is enabled.
    enabled: bool,
    /// The upper layer enabled it; the engine follows in this round.
    enable_now: bool,
    lost: bool,
    stopping: bool,
    done: bool,
    timer: Option<TimerHandle>,
    timer_at: u64,
    /// The session grace period, while this lost connection holds its session.
    grace: Grace,
    mode: CallbackMode,
    worker: usize,
}

impl ServerBack {
    /// Backchannel memory and the handle of a connection being accepted in `slot`; updates
    /// `cfg` (backward credits, receive queue depth).
    pub(crate) fn new<P: Provider>(
        env: &NodeEnv<P>,
        server: &Arc<BackServer>,
        cfg: &mut conn::Config,
        recv_size: u32,
        slot: u32,
        stats: ConnStats,
    ) -> Result<ServerBack, MemError> {
        // Clamped into 1..=max_credits when the session table was built (`session.rs`).
        let credits = server.credits;
        cfg.backchannel_credits = credits;
        let nrec = server.queue;
        // The engine's backward requester has a call slot per record of the call table.
        cfg.call_slots = u32::try_from(nrec).map_err(|_| MemError::BadSize("backchannel queue"))?;
        // The granted receives plus one per backward call outstanding.
        cfg.rq_depth = cfg.rq_depth.max(cfg.credits + credits);
        let mut layout = requester_layout(credits, cfg.inline_send, recv_size, nrec);
        if recv_size == 0 {
            // A shared receive queue (`recv_size` 0): backward replies come from it.
            layout.recvs = 0;
        }
        let slab = Slab::new(
            &*env.pd,
            &layout,
            env.hugepages,
            crate::memory::LOCAL_ACCESS,
        )?;
        let (tx, rx) = mpsc::channel::<BackSubmit>(nrec.next_power_of_two())
            .map_err(|_| MemError::BadSize("backchannel ring"))?;
        let inner = Arc::new(ConnBackShared {
            tx,
            orphan: Mutex::new(None),
            dead: AtomicBool::new(false),
            enable_req: AtomicBool::new(false),
            session: Mutex::new(None),
            bind_gen: AtomicU64::new(0),
            node_thread: env.node_thread(),
            server: Arc::clone(server),
            stats,
        });
        let calls = CallTable::new(&slab.rpc_headers[..nrec]);
        Ok(ServerBack {
            handle: BackChannel { inner },
            rx: Some(rx),
            slab,
            calls,
            session: None,
            seen_bind: 0,
            seen_epoch: 0,
            holder: Holder::Unknown,
            enabled: false,
            enable_now: false,
            lost: false,
            stopping: false,
            done: false,
            timer: None,
            timer_at: u64::MAX,
            grace: Grace::new(server.grace_ns),
            mode: server.mode,
            worker: slot as usize,
        })
    }

    /// The backchannel memory's region (for the connection's memory view).
    pub(crate) fn region(&self) -> Arc<Region> {
        Arc::clone(&self.slab.region)
    }

    /// The engine's backchannel memory.
    pub(crate) fn pools(&self) -> BackchannelPools<'_> {
        BackchannelPools {
            headers: &self.slab.headers,
            recvs: &self.slab.recvs,
        }
    }

    /// True once removed (lost, nothing held for a session any more).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The reactor is stopping.
    pub(crate) fn shutdown(&mut self) {
        self.stopping = true;
    }

    fn sync_binding(&mut self) {
        // Acquire: pairs with the Release increment in `BackServer::bind`.
        let g = self.handle.inner.bind_gen.load(Ordering::Acquire);
        if g != self.seen_bind {
            self.seen_bind = g;
            self.session = lock(&self.handle.inner.session).clone();
            self.seen_epoch = 0;
            self.holder = Holder::Unknown;
        }
    }

    /// Whether calls of a lost connection are kept for its session.
    fn keeps_calls(&self) -> bool {
        !self.stopping && self.session.as_ref().is_some_and(|s| !s.is_closed())
    }

    /// Fails every call held (queued, parked or on the wire) with `e`.
    fn fail_all<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        e: ClientError,
        stats: &ConnStatsWriter,
    ) -> usize {
        self.calls.fail_all(&mut sink!(self, env, links, stats), e)
    }

    /// Takes calls from the ring into free records (queued to be sent, or parked when lost).
    fn intake<P: Provider>(&mut self, r: &mut Round<'_, '_, P>, stats: &ConnStatsWriter) -> usize {
        let mut n = 0;
        let mut earliest = u64::MAX;
        let now = r.env.now;
        let mut sink = sink!(self, r.env, r.links.as_deref_mut(), stats);
        while self.calls.has_free() {
            let Some(rx) = self.rx.as_mut() else { break };
            let Some(sub) = rx.dequeue() else { break };
            n += 1;
            // Acquire: pairs with the Release store in `BackChannel::enable`. Re-read after
            // the dequeue: a call submitted after `enable` must find it (the dequeue's Acquire
            // orders this load after the submitter's).
            if !self.lost && !self.enabled && self.handle.inner.enable_req.load(Ordering::Acquire) {
                self.enable_now = true;
            }
            if !self.lost && !self.enabled && !self.enable_now {
                // RFC 8167 §6: the client has not said it serves backward calls.
                stats.back_error();
                sink.deliver(sub.cb, sub.inline_cb, Err(ClientError::NotServed));
                continue;
            }
            let call = new_call(sub, now);
            let deadline = call.deadline;
            let Some(i) = self.calls.alloc(call) else {
                break;
            };
            if !self.lost {
                self.calls.push_ready(i);
            }
            earliest = earliest.min(deadline);
        }
        if earliest != u64::MAX {
            self.arm(r, earliest);
        }
        n
    }

    /// Arms the deadline timer at `at` unless it is armed no later.
    fn arm<P: Provider>(&mut self, r: &mut Round<'_, '_, P>, at: u64) {
        if at >= self.timer_at {
            return;
        }
        if let Some(h) = self.timer.take() {
            r.cx.cancel_timer(h);
        }
        self.timer_at = u64::MAX;
        if let Ok(h) = r.cx.arm_timer(at, r.timer_token(TIMER_BACK)) {
            self.timer = Some(h);
            self.timer_at = at;
        }
    }

    /// Starts queued calls while the engine takes them (backward credits, slots).
    fn start_ready<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        stats: &ConnStatsWriter,
    ) -> usize {
        let now = env.now;
        let mut sink = sink!(self, env, links, stats);
        let cred = &self.handle.inner.server.cred;
        self.calls.start_ready(&mut sink, |i, r, sink| {
            start_back(drv, now, cred, i, r, sink)
        })
    }

    /// One round on a live connection: bindings, enabling, new calls, starts.
    pub(crate) fn service<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        r: &mut Round<'_, '_, P>,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut work = 0;
        self.sync_binding();
        if self.session.as_ref().is_some_and(|s| s.is_closed()) {
            self.session = None;
            let e = ClientError::SessionClosed;
            work += self.fail_all(r.env, r.links.as_deref_mut(), e, stats);
        }
        // Acquire: pairs with the Release store in `BackChannel::enable`.
        if !self.enabled && self.handle.inner.enable_req.load(Ordering::Acquire) {
            self.enable_now = true;
        }
        work += self.intake(r, stats);
        if self.enable_now && !self.enabled && !self.enable_engine(drv) {
            // The engine closed before its backchannel was turned on (the connection was
            // lost this round, e.g. right after a bind moved the session's calls here): the
            // calls wait, and the teardown that follows keeps them for the session (or fails
            // them with `Transport(ConnectionLost)`), as for any lost connection. Starting
            // them would fail them with `NotServed` although the client serves them.
            stats.back_gauges(
                u64::from(self.calls.in_flight()),
                self.calls.queued() as u64,
            );
            return work;
        }
        work += self.start_ready(drv, r.env, r.links.as_deref_mut(), stats);
        stats.back_gauges(
            u64::from(self.calls.in_flight()),
            self.calls.queued() as u64,
        );
        work
    }

    /// Turns the engine's backchannel on (the upper layer enabled it). `false` when the engine
    /// is already closed. An engine without backchannel memory stays off, and `start_ready`
    /// then fails the calls with [`ClientError::NotServed`] (it cannot serve them).
    fn enable_engine<P: Provider>(&mut self, drv: &mut ConnDriver<P>) -> bool {
        let Some(c) = drv.conn.as_mut() else {
            return false;
        };
        match c.enable_backchannel() {
            Ok(()) => {
                self.enabled = true;
                true
            }
            Err(BackchannelError::Closed) => false,
            Err(BackchannelError::NoResources) => true,
        }
    }

    /// A backward reply arrived.
    pub(crate) fn on_reply<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        r: conn::Reply,
        stats: &ConnStatsWriter,
    ) {
        let mut sink = sink!(self, env, links, stats);
        let Some(i) = self.calls.returned(r.call, &mut sink) else {
            return;
        };
        let rec = self.calls.rec_mut(i);
        let xid = rec.xid;
        let outcome = match rec.reply.take() {
            None => Err(ClientError::BadReply),
            Some(buf) => {
                let len = (r.len as usize).min(buf.len());
                let verdict = match rpc::decode_reply(&buf[..len]) {
                    Ok((h, off)) => match h.body {
                        ReplyBody::Accepted {
                            stat: AcceptStat::Success,
                            ..
                        } => Ok(off),
                        ReplyBody::Accepted { stat, .. } => Err(ClientError::Rpc(stat)),
                        ReplyBody::Denied(d) => Err(ClientError::Denied(d)),
                    },
                    Err(_) => Err(ClientError::BadReply),
                };
                match verdict {
                    Ok(off) => {
                        stats.back_reply(len as u64, true);
                        Ok(Reply::backward(buf, off, len - off, xid))
                    }
                    Err(e) => {
                        sink.put_buf(buf);
                        Err(e)
                    }
                }
            }
        };
        self.calls.finish(i, &mut sink, outcome);
    }

    /// A backward call failed in the engine.
    pub(crate) fn on_failed<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        call: CallId,
        error: CallError,
        stats: &ConnStatsWriter,
    ) {
        let mut sink = sink!(self, env, links, stats);
        let Some(i) = self.calls.returned(call, &mut sink) else {
            return;
        };
        self.sync_binding();
        if error == CallError::ConnectionLost && self.keeps_calls() {
            // Parked for the session (see `on_lost`).
            self.calls.park(i, &mut sink);
            return;
        }
        let e = match error {
            CallError::TimedOut => ClientError::TimedOut,
            e => ClientError::Transport(e),
        };
        self.calls.finish(i, &mut sink, Err(e));
    }

    /// The connection was lost (engine and QP gone): keep the calls for the session, or fail
    /// them.
    pub(crate) fn on_lost<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        stats: &ConnStatsWriter,
    ) {
        self.lost = true;
        self.enabled = false;
        self.enable_now = false;
        self.sync_binding();
        let keep = self.keeps_calls();
        let mut sink = sink!(self, env, links, stats);
        self.calls.engine_gone(&mut sink);
        if keep {
            self.calls.park_all(&mut sink);
        } else {
            let e = ClientError::Transport(CallError::ConnectionLost);
            self.calls.fail_all(&mut sink, e);
        }
        self.calls.clear_ready();
        self.holder = Holder::Unknown;
        stats.back_gauges(0, u64::from(self.calls.in_use()));
    }

    /// One round of a lost connection: hold the session's calls, move them to the session's
    /// new connection, or leave.
    pub(crate) fn service_lost<P: Provider>(
        &mut self,
        r: &mut Round<'_, '_, P>,
        stats: &ConnStatsWriter,
    ) -> usize {
        if self.done {
            return 0;
        }
        self.sync_binding();
        let mut work = 0;
        if self.grace.ended(r.env.now) && self.expire(r.cx, stats) {
            work += 1;
        }
        if !self.keeps_calls() {
            let e = match &self.session {
                Some(s) if s.is_closed() => ClientError::SessionClosed,
                _ if self.stopping => ClientError::Closed,
                _ => ClientError::Transport(CallError::ConnectionLost),
            };
            work += self.fail_all(r.env, r.links.as_deref_mut(), e, stats);
            let mut sink = sink!(self, r.env, r.links.as_deref_mut(), stats);
            while let Some(sub) = self.rx.as_mut().and_then(|rx| rx.dequeue()) {
                stats.back_error();
                sink.deliver(sub.cb, sub.inline_cb, Err(e));
                work += 1;
            }
            self.remove(r.cx);
            return work + 1;
        }
        // Who holds the session now?
        if let Some(st) = self.session.clone() {
            // Acquire: pairs with the Release increments in `BackServer::bind` / `close`.
            let epoch = st.epoch.load(Ordering::Acquire);
            if epoch != self.seen_epoch || matches!(self.holder, Holder::Unknown) {
                self.seen_epoch = epoch;
                let cur = lock(&st.cur).clone();
                self.holder = match cur {
                    Some(c) if !Arc::ptr_eq(&c, &self.handle.inner) => Holder::Other(c),
                    Some(_) => Holder::Me,
                    None => Holder::Unknown,
                };
            }
        }
        match self.holder {
            // Held for the client: its grace period runs (armed once, from the first round
            // after the loss).
            Holder::Me if self.grace.applies() => {
                let token = r.timer_token(TIMER_GRACE);
                self.grace.run(r.cx, r.env.now, || token);
            }
            // Bound elsewhere: the client came back in time.
            Holder::Other(_) => self.grace.cancel(r.cx),
            _ => {}
        }
        work += self.intake(r, stats);
        if let Holder::Other(target) = &self.holder {
            let target = Arc::clone(target);
            work += self.hand_over(r.env, &target, stats);
            if self.calls.in_use() == 0 && self.remove(r.cx) {
                work += 1;
            }
        }
        stats.back_gauges(0, u64::from(self.calls.in_use()));
        work
    }

    /// Moves the parked calls, oldest first, to `target` (same XIDs, deadlines and send
    /// counts); a refusal (ring full: retried next round; target dead: the session moved on)
    /// stops the move and makes the session be read again.
    fn hand_over<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        target: &ConnBackShared,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut sink = sink!(self, env, None, stats);
        let (n, refused) = self.calls.hand_over(&mut sink, |c| {
            let sub = BackSubmit {
                proc: c.proc,
                args: c.args,
                cb: c.cb,
                xid: c.xid,
                deadline: Deadline::At(c.deadline),
                sends: c.sends,
                inline_cb: c.inline_cb,
                cred: c.cred,
            };
            target
                .submit(sub)
                .map_err(|(SubmitError::Full(s) | SubmitError::Dead(s))| new_call(s, 0))
        });
        if refused {
            self.holder = Holder::Unknown;
        }
        n
    }

    /// Removes the connection when it holds nothing and is not its session's holder: marks
    /// it dead (under the session's lock) and hands whatever is left in its ring to the
    /// session, or fails it. Returns whether it was removed.
    fn remove(&mut self, cx: &mut PollerCtx<'_>) -> bool {
        let queued = self.rx.as_ref().map_or(0, |r| r.used_count());
        if self.calls.in_use() > 0 || self.done || (queued > 0 && self.keeps_calls()) {
            return false;
        }
        if !self.mark_dead(self.stopping) {
            return false;
        }
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
        self.grace.cancel(cx);
        self.done = true;
        true
    }

    /// The grace period ended: closes the session if this connection still holds it (the
    /// next steps of `service_lost` then fail its calls and remove the connection).
    fn expire(&mut self, cx: &mut PollerCtx<'_>, stats: &ConnStatsWriter) -> bool {
        self.grace.cancel(cx);
        let Some(st) = self.session.clone() else {
            return false;
        };
        if !self.handle.inner.server.expire(&st, &self.handle.inner) {
            return false;
        }
        stats.session_expired();
        true
    }

    /// The grace timer fired.
    pub(crate) fn on_grace_timer<P: Provider>(
        &mut self,
        r: &mut Round<'_, '_, P>,
        stats: &ConnStatsWriter,
    ) {
        self.grace.timer_fired();
        self.service_lost(r, stats);
    }

    /// Marks the connection removed, unless it holds its session and `evict` is false (then
    /// `false`). With `evict`, the session loses its holder. Whatever is left in the ring goes
    /// to the session or fails.
    fn mark_dead(&mut self, evict: bool) -> bool {
        let inner = Arc::clone(&self.handle.inner);
        {
            // Under the session's lock: a connection the session names is never removed (see
            // `SessionState::cur`), and a removed one is never bound (`BackServer::bind`).
            let sess = lock(&inner.session);
            if let Some(st) = sess.as_ref() {
                let mut cur = lock(&st.cur);
                let mine = cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, &inner));
                if mine && !st.is_closed() {
                    if !evict {
                        return false;
                    }
                    *cur = None;
                }
            }
            // SeqCst: see `ConnBackShared::submit`.
            inner.dead.store(true, Ordering::SeqCst);
        }
        // SeqCst: see `ConnBackShared::submit`.
        fence(Ordering::SeqCst);
        *lock(&inner.orphan) = self.rx.take();
        inner.drain_orphans();
        true
    }

    /// The earliest deadline came: fail every call past its deadline.
    pub(crate) fn on_timer<P: Provider>(
        &mut self,
        r: &mut Round<'_, '_, P>,
        stats: &ConnStatsWriter,
    ) {
        self.timer = None;
        self.timer_at = u64::MAX;
        let now = r.env.now;
        let next = self
            .calls
            .expire(now, &mut sink!(self, r.env, r.links.as_deref_mut(), stats));
        if next != u64::MAX && !self.done {
            self.arm(r, next);
        }
    }
}

/// Hands backward call `r` (record `i`, started in engine call slot `i`) to the engine (a
/// reply buffer taken and the RPC header, with credential `cred`, encoded on its first start).
fn start_back<P: Provider>(
    drv: &mut ConnDriver<P>,
    now: u64,
    cred: &crate::cred::CredBody,
    i: u32,
    r: &mut CallRec,
    sink: &mut impl CallSink,
) -> Start {
    let Some(conn) = drv.conn.as_mut() else {
        return Start::Wait;
    };
    if r.reply.is_none() {
        match sink.get_buf() {
            Some(b) => r.reply = Some(b),
            None => return Start::Wait,
        }
    }
    if r.hdr_len == 0 {
        r.encode_header(&mut drv.mem, cred);
    }
    let (Some(m), Some(args), Some(reply)) = (r.message(), r.args.as_ref(), r.reply.as_ref())
    else {
        return Start::Fail(ClientError::BadCall(StartError::BadSpec));
    };
    // Backward calls carry no chunks: receptacles make the engine refuse the call.
    let recp = [local_buf(reply, 0); 1];
    let nr = usize::from(args.receptacle_count() > 0);
    let spec = CallSpec {
        message: &m.parts[..m.np],
        ddp: &m.items[..m.ni],
        receptacles: &recp[..nr],
        reply: local_buf(reply, reply.len()),
    };
    let started = conn.start_call_in(now, i, r.xid, &spec, &CallOptions::NONE, &mut drv.mem);
    Start::of(started, m.bytes)
}

impl Drop for ServerBack {
    fn drop(&mut self) {
        if !self.done {
            // Runtime teardown: late and queued submissions complete now (records' callbacks
            // run with `Dropped` when the records go).
            self.mark_dead(true);
        }
    }
}
