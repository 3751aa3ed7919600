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
//! Recovery: a request that finds no room — the node's slots full, the server's
//! `max_connections` reached, or (on a shared receive queue) no reservation left — waits (at
//! most [`DEFER_NS`]) for the room of a connection evicted for it, or is refused with a reason.
//! A request from an address under its fair share also waits when some address holds more
//! than its share but all of those connections are busy now: it takes the first of them to
//! settle, so connections kept busy in turn cannot keep a newcomer out.
//! The victim is chosen fairly ([`crate::node::pick_victim`]): a connection of the address
//! holding the most connections server-wide, then the idlest, never one of an address that
//! would hold fewer than the requester's; so an address keeping several connections busy
//! cannot aim evictions at another's one idle connection. Reasons
//! (`rpcrdma_engine::proto::reject`; `crate::server` documents the policy): `ConnectionLimit`,
//! `PeerLimit`,
//! `ServerFull`, `NoResources` (setting the connection up failed), `ShuttingDown` (the node or
//! the server is stopping; waiting requests are refused so at shutdown). A request that cannot
//! be handed over to its node (control ring full) is accepted here.

use std::collections::VecDeque;
use std::net::IpAddr;
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

/// A connect request waiting for the slot of a connection evicted for it, or for a
/// connection of an address over its fair share to settle so that it can be evicted.
struct Deferred<P: Provider> {
    req: P::ConnRequest,
    to: Arc<dyn Acceptor<P>>,
    peer: PeerSlot,
    /// The requester's address (the victim choice weighs its share).
    ip: IpAddr,
    /// A connection was evicted for it; `false` while it waits for one to settle (each poll
    /// tries again).
    room: bool,
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

