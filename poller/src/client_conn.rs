//! The reactor side of a client (`ClientConn`): one connection slot on a node, its calls (in
//! a [`CallTable`], `call_table.rs`, shared with the server's backward calls), the submission
//! ring it drains, connect / reconnect with back-off, and the state it
//! shares with the [`Client`](crate::Client) handles (`ClientShared`, [`ClientState`]).
//!
//! Normal operation and recovery: as described in [`crate::client`] — calls are taken from the
//! ring into free records, started while credits allow, completed exactly once; a lost
//! connection puts its calls back at the head of the queue (same XIDs) and reconnects after a
//! back-off delay, failing them after `max_retransmits` sends or `max_reconnects` attempts;
//! a call past its deadline (`call_timeout_ms`) fails wherever it waits.

use crate::doorbell::Waker;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use rpcrdma_engine::conn::{
    self, CallError, CallId, CallOptions, CallSpec, Connection, Event, LocalBuf, Role, StartError,
};
use rpcrdma_engine::proto::reject::{self, RejectReason};
use rpcrdma_engine::proto::v2::RdmaError;
use rpcrdma_engine::rpc::{self, AcceptStat, ReplyBody};
use rpcrdma_engine::verbs::{
    CmEventKind, Device, MemoryWindow, ProtectionDomain, Provider, QueuePair,
};
use rpcrdma_mempool::PoolBuf;

pub use crate::call::{CallArgs, Callback, ClientError, Proc, Reply};

use crate::api_stats::{ConnStats, ConnStatsWriter};
use crate::backchannel::ClientBack;
use crate::call_table::{CallRec, CallSink, CallTable, Direction, NewCall, NodeSink, Start};
use crate::config::{ClientOptions, ProtocolVersion};
use crate::ddp::MAX_DDP;
use crate::dispatch::Io;
use crate::driver::ConnDriver;
use crate::memory::{local_buf, Slab};
use crate::mpsc::MpscConsumer;
use crate::negotiated::{Negotiated, NegotiatedCell, PeerPrivateData};
use crate::node::{NodeConn, NodeEnv, Round, TIMER_CALLS, TIMER_CONN, TIMER_RECONNECT};
use crate::timer::TimerHandle;
use crate::worker::NodeLinks;

// ---------------------------------------------------------------------------------------------
// The handle.

/// A call on its way to the reactor.
pub(crate) struct Submit {
    pub(crate) proc: Proc,
    pub(crate) args: CallArgs,
    pub(crate) cb: Callback,
}

/// Connection state as seen from the handle (the reactor publishes it as its `u8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ClientState {
    /// First connect in progress.
    Connecting,
    /// Established.
    Connected,
    /// Lost; reconnecting after a back-off delay.
    Reconnecting,
    /// Gave up reconnecting (calls fail at once).
    Failed,
    /// Closed.
    Closed,
}

pub(crate) struct ClientShared {
    pub(crate) state: AtomicU8,
    pub(crate) closed: AtomicBool,
    pub(crate) submitted: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) stats: ConnStats,
    pub(crate) node_thread: Arc<OnceLock<Waker>>,
    /// What the connection negotiated (written by its reactor only).
    pub(crate) neg: NegotiatedCell,
    /// The code of the reason the server gave when it rejected the last connect attempt (0:
    /// none; written by the reactor only).
    pub(crate) reject: AtomicU8,
}

impl ClientShared {
    fn set_state(&self, s: ClientState) {
        // Release: pairs with the Acquire load in `state`.
        self.state.store(s as u8, Ordering::Release);
    }

    /// The state the reactor published last.
    pub(crate) fn state(&self) -> ClientState {
        // Acquire: pairs with the Release store in `set_state`.
        match self.state.load(Ordering::Acquire) {
            0 => ClientState::Connecting,
            1 => ClientState::Connected,
            2 => ClientState::Reconnecting,
            3 => ClientState::Failed,
            _ => ClientState::Closed,
        }
    }

    fn set_reject(&self, r: Option<RejectReason>) {
        // Relaxed: published with the state (Release in `set_state`) that makes it matter.
        self.reject
            .store(r.map_or(0, RejectReason::code), Ordering::Relaxed);
    }

