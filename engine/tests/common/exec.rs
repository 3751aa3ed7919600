//! How the harness executes one work request against the two hosts, as an RC QP would: receive
//! posting, Send (with the wire checks: RNR, receives the client keeps for the backchannel,
//! credits in both directions, STags a call exposed), RDMA Write and Read with rkey, bounds and
//! access checks, memory-window binds and local invalidation, each completing on its CQ.

use super::{call_handles, classify, Dir, Kind, Pair, Side, PROC_ERROR};
use rpcrdma_engine::conn::WorkRequest;
use rpcrdma_engine::verbs::{Access, Completion, Sge, WcFlags, WcOpcode, WcStatus, WrId};

/// A completion of `wr_id` as the harness's QP reports it.
fn wc(wr_id: WrId, status: WcStatus, opcode: WcOpcode, len: u32) -> Completion {
    Completion {
        wr_id: wr_id.raw(),
        status,
        opcode,
        byte_len: len,
        qp_num: 1,
        src_qp: 2,
        flags: WcFlags::NONE,
        invalidated_rkey: 0,
        vendor_err: 0,
    }
}

/// Word `i` of `msg` (0 past its end).
fn word(msg: &[u8], i: usize) -> u32 {
    msg.get(i * 4..i * 4 + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0)
}

impl Pair {
    /// The side that posted (`x`) and its peer (`y`).
    fn sides(&mut self, d: Dir) -> (&mut Side, &mut Side) {
        match d {
            Dir::Req => (&mut self.req, &mut self.resp),
            Dir::Resp => (&mut self.resp, &mut self.req),
        }
    }

    /// Executes `wr`, posted by side `d`.
    pub(super) fn exec(&mut self, d: Dir, wr: WorkRequest) {
        let (x, _) = self.sides(d);
        if !matches!(wr, WorkRequest::Recv { .. }) {
            assert!(
                x.sq_outstanding < x.cfg.sq_depth,
                "{}: send queue overrun",
                x.host.name
            );
            x.sq_outstanding += 1;
        }
        match wr {
            WorkRequest::Recv { wr_id, sge } => self.exec_recv(d, wr_id, sge),
            WorkRequest::Send {
                wr_id,
                sges,
                nsge,
                invalidate,
            } => self.exec_send(d, wr_id, &sges[..nsge as usize], invalidate),
            WorkRequest::RdmaWrite {
                wr_id,
                local,
                remote_addr,
                rkey,
            } => self.exec_rdma(d, wr_id, true, local, remote_addr, rkey),
            WorkRequest::RdmaRead {
                wr_id,
                local,
                remote_addr,
                rkey,
            } => self.exec_rdma(d, wr_id, false, local, remote_addr, rkey),
            WorkRequest::BindMw {
                wr_id,
                mw,
                addr,
                len,
                lkey,
                access,
                new_rkey,
            } => {
                self.stats.binds += 1;
                let (x, _) = self.sides(d);
                let region_ok = x.host.regions.iter().any(|r| {
                    r.lkey == lkey
                        && addr >= r.addr
                        && addr + u64::from(len) <= r.addr + r.len
                        && r.access.contains(Access::MW_BIND)
                });
                let one_right = access == Access::REMOTE_READ || access == Access::REMOTE_WRITE;
                let ok = match x.host.mws.get_mut(mw as usize) {
                    Some(w)
                        if w.bound.is_none()
                            && new_rkey >> 8 == w.rkey >> 8
                            && new_rkey != w.rkey
                            && region_ok =>
                    {
                        w.rkey = new_rkey;
                        w.bound = Some((addr, len, access));
                        true
                    }
                    _ => false,
                };
                assert!(one_right, "window bound with {access:?}");
                let status = if ok {
                    WcStatus::SUCCESS
                } else {
                    WcStatus::MW_BIND_ERR
                };
                self.complete(d, wc(wr_id, status, WcOpcode::BIND_MW, 0));
            }
            WorkRequest::LocalInv { wr_id, rkey } => {
                self.stats.local_invs += 1;
                if self.record {
                    self.inv_log.push((d, rkey, false));
                }
                let (x, _) = self.sides(d);
                let status = if x.host.invalidate(rkey) {
                    WcStatus::SUCCESS
                } else {
                    WcStatus::LOC_QP_OP_ERR
                };
                self.complete(d, wc(wr_id, status, WcOpcode::LOCAL_INV, 0));
            }
        }
    }

