//! [`Connection`]: one RPC-over-RDMA connection (one QP) — creation and validation of its
//! configuration, private-data negotiation, and the dispatch of every input (completions,
//! connection-manager events, timeouts, calls and replies from the application) to its
//! requester ([`super::requester`]), its responder ([`super::responder`]) or the RDMA2_OPTIONAL
//! handlers. A connection has at most one requester and one responder: a client's requester
//! and a server's responder carry the forward direction; a client's responder and a server's
//! requester, present with backchannel memory, carry the backward one with the RFC 8167 policy
//! of [`super::backchannel`]. See the module documentation of [`super`] for the protocol
//! behaviour.
//!
//! Normal operation: each received message is decoded once and routed by direction
//! ([`super::receive`]): a call to the responder, a reply to the requester (the backward one
//! only while the backchannel is enabled); a send-queue completion goes to the role that
//! posted it (`BACK_SEND`: the backward role). Recovery: any unsuccessful completion or a
//! disconnect closes the connection once ([`Connection::fail`]): [`Event::ConnectionLost`] is
//! reported and every role fails what it has pending.

use super::backchannel::{self, Backward};
use super::config::*;
use super::core_state::{self, Core, RecvState};
use super::receive;
use super::requester::{self, Naming, Place, Requester};
use super::responder::{self, Responder};
use super::types::*;
use crate::proto::private_data::{self, Negotiated, PrivateData};
use crate::verbs::{Completion, WrId};

/// What is left to do for a received message once its decoded header no longer borrows the
/// receive buffer ([`Connection::on_recv`]).
enum AfterRecv {
    /// Nothing.
    Done,
    /// An RDMA2_OPTIONAL message: the error answer to send, if any.
    Optional(Option<(u32, u32)>),
    /// A reply on a requester (the forward role of a client, the backward role of a server):
    /// its verdict and receive buffer address.
    Requester(Option<(requester::Verdict, u64)>),
    /// A call on a responder (the forward role of a server, the backward role of a client):
    /// whether to run its processing loop.
    Responder(bool),
}

struct OptionalEntry {
    opttype: u32,
    handler: OptionalHandler,
}

/// One RPC-over-RDMA connection (one QP). See the module documentation.
pub struct Connection {
    core: Core,
    role: Role,
    /// Sends calls and takes their replies: the forward calls of a client, the backward calls
    /// (RFC 8167) of a server with backchannel memory.
    requester: Option<Requester>,
    /// Takes calls and sends their replies: the forward calls on a server, the backward calls
    /// on a client with backchannel memory.
    responder: Option<Responder>,
    back: Backward,
    optional: [Option<OptionalEntry>; MAX_OPTIONAL_HANDLERS],
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.role())
            .field("state", &self.core.state)
            .field("sq_used", &self.core.sq_used)
            .field("rq_posted", &self.core.rq_posted)
            .finish()
    }
}

impl Connection {
    /// Creates a connection. Allocates its slot arrays once; the receives to post first are
    /// available from [`Connection::poll_wr`] at once (they may be posted while the QP is in
    /// INIT, before the connection is established).
    pub fn new(role: Role, cfg: Config, pools: &Pools<'_>) -> Result<Connection, ConfigError> {
        Self::with_backchannel(role, cfg, pools, &BackchannelPools::NONE)
    }

