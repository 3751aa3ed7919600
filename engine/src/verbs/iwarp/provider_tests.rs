//! The provider against a raw iWARP peer (a bare [`Endpoint`] writing RDMAP messages by hand):
//! CRC32c is turned on for a peer that did not ask for it, and each fault in what the peer
//! sends is answered with the Terminate code RFC 5040 / RFC 5041 name for it, the provider's
//! QP ending in ERROR with `Disconnected` and the target memory untouched. Memory windows and
//! Send with Invalidate: a window serves only the peer of the QP it was bound on, a Send with
//! Invalidate of it through that QP invalidates it, any other is refused with "STag cannot be
//! invalidated" (remote operation error for a region's STag, remote protection error for a
//! window bound to another QP) and changes nothing.

use super::*;
use crate::verbs::iwarp::ddp;
use crate::verbs::iwarp::rdmap::{self, Message, ReadRequest};
use crate::verbs::iwarp::socket::Closed;
use crate::verbs::iwarp::term::{TermCode, LAYER_DDP, LAYER_RDMAP};
use crate::verbs::{
    CmEventKind, Completion, CompletionQueue, QpOptions, QpState, QueuePair, Registrar,
};
use std::net::Ipv4Addr;
use std::time::Duration;
use std::time::Instant;

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// A provider QP accepted from `raw`, with its CQ, PD and a registered 4 KiB target.
struct Served {
    qp: crate::verbs::iwarp::IwarpQp,
    cq: IwarpCq,
    target: Vec<u8>,
    keys: Keys,
    _mr: Region<MrHandle>,
    _pd: IwarpPd,
}

fn until<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Connects a raw endpoint (asking for CRCs or not) to the provider listener `l` and accepts
/// it on a QP of `pd` completing into `cq`.
fn accept_raw(
    l: &mut IwarpListener,
    want_crc: bool,
    pd: &IwarpPd,
    cq: &IwarpCq,
) -> (Endpoint, crate::verbs::iwarp::IwarpQp) {
    let mut cfg = endpoint_config(4, 4);
    cfg.handshake.want_crc = want_crc;
    let mut raw = Endpoint::connect(l.local_addr(), now_ns(), cfg, b"raw").expect("connect");
    let req = until(|| {
        raw.poll(now_ns());
        l.poll().expect("listener poll")
    });
    assert_eq!(req.private_data(), b"raw");
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        opts: QpOptions::default(),
    };
    let qp = req.accept(init, b"ok").expect("accept");
    until(|| (raw.poll(now_ns()) == State::Established).then_some(()));
    assert_eq!(raw.peer_private_data(), b"ok");
    (raw, qp)
}

/// A registered 4 KiB target in `pd`.
fn target_in(pd: &IwarpPd, access: Access) -> (Vec<u8>, Keys, Region<MrHandle>) {
    let mut target = vec![0u8; 4096];
    // SAFETY: the caller keeps `target` (its heap buffer does not move with the `Vec`) until
    // the registration is dropped, and touches it only while no placement runs (single
    // thread, between polls).
    let (mr, keys) =
        unsafe { pd.register(target.as_mut_ptr(), target.len(), access) }.expect("register");
    (target, keys, mr)
}

/// Connects a raw endpoint (asking for CRCs or not) to a provider listener and accepts it.
fn serve(want_crc: bool, access: Access) -> (Endpoint, Served) {
    let dev = IwarpProvider::open(lo()).expect("open");
    let mut l = dev.listen(SocketAddr::new(lo(), 0), 1).expect("listen");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(16).expect("cq");
    let (target, keys, mr) = target_in(&pd, access);
    let (raw, qp) = accept_raw(&mut l, want_crc, &pd, &cq);
    let served = Served {
        qp,
        cq,
        target,
        keys,
        _mr: mr,
        _pd: pd,
    };
    (raw, served)
}

