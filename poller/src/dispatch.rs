//! The handler side of RPC, one for both directions: a [`Dispatcher`] serves the calls a
//! connection receives — forward calls on a server connection (`server_conn.rs`) and backward
//! calls (RFC 8167) on a client connection (`backchannel.rs`). It decodes the RPC header, looks
//! the procedure up in the connection's [`Programs`] (RFC 5531 answers for what is not served),
//! runs the handler inline on the reactor or sends it to a worker (results come back through
//! [`Dispatcher::on_served`]), builds the reply header and hands the reply to the engine
//! (`Connection::send_reply`: inline, Reply chunk or Write chunks). What differs between the
//! two directions is small and named by [`Direction`]: which counters move, whether a handler
//! may close the connection ([`Reject::Disconnect`]), and whether the call's chunks reach the
//! handler (backward calls carry none).
//!
//! Normal operation: each call takes a reply buffer from the node's cache; the buffer (and the
//! reply's DDP items) is held per engine call slot until the reply's Send is done — forward:
//! released by its completion ([`Dispatcher::on_send_done`]); backward: replaced when the engine
//! hands the slot to its next call, which it does only after the Send completed.
//!
//! Recovery: a call that finds no free reply buffer waits, in order, and so do the calls after
//! it; a reply the send queue cannot take yet waits, in order, and is retried first
//! ([`Dispatcher::retry`]); a reply the engine refuses is counted as an error and its buffer
//! goes back. A lost connection drops its waiting calls and replies and gives every buffer back
//! ([`Dispatcher::clear`]); a worker's result for a lost connection is dropped (the peer sends
//! the call again). Nothing here allocates after creation.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use rpcrdma_engine::conn::{CallId, HostMemory, IncomingCall, ReplyError, ReplyKind, ReplySpec};
use rpcrdma_engine::rpc::{
    self, AcceptStat, AuthStat, CallHeader, RejectedReply, ReplyHeader, RpcError, RPC_VERSION,
};
use rpcrdma_engine::verbs::Provider;
use rpcrdma_mempool::PoolBuf;

use crate::api_stats::ConnStatsWriter;
use crate::config::CallbackMode;
use crate::driver::ConnDriver;
use crate::memory::local_buf;
use crate::metrics::latency::{NodeLatency, ServerTimes};
use crate::node::{job_token, NodeEnv, Round};
use crate::program::{
    reply_window, serve_inline, serve_on_reactor, CallTransport, DdpItems, Dispatch, Handler,
    Programs, Reject, Request, MAX_DDP, SUCCESS_HEADER_LEN,
};
use crate::session::BackChannel;
use crate::worker::{Job, NodeLinks, RawSlice, ServeJob, Served};

/// Which calls a dispatcher serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Forward calls on a server connection: the call's chunks reach the handler, a handler may
    /// close the connection, counted as calls and replies.
    Forward,
    /// Backward calls on a client connection (RFC 8167): no chunks, never closes, counted as
    /// backward calls.
    Backward,
}

/// What a connection serves its calls with (borrowed for one call or one round).
pub(crate) struct Site<'a> {
    /// The programs served.
    pub programs: &'a Programs,
    /// Inline on the reactor or on a worker.
    pub mode: CallbackMode,
    /// The peer handlers see.
    pub peer: SocketAddr,
    /// The connection's id handlers see (0 for backward calls).
    pub conn_id: u64,
    /// Forward: the inline send threshold (with the Reply chunk, it bounds the reply).
    pub inline_send: u32,
    /// The connection's backchannel handle handlers get (forward calls of a server with one).
    pub back: Option<&'a BackChannel>,
}

/// The connection's pieces a dispatcher works with (borrowed for one call or one round).
pub(crate) struct Io<'a, P: Provider> {
    pub drv: &'a mut ConnDriver<P>,
    pub env: &'a mut NodeEnv<P>,
    pub links: Option<&'a mut NodeLinks>,
    pub stats: &'a ConnStatsWriter,
    /// The connection's node slot (job tokens, worker choice).
    pub slot: u32,
}

