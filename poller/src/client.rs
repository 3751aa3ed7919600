//! The client API: [`Client::connect`], [`Client::call`] with a completion callback, a blocking
//! wrapper, DDP items per call, and the constructor of the reactor-side connection that runs
//! them (`ClientConn`, whose reactor side is in `client_conn.rs`).
//!
//! Normal operation: `call` moves the call (arguments already encoded by the caller into a
//! registered [`CallArgs`] buffer, DDP items and receptacles, the callback) into the client's
//! MPSC submission ring and wakes its reactor. The reactor takes calls from the ring while it has
//! a free call record and a reply buffer, gives each an XID and an RPC call header (written in
//! the connection's slab), and starts as many as the granted credits allow; the rest wait, in
//! order, in the record queue (and further ones in the ring) — nothing is dropped. A reply
//! completes its record: the RPC reply header is checked and the callback gets a [`Reply`] that
//! owns the reply buffer (a pool object that returns to its pool when dropped, on any thread),
//! or a [`ClientError`]. Callbacks run on the reactor ([`CallbackMode::Inline`](crate::CallbackMode::Inline)) or on a
//! worker thread ([`CallbackMode::Worker`](crate::CallbackMode::Worker)); the blocking wrapper's rendezvous always runs on
//! the reactor, so a worker may wait for a call of its own client.
//!
//! Recovery: when the connection is lost, every call on the wire fails inside the engine; the
//! client counts the loss and leaves `Connected` at once (before any of those calls
//! completes), puts them back at the head of its queue (in submission order), drops the QP and
//! reconnects after a back-off delay (timer wheel; doubling from `reconnect_min_ms` to
//! `reconnect_max_ms`). On the new connection the calls are sent again with the SAME XIDs. A
//! call sent more than `1 + max_retransmits` times fails with
//! [`ClientError::RetransmitsExhausted`]; after `max_reconnects` failed attempts in a row every
//! pending call fails with [`ClientError::ReconnectFailed`]. With `call_timeout_ms`, a call not
//! answered in time fails with [`ClientError::TimedOut`] wherever it is: the engine times out
//! the calls on the wire (a timed-out call keeps its credit until the server answers it), a
//! timer on the reactor the calls still queued for a credit or a connection, so a call behind
//! unanswered ones never waits for ever. [`Client::close`] lets pending
//! calls finish, then disconnects; calls refused at submission are handed back. Every accepted
//! call completes exactly once: a [`Callback`] dropped without having run (a ring dropped at
//! teardown) runs with [`ClientError::Dropped`].
//!
//! Version Two: with [`ProtocolVersion::V2`] the engine sends the first call of each connection
//! in Version Two and falls back to Version One when the server answers ERR_VERS; the client
//! keeps what the engine learnt ([`Connection::remembered_version`](rpcrdma_engine::conn::Connection::remembered_version)) and starts every later
//! connection at that version (a Version One server is not probed again). A call with a reply
//! size hint ([`CallArgs::expect_reply`]) offers only that much of its reply buffer and, when
//! the server answers RDMA2_ERR_CANT_REPLY, is sent again with the same XID offering the whole
//! buffer. What was negotiated is published for [`Client::negotiated`] at connect and whenever
//! the version or the granted credits change.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_engine::conn::{self};
use rpcrdma_engine::proto::private_data;
use rpcrdma_engine::proto::reject::RejectReason;
use rpcrdma_engine::verbs::{Device, Provider};
use rpcrdma_mempool::PoolBuf;

pub use crate::call::{CallArgs, Callback, ClientError, OnReply, Proc, Refused, Reply};

use crate::api_stats::{conn_stats, ConnStats, ConnStatsWriter};
use crate::backchannel::{BackchannelService, ClientBack};
use crate::call_table::{requester_layout, CallTable};
pub use crate::client_conn::ClientState;
use crate::client_conn::{CState, ClientConn, ClientShared, Submit};
use crate::config::{ClientOptions, ProtocolVersion};
use crate::driver::ConnDriver;
use crate::memory::{HostRegions, Slab};
use crate::metrics::latency::{CallTimes, LatencyReader};
use crate::mpsc::{self, MpscConsumer, MpscProducer};
use crate::negotiated::{Negotiated, NegotiatedCell};
use crate::runtime::{Endpoint, NodeCmd};

/// A client connection handle. Cheap to clone; `Send + Sync`; usable from any thread.
#[derive(Clone)]
pub struct Client {
    tx: MpscProducer<Submit>,
    shared: Arc<ClientShared>,
    bufs: crate::memory::BufPool,
    latency: Option<LatencyReader>,
    /// Shared by every clone: when the last one goes, the connection closes.
    _last: Arc<LastHandle>,
}

