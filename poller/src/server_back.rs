//! The server side of backward-direction RPC (RFC 8167) on the reactor (`ServerBack`): each
//! server connection's backward call records, sending them while the client's backward
//! credits allow, their deadlines (one timer-wheel entry, for the earliest call), their
//! completion exactly once, and a lost connection's part in its session (holding the
//! session's calls during its grace period, handing them to the session's new connection).
//!
//! Normal operation and recovery: as described in [`crate::backchannel`] (the shared state
//! and sessions are in `session.rs`).

// Submissions and refusals carry the call's arguments back and forth by value, so nothing
// allocates on the way (as `Client::call` does).
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_engine::conn::{
    self, BackchannelError, BackchannelPools, CallError, CallId, CallSpec, HostMemory, LocalBuf,
    StartError,
};
use rpcrdma_engine::rpc::{self, AcceptStat, CallHeader, OpaqueAuth, ReplyBody};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::{PoolBuf, Region};

use crate::api_stats::{ConnStats, ConnStatsWriter};
use crate::call::{CallArgs, Callback, ClientError, Reply};
use crate::config::CallbackMode;
use crate::driver::ConnDriver;
use crate::memory::{local_buf, MemError, Slab, SlabLayout};
use crate::mpsc::{self, MpscConsumer};
use crate::session::{
    lock, BackServer, BackSubmit, ConnBackShared, Deadline, Grace, SessionState, SubmitError,
};

use crate::node::{timer_token, NodeEnv, TIMER_BACK, TIMER_GRACE};
use crate::reactor::PollerCtx;
use crate::timer::TimerHandle;
use crate::worker::{CompleteJob, Job, NodeLinks};

use crate::backchannel::{NO_REC, RPC_HEADER_SIZE};
use crate::session::BackChannel;

// ---------------------------------------------------------------------------------------------
// Server side: the reactor's part.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BState {
    Free,
    /// Waiting to be sent (or, on a lost connection, parked for the session).
    Queued,
    /// On the wire.
    InFlight,
    /// Completed (timed out or failed) while the engine still has it: its buffers are kept
    /// until the engine reports the call.
    Zombie,
}

