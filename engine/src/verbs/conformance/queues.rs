//! Checks of queue limits: send and receive depths are enforced (unsignaled WRs hold their
//! slots until a signaled one completes), a CQ overrun is reported, one doorbell per batch, and
//! an SRQ feeds two QPs.
//!
//! Normal operation: each check sizes its queues small and fills them. Recovery: a full queue is
//! `ENOMEM` with nothing posted; an overrun CQ fails every later poll.

use super::*;

/// Posting beyond the send or receive queue depth fails with ENOMEM; too many SGEs with
/// EINVAL.
pub fn queue_depth_enforced<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 2,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [b.sge(0, 8)];
    for i in 0..4 {
        p.c.qp
            .queue_recv(&RecvWr {
                wr_id: i,
                sgl: &sgl,
            })
            .map_err(e2s)?;
    }
    let e = p.c.qp.queue_recv(&RecvWr {
        wr_id: 9,
        sgl: &sgl,
    });
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: crate::verbs::errno::ENOMEM,
                ..
            })
        ),
        "5th receive on a depth-4 queue: {e:?}"
    );
    for i in 0..4 {
        p.c.qp.queue_send(&SendWr::send(i, &sgl)).map_err(e2s)?;
    }
    let e = p.c.qp.queue_send(&SendWr::send(9, &sgl));
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: crate::verbs::errno::ENOMEM,
                ..
            })
        ),
        "5th send on a depth-4 queue: {e:?}"
    );
    let three = [b.sge(0, 8), b.sge(8, 8), b.sge(16, 8)];
    let mut q = connect_opts(env, o)?;
    let e = q.c.qp.queue_send(&SendWr::send(1, &three));
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: crate::verbs::errno::EINVAL,
                ..
            })
        ),
        "3 SGEs with max_send_sge 2: {e:?}"
    );
    Ok(())
}

/// Unsignaled WRs keep their send-queue slots until a later signaled WR completes: a queue
/// of only unsignaled WRs fills up.
pub fn unsignaled_hold_send_slots<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            max_send_wr: 4,
            ..QpOptions::default()
        },
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let sgl = [b.sge(0, 8)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    for i in 0..4 {
        let x = SendWr {
            flags: SendFlags::NONE,
            ..wr::<E::P>(i, w, &sgl)
        };
        p.c.qp.queue_send(&x).map_err(e2s)?;
    }
    p.c.qp.flush_send().map_err(e2s)?;
    let _ = settle(env, &mut p.c.cq)?;
    let e = p.c.qp.queue_send(&wr::<E::P>(9, w, &sgl));
    ensure!(
        matches!(
            e,
            Err(VerbsError {
                errno: crate::verbs::errno::ENOMEM,
                ..
            })
        ),
        "send queue of 4 unsignaled WRs accepted a 5th: {e:?}"
    );
    let mut q = connect_opts(env, o)?;
    let qb = Buf::<E::P>::new(&q.c.pd, 4096, LW)?;
    let qt = Buf::<E::P>::new(&q.s.pd, 4096, RW)?;
    let qsgl = [qb.sge(0, 8)];
    let qw: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: qt.addr(),
        rkey: qt.keys().rkey,
    };
    for i in 0..3 {
        let x = SendWr {
            flags: SendFlags::NONE,
            ..wr::<E::P>(i, qw, &qsgl)
        };
        q.c.qp.queue_send(&x).map_err(e2s)?;
    }
    q.c.qp.queue_send(&wr::<E::P>(3, qw, &qsgl)).map_err(e2s)?;
    q.c.qp.flush_send().map_err(e2s)?;
    expect_wc(&wait_wc(env, &mut q.c.cq)?, 3, WcStatus::SUCCESS, None)?;
    for i in 10..14 {
        q.c.qp
            .queue_send(&wr::<E::P>(i, qw, &qsgl))
            .map_err(|e| format!("slot not freed by the signaled completion: {e}"))?;
    }
    Ok(())
}

