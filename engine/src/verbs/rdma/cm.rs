//! rdma_cm plumbing: the process-wide event hub, the listener and connect requests.
//!
//! Normal operation: every rdma_cm id of the process lives on one event channel whose fd is
//! non-blocking (the hub). Whoever polls first, [`QueuePair::poll_event`] of any QP or
//! [`Listener::poll`] of any listener, drains the channel (one `read` that returns `EAGAIN`
//! when nothing is pending, whatever the number of connections) and dispatches each event to
//! its connection by id: connect requests are queued on their listener, resolution steps of
//! active connections are taken on the spot (`rdma_resolve_route`, `rdma_connect`), a peer's
//! disconnect is answered at once (`rdma_disconnect`, the IB CM DREP), and events meant for the
//! caller wait in the connection's small queue until its own `poll_event`. Every event is
//! copied out (private data included) and acknowledged immediately, so `rdma_destroy_id` never
//! waits. This is what lets one process drive both ends of a connection (and a server answer a
//! disconnect while it is busy elsewhere) without threads or blocking.
//!
//! Recovery: an event for an id that is gone (destroyed meanwhile) is acknowledged and
//! dropped; a connect request for a listener that is gone is rejected and destroyed; a dropped
//! request is rejected without private data. Ids are unregistered under the hub lock before
//! they are destroyed, so the dispatcher never touches a destroyed id.
//!
//! [`QueuePair::poll_event`]: crate::verbs::QueuePair::poll_event

use core::ffi::c_int;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use rdma_sys as sys;

use super::channel::set_nonblocking;
use super::{id_addrs, last_errno, os_err, DeviceInner, Rdma};
use crate::verbs::{
    errno, CqNotify, Listener, PrivateData, VerbsCall, VerbsError, PRIVATE_DATA_ACCEPT_MAX,
};

pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An rdma_cm event channel in non-blocking mode.
pub(crate) struct Channel(*mut sys::rdma_event_channel);

// SAFETY: an event channel is a file descriptor wrapper; librdmacm calls on it are thread-safe.
unsafe impl Send for Channel {}
// SAFETY: see Send.
unsafe impl Sync for Channel {}

impl Channel {
    /// `rdma_create_event_channel` + `O_NONBLOCK`. Without kernel RDMA support the call fails
    /// with `ENODEV` (errno 19), reported as `call` failing with that errno.
    fn new(call: VerbsCall) -> Result<Channel, VerbsError> {
        // SAFETY: no arguments; returns null or a new channel.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(os_err(call));
        }
        // SAFETY: ch is a live channel.
        set_nonblocking(unsafe { (*ch).fd });
        Ok(Channel(ch))
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; only a losing creation race drops one,
        // before any id was created on it.
        unsafe { sys::rdma_destroy_event_channel(self.0) }
    }
}

/// Destroys an id when dropped (error paths during setup; the id is not registered yet).
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

/// One rdma_cm event, copied out of librdmacm's buffer (which is released by the ack).
pub(crate) struct RawEvent {
    pub(crate) kind: sys::rdma_cm_event_type::Type,
    pub(crate) status: i32,
    /// `event->id` (for a connect request: the new id).
    pub(crate) id: *mut sys::rdma_cm_id,
    /// `event->listen_id` (connect requests).
    pub(crate) listen_id: *mut sys::rdma_cm_id,
    pub(crate) private_data: PrivateData,
    pub(crate) initiator_depth: u8,
    pub(crate) responder_resources: u8,
}