/// Held by every clone of a [`Client`]; dropping the last clone closes the connection as
/// [`Client::close`] does (calls already made complete first).
struct LastHandle(Arc<ClientShared>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        close_shared(&self.0);
    }
}

/// Stops new calls on the connection of `shared`; pending ones finish, then it is closed.
fn close_shared(shared: &ClientShared) {
    // Release: pairs with the Acquire loads in `call` and on the reactor.
    shared.closed.store(true, Ordering::Release);
    if let Some(t) = shared.node_thread.get() {
        t.wake();
    }
}

impl core::fmt::Debug for Client {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Client")
            .field("state", &self.state())
            .finish()
    }
}

impl Client {
    /// Connects to `addr` through `ep` (on the reactor `opts.reactor`, or the next in turn).
    /// Returns at once; the connection is established in the background (calls made meanwhile
    /// wait in the queue). See [`Client::wait_connected`].
    pub fn connect<P: Provider>(
        ep: &Endpoint<P>,
        addr: SocketAddr,
        opts: ClientOptions,
    ) -> Result<Client, ClientError> {
        Self::connect_with(ep, addr, opts, None)
    }

    /// [`Client::connect`], serving `back` on the backchannel when given (see
    /// [`Client::connect_serving`]).
    pub(crate) fn connect_with<P: Provider>(
        ep: &Endpoint<P>,
        addr: SocketAddr,
        opts: ClientOptions,
        back: Option<BackchannelService>,
    ) -> Result<Client, ClientError> {
        // Without type-2 windows, chunks can only be exposed through endpoint-wide persistent
        // STags: refused unless the endpoint opted in (docs/rdma-provider.md).
        if !ep.device().caps().mw_type2
            && ep.config().persistent_stags != crate::config::PersistentStags::EndpointWide
        {
            return Err(ClientError::PersistentStagsRefused);
        }
        if opts.version == ProtocolVersion::V2
            && (private_data::representable_size(private_data::clamp_size(opts.inline_recv))
                < conn::V2_INLINE
                || private_data::clamp_size(opts.inline_send) < conn::V2_INLINE)
        {
            return Err(ClientError::Unsupported);
        }
        let mut opts = opts;
        opts.credits = conn::credits::clamp(opts.credits, ep.config().max_credits);
        opts.max_pending = opts.max_pending.clamp(opts.credits as usize, 1 << 16);
        let node = ep.pick(opts.reactor);
        let cap = opts.queue_depth.clamp(2, 1 << 20).next_power_of_two();
        let (tx, rx) = mpsc::channel::<Submit>(cap).map_err(|_| ClientError::Setup)?;
        let (w, stats) = conn_stats();
        w.set_peer(addr);
        let shared = Arc::new(ClientShared {
            state: AtomicU8::new(ClientState::Connecting as u8),
            closed: AtomicBool::new(false),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            stats,
            node_thread: ep.node_thread(node),
            neg: NegotiatedCell::default(),
            reject: AtomicU8::new(0),
        });
        let mut conn = ClientConn::<P>::new(ep, addr, opts, rx, Arc::clone(&shared), w, back)?;
        let (times, latency) = CallTimes::new(opts.latency_histograms, opts.max_pending);
        conn.lat = times;
        ep.send(node, NodeCmd::Add(Box::new(conn)))
            .map_err(|_| ClientError::Closed)?;
        Ok(Client {
            tx,
            _last: Arc::new(LastHandle(Arc::clone(&shared))),
            shared,
            bufs: ep.buffers().clone(),
            latency,
        })
    }

    /// The connection state.
    pub fn state(&self) -> ClientState {
        self.shared.state()
    }

