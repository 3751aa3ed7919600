//! Checks of RNR, flush on error and ordering: RNR retry counts are the receiver's, an error
//! flushes both sides, a disconnect flushes both, RC ordering and fences hold, unsignaled
//! sends complete silently.
//!
//! Normal operation: each check connects its own pair. Recovery: the checks provoke the error
//! path on purpose and verify its outcome (statuses, `Disconnected`, `WR_FLUSH_ERR`).

use super::*;

/// With the receiver's rnr_retry_count 0, a SEND that finds no receive fails with
/// RNR_RETRY_EXC_ERR. On iWARP (no RNR) the receiver terminates the connection instead.
pub fn rnr_retry_zero<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        // The sender's own count must not matter: the receiver's (0) governs.
        c: QpOptions {
            rnr_retry_count: RNR_RETRY_INFINITE,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 32)]))?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    let prof = profile(env);
    if prof.iwarp() {
        // docs/rdma-provider.md 2.4: no RNR on iWARP; the SEND completes once handed to the
        // transport and the receiver, having no receive, terminates the connection.
        expect_status_in(&wc, 1, iwarp_remote_error_statuses(prof))?;
        env.note(&format!(
            "iWARP: the SEND completed {}; the receiver terminates the connection",
            wc.status.name()
        ));
        return expect_terminated(env, &mut p);
    }
    expect_wc(&wc, 1, WcStatus::RNR_RETRY_EXC_ERR, None)?;
    expect_both_down(env, &mut p)
}

/// With the receiver's rnr_retry_count infinite, a SEND waits for the receive and then
/// completes; later WRs wait behind it. The count is the receiver's (rdma_cm carries it to the
/// peer in the REQ / REP): the sender's own is 0 here.
pub fn rnr_retry_waits_for_recv<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        s: QpOptions {
            rnr_retry_count: RNR_RETRY_INFINITE,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    sb.fill(9);
    let sgl = [sb.sge(0, 32)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: rb.addr() + 1024,
        rkey: rb.keys().rkey,
    };
    p.c.qp.queue_send(&SendWr::send(1, &sgl)).map_err(e2s)?;
    p.c.qp.queue_send(&wr::<E::P>(2, w, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    let early = settle(env, &mut p.c.cq)?;
    ensure!(
        early.is_empty(),
        "completions before any receive was posted: {early:?}"
    );
    ensure!(
        rb.read(1024, 32) == vec![0; 32],
        "a WR behind the RNR-blocked SEND executed"
    );
    post_recv::<E::P>(&mut p.s.qp, 3, &[rb.sge(0, 1024)])?;
    let wcs = wait_wcs(env, &mut p.c.cq, 2)?;
    expect_wc(&wcs[0], 1, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    expect_wc(&wcs[1], 2, WcStatus::SUCCESS, Some(WcOpcode::RDMA_WRITE))?;
    expect_wc(
        &wait_wc(env, &mut p.s.cq)?,
        3,
        WcStatus::SUCCESS,
        Some(WcOpcode::RECV),
    )?;
    ensure!(
        rb.read(0, 32) == expected(9, 0, 32),
        "received data differs"
    );
    Ok(())
}

/// With the receiver's finite RNR retry count and no receive ever posted, the SEND eventually
/// fails with RNR_RETRY_EXC_ERR (the sender's own count, infinite here, does not matter).
pub fn rnr_retry_exhausted<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            rnr_retry_count: RNR_RETRY_INFINITE,
            ..QpOptions::default()
        },
        s: QpOptions {
            rnr_retry_count: 2,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 32)]))?;
    expect_wc(
        &wait_wc(env, &mut p.c.cq)?,
        1,
        WcStatus::RNR_RETRY_EXC_ERR,
        None,
    )?;
    expect_both_down(env, &mut p)
}