/// Sends `msg` from the raw peer; returns the Terminate code the provider answered with.
fn terminate_code_for(raw: &mut Endpoint, s: &mut Served, msg: &Message<'_>) -> TermCode {
    raw.queue_message(msg).expect("queue");
    let mut wcs = [Completion::default(); 4];
    let code = until(|| {
        raw.poll(now_ns());
        let _ = s.cq.poll(&mut wcs);
        match raw.recv(|_| {}) {
            Err(Closed::PeerTerminated(code)) => Some(code),
            Err(other) => panic!("stream ended without a Terminate: {other:?}"),
            Ok(_) => None,
        }
    });
    // After the accept's Established.
    until(|| {
        let ev = s.qp.poll_event().expect("event");
        ev.filter(|e| e.kind == CmEventKind::Disconnected)
    });
    assert_eq!(s.qp.state(), QpState::Error);
    assert!(s.target.iter().all(|&b| b == 0), "target changed");
    code
}

#[test]
fn accepts_crc_turned_on_for_a_peer_that_did_not_ask() {
    let (raw, _s) = serve(false, Access::LOCAL_WRITE);
    assert!(raw.crc(), "the provider's Reply sets C: CRCs both ways");
    let (raw, _s) = serve(true, Access::LOCAL_WRITE);
    assert!(raw.crc());
}

#[test]
fn rejects_faulty_writes_with_their_terminate_codes() {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let tagged = |ecode| TermCode::new(LAYER_DDP, ddp::ETYPE_TAGGED, ecode);
    let rights = TermCode::new(
        LAYER_RDMAP,
        rdmap::ETYPE_REMOTE_PROTECTION,
        rdmap::ECODE_ACCESS_RIGHTS,
    );
    // (region access, STag change, offset, expected code)
    let cases = [
        (rw, 0x100, 0, tagged(ddp::ECODE_T_INVALID_STAG)),
        (rw, 0, 4090, tagged(ddp::ECODE_T_BASE_BOUNDS)),
        (Access::LOCAL_WRITE, 0, 0, rights),
    ];
    for (access, flip, off, want) in cases {
        let (mut raw, mut s) = serve(true, access);
        let msg = Message::Tagged {
            read_response: false,
            last: true,
            stag: s.keys.rkey ^ flip,
            to: s.target.as_ptr() as u64 + off,
            payload: &[0x5a; 16],
        };
        assert_eq!(
            terminate_code_for(&mut raw, &mut s, &msg),
            want,
            "case {flip:#x}/{off}"
        );
    }
}

