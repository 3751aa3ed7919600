//! The provider conformance suite on the soft provider, one `#[test]` per check, plus
//! soft-only checks: the exact statuses the soft provider picks where hardware varies, and
//! fault injection.

use rpcrdma_engine::verbs::conformance::{self as c, CheckResult, Env};
use rpcrdma_engine::verbs::soft::SoftEnv;

fn run(check: fn(&mut SoftEnv) -> CheckResult) {
    let mut env = SoftEnv::new();
    if let Err(e) = check(&mut env) {
        panic!("{e}");
    }
}

macro_rules! conformance_tests {
    ($($name:ident $([$($need:ident)|+])?),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(c::$name::<SoftEnv>);
            }
        )*
    };
}

rpcrdma_engine::conformance_checks!(conformance_tests);

#[test]
fn run_all_passes() {
    let mut env = SoftEnv::new();
    assert_eq!(c::profile(&env), c::Profile::Soft);
    let mut names = Vec::new();
    let sum = c::run_all(&mut env, |name, out| {
        assert!(matches!(out, c::Outcome::Pass), "{name}: {out:?}");
        names.push(name.to_string());
    });
    assert_eq!((sum.failed, sum.skipped), (0, 0));
    assert_eq!(names.len(), sum.passed, "every outcome handed out once");
    assert_eq!(sum.passed, c::all_checks::<SoftEnv>().len());
    let _ = env.listen_addr();
}

/// A device without type-2 memory windows, Send With Invalidate or SRQs, and with one RDMA Read
/// sink SGE: the checks that need them are reported as skipped with the reason, never run,
/// never failed; the others pass.
#[test]
fn accepts_skips_of_checks_the_device_cannot_run() {
    use rpcrdma_engine::verbs::soft::SoftConfig;
    let mut config = SoftConfig::default();
    config.caps.mw_type2 = false;
    config.caps.send_with_invalidate = false;
    config.caps.max_srq = 0;
    // One sink SGE per RDMA Read (as siw): rdma_read_in_bounds checks the refusal of two.
    config.caps.max_sge_rd = 1;
    let mut env = SoftEnv::with_config(config);
    let mut skipped = Vec::new();
    for check in c::all_checks::<SoftEnv>() {
        match c::run_check(&mut env, &check) {
            c::Outcome::Pass => {}
            c::Outcome::Fail(e) => panic!("{} failed: {e}", check.name),
            c::Outcome::Skip(why) => skipped.push((check.name, why)),
        }
    }
    let names: Vec<&str> = skipped.iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        [
            "mw_bind_and_access",
            "mw_rebind_rotates_key",
            "mw_bind_requires_mw_bind_access",
            "mw_bind_twice_fails",
            "mw_local_inv_blocks_access",
            "mw_bound_to_qp",
            "send_with_inv",
            "send_with_inv_bad_key",
            "srq_shared_by_two_qps",
        ]
    );
    assert_eq!(skipped[0].1, "device has no type-2 memory windows");
    assert_eq!(skipped[7].1, "device has no Send With Invalidate");
    assert_eq!(skipped[8].1, "device has no shared receive queues");
}

/// The RNR retry count of a SEND is the one the *receiver* asked for (rdma_cm carries each
/// side's `rnr_retry_count` to the peer): a sender asking for infinite retries still fails at
/// once against a receiver that asked for 0, and a sender asking for 0 waits for a receiver
/// that asked for infinite retries.
#[test]
fn accepts_rnr_retry_count_of_the_receiver() {
    use rpcrdma_engine::verbs::conformance::{connect_opts, settle, wait_wc, Buf, PairOpts};
    use rpcrdma_engine::verbs::soft::SoftProvider;
    use rpcrdma_engine::verbs::{
        Access, QpOptions, QueuePair, RecvWr, SendWr, WcStatus, RNR_RETRY_INFINITE,
    };
    let mut env = SoftEnv::new();
    let inf = QpOptions {
        rnr_retry_count: RNR_RETRY_INFINITE,
        ..QpOptions::default()
    };
    for (c, s) in [(inf, QpOptions::default()), (QpOptions::default(), inf)] {
        let o = PairOpts {
            c,
            s,
            ..PairOpts::default()
        };
        let mut p = connect_opts(&mut env, o).unwrap();
        // Each side reports what it asked for.
        assert_eq!(p.c.qp.options().rnr_retry_count, c.rnr_retry_count);
        assert_eq!(p.s.qp.options().rnr_retry_count, s.rnr_retry_count);
        let sb = Buf::<SoftProvider>::new(&p.c.pd, 64, Access::LOCAL_WRITE).unwrap();
        p.c.qp
            .queue_send(&SendWr::send(1, &[sb.sge(0, 8)]))
            .unwrap();
        p.c.qp.flush_send().unwrap();
        if s.rnr_retry_count == 0 {
            let wc = wait_wc(&mut env, &mut p.c.cq).unwrap();
            assert_eq!(wc.status, WcStatus::RNR_RETRY_EXC_ERR);
        } else {
            assert!(settle(&mut env, &mut p.c.cq).unwrap().is_empty());
            let rb = Buf::<SoftProvider>::new(&p.s.pd, 64, Access::LOCAL_WRITE).unwrap();
            p.s.qp
                .queue_recv(&RecvWr {
                    wr_id: 2,
                    sgl: &[rb.sge(0, 64)],
                })
                .unwrap();
            p.s.qp.flush_recv().unwrap();
            assert!(wait_wc(&mut env, &mut p.c.cq).unwrap().status.is_success());
        }
    }
}

