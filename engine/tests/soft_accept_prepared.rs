//! `ConnRequest::accept_prepared`: an error from `prepare` refuses the connection. (That the
//! receives posted in `prepare` are in place before the requester can send is the generic
//! conformance check `recv_posted_before_accept`, run on every provider.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::conformance::{wait_event, Env};
use rpcrdma_engine::verbs::soft::SoftEnv;
use rpcrdma_engine::verbs::{
    errno, CmEventKind, ConnRequest, Device, Listener, QpInit, QpOptions, VerbsCall, VerbsError,
};

fn no_rnr() -> QpOptions {
    QpOptions {
        rnr_retry_count: 0,
        ..QpOptions::default()
    }
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