#[test]
fn rejects_read_request_out_of_bounds_with_its_terminate_code() {
    let (mut raw, mut s) = serve(true, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let msg = Message::ReadRequest(ReadRequest {
        msn: 1,
        sink_stag: 0x1234_5600,
        sink_to: 0,
        size: 200,
        src_stag: s.keys.rkey,
        src_to: s.target.as_ptr() as u64 + 4000,
    });
    let want = TermCode::new(
        LAYER_RDMAP,
        rdmap::ETYPE_REMOTE_PROTECTION,
        rdmap::ECODE_BASE_BOUNDS,
    );
    assert_eq!(terminate_code_for(&mut raw, &mut s, &msg), want);
}

#[test]
fn rejects_send_without_a_receive_with_its_terminate_code() {
    let (mut raw, mut s) = serve(true, Access::LOCAL_WRITE);
    let msg = Message::Send {
        solicited: false,
        invalidate: None,
        last: true,
        msn: 1,
        mo: 0,
        payload: b"nobody listens",
    };
    let want = TermCode::new(LAYER_DDP, ddp::ETYPE_UNTAGGED, ddp::ECODE_UT_MSN_NO_BUFFER);
    assert_eq!(terminate_code_for(&mut raw, &mut s, &msg), want);
}

#[test]
fn rejects_send_out_of_msn_order_with_its_terminate_code() {
    let (mut raw, mut s) = serve(true, Access::LOCAL_WRITE);
    let sgl = [crate::verbs::Sge {
        addr: s.target.as_ptr() as u64,
        len: 64,
        lkey: s.keys.lkey,
    }];
    s.qp.queue_recv(&crate::verbs::RecvWr {
        wr_id: 1,
        sgl: &sgl,
    })
    .expect("recv");
    s.qp.flush_recv().expect("flush");
    let msg = Message::Send {
        solicited: false,
        invalidate: None,
        last: true,
        msn: 5,
        mo: 0,
        payload: b"out of order",
    };
    let want = TermCode::new(LAYER_DDP, ddp::ETYPE_UNTAGGED, ddp::ECODE_UT_MSN_RANGE);
    assert_eq!(terminate_code_for(&mut raw, &mut s, &msg), want);
}

/// Binds a window over the whole `target` (registered as `mr` with `MW_BIND`) on `qp`, with
/// `access`; returns the window and its STag once the bind completed on `cq`.
fn bind_on(
    qp: &mut crate::verbs::iwarp::IwarpQp,
    cq: &mut IwarpCq,
    (pd, mr, target): (&IwarpPd, &Region<MrHandle>, &[u8]),
    access: Access,
) -> (IwarpMw, u32) {
    use crate::verbs::{MemoryWindow, MwBind, SendFlags, SendOp, SendWr, WcOpcode};
    let mw = pd.alloc_mw().expect("alloc_mw");
    let rkey = mw.next_rkey();
    let wr = SendWr::<IwarpProvider> {
        wr_id: 0xb1,
        op: SendOp::BindMw(MwBind {
            mw: &mw,
            mr,
            rkey,
            addr: target.as_ptr() as u64,
            len: target.len() as u64,
            access,
        }),
        sgl: &[],
        flags: SendFlags::SIGNALED,
    };
    qp.queue_send(&wr).expect("bind");
    qp.flush_send().expect("flush");
    let mut wcs = [Completion::default(); 4];
    let n = until(|| cq.poll(&mut wcs).ok().filter(|&n| n > 0));
    assert_eq!(n, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (0xb1, crate::verbs::WcStatus::SUCCESS, WcOpcode::BIND_MW)
    );
    assert_eq!(mw.rkey(), rkey);
    (mw, rkey)
}

/// Binds a window over the whole target of `s` (registered with `MW_BIND`) on the served QP.
fn bind_window(s: &mut Served, access: Access) -> (IwarpMw, u32) {
    bind_on(&mut s.qp, &mut s.cq, (&s._pd, &s._mr, &s.target), access)
}

/// A receive of 64 octets posted on `qp` into a buffer of its own registered in `pd`; returns
/// the buffer (kept registered by the returned region).
fn post_receive_on(
    qp: &mut crate::verbs::iwarp::IwarpQp,
    pd: &IwarpPd,
) -> (Box<[u8; 64]>, Region<MrHandle>) {
    let mut buf = Box::new([0u8; 64]);
    // SAFETY: the buffer is boxed and returned with its registration; the caller keeps both
    // until the test ends.
    let (mr, keys) =
        unsafe { pd.register(buf.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.expect("register");
    let sgl = [crate::verbs::Sge {
        addr: buf.as_ptr() as u64,
        len: 64,
        lkey: keys.lkey,
    }];
    qp.queue_recv(&crate::verbs::RecvWr {
        wr_id: 0x77,
        sgl: &sgl,
    })
    .expect("recv");
    qp.flush_recv().expect("flush");
    (buf, mr)
}

/// [`post_receive_on`] the served QP.
fn post_receive(s: &mut Served) -> (Box<[u8; 64]>, Region<MrHandle>) {
    post_receive_on(&mut s.qp, &s._pd)
}

fn send_with_inv(stag: u32, payload: &[u8]) -> Message<'_> {
    Message::Send {
        solicited: false,
        invalidate: Some(stag),
        last: true,
        msn: 1,
        mo: 0,
        payload,
    }
}

#[test]
fn accepts_send_with_invalidate_of_a_window_bound_to_the_qp() {
    let (mut raw, mut s) = serve(true, Access::LOCAL_WRITE | Access::MW_BIND);
    let (_mw, stag) = bind_window(&mut s, Access::REMOTE_WRITE);
    let (buf, _rmr) = post_receive(&mut s);
    // The window works before the invalidation.
    let to = s.target.as_ptr() as u64;
    let write = |stag| Message::Tagged {
        read_response: false,
        last: true,
        stag,
        to,
        payload: &[0x5a; 16],
    };
    raw.queue_message(&write(stag)).expect("queue");
    raw.queue_message(&send_with_inv(stag, b"done"))
        .expect("queue");
    let mut wcs = [Completion::default(); 4];
    until(|| {
        raw.poll(now_ns());
        s.cq.poll(&mut wcs).ok().filter(|&n| n > 0)
    });
    let wc = wcs[0];
    assert_eq!((wc.wr_id, wc.byte_len), (0x77, 4));
    assert!(wc.status.is_success(), "{wc:?}");
    assert!(wc.flags.contains(crate::verbs::WcFlags::WITH_INV));
    assert_eq!(wc.invalidated_rkey, stag);
    assert_eq!(&buf[..4], b"done");
    assert_eq!(&s.target[..16], &[0x5a; 16]);
    // The STag is dead: a Write through it is refused with "invalid STag".
    s.target[..16].fill(0);
    let want = TermCode::new(LAYER_DDP, ddp::ETYPE_TAGGED, ddp::ECODE_T_INVALID_STAG);
    assert_eq!(terminate_code_for(&mut raw, &mut s, &write(stag)), want);
}

#[test]
fn rejects_send_with_invalidate_of_a_region_stag_with_its_terminate_code() {
    let (mut raw, mut s) = serve(true, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_buf, _rmr) = post_receive(&mut s);
    let msg = send_with_inv(s.keys.rkey, b"invalidate a region");
    let want = TermCode::new(
        LAYER_RDMAP,
        rdmap::ETYPE_REMOTE_OPERATION,
        rdmap::ECODE_CANNOT_INVALIDATE,
    );
    raw.queue_message(&msg).expect("queue");
    let mut wcs = [Completion::default(); 4];
    until(|| {
        raw.poll(now_ns());
        s.cq.poll(&mut wcs).ok().filter(|&n| n > 0)
    });
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (0x77, crate::verbs::WcStatus::REM_INV_REQ_ERR)
    );
    let code = until(|| {
        raw.poll(now_ns());
        match raw.recv(|_| {}) {
            Err(Closed::PeerTerminated(code)) => Some(code),
            Err(other) => panic!("stream ended without a Terminate: {other:?}"),
            Ok(_) => None,
        }
    });
    assert_eq!(code, want);
    // The region still works for the QP's own use: it was not invalidated.
    assert!(lock(&s._pd.dev.mrs).map.contains_key(&s.keys.rkey));
}

/// Waits for the Terminate `raw` receives; returns its code.
fn peer_terminate(raw: &mut Endpoint, cq: &mut IwarpCq) -> TermCode {
    let mut wcs = [Completion::default(); 4];
    until(|| {
        raw.poll(now_ns());
        let _ = cq.poll(&mut wcs);
        match raw.recv(|_| {}) {
            Err(Closed::PeerTerminated(code)) => Some(code),
            Err(other) => panic!("stream ended without a Terminate: {other:?}"),
            Ok(_) => None,
        }
    })
}

/// Two provider QPs `a` and `b` of one PD and one CQ, with a 4 KiB target (`MW_BIND`) and a
/// window bound over it on `a`.
struct TwoServed {
    a: crate::verbs::iwarp::IwarpQp,
    b: crate::verbs::iwarp::IwarpQp,
    cq: IwarpCq,
    _mw: IwarpMw,
    _mr: Region<MrHandle>,
    target: Vec<u8>,
    pd: IwarpPd,
}

/// Two raw peers accepted on the QPs of a [`TwoServed`]; returns the peers (of `a`, of `b`),
/// the QPs' parts and the window's STag.
fn serve_two() -> (Endpoint, Endpoint, TwoServed, u32) {
    let dev = IwarpProvider::open(lo()).expect("open");
    let mut l = dev.listen(SocketAddr::new(lo(), 0), 2).expect("listen");
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(16).expect("cq");
    let (target, _, mr) = target_in(&pd, Access::LOCAL_WRITE | Access::MW_BIND);
    let (raw_a, mut a) = accept_raw(&mut l, true, &pd, &cq);
    let (raw_b, b) = accept_raw(&mut l, true, &pd, &cq);
    let (mw, stag) = bind_on(&mut a, &mut cq, (&pd, &mr, &target), Access::REMOTE_WRITE);
    let s = TwoServed {
        a,
        b,
        cq,
        _mw: mw,
        _mr: mr,
        target,
        pd,
    };
    (raw_a, raw_b, s, stag)
}

fn write_at(stag: u32, to: u64) -> Message<'static> {
    Message::Tagged {
        read_response: false,
        last: true,
        stag,
        to,
        payload: &[0x5a; 16],
    }
}