// -------------------------------------------------------------------------------------------
// Soft-only: exact statuses, fault injection, trace, threads.
// -------------------------------------------------------------------------------------------

mod soft_only {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::sync::{Arc, Mutex};

    use rpcrdma_engine::verbs::conformance::{
        connect, connect_opts, wait_event_kind, wait_wc, wait_wcs, Buf, PairOpts,
    };
    use rpcrdma_engine::verbs::soft::{DelayMode, SoftEnv, SoftFabric, SoftProvider, TraceOp};
    use rpcrdma_engine::verbs::{
        errno, Access, CmEventKind, Completion, CompletionQueue, ConnRequest, Device, Listener,
        MemoryWindow, MwBind, ProtectionDomain, Provider, QpInit, QpOptions, QpState, QueuePair,
        RecvWr, Registrar, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    };

    type P = SoftProvider;
    const LW: Access = Access::LOCAL_WRITE;
    const RW: Access =
        Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
    const MR_MW: Access = Access(Access::LOCAL_WRITE.0 | Access::MW_BIND.0);
    const MW_ACC: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

    fn post_send(qp: &mut <P as Provider>::Qp, wr: SendWr<'_, P>) {
        qp.queue_send(&wr).unwrap();
        qp.flush_send().unwrap();
    }

    fn post_recv(qp: &mut <P as Provider>::Qp, wr_id: u64, sgl: &[Sge]) {
        qp.queue_recv(&RecvWr { wr_id, sgl }).unwrap();
        qp.flush_recv().unwrap();
    }

    fn signaled<'a>(wr_id: u64, op: SendOp<'a, P>, sgl: &'a [Sge]) -> SendWr<'a, P> {
        SendWr {
            wr_id,
            op,
            sgl,
            flags: SendFlags::SIGNALED,
        }
    }

    /// A type-2 window still bound when its QP is destroyed is counted (rxe warns there);
    /// deallocating the window first leaves nothing to count.
    #[test]
    fn accepts_count_of_windows_bound_at_qp_destroy() {
        for dealloc_first in [false, true] {
            let mut env = SoftEnv::new();
            let mut p = connect(&mut env).unwrap();
            let tb = Buf::<P>::new(&p.s.pd, 4096, MR_MW).unwrap();
            let mw = p.s.pd.alloc_mw().unwrap();
            let bind = SendOp::BindMw(MwBind {
                mw: &mw,
                mr: tb.mr(),
                rkey: mw.next_rkey(),
                addr: tb.addr(),
                len: 4096,
                access: MW_ACC,
            });
            post_send(&mut p.s.qp, signaled(1, bind, &[]));
            assert!(wait_wc(&mut env, &mut p.s.cq).unwrap().status.is_success());
            let before = env.fabric().windows_bound_at_qp_destroy();
            if dealloc_first {
                drop(mw);
                drop(p);
            } else {
                drop(p);
                drop(mw);
            }
            let counted = env.fabric().windows_bound_at_qp_destroy() - before;
            assert_eq!(
                counted,
                u64::from(!dealloc_first),
                "dealloc first: {dealloc_first}"
            );
        }
    }

