//! Judging a received reply on the requester: decoding it, matching it to its call by XID,
//! checking it against what the call offered (version, Write list, Reply chunk, length), and
//! applying the verdict (grant update, copy of an inline reply, resend, failure).
//!
//! Normal operation: [`Requester::judge_reply`] reads only the receive buffer and returns a
//! [`Verdict`]; [`Requester::apply_verdict`] changes state. Recovery: a reply that cannot be
//! used fails its call; one naming no call is dropped (the late reply of a timed-out call
//! returns that call's credit).

use super::*;

impl Requester {
    /// A send-queue completion (receives come through [`Requester::judge_recv`]).
    pub(crate) fn on_completion<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        _now: u64,
        kind: u8,
        index: u32,
        _wc: &Completion,
        mem: &mut M,
    ) {
        match kind {
            wr_kind::SEND | wr_kind::BACK_SEND | wr_kind::BIND | wr_kind::INV => {
                let Some(call) = self.calls.get_mut(index as usize) else {
                    core.state = ConnState::Closed;
                    return;
                };
                if call.state == ReqState::Free || call.outstanding == 0 {
                    core.state = ConnState::Closed;
                    return;
                }
                call.outstanding -= 1;
            }
            _ => {
                // Requesters never post RDMA Reads or Writes (and receives come decoded).
                core.state = ConnState::Closed;
                return;
            }
        }
        self.progress(core, Some(mem));
    }

    /// A reply arrived in receive `index`, decoded by the connection (`None`: its buffer is
    /// not readable): holds the receive and judges the reply, without touching memory. The
    /// verdict and the receive buffer's address go to [`Requester::finish_recv`]; `None` when
    /// the receive slot does not exist (the connection is then closed).
    pub(crate) fn judge_recv(
        &mut self,
        core: &mut Core,
        index: u32,
        wc: &Completion,
        decoded: Option<&Result<receive::Any<'_>, AnyError>>,
    ) -> Option<(Verdict, u64)> {
        let Some(rbuf) = core.recv_buf(index) else {
            core.state = ConnState::Closed;
            return None;
        };
        let inv = wc
            .flags
            .contains(WcFlags::WITH_INV)
            .then_some(wc.invalidated_rkey);
        core.hold_recv(index);
        let verdict = match decoded {
            Some(d) => self.judge_reply(core, d),
            None => Verdict::Drop,
        };
        // The peer invalidated a window before this receive completed: note it before the
        // answered call posts its LocalInvs.
        if let Some(rkey) = inv {
            self.mark_remote_inv(core, rkey, verdict.slot());
        }
        Some((verdict, rbuf.addr))
    }

    /// Acts on a judged reply (copies an inline one into place), reposts its receive and runs
    /// the processing loop.
    pub(crate) fn finish_recv<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        _now: u64,
        index: u32,
        judged: Option<(Verdict, u64)>,
        mem: &mut M,
    ) {
        if let Some((verdict, recv_addr)) = judged {
            self.apply_verdict(core, verdict, recv_addr, mem);
            core.release_recv(index);
        }
        self.progress(core, Some(mem));
    }

    /// Decides what a decoded reply means, without touching memory.
    fn judge_reply(&self, core: &Core, decoded: &Result<receive::Any<'_>, AnyError>) -> Verdict {
        let h = match decoded {
            Ok(h) => h,
            Err(e) => return self.judge_undecodable(core, *e),
        };
        // The credit rule ([`credits::reply_grant`]): only a non-error reply reports a grant.
        let grant = credits::reply_grant(&h.body, h.credits, self.max_credits);
        let Some(slot) = self.find(h.xid) else {
            return match (&h.body, grant) {
                (AnyBody::Error(_), _) => Verdict::Unknown(Some(h.xid)),
                (_, Some(g)) => Verdict::UnknownWithCredits(g, h.xid),
                (_, None) => Verdict::Drop,
            };
        };
        let (lists, nomsg) = match h.body {
            // RDMA_DONE is ignored, whatever XID it names (module doc, "Credits").
            AnyBody::Done | AnyBody::Optional(_) => return Verdict::Drop,
            AnyBody::Error(e) => return self.judge_error(core, slot, h.vers, e),
            AnyBody::Msg { lists, .. } => (lists, false),
            AnyBody::Nomsg { lists, .. } => (lists, true),
        };
        self.judge_answer(slot, h, lists, nomsg, grant)
    }

    /// A reply neither codec accepted: fails the call it names when its XID is readable, else
    /// is dropped. An ERR_VERS in a foreign version is still an ERR_VERS.
    fn judge_undecodable(&self, core: &Core, e: AnyError) -> Verdict {
        match e {
            AnyError::V1(e) => {
                // An ERR_VERS from a responder that put its own version in rdma_vers (the
                // layout of ERR_VERS is the same in every version).
                if let HeaderErrorKind::ForeignError {
                    vers_range: Some((low, high)),
                    ..
                } = e.kind
                {
                    return match e.xid.and_then(|x| self.find(x)) {
                        Some(slot) => self.err_vers(core, slot, low, high),
                        None => Verdict::Unknown(e.xid),
                    };
                }
                // Too small to convey a complete RPC message: none of its fields is used,
                // its XID included (RFC 8167 §5.3).
                if matches!(
                    e.kind,
                    HeaderErrorKind::ShortHeader { .. } | HeaderErrorKind::MissingPayload { .. }
                ) {
                    return Verdict::Drop;
                }
                match e.xid.and_then(|x| self.find(x)) {
                    Some(slot) => {
                        Verdict::Fail(slot, CallError::BadReply(BadReply::Header(e.kind)))
                    }
                    None => Verdict::Drop,
                }
            }
            AnyError::V2(e) => {
                if matches!(
                    e.kind,
                    v2::HeaderErrorKind::ShortHeader { .. }
                        | v2::HeaderErrorKind::MissingPayload { .. }
                ) {
                    return Verdict::Drop;
                }
                match e.xid.and_then(|x| self.find(x)) {
                    Some(slot) => {
                        Verdict::Fail(slot, CallError::BadReply(BadReply::HeaderV2(e.kind)))
                    }
                    None => Verdict::Drop,
                }
            }
        }
    }

    /// An RDMA_ERROR / RDMA2_ERROR of version `vers` answering the call in `slot`: a resend
    /// (Version Two fallback, CANT_REPLY / ERR_CHUNK retry with the fallback resources) or a
    /// failure. Never a credit update.
    fn judge_error(&self, core: &Core, slot: u32, vers: u32, e: WireErr) -> Verdict {
        let is_v2 = vers == v2::VERSION;
        let call = &self.calls[slot as usize];
        let sv = &self.saved[call.header as usize];
        let may_retry = call.saved && sv.has_fallback() && !sv.retried;
        match e {
            WireErr::Vers { low, high } => self.err_vers(core, slot, low, high),
            // Version One has no CANT_REPLY: a responder that cannot fit the reply into what
            // the call offered answers ERR_CHUNK. A call that offered less than its whole reply
            // buffer (a reply size hint) is sent again once, offering all of it ("send the
            // request again, this time with a Reply chunk", implementation experience §4.3).
            WireErr::Chunk if !is_v2 && may_retry => Verdict::Resend(slot, Resend::Larger),
            WireErr::Chunk => Verdict::Fail(slot, CallError::ErrChunk),
            WireErr::Unknown(code) => Verdict::Fail(slot, CallError::RdmaError(code)),
            WireErr::V2(v2::RdmaError::CantReply { .. }) if may_retry => {
                Verdict::Resend(slot, Resend::Larger)
            }
            WireErr::V2(e) => Verdict::Fail(slot, CallError::Rdma2(e)),
        }
    }

    /// A non-error reply to the call in `slot`: checks it against what the call offered
    /// (version, reply-only rules, Write list, Reply chunk, inline length).
    fn judge_answer(
        &self,
        slot: u32,
        h: &receive::Any<'_>,
        lists: ChunkLists<'_>,
        nomsg: bool,
        granted: Option<u32>,
    ) -> Verdict {
        let is_v2 = h.vers == v2::VERSION;
        let call = &self.calls[slot as usize];
        // A Version One reply that is not an error but cannot be used still reports the grant
        // (as before; a Version Two one fails its call without changing credits).
        let with_credits = |e| match granted {
            Some(g) if credits::unusable_reply_grants(h.vers) => {
                Verdict::FailWithCredits(slot, e, g)
            }
            _ => Verdict::Fail(slot, e),
        };
        if h.vers != call.vers && h.vers != call.also_vers {
            // "A responder MUST send Replies with the same RPC-over-RDMA protocol version that
            // the requester uses to send its Calls." (A probe sent again after its timeout
            // went out in both versions: either reply answers it.)
            return with_credits(CallError::BadReply(BadReply::Version {
                call: call.vers,
                reply: h.vers,
            }));
        }
        // Reply-only rules (the Version Two decoder checked them already): no Read list; an
        // RDMA_NOMSG reply is in the Reply chunk.
        if !is_v2 {
            let kind = if !lists.reads.is_empty() {
                Some(HeaderErrorKind::ReadListInReply)
            } else if nomsg && lists.reply.is_none() {
                Some(HeaderErrorKind::NomsgReplyWithoutReplyChunk)
            } else {
                None
            };
            if let Some(k) = kind {
                return with_credits(CallError::BadReply(BadReply::Header(k)));
            }
        }
        // Write list: at most the chunks offered; each returned chunk has at most the offered
        // segment (or is an empty array); lengths never exceed what was offered.
        let mut written = [0u32; MAX_WRITE_CHUNKS];
        if lists.writes.len() > call.nwrites as usize {
            return with_credits(CallError::BadReply(BadReply::WriteList));
        }
        for (i, chunk) in lists.writes.iter().enumerate() {
            let got = chunk.total_length();
            if chunk.len() > 1 || got > call.writes[i].length {
                return with_credits(CallError::BadReply(BadReply::WriteList));
            }
            written[i] = got;
        }
        if nomsg {
            let ok = call.reply_offered
                && lists
                    .reply
                    .is_some_and(|r| r.len() <= 1 && r.total_length() <= call.reply.len);
            if !ok {
                return with_credits(CallError::BadReply(BadReply::ReplyChunk));
            }
            let len = lists.reply.map_or(0, |r| r.total_length());
            Verdict::Reply {
                slot,
                granted,
                len,
                written,
                copy_from: None,
            }
        } else {
            if h.payload.len() > call.reply.len as usize {
                return with_credits(CallError::BadReply(BadReply::TooLong));
            }
            Verdict::Reply {
                slot,
                granted,
                len: h.payload.len() as u32,
                written,
                copy_from: Some(h.header_len as u32),
            }
        }
    }

    /// ERR_VERS for the call in `slot`: while a Version Two call probes the responder and
    /// Version One is in the range, fall back and send the call again; else fail it.
    fn err_vers(&self, core: &Core, slot: u32, low: u32, high: u32) -> Verdict {
        let call = &self.calls[slot as usize];
        if core.probing && call.vers == v2::VERSION && (low..=high).contains(&crate::conn::VERSION)
        {
            return Verdict::Resend(slot, Resend::Fallback);
        }
        Verdict::Fail(slot, CallError::ErrVers { low, high })
    }

    fn apply_verdict<M: HostMemory + ?Sized>(
        &mut self,
        core: &mut Core,
        v: Verdict,
        recv_addr: u64,
        mem: &mut M,
    ) {
        match v {
            Verdict::Drop => {}
            Verdict::Unknown(xid) => self.unknown_reply(xid),
            Verdict::UnknownWithCredits(g, xid) => {
                self.granted = g;
                self.unknown_reply(Some(xid));
            }
            Verdict::Fail(slot, e) => self.answered(core, slot, Outcome::Failed(e)),
            Verdict::FailWithCredits(slot, e, g) => {
                self.granted = g;
                self.answered(core, slot, Outcome::Failed(e));
            }
            Verdict::Resend(slot, why) => {
                if why == Resend::Fallback {
                    // The responder speaks only Version One: use it for the rest of the
                    // connection, and remember it for the next one.
                    core.version = crate::conn::VERSION;
                    core.probing = false;
                    core.remembered = Some(crate::conn::VERSION);
                }
                self.answered(core, slot, Outcome::Resend(why));
                self.resending += 1;
            }
            Verdict::Reply {
                slot,
                granted,
                len,
                written,
                copy_from,
            } => {
                if let Some(g) = granted {
                    self.granted = g;
                }
                let call = self.calls[slot as usize];
                if core.probing && call.vers == v2::VERSION {
                    // A Version Two reply: Version Two it is, with its thresholds from now on.
                    core.probing = false;
                    core.remembered = Some(v2::VERSION);
                }
                if let Err(bad) = place_reply(&call, len, copy_from, recv_addr, mem) {
                    self.answered(core, slot, Outcome::Failed(CallError::BadReply(bad)));
                    return;
                }
                self.answered(
                    core,
                    slot,
                    Outcome::Reply {
                        len,
                        written,
                        long: copy_from.is_none(),
                    },
                );
            }
        }
    }

    /// A reply (or error) whose XID names no call awaiting one: the late answer to a timed-out
    /// call returns that call's credit; any other XID returns nothing (a stray or duplicate
    /// reply must not free a credit the responder still holds).
    fn unknown_reply(&mut self, xid: Option<u32>) {
        if let Some(xid) = xid {
            self.orphans.reclaim(xid);
        }
    }

    /// Notes that the peer invalidated `rkey` (Send With Invalidate). Normally it is one of the
    /// answered call's windows (`hint`); otherwise every window in use is searched.
    fn mark_remote_inv(&mut self, core: &mut Core, rkey: u32, hint: Option<u32>) {
        if let Some(call) = hint.and_then(|s| self.calls.get_mut(s as usize)) {
            for i in 0..call.nstags as usize {
                if core.mws[call.stags[i] as usize].rkey == rkey {
                    call.remote_inv |= 1 << i;
                    return;
                }
            }
        }
        for mw in core.mws.iter() {
            if mw.rkey != rkey {
                continue;
            }
            if let Some(owner) = mw.owner {
                if let Some(call) = self.calls.get_mut(owner as usize) {
                    if (mw.pos as usize) < call.nstags as usize {
                        call.remote_inv |= 1 << mw.pos;
                    }
                }
            }
        }
    }
}