struct BRec {
    state: BState,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    hdr: LocalBuf,
    hdr_len: u32,
    args: Option<CallArgs>,
    reply: Option<PoolBuf>,
    cb: Option<Callback>,
    inline_cb: bool,
    deadline: u64,
    sends: u32,
    call: Option<CallId>,
    seq: u64,
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
    recs: Vec<BRec>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    /// Engine backward slot → record.
    by_slot: Vec<u32>,
    scratch: Vec<u32>,
    seq: u64,
    in_use: u32,
    in_flight: u32,
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
        // The granted receives plus one per backward call outstanding.
        cfg.rq_depth = cfg.rq_depth.max(cfg.credits + credits);
        let nrec = server.queue;
        let layout = SlabLayout {
            headers: credits as usize,
            header_size: cfg.inline_send,
            // None with a shared receive queue (`recv_size` 0): backward replies come from it.
            recvs: if recv_size == 0 { 0 } else { credits as usize },
            recv_size,
            data: 0,
            data_size: 0,
            rpc_headers: nrec,
            rpc_header_size: RPC_HEADER_SIZE,
        };
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
        let recs = (0..nrec)
            .map(|i| BRec {
                state: BState::Free,
                xid: 0,
                prog: 0,
                vers: 0,
                proc_num: 0,
                hdr: slab.rpc_headers[i],
                hdr_len: 0,
                args: None,
                reply: None,
                cb: None,
                inline_cb: false,
                deadline: u64::MAX,
                sends: 0,
                call: None,
                seq: 0,
            })
            .collect();
        Ok(ServerBack {
            handle: BackChannel { inner },
            rx: Some(rx),
            slab,
            recs,
            free: (0..nrec as u32).rev().collect(),
            ready: VecDeque::with_capacity(nrec),
            by_slot: vec![NO_REC; credits as usize],
            scratch: Vec::with_capacity(nrec),
            seq: 0,
            in_use: 0,
            in_flight: 0,
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

    fn rec_of(&self, call: CallId) -> Option<u32> {
        let i = *self.by_slot.get(call.slot as usize)?;
        let r = self.recs.get(i as usize)?;
        (r.call == Some(call)).then_some(i)
    }

    fn complete<P: Provider>(
        &self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cb: Callback,
        inline_cb: bool,
        outcome: Result<Reply, ClientError>,
    ) {
        match (self.mode, inline_cb, links) {
            (CallbackMode::Worker, false, Some(l)) => {
                if !l.submit(self.worker, Job::Complete(CompleteJob { cb, outcome })) {
                    env.stats.worker_ring_full();
                }
            }
            _ => cb.call(outcome),
        }
    }

    fn free_rec<P: Provider>(&mut self, env: &mut NodeEnv<P>, i: u32) {
        let r = &mut self.recs[i as usize];
        if r.state == BState::Free {
            return;
        }
        r.state = BState::Free;
        r.args = None;
        if let Some(b) = r.reply.take() {
            env.cache.put_buf(b);
        }
        r.cb = None;
        r.call = None;
        r.hdr_len = 0;
        self.in_use -= 1;
        self.free.push(i);
    }

    /// Completes record `i` with `outcome`. A call on the wire becomes a zombie (the engine
    /// still uses its buffers); any other is freed.
    fn fail_rec<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        i: u32,
        outcome: Result<Reply, ClientError>,
    ) {
        let r = &mut self.recs[i as usize];
        let cb = r.cb.take();
        let inline_cb = r.inline_cb;
        match r.state {
            BState::InFlight => {
                r.state = BState::Zombie;
                self.in_flight -= 1;
            }
            BState::Zombie | BState::Free => {}
            BState::Queued => self.free_rec(env, i),
        }
        if let Some(cb) = cb {
            self.complete(env, links, cb, inline_cb, outcome);
        }
    }

    /// Fails every call held (queued, parked or on the wire) with `e`.
    fn fail_all<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        e: ClientError,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut n = 0;
        for i in 0..self.recs.len() as u32 {
            if matches!(
                self.recs[i as usize].state,
                BState::Queued | BState::InFlight
            ) {
                stats.back_error();
                self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                n += 1;
            }
        }
        self.ready.clear();
        n
    }

