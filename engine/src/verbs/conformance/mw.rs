//! Checks of type-2 memory windows and invalidation: binding grants exactly the window's range
//! and rights, rebinding rotates the key, binds need `MW_BIND` and an unbound window, LOCAL_INV
//! and Send With Invalidate revoke access, and a window is usable only through its QP.
//!
//! Normal operation: the checks need type-2 windows (`Needs::MW`, Send With Invalidate where
//! used). Recovery: a failed bind or a refused access ends the connection as the profile says.

use super::*;
use crate::verbs::MwBind;

const MW_ACC: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const MR_MW: Access = Access(Access::LOCAL_WRITE.0 | Access::MW_BIND.0);

/// Binds `mw` over `[off, off + len)` of `buf` on `side`'s QP; returns the new rkey after
/// checking the BIND_MW completion.
#[allow(clippy::too_many_arguments)]
fn bind<E: Env>(
    env: &mut E,
    side: &mut Side<E::P>,
    mw: &<E::P as Provider>::Mw,
    buf: &Buf<E::P>,
    off: u64,
    len: u64,
    access: Access,
    expect: WcStatus,
) -> Result<u32, String> {
    let rkey = mw.next_rkey();
    bind_key(env, side, mw, buf, off, len, access, expect, rkey)
}

/// As [`bind`], with the new key `rkey` chosen by the caller (any consumer key byte).
#[allow(clippy::too_many_arguments)]
fn bind_key<E: Env>(
    env: &mut E,
    side: &mut Side<E::P>,
    mw: &<E::P as Provider>::Mw,
    buf: &Buf<E::P>,
    off: u64,
    len: u64,
    access: Access,
    expect: WcStatus,
    rkey: u32,
) -> Result<u32, String> {
    let op: SendOp<'_, E::P> = SendOp::BindMw(MwBind {
        mw,
        mr: buf.mr(),
        rkey,
        addr: buf.addr() + off,
        len,
        access,
    });
    post_send::<E::P>(&mut side.qp, wr::<E::P>(0xb1, op, &[]))?;
    let wc = wait_wc(env, &mut side.cq)?;
    let opcode = expect.is_success().then_some(WcOpcode::BIND_MW);
    expect_wc(&wc, 0xb1, expect, opcode)?;
    ensure!(
        mw.rkey() == rkey,
        "window key {:#x} after bind, expected {rkey:#x}",
        mw.rkey()
    );
    Ok(rkey)
}

fn local_inv<E: Env>(
    env: &mut E,
    side: &mut Side<E::P>,
    rkey: u32,
    expect: WcStatus,
) -> CheckResult {
    post_send::<E::P>(
        &mut side.qp,
        wr::<E::P>(0x1a, SendOp::LocalInv { rkey }, &[]),
    )?;
    let wc = wait_wc(env, &mut side.cq)?;
    let opcode = expect.is_success().then_some(WcOpcode::LOCAL_INV);
    expect_wc(&wc, 0x1a, expect, opcode)
}

/// A type-2 window bound on the server's QP grants the client remote read/write inside the
/// window, and nothing outside it (even inside the region).
pub fn mw_bind_and_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    let k0 = mw.rkey();
    let k = bind(
        env,
        &mut p.s,
        &mw,
        &tb,
        1024,
        2048,
        MW_ACC,
        WcStatus::SUCCESS,
    )?;
    ensure!(
        k != k0 && k >> 8 == k0 >> 8,
        "bind key {k:#x} from {k0:#x}: key byte must change"
    );
    let sb = Buf::<E::P>::new(&p.c.pd, 8192, LW)?;
    sb.fill(6);
    let sgl = [sb.sge(0, 512)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr() + 1024 + 100,
        rkey: k,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    wait_placed(env, &mut p)?;
    ensure!(
        tb.read(1124, 512) == expected(6, 0, 512),
        "write through window differs"
    );
    let dsg = [sb.sge(4096, 512)];
    let r: SendOp<'_, E::P> = SendOp::RdmaRead {
        remote_addr: tb.addr() + 1024 + 100,
        rkey: k,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(2, r, &dsg))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 2, WcStatus::SUCCESS, None)?;
    ensure!(
        sb.read(4096, 512) == expected(6, 0, 512),
        "read through window differs"
    );
    // Inside the region, outside the window.
    if profile(env) == Profile::Rxe {
        // docs/rdma-provider.md 2.3: rxe checks a window access against the underlying region
        // only, so a Write crossing the window's end (inside the region) succeeds (device bug;
        // upper layers never expose through a window what the region must not expose). A
        // refusal (fixed kernel) is accepted too.
        let sgl = [sb.sge(0, 64)];
        let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
            remote_addr: tb.addr() + 1024 + 2048 - 8,
            rkey: k,
        };
        post_send::<E::P>(&mut p.c.qp, wr::<E::P>(3, w, &sgl))?;
        let wc = wait_wc(env, &mut p.c.cq)?;
        expect_status_in(&wc, 3, &[WcStatus::SUCCESS, WcStatus::REM_ACCESS_ERR])?;
        env.note(&format!(
            "rxe: Write crossing the window's end: {}",
            wc.status.name()
        ));
        if wc.status.is_success() {
            return Ok(());
        }
        expect_both_down(env, &mut p)?;
        ensure!(
            tb.read(3072, 64) == vec![0; 64],
            "write beyond the window landed"
        );
        return Ok(());
    }
    write_expect_access_error(env, &mut p, tb.addr() + 1024 + 2048 - 8, k, 64)?;
    ensure!(
        tb.read(3072, 64) == vec![0; 64],
        "write beyond the window landed"
    );
    Ok(())
}

