//! One table of outstanding calls for both call directions (issue 14): the forward calls of a
//! client connection (`client_conn.rs`) and the backward calls (RFC 8167) of a server
//! connection (`server_back.rs`) keep their records here. A [`CallTable`] has a fixed number of
//! records, sized at creation (nothing allocates per call), each with its RPC header buffer,
//! arguments, reply buffer, callback, deadline and engine call handle; a free list; and the
//! ready queue (calls waiting for a credit, a buffer or a connection). A record's index is
//! also the engine's call slot of the call ([`CallId::slot`]): the connection is configured
//! with one requester slot per record (`conn::Config::call_slots`) and every call is started
//! in its record's slot (`Connection::start_call_in`), so an engine report names its record
//! directly. How a completed call's callback runs, where reply buffers go and which counters
//! count an error is the owner's [`CallSink`] ([`NodeSink`] on a reactor).
//!
//! Normal operation: the owner takes a call into a free record ([`CallTable::alloc`]), queues
//! it ([`CallTable::push_ready`]), starts queued calls in order while the engine takes them
//! ([`CallTable::start_ready`]), and hands the record the engine reports a reply or failure for
//! back to the table ([`CallTable::returned`], which ignores a report whose call id no longer
//! matches: a late report for a slot already reused), then completes it
//! ([`CallTable::finish`]). Every callback runs exactly once: a record gives its callback up
//! once, when it is finished, and is freed when the engine no longer uses its buffers.
//! Recovery: a call finished while the engine still has it (a local deadline, a session
//! closed) becomes a zombie that keeps its buffers until the engine reports it or goes
//! ([`CallTable::engine_gone`]); a lost connection's calls go back to the head of the queue in
//! submission order to be sent again with the same XIDs ([`CallTable::hold_for_resend`],
//! [`CallTable::resend_held`]), stay parked ([`CallTable::park_all`]), move to another
//! connection ([`CallTable::hand_over`]) or fail ([`CallTable::fail_all`]); local deadlines
//! fail the calls past them ([`CallTable::expire`]).

// A call handed over and refused comes back by value, so nothing allocates on the way.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use rpcrdma_engine::conn::{CallId, DdpItem, HostMemory, LocalBuf, StartError};
use rpcrdma_engine::rpc::{self, CallHeader, OpaqueAuth};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::PoolBuf;

use crate::api_stats::ConnStatsWriter;
use crate::call::{CallArgs, Callback, ClientError, Proc, Reply};
use crate::config::CallbackMode;
use crate::cred::CredBody;
use crate::ddp::MAX_DDP;
use crate::memory::{local_buf, SlabLayout};
use crate::node::NodeEnv;
use crate::worker::{CompleteJob, Job, NodeLinks};

/// Size of the RPC call header buffer of each call record (AUTH_NONE headers take 40 octets).
pub(crate) const RPC_HEADER_SIZE: u32 = 160;
// The largest credential body fits a header buffer with the call's other 40 octets.
const _: () = assert!(RPC_HEADER_SIZE as usize >= 40 + crate::cred::CRED_MAX);

/// The slab of a connection's requester side: `credits` send headers of `header_size` and
/// receives of `recv_size`, and one RPC header buffer per call record.
pub(crate) fn requester_layout(
    credits: u32,
    header_size: u32,
    recv_size: u32,
    calls: usize,
) -> SlabLayout {
    SlabLayout {
        headers: credits as usize,
        header_size,
        recvs: credits as usize,
        recv_size,
        data: 0,
        data_size: 0,
        rpc_headers: calls,
        rpc_header_size: RPC_HEADER_SIZE,
    }
}

/// Where a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallState {
    Free,
    /// Waiting to be sent (in the ready queue, held for a resend, or parked).
    Queued,
    /// On the wire (the engine has it).
    InFlight,
    /// Completed while the engine still has it: its buffers are kept until the engine reports
    /// the call or goes.
    Zombie,
}

