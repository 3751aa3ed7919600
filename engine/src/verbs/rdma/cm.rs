//! rdma_cm plumbing: non-blocking event channels, event retrieval, the listener and connect
//! requests.
//!
//! Normal operation: each id has its own event channel whose fd is non-blocking, so
//! `rdma_get_cm_event` returns `EAGAIN` instead of sleeping; every event is copied out (private
//! data included) and acknowledged at once, so `rdma_destroy_id` never waits. A connect request
//! id is moved from the listener's channel to a channel of its own (`rdma_migrate_id`) before it
//! is handed out, so the accepted QP polls its own events.
//!
//! Recovery: a request that cannot be given its own channel is rejected and destroyed, and the
//! error is returned from [`Listener::poll`]; a dropped request is rejected without private
//! data.

use core::ffi::c_int;
use std::net::SocketAddr;
use std::sync::Arc;

use rdma_sys as sys;

use super::qp::RdmaQp;
use super::{id_addrs, last_errno, os_err, to_sockaddr, DeviceInner, Rdma};
use crate::verbs::{
    errno, ConnRequest, Listener, PrivateData, QpInit, VerbsCall, VerbsError,
    PRIVATE_DATA_ACCEPT_MAX, PRIVATE_DATA_REJECT_MAX,
};

/// Sets `O_NONBLOCK` on `fd` (failures are ignored: the fd then blocks, which only matters if
/// nothing is pending, and `fcntl` does not fail on a valid descriptor).
pub(crate) fn set_nonblocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL have no memory arguments.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

/// An rdma_cm event channel in non-blocking mode. Dropping it destroys it (after every id on
/// it was destroyed: owners keep the channel in a field dropped after their id).
pub(crate) struct Channel(*mut sys::rdma_event_channel);

// SAFETY: an event channel is a file descriptor wrapper; librdmacm calls on it are thread-safe.
unsafe impl Send for Channel {}
// SAFETY: see Send.
unsafe impl Sync for Channel {}

impl Channel {
    /// `rdma_create_event_channel` + `O_NONBLOCK`. Without kernel RDMA support the call fails
    /// with `ENODEV` (errno 19), reported as `call` failing with `ENODEV`.
    pub(crate) fn new(call: VerbsCall) -> Result<Channel, VerbsError> {
        // SAFETY: no arguments; returns null or a new channel.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(os_err(call));
        }
        // SAFETY: ch is a live channel.
        set_nonblocking(unsafe { (*ch).fd });
        Ok(Channel(ch))
    }

    pub(crate) fn raw(&self) -> *mut sys::rdma_event_channel {
        self.0
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every id on it is gone.
        unsafe { sys::rdma_destroy_event_channel(self.0) }
    }
}

/// Destroys an id when dropped (error paths during setup).
pub(crate) struct IdGuard(pub(crate) *mut sys::rdma_cm_id);

impl Drop for IdGuard {
    fn drop(&mut self) {
        // SAFETY: the guarded id is live and owned by the guard; its QP (if any) is destroyed
        // first.
        unsafe {
            if !(*self.0).qp.is_null() {
                sys::rdma_destroy_qp(self.0);
            }
            sys::rdma_destroy_id(self.0);
        }
    }
}

/// `rdma_create_id(channel, RDMA_PS_TCP)` (reliable connected).
pub(crate) fn create_id(ch: &Channel, call: VerbsCall) -> Result<*mut sys::rdma_cm_id, VerbsError> {
    let mut id: *mut sys::rdma_cm_id = core::ptr::null_mut();
    // SAFETY: ch is live; id receives the new id.
    let rc = unsafe {
        sys::rdma_create_id(
            ch.raw(),
            &mut id,
            core::ptr::null_mut(),
            sys::rdma_port_space::RDMA_PS_TCP,
        )
    };
    if rc != 0 || id.is_null() {
        return Err(os_err(call));
    }
    Ok(id)
}

/// One rdma_cm event, copied out of librdmacm's buffer (which is released by the ack).
pub(crate) struct RawEvent {
    pub(crate) kind: sys::rdma_cm_event_type::Type,
    pub(crate) status: i32,
    /// `event->id` (for a connect request: the new id).
    pub(crate) id: *mut sys::rdma_cm_id,
    pub(crate) private_data: PrivateData,
    pub(crate) initiator_depth: u8,
    pub(crate) responder_resources: u8,
}