/// Rebinding after invalidation rotates the key byte; the old key no longer works, the new
/// one does. The first rebind uses `ibv_inc_rkey`; the second a consumer key byte drawn at
/// random (as the connection engine does, [`crate::verbs::KeyGen`]), which providers must accept.
pub fn mw_rebind_rotates_key<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 8192, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    let k0 = bind(env, &mut p.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    local_inv(env, &mut p.s, k0, WcStatus::SUCCESS)?;
    let k1 = bind(env, &mut p.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    ensure!(k0 != k1, "rebind reused key {k0:#x}");
    local_inv(env, &mut p.s, k1, WcStatus::SUCCESS)?;
    // A byte other than the incremented one (the draw never repeats the current byte).
    let mut gen = crate::verbs::KeyGen::new(0x5eed);
    let mut want = gen.next_rkey(k1);
    while want == crate::verbs::inc_rkey(k1) {
        want = gen.next_rkey(k1);
    }
    let k2 = bind_key(
        env,
        &mut p.s,
        &mw,
        &tb,
        0,
        4096,
        MW_ACC,
        WcStatus::SUCCESS,
        want,
    )?;
    ensure!(k2 == want, "bind key {k2:#x}, asked for {want:#x}");
    ensure!(k1 != k2, "rebind reused key {k1:#x}");
    ensure!(
        k1 >> 8 == k2 >> 8,
        "rebind changed the index bits: {k1:#x} -> {k2:#x}"
    );
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: k2,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    write_expect_access_error(env, &mut p, tb.addr(), k1, 64)
}

/// Binding over a region registered without MW_BIND fails with MW_BIND_ERR.
pub fn mw_bind_requires_mw_bind_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    bind(
        env,
        &mut p.s,
        &mw,
        &tb,
        0,
        1024,
        MW_ACC,
        WcStatus::MW_BIND_ERR,
    )?;
    ensure!(
        p.s.qp.state() == QpState::Error,
        "QP state {:?} after MW_BIND_ERR",
        p.s.qp.state()
    );
    Ok(())
}

/// Binding a type-2 window that is already bound fails with MW_BIND_ERR.
pub fn mw_bind_twice_fails<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    bind(env, &mut p.s, &mw, &tb, 0, 1024, MW_ACC, WcStatus::SUCCESS)?;
    bind(
        env,
        &mut p.s,
        &mw,
        &tb,
        0,
        1024,
        MW_ACC,
        WcStatus::MW_BIND_ERR,
    )?;
    Ok(())
}

/// After LOCAL_INV of a window's key, access through it fails.
pub fn mw_local_inv_blocks_access<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let tb = Buf::<E::P>::new(&p.s.pd, 4096, MR_MW)?;
    let mw = p.s.pd.alloc_mw().map_err(e2s)?;
    let k = bind(env, &mut p.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: k,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut p.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    local_inv(env, &mut p.s, k, WcStatus::SUCCESS)?;
    write_expect_access_error(env, &mut p, tb.addr(), k, 64)
}