/// An error flushes everything outstanding on both sides with WR_FLUSH_ERR (sends after the
/// failed one, receives on both QPs) and WRs posted later flush too.
pub fn flush_on_error_both_sides<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let cb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sbuf = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    for i in 0..4u64 {
        p.s.qp
            .queue_recv(&RecvWr {
                wr_id: 100 + i,
                sgl: &[sbuf.sge(i as usize * 1024, 1024)],
            })
            .map_err(e2s)?;
        p.c.qp
            .queue_recv(&RecvWr {
                wr_id: 200 + i,
                sgl: &[cb.sge(i as usize * 1024, 1024)],
            })
            .map_err(e2s)?;
    }
    p.s.qp.flush_recv().map_err(e2s)?;
    p.c.qp.flush_recv().map_err(e2s)?;
    let sgl = [cb.sge(0, 16)];
    let bad: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: sbuf.addr(),
        rkey: sbuf.keys().rkey ^ 0x7700,
    };
    p.c.qp.queue_send(&wr::<E::P>(1, bad, &sgl)).map_err(e2s)?;
    p.c.qp.queue_send(&SendWr::send(2, &sgl)).map_err(e2s)?;
    p.c.qp.queue_send(&SendWr::send(3, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    let prof = profile(env);
    if prof.iwarp() {
        // docs/rdma-provider.md 2.4: the bad Write and the SENDs behind it may all complete
        // (handed to TCP) before the responder's termination arrives; whatever had not
        // completed flushes. The responder took nothing after the bad Write: its receives
        // flush, as do the requester's.
        let mut c_wcs = wait_wcs(env, &mut p.c.cq, 7)?;
        c_wcs.sort_by_key(|w| w.wr_id);
        let c_ids: Vec<u64> = c_wcs.iter().map(|w| w.wr_id).collect();
        ensure!(
            c_ids == [1, 2, 3, 200, 201, 202, 203],
            "client completed {c_ids:?}"
        );
        expect_status_in(&c_wcs[0], 1, iwarp_remote_error_statuses(prof))?;
        for w in &c_wcs[1..3] {
            expect_status_in(w, w.wr_id, iwarp_remote_error_statuses(prof))?;
        }
        for w in &c_wcs[3..] {
            expect_wc(w, w.wr_id, WcStatus::WR_FLUSH_ERR, None)?;
        }
        wait_event_kind(env, &mut p.c.qp, CmEventKind::Disconnected)?;
        wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    } else {
        let first = wait_wc(env, &mut p.c.cq)?;
        expect_wc(&first, 1, WcStatus::REM_ACCESS_ERR, None)?;
        expect_both_down(env, &mut p)?;
        let mut c_wcs = wait_wcs(env, &mut p.c.cq, 6)?;
        c_wcs.sort_by_key(|w| w.wr_id);
        let c_ids: Vec<u64> = c_wcs.iter().map(|w| w.wr_id).collect();
        ensure!(
            c_ids == [2, 3, 200, 201, 202, 203],
            "client flushed {c_ids:?}"
        );
        for w in &c_wcs {
            ensure!(
                w.status == WcStatus::WR_FLUSH_ERR,
                "client wr {} status {}",
                w.wr_id,
                w.status.name()
            );
        }
    }
    let s_wcs = wait_wcs(env, &mut p.s.cq, 4)?;
    for (i, w) in s_wcs.iter().enumerate() {
        expect_wc(w, 100 + i as u64, WcStatus::WR_FLUSH_ERR, None)?;
    }
    // Posting in ERROR is accepted and flushes (siw: never completes, see
    // expect_posted_in_error).
    p.c.qp.queue_send(&SendWr::send(4, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_posted_in_error(env, &mut p.c.cq, 4).map_err(|e| format!("send in ERROR: {e}"))?;
    post_recv::<E::P>(&mut p.s.qp, 105, &[sbuf.sge(0, 16)])?;
    expect_posted_in_error(env, &mut p.s.cq, 105).map_err(|e| format!("receive in ERROR: {e}"))
}

/// `disconnect` flushes both sides' receives and reports `Disconnected` on both.
pub fn disconnect_flushes_both<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let cb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    post_recv::<E::P>(&mut p.c.qp, 1, &[cb.sge(0, 64)])?;
    post_recv::<E::P>(&mut p.s.qp, 2, &[sb.sge(0, 64)])?;
    p.c.qp.disconnect().map_err(e2s)?;
    wait_event_kind(env, &mut p.c.qp, CmEventKind::Disconnected)?;
    wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::WR_FLUSH_ERR, None)?;
    expect_wc(&wait_wc(env, &mut p.s.cq)?, 2, WcStatus::WR_FLUSH_ERR, None)?;
    ensure!(
        p.c.qp.state() == QpState::Error && p.s.qp.state() == QpState::Error,
        "states after disconnect: {:?} / {:?}",
        p.c.qp.state(),
        p.s.qp.state()
    );
    Ok(())
}

/// RC ordering: a SEND posted after an RDMA Write is delivered after the written data is in
/// place.
pub fn ordering_write_then_send<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let len = 256 * 1024;
    let sb = Buf::<E::P>::new(&p.c.pd, len, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, len, RW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 64, LW)?;
    sb.fill(10);
    post_recv::<E::P>(&mut p.s.qp, 9, &[rb.sge(0, 64)])?;
    let sgl = [sb.sge(0, len)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    let unsignaled = SendWr {
        flags: SendFlags::NONE,
        ..wr::<E::P>(1, w, &sgl)
    };
    let hdr = [sb.sge(0, 8)];
    p.c.qp.queue_send(&unsignaled).map_err(e2s)?;
    p.c.qp.queue_send(&SendWr::send(2, &hdr)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_wc(
        &wait_wc(env, &mut p.s.cq)?,
        9,
        WcStatus::SUCCESS,
        Some(WcOpcode::RECV),
    )?;
    ensure!(
        tb.read(0, len) == expected(10, 0, len),
        "written data not in place at receive"
    );
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 2, WcStatus::SUCCESS, None)?;
    Ok(())
}

/// Fence: a SEND fenced behind an RDMA Read carries the data the Read brought in.
pub fn fence_read_then_send<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let src = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    let mid = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    src.fill(11);
    post_recv::<E::P>(&mut p.s.qp, 8, &[rb.sge(0, 4096)])?;
    let dst = [mid.sge(0, 512)];
    let r: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: src.addr() + 512,
        rkey: src.keys().rkey,
    };
    p.c.qp
        .queue_send(&SendWr {
            flags: SendFlags::NONE,
            ..wr::<E::P>(1, r, &dst)
        })
        .map_err(e2s)?;
    p.c.qp
        .queue_send(&SendWr::send(2, &dst).with_flags(SendFlags::SIGNALED | SendFlags::FENCE))
        .map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 2, WcStatus::SUCCESS, None)?;
    let rc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&rc, 8, WcStatus::SUCCESS, None)?;
    ensure!(
        rb.read(0, 512) == expected(11, 512, 512),
        "fenced SEND did not carry the read data"
    );
    Ok(())
}

