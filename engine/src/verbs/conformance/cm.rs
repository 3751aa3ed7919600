//! Checks of connection management: private data in connect, accept and reject (and their
//! limits), connecting to nobody, posting before Established, and receives posted before
//! accept.
//!
//! Normal operation: each check uses the boundary's listener and connect / accept / reject.
//! Recovery: a refused connection reports `Rejected` / `Unreachable` / a connect error, and the
//! requester's QP goes to ERROR.

use super::*;

/// Private data travels with connect (56 octets) and accept (196 octets).
pub fn private_data_exchange<E: Env>(env: &mut E) -> CheckResult {
    let req: Vec<u8> = (0..PRIVATE_DATA_CONNECT_MAX as u8)
        .map(|i| i ^ 0xa5)
        .collect();
    let rep: Vec<u8> = (0..PRIVATE_DATA_ACCEPT_MAX as u8)
        .map(|i| i ^ 0x3c)
        .collect();
    let o = PairOpts {
        c_pdata: &req,
        s_pdata: &rep,
        ..PairOpts::default()
    };
    let conn = connect_with(env, o, None, None)?;
    let (ev, got_req) = (conn.established, conn.request_private_data);
    ensure!(
        got_req.len() >= req.len() && got_req[..req.len()] == req[..],
        "server saw {got_req:02x?}"
    );
    let got_rep = ev.private_data.as_slice();
    ensure!(
        got_rep.len() >= rep.len() && got_rep[..rep.len()] == rep[..],
        "client saw {got_rep:02x?}"
    );
    Ok(())
}

/// Private data beyond the RDMA-CM limits is refused.
pub fn private_data_limits<E: Env>(env: &mut E) -> CheckResult {
    let (addr, mut l) = listen_fresh(env, 4)?;
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let cq = env.client().create_cq(64).map_err(e2s)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let long = [0u8; PRIVATE_DATA_ACCEPT_MAX + 1];
    let e = env
        .client()
        .connect(addr, init, &long[..PRIVATE_DATA_CONNECT_MAX + 1]);
    ensure!(
        e.is_err(),
        "connect with 57 octets of private data succeeded"
    );
    let _qp1 = env.client().connect(addr, init, &[1, 2, 3]).map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let r = req.reject(&long[..PRIVATE_DATA_REJECT_MAX + 1]);
    ensure!(
        r.is_err(),
        "reject with 149 octets of private data succeeded"
    );
    let _qp2 = env.client().connect(addr, init, &[4, 5, 6]).map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let spd = env.server().alloc_pd().map_err(e2s)?;
    let scq = env.server().create_cq(64).map_err(e2s)?;
    let sinit = QpInit {
        pd: &spd,
        send_cq: &scq,
        recv_cq: &scq,
        srq: None,
        opts: QpOptions::default(),
    };
    let r = req.accept(sinit, &long[..]);
    ensure!(
        r.is_err(),
        "accept with 197 octets of private data succeeded"
    );
    Ok(())
}

/// Reject carries private data to the requester, whose QP ends in ERROR.
pub fn reject_with_private_data<E: Env>(env: &mut E) -> CheckResult {
    let (addr, mut l) = listen_fresh(env, 4)?;
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let mut cq = env.client().create_cq(64).map_err(e2s)?;
    let b = Buf::<E::P>::new(&pd, 64, LW)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = env.client().connect(addr, init, b"hello").map_err(e2s)?;
    post_recv::<E::P>(&mut qp, 1, &[b.sge(0, 64)])?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    ensure!(
        req.private_data().starts_with(b"hello"),
        "request private data {:02x?}",
        req.private_data()
    );
    req.reject(b"go away").map_err(e2s)?;
    let ev = wait_event(env, &mut qp)?;
    ensure!(
        ev.kind == CmEventKind::Rejected,
        "got {:?}, expected Rejected",
        ev.kind
    );
    // docs/rdma-provider.md 2.4 / 2.5: an iWARP reject is an MPA reject, reported as
    // -ECONNRESET; IB reports the IB CM reason "consumer reject".
    let status = if profile(env).iwarp() {
        -crate::verbs::errno::ECONNRESET
    } else {
        REJECT_CONSUMER
    };
    ensure!(
        ev.status == status,
        "reject status {}, expected {status}",
        ev.status
    );
    ensure!(
        ev.private_data.as_slice().starts_with(b"go away"),
        "reject private data {:?}",
        ev.private_data
    );
    ensure!(
        qp.state() == QpState::Error,
        "QP state {:?} after reject",
        qp.state()
    );
    expect_wc(&wait_wc(env, &mut cq)?, 1, WcStatus::WR_FLUSH_ERR, None)?;
    Ok(())
}