    /// A receive posted by side `d`.
    fn exec_recv(&mut self, d: Dir, wr_id: WrId, sge: Sge) {
        let (x, _) = self.sides(d);
        assert!(
            x.host.local_ok(&sge, true),
            "{}: bad receive SGE",
            x.host.name
        );
        x.rq.push_back((wr_id.raw(), sge));
        assert!(
            x.rq.len() as u32 <= x.cfg.rq_depth,
            "{}: receive queue overrun",
            x.host.name
        );
        self.stats.recvs_posted += 1;
    }

    /// A Send from side `d`: gathered, recorded, checked, and placed in the peer's next
    /// receive.
    fn exec_send(&mut self, d: Dir, wr_id: WrId, sges: &[Sge], invalidate: Option<u32>) {
        self.scratch.clear();
        let (x, _) = match d {
            Dir::Req => (&self.req, &self.resp),
            Dir::Resp => (&self.resp, &self.req),
        };
        for s in sges {
            assert!(
                x.host.local_ok(s, false),
                "{}: bad send SGE {s:?}",
                x.host.name
            );
            self.scratch
                .extend_from_slice(x.host.read_at(s.addr, s.len as usize));
        }
        let msg = std::mem::take(&mut self.scratch);
        let kind = self.record_send(d, &msg);
        self.check_send(d, kind, &msg);
        self.scratch = msg;
        self.stats.sends += 1;
        self.deliver_send(d, wr_id, invalidate);
    }

    /// Records and counts a Send's message.
    fn record_send(&mut self, d: Dir, msg: &[u8]) -> Kind {
        if self.record_procs && self.sent_procs.len() < self.sent_procs.capacity() {
            self.sent_procs
                .push((d, word(msg, 0), word(msg, 1), word(msg, 2), word(msg, 3)));
        }
        if self.record {
            self.sent.push((d, msg.to_vec()));
        }
        let kind = classify(d, msg);
        match kind {
            Kind::FwdCall => self.wire.fwd_calls += 1,
            Kind::FwdReply => self.wire.fwd_replies += 1,
            Kind::BackCall => self.wire.back_calls += 1,
            Kind::BackReply => self.wire.back_replies += 1,
            Kind::Unknown => self.wire.unknown += 1,
        }
        kind
    }

    /// The wire checks on a Send between two engines: the client's backchannel receives
    /// (RFC 8167 §4.2.1), credits in both directions, and the STags a call exposes.
    fn check_send(&mut self, d: Dir, kind: Kind, msg: &[u8]) {
        let (x, y) = self.sides(d);
        let both = x.conn.is_some() && y.conn.is_some();
        let client_receives = y.rq.len() as u32;
        let sender_is_engine = x.conn.is_some();
        if both && d == Dir::Resp && self.bc_reserve > 0 {
            // The client keeps receives posted for every forward call outstanding plus every
            // backward credit not in use.
            let need = self.outstanding + self.bc_reserve.saturating_sub(self.bc_outstanding);
            assert!(
                client_receives >= need,
                "client has {} receives posted, needs {} ({} forward outstanding, {} backward credits, {} backward outstanding)",
                client_receives,
                need,
                self.outstanding,
                self.bc_reserve,
                self.bc_outstanding
            );
        }
        if self.check_credits && both {
            self.check_credits_of(kind, msg);
        }
        if kind == Kind::FwdCall && sender_is_engine {
            if let Some(hs) = call_handles(msg) {
                self.record_exposed(word(msg, 0), &hs.0[..hs.1]);
            }
        }
    }