/// More completions than the CQ holds: the CQ overruns (poll fails) and its QPs go to ERROR.
pub fn cq_overflow<E: Env>(env: &mut E) -> CheckResult {
    let o = PairOpts {
        c: QpOptions {
            max_send_wr: 32,
            ..QpOptions::default()
        },
        c_cq: 4,
        ..PairOpts::default()
    };
    let mut p = connect_opts(env, o)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let sgl = [b.sge(0, 8)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    for i in 0..32 {
        p.c.qp.queue_send(&wr::<E::P>(i, w, &sgl)).map_err(e2s)?;
    }
    p.c.qp.flush_send().map_err(e2s)?;
    let mut buf = [Completion::default(); 64];
    let r = wait_until(env, "the CQ to report an overrun", |env| {
        let r = p.c.cq.poll(&mut buf);
        if r.is_err() {
            return Ok(Some(r));
        }
        env.idle();
        Ok(None)
    })?;
    ensure!(r.is_err(), "poll after overrun: {r:?}");
    wait_until(env, "the QP to enter ERROR", |_| {
        Ok((p.c.qp.state() == QpState::Error).then_some(()))
    })?;
    Ok(())
}

/// One doorbell per non-empty flush, none for an empty one.
pub fn doorbell_per_batch<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let b = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let sgl = [b.sge(0, 8)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: tb.keys().rkey,
    };
    let d0 = p.c.qp.doorbells();
    for i in 0..5 {
        p.c.qp.queue_send(&wr::<E::P>(i, w, &sgl)).map_err(e2s)?;
    }
    p.c.qp.flush_send().map_err(e2s)?;
    ensure!(
        p.c.qp.doorbells() == d0 + 1,
        "5 WRs took {} doorbells",
        p.c.qp.doorbells() - d0
    );
    p.c.qp.flush_send().map_err(e2s)?;
    p.c.qp.flush_recv().map_err(e2s)?;
    ensure!(
        p.c.qp.doorbells() == d0 + 1,
        "an empty flush rang the doorbell"
    );
    for i in 0..3 {
        p.c.qp
            .queue_recv(&RecvWr {
                wr_id: i,
                sgl: &sgl,
            })
            .map_err(e2s)?;
    }
    p.c.qp.flush_recv().map_err(e2s)?;
    ensure!(
        p.c.qp.doorbells() == d0 + 2,
        "3 receives took {} doorbells",
        p.c.qp.doorbells() - d0 - 1
    );
    let wcs = wait_wcs(env, &mut p.c.cq, 5)?;
    ensure!(
        wcs.iter().all(|w| w.status.is_success()),
        "batch failed: {wcs:?}"
    );
    Ok(())
}

/// A shared receive queue serves two connections.
pub fn srq_shared_by_two_qps<E: Env>(env: &mut E) -> CheckResult {
    let spd = Arc::new(env.server().alloc_pd().map_err(e2s)?);
    let mut srq = env.server().create_srq(&spd, 16, 1).map_err(e2s)?;
    let rb = Buf::<E::P>::new(&spd, 4096, LW)?;
    for i in 0..4u64 {
        srq.queue_recv(&RecvWr {
            wr_id: 50 + i,
            sgl: &[rb.sge(i as usize * 1024, 1024)],
        })
        .map_err(e2s)?;
    }
    srq.flush_recv().map_err(e2s)?;
    ensure!(srq.doorbells() == 1, "SRQ doorbells {}", srq.doorbells());
    let mut a = connect_with(env, PairOpts::default(), Some(spd.clone()), Some(&srq))?.pair;
    let mut b = connect_with(env, PairOpts::default(), Some(spd.clone()), Some(&srq))?.pair;
    let e = a.s.qp.queue_recv(&RecvWr { wr_id: 1, sgl: &[] });
    ensure!(
        e.is_err(),
        "posting a receive to a QP with an SRQ succeeded"
    );
    for (i, side) in [&mut a, &mut b].into_iter().enumerate() {
        let sb = Buf::<E::P>::new(&side.c.pd, 64, LW)?;
        sb.fill(20 + i as u8);
        post_send::<E::P>(&mut side.c.qp, SendWr::send(i as u64, &[sb.sge(0, 64)]))?;
        expect_wc(
            &wait_wc(env, &mut side.c.cq)?,
            i as u64,
            WcStatus::SUCCESS,
            None,
        )?;
        let rc = wait_wc(env, &mut side.s.cq)?;
        ensure!(rc.status.is_success(), "SRQ receive failed: {rc:?}");
        ensure!(
            rc.qp_num == side.s.qp.qp_num(),
            "SRQ receive reported qp {}",
            rc.qp_num
        );
        let slot = (rc.wr_id - 50) as usize;
        ensure!(
            rb.read(slot * 1024, 64) == expected(20 + i as u8, 0, 64),
            "SRQ data differs"
        );
    }
    Ok(())
}