/// A call taken into a record (or handed over from one).
pub(crate) struct NewCall {
    pub(crate) xid: u32,
    pub(crate) proc: Proc,
    pub(crate) args: CallArgs,
    /// The reply buffer, when the owner has one at once (else taken when the call starts).
    pub(crate) reply: Option<PoolBuf>,
    pub(crate) cb: Callback,
    /// Complete on the reactor even in worker mode.
    pub(crate) inline_cb: bool,
    /// Reactor-clock time the call fails at (`u64::MAX`: never).
    pub(crate) deadline: u64,
    /// Times the call was sent already.
    pub(crate) sends: u32,
    /// The call's own credential (`None`: the connection's).
    pub(crate) cred: Option<CredBody>,
}

/// One outstanding call, from submission to callback: the one record of it, owned by its
/// connection's [`CallTable`]. It outlives a QP: when a connection is lost, the record is
/// kept (held, parked or handed to another connection) and its call is sent again with the
/// same XID on the next QP. The XID is assigned here, once per call ([`NewCall::xid`]),
/// encoded into the record's RPC header and handed to the engine as a value, with the
/// record's index as the engine's call slot (`Connection::start_call_in`). The engine's slot
/// of the same index holds, while the call is on one QP, only what the wire needs (its STags,
/// outstanding work requests, credit, the reply resources offered); it is not a second record
/// of the call (nothing maps one to the other) and goes with the QP. `call` below is the
/// generation of that transmission, to tell a late report from the current one.
pub(crate) struct CallRec {
    gen: u32,
    state: CallState,
    /// The call's XID, for every transmission of the call.
    pub(crate) xid: u32,
    pub(crate) proc: Proc,
    /// Submission order (resends go out oldest first).
    seq: u64,
    /// The record's RPC header buffer and the octets encoded in it (0: not yet).
    pub(crate) hdr: LocalBuf,
    pub(crate) hdr_len: u32,
    /// What `hdr` holds from the last header encoded in it: that call's procedure and the
    /// header's length (`None`: nothing usable). Only this record writes `hdr`, and the peer
    /// may at most read it ([`crate::memory::HEADER_REMOTE`]).
    hdr_cached: Option<(Proc, u32)>,
    pub(crate) args: Option<CallArgs>,
    pub(crate) reply: Option<PoolBuf>,
    cb: Option<Callback>,
    inline_cb: bool,
    deadline: u64,
    /// Times sent (a start with `sends > 0` is a retransmission).
    pub(crate) sends: u32,
    call: Option<CallId>,
    /// The call's own credential (`None`: the connection's).
    cred: Option<CredBody>,
}

/// The message of a call as the engine takes it: the RPC header and the arguments, and the
/// DDP-eligible argument items.
pub(crate) struct Message {
    pub(crate) parts: [LocalBuf; 2],
    pub(crate) np: usize,
    pub(crate) items: [DdpItem; MAX_DDP],
    pub(crate) ni: usize,
    /// Octets of the call (header, arguments, items).
    pub(crate) bytes: u64,
}

impl CallRec {
    fn new(hdr: LocalBuf) -> CallRec {
        CallRec {
            gen: 0,
            state: CallState::Free,
            xid: 0,
            proc: Proc::new(0, 0, 0),
            seq: 0,
            hdr,
            hdr_len: 0,
            hdr_cached: None,
            args: None,
            reply: None,
            cb: None,
            inline_cb: false,
            deadline: u64::MAX,
            sends: 0,
            call: None,
            cred: None,
        }
    }

    /// Encodes the call's RPC header with credential `cred` into its header buffer; `false`
    /// when it does not fit (then `hdr_len` is 0).
    ///
    /// When the buffer already holds the header of a call of the same procedure (the usual
    /// case: a record's calls repeat a few procedures), only the XID is written: the rest of
    /// the header depends on the procedure and the connection's credential alone (one per
    /// connection, never changed while its records live).
    pub(crate) fn encode_header(&mut self, mem: &mut impl HostMemory, cred: &CredBody) -> bool {
        let own = self.cred.is_some();
        let cred = self.cred.as_ref().unwrap_or(cred);
        if let (Some((proc, len)), false) = (self.hdr_cached, own) {
            if proc == self.proc {
                if let Some(b) = mem.bytes_mut(self.hdr.addr, 4) {
                    b.copy_from_slice(&self.xid.to_be_bytes());
                    self.hdr_len = len;
                    return true;
                }
            }
        }
        let h = CallHeader {
            xid: self.xid,
            prog: self.proc.prog,
            vers: self.proc.vers,
            proc_num: self.proc.proc_num,
            cred: cred.auth(),
            verf: OpaqueAuth::NONE,
        };
        self.hdr_len = mem
            .bytes_mut(self.hdr.addr, self.hdr.len as usize)
            .and_then(|out| rpc::encode_call(out, &h).ok())
            .unwrap_or(0) as u32;
        // A call's own credential is not the connection's: the next call encodes afresh.
        self.hdr_cached = (self.hdr_len > 0 && !own).then_some((self.proc, self.hdr_len));
        self.hdr_len > 0
    }