impl<'a, P: Provider> Io<'a, P> {
    /// The pieces, named in the order of the fields.
    pub(crate) fn new(
        drv: &'a mut ConnDriver<P>,
        env: &'a mut NodeEnv<P>,
        links: Option<&'a mut NodeLinks>,
        stats: &'a ConnStatsWriter,
        slot: u32,
    ) -> Io<'a, P> {
        Io {
            drv,
            env,
            links,
            stats,
            slot,
        }
    }

    /// The pieces of a connection's round `r` with its driver and counters.
    pub(crate) fn of_round(
        drv: &'a mut ConnDriver<P>,
        r: &'a mut Round<'_, '_, P>,
        stats: &'a ConnStatsWriter,
    ) -> Io<'a, P> {
        Io::new(drv, r.env, r.links.as_deref_mut(), stats, r.slot)
    }
}

/// What a connection does with a call it dispatched: send this reply header as it is (an RFC
/// 5531 error), or reply with the handler's outcome (results length or reject) and DDP items.
pub(crate) enum Decision {
    Header(ReplyHeader<'static>),
    Done(Result<usize, Reject>, DdpItems),
}

/// Where a decoded call goes.
pub(crate) enum Route<'p, 's> {
    /// Answer with this header (undecodable header, unknown program, version or procedure).
    Header(ReplyHeader<'static>),
    /// Procedure 0 of a served version: an empty SUCCESS.
    Null,
    /// Run this handler with these arguments.
    Handler(&'p Arc<dyn Handler>, CallHeader<'s>, &'s [u8]),
}

/// Decodes the RPC header of `stream` (a call with transport XID `xid`) and finds its
/// procedure in `programs` (RFC 5531 section 9 answers for the rest).
pub(crate) fn route<'p, 's>(programs: &'p Programs, stream: &'s [u8], xid: u32) -> Route<'p, 's> {
    match rpc::decode_call(stream) {
        Err(e) => Route::Header(header_error_reply(&e, xid)),
        Ok((h, off)) => match programs.dispatch(h.prog, h.vers, h.proc_num) {
            Dispatch::Null => Route::Null,
            Dispatch::Error(stat) => Route::Header(ReplyHeader::accepted(xid, stat)),
            Dispatch::Handler(handler) => {
                Route::Handler(handler, h, stream.get(off..).unwrap_or(&[]))
            }
        },
    }
}

/// The reply header for an RPC header that did not decode (RFC 5531 section 9 answers).
pub(crate) fn header_error_reply(e: &RpcError, xid: u32) -> ReplyHeader<'static> {
    match *e {
        RpcError::BadRpcVersion { .. } => ReplyHeader::denied(
            xid,
            RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            },
        ),
        RpcError::CredTooLong { .. } => {
            ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat::BadCred))
        }
        RpcError::VerfTooLong { .. } => {
            ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat::BadVerf))
        }
        _ => ReplyHeader::accepted(xid, AcceptStat::GarbageArgs),
    }
}

/// How a handler's outcome is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// MSG_ACCEPTED with this status (results follow only for SUCCESS).
    Accepted(AcceptStat),
    /// MSG_DENIED / AUTH_ERROR with this status.
    AuthError(AuthStat),
}

/// How a handler's outcome is answered in `dir`: the reply status and the results' length, or
/// `None` for no reply (the connection closes: forward [`Reject::Disconnect`]; a client
/// cannot drop its own connection to answer a backward call, so there it is SYSTEM_ERR).
pub(crate) fn answer(dir: Direction, r: Result<usize, Reject>) -> Option<(Answer, usize)> {
    let stat = match r {
        Ok(n) => return Some((Answer::Accepted(AcceptStat::Success), n)),
        Err(Reject::GarbageArgs) => Answer::Accepted(AcceptStat::GarbageArgs),
        Err(Reject::SystemErr) => Answer::Accepted(AcceptStat::SystemErr),
        Err(Reject::Auth(why)) => Answer::AuthError(why),
        Err(Reject::Disconnect) => match dir {
            Direction::Forward => return None,
            Direction::Backward => Answer::Accepted(AcceptStat::SystemErr),
        },
    };
    Some((stat, 0))
}

/// What the handler of `inc` learns of its transport in `dir`, how many Write chunks it may
/// fill, and the largest RPC reply it may build (see `program::reply_window`).
pub(crate) fn call_view(
    dir: Direction,
    site: &Site<'_>,
    inc: &IncomingCall,
) -> (CallTransport, usize, usize) {
    match dir {
        Direction::Forward => (
            CallTransport {
                peer: site.peer,
                conn_id: site.conn_id,
                read_segments: inc.read_segments,
                position_zero: inc.position_zero,
                reply_chunk: inc.reply_capacity,
            },
            (inc.write_chunks as usize).min(MAX_DDP),
            reply_window(site.inline_send, inc.reply_capacity),
        ),
        Direction::Backward => (CallTransport::plain(site.peer, site.conn_id), 0, usize::MAX),
    }
}

