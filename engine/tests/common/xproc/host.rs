//! A device process of a cross-process run: it owns one iWARP device and every object made on
//! it, and carries out the requests of the process running the checks ([`super::proxy`]),
//! answering each with the provider's result.
//!
//! Normal operation: objects live in a table under handles that are never reused; between
//! requests the process polls an empty CQ of its own, which drives every connection of the
//! process (the provider's progress), so its side of a connection moves while the checks wait
//! on the other. An accept's `prepare` step serves requests to the new QP until `PREPARED`.
//! Recovery: the channel closing (the checks' process is done, or failed) ends the process;
//! a request naming an object that is gone is answered `EINVAL`.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_engine::verbs::iwarp::{
    IwarpConnRequest, IwarpCq, IwarpDevice, IwarpListener, IwarpMw, IwarpPd, IwarpProvider,
    IwarpQp, IwarpSrq,
};
use rpcrdma_engine::verbs::{
    errno, Completion, CompletionQueue, ConnRequest, Device, Listener, MemoryWindow, MwBind,
    Provider, QpInit, QueuePair, RecvWr, Registrar, SendFlags, SendOp, SendWr, SharedReceiveQueue,
    VerbsCall, VerbsError,
};

use super::wire::{self, op, reply, send_op, Dec, Enc};

type Mr = <IwarpProvider as Provider>::Mr;

/// An object of the device.
enum Obj {
    Pd(IwarpPd),
    Mr(Mr),
    Mw(IwarpMw),
    /// A CQ and the count of its in-process notices (and how many were reported).
    Cq(IwarpCq, Arc<AtomicU64>, u64),
    Srq(IwarpSrq),
    Qp(Box<IwarpQp>),
    Listener(IwarpListener),
    Req(Box<IwarpConnRequest>),
}

/// The device and its objects.
struct Host {
    dev: IwarpDevice,
    objs: HashMap<u32, Obj>,
    next: u32,
}

fn einval() -> VerbsError {
    VerbsError::new(VerbsCall::QueryDevice, errno::EINVAL)
}

/// An OK reply.
fn ok() -> Enc {
    Enc::op(reply::OK)
}

/// The reply for `r`.
fn done(r: Result<Enc, VerbsError>) -> Enc {
    r.unwrap_or_else(|e| {
        let mut f = Enc::op(reply::ERR);
        f.err(e);
        f
    })
}

macro_rules! get {
    ($objs:expr, $h:expr, $kind:ident) => {
        match $objs.get(&$h) {
            Some(Obj::$kind(o)) => o,
            _ => return Err(einval()),
        }
    };
}

macro_rules! get_mut {
    ($objs:expr, $h:expr, $kind:ident) => {
        match $objs.get_mut(&$h) {
            Some(Obj::$kind(o)) => o,
            _ => return Err(einval()),
        }
    };
}

impl Host {
    fn add(&mut self, o: Obj) -> Enc {
        self.next += 1;
        self.objs.insert(self.next, o);
        let mut r = ok();
        r.u32(self.next);
        r
    }