    /// Creates a connection that can also carry the backward direction (RFC 8167) once
    /// [`Connection::enable_backchannel`] is called: a requester (client) then serves backward
    /// calls ([`Event::CallReady`], answered with [`Connection::send_reply`]), a responder
    /// (server) sends them ([`Connection::start_call`], answered by [`Event::ReplyReady`] /
    /// [`Event::CallFailed`]). `bc` sizes: see [`BackchannelPools`]; empty pools mean no
    /// backchannel (as [`Connection::new`]).
    pub fn with_backchannel(
        role: Role,
        cfg: Config,
        pools: &Pools<'_>,
        bc: &BackchannelPools<'_>,
    ) -> Result<Connection, ConfigError> {
        let rq_target = validate(role, &cfg, pools, bc)?;
        let with_bc = !bc.headers.is_empty() || !bc.recvs.is_empty();
        let mut core = Core::new(role, cfg, pools, bc, rq_target);
        let forward_req = || {
            let policy = requester::Policy::forward(&core);
            Requester::new(policy, pools.headers, core.cfg.call_slots)
        };
        let forward_resp = || {
            let policy = responder::Policy::forward(&core);
            Responder::new(&core, policy, pools.headers, pools.data)
        };
        let (requester, responder, back) = match (role, with_bc) {
            (Role::Requester, false) => (Some(forward_req()), None, Backward::NONE),
            (Role::Requester, true) => (
                Some(forward_req()),
                Some(backchannel::responder(&core, bc.headers)),
                Backward::new(bc.recvs.len()),
            ),
            (Role::Responder, false) => (None, Some(forward_resp()), Backward::NONE),
            (Role::Responder, true) => (
                Some(backchannel::requester(&core, bc.headers)),
                Some(forward_resp()),
                Backward::new(0),
            ),
        };
        core.refill_recvs();
        Ok(Connection {
            core,
            role,
            requester,
            responder,
            back,
            optional: [None, None, None, None],
        })
    }

    /// Creates a responder whose receives come from its node's shared receive queue
    /// ([`super::srq`]): it posts none itself, adopts the shared buffer a receive completion
    /// names (`wr_id` = ([`wr_kind::SRQ_RECV`], id in `shared`)), and hands each back through
    /// [`Connection::poll_released_recv`] when done with it. `pools.recvs` and `bc.recvs` are
    /// not used; `cfg.credits` is the grant the node's [`super::srq::SrqLedger`] backs, plus
    /// one receive per backchannel send buffer (backward replies come from the same SRQ).
    pub fn with_shared_receives(
        role: Role,
        cfg: Config,
        pools: &Pools<'_>,
        bc: &BackchannelPools<'_>,
        shared: super::srq::SharedRecvs,
    ) -> Result<Connection, ConfigError> {
        let slots = validate_shared(role, &cfg, pools, bc, shared.bufs())?;
        let holding = vec![LocalBuf::EMPTY; slots];
        let local = Pools {
            recvs: &holding,
            ..*pools
        };
        let bc_local = BackchannelPools {
            headers: bc.headers,
            recvs: &[],
        };
        let mut core = Core::new(role, cfg, &local, &bc_local, 0);
        core.srq = Some(super::srq::SrqRecvs::new(shared, slots));
        let (requester, back) = if bc.headers.is_empty() {
            (None, Backward::NONE)
        } else {
            (
                Some(backchannel::requester(&core, bc.headers)),
                Backward::new(0),
            )
        };
        let policy = responder::Policy::forward(&core);
        Ok(Connection {
            responder: Some(Responder::new(&core, policy, pools.headers, pools.data)),
            core,
            role: Role::Responder,
            requester,
            back,
            optional: [None, None, None, None],
        })
    }

    /// Shared receives: the next buffer this connection is done with, for the node to post
    /// again. Poll it after every input (completion, reply, timeout, CM event) and after
    /// [`Connection::release_held_recvs`]; always `None` in the per-connection mode.
    #[inline]
    pub fn poll_released_recv(&mut self) -> Option<super::srq::SharedRecv> {
        self.core.srq.as_mut()?.released.pop()
    }

    /// Shared receives of a closed connection: hands back every receive it still holds (its
    /// calls' arguments included), for [`Connection::poll_released_recv`]. Call it once no
    /// view of a delivered call remains (a closed connection keeps them held until then, so a
    /// handler still reading its arguments never sees them reused). Returns how many; 0 while
    /// the connection is not closed, and in the per-connection mode.
    pub fn release_held_recvs(&mut self) -> u32 {
        self.core.release_held()
    }

    /// Receives this connection holds (completed and still in use). In the shared-receive
    /// mode these are the node's buffers it has not handed back.
    pub fn receives_held(&self) -> u32 {
        self.core
            .recvs
            .iter()
            .filter(|r| r.state == RecvState::Held)
            .count() as u32
    }

    /// Shared receives: whether the peer exceeded its grant (a receive completion found every
    /// holding slot taken, so the connection closed). The node cuts such a peer off at once —
    /// its QP to the error state — so it takes no more of the shared receives (RFC 8166
    /// §3.3.1: a requester MUST NOT exceed its grant; the responder may end the connection).
    #[inline]
    pub fn exceeded_shared_grant(&self) -> bool {
        self.core.srq.as_ref().is_some_and(|s| s.exceeded)
    }