/// Next event on `ch` without blocking (`rdma_get_cm_event` + copy + `rdma_ack_cm_event`).
pub(crate) fn next_event(ch: &Channel) -> Result<Option<RawEvent>, VerbsError> {
    let mut ev: *mut sys::rdma_cm_event = core::ptr::null_mut();
    // SAFETY: ch is live and non-blocking; ev receives the event.
    let rc = unsafe { sys::rdma_get_cm_event(ch.raw(), &mut ev) };
    if rc != 0 || ev.is_null() {
        let e = last_errno();
        if e == errno::EAGAIN || e == libc::EWOULDBLOCK || e == libc::ENODATA {
            return Ok(None);
        }
        return Err(VerbsError::new(VerbsCall::GetCmEvent, e));
    }
    // SAFETY: ev is a live event until acknowledged; param.conn is the member rdma_cm fills for
    // connected (RDMA_PS_TCP) ids; the private data pointer is valid for private_data_len
    // octets until the ack.
    let raw = unsafe {
        let e = &*ev;
        let conn = &e.param.conn;
        let mut private_data = PrivateData::EMPTY;
        if !conn.private_data.is_null() && conn.private_data_len > 0 {
            let n = usize::from(conn.private_data_len).min(PRIVATE_DATA_ACCEPT_MAX);
            let src = core::slice::from_raw_parts(conn.private_data.cast::<u8>(), n);
            private_data = PrivateData::new(src).unwrap_or(PrivateData::EMPTY);
        }
        RawEvent {
            kind: e.event,
            status: e.status,
            id: e.id,
            private_data,
            initiator_depth: conn.initiator_depth,
            responder_resources: conn.responder_resources,
        }
    };
    // SAFETY: ev came from rdma_get_cm_event and is acknowledged exactly once.
    unsafe {
        sys::rdma_ack_cm_event(ev);
    }
    Ok(Some(raw))
}

// ---------------------------------------------------------------------------------------------
// Listener
// ---------------------------------------------------------------------------------------------

/// A listening rdma_cm id (see [`Listener`]).
pub struct RdmaListener {
    id: *mut sys::rdma_cm_id,
    channel: Channel,
    local: SocketAddr,
    dev: Arc<DeviceInner>,
}

// SAFETY: the id is only used through &mut self (poll) or in Drop; librdmacm is thread-safe.
unsafe impl Send for RdmaListener {}

impl Drop for RdmaListener {
    fn drop(&mut self) {
        // SAFETY: the id is live; all its events were acknowledged. The channel field is
        // dropped after this body.
        unsafe {
            sys::rdma_destroy_id(self.id);
        }
    }
}

impl RdmaListener {
    pub(crate) fn listen(
        dev: &Arc<DeviceInner>,
        addr: SocketAddr,
        backlog: u32,
    ) -> Result<RdmaListener, VerbsError> {
        let channel = Channel::new(VerbsCall::Listen)?;
        let id = create_id(&channel, VerbsCall::Listen)?;
        let guard = IdGuard(id);
        let mut sa = to_sockaddr(addr);
        // SAFETY: id is live; sa is a valid sockaddr.
        if unsafe { sys::rdma_bind_addr(id, (&mut sa as *mut libc::sockaddr_storage).cast()) } != 0
        {
            return Err(os_err(VerbsCall::Listen));
        }
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        // SAFETY: id is bound.
        if unsafe { sys::rdma_listen(id, backlog) } != 0 {
            return Err(os_err(VerbsCall::Listen));
        }
        // SAFETY: id is live.
        let local = unsafe { id_addrs(id).0 }.unwrap_or(addr);
        core::mem::forget(guard);
        Ok(RdmaListener {
            id,
            channel,
            local,
            dev: Arc::clone(dev),
        })
    }