    /// Admission of a connect request: the peer's limit and the server's total, then a free
    /// slot (and, on a shared receive queue, a reservation), else room made by evicting a
    /// connection (`make_room`; the request waits for it, or for one to settle), else a refusal with the
    /// reason.
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
        let ip = req.peer_addr().ip();
        let peer = match to.peers().admit(ip) {
            Ok(p) => p,
            // The server's table is full: a share beyond it while a connection is evicted.
            Err(RejectReason::ConnectionLimit) => match to.peers().admit_beyond_total(ip) {
                Ok(p) if make_room(seat, &*to, ip) => {
                    self.defer(seat.env.now, req, to, p, ip, true);
                    return;
                }
                Ok(_) => {
                    refuse(seat.env, req, &*to, RejectReason::ConnectionLimit);
                    return;
                }
                Err(reason) => {
                    refuse(seat.env, req, &*to, reason);
                    return;
                }
            },
            Err(reason) => {
                refuse(seat.env, req, &*to, reason);
                return;
            }
        };
        // Requests already waiting go first.
        self.run_deferred(seat);
        let room = to.has_room(seat.env);
        if self.deferred.is_empty() && room {
            if let Some(slot) = seat.slots.take() {
                accept_in(seat, slot, req, to, peer);
                return;
            }
        }
        // Full (slots, or the shared receive queue's reservations): take what an evicted
        // connection is giving back, or evict one more, or wait for one to settle.
        match self.room_or_wait(seat, &*to, ip) {
            Some(room) => self.defer(seat.env.now, req, to, peer, ip, room),
            None => {
                drop(peer);
                let reason = if room {
                    RejectReason::ServerFull
                } else {
                    RejectReason::NoResources
                };
                refuse(seat.env, req, &*to, reason);
            }
        }
    }

    /// Whether a request from `ip` that found no room may wait: `Some(true)` when an evicted
    /// connection's slot is spare or one was evicted for it now, `Some(false)` when nothing is
    /// evictable now but some address holds more than its fair share and `ip` does not (one of
    /// that address's connections, busy now, is evicted once it settles: an address keeping
    /// its connections busy in turn cannot keep a newcomer out), `None` when it may not.
    fn room_or_wait(
        &mut self,
        seat: &mut Seat<'_, P>,
        to: &dyn Acceptor<P>,
        ip: IpAddr,
    ) -> Option<bool> {
        let promised = self.deferred.iter().filter(|d| d.room).count();
        if promised < seat.slots.evicting() || make_room(seat, to, ip) {
            return Some(true);
        }
        let shares = to.peers().shares(ip);
        shares
            .over
            .is_some_and(|fair| shares.mine <= fair)
            .then_some(false)
    }

    /// Queues a request to wait (at most [`DEFER_NS`]) for room an eviction makes (`room`:
    /// one was made for it).
    fn defer(
        &mut self,
        now: u64,
        req: P::ConnRequest,
        to: Arc<dyn Acceptor<P>>,
        peer: PeerSlot,
        ip: IpAddr,
        room: bool,
    ) {
        let until = now.saturating_add(DEFER_NS);
        self.deferred.push_back(Deferred {
            req,
            to,
            peer,
            ip,
            room,
            until,
        });
    }

    /// True when requests wait for slots.
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Accepts waiting connect requests into free slots, oldest first; refuses those that
    /// waited too long; evicts for the oldest one still waiting for a connection to settle.
    pub(crate) fn run_deferred(&mut self, seat: &mut Seat<'_, P>) -> usize {
        let mut work = 0;
        while let Some(d) = self.deferred.front() {
            if d.until <= seat.env.now {
                if let Some(d) = self.deferred.pop_front() {
                    drop(d.peer);
                    refuse(seat.env, d.req, &*d.to, RejectReason::ServerFull);
                }
                self.keep_promises(seat.slots.evicting());
                work += 1;
                continue;
            }
            // Room on the shared receive queue comes when the evicted connection is gone.
            let slot = if d.to.has_room(seat.env) {
                seat.slots.take()
            } else {
                None
            };
            if let Some(slot) = slot {
                if let Some(d) = self.deferred.pop_front() {
                    accept_in(seat, slot, d.req, d.to, d.peer);
                    work += 1;
                }
                self.keep_promises(seat.slots.evicting());
                continue;
            }
            if !d.room && make_room(seat, &*d.to, d.ip) {
                if let Some(d) = self.deferred.front_mut() {
                    d.room = true;
                }
                work += 1;
            }
            break;
        }
        work
    }

    /// Requests promised an eviction are no more than the evictions under way: when a
    /// request took a slot (or left) without one evicted for it, the newest promised one
    /// waits for a connection to settle again.
    fn keep_promises(&mut self, evicting: usize) {
        let mut promised = self.deferred.iter().filter(|d| d.room).count();
        for d in self.deferred.iter_mut().rev() {
            if promised <= evicting {
                break;
            }
            if d.room {
                d.room = false;
                promised -= 1;
            }
        }
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

/// Evicts a connection of this node for a request from `ip` (which holds its share
/// already): the victim [`crate::node::pick_victim`] chooses by the connections each
/// address holds server-wide, then idleness. `false` when eviction is off or nothing is
/// evictable.
fn make_room<P: Provider>(seat: &mut Seat<'_, P>, to: &dyn Acceptor<P>, ip: IpAddr) -> bool {
    let table = to.peers();
    let shares = table.shares(ip);
    let Some(victim) = seat
        .slots
        .evict_for(seat.env.now, shares, &|p: IpAddr| table.count(p))
    else {
        return false;
    };
    crate::log_limited!(
        peer: &victim.peer;
        INFO,
        peer = %victim.peer,
        idle_ms = victim.idle / 1_000_000,
        reason = "idle, evicted for a new connection",
        requester = %ip,
        node = seat.env.index,
        "connection evicted"
    );
    true
}

/// Accepts `req` in the free slot `slot`.
fn accept_in<P: Provider>(
    seat: &mut Seat<'_, P>,
    slot: u32,
    req: P::ConnRequest,
    to: Arc<dyn Acceptor<P>>,
    peer: PeerSlot,
) {
    let from = req.peer_addr();
    match Arc::clone(&to).accept(seat.env, Seated { req, slot, peer }) {
        Ok(c) => seat.slots.place(slot, c, seat.env),
        Err(req) => {
            seat.env.stats.verbs_error();
            crate::log_limited!(
                peer: from;
                WARN,
                peer = %from,
                node = seat.env.index,
                "connection setup failed (memory registration, queue pair or accept)"
            );
            seat.slots.give_back(slot);
            if let Some(req) = req {
                refuse(seat.env, req, &*to, RejectReason::NoResources);
            }
        }
    }
}

/// Refuses `req`, telling the requester why (`rpcrdma_engine::proto::reject`), counts it and
/// logs it (rate-limited: a peer can connect in a loop).
fn refuse<P: Provider>(
    env: &mut NodeEnv<P>,
    req: P::ConnRequest,
    to: &dyn Acceptor<P>,
    reason: RejectReason,
) {
    to.count_reject();
    env.stats.rejected(reason);
    crate::log_limited!(
        peer: req.peer_addr();
        INFO,
        peer = %req.peer_addr(),
        %reason,
        node = env.index,
        "connection refused"
    );
    if req.reject(&reason.encode()).is_err() {
        env.stats.verbs_error();
    }
}
