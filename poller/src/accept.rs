//! A node's intake of connect requests (the server side of connection setup): the listeners
//! polled on this node, requests handed over by the node whose listener took them, and
//! requests waiting for the slot of a connection evicted for them. What a request is accepted
//! for is an [`Acceptor`] (a server, `server_conn.rs`); the node's slots are [`Slots`].
//!
//! Normal operation: a listener's requests are spread over the nodes in turn (the acceptor's
//! turn counter); each is admitted against its peer's connection limit, then accepted into a
//! free slot. Requests already waiting go first. A node takes at most [`ACCEPTS_PER_POLL`]
//! requests from its listeners per poll; a storm of connects waits in the listeners' backlog
//! and is taken over the following polls, between which established connections are served.
//!
//! Recovery: a request that finds the node's slots full waits (at most [`DEFER_NS`]) for the
//! slot of the connection idle the longest, evicted for it, or is refused with a reason
//! (`rpcrdma_engine::proto::reject`; `crate::server` documents the policy): `ConnectionLimit`,
//! `PeerLimit`,
//! `ServerFull`, `NoResources` (setting the connection up failed), `ShuttingDown` (the node or
//! the server is stopping; waiting requests are refused so at shutdown). A request that cannot
//! be handed over to its node (control ring full) is accepted here.

use std::collections::VecDeque;
use std::sync::Arc;

use rpcrdma_engine::proto::reject::RejectReason;
use rpcrdma_engine::verbs::{ConnRequest, Listener, Provider};

use crate::admission::PeerSlot;
use crate::node::{send_to, Acceptor, NodeCmd, NodeEnv, NodePeer, Seated, Slots};

/// Connect requests a node takes from its listeners per poll. The rest wait in the listener's
/// backlog for the next poll, so a storm of connects is spread over polls and the node keeps
/// serving its established connections in between (each accept registers memory and creates a
/// QP: tens of microseconds).
pub(crate) const ACCEPTS_PER_POLL: usize = 8;

/// How long a connect request waits for the slot of a connection evicted for it (ns). The
/// slot is normally free within a poll or two; the request is refused (`ServerFull`) after.
pub(crate) const DEFER_NS: u64 = 2_000_000_000;

/// A connect request waiting for the slot of a connection evicted for it.
struct Deferred<P: Provider> {
    req: P::ConnRequest,
    to: Arc<dyn Acceptor<P>>,
    peer: PeerSlot,
    /// Refused (`ServerFull`) when still waiting at this time (ns).
    until: u64,
}

/// The node's pieces an intake works with (borrowed for one command or poll).
pub(crate) struct Seat<'a, P: Provider> {
    pub env: &'a mut NodeEnv<P>,
    pub slots: &'a mut Slots<P>,
    /// Every node's control ring (requests are handed over in turn).
    pub peers: &'a [NodePeer<P>],
    /// The node is stopping.
    pub stopping: bool,
}

/// One node's intake of connect requests. See the module documentation.
pub(crate) struct Intake<P: Provider> {
    listeners: Vec<(P::Listener, Arc<dyn Acceptor<P>>)>,
    /// Requests waiting for the slots of evicted connections, oldest first.
    deferred: VecDeque<Deferred<P>>,
}

impl<P: Provider> Intake<P> {
    /// No listeners, nothing waiting.
    pub(crate) fn new() -> Intake<P> {
        Intake {
            listeners: Vec::new(),
            deferred: VecDeque::new(),
        }
    }

    /// Polls `listener` for `to` from now on (not when the node is stopping).
    pub(crate) fn listen(
        &mut self,
        listener: P::Listener,
        to: Arc<dyn Acceptor<P>>,
        stopping: bool,
    ) {
        if !stopping {
            self.listeners.push((listener, to));
        }
    }