    fn make_request(&self, ev: &RawEvent) -> Result<RdmaConnRequest, VerbsError> {
        let id = ev.id;
        let fail = |e: VerbsError| {
            // SAFETY: id is the live request id, owned by us; reject then destroy it.
            unsafe {
                sys::rdma_reject(id, core::ptr::null(), 0);
                sys::rdma_destroy_id(id);
            }
            e
        };
        let channel = Channel::new(VerbsCall::GetCmEvent).map_err(fail)?;
        // SAFETY: id and channel are live; the connect request event was acknowledged, so
        // the migration does not wait.
        if unsafe { sys::rdma_migrate_id(id, channel.raw()) } != 0 {
            let e = os_err(VerbsCall::GetCmEvent);
            drop(channel);
            return Err(fail(e));
        }
        // SAFETY: id is live.
        let (src, dst) = unsafe { id_addrs(id) };
        let unspecified = SocketAddr::new(self.local.ip(), 0);
        Ok(RdmaConnRequest {
            conn: Some((id, channel)),
            private_data: ev.private_data,
            peer: dst.unwrap_or(unspecified),
            local: src.unwrap_or(self.local),
            initiator_depth: ev.initiator_depth,
            responder_resources: ev.responder_resources,
            dev: Arc::clone(&self.dev),
        })
    }
}

impl Listener<Rdma> for RdmaListener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(&mut self) -> Result<Option<RdmaConnRequest>, VerbsError> {
        loop {
            let Some(ev) = next_event(&self.channel)? else {
                return Ok(None);
            };
            if ev.kind == sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                return self.make_request(&ev).map(Some);
            }
            // Other events on a listening id (device removal, address change) carry nothing
            // for the caller: skip them.
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connect request
// ---------------------------------------------------------------------------------------------

/// A pending connect request (see [`ConnRequest`]).
pub struct RdmaConnRequest {
    /// The request's id and its own channel (`None` once accepted or rejected).
    conn: Option<(*mut sys::rdma_cm_id, Channel)>,
    private_data: PrivateData,
    peer: SocketAddr,
    local: SocketAddr,
    initiator_depth: u8,
    responder_resources: u8,
    dev: Arc<DeviceInner>,
}

// SAFETY: the id is only used through self (by value or &self for reads); librdmacm is
// thread-safe.
unsafe impl Send for RdmaConnRequest {}

impl Drop for RdmaConnRequest {
    fn drop(&mut self) {
        if let Some((id, channel)) = self.conn.take() {
            // SAFETY: the id is live and owned; reject it, then destroy it before its channel.
            unsafe {
                sys::rdma_reject(id, core::ptr::null(), 0);
                sys::rdma_destroy_id(id);
            }
            drop(channel);
        }
    }
}

impl ConnRequest<Rdma> for RdmaConnRequest {
    fn private_data(&self) -> &[u8] {
        self.private_data.as_slice()
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

    fn accept(mut self, init: QpInit<'_, Rdma>, private_data: &[u8]) -> Result<RdmaQp, VerbsError> {
        if private_data.len() > PRIVATE_DATA_ACCEPT_MAX {
            return Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        }
        let Some((id, channel)) = self.conn.take() else {
            return Err(VerbsError::new(VerbsCall::Accept, errno::EINVAL));
        };
        RdmaQp::accept(
            &self.dev,
            id,
            channel,
            init,
            private_data,
            (self.initiator_depth, self.responder_resources),
            (self.local, self.peer),
        )
    }

    fn reject(mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        if private_data.len() > PRIVATE_DATA_REJECT_MAX {
            return Err(VerbsError::new(VerbsCall::Reject, errno::EINVAL));
        }
        let Some((id, channel)) = self.conn.take() else {
            return Err(VerbsError::new(VerbsCall::Reject, errno::EINVAL));
        };
        let ptr = if private_data.is_empty() {
            core::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: id is live and owned; private_data is valid for its length (<= 148).
        let rc = unsafe { sys::rdma_reject(id, ptr, private_data.len() as u8) };
        let res = if rc != 0 {
            Err(os_err(VerbsCall::Reject))
        } else {
            Ok(())
        };
        // SAFETY: id is live and owned; destroyed before its channel.
        unsafe {
            sys::rdma_destroy_id(id);
        }
        drop(channel);
        res
    }
}
