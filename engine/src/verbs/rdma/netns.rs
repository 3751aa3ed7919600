//! Network namespaces of devices.
//!
//! Normal operation: an rdma_cm id lives in the network namespace of the thread that creates
//! it, and its addresses are resolved there. A device remembers the namespace it was opened in
//! (normally the process's own); ids for it (listeners, active connections) are created in that
//! namespace, switching the calling thread there for the duration of `rdma_create_id` +
//! `rdma_bind_addr` when it is elsewhere (`setns(CLONE_NEWNET)`, needs `CAP_SYS_ADMIN`). This
//! lets one process drive both ends of an iWARP connection between two namespaces (siw0 in the
//! root namespace, siw1 in `ip netns` `peer`), which siw requires.
//!
//! Recovery: if the namespace cannot be entered, the operation fails with the `setns` errno
//! under the call being made; the thread is always switched back (a failure to switch back is
//! reported as well, never ignored silently).

use core::ffi::c_int;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::verbs::{errno, VerbsCall, VerbsError};

const SELF_NS: &str = "/proc/thread-self/ns/net";

/// A network namespace held open.
pub(crate) struct NetNs {
    file: File,
    id: (u64, u64),
}

fn ns_id(f: &File) -> Option<(u64, u64)> {
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

fn io_err(call: VerbsCall, e: &std::io::Error) -> VerbsError {
    VerbsError::new(call, e.raw_os_error().unwrap_or(errno::EIO))
}

impl NetNs {
    /// The calling thread's namespace (`None` without `/proc`).
    pub(crate) fn current() -> Option<NetNs> {
        let file = File::open(SELF_NS).ok()?;
        let id = ns_id(&file)?;
        Some(NetNs { file, id })
    }

    /// A namespace by path (e.g. `/run/netns/peer`).
    pub(crate) fn open(path: &Path, call: VerbsCall) -> Result<NetNs, VerbsError> {
        let file = File::open(path).map_err(|e| io_err(call, &e))?;
        let id = ns_id(&file).ok_or(VerbsError::new(call, errno::EINVAL))?;
        Ok(NetNs { file, id })
    }

    fn setns(&self, call: VerbsCall) -> Result<(), VerbsError> {
        // SAFETY: setns on an open namespace fd; affects only the calling thread.
        let rc = unsafe { libc::setns(self.file.as_raw_fd(), libc::CLONE_NEWNET as c_int) };
        if rc != 0 {
            return Err(super::os_err(call));
        }
        Ok(())
    }

    /// Runs `f` with the calling thread in this namespace, then switches back.
    pub(crate) fn run<T>(
        &self,
        call: VerbsCall,
        f: impl FnOnce() -> Result<T, VerbsError>,
    ) -> Result<T, VerbsError> {
        let Some(here) = NetNs::current() else {
            return f();
        };
        if here.id == self.id {
            return f();
        }
        tracing::trace!("{call:?}: entering netns {:?} from {:?}", self.id, here.id);
        self.setns(call)?;
        let out = f();
        let back = here.setns(call);
        match (out, back) {
            (Ok(v), Ok(())) => Ok(v),
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        }
    }
}

/// Runs `f` in `ns` if given, else in the calling thread's namespace.
pub(crate) fn run_in<T>(
    ns: Option<&NetNs>,
    call: VerbsCall,
    f: impl FnOnce() -> Result<T, VerbsError>,
) -> Result<T, VerbsError> {
    match ns {
        Some(ns) => ns.run(call, f),
        None => f(),
    }
}