/// A reply whose Send is not done: its buffers stay until then.
struct Held {
    _reply: PoolBuf,
    _ddp: DdpItems,
    /// Octets of the reply (DDP items included), counted when its Send completes (forward).
    bytes: u64,
}

/// What became of a reply handed to the engine ([`Dispatcher::send`]).
enum Handed {
    /// Queued; the reply's octets (DDP items included).
    Queued(u64),
    /// No send-queue room: it waits.
    Busy,
    /// Not sent (no connection, or an error, counted): its buffers go back.
    Dropped,
}

/// A reply for the engine (waiting for send-queue room, or on its way).
struct Outgoing {
    call: CallId,
    reply: PoolBuf,
    len: usize,
    ddp: DdpItems,
    /// A SUCCESS reply (not an RFC 5531 error).
    ok: bool,
}

/// One connection's handler side. See the module documentation.
pub(crate) struct Dispatcher {
    dir: Direction,
    /// The reply last sent from each engine call slot, until its Send is done.
    held: Vec<Option<Held>>,
    /// Calls waiting for a reply buffer, in order.
    waiting: VecDeque<IncomingCall>,
    /// Replies the send queue could not take yet, in order.
    pending: VecDeque<Outgoing>,
    /// Handlers running on a worker; each holds a view of the call's receive buffer.
    in_worker: u32,
    /// A handler answered [`Reject::Disconnect`]: the connection closes (forward only).
    kick: bool,
    /// Forward: each call slot's call-received stamp, for the server's latency histograms
    /// (empty when they are off, and for backward calls).
    lat: ServerTimes,
}

impl Dispatcher {
    /// A dispatcher for a connection whose engine has `slots` call slots in `dir`.
    pub(crate) fn new(dir: Direction, slots: usize) -> Dispatcher {
        Dispatcher {
            dir,
            held: (0..slots).map(|_| None).collect(),
            waiting: VecDeque::with_capacity(slots),
            pending: VecDeque::with_capacity(slots),
            in_worker: 0,
            kick: false,
            lat: ServerTimes::default(),
        }
    }

    /// Stamps the forward calls for the server's latency histograms with `lat`.
    pub(crate) fn with_latency(mut self, lat: ServerTimes) -> Dispatcher {
        self.lat = lat;
        self
    }

    /// Records the latencies of the replies sent since the last round (forward; once a round).
    #[inline]
    pub(crate) fn flush_latency(&mut self, board: &mut NodeLatency) {
        self.lat.flush(board);
    }

    /// Handlers running on a worker.
    pub(crate) fn in_worker(&self) -> u32 {
        self.in_worker
    }

    /// Calls waiting for a reply buffer.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Replies waiting for send-queue room.
    pub(crate) fn queued(&self) -> usize {
        self.pending.len()
    }

    /// Replies whose Send is not done.
    pub(crate) fn held(&self) -> usize {
        self.held.iter().filter(|h| h.is_some()).count()
    }

    /// A call being served or waiting, or a reply whose Send is not done.
    pub(crate) fn busy(&self) -> bool {
        self.in_worker > 0
            || !self.waiting.is_empty()
            || !self.pending.is_empty()
            || self.held.iter().any(Option::is_some)
    }

    /// A handler answered [`Reject::Disconnect`] (the connection is to close).
    pub(crate) fn kicked(&self) -> bool {
        self.kick
    }

    /// A call arrived: served now, or queued behind the calls already waiting.
    pub(crate) fn on_call<P: Provider>(
        &mut self,
        io: &mut Io<'_, P>,
        site: &Site<'_>,
        inc: IncomingCall,
    ) {
        if self.dir == Direction::Backward {
            io.stats.back_call_in(u64::from(inc.stream.len));
        }
        if !self.waiting.is_empty() || !self.serve(io, site, inc) {
            self.waiting.push_back(inc);
        }
    }