    pub(crate) fn reject(&self) -> Option<RejectReason> {
        // Relaxed: a reason code, meaningful alone; where it decides an error (`gave_up` in
        // `submit`) it is read after the Acquire load of the state that made it final.
        RejectReason::from_code(self.reject.load(Ordering::Relaxed))
    }

    /// The error of a client that gave up reconnecting.
    pub(crate) fn gave_up(&self) -> ClientError {
        self.reject()
            .map_or(ClientError::ReconnectFailed, ClientError::Rejected)
    }
}

// ---------------------------------------------------------------------------------------------
// The reactor side.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CState {
    /// Waiting for the node to place and connect it.
    Idle,
    Connecting,
    Connected,
    /// Lost; reconnect timer armed.
    Backoff,
    /// Gave up; calls fail at once.
    Failed,
    /// Closed and drained; the node removes it.
    Done,
}

/// One client connection on its reactor. See the module documentation.
pub(crate) struct ClientConn<P: Provider> {
    pub(crate) shared: Arc<ClientShared>,
    pub(crate) rx: MpscConsumer<Submit>,
    pub(crate) opts: ClientOptions,
    pub(crate) addr: SocketAddr,
    pub(crate) drv: ConnDriver<P>,
    pub(crate) slab: Slab,
    pub(crate) cfg: conn::Config,
    pub(crate) nmw: usize,
    pub(crate) state: CState,
    /// The outstanding calls (records, ready queue, engine slots).
    pub(crate) calls: CallTable,
    pub(crate) next_xid: u32,
    pub(crate) attempts: u32,
    pub(crate) backoff_ns: u64,
    pub(crate) timer: Option<TimerHandle>,
    /// Armed at a call deadline while calls wait in the queue (`TIMER_CALLS`).
    pub(crate) deadline_timer: Option<TimerHandle>,
    pub(crate) closing: bool,
    pub(crate) stats: ConnStatsWriter,
    pub(crate) completed: u64,
    pub(crate) worker: usize,
    /// The server's RFC 8797 private data of the current connection.
    pub(crate) peer_pd: Option<PeerPrivateData>,
    /// Version and credits last published to `shared.neg` (0: nothing yet on this connection).
    pub(crate) pub_version: u32,
    pub(crate) pub_credits: u32,
    /// The backchannel this client serves (RFC 8167), if any.
    pub(crate) back: Option<Box<ClientBack>>,
    /// A reconnect waits until no worker holds a view of a backward call's receive buffer.
    pub(crate) reconnect_deferred: bool,
    pub(crate) lat: crate::metrics::latency::CallTimes,
    /// The credential every call carries ([`ClientOptions::credential`]).
    pub(crate) cred: crate::cred::CredBody,
}

/// The connection's [`NodeSink`] (a macro, so that it borrows only the fields it uses and the
/// call table stays free to change).
macro_rules! sink {
    ($s:ident, $env:expr, $links:expr) => {
        NodeSink {
            env: $env,
            links: $links,
            mode: $s.opts.mode,
            worker: $s.worker,
            stats: &$s.stats,
            dir: Direction::Forward,
            completed: Some((&mut $s.completed, &$s.shared.completed)),
        }
    };
}

/// A seed for a connection's window-key generator from the operating system's random source:
/// std's `RandomState` keys come from it (once per thread, then varied per instance), and
/// SipHash under those keys of a process-wide counter is unpredictable to a peer.
fn key_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    // Relaxed: a unique-number counter.
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// Logs a call failed by the server's protocol answer (RDMA_ERROR, RDMA2_ERROR, a reply that
/// could not be used), rate-limited; timeouts and losses are logged with the connection.
#[cold]
#[inline(never)]
fn log_call_error(server: SocketAddr, error: &conn::CallError) {
    use conn::CallError as E;
    if matches!(
        error,
        E::ErrVers { .. } | E::ErrChunk | E::RdmaError(_) | E::Rdma2(_) | E::BadReply(_)
    ) {
        crate::log_limited!(
            peer: server;
            WARN,
            %server,
            ?error,
            "call failed by the server's RDMA_ERROR or an unusable reply"
        );
    }
}