    /// The message to send: `None` without arguments or an encoded header.
    pub(crate) fn message(&self) -> Option<Message> {
        let args = self.args.as_ref()?;
        if self.hdr_len == 0 {
            return None;
        }
        let (abuf, alen) = args.written();
        let mut parts = [LocalBuf::EMPTY; 2];
        parts[0] = self.hdr.sub(0, self.hdr_len).unwrap_or(LocalBuf::EMPTY);
        let mut np = 1;
        if alen > 0 {
            parts[1] = local_buf(abuf, alen);
            np = 2;
        }
        let (items, ni, ddp_bytes) = args.ddp_items().engine_items(self.hdr_len);
        Some(Message {
            parts,
            np,
            items,
            ni,
            bytes: u64::from(self.hdr_len) + alen as u64 + ddp_bytes,
        })
    }
}

/// What completing a call needs from its owner.
pub(crate) trait CallSink {
    /// A reply buffer for a call about to start.
    fn get_buf(&mut self) -> Option<PoolBuf>;
    /// A reply buffer no record holds any more.
    fn put_buf(&mut self, b: PoolBuf);
    /// Counts a call completed with an error (before its callback runs).
    fn count_error(&mut self);
    /// Counts a call the engine took: `bytes` octets, sent before when `resend`.
    fn count_start(&mut self, bytes: u64, resend: bool);
    /// Runs a callback (or hands it to a worker).
    fn deliver(&mut self, cb: Callback, inline: bool, outcome: Result<Reply, ClientError>);
}

/// What the owner's start function made of the call at the head of the ready queue.
pub(crate) enum Start {
    /// The engine took it (a call of this many octets).
    Started(CallId, u64),
    /// Not now (no credit, buffer or connection): the queue waits.
    Wait,
    /// Dropped from the queue without completing.
    Skip,
    /// Completes with this error.
    Fail(ClientError),
}

impl Start {
    /// What the engine's answer to starting a call of `bytes` octets means (either
    /// direction): taken; wait for a credit, the send queue or the connection; or fail.
    pub(crate) fn of(r: Result<CallId, StartError>, bytes: u64) -> Start {
        match r {
            Ok(id) => Start::Started(id, bytes),
            Err(StartError::NoCredit | StartError::Busy | StartError::NotConnected) => Start::Wait,
            // Only a server's backward call: the client has not said it serves them.
            Err(StartError::BackchannelDisabled) => Start::Fail(ClientError::NotServed),
            Err(e) => Start::Fail(ClientError::BadCall(e)),
        }
    }
}

/// The outstanding calls of one connection (one direction). See the module documentation.
pub(crate) struct CallTable {
    recs: Vec<CallRec>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    /// Records held for a resend (and, in `hand_over`, the parked ones in order).
    scratch: Vec<u32>,
    seq: u64,
    in_use: u32,
    in_flight: u32,
}

impl CallTable {
    /// A table of one record per header buffer in `headers` (and as many engine call slots,
    /// `conn::Config::call_slots`).
    pub(crate) fn new(headers: &[LocalBuf]) -> CallTable {
        let n = headers.len();
        CallTable {
            recs: headers.iter().map(|&h| CallRec::new(h)).collect(),
            free: (0..n as u32).rev().collect(),
            ready: VecDeque::with_capacity(n),
            scratch: Vec::with_capacity(n),
            seq: 0,
            in_use: 0,
            in_flight: 0,
        }
    }

    /// Records held (queued, on the wire or zombie).
    pub(crate) fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Calls on the wire.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Calls in the ready queue.
    pub(crate) fn queued(&self) -> usize {
        self.ready.len()
    }

