//! Checks of RDMA Write and RDMA Read: in bounds the data lands; out of bounds, with a wrong
//! rkey, missing rights, another PD or after deregistration the access is refused (on iWARP by
//! terminating the connection); read depths are negotiated as rdma_cm does.
//!
//! Normal operation: each check connects its own pair. Recovery: a refused access ends the
//! connection; the check verifies both sides went down and the target is untouched.

use super::*;

/// RDMA Write inside a region with REMOTE_WRITE lands exactly there.
pub fn rdma_write_in_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, RW)?;
    sb.fill(4);
    let sgl = [sb.sge(10, 1000)];
    let op: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr() + 100,
        rkey: tb.keys().rkey,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(3, op, &sgl))?;
    expect_wc(
        &wait_wc(env, &mut p.c.cq)?,
        3,
        WcStatus::SUCCESS,
        Some(WcOpcode::RDMA_WRITE),
    )?;
    ensure!(
        settle(env, &mut p.s.cq)?.is_empty(),
        "RDMA Write consumed a receive"
    );
    wait_placed(env, &mut p)?;
    ensure!(
        tb.read(100, 1000) == expected(4, 10, 1000),
        "written data differs"
    );
    ensure!(
        tb.read(0, 100) == vec![0; 100],
        "bytes before the target changed"
    );
    ensure!(
        tb.read(1100, 100) == vec![0; 100],
        "bytes after the target changed"
    );
    Ok(())
}

pub(super) fn write_expect_access_error<E: Env>(
    env: &mut E,
    p: &mut Pair<E::P>,
    remote_addr: u64,
    rkey: u32,
    len: usize,
) -> CheckResult {
    let sb = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    let sgl = [sb.sge(0, len)];
    post_send::<E::P>(
        &mut p.c.qp,
        wr::<E::P>(3, SendOp::RdmaWrite { remote_addr, rkey }, &sgl),
    )?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    let prof = profile(env);
    if prof.iwarp() {
        // docs/rdma-provider.md 2.4: the Write completes once handed to the transport; the
        // responder's access error terminates the connection.
        expect_status_in(&wc, 3, iwarp_remote_error_statuses(prof))?;
        env.note(&format!(
            "iWARP: the Write completed {}; the responder terminates the connection",
            wc.status.name()
        ));
        return expect_terminated(env, p);
    }
    expect_wc(&wc, 3, WcStatus::REM_ACCESS_ERR, None)?;
    expect_both_down(env, p)
}

/// Posts an RDMA Read and checks its status is one of `allowed`; returns the status. Unless it
/// succeeded (a documented device quirk), the requester's QP must be in ERROR.
#[allow(clippy::too_many_arguments)]
fn read_expect_status<E: Env>(
    env: &mut E,
    p: &mut Pair<E::P>,
    remote_addr: u64,
    rkey: u32,
    len: usize,
    sink_access: Access,
    allowed: &[WcStatus],
) -> Result<WcStatus, String> {
    let db = Buf::<E::P>::new(&p.c.pd, 8192, sink_access)?;
    let sgl = [db.sge(0, len)];
    post_send::<E::P>(
        &mut p.c.qp,
        wr::<E::P>(4, SendOp::RdmaRead { remote_addr, rkey }, &sgl),
    )?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    expect_status_in(&wc, 4, allowed)?;
    if allowed.len() > 1 {
        env.note(&format!("the Read completed {}", wc.status.name()));
    }
    if wc.status.is_success() {
        return Ok(wc.status);
    }
    ensure!(
        p.c.qp.state() == QpState::Error,
        "client QP state {:?} after an error completion",
        p.c.qp.state()
    );
    Ok(wc.status)
}

