//! Shared receive queues (SRQ): a responder connection whose receives come from one pool its
//! node shares among all its connections ([`super::Connection::with_shared_receives`]), the
//! node's side of that pool ([`SrqPool`]) and the accounting that keeps credit grants honest
//! ([`SrqLedger`]). The per-connection mode (each connection posts its own receives) stays the
//! default and is unchanged.
//!
//! Normal operation: the node owns `depth` receive buffers ([`SharedRecvs`], registered once)
//! and posts them to one SRQ with `wr_id` = ([`wr_kind::SRQ_RECV`], buffer id). A receive
//! completion goes to the connection of its QP as usual
//! ([`super::Connection::handle_completion`]); the connection adopts the buffer into one of its
//! holding slots and treats it exactly as one of its own receives: a call's receive is held
//! while the call needs it (an inline call's arguments until its reply is handed to
//! [`super::Connection::send_reply`], a call with Read chunks until its inline parts are copied
//! into the reassembly buffer, a backward reply until it is copied out), then handed back:
//! [`super::Connection::poll_released_recv`] gives it to the node ([`SrqPool::returned`]),
//! which reposts it before the Sends of the same batch ([`SrqPool::next_to_post`],
//! `crate::post::post_srq_recvs`). The connection never posts a receive itself. Unlike the
//! per-connection mode, an inline call's receive is released when its reply is queued rather
//! than when the reply's Send completes (the Send gathers from the reply's own buffers, never
//! from the call's receive: a reply naming memory inside its call's receive buffer is refused
//! with [`ReplyError::BadSpec`]), so a receive never outlives its call's answer.
//!
//! Credits (RFC 8166 §3.3.1): a connection's receives in use are its calls not yet answered
//! plus the backward replies it waits for; a requester within its grant of `c` credits has at
//! most `c` calls not answered (in flight or held), and a server sends at most `b` backward
//! calls (`b` = its backchannel send buffers), so the connection never consumes more than
//! `c + b` SRQ receives at once. The node admits a connection only with a reservation of
//! `c + b` from its [`SrqLedger`]: the sum of all reservations never exceeds the SRQ depth
//! minus a slack, so the SRQ always has a posted receive for every message a peer within its
//! grant may send — such a peer never meets RNR. At the limit grants shrink: a newcomer gets
//! `min(wanted, free − b)` credits (at least one), and when not even one credit plus its
//! backward receives is free it is refused (the caller rejects the connect). A reservation
//! returns to the ledger when the connection is gone. The low-water mark of [`SrqPool`] counts
//! the times posted receives fell below it (pressure an operator can see); released buffers
//! are reposted at every post, so the refill never waits for it.
//!
//! RFC 8167 backward receives come from the same SRQ: a QP attached to an SRQ has no receive
//! queue of its own, so a server connection's backward replies arrive in SRQ buffers like its
//! calls; they are backed by the `b` backward receives of its reservation. (A client node with
//! an SRQ would have to reserve `2 × backchannel_credits` for the backward calls it serves;
//! the requester role has no shared-receive mode yet: [`ConfigError::SharedReceivesUnsupported`].)
//!
//! Recovery: a peer that exceeds its grant is detected when no holding slot is free (it holds
//! `c + b` receives already) — the holding slots are the per-connection count of shared
//! receives, O(1) per completion: the buffer goes straight back to the node, the connection
//! closes and [`super::Connection::exceeded_shared_grant`] tells the node to cut the peer off
//! at once (its QP to the error state, so it takes no more receives; RFC 8166 §3.3.1: a
//! requester MUST NOT exceed its grant, the responder may terminate the connection). In the
//! per-connection mode such a peer meets RNR instead. Because an SRQ consumes a receive as a
//! Send arrives, a violator can take many posted receives before the node polls the first
//! completion beyond its grant; they come back as they are polled. Other connections' Sends
//! that find the SRQ empty meanwhile must wait rather than fail: the node asks RNR retry 7
//! (forever) of the requesters on its SRQ. An unsuccessful receive completion
//! hands its buffer back at once. After the connection closes its held receives stay held —
//! an application may still read a delivered call's arguments — until the owner calls
//! [`super::Connection::release_held_recvs`] once no view remains. [`SrqPool::returned`]
//! refuses a buffer that is not held (a double return), so every buffer is reposted exactly
//! once per use.
//!
//! [`wr_kind::SRQ_RECV`]: super::wr_kind::SRQ_RECV
//! [`ReplyError::BadSpec`]: super::ReplyError::BadSpec
//! [`ConfigError::SharedReceivesUnsupported`]: super::ConfigError::SharedReceivesUnsupported

use std::sync::Arc;

use super::config::LocalBuf;
use super::fixed_capacity::Ring;
use super::types::wr_kind;
use crate::verbs::{Sge, WrId};

/// A node's shared receive buffers by id (the index). Cheap to clone: every connection of the
/// node keeps one to find the buffer a receive completion names.
#[derive(Debug, Clone)]
pub struct SharedRecvs {
    bufs: Arc<[LocalBuf]>,
}