impl<P: Provider> ClientConn<P> {
    fn connect(&mut self, r: &mut Round<'_, '_, P>) {
        let mut mws = Vec::with_capacity(self.nmw);
        for _ in 0..self.nmw {
            match r.env.pd.alloc_mw() {
                Ok(m) => mws.push(m),
                Err(_) => return self.connect_failed(r),
            }
        }
        let keys: Vec<u32> = mws.iter().map(|m| m.rkey()).collect();
        // Each connection draws its window keys from its own secret seed, so no key follows
        // from an earlier one (issue 13, STag hygiene).
        let mut cfg = self.cfg;
        cfg.key_seed = key_seed();
        let conn = match self.back.as_deref() {
            None => Connection::new(Role::Requester, cfg, &self.slab.pools(&keys)),
            Some(b) => b.requester(cfg, &self.slab.pools(&keys)),
        };
        let conn = match conn {
            Ok(c) => c,
            Err(_) => {
                self.fail_all(r.env, None, ClientError::Setup);
                self.state = CState::Failed;
                self.shared.set_state(ClientState::Failed);
                return;
            }
        };
        let init = r.env.qp_init(&self.cfg, self.opts.rnr_retry, None);
        let qp = match r.env.dev.connect(self.addr, init, &conn.private_data()) {
            Ok(q) => q,
            Err(_) => return self.connect_failed(r),
        };
        r.env.qp_created(&qp);
        let qpn = qp.qp_num();
        if !r.env.router.insert(qpn, r.slot) {
            return self.connect_failed(r);
        }
        self.drv.qp_num = qpn;
        self.drv.qp = Some(qp);
        self.drv.conn = Some(conn);
        self.drv.mws = mws;
        self.drv.broken = false;
        self.state = CState::Connecting;
        // Receives may be posted while connecting.
        let p = self.drv.post(r.env.now);
        r.env.stats.posted(u64::from(p.doorbells), u64::from(p.wrs));
    }

    /// A verbs call of a connect attempt failed: counted, and handled as a lost connection.
    fn connect_failed(&mut self, r: &mut Round<'_, '_, P>) {
        r.env.stats.verbs_error();
        self.stats.connect_failed();
        self.lost(r);
    }

    /// A failed attempt's reject may still wait in the QP's events (the flushes that reported
    /// the loss can be polled first: rdma_cm moves the QP to error before the event is read):
    /// read its reason before the QP goes.
    fn read_reject(&mut self) {
        if self.state == CState::Connected {
            return;
        }
        while let Ok(Some(ev)) = self.drv.poll_cm() {
            if ev.kind == CmEventKind::Rejected {
                self.shared
                    .set_reject(reject::decode(ev.private_data.as_slice()));
            }
        }
    }

    /// Drops the QP and routes; the engine has failed every call already.
    fn teardown(&mut self, r: &mut Round<'_, '_, P>) {
        let qp = self.drv.release_qp(&mut r.env.router, r.cx);
        // Windows first: a bound type-2 window holds a reference to its QP (rxe warns when
        // the QP is destroyed under one, and frees it anyway); deallocating invalidates it.
        self.drv.mws.clear();
        if let Some(qp) = qp {
            r.env.retired.retire(qp);
        }
        // What version negotiation learnt about the server holds for the next connection:
        // after a fallback to Version One, Version Two is not probed again.
        if let Some(v) = self.drv.conn.as_ref().and_then(|c| c.remembered_version()) {
            self.cfg.max_version = v.min(self.cfg.max_version).max(conn::VERSION);
        }
        self.drv.conn = None;
        self.peer_pd = None;
        self.pub_version = 0;
        self.calls.engine_gone(&mut sink!(self, r.env, None));
        if let Some(b) = self.back.as_mut() {
            b.on_lost(r.env);
        }
    }

