//! Tests that run without RDMA hardware (this host has no kernel RDMA stack): clean errors
//! where there is no device, and the provider's pure logic (address conversion, queue
//! accounting, batch chaining).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use super::cq::{AttachTable, QpAcct};
use super::mem::{index_of, RecvBatch};
use super::{from_sockaddr, to_sockaddr, Rdma};
use crate::verbs::{errno, Completion, Provider, RecvWr, Sge, VerbsCall, WcOpcode, WcStatus};

/// Opening a device where there is none (no kernel RDMA, or an address of no RDMA device)
/// returns a clean `OpenDevice` error, never a panic.
#[test]
fn rejects_open_without_device() {
    // 192.0.2.1 (TEST-NET-1) is never a local address.
    let err = Rdma::open(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))).unwrap_err();
    assert_eq!(err.call, VerbsCall::OpenDevice);
    assert!(
        [
            errno::ENODEV,
            errno::EADDRNOTAVAIL,
            38, /* ENOSYS */
            errno::EINVAL
        ]
        .contains(&err.errno),
        "unexpected errno {}",
        err.errno
    );
}

/// Socket addresses survive the trip through `sockaddr_in` / `sockaddr_in6`, port in network
/// order.
#[test]
fn accepts_sockaddr_roundtrip() {
    for a in ["10.0.3.2:20049", "[fe80::1%3]:41000", "0.0.0.0:0"] {
        let addr: SocketAddr = a.parse().unwrap();
        let ss = to_sockaddr(addr);
        // SAFETY: ss is a sockaddr_storage holding the family written by to_sockaddr.
        let back = unsafe { from_sockaddr((&ss as *const libc::sockaddr_storage).cast()) };
        assert_eq!(back, Some(addr));
    }
    let ss = to_sockaddr("10.0.3.2:20049".parse().unwrap());
    // SAFETY: sockaddr_in layout, written above.
    let sin = unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
    assert_eq!(sin.sin_port.to_ne_bytes(), [0x4e, 0x51]); // 20049 = 0x4e51, big-endian
                                                          // SAFETY: a null pointer is allowed.
    assert_eq!(unsafe { from_sockaddr(core::ptr::null()) }, None);
}

/// A signaled send completion retires its WR and every unsignaled WR posted before it; later
/// WRs stay outstanding.
#[test]
fn accepts_signaled_completion_retiring_earlier_unsignaled() {
    let acct = QpAcct::new(core::ptr::null_mut(), 7, 4, None, 3);
    // Posted: 3 unsignaled, 1 signaled (mark 4), 1 unsignaled, 1 signaled (mark 6).
    acct.push_mark(4);
    acct.push_mark(6);
    assert_eq!(acct.sq_completed(), 0);
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 4);
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 6);
    // A completion without a mark (cannot happen) changes nothing.
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 6);
}

/// Marks of WRs the device refused are rolled back, so a later completion retires only what was
/// posted.
#[test]
fn rejects_marks_of_unposted_wrs() {
    let acct = QpAcct::new(core::ptr::null_mut(), 7, 4, None, 3);
    acct.push_mark(1);
    acct.push_mark(2);
    acct.push_mark(3);
    acct.rollback_marks(2);
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 1);
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 1, "a rolled-back mark was consumed");
    // Rolling back more than is there is clamped.
    acct.rollback_marks(10);
    acct.push_mark(9);
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 9);
}

/// The mark ring never holds more than the send depth.
#[test]
fn rejects_marks_beyond_depth() {
    let acct = QpAcct::new(core::ptr::null_mut(), 7, 2, None, 3);
    acct.push_mark(1);
    acct.push_mark(2);
    acct.push_mark(3); // dropped: ring full
    acct.test_send_completion();
    acct.test_send_completion();
    acct.test_send_completion();
    assert_eq!(acct.sq_completed(), 2);
}

/// Receive batches copy the SGEs, chain the WRs through `next`, check SGE count and capacity,
/// and count what a partial post took.
#[test]
fn accepts_recv_batch_chaining_and_limits() {
    let mut b = RecvBatch::new(3, 2);
    let sgl = [Sge {
        addr: 0x1000,
        len: 64,
        lkey: 7,
    }];
    let three = [sgl[0]; 3];
    assert_eq!(
        b.push(
            &RecvWr {
                wr_id: 1,
                sgl: &three
            },
            VerbsCall::PostRecv
        )
        .unwrap_err()
        .errno,
        errno::EINVAL
    );
    for i in 0..3 {
        b.push(
            &RecvWr {
                wr_id: i,
                sgl: &sgl,
            },
            VerbsCall::PostRecv,
        )
        .unwrap();
    }
    assert_eq!(
        b.push(
            &RecvWr {
                wr_id: 9,
                sgl: &sgl
            },
            VerbsCall::PostRecv
        )
        .unwrap_err()
        .errno,
        errno::ENOMEM
    );
    let head = b.link();
    // SAFETY: head points to the batch's first WR; the chain has 3 WRs ending in null.
    unsafe {
        let mut p = head;
        let mut ids = Vec::new();
        while !p.is_null() {
            ids.push((*p).wr_id);
            assert_eq!((*p).num_sge, 1);
            assert_eq!((*(*p).sg_list).addr, 0x1000);
            assert_eq!((*(*p).sg_list).lkey, 7);
            p = (*p).next;
        }
        assert_eq!(ids, [0, 1, 2]);
        // The device refused the second WR: one was posted.
        assert_eq!(b.finish(false, head.add(1)), 1);
    }
    assert_eq!(b.len(), 0);
}