/// The requester's status for an RDMA Read the responder must refuse (bad rkey, out of
/// bounds): `REM_ACCESS_ERR`, except on iWARP.
fn read_refused_statuses(prof: Profile) -> &'static [WcStatus] {
    match prof {
        Profile::Soft | Profile::Rxe | Profile::Ib => &[WcStatus::REM_ACCESS_ERR],
        // docs/rdma-provider.md 2.4: siw terminates the connection instead of answering, so the
        // Read is flushed (a later kernel answering REM_ACCESS_ERR is accepted too).
        Profile::Siw => &[WcStatus::WR_FLUSH_ERR, WcStatus::REM_ACCESS_ERR],
        // docs/rdma-provider.md 2.4: iWARP reports the error or terminates.
        Profile::Iwarp => &[
            WcStatus::REM_ACCESS_ERR,
            WcStatus::REM_OP_ERR,
            WcStatus::WR_FLUSH_ERR,
        ],
    }
}

/// RDMA Write crossing the end of the target region: REM_ACCESS_ERR, both QPs down.
pub fn rdma_write_out_of_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr() + 4096 - 10, tb.keys().rkey);
    write_expect_access_error(env, &mut p, a, k, 100)?;
    ensure!(
        tb.read(4086, 10) == vec![0; 10],
        "out-of-bounds write modified the region"
    );
    Ok(())
}

/// RDMA Write with an rkey nobody registered: REM_ACCESS_ERR.
pub fn rdma_write_wrong_rkey<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let k = tb.keys().rkey.wrapping_add(0x3300);
    write_expect_access_error(env, &mut p, tb.addr(), k, 64)
}

/// RDMA Write into a region registered without REMOTE_WRITE: REM_ACCESS_ERR.
pub fn rdma_write_missing_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    write_expect_access_error(env, &mut p, a, k, 64)?;
    ensure!(
        tb.read(0, 64) == vec![0; 64],
        "write without access modified the region"
    );
    Ok(())
}

/// RDMA Write with the rkey of a region in another PD than the target QP's: REM_ACCESS_ERR.
pub fn rdma_write_wrong_pd<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let other = env.server().alloc_pd().map_err(e2s)?;
    let tb = Buf::<E::P>::new(&other, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    write_expect_access_error(env, &mut p, a, k, 64)
}

/// RDMA Write with the rkey of a region deregistered meanwhile: REM_ACCESS_ERR.
pub fn rdma_write_after_dereg<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let mut tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    tb.dereg();
    write_expect_access_error(env, &mut p, a, k, 64)?;
    ensure!(
        tb.read(0, 64) == vec![0; 64],
        "write after dereg modified memory"
    );
    Ok(())
}

/// RDMA Read inside a region with REMOTE_READ returns its bytes, scattered over two sink SGEs
/// where the device allows (`max_sge_rd` >= 2). A device with `max_sge_rd` 1 (siw) refuses a
/// two-SGE Read with `EINVAL` (docs/rdma-provider.md 2.4) and reads into one SGE.
pub fn rdma_read_in_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, RW)?;
    let db = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    tb.fill(5);
    let two = [db.sge(0, 300), db.sge(4000, 212)];
    let one = [db.sge(0, 512)];
    let op: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: tb.addr() + 1000,
        rkey: tb.keys().rkey,
    };
    let sgl: &[Sge] = if env.client().caps().max_sge_rd >= 2 {
        &two
    } else {
        let e = p.c.qp.queue_send(&wr::<E::P>(4, op, &two));
        ensure!(
            matches!(
                e,
                Err(VerbsError {
                    errno: crate::verbs::errno::EINVAL,
                    ..
                })
            ),
            "a Read into 2 SGEs with max_sge_rd 1: {e:?}"
        );
        &one
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(4, op, sgl))?;
    let wc = wait_wc(env, &mut p.c.cq)?;
    expect_wc(&wc, 4, WcStatus::SUCCESS, Some(WcOpcode::RDMA_READ))?;
    ensure!(
        wc.byte_len == 512,
        "RDMA Read byte_len {}, expected 512",
        wc.byte_len
    );
    let mut got = db.read(0, sgl[0].len as usize);
    if sgl.len() == 2 {
        got.extend(db.read(4000, 212));
        ensure!(
            db.read(300, 16) == vec![0; 16],
            "bytes after the first sink SGE were written"
        );
    }
    ensure!(got == expected(5, 1000, 512), "read data differs");
    Ok(())
}