    /// The connection is gone (or never came): back off and reconnect, or give up.
    fn lost(&mut self, r: &mut Round<'_, '_, P>) {
        self.read_reject();
        self.teardown(r);
        if self.closing_now() {
            self.fail_all(r.env, None, ClientError::Closed);
            self.finish(r.env);
            return;
        }
        self.log_lost();
        if self.attempts >= self.opts.max_reconnects {
            let e = self.shared.gave_up();
            self.fail_all(r.env, None, e);
            self.state = CState::Failed;
            self.shared.set_state(ClientState::Failed);
            return;
        }
        self.attempts += 1;
        self.state = CState::Backoff;
        self.shared.set_state(ClientState::Reconnecting);
        let delay = self.backoff_ns;
        self.backoff_ns = (self.backoff_ns * 2).min(self.opts.reconnect_max_ms.max(1) * 1_000_000);
        let token = r.timer_token(TIMER_RECONNECT);
        match r.cx.arm_timer(r.env.now.saturating_add(delay), token) {
            Ok(h) => self.timer = Some(h),
            Err(_) => {
                // No timer room: try again at once rather than never.
                self.connect(r);
            }
        }
    }

    /// The connection is established (again): reset the back-off, publish, count and log it
    /// (rate-limited: after losses it is a reconnection). Out of line, as all of connection
    /// setup.
    #[cold]
    #[inline(never)]
    fn connected(&mut self, env: &mut NodeEnv<P>) {
        let server = self.addr;
        if self.attempts == 0 {
            crate::log_limited!(peer: server; INFO, %server, node = env.index, "connected");
        } else {
            crate::log_limited!(
                peer: server;
                INFO,
                %server,
                attempts = self.attempts,
                node = env.index,
                "reconnected"
            );
        }
        self.state = CState::Connected;
        self.attempts = 0;
        self.backoff_ns = self.opts.reconnect_min_ms.max(1) * 1_000_000;
        self.publish_negotiated();
        self.shared.set_state(ClientState::Connected);
        env.stats.established();
    }

    /// Logs a loss or a failed attempt, and what follows (rate-limited: the back-off can be
    /// short).
    #[cold]
    fn log_lost(&self) {
        let server = self.addr;
        let attempt = self.attempts;
        let rejected = self.shared.reject().map(|r| r.to_string());
        let rejected = rejected.as_deref().unwrap_or("-");
        if self.state == CState::Connected {
            crate::log_limited!(peer: server; WARN, %server, "connection lost");
        } else {
            crate::log_limited!(
                peer: server;
                WARN,
                %server,
                attempt,
                rejected,
                "connect attempt failed"
            );
        }
        if attempt >= self.opts.max_reconnects {
            crate::log_limited!(
                peer: server;
                WARN,
                %server,
                attempts = attempt,
                rejected,
                "giving up: no more reconnection attempts (ClientOptions::max_reconnects)"
            );
        } else {
            crate::log_limited!(
                peer: server;
                INFO,
                %server,
                in_ms = self.backoff_ns / 1_000_000,
                attempt = attempt + 1,
                "reconnecting"
            );
        }
    }

    fn closing_now(&self) -> bool {
        // Acquire: pairs with the Release store in `Client::close`.
        self.closing || self.shared.closed.load(Ordering::Acquire)
    }

    fn finish(&mut self, env: &mut NodeEnv<P>) {
        // Submissions still in the ring (raced with close) complete as closed.
        let mut sink = sink!(self, env, None);
        while let Some(s) = self.rx.dequeue() {
            sink.deliver(s.cb, false, Err(ClientError::Closed));
        }
        self.state = CState::Done;
        self.shared.set_state(ClientState::Closed);
    }