    /// Retries replies that waited for send-queue room, then calls that waited for a reply
    /// buffer, in order. Returns the work done.
    pub(crate) fn retry<P: Provider>(&mut self, io: &mut Io<'_, P>, site: &Site<'_>) -> usize {
        let mut work = 0;
        while let Some(p) = self.pending.pop_front() {
            if let Err(p) = self.send(io, p, true) {
                self.pending.push_front(p);
                break;
            }
            work += 1;
        }
        while let Some(inc) = self.waiting.front().copied() {
            if !self.serve(io, site, inc) {
                break;
            }
            self.waiting.pop_front();
            work += 1;
        }
        work
    }

    /// A worker finished a handler. `live`: the connection that delivered the call is still
    /// there (otherwise the result is dropped; the peer sends the call again).
    pub(crate) fn on_served<P: Provider>(&mut self, io: &mut Io<'_, P>, s: Served, live: bool) {
        self.in_worker = self.in_worker.saturating_sub(1);
        if !live {
            io.env.cache.put_buf(s.reply);
            return;
        }
        let call = CallId {
            slot: s.call_slot,
            generation: s.call_gen,
        };
        self.finish(io, call, s.xid, s.reply, s.ddp, s.result);
    }

    /// The Send of the reply from engine call slot `slot` completed at `now` (forward; the
    /// engine's `Connection::poll_sent`): its latency is measured, its buffers go back and,
    /// when it succeeded, the reply is counted.
    #[inline]
    pub(crate) fn on_send_done(
        &mut self,
        slot: u32,
        success: bool,
        now: u64,
        stats: &ConnStatsWriter,
    ) {
        self.lat.sent(u64::from(slot), now);
        // Dropped in place (not taken out first): the buffers go back to their pools.
        if let Some(slot) = self.held.get_mut(slot as usize) {
            if let (Some(h), true) = (slot.as_ref(), success) {
                stats.reply_out(h.bytes);
            }
            *slot = None;
        }
    }

    /// The connection is gone: drop waiting calls and replies, give every buffer back.
    pub(crate) fn clear<P: Provider>(&mut self, env: &mut NodeEnv<P>) {
        self.waiting.clear();
        while let Some(p) = self.pending.pop_front() {
            env.cache.put_buf(p.reply);
        }
        for h in self.held.iter_mut() {
            if let Some(h) = h.take() {
                env.cache.put_buf(h._reply);
            }
        }
    }

    /// Serves one call; `false` when no reply buffer is free (the call must wait).
    fn serve<P: Provider>(
        &mut self,
        io: &mut Io<'_, P>,
        site: &Site<'_>,
        inc: IncomingCall,
    ) -> bool {
        let Some(mut reply) = io.env.cache.get_buf() else {
            return false;
        };
        let stream: &[u8] = io
            .drv
            .mem
            .bytes(inc.stream.addr, inc.stream.len as usize)
            .unwrap_or(&[]);
        if self.dir == Direction::Forward {
            io.stats.call_in(stream.len() as u64);
            self.lat
                .start(&mut io.env.latency, inc.call.slot, stream, io.env.now);
        }
        // Everything decided with shared borrows; the reply is sent afterwards.
        let decided = match route(site.programs, stream, inc.xid) {
            Route::Header(h) => Decision::Header(h),
            Route::Null => Decision::Done(Ok(0), DdpItems::new()),
            Route::Handler(handler, h, args) => {
                let (transport, nw, window) = call_view(self.dir, site, &inc);
                if self.dir == Direction::Forward {
                    io.stats.call_chunks(&transport, inc.write_chunks);
                }
                let req = Request {
                    xid: inc.xid,
                    prog: h.prog,
                    vers: h.vers,
                    proc_num: h.proc_num,
                    cred: h.cred,
                    args,
                    write_chunks: &inc.write_capacity[..nw],
                    transport,
                    back: site.back,
                };
                let links = match site.mode {
                    CallbackMode::Worker => io.links.as_deref_mut(),
                    _ => None,
                };
                match links.map(|l| (serve_on_reactor(&**handler, &req, &mut reply, window), l)) {
                    None => {
                        let (r, ddp) = serve_inline(&**handler, &req, &mut reply, window);
                        Decision::Done(r, ddp)
                    }
                    Some((Some((r, ddp)), _)) => Decision::Done(r, ddp),
                    Some((None, l)) => {
                        let mut caps = [0u32; MAX_DDP];
                        caps[..nw].copy_from_slice(&inc.write_capacity[..nw]);
                        let job = Job::Serve(ServeJob {
                            token: job_token(io.slot, io.env.slot_gen(io.slot)),
                            call_slot: inc.call.slot,
                            call_gen: inc.call.generation,
                            handler: Arc::clone(handler),
                            xid: inc.xid,
                            prog: h.prog,
                            vers: h.vers,
                            proc_num: h.proc_num,
                            cred_flavor: h.cred.flavor.to_u32(),
                            cred: RawSlice::new(h.cred.body),
                            args: RawSlice::new(args),
                            write_caps: caps,
                            nwrite: nw as u8,
                            transport,
                            reply,
                            base: SUCCESS_HEADER_LEN as u32,
                            limit: u32::try_from(window).unwrap_or(u32::MAX),
                            ddp: DdpItems::new(),
                            back: site.back.cloned(),
                        });
                        self.in_worker += 1;
                        if !l.submit(io.slot as usize, job) {
                            io.env.stats.worker_ring_full();
                        }
                        return true;
                    }
                }
            }
        };
        match decided {
            Decision::Header(h) => {
                if self.dir == Direction::Forward {
                    io.stats.error();
                }
                let len = rpc::encode_reply(&mut reply, &h).unwrap_or(0);
                let out = Outgoing {
                    call: inc.call,
                    reply,
                    len,
                    ddp: DdpItems::new(),
                    ok: false,
                };
                let _ = self.send(io, out, false);
            }
            Decision::Done(r, ddp) => self.finish(io, inc.call, inc.xid, reply, ddp, r),
        }
        true
    }

