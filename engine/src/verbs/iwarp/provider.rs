//! The user-space iWARP provider ([`IwarpProvider`]): the verbs boundary over RDMAP/DDP/MPA on
//! ordinary non-blocking TCP sockets ([`super::socket`]), so server and client can run in
//! separate processes or on separate hosts without RDMA hardware or kernel modules. This file
//! holds the device, protection domains, memory registrations (STags), the listener and
//! connect requests; the STag table is in [`super::device`], memory windows in `mw.rs`,
//! completion queues in [`super::cq`], shared receive queues in `srq.rs`, queue pairs and
//! placement in [`super::qp`].
//!
//! Normal operation: [`Provider::open`] gives a device for a local address. Memory
//! registrations are entries in the device's STag table (lkey = rkey = STag: a table index in
//! the upper 24 bits, a random key byte below). A QP owns one TCP connection; nothing runs on
//! a thread of its own: whoever polls a CQ, a QP (posting, `poll_event`) or a listener does
//! the socket I/O of the process's QPs without blocking. A
//! listener's [`Listener::poll`] accepts TCP connections and runs their MPA exchange until the
//! Request (with its RFC 8797 private data) is in; the [`ConnRequest`] then accepts or rejects
//! with a Reply carrying private data.
//!
//! Recovery: a registration dropped removes its STag at once: any later placement under it is
//! a remote access error (Terminate, both QPs to ERROR). A CQ that overruns fails every later
//! poll with `EOVERFLOW` and puts the QPs that push to it into ERROR. A connection whose MPA
//! exchange fails is dropped by the listener; an initiator sees `Rejected` / `Unreachable` /
//! `ConnectError`.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::cq::{progress_all, CqInner, IwarpCq};
use super::device::{caps, endpoint_config, lock, now_ns, DevInner, IwarpProvider};
use super::mw::IwarpMw;
use super::qp::{IwarpQp, QpCore};
use super::socket::{self, Endpoint, State};
use super::srq::IwarpSrq;
use super::stag::{MrEntry, MrTable};
use crate::verbs::region::{impl_registrar, Region, RegisterMr, Registered};
use crate::verbs::{
    errno, validate, Access, ConnRequest, Device, DeviceCaps, KeyGen, Keys, Listener,
    ProtectionDomain, Provider, QpInit, QpOptions, VerbsCall, VerbsError,
};
/// An opened device: a local address and its STag table.
pub struct IwarpDevice {
    pub(crate) inner: Arc<DevInner>,
}

impl core::fmt::Debug for IwarpDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IwarpDevice({})", self.inner.ip)
    }
}

impl Provider for IwarpProvider {
    const NAME: &'static str = "iwarp";
    type Device = IwarpDevice;
    type Pd = IwarpPd;
    type Mr = Region<MrHandle>;
    type Mw = IwarpMw;
    type Cq = IwarpCq;
    type Srq = IwarpSrq;
    type Qp = IwarpQp;
    type Listener = IwarpListener;
    type ConnRequest = IwarpConnRequest;

    fn open(local: IpAddr) -> Result<IwarpDevice, VerbsError> {
        let seed = now_ns() ^ (u64::from(std::process::id()) << 32);
        Ok(IwarpDevice {
            inner: Arc::new(DevInner {
                ip: local,
                caps: caps(),
                mrs: Mutex::new(MrTable::default()),
                next_pd: AtomicU32::new(1),
                next_index: AtomicU32::new(1),
                next_qpn: AtomicU32::new(1),
                keys: Mutex::new(KeyGen::new(seed)),
            }),
        })
    }
}
/// Checks a QP's options and attachments (objects of this device) and gives the options in
/// force (with an SRQ: no receive queue of its own).
fn check_init(
    dev: &Arc<DevInner>,
    init: &QpInit<'_, IwarpProvider>,
    call: VerbsCall,
) -> Result<QpOptions, VerbsError> {
    let srq = init.srq.is_some();
    validate::qp_opts(&init.opts, srq, &dev.caps, call)?;
    let foreign = !Arc::ptr_eq(&init.pd.dev, dev)
        || init.srq.is_some_and(|s| !Arc::ptr_eq(&s.inner.dev, dev));
    if foreign {
        return Err(VerbsError::new(call, errno::EINVAL));
    }
    Ok(validate::qp_opts_in_force(init.opts, srq, &dev.caps))
}

fn io_errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(errno::EIO)
}

impl Device<IwarpProvider> for IwarpDevice {
    fn caps(&self) -> &DeviceCaps {
        &self.inner.caps
    }

    fn local_ip(&self) -> IpAddr {
        self.inner.ip
    }

    fn alloc_pd(&self) -> Result<IwarpPd, VerbsError> {
        // Relaxed: a unique-number counter.
        let id = self.inner.next_pd.fetch_add(1, Ordering::Relaxed);
        Ok(IwarpPd {
            dev: self.inner.clone(),
            id,
        })
    }