/// Connecting to an address nobody listens on fails (Rejected, or Unreachable / ConnectError).
pub fn connect_without_listener<E: Env>(env: &mut E) -> CheckResult {
    let addr = env.listen_addr();
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let cq = env.client().create_cq(64).map_err(e2s)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = match env.client().connect(addr, init, &[]) {
        Ok(qp) => qp,
        Err(_) => return Ok(()),
    };
    let ev = wait_event(env, &mut qp)?;
    ensure!(
        matches!(
            ev.kind,
            CmEventKind::Rejected | CmEventKind::Unreachable | CmEventKind::ConnectError
        ),
        "got {:?}",
        ev.kind
    );
    ensure!(qp.state() != QpState::Rts, "QP is RTS without a peer");
    Ok(())
}

/// Sending before the connection is established is refused (EINVAL), receives may be posted.
pub fn post_before_established<E: Env>(env: &mut E) -> CheckResult {
    let (addr, _l) = listen_fresh(env, 4)?;
    let pd = env.client().alloc_pd().map_err(e2s)?;
    let cq = env.client().create_cq(64).map_err(e2s)?;
    let b = Buf::<E::P>::new(&pd, 64, LW)?;
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let mut qp = env.client().connect(addr, init, &[]).map_err(e2s)?;
    ensure!(qp.state() != QpState::Rts, "QP RTS before accept");
    post_recv::<E::P>(&mut qp, 1, &[b.sge(0, 64)])?;
    let e = qp.queue_send(&SendWr::send(1, &[b.sge(0, 8)]));
    ensure!(
        e.is_err(),
        "send accepted before the connection was established"
    );
    Ok(())
}

/// `accept_prepared`: receives posted on the new QP in `prepare` (before the accept reaches the
/// requester, which is not RTS yet) are in place when the requester sees Established, so it can
/// send at once with RNR retry 0 on both sides.
pub fn recv_posted_before_accept<E: Env>(env: &mut E) -> CheckResult {
    let (addr, mut l) = listen_fresh(env, 4)?;
    let no_rnr = QpOptions {
        rnr_retry_count: 0,
        ..QpOptions::default()
    };
    let c_pd = env.client().alloc_pd().map_err(e2s)?;
    let mut c_cq = env.client().create_cq(64).map_err(e2s)?;
    let sb = Buf::<E::P>::new(&c_pd, 64, LW)?;
    sb.fill(5);
    let mut c_qp = env
        .client()
        .connect(
            addr,
            QpInit {
                pd: &c_pd,
                send_cq: &c_cq,
                recv_cq: &c_cq,
                srq: None,
                opts: no_rnr,
            },
            &[],
        )
        .map_err(e2s)?;
    let req = wait_until(env, "a connect request", |_| l.poll().map_err(e2s))?;
    let s_pd = env.server().alloc_pd().map_err(e2s)?;
    let mut s_cq = env.server().create_cq(64).map_err(e2s)?;
    let rb = Buf::<E::P>::new(&s_pd, 256, LW)?;
    let mut requester_was_rts = false;
    let mut prepared = 0;
    let mut s_qp = req
        .accept_prepared(
            QpInit {
                pd: &s_pd,
                send_cq: &s_cq,
                recv_cq: &s_cq,
                srq: None,
                opts: no_rnr,
            },
            &[],
            &mut |qp| {
                prepared += 1;
                requester_was_rts |= c_qp.state() == QpState::Rts;
                qp.queue_recv(&RecvWr {
                    wr_id: 77,
                    sgl: &[rb.sge(0, 256)],
                })?;
                qp.flush_recv()
            },
        )
        .map_err(e2s)?;
    ensure!(prepared == 1, "prepare ran {prepared} times");
    ensure!(!requester_was_rts, "requester was RTS before the accept");
    let ev = wait_event_kind(env, &mut c_qp, CmEventKind::Established)?;
    ensure!(
        ev.kind == CmEventKind::Established,
        "client got {:?}",
        ev.kind
    );
    // Send at once: the receive posted in `prepare` must be there (RNR retry is 0).
    post_send::<E::P>(&mut c_qp, SendWr::send(1, &[sb.sge(0, 64)]))?;
    let wc = wait_wc(env, &mut c_cq)?;
    expect_wc(&wc, 1, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    let rc = wait_wc(env, &mut s_cq)?;
    expect_wc(&rc, 77, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(rc.byte_len == 64, "receive byte_len {}", rc.byte_len);
    ensure!(rb.read(0, 64) == sb.read(0, 64), "received data differs");
    let _ = wait_event_kind(env, &mut s_qp, CmEventKind::Established);
    Ok(())
}