    /// Whether a record is free.
    pub(crate) fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// Record `i`.
    pub(crate) fn rec(&self, i: u32) -> &CallRec {
        &self.recs[i as usize]
    }

    /// Record `i`, to change.
    pub(crate) fn rec_mut(&mut self, i: u32) -> &mut CallRec {
        &mut self.recs[i as usize]
    }

    /// Takes `c` into a free record (queued, not yet in the ready queue). `None` when every
    /// record is held (then `c` is dropped: its callback runs with `Dropped`); owners check
    /// [`CallTable::has_free`] first.
    #[inline(always)] // lets the compiler move the arguments and callback straight in
    pub(crate) fn alloc(&mut self, c: NewCall) -> Option<u32> {
        let i = self.free.pop()?;
        self.seq += 1;
        let r = &mut self.recs[i as usize];
        r.state = CallState::Queued;
        r.xid = c.xid;
        r.proc = c.proc;
        r.seq = self.seq;
        r.hdr_len = 0;
        r.args = Some(c.args);
        r.reply = c.reply;
        r.cb = Some(c.cb);
        r.inline_cb = c.inline_cb;
        r.deadline = c.deadline;
        r.sends = c.sends;
        // Only a call's own credential is copied (the usual `None` is a word, not the body).
        r.cred = None;
        if let Some(cred) = c.cred {
            r.cred = Some(cred);
        }
        r.call = None;
        self.in_use += 1;
        Some(i)
    }

    /// Queues record `i` (at the tail) to be started.
    pub(crate) fn push_ready(&mut self, i: u32) {
        self.ready.push_back(i);
    }

    /// Empties the ready queue (the calls stay held).
    pub(crate) fn clear_ready(&mut self) {
        self.ready.clear();
    }

    /// Starts queued calls in order through `start` (given each record's index, which is the
    /// engine call slot to start it in) until it says to wait; returns the calls started (each
    /// counted in the sink).
    pub(crate) fn start_ready<S: CallSink>(
        &mut self,
        sink: &mut S,
        mut start: impl FnMut(u32, &mut CallRec, &mut S) -> Start,
    ) -> usize {
        let mut n = 0;
        while let Some(&i) = self.ready.front() {
            match start(i, &mut self.recs[i as usize], sink) {
                Start::Started(id, bytes) => {
                    // The engine started it in the record's own slot.
                    debug_assert_eq!(id.slot, i);
                    self.ready.pop_front();
                    let r = &mut self.recs[i as usize];
                    sink.count_start(bytes, r.sends > 0);
                    r.sends += 1;
                    r.state = CallState::InFlight;
                    r.call = Some(id);
                    self.in_flight += 1;
                    n += 1;
                }
                Start::Wait => break,
                Start::Skip => {
                    self.ready.pop_front();
                }
                Start::Fail(e) => {
                    self.ready.pop_front();
                    self.finish(i, sink, Err(e));
                }
            }
        }
        n
    }

    /// The engine reported `call` (a reply or a failure): the record it was (the record of
    /// the call's slot), now queued and no longer the engine's, or `None` (a stale id: an
    /// earlier transmission, or a connection already gone; a record completed meanwhile — a
    /// zombie — is freed now).
    pub(crate) fn returned(&mut self, call: CallId, sink: &mut impl CallSink) -> Option<u32> {
        let i = call.slot;
        let r = self.recs.get_mut(i as usize)?;
        if r.call != Some(call) {
            return None;
        }
        r.call = None;
        match r.state {
            CallState::Zombie => {
                self.free(i, sink);
                return None;
            }
            CallState::InFlight => {
                r.state = CallState::Queued;
                self.in_flight -= 1;
            }
            CallState::Queued | CallState::Free => {}
        }
        Some(i)
    }

    /// Completes record `i` with `outcome` (its callback runs now, once; an error is counted
    /// first). A call on the wire becomes a zombie (the engine still uses its buffers); any
    /// other is freed.
    #[inline(always)] // the outcome (a `Reply` of a few hundred octets) moves once, to the sink
    pub(crate) fn finish(
        &mut self,
        i: u32,
        sink: &mut impl CallSink,
        outcome: Result<Reply, ClientError>,
    ) {
        let r = &mut self.recs[i as usize];
        let cb = r.cb.take();
        let inline = r.inline_cb;
        match r.state {
            CallState::InFlight => {
                r.state = CallState::Zombie;
                self.in_flight -= 1;
            }
            CallState::Queued => self.free(i, sink),
            CallState::Zombie | CallState::Free => {}
        }
        if outcome.is_err() {
            sink.count_error();
        }
        if let Some(cb) = cb {
            sink.deliver(cb, inline, outcome);
        }
    }

