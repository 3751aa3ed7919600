//! Checks of SEND and receive: data and lengths arrive, several SGEs gather and scatter, and
//! a receive the receiver cannot take (too small, wrong PD, bad lkey) fails as the profile
//! expects.
//!
//! Normal operation: each check connects its own pair and tears it down. Recovery: error checks
//! end as a ULP would (disconnect, then both sides down and flushed).

use super::*;

/// SEND of one SGE into a posted receive: both complete, the data and length arrive.
pub fn send_recv_basic<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    sb.fill(1);
    post_recv::<E::P>(&mut p.s.qp, 7, &[rb.sge(0, 4096)])?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 100)]))?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    expect_wc(&wc, 1, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    ensure!(
        wc.qp_num == p.c.qp.qp_num(),
        "send completion qp_num {}",
        wc.qp_num
    );
    let rc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&rc, 7, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(
        rc.byte_len == 100,
        "receive byte_len {}, expected 100",
        rc.byte_len
    );
    ensure!(rc.qp_num == p.s.qp.qp_num(), "receive qp_num {}", rc.qp_num);
    ensure!(
        !rc.flags.contains(WcFlags::WITH_INV),
        "WITH_INV set on a plain SEND"
    );
    ensure!(
        rb.read(0, 100) == expected(1, 0, 100),
        "received data differs"
    );
    ensure!(
        rb.read(100, 16) == vec![0; 16],
        "bytes beyond the message were written"
    );
    Ok(())
}

/// Multi-SGE gather (3 pieces) into multi-SGE scatter (2 pieces), in order.
pub fn send_recv_multi_sge<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    sb.fill(3);
    post_recv::<E::P>(&mut p.s.qp, 9, &[rb.sge(0, 50), rb.sge(1000, 200)])?;
    let g = [sb.sge(0, 10), sb.sge(100, 30), sb.sge(2000, 60)];
    post_send::<E::P>(&mut p.c.qp, SendWr::send(2, &g))?;
    expect_wc(
        &wait_wc(env, &mut p.c.cq)?,
        2,
        WcStatus::SUCCESS,
        Some(WcOpcode::SEND),
    )?;
    let rc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&rc, 9, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(rc.byte_len == 100, "byte_len {}, expected 100", rc.byte_len);
    let mut msg = expected(3, 0, 10);
    msg.extend(expected(3, 100, 30));
    msg.extend(expected(3, 2000, 60));
    let mut got = rb.read(0, 50);
    got.extend(rb.read(1000, 50));
    ensure!(got == msg, "scattered data differs");
    ensure!(
        rb.read(1050, 4) == vec![0; 4],
        "wrote past the message in the second SGE"
    );
    Ok(())
}

/// The statuses of a SEND the receiver cannot take (the requester's and the receive's), per
/// profile, for [`recv_too_small`] and [`recv_wrong_pd`].
struct RecvErr {
    sender: &'static [WcStatus],
    receiver: &'static [WcStatus],
}

/// After a SEND the receiver could not take: on IB both QPs are in ERROR after the requester's
/// error completion (the ULP disconnects); on iWARP the receiver terminates the connection.
fn recv_error_check<E: Env>(
    env: &mut E,
    mut p: Pair<E::P>,
    rb: &Buf<E::P>,
    recv_len: usize,
    exp: RecvErr,
) -> CheckResult {
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_recv::<E::P>(&mut p.s.qp, 5, &[rb.sge(0, recv_len)])?;
    post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sb.sge(0, 100)]))?;
    let wc = wait_wc(env, &mut p.c.cq).map_err(|e| format!("sender: {e}"))?;
    expect_status_in(&wc, 1, exp.sender).map_err(|e| format!("sender: {e}"))?;
    let rc = wait_wc(env, &mut p.s.cq).map_err(|e| format!("receiver: {e}"))?;
    expect_status_in(&rc, 5, exp.receiver).map_err(|e| format!("receiver: {e}"))?;
    if profile(env) != Profile::Soft {
        env.note(&format!(
            "sender {}, receiver {}",
            wc.status.name(),
            rc.status.name()
        ));
    }
    if profile(env).iwarp() {
        return expect_terminated(env, &mut p);
    }
    expect_both_down(env, &mut p)
}