    /// Whether the receives come from a shared receive queue
    /// ([`Connection::with_shared_receives`]).
    pub fn shares_receives(&self) -> bool {
        self.core.srq.is_some()
    }

    /// The RPC-over-RDMA version in use. Requester: the version its calls are sent in (2 while
    /// probing a Version Two peer, 1 after falling back). Responder: the version of the last
    /// valid call (also the version of its backward calls).
    pub fn version(&self) -> u32 {
        self.core.version
    }

    /// Requester: what version negotiation learnt about the peer, for the layer above to keep
    /// across reconnections (pass it as [`Config::max_version`] of the next connection to the
    /// same peer, so a Version One peer is not probed again): `Some(2)` once a Version Two reply
    /// arrived, `Some(1)` after ERR_VERS (or when the connection was lost while the first
    /// Version Two call was unanswered, which the draft allows to read the same way), `None`
    /// while unknown or when only Version One was ever spoken.
    pub fn remembered_version(&self) -> Option<u32> {
        self.core.remembered
    }

    /// Registers `handler` for RDMA2_OPTIONAL messages of type `opttype` (Version Two). A
    /// received optional message of a registered type is handed to its handler (on the thread
    /// driving [`Connection::handle_completion`]); one of any other type is answered with
    /// RDMA2_ERR_INVAL_OPTION when it is a call-direction message this side can answer, and
    /// dropped otherwise.
    pub fn register_optional(
        &mut self,
        opttype: u32,
        handler: OptionalHandler,
    ) -> Result<(), OptionalError> {
        if self.optional.iter().flatten().any(|e| e.opttype == opttype) {
            return Err(OptionalError::AlreadyRegistered);
        }
        let Some(free) = self.optional.iter_mut().find(|e| e.is_none()) else {
            return Err(OptionalError::TableFull);
        };
        *free = Some(OptionalEntry { opttype, handler });
        Ok(())
    }

    /// Removes the handler of `opttype`; `false` when none was registered.
    pub fn unregister_optional(&mut self, opttype: u32) -> bool {
        for e in self.optional.iter_mut() {
            if e.as_ref().is_some_and(|h| h.opttype == opttype) {
                *e = None;
                return true;
            }
        }
        false
    }

    /// Enables the backward direction (RFC 8167 §6: only once the upper layers agreed, e.g.
    /// an NFSv4.1 CREATE_SESSION with a backchannel). Requester (client): posts the
    /// backchannel receives (call it before telling the server). Responder (server): allows
    /// [`Connection::start_call`] to send backward calls. May be called before the connection
    /// is established.
    pub fn enable_backchannel(&mut self) -> Result<(), BackchannelError> {
        if self.core.state == ConnState::Closed {
            return Err(BackchannelError::Closed);
        }
        if !self.back.present {
            return Err(BackchannelError::NoResources);
        }
        // A client's responder serves backward calls; a server's has no receives to add.
        let client_responder = match self.role {
            Role::Requester => self.responder.as_ref(),
            Role::Responder => None,
        };
        self.back.enable(&mut self.core, client_responder);
        Ok(())
    }

    /// Whether the backward direction is enabled.
    pub fn backchannel_enabled(&self) -> bool {
        self.back.enabled
    }

    /// Backward credits. Requester (client): the credits it grants in backward replies.
    /// Responder (server): the credits the client granted in its last backward reply (1
    /// before the first). 0 without a backchannel.
    pub fn backward_credits(&self) -> u32 {
        self.backward_counts().0
    }

    /// Backward calls in progress: sent and not answered (server), received and not answered
    /// (client).
    pub fn backward_outstanding(&self) -> u32 {
        self.backward_counts().1
    }

    /// The backward role's (credits, calls in progress); zeros without a backchannel.
    fn backward_counts(&self) -> (u32, u32) {
        if !self.back.present {
            return (0, 0);
        }
        match (self.role, &self.requester, &self.responder) {
            (Role::Requester, _, Some(r)) => (r.grant(), r.unanswered()),
            (Role::Responder, Some(r), _) => (r.granted(), r.outstanding()),
            _ => (0, 0),
        }
    }