    /// Admission of a connect request: the peer's limit, then a free slot, else the slot of
    /// the connection idle the longest (evicted for it, the request waits for its slot), else
    /// a refusal with the reason.
    pub(crate) fn accept(
        &mut self,
        seat: &mut Seat<'_, P>,
        req: P::ConnRequest,
        to: Arc<dyn Acceptor<P>>,
    ) {
        if seat.stopping || to.is_stopping() {
            refuse(seat.env, req, &*to, RejectReason::ShuttingDown);
            return;
        }
        let peer = match to.admit(req.peer_addr().ip()) {
            Ok(p) => p,
            Err(reason) => {
                refuse(seat.env, req, &*to, reason);
                return;
            }
        };
        // Requests already waiting go first.
        self.run_deferred(seat);
        if self.deferred.is_empty() {
            if let Some(slot) = seat.slots.take() {
                accept_in(seat, slot, req, to, peer);
                return;
            }
        }
        // Full: take a slot an evicted connection is giving back, or evict one more.
        if self.deferred.len() < seat.slots.evicting() || seat.slots.evict_idlest(seat.env.now) {
            let until = seat.env.now.saturating_add(DEFER_NS);
            self.deferred.push_back(Deferred {
                req,
                to,
                peer,
                until,
            });
        } else {
            drop(peer);
            refuse(seat.env, req, &*to, RejectReason::ServerFull);
        }
    }

    /// True when requests wait for slots.
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Accepts waiting connect requests into free slots, oldest first; refuses those that
    /// waited too long.
    pub(crate) fn run_deferred(&mut self, seat: &mut Seat<'_, P>) -> usize {
        let mut work = 0;
        while let Some(d) = self.deferred.front() {
            if d.until <= seat.env.now {
                if let Some(d) = self.deferred.pop_front() {
                    drop(d.peer);
                    refuse(seat.env, d.req, &*d.to, RejectReason::ServerFull);
                }
                work += 1;
                continue;
            }
            let Some(slot) = seat.slots.take() else { break };
            if let Some(d) = self.deferred.pop_front() {
                accept_in(seat, slot, d.req, d.to, d.peer);
                work += 1;
            }
        }
        work
    }

    /// True when this node polls listeners.
    pub(crate) fn is_listening(&self) -> bool {
        !self.listeners.is_empty()
    }

    /// Polls the listeners: each request goes to the node whose turn it is (here, or handed
    /// over), at most [`ACCEPTS_PER_POLL`] per poll; listeners of a stopping server (or node)
    /// are closed.
    pub(crate) fn poll_listeners(&mut self, seat: &mut Seat<'_, P>) -> usize {
        let mut work = 0;
        let mut taken = 0;
        let mut i = 0;
        while i < self.listeners.len() {
            if seat.stopping || self.listeners[i].1.is_stopping() {
                self.listeners.swap_remove(i);
                work += 1;
                continue;
            }
            while taken < ACCEPTS_PER_POLL {
                let req = match self.listeners[i].0.poll() {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(_) => {
                        seat.env.stats.verbs_error();
                        break;
                    }
                };
                work += 1;
                taken += 1;
                let to = Arc::clone(&self.listeners[i].1);
                let target = to.next_node(seat.peers.len().max(1));
                if target == seat.env.index {
                    self.accept(seat, req, to);
                } else if let Err(NodeCmd::Accept { req, to }) =
                    send_to(seat.peers, target, NodeCmd::Accept { req, to })
                {
                    self.accept(seat, req, to);
                }
            }
            i += 1;
        }
        work
    }

    /// The node is stopping: listeners close, waiting requests are refused (`ShuttingDown`).
    pub(crate) fn shutdown(&mut self, env: &mut NodeEnv<P>) {
        self.listeners.clear();
        while let Some(d) = self.deferred.pop_front() {
            drop(d.peer);
            refuse(env, d.req, &*d.to, RejectReason::ShuttingDown);
        }
    }
}

/// Accepts `req` in the free slot `slot`.
fn accept_in<P: Provider>(
    seat: &mut Seat<'_, P>,
    slot: u32,
    req: P::ConnRequest,
    to: Arc<dyn Acceptor<P>>,
    peer: PeerSlot,
) {
    match Arc::clone(&to).accept(seat.env, Seated { req, slot, peer }) {
        Ok(c) => seat.slots.place(slot, c, seat.env),
        Err(req) => {
            seat.env.stats.verbs_error();
            seat.slots.give_back(slot);
            if let Some(req) = req {
                refuse(seat.env, req, &*to, RejectReason::NoResources);
            }
        }
    }
}

/// Refuses `req`, telling the requester why (`rpcrdma_engine::proto::reject`), and counts it.
fn refuse<P: Provider>(
    env: &mut NodeEnv<P>,
    req: P::ConnRequest,
    to: &dyn Acceptor<P>,
    reason: RejectReason,
) {
    to.count_reject();
    env.stats.rejected(reason);
    if req.reject(&reason.encode()).is_err() {
        env.stats.verbs_error();
    }
}
