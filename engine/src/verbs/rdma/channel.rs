//! Completion channels: how a completion queue wakes an owner that sleeps in `poll(2)`.
//!
//! Normal operation: every CQ of this provider is created on its own completion channel
//! (`ibv_create_comp_channel`; its descriptor is made non-blocking and close-on-exec). The
//! owner arms the CQ before it sleeps (`ibv_req_notify_cq(cq, 0)`: the next completion of any
//! kind produces one channel event), polls the CQ once more, and then waits for the descriptor
//! to become readable together with its other wake-up sources. Whenever it arms again, it first
//! takes the events delivered since (`ibv_get_cq_event` until `EAGAIN`) and acknowledges them
//! in one call (`ibv_ack_cq_events`). While the owner is busy the CQ is never armed: no system
//! call per completion.
//!
//! Recovery: a spurious event (the CQ was armed, the re-check found the completion, the event
//! arrived anyway) only ends a later sleep early. Events still unread when the CQ is dropped
//! are taken and acknowledged first, so `ibv_destroy_cq` never waits; the channel is destroyed
//! after the CQ that uses it.

use std::os::fd::RawFd;

use rdma_sys as sys;

use super::{os_err, ret_err};
use crate::verbs::{VerbsCall, VerbsError};

/// A completion channel in non-blocking mode.
pub(crate) struct CompChannel(*mut sys::ibv_comp_channel);

// SAFETY: a completion channel wraps a file descriptor; libibverbs calls on it are
// thread-safe, and this provider only uses it from the CQ's owner.
unsafe impl Send for CompChannel {}
// SAFETY: see Send.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    /// `ibv_create_comp_channel` on `ctx`, descriptor `O_NONBLOCK | FD_CLOEXEC`.
    pub(crate) fn new(ctx: *mut sys::ibv_context) -> Result<CompChannel, VerbsError> {
        // SAFETY: ctx is a live context; returns null or a new channel.
        let ch = unsafe { sys::ibv_create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(os_err(VerbsCall::CreateCq));
        }
        // SAFETY: ch is live.
        let fd = unsafe { (*ch).fd };
        set_nonblocking(fd);
        // SAFETY: fcntl on a descriptor we own, no memory arguments.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFD);
            if fl >= 0 {
                libc::fcntl(fd, libc::F_SETFD, fl | libc::FD_CLOEXEC);
            }
        }
        Ok(CompChannel(ch))
    }

    /// The channel.
    pub(crate) fn raw(&self) -> *mut sys::ibv_comp_channel {
        self.0
    }

    /// The channel's descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel is live while self is.
        unsafe { (*self.0).fd }
    }

    /// Takes every event delivered so far for `cq` (the only CQ on this channel) and
    /// acknowledges them in one call; returns how many.
    pub(crate) fn consume(&self, cq: *mut sys::ibv_cq) -> usize {
        let mut n: u32 = 0;
        loop {
            let mut ev_cq: *mut sys::ibv_cq = core::ptr::null_mut();
            let mut ctx: *mut core::ffi::c_void = core::ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; the out-pointers are valid.
            let rc = unsafe { sys::ibv_get_cq_event(self.0, &mut ev_cq, &mut ctx) };
            if rc != 0 {
                break; // EAGAIN: nothing more (any other error: nothing we can take)
            }
            n = n.saturating_add(1);
        }
        if n > 0 {
            // SAFETY: cq is live and these n events were read for it.
            unsafe { sys::ibv_ack_cq_events(cq, n) };
        }
        n as usize
    }

    /// `ibv_req_notify_cq(cq, 0)`: one event at the next completion.
    pub(crate) fn arm(&self, cq: *mut sys::ibv_cq) -> Result<(), VerbsError> {
        // SAFETY: cq is live and was created on this channel.
        let rc = unsafe { sys::ibv_req_notify_cq(cq, 0) };
        if rc != 0 {
            return Err(ret_err(VerbsCall::ReqNotifyCq, rc));
        }
        Ok(())
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; the CQ using it is destroyed already (the
        // owner's field order), so the channel is unused.
        unsafe {
            sys::ibv_destroy_comp_channel(self.0);
        }
    }
}

/// Sets `O_NONBLOCK` on `fd` (failures are ignored: `fcntl` does not fail on a valid
/// descriptor).
pub(crate) fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL have no memory arguments.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}