#[test]
fn rejects_a_write_through_a_window_bound_to_another_qp_with_its_terminate_code() {
    let (mut raw_a, mut raw_b, mut s, stag) = serve_two();
    let to = s.target.as_ptr() as u64;
    raw_b.queue_message(&write_at(stag, to)).expect("queue");
    let want = TermCode::new(LAYER_DDP, ddp::ETYPE_TAGGED, ddp::ECODE_T_STAG_NOT_ASSOC);
    assert_eq!(peer_terminate(&mut raw_b, &mut s.cq), want);
    assert_eq!(s.b.state(), QpState::Error);
    assert!(s.target.iter().all(|&b| b == 0), "target changed");
    // The window still serves the QP it is bound to.
    raw_a.queue_message(&write_at(stag, to)).expect("queue");
    let mut wcs = [Completion::default(); 4];
    until(|| {
        raw_a.poll(now_ns());
        let _ = s.cq.poll(&mut wcs);
        (s.target[..16] == [0x5a; 16]).then_some(())
    });
    assert_eq!(s.a.state(), QpState::Rts);
}

#[test]
fn rejects_send_with_invalidate_of_a_window_bound_to_another_qp_with_its_terminate_code() {
    let (mut raw_a, mut raw_b, mut s, stag) = serve_two();
    let (_buf, _rmr) = post_receive_on(&mut s.b, &s.pd);
    raw_b
        .queue_message(&send_with_inv(stag, b"not yours"))
        .expect("queue");
    let want = TermCode::new(
        LAYER_RDMAP,
        rdmap::ETYPE_REMOTE_PROTECTION,
        rdmap::ECODE_CANNOT_INVALIDATE,
    );
    let mut wcs = [Completion::default(); 4];
    let n = until(|| {
        raw_b.poll(now_ns());
        s.cq.poll(&mut wcs).ok().filter(|&n| n > 0)
    });
    assert_eq!(n, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].qp_num),
        (0x77, crate::verbs::WcStatus::REM_INV_REQ_ERR, s.b.qp_num())
    );
    assert_eq!(peer_terminate(&mut raw_b, &mut s.cq), want);
    // Not invalidated: the window still serves the QP it is bound to.
    let to = s.target.as_ptr() as u64;
    raw_a.queue_message(&write_at(stag, to)).expect("queue");
    until(|| {
        raw_a.poll(now_ns());
        let _ = s.cq.poll(&mut wcs);
        (s.target[..16] == [0x5a; 16]).then_some(())
    });
    assert_eq!(s.a.state(), QpState::Rts);
}