    fn free(&mut self, i: u32, sink: &mut impl CallSink) {
        let r = &mut self.recs[i as usize];
        if r.state == CallState::Free {
            return;
        }
        r.state = CallState::Free;
        r.gen = r.gen.wrapping_add(1);
        r.args = None;
        if let Some(b) = r.reply.take() {
            sink.put_buf(b);
        }
        r.cb = None;
        r.call = None;
        r.hdr_len = 0;
        self.in_use -= 1;
        self.free.push(i);
    }

    /// Parks queued record `i` (kept for its session): its reply buffer goes back.
    pub(crate) fn park(&mut self, i: u32, sink: &mut impl CallSink) {
        if let Some(b) = self.recs[i as usize].reply.take() {
            sink.put_buf(b);
        }
    }

    /// Parks every queued call (see [`CallTable::park`]).
    pub(crate) fn park_all(&mut self, sink: &mut impl CallSink) {
        for i in 0..self.recs.len() as u32 {
            if self.recs[i as usize].state == CallState::Queued {
                self.park(i, sink);
            }
        }
    }

    /// Holds returned record `i` to be sent again (see [`CallTable::resend_held`]).
    pub(crate) fn hold_for_resend(&mut self, i: u32) {
        self.scratch.push(i);
    }

    /// Puts the held records back at the head of the ready queue, in submission order.
    pub(crate) fn resend_held(&mut self) {
        if self.scratch.is_empty() {
            return;
        }
        let recs = &self.recs;
        self.scratch.sort_unstable_by_key(|&i| recs[i as usize].seq);
        for &i in self.scratch.iter().rev() {
            self.ready.push_front(i);
        }
        self.scratch.clear();
    }

    /// The engine is gone (the connection was torn down): zombies are freed, calls on the
    /// wire are queued again (not in the ready queue), no record keeps an engine call id.
    pub(crate) fn engine_gone(&mut self, sink: &mut impl CallSink) {
        for i in 0..self.recs.len() as u32 {
            let r = &mut self.recs[i as usize];
            match r.state {
                CallState::Zombie => self.free(i, sink),
                CallState::InFlight => {
                    r.state = CallState::Queued;
                    r.call = None;
                    self.in_flight -= 1;
                }
                CallState::Queued | CallState::Free => {}
            }
        }
    }

    /// Fails every call held (queued, parked or on the wire) with `e`; returns how many.
    pub(crate) fn fail_all(&mut self, sink: &mut impl CallSink, e: ClientError) -> usize {
        let mut n = 0;
        for i in 0..self.recs.len() as u32 {
            if matches!(
                self.recs[i as usize].state,
                CallState::Queued | CallState::InFlight
            ) {
                self.finish(i, sink, Err(e));
                n += 1;
            }
        }
        self.ready.clear();
        n
    }

    /// Fails every call past its deadline at `now` with [`ClientError::TimedOut`]; returns
    /// the earliest deadline still ahead (`u64::MAX`: none).
    pub(crate) fn expire(&mut self, now: u64, sink: &mut impl CallSink) -> u64 {
        let mut next = u64::MAX;
        for i in 0..self.recs.len() as u32 {
            let r = &self.recs[i as usize];
            if !matches!(r.state, CallState::Queued | CallState::InFlight) {
                continue;
            }
            if r.deadline <= now {
                self.finish(i, sink, Err(ClientError::TimedOut));
            } else {
                next = next.min(r.deadline);
            }
        }
        let recs = &self.recs;
        self.ready
            .retain(|&j| recs[j as usize].state == CallState::Queued);
        next
    }