impl SharedRecvs {
    /// The buffers `bufs` (id = index; at most `u16::MAX` + 1 of them, each at least the
    /// connections' advertised receive size).
    pub fn new(bufs: Vec<LocalBuf>) -> Self {
        SharedRecvs { bufs: bufs.into() }
    }

    /// Number of buffers.
    #[inline]
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// Buffer `id`.
    #[inline]
    pub fn get(&self, id: u32) -> Option<LocalBuf> {
        self.bufs.get(id as usize).copied()
    }

    /// Every buffer (index = id).
    pub fn bufs(&self) -> &[LocalBuf] {
        &self.bufs
    }
}

/// A shared receive buffer a connection hands back ([`super::Connection::poll_released_recv`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRecv {
    /// Its id (index in [`SharedRecvs`]).
    pub id: u32,
    /// The buffer.
    pub buf: LocalBuf,
}

/// The `wr_id` a shared receive buffer is posted with.
#[inline]
pub fn recv_wr_id(id: u32) -> WrId {
    WrId::new(wr_kind::SRQ_RECV, u64::from(id))
}

/// A connection's reservation from an [`SrqLedger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqGrant {
    /// Forward credits to grant (the connection's [`super::Config::credits`]).
    pub credits: u32,
    /// Backward receives reserved (the server's backward calls outstanding at most).
    pub backward: u32,
}

impl SrqGrant {
    /// Receives reserved in all.
    #[inline]
    pub fn receives(&self) -> u32 {
        self.credits + self.backward
    }
}

/// A node's credit accounting for one SRQ: the sum of reservations never exceeds
/// `depth − slack`. See the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct SrqLedger {
    usable: u32,
    reserved: u32,
}

impl SrqLedger {
    /// A ledger for an SRQ of `depth` receives, keeping `slack` of them out of every
    /// reservation (room for a peer that exceeds its grant before it is disconnected).
    pub fn new(depth: u32, slack: u32) -> Self {
        SrqLedger {
            usable: depth.saturating_sub(slack),
            reserved: 0,
        }
    }

    /// Admits a connection asking for `wanted` credits with `backward` backward receives:
    /// `min(wanted, free − backward)` credits (at least 1), or `None` when not even one credit
    /// plus the backward receives is free.
    pub fn admit(&mut self, wanted: u32, backward: u32) -> Option<SrqGrant> {
        let free = self.free();
        let credits = wanted.max(1).min(free.checked_sub(backward)?);
        if credits == 0 {
            return None;
        }
        let g = SrqGrant { credits, backward };
        self.reserved += g.receives();
        Some(g)
    }

    /// The connection holding `g` is gone: its reservation returns.
    pub fn release(&mut self, g: SrqGrant) {
        self.reserved = self.reserved.saturating_sub(g.receives());
    }

    /// Receives reserved by admitted connections.
    #[inline]
    pub fn reserved(&self) -> u32 {
        self.reserved
    }