/// A type-2 window is usable only through the QP that bound it: a second connection to the
/// same server PD gets REM_ACCESS_ERR with the same key.
pub fn mw_bound_to_qp<E: Env>(env: &mut E) -> CheckResult {
    let mut a = connect_with(env, PairOpts::default(), None, None)?.pair;
    let spd = a.s.pd.clone();
    let mut b = connect_with(env, PairOpts::default(), Some(spd), None)?.pair;
    let tb = Buf::<E::P>::new(&a.s.pd, 4096, MR_MW)?;
    let mw = a.s.pd.alloc_mw().map_err(e2s)?;
    let k = bind(env, &mut a.s, &mw, &tb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    let sb = Buf::<E::P>::new(&a.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: tb.addr(),
        rkey: k,
    };
    post_send::<E::P>(&mut a.c.qp, wr::<E::P>(1, w, &sgl))?;
    expect_wc(&wait_wc(env, &mut a.c.cq)?, 1, WcStatus::SUCCESS, None)?;
    write_expect_access_error(env, &mut b, tb.addr(), k, 64)
}

/// SEND_WITH_INV invalidates the receiver's window before the receive completes, and the
/// receive completion carries WITH_INV and the key.
pub fn send_with_inv<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    // The client exposes a window (as an RPC-over-RDMA requester does for a Write chunk).
    let cb = Buf::<E::P>::new(&p.c.pd, 8192, MR_MW)?;
    let mw = p.c.pd.alloc_mw().map_err(e2s)?;
    let k = bind(env, &mut p.c, &mw, &cb, 0, 4096, MW_ACC, WcStatus::SUCCESS)?;
    let rb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    post_recv::<E::P>(&mut p.c.qp, 0x77, &[rb.sge(0, 4096)])?;
    let sb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    sb.fill(8);
    let sgl = [sb.sge(0, 256)];
    let w: SendOp<'_, E::P> = SendOp::RdmaWrite {
        remote_addr: cb.addr(),
        rkey: k,
    };
    let s_inv = SendWr {
        wr_id: 2,
        op: SendOp::SendWithInv { rkey: k },
        sgl: &sgl[..],
        flags: SendFlags::SIGNALED,
    };
    p.s.qp.queue_send(&wr::<E::P>(1, w, &sgl)).map_err(e2s)?;
    p.s.qp.queue_send(&s_inv).map_err(e2s)?;
    p.s.qp.flush_send().map_err(e2s)?;
    let wcs = wait_wcs(env, &mut p.s.cq, 2)?;
    expect_wc(&wcs[0], 1, WcStatus::SUCCESS, None)?;
    expect_wc(&wcs[1], 2, WcStatus::SUCCESS, Some(WcOpcode::SEND))?;
    let rc = wait_wc(env, &mut p.c.cq)?;
    expect_wc(&rc, 0x77, WcStatus::SUCCESS, Some(WcOpcode::RECV))?;
    ensure!(
        rc.flags.contains(WcFlags::WITH_INV),
        "receive lacks WITH_INV ({:?})",
        rc.flags
    );
    ensure!(
        rc.invalidated_rkey == k,
        "invalidated rkey {:#x}, expected {k:#x}",
        rc.invalidated_rkey
    );
    ensure!(
        cb.read(0, 256) == expected(8, 0, 256),
        "write before the send differs"
    );
    // The key is dead now: the server's next write through it fails.
    let mut flipped = Pair { c: p.s, s: p.c };
    write_expect_access_error(env, &mut flipped, cb.addr(), k, 64)
}

/// SEND_WITH_INV naming a key that is not a window bound to the receiving QP: the receive
/// completes in error and both QPs go down. siw (profile `Siw`) checks only that the STag
/// belongs to the receiver's PD and invalidates a registered region's key as well: the receive
/// succeeds, and the region's key is dead afterwards (docs/rdma-provider.md 2.4).
pub fn send_with_inv_bad_key<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW | Access::REMOTE_WRITE)?;
    post_recv::<E::P>(&mut p.s.qp, 0x55, &[rb.sge(0, 4096)])?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let sgl = [sb.sge(0, 64)];
    // A region's key: regions are not invalidatable (not fast-registration MRs).
    let op: SendOp<'_, E::P> = SendOp::SendWithInv {
        rkey: rb.keys().rkey,
    };
    post_send::<E::P>(&mut p.c.qp, wr::<E::P>(1, op, &sgl))?;
    let rc = wait_wc(env, &mut p.s.cq)?;
    ensure!(rc.wr_id == 0x55, "receive wr_id {:#x}", rc.wr_id);
    if rc.status.is_success() && profile(env) == Profile::Siw {
        env.note("siw invalidated a registered region's key (it checks only the PD)");
        let _ = wait_wc(env, &mut p.c.cq)?;
        return write_expect_access_error(env, &mut p, rb.addr(), rb.keys().rkey, 64);
    }
    ensure!(
        !rc.status.is_success(),
        "receive succeeded despite an invalid invalidate key"
    );
    let _ = wait_wc(env, &mut p.c.cq)?;
    let _ = p.c.qp.disconnect();
    wait_event_kind(env, &mut p.s.qp, CmEventKind::Disconnected)?;
    ensure!(
        p.s.qp.state() == QpState::Error,
        "receiver state {:?}",
        p.s.qp.state()
    );
    Ok(())
}