/// What a received reply means.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Verdict {
    /// Ignore it (RDMA_DONE, RDMA2_OPTIONAL, a message too short to use).
    Drop,
    /// Unknown XID (when readable), nothing usable (an error, or a header that does not
    /// parse).
    Unknown(Option<u32>),
    /// Unknown XID, a non-error reply with a credit update.
    UnknownWithCredits(u32, u32),
    /// Fail the call (an error reply, or an unusable reply that carries no grant).
    Fail(u32, CallError),
    /// Fail the call and update credits (a non-error reply that cannot be used).
    FailWithCredits(u32, CallError, u32),
    /// Invalidate the call's STags, then send it again (an error reply: no credit update).
    Resend(u32, Resend),
    /// A usable reply.
    Reply {
        slot: u32,
        /// The grant it reports ([`credits::reply_grant`]).
        granted: Option<u32>,
        len: u32,
        written: [u32; MAX_WRITE_CHUNKS],
        /// Offset of the inline reply in the receive buffer (RDMA_MSG); `None` for RDMA_NOMSG.
        copy_from: Option<u32>,
    },
}

impl Verdict {
    /// The call the reply answers, if it names one.
    fn slot(&self) -> Option<u32> {
        match *self {
            Verdict::Fail(s, _) | Verdict::FailWithCredits(s, _, _) | Verdict::Resend(s, _) => {
                Some(s)
            }
            Verdict::Reply { slot, .. } => Some(slot),
            _ => None,
        }
    }
}

/// Puts a usable reply of `len` octets in place: copies an inline one (at `copy_from` in the
/// receive buffer at `recv_addr`) into the call's reply buffer, or checks that the long one the
/// responder wrote into the Reply chunk (its RDMA Writes completed before this Send, RC
/// ordering) is the REPLY to this call — the transport header could not say so.
fn place_reply<M: HostMemory + ?Sized>(
    call: &ReqCall,
    len: u32,
    copy_from: Option<u32>,
    recv_addr: u64,
    mem: &mut M,
) -> Result<(), BadReply> {
    if let Some(off) = copy_from {
        if len > 0 && !mem.copy(call.reply.addr, recv_addr + u64::from(off), len as usize) {
            return Err(BadReply::TooLong);
        }
        return Ok(());
    }
    let head = if len >= 8 {
        mem.bytes(call.reply.addr, 8)
    } else {
        None
    };
    let is_reply =
        head.is_some_and(|b| b[..4] == call.xid.to_be_bytes() && b[4..8] == 1u32.to_be_bytes());
    if is_reply {
        Ok(())
    } else {
        Err(BadReply::NotAReply)
    }
}