    /// `SoftDevice::key_usage` counts regions, allocated windows and bound windows, and is
    /// back at its start once they are invalidated, deallocated and deregistered (the soak's
    /// leak check relies on it).
    #[test]
    fn accepts_key_usage_counts_back_to_start() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let dev = env.server_dev().clone();
        let start = dev.key_usage();
        let tb = Buf::<P>::new(&p.s.pd, 4096, MR_MW).unwrap();
        let mw = p.s.pd.alloc_mw().unwrap();
        let u = dev.key_usage();
        assert_eq!(
            (u.regions, u.windows, u.windows_bound),
            (start.regions + 1, start.windows + 1, start.windows_bound)
        );
        let bind = SendOp::BindMw(MwBind {
            mw: &mw,
            mr: tb.mr(),
            rkey: mw.next_rkey(),
            addr: tb.addr(),
            len: 4096,
            access: MW_ACC,
        });
        post_send(&mut p.s.qp, signaled(1, bind, &[]));
        assert!(wait_wc(&mut env, &mut p.s.cq).unwrap().status.is_success());
        assert_eq!(dev.key_usage().windows_bound, start.windows_bound + 1);
        drop(mw);
        drop(tb);
        assert_eq!(dev.key_usage(), start);
    }

    #[test]
    fn rejects_recv_too_small_with_loc_len_err_on_receiver() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let rb = Buf::<P>::new(&p.s.pd, 256, LW).unwrap();
        post_recv(&mut p.s.qp, 1, &[rb.sge(0, 10)]);
        post_recv(&mut p.s.qp, 2, &[rb.sge(0, 10)]);
        post_send(&mut p.c.qp, SendWr::send(9, &[sb.sge(0, 11)]));
        let r = wait_wcs(&mut env, &mut p.s.cq, 2).unwrap();
        assert_eq!((r[0].wr_id, r[0].status), (1, WcStatus::LOC_LEN_ERR));
        assert_eq!((r[1].wr_id, r[1].status), (2, WcStatus::WR_FLUSH_ERR));
        let c = wait_wc(&mut env, &mut p.c.cq).unwrap();
        assert_eq!(c.status, WcStatus::REM_INV_REQ_ERR);
        // The soft provider tears the connection down by itself.
        wait_event_kind(&mut env, &mut p.c.qp, CmEventKind::Disconnected).unwrap();
        wait_event_kind(&mut env, &mut p.s.qp, CmEventKind::Disconnected).unwrap();
    }

    #[test]
    fn rejects_recv_sge_of_other_pd_with_loc_prot_err() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let other = env.server_pd();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let rb = Buf::<P>::new(&other, 256, LW).unwrap();
        post_recv(&mut p.s.qp, 1, &[rb.sge(0, 256)]);
        post_send(&mut p.c.qp, SendWr::send(9, &[sb.sge(0, 11)]));
        assert_eq!(
            wait_wc(&mut env, &mut p.s.cq).unwrap().status,
            WcStatus::LOC_PROT_ERR
        );
        assert_eq!(
            wait_wc(&mut env, &mut p.c.cq).unwrap().status,
            WcStatus::REM_OP_ERR
        );
    }

    #[test]
    fn rejects_recv_sge_without_local_write() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let rb = Buf::<P>::new(&p.s.pd, 256, Access::NONE).unwrap();
        post_recv(&mut p.s.qp, 1, &[rb.sge(0, 256)]);
        post_send(&mut p.c.qp, SendWr::send(9, &[sb.sge(0, 11)]));
        assert_eq!(
            wait_wc(&mut env, &mut p.s.cq).unwrap().status,
            WcStatus::LOC_PROT_ERR
        );
        assert_eq!(
            wait_wc(&mut env, &mut p.c.cq).unwrap().status,
            WcStatus::REM_OP_ERR
        );
    }

    #[test]
    fn rejects_send_with_inv_of_region_key_with_rem_inv_req_err() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let rb = Buf::<P>::new(&p.s.pd, 256, RW).unwrap();
        post_recv(&mut p.s.qp, 1, &[rb.sge(0, 256)]);
        let sgl = [sb.sge(0, 8)];
        let op = SendOp::SendWithInv {
            rkey: rb.keys().rkey,
        };
        post_send(&mut p.c.qp, signaled(2, op, &sgl));
        assert_eq!(
            wait_wc(&mut env, &mut p.s.cq).unwrap().status,
            WcStatus::REM_INV_REQ_ERR
        );
        assert_eq!(
            wait_wc(&mut env, &mut p.c.cq).unwrap().status,
            WcStatus::REM_INV_REQ_ERR
        );
    }

    #[test]
    fn rejects_send_with_inv_through_other_qp() {
        // Window bound on connection A's server QP, invalidated by a SEND arriving on B.
        let mut env = SoftEnv::new();
        let mut a = connect(&mut env).unwrap();
        let spd = a.s.pd.clone();
        let mut b = rpcrdma_engine::verbs::conformance::connect_with(
            &mut env,
            PairOpts::default(),
            Some(spd),
            None,
        )
        .unwrap()
        .pair;
        let tb = Buf::<P>::new(&a.s.pd, 4096, MR_MW).unwrap();
        let mw = a.s.pd.alloc_mw().unwrap();
        let k = mw.next_rkey();
        let bind = SendOp::BindMw(MwBind {
            mw: &mw,
            mr: tb.mr(),
            rkey: k,
            addr: tb.addr(),
            len: 4096,
            access: MW_ACC,
        });
        post_send(&mut a.s.qp, signaled(1, bind, &[]));
        assert!(wait_wc(&mut env, &mut a.s.cq).unwrap().status.is_success());
        let rb = Buf::<P>::new(&b.s.pd, 256, LW).unwrap();
        post_recv(&mut b.s.qp, 5, &[rb.sge(0, 256)]);
        let sb = Buf::<P>::new(&b.c.pd, 256, LW).unwrap();
        let sgl = [sb.sge(0, 8)];
        post_send(
            &mut b.c.qp,
            signaled(2, SendOp::SendWithInv { rkey: k }, &sgl),
        );
        assert_eq!(
            wait_wc(&mut env, &mut b.s.cq).unwrap().status,
            WcStatus::REM_INV_REQ_ERR
        );
        // The window is still valid on A.
        let asb = Buf::<P>::new(&a.c.pd, 256, LW).unwrap();
        let asgl = [asb.sge(0, 8)];
        let w = SendOp::RdmaWrite {
            remote_addr: tb.addr(),
            rkey: k,
        };
        post_send(&mut a.c.qp, signaled(3, w, &asgl));
        assert!(wait_wc(&mut env, &mut a.c.cq).unwrap().status.is_success());
    }

    #[test]
    fn rejects_local_inv_of_unbound_or_region_key() {
        for case in 0..2 {
            let mut env = SoftEnv::new();
            let mut p = connect(&mut env).unwrap();
            let b = Buf::<P>::new(&p.s.pd, 256, RW).unwrap();
            let mw = p.s.pd.alloc_mw().unwrap();
            let rkey = if case == 0 { mw.rkey() } else { b.keys().rkey };
            post_send(&mut p.s.qp, signaled(1, SendOp::LocalInv { rkey }, &[]));
            let wc = wait_wc(&mut env, &mut p.s.cq).unwrap();
            assert_eq!(wc.status, WcStatus::LOC_QP_OP_ERR, "case {case}");
            assert_eq!(p.s.qp.state(), QpState::Error);
        }
    }

    #[test]
    fn accepts_zero_length_rdma_without_key_check() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let w = SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: 0xdead_beef,
        };
        post_send(&mut p.c.qp, signaled(1, w, &[]));
        let wc = wait_wc(&mut env, &mut p.c.cq).unwrap();
        assert_eq!(wc.status, WcStatus::SUCCESS);
    }

    #[test]
    fn rejects_dereg_leaves_no_window_behind() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let mut tb = Buf::<P>::new(&p.s.pd, 4096, MR_MW).unwrap();
        let mw = p.s.pd.alloc_mw().unwrap();
        let k = mw.next_rkey();
        let bind = SendOp::BindMw(MwBind {
            mw: &mw,
            mr: tb.mr(),
            rkey: k,
            addr: tb.addr(),
            len: 4096,
            access: MW_ACC,
        });
        post_send(&mut p.s.qp, signaled(1, bind, &[]));
        assert!(wait_wc(&mut env, &mut p.s.cq).unwrap().status.is_success());
        tb.dereg();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let sgl = [sb.sge(0, 8)];
        let w = SendOp::RdmaWrite {
            remote_addr: tb.addr(),
            rkey: k,
        };
        post_send(&mut p.c.qp, signaled(2, w, &sgl));
        assert_eq!(
            wait_wc(&mut env, &mut p.c.cq).unwrap().status,
            WcStatus::REM_ACCESS_ERR
        );
    }

    #[test]
    fn rejects_registration_of_remote_write_without_local_write() {
        let env = SoftEnv::new();
        let pd = env.server_pd();
        let mut mem = vec![0u8; 64];
        // SAFETY: the registration (if any) is dropped before `mem`.
        let r = unsafe { pd.register(mem.as_mut_ptr(), 64, Access::REMOTE_WRITE) };
        assert_eq!(r.err().map(|e| e.errno), Some(errno::EINVAL));
    }

    #[test]
    fn accepts_inline_data_copied_at_post() {
        let mut env = SoftEnv::new();
        let o = PairOpts {
            c: QpOptions {
                max_inline_data: 64,
                ..QpOptions::default()
            },
            // The receiver's count governs the client's SEND (rdma_cm semantics).
            s: QpOptions {
                rnr_retry_count: 7,
                ..QpOptions::default()
            },
            ..PairOpts::default()
        };
        let mut p = connect_opts(&mut env, o).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let rb = Buf::<P>::new(&p.s.pd, 256, LW).unwrap();
        sb.fill(1);
        let before = sb.read(0, 32);
        let sgl = [sb.sge(0, 32)];
        let w = SendWr::send(1, &sgl).with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
        // No receive yet: the SEND waits (RNR); the buffer is reused meanwhile.
        post_send(&mut p.c.qp, w);
        sb.fill(99);
        post_recv(&mut p.s.qp, 2, &[rb.sge(0, 256)]);
        assert!(wait_wc(&mut env, &mut p.c.cq).unwrap().status.is_success());
        assert!(wait_wc(&mut env, &mut p.s.cq).unwrap().status.is_success());
        assert_eq!(rb.read(0, 32), before);
        let long = [sb.sge(0, 65)];
        let w = SendWr::send(3, &long).with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
        assert_eq!(
            p.c.qp.queue_send(&w).err().map(|e| e.errno),
            Some(errno::EINVAL)
        );
    }

    #[test]
    fn accepts_fail_nth_send_fault() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let tb = Buf::<P>::new(&p.s.pd, 256, RW).unwrap();
        let rb = Buf::<P>::new(&p.s.pd, 256, LW).unwrap();
        post_recv(&mut p.s.qp, 50, &[rb.sge(0, 256)]);
        p.c.qp.faults().fail_nth_send(2, WcStatus::RETRY_EXC_ERR);
        let sgl = [sb.sge(0, 8)];
        let w = SendOp::RdmaWrite {
            remote_addr: tb.addr(),
            rkey: tb.keys().rkey,
        };
        for i in 1..=3 {
            p.c.qp.queue_send(&signaled(i, w, &sgl)).unwrap();
        }
        p.c.qp.flush_send().unwrap();
        let wcs = wait_wcs(&mut env, &mut p.c.cq, 3).unwrap();
        let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            got,
            [
                (1, WcStatus::SUCCESS),
                (2, WcStatus::RETRY_EXC_ERR),
                (3, WcStatus::WR_FLUSH_ERR)
            ]
        );
        wait_event_kind(&mut env, &mut p.s.qp, CmEventKind::Disconnected).unwrap();
        let r = wait_wc(&mut env, &mut p.s.cq).unwrap();
        assert_eq!((r.wr_id, r.status), (50, WcStatus::WR_FLUSH_ERR));
    }

    #[test]
    fn accepts_drop_connection_fault() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let cb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        post_recv(&mut p.c.qp, 7, &[cb.sge(0, 256)]);
        p.s.qp.faults().drop_connection();
        wait_event_kind(&mut env, &mut p.c.qp, CmEventKind::Disconnected).unwrap();
        wait_event_kind(&mut env, &mut p.s.qp, CmEventKind::Disconnected).unwrap();
        let r = wait_wc(&mut env, &mut p.c.cq).unwrap();
        assert_eq!((r.wr_id, r.status), (7, WcStatus::WR_FLUSH_ERR));
        assert_eq!(p.c.qp.state(), QpState::Error);
        assert_eq!(p.s.qp.state(), QpState::Error);
    }

    #[test]
    fn accepts_held_completions_released_in_order() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let tb = Buf::<P>::new(&p.s.pd, 256, RW).unwrap();
        let f = p.c.qp.faults();
        f.delay_completions(DelayMode::Hold);
        let sgl = [sb.sge(0, 8)];
        let w = SendOp::RdmaWrite {
            remote_addr: tb.addr(),
            rkey: tb.keys().rkey,
        };
        for i in 1..=3 {
            p.c.qp.queue_send(&signaled(i, w, &sgl)).unwrap();
        }
        p.c.qp.flush_send().unwrap();
        let mut out = [Completion::default(); 8];
        for _ in 0..10 {
            assert_eq!(p.c.cq.poll(&mut out).unwrap(), 0);
        }
        assert_eq!(f.held_completions(), 3);
        f.release_completions();
        let n = p.c.cq.poll(&mut out).unwrap();
        assert_eq!(
            out[..n].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn accepts_completions_delayed_by_polls() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let tb = Buf::<P>::new(&p.s.pd, 256, RW).unwrap();
        p.c.qp.faults().delay_completions(DelayMode::Polls(3));
        let sgl = [sb.sge(0, 8)];
        let w = SendOp::RdmaWrite {
            remote_addr: tb.addr(),
            rkey: tb.keys().rkey,
        };
        post_send(&mut p.c.qp, signaled(1, w, &sgl));
        let mut out = [Completion::default(); 8];
        let mut polls = 0;
        loop {
            polls += 1;
            if p.c.cq.poll(&mut out).unwrap() == 1 {
                break;
            }
            assert!(polls < 10);
        }
        assert_eq!(polls, 3);
        assert_eq!(out[0].wr_id, 1);
    }

    #[test]
    fn accepts_unreachable_fault_and_listener_drop_rejects() {
        let env = SoftEnv::new();
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 999);
        env.fabric().set_unreachable(addr, true);
        let pd = env.client_pd();
        let cq = env.client_dev().create_cq(16).unwrap();
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts: QpOptions::default(),
        };
        let mut qp = env.client_dev().connect(addr, init, &[]).unwrap();
        let ev = qp.poll_event().unwrap().unwrap();
        assert_eq!(ev.kind, CmEventKind::Unreachable);
        env.fabric().set_unreachable(addr, false);
        let l = env.server_dev().listen(addr, 4).unwrap();
        let e = env.server_dev().listen(addr, 4).err().map(|e| e.errno);
        assert_eq!(e, Some(errno::EADDRINUSE));
        let mut qp = env.client_dev().connect(addr, init, &[]).unwrap();
        drop(l);
        let ev = qp.poll_event().unwrap().unwrap();
        assert_eq!(ev.kind, CmEventKind::Rejected);
    }

    #[test]
    fn accepts_peer_destroy_as_disconnect() {
        let mut env = SoftEnv::new();
        let mut p = connect(&mut env).unwrap();
        let cb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        post_recv(&mut p.c.qp, 3, &[cb.sge(0, 256)]);
        let s = p.s;
        drop(s);
        wait_event_kind(&mut env, &mut p.c.qp, CmEventKind::Disconnected).unwrap();
        assert_eq!(
            wait_wc(&mut env, &mut p.c.cq).unwrap().status,
            WcStatus::WR_FLUSH_ERR
        );
    }

    /// (op, src qpn, dst qpn, psn, payload, len)
    type Traced = (TraceOp, u32, u32, u32, Vec<u8>, u32);

    #[test]
    fn accepts_trace_events_with_payload_and_psn() {
        let fabric = SoftFabric::new();
        let log: Arc<Mutex<Vec<Traced>>> = Arc::default();
        let l2 = log.clone();
        assert!(fabric.set_trace(Box::new(move |ev| {
            let mut data = Vec::new();
            for s in ev.payload {
                data.extend_from_slice(s);
            }
            l2.lock()
                .unwrap()
                .push((ev.op, ev.src_qpn, ev.dst_qpn, ev.psn, data, ev.len));
        })));
        assert!(!fabric.set_trace(Box::new(|_| {})));
        let mut env = SoftEnv::on(fabric);
        let mut p = connect(&mut env).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 8192, LW).unwrap();
        let rb = Buf::<P>::new(&p.s.pd, 8192, RW).unwrap();
        sb.fill(3);
        post_recv(&mut p.s.qp, 1, &[rb.sge(0, 8192)]);
        post_send(
            &mut p.c.qp,
            SendWr::send(1, &[sb.sge(0, 5), sb.sge(100, 3)]),
        );
        let sgl = [sb.sge(0, 5000)];
        let w = SendOp::RdmaWrite {
            remote_addr: rb.addr(),
            rkey: rb.keys().rkey,
        };
        post_send(&mut p.c.qp, signaled(2, w, &sgl));
        let rd = SendOp::RdmaRead {
            remote_addr: rb.addr(),
            rkey: rb.keys().rkey,
        };
        post_send(&mut p.c.qp, signaled(3, rd, &sgl[..]));
        wait_wcs(&mut env, &mut p.c.cq, 3).unwrap();
        let log = log.lock().unwrap();
        let ops: Vec<_> = log.iter().map(|e| e.0).collect();
        assert_eq!(
            ops,
            [
                TraceOp::Send,
                TraceOp::RdmaWrite,
                TraceOp::RdmaReadRequest,
                TraceOp::RdmaReadResponse
            ]
        );
        let (cq, sq) = (p.c.qp.qp_num(), p.s.qp.qp_num());
        assert_eq!((log[0].1, log[0].2), (cq, sq));
        let mut first = sb.read(0, 5);
        first.extend(sb.read(100, 3));
        assert_eq!(log[0].4, first);
        assert_eq!(log[1].4.len(), 5000);
        assert_eq!(
            log[1].3,
            (log[0].3 + 1) & 0xff_ffff,
            "SEND of 8 octets takes one PSN"
        );
        assert_eq!(
            log[2].3,
            (log[1].3 + 2) & 0xff_ffff,
            "5000-octet write takes two PSNs"
        );
        assert_eq!(log[2].5, 5000);
        assert_eq!((log[3].1, log[3].2), (sq, cq));
    }

    #[test]
    fn accepts_cq_overflow_downs_the_peer() {
        let mut env = SoftEnv::new();
        let o = PairOpts {
            c_cq: 2,
            ..PairOpts::default()
        };
        let mut p = connect_opts(&mut env, o).unwrap();
        let sb = Buf::<P>::new(&p.c.pd, 256, LW).unwrap();
        let tb = Buf::<P>::new(&p.s.pd, 256, RW).unwrap();
        let sgl = [sb.sge(0, 8)];
        let w = SendOp::RdmaWrite {
            remote_addr: tb.addr(),
            rkey: tb.keys().rkey,
        };
        for i in 0..3 {
            p.c.qp.queue_send(&signaled(i, w, &sgl)).unwrap();
        }
        p.c.qp.flush_send().unwrap();
        let mut out = [Completion::default(); 4];
        assert_eq!(
            p.c.cq.poll(&mut out).err().map(|e| e.errno),
            Some(errno::EOVERFLOW)
        );
        assert_eq!(p.c.qp.state(), QpState::Error);
        wait_event_kind(&mut env, &mut p.s.qp, CmEventKind::Disconnected).unwrap();
    }

    #[test]
    fn accepts_negotiated_read_depths() {
        let mut env = SoftEnv::new();
        let o = PairOpts {
            c: QpOptions {
                initiator_depth: 8,
                responder_resources: 2,
                ..QpOptions::default()
            },
            s: QpOptions {
                initiator_depth: 16,
                responder_resources: 4,
                ..QpOptions::default()
            },
            ..PairOpts::default()
        };
        let p = connect_opts(&mut env, o).unwrap();
        let (c, s) = (p.c.qp.options(), p.s.qp.options());
        assert_eq!((c.initiator_depth, s.responder_resources), (4, 4));
        assert_eq!((s.initiator_depth, c.responder_resources), (2, 2));
    }

    /// Two threads, each owning one side, ping-pong with writes + sends: checks the data path
    /// across threads (run under Miri/TSan for memory-model checking).
    #[test]
    fn accepts_cross_thread_ping_pong() {
        const N: u64 = 2000;
        let mut env = SoftEnv::new();
        let o = PairOpts {
            c: QpOptions {
                rnr_retry_count: 7,
                ..QpOptions::default()
            },
            s: QpOptions {
                rnr_retry_count: 7,
                ..QpOptions::default()
            },
            ..PairOpts::default()
        };
        let p = connect_opts(&mut env, o).unwrap();
        let (mut c, mut s) = (p.c, p.s);
        let cbuf = Buf::<P>::new(&c.pd, 4096, RW).unwrap();
        let sbuf = Buf::<P>::new(&s.pd, 4096, RW).unwrap();
        let (c_addr, c_key) = (cbuf.addr(), cbuf.keys().rkey);
        let (s_addr, s_key) = (sbuf.addr(), sbuf.keys().rkey);
        let server = std::thread::spawn(move || {
            let mut out = [Completion::default(); 16];
            for i in 0..N {
                post_recv(&mut s.qp, i, &[sbuf.sge(0, 64)]);
                // Wait for the ping.
                loop {
                    let n = s.cq.poll(&mut out).unwrap();
                    if out[..n].iter().any(|w| w.opcode == WcOpcode::RECV) {
                        assert!(out[..n].iter().all(|w| w.status.is_success()));
                        break;
                    }
                    std::thread::yield_now();
                }
                let v = sbuf.read(1024, 8);
                assert_eq!(v, i.to_le_bytes(), "write not visible at receive {i}");
                // Pong: write the value back, then send.
                let sgl = [sbuf.sge(1024, 8)];
                let w = SendOp::RdmaWrite {
                    remote_addr: c_addr + 2048,
                    rkey: c_key,
                };
                s.qp.queue_send(&SendWr {
                    wr_id: i,
                    op: w,
                    sgl: &sgl,
                    flags: SendFlags::NONE,
                })
                .unwrap();
                s.qp.queue_send(&SendWr::send(i, &sgl[..])).unwrap();
                s.qp.flush_send().unwrap();
            }
            s
        });
        let mut out = [Completion::default(); 16];
        for i in 0..N {
            post_recv(&mut c.qp, i, &[cbuf.sge(0, 64)]);
            let bytes = i.to_le_bytes();
            cbuf.write(512, &bytes);
            let sgl = [cbuf.sge(512, 8)];
            let w = SendOp::RdmaWrite {
                remote_addr: s_addr + 1024,
                rkey: s_key,
            };
            c.qp.queue_send(&SendWr {
                wr_id: i,
                op: w,
                sgl: &sgl,
                flags: SendFlags::NONE,
            })
            .unwrap();
            c.qp.queue_send(&SendWr::send(i, &sgl[..])).unwrap();
            c.qp.flush_send().unwrap();
            loop {
                let n = c.cq.poll(&mut out).unwrap();
                assert!(
                    out[..n].iter().all(|w| w.status.is_success()),
                    "{:?}",
                    &out[..n]
                );
                if out[..n].iter().any(|w| w.opcode == WcOpcode::RECV) {
                    break;
                }
                std::thread::yield_now();
            }
            assert_eq!(cbuf.read(2048, 8), bytes);
        }
        let s = server.join().unwrap();
        assert_eq!(s.qp.state(), QpState::Rts);
    }

    /// One thread streams writes + sends while the other receives and then drops the
    /// connection mid-stream: both sides end in ERROR with everything flushed, no hang.
    #[test]
    fn accepts_teardown_while_the_peer_is_sending() {
        let mut env = SoftEnv::new();
        let rnr7 = QpOptions {
            rnr_retry_count: 7,
            ..QpOptions::default()
        };
        let o = PairOpts {
            c: rnr7,
            s: rnr7,
            ..PairOpts::default()
        };
        let p = connect_opts(&mut env, o).unwrap();
        let (mut c, mut s) = (p.c, p.s);
        let cbuf = Buf::<P>::new(&c.pd, 4096, LW).unwrap();
        let sbuf = Buf::<P>::new(&s.pd, 65536, RW).unwrap();
        let (s_addr, s_key) = (sbuf.addr(), sbuf.keys().rkey);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let client = std::thread::spawn(move || {
            let mut out = [Completion::default(); 16];
            // Completions: successes, flushes, and SENDs (odd wr_ids) completed either way
            // (each SEND posted completes exactly once).
            let (mut ok, mut flushed, mut sends_done) = (0u64, 0u64, 0u64);
            let mut count = |wcs: &[Completion], sends_done: &mut u64| {
                for w in wcs {
                    match w.status {
                        WcStatus::SUCCESS => ok += 1,
                        WcStatus::WR_FLUSH_ERR => flushed += 1,
                        st => panic!("unexpected status {}", st.name()),
                    }
                    *sends_done += w.wr_id % 2;
                }
            };
            let mut i = 0u64;
            'outer: loop {
                let sgl = [cbuf.sge(0, 512)];
                let w = SendOp::RdmaWrite {
                    remote_addr: s_addr + (i % 64) * 512,
                    rkey: s_key,
                };
                c.qp.queue_send(&SendWr {
                    wr_id: i * 2,
                    op: w,
                    sgl: &sgl,
                    flags: SendFlags::NONE,
                })
                .unwrap();
                c.qp.queue_send(&SendWr::send(i * 2 + 1, &sgl[..1]))
                    .unwrap();
                c.qp.flush_send().unwrap();
                i += 1;
                loop {
                    assert!(std::time::Instant::now() < deadline, "client hung");
                    let n = c.cq.poll(&mut out).unwrap();
                    count(&out[..n], &mut sends_done);
                    if n > 0 {
                        break;
                    }
                    if c.qp.state() == QpState::Error {
                        // Anything posted now flushes.
                        break 'outer;
                    }
                }
                if c.qp.state() == QpState::Error {
                    break;
                }
            }
            // The QP is in the error state, but a SEND the server already took may still be
            // completing on another thread: every SEND posted completes exactly once, with
            // success or a flush, so wait for all of them.
            while sends_done < i {
                assert!(
                    std::time::Instant::now() < deadline,
                    "client: SENDs never completed"
                );
                let n = c.cq.poll(&mut out).unwrap();
                count(&out[..n], &mut sends_done);
            }
            (ok, flushed, c)
        });
        let mut out = [Completion::default(); 16];
        let mut received = 0;
        let mut posted = 0u64;
        while received < 300 {
            assert!(std::time::Instant::now() < deadline, "server hung");
            if posted < received + 8 {
                post_recv(&mut s.qp, posted, &[sbuf.sge(0, 4096)]);
                posted += 1;
            }
            let n = s.cq.poll(&mut out).unwrap();
            assert!(out[..n].iter().all(|w| w.status.is_success()));
            received += n as u64;
        }
        s.qp.faults().drop_connection();
        let (ok, _flushed, mut c) = client.join().unwrap();
        assert!(ok >= 300, "client saw {ok} successes");
        assert_eq!(c.qp.state(), QpState::Error);
        assert_eq!(s.qp.state(), QpState::Error);
        wait_event_kind(&mut env, &mut c.qp, CmEventKind::Disconnected).unwrap();
        wait_event_kind(&mut env, &mut s.qp, CmEventKind::Disconnected).unwrap();
        // The server's outstanding receives complete (a last one may have been delivered
        // just before the teardown) or flush.
        let mut rest = 0;
        loop {
            let n = s.cq.poll(&mut out).unwrap();
            if n == 0 {
                break;
            }
            for w in &out[..n] {
                assert!(
                    w.status == WcStatus::WR_FLUSH_ERR || w.status.is_success(),
                    "{w:?}"
                );
            }
            rest += n as u64;
        }
        assert_eq!(rest, posted - received);
    }

    #[test]
    fn accepts_accept_of_abandoned_request_fails_cleanly() {
        let env = SoftEnv::new();
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4242);
        let mut l = env.server_dev().listen(addr, 4).unwrap();
        let pd = env.client_pd();
        let cq = env.client_dev().create_cq(16).unwrap();
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            opts: QpOptions::default(),
        };
        let qp = env.client_dev().connect(addr, init, &[]).unwrap();
        drop(qp);
        let req = l.poll().unwrap().unwrap();
        let spd = env.server_pd();
        let scq = env.server_dev().create_cq(16).unwrap();
        let sinit = QpInit {
            pd: &spd,
            send_cq: &scq,
            recv_cq: &scq,
            srq: None,
            opts: QpOptions::default(),
        };
        assert_eq!(
            req.accept(sinit, &[]).err().map(|e| e.errno),
            Some(errno::ENOTCONN)
        );
    }
}