    /// The QP init a request names (its objects from the table).
    fn init<'a>(
        objs: &'a HashMap<u32, Obj>,
        d: &mut Dec<'_>,
    ) -> Result<QpInit<'a, IwarpProvider>, VerbsError> {
        let (pd, scq, rcq, srq) = (d.u32(), d.u32(), d.u32(), d.u32());
        let cq = |h| match objs.get(&h) {
            Some(Obj::Cq(c, _, _)) => Ok(c),
            _ => Err(einval()),
        };
        Ok(QpInit {
            pd: get!(objs, pd, Pd),
            send_cq: cq(scq)?,
            recv_cq: cq(rcq)?,
            srq: match srq {
                0 => None,
                h => Some(get!(objs, h, Srq)),
            },
            opts: d.opts(),
        })
    }

    /// Carries out one request (`ch`: the channel, for an accept's `prepare` step).
    fn handle(&mut self, f: &[u8], ch: &mut UnixStream) -> Result<Enc, VerbsError> {
        let mut d = Dec::new(f);
        let code = d.u8();
        let h = d.u32();
        match code {
            op::CAPS => {
                let mut r = ok();
                r.caps(self.dev.caps());
                Ok(r)
            }
            op::ALLOC_PD => {
                let pd = self.dev.alloc_pd()?;
                Ok(self.add(Obj::Pd(pd)))
            }
            op::CREATE_CQ => {
                let cq = self.dev.create_cq(d.u32())?;
                Ok(self.add(Obj::Cq(cq, Arc::new(AtomicU64::new(0)), 0)))
            }
            op::CREATE_SRQ => {
                let srq = self
                    .dev
                    .create_srq(get!(self.objs, h, Pd), d.u32(), d.u32())?;
                Ok(self.add(Obj::Srq(srq)))
            }
            op::LISTEN => {
                let l = self.dev.listen(d.addr(), d.u32())?;
                let local = l.local_addr();
                let mut r = self.add(Obj::Listener(l));
                r.addr(local);
                Ok(r)
            }
            op::CONNECT => {
                let addr = d.addr();
                let init = Self::init(&self.objs, &mut d)?;
                let qp = self.dev.connect(addr, init, d.bytes())?;
                Ok(self.add(Obj::Qp(Box::new(qp))))
            }
            op::REGISTER => {
                let (addr, len, access) = (d.u64(), d.u64() as usize, d.access());
                // SAFETY: the address is inside the memory every process of the run maps at
                // the same place (super::Arena); the checks' process keeps it allocated while
                // the registration lives, and frees this registration before the memory.
                let (mr, keys) =
                    unsafe { get!(self.objs, h, Pd).register(addr as *mut u8, len, access)? };
                let mut r = self.add(Obj::Mr(mr));
                r.keys(keys);
                Ok(r)
            }
            op::ALLOC_MW => {
                use rpcrdma_engine::verbs::ProtectionDomain;
                let mw = get!(self.objs, h, Pd).alloc_mw()?;
                Ok(self.add(Obj::Mw(mw)))
            }
            op::MW_RKEY => {
                let mut r = ok();
                r.u32(get!(self.objs, h, Mw).rkey());
                Ok(r)
            }
            op::CQ_POLL => self.cq_poll(h, d.u32() as usize),
            op::CQ_SET_NOTIFY => {
                let Some(Obj::Cq(cq, count, _)) = self.objs.get_mut(&h) else {
                    return Err(einval());
                };
                let c = Arc::clone(count);
                let set = cq.set_notify(Arc::new(move || {
                    // Relaxed: a count read by this thread after the poll that ran the notice.
                    c.fetch_add(1, Ordering::Relaxed);
                }));
                let mut r = ok();
                r.u8(u8::from(set));
                Ok(r)
            }
            op::SRQ_RECV => {
                let wr_id = d.u64();
                let sgl = d.sgl();
                let srq = get_mut!(self.objs, h, Srq);
                srq.queue_recv(&RecvWr { wr_id, sgl: &sgl })?;
                Ok(ok())
            }
            op::SRQ_FLUSH => get_mut!(self.objs, h, Srq).flush_recv().map(|()| ok()),
            op::SRQ_DOORBELLS => {
                let mut r = ok();
                r.u64(get!(self.objs, h, Srq).doorbells());
                Ok(r)
            }
            op::LISTENER_POLL => self.listener_poll(h),
            op::ACCEPT => self.accept(h, &mut d, ch),
            op::REJECT => {
                let Some(Obj::Req(req)) = self.objs.remove(&h) else {
                    return Err(einval());
                };
                req.reject(d.bytes()).map(|()| ok())
            }
            op::FREE => {
                self.objs.remove(&h);
                Ok(ok())
            }
            _ => {
                // Out of the table while it runs: a bind names other objects of the table.
                let Some(Obj::Qp(mut qp)) = self.objs.remove(&h) else {
                    return Err(einval());
                };
                let r = qp_op(&self.objs, &mut qp, code, &mut d);
                self.objs.insert(h, Obj::Qp(qp));
                r
            }
        }
    }

    fn cq_poll(&mut self, h: u32, max: usize) -> Result<Enc, VerbsError> {
        let Some(Obj::Cq(cq, count, reported)) = self.objs.get_mut(&h) else {
            return Err(einval());
        };
        let mut out = vec![Completion::default(); max];
        let n = cq.poll(&mut out)?;
        // Relaxed: the notices ran on this thread, in the poll above.
        let now = count.load(Ordering::Relaxed);
        let mut r = ok();
        r.u64(now - *reported).u32(n as u32);
        *reported = now;
        for c in &out[..n] {
            r.wc(c);
        }
        Ok(r)
    }

    fn listener_poll(&mut self, h: u32) -> Result<Enc, VerbsError> {
        let Some(req) = get_mut!(self.objs, h, Listener).poll()? else {
            let mut r = ok();
            r.u8(0);
            return Ok(r);
        };
        let (pdata, peer) = (req.private_data().to_vec(), req.peer_addr());
        let (ird, ord) = (req.initiator_depth(), req.responder_resources());
        self.next += 1;
        let h = self.next;
        self.objs.insert(h, Obj::Req(Box::new(req)));
        let mut r = ok();
        r.u8(1).u32(h).bytes(&pdata).addr(peer).u8(ird).u8(ord);
        Ok(r)
    }

    /// An accept: the new QP gets the next handle; the checks' process runs its `prepare`
    /// step with requests to that handle, served here until `PREPARED`.
    fn accept(&mut self, h: u32, d: &mut Dec<'_>, ch: &mut UnixStream) -> Result<Enc, VerbsError> {
        let Some(Obj::Req(req)) = self.objs.remove(&h) else {
            return Err(einval());
        };
        self.next += 1;
        let qh = self.next;
        let objs = &self.objs;
        let init = Self::init(objs, d)?;
        let pdata = d.bytes();
        let qp = req.accept_prepared(init, pdata, &mut |qp| prepare(objs, qp, qh, ch))?;
        self.objs.insert(qh, Obj::Qp(Box::new(qp)));
        Ok(ok())
    }
}