    /// Turns a handler's outcome into the reply and sends it.
    #[inline(always)] // the results' items move from the handler's outcome to their held slot
    fn finish<P: Provider>(
        &mut self,
        io: &mut Io<'_, P>,
        call: CallId,
        xid: u32,
        mut reply: PoolBuf,
        mut ddp: DdpItems,
        r: Result<usize, Reject>,
    ) {
        let Some((stat, results)) = answer(self.dir, r) else {
            // No reply: the connection closes at the end of this round and the client
            // retransmits on its next one. The buffers go back to their pools.
            self.kick = true;
            io.env.cache.put_buf(reply);
            return;
        };
        let ok = stat == Answer::Accepted(AcceptStat::Success);
        if !ok {
            if self.dir == Direction::Forward {
                io.stats.error();
            }
            ddp.clear();
        }
        let h = match stat {
            Answer::Accepted(a) => ReplyHeader::accepted(xid, a),
            Answer::AuthError(why) => ReplyHeader::denied(xid, RejectedReply::AuthError(why)),
        };
        let hl = rpc::encode_reply(&mut reply[..SUCCESS_HEADER_LEN], &h).unwrap_or(0);
        let out = Outgoing {
            call,
            reply,
            len: hl + results,
            ddp,
            ok,
        };
        let _ = self.send(io, out, false);
    }

    /// Sends a reply, or queues it when the send queue is full. `Err` hands it back when
    /// `retry` and the send queue is still full (moved, not copied, on the rare retry path).
    #[allow(clippy::result_large_err)]
    #[inline(always)] // so that `out`'s buffers move from the caller's fields to their slot
    fn send<P: Provider>(
        &mut self,
        io: &mut Io<'_, P>,
        out: Outgoing,
        retry: bool,
    ) -> Result<(), Outgoing> {
        match self.hand_to_engine(io, &out) {
            Handed::Queued(bytes) => {
                self.hold(io.env, out, bytes);
                Ok(())
            }
            Handed::Busy if retry => Err(out),
            Handed::Busy => {
                self.pending.push_back(out);
                Ok(())
            }
            Handed::Dropped => {
                io.env.cache.put_buf(out.reply);
                Ok(())
            }
        }
    }

