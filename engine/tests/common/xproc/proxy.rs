//! The provider the checks see in a cross-process run: every object is a handle of an object
//! owned by a device process (a [`super::host`]), and every verbs call is one request on that
//! process's control channel, carried out there by the iWARP provider and answered with its
//! result. Only the check's logic runs here; the QPs, their sockets, placement and completions
//! are the device processes'.
//!
//! Normal operation: a call sends its request and waits for the reply. A CQ's in-process
//! notice runs here once per notice the device process counted. `accept_prepared` runs its
//! `prepare` here against the new QP, which the device process holds back until it is told
//! `PREPARED`. Recovery: a device process that fails closes its channel; the next call panics
//! with that, failing the test. Dropping an object frees it in its process.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma_engine::verbs::{
    Access, CmEvent, Completion, CompletionQueue, ConnRequest, CqNotify, Device, DeviceCaps, Keys,
    Listener, MemoryRegion, MemoryWindow, ProtectionDomain, Provider, QpInit, QpOptions, QpState,
    QueuePair, RecvWr, Registrar, SendOp, SendWr, SharedReceiveQueue, VerbsError,
};

use super::wire::{self, op, reply, send_op, Dec, Enc};

/// The control channel of one device process, and the process.
pub struct Ctl {
    stream: Mutex<UnixStream>,
    child: Mutex<Child>,
}

impl Ctl {
    pub fn new(stream: UnixStream, child: Child) -> Ctl {
        Ctl {
            stream: Mutex::new(stream),
            child: Mutex::new(child),
        }
    }

    /// Sends `req` and gives the reply (its code, then the rest).
    fn raw(&self, req: &Enc) -> (u8, Vec<u8>) {
        let mut s = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        let r = wire::send(&mut *s, &req.0).and_then(|()| wire::recv(&mut *s));
        let mut f = r.unwrap_or_else(|e| panic!("the device process failed: {e}"));
        assert!(!f.is_empty(), "an empty reply");
        let code = f.remove(0);
        (code, f)
    }

    /// Sends `req`; its results, or the error the device process reported.
    fn call(&self, req: &Enc) -> Result<Vec<u8>, VerbsError> {
        match self.raw(req) {
            (reply::OK, rest) => Ok(rest),
            (reply::ERR, rest) => Err(Dec::new(&rest).err()),
            (code, _) => panic!("unexpected reply {code}"),
        }
    }

    /// A call that cannot fail on the provider's side.
    fn get(&self, req: &Enc) -> Vec<u8> {
        self.call(req).expect("a call that cannot fail failed")
    }
}