    /// What the connection negotiated: RPC-over-RDMA version, inline thresholds, remote
    /// invalidation, the server's private data, the credits it grants. `None` before the first
    /// connection is established; while reconnecting, the values of the last connection.
    /// Published by the reactor (at connect, and when the version or the credits change);
    /// reading takes no lock.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.shared.neg.load()
    }

    /// The reason the server gave when it rejected the last connect attempt (this crate's
    /// reject private data, `rpcrdma_engine::proto::reject`): `None` when the last attempt was
    /// not rejected, was rejected without a reason this client reads, or the connection is
    /// established.
    pub fn reject_reason(&self) -> Option<RejectReason> {
        self.shared.reject()
    }

    /// Waits (sleeping) until connected; `false` on timeout or failure.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            match self.state() {
                ClientState::Connected => return true,
                ClientState::Failed | ClientState::Closed => return false,
                _ => {}
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Fresh, empty arguments in a registered pool buffer (`None` when the pool is exhausted).
    pub fn args(&self) -> Option<CallArgs> {
        self.bufs.get().map(CallArgs::new)
    }

    /// A registered pool buffer (for DDP items and receptacles).
    pub fn buffer(&self) -> Option<PoolBuf> {
        self.bufs.get()
    }

    /// Starts a call. `cb` runs exactly once with the outcome (on the reactor or a worker, per
    /// the client's mode; it must not block in inline mode). `Err` means the call was not
    /// accepted (ring full, client closed or failed) and `cb` will not run.
    #[allow(clippy::result_large_err)] // hands the arguments back without allocating
    pub fn call<F: OnReply>(&self, proc: Proc, args: CallArgs, cb: F) -> Result<(), Refused> {
        self.submit(proc, args, Callback::new(cb))
    }

    #[allow(clippy::result_large_err)] // hands the arguments back without allocating
    fn submit(&self, proc: Proc, args: CallArgs, cb: Callback) -> Result<(), Refused> {
        // Acquire: pairs with the Release store in `close`.
        let refused = if self.shared.closed.load(Ordering::Acquire) {
            Some(ClientError::Closed)
        } else {
            match self.state() {
                ClientState::Failed => Some(self.shared.gave_up()),
                ClientState::Closed => Some(ClientError::Closed),
                _ => None,
            }
        };
        if let Some(error) = refused {
            // Not accepted: the callback never runs.
            cb.disarm();
            return Err(Refused { error, args });
        }
        // Relaxed: a count for `pending` only; the ring orders the submission itself.
        self.shared.submitted.fetch_add(1, Ordering::Relaxed);
        // Built in its ring slot once one is claimed (a struct literal: it cannot panic).
        match self.tx.enqueue_with(move || Submit { proc, args, cb }) {
            Ok(()) => {
                if let Some(t) = self.shared.node_thread.get() {
                    t.wake();
                }
                Ok(())
            }
            Err(make) => {
                let sub = make();
                // Relaxed: see above.
                self.shared.submitted.fetch_sub(1, Ordering::Relaxed);
                sub.cb.disarm();
                Err(Refused {
                    error: ClientError::Busy,
                    args: sub.args,
                })
            }
        }
    }

    /// Makes a call and waits for its outcome (retrying while the submission ring is full).
    /// Allocates (a rendezvous per call); never call it from an inline callback. It may be
    /// called from a worker (a completion callback, or a backchannel handler of this client):
    /// its outcome is handed over on the reactor, not through a worker.
    pub fn call_blocking(&self, proc: Proc, args: CallArgs) -> Result<Reply, ClientError> {
        // The outcome is handed over on the reactor: in worker mode this thread may be the
        // worker that would run the callback (e.g. a backchannel handler waiting for a forward
        // call).
        #[allow(clippy::result_large_err)] // hands the arguments back without allocating
        crate::call::blocking(args, |a, cb| self.submit(proc, a, cb.on_reactor()))
    }

    /// Calls accepted and not completed yet.
    pub fn pending(&self) -> u64 {
        // Relaxed (both): counts for monitoring; each completion's callback has its own
        // ordering.
        let s = self.shared.submitted.load(Ordering::Relaxed);
        let c = self.shared.completed.load(Ordering::Relaxed);
        s.saturating_sub(c)
    }

    /// Calls completed (callbacks handed out) so far.
    pub fn completed(&self) -> u64 {
        // Relaxed: a count for monitoring.
        self.shared.completed.load(Ordering::Relaxed)
    }

    /// The connection's counters.
    pub fn stats(&self) -> ConnStats {
        self.shared.stats.clone()
    }

    /// The reader of the client's round-trip histograms per procedure (call on the wire →
    /// reply received, the last transmission of each call), when
    /// [`ClientOptions::latency_histograms`] is on. See [`crate::metrics`].
    pub fn latency(&self) -> Option<LatencyReader> {
        self.latency.clone()
    }

    /// Stops accepting calls; pending ones finish, then the connection is closed.
    /// Dropping the last clone of a client does the same.
    pub fn close(&self) {
        close_shared(&self.shared);
    }
}