    /// Hands the reply `out` to the engine (it is only read, not moved) and counts it.
    fn hand_to_engine<P: Provider>(&mut self, io: &mut Io<'_, P>, out: &Outgoing) -> Handed {
        let Some(conn) = io.drv.conn.as_mut() else {
            return Handed::Dropped;
        };
        let (items, n, ddp_bytes) = out.ddp.engine_items(0);
        let bytes = out.len as u64 + ddp_bytes;
        let msg = [local_buf(&out.reply, out.len)];
        let spec = ReplySpec {
            message: &msg,
            results: &items[..n],
        };
        match conn.send_reply(io.env.now, out.call, &spec, &mut io.drv.mem) {
            Ok(kind) => {
                match self.dir {
                    Direction::Forward => io.stats.reply_kind(kind),
                    Direction::Backward => {
                        io.stats.back_reply(bytes, false);
                        if !out.ok || matches!(kind, ReplyKind::ErrChunk | ReplyKind::CantReply) {
                            io.stats.back_error();
                        }
                    }
                }
                Handed::Queued(bytes)
            }
            Err(ReplyError::Busy) => Handed::Busy,
            Err(e) => {
                // Nothing was posted: the peer gets no reply and sends the call again after
                // its timeout. A closed connection's calls are expected; anything else is not.
                if e != ReplyError::Closed {
                    crate::log_limited!(
                        WARN,
                        error = ?e,
                        call_slot = out.call.slot,
                        direction = ?self.dir,
                        "reply not sent: the connection refused it"
                    );
                }
                match self.dir {
                    Direction::Forward => io.stats.error(),
                    Direction::Backward => io.stats.back_error(),
                }
                Handed::Dropped
            }
        }
    }