    /// The role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The connection state.
    pub fn state(&self) -> ConnState {
        self.core.state
    }

    /// The thresholds in use (v1 defaults until established): those of [`Connection::version`]
    /// — RFC 8797 values for Version One, the Version Two values (4096 both ways, whatever the
    /// private data said) for Version Two, with a send threshold of at most 1024 while a requester's
    /// first Version Two call probes the responder. They change, without losing the connection,
    /// when version negotiation ends.
    pub fn negotiated(&self) -> Negotiated {
        let mut n = *self.core.neg_of(self.core.version);
        if self.core.probing {
            n.send_inline = n.send_inline.min(V2_FIRST_MESSAGE);
        }
        n
    }

    /// Requester: the length of the reply buffer to offer first for a call whose reply buffer
    /// holds `whole` octets, when its caller expects about `hint` octets of reply (0: no
    /// hint) and it offers `writes` Write chunks. The reply sizing of RFC 8166 (and Version
    /// Two) lives here and in the Reply chunk decision of [`Connection::start_call_with`]
    /// (the room an inline reply has): a hint applies on a Version One connection and on a
    /// confirmed Version Two one, and the buffer is never cut below what an inline reply may
    /// take (the responder may send one whatever is offered). The rest of the buffer is for
    /// the retry after RDMA2_ERR_CANT_REPLY (Version Two) or ERR_CHUNK (Version One):
    /// [`CallOptions::fallback_reply`].
    pub fn first_reply_len(&self, hint: usize, whole: usize, writes: usize) -> usize {
        let v2 =
            self.core.version == crate::proto::v2::VERSION && self.remembered_version() == Some(2);
        if hint == 0 || !(v2 || self.core.version == crate::proto::v1::VERSION) {
            return whole;
        }
        // Version Two: the room of our receive buffer (the responder may send that much
        // inline); Version One: of the inline threshold, less our Write list, which an
        // inline reply returns in its header.
        let room = if v2 {
            let buffer = self.core.neg_v2.recv_buffer as usize;
            buffer.saturating_sub(crate::proto::inline_msg_header_len(
                crate::proto::v2::VERSION,
                0,
            ))
        } else {
            self.core
                .inline_reply_room(crate::proto::v1::VERSION, writes)
        };
        hint.max(room).min(whole)
    }

    /// This side's RFC 8797 message, for the connect request (requester) or the accept
    /// (responder). The sizes are the advertised (representable, rounded-down) values.
    pub fn private_data(&self) -> [u8; private_data::MSG_LEN] {
        self.advertised().encode()
    }

    /// The private data to send at connection set-up: this side's RFC 8797 message, or `None`
    /// when [`Config::send_private_data`] is off (send no private data, or only the transport's
    /// own).
    pub fn private_data_opt(&self) -> Option<[u8; private_data::MSG_LEN]> {
        self.core.cfg.send_private_data.then(|| self.private_data())
    }

    /// The message this side advertises, with the sizes as the peer will decode them.
    fn advertised(&self) -> PrivateData {
        let cfg = &self.core.cfg;
        let r = cfg.remote_invalidate
            && (self.role() == Role::Responder || cfg.stag == StagMode::MemoryWindows);
        PrivateData::v1(
            r,
            private_data::representable_size(cfg.inline_send),
            private_data::representable_size(cfg.inline_recv),
        )
    }

    /// What this side negotiates with: its advertised message, or the Version One defaults
    /// when it sends none (the peer assumes exactly that of it).
    fn ours(&self) -> PrivateData {
        if self.core.cfg.send_private_data {
            self.advertised()
        } else {
            PrivateData::V1_DEFAULTS
        }
    }

    /// RFC 8797 §4.2 with both ends using the advertised values: each direction's threshold is
    /// min(sender's advertised send size, receiver's advertised receive size). Our send
    /// threshold is further capped by what our send buffers really hold (an inline send size
    /// below 1024 is advertised as 1024, the smallest representable value).
    fn negotiate_with(&self, peer: Option<&PrivateData>) -> Negotiated {
        let mut n = private_data::negotiate(&self.ours(), peer);
        n.send_inline = n.send_inline.min(self.core.cfg.inline_send.max(1));
        n
    }

