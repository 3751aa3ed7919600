//! The soft provider's data path allocates nothing in steady state: post (queue + flush),
//! poll, bind, local and remote invalidation, RDMA Write/Read, SEND, connection-event polling.
//! A counting global allocator counts allocations made by this test's thread while enabled.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use rpcrdma_engine::verbs::conformance::{connect, Buf};
use rpcrdma_engine::verbs::soft::{SoftEnv, SoftProvider};
use rpcrdma_engine::verbs::{
    Access, Completion, CompletionQueue, MemoryWindow, MwBind, ProtectionDomain, Provider,
    QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcFlags, WcStatus,
};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        // Relaxed: a plain counter read after the measured section on the same thread.
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

type P = SoftProvider;

fn drain(cq: &mut <P as Provider>::Cq, want: usize) -> [Completion; 8] {
    let mut out = [Completion::default(); 8];
    let mut got = 0;
    let mut spins = 0;
    while got < want {
        let n = cq.poll(&mut out[got..]).expect("poll");
        for w in &out[got..got + n] {
            assert_eq!(w.status, WcStatus::SUCCESS, "{w:?}");
        }
        got += n;
        spins += 1;
        assert!(spins < 1_000_000, "completions missing");
    }
    out
}

/// One round of every data-path operation.
#[allow(clippy::too_many_arguments)]
fn round(
    c: &mut rpcrdma_engine::verbs::conformance::Side<P>,
    s: &mut rpcrdma_engine::verbs::conformance::Side<P>,
    mw: &<P as Provider>::Mw,
    cwin: &Buf<P>,
    cmsg: &Buf<P>,
    smsg: &Buf<P>,
    starget: &Buf<P>,
    i: u64,
) {
    // Receives on both sides, batched.
    c.qp.queue_recv(&RecvWr {
        wr_id: i,
        sgl: &[cmsg.sge(0, 256)],
    })
    .unwrap();
    c.qp.flush_recv().unwrap();
    s.qp.queue_recv(&RecvWr {
        wr_id: i,
        sgl: &[smsg.sge(0, 256)],
    })
    .unwrap();
    s.qp.flush_recv().unwrap();

    // Client: bind a window over its buffer + RDMA Write + RDMA Read + SEND, one doorbell.
    let k = mw.next_rkey();
    let bind = SendOp::BindMw(MwBind {
        mw,
        mr: cwin.mr(),
        rkey: k,
        addr: cwin.addr(),
        len: 4096,
        access: Access::REMOTE_WRITE | Access::REMOTE_READ,
    });
    let sgl = [cmsg.sge(1024, 64)];
    let rsgl = [cmsg.sge(2048, 64)];
    let write = SendOp::RdmaWrite {
        remote_addr: starget.addr(),
        rkey: starget.keys().rkey,
    };
    let read = SendOp::RdmaRead {
        remote_addr: starget.addr(),
        rkey: starget.keys().rkey,
    };
    let sig = SendFlags::SIGNALED;
    c.qp.queue_send(&SendWr {
        wr_id: 1,
        op: bind,
        sgl: &[],
        flags: SendFlags::NONE,
    })
    .unwrap();
    c.qp.queue_send(&SendWr {
        wr_id: 2,
        op: write,
        sgl: &sgl,
        flags: SendFlags::NONE,
    })
    .unwrap();
    c.qp.queue_send(&SendWr {
        wr_id: 3,
        op: read,
        sgl: &rsgl,
        flags: SendFlags::NONE,
    })
    .unwrap();
    c.qp.queue_send(&SendWr {
        wr_id: 4,
        op: SendOp::Send,
        sgl: &sgl,
        flags: sig,
    })
    .unwrap();
    c.qp.flush_send().unwrap();
    drain(&mut c.cq, 1);
    drain(&mut s.cq, 1);

    // Server: write into the window, then SEND_WITH_INV of its key.
    let ssgl = [smsg.sge(0, 32)];
    let wwin = SendOp::RdmaWrite {
        remote_addr: cwin.addr() + 64,
        rkey: k,
    };
    s.qp.queue_send(&SendWr {
        wr_id: 5,
        op: wwin,
        sgl: &ssgl,
        flags: SendFlags::NONE,
    })
    .unwrap();
    let inv = SendOp::SendWithInv { rkey: k };
    s.qp.queue_send(&SendWr {
        wr_id: 6,
        op: inv,
        sgl: &ssgl,
        flags: sig,
    })
    .unwrap();
    s.qp.flush_send().unwrap();
    drain(&mut s.cq, 1);
    let r = drain(&mut c.cq, 1);
    assert!(r[0].flags.contains(WcFlags::WITH_INV) && r[0].invalidated_rkey == k);

    // Client: bind again and invalidate locally.
    let k2 = mw.next_rkey();
    let bind2 = SendOp::BindMw(MwBind {
        mw,
        mr: cwin.mr(),
        rkey: k2,
        addr: cwin.addr(),
        len: 1024,
        access: Access::REMOTE_READ,
    });
    c.qp.queue_send(&SendWr {
        wr_id: 7,
        op: bind2,
        sgl: &[],
        flags: SendFlags::NONE,
    })
    .unwrap();
    let linv = SendOp::LocalInv { rkey: k2 };
    c.qp.queue_send(&SendWr {
        wr_id: 8,
        op: linv,
        sgl: &[],
        flags: sig,
    })
    .unwrap();
    c.qp.flush_send().unwrap();
    drain(&mut c.cq, 1);

    assert!(c.qp.poll_event().unwrap().is_none());
    assert!(s.qp.poll_event().unwrap().is_none());
    let mut none = [Completion::default(); 4];
    assert_eq!(c.cq.poll(&mut none).unwrap(), 0);
}

#[test]
fn post_flush_poll_bind_invalidate_do_not_allocate() {
    let mut env = SoftEnv::new();
    let mut p = connect(&mut env).unwrap();
    let cwin = Buf::<P>::new(&p.c.pd, 4096, Access::LOCAL_WRITE | Access::MW_BIND).unwrap();
    let cmsg = Buf::<P>::new(&p.c.pd, 4096, Access::LOCAL_WRITE).unwrap();
    let smsg = Buf::<P>::new(&p.s.pd, 4096, Access::LOCAL_WRITE).unwrap();
    let starget = Buf::<P>::new(
        &p.s.pd,
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )
    .unwrap();
    let mw = p.c.pd.alloc_mw().unwrap();
    // Warm-up (first-use effects, if any, are not steady state).
    for i in 0..4 {
        round(&mut p.c, &mut p.s, &mw, &cwin, &cmsg, &smsg, &starget, i);
    }
    COUNTING.with(|c| c.set(true));
    for i in 0..500 {
        round(&mut p.c, &mut p.s, &mw, &cwin, &cmsg, &smsg, &starget, i);
    }
    COUNTING.with(|c| c.set(false));
    // Relaxed: same thread.
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        0,
        "allocations on the data path"
    );
    assert_eq!(
        p.c.qp.doorbells(),
        504 * 3,
        "one receive + two send doorbells per round"
    );
    // The counter works: an allocation while counting is seen.
    COUNTING.with(|c| c.set(true));
    let v = std::hint::black_box(vec![1u8; 16]);
    COUNTING.with(|c| c.set(false));
    drop(v);
    assert_eq!(ALLOCS.load(Ordering::Relaxed), 1);
}