    fn poll_cm(&mut self, env: &mut NodeEnv<P>) -> usize {
        let mut work = 0;
        while let Some(ev) = self.drv.next_cm(&env.stats) {
            work += 1;
            match ev.kind {
                CmEventKind::Established => {
                    self.shared.set_reject(None);
                    self.peer_pd = PeerPrivateData::find(ev.private_data.as_slice());
                    self.drv.established(env.now, ev.private_data.as_slice())
                }
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                    self.drv.disconnected(env.now)
                }
                // Rejected, unreachable, address/route/connect errors: never established. The
                // engine reports ConnectionLost, handled with the other events. A reject may
                // say why (never trusted beyond a reason code).
                kind => {
                    self.shared.set_reject(if kind == CmEventKind::Rejected {
                        reject::decode(ev.private_data.as_slice())
                    } else {
                        None
                    });
                    self.drv.disconnected(env.now)
                }
            }
        }
        work
    }

    fn events(&mut self, r: &mut Round<'_, '_, P>) -> usize {
        let mut work = 0;
        let mut lost = false;
        while let Some(ev) = self.drv.conn.as_mut().and_then(|c| c.poll_event()) {
            work += 1;
            match ev {
                Event::Connected(_) => self.connected(r.env),
                Event::ReplyReady(reply) => self.on_reply(r.env, r.links.as_deref_mut(), reply),
                Event::CallFailed { call, error, .. } => {
                    self.stats.call_failed(&error);
                    self.on_failed(r.env, r.links.as_deref_mut(), call, error)
                }
                Event::ConnectionLost => {
                    lost = true;
                    // Published before the calls failed by the loss complete (their events
                    // follow this one): whoever they wake sees the loss counted and the client
                    // no longer connected. `lost` below settles the state (reconnecting,
                    // failed or closed).
                    // Only an established connection is lost; an attempt that never
                    // reached `Connected` failed.
                    if self.state == CState::Connected {
                        self.stats.lost();
                        self.shared.set_state(ClientState::Reconnecting);
                    } else {
                        self.stats.connect_failed();
                    }
                }
                Event::CallReady(inc) => {
                    if let Some(b) = self.back.as_mut() {
                        b.on_call(&mut Io::of_round(&mut self.drv, r, &self.stats), inc);
                    }
                }
            }
        }
        // Calls the loss returned go back to the head of the queue, in submission order.
        self.calls.resend_held();
        if lost {
            self.lost(r);
        }
        work
    }

    /// Publishes again when the version or the grant changed: the first reply confirms or
    /// abandons Version Two and brings the real grant. Two comparisons when nothing changed.
    fn refresh_negotiated(&mut self) {
        if let Some(c) = self.drv.conn.as_ref() {
            if self.pub_version != 0
                && (c.version() != self.pub_version || c.credits() != self.pub_credits)
            {
                self.publish_negotiated();
            }
        }
    }

    /// Publishes what the current connection negotiated for [`Client::negotiated`].
    fn publish_negotiated(&mut self) {
        let Some(c) = self.drv.conn.as_ref() else {
            return;
        };
        let n = c.negotiated();
        self.pub_version = c.version();
        self.pub_credits = c.credits();
        let version = ProtocolVersion::from_number(self.pub_version).unwrap_or(ProtocolVersion::V1);
        // In effect when both sides set R (RFC 8797 §4.1); in Version Two the client then
        // names the handle the server may invalidate in each call.
        // (With persistent STags the client never advertises R.)
        let remote_invalidate = self.cfg.remote_invalidate
            && self.cfg.stag == conn::StagMode::MemoryWindows
            && self.peer_pd.is_some_and(|p| p.remote_invalidate);
        self.shared.neg.store(&Negotiated {
            version,
            send_inline: n.send_inline,
            recv_inline: n.recv_inline,
            remote_invalidate,
            peer_private_data: self.peer_pd,
            credits: self.pub_credits,
        });
        self.stats.version(u64::from(self.pub_version));
    }

    /// The engine failed a call: sent again on the next connection (same XID) when the
    /// connection was lost and retransmits remain, else completed with the error.
    fn on_failed(
        &mut self,
        env: &mut NodeEnv<P>,
        links: Option<&mut NodeLinks>,
        call: CallId,
        error: CallError,
    ) {
        log_call_error(self.addr, &error);
        let closing = self.closing_now();
        let max_retransmits = self.opts.max_retransmits;
        let mut sink = sink!(self, env, links);
        let Some(i) = self.calls.returned(call, &mut sink) else {
            return;
        };
        if error == CallError::ConnectionLost && !closing {
            if self.calls.rec(i).sends > max_retransmits {
                let e = Err(ClientError::RetransmitsExhausted);
                self.calls.finish(i, &mut sink, e);
            } else {
                // Sent again, with the same XID, on the next connection.
                self.calls.hold_for_resend(i);
            }
            return;
        }
        let e = match error {
            CallError::TimedOut => ClientError::TimedOut,
            CallError::ConnectionLost => ClientError::Closed,
            CallError::Rdma2(RdmaError::CantReply {
                segment_index,
                length_needed,
                ..
            }) => ClientError::CantReply {
                segment: segment_index,
                needed: length_needed,
            },
            other => ClientError::Transport(other),
        };
        self.calls.finish(i, &mut sink, Err(e));
    }

    fn on_reply(&mut self, env: &mut NodeEnv<P>, links: Option<&mut NodeLinks>, r: conn::Reply) {
        let Some(i) = self.calls.returned(r.call, &mut sink!(self, env, None)) else {
            return;
        };
        // Before the callback runs, so that it sees the settings this reply confirmed.
        self.refresh_negotiated();
        self.lat.done(i, env.now);
        let rec = self.calls.rec_mut(i);
        let Some(buf) = rec.reply.take() else { return };
        let len = (r.len as usize).min(buf.len());
        let mut receptacles: [Option<(PoolBuf, u32)>; MAX_DDP] = Default::default();
        let mut ddp_in = 0u64;
        if let Some(a) = rec.args.as_mut() {
            for (k, w) in r.written().iter().enumerate().take(MAX_DDP) {
                if let Some(b) = a.receptacles[k].take() {
                    let n = (*w).min(b.len() as u32);
                    ddp_in += u64::from(n);
                    receptacles[k] = Some((b, n));
                }
            }
        }
        self.stats.reply_in(len as u64 + ddp_in);
        if r.long {
            self.stats.reply_chunk_reply();
        }
        let outcome = match rpc::decode_reply(&buf[..len]) {
            Ok((h, off)) => match h.body {
                ReplyBody::Accepted {
                    stat: AcceptStat::Success,
                    ..
                } => Ok(Reply {
                    off: off as u32,
                    len: (len - off) as u32,
                    xid: rec.xid,
                    buf,
                    receptacles,
                }),
                ReplyBody::Accepted { stat, .. } => Err(ClientError::Rpc(stat)),
                ReplyBody::Denied(d) => Err(ClientError::Denied(d)),
            },
            Err(_) => Err(ClientError::BadReply),
        };
        self.calls.finish(i, &mut sink!(self, env, links), outcome);
    }

    /// Fails every held call (queued or on the wire) and every call in the ring.
    fn fail_all(&mut self, env: &mut NodeEnv<P>, links: Option<&mut NodeLinks>, e: ClientError) {
        let mut sink = sink!(self, env, links);
        self.calls.fail_all(&mut sink, e);
        while let Some(s) = self.rx.dequeue() {
            sink.deliver(s.cb, false, Err(e));
        }
    }

    /// Takes calls from the ring into free records.
    fn take_submissions(&mut self, env: &mut NodeEnv<P>, links: Option<&mut NodeLinks>) -> usize {
        let mut n = 0;
        let deadline = match self.opts.call_timeout_ms {
            0 => u64::MAX,
            ms => env.now.saturating_add(ms.saturating_mul(1_000_000)),
        };
        let mut sink = sink!(self, env, links);
        if self.state == CState::Failed {
            while let Some(s) = self.rx.dequeue() {
                sink.deliver(s.cb, false, Err(ClientError::ReconnectFailed));
                n += 1;
            }
            return n;
        }
        while self.calls.has_free() && self.rx.used_count() > 0 {
            let Some(reply) = sink.get_buf() else {
                break;
            };
            let mut reply = Some(reply);
            let xid = self.next_xid;
            let calls = &mut self.calls;
            // The submission moves from its ring slot straight into its record.
            let taken = self.rx.dequeue_with(|sub| {
                calls.alloc(NewCall {
                    xid,
                    proc: sub.proc,
                    args: sub.args,
                    reply: reply.take(),
                    cb: sub.cb,
                    inline_cb: false,
                    deadline,
                    sends: 0,
                    cred: None,
                })
            });
            let Some(alloc) = taken else {
                if let Some(b) = reply.take() {
                    sink.put_buf(b);
                }
                break;
            };
            self.next_xid = self.next_xid.wrapping_add(1);
            let Some(i) = alloc else {
                break;
            };
            n += 1;
            let r = self.calls.rec(i);
            self.lat.key(i, r.proc.prog, r.proc.vers, r.proc.proc_num);
            if self
                .calls
                .rec_mut(i)
                .encode_header(&mut self.drv.mem, &self.cred)
            {
                self.calls.push_ready(i);
            } else {
                let e = Err(ClientError::BadCall(StartError::BadSpec));
                self.calls.finish(i, &mut sink, e);
            }
        }
        n
    }

    /// Starts queued calls while the engine takes them.
    fn start_ready(&mut self, env: &mut NodeEnv<P>, links: Option<&mut NodeLinks>) -> usize {
        let now = env.now;
        let ddp = self.cfg.ddp;
        let drv = &mut self.drv;
        let lat = &mut self.lat;
        let mut sink = sink!(self, env, links);
        self.calls.start_ready(&mut sink, |i, rec, sink| {
            let (start, items, receptacles) = start_call(drv, now, ddp, i, rec);
            if let Start::Started(..) = start {
                sink.stats.call_chunks_out(items, receptacles);
                lat.start(i, now);
            }
            start
        })
    }

    /// While calls wait in the queue (for a credit, a connection, a send slot), keeps a timer
    /// armed at the earliest call deadline: the engine times out only the calls it was given,
    /// and a call waiting behind calls that timed out (their credits stay in use until the
    /// server answers them) would otherwise wait for ever. Calls past their deadline fail with
    /// [`ClientError::TimedOut`] wherever they are (one on the wire stays a zombie until the
    /// engine gives it back).
    fn arm_deadline(&mut self, r: &mut Round<'_, '_, P>) {
        if self.opts.call_timeout_ms == 0
            || self.deadline_timer.is_some()
            || self.calls.queued() == 0
        {
            return;
        }
        let now = r.env.now;
        let next = self
            .calls
            .expire(now, &mut sink!(self, r.env, r.links.as_deref_mut()));
        if next == u64::MAX {
            return;
        }
        let token = r.timer_token(TIMER_CALLS);
        if let Ok(h) = r.cx.arm_timer(next, token) {
            self.deadline_timer = Some(h);
        }
    }
}