    /// Takes calls from the ring into free records (queued to be sent, or parked when lost).
    fn intake<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut n = 0;
        let mut earliest = u64::MAX;
        while let Some(&i) = self.free.last() {
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
                self.complete(
                    env,
                    links.as_deref_mut(),
                    sub.cb,
                    sub.inline_cb,
                    Err(ClientError::NotServed),
                );
                continue;
            }
            self.free.pop();
            self.seq += 1;
            let deadline = sub.deadline.at(env.now);
            let r = &mut self.recs[i as usize];
            r.state = BState::Queued;
            r.xid = sub.xid;
            r.prog = sub.prog;
            r.vers = sub.vers;
            r.proc_num = sub.proc_num;
            r.hdr_len = 0;
            r.args = Some(sub.args);
            r.reply = None;
            r.cb = Some(sub.cb);
            r.inline_cb = sub.inline_cb;
            r.deadline = deadline;
            r.sends = sub.sends;
            r.call = None;
            r.seq = self.seq;
            self.in_use += 1;
            if !self.lost {
                self.ready.push_back(i);
            }
            earliest = earliest.min(deadline);
        }
        if earliest != u64::MAX {
            self.arm(env, cx, slot, earliest);
        }
        n
    }

    fn arm<P: Provider>(&mut self, env: &NodeEnv<P>, cx: &mut PollerCtx<'_>, slot: u32, at: u64) {
        if at >= self.timer_at {
            return;
        }
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
        self.timer_at = u64::MAX;
        if let Ok(h) = cx.arm_timer(at, timer_token(TIMER_BACK, slot, env.slot_gen(slot))) {
            self.timer = Some(h);
            self.timer_at = at;
        }
    }

    /// Starts queued calls while the engine takes them (backward credits, slots).
    fn start_ready<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut n = 0;
        while let Some(&i) = self.ready.front() {
            let Some(conn) = drv.conn.as_mut() else { break };
            let r = &mut self.recs[i as usize];
            if r.reply.is_none() {
                match env.cache.get_buf() {
                    Some(b) => r.reply = Some(b),
                    None => break,
                }
            }
            if r.hdr_len == 0 {
                let h = CallHeader {
                    xid: r.xid,
                    prog: r.prog,
                    vers: r.vers,
                    proc_num: r.proc_num,
                    cred: OpaqueAuth::NONE,
                    verf: OpaqueAuth::NONE,
                };
                r.hdr_len = drv
                    .mem
                    .bytes_mut(r.hdr.addr, r.hdr.len as usize)
                    .and_then(|out| rpc::encode_call(out, &h).ok())
                    .unwrap_or(0) as u32;
            }
            let (Some(args), Some(reply), true) =
                (r.args.as_ref(), r.reply.as_ref(), r.hdr_len > 0)
            else {
                self.ready.pop_front();
                stats.back_error();
                let e = ClientError::BadCall(StartError::BadSpec);
                self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                continue;
            };
            let (abuf, alen) = args.written();
            let mut parts = [LocalBuf::EMPTY; 2];
            parts[0] = r.hdr.sub(0, r.hdr_len).unwrap_or(LocalBuf::EMPTY);
            let mut np = 1;
            if alen > 0 {
                parts[1] = local_buf(abuf, alen);
                np = 2;
            }
            let (items, ni, ddp_bytes) = args.ddp_items().engine_items(r.hdr_len);
            let bytes = u64::from(r.hdr_len) + alen as u64 + ddp_bytes;
            // Backward calls carry no chunks: receptacles make the engine refuse the call.
            let recp = [local_buf(reply, 0); 1];
            let nr = usize::from(args.receptacle_count() > 0);
            let spec = CallSpec {
                message: &parts[..np],
                ddp: &items[..ni],
                receptacles: &recp[..nr],
                reply: local_buf(reply, reply.len()),
            };
            match conn.start_call(env.now, &spec, &mut drv.mem) {
                Ok(id) => {
                    self.ready.pop_front();
                    let r = &mut self.recs[i as usize];
                    if r.sends > 0 {
                        stats.back_retransmit();
                    }
                    r.sends += 1;
                    r.state = BState::InFlight;
                    r.call = Some(id);
                    if let Some(s) = self.by_slot.get_mut(id.slot as usize) {
                        *s = i;
                    }
                    self.in_flight += 1;
                    stats.back_call(bytes);
                    n += 1;
                }
                Err(StartError::NoCredit | StartError::Busy | StartError::NotConnected) => break,
                Err(e) => {
                    self.ready.pop_front();
                    stats.back_error();
                    let e = match e {
                        StartError::BackchannelDisabled => ClientError::NotServed,
                        e => ClientError::BadCall(e),
                    };
                    self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                }
            }
        }
        n
    }

    /// One round on a live connection: bindings, enabling, new calls, starts.
    pub(crate) fn service<P: Provider>(
        &mut self,
        drv: &mut ConnDriver<P>,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        let mut work = 0;
        self.sync_binding();
        if self.session.as_ref().is_some_and(|s| s.is_closed()) {
            self.session = None;
            work += self.fail_all(env, links.as_deref_mut(), ClientError::SessionClosed, stats);
        }
        // Acquire: pairs with the Release store in `BackChannel::enable`.
        if !self.enabled && self.handle.inner.enable_req.load(Ordering::Acquire) {
            self.enable_now = true;
        }
        work += self.intake(env, links.as_deref_mut(), cx, slot, stats);
        if self.enable_now && !self.enabled && !self.enable_engine(drv) {
            // The engine closed before its backchannel was turned on (the connection was
            // lost this round, e.g. right after a bind moved the session's calls here): the
            // calls wait, and the teardown that follows keeps them for the session (or fails
            // them with `Transport(ConnectionLost)`), as for any lost connection. Starting
            // them would fail them with `NotServed` although the client serves them.
            stats.back_gauges(u64::from(self.in_flight), self.ready.len() as u64);
            return work;
        }
        work += self.start_ready(drv, env, links, stats);
        stats.back_gauges(u64::from(self.in_flight), self.ready.len() as u64);
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
        let Some(i) = self.rec_of(r.call) else { return };
        self.by_slot[r.call.slot as usize] = NO_REC;
        let rec = &mut self.recs[i as usize];
        rec.call = None;
        if rec.state == BState::Zombie {
            self.free_rec(env, i);
            return;
        }
        self.in_flight -= 1;
        rec.state = BState::Queued;
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
                        env.cache.put_buf(buf);
                        Err(e)
                    }
                }
            }
        };
        if outcome.is_err() {
            stats.back_error();
        }
        self.fail_rec(env, links, i, outcome);
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
        let Some(i) = self.rec_of(call) else { return };
        self.by_slot[call.slot as usize] = NO_REC;
        let rec = &mut self.recs[i as usize];
        rec.call = None;
        if rec.state == BState::Zombie {
            self.free_rec(env, i);
            return;
        }
        self.in_flight -= 1;
        rec.state = BState::Queued;
        self.sync_binding();
        if error == CallError::ConnectionLost && self.keeps_calls() {
            // Parked for the session (see `on_lost`).
            if let Some(b) = self.recs[i as usize].reply.take() {
                env.cache.put_buf(b);
            }
            return;
        }
        stats.back_error();
        let e = match error {
            CallError::TimedOut => ClientError::TimedOut,
            e => ClientError::Transport(e),
        };
        self.fail_rec(env, links, i, Err(e));
    }

    /// The connection was lost (engine and QP gone): keep the calls for the session, or fail
    /// them.
    pub(crate) fn on_lost<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) {
        self.lost = true;
        self.enabled = false;
        self.enable_now = false;
        self.sync_binding();
        let keep = self.keeps_calls();
        for i in 0..self.recs.len() as u32 {
            match self.recs[i as usize].state {
                BState::Free => {}
                BState::Zombie => self.free_rec(env, i),
                BState::InFlight | BState::Queued => {
                    let r = &mut self.recs[i as usize];
                    if r.state == BState::InFlight {
                        r.state = BState::Queued;
                        r.call = None;
                        self.in_flight -= 1;
                    }
                    if keep {
                        if let Some(b) = self.recs[i as usize].reply.take() {
                            env.cache.put_buf(b);
                        }
                    } else {
                        stats.back_error();
                        let e = ClientError::Transport(CallError::ConnectionLost);
                        self.fail_rec(env, links.as_deref_mut(), i, Err(e));
                    }
                }
            }
        }
        for s in self.by_slot.iter_mut() {
            *s = NO_REC;
        }
        self.ready.clear();
        self.holder = Holder::Unknown;
        let _ = (cx, slot);
        stats.back_gauges(0, u64::from(self.in_use));
    }

    /// One round of a lost connection: hold the session's calls, move them to the session's
    /// new connection, or leave.
    pub(crate) fn service_lost<P: Provider>(
        &mut self,
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) -> usize {
        if self.done {
            return 0;
        }
        self.sync_binding();
        let mut work = 0;
        if self.grace.ended(env.now) && self.expire(cx, stats) {
            work += 1;
        }
        if !self.keeps_calls() {
            let e = match &self.session {
                Some(s) if s.is_closed() => ClientError::SessionClosed,
                _ if self.stopping => ClientError::Closed,
                _ => ClientError::Transport(CallError::ConnectionLost),
            };
            work += self.fail_all(env, links.as_deref_mut(), e, stats);
            while let Some(sub) = self.rx.as_mut().and_then(|r| r.dequeue()) {
                stats.back_error();
                self.complete(env, links.as_deref_mut(), sub.cb, sub.inline_cb, Err(e));
                work += 1;
            }
            self.remove(cx);
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
                let token = || timer_token(TIMER_GRACE, slot, env.slot_gen(slot));
                self.grace.run(cx, env.now, token);
            }
            // Bound elsewhere: the client came back in time.
            Holder::Other(_) => self.grace.cancel(cx),
            _ => {}
        }
        work += self.intake(env, links, cx, slot, stats);
        if let Holder::Other(target) = &self.holder {
            let target = Arc::clone(target);
            work += self.hand_over(env, &target);
            if self.in_use == 0 && self.remove(cx) {
                work += 1;
            }
        }
        stats.back_gauges(0, u64::from(self.in_use));
        work
    }

    /// Moves the parked calls, oldest first, to `target` (same XIDs and deadlines).
    fn hand_over<P: Provider>(&mut self, env: &mut NodeEnv<P>, target: &ConnBackShared) -> usize {
        self.scratch.clear();
        for (i, r) in self.recs.iter().enumerate() {
            if r.state == BState::Queued {
                self.scratch.push(i as u32);
            }
        }
        let recs = &self.recs;
        self.scratch.sort_unstable_by_key(|&i| recs[i as usize].seq);
        let mut n = 0;
        for k in 0..self.scratch.len() {
            let i = self.scratch[k];
            let r = &mut self.recs[i as usize];
            let (Some(args), Some(cb)) = (r.args.take(), r.cb.take()) else {
                self.free_rec(env, i);
                continue;
            };
            let sub = BackSubmit {
                prog: r.prog,
                vers: r.vers,
                proc_num: r.proc_num,
                args,
                cb,
                xid: r.xid,
                deadline: Deadline::At(r.deadline),
                sends: r.sends,
                inline_cb: r.inline_cb,
            };
            match target.submit(sub) {
                Ok(()) => {
                    self.free_rec(env, i);
                    n += 1;
                }
                Err(SubmitError::Full(sub) | SubmitError::Dead(sub)) => {
                    // Full: retried next round. Dead: the session moved on; re-read it.
                    let r = &mut self.recs[i as usize];
                    r.args = Some(sub.args);
                    r.cb = Some(sub.cb);
                    self.holder = Holder::Unknown;
                    break;
                }
            }
        }
        self.scratch.clear();
        n
    }

    /// Removes the connection when it holds nothing and is not its session's holder: marks
    /// it dead (under the session's lock) and hands whatever is left in its ring to the
    /// session, or fails it. Returns whether it was removed.
    fn remove(&mut self, cx: &mut PollerCtx<'_>) -> bool {
        let queued = self.rx.as_ref().map_or(0, |r| r.used_count());
        if self.in_use > 0 || self.done || (queued > 0 && self.keeps_calls()) {
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
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) {
        self.grace.timer_fired();
        self.service_lost(env, links, cx, slot, stats);
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
        env: &mut NodeEnv<P>,
        mut links: Option<&mut NodeLinks>,
        cx: &mut PollerCtx<'_>,
        slot: u32,
        stats: &ConnStatsWriter,
    ) {
        self.timer = None;
        self.timer_at = u64::MAX;
        let now = env.now;
        let mut next = u64::MAX;
        for i in 0..self.recs.len() as u32 {
            let r = &self.recs[i as usize];
            if !matches!(r.state, BState::Queued | BState::InFlight) {
                continue;
            }
            if r.deadline <= now {
                stats.back_error();
                self.fail_rec(env, links.as_deref_mut(), i, Err(ClientError::TimedOut));
            } else {
                next = next.min(r.deadline);
            }
        }
        let recs = &self.recs;
        self.ready
            .retain(|&j| recs[j as usize].state == BState::Queued);
        if next != u64::MAX && !self.done {
            self.arm(env, cx, slot, next);
        }
    }
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