impl<P: Provider> ClientConn<P> {
    fn new(
        ep: &Endpoint<P>,
        addr: SocketAddr,
        opts: ClientOptions,
        rx: MpscConsumer<Submit>,
        shared: Arc<ClientShared>,
        stats: ConnStatsWriter,
        back: Option<BackchannelService>,
    ) -> Result<Self, ClientError> {
        let c = opts.credits;
        let mut cfg = conn::Config::DEFAULT;
        cfg.credits = c;
        cfg.inline_send = private_data::clamp_size(opts.inline_send);
        cfg.inline_recv = private_data::clamp_size(opts.inline_recv);
        cfg.remote_invalidate = opts.remote_invalidate;
        // A device without type-2 memory windows (siw, some RoCE NICs), opted in (checked in
        // `connect_with`): chunks are exposed through the persistent STags of the endpoint's
        // pool exposures and of this slab's RPC-header buffers, and the client does not offer
        // remote invalidation (it would revoke a persistent key). The device logged this once.
        let persistent = !ep.device().caps().mw_type2;
        if persistent {
            cfg.stag = conn::StagMode::Persistent;
        }
        cfg.ddp = opts.ddp;
        cfg.call_timeout_ns = opts.call_timeout_ms.saturating_mul(1_000_000);
        cfg.probe_timeout_ns = opts.probe_timeout_ms.saturating_mul(1_000_000);
        cfg.sq_depth = ep.sq_depth(c);
        cfg.rq_depth = ep.rq_depth(c);
        cfg.max_send_sge = 4;
        cfg.max_version = opts.version.number();
        let recv_size = private_data::representable_size(cfg.inline_recv);
        let nrec = opts.max_pending;
        // One engine call slot per call record: a record's index names its call to the engine
        // (at most 1 << 16, clamped above).
        cfg.call_slots = nrec as u32;
        let layout = requester_layout(c, cfg.inline_send, recv_size, nrec);
        // The slab's RPC-header buffers and zero octets may be exposed (read-only) in a long
        // call: through windows over the slab, or through an exposure of just that tail.
        let slab = Slab::new(
            &**ep.pd(),
            &layout,
            ep.hugepages(),
            crate::memory::pool_access(ep.device().caps()),
        )
        .map_err(|_| ClientError::Setup)?;
        let mut exposures = Vec::with_capacity(3);
        if persistent {
            let tail = slab
                .expose_tail(&**ep.pd(), crate::memory::HEADER_REMOTE)
                .map_err(|_| ClientError::Setup)?;
            exposures.push(tail);
            exposures.extend(ep.buffers().exposure().cloned());
            exposures.extend(ep.reply_buffers().exposure().cloned());
        }
        let back = match back {
            Some(b) => Some(
                ClientBack::new(
                    &**ep.pd(),
                    ep.hugepages(),
                    &mut cfg,
                    ep.config(),
                    opts.mode,
                    b,
                )
                .map_err(|_| ClientError::Setup)?,
            ),
            None => None,
        };
        let mut regions = vec![
            Arc::clone(&slab.region),
            Arc::clone(ep.buffers().region()),
            Arc::clone(ep.reply_buffers().region()),
        ];
        regions.extend(back.as_ref().map(|b| b.region()));
        let mut mem = HostRegions::new(&regions);
        for e in &exposures {
            mem.expose(e);
        }
        let calls = CallTable::new(&slab.rpc_headers[..nrec]);
        // An XID base that differs between clients and runs (RFC 5531 asks for uniqueness).
        let seed = (Instant::now().elapsed().as_nanos() as u32)
            ^ (Arc::as_ptr(&shared) as usize as u32).rotate_left(13)
            ^ std::process::id().rotate_left(7);
        Ok(ClientConn {
            shared,
            rx,
            opts,
            addr,
            drv: ConnDriver::new(mem),
            slab,
            cfg,
            nmw: if cfg.stag == conn::StagMode::MemoryWindows {
                (c as usize) * 4
            } else {
                0
            },
            state: CState::Idle,
            calls,
            next_xid: seed.wrapping_mul(0x9e37_79b9) | 1,
            attempts: 0,
            backoff_ns: opts.reconnect_min_ms.max(1) * 1_000_000,
            timer: None,
            deadline_timer: None,
            closing: false,
            stats,
            completed: 0,
            worker: 0,
            peer_pd: None,
            pub_version: 0,
            pub_credits: 0,
            back,
            reconnect_deferred: false,
            lat: Default::default(),
            cred: crate::cred::CredBody::of(opts.credential),
        })
    }
}

impl Client {
    /// [`Client::connect`] for a client that serves `service` on the backchannel of every
    /// connection it makes. Handlers run like the server's: inline on the reactor or on a
    /// worker, per `opts.mode`. The server sends backward calls only after its upper layer
    /// was told that this client serves them (RFC 8167 §6). After a reconnection the upper
    /// layer binds the new connection to its session again, and the server then sends the
    /// backward calls that were pending.
    pub fn connect_serving<P: Provider>(
        ep: &Endpoint<P>,
        addr: SocketAddr,
        opts: ClientOptions,
        service: BackchannelService,
    ) -> Result<Client, ClientError> {
        Client::connect_with(ep, addr, opts, Some(service))
    }
}