/// Hands the call of `rec` (record `i`, started in engine call slot `i`) to the engine (with
/// its receptacles and reply buffer, the reply size hint applied); with the call's Read items
/// and receptacles (the chunks it offers).
fn start_call<P: Provider>(
    drv: &mut ConnDriver<P>,
    now: u64,
    ddp: bool,
    i: u32,
    rec: &CallRec,
) -> (Start, usize, usize) {
    let Some(conn) = drv.conn.as_mut() else {
        return (Start::Wait, 0, 0);
    };
    let (Some(m), Some(args), Some(reply)) = (rec.message(), rec.args.as_ref(), rec.reply.as_ref())
    else {
        return (Start::Skip, 0, 0);
    };
    let mut recp = [LocalBuf::EMPTY; MAX_DDP];
    let mut nr = 0;
    for b in args.receptacles.iter().take(args.nrec).flatten() {
        recp[nr] = local_buf(b, b.len());
        nr += 1;
    }
    // The hinted part of the reply buffer first, the whole buffer for the retry (the engine
    // sizes it: `Connection::first_reply_len`).
    let whole = local_buf(reply, reply.len());
    let writes = if ddp { nr } else { 0 };
    let first_len = conn.first_reply_len(args.reply_hint as usize, reply.len(), writes);
    let (first, fallback) = if first_len < reply.len() {
        (local_buf(reply, first_len), Some(whole))
    } else {
        (whole, None)
    };
    let spec = CallSpec {
        message: &m.parts[..m.np],
        ddp: &m.items[..m.ni],
        receptacles: &recp[..nr],
        reply: first,
    };
    let copts = CallOptions {
        fallback_reply: fallback,
        fallback_receptacles: &[],
    };
    let started = conn.start_call_in(now, i, rec.xid, &spec, &copts, &mut drv.mem);
    (Start::of(started, m.bytes), m.ni, nr)
}

