//! The per-connection driver: one queue pair and one sans-IO [`Connection`], generic over the
//! verbs provider `P` (chosen at compile time, no dynamic dispatch on the data path).
//!
//! Normal operation: the node (a reactor's poller, see [`crate::runtime`]) polls its one
//! completion queue in bursts and hands each completion to the driver of the QP it names
//! ([`Router`]: a small fixed open-addressing table from `qp_num` to a slot, no map
//! allocation). The driver feeds it to the connection with its [`HostRegions`] memory view; after
//! the application has had its events, [`ConnDriver::post`] drains the connection's
//! work requests into `queue_recv` / `queue_send` and rings ONE receive doorbell and ONE send
//! doorbell for the whole batch (receives first, so they are posted before any Send of the same
//! batch can draw a reply): the engine's one translation,
//! [`rpcrdma_engine::post::post_work_requests`], with memory-window slot indices mapped to this
//! driver's `P::Mw` objects and region keys to the provider's `P::Mr`. CM events are polled from the QP and
//! handed to the connection with the peer's private data; the connection's deadline
//! ([`Connection::poll_timeout`]) is kept armed on the reactor's timer wheel.
//!
//! Recovery: a verbs call that fails while posting means the QP cannot be trusted any more:
//! the driver disconnects it and tells the connection `Disconnected`, which fails everything
//! pending exactly once (the owner then decides: reconnect, or tear down). The QP is dropped
//! (destroyed) only after that; completions of a destroyed QP that are still in the CQ match no
//! live route and are counted as strays.

use rpcrdma_engine::conn::{CmInput, Connection};
use rpcrdma_engine::post::post_work_requests;
use rpcrdma_engine::post::Posted;
use rpcrdma_engine::verbs::{Completion, Provider, QueuePair, VerbsError};

use crate::api_stats::{ConnStatsWriter, NodeStatsWriter};
use crate::memory::HostRegions;
use crate::reactor::PollerCtx;
use crate::timer::TimerHandle;

/// Maps QP numbers to node slots: the engine's fixed open-addressing table
/// ([`rpcrdma_engine::u32map::U32Map`]), sized once for the reactor's connections.
pub type Router = rpcrdma_engine::u32map::U32Map;

/// One QP and its connection. See the module documentation.
pub struct ConnDriver<P: Provider> {
    /// Memory windows by slot index (the engine names them by index). Declared before `qp`
    /// so that they are dropped (deallocated) before it: a bound type-2 window holds a
    /// reference to its QP.
    pub mws: Vec<P::Mw>,
    /// The queue pair (`None` between a loss and the next connect).
    pub qp: Option<P::Qp>,
    /// The connection engine (`None` between a loss and the next connect).
    pub conn: Option<Connection>,
    /// The regions this connection may touch.
    pub mem: HostRegions,
    /// QP number routed to this driver (0 when none).
    pub qp_num: u32,
    timer: Option<TimerHandle>,
    timer_at: u64,
    /// Set when posting failed; the owner must tear the connection down.
    pub broken: bool,
}

impl<P: Provider> core::fmt::Debug for ConnDriver<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConnDriver")
            .field("qp_num", &self.qp_num)
            .field("conn", &self.conn)
            .field("broken", &self.broken)
            .finish()
    }
}

impl<P: Provider> ConnDriver<P> {
    /// A driver over `mem`, with no QP yet.
    pub fn new(mem: HostRegions) -> Self {
        ConnDriver {
            mws: Vec::new(),
            qp: None,
            conn: None,
            mem,
            qp_num: 0,
            timer: None,
            timer_at: u64::MAX,
            broken: false,
        }
    }

    /// Feeds one completion of this QP to the connection.
    #[inline]
    pub fn feed(&mut self, now: u64, wc: &Completion) {
        if let Some(c) = self.conn.as_mut() {
            c.handle_completion(now, wc, &mut self.mem);
        }
    }

    /// Hands the next CM event of the QP to `f` (without blocking). `Err` when polling failed.
    pub fn poll_cm(&mut self) -> Result<Option<rpcrdma_engine::verbs::CmEvent>, VerbsError> {
        match self.qp.as_mut() {
            Some(qp) => qp.poll_event(),
            None => Ok(None),
        }
    }