/// A SEND larger than the receive buffer: the receive fails (`LOC_LEN_ERR`), the sender gets
/// `REM_INV_REQ_ERR`, both QPs go to ERROR. Device differences: docs/rdma-provider.md 2.3, 2.4.
pub fn recv_too_small<E: Env>(env: &mut E) -> CheckResult {
    let p = connect(env)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    let exp = match profile(env) {
        Profile::Soft => RecvErr {
            sender: &[WcStatus::REM_INV_REQ_ERR],
            receiver: &[WcStatus::LOC_LEN_ERR],
        },
        // docs/rdma-provider.md 2.3: rxe NAKs with "remote operational error" and fails the
        // receive with LOC_QP_OP_ERR.
        Profile::Rxe => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.3: IB devices report the receive as LOC_LEN_ERR (rdmavt:
        // LOC_QP_OP_ERR) and the sender as REM_INV_REQ_ERR (rxe: REM_OP_ERR).
        Profile::Ib => RecvErr {
            sender: &[WcStatus::REM_INV_REQ_ERR, WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.4: the SEND completes once handed to TCP; the receiver's
        // receive fails and it terminates the connection.
        Profile::Siw => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Siw),
            receiver: &[WcStatus::LOC_LEN_ERR],
        },
        // docs/rdma-provider.md 2.4: other iWARP devices may also report the remote error to
        // the sender; the receive fails and the connection is terminated.
        Profile::Iwarp => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Iwarp),
            receiver: &[WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR],
        },
    };
    recv_error_check(env, p, &rb, 16, exp)
}

/// A receive SGE whose lkey belongs to another PD: the receive fails with a local protection
/// error and the sender gets `REM_OP_ERR`. Device differences: docs/rdma-provider.md 2.3, 2.4.
pub fn recv_wrong_pd<E: Env>(env: &mut E) -> CheckResult {
    let p = connect(env)?;
    let other = env.server().alloc_pd().map_err(e2s)?;
    let rb = Buf::<E::P>::new(&other, 4096, LW)?;
    let exp = match profile(env) {
        Profile::Soft => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_PROT_ERR],
        },
        // docs/rdma-provider.md 2.3: rxe fails the receive with LOC_QP_OP_ERR.
        Profile::Rxe => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.3: IB devices report LOC_PROT_ERR (rdmavt LOC_QP_OP_ERR).
        Profile::Ib => RecvErr {
            sender: &[WcStatus::REM_OP_ERR],
            receiver: &[WcStatus::LOC_PROT_ERR, WcStatus::LOC_QP_OP_ERR],
        },
        // docs/rdma-provider.md 2.4: the SEND completes; siw fails the receive with
        // GENERAL_ERR and terminates.
        Profile::Siw => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Siw),
            receiver: &[WcStatus::GENERAL_ERR],
        },
        // docs/rdma-provider.md 2.4: other iWARP devices may also report the remote error to
        // the sender; the receive fails and the connection is terminated.
        Profile::Iwarp => RecvErr {
            sender: iwarp_remote_error_statuses(Profile::Iwarp),
            receiver: &[
                WcStatus::LOC_PROT_ERR,
                WcStatus::LOC_QP_OP_ERR,
                WcStatus::GENERAL_ERR,
            ],
        },
    };
    recv_error_check(env, p, &rb, 4096, exp)
}

/// A send SGE with a bad lkey, or outside its region: `LOC_PROT_ERR`, QP to ERROR.
pub fn send_bad_lkey<E: Env>(env: &mut E) -> CheckResult {
    let prof = profile(env);
    for case in 0..2 {
        let mut p = connect(env)?;
        let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
        let rb = Buf::<E::P>::new(&p.s.pd, 8192, LW)?;
        post_recv::<E::P>(&mut p.s.qp, 5, &[rb.sge(0, 8192)])?;
        let sge = if case == 0 {
            Sge {
                lkey: sb.keys().lkey ^ 0x5a00,
                ..sb.sge(0, 64)
            }
        } else {
            sb.sge(4000, 200)
        };
        post_send::<E::P>(&mut p.c.qp, SendWr::send(1, &[sge]))?;
        let allowed: &[WcStatus] = match (prof, case) {
            (Profile::Soft, _) => &[WcStatus::LOC_PROT_ERR],
            // docs/rdma-provider.md 2.3: rxe reports an lkey it does not know as a QP
            // operation error, an SGE beyond its region as a protection error.
            (Profile::Rxe, 0) => &[WcStatus::LOC_QP_OP_ERR],
            (Profile::Rxe, _) => &[WcStatus::LOC_PROT_ERR],
            // docs/rdma-provider.md 2.4: siw reports both as a QP operation error.
            (Profile::Siw, _) => &[WcStatus::LOC_QP_OP_ERR],
            (Profile::Ib | Profile::Iwarp, _) => &[WcStatus::LOC_PROT_ERR, WcStatus::LOC_QP_OP_ERR],
        };
        expect_status_in(&wait_wc(env, &mut p.c.cq)?, 1, allowed)
            .map_err(|e| format!("case {case}: {e}"))?;
        ensure!(
            p.c.qp.state() == QpState::Error,
            "case {case}: QP state {:?}",
            p.c.qp.state()
        );
    }
    Ok(())
}