    /// Credits: forward calls within the grant, a non-error reply moves the grant (an error
    /// reports no credit limit: v2 draft, "Protocol Version Negotiation"), and backward
    /// credits work as forward ones (RFC 8167 §4.1), never 0.
    fn check_credits_of(&mut self, kind: Kind, msg: &[u8]) {
        match kind {
            Kind::FwdCall => {
                assert!(
                    self.outstanding < self.grant,
                    "requester exceeded its credits: {} outstanding, {} granted",
                    self.outstanding,
                    self.grant
                );
                self.outstanding += 1;
                self.stats.max_outstanding = self.stats.max_outstanding.max(self.outstanding);
            }
            Kind::FwdReply => {
                if word(msg, 3) != PROC_ERROR {
                    self.grant = word(msg, 2).clamp(1, self.credit_max);
                }
                self.outstanding = self.outstanding.saturating_sub(1);
            }
            Kind::BackCall => {
                assert_ne!(word(msg, 2), 0, "backward call with rdma_credit 0");
                assert!(
                    self.bc_outstanding < self.bc_grant,
                    "server exceeded its backward credits: {} outstanding, {} granted",
                    self.bc_outstanding,
                    self.bc_grant
                );
                self.bc_outstanding += 1;
            }
            Kind::BackReply => {
                assert_ne!(word(msg, 2), 0, "backward reply with rdma_credit 0");
                if word(msg, 3) != PROC_ERROR {
                    self.bc_grant = word(msg, 2);
                }
                self.bc_outstanding = self.bc_outstanding.saturating_sub(1);
            }
            Kind::Unknown => {}
        }
    }

    /// Places the gathered Send in the peer's next receive (an RNR panics), invalidates
    /// the peer's window for Send With Invalidate, and completes both sides.
    fn deliver_send(&mut self, d: Dir, wr_id: WrId, invalidate: Option<u32>) {
        let len = self.scratch.len() as u32;
        let (x, y) = match d {
            Dir::Req => (&mut self.req, &mut self.resp),
            Dir::Resp => (&mut self.resp, &mut self.req),
        };
        let Some((rwr, rsge)) = y.rq.pop_front() else {
            panic!(
                "RNR: {} sent a message while {} had no receive posted",
                x.host.name, y.host.name
            );
        };
        assert!(
            len <= rsge.len,
            "{}: {} octet message for a {} octet receive buffer",
            y.host.name,
            len,
            rsge.len
        );
        y.host.write(rsge.addr, &self.scratch);
        let mut rc = wc(WrId(rwr), WcStatus::SUCCESS, WcOpcode::RECV, len);
        if let Some(rkey) = invalidate {
            // (A raw receiver may be sent anything: only engines are held to it.)
            assert!(
                y.host.invalidate(rkey) || y.conn.is_none(),
                "Send With Invalidate of {rkey:#x}, not a bound window of {}",
                y.host.name
            );
            rc.flags = WcFlags::WITH_INV;
            rc.invalidated_rkey = rkey;
            self.stats.sends_with_inv += 1;
            if self.record {
                let to = match d {
                    Dir::Req => Dir::Resp,
                    Dir::Resp => Dir::Req,
                };
                self.inv_log.push((to, rkey, true));
            }
        }
        y.cq.push_back(rc);
        self.complete(d, wc(wr_id, WcStatus::SUCCESS, WcOpcode::SEND, len));
    }

    /// An RDMA Write (`write`) or Read from side `d` against the peer's memory.
    fn exec_rdma(
        &mut self,
        d: Dir,
        wr_id: WrId,
        write: bool,
        local: Sge,
        remote_addr: u64,
        rkey: u32,
    ) {
        if write {
            self.stats.writes += 1;
        } else {
            self.stats.reads += 1;
        }
        if self.record {
            self.rdma_log.push((d, write, local.len, remote_addr, rkey));
        }
        let (x, y) = match d {
            Dir::Req => (&mut self.req, &mut self.resp),
            Dir::Resp => (&mut self.resp, &mut self.req),
        };
        let access = if write {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        let ok = x.host.local_ok(&local, !write)
            && y.host.remote_ok(rkey, remote_addr, local.len, access);
        let status = if !ok {
            WcStatus::REM_ACCESS_ERR
        } else if write {
            self.scratch.clear();
            self.scratch
                .extend_from_slice(x.host.read_at(local.addr, local.len as usize));
            y.host.write(remote_addr, &self.scratch);
            self.stats.write_octets += u64::from(local.len);
            WcStatus::SUCCESS
        } else {
            self.scratch.clear();
            self.scratch
                .extend_from_slice(y.host.read_at(remote_addr, local.len as usize));
            x.host.write(local.addr, &self.scratch);
            WcStatus::SUCCESS
        };
        let opcode = if write {
            WcOpcode::RDMA_WRITE
        } else {
            WcOpcode::RDMA_READ
        };
        self.complete(d, wc(wr_id, status, opcode, local.len));
    }
}