/// Next event on `ch` without blocking (`rdma_get_cm_event` + copy + `rdma_ack_cm_event`).
fn next_event(ch: &Channel) -> Result<Option<RawEvent>, VerbsError> {
    let mut ev: *mut sys::rdma_cm_event = core::ptr::null_mut();
    // SAFETY: ch is live and non-blocking; ev receives the event.
    let rc = unsafe { sys::rdma_get_cm_event(ch.0, &mut ev) };
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
            listen_id: e.listen_id,
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
// The hub
// ---------------------------------------------------------------------------------------------

/// What the hub hands a QP's events to (the QP's connection state implements it; the hub
/// knows QPs only through this).
pub(crate) trait CmTarget: Send {
    /// Takes one event of the QP's id.
    fn handle(&mut self, ev: &RawEvent);
    /// Who to tell once the event is queued (the owner's notice), if anyone.
    fn notice(&self) -> Option<CqNotify>;
}

/// Who an id's events go to.
enum Target {
    /// A QP's connection.
    Qp(Weak<Mutex<dyn CmTarget>>),
    /// A listener: connect requests are queued there.
    Listener(Weak<Mutex<ListenQueue>>),
    /// A connect request not accepted or rejected yet (its events are dropped).
    Request,
}

/// The process-wide event channel and the id → target table.
pub(crate) struct Hub {
    channel: Channel,
    targets: Mutex<HashMap<usize, Target>>,
}

static HUB: OnceLock<Hub> = OnceLock::new();
static HUB_INIT: Mutex<()> = Mutex::new(());

/// The hub, created on first use (`call` names the error when no channel can be made, e.g.
/// `ENODEV` on a host without RDMA).
pub(crate) fn hub(call: VerbsCall) -> Result<&'static Hub, VerbsError> {
    if let Some(h) = HUB.get() {
        return Ok(h);
    }
    let _g = lock(&HUB_INIT);
    if let Some(h) = HUB.get() {
        return Ok(h);
    }
    let channel = Channel::new(call)?;
    Ok(HUB.get_or_init(|| Hub {
        channel,
        targets: Mutex::new(HashMap::new()),
    }))
}

impl Hub {
    /// The channel's descriptor (non-blocking; readable while an event is pending).
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        // SAFETY: the hub's channel lives as long as the process.
        unsafe { (*self.channel.0).fd }
    }

    /// `rdma_create_id(hub channel, RDMA_PS_TCP)` (reliable connected), guarded.
    pub(crate) fn create_id(&self, call: VerbsCall) -> Result<IdGuard, VerbsError> {
        let mut id: *mut sys::rdma_cm_id = core::ptr::null_mut();
        // SAFETY: the channel is live; id receives the new id.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel.0,
                &mut id,
                core::ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 || id.is_null() {
            return Err(os_err(call));
        }
        Ok(IdGuard(id))
    }

    pub(crate) fn register_qp(&self, id: *mut sys::rdma_cm_id, p: Weak<Mutex<dyn CmTarget>>) {
        lock(&self.targets).insert(id as usize, Target::Qp(p));
    }

    fn register_listener(&self, id: *mut sys::rdma_cm_id, q: &Arc<Mutex<ListenQueue>>) {
        lock(&self.targets).insert(id as usize, Target::Listener(Arc::downgrade(q)));
    }

    /// Removes `id`; after this returns no dispatcher uses it.
    pub(crate) fn unregister(&self, id: *mut sys::rdma_cm_id) {
        lock(&self.targets).remove(&(id as usize));
    }

    pub(crate) fn poll(&self) -> Result<(), VerbsError> {
        // Another thread draining the channel dispatches our events too.
        let Ok(mut targets) = self.targets.try_lock() else {
            return Ok(());
        };
        while let Some(ev) = next_event(&self.channel)? {
            dispatch(&mut targets, ev);
        }
        Ok(())
    }
}

fn reject_and_destroy(id: *mut sys::rdma_cm_id) {
    // SAFETY: id is a live connect-request id owned by the caller, with no QP and every event
    // acknowledged.
    unsafe {
        sys::rdma_reject(id, core::ptr::null(), 0);
        sys::rdma_destroy_id(id);
    }
}