/// Unsignaled WRs complete silently; only signaled ones produce completions.
pub fn unsignaled_is_silent<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    for i in 0..4u64 {
        p.s.qp
            .queue_recv(&RecvWr {
                wr_id: 10 + i,
                sgl: &[rb.sge(i as usize * 64, 64)],
            })
            .map_err(e2s)?;
    }
    p.s.qp.flush_recv().map_err(e2s)?;
    let sgl = [sb.sge(0, 16)];
    for i in 0..3u64 {
        let w = SendWr::send(i, &sgl).with_flags(SendFlags::NONE);
        p.c.qp.queue_send(&w).map_err(e2s)?;
    }
    p.c.qp.queue_send(&SendWr::send(3, &sgl)).map_err(e2s)?;
    p.c.qp.flush_send().map_err(e2s)?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 3, WcStatus::SUCCESS, None)?;
    let extra = settle(env, &mut p.c.cq)?;
    ensure!(extra.is_empty(), "unsignaled WRs completed: {extra:?}");
    let r = wait_wcs(env, &mut p.s.cq, 4)?;
    ensure!(
        r.iter().map(|w| w.wr_id).collect::<Vec<_>>() == [10, 11, 12, 13],
        "receives completed out of order: {r:?}"
    );
    Ok(())
}