impl<P: Provider> Drop for ClientConn<P> {
    fn drop(&mut self) {
        // Anything still held completes now (runtime torn down before the client drained).
        let completed = &mut self.completed;
        self.calls.drain_callbacks(|cb| {
            *completed += 1;
            cb.call(Err(ClientError::Closed));
        });
        while let Some(s) = self.rx.dequeue() {
            self.completed += 1;
            s.cb.call(Err(ClientError::Closed));
        }
        // Relaxed: see `NodeSink::deliver`.
        self.shared
            .completed
            .store(self.completed, Ordering::Relaxed);
        self.shared.set_state(ClientState::Closed);
    }
}

impl<P: Provider> NodeConn<P> for ClientConn<P> {
    /// Placed on a node: connect.
    fn start(&mut self, r: &mut Round<'_, '_, P>) {
        self.worker = r.slot as usize;
        self.connect(r);
    }

    /// Feeds a completion of this connection's QP to the engine (counting receives that came
    /// as Send With Invalidate).
    #[inline]
    fn feed(&mut self, now: u64, wc: &rpcrdma_engine::verbs::Completion) {
        if wc.status.is_success() && wc.flags.contains(rpcrdma_engine::verbs::WcFlags::WITH_INV) {
            self.stats.remote_invalidation();
        }
        self.drv.feed(now, wc);
    }