/// The `prepare` step of an accept: tells the checks' process the new QP's handle, then serves
/// its requests to that QP until `PREPARED` (other objects wait: `EINVAL`), whose reply is the
/// accept's result.
fn prepare(
    objs: &HashMap<u32, Obj>,
    qp: &mut IwarpQp,
    qh: u32,
    ch: &mut UnixStream,
) -> Result<(), VerbsError> {
    let mut r = Enc::op(reply::PREPARE);
    r.u32(qh);
    let lost = "the control channel closed during an accept";
    wire::send(ch, &r.0).expect(lost);
    loop {
        let f = wire::recv(ch).expect(lost);
        let mut d = Dec::new(&f);
        let code = d.u8();
        if code == op::PREPARED {
            // The accept's own reply answers this request.
            return match d.u8() {
                0 => Ok(()),
                _ => Err(d.err()),
            };
        }
        let r = match d.u32() {
            h if h == qh => qp_op(objs, qp, code, &mut d),
            _ => Err(einval()),
        };
        wire::send(ch, &done(r).0).expect(lost);
    }
}

/// A send work request's operation (its window and region from the table).
fn send_op<'a>(
    objs: &'a HashMap<u32, Obj>,
    d: &mut Dec<'_>,
) -> Result<SendOp<'a, IwarpProvider>, VerbsError> {
    Ok(match d.u8() {
        send_op::SEND => SendOp::Send,
        send_op::SEND_WITH_INV => SendOp::SendWithInv { rkey: d.u32() },
        send_op::WRITE => SendOp::RdmaWrite {
            remote_addr: d.u64(),
            rkey: d.u32(),
        },
        send_op::READ => SendOp::RdmaRead {
            remote_addr: d.u64(),
            rkey: d.u32(),
        },
        send_op::LOCAL_INV => SendOp::LocalInv { rkey: d.u32() },
        send_op::BIND_MW => {
            let (mw, mr) = (d.u32(), d.u32());
            SendOp::BindMw(MwBind {
                mw: get!(objs, mw, Mw),
                mr: get!(objs, mr, Mr),
                rkey: d.u32(),
                addr: d.u64(),
                len: d.u64(),
                access: d.access(),
            })
        }
        _ => return Err(einval()),
    })
}

/// A request to a QP.
fn qp_op(
    objs: &HashMap<u32, Obj>,
    qp: &mut IwarpQp,
    code: u8,
    d: &mut Dec<'_>,
) -> Result<Enc, VerbsError> {
    let mut r = ok();
    match code {
        op::QP_NUM => r.u32(qp.qp_num()),
        op::QP_STATE => r.u8(qp.state() as u8),
        op::QP_OPTIONS => r.opts(&qp.options()),
        op::QP_LOCAL_ADDR => r.addr(qp.local_addr()),
        op::QP_PEER_ADDR => r.addr(qp.peer_addr()),
        op::QP_SEND => {
            let (wr_id, flags, sgl) = (d.u64(), SendFlags(d.u32()), d.sgl());
            let op = send_op(objs, d)?;
            qp.queue_send(&SendWr {
                wr_id,
                op,
                sgl: &sgl,
                flags,
            })?;
            &mut r
        }
        op::QP_FLUSH_SEND => qp.flush_send().map(|()| &mut r)?,
        op::QP_RECV => {
            let (wr_id, sgl) = (d.u64(), d.sgl());
            qp.queue_recv(&RecvWr { wr_id, sgl: &sgl })?;
            &mut r
        }
        op::QP_FLUSH_RECV => qp.flush_recv().map(|()| &mut r)?,
        op::QP_DOORBELLS => r.u64(qp.doorbells()),
        op::QP_EVENT => match qp.poll_event()? {
            Some(ev) => r.u8(1).event(&ev),
            None => r.u8(0),
        },
        op::QP_DISCONNECT => qp.disconnect().map(|()| &mut r)?,
        _ => return Err(einval()),
    };
    Ok(r)
}

/// Whether `fd` becomes readable within `ms` milliseconds.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents != 0
}

/// Serves the checks' process on `ch` with a device on `ip` until the channel closes.
pub fn serve(mut ch: UnixStream, ip: std::net::IpAddr) {
    let dev = IwarpProvider::open(ip).expect("iwarp device");
    // Polling this CQ (never attached to a QP) drives every connection of the process.
    let mut progress = dev.create_cq(1).expect("a CQ");
    let mut host = Host {
        dev,
        objs: HashMap::new(),
        next: 0,
    };
    loop {
        if readable(ch.as_raw_fd(), 1) {
            let Ok(f) = wire::recv(&mut ch) else {
                return;
            };
            let r = done(host.handle(&f, &mut ch));
            if wire::send(&mut ch, &r.0).is_err() {
                return;
            }
        }
        let _ = progress.poll(&mut []);
    }
}
