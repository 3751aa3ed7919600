//! The descriptors a reactor in interrupt mode sleeps on, and the sleep itself (`ppoll(2)`).
//!
//! Normal operation: before it sleeps, a reactor clears its [`WaitSet`], adds its doorbell's
//! eventfd and lets every poller add the descriptors it armed
//! ([`crate::reactor::Poller::arm_wakeups`]: a CQ's completion channel, the rdma_cm event
//! channel); duplicates are added once. [`WaitSet::wait`] sleeps until one of them is readable
//! or the timeout passes. The set keeps its capacity, so a reactor that sleeps over and over
//! does not allocate once it has seen its largest set.
//!
//! Recovery: an error or hang-up on a descriptor (`POLLERR`, `POLLHUP`, `POLLNVAL`: a poller
//! dropped its descriptor between arming and sleeping) ends the sleep like readiness would; the
//! reactor polls and builds the set again. `EINTR` ends the sleep early.

use std::os::fd::RawFd;

/// Descriptors to sleep on (see the module documentation).
#[derive(Debug, Default)]
pub struct WaitSet {
    fds: Vec<libc::pollfd>,
}

impl WaitSet {
    /// An empty set with room for a few descriptors.
    pub fn new() -> WaitSet {
        WaitSet {
            fds: Vec::with_capacity(8),
        }
    }

    /// Forgets every descriptor (keeps the capacity).
    pub fn clear(&mut self) {
        self.fds.clear();
    }

    /// Adds `fd` (waited on for readability); a descriptor already in the set is not added
    /// twice, a negative one is ignored.
    pub fn add(&mut self, fd: RawFd) {
        if fd < 0 || self.fds.iter().any(|p| p.fd == fd) {
            return;
        }
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }

    /// Descriptors in the set.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Sleeps until a descriptor is readable (or in error) or `timeout_ns` passes
    /// (`u64::MAX`: no timeout); returns how many descriptors are ready (0: timed out or
    /// interrupted).
    pub fn wait(&mut self, timeout_ns: u64) -> usize {
        let ts;
        let tp = if timeout_ns == u64::MAX {
            core::ptr::null()
        } else {
            ts = libc::timespec {
                tv_sec: libc::time_t::try_from(timeout_ns / 1_000_000_000)
                    .unwrap_or(libc::time_t::MAX),
                tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
            };
            &ts as *const libc::timespec
        };
        // SAFETY: fds points to len() initialized pollfds we own; tp is null or a live
        // timespec; no signal mask.
        let n = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                tp,
                core::ptr::null(),
            )
        };
        usize::try_from(n).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_readiness_and_timeout() {
        let mut p = [0; 2];
        // SAFETY: p has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let mut w = WaitSet::new();
        w.add(p[0]);
        w.add(p[0]);
        w.add(-1);
        assert_eq!(w.len(), 1);
        assert_eq!(w.wait(1_000_000), 0, "nothing written: times out");
        // SAFETY: writes one byte from a live buffer to our pipe.
        assert_eq!(unsafe { libc::write(p[1], [7u8].as_ptr().cast(), 1) }, 1);
        assert_eq!(w.wait(u64::MAX), 1);
        // SAFETY: our descriptors, closed once.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }
}