    /// Requester: the credits currently granted by the responder (1 until the first non-error
    /// reply; errors never change it).
    /// Responder: the credits granted.
    pub fn credits(&self) -> u32 {
        match (self.role, &self.requester) {
            (Role::Requester, Some(r)) => r.granted(),
            _ => self.core.cfg.credits,
        }
    }

    /// Requester: calls outstanding (sent and not answered, timed-out ones included).
    pub fn outstanding(&self) -> u32 {
        match (self.role, &self.requester) {
            (Role::Requester, Some(r)) => r.outstanding(),
            _ => 0,
        }
    }

    /// Receives currently posted.
    pub fn receives_posted(&self) -> u32 {
        self.core.rq_posted
    }

    /// Connection manager input.
    pub fn handle_cm(&mut self, now: u64, input: CmInput<'_>) {
        let _ = now;
        match input {
            CmInput::Established { private_data } => {
                if self.core.state != ConnState::Connecting {
                    return;
                }
                let peer = private_data::find(private_data);
                self.core.neg = self.negotiate_with(peer.as_ref());
                self.core.neg_v2 = core_state::v2_thresholds(&self.core.cfg, peer.is_some());
                self.core.state = ConnState::Connected;
                self.core.emit(Event::Connected(self.negotiated()));
                if let Some(r) = &mut self.responder {
                    r.on_established(&mut self.core);
                }
            }
            CmInput::Disconnected => self.fail(),
        }
    }

    /// Closes the connection (once): reports the loss and fails what the role has pending.
    fn fail(&mut self) {
        self.core.state = ConnState::Closed;
        if self.core.lost_reported {
            return;
        }
        self.core.lost_reported = true;
        // The event ring keeps room for this (sized slots + receives + 4).
        let _ = self.core.events.push(Event::ConnectionLost);
        if let Some(r) = &mut self.requester {
            r.on_closed(&mut self.core);
        }
        if let Some(r) = &mut self.responder {
            r.on_closed(&mut self.core);
        }
    }