    fn create_cq(&self, depth: u32) -> Result<IwarpCq, VerbsError> {
        validate::cq_depth(depth, &self.inner.caps)?;
        Ok(IwarpCq {
            inner: Arc::new(CqInner::new(depth)),
        })
    }

    fn create_srq(&self, pd: &IwarpPd, max_wr: u32, max_sge: u32) -> Result<IwarpSrq, VerbsError> {
        validate::srq(max_wr, max_sge, &self.inner.caps)?;
        if !Arc::ptr_eq(&pd.dev, &self.inner) {
            return Err(VerbsError::new(VerbsCall::CreateSrq, errno::EINVAL));
        }
        Ok(IwarpSrq::new(&self.inner, pd.id, max_wr, max_sge))
    }

    fn listen(&self, addr: SocketAddr, _backlog: u32) -> Result<IwarpListener, VerbsError> {
        let l = socket::Listener::bind(addr).map_err(|e| {
            let n = io_errno(&e);
            VerbsError::new(VerbsCall::Listen, n)
        })?;
        let local = l
            .local_addr()
            .map_err(|e| VerbsError::new(VerbsCall::Listen, io_errno(&e)))?;
        Ok(IwarpListener {
            dev: self.inner.clone(),
            sock: l,
            local,
            pending: Vec::new(),
            ready: VecDeque::new(),
        })
    }

    fn connect(
        &self,
        addr: SocketAddr,
        init: QpInit<'_, IwarpProvider>,
        private_data: &[u8],
    ) -> Result<IwarpQp, VerbsError> {
        validate::private_data(private_data, &self.inner.caps, VerbsCall::Connect)?;
        let opts = check_init(&self.inner, &init, VerbsCall::Connect)?;
        let cfg = endpoint_config(opts.responder_resources, opts.initiator_depth);
        let mut ep = Endpoint::connect(addr, now_ns(), cfg, private_data)
            .map_err(|e| VerbsError::new(VerbsCall::Connect, io_errno(&e)))?;
        // The MPA Request goes out as soon as TCP is connected (on loopback: now).
        ep.poll(now_ns());
        Ok(QpCore::create(&self.inner, &init, opts, ep, addr))
    }
}

/// A protection domain.
pub struct IwarpPd {
    pub(crate) dev: Arc<DevInner>,
    pub(crate) id: u32,
}

/// What dropping a registration does: removes its STag from the device's table.
pub struct MrHandle {
    pub(crate) dev: Arc<DevInner>,
    stag: u32,
}

impl Drop for MrHandle {
    fn drop(&mut self) {
        lock(&self.dev.mrs).remove_region(self.stag);
    }
}

impl RegisterMr for IwarpPd {
    type Handle = MrHandle;

    fn caps(&self) -> &DeviceCaps {
        &self.dev.caps
    }

    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Registered<MrHandle> {
        let Some(index) = self.dev.alloc_index() else {
            return Err(VerbsError::new(VerbsCall::RegMr, errno::ENOSPC));
        };
        let stag = lock(&self.dev.keys).next_rkey(index << 8);
        let entry = MrEntry {
            addr: addr as u64,
            len: len as u64,
            access,
            pd: self.id,
        };
        lock(&self.dev.mrs).map.insert(stag, entry);
        let handle = MrHandle {
            dev: self.dev.clone(),
            stag,
        };
        Ok((
            handle,
            Keys {
                lkey: stag,
                rkey: stag,
            },
        ))
    }
}

impl_registrar!(IwarpPd => MrHandle);

impl ProtectionDomain<IwarpProvider> for IwarpPd {
    fn alloc_mw(&self) -> Result<IwarpMw, VerbsError> {
        IwarpMw::alloc(&self.dev, self.id)
    }
}

// ---------------------------------------------------------------------------------------------
// Listener and connect requests
// ---------------------------------------------------------------------------------------------

/// A listening TCP socket whose connections run the MPA exchange until their Request is in.
pub struct IwarpListener {
    dev: Arc<DevInner>,
    sock: socket::Listener,
    local: SocketAddr,
    /// Connections whose Request is not in yet.
    pending: Vec<Endpoint>,
    /// Connections whose Request is in, in arrival order.
    ready: VecDeque<Endpoint>,
}

impl Listener<IwarpProvider> for IwarpListener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(&mut self) -> Result<Option<IwarpConnRequest>, VerbsError> {
        // A requester in this process whose owner waits for this listener gets its MPA
        // Request out here.
        progress_all();
        let now = now_ns();
        // The Reply's IRD/ORD are set at accept, from the accepting QP's depths.
        let cfg = endpoint_config(16, 16);
        while let Some(ep) = self
            .sock
            .accept(now, cfg)
            .map_err(|e| VerbsError::new(VerbsCall::GetCmEvent, io_errno(&e)))?
        {
            self.pending.push(ep);
        }
        let mut i = 0;
        while i < self.pending.len() {
            match self.pending[i].poll(now) {
                State::AwaitingDecision => self.ready.push_back(self.pending.swap_remove(i)),
                // A failed MPA exchange: the connection is dropped, nobody is told.
                State::Closed(_) | State::Closing(_) => drop(self.pending.swap_remove(i)),
                _ => i += 1,
            }
        }
        Ok(self.ready.pop_front().map(|ep| IwarpConnRequest {
            dev: self.dev.clone(),
            ep: Some(ep),
        }))
    }
}