/// Read depths as a Linux NFS/RDMA client sets them (xprtrdma: `initiator_depth` 0, it never
/// reads; `responder_resources` its device's maximum): the passive side may still issue RDMA
/// Reads towards it (what a server does to pull Read chunks), and its negotiated initiator
/// depth is the requester's responder resources, not the requester's initiator depth.
pub fn rdma_read_depths_of_a_linux_requester<E: Env>(env: &mut E) -> CheckResult {
    let c = QpOptions {
        initiator_depth: 0,
        responder_resources: 8,
        ..QpOptions::default()
    };
    let s = QpOptions {
        initiator_depth: 16,
        responder_resources: 16,
        ..QpOptions::default()
    };
    let mut p = connect_opts(
        env,
        PairOpts {
            c,
            s,
            ..PairOpts::default()
        },
    )?;
    let so = p.s.qp.options();
    ensure!(
        so.initiator_depth >= 1 && so.initiator_depth <= 8,
        "server initiator depth {} (requester serves 8 reads)",
        so.initiator_depth
    );
    ensure!(
        so.responder_resources == 0,
        "server responder resources {} (requester issues none)",
        so.responder_resources
    );
    let tb = Buf::<E::P>::new(&p.c.pd, 4096, RW)?;
    let db = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    tb.fill(9);
    let op: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: tb.addr() + 100,
        rkey: tb.keys().rkey,
    };
    post_send::<E::P>(&mut p.s.qp, wr::<E::P>(7, op, &[db.sge(0, 1000)]))?;
    let wc = wait_wc(env, &mut p.s.cq)?;
    expect_wc(&wc, 7, WcStatus::SUCCESS, Some(WcOpcode::RDMA_READ))?;
    ensure!(
        db.read(0, 1000) == expected(9, 100, 1000),
        "read data differs"
    );
    Ok(())
}

/// RDMA Read crossing the end of the source region: REM_ACCESS_ERR.
pub fn rdma_read_out_of_bounds<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr() + 4000, tb.keys().rkey);
    let allowed = read_refused_statuses(profile(env));
    read_expect_status(env, &mut p, a, k, 200, LW, allowed)?;
    expect_both_down(env, &mut p)
}

/// RDMA Read from a region without REMOTE_READ: REM_ACCESS_ERR.
pub fn rdma_read_missing_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    tb.fill(12);
    let (a, k) = (tb.addr(), tb.keys().rkey);
    let prof = profile(env);
    let allowed: &[WcStatus] = match prof {
        // docs/rdma-provider.md 2.4: siw does not check the source region's REMOTE_READ right:
        // the Read succeeds (device bug; upper layers never rely on a missing REMOTE_READ for
        // protection). A refusal (fixed kernel) is accepted too.
        Profile::Siw => &[
            WcStatus::SUCCESS,
            WcStatus::WR_FLUSH_ERR,
            WcStatus::REM_ACCESS_ERR,
        ],
        _ => read_refused_statuses(prof),
    };
    if read_expect_status(env, &mut p, a, k, 64, LW, allowed)?.is_success() {
        ensure!(
            p.c.qp.state() == QpState::Rts,
            "QP state {:?} after the unchecked Read",
            p.c.qp.state()
        );
        return Ok(());
    }
    expect_both_down(env, &mut p)
}

/// RDMA Read with an invalid rkey: REM_ACCESS_ERR.
pub fn rdma_read_wrong_rkey<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey ^ 0x01);
    let allowed = read_refused_statuses(profile(env));
    read_expect_status(env, &mut p, a, k, 64, LW, allowed)?;
    expect_both_down(env, &mut p)
}

/// RDMA Read into a local sink registered without LOCAL_WRITE: LOC_PROT_ERR.
pub fn rdma_read_sink_needs_local_write<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, RW)?;
    let (a, k) = (tb.addr(), tb.keys().rkey);
    let allowed = [WcStatus::LOC_PROT_ERR];
    read_expect_status(env, &mut p, a, k, 64, Access::NONE, &allowed)?;
    Ok(())
}