    /// Receives not reserved (of `depth − slack`).
    #[inline]
    pub fn free(&self) -> u32 {
        self.usable.saturating_sub(self.reserved)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BufState {
    /// Returned (or new), waiting to be posted.
    Pending,
    /// Posted to the SRQ.
    Posted,
    /// Consumed by a receive completion, held by a connection.
    Held,
}

/// The node's side of an SRQ (sans-IO): which buffers are posted, held by connections, or
/// waiting to be posted. Allocates once, at creation.
#[derive(Debug)]
pub struct SrqPool {
    bufs: SharedRecvs,
    state: Vec<BufState>,
    pending: Vec<u32>,
    posted: u32,
    low_water: u32,
    low_events: u64,
    /// The most buffers held at once since creation (updated at each receive completion).
    held_max: u32,
}

impl SrqPool {
    /// A pool over `bufs`, every buffer waiting to be posted; `low_water`: posted receives
    /// below which [`SrqPool::low_water_events`] counts.
    pub fn new(bufs: SharedRecvs, low_water: u32) -> Self {
        let n = bufs.len();
        SrqPool {
            state: vec![BufState::Pending; n],
            pending: (0..n as u32).rev().collect(),
            posted: 0,
            bufs,
            low_water,
            low_events: 0,
            held_max: 0,
        }
    }

    /// The buffers.
    pub fn bufs(&self) -> &SharedRecvs {
        &self.bufs
    }

    /// The next buffer to post (now counted posted), with its `wr_id`.
    #[inline]
    pub fn next_to_post(&mut self) -> Option<(WrId, Sge)> {
        let id = self.pending.pop()?;
        self.state[id as usize] = BufState::Posted;
        self.posted += 1;
        let buf = self.bufs.get(id)?;
        Some((recv_wr_id(id), buf.sge()))
    }

    /// Posting the buffer with `wr_id` failed: it waits again.
    pub fn unpost(&mut self, wr_id: WrId) {
        let id = wr_id.index() as u32;
        if self.state.get(id as usize) == Some(&BufState::Posted) {
            self.state[id as usize] = BufState::Pending;
            self.posted -= 1;
            self.pending.push(id);
        }
    }

    /// A receive completion named `wr_id` (successful or not): the buffer left the SRQ and is
    /// the connection's until it hands it back. `false` for a `wr_id` that names no posted
    /// buffer.
    #[inline]
    pub fn consumed(&mut self, wr_id: WrId) -> bool {
        let id = wr_id.index();
        match self.state.get_mut(id as usize) {
            Some(s) if *s == BufState::Posted && wr_id.kind() == wr_kind::SRQ_RECV => {
                *s = BufState::Held;
                self.posted -= 1;
                if self.posted < self.low_water {
                    self.low_events += 1;
                }
                self.held_max = self.held_max.max(self.held());
                true
            }
            _ => false,
        }
    }

    /// A connection handed `r` back: it waits to be posted. `false` (and nothing changes) when
    /// it was not held — a double return.
    #[inline]
    pub fn returned(&mut self, r: SharedRecv) -> bool {
        match self.state.get_mut(r.id as usize) {
            Some(s) if *s == BufState::Held => {
                *s = BufState::Pending;
                self.pending.push(r.id);
                true
            }
            _ => false,
        }
    }

    /// Buffers posted.
    #[inline]
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Buffers held by connections.
    #[inline]
    pub fn held(&self) -> u32 {
        self.state.len() as u32 - self.posted - self.pending.len() as u32
    }

    /// The most buffers held by connections at once (a high-water mark: every receive
    /// completion counts, however soon its buffer comes back).
    #[inline]
    pub fn held_max(&self) -> u32 {
        self.held_max
    }

    /// Buffers waiting to be posted.
    #[inline]
    pub fn pending(&self) -> u32 {
        self.pending.len() as u32
    }

    /// Times the posted receives fell below the low-water mark.
    #[inline]
    pub fn low_water_events(&self) -> u64 {
        self.low_events
    }
}

/// A connection's shared-receive state (in its core): the node's buffers, which shared buffer
/// each holding slot has, and the buffers handed back and not yet polled.
pub(crate) struct SrqRecvs {
    pub(crate) table: SharedRecvs,
    pub(crate) shared_of: Vec<u32>,
    pub(crate) released: Ring<SharedRecv>,
    /// A receive completion found every holding slot taken: the peer exceeded its grant.
    pub(crate) exceeded: bool,
}

impl SrqRecvs {
    /// For `slots` holding slots. The ring takes every buffer handed back between two polls:
    /// at most all slots plus the one a completion could not adopt, twice over (a release of
    /// every held receive after close included).
    pub(crate) fn new(table: SharedRecvs, slots: usize) -> Self {
        let fill = SharedRecv {
            id: 0,
            buf: LocalBuf::EMPTY,
        };
        SrqRecvs {
            table,
            shared_of: vec![0; slots],
            released: Ring::new(2 * slots + 2, fill),
            exceeded: false,
        }
    }

    /// Hands shared buffer `id` back to the node.
    pub(crate) fn hand_back(&mut self, id: u32) {
        if let Some(buf) = self.table.get(id) {
            let ok = self.released.push(SharedRecv { id, buf });
            debug_assert!(ok, "released receives not polled");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_grants_that_shrink_at_the_limit() {
        let mut l = SrqLedger::new(20, 2);
        assert_eq!(
            l.admit(8, 2),
            Some(SrqGrant {
                credits: 8,
                backward: 2
            })
        );
        assert_eq!(l.free(), 8);
        assert_eq!(l.admit(8, 0).map(|g| g.credits), Some(8));
        assert_eq!(l.free(), 0);
        assert_eq!(l.admit(8, 0), None, "nothing left: refused");
        l.release(SrqGrant {
            credits: 8,
            backward: 2,
        });
        assert_eq!(
            l.admit(16, 4).map(|g| g.credits),
            Some(6),
            "shrunk to what is free"
        );
        assert_eq!(l.admit(1, 0), None);
        assert_eq!(l.reserved(), 18);
    }

    #[test]
    fn rejects_a_double_return_and_a_stray_completion() {
        let bufs = SharedRecvs::new((0..4).map(|i| LocalBuf::new(i * 64, 64, 1)).collect());
        let mut p = SrqPool::new(bufs, 2);
        let mut ids = Vec::new();
        while let Some((w, _)) = p.next_to_post() {
            ids.push(w);
        }
        assert_eq!(p.posted(), 4);
        assert!(p.consumed(ids[0]));
        assert!(!p.consumed(ids[0]), "consumed twice");
        assert!(!p.consumed(recv_wr_id(9)), "no such buffer");
        assert!(
            !p.consumed(WrId::new(wr_kind::RECV, 3)),
            "not an SRQ receive"
        );
        assert!(p.consumed(ids[1]));
        assert!(p.consumed(ids[2]));
        assert_eq!(p.low_water_events(), 1, "posted 3, 2, then 1: below 2 once");
        let r = SharedRecv {
            id: ids[1].index() as u32,
            buf: LocalBuf::new(64, 64, 1),
        };
        assert!(p.returned(r));
        assert!(!p.returned(r), "double return");
        assert_eq!((p.posted(), p.held(), p.pending()), (1, 2, 1));
        assert_eq!(p.held_max(), 3, "three held at once before one came back");
    }
}