    /// Keeps a sent reply's buffers with its call slot until its Send is done.
    #[inline(always)] // the buffers move from the caller's fields straight into the slot
    fn hold<P: Provider>(&mut self, env: &mut NodeEnv<P>, out: Outgoing, bytes: u64) {
        let slot = out.call.slot;
        match self.held.get_mut(slot as usize) {
            // Backward: the slot's previous reply was sent before the engine reused it. Its
            // buffers are replaced in place.
            Some(Some(old)) => {
                env.cache
                    .put_buf(core::mem::replace(&mut old._reply, out.reply));
                old._ddp = out.ddp;
                old.bytes = bytes;
            }
            // Written in place: the reply's buffers move straight into the slot.
            Some(s) => {
                *s = Some(Held {
                    _reply: out.reply,
                    _ddp: out.ddp,
                    bytes,
                })
            }
            None => {
                // Engine slots are below the count given at creation; never here. Keep the
                // buffers rather than release them under a Send.
                debug_assert!(false, "call slot {slot} out of range");
                core::mem::forget(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{Program, ReplyBuilder};
    use rpcrdma_engine::rpc::{AuthFlavor, OpaqueAuth};

    /// NFS version 3 with procedure 1 (version 3 only).
    fn progs() -> Programs {
        let mut p = Programs::new();
        let h = |_: &Request<'_>, _: &mut ReplyBuilder<'_>| -> Result<(), Reject> { Ok(()) };
        p.add(Program::new(100_003, 3..=3).procedure(1, h));
        p
    }

    /// An RFC 5531 CALL header (AUTH_NONE credential and verifier) and `args`.
    fn call(xid: u32, rpcvers: u32, prog: u32, vers: u32, proc_num: u32, args: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [xid, 0, rpcvers, prog, vers, proc_num, 0, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.extend_from_slice(args);
        v
    }

    fn site(p: &Programs) -> Site<'_> {
        Site {
            programs: p,
            mode: CallbackMode::Inline,
            peer: "192.0.2.7:20049".parse().unwrap(),
            conn_id: 9,
            inline_send: 1024,
            back: None,
        }
    }

    fn incoming() -> IncomingCall {
        let mut write_capacity = [0u32; rpcrdma_engine::conn::MAX_WRITE_CHUNKS];
        write_capacity[0] = 8192;
        IncomingCall {
            call: CallId {
                slot: 0,
                generation: 0,
            },
            xid: 5,
            stream: rpcrdma_engine::conn::LocalBuf {
                addr: 0,
                len: 0,
                lkey: 0,
            },
            write_chunks: 1,
            write_capacity,
            reply_capacity: Some(65536),
            read_segments: 2,
            position_zero: true,
        }
    }

    #[test]
    fn accepts_registered_procedure_with_its_arguments() {
        let p = progs();
        let s = call(5, 2, 100_003, 3, 1, &[0, 0, 0, 42]);
        match route(&p, &s, 5) {
            Route::Handler(_, h, args) => {
                assert_eq!((h.prog, h.vers, h.proc_num), (100_003, 3, 1));
                assert_eq!(
                    h.cred,
                    OpaqueAuth {
                        flavor: AuthFlavor::None,
                        body: &[]
                    }
                );
                assert_eq!(args, &[0, 0, 0, 42]);
            }
            _ => panic!("not routed to the handler"),
        }
        assert!(matches!(
            route(&p, &call(6, 2, 100_003, 3, 0, &[]), 6),
            Route::Null
        ));
    }

    /// The header `route` answers `stream` with, if any.
    fn header(p: &Programs, stream: &[u8], xid: u32) -> Option<ReplyHeader<'static>> {
        match route(p, stream, xid) {
            Route::Header(h) => Some(h),
            _ => None,
        }
    }

    #[test]
    fn rejects_unserved_calls_with_rfc5531_headers() {
        let p = progs();
        assert_eq!(
            header(&p, &call(7, 2, 42, 1, 1, &[]), 7),
            Some(ReplyHeader::accepted(7, AcceptStat::ProgUnavail))
        );
        assert_eq!(
            header(&p, &call(8, 2, 100_003, 4, 1, &[]), 8),
            Some(ReplyHeader::accepted(
                8,
                AcceptStat::ProgMismatch { low: 3, high: 3 }
            ))
        );
        assert_eq!(
            header(&p, &call(10, 2, 100_003, 3, 2, &[]), 10),
            Some(ReplyHeader::accepted(10, AcceptStat::ProcUnavail))
        );
        // RPC version 3: MSG_DENIED / RPC_MISMATCH {2, 2}.
        assert_eq!(
            header(&p, &call(9, 3, 100_003, 3, 1, &[]), 9),
            Some(ReplyHeader::denied(
                9,
                RejectedReply::RpcMismatch { low: 2, high: 2 }
            ))
        );
        // Too short to decode: GARBAGE_ARGS with the transport header's XID.
        assert_eq!(
            header(&p, &[0, 0, 0, 1], 11),
            Some(ReplyHeader::accepted(11, AcceptStat::GarbageArgs))
        );
    }

    #[test]
    fn accepts_header_error_answers() {
        let h = header_error_reply(&RpcError::BadRpcVersion { xid: 5, rpcvers: 3 }, 5);
        assert_eq!(
            h,
            ReplyHeader::denied(5, RejectedReply::RpcMismatch { low: 2, high: 2 })
        );
        let h = header_error_reply(&RpcError::Truncated { at: 0, needed: 4 }, 9);
        assert_eq!(h, ReplyHeader::accepted(9, AcceptStat::GarbageArgs));
    }

    #[test]
    fn accepts_handler_outcomes_alike_in_both_directions() {
        for dir in [Direction::Forward, Direction::Backward] {
            let acc = |a| Some((Answer::Accepted(a), 0));
            assert_eq!(
                answer(dir, Ok(12)),
                Some((Answer::Accepted(AcceptStat::Success), 12))
            );
            assert_eq!(
                answer(dir, Err(Reject::GarbageArgs)),
                acc(AcceptStat::GarbageArgs)
            );
            assert_eq!(
                answer(dir, Err(Reject::SystemErr)),
                acc(AcceptStat::SystemErr)
            );
            assert_eq!(
                answer(dir, Err(Reject::Auth(AuthStat::TooWeak))),
                Some((Answer::AuthError(AuthStat::TooWeak), 0))
            );
        }
    }

    #[test]
    fn rejects_disconnect_forward_by_closing_and_backward_as_system_err() {
        assert_eq!(answer(Direction::Forward, Err(Reject::Disconnect)), None);
        assert_eq!(
            answer(Direction::Backward, Err(Reject::Disconnect)),
            Some((Answer::Accepted(AcceptStat::SystemErr), 0))
        );
    }

    #[test]
    fn accepts_chunks_forward_only() {
        let p = progs();
        let inc = incoming();
        let (t, nw, window) = call_view(Direction::Forward, &site(&p), &inc);
        assert_eq!((t.read_segments, t.position_zero), (2, true));
        assert_eq!((t.reply_chunk, t.conn_id), (Some(65536), 9));
        // The Reply chunk is larger than the inline threshold: it bounds the reply.
        assert_eq!((nw, window), (1, 65536));
        let (t, nw, window) = call_view(Direction::Backward, &site(&p), &inc);
        assert_eq!(
            t,
            CallTransport::plain("192.0.2.7:20049".parse().unwrap(), 9)
        );
        assert_eq!((nw, window), (0, usize::MAX));
    }

    #[test]
    fn accepts_a_fresh_dispatcher_as_idle() {
        let d = Dispatcher::new(Direction::Forward, 4);
        assert!(!d.busy() && !d.kicked());
        assert_eq!((d.held(), d.waiting(), d.in_worker()), (0, 0, 0));
    }
}