/// A connection whose MPA Request is in, waiting for accept or reject. Dropping it rejects.
pub struct IwarpConnRequest {
    dev: Arc<DevInner>,
    ep: Option<Endpoint>,
}

impl IwarpConnRequest {
    /// The requester's RFC 6581 IRD and ORD (revision 1 peers: none, taken as 0 / 0 would
    /// forbid reads, so this device's maximum is assumed).
    fn peer_ird_ord(&self) -> (u16, u16) {
        let word = self
            .ep
            .as_ref()
            .and_then(|ep| ep.handshake().negotiated())
            .and_then(|n| n.peer_ird_ord);
        word.map_or((128, 128), |w| (w.ird, w.ord))
    }
}

impl ConnRequest<IwarpProvider> for IwarpConnRequest {
    fn private_data(&self) -> &[u8] {
        self.ep.as_ref().map_or(&[], |ep| ep.peer_private_data())
    }

    fn peer_addr(&self) -> SocketAddr {
        let any = SocketAddr::new(self.dev.ip, 0);
        self.ep
            .as_ref()
            .and_then(|ep| ep.peer_addr().ok())
            .unwrap_or(any)
    }

    fn initiator_depth(&self) -> u8 {
        u8::try_from(self.peer_ird_ord().1).unwrap_or(u8::MAX)
    }

    fn responder_resources(&self) -> u8 {
        u8::try_from(self.peer_ird_ord().0).unwrap_or(u8::MAX)
    }

    fn accept_prepared(
        mut self,
        init: QpInit<'_, IwarpProvider>,
        private_data: &[u8],
        prepare: &mut dyn FnMut(&mut IwarpQp) -> Result<(), VerbsError>,
    ) -> Result<IwarpQp, VerbsError> {
        validate::private_data(private_data, &self.dev.caps, VerbsCall::Accept)?;
        let mut opts = check_init(&self.dev, &init, VerbsCall::Accept)?;
        opts.initiator_depth = opts.initiator_depth.min(self.responder_resources());
        opts.responder_resources = opts.responder_resources.min(self.initiator_depth());
        let Some(ep) = self.ep.take() else {
            return Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        };
        let peer = ep.peer_addr().unwrap_or(SocketAddr::new(self.dev.ip, 0));
        let mut qp = QpCore::create(&self.dev, &init, opts, ep, peer);
        prepare(&mut qp)?;
        qp.accept(private_data)?;
        Ok(qp)
    }

    fn reject(mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        validate::private_data(private_data, &self.dev.caps, VerbsCall::Reject)?;
        if let Some(mut ep) = self.ep.take() {
            ep.reject(private_data)
                .map_err(|_| VerbsError::new(VerbsCall::Reject, errno::EINVAL))?;
            ep.poll(now_ns());
        }
        Ok(())
    }
}

impl Drop for IwarpConnRequest {
    fn drop(&mut self) {
        if let Some(mut ep) = self.ep.take() {
            if ep.reject(&[]).is_ok() {
                ep.poll(now_ns());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Conformance environment
// ---------------------------------------------------------------------------------------------

/// The conformance suite's environment: a client and a server device on loopback (`127.0.0.1`),
/// listening on ports the system picks free.
#[cfg(feature = "conformance")]
pub struct IwarpEnv {
    client: IwarpDevice,
    server: IwarpDevice,
}

#[cfg(feature = "conformance")]
impl IwarpEnv {
    /// Two devices on `127.0.0.1`.
    pub fn new() -> IwarpEnv {
        let lo = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        // Invariant: opening a device of this provider cannot fail.
        let open = || IwarpProvider::open(lo).expect("iwarp device");
        IwarpEnv {
            client: open(),
            server: open(),
        }
    }
}

#[cfg(feature = "conformance")]
impl Default for IwarpEnv {
    fn default() -> Self {
        IwarpEnv::new()
    }
}

#[cfg(feature = "conformance")]
impl crate::verbs::conformance::Env for IwarpEnv {
    type P = IwarpProvider;

    fn client(&self) -> &IwarpDevice {
        &self.client
    }

    fn server(&self) -> &IwarpDevice {
        &self.server
    }

    fn listen_addr(&mut self) -> SocketAddr {
        // A port the system reports free now (bound, read, released).
        let any = SocketAddr::new(self.server.inner.ip, 0);
        std::net::TcpListener::bind(any)
            .and_then(|l| l.local_addr())
            .unwrap_or(any)
    }

    fn idle(&mut self) {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }

    fn settle_iterations(&self) -> u32 {
        100
    }
}

#[cfg(test)]
#[path = "provider_tests.rs"]
mod tests;