impl Drop for Ctl {
    fn drop(&mut self) {
        // Closing the channel ends the device process; wait for it a little, then kill it.
        let s = self.stream.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = s.shutdown(std::net::Shutdown::Both);
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let end = Instant::now() + Duration::from_secs(5);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A request to the object `h`.
fn req(code: u8, h: u32) -> Enc {
    let mut e = Enc::op(code);
    e.u32(h);
    e
}

/// A handle of an object in a device process; dropping it frees the object there.
pub struct Obj {
    ctl: Arc<Ctl>,
    h: u32,
}

impl Obj {
    fn new(ctl: &Arc<Ctl>, d: &mut Dec<'_>) -> Obj {
        Obj {
            ctl: Arc::clone(ctl),
            h: d.u32(),
        }
    }

    fn call(&self, code: u8) -> Result<Vec<u8>, VerbsError> {
        self.ctl.call(&req(code, self.h))
    }

    fn get(&self, code: u8) -> Vec<u8> {
        self.ctl.get(&req(code, self.h))
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        let _ = self.ctl.raw(&req(op::FREE, self.h));
    }
}

/// The provider whose objects live in device processes.
pub struct Remote;

impl Provider for Remote {
    const NAME: &'static str = "iwarp-processes";
    type Device = RDevice;
    type Pd = RPd;
    type Mr = RMr;
    type Mw = RMw;
    type Cq = RCq;
    type Srq = RSrq;
    type Qp = RQp;
    type Listener = RListener;
    type ConnRequest = RConnRequest;

    fn open(local: IpAddr) -> Result<RDevice, VerbsError> {
        let ctl = Arc::new(super::spawn_host(local));
        let caps = Dec::new(&ctl.get(&req(op::CAPS, 0))).caps();
        Ok(RDevice {
            ctl,
            caps,
            ip: local,
        })
    }
}

/// A device: the one of its process.
pub struct RDevice {
    ctl: Arc<Ctl>,
    caps: DeviceCaps,
    ip: IpAddr,
}

/// Adds `init`'s objects and options to a request.
fn put_init(e: &mut Enc, init: &QpInit<'_, Remote>) {
    e.u32(init.pd.0.h)
        .u32(init.send_cq.o.h)
        .u32(init.recv_cq.o.h)
        .u32(init.srq.map_or(0, |s| s.0.h))
        .opts(&init.opts);
}

impl Device<Remote> for RDevice {
    fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    fn local_ip(&self) -> IpAddr {
        self.ip
    }

    fn alloc_pd(&self) -> Result<RPd, VerbsError> {
        let r = self.ctl.call(&req(op::ALLOC_PD, 0))?;
        Ok(RPd(Obj::new(&self.ctl, &mut Dec::new(&r))))
    }

    fn create_cq(&self, depth: u32) -> Result<RCq, VerbsError> {
        let mut e = req(op::CREATE_CQ, 0);
        e.u32(depth);
        let r = self.ctl.call(&e)?;
        Ok(RCq {
            o: Obj::new(&self.ctl, &mut Dec::new(&r)),
            depth,
            notify: None,
        })
    }

    fn create_srq(&self, pd: &RPd, max_wr: u32, max_sge: u32) -> Result<RSrq, VerbsError> {
        let mut e = req(op::CREATE_SRQ, pd.0.h);
        e.u32(max_wr).u32(max_sge);
        let r = self.ctl.call(&e)?;
        Ok(RSrq(Obj::new(&self.ctl, &mut Dec::new(&r))))
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<RListener, VerbsError> {
        let mut e = req(op::LISTEN, 0);
        e.addr(addr).u32(backlog);
        let r = self.ctl.call(&e)?;
        let mut d = Dec::new(&r);
        Ok(RListener {
            o: Obj::new(&self.ctl, &mut d),
            local: d.addr(),
        })
    }

    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInit<'_, Remote>,
        private_data: &[u8],
    ) -> Result<RQp, VerbsError> {
        let mut e = req(op::CONNECT, 0);
        e.addr(addr);
        put_init(&mut e, &init);
        e.bytes(private_data);
        let r = self.ctl.call(&e)?;
        Ok(RQp(Obj::new(&self.ctl, &mut Dec::new(&r))))
    }
}

/// A protection domain.
pub struct RPd(Obj);

impl Registrar for RPd {
    type Registration = RMr;
    type Error = VerbsError;

    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<(RMr, Keys), VerbsError> {
        // The device process registers the same address: the suite's buffers are in memory
        // mapped at the same place in every process of the run (super::Arena).
        let mut e = req(op::REGISTER, self.0.h);
        e.u64(addr as u64).u64(len as u64).u32(access.0);
        let r = self.0.ctl.call(&e)?;
        let mut d = Dec::new(&r);
        let o = Obj::new(&self.0.ctl, &mut d);
        let keys = d.keys();
        let mr = RMr {
            _o: o,
            keys,
            addr: addr as u64,
            len: len as u64,
            access,
        };
        Ok((mr, keys))
    }
}

impl ProtectionDomain<Remote> for RPd {
    fn alloc_mw(&self) -> Result<RMw, VerbsError> {
        let r = self.0.call(op::ALLOC_MW)?;
        Ok(RMw(Obj::new(&self.0.ctl, &mut Dec::new(&r))))
    }
}

/// A memory registration (its keys, range and rights kept here: they never change).
pub struct RMr {
    _o: Obj,
    keys: Keys,
    addr: u64,
    len: u64,
    access: Access,
}

impl MemoryRegion for RMr {
    fn keys(&self) -> Keys {
        self.keys
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn access(&self) -> Access {
        self.access
    }
}

/// A memory window (its key asked of its process: binds change it).
pub struct RMw(Obj);

impl MemoryWindow for RMw {
    fn rkey(&self) -> u32 {
        Dec::new(&self.0.get(op::MW_RKEY)).u32()
    }
}

/// A completion queue.
pub struct RCq {
    o: Obj,
    depth: u32,
    notify: Option<CqNotify>,
}

impl CompletionQueue for RCq {
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, VerbsError> {
        let mut e = req(op::CQ_POLL, self.o.h);
        e.u32(out.len() as u32);
        let r = self.o.ctl.call(&e)?;
        let mut d = Dec::new(&r);
        let notices = d.u64();
        let n = d.u32() as usize;
        for slot in out.iter_mut().take(n) {
            *slot = d.wc();
        }
        if let Some(f) = &self.notify {
            (0..notices).for_each(|_| f());
        }
        Ok(n)
    }

    fn depth(&self) -> u32 {
        self.depth
    }

    fn set_notify(&mut self, notify: CqNotify) -> bool {
        let set = Dec::new(&self.o.get(op::CQ_SET_NOTIFY)).u8() != 0;
        if set {
            self.notify = Some(notify);
        }
        set
    }
}

/// A shared receive queue.
pub struct RSrq(Obj);

impl SharedReceiveQueue for RSrq {
    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let mut e = req(op::SRQ_RECV, self.0.h);
        e.u64(wr.wr_id).sgl(wr.sgl);
        self.0.ctl.call(&e).map(drop)
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        self.0.call(op::SRQ_FLUSH).map(drop)
    }

    fn doorbells(&self) -> u64 {
        Dec::new(&self.0.get(op::SRQ_DOORBELLS)).u64()
    }
}

/// A queue pair.
pub struct RQp(Obj);

/// Adds a send work request to a request.
fn put_send_wr(e: &mut Enc, wr: &SendWr<'_, Remote>) {
    e.u64(wr.wr_id).u32(wr.flags.0).sgl(wr.sgl);
    match wr.op {
        SendOp::Send => e.u8(send_op::SEND),
        SendOp::SendWithInv { rkey } => e.u8(send_op::SEND_WITH_INV).u32(rkey),
        SendOp::RdmaWrite { remote_addr, rkey } => e.u8(send_op::WRITE).u64(remote_addr).u32(rkey),
        SendOp::RdmaRead { remote_addr, rkey } => e.u8(send_op::READ).u64(remote_addr).u32(rkey),
        SendOp::LocalInv { rkey } => e.u8(send_op::LOCAL_INV).u32(rkey),
        SendOp::BindMw(b) => e
            .u8(send_op::BIND_MW)
            .u32(b.mw.0.h)
            .u32(b.mr._o.h)
            .u32(b.rkey)
            .u64(b.addr)
            .u64(b.len)
            .u32(b.access.0),
    };
}

impl QueuePair<Remote> for RQp {
    fn qp_num(&self) -> u32 {
        Dec::new(&self.0.get(op::QP_NUM)).u32()
    }

    fn state(&self) -> QpState {
        QpState::from_u8(Dec::new(&self.0.get(op::QP_STATE)).u8())
    }

    fn options(&self) -> QpOptions {
        Dec::new(&self.0.get(op::QP_OPTIONS)).opts()
    }

    fn local_addr(&self) -> SocketAddr {
        Dec::new(&self.0.get(op::QP_LOCAL_ADDR)).addr()
    }

    fn peer_addr(&self) -> SocketAddr {
        Dec::new(&self.0.get(op::QP_PEER_ADDR)).addr()
    }

    fn queue_send(&mut self, wr: &SendWr<'_, Remote>) -> Result<(), VerbsError> {
        let mut e = req(op::QP_SEND, self.0.h);
        put_send_wr(&mut e, wr);
        self.0.ctl.call(&e).map(drop)
    }

    fn flush_send(&mut self) -> Result<(), VerbsError> {
        self.0.call(op::QP_FLUSH_SEND).map(drop)
    }

    fn queue_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let mut e = req(op::QP_RECV, self.0.h);
        e.u64(wr.wr_id).sgl(wr.sgl);
        self.0.ctl.call(&e).map(drop)
    }

    fn flush_recv(&mut self) -> Result<(), VerbsError> {
        self.0.call(op::QP_FLUSH_RECV).map(drop)
    }

    fn doorbells(&self) -> u64 {
        Dec::new(&self.0.get(op::QP_DOORBELLS)).u64()
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent>, VerbsError> {
        let r = self.0.call(op::QP_EVENT)?;
        let mut d = Dec::new(&r);
        Ok((d.u8() != 0).then(|| d.event()))
    }

    fn disconnect(&mut self) -> Result<(), VerbsError> {
        self.0.call(op::QP_DISCONNECT).map(drop)
    }
}

/// A listener.
pub struct RListener {
    o: Obj,
    local: SocketAddr,
}

impl Listener<Remote> for RListener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(&mut self) -> Result<Option<RConnRequest>, VerbsError> {
        let r = self.o.call(op::LISTENER_POLL)?;
        let mut d = Dec::new(&r);
        if d.u8() == 0 {
            return Ok(None);
        }
        Ok(Some(RConnRequest {
            o: Obj::new(&self.o.ctl, &mut d),
            private_data: d.bytes().to_vec(),
            peer: d.addr(),
            initiator_depth: d.u8(),
            responder_resources: d.u8(),
        }))
    }
}

/// A connect request (what it carries kept here: it never changes).
pub struct RConnRequest {
    o: Obj,
    private_data: Vec<u8>,
    peer: SocketAddr,
    initiator_depth: u8,
    responder_resources: u8,
}

impl ConnRequest<Remote> for RConnRequest {
    fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn initiator_depth(&self) -> u8 {
        self.initiator_depth
    }