    /// A work completion of this QP.
    pub fn handle_completion<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        wc: &Completion,
        mem: &mut M,
    ) {
        let id = WrId(wc.wr_id);
        let kind = id.kind();
        if kind == wr_kind::SRQ_RECV {
            self.on_shared_recv(now, id, wc, mem);
            return;
        }
        if kind == wr_kind::RECV {
            self.core.rq_posted = self.core.rq_posted.saturating_sub(1);
        } else {
            self.core.sq_used = self.core.sq_used.saturating_sub(1);
            if kind == wr_kind::READ {
                self.core.reads_used = self.core.reads_used.saturating_sub(1);
            }
        }
        let Ok(index) = u32::try_from(id.index()) else {
            self.fail();
            return;
        };
        if !wc.status.is_success() {
            self.on_failed_completion(kind, index, wc.status);
            return;
        }
        if self.core.state == ConnState::Closed {
            return;
        }
        if kind == wr_kind::RECV {
            self.on_recv(now, index, wc, mem);
            self.check_closed();
            return;
        }
        // The backward role's Sends are BACK_SEND; every other send-queue kind is the forward
        // role's (the requester's on a client, the responder's on a server).
        let to_requester = (kind == wr_kind::BACK_SEND) != (self.role == Role::Requester);
        match (to_requester, &mut self.requester, &mut self.responder) {
            (true, Some(r), _) => r.on_completion(&mut self.core, now, kind, index, wc, mem),
            (false, _, Some(r)) => r.on_completion(&mut self.core, now, kind, index, wc, mem),
            // A completion for a role this connection does not have.
            _ => self.core.fail(),
        }
        self.check_closed();
    }

    /// A work request completed in error: its receive (if one) is idle again, and the
    /// connection fails — the QP is in the error state, so everything outstanding completes
    /// flushed. Out of line: no call that succeeds pays for its code.
    #[cold]
    #[inline(never)]
    fn on_failed_completion(&mut self, kind: u8, index: u32, status: crate::verbs::WcStatus) {
        // An answer's Send (the responder's on a server, the backward one's on a client).
        let answer = matches!(
            (kind, self.role),
            (wr_kind::SEND, Role::Responder) | (wr_kind::BACK_SEND, Role::Requester)
        );
        if let (true, Some(r)) = (answer, self.responder.as_mut()) {
            r.note_sent(index, false);
        }
        if kind == wr_kind::RECV {
            if let Some(r) = self.core.recvs.get_mut(index as usize) {
                if r.state == RecvState::Posted {
                    r.state = RecvState::Idle;
                    let _ = self.core.recv_idle.push(index);
                }
            }
        }
        if status != crate::verbs::WcStatus::WR_FLUSH_ERR {
            tracing::debug!(
                status = status.name(),
                wr_kind = kind,
                "work request failed"
            );
        }
        self.fail();
    }

    /// Shared receives: a receive completion naming a node buffer. Adopted into a holding slot
    /// and handled as any receive, or handed straight back (see [`Core::adopt_shared`]).
    fn on_shared_recv<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        id: WrId,
        wc: &Completion,
        mem: &mut M,
    ) {
        let ok = wc.status.is_success();
        let open = self.core.state != ConnState::Closed;
        let index = u32::try_from(id.index()).unwrap_or(u32::MAX);
        if let Some(local) = self.core.adopt_shared(index, ok && open) {
            self.on_recv(now, local, wc, mem);
        } else if !ok {
            // The QP is in the error state.
            self.fail();
        }
        self.check_closed();
    }

    /// A message arrived in receive `index`: decoded once here, routed by direction, and
    /// handed (decoded) to the part that owns it — first while the decoded header borrows the
    /// receive buffer, then, once it no longer does, with the host memory to act on.
    fn on_recv<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        index: u32,
        wc: &Completion,
        mem: &mut M,
    ) {
        let rbuf = self.core.recv_buf(index);
        let len = rbuf.map_or(0, |b| wc.byte_len.min(b.len));
        let role = self.role;
        // Calls go to the responder, replies to the requester; the one of the backward
        // direction takes nothing while the backchannel is not enabled.
        let forward = receive::forward(role);
        let call_open = forward == receive::Route::Call || self.back.enabled;
        let reply_open = forward == receive::Route::Reply || self.back.enabled;
        let next = {
            // `None`: the receive buffer is not readable (goes to the forward role, which
            // drops it).
            let decoded = rbuf
                .and_then(|b| mem.bytes(b.addr, len as usize))
                .map(|buf| receive::decode(buf, &self.core.v2_limits, self.core.cfg.max_version));
            let route = match &decoded {
                None => forward,
                Some(d) => receive::route(d, role),
            };
            // By reference: the decoded header is not moved.
            let d = decoded.as_ref();
            match (route, d, &mut self.requester, &mut self.responder) {
                (receive::Route::Optional, Some(Ok(h)), ..) => {
                    AfterRecv::Optional(self.on_optional(index, h))
                }
                (receive::Route::Reply, d, Some(r), _) if reply_open => {
                    AfterRecv::Requester(r.judge_recv(&mut self.core, index, wc, d))
                }
                (receive::Route::Call, d, _, Some(r)) if call_open => {
                    AfterRecv::Responder(r.take_recv(&mut self.core, index, d))
                }
                // Direction unknown, or a backward message while the backchannel is off:
                // repost the receive, use nothing of the message. (An optional message always
                // decodes; an open direction always has its role.)
                _ => {
                    self.core.hold_recv(index);
                    self.core.release_recv(index);
                    AfterRecv::Done
                }
            }
        };
        // The role that took the message (phase one) finishes it.
        match (next, &mut self.requester, &mut self.responder) {
            (AfterRecv::Optional(answer), ..) => self.answer_optional(answer, mem),
            (AfterRecv::Requester(v), Some(r), _) => {
                r.finish_recv(&mut self.core, now, index, v, mem)
            }
            (AfterRecv::Responder(true), _, Some(r)) => r.progress(&mut self.core, mem),
            _ => {}
        }
    }

    /// An RDMA2_OPTIONAL message `h` arrived in receive `index`: its handler, or, for a
    /// call-direction message of an unknown type, the (`xid`, `vers`) to answer with
    /// RDMA2_ERR_INVAL_OPTION (draft, "Optional Features"). Reply-direction messages are never
    /// answered.
    fn on_optional(&mut self, index: u32, h: &receive::Any<'_>) -> Option<(u32, u32)> {
        self.core.hold_recv(index);
        let mut answer = None;
        if let receive::AnyBody::Optional(o) = h.body {
            let msg = OptionalMessage {
                xid: h.xid,
                credits: h.credits,
                direction: o.optdir,
                opttype: o.opttype,
                info: o.optinfo,
                payload: h.payload,
            };
            match self
                .optional
                .iter_mut()
                .flatten()
                .find(|e| e.opttype == o.opttype)
            {
                Some(e) => (e.handler)(&msg),
                None if o.optdir == crate::proto::v2::Direction::Call => {
                    answer = Some((h.xid, h.vers))
                }
                None => {}
            }
        }
        self.core.release_recv(index);
        answer
    }

    /// Answers an RDMA2_OPTIONAL call of an unknown type with RDMA2_ERR_INVAL_OPTION, sent by
    /// whichever side of this connection acts as responder for calls in that direction.
    fn answer_optional<M: HostMemory + ?Sized>(&mut self, answer: Option<(u32, u32)>, mem: &mut M) {
        let Some((xid, vers)) = answer else {
            return;
        };
        let err = crate::proto::v2::RdmaError::InvalOption;
        // The responder answers calls: a server's always, a client's once its backchannel is
        // enabled (without one a client has no way to answer a call).
        let open = self.role == Role::Responder || self.back.enabled;
        if let (true, Some(r)) = (open, &mut self.responder) {
            r.answer_v2_error(&mut self.core, xid, vers, err, mem);
        }
    }

    /// An input found the connection broken: finish closing it.
    fn check_closed(&mut self) {
        if self.core.state == ConnState::Closed && !self.core.lost_reported {
            self.fail();
        }
    }

    /// The time given by [`Connection::poll_timeout`] has come. `mem` is the host memory, as
    /// for completions: a Version Two probe that timed out is sent again from here.
    pub fn handle_timeout<M: HostMemory + ?Sized>(&mut self, now: u64, mem: &mut M) {
        // Only forward calls time out (the backward policy has no timeouts).
        if let (Role::Requester, Some(r)) = (self.role, &mut self.requester) {
            r.on_timeout(&mut self.core, now, mem);
        }
        self.check_closed();
    }

    /// The next work request to post.
    pub fn poll_wr(&mut self) -> Option<WorkRequest> {
        self.core.wrs.pop()
    }

    /// Takes every queued work request, oldest first, handing each to `f` by reference (the
    /// requests are not copied out of the ring, as [`Connection::poll_wr`] does). Stops after
    /// the first request `f` fails on, which is taken too, and returns that error; the rest
    /// stay queued.
    #[inline]
    pub fn drain_wrs<E>(&mut self, f: impl FnMut(&WorkRequest) -> Result<(), E>) -> Result<(), E> {
        self.core.wrs.drain_with(f)
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop()
    }

    /// The answer (reply or RDMA_ERROR) whose Send the last completion finished, successfully
    /// or not: the buffers of its [`ReplySpec`] may be reused. Responder, and a client's
    /// backward responder. One completion finishes at most one answer's Send, so an owner that
    /// uses these reports takes one after every [`Connection::handle_completion`]; one that
    /// does not may ignore them (a report not taken is replaced by the next).
    #[inline]
    pub fn poll_sent(&mut self) -> Option<SentAnswer> {
        self.responder.as_mut()?.poll_sent()
    }

    /// When [`Connection::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        match (self.role, &self.requester) {
            (Role::Requester, Some(r)) => r.next_deadline(),
            _ => None,
        }
    }

    /// Work requests waiting in [`Connection::poll_wr`].
    pub fn pending_wrs(&self) -> usize {
        self.core.wrs.len()
    }

    /// Requester: starts a call. On success the binds and the Send are queued for
    /// [`Connection::poll_wr`]; the outcome arrives as [`Event::ReplyReady`] or
    /// [`Event::CallFailed`]. The message parts, DDP items, receptacles and reply buffer must
    /// stay untouched until then. The engine picks the call's slot; on a connection whose
    /// caller names the slots ([`Config::call_slots`], [`Connection::start_call_in`]) the call
    /// is refused with [`StartError::BadSpec`].
    ///
    /// Responder (server) with an enabled backchannel: starts a backward-direction call
    /// (RFC 8167). It goes inline as RDMA_MSG with empty chunk lists (DDP items are sent
    /// inline, receptacles are refused); its XID is from the backward space (it may equal the
    /// XID of a forward call in progress). Without an enabled backchannel:
    /// [`StartError::BackchannelDisabled`].
    pub fn start_call<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        spec: &CallSpec<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        self.start_call_with(now, spec, &CallOptions::NONE, mem)
    }

    /// [`Connection::start_call`] with options: a fallback reply buffer (and receptacles) for
    /// a retry after RDMA2_ERR_CANT_REPLY (Version Two) or ERR_CHUNK (Version One). The options are ignored for backward calls.
    /// The call's XID is read from the first word of its message.
    pub fn start_call_with<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        let naming = Naming {
            place: Place::Any,
            xid: None,
        };
        self.start(now, naming, spec, opts, mem)
    }

    /// [`Connection::start_call_with`] for a caller that assigned the call's XID and encoded
    /// it as the message's first word: the engine takes `xid` as given and does not read it
    /// back. A caller that sends a call again on a new connection (with the same XID, which a
    /// server's duplicate request cache recognises) keeps the XID in its own record.
    pub fn start_call_xid<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        xid: u32,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        let naming = Naming {
            place: Place::Any,
            xid: Some(xid),
        };
        self.start(now, naming, spec, opts, mem)
    }

    /// [`Connection::start_call_xid`] in the call slot `slot`, which the caller names: with
    /// [`Config::call_slots`] set, the caller keeps its own record of every call and names
    /// the record's index (below `call_slots`), and the returned [`CallId`] has that slot.
    /// The engine's state of the call in that slot is what the wire needs while the call is
    /// on this connection; it goes with the connection, the caller's record does not.
    /// [`StartError::Busy`] when the slot still finishes an earlier call, or every send buffer
    /// is held; [`StartError::BadSpec`] when the slot is out of range or the connection picks
    /// slots itself (`call_slots` 0), as [`Connection::start_call`] is refused on a
    /// connection whose caller names them.
    pub fn start_call_in<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        slot: u32,
        xid: u32,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        let naming = Naming {
            place: Place::At(slot),
            xid: Some(xid),
        };
        self.start(now, naming, spec, opts, mem)
    }

    fn start<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        naming: Naming,
        spec: &CallSpec<'_>,
        opts: &CallOptions<'_>,
        mem: &mut M,
    ) -> Result<CallId, StartError> {
        // The requester sends forward calls on a client, backward ones on a server once the
        // backchannel is enabled (the options are the forward requester's).
        let (forward, open) = (self.role == Role::Requester, self.back.enabled);
        let core = &mut self.core;
        let r = match &mut self.requester {
            Some(r) if forward => r.start_call(core, now, naming, spec, opts, mem),
            Some(r) if open => r.start_call(core, now, naming, spec, &CallOptions::NONE, mem),
            _ => Err(StartError::BackchannelDisabled),
        };
        self.check_closed();
        r
    }

    /// Responder: answers `call`. The message parts and result items must stay untouched until
    /// the slot is reused (after the reply's Send completes).
    ///
    /// Requester (client) with an enabled backchannel: answers a backward call reported by
    /// [`Event::CallReady`], inline (results go inline; a reply too large for the inline
    /// threshold is answered with ERR_CHUNK, [`ReplyKind::ErrChunk`]).
    pub fn send_reply<M: HostMemory + ?Sized>(
        &mut self,
        now: u64,
        call: CallId,
        spec: &ReplySpec<'_>,
        mem: &mut M,
    ) -> Result<ReplyKind, ReplyError> {
        let _ = now;
        // The responder answers forward calls on a server, backward ones on a client.
        let r = match &mut self.responder {
            Some(r) => r.send_reply(&mut self.core, call, spec, mem),
            None => Err(ReplyError::WrongRole),
        };
        self.check_closed();
        r
    }
}