/// `index_of` clamps pointers outside the batch.
#[test]
fn rejects_bad_wr_pointer_outside_batch() {
    let a = [0u64; 4];
    let base = a.as_ptr();
    assert_eq!(index_of(base, core::ptr::null(), 4), 0);
    // SAFETY: in bounds of `a`.
    assert_eq!(index_of(base, unsafe { base.add(2) }, 4), 2);
    assert_eq!(index_of(base, base.wrapping_add(100), 4), 4);
}

fn recv_wc(qp_num: u32) -> Completion {
    Completion {
        qp_num,
        opcode: WcOpcode::RECV,
        ..Completion::default()
    }
}

/// The CQ's table of attached QPs stays sorted, ignores double attaches and unknown QPs, and
/// charges each completion to its QP.
#[test]
fn accepts_attach_table_lookup_and_detach() {
    let t = AttachTable::new();
    let accts: Vec<Arc<QpAcct>> = [5u32, 1, 3]
        .iter()
        .map(|&n| Arc::new(QpAcct::new(core::ptr::null_mut(), n, 4, None, 3)))
        .collect();
    for a in &accts {
        t.attach(a);
    }
    t.attach(&accts[0]);
    assert_eq!(
        t.read(|q| q.iter().map(|a| a.qp_num).collect::<Vec<_>>()),
        [1, 3, 5]
    );
    t.account(&[recv_wc(5), recv_wc(5), recv_wc(3), recv_wc(99)]);
    assert_eq!(accts[0].rq_completed(), 2);
    assert_eq!(accts[2].rq_completed(), 1);
    assert_eq!(accts[1].rq_completed(), 0);
    t.detach(&accts[2]);
    t.detach(&accts[2]);
    assert_eq!(
        t.read(|q| q.iter().map(|a| a.qp_num).collect::<Vec<_>>()),
        [1, 5]
    );
    t.account(&[recv_wc(3)]);
    assert_eq!(
        accts[2].rq_completed(),
        1,
        "a detached QP is no longer charged"
    );
    // An error completion stops the QP's accounting.
    t.account(&[Completion {
        status: WcStatus::WR_FLUSH_ERR,
        ..recv_wc(1)
    }]);
    assert!(accts[1].errored());
}

/// A poller thread charging completions while another thread attaches and detaches QPs: no
/// completion of the QP that stays attached is lost, and nothing is freed under the reader
/// (run under Miri for the memory-model check).
#[test]
fn accepts_attach_table_concurrent_poll_and_edit() {
    let rounds: u64 = if cfg!(miri) { 50 } else { 20_000 };
    let t = Arc::new(AttachTable::new());
    let stay = Arc::new(QpAcct::new(core::ptr::null_mut(), 1000, 4, None, 3));
    t.attach(&stay);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let editor = {
        let (t, stop) = (Arc::clone(&t), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u32;
            // Acquire: pairs with the Release store after the poller's last pass.
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let a = Arc::new(QpAcct::new(core::ptr::null_mut(), n % 1000, 4, None, 3));
                t.attach(&a);
                t.detach(&a);
                n = n.wrapping_add(1);
                if cfg!(miri) && n > 20 {
                    break;
                }
            }
        })
    };
    for i in 0..rounds {
        t.account(&[recv_wc(1000), recv_wc((i % 1000) as u32)]);
    }
    // Release: pairs with the Acquire load in the editor loop.
    stop.store(true, std::sync::atomic::Ordering::Release);
    editor.join().unwrap();
    assert_eq!(stay.rq_completed(), rounds);
    assert_eq!(t.read(|q| q.len()), 1);
}

/// The conformance suite's environment over one rdma device (both sides on it).
#[cfg(feature = "conformance")]
struct OneDevice {
    dev: super::RdmaDevice,
    ip: IpAddr,
    port: u16,
}

#[cfg(feature = "conformance")]
impl crate::verbs::conformance::Env for OneDevice {
    type P = Rdma;

    fn client(&self) -> &super::RdmaDevice {
        &self.dev
    }

    fn server(&self) -> &super::RdmaDevice {
        &self.dev
    }

    fn listen_addr(&mut self) -> SocketAddr {
        self.port += 1;
        SocketAddr::new(self.ip, self.port)
    }

    fn idle(&mut self) {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// A completion wakes a thread sleeping in `poll(2)` on the CQ's completion channel, once the
/// CQ is armed, and only then (`conformance::completion_wakes_sleeper`). Needs an RDMA device:
/// it runs where `RPCRDMA_TEST_RDMA_IP` names the address of one (in the test VM: rxe0,
/// 10.0.2.15, docs/vm.md) and says it is skipped elsewhere.
#[cfg(feature = "conformance")]
#[test]
fn accepts_completion_waking_a_channel_sleeper() {
    let Some(ip) = std::env::var("RPCRDMA_TEST_RDMA_IP")
        .ok()
        .and_then(|v| v.parse::<IpAddr>().ok())
    else {
        eprintln!("skipped: RPCRDMA_TEST_RDMA_IP names no RDMA device address");
        return;
    };
    let dev = Rdma::open(ip).expect("open the device");
    let mut env = OneDevice {
        dev,
        ip,
        port: 41000 + (std::process::id() % 1000) as u16 * 16,
    };
    crate::verbs::conformance::completion_wakes_sleeper(&mut env).expect("wake-up");
}