    /// A worker finished a backward call's handler.
    fn on_served(&mut self, env: &mut NodeEnv<P>, s: crate::worker::Served) {
        if let Some(b) = self.back.as_mut() {
            b.on_served(&mut self.drv, env, s, &self.stats);
        }
    }

    /// One round of work; returns the work done.
    fn service(&mut self, r: &mut Round<'_, '_, P>) -> usize {
        let mut work = 0;
        if self.state == CState::Done {
            return 0;
        }
        // Acquire: pairs with the Release store in `Client::close`.
        if !self.closing && self.shared.closed.load(Ordering::Acquire) {
            self.closing = true;
        }
        if self.reconnect_deferred && self.back.as_ref().map_or(true, |b| b.idle()) {
            self.reconnect_deferred = false;
            if self.state == CState::Backoff {
                self.stats.reconnect();
                self.connect(r);
            }
        }
        // CM events.
        work += self.poll_cm(r.env);
        // Engine events.
        work += self.events(r);
        // Backward calls that waited for a reply buffer or send-queue room.
        if let Some(b) = self.back.as_mut() {
            work += b.service(&mut Io::of_round(&mut self.drv, r, &self.stats));
        }
        // New calls from the ring (not while completions wait for a worker: back-pressure).
        let congested = r.links.as_deref().is_some_and(|l| l.congested());
        if !congested {
            work += self.take_submissions(r.env, r.links.as_deref_mut());
        }
        // Start what the credits allow.
        if self.state == CState::Connected {
            work += self.start_ready(r.env, r.links.as_deref_mut());
        }
        // Post the batch.
        work += self.drv.post_counted(r.env.now, &r.env.stats, &self.stats);
        if self.drv.broken {
            work += self.events(r);
        }
        if self.drv.conn.is_some() {
            let token = r.timer_token(TIMER_CONN);
            self.drv.sync_timer(r.cx, token);
        }
        self.arm_deadline(r);
        if let Some(c) = self.drv.conn.as_ref() {
            self.stats
                .credits(u64::from(c.outstanding()), u64::from(c.credits()));
        }
        self.refresh_negotiated();
        self.stats.queued(self.calls.queued() as u64);
        self.stats.recv_queue(self.drv.conn.as_ref());
        self.lat.serve();
        // Closed and drained: disconnect.
        if self.closing && self.calls.in_use() == 0 && self.rx.used_count() == 0 {
            self.teardown(r);
            self.finish(r.env);
            work += 1;
        }
        work
    }

    /// True once closed and drained (the node removes it).
    fn is_done(&self) -> bool {
        self.state == CState::Done && self.back.as_ref().map_or(true, |b| b.idle())
    }

    /// A timer of this connection fired.
    fn on_timer(&mut self, kind: u8, r: &mut Round<'_, '_, P>) {
        match kind {
            TIMER_RECONNECT => {
                self.timer = None;
                if self.state == CState::Backoff {
                    if self.back.as_ref().is_some_and(|b| !b.idle()) {
                        // `service` connects once the workers are done with the old receives.
                        self.reconnect_deferred = true;
                    } else {
                        self.stats.reconnect();
                        self.connect(r);
                    }
                }
            }
            TIMER_CONN => {
                self.drv.on_timer(r.env.now);
                self.service(r);
            }
            TIMER_CALLS => {
                self.deadline_timer = None;
                self.arm_deadline(r);
                self.service(r);
            }
            _ => {}
        }
    }

    /// The reactor is stopping: drain and close.
    fn shutdown(&mut self) {
        self.closing = true;
    }
}