    /// The next CM event of the QP, if any; a failed poll is counted as a verbs error (in
    /// `node`) and ends the round's CM events.
    pub(crate) fn next_cm(
        &mut self,
        node: &NodeStatsWriter,
    ) -> Option<rpcrdma_engine::verbs::CmEvent> {
        // `Ok(None)`, the answer of nearly every round, is matched on its own: it returns a
        // tag, where `Ok(ev) => ev` copied the whole (event-sized) value every round.
        match self.poll_cm() {
            Ok(Some(ev)) => Some(ev),
            Ok(None) => None,
            Err(_) => {
                node.verbs_error();
                None
            }
        }
    }

    /// Tells the connection the peer's private data (the connection is established).
    pub fn established(&mut self, now: u64, private_data: &[u8]) {
        if let Some(c) = self.conn.as_mut() {
            c.handle_cm(now, CmInput::Established { private_data });
        }
    }

    /// Tells the connection it is gone (idempotent in the engine).
    pub fn disconnected(&mut self, now: u64) {
        if let Some(c) = self.conn.as_mut() {
            c.handle_cm(now, CmInput::Disconnected);
        }
    }

    /// Posts every work request the connection has queued
    /// ([`rpcrdma_engine::post::post_work_requests`]: receives and sends are queued, then one
    /// `flush_recv` and one `flush_send`). On a verbs error the QP is disconnected, the
    /// connection told, and [`ConnDriver::broken`] set.
    pub fn post(&mut self, now: u64) -> Posted {
        let (Some(conn), Some(qp)) = (self.conn.as_mut(), self.qp.as_mut()) else {
            return Posted::default();
        };
        let mem = &self.mem;
        let (p, r) = post_work_requests::<P>(conn, qp, &self.mws, |lkey| {
            mem.region_by_lkey(lkey)
                .and_then(|r| r.registration::<P::Mr>())
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "posting work requests failed: the connection is closed");
            // Whatever was queued and not flushed is discarded with the QP.
            let _ = qp.disconnect();
            conn.handle_cm(now, CmInput::Disconnected);
            while conn.poll_wr().is_some() {}
            self.broken = true;
        }
        p
    }

    /// [`ConnDriver::post`], counted in the node's (`node`) and the connection's (`conn`)
    /// counters; 1 when anything was posted (work done), else 0.
    #[inline]
    pub(crate) fn post_counted(
        &mut self,
        now: u64,
        node: &NodeStatsWriter,
        conn: &ConnStatsWriter,
    ) -> usize {
        let p = self.post(now);
        if p.wrs == 0 {
            return 0;
        }
        node.posted(u64::from(p.doorbells), u64::from(p.wrs));
        conn.posted(&p);
        1
    }

    /// Keeps one reactor timer armed at the connection's next deadline (`token` names it).
    pub fn sync_timer(&mut self, cx: &mut PollerCtx<'_>, token: u64) {
        let want = self
            .conn
            .as_ref()
            .and_then(|c| c.poll_timeout())
            .unwrap_or(u64::MAX);
        if want == self.timer_at {
            return;
        }
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
        self.timer_at = u64::MAX;
        if want != u64::MAX {
            if let Ok(h) = cx.arm_timer(want, token) {
                self.timer = Some(h);
                self.timer_at = want;
            }
        }
    }

    /// The armed deadline fired.
    pub fn on_timer(&mut self, now: u64) {
        self.timer = None;
        self.timer_at = u64::MAX;
        if let Some(c) = self.conn.as_mut() {
            c.handle_timeout(now, &mut self.mem);
        }
    }

    /// Teardown: removes the QP's route from `router`, cancels the timer and disconnects the
    /// QP, which is handed back (the caller drops it, after whatever must go before it).
    pub fn release_qp(&mut self, router: &mut Router, cx: &mut PollerCtx<'_>) -> Option<P::Qp> {
        if self.qp_num != 0 {
            router.remove(self.qp_num);
            self.qp_num = 0;
        }
        self.cancel_timer(cx);
        self.qp.take().map(|mut qp| {
            let _ = qp.disconnect();
            qp
        })
    }

    /// Cancels the timer (teardown).
    pub fn cancel_timer(&mut self, cx: &mut PollerCtx<'_>) {
        if let Some(h) = self.timer.take() {
            cx.cancel_timer(h);
        }
        self.timer_at = u64::MAX;
    }
}