    fn responder_resources(&self) -> u8 {
        self.responder_resources
    }

    fn accept_prepared(
        self,
        init: QpInit<'_, Remote>,
        private_data: &[u8],
        prepare: &mut dyn FnMut(&mut RQp) -> Result<(), VerbsError>,
    ) -> Result<RQp, VerbsError> {
        let mut e = req(op::ACCEPT, self.o.h);
        put_init(&mut e, &init);
        e.bytes(private_data);
        let (code, rest) = self.o.ctl.raw(&e);
        match code {
            reply::PREPARE => {}
            reply::ERR => return Err(Dec::new(&rest).err()),
            c => panic!("unexpected reply {c} to an accept"),
        }
        let mut qp = RQp(Obj::new(&self.o.ctl, &mut Dec::new(&rest)));
        let prepared = prepare(&mut qp);
        let mut done = Enc::op(op::PREPARED);
        match prepared {
            Ok(()) => done.u8(0),
            Err(err) => done.u8(1).err(err),
        };
        self.o.ctl.call(&done)?;
        prepared.map(|()| qp)
    }

    fn reject(self, private_data: &[u8]) -> Result<(), VerbsError> {
        let mut e = req(op::REJECT, self.o.h);
        e.bytes(private_data);
        self.o.ctl.call(&e).map(drop)
    }
}