    /// Hands the queued calls, oldest first, to `to` (same XIDs, deadlines and send counts);
    /// each one `to` takes is freed here. Stops at the first `to` refuses (it stays held).
    /// Returns the calls handed over and whether one was refused.
    pub(crate) fn hand_over(
        &mut self,
        sink: &mut impl CallSink,
        mut to: impl FnMut(NewCall) -> Result<(), NewCall>,
    ) -> (usize, bool) {
        self.scratch.clear();
        for (i, r) in self.recs.iter().enumerate() {
            if r.state == CallState::Queued {
                self.scratch.push(i as u32);
            }
        }
        let recs = &self.recs;
        self.scratch.sort_unstable_by_key(|&i| recs[i as usize].seq);
        let (mut n, mut refused) = (0, false);
        for k in 0..self.scratch.len() {
            let i = self.scratch[k];
            let r = &mut self.recs[i as usize];
            let (Some(args), Some(cb)) = (r.args.take(), r.cb.take()) else {
                self.free(i, sink);
                continue;
            };
            let c = NewCall {
                xid: r.xid,
                proc: r.proc,
                args,
                reply: None,
                cb,
                inline_cb: r.inline_cb,
                deadline: r.deadline,
                sends: r.sends,
                cred: r.cred,
            };
            match to(c) {
                Ok(()) => {
                    self.free(i, sink);
                    n += 1;
                }
                Err(c) => {
                    let r = &mut self.recs[i as usize];
                    r.args = Some(c.args);
                    r.cb = Some(c.cb);
                    refused = true;
                    break;
                }
            }
        }
        self.scratch.clear();
        (n, refused)
    }

    /// Takes every record's callback that has not run, for `f` (teardown).
    pub(crate) fn drain_callbacks(&mut self, mut f: impl FnMut(Callback)) {
        for r in self.recs.iter_mut() {
            if let Some(cb) = r.cb.take() {
                f(cb);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Completing calls on a reactor.

/// Which counters a connection's call errors go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// A client's calls (`errors`).
    Forward,
    /// A server's backward calls (`back_errors`).
    Backward,
}

/// The [`CallSink`] of a connection on its reactor: reply buffers come from and go back to the
/// node's cache, callbacks run inline or on the connection's worker (per `mode`; a callback
/// marked inline or `on_reactor` always inline), errors count in the connection's counters.
pub(crate) struct NodeSink<'a, P: Provider> {
    pub(crate) env: &'a mut NodeEnv<P>,
    pub(crate) links: Option<&'a mut NodeLinks>,
    pub(crate) mode: CallbackMode,
    pub(crate) worker: usize,
    pub(crate) stats: &'a ConnStatsWriter,
    pub(crate) dir: Direction,
    /// A client counts its completions (the reactor's count and its published copy).
    pub(crate) completed: Option<(&'a mut u64, &'a AtomicU64)>,
}

impl<P: Provider> CallSink for NodeSink<'_, P> {
    fn get_buf(&mut self) -> Option<PoolBuf> {
        self.env.cache.get_buf()
    }

    fn put_buf(&mut self, b: PoolBuf) {
        self.env.cache.put_buf(b);
    }

    fn count_error(&mut self) {
        match self.dir {
            Direction::Forward => self.stats.error(),
            Direction::Backward => self.stats.back_error(),
        }
    }

    fn count_start(&mut self, bytes: u64, resend: bool) {
        match (self.dir, resend) {
            (Direction::Forward, true) => self.stats.retransmit(),
            (Direction::Backward, true) => self.stats.back_retransmit(),
            _ => {}
        }
        match self.dir {
            Direction::Forward => self.stats.call(bytes),
            Direction::Backward => self.stats.back_call(bytes),
        }
    }

    fn deliver(&mut self, cb: Callback, inline: bool, outcome: Result<Reply, ClientError>) {
        if let Some((n, published)) = self.completed.as_mut() {
            **n += 1;
            // Relaxed: a count for monitoring with a single writer (this reactor); pairs with
            // the Relaxed loads in `Client::pending` / `Client::completed`.
            published.store(**n, Ordering::Relaxed);
        }
        match (self.mode, self.links.as_deref_mut()) {
            (CallbackMode::Worker, Some(l)) if !inline && !cb.on_reactor => {
                if !l.submit(self.worker, Job::Complete(CompleteJob { cb, outcome })) {
                    self.env.stats.worker_ring_full();
                }
            }
            _ => cb.call(outcome),
        }
    }
}

#[cfg(test)]
mod tests;