fn dispatch(targets: &mut HashMap<usize, Target>, ev: RawEvent) {
    tracing::debug!(
        "cm event {} status {} id {:p} pdata {}",
        ev.kind,
        ev.status,
        ev.id,
        ev.private_data.as_slice().len()
    );
    if ev.kind == sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
        let queue = match targets.get(&(ev.listen_id as usize)) {
            Some(Target::Listener(q)) => q.upgrade(),
            _ => None,
        };
        let Some(queue) = queue else {
            reject_and_destroy(ev.id);
            return;
        };
        let mut q = lock(&queue);
        if q.dead {
            drop(q);
            reject_and_destroy(ev.id);
            return;
        }
        targets.insert(ev.id as usize, Target::Request);
        q.requests.push_back(ev);
        let notify = q.notify.clone();
        drop(q);
        // After the request is queued: see `Listener::set_notify`.
        if let Some(n) = notify {
            n();
        }
        return;
    }
    let progress = match targets.get(&(ev.id as usize)) {
        Some(Target::Qp(p)) => p.upgrade(),
        _ => None,
    };
    if let Some(p) = progress {
        let notify = {
            let mut g = lock(&p);
            g.handle(&ev);
            g.notice()
        };
        // After the event is queued (the lock's release): see `QueuePair::set_event_notify`.
        if let Some(n) = notify {
            n();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Listener
// ---------------------------------------------------------------------------------------------

/// Connect requests received for a listener, oldest first.
struct ListenQueue {
    requests: VecDeque<RawEvent>,
    dead: bool,
    /// Runs after a request is queued (`Listener::set_notify`).
    notify: Option<CqNotify>,
}

// SAFETY: the raw ids in the queued events are owned by the queue (destroyed with it) and only
// touched under its mutex.
unsafe impl Send for ListenQueue {}

/// A listening rdma_cm id (see [`Listener`]).
pub struct RdmaListener {
    id: *mut sys::rdma_cm_id,
    queue: Arc<Mutex<ListenQueue>>,
    hub: &'static Hub,
    local: SocketAddr,
    dev: Arc<DeviceInner>,
}

// SAFETY: the id is only used in Drop; the queue is behind a mutex.
unsafe impl Send for RdmaListener {}

impl Drop for RdmaListener {
    fn drop(&mut self) {
        self.hub.unregister(self.id);
        let pending: Vec<RawEvent> = {
            let mut q = lock(&self.queue);
            q.dead = true;
            q.requests.drain(..).collect()
        };
        for ev in pending {
            self.hub.unregister(ev.id);
            reject_and_destroy(ev.id);
        }
        // SAFETY: the listening id is live, unregistered, all its events acknowledged.
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
        let (hub, guard) = dev.bound_id(addr, VerbsCall::Listen)?;
        let id = guard.0;
        let backlog = c_int::try_from(backlog).unwrap_or(c_int::MAX);
        dev.in_netns(VerbsCall::Listen, || {
            // SAFETY: id is bound.
            if unsafe { sys::rdma_listen(id, backlog) } != 0 {
                return Err(os_err(VerbsCall::Listen));
            }
            Ok(())
        })?;
        // SAFETY: id is live.
        let local = unsafe { id_addrs(id).0 }.unwrap_or(addr);
        let queue = Arc::new(Mutex::new(ListenQueue {
            requests: VecDeque::new(),
            dead: false,
            notify: None,
        }));
        hub.register_listener(id, &queue);
        core::mem::forget(guard);
        Ok(RdmaListener {
            id,
            queue,
            hub,
            local,
            dev: Arc::clone(dev),
        })
    }
}

impl Listener<Rdma> for RdmaListener {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn set_notify(&mut self, notify: CqNotify) -> bool {
        lock(&self.queue).notify = Some(notify);
        true
    }

    fn poll(&mut self) -> Result<Option<RdmaConnRequest>, VerbsError> {
        self.hub.poll()?;
        let Some(ev) = lock(&self.queue).requests.pop_front() else {
            return Ok(None);
        };
        // SAFETY: ev.id is the live request id.
        let (src, dst) = unsafe { id_addrs(ev.id) };
        Ok(Some(RdmaConnRequest {
            id: Some(ev.id),
            hub: self.hub,
            private_data: ev.private_data,
            peer: dst.unwrap_or(SocketAddr::new(self.local.ip(), 0)),
            local: src.unwrap_or(self.local),
            // rdma_cm reports a request's depths from the local side's view (IB CM and iWARP
            // CM both swap them): `initiator_depth` is what we may issue — the requester's
            // responder resources — and `responder_resources` what the requester will issue.
            initiator_depth: ev.responder_resources,
            responder_resources: ev.initiator_depth,
            dev: Arc::clone(&self.dev),
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Connect request
// ---------------------------------------------------------------------------------------------

/// A pending connect request (see [`ConnRequest`](crate::verbs::ConnRequest); accepting it
/// makes a QP, `qp.rs`).
pub struct RdmaConnRequest {
    /// The request's id (`None` once accepted or rejected).
    pub(super) id: Option<*mut sys::rdma_cm_id>,
    pub(super) hub: &'static Hub,
    pub(super) private_data: PrivateData,
    pub(super) peer: SocketAddr,
    pub(super) local: SocketAddr,
    pub(super) initiator_depth: u8,
    pub(super) responder_resources: u8,
    pub(super) dev: Arc<DeviceInner>,
}

// SAFETY: the id is only used through self (by value, or in Drop); librdmacm is thread-safe.
unsafe impl Send for RdmaConnRequest {}

impl Drop for RdmaConnRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.hub.unregister(id);
            reject_and_destroy(id);
        }
    }
}
