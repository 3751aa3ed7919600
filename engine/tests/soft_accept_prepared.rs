//! `ConnRequest::accept_prepared`: receives posted on the new QP before the accept goes out are
//! in place when the requester first sees Established, so a requester that sends at once with
//! RNR retry 0 never meets an empty receive queue; an error from `prepare` refuses the
//! connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::conformance::{wait_event, wait_wc, Buf, Env};
use rpcrdma_engine::verbs::soft::{SoftEnv, SoftProvider};
use rpcrdma_engine::verbs::{
    errno, Access, CmEventKind, ConnRequest, Device, Listener, QpInit, QpOptions, QpState,
    QueuePair, RecvWr, SendWr, VerbsCall, VerbsError, WcOpcode, WcStatus,
};

type P = SoftProvider;

fn no_rnr() -> QpOptions {
    QpOptions {
        rnr_retry_count: 0,
        ..QpOptions::default()
    }
}

#[test]
fn accepts_receives_posted_before_the_accept() {
    let mut env = SoftEnv::new();
    let addr = env.listen_addr();
    let mut l = env.server().listen(addr, 4).unwrap();
    let c_pd = Arc::new(env.client().alloc_pd().unwrap());
    let mut c_cq = env.client().create_cq(64).unwrap();
    let mut c_qp = env
        .client()
        .connect(
            addr,
            QpInit {
                pd: &c_pd,
                send_cq: &c_cq,
                recv_cq: &c_cq,
                srq: None,
                opts: no_rnr(),
            },
            &[],
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let req = loop {
        if let Some(r) = l.poll().unwrap() {
            break r;
        }
        assert!(Instant::now() < deadline, "no connect request");
        std::thread::yield_now();
    };
    let s_pd = Arc::new(env.server().alloc_pd().unwrap());
    let mut s_cq = env.server().create_cq(64).unwrap();
    let rbuf = Buf::<P>::new(&s_pd, 256, Access::LOCAL_WRITE).unwrap();
    let mut prepared = 0;
    let mut s_qp = req
        .accept_prepared(
            QpInit {
                pd: &s_pd,
                send_cq: &s_cq,
                recv_cq: &s_cq,
                srq: None,
                opts: no_rnr(),
            },
            &[],
            &mut |qp| {
                prepared += 1;
                // Nothing has reached the requester yet: it cannot send before this returns.
                assert_ne!(
                    c_qp.state(),
                    QpState::Rts,
                    "requester connected before the accept"
                );
                assert!(
                    c_qp.poll_event().unwrap().is_none(),
                    "event before the accept"
                );
                let sgl = [rbuf.sge(0, 256)];
                qp.queue_recv(&RecvWr {
                    wr_id: 77,
                    sgl: &sgl,
                })?;
                qp.flush_recv()
            },
        )
        .unwrap();
    assert_eq!(prepared, 1, "prepare runs exactly once");
    // The requester sends the moment it sees Established: the receive must already be there.
    let ev = wait_event(&mut env, &mut c_qp).unwrap();
    assert_eq!(ev.kind, CmEventKind::Established);
    let sbuf = Buf::<P>::new(&c_pd, 64, Access::LOCAL_WRITE).unwrap();
    sbuf.fill(3);
    let sgl = [sbuf.sge(0, 64)];
    c_qp.queue_send(&SendWr::send(1, &sgl)).unwrap();
    c_qp.flush_send().unwrap();
    let wc = wait_wc(&mut env, &mut c_cq).unwrap();
    assert_eq!(wc.status, WcStatus::SUCCESS, "send completed {wc:?}");
    let rc = wait_wc(&mut env, &mut s_cq).unwrap();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode),
        (77, WcStatus::SUCCESS, WcOpcode::RECV)
    );
    assert_eq!(rc.byte_len, 64);
    assert_eq!(rbuf.read(0, 64), sbuf.read(0, 64));
    let sev = wait_event(&mut env, &mut s_qp).unwrap();
    assert_eq!(sev.kind, CmEventKind::Established);
}

#[test]
fn rejects_connection_when_prepare_fails() {
    let mut env = SoftEnv::new();
    let addr = env.listen_addr();
    let mut l = env.server().listen(addr, 4).unwrap();
    let c_pd = Arc::new(env.client().alloc_pd().unwrap());
    let c_cq = env.client().create_cq(64).unwrap();
    let mut c_qp = env
        .client()
        .connect(
            addr,
            QpInit {
                pd: &c_pd,
                send_cq: &c_cq,
                recv_cq: &c_cq,
                srq: None,
                opts: no_rnr(),
            },
            &[],
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let req = loop {
        if let Some(r) = l.poll().unwrap() {
            break r;
        }
        assert!(Instant::now() < deadline, "no connect request");
        std::thread::yield_now();
    };
    let s_pd = Arc::new(env.server().alloc_pd().unwrap());
    let s_cq = env.server().create_cq(64).unwrap();
    let failure = VerbsError::new(VerbsCall::Accept, errno::EINVAL);
    let r = req.accept_prepared(
        QpInit {
            pd: &s_pd,
            send_cq: &s_cq,
            recv_cq: &s_cq,
            srq: None,
            opts: no_rnr(),
        },
        &[],
        &mut |_| Err(failure),
    );
    assert_eq!(r.err(), Some(failure), "the prepare error is returned");
    let ev = wait_event(&mut env, &mut c_qp).unwrap();
    assert_eq!(ev.kind, CmEventKind::Rejected, "the requester is refused");
}
